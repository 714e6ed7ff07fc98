#!/usr/bin/env python3
"""The GPU proof of `xisa export`: with TRITON_CACHE_DIR at a copy of a bundle, the bundle's cells for the GPU present
run as launches that compile nothing, and their outputs equal a JIT run's.

    python -m xisa export --arch 'sm_90*' -o /tmp/bundle      # on the GPU machine, with its Triton and Python
    python bench/export_gpu_proof.py /tmp/bundle [--spec PATH ...]

From the project the bundle was exported from (its specs name the cells' kernels and `runtime:` checks). The bundle is
copied into a temp folder and its group files pointed at the copy (what `--deploy-dir COPY` would have written); every
selected cell must be found there by `xisa export --verify`'s lookup. Then two processes of their own, each in a
default launch's environment (xisa's pinned variables unset), run each cell's runtime check (`xisa device`'s:
real tensors from a seeded generator, `fn[grid](...)` through Triton's own launch path):
  1. TRITON_CACHE_DIR = the copy: Triton's compilation listener counts the compiles (`cache_hit=False`) and the
     lookups; every key a launch asks for must be a bundle cell's, and the copy must be byte-for-byte unchanged after;
  2. TRITON_CACHE_DIR = an empty folder: a JIT run, which must compile (it shows the listener counts compiles).
Each cell's launch arguments after its check (inputs and outputs) must be equal byte for byte between the two.

Prints one JSON line (`"ok"`); exit 0 when the proof holds, 1 when it does not, 2 when it could not run (no GPU, no
cell of the GPU's target in the bundle, a bundle that is not whole).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))   # a checkout with xisa not installed (`PYTHONPATH=.` works too)


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def _copy_for_launches(bundle: Path, manifest: dict, copy: Path) -> None:
    """The bundle at `copy`, its group files naming `copy` (as an export with --deploy-dir COPY writes them)."""
    from xisa.compile.export.launch_cache import relocate_group

    shutil.copytree(bundle, copy)
    for folder, group_file in {(c["folder"], c["group_file"]) for c in manifest["cells"]}:
        group = copy / folder / group_file
        group.write_text(relocate_group(group.read_text(), Path(manifest["deploy_dir"]), copy))


def _phase(args) -> int:
    """One process's launches: each chosen cell's runtime check, the listener's events, the launch arguments."""
    from xisa.compile.launch.warm import import_compile_modules

    import_compile_modules()   # torch and Triton before any kernel module loads, as `xisa device` has them
    import torch
    from triton import knobs

    from xisa.api.workspace import open_workspace
    from xisa.device.launch import run_check

    events: list[dict] = []

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        events.append({"key": metadata.get("hash"), "name": metadata.get("name"), "cache_hit": bool(cache_hit)})

    knobs.compilation.listener = listener
    ws = open_workspace(spec=[Path(p) for p in args.spec] or None)
    wanted = json.loads(args.cells)
    _, cells = ws.select(arch=None, kernel=None)
    cells = [c for c in cells if c.id in wanted]
    roots = list(ws.project.kernel_roots)
    results = {}
    for cell in cells:
        if not cell.runtime:
            results[cell.id] = {"status": "skip", "message": "its case names no runtime check", "events": [],
                                "tensors": []}
            continue
        first = len(events)
        result, launch = run_check(cell, torch.device("cuda", args.device), roots=roots)
        if torch.cuda.is_available():   # else (a machine without one) the check's result says why it did not run
            torch.cuda.synchronize()
        tensors = [] if launch is None else [v.detach().cpu().clone() for v in (*launch.args, *launch.kwargs.values())
                                             if isinstance(v, torch.Tensor)]
        results[cell.id] = {"status": result.status, "message": result.message, "events": events[first:],
                            "tensors": tensors}
    torch.save(results, args.out)
    return 0


def _run_phase(name: str, cache: Path, work: Path, cells: list[str], args) -> dict:
    from xisa.compile.export.launch_cache import default_launch_environ

    out = work / f"{name}.pt"
    env = {**default_launch_environ(dict(os.environ)), "TRITON_CACHE_DIR": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, __file__, str(args.bundle), "--phase", name, "--out", str(out), "--cells",
               json.dumps(cells), "--device", str(args.device), *[w for p in args.spec for w in ("--spec", p)]]
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the {name} run failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    import torch

    return torch.load(out, weights_only=False)


def _same_bytes(a, b) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def _chosen_cells(manifest: dict, args) -> tuple[list[str], dict]:
    """The bundle's cells of the target the GPU present is (else of its arch), and what the GPU is."""
    from xisa.api.workspace import open_workspace
    from xisa.device.detect import detect_devices

    ws = open_workspace(spec=[Path(p) for p in args.spec] or None)
    devices = [d for d in detect_devices(ws.targets) if d.index == args.device]
    if not devices:
        raise LookupError(f"no GPU with index {args.device} is visible")
    device = devices[0]
    major, dot, minor = device.arch.partition(".")   # CUDA: the compute capability; Triton's arch is 90 for 9.0
    arch = int(major) * 10 + int(minor) if dot and major.isdigit() and minor.isdigit() else device.arch
    same_arch = [c for c in manifest["cells"] if c["gpu_target"][1] == arch]
    mine = [c for c in same_arch if c["target"] == device.target] or same_arch
    gpu = {"name": device.name, "arch": device.arch, "target": device.target}
    return [_cell_id(c) for c in mine], gpu


