"""Helpers for the runtime checks (`check_<kernel>(case)` in each kernel module).

A check gets an `xisa.device.launch.RuntimeCase` (duck-typed here: nothing imports xisa): the spec's
argument values (`case.args`: scalars, and tensor specs such as {tensor: bf16, shape: [...]}),
the resolved constexprs, the launch options, the device and the target name. It builds inputs on
the device with the spec's dtypes and shapes, passes the spec's scalars unchanged (so the launch
specializes exactly like xisa's ahead-of-time compile: pointer dtype and 16-byte alignment, ints
equal to 1, divisible by 16, i32 range), launches through `case.launch` and compares with torch.
Only portable torch APIs are used: ROCm builds expose AMD GPUs as 'cuda' devices.
"""
from __future__ import annotations

import torch

_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "fp64": torch.float64, "float64": torch.float64,
    "i8": torch.int8, "int8": torch.int8, "i16": torch.int16, "int16": torch.int16,
    "i32": torch.int32, "int32": torch.int32, "i64": torch.int64, "int64": torch.int64,
    "u8": torch.uint8, "uint8": torch.uint8,
    "fp8e4nv": torch.float8_e4m3fn, "float8_e4m3fn": torch.float8_e4m3fn,
    "fp8e4b8": torch.float8_e4m3fnuz, "float8_e4m3fnuz": torch.float8_e4m3fnuz,
    "fp8e5": torch.float8_e5m2, "float8_e5m2": torch.float8_e5m2,
    "fp8e5b16": torch.float8_e5m2fnuz, "float8_e5m2fnuz": torch.float8_e5m2fnuz,
}


def spec_dtype(case, name: str) -> torch.dtype:
    """The torch dtype of tensor argument `name` as the spec writes it ('*bf16' or {tensor: bf16})."""
    value = case.args[name]
    dt = value["tensor"] if isinstance(value, dict) else str(value).lstrip("*")
    return _DTYPES[dt]


def generator(case, seed: int = 0) -> torch.Generator:
    return torch.Generator(device=case.device).manual_seed(seed)


def randn(case, shape, gen, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(tuple(shape), generator=gen, device=case.device) * scale).to(dtype)


def empty(case, name: str) -> torch.Tensor:
    """An uninitialized output tensor with the spec's dtype and shape (filled with NaN where floating,
    so an element the kernel fails to write cannot pass)."""
    t = torch.empty(tuple(case.shape(name)), dtype=spec_dtype(case, name), device=case.device)
    if t.dtype.is_floating_point and t.element_size() >= 2:
        t.fill_(float("nan"))
    return t


def launch_kwargs(case) -> dict:
    return {**case.constexprs, **case.options}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, tol: float, what: str) -> None:
    """torch.testing.assert_close on float32 values, rtol = tol and atol = tol x max |expected|."""
    a = actual.float()
    e = expected.to(a.device).float()
    atol = tol * max(float(e.abs().max()), 1e-6) if e.numel() else tol
    torch.testing.assert_close(a, e, rtol=tol, atol=atol, equal_nan=False,
                               msg=lambda m: f"{what}: {m}")
