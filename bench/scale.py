"""Scale benchmark: a generated family of this repository's own kernels (thousands of cells) through a cold
bless, a cold check, a warm check and a sharded check, measured side by side in one run.

    python bench/scale.py                       # 2,080 cells: 160 cases of kv_dequant and decode_reduce x 13 targets
    python bench/scale.py --cells 300           # the first 300 of them (what a 2-core machine does in minutes)
    python bench/scale.py --cells 2080 --shards 2,4,8,16 --runner-cores 4 --budget-s 600 --setup-s 180
    python bench/scale.py --cells 300 --against 5a4bb6f   # this checkout against a commit, side by side

With `--against REV`: the cold bless, the cold check and the warm check (median of 3) on this checkout and on REV's
xisa (`bench/sides.py`: a project copy and cache of each side's own), each step on both sides one after the other in
an alternating order, then each step's seconds and ratio (this checkout over REV: under 1.00 is faster).

The family: `kernels/kv_dequant.py`'s kv_dequant_kernel (head dims 64/128/256, fp8 and int8 codes, 4 row blocks,
1/2/4/8 warps) and `kernels/decode_attention.py`'s decode_reduce_kernel (head dims 64 to 512, 4 split blocks,
1/2/4/8 warps), each case on all 13 targets: every cell a distinct Triton specialization (no two share a
compile). The kernel files are copied into a scratch project, so this checkout's goldens and cache are untouched.

Printed: the cell count; the cold `xisa bless` (empty cache, no recorded timings) and the cold
`xisa check --no-cache` (the timings the bless recorded order it longest-first) against the ideal, the sum
of the per-cell compile seconds the check recorded divided by the cores; the warm `xisa check` (median of 3)
against the cold check; the peak resident memory of each worker and of the parent process (read from
/proc while the cold check runs); then the shard plans `xisa shards` makes from the recorded timings
(slowest shard over the mean, against the cell-hash split), a real sharded check (every shard cold at once,
each with cores/N workers: its wall seconds and its recorded compile seconds; then `xisa merge`), and how many runners of --runner-cores cores
keep a check of this family's --ci-cells cells under --budget-s wall.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sides import REPO, order, ratio_line, tree_at  # noqa: E402

TARGETS = ["gfx1100", "gfx1151", "gfx1200", "gfx1201", "gfx90a", "gfx942", "gfx950",
           "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
KERNEL_FILES = ["__init__.py", "check_utils.py", "kv_formats.py", "kv_dequant.py", "decode_attention.py"]


def kv_dequant_cases() -> list[str]:
    cases = []
    for head_dim in (64, 128, 256):
        for fmt, code in ((1, "u8"), (2, "i8")):
            for rows in (8, 16, 32, 64):
                for warps in (1, 2, 4, 8):
                    cases.append(
                        f"  - name: d{head_dim}_f{fmt}_r{rows}_w{warps}\n"
                        f"    args:\n"
                        f"      codes_ptr: {{tensor: {code}, shape: [65536, 8, {head_dim}]}}\n"
                        f"      scales_ptr: {{tensor: fp32, shape: [65536, 8]}}\n"
                        f"      idx_ptr: {{tensor: i32, shape: [8192]}}\n"
                        f"      out_ptr: {{tensor: bf16, shape: [8192, 8, {head_dim}]}}\n"
                        f"      n_rows: 8192\n      stride_code_slot: {8 * head_dim}\n"
                        f"      stride_code_head: {head_dim}\n      stride_scale_slot: 8\n"
                        f"      stride_out_row: {8 * head_dim}\n      stride_out_head: {head_dim}\n"
                        f"    constexprs: {{HEAD_DIM: {head_dim}, KV_FMT: {fmt}, BLOCK_ROWS: {rows}, READER: 0}}\n"
                        f"    options: {{num_warps: {warps}, num_stages: 1}}\n")
    return cases


def decode_reduce_cases() -> list[str]:
    cases = []
    for head_dim in (64, 128, 256, 512):
        for block_s in (8, 16, 32, 64):
            for warps in (1, 2, 4, 8):
                splits = 64
                cases.append(
                    f"  - name: d{head_dim}_s{block_s}_w{warps}\n"
                    f"    args:\n"
                    f"      part_out_ptr: {{tensor: fp32, shape: [8, 16, {splits}, {head_dim}]}}\n"
                    f"      part_lse_ptr: {{tensor: fp32, shape: [8, 16, {splits}]}}\n"
                    f"      out_ptr: {{tensor: bf16, shape: [8, 16, {head_dim}]}}\n"
                    f"      num_splits: {splits}\n      stride_pb: {16 * splits * head_dim}\n"
                    f"      stride_ph: {splits * head_dim}\n      stride_psplit: {head_dim}\n"
                    f"      stride_lb: {16 * splits}\n      stride_lh: {splits}\n"
                    f"      stride_ob: {16 * head_dim}\n      stride_oh: {head_dim}\n"
                    f"    constexprs: {{HEAD_DIM: {head_dim}, BLOCK_S: {block_s}}}\n"
                    f"    options: {{num_warps: {warps}, num_stages: 1}}\n")
    return cases


def generated_project(folder: Path, cells: int) -> int:
    """A project of the family's first `cells` cells (cases interleaved across the two kernels, each case on
    all 13 targets, the last one on fewer); the number of cells it has."""
    (folder / "kernels").mkdir(parents=True)
    for name in KERNEL_FILES:
        shutil.copy(REPO / "kernels" / name, folder / "kernels" / name)
    (folder / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["kernels"]\n')
    families = {"scale_kv_dequant": ("kv_dequant.py", "kv_dequant_kernel", kv_dequant_cases()),
                "scale_decode_reduce": ("decode_attention.py", "decode_reduce_kernel", decode_reduce_cases())}
    chosen: dict[str, list[str]] = {name: [] for name in families}
    queues = {name: list(spec[2]) for name, spec in families.items()}
    total = 0
    while total < cells and any(queues.values()):
        for name, queue in queues.items():
            if queue and total < cells:
                case = queue.pop(0)
                targets = TARGETS[:min(len(TARGETS), cells - total)]
                chosen[name].append(case + f"    targets: [{', '.join(targets)}]\n")
                total += len(targets)
    for name, (source, function, _) in families.items():
        if chosen[name]:
            (folder / "kernels" / f"{name}.yaml").write_text(
                f"name: {name}\nsource: {source}\nfunction: {function}\ncases:\n" + "".join(chosen[name]))
    return total


class MemorySampler(threading.Thread):
    """Peak resident memory (VmHWM) of a process and of each of its children (xisa's workers; the tools they run,
    ptxas and nvdisasm, are not counted), read from /proc."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peaks, self.done = pid, {}, threading.Event()

    def _children(self, pid: int) -> list[int]:
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def run(self) -> None:
        while not self.done.is_set():
            for pid in [self.pid, *self._children(self.pid)]:
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peaks[pid] = max(self.peaks.get(pid, 0), int(line.split()[1]) // 1024)
                except OSError:
                    pass
            self.done.wait(0.2)


def xisa(args: list[str], project: Path, env: dict[str, str], *, sample: bool = False,
         ok: tuple[int, ...] = (0,)) -> tuple[float, subprocess.CompletedProcess, dict[int, int]]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "xisa", *args], cwd=project, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = MemorySampler(proc.pid) if sample else None
    if sampler:
        sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - started
    if sampler:
        sampler.done.set()
        sampler.join()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if proc.returncode not in ok:
        sys.exit(f"xisa {' '.join(args)} exited {proc.returncode}:\n{err[-3000:]}")
    return seconds, done, (dict(sampler.peaks) if sampler else {})


