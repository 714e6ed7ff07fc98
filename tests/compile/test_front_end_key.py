"""A cell skips Triton's front end only when everything the front end reads is as it was (issue 24, item 1).

After an edit elsewhere in a package whose `__init__` imports every op, each cell is loaded again; its front end is
skipped when the record of what it reads (`xisa.compile.incremental.front_end_key`) was seen before. Each test below changes one
thing the front end reads that Triton's own key (`JITFunction.cache_key`) leaves out, or one the record refuses to
vouch for, and asserts the cell's code is then that of a compile with no cache at all. The first test shows the
skip happens at all, so the others are not green by never skipping.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from support import compile_here, one_case_spec, write_files

CELL = "op:c@gfx942"
KERNEL = """import triton
import triton.language as tl
from fakelib import cfg
{imports}

{helpers}
@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r)
    tl.store(y_ptr + r, {body})
"""
SPEC = one_case_spec("op", "module: fakelib.op")


def _project(root: Path, *, cfg: str, body: str, helpers: str = "", imports: str = "", init: str = "") -> Path:
    return write_files(root, {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\npythonpath = ["src"]\n',
        "src/fakelib/__init__.py": f"{init}from fakelib import op  # noqa: F401\n",
        "src/fakelib/cfg.py": cfg,
        "src/fakelib/op.py": KERNEL.format(imports=imports, helpers=helpers, body=body),
        "kernels/op.yaml": SPEC})


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _comment_elsewhere(root: Path, n: int) -> None:
    """An edit that changes nothing the front end reads: the package's `__init__`, imported by every load."""
    init = root / "src" / "fakelib" / "__init__.py"
    init.write_text(init.read_text() + f"# comment {n}\n")


# Each: cfg.py, the stored value's expression, the edit to cfg.py; a value only a load of the package can tell.
SEEN = {
    "a module attribute (cfg.SCALE)": dict(
        cfg="import triton.language as tl\nSCALE = tl.constexpr(2.0)\n", body="x * cfg.SCALE",
        edit=("tl.constexpr(2.0)", "tl.constexpr(5.0)")),
    "a callee's default argument, from another module": dict(
        cfg="N = 2\n", body="twice(x)", imports="from fakelib.cfg import N",
        helpers="@triton.jit\ndef twice(v, K: tl.constexpr = N):\n    return v * K\n\n",
        edit=("N = 2", "N = 7")),
    "which helper a name is bound to": dict(
        cfg="import triton\n\n\n@triton.jit\ndef a(v):\n    return v + 1.0\n\n\n@triton.jit\ndef b(v):\n"
            "    return v - 1.0\n\n\nhelper = a\n", body="cfg.helper(x)",
        edit=("helper = a", "helper = b")),
    "a closure's constexpr, made from another module's value": dict(
        cfg="S = 2.0\n", body="x", closure=True, edit=("S = 2.0", "S = 6.0")),
}


def _closure_kernel(root: Path) -> None:
    """`kern` made by a factory from cfg.S: the value is a nonlocal, the source is the same for every S."""
    (root / "src" / "fakelib" / "op.py").write_text(
        "import triton\nimport triton.language as tl\nfrom fakelib import cfg\n\n\ndef make(scale):\n"
        "    S = tl.constexpr(scale)\n\n    @triton.jit\n    def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
        "        r = tl.arange(0, BLOCK)\n        tl.store(y_ptr + r, tl.load(x_ptr + r) * S)\n\n    return kern\n\n\n"
        "kern = make(cfg.S)\n")


def _build(root: Path, case: dict) -> Path:
    root = _project(root, cfg=case["cfg"], body=case["body"], helpers=case.get("helpers", ""),
                    imports=case.get("imports", ""))
    if case.get("closure"):
        _closure_kernel(root)
    return root


