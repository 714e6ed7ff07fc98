"""Benchmark: what an edit costs a library's check (issue 24, item 1), side by side in one run.

An adopter of fla-core 0.6.0 (its `__init__` imports every op, so each kernel's load reads the whole library):

    python bench/incremental.py                                   # the fla-core wheel in .libs/ of this checkout
    python bench/incremental.py --wheel PATH --arch gfx942 --arch sm_90
    python bench/incremental.py --against 5a4bb6f --arch gfx942 --arch sm_90   # this checkout against a commit

With `--against REV`, each step runs on this checkout and on REV's xisa (`bench/sides.py`: a project, site and cache
of each side's own, the same Python, Triton and torch), one after the other in an alternating order, and the table
gives both sides' seconds and their ratio (this checkout over REV: under 1.00 is faster).

Installs the wheel (and einops) into a folder on PYTHONPATH, captures specs the way docs/capture.md's fla section does
(`xisa capture --no-run --config-policy first` of examples/fla/run_fla.py), then times `xisa check` on the same
cells: cold (empty cache), warm, after a one-line edit to one kernel, with the edit restored, after an unrelated
`pip install` (into a folder that is on PYTHONPATH from the start), and after a comment edit elsewhere in the package.
Beside them, what no check that loads the library in a new process can go below: a fresh Python importing torch,
Triton and the captured kernels' modules after the edit (median of 3), and the changed cells' cold compile seconds.
Each line: seconds, the share of cold, and where the cells came from (`xisa cache info`: result entries, the
back-end store after a load, of those the ones without a front-end pass, compiled). Every check's verdicts are
asserted: the edit changes exactly the cells whose code changed, every other step changes none.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sides import REPO, order, ratio_line, tree_at  # noqa: E402

WHEEL = REPO / ".libs" / "fla_core-0.6.0-py3-none-any.whl"
# Every target of this repository, as the issue measured fla (13: 358 cells); `--arch` picks fewer (the four of an
# earlier default, gfx942 sm_90 gfx1100 sm_80: 114 cells).
TARGETS = tuple(sorted(path.stem for path in (REPO / "targets").glob("*.yaml")))
# The one-line edit: the forward (not reversed) cumsum of one kernel; the reversed case's code stays as it was.
EDITED = "fla/ops/utils/cumsum.py"
KERNEL_DEF = "def chunk_local_cumsum_scalar_kernel("
LINE = "        b_o = tl.cumsum(b_s, axis=0)\n"
EDIT = "        b_o = tl.cumsum(b_s, axis=0) + 1.0\n"
COMMENTED = "fla/__init__.py"   # imported by every load; holds no kernel


def unrelated_wheel(folder: Path) -> Path:
    """A wheel of a package nothing imports (a real one from an index works the same: --unrelated NAME)."""
    name, files = "unrelatedpkg", {"unrelatedpkg/__init__.py": b"VALUE = 1\n"}
    info = f"{name}-1.0.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
            f"{len(data)}" for path, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join(rows + [f"{info}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


class Adopter:
    def __init__(self, work: Path, targets: list[str], kernels: list[str], tree: Path = REPO):
        self.work, self.site, self.extra = work, work / "site", work / "extra"
        self.project, self.cache = work / "proj", work / "cache"
        self.targets, self.errors, self.changed = targets, [], []
        self.seconds: dict[str, float] = {}   # compile seconds per cell id, as the cold check recorded them
        self.floor, self.floor_cells = 0.0, 0  # the edit's changed cells: their cold seconds over the cores
        self.import_seconds = 0.0              # a fresh Python importing torch, Triton and the kernels' modules
        self.arch = [flag for target in targets for flag in ("--arch", target)] + \
            [flag for kernel in kernels for flag in ("--kernel", kernel)]
        self.env = {**os.environ, "XISA_CACHE_DIR": str(self.cache),
                    "PYTHONPATH": os.pathsep.join([str(tree), str(self.site), str(self.extra)])}

    def pip(self, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *args], check=True,
                       env=self.env)

    def xisa(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "xisa", *args], cwd=self.project, env=self.env,
                              capture_output=True, text=True)

    def set_up(self, wheel: Path) -> None:
        self.extra.mkdir(parents=True)
        self.pip("--target", str(self.site), str(wheel), "einops")
        self.project.mkdir()
        shutil.copy(REPO / "examples" / "fla" / "run_fla.py", self.project)
        (self.project / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
        self.xisa("capture", "--no-run", "--config-policy", "first", "--no-check", "--", sys.executable, "run_fla.py")
        if not any((self.project / "captured").glob("*.yaml")):
            sys.exit("bench: the capture wrote no spec")

    def check(self) -> tuple[float, int, dict[str, int], dict]:
        started = time.perf_counter()
        out = self.xisa("check", *self.arch, "--format", "json")
        seconds = time.perf_counter() - started
        if not out.stdout.strip():
            sys.exit(f"bench: xisa check exit {out.returncode}: {out.stderr[-2000:]}")
        verdicts: dict[str, int] = {}
        self.errors, self.changed = [], []
        for cell in json.loads(out.stdout)["cells"]:
            if cell["verdict"] == "changed":
                self.changed.append(f"{cell['kernel']}:{cell['case']}@{cell['target']}")   # a cell id
            verdicts[cell["verdict"]] = verdicts.get(cell["verdict"], 0) + 1
            if cell["verdict"] == "error":
                self.errors.append((cell["kernel"], cell["case"], cell["target"]))
        info = json.loads(self.xisa("cache", "info", "--json").stdout)
        return seconds, out.returncode, verdicts, info["last_run"]

    def time_imports(self, runs: int = 3) -> float:
        """A fresh Python's import of torch, Triton and every captured spec's module, as the check's workers import
        them (no bytecode written: the edited file compiles from source, as it must after an edit); median seconds."""
        import yaml

        modules = sorted({kernel["module"] for spec in (self.project / "captured").glob("*.yaml")
                          for kernel in [yaml.safe_load(spec.read_text())] if kernel.get("module")})
        code = "import torch, triton, triton.compiler\n" + "".join(f"import {name}\n" for name in modules)
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=self.project, check=True, capture_output=True,
                           env={**self.env, "PYTHONDONTWRITEBYTECODE": "1"})
            seconds.append(time.perf_counter() - started)
        return sorted(seconds)[len(seconds) // 2]

    def leave_out_refused(self, targets: list[str]) -> None:
        """What capture's own check does: a target that refuses a case (fla builds its autotuner's configs from the
        device, so a config chosen on this CPU is not among an NVIDIA target's) is left out of the case's targets."""
        refused: dict[tuple[str, str], set[str]] = {}
        for kernel, case, target in self.errors:
            refused.setdefault((kernel, case), set()).add(target)
        for (kernel, case), gone in refused.items():
            spec = self.project / "captured" / f"{kernel}.yaml"
            kept = ", ".join(t for t in targets if t not in gone)
            if not kept:
                sys.exit(f"bench: {kernel}:{case} is refused by every target: {self.errors}")
            replace_once(spec, f"  - name: {case}\n", f"  - name: {case}\n    targets: [{kept}]\n")


def replace_once(path: Path, old: str, new: str, *, after: str = "") -> None:
    text = path.read_text()
    start = text.index(after) if after else 0
    at = text.index(old, start)
    path.write_text(text[:at] + new + text[at + len(old):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, default=WHEEL, help="the fla-core wheel")
    parser.add_argument("--arch", action="append", help=f"targets (default: {' '.join(TARGETS)})")
    parser.add_argument("--unrelated", help="a package to pip install as the unrelated install (default: a wheel "
                                            "made here, so no index is needed)")
    parser.add_argument("--kernel", action="append", default=[], help="only these kernels (a smoke test)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    parser.add_argument("--against", metavar="REV", help="also run every step on REV's xisa, side by side")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="xisa-incremental-"))
    targets = args.arch or list(TARGETS)
    adopters = {"this": Adopter(work / "this", targets, args.kernel)}
    if args.against:
        tree = tree_at(args.against, work / "tree")
        adopters[args.against] = Adopter(work / "other", targets, args.kernel, tree=tree)
    try:
        for adopter in adopters.values():
            adopter.work.mkdir(parents=True)
            adopter.set_up(args.wheel)
        rows = run_steps(list(adopters.values()), args.unrelated)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for (name, adopter), side_rows in zip(adopters.items(), rows):
        print(f"--- {name} ({adopter.env['PYTHONPATH'].split(os.pathsep)[0]})")
        print_rows(side_rows)
        print_floor(adopter, side_rows)
    if args.against:
        print(f"--- side by side: this checkout against {args.against} (seconds; ratio this/{args.against})")
        print(f"{'step':36} {'this':>8} {args.against[:8]:>8} {'ratio':>8}")
        for this_row, other_row in zip(*rows):
            print(ratio_line(this_row[0], {"a": this_row[1], "b": other_row[1]}, "a", "b"))


def run_steps(adopters: list[Adopter], unrelated: str | None) -> list[list[tuple]]:
    """Each step on every side (one after the other, the order alternating from step to step): each side's rows."""
    rows: list[list[tuple]] = [[] for _ in adopters]
    steps = 0

    def step(name: str, *expect_exit: int) -> list[dict[str, int]]:
        nonlocal steps
        found = {}
        for adopter in order(steps, adopters):
            seconds, code, verdicts, counts = adopter.check()
            if code not in expect_exit:
                sys.exit(f"bench: {name}: xisa check exit {code}, expected {expect_exit} ({verdicts})")
            rows[adopters.index(adopter)].append((name, seconds, verdicts, counts))
            if adopter.errors and steps:
                sys.exit(f"bench: {name}: error cells {adopter.errors}")
            found[id(adopter)] = verdicts
        steps += 1
        return [found[id(adopter)] for adopter in adopters]

    step("cold check (empty cache)", 1, 2)   # no goldens yet: every cell `new` (or refused by its target: exit 2)
    for adopter in adopters:
        adopter.seconds = json.loads((adopter.cache / "timings.json").read_text())
        adopter.leave_out_refused(adopter.targets)
        blessed = adopter.xisa("bless", *adopter.arch)
        if blessed.returncode != 0:
            sys.exit(f"bench: bless failed ({adopter.env['PYTHONPATH'].split(os.pathsep)[0]}, exit "
                     f"{blessed.returncode}): {blessed.stderr[-3000:]}")
    step("warm check", 0)
    originals = []
    for adopter in adopters:
        edited = adopter.site / EDITED
        originals.append(edited.read_text())
        replace_once(edited, LINE, EDIT, after=KERNEL_DEF)
    if not all(verdicts.get("changed") for verdicts in step("one-line edit to one kernel", 1)):
        sys.exit("bench: the edit changed no cell")
    for adopter, original in zip(adopters, originals):
        # What no key can save: the changed cells compiled whole, at their cold compile seconds over the workers.
        adopter.floor = sum(adopter.seconds.get(cell, 0.0) for cell in adopter.changed) / len(os.sched_getaffinity(0))
        adopter.floor_cells = len(adopter.changed)
        adopter.import_seconds = adopter.time_imports()
        (adopter.site / EDITED).write_text(original)
    step("the edit restored", 0)
    for adopter in adopters:
        adopter.pip("--target", str(adopter.extra), unrelated or str(unrelated_wheel(adopter.work)))
    step("unrelated pip install", 0)
    for adopter in adopters:
        package_init = adopter.site / COMMENTED
        package_init.write_text(package_init.read_text() + "# a comment elsewhere in the package\n")
    step("comment elsewhere in the package", 0)
    return rows


