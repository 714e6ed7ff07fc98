"""Keys at the grain of what the compiler consumed (issue 24, item 1).

A package whose `__init__` imports every op puts every op's file in every kernel's depfile: an edit in one op
misses every cell's result entry. Behind that miss the back-end store answers a cell whose front end (TTIR, with
its locations) and back-end inputs are unchanged, and records a fresh result entry; an edit that changes what the
compiler consumed is compiled. Each test compiles through the calls `xisa check` makes, one worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import compile_here, write_files
from xisa.compile.incremental.backend_store import BackendReuse, back_end_is_tritons, named_files
from xisa.compile.incremental.keys import canonical, parts_of

OP = """import triton
import triton.language as tl


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r)
    tl.store(y_ptr + r, x * {scale})  # scaled
# the end of {name}
"""

SPEC = """name: {name}
module: fakelib.{name}
function: kern
targets: [gfx942, sm_90]
cases:
  - name: c
    args: {{x_ptr: '*fp32', y_ptr: '*fp32'}}
    constexprs: {{BLOCK: 64}}
"""


def _library(root: Path) -> Path:
    """A project guarding a package whose `__init__` imports both its ops, as fla's does."""
    return write_files(root, {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\npythonpath = ["src"]\n',
        "src/fakelib/__init__.py": "from fakelib import op_a, op_b  # noqa: F401\n",
        "src/fakelib/op_a.py": OP.format(scale="2.0", name="op_a"),
        "src/fakelib/op_b.py": OP.format(scale="3.0", name="op_b"),
        "kernels/op_a.yaml": SPEC.format(name="op_a"), "kernels/op_b.yaml": SPEC.format(name="op_b")})


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _where(results) -> dict[str, str]:
    """Per cell: `results` (the result entry), `backend` (the back-end store, after a front-end pass), `compiled`."""
    return {cell: "results" if r.cached else "backend" if r.reused_backend else "compiled"
            for cell, r in results.items()}


def _shas(results) -> dict[str, str]:
    return {cell: r.analysis.code_sha256 for cell, r in results.items()}


def test_an_edit_in_one_op_recompiles_its_cells_alone_and_restoring_it_compiles_nothing(tmp_path):
    root, cache = _library(tmp_path / "proj"), tmp_path / "cache"
    first = compile_here(root, cache)
    assert set(_where(first).values()) == {"compiled"}
    op_a = root / "src" / "fakelib" / "op_a.py"
    _replace(op_a, "x * 2.0", "x * 5.0")
    edited = compile_here(root, cache)
    cold = compile_here(root, cache, use_cache=False)
    assert _where(edited) == {"op_a:c@gfx942": "compiled", "op_a:c@sm_90": "compiled",
                              "op_b:c@gfx942": "backend", "op_b:c@sm_90": "backend"}
    assert _shas(edited) == _shas(cold)
    assert all(_shas(edited)[c] != _shas(first)[c] for c in ("op_a:c@gfx942", "op_a:c@sm_90"))
    assert all(_shas(edited)[c] == _shas(first)[c] for c in ("op_b:c@gfx942", "op_b:c@sm_90"))
    assert set(_where(cold).values()) == {"compiled"}      # --no-cache never reads the back-end store
    _replace(op_a, "x * 5.0", "x * 2.0")
    restored = compile_here(root, cache)
    assert set(_where(restored).values()) == {"backend"} and _shas(restored) == _shas(first)
    assert set(_where(compile_here(root, cache)).values()) == {"results"}   # and each hit recorded a result entry


def test_a_comment_elsewhere_in_the_package_compiles_nothing(tmp_path):
    root, cache = _library(tmp_path / "proj"), tmp_path / "cache"
    first = compile_here(root, cache)
    _replace(root / "src" / "fakelib" / "op_b.py", "# the end of op_b", "# the end of op_b, reworded")
    _replace(root / "src" / "fakelib" / "__init__.py", "\n", "\n# a comment in __init__\n")
    again = compile_here(root, cache)
    assert set(_where(again).values()) == {"backend"} and _shas(again) == _shas(first)


