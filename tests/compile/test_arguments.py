"""Less to restate (issue 14, item 4): ints derived from tensor stand-ins, tensors as views of a larger storage
(`large` judged by the storage, as Triton judges it), host-side tensor descriptors."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
import triton
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

from support import FIXTURES
from xisa.compile.launch.standins import make_standin, resolve_derived
from xisa.errors import SpecError

GFX942 = triton.backends.compiler.GPUTarget("hip", "gfx942", 64)


def _compile(root: Path, cache: Path, **select) -> dict:
    """Each cell's result, through the calls `xisa compile` makes."""
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection(arch=select.get("arch"), kernel=select.get("kernel")).cells(ws)
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache, options=RunOptions(jobs=1))
    return {cell.id: result for cell, result in zip(cells, results)}


@pytest.fixture
def project(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURES / "arguments", tmp_path / "proj"))


def _launch_binding(fn, args: dict):
    backend = make_backend(GFX942)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = {**args, "debug": False, "instrumentation_mode": ""}
    bound, specialization, options = binder(**kwargs)
    return fn._pack_args(backend, kwargs, bound, specialization, options)[1:]


# --- e. strides, sizes and numel taken from a stand-in ----------------------------------------------------

VIEWS = {   # spec stand-in -> the real tensor a launch would pass
    "contiguous": ({"tensor": "fp16", "shape": [48, 1, 32]}, lambda: torch.empty(48, 1, 32, dtype=torch.float16)),
    "transposed": ({"tensor": "fp32", "shape": [32, 48], "strides": [1, 32]},
                   lambda: torch.empty(48, 32, dtype=torch.float32).t()),
    "row-of-a-wider-matrix": ({"tensor": "bf16", "shape": [16, 17], "strides": [40, 1]},
                              lambda: torch.empty(16, 40, dtype=torch.bfloat16)[:, :17]),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_derived_ints_are_what_torch_gives(view):
    spec, real = VIEWS[view]
    real = real()
    standin = make_standin(spec, path="k.yaml", field="x")
    tensors = {"x": standin}
    for dim in range(-real.dim(), real.dim()):
        for kind, want in (("stride", real.stride(dim)), ("size", real.shape[dim])):
            derived = make_standin({kind: "x", "dim": dim}, path="k.yaml", field="s")
            assert resolve_derived(derived, tensors, path="k.yaml", field="s") == want
    numel = make_standin({"numel": "x"}, path="k.yaml", field="n")
    assert resolve_derived(numel, tensors, path="k.yaml", field="n") == real.numel()


def test_a_case_with_derived_ints_binds_as_the_launch_with_the_real_tensor(project):
    """Through the spec: the derived ints specialize (==1, %16) exactly as the real view's do."""
    from xisa.api import Selection, open_workspace
    from xisa.compile.launch.bind import bind_cell
    from xisa.compile.launch.loader import load_kernel_function

    (project / "derived.yaml").write_text("""name: derived
source: args.py
function: strided_copy
targets: [gfx942]
cases:
  - name: c
    args:
      x_ptr: {tensor: fp32, shape: [32, 48], strides: [1, 32]}
      y_ptr: {tensor: fp32, shape: [1024]}
      stride_xm: {stride: x_ptr, dim: 0}
      stride_xn: {stride: x_ptr, dim: -1}
      size_m: {size: x_ptr, dim: 0}
      n_elements: {numel: x_ptr}
    constexprs: {BLOCK: 32}
""")
    ws = open_workspace(cwd=project)
    _, cells = Selection(kernel=["derived"]).cells(ws)
    fn = load_kernel_function(cells[0].kernel, roots=list(ws.project.kernel_roots), target=cells[0].target)
    bound = bind_cell(cells[0], fn)
    x = torch.empty(48, 32, dtype=torch.float32).t()
    real = _launch_binding(fn, {"x_ptr": x, "y_ptr": torch.empty(1024), "stride_xm": x.stride(0),
                                "stride_xn": x.stride(1), "size_m": x.shape[0], "n_elements": x.numel(),
                                "BLOCK": 32})
    assert (bound.signature, bound.constexprs, bound.attrs) == tuple(real[:3])
    assert bound.signature["stride_xm"] == "constexpr"      # stride 1: a constexpr, as the launch makes it


@pytest.mark.parametrize("arg, needle", [
    ({"stride": "w_ptr", "dim": 0}, "'w_ptr' is no argument of the case (fix: did you mean 'x_ptr'?)"),
    ({"stride": "n", "dim": 0}, "'n' is not a tensor argument"),
    ({"size": "x_ptr", "dim": 2}, "dim 2 is out of range for 'x_ptr' of shape [4, 8] (fix: a dim from -2 to 1)"),
    ({"stride": "x_ptr"}, "stride needs an int dim"),
    ({"numel": "x_ptr", "dim": 0}, "numel takes no dim"),
    ({"stride": "x_ptr", "size": "x_ptr", "dim": 0}, "an int taken from a tensor is one of"),
])
def test_a_bad_derived_int_names_the_field(arg, needle):
    tensors = {"x_ptr": make_standin({"tensor": "fp32", "shape": [4, 8]}, path="k.yaml", field="x_ptr"), "n": 3}
    with pytest.raises(SpecError) as caught:
        derived = make_standin(arg, path="k.yaml", field="cases[0] (c).args.s")
        resolve_derived(derived, tensors, path="k.yaml", field="cases[0] (c).args.s")
    message = str(caught.value)
    assert message.startswith("k.yaml: cases[0] (c).args.s") and needle in message and "\n" not in message


# --- f. a view of a larger storage: `large` follows the storage -------------------------------------------

def test_a_standin_view_binds_like_a_real_view_of_its_storage():
    """Triton's AMD binder judges `untyped_storage().size()`; a meta tensor's view answers the same as ours."""
    from xisa.compile.launch.standins import TWO_GIB

    pool = torch.empty(2**31 + 2**20, dtype=torch.bfloat16, device="meta")   # 4 GiB, no memory
    real = pool[4096:4096 + 16 * 256].view(16, 256)
    assert real.untyped_storage().size() > TWO_GIB and real.numel() * 2 < TWO_GIB
    standin = make_standin({"tensor": "bf16", "shape": [16, 256], "offset": 4096,
                            "storage": {"elements": 2**31 + 2**20}}, path="k.yaml", field="x")
    small = make_standin({"tensor": "bf16", "shape": [16, 256], "offset": 4096}, path="k.yaml", field="x")
    assert standin.ptr_range() == real.untyped_storage().size() and small.ptr_range() <= TWO_GIB
    from triton.backends.amd.compiler import HIPBackend

    assert HIPBackend.is_within_2gb(standin) == HIPBackend.is_within_2gb(real) is False
    assert HIPBackend.is_within_2gb(small) is True


def test_an_offset_decides_the_alignment_as_a_real_view_has_it():
    for offset in (0, 1, 2, 3, 4, 8, 12):
        base = torch.empty(64, dtype=torch.float16)
        view = base[offset:]
        standin = make_standin({"tensor": "fp16", "shape": [64 - offset], "offset": offset}, path="k", field="x")
        assert (standin.data_ptr() % 16 == 0) == (view.data_ptr() % 16 == 0), offset


def test_storage_over_2gib_compiles_like_large_and_unlike_the_view_alone(project, tmp_path):
    results = _compile(project, tmp_path / "cache", kernel=["storage"])
    sha = {cell.split("@")[0].split(":")[1]: r.analysis.sha256 for cell, r in results.items() if r.status == "ok"}
    assert len(sha) == 3, {c: r.error for c, r in results.items()}
    assert sha["view_of_pool"] == sha["large"]
    assert sha["view_alone"] != sha["large"]


@pytest.mark.parametrize("value, needle", [
    ({"large": False, "storage": 2**32}, "large: false contradicts storage of 4294967296 bytes"),
    ({"large": True, "storage": 2**20}, "large: true contradicts storage of 1048576 bytes"),
    ({"storage": 100}, "storage of 100 bytes is smaller than the view's end"),
    ({"offset": 2, "align": 16}, "align 16 contradicts offset 2"),
    ({"storage": -1}, "storage must be a positive number of bytes"),
    ({"strides": [1]}, "strides has 1 entries for a shape of 2"),
    ({"strides": [-16, 1], "offset": 200}, "offset 200 puts the view's lowest element before its storage"),
    ({"strides": [-16, 1], "storage": 1000}, "storage of 1000 bytes is smaller than the view's end (1024 bytes"),
])
def test_a_storage_that_contradicts_the_view_names_the_field(value, needle):
    with pytest.raises(SpecError) as caught:
        make_standin({"tensor": "fp32", "shape": [16, 16], **value}, path="k.yaml", field="args.x")
    assert str(caught.value).startswith("k.yaml: args.x.") and needle in str(caught.value)


def test_a_negative_stride_view_spans_its_flipped_storage():
    """A flip's view (first element near the storage's end, stride -16): by default it reaches back to the
    storage's first element, so its storage is the base tensor's, as Triton's AMD backend would judge it."""
    base = torch.empty(16, 16, dtype=torch.float32)
    standin = make_standin({"tensor": "fp32", "shape": [16, 16], "strides": [-16, 1], "align": 4}, path="k.yaml",
                           field="args.x")
    assert standin.ptr_range() == base.untyped_storage().size() and standin.stride() == (-16, 1)
    assert standin.data_ptr() % 16 == 4


# --- g. host-side tensor descriptors (TMA) ----------------------------------------------------------------

def test_a_descriptor_argument_compiles_for_nvidia_and_amd(project, tmp_path):
    results = _compile(project, tmp_path / "cache", kernel=["descriptor"])
    assert {cell: r.status for cell, r in results.items()} == {
        f"descriptor:bf16_64x64@{t}": "ok" for t in ("sm_90", "gfx942", "gfx950")}, \
        {c: r.error for c, r in results.items()}
    assert results["descriptor:bf16_64x64@sm_90"].binding["signature"]["a_desc"] == "tensordesc<bf16[64, 64]>"
    tma = results["descriptor:bf16_64x64@sm_90"].analysis.classes.get("tma", 0)
    assert tma > 0      # a real TMA load on Hopper, not a rewrite to pointers


def test_a_descriptor_binds_as_triton_tools_tensor_descriptor_of_a_real_tensor():
    from triton.tools.tensor_descriptor import TensorDescriptor

    real = TensorDescriptor.from_tensor(torch.empty(256, 64, dtype=torch.bfloat16), [64, 64])
    ours = make_standin({"descriptor": "bf16", "shape": [256, 64], "block_shape": [64, 64]}, path="k", field="d")
    assert (ours.shape, ours.strides, ours.block_shape) == (list(real.shape), list(real.strides), real.block_shape)
    spec = importlib.util.spec_from_file_location("xisa_test_fixture_args", FIXTURES / "arguments" / "args.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = torch.empty(16384, dtype=torch.bfloat16)
    got = _launch_binding(module.descriptor_copy, {"a_desc": ours, "out_ptr": out, "BM": 64, "BK": 64})
    want = _launch_binding(module.descriptor_copy, {"a_desc": real, "out_ptr": out, "BM": 64, "BK": 64})
    assert got == want and got[0]["a_desc"] == "tensordesc<bf16[64, 64]>"


def test_a_bad_descriptor_is_one_line_naming_the_field():
    with pytest.raises(SpecError, match=r"^k: args.d.block_shape: a descriptor takes .*missing"):
        make_standin({"descriptor": "bf16", "shape": [64, 64]}, path="k", field="args.d")
    with pytest.raises(SpecError, match=r"^k: args.d: Triton refuses this descriptor: strides must be 16-byte"):
        make_standin({"descriptor": "bf16", "shape": [64, 3], "block_shape": [64, 4]}, path="k", field="args.d")
