"""Compile one cell: bind through Triton's binder, `triton.compile` for the cell's GPUTarget, analyze."""

from __future__ import annotations

import time
import traceback
import warnings
from pathlib import Path

from xisa.analyze.model import Analysis
from xisa.analyze.stages import stage_fingerprints
from xisa.compile.bind import bind_cell, compiling, load_kernel_function
from xisa.compile.disassemble import machine_code
from xisa.compile.result import CellResult
from xisa.errors import XisaError
from xisa.spec.cases import Cell


def compile_cell(cell: Cell, *, roots: list[Path], keep_stages: bool = False) -> CellResult:
    """Never raises for a cell-level problem: the error is the cell's result, so other cells go on.
    Deprecation notices of the libraries a compile runs through (Triton, NumPy, torch, a kernel module's own
    imports) say nothing about the machine code and would bury the report: they are not printed."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
            warnings.simplefilter("ignore", category)
        return _compile_cell(cell, roots=roots, keep_stages=keep_stages)


def _compile_cell(cell: Cell, *, roots: list[Path], keep_stages: bool) -> CellResult:
    started = time.perf_counter()
    result = CellResult(kernel=cell.kernel.name, case=cell.case, target=cell.target.name, status="error")
    bound = None
    try:
        fn = load_kernel_function(cell.kernel, roots=roots, target=cell.target)
        with compiling(cell.kernel, cell.target):   # what the compile reads is a dependency as well
            bound = bind_cell(cell, fn)
            result.binding = bound.signature_record()
            result.options = bound.options_record()
            compiled = _triton_compile(bound)
        result.analysis = analyze_compiled(cell, compiled, bound.options)
        result.status = "ok"
        if keep_stages:   # the assembly is read (disassembled, where it must be) by the analysis
            result.stages = {k: v for k, v in compiled.asm.items() if k in cell.target.handler.stages}
    except XisaError as exc:
        result.error = str(exc)
        result.error_kind = type(exc).__name__.replace("Error", "").lower()
    except Exception as exc:  # Triton's own failures: the message is what the user needs
        result.error = _triton_message(exc)
        if bound is not None and bound.config:   # which of the autotuner's configs failed on this target
            result.error = f"{bound.config}: {result.error}"
        result.error_kind = "compile"
    result.seconds = time.perf_counter() - started
    return result


def _triton_compile(bound):
    import triton
    from triton.compiler import ASTSource

    source = ASTSource(bound.fn, bound.signature, bound.constexprs, bound.attrs)
    return triton.compile(source, target=bound.target, options=vars(bound.options))


def analyze_compiled(cell: Cell, compiled, options) -> Analysis:
    target = cell.target
    handler = target.handler
    assembly, binary_facts = machine_code(handler, compiled)
    analysis = handler.analyze(assembly, binary_facts, shared_bytes=int(getattr(compiled.metadata, "shared", 0) or 0),
                               num_warps=int(getattr(options, "num_warps", 4)), target=target, rules=target.normalize)
    analysis.stages = stage_fingerprints(handler, compiled.asm, analysis,
                                         kernel=getattr(compiled.metadata, "name", None))
    return analysis


def _triton_message(exc: Exception) -> str:
    """Triton's text whole and multi-line: a CompilationError's `^` points at a column of the source
    line above it, so the lines stay as they are (text output indents them as one block)."""
    lines = [line.rstrip() for line in f"{type(exc).__name__}: {exc}".splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not any(line.strip() for line in lines):
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "\n".join(lines)
