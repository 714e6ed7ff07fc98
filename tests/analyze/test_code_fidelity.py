"""The fingerprint covers the code the hardware runs (issue 11 items 1 and 4), and goldens carry the
analyzer version that made them (issue 13).

Real compiles of small kernels through the `xisa` command, as a user would run it:
- a kernel calling a `@triton.jit(noinline=True)` helper, which LLVM prints before the kernel;
- inline asm whose directives (`.long`, `.rept`, `.if`) are assembled after LLVM prints the text.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

NOINLINE_SOURCE = """\
import triton
import triton.language as tl


@triton.jit(noinline=True)
def bump(y_ptr, index, value):
    tl.store(y_ptr + index, value + 1.0)


@triton.jit
def callee_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * factor, mask=mask)
    bump(y_ptr, n, factor)
"""
# The kernel itself holds a 2048-wide block in one warp, so it needs more registers than the helper.
NOINLINE_SPEC = """\
name: callee
source: callee.py
function: callee_kernel
targets: [gfx942, gfx1100, sm_90]
defaults:
  args:
    x_ptr: {tensor: fp32, shape: [8192]}
    y_ptr: {tensor: fp32, shape: [8192]}
    n: 4096
    factor: 2.0
  options: {num_warps: 1}
cases:
  - name: block
    constexprs: {BLOCK: 2048}