@pytest.mark.parametrize("name", list(SEEN))
def test_a_value_the_front_end_reads_changed_is_compiled_as_a_cold_compile_would(tmp_path, name):
    case = SEEN[name]
    root, cache = _build(tmp_path / "proj", case), tmp_path / "cache"
    first = compile_here(root, cache)[CELL]
    _comment_elsewhere(root, 1)
    again = compile_here(root, cache)[CELL]
    assert again.skipped_front_end, "the record refused this input: the skip is never tried"
    assert again.analysis.code_sha256 == first.analysis.code_sha256
    _replace(root / "src" / "fakelib" / "cfg.py", *case["edit"])
    edited = compile_here(root, cache)[CELL]
    cold = compile_here(root, tmp_path / "cold", use_cache=False)[CELL]
    assert not edited.skipped_front_end
    assert edited.analysis.code_sha256 == cold.analysis.code_sha256 != first.analysis.code_sha256


def test_a_constexpr_function_is_never_vouched_for_and_its_table_edit_is_seen(tmp_path):
    """A constexpr_function runs Python inside the trace with arguments only the trace knows: the record refuses it,
    so the front end always runs, and an edit to the table it reads changes the code."""
    root = _project(tmp_path / "proj", cfg="TABLE = {64: 2.0}\n", body="x * pick(BLOCK)",
                    helpers="@triton.constexpr_function\ndef pick(block):\n    return cfg.TABLE[block]\n\n\n")
    cache = tmp_path / "cache"
    first = compile_here(root, cache)[CELL]
    _comment_elsewhere(root, 1)
    assert not compile_here(root, cache)[CELL].skipped_front_end
    _replace(root / "src" / "fakelib" / "cfg.py", "2.0", "9.0")
    edited = compile_here(root, cache)[CELL]
    assert not edited.skipped_front_end and edited.analysis.code_sha256 != first.analysis.code_sha256


def test_a_library_that_patches_the_code_generator_gets_no_skip(tmp_path):
    """The front end's code must be the installed Triton's: a package that wraps a method of the code generator (here
    a harmless one) makes every record refuse, whatever else is unchanged."""
    patch = ("from triton.compiler import code_generator as _cg\n_visit = _cg.CodeGenerator.visit_BinOp\n\n\n"
             "def _patched(self, node):\n    return _visit(self, node)\n\n\n_cg.CodeGenerator.visit_BinOp = _patched\n")
    root = _project(tmp_path / "proj", cfg="", body="x * 2.0", init=patch)
    cache = tmp_path / "cache"
    compile_here(root, cache)
    _comment_elsewhere(root, 1)
    assert not compile_here(root, cache)[CELL].skipped_front_end


def test_an_edit_to_a_callee_in_another_file_is_compiled(tmp_path):
    """A JIT callee's source is part of the record, wherever it lives."""
    root = _project(tmp_path / "proj", cfg="import triton\n\n\n@triton.jit\ndef scale(v):\n    return v * 2.0\n",
                    body="cfg.scale(x)")
    cache = tmp_path / "cache"
    first = compile_here(root, cache)[CELL]
    _replace(root / "src" / "fakelib" / "cfg.py", "v * 2.0", "v * 3.0")
    edited = compile_here(root, cache)[CELL]
    assert not edited.skipped_front_end and edited.analysis.code_sha256 != first.analysis.code_sha256


def test_a_path_shown_otherwise_runs_the_front_end(tmp_path):
    """The back-end key holds how each source path is shown (ptxas is given those names: they are in the cubin). A
    namespace folder named in `[tool.xisa] pythonpath` shows `nsx/fakelib/op.py` where `fakelib/op.py` showed
    before, for the same file and the same front-end inputs: the skip must not hand back code made with the old names
    (its line information holds them)."""
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
        "vendor/nsx/fakelib/__init__.py": "",
        "vendor/nsx/fakelib/op.py": KERNEL.format(imports="", helpers="", body="x * 2.0").replace(
            "from fakelib import cfg\n", ""),
        "kernels/op.yaml": SPEC.replace("module: fakelib.op", "source: ../vendor/nsx/fakelib/op.py").replace(
            "gfx942", "sm_90")})
    cache, cell = tmp_path / "cache", "op:c@sm_90"
    first = compile_here(root, cache)[cell]
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["kernels"]\npythonpath = ["vendor"]\n')
    moved = compile_here(root, cache)[cell]
    cold = compile_here(root, tmp_path / "cold", use_cache=False)[cell]
    assert not moved.skipped_front_end
    assert moved.analysis.code_sha256 == cold.analysis.code_sha256
    assert moved.analysis.locs == cold.analysis.locs != first.analysis.locs   # the line information ptxas wrote