def _cell_id(cell: dict) -> str:
    from xisa.names import CellKey

    return str(CellKey(cell["kernel"], cell["case"], cell["target"]))


def prove(args) -> dict:
    import triton

    from xisa.api.export import verify
    from xisa.compile.export.bundle import read_manifest

    manifest = read_manifest(args.bundle)
    ids, gpu = _chosen_cells(manifest, args)
    summary = {"kind": "export-gpu-proof", "gpu": gpu, "triton": triton.__version__,
               "python": sys.version.split()[0], "bundle_triton": manifest["toolchain"].get("triton"),
               "bundle_python": manifest["toolchain"]["python"]["version"], "cells": len(ids)}
    if not ids:
        raise LookupError(f"the bundle has no cell for {gpu['arch']} ({gpu['target']})")
    work = Path(tempfile.mkdtemp(prefix="xisa-export-proof-"))
    try:
        copy = work / "bundle"
        _copy_for_launches(args.bundle, manifest, copy)
        found = {_cell_id(c): c["found"] for c in verify(copy).cells}
        summary["verify_found"] = sum(1 for i in ids if found.get(i))
        keys = {c["key"] for c in manifest["cells"]}
        before = _snapshot(copy)
        bundled = _run_phase("bundle", copy, work, ids, args)
        summary.update(_cache_change(before, _snapshot(copy)))
        jit = _run_phase("jit", work / "jit-cache", work, ids, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _judge(summary, ids, bundled, jit, keys)


def _cache_change(before: dict[str, str], after: dict[str, str]) -> dict:
    """What the launches did to the cache folder: every file of the bundle must be as it was, and nothing may be
    added but the host launchers Triton builds there on a first launch (`cuda_utils`, `__triton_launcher`: a `.so`
    each, in a folder of its own, compiled by the C compiler, no kernel). A kernel compile adds an entry (its
    stages and a `__grp__` file)."""
    added = sorted(path for path in after if path not in before and after[path] != "dir")
    return {"bundle_files_unchanged": all(after.get(path) == digest for path, digest in before.items()),
            "entries_added": [path for path in added if not path.endswith(".so")],
            "launcher_builds": sum(1 for path in added if path.endswith(".so"))}


def _judge(summary: dict, ids: list[str], bundled: dict, jit: dict, keys: set[str]) -> dict:
    failures = []
    events = [e for i in ids for e in bundled.get(i, {}).get("events", [])]
    summary["launch_lookups"] = len(events)
    summary["compiles_with_bundle"] = sum(1 for e in events if not e["cache_hit"])
    summary["keys_outside_bundle"] = sorted({e["key"] for e in events if e["key"] not in keys})
    summary["compiles_jit"] = sum(1 for i in ids for e in jit.get(i, {}).get("events", []) if not e["cache_hit"])
    equal = 0
    for cell in ids:
        ours, theirs = bundled.get(cell), jit.get(cell)
        if ours is None and theirs is None:
            failures.append(f"{cell}: not a cell of the project's specs (run from the project the bundle was "
                            "exported from, or give --spec)")
            continue
        if ours is None or theirs is None or ours["status"] != "pass" or theirs["status"] != "pass":
            failures.append(f"{cell}: bundle run {ours and ours['status']} {ours and ours['message']!r}, "
                            f"JIT run {theirs and theirs['status']} {theirs and theirs['message']!r}")
            continue
        if not ours["events"]:
            failures.append(f"{cell}: its check made no launch Triton's listener saw")
        pairs = list(zip(ours["tensors"], theirs["tensors"]))
        if len(ours["tensors"]) != len(theirs["tensors"]) or not all(_same_bytes(a, b) for a, b in pairs):
            failures.append(f"{cell}: the launch's tensors differ from the JIT run's")
        else:
            equal += 1
    summary["outputs_equal"] = equal
    summary["failures"] = failures
    summary["ok"] = (not failures and summary["verify_found"] == len(ids) and summary["compiles_with_bundle"] == 0
                     and not summary["keys_outside_bundle"] and summary["bundle_files_unchanged"]
                     and not summary["entries_added"]
                     and summary["compiles_jit"] > 0 and equal == len(ids))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--spec", action="append", default=[], help="the project's specs (default: its pyproject's)")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--cells", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        return _phase(args)
    try:
        summary = prove(args)
    except Exception as exc:   # the proof could not run: said in the one JSON line
        print(json.dumps({"kind": "export-gpu-proof", "ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 2
    print(json.dumps(summary, sort_keys=True))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
