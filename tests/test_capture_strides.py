"""Captured cases compile the branch the launch ran (issue 22, class 5).

`xisa capture` wrote a tensor's strides as a comment, so a `@triton.heuristics` on `x.stride(1) == 1`
launched on a transposed tensor (CONTIG=False) was compiled on a contiguous stand-in (CONTIG=True): edits to
the branch the program runs passed. A captured stand-in now carries its strides, offset and storage where
they differ from the default, and the case records what the heuristics gave: a value computed again at
compile time that differs is an error naming the key.
"""

from __future__ import annotations

import json
import sys

import pytest
import yaml

KERNEL = '''
import triton
import triton.language as tl


@triton.heuristics({"CONTIG": lambda args: args["x_ptr"].stride(1) == 1,
                    "ALIGNED": lambda args: args["x_ptr"].data_ptr() % 16 == 0,
                    "SMALL": lambda args: args["x_ptr"].untyped_storage().size() < 65536})
@triton.jit
def copy_rows(x_ptr, y_ptr, stride_m, stride_n, N, BLOCK: tl.constexpr, CONTIG: tl.constexpr,
              ALIGNED: tl.constexpr, SMALL: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    if CONTIG:
        x = tl.load(x_ptr + row * stride_m + cols, mask=mask)
    else:
        x = tl.load(x_ptr + row * stride_m + cols * stride_n, mask=mask)
    if ALIGNED and SMALL:
        x = x * 2
    tl.store(y_ptr + row * BLOCK + cols, x, mask=mask)
'''

PROGRAM = '''
import torch
from rows import copy_rows

base = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32)
out = torch.empty(64 * 32, dtype=torch.float32)
t = base.t()                                      # [32, 64], strides [1, 32]: CONTIG False
copy_rows[(32,)](t, out, t.stride(0), t.stride(1), 64, BLOCK=64)
pool = torch.zeros(40000, dtype=torch.float32)    # a view at an offset of a bigger storage
view = pool[4:4 + 64 * 32].view(64, 32)           # 16-byte aligned, storage 160000 bytes: SMALL False
copy_rows[(64,)](view, out, view.stride(0), view.stride(1), 32, BLOCK=32)
'''


@pytest.fixture
def captured(tmp_path, run_xisa):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "rows.py").write_text(KERNEL)
    (root / "run_rows.py").write_text(PROGRAM)
    out = run_xisa("capture", "--targets", "gfx942", "--", sys.executable, "run_rows.py", cwd=root, env={"TRITON_INTERPRET": "1"})
    assert out.code == 0, out.err
    return root


def test_captured_stand_ins_carry_strides_offset_and_storage_and_the_heuristics(captured):
    cases = yaml.safe_load((captured / "captured" / "copy_rows.yaml").read_text())["cases"]
    transposed, view = cases
    assert transposed["args"]["x_ptr"] == {"tensor": "fp32", "shape": [32, 64], "strides": [1, 32]}
    assert transposed["heuristics"] == {"CONTIG": False, "ALIGNED": True, "SMALL": True}
    assert view["args"]["x_ptr"] == {"tensor": "fp32", "shape": [64, 32], "offset": 4, "storage": 160000}
    assert view["heuristics"] == {"CONTIG": True, "ALIGNED": True, "SMALL": False}


