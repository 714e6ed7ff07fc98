"""`xisa device` as a library call: gate every selected cell on the GPUs present, run, prove fidelity."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from xisa.device.detect import Device, present_targets
from xisa.errors import EXIT_OK, EXIT_REGRESSION, EXIT_UNTRUSTED
from xisa.device.launch import (RuntimeResult, diff_bindings, fresh_launch_cache, launch_binding, launch_fingerprint,
                          run_check)
from xisa.compile.runner import RunOptions, run_cells
from xisa.compile.worker.toolchain import check_environment, describe_toolchain, pinned_overrides
from xisa.spec.cases import Cell, matches_kernel_filter
from xisa.spec.targets import Target

RAN = ("pass", "fail")   # a cell whose check ran on a GPU; `skip` and `error` verified nothing


@dataclass
class DeviceReport:
    devices: list[Device]
    results: list[RuntimeResult]
    skipped_targets: dict[str, str] = field(default_factory=dict)
    toolchain: dict[str, str] = field(default_factory=dict)
    # One line per part of the selection (an --arch or --kernel value, or a GPU's target) that ran no
    # cell: a pass that verified nothing there is not a pass (exit 2).
    not_run: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.not_run or any(r.status == "error" for r in self.results):
            return EXIT_UNTRUSTED
        if any(r.status == "fail" for r in self.results):
            return EXIT_REGRESSION
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        from xisa.golden.verdict import JSON_SCHEMA_VERSION

        return {"schema": JSON_SCHEMA_VERSION, "kind": "device", "toolchain": self.toolchain,
                "devices": [{"index": d.index, "name": d.name, "arch": d.arch, "target": d.target}
                            for d in self.devices],
                "skipped_targets": self.skipped_targets, "cells": [r.to_json() for r in self.results],
                "not_run": self.not_run, "exit_code": self.exit_code}


def run_device_tier(chosen: list[Target], cells: list[Cell], *, devices: list[Device], roots: list[Path],
                    cache_dir: Path, options: RunOptions, emit: Path | None = None,
                    arch: list[str] | None = None, kernel: list[str] | None = None) -> DeviceReport:
    """The selected cells (`chosen` targets, chosen by the `arch` and `kernel` values) on `devices`;
    `roots` are the kernels' import roots. `emit`: write each cell's launch and ahead-of-time stages
    there, to diff a fidelity failure."""
    report = _run(chosen, cells, devices=devices, roots=roots, cache_dir=cache_dir, options=options, emit=emit)
    report.not_run = not_run(cells, report, arch=arch, kernel=kernel,
                             present=[t.name for t in chosen if t.name in present_targets(devices)])
    return report


def not_run(cells: list[Cell], report: DeviceReport, *, arch: list[str] | None, kernel: list[str] | None,
            present: list[str]) -> list[str]:
    """Each part of the selection that no cell which ran covers: every --arch piece, every --kernel
    filter, and without --arch every selected target a GPU present is (the others are skipped by design)."""
    ran = {r.id for r in report.results if r.status in RAN}
    parts = [(f"--arch {piece}", lambda c, p=piece: fnmatch.fnmatchcase(c.target.name, p))
             for pattern in arch or [] for piece in (p.strip() for p in pattern.split(",")) if piece]
    if not arch:
        parts += [(f"the {name} GPU present", lambda c, n=name: c.target.name == n) for name in present]
    parts += [(f"--kernel {flt}", lambda c, f=flt: matches_kernel_filter(f, c.kernel.name, c.case))
              for flt in kernel or []]
    lines = []
    for label, selects in parts:
        mine = [c for c in cells if selects(c)]
        if not any(c.id in ran for c in mine):
            lines.append(f"{label}: no cell ran ({_why_not(mine, report)}) (fix: run it where a GPU of "
                         "that target is visible and its cases name a `runtime:` check, or leave it out of "
                         "the selection)")
    return lines


def _why_not(cells: list[Cell], report: DeviceReport) -> str:
    if not cells:
        return "it selects no cell"
    results = {r.id: r for r in report.results}
    reasons: dict[str, None] = {}
    for cell in cells:
        result = results.get(cell.id)
        if cell.target.name in report.skipped_targets:
            reasons[f"{cell.target.name}: {report.skipped_targets[cell.target.name]}"] = None
        elif result is not None:
            reasons[f"{result.id}: {result.status}: {result.message}"] = None
    shown = list(reasons)[:3]
    more = f"; {len(reasons) - 3} more" if len(reasons) > 3 else ""
    return "; ".join(shown) + more


def _run(chosen: list[Target], cells: list[Cell], *, devices: list[Device], roots: list[Path], cache_dir: Path,
         options: RunOptions, emit: Path | None) -> DeviceReport:
    present = present_targets(devices)
    report = DeviceReport(devices=devices, results=[])
    for target in chosen:
        if target.name not in present:
            report.skipped_targets[target.name] = ("no GPU" if not devices else
                                                   f"no {target.name} device present (found "
                                                   + ", ".join(d.arch for d in devices) + ")")
    runnable = []
    for cell in cells:
        if cell.target.name in report.skipped_targets:
            continue
        if not cell.runtime:
            report.results.append(RuntimeResult(cell.kernel.name, cell.case, cell.target.name, "skip",
                                                "the case names no runtime check"))
            continue
        runnable.append(cell)
    if not runnable:
        return report
    check_environment()
    # Ahead of time first, in forked workers, before this process touches the GPU; the pinned
    # knobs are then taken back so the launches below see the environment a user's program sees.
    saved = dict(os.environ)
    try:
        if emit is not None:
            options = RunOptions(jobs=options.jobs, timeout=options.timeout, use_cache=False, keep_stages=True)
        aot = run_cells(runnable, roots=roots, cache_dir=cache_dir, options=options)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    report.toolchain = describe_toolchain(backends={c.target.backend for c in runnable})
    fresh_launch_cache()
    import torch

    for cell, aot_result in zip(runnable, aot):
        device = present[cell.target.name]
        torch.cuda.set_device(device.index)
        result, launch = run_check(cell, torch.device("cuda", device.index), roots=roots)
        report.results.append(result)
        if launch is None:
            continue
        if not aot_result.ok:
            result.status, result.message = "error", f"ahead-of-time compile failed: {aot_result.error}"
            continue
        result.aot_sha256 = aot_result.analysis.code_sha256   # the code object: the verdict's ground truth
        try:
            result.launch_sha256 = launch_fingerprint(cell, launch)
            result.launch_binding = launch_binding(cell, launch).signature_record()
        except Exception as exc:  # a parse failure of the launch's asm is untrustworthy, not a pass
            result.status, result.message = "error", f"cannot fingerprint the launch: {type(exc).__name__}: {exc}"
            continue
        result.binding_diff = diff_bindings(aot_result.binding, result.launch_binding)
        if emit is not None:
            _emit_pair(emit, cell, launch, aot_result)
        if result.launch_sha256 != result.aot_sha256:
            result.status = "fail"
            overridden = pinned_overrides(saved)
            why = "; ".join(result.binding_diff) or "same signature and attrs (codegen differs)"
            if overridden:
                why += "; the environment sets " + ", ".join(f"{k}={v}" for k, v in overridden.items()) + \
                       " which xisa pins for ahead-of-time compiles"
            result.message = f"fidelity: launch {result.launch_sha256[:12]} != ahead-of-time " \
                             f"{result.aot_sha256[:12]}: {why}"
    return report


def _emit_pair(folder: Path, cell, launch, aot_result) -> None:
    """The launch's stages and xisa's, side by side: DIR/<kernel>/<case>/<target>/{launch,aot}.<stage>."""
    from xisa.compile.cell import analyze_compiled

    out = folder / cell.kernel.name / cell.case / cell.target.name
    out.mkdir(parents=True, exist_ok=True)
    text_stages = cell.target.handler.text_stages
    for stage, content in launch.compiled.asm.items():
        if stage in text_stages:
            (out / f"launch.{stage}").write_text(str(content), encoding="utf-8")
    for stage, content in aot_result.stages.items():
        if stage in text_stages:
            (out / f"aot.{stage}").write_text(str(content), encoding="utf-8")
    (out / "launch.normalized").write_text(analyze_compiled(cell, launch.compiled, launch.compiled.metadata).stream_text)
    if aot_result.analysis is not None:
        (out / "aot.normalized").write_text(aot_result.analysis.stream_text)
    (out / "launch.metadata").write_text(repr(launch.compiled.metadata), encoding="utf-8")
