"""Benchmark: what `xisa ab` costs against one cold `xisa check`, side by side in one run.

    python bench/ab.py                                   # the corpus; side B: ../venv-t39 if present, else a knob
    python bench/ab.py --arch gfx942 --arch sm_90        # a subset
    python bench/ab.py --b-python ../venv-3.9/bin/python --b-env TRITON_HIP_USE_BLOCK_PINGPONG=1
    python bench/ab.py --both-cold                       # also `xisa ab` with nothing cached, against two cold checks

In a fresh cache folder: (1) `xisa check` cold (every cell compiled); (2) `xisa ab` whose side A is this
Python, now warm from (1), and whose side B (another Triton or a knob) is cold. Prints each wall time and
ab/check: the A/B should cost about one cold compile, since side A comes from the cache. With --both-cold,
(3) `xisa ab` in another fresh cache folder, both sides cold, against twice (1).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECOND_VENV = REPO.parent / "venv-t39" / "bin" / "python"   # beside the checkout, as docs/ab.md makes it


def timed(command: list[str], cache: Path, extra_env: dict[str, str] | None = None) -> tuple[float, int, str]:
    env = {**os.environ, "XISA_CACHE_DIR": str(cache), **(extra_env or {})}
    env.pop("CI", None)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()[-1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", default=[])
    parser.add_argument("--kernel", action="append", default=[])
    parser.add_argument("--b-python", default=str(SECOND_VENV) if SECOND_VENV.exists() else None)
    parser.add_argument("--b-env", action="append", default=[])
    parser.add_argument("--both-cold", action="store_true")
    args = parser.parse_args()
    if not args.b_python and not args.b_env:
        args.b_env = ["AMDGCN_USE_BUFFER_OPS=0"]
    xisa = [sys.executable, "-m", "xisa"]
    selection = [w for a in args.arch for w in ("--arch", a)] + [w for k in args.kernel for w in ("--kernel", k)]
    side_b = (["--b-python", args.b_python] if args.b_python else []) + [w for e in args.b_env for w in ("--b-env", e)]
    work = Path(tempfile.mkdtemp(prefix="xisa-bench-ab-"))
    try:
        print(f"selection: {' '.join(selection) or 'the whole corpus'}; side B: {' '.join(side_b)}; "
              f"{len(os.sched_getaffinity(0))} cores", flush=True)
        check_s, code, last = timed([*xisa, "check", "--quiet", *selection], work / "cache")
        print(f"cold xisa check:          {check_s:7.1f} s  (exit {code}: {' '.join(last)})", flush=True)
        ab_s, code, last = timed([*xisa, "ab", "--quiet", *selection, *side_b], work / "cache")
        print(f"xisa ab, A warm, B cold:  {ab_s:7.1f} s  (exit {code}: {' '.join(last)})", flush=True)
        print(f"ab / cold check:          {ab_s / check_s:7.2f}", flush=True)
        if args.both_cold:
            both_s, code, last = timed([*xisa, "ab", "--quiet", *selection, *side_b], work / "cold")
            print(f"xisa ab, both cold:       {both_s:7.1f} s  (exit {code})", flush=True)
            if args.b_python:   # the two cold compiles it needs: this Triton's (the check above) and side B's
                env_b = {"PYTHONPATH": str(REPO)}
                b_s, code, _ = timed([args.b_python, "-m", "xisa", "compile", "--quiet", *selection], work / "cold-b",
                                     extra_env=env_b)
                print(f"cold compile, side B:     {b_s:7.1f} s  (exit {code})", flush=True)
                print(f"ab both cold / (check + side B's compile): {both_s / (check_s + b_s):7.2f}", flush=True)
            else:
                print(f"ab both cold / 2 checks:  {both_s / (2 * check_s):7.2f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
