"""What goldens cost in a repository, per layout: committed bytes per cell on a fresh adoption, and what a
toolchain upgrade adds to the packed git history.

For each layout (`full`: stream files and source lines committed; `compact`: the default) a scratch git
repository gets the corpus's kernels and targets, `xisa bless` with toolchain A, a commit, `git gc`, then
`xisa bless` with toolchain B (another Triton: `--b-python`; its goldens differ in nearly every cell), a
commit, `git gc`. Printed side by side from one run: files and bytes under golden/ per cell, and the growth
of `git count-objects -v`'s size-pack from A to B, scaled to 1,000 cells.

    python bench/golden_size.py --b-python /tmp/t39/bin/python [--arch gfx942 --kernel gemm ...]

Both toolchains' compiles are cached (one cache folder per Python, shared by the layouts), so the second
layout costs no compile. Pack sizes are measured on a clone of each revision's history alone, after a plain
`git gc` and after `git gc --aggressive`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYOUTS = ("full", "compact")


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode not in ok:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}) in {cwd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "b@b"}
    return run(["git", *args], repo, env)


def pack_kib(repo: Path, revision: str, *, aggressive: bool) -> int:
    """`git count-objects -v` (size-pack + loose) of a clone of `revision`'s history alone, after `git gc`."""
    git(repo, "branch", "-f", "measured", revision)
    clone = repo.parent / f"{repo.name}-measured"
    shutil.rmtree(clone, ignore_errors=True)
    git(repo.parent, "clone", "-q", "--no-local", "--single-branch", "--branch", "measured", repo.name, clone.name)
    git(clone, "gc", "-q", *(["--aggressive"] if aggressive else []), "--prune=now")
    stats = dict(line.split(": ", 1) for line in git(clone, "count-objects", "-v").splitlines())
    shutil.rmtree(clone)
    return int(stats["size-pack"]) + int(stats["size"])


def golden_bytes(repo: Path, revision: str) -> tuple[int, int, int]:
    """(YAML files, all files, bytes) under golden/ at `revision`."""
    rows = [line.split() for line in git(repo, "ls-tree", "-r", "-l", revision, "golden").splitlines()]
    return sum(r[4].endswith(".yaml") for r in rows), len(rows), sum(int(r[3]) for r in rows)


def bless(python: str, repo: Path, cache: Path, select: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(REPO), XISA_CACHE_DIR=str(cache))
    # exit 1: an expectation fails under the other toolchain; the goldens are written all the same
    out = run([python, "-m", "xisa", "bless", "--quiet", *select], repo, env, ok=(0, 1))
    return next((line for line in out.splitlines() if " written, " in line), out.strip().splitlines()[-1])


def scratch_repo(root: Path, layout: str) -> Path:
    repo = root / layout
    for name in ("kernels", "targets"):
        shutil.copytree(REPO / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "pyproject.toml").write_text(f'[tool.xisa]\nspecs = ["kernels"]\ngolden = "golden"\n'
                                         f'golden_layout = "{layout}"\n')
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "sources")
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a-python", default=sys.executable, help="the Python of toolchain A (default: this one)")
    parser.add_argument("--b-python", required=True, help="the Python of toolchain B (another Triton)")
    parser.add_argument("--arch", action="append", default=[])
    parser.add_argument("--kernel", action="append", default=[])
    parser.add_argument("--work", type=Path, help="keep the scratch repositories and both caches here (a rerun "
                                                  "compiles nothing); default: a temporary folder")
    parser.add_argument("--measure-only", action="store_true",
                        help="measure the repositories a previous run left in --work, blessing nothing")
    args = parser.parse_args()
    if args.measure_only and not args.work:
        parser.error("--measure-only needs --work")
    select = [f"--arch={a}" for a in args.arch] + [f"--kernel={k}" for k in args.kernel]
    versions = [run([py, "-c", "import triton; print(triton.__version__)"], REPO).strip()
                for py in (args.a_python, args.b_python)]
    with tempfile.TemporaryDirectory(prefix="xisa-golden-size-") as tmp:
        root = args.work or Path(tmp)
        rows = []
        for layout in LAYOUTS:
            repo = root / layout
            if not args.measure_only:
                shutil.rmtree(repo, ignore_errors=True)
                scratch_repo(root, layout)
                for python, cache, version in ((args.a_python, "cache-a", versions[0]),
                                               (args.b_python, "cache-b", versions[1])):
                    print(f"{layout}: bless with Triton {version}: {bless(python, repo, root / cache, select)}")
                    git(repo, "add", "-A")
                    git(repo, "commit", "-q", "-m", f"goldens, Triton {version}")
            cells, files, size = golden_bytes(repo, "HEAD~1")
            packs = [pack_kib(repo, rev, aggressive=aggressive) for aggressive in (False, True)
                     for rev in ("HEAD~1", "HEAD")]
            rows.append((layout, cells, files, size, packs))
    print(f"toolchain A: Triton {versions[0]}, B: Triton {versions[1]}; selection: {' '.join(select) or 'all cells'}")
    print(f"{'layout':8} {'cells':>5} {'files':>5} {'golden KiB':>10} {'B/cell':>7} {'gc':>10} {'pack A KiB':>10} "
          f"{'pack B KiB':>10} {'upgrade KiB':>11} {'per 1,000 cells':>15}")
    for layout, cells, files, size, packs in rows:
        for gc, (before, after) in (("gc", packs[:2]), ("gc --aggr.", packs[2:])):
            growth = after - before
            print(f"{layout:8} {cells:5d} {files:5d} {size / 1024:10.0f} {size / cells:7.0f} {gc:>10} {before:10d} "
                  f"{after:10d} {growth:11d} {growth / cells * 1000 / 1024:11.1f} MiB")
    full, compact = rows
    print(f"compact/full: {compact[3] / full[3]:.3f} of the bytes, {compact[2] / full[2]:.2f} of the files, "
          f"{(compact[4][1] - compact[4][0]) / max(1, full[4][1] - full[4][0]):.3f} of the upgrade's pack growth (gc)")

if __name__ == "__main__":
    main()
