"""The options a launch compiles with are the options a cell compiles with (issue 22, class 4).

`debug` was forced off in the binder, so `@triton.jit(debug=True)` or `options: {debug: true}` compiled without
the kernel's `tl.device_assert`s and an edited assert was byte-identical (exit 0). It is now bound as
`JITFunction.run` binds it, capture records it, and an option Triton would not compile as written is an error.
"""

from __future__ import annotations

import sys

import pytest
import yaml

from support import write_files

KERNEL = """import triton
import triton.language as tl


@triton.jit(debug=True)
def checked(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r)
    tl.device_assert(x > 0, "x must be positive")
    tl.store(y_ptr + r, x)


@triton.jit
def plain(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r)
    tl.device_assert(x > 0, "x must be positive")
    tl.store(y_ptr + r, x)
"""

SPEC = """source: k.py
function: {function}
targets: [gfx942, sm_90]
defaults: {{args: {{x_ptr: '*fp32', y_ptr: '*fp32'}}, constexprs: {{BLOCK: 64}}}}
cases:
{cases}"""
SPECS = {
    "kernels/checked.yaml": SPEC.format(function="checked", cases="  - name: jit\n  - name: nodebug\n"
                                                                  "    options: {debug: false}\n"),
    "kernels/plain.yaml": SPEC.format(function="plain", cases="  - name: option\n    options: {debug: true}\n"
                                                              "  - name: default\n"),
}


def _project(root):
    return write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/k.py": KERNEL,
                              **SPECS})


def test_an_edited_device_assert_is_a_change_where_the_launch_compiles_it(run_xisa, tmp_path):
    root = _project(tmp_path / "proj")
    assert run_xisa("bless", cwd=root).code == 0
    source = root / "kernels" / "k.py"
    source.write_text(source.read_text().replace("x > 0", "x > 1"))
    out = run_xisa("check", "--format", "json", cwd=root)
    assert out.code == 1, out.err
    verdicts = {f"{c['kernel']}:{c['case']}@{c['target']}": c["verdict"] for c in yaml.safe_load(out.out)["cells"]}
    for target in ("gfx942", "sm_90"):   # debug from the jit, from the option; off by the option, by default
        assert verdicts[f"checked:jit@{target}"] == verdicts[f"plain:option@{target}"] == "changed"
        assert verdicts[f"checked:nodebug@{target}"] == verdicts[f"plain:default@{target}"] == "same"
    golden = yaml.safe_load((root / "golden" / "checked" / "jit" / "gfx942.yaml").read_text())
    assert golden["options"]["debug"] is True


@pytest.mark.parametrize("option,target,why", [
    ("instrumentation_mode: fpsan", "gfx942", "a launch would not compile with instrumentation_mode='fpsan': it comes "
                                              "from TRITON_INSTRUMENTATION_MODE at a launch, which xisa pins unset"),
    ("arch: sm80", "sm_90", "the architecture is the cell's target, not an option"),
])
def test_an_option_triton_would_not_compile_as_written_is_one_line(run_xisa_in_process, tmp_path, option, target,
                                                                   why):
    root = _project(tmp_path / "proj")
    spec = root / "kernels" / "plain.yaml"
    spec.write_text(spec.read_text().replace("targets: [gfx942, sm_90]", f"targets: [{target}]")
                    .replace("options: {debug: true}", f"options: {{{option}}}"))
    out = run_xisa_in_process("compile", "--kernel", "plain:option", cwd=root)
    name = option.partition(":")[0]
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert out.code == 2 and len(lines) == 1, out.err
    assert f"kernels/plain.yaml: cases[0] (option).options.{name}: {why}" in lines[0]
    assert "(fix: remove" in lines[0]


DOT = """import triton
import triton.language as tl


@triton.jit
def plain(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    offs = r[:, None] * N + r[None, :]
    tl.store(c_ptr + offs, tl.dot(tl.load(a_ptr + offs), tl.load(b_ptr + offs)))
"""


def test_an_option_triton_rewrites_for_a_target_compiles_as_the_launch_does_with_a_note(run_xisa, tmp_path):
    """vLLM's decode kernels pass kpack=2 on every AMD target; Triton 3.8 warns and compiles gfx950 with 1."""
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/k.py": DOT,
        "kernels/plain.yaml": "source: k.py\nfunction: plain\ntargets: [gfx942, gfx950]\n"
                              "defaults: {args: {a_ptr: '*fp16', b_ptr: '*fp16', c_ptr: '*fp32'}, constexprs: {N: 32}}\n"
                              "cases:\n  - name: kpack2\n    options: {kpack: 2}\n  - name: default\n"})
    out = run_xisa("compile", "--json", cwd=root)
    assert out.code == 0, out.err
    cells = {f"{c['case']}@{c['target']}": c for c in yaml.safe_load(out.out)["cells"]}
    assert cells["kpack2@gfx950"]["options"]["kpack"] == 1 and cells["kpack2@gfx942"]["options"]["kpack"] == 2
    assert cells["kpack2@gfx950"]["code_sha256"] == cells["default@gfx950"]["code_sha256"]   # what a launch runs
    note = "kpack=2 compiles as 1, as a launch does: Triton's options rewrite it for this target (kpack is deprecated"
    assert cells["kpack2@gfx950"]["resolved"]["notes"][0].startswith(note)
    assert "notes" not in cells["kpack2@gfx942"]["resolved"] and "notes" not in cells["default@gfx950"]["resolved"]
    text = run_xisa("compile", cwd=root)
    assert "plain:kpack2@gfx950: kpack=2 compiles as 1" in " ".join(text.out.split()), text.out


PROGRAM = """
import torch
from k import checked, plain

x = torch.arange(1, 65, dtype=torch.float32)
y = torch.empty_like(x)
plain[(1,)](x, y, BLOCK=64, debug=True)     # the launch's option
checked[(1,)](x, y, BLOCK=64)               # the jit's
checked[(1,)](x, y, BLOCK=32, debug=False)  # the launch's, over the jit's
"""


def test_capture_records_the_debug_a_launch_compiled_with(run_xisa, tmp_path):
    root = _project(tmp_path / "proj")
    (root / "run.py").write_text(PROGRAM)
    import shutil

    shutil.copy(root / "kernels" / "k.py", root / "k.py")
    out = run_xisa("capture", "--no-check", "--", sys.executable, "run.py", cwd=root, env={"TRITON_INTERPRET": "1"})
    assert out.code == 0, out.err
    plain = yaml.safe_load((root / "captured" / "plain.yaml").read_text())["cases"]
    checked = yaml.safe_load((root / "captured" / "checked.yaml").read_text())["cases"]
    assert [case.get("options") for case in plain] == [{"debug": True}]
    assert [case.get("options") for case in checked] == [None, {"debug": False}]