def print_rows(rows: list[tuple]) -> None:
    cold = rows[0][1]
    cells, refused = sum(rows[1][2].values()), rows[0][2].get("error", 0)
    print(f"machine: {os.uname().machine}, {len(os.sched_getaffinity(0))} cores, Python {sys.version.split()[0]}; "
          f"{cells} cells ({refused} more refused by their target in the cold check, then left out as capture's "
          "check leaves them out)")
    print(f"{'step':36} {'seconds':>8} {'of cold':>8}  {'results':>7} {'back-end':>8} {'no front':>8} "
          f"{'compiled':>8}  verdicts")
    for name, seconds, verdicts, counts in rows:
        shown = ", ".join(f"{count} {verdict}" for verdict, count in sorted(verdicts.items()))
        print(f"{name:36} {seconds:8.1f} {seconds / cold:8.1%}  {counts['results']:7} {counts['backend']:8} "
              f"{counts['front_end']:8} {counts['compiled']:8}  {shown}")


def print_floor(adopter: Adopter, rows: list[tuple]) -> None:
    cold = rows[0][1]
    print(f"the edit's floor: its {adopter.floor_cells} changed cells' cold compile seconds over the cores, "
          f"{adopter.floor:.1f} s = {adopter.floor / cold:.1%} of cold")
    print(f"a fresh Python importing torch, Triton and the kernels' modules after the edit (what any check that loads "
          f"the library in a new process pays before its first cell): {adopter.import_seconds:.1f} s = "
          f"{adopter.import_seconds / cold:.1%} of cold; the edit took {rows[2][1] / adopter.import_seconds:.2f}x that")


if __name__ == "__main__":
    main()