def test_a_comment_that_moves_the_kernels_lines_is_compiled(tmp_path):
    """The TTIR's locations are in the key: line info reaches the code object (ptxas allocates by it)."""
    root, cache = _library(tmp_path / "proj"), tmp_path / "cache"
    compile_here(root, cache)
    _replace(root / "src" / "fakelib" / "op_a.py", "import triton\n", "# a comment above the kernel\nimport triton\n")
    where = _where(compile_here(root, cache))
    assert where["op_a:c@gfx942"] == where["op_a:c@sm_90"] == "compiled" and where["op_b:c@sm_90"] == "backend"


def test_a_reused_back_end_shows_each_source_lines_text_as_it_is_now(tmp_path):
    """A comment at the end of a kernel line changes no TTIR, but the line table holds that line's text."""
    root, cache = _library(tmp_path / "proj"), tmp_path / "cache"
    compile_here(root, cache)
    _replace(root / "src" / "fakelib" / "op_a.py", "# scaled", "# scaled, now said otherwise")
    again = compile_here(root, cache)
    cold = compile_here(root, cache, use_cache=False)
    for cell in ("op_a:c@gfx942", "op_a:c@sm_90"):
        assert _where(again)[cell] == "backend"
        assert again[cell].analysis.lines == cold[cell].analysis.lines
    assert any("now said otherwise" in row["text"] for row in again["op_a:c@gfx942"].analysis.lines)


INCLUDING = """import os

import triton
import triton.language as tl

INCLUDE = tl.constexpr('.include "' + os.path.join(os.path.dirname(os.path.abspath(__file__)), 'extra.s') + '"')


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r)
    y = tl.inline_asm_elementwise(INCLUDE + '\\nv_mov_b32 $0, $1', '=v,v', [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + r, y)
"""


def test_a_file_the_back_end_read_is_checked_after_a_reused_back_end(tmp_path):
    """An inline-asm `.include` is read by the assembler, not the front end: the back-end entry holds it, and a
    result entry recorded from that entry holds it too."""
    root = _library(tmp_path / "proj")
    write_files(root, {"src/fakelib/op_a.py": INCLUDING, "src/fakelib/extra.s": "s_nop 0\n",
                       "kernels/op_a.yaml": SPEC.format(name="op_a").replace("[gfx942, sm_90]", "[gfx942]"),
                       "kernels/op_b.yaml": SPEC.format(name="op_b").replace("[gfx942, sm_90]", "[gfx942]")})
    cache = tmp_path / "cache"
    first = compile_here(root, cache)
    _replace(root / "src" / "fakelib" / "op_b.py", "x * 3.0", "x * 4.0")   # every result entry misses
    assert _where(compile_here(root, cache))["op_a:c@gfx942"] == "backend"
    (root / "src" / "fakelib" / "extra.s").write_text("s_nop 0\ns_nop 1\n")
    edited = compile_here(root, cache)
    assert _where(edited)["op_a:c@gfx942"] == "compiled"
    assert _shas(edited)["op_a:c@gfx942"] != _shas(first)["op_a:c@gfx942"]
    assert _shas(edited) == _shas(compile_here(root, cache, use_cache=False))


def test_the_key_holds_how_each_path_is_shown_and_the_context():
    """ptxas is given the shown paths, the line table shows them: another showing is another key. Options, target
    and toolchain are the context; a set in them is sorted (its order follows each process's string hashing)."""
    ttir = '#loc = loc("/p/k.py":3:1)\nmodule {\n} loc(#loc)\n'
    base = {name: None for name in parts_of("backend") - {"ttir", "shown_paths"}}
    plain = BackendReuse(store=None, context={**base, "options": {}}, path_of=lambda p: p.rsplit("/", 1)[-1],
                         lookup=False)
    other = BackendReuse(store=None, context={**base, "options": {}}, path_of=lambda p: p.lstrip("/"), lookup=False)
    assert plain.key_of(ttir) == plain.key_of(ttir) != other.key_of(ttir)
    assert plain.key_of(ttir) != plain.key_of(ttir.replace(":3:1", ":4:1"))
    more = BackendReuse(store=None, context={**base, "options": {"num_warps": 8}}, path_of=plain.path_of,
                        lookup=False)
    assert more.key_of(ttir) != plain.key_of(ttir)
    assert canonical({"options": {"fp8": frozenset({"fp8e5", "fp8e4nv", "fp8e4b15"}), "t": (1, 2)}}) == \
        {"options": {"fp8": ["fp8e4b15", "fp8e4nv", "fp8e5"], "t": [1, 2]}}