def test_the_captured_case_compiles_the_branch_the_launch_ran(captured, run_xisa):
    (captured / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    out = run_xisa("compile", "--arch", "gfx942", "--json", cwd=captured)
    assert out.code == 0, out.err
    constexprs = [cell["constexprs"] for cell in json.loads(out.out)["cells"]]
    assert [(c["CONTIG"], c["ALIGNED"], c["SMALL"]) for c in constexprs] == [(False, True, True),
                                                                              (True, True, False)]


@pytest.mark.parametrize("edit,key,computed", [
    ("strides: [1, 32]", "CONTIG", "True"),       # a contiguous stand-in of the transposed tensor
    ("storage: 160000", "SMALL", "True"),          # the view's own elements only
])
def test_a_heuristic_that_computes_another_value_than_the_launch_had_is_one_line(captured, run_xisa_in_process,
                                                                                edit, key, computed):
    (captured / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    spec = captured / "captured" / "copy_rows.yaml"
    text = spec.read_text()
    assert edit in text
    spec.write_text(text.replace(", " + edit, ""))
    out = run_xisa_in_process("compile", "--arch", "gfx942", cwd=captured)
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert out.code == 2 and len(lines) == 1, out.err
    assert f"copy_rows.yaml: cases[" in lines[0] and f".heuristics.{key}: the kernel's heuristic {key!r} computes " \
           f"{computed} on the case's arguments, but the launch had" in lines[0]
    assert "(fix: give the tensors the launch's strides, offset and storage" in lines[0]


def test_a_heuristics_key_no_heuristic_computes_is_refused(captured, run_xisa_in_process):
    (captured / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    spec = captured / "captured" / "copy_rows.yaml"
    spec.write_text(spec.read_text().replace("heuristics: {CONTIG: false", "heuristics: {CONTIGUOUS: false"))
    out = run_xisa_in_process("compile", "--arch", "gfx942", cwd=captured)
    assert out.code == 2 and "heuristics.CONTIGUOUS: no @triton.heuristics of 'copy_rows' computes 'CONTIGUOUS'" \
        in out.err


FLIP_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def copy_2d(x_ptr, y_ptr, sx0, sx1, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols * sx1) + tl.load(x_ptr + row * sx0 + cols * sx1, mask=cols < N)   # the first: vector width from x_ptr's alignment
    tl.store(y_ptr + row * BLOCK + cols, x)
'''

FLIP_PROGRAM = '''
import torch
from flip import copy_2d


class Flipped:
    """A tensor's storage seen through a negative stride, as FlagGems' StridedBuffer passes a flip: the address
    of the view's first element, near the storage's end; no storage_offset()."""

    def __init__(self, base, dim):
        self.base, self.dtype, self.shape = base, base.dtype, base.shape
        self.strides = list(base.stride())
        self.strides[dim] = -self.strides[dim]
        self.pointer = base.data_ptr() + (base.shape[dim] - 1) * base.stride(dim) * base.element_size()

    def data_ptr(self):
        return self.pointer

    def stride(self):
        return tuple(self.strides)

    def untyped_storage(self):
        return self.base.untyped_storage()


base = torch.zeros(19, 7, dtype=torch.float16)
x = Flipped(base, 0)                                  # 18 * 7 * 2 = 252 bytes in: aligned to 4
out = torch.empty(19 * 128, dtype=torch.float16)
copy_2d[(19,)](x, out, *x.stride(), 7, BLOCK=128, num_warps=1)   # 4 elements a lane: a vector load if aligned
'''


def test_a_negative_stride_view_is_captured_and_compiles_with_the_launchs_alignment(tmp_path, run_xisa):
    """FlagGems' flip passes a pointer near its storage's end with a negative stride: the captured stand-in
    keeps the strides and the address alignment (4, not 16), and it compiles (it was refused: strides >= 0)."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "flip.py").write_text(FLIP_KERNEL)
    (root / "run_flip.py").write_text(FLIP_PROGRAM)
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    out = run_xisa("capture", "--no-run", "--targets", "gfx942", "--", sys.executable, "run_flip.py", cwd=root)
    assert out.code == 0, out.err
    spec = root / "captured" / "copy_2d.yaml"
    (case,) = yaml.safe_load(spec.read_text())["cases"]
    assert case["args"]["x_ptr"] == {"tensor": "fp16", "shape": [19, 7], "strides": [-7, 1], "align": 4}
    aligned = yaml.safe_load(spec.read_text())
    aligned["cases"].append({**case, "name": "aligned", "args": {**case["args"], "x_ptr": {
        "tensor": "fp16", "shape": [19, 7], "strides": [-7, 1]}}})
    spec.write_text(yaml.safe_dump(aligned))
    out = run_xisa("compile", "--arch", "gfx942", "--arch", "sm_90", "--json", cwd=root)
    assert out.code == 0, out.err
    sha = {(c["case"], c["target"]): c["sha256"] for c in json.loads(out.out)["cells"]}
    for target in ("gfx942", "sm_90"):   # the alignment reaches the code: a 16-aligned view compiles otherwise
        assert sha[(case["name"], target)] != sha[("aligned", target)]
