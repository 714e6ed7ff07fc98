"""Loops end to end: an edit inside a kernel's loop is reported in that loop by check (text, JSON, markdown,
HTML) and breaks a `loop:` expectation (exit 1); an edit after the loop moves no loop's counts; a nested
loop has depth 2; a loop-free kernel has none; the loops of a golden's stored stream are those of a fresh
compile of the same cell. One cell per kernel on gfx942 (and the loop kernel on sm_90) keeps it short."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from support import copy_tinyproj, write_files
from xisa.analyze import amdgcn, sass
from xisa.analyze.backends import AMD, NVIDIA
from xisa.analyze.loops import find_loops
from xisa.compile.tools import mca
from xisa.golden.store import golden_paths

LOOP_PY = """import triton
import triton.language as tl


@triton.jit
def acc_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, n, BLOCK):
        x = tl.load(x_ptr + i + offs)
        acc += x * 2.0
    tl.store(y_ptr + offs, acc)


@triton.jit
def nest_kernel(x_ptr, y_ptr, n, m, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in range(0, m):
        for i in range(0, n, BLOCK):
            acc += tl.load(x_ptr + j * n + i + offs)
        acc = acc * 0.5
    tl.store(y_ptr + offs, acc)
"""

SPECS = {
    "kernels/acc.yaml": """name: acc
source: loops.py
function: acc_kernel
targets: [gfx942, sm_90]
cases:
  - name: f32
    args: {x_ptr: {tensor: fp32, shape: [65536]}, y_ptr: {tensor: fp32, shape: [256]}, n: 65536}
    constexprs: {BLOCK: 256}
    expect:
      '*': {'loop:v_exp*': 0, 'loop:MUFU*': 0, 'loop:scratch': 0}
""",
    "kernels/nest.yaml": """name: nest
source: loops.py
function: nest_kernel
targets: [gfx942]
cases:
  - name: f32
    args: {x_ptr: {tensor: fp32, shape: [65536]}, y_ptr: {tensor: fp32, shape: [256]}, n: 4096, m: 16}
    constexprs: {BLOCK: 256}
""",
}

IN_LOOP = ("        acc += x * 2.0\n", "        acc += tl.exp(x) * 2.0\n")
AFTER_LOOP = ("    tl.store(y_ptr + offs, acc)\n\n\n@triton.jit\ndef nest",
              "    tl.store(y_ptr + offs, tl.exp(acc))\n\n\n@triton.jit\ndef nest")


def _edit(project: Path, old_new: tuple[str, str]) -> None:
    source = project / "kernels" / "loops.py"
    text = source.read_text()
    assert old_new[0] in text
    source.write_text(text.replace(*old_new))


@pytest.fixture
def loopproj(tmp_path, run_xisa) -> Path:
    project = copy_tinyproj(tmp_path / "proj")
    write_files(project, {"kernels/loops.py": LOOP_PY, **SPECS})
    out = run_xisa("bless", "--arch", "gfx942", "--arch", "sm_90", "--kernel", "acc", "--kernel", "nest", cwd=project)
    assert out.code == 0, out.err
    return project


def _cells(out) -> dict[str, dict]:
    return {f"{c['kernel']}:{c['case']}@{c['target']}": c for c in json.loads(out.out)["cells"]}


def _check(run_xisa, project: Path, *extra: str):
    return run_xisa("check", "--arch", "gfx942", "--arch", "sm_90", "--kernel", "acc", "--kernel", "nest", *extra,
                    cwd=project)


def test_an_edit_inside_the_loop_is_reported_in_that_loop_and_breaks_the_loop_expectation(run_xisa, loopproj):
    _edit(loopproj, IN_LOOP)
    out = _check(run_xisa, loopproj, "--scope", "*", "--format", "json")
    assert out.code == 1, out.err
    cells = _cells(out)
    for cell_id, key in (("acc:f32@gfx942", "loop:v_exp*"), ("acc:f32@sm_90", "loop:MUFU*")):
        cell = cells[cell_id]
        assert cell["verdict"] == "expectation-failed"
        assert any(f.startswith(key) and "in the loop at" in f for f in cell["expectations"]), cell["expectations"]
        (change,) = cell["delta"]["loops"]
        before, after = change["figures"]["instructions"]
        assert after > before and change["base"]["depth"] == change["head"]["depth"] == 1
    # The other kernel did not change: no loop of it is reported.
    assert cells["nest:f32@gfx942"]["verdict"] == "same" and cells["nest:f32@gfx942"]["delta"] is None
    text = _check(run_xisa, loopproj, "--scope", "*")
    assert "loop at" in text.out and "(depth 1): instructions" in text.out
    md = _check(run_xisa, loopproj, "--scope", "*", "--format", "markdown")
    assert "| `acc:f32` | loop at kernels/loops.py:" in md.out


def test_an_edit_after_the_loop_changes_the_cell_but_no_loop(run_xisa, loopproj):
    _edit(loopproj, AFTER_LOOP)
    out = _check(run_xisa, loopproj, "--scope", "*", "--format", "json")
    assert out.code == 0, out.err            # in scope; `loop:v_exp*: 0` still holds: the exp is after the loop
    cells = _cells(out)
    for target, exp in (("gfx942", "v_exp_f32"), ("sm_90", "MUFU")):
        cell = cells[f"acc:f32@{target}"]
        assert cell["verdict"] == "changed" and any(row["mnemonic"].startswith(exp) for row in cell["delta"]["histogram"])
        assert not any(row["mnemonic"].startswith(exp) for change in cell["delta"]["loops"] for row in change["histogram"])
    # LLVM leaves the loop alone; ptxas may re-pick registers and instructions inside it (measured: VIADD ->
    # IADD3 on sm_90), which is a real change of the loop and is reported as one.
    assert cells["acc:f32@gfx942"]["delta"]["loops"] == []


def test_loops_depths_and_golden_stream_equals_fresh_compile(run_xisa, loopproj, tmp_path):
    """`xisa compile --loops` on every cell of this file: a loop-free kernel has none, the nested one depth 2,
    and the loops found in the golden's stored stream are those of the compiled assembly (parsed afresh)."""
    emit = tmp_path / "emit"
    out = run_xisa("compile", "--arch", "gfx942", "--arch", "sm_90", "--kernel", "acc", "--kernel", "nest",
                   "--kernel", "scale:small", "--loops", "--json", "--emit", str(emit), cwd=loopproj)
    assert out.code == 0, out.err
    cells = _cells(out)
    assert cells["scale:small@gfx942"]["loops"] == []
    nest = cells["nest:f32@gfx942"]["loops"]
    assert {loop["depth"] for loop in nest} == {1, 2}      # LLVM unrolls the outer loop: several inner copies
    outer = [set(loop["blocks"]) for loop in nest if loop["depth"] == 1]
    assert all(any(set(loop["blocks"]) < o for o in outer) for loop in nest if loop["depth"] == 2)
    assert [loop["depth"] for loop in cells["acc:f32@gfx942"]["loops"]] == [1]
    bless = run_xisa("bless", "--arch", "gfx942", "--kernel", "scale:small", cwd=loopproj)
    assert bless.code == 0, bless.err
    for cell_id, cell in cells.items():
        handler = NVIDIA if cell["target"].startswith("sm_") else AMD
        _, stream_path = golden_paths(loopproj / "golden", cell["kernel"], cell["case"], cell["target"])
        stored = find_loops(handler.stream_from_text(stream_path.read_text()), handler)
        asm = next((emit / cell["kernel"] / cell["case"] / cell["target"]).glob(f"*.{handler.assembly}"))
        fresh_stream = amdgcn.parse_stream(asm.read_text())[1] if handler is AMD else sass.parse_stream(asm.read_text())
        fresh = find_loops(fresh_stream, handler)
        assert [replace(loop, loc="") for loop in stored] == [replace(loop, loc="") for loop in fresh], cell_id
        assert [loop.instructions for loop in stored] == [loop["instructions"] for loop in cell["loops"]]


def test_html_report_has_the_changed_loop(run_xisa, loopproj, tmp_path):
    _edit(loopproj, IN_LOOP)
    page = tmp_path / "r.html"
    out = run_xisa("report", "--html", str(page), "--arch", "gfx942", "--kernel", "acc", cwd=loopproj)
    assert out.code == 1, out.err
    html = page.read_text()
    assert '"loops":[["loop at' in html and "renderLoops" in html
    tool = mca.find_llvm_mca()
    if tool is None:
        assert "llvm-mca not found" in html
    elif not _models("gfx942"):   # an llvm-mca older than the target (Debian's llvm-mca-14 knows no gfx942)
        assert f"llvm-mca {tool.version} ({tool.path}) does not know -mcpu=gfx942" in html
    else:
        assert "model estimate (llvm-mca" in html


def test_compile_loops_says_in_one_line_when_llvm_mca_is_absent(run_xisa, loopproj, monkeypatch):
    monkeypatch.setattr(mca, "find_llvm_mca", lambda: None)
    out = run_xisa("compile", "--arch", "gfx942", "--kernel", "acc", "--loops", cwd=loopproj)
    assert out.code == 0, out.err
    assert out.out.count("llvm-mca not found") == 1


def _models(cpu: str) -> bool:
    """Whether the llvm-mca xisa finds here has a scheduling model of `cpu`."""
    tool = mca.find_llvm_mca()
    return tool is not None and cpu in mca.known_cpus(tool, AMD.mca_triple)


def _no_gfx942_model() -> str:
    tool = mca.find_llvm_mca()
    return ("llvm-mca is not installed (Debian's llvm-20+ models gfx942)" if tool is None else
            f"llvm-mca {tool.version} ({tool.path}) has no gfx942 model (Debian's llvm-20+ has)")


@pytest.mark.skipif(not _models("gfx942"), reason=_no_gfx942_model())
def test_llvm_mca_estimate_of_a_compiled_loop(run_xisa, loopproj):
    out = run_xisa("compile", "--arch", "gfx942", "--kernel", "acc", "--loops", "--json", cwd=loopproj)
    (loop,) = _cells(out)["acc:f32@gfx942"]["loops"]
    estimate = loop["estimate"]
    assert estimate["cpu"] == "gfx942" and estimate["instructions"] == loop["instructions"]
    assert estimate["pressure"] and any(v > 0 for v in estimate["pressure"].values())