@pytest.mark.unit
def test_files_named_by_the_options_are_back_end_reads(tmp_path):
    lib = tmp_path / "lib.bc"
    lib.write_bytes(b"BC")
    assert named_files({"extern_libs": [["mine", str(lib)]], "ir_override": None, "arch": "gfx942",
                        "missing": str(tmp_path / "none.bc")}) == [str(lib)]


def test_a_back_end_patched_from_outside_triton_is_not_reused(monkeypatch):
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.compiler import GPUTarget

    from xisa.compile.incremental import front_end_pristine

    monkeypatch.setattr(front_end_pristine, "_PRISTINE", [])   # this test's own look at Triton, not the process's

    target = GPUTarget("hip", "gfx942", 64)
    assert back_end_is_tritons(target)   # (this process's first look at Triton, as a worker takes it: unpatched)
    original = HIPBackend.make_llir

    def patched(*args, **kwargs):   # a library's replacement stage: its code lives outside Triton
        return original(*args, **kwargs)

    monkeypatch.setattr(HIPBackend, "make_llir", staticmethod(patched))
    assert not back_end_is_tritons(target)


@pytest.mark.parametrize("corrupt", ["truncated", "stream-edited"])
def test_a_corrupt_back_end_entry_is_a_miss(tmp_path, corrupt):
    root, cache = _library(tmp_path / "proj"), tmp_path / "cache"
    first = compile_here(root, cache)
    for entry in (cache / "backend").rglob("*.json"):
        text = entry.read_text()
        if corrupt == "truncated":
            entry.write_text(text[: len(text) // 2])
        else:   # a forged stream with its digest made right: the fingerprint no longer matches the stream
            from xisa.compile.incremental.cache import EntryStore

            store = EntryStore(entry.parent.parent)
            data = store.read(entry.stem)
            data["stream"] += "v_nop\n"
            store.write(entry.stem, data)
    _replace(root / "src" / "fakelib" / "__init__.py", "\n", "\n# touched\n")
    again = compile_here(root, cache)
    assert set(_where(again).values()) == {"compiled"} and _shas(again) == _shas(first)


def test_a_library_rebinding_a_function_the_back_end_calls_is_compiled(tmp_path, monkeypatch):
    """Issue 36, finding 4: the check covered the backend classes' methods only; a helper rebinding a module function
    they call (`sm_arch_from_capability`) changed the cubin while a warm check answered from the back-end store."""
    import triton.backends.nvidia.compiler as nvidia

    # a load in this process rebinds it for good (as in a long-lived worker): put it back after the test
    monkeypatch.setattr(nvidia, "sm_arch_from_capability", nvidia.sm_arch_from_capability)
    root, cache = _library(tmp_path / "proj"), tmp_path / "cache"
    compile_here(root, cache)
    op = root / "src" / "fakelib" / "op_a.py"
    op.write_text(op.read_text() + "import triton.backends.nvidia.compiler as _nv\n"
                  "_nv.sm_arch_from_capability = lambda capability: f'sm_{capability}'   # no 'a': below the kernel\n")
    warm = compile_here(root, cache)
    cold = compile_here(root, tmp_path / "cold", use_cache=False)
    assert cold["op_a:c@sm_90"].analysis.code_sha256 != compile_here(
        _library(tmp_path / "plain"), tmp_path / "plain-cache")["op_a:c@sm_90"].analysis.code_sha256
    assert _where(warm)["op_a:c@sm_90"] == "compiled"
    assert _shas(warm) == _shas(cold)