def _project_visit(self, node):   # a project's function put into Triton's code generator
    return None


def test_the_front_end_check_sees_a_patch_made_after_it_vouched(monkeypatch):
    """The check that the front end is the installed Triton's answers from its last walk while nothing it walked
    changed: a method swapped in a class, a function's code replaced, a name added to a module, each after a walk
    that vouched, must each be seen."""
    from triton.compiler import code_generator

    from xisa.compile.incremental.front_end_pristine import front_end_is_pristine as _front_end_is_tritons

    generator = code_generator.CodeGenerator
    assert _front_end_is_tritons()
    monkeypatch.setattr(generator, "visit_Pass", _project_visit)
    assert not _front_end_is_tritons()
    monkeypatch.undo()
    assert _front_end_is_tritons()
    original = generator.visit_Pass.__code__
    generator.visit_Pass.__code__ = _project_visit.__code__
    try:
        assert not _front_end_is_tritons()
    finally:
        generator.visit_Pass.__code__ = original
    assert _front_end_is_tritons()
    monkeypatch.setattr(code_generator, "project_helper", _project_visit, raising=False)
    assert not _front_end_is_tritons()
    monkeypatch.undo()
    assert _front_end_is_tritons()
    # a held module replaced under its name (same names, another object), and a module added under the packages
    stand_in = types.ModuleType(code_generator.__name__)
    stand_in.__dict__.update(vars(code_generator))
    monkeypatch.setitem(sys.modules, code_generator.__name__, stand_in)
    assert not _front_end_is_tritons()
    monkeypatch.undo()
    assert _front_end_is_tritons()
    monkeypatch.setitem(sys.modules, "triton.language.project_extra", types.ModuleType("triton.language.project_extra"))
    assert not _front_end_is_tritons()


_SETS_KNOB = """import triton
import triton.language as tl


def _heur(args):
    triton.knobs.amd.use_buffer_ops = False
    return 1


@triton.heuristics({"H": _heur})
@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr, H: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * 2.0)
"""