def shard_table(project: Path, env: dict[str, str], timings: Path, counts: list[int]) -> None:
    """`xisa shards N --timings` (its printed slowest/mean) against the cell-hash split weighed by the same timings."""
    sys.path.insert(0, str(REPO))
    from xisa.spec.shard import cell_weights, shard_of

    recorded = json.loads(timings.read_text())
    weights = cell_weights(sorted(recorded), recorded)
    print(f"{'shards':>7}{'by timings: slowest/mean':>30}{'by cell hash: slowest/mean':>30}")
    for count in counts:
        _, proc, _ = xisa(["shards", str(count), "--timings", str(timings), "--format", "json"], project, env)
        plan = json.loads(proc.stdout)
        if plan["cells"] != len(recorded):
            sys.exit(f"xisa shards planned {plan['cells']} cells, {len(recorded)} recorded")
        hashed = [0] * count
        for cid, weight in weights.items():
            hashed[shard_of(cid, count)] += weight / 1000
        mean = sum(hashed) / count
        print(f"{count:>7}{plan['slowest_over_mean']:>12.3f} ({plan['slowest_seconds']:.1f} s / {plan['mean_seconds']:.1f} s)"
              f"{max(hashed) / mean:>12.3f} ({max(hashed):.1f} s / {mean:.1f} s)", flush=True)


