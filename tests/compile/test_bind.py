"""Binding: xisa's stand-ins must give exactly what Triton's launch binder gives for real tensors."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

from xisa.compile.bind import StandInTensor, make_standin
from xisa.errors import SpecError


@triton.jit
def probe_kernel(x_ptr, y_ptr, i_a, i_b, i_c, i_d, f, flag, N: tl.constexpr):
    pass


@triton.jit(do_not_specialize=["i_b"])
def probe_nospec_kernel(x_ptr, i_a, i_b, N: tl.constexpr):
    pass


def _launch_binding(fn, backend_target, args, kwargs):
    """What JITFunction.run computes before compiling (signature, constexprs, attrs)."""
    backend = make_backend(backend_target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    launch_kwargs = {**kwargs, "debug": False, "instrumentation_mode": ""}
    bound, specialization, options = binder(*args, **launch_kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, launch_kwargs, bound, specialization, options)
    return signature, constexprs, attrs


TARGETS = [triton.backends.compiler.GPUTarget("hip", "gfx942", 64),
           triton.backends.compiler.GPUTarget("hip", "gfx1100", 32),
           triton.backends.compiler.GPUTarget("cuda", 90, 32)]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t.arch))
def test_standins_bind_like_real_tensors(target):
    x = torch.empty(64, dtype=torch.float16)
    y = torch.empty(33, dtype=torch.bfloat16)
    real = (x, y, 1, 16, 17, 2**40, 0.5, True)
    stand = (make_standin({"tensor": "fp16", "shape": [64]}, path="t", field="x"),
             make_standin({"tensor": "bfloat16", "shape": [33]}, path="t", field="y"),
             1, 16, 17, 2**40, 0.5, True)
    assert x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0  # torch's CPU allocator aligns to 64
    got = _launch_binding(probe_kernel, target, stand, {"N": 32})
    want = _launch_binding(probe_kernel, target, real, {"N": 32})
    assert got == want
    signature, constexprs, attrs = got
    assert signature["i_a"] == "constexpr"           # an int equal to 1 becomes a constexpr
    assert signature["i_d"] == "i64"                 # 2**40 needs 64 bits
    assert ["tt.divisibility", 16] in attrs[(3,)]    # 16 is divisible by 16
    assert attrs[(4,)] == []                         # 17 is not
    if target.backend == "hip":
        assert ["tt.pointer_range", 32] in attrs[(0,)]
    else:
        assert ["tt.pointer_range", 32] not in attrs[(0,)]


def test_misaligned_tensor_loses_divisibility_like_a_real_view():
    target = TARGETS[0]
    base = torch.empty(80, dtype=torch.float32)
    view = base[2:]  # 8 bytes past a 64-byte aligned address
    assert view.data_ptr() % 16 == 8
    real = _launch_binding(probe_kernel, target, (view, base, 1, 16, 17, 3, 0.5, False), {"N": 32})
    stand = _launch_binding(probe_kernel, target, (
        make_standin({"tensor": "fp32", "shape": [78], "align": 8}, path="t", field="x"),
        make_standin({"tensor": "fp32", "shape": [80]}, path="t", field="y"), 1, 16, 17, 3, 0.5, False), {"N": 32})
    assert real == stand
    assert ["tt.divisibility", 16] not in real[2][(0,)]


def test_large_tensor_has_no_pointer_range_on_amd():
    target = TARGETS[0]
    big = make_standin({"tensor": "bf16", "large": True}, path="t", field="x")
    small = make_standin({"tensor": "bf16", "shape": [1024]}, path="t", field="y")
    assert isinstance(big, StandInTensor) and big.ptr_range() > 2**31 - 1
    _, _, attrs = _launch_binding(probe_kernel, target, (big, small, 1, 16, 17, 3, 0.5, False), {"N": 32})
    assert ["tt.pointer_range", 32] not in attrs[(0,)]
    assert ["tt.pointer_range", 32] in attrs[(1,)]
    # a meta tensor over 2 GiB is what a real launch would see: the same attrs
    meta = torch.empty(2**31, dtype=torch.bfloat16, device="meta")
    _, _, meta_attrs = _launch_binding(probe_kernel, target, (meta, small, 1, 16, 17, 3, 0.5, False), {"N": 32})
    assert meta_attrs[(0,)] == attrs[(0,)]


def test_do_not_specialize_is_honoured():
    target = TARGETS[0]
    x = make_standin("*fp32", path="t", field="x")
    signature, constexprs, attrs = _launch_binding(probe_nospec_kernel, target, (x, 1, 1), {"N": 16})
    assert signature["i_a"] == "constexpr"
    assert signature["i_b"] == "i32"                 # 1 stays a runtime int under do_not_specialize


def test_bad_standins_name_the_field():
    with pytest.raises(SpecError, match="unknown dtype 'bf17'.*did you mean 'bf16'"):
        make_standin({"tensor": "bf17"}, path="k.yaml", field="cases[0].args.x")
    with pytest.raises(SpecError, match="over 2 GiB"):
        make_standin({"tensor": "fp32", "shape": [2**30], "large": False}, path="k.yaml", field="x")
    with pytest.raises(SpecError, match="align"):
        make_standin({"tensor": "fp32", "align": 3}, path="k.yaml", field="x")
