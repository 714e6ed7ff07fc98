"""Compile one cell: bind through Triton's binder, `triton.compile` for the cell's GPUTarget, analyze."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from pathlib import Path

from xisa.analyze.amdgcn import analyze_amdgcn
from xisa.analyze.occupancy import amd_waves_per_simd, cuda_warps_per_sm
from xisa.compile.bind import bind_cell, compiling, load_kernel_function
from xisa.errors import XisaError
from xisa.compile.result import CellResult
from xisa.spec.cases import Cell

AMD_STAGES = ("ttir", "ttgir", "llir", "amdgcn", "hsaco")
CUDA_STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin", "sass")


def compile_cell(cell: Cell, *, roots: list[Path], keep_stages: bool = False) -> CellResult:
    """Never raises for a cell-level problem: the error is the cell's result, so other cells go on."""
    started = time.perf_counter()
    result = CellResult(kernel=cell.kernel.name, case=cell.case, target=cell.target.name, status="error")
    try:
        fn = load_kernel_function(cell.kernel, roots=roots)
        with compiling(cell.kernel):   # what the compile reads is a dependency as well
            bound = bind_cell(cell, fn)
            result.binding = bound.signature_record()
            result.options = bound.options_record()
            compiled = _triton_compile(bound)
        analysis = analyze_compiled(cell, compiled, bound.options)
        result.analysis = analysis
        result.status = "ok"
        if keep_stages:
            result.stages = {k: v for k, v in compiled.asm.items() if k in AMD_STAGES + CUDA_STAGES}
            if not cell.target.is_amd:
                result.stages["sass"] = compiled.asm["sass"]
    except XisaError as exc:
        result.error = str(exc)
        result.error_kind = type(exc).__name__.replace("Error", "").lower()
    except Exception as exc:  # Triton's own failures: the message is what the user needs
        result.error = _triton_message(exc)
        result.error_kind = "compile"
    result.seconds = time.perf_counter() - started
    return result


def _triton_compile(bound):
    import triton
    from triton.compiler import ASTSource

    source = ASTSource(bound.fn, bound.signature, bound.constexprs, bound.attrs)
    return triton.compile(source, target=bound.target, options=vars(bound.options))


def analyze_compiled(cell: Cell, compiled, options):
    target = cell.target
    shared = int(getattr(compiled.metadata, "shared", 0) or 0)
    num_warps = int(getattr(options, "num_warps", 4))
    if target.is_amd:
        analysis, _ = analyze_amdgcn(compiled.asm["amdgcn"], lds_bytes=shared, code_object=compiled.asm["hsaco"])
        res = analysis.resources
        res["occupancy"] = amd_waves_per_simd(target, vgprs=res["vgprs"], agprs=res["agprs"], sgprs=res["sgprs"],
                                              lds_bytes=res["lds_bytes"], num_warps=num_warps)
        return analysis
    from xisa.analyze.sass import analyze_sass

    with _drop_known_tool_noise():
        sass = compiled.asm["sass"]
    analysis = analyze_sass(sass, compiled.asm["cubin"], shared_bytes=shared, rules=target.normalize)
    res = analysis.resources
    res["occupancy"] = cuda_warps_per_sm(target, regs=res["registers"], smem_bytes=res["lds_bytes"],
                                         num_warps=num_warps)
    return analysis


# Printed by nvdisasm on every disassembly Triton asks for; it says nothing about the kernel.
_TOOL_NOISE = (b"nvdisasm warning : Disassembling Std Elf to Old format",)


@contextlib.contextmanager
def _drop_known_tool_noise():
    """Capture fd 2 while Triton runs the disassembler; pass on everything but the known noise."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            for line in capture.read().splitlines(keepends=True):
                if not any(noise in line for noise in _TOOL_NOISE):
                    os.write(2, line)


def _triton_message(exc: Exception) -> str:
    """Triton's text whole and multi-line: a CompilationError's `^` points at a column of the source
    line above it, so the lines stay as they are (text output indents them as one block)."""
    lines = [line.rstrip() for line in f"{type(exc).__name__}: {exc}".splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not any(line.strip() for line in lines):
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "\n".join(lines)