# What a red-team pass found the record missed (each a false `same` before it was fixed): the edit to cfg.py (or
# sub.py) changes the code, and the cached compile must be the compile with no cache. Either the record sees the
# edit, or it refuses to vouch (then the front end runs): both are right, a stale skip is not.
_SCALE = "import triton.language as tl\nSCALE = tl.constexpr(2.0)\n"
_TO_FIVE = ("2.0", "5.0")
ATTACKS = {
    # a module reached other than as the start of an attribute chain: what is read of it is not recorded
    "getattr(cfg, 'SCALE')": dict(cfg=_SCALE, body='x * getattr(cfg, "SCALE")', edit=_TO_FIVE),
    "tl.constexpr(cfg).SCALE": dict(cfg=_SCALE, body="x * tl.constexpr(cfg).SCALE", edit=_TO_FIVE),
    "a tuple of modules, cfg.MODS[0].SCALE": dict(
        cfg=_SCALE + "import fakelib.cfg as _me\nMODS = (_me,)\n", body="x * cfg.MODS[0].SCALE", edit=_TO_FIVE),
    "the module passed to a callee, h(x, cfg)": dict(
        cfg=_SCALE, body="h(x, cfg)", helpers="@triton.jit\ndef h(v, m: tl.constexpr):\n    return v * m.SCALE\n\n",
        edit=_TO_FIVE),
    "the module as a kernel's default": dict(cfg=_SCALE, body="x * M.SCALE", params=", M: tl.constexpr = cfg",
                                             edit=_TO_FIVE),
    "a module in a namedtuple's field": dict(
        cfg="from collections import namedtuple\nfrom fakelib import sub\nNT = namedtuple('NT', ['m'])\nP = NT(sub)\n",
        sub=_SCALE, body="x * cfg.P.m.SCALE", edit=_TO_FIVE, edited="sub.py"),
    # a namedtuple's class attributes, read through an instance
    "a NamedTuple's class attribute": dict(
        cfg="import triton.language as tl\nfrom typing import NamedTuple\n\n\nclass NT(NamedTuple):\n    a: int = 1\n"
            "    SCALE = 2.0\n\n\nP = tl.constexpr(NT())\n", body="x * cfg.P.SCALE", edit=_TO_FIVE),
    "a NamedTuple's @triton.jit class attribute": dict(
        cfg="import triton\nimport triton.language as tl\nfrom typing import NamedTuple\n\n\n@triton.jit\ndef _h(v):\n"
            "    return v * 2.0\n\n\nclass NT(NamedTuple):\n    a: int = 1\n    helper = _h\n\n\nP = tl.constexpr(NT())\n",
        body="cfg.P.helper(x)", edit=_TO_FIVE),
    # Triton's front end changed at import, with Triton's own objects or the project's
    "a backend libdevice function rebound": dict(
        cfg="from triton.language.extra.hip import libdevice as L\nL.exp = L.exp2\n", body="libdevice.exp(x)",
        imports="from triton.language.extra import libdevice", edit=("L.exp = L.exp2", "L.exp = L.log2")),
    "tl.sum's combine function rebound": dict(
        cfg="import triton\nimport triton.language.standard as S\n\n\n@triton.jit\ndef comb(a, b):\n    return a + b\n\n\n"
            "S._sum_combine = comb\n", body="x * tl.sum(x, 0)", edit=("a + b", "a * b")),
    "a semantic method swapped for another of Triton's": dict(
        cfg="X = 1\n", body="x * x",
        edit=("X = 1\n", "from triton.language.semantic import TritonSemantic as _S\n_S.mul = _S.add\n")),
    "a method added to tl.tensor": dict(
        cfg="import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef twice(self):\n    return self * 2.0\n\n\n"
            "tl.tensor.twice = twice\n", body="x.twice()", edit=("self * 2.0", "self * 5.0")),
    "a name added to the code generator's builtin namespace": dict(
        cfg="import triton.language as tl\nfrom triton.compiler.code_generator import CodeGenerator\n\n\n"
            "def scale_of():\n    return tl.constexpr(2.0)\n\n\nCodeGenerator.builtin_namespace['scale_of'] = scale_of\n",
        body="x * scale_of()", edit=("constexpr(2.0)", "constexpr(5.0)")),
    # round two, after the fixes above: types matched exactly, knobs set in code, the IR builder, a module __getattr__
    "a float subclass with its own __repr__": dict(
        cfg="import triton.language as tl\n\n\nclass F(float):\n    def __repr__(self):\n        return 'F'\n\n\n"
            "S = tl.constexpr(F(2.0))\n", body="x * cfg.S", edit=("F(2.0)", "F(5.0)")),
    "an int subclass with its own __add__": dict(
        cfg="import triton.language as tl\n\n\nclass I(int):\n    def __add__(self, o):\n        return int(self) + "
            "int(o) + 1\n\n\nN = tl.constexpr(I(1))\n", body="x * (cfg.N + 1)", edit=("int(o) + 1", "int(o) + 7")),
    "a namedtuple field's accessor overwritten": dict(
        cfg="from collections import namedtuple\nNT = namedtuple('NT', ['a'])\nNT.a = 2.0\nP = NT(1)\n",
        body="x * cfg.P.a", edit=("NT.a = 2.0", "NT.a = 5.0")),
    "a tuple subclass that only says _fields": dict(
        cfg="class T(tuple):\n    _fields = ('SCALE',)\n    SCALE = 2.0\n\n\nP = T()\n", body="x * cfg.P.SCALE",
        edit=("SCALE = 2.0", "SCALE = 5.0")),
    "a constexpr subclass with its own __add__": dict(
        cfg="import triton.language as tl\n\n\nclass C(tl.constexpr):\n    def __add__(self, o):\n        return "
            "tl.constexpr(2.0)\n\n\nS = C(1.0)\n", body="x * (cfg.S + 1.0)", edit=("constexpr(2.0)", "constexpr(5.0)")),
    "a dtype subclass with its own to_ir": dict(
        cfg="import triton.language as tl\n\n\nclass D(tl.dtype):\n    def to_ir(self, builder):\n        return "
            "builder.get_half_ty()\n\n\nDT = tl.constexpr(D('fp16'))\n", body="x.to(cfg.DT).to(tl.float32)",
        edit=("get_half_ty", "get_bf16_ty")),
    "a JITFunction subclass with its own parse": dict(
        cfg="FACTOR = '2.0'\n", body="x * 1.0", edit=("'2.0'", "'5.0'"),
        op_after="\n\nimport ast\nfrom triton.runtime.jit import JITFunction\n\n\nclass MyJIT(JITFunction):\n"
                 "    def parse(self):\n        return ast.parse(self._src.replace('1.0', cfg.FACTOR))\n\n\n"
                 "kern = MyJIT(kern.fn)\n"),
    "an attribute of a @triton.jit function read": dict(
        cfg="import triton\n\n\n@triton.jit\ndef h(v):\n    return v\n\n\nh.kernel = 2.0\n", body="x * cfg.h.kernel",
        edit=("h.kernel = 2.0", "h.kernel = 5.0")),
    "getattr on the triton module": dict(
        cfg="import triton\nimport triton.language as tl\ntriton.XS = tl.constexpr(2.0)\n", body='x * getattr(triton, "XS")',
        edit=("(2.0)", "(5.0)")),
    "a toolchain class's attribute set": dict(
        cfg="import triton\ntriton.Config.XS = 2.0\n", body="x * triton.Config.XS", edit=("= 2.0", "= 5.0")),
    "a project class claiming a standard module": dict(
        cfg="class K:\n    S = 2.0\n\n\nK.__module__ = 'typing'\n", body="x * cfg.K.S", edit=("S = 2.0", "S = 5.0")),
    "an IR builder method swapped": dict(
        cfg="X = 1\n", body="x + x",
        edit=("X = 1\n", "from triton._C.libtriton import ir\nir.builder.create_fadd = ir.builder.create_fsub\n")),
    "a module __getattr__ that answers differently later": dict(
        cfg="import triton.language as tl\n_n = [0]\nB = 2.0\n\n\ndef __getattr__(name):\n    if name == 'SCALE':\n"
            "        _n[0] += 1\n        return tl.constexpr(1.0 if _n[0] == 1 else B)\n    raise AttributeError(name)\n",
        body="x * cfg.SCALE", edit=("B = 2.0", "B = 5.0")),
    "a knob a heuristic sets while the cell binds": dict(
        cfg="P = 'tf32'\n", body="x", target="sm_90", edit=("'tf32'", "'ieee'"),
        op=("import triton\nimport triton.language as tl\nfrom fakelib import cfg\n\n\ndef _heur(args):\n"
            "    triton.knobs.propagate_env = False\n    triton.knobs.language.fp32_default = cfg.P\n    return 1\n\n\n"
            "@triton.heuristics({'H': _heur})\n@triton.jit\ndef kern(x_ptr, y_ptr, BLOCK: tl.constexpr, H: tl.constexpr):\n"
            "    r = tl.arange(0, BLOCK)\n    a = tl.load(x_ptr + r[:, None] * BLOCK + r[None, :])\n    c = tl.dot(a, a)\n"
            "    tl.store(y_ptr + r[:, None] * BLOCK + r[None, :], c)\n")),
    "a back-end knob a heuristic sets (the TTIR is the same)": dict(
        cfg="B = True\n", body="x", edit=("B = True", "B = False"),
        op=_SETS_KNOB.replace("import triton\n", "import triton\nfrom fakelib import cfg\n", 1).replace(
            "use_buffer_ops = False", "use_buffer_ops = cfg.B")),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_an_input_the_record_once_missed_is_seen_or_refused(tmp_path, name):
    case = ATTACKS[name]
    root = _project(tmp_path / "proj", cfg=case["cfg"], body=case["body"], helpers=case.get("helpers", ""),
                    imports=case.get("imports", ""))
    package = root / "src" / "fakelib"
    cell = CELL.replace("gfx942", case.get("target", "gfx942"))
    if "target" in case:
        _replace(root / "kernels" / "op.yaml", "gfx942", case["target"])
    if "op" in case:
        (package / "op.py").write_text(case["op"])
    (package / "op.py").write_text((package / "op.py").read_text() + case.get("op_after", ""))
    if "params" in case:
        _replace(package / "op.py", "BLOCK: tl.constexpr):", f"BLOCK: tl.constexpr{case['params']}):")
    if "sub" in case:
        (package / "sub.py").write_text(case["sub"])
    cache = tmp_path / "cache"
    first = compile_here(root, cache)[cell]
    _comment_elsewhere(root, 1)
    compile_here(root, cache)
    _replace(package / case.get("edited", "cfg.py"), *case["edit"])
    edited = compile_here(root, cache)[cell]
    cold = compile_here(root, tmp_path / "cold", use_cache=False)[cell]
    assert cold.analysis.code_sha256 != first.analysis.code_sha256   # the edit changes the code
    assert edited.analysis.code_sha256 == cold.analysis.code_sha256
    assert not edited.skipped_front_end


def test_two_pointer_types_that_differ_only_in_address_space_are_recorded_apart():
    """A dtype's text leaves out a pointer's address space (Triton compiles no other address space from a CPU here,
    so this is checked on the record itself): every field of a Triton dtype is recorded."""
    import triton.language as tl

    from xisa.compile.incremental.front_end_key import _Walk

    global_space, shared_space = tl.pointer_type(tl.float32, 1), tl.pointer_type(tl.float32, 3)
    assert str(global_space) == str(shared_space)
    assert _Walk().value(global_space) != _Walk().value(shared_space)
    assert _Walk().value(tl.pointer_type(tl.float32, 1)) == _Walk().value(global_space)


def test_a_compile_that_copies_a_constexpr_leaves_the_front_end_pristine(monkeypatch):
    """copyreg caches `__slotnames__` in a class the first time one of its objects is copied (Triton deep-copies
    constexprs while it compiles): Python's bookkeeping, so the skip stays open after a cell compiled in full."""
    import copy

    import triton.language as tl

    from xisa.compile.incremental import front_end_pristine
    from xisa.compile.incremental.front_end_pristine import front_end_is_pristine

    monkeypatch.delattr(tl.constexpr, "__slotnames__", raising=False)   # as a fresh worker finds it
    monkeypatch.setattr(front_end_pristine, "_PRISTINE", [])
    assert front_end_is_pristine()
    copy.deepcopy(tl.constexpr(3))
    assert "__slotnames__" in vars(tl.constexpr)
    assert front_end_is_pristine()




def test_a_knob_a_heuristic_sets_reaches_its_own_cell_and_no_later_one(tmp_path):
    """A heuristic that sets a back-end knob while its cell binds (`knobs.amd.use_buffer_ops`, read after the front
    end): its cell compiles under it, as its launch would, and is not the back-end store's entry for the plain
    kernel's TTIR; the next cell in the same worker compiles as it does alone."""
    plain = KERNEL.format(imports="", helpers="", body="x * 2.0").replace("from fakelib import cfg\n", "")
    files = {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\npythonpath = ["src"]\n',
             "src/fakelib/__init__.py": "", "src/fakelib/a_sets.py": _SETS_KNOB, "src/fakelib/b_plain.py": plain,
             "kernels/a_sets.yaml": SPEC.replace("name: op", "name: a_sets").replace("fakelib.op", "fakelib.a_sets"),
             "kernels/b_plain.yaml": SPEC.replace("name: op", "name: b_plain").replace("fakelib.op", "fakelib.b_plain")}
    both = compile_here(write_files(tmp_path / "both", files), tmp_path / "cache")
    alone = compile_here(write_files(tmp_path / "alone", {k: v for k, v in files.items() if "a_sets" not in k}),
                         tmp_path / "cold", use_cache=False)
    assert both["b_plain:c@gfx942"].analysis.code_sha256 == alone["b_plain:c@gfx942"].analysis.code_sha256
    assert both["a_sets:c@gfx942"].analysis.code_sha256 != alone["b_plain:c@gfx942"].analysis.code_sha256
    again = compile_here(write_files(tmp_path / "again", files), tmp_path / "cache")   # the stores answer now
    assert {cell: r.analysis.code_sha256 for cell, r in again.items()} == \
        {cell: r.analysis.code_sha256 for cell, r in both.items()}
