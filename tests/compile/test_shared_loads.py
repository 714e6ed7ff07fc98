"""`module:` specs of one package whose `__init__` imports their modules share one load per worker (issue 24): a
library like fla is imported once, not once per spec; a load that ran code after the package's import is never
shared, so no spec compiles what another spec's module did to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import compile_here, write_files

OP = """import triton
import triton.language as tl

SCALE = tl.constexpr({scale})


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * SCALE)
"""

SPEC = """name: {name}
module: fakelib.{name}
function: kern
targets: [gfx942, gfx1100]
cases:
  - name: c
    args: {{x_ptr: '*fp32', y_ptr: '*fp32'}}
    constexprs: {{BLOCK: 64}}
"""


def _project(root: Path, init: str, files: dict[str, str]) -> Path:
    counter = root / "imports.txt"
    counting = f"with open({str(counter)!r}, 'a') as _f:\n    _f.write('x')\n"
    return write_files(root, {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\npythonpath = ["src"]\n',
        "src/fakelib/__init__.py": counting + init, **files,
        "kernels/op_a.yaml": SPEC.format(name="op_a"), "kernels/op_b.yaml": SPEC.format(name="op_b")})


def test_specs_of_a_package_whose_init_imports_them_share_one_load(tmp_path):
    root = _project(tmp_path / "proj", "from fakelib import op_a, op_b  # noqa: F401\n",
                    {"src/fakelib/op_a.py": OP.format(scale="2.0"), "src/fakelib/op_b.py": OP.format(scale="3.0")})
    shared = compile_here(root, tmp_path / "cache")
    assert (root / "imports.txt").read_text() == "x"          # one import of the package for four cells
    alone = {}
    for name in ("op_a", "op_b"):                               # each spec compiled on its own
        other = "op_b" if name == "op_a" else "op_a"
        (root / "kernels" / f"{other}.yaml").rename(root / f"{other}.yaml.off")
        alone.update(compile_here(root, tmp_path / f"cache-{name}", use_cache=False))
        (root / f"{other}.yaml.off").rename(root / "kernels" / f"{other}.yaml")
    assert {c: r.analysis.code_sha256 for c, r in shared.items()} == \
        {c: r.analysis.code_sha256 for c, r in alone.items()}


def test_a_load_that_ran_code_after_the_package_import_is_not_shared(tmp_path):
    """op_a is not imported by the package's `__init__`; importing it changes op_b's constant. op_b's cells must
    compile op_b as a load of op_b alone has it, whichever spec the worker loaded first."""
    meddling = OP.format(scale="2.0") + "\nimport fakelib.op_b\n\nfakelib.op_b.SCALE = tl.constexpr(7.0)\n"
    root = _project(tmp_path / "proj", "from fakelib import op_b  # noqa: F401\n",
                    {"src/fakelib/op_a.py": meddling, "src/fakelib/op_b.py": OP.format(scale="3.0")})
    both = compile_here(root, tmp_path / "cache")
    (root / "kernels" / "op_a.yaml").unlink()
    alone = compile_here(root, tmp_path / "cache-b", use_cache=False)
    for cell in ("op_b:c@gfx942", "op_b:c@gfx1100"):
        assert both[cell].analysis.code_sha256 == alone[cell].analysis.code_sha256, cell


@pytest.mark.unit
def test_a_function_block_found_again_comes_from_the_lines_alone(tmp_path):
    """Each @triton.jit asks inspect for its function's source (tokenizing it: most of a library's load, once per
    target): the block found for the same lines is given again, by this process and by a later one (the load store
    in the cache folder), other lines get their own, and a caller that changes the list it got changes nothing."""
    import inspect

    from xisa.compile.incremental.load_store import LoadStore

    calls = []

    def counting(lines):
        calls.append(len(lines))
        return inspect.getblock(lines)

    def block(store, lines):
        return lines[:store.block_length(lines, counting)]

    store = LoadStore(tmp_path)
    text = ["def f():\n", "    return 1\n", "\n", "def g():\n", "    return 2\n"]
    edited = ["def f():\n", "    return 3\n", "    return 1\n", "\n"]
    first = block(store, list(text))
    first.append("junk\n")
    assert block(store, list(text)) == text[:2] and block(store, text[3:]) == text[3:]
    assert block(store, edited) == edited[:3]
    assert len(calls) == 3     # f, g and the edited f tokenized once each
    later = LoadStore(tmp_path)   # a later run's worker
    assert block(later, list(text)) == text[:2] and block(later, edited) == edited[:3] and len(calls) == 3
    assert block(LoadStore(tmp_path, lookup=False), list(text)) == text[:2] and len(calls) == 4   # --no-cache


@pytest.mark.unit
def test_a_module_compiled_before_comes_from_its_text_alone(tmp_path):
    """A module's code object is kept by its path and source bytes: a later process gets the same code without
    compiling; an edit (same size, so an mtime-and-size check could not see it), another path or a corrupt entry
    compiles anew."""
    from xisa.compile.incremental.load_store import LoadStore

    compiled = []

    def compile_source(data, path):
        compiled.append(path)
        return compile(data, path, "exec")

    def run(code):
        scope = {}
        exec(code, scope)
        return scope["VALUE"]

    assert run(LoadStore(tmp_path).code("/p/m.py", b"VALUE = 1\n", compile_source)) == 1
    later = LoadStore(tmp_path)
    code = later.code("/p/m.py", b"VALUE = 1\n", compile_source)
    assert run(code) == 1 and code.co_filename == "/p/m.py" and compiled == ["/p/m.py"]
    assert run(later.code("/p/m.py", b"VALUE = 2\n", compile_source)) == 2
    assert later.code("/q/m.py", b"VALUE = 1\n", compile_source).co_filename == "/q/m.py"
    assert len(compiled) == 3
    for entry in (tmp_path / "loads").rglob("*.json"):
        entry.write_text(entry.read_text().replace("a", "b", 1))   # corrupt every entry
    assert run(LoadStore(tmp_path).code("/p/m.py", b"VALUE = 1\n", compile_source)) == 1 and len(compiled) == 4