"""

ASM_SOURCE = """\
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.inline_asm_elementwise({asm!r}, "=v,v", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(y_ptr + offsets, y, mask=mask)
"""
ASM_SPEC = """\
name: {name}
source: {name}.py
function: {name}_kernel
targets: [gfx942]
defaults:
  args:
    x_ptr: {{tensor: i32, shape: [4096]}}
    y_ptr: {{tensor: i32, shape: [4096]}}
    n: 4096
  options: {{num_warps: 4}}
cases:
  - name: b256
    constexprs: {{BLOCK: 256}}
"""
ASM = {
    "long": "v_mov_b32 $0, $1\n.long 0xbf800007",               # s_nop 7 as a data word
    "rept": "v_mov_b32 $0, $1\n.rept 64\ns_nop 0\n.endr",
    "ifzero": "v_mov_b32 $0, $1\n.if 0\nv_add_u32 $0, $0, $0\n.endif",
}


def _project(root: Path) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["kernels"]\n')
    return root


def _noinline_project(root: Path) -> Path:
    _project(root)
    (root / "kernels" / "callee.py").write_text(NOINLINE_SOURCE)
    (root / "kernels" / "callee.yaml").write_text(NOINLINE_SPEC)
    return root


def _asm_project(root: Path) -> Path:
    _project(root)
    for name, asm in ASM.items():
        (root / "kernels" / f"{name}.py").write_text(ASM_SOURCE.format(name=name, asm=asm))
        (root / "kernels" / f"{name}.yaml").write_text(ASM_SPEC.format(name=name))
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _cells(out) -> dict[str, dict]:
    return {f"{c['kernel']}@{c['target']}": c for c in json.loads(out.out)["cells"]}


def _instruction_lines(asm: str) -> int:
    """An independent count of the whole file: tab-indented lines that start with a lower-case mnemonic."""
    return sum(1 for line in asm.splitlines() if re.match(r"^\t[a-z][a-z0-9_]*(\s|$)", line))


def test_a_noinline_callee_is_counted_and_a_kernel_edit_is_seen_on_amd(run_xisa, tmp_path):
    project = _noinline_project(tmp_path / "proj")
    emitted = run_xisa("compile", "--json", "--jobs", "1", "--emit", "stages", cwd=project)
    assert emitted.code == 0, emitted.err
    cells = _cells(emitted)
    for target in ("gfx942", "gfx1100"):
        cell = cells[f"callee@{target}"]
        asm = (project / "stages" / "callee" / "block" / target / "callee.amdgcn").read_text()
        stream = (project / "stages" / "callee" / "block" / target / "callee.normalized").read_text()
        # every function of the code object: the kernel, then the helper LLVM printed before it
        assert stream.startswith("bb0:") and "\nfunction " in stream and "bump" in stream.split("\nfunction ")[1]
        assert "s_setpc_b64" in cell["histogram"] and "s_endpgm" in cell["histogram"]
        assert cell["instructions"] == _instruction_lines(asm) == sum(cell["histogram"].values())
        # resources are the kernel's as the dispatch sees them (the descriptor), not the helper's
        helper_vgprs = int(re.search(r"; Function info:\n(?:;.*\n)*?; NumVgprs: (\d+)", asm).group(1))
        descriptor_vgprs = int(re.search(r"\.amdhsa_next_free_vgpr (\d+)", asm).group(1))
        assert cell["resources"]["agprs"] == 0
        assert cell["resources"]["vgprs"] == descriptor_vgprs > helper_vgprs
    # NVIDIA: ptxas places the callee in the kernel's own section, so the SASS stream has it
    assert {"CALL", "RET"} <= {m.split(".")[0] for m in cells["callee@sm_90"]["histogram"]}

    blessed = run_xisa("bless", "--jobs", "1", cwd=project)
    assert blessed.code == 0, blessed.err
    _edit(project / "kernels" / "callee.py", "    bump(y_ptr, n, factor)\n",
          "    tl.store(y_ptr + n + offsets, x, mask=mask)\n    bump(y_ptr, n, factor)\n")
    checked = run_xisa("check", "--arch", "gfx*", "--jobs", "1", "--format", "json", cwd=project)
    assert checked.code == 1, checked.out + checked.err
    verdicts = {c["target"]: c["verdict"] for c in json.loads(checked.out)["cells"]}
    assert verdicts == {"gfx942": "changed", "gfx1100": "changed"}


def _check_after(run_xisa, project: Path, name: str, old: str, new: str):
    _edit(project / "kernels" / f"{name}.py", old, new)
    out = run_xisa("check", "--kernel", name, "--jobs", "1", "--format", "json", cwd=project)
    (cell,) = json.loads(out.out)["cells"]
    return out.code, cell


def test_inline_asm_directives_are_tied_to_the_code_object(run_xisa, tmp_path):
    project = _asm_project(tmp_path / "proj")
    blessed = run_xisa("bless", "--jobs", "1", cwd=project)
    assert blessed.code == 0, blessed.err
    golden = yaml.safe_load((project / "golden" / "long" / "b256" / "gfx942.yaml").read_text())
    assert re.fullmatch(r"[0-9a-f]{64}", golden["code_sha256"]) and golden["histogram"][".long"] == 1

    # `.long 0xbf800007` -> `.long 0xbf810000` (s_nop 7 -> s_endpgm): another program
    code, cell = _check_after(run_xisa, project, "long", "0xbf800007", "0xbf810000")
    assert (code, cell["verdict"]) == (1, "changed")
    assert cell["head_code_sha256"] != cell["base_code_sha256"]

    # `.rept 64` -> `.rept 2`: 62 instructions fewer
    code, cell = _check_after(run_xisa, project, "rept", ".rept 64", ".rept 2")
    assert (code, cell["verdict"]) == (1, "changed")
    assert cell["base_instructions"] - cell["head_instructions"] == 62

    # the body of `.if 0` is never assembled: an edit there leaves the code object as it was
    code, cell = _check_after(run_xisa, project, "ifzero", "v_add_u32 $0", "v_sub_u32 $0")
    assert (code, cell["verdict"]) == (0, "same"), cell
    assert cell["head_code_sha256"] == cell["base_code_sha256"]


def test_code_bytes_do_not_move_with_the_checkout_blank_lines_or_a_fresh_compile(run_xisa, tmp_path):
    first = _cells(run_xisa("compile", "--json", "--no-cache", "--jobs", "1", "--arch", "gfx*",
                            cwd=_noinline_project(tmp_path / "proj")))
    moved = tmp_path / "elsewhere" / "deeper" / "checkout"
    shutil.copytree(tmp_path / "proj", moved)
    source = moved / "kernels" / "callee.py"
    source.write_text("# moved\n\n\n\n" + source.read_text())
    again = _cells(run_xisa("compile", "--json", "--no-cache", "--jobs", "1", "--arch", "gfx*", cwd=moved,
                            env={"XISA_CACHE_DIR": str(tmp_path / "cold-cache")}))
    for field in ("code_sha256", "sha256"):   # the stream names the callee: no path may leak into it
        assert {k: c[field] for k, c in again.items()} == {k: c[field] for k, c in first.items()}
    assert all(re.fullmatch(r"[0-9a-f]{64}", c["code_sha256"]) for c in first.values())


def test_goldens_of_another_analyzer_are_reported_as_such_not_as_a_kernel_change(run_xisa, tmp_path):
    from xisa.analyze import ANALYZER_VERSION

    project = _asm_project(tmp_path / "proj")
    assert run_xisa("bless", "--kernel", "long", "--jobs", "1", cwd=project).code == 0
    path = project / "golden" / "long" / "b256" / "gfx942.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["analyzer"] == ANALYZER_VERSION
    # as an older xisa wrote it: no analyzer field, and counted differently
    del data["analyzer"], data["code_sha256"]
    data["histogram"] = {k: v for k, v in data["histogram"].items() if k != ".long"}
    data["instructions"] -= 1
    path.write_text(yaml.safe_dump(data, sort_keys=True))
    out = run_xisa("check", "--kernel", "long", "--jobs", "1", cwd=project)
    assert out.code == 2, out.out + out.err
    expected = (f"goldens were made by xisa's analyzer 1, this xisa is {ANALYZER_VERSION}: "
                "re-bless with `xisa bless`")
    assert sum(expected in line for line in out.out.splitlines()) == 1
    assert "changed" not in out.out and "isolation violated" not in out.out


@pytest.mark.unit
def test_code_bytes_changed_under_an_unchanged_stream_is_a_change(tmp_path):
    """What the printed text cannot show (a directive LLVM leaves out) still fails the gate."""
    from dataclasses import replace

    from xisa.analyze.amdgcn import analyze_amdgcn
    from xisa.golden.store import GoldenSet, golden_paths, render_golden, write_golden
    from xisa.compile.worker.result import CellResult
    from xisa.golden.verdict import build_report

    asm = "\t.type\tk,@function\nk:\n\ts_nop 0\n\ts_endpgm\n.Lfunc_end0:\n"
    analysis, _ = analyze_amdgcn(asm)

    def result(code: str) -> CellResult:
        return CellResult(kernel="k", case="c", target="gfx942", status="ok",
                          analysis=replace(analysis, code_sha256=code))

    golden_dir = tmp_path / "golden"
    yaml_text, stream_text = render_golden(result("a" * 64), toolchain={"triton": "x"},
                                           stream_file=True)
    write_golden(*golden_paths(golden_dir, "k", "c", "gfx942"), yaml_text, stream_text)

    def check(code: str):
        results = [result(code)]
        return build_report(results, {}, goldens=GoldenSet.for_results(golden_dir, results, display_root=tmp_path),
                            selected_targets={"gfx942"}, kernel_filters=None, scopes=[],
                            toolchain={"triton": "x"})

    assert check("a" * 64).exit_code == 0
    report = check("b" * 64)
    (verdict,) = report.verdicts
    assert report.exit_code == 1 and verdict.verdict == "changed" and "code bytes" in verdict.message