def sharded_run(project: Path, env: dict[str, str], timings: Path, count: int, scratch: Path, cores: int) -> None:
    """All shards at once (as a CI matrix runs them, so that the machine's other load falls on each alike), each
    cold (`--no-cache`, a cache of its own) with cores/count workers; then `xisa merge` of their reports."""
    jobs = max(1, cores // count)
    plan = scratch / "plan-timings.json"            # the one file every shard splits by, as the workflow's artifact
    shutil.copy(timings, plan)
    reports = [scratch / f"shard-{index}.json" for index in range(1, count + 1)]
    walls: list[float] = [0.0] * count
    caches = [scratch / f"shard-cache-{index}" for index in range(1, count + 1)]

    def one(index: int) -> None:
        caches[index].mkdir(mode=0o700)
        walls[index] = xisa(["check", "--no-cache", "--quiet", "--jobs", str(jobs), "--shard", f"{index + 1}/{count}",
                             "--timings", str(plan), "--format", "json", "-o", str(reports[index])], project,
                            {**env, "XISA_CACHE_DIR": str(caches[index])})[0]

    threads = [threading.Thread(target=one, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorded = [sum(json.loads((cache / "timings.json").read_text()).values()) for cache in caches]
    mean_wall, mean_rec = statistics.mean(walls), statistics.mean(recorded)
    print(f"sharded check, {count} shards at once, each cold with {jobs} worker(s): wall "
          + ", ".join(f"{w:.1f}" for w in walls) + f" s (slowest/mean {max(walls) / mean_wall:.3f}); "
          "recorded compile seconds " + ", ".join(f"{r:.1f}" for r in recorded)
          + f" (slowest/mean {max(recorded) / mean_rec:.3f})", flush=True)
    _, merged, _ = xisa(["merge", *map(str, reports), "--format", "json"], project, env)
    data = json.loads(merged.stdout)
    print(f"xisa merge of the {count} reports: exit {data['exit_code']}, {len(data['cells'])} cells, "
          + ", ".join(f"{k}: {v}" for k, v in data["counts"].items()), flush=True)


def side_by_side(args) -> None:
    """The cold bless, the cold check and the warm check on this checkout and on `args.against`, interleaved."""
    scratch = Path(tempfile.mkdtemp(prefix="xisa-scale-"))
    try:
        sides = {"this": REPO, args.against: tree_at(args.against, scratch / "tree")}
        envs, projects = {}, {}
        for name, tree in sides.items():
            projects[name] = scratch / f"project-{len(projects)}"
            cells = generated_project(projects[name], args.cells)
            env = {k: v for k, v in os.environ.items() if k not in ("CI", "XISA_CACHE_DIR")}
            env.update(XISA_CACHE_DIR=str(scratch / f"cache-{len(envs)}"),
                       PYTHONPATH=os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")])))
            envs[name] = env
        jobs = ["--jobs", str(args.jobs or len(os.sched_getaffinity(0)))]
        print(f"machine: {os.uname().machine}, {len(os.sched_getaffinity(0))} cores available; {cells} cells; "
              f"this checkout against {args.against}", flush=True)
        steps = [("cold bless (empty cache)", ["bless", "--quiet", *jobs], 1),
                 ("cold check (--no-cache)", ["check", "--quiet", "--no-cache", *jobs], 1),
                 ("warm check (median of 3)", ["check", "--quiet", *jobs], 3)]
        print(f"{'step':36} {'this':>8} {args.against[:8]:>8} {'ratio':>8}")
        for number, (name, command, runs) in enumerate(steps):
            seconds: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(runs):
                for side in order(number, list(sides)):
                    seconds[side].append(xisa(command, projects[side], envs[side])[0])
            medians = {side: statistics.median(values) for side, values in seconds.items()}
            print(ratio_line(name, medians, "this", args.against), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=2080, help="cells of the family (default: all 2,080)")
    parser.add_argument("--jobs", type=int, default=0, help="workers (0: the cores available)")
    parser.add_argument("--shards", default="2,4,8,16", help="shard counts to plan (comma-separated)")
    parser.add_argument("--shard-run", type=int, default=4, help="run a sharded check of this many shards (0: none)")
    parser.add_argument("--ci-cells", type=int, default=2000, help="cells of the CI check to size (default 2,000)")
    parser.add_argument("--runner-cores", type=int, default=4, help="cores of one CI runner (GitHub's ubuntu-latest: 4)")
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall seconds the CI check may take")
    parser.add_argument("--setup-s", type=float, default=180.0, help="seconds a runner spends before the check")
    parser.add_argument("--keep", type=Path, help="keep the scratch project in this (new) folder")
    parser.add_argument("--against", metavar="REV", help="cold bless, cold and warm check against REV's xisa, side by side")
    args = parser.parse_args()
    if args.against:
        side_by_side(args)
        return
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="xisa-scale-"))
    if args.keep:
        args.keep.mkdir(parents=True)
    project = scratch / "project"
    cells = generated_project(project, args.cells)
    cache = scratch / "cache"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "XISA_CACHE_DIR")}
    env.update(XISA_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    cores = args.jobs or len(os.sched_getaffinity(0))
    jobs = ["--jobs", str(cores)]
    print(f"machine: {os.uname().machine}, {len(os.sched_getaffinity(0))} cores available, {cores} workers, "
          f"Python {sys.version.split()[0]}; {cells} cells", flush=True)
    try:
        bless_s, _, _ = xisa(["bless", "--quiet", *jobs], project, env)
        timings = cache / "timings.json"
        bless_sum = sum(json.loads(timings.read_text()).values())
        check_s, _, peaks = xisa(["check", "--quiet", "--no-cache", *jobs], project, env, sample=True)
        recorded = json.loads(timings.read_text())
        if len(recorded) != cells:
            sys.exit(f"the cold check recorded {len(recorded)} timings for {cells} cells")
        ideal = sum(recorded.values()) / cores
        print(f"cold bless (no timings): {bless_s:.1f} s, ideal {bless_sum / cores:.1f} s: "
              f"ideal/cold {bless_sum / cores / bless_s:.3f}", flush=True)
        print(f"cold check (longest first): {check_s:.1f} s, ideal {ideal:.1f} s "
              f"(sum of per-cell seconds {sum(recorded.values()):.1f} / {cores} cores): ideal/cold {ideal / check_s:.3f}; "
              f"{1000 * check_s / cells:.0f} ms a cell, {sum(recorded.values()) / cells:.3f} core-s a cell", flush=True)
        warm = [xisa(["check", "--quiet", *jobs], project, env)[0] for _ in range(3)]
        print(f"warm check: {statistics.median(warm):.2f} s (median of "
              f"{', '.join(f'{w:.2f}' for w in warm)}): warm/cold {statistics.median(warm) / check_s:.2%}", flush=True)
        parent = min(peaks) if peaks else None
        workers = sorted(v for pid, v in peaks.items() if pid != parent)
        if parent is not None:
            print(f"peak memory: parent {peaks[parent]} MiB; {len(workers)} workers, each "
                  f"{workers[0] if workers else 0} to {workers[-1] if workers else 0} MiB", flush=True)
        shard_table(project, env, timings, [int(n) for n in args.shards.split(",") if n])
        if args.shard_run:
            sharded_run(project, env, timings, args.shard_run, scratch, cores)
        core_s = sum(recorded.values()) / cells * args.ci_cells
        efficiency = ideal / check_s
        runners = 1
        while core_s / runners / args.runner_cores / efficiency + args.setup_s > args.budget_s and runners < 1000:
            runners += 1
        print(f"CI: {args.ci_cells} cells of this family = {core_s:.0f} core-s; at the measured ideal/cold "
              f"{efficiency:.3f}, {runners} runner(s) of {args.runner_cores} cores keep a cold check under "
              f"{args.budget_s:.0f} s wall with {args.setup_s:.0f} s of setup each "
              f"({core_s / runners / args.runner_cores / efficiency + args.setup_s:.0f} s)")
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
