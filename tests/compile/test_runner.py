"""The worker pool, the result cache and sharding."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from support import FIXTURES


def cells_of(out) -> list[dict]:
    return sorted(json.loads(out.out)["cells"], key=lambda c: (c["kernel"], c["case"], c["target"]))


def comparable(report: dict) -> list[tuple]:
    return [(c["kernel"], c["case"], c["target"], c["verdict"], c["head_sha256"], c["in_scope"])
            for c in sorted(report["cells"], key=lambda c: (c["target"], c["kernel"], c["case"]))]


def test_parallel_and_serial_reports_are_identical(run_xisa, tinyproj, tmp_path):
    serial = run_xisa("compile", "--json", "--jobs", "1", "--no-cache", cwd=tinyproj)
    parallel = run_xisa("compile", "--json", "--jobs", "3", "--no-cache", cwd=tinyproj)
    strip = lambda cells: [{k: v for k, v in c.items() if k != "seconds"} for c in cells]  # noqa: E731
    assert strip(cells_of(serial)) == strip(cells_of(parallel))


def test_hanging_and_crashing_cells_fail_alone(run_xisa, tinyproj):
    for name in ("hang.py", "hang.yaml", "crash.py", "crash.yaml"):
        shutil.copy(FIXTURES / "faulty" / name, tinyproj / "kernels" / name)
    started = time.monotonic()
    out = run_xisa("compile", "--json", "--jobs", "2", "--timeout", "20", "--arch", "gfx942", cwd=tinyproj)
    assert time.monotonic() - started < 120
    assert out.code == 2
    cells = {c["kernel"]: c for c in cells_of(out)}
    assert cells["hang"]["status"] == "error" and "longer than 20 s" in cells["hang"]["error"]
    assert cells["crash"]["status"] == "error" and "died" in cells["crash"]["error"]
    assert cells["scale"]["status"] == "ok" and cells["dot"]["status"] == "ok"


def test_corrupt_cache_entry_is_recompiled(run_xisa, tinyproj, tmp_path):
    cache = tmp_path / "cache"
    env = {"XISA_CACHE_DIR": str(cache)}
    first = run_xisa("compile", "--json", "--arch", "gfx942", cwd=tinyproj, env=env)
    entries = sorted((cache / "results").rglob("*.json"))
    assert len(entries) == 3
    entries[0].write_text('{"key": "broken')
    entries[1].write_text(entries[1].read_text().replace('"sha256": "', '"sha256": "0'))  # still JSON
    second = run_xisa("compile", "--json", "--arch", "gfx942", cwd=tinyproj, env=env)
    assert second.code == 0
    assert [c["sha256"] for c in cells_of(second)] == [c["sha256"] for c in cells_of(first)]
    assert "broken" not in entries[0].read_text()   # rewritten by the recompile
    assert run_xisa("cache", "clear", cwd=tinyproj, env=env).out.startswith("removed 3 cached results")


def test_warm_run_does_not_import_triton(run_xisa, tinyproj, tmp_path):
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache")}
    # warmed by a process as the probe below is one: the result cache keys on the import path
    assert run_xisa("compile", "--arch", "gfx942", cwd=tinyproj, env=env, process=True).code == 0
    probe = tmp_path / "probe.py"
    # sys.path as `python -m xisa` has it (the cwd first): the result cache keys on the import path
    probe.write_text("import os, sys, runpy\nsys.argv=['xisa','compile','--arch','gfx942']\nsys.path[0]=os.getcwd()\n"
                     "try:\n    runpy.run_module('xisa', run_name='__main__')\nexcept SystemExit as e:\n"
                     "    print('TRITON' if 'triton' in sys.modules else 'NO-TRITON', e.code, file=sys.stderr)\n")
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(probe)], cwd=tinyproj, capture_output=True, text=True,
                          env={**os.environ, **env})
    assert "NO-TRITON 0" in proc.stderr


def test_shards_merge_to_the_unsharded_report(run_xisa, tinyproj, tmp_path):
    assert run_xisa("bless", cwd=tinyproj).code == 0
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor + 1.0", "y = x * factor + 3.0"))
    (tinyproj / "golden" / "dot" / "f16_32" / "gfx942.yaml").unlink()
    whole = run_xisa("check", "--format", "json", cwd=tinyproj)
    assert whole.code == 1
    paths = []
    for index in (1, 2, 3):
        path = tmp_path / f"shard-{index}.json"
        out = run_xisa("check", "--shard", f"{index}/3", "--format", "json", "--output", str(path), cwd=tinyproj)
        assert out.code in (0, 1)
        paths.append(str(path))
    shard_cells = [len(json.loads(Path(p).read_text())["cells"]) for p in paths]
    assert sum(shard_cells) == len(json.loads(whole.out)["cells"])
    merged = run_xisa("merge", *paths, "--format", "json", cwd=tinyproj)
    assert merged.code == whole.code == 1
    assert comparable(json.loads(merged.out)) == comparable(json.loads(whole.out))
    missing = run_xisa("merge", paths[0], paths[2], cwd=tinyproj)
    assert missing.code == 2 and "missing shard(s) 2/3" in missing.err
    duplicate = run_xisa("merge", paths[0], paths[0], paths[1], paths[2], cwd=tinyproj)
    assert duplicate.code == 2 and "given twice" in duplicate.err
    other = json.loads(Path(paths[1]).read_text())
    other["toolchain"] = {"triton": "3.6.0"}
    Path(paths[1]).write_text(json.dumps(other))
    mixed = run_xisa("merge", *paths, cwd=tinyproj)
    assert mixed.code == 2 and "different toolchains" in mixed.err


def _cells(places: list[tuple[str, str]]):
    from types import SimpleNamespace

    return [SimpleNamespace(target=SimpleNamespace(name=t), kernel=SimpleNamespace(spec_file=k)) for t, k in places]


@pytest.mark.unit
def test_a_worker_gets_the_cells_its_loads_serve_first():
    """A library that asks the device loads once per target per worker (fla: about a second each): a worker keeps to
    the targets it has, a fresh one starts a target nobody has, and only then does any worker take another's."""
    from types import SimpleNamespace

    from xisa.compile.runner import _Pending

    cells = _cells([("gfx942", "a"), ("sm_90", "a"), ("gfx942", "b"), ("sm_90", "b"), ("gfx942", "a"),
                    ("sm_90", "a")])
    pending = _Pending(cells, list(range(len(cells))))   # longest first, as the runner orders them
    one, two = (SimpleNamespace(targets=[], places=[]) for _ in range(2))
    assert [pending.next_for(one), pending.next_for(two)] == [0, 1]        # one target each
    assert [pending.next_for(one), pending.next_for(two)] == [4, 5]        # the kernel it has loaded, then
    assert [pending.next_for(one), pending.next_for(two)] == [2, 3]        # its target's other kernel
    assert not pending
    late = _Pending(cells, [0, 2, 4, 1])
    first = SimpleNamespace(targets=[], places=[])
    assert [late.next_for(first) for _ in range(4)] == [0, 4, 2, 1]        # its own target's cells, then the rest


@pytest.mark.unit
def test_a_worker_leaves_another_s_target_to_it_when_a_load_costs_more_than_sharing_what_is_left():
    """Cells answered from the stores take ~15 ms, a further load of a library that asks the device ~0.3 s: a worker
    whose targets are done waits rather than load another's target for a few cells, takes it when enough is left,
    and takes it anyway when no worker is busy (the run always goes on)."""
    from types import SimpleNamespace

    from xisa.compile.runner import _Pending

    def run(sm90_cells: int):
        cells = _cells([("gfx942", "a"), ("sm_90", "a"), ("gfx1100", "a")] + [("sm_90", "a")] * sm90_cells)
        pending = _Pending(cells, list(range(len(cells))))
        one, two = (SimpleNamespace(targets=[], places=[]) for _ in range(2))
        assert [pending.next_for(one), pending.next_for(two)] == [0, 1]
        pending.observe(0, 3.0)   # each worker's first cell: its warm-up, neither a cell's cost nor a load's
        pending.observe(1, 3.0)
        for _ in range(10):
            pending.observe(pending.next_for(two), 0.015)
        assert pending.next_for(one) == 2   # a target nobody has: its first cell pays a load
        pending.observe(2, 0.315)
        return pending, one

    few, one = run(40)    # 30 left: 30 * 15 ms / 2 < 0.3 s
    assert few.next_for(one, others_busy=True) is None
    assert few.next_for(one) is not None   # nobody else busy: it takes one
    many, one = run(60)   # 50 left: 50 * 15 ms / 2 > 0.3 s
    assert many.next_for(one, others_busy=True) is not None


@pytest.mark.unit
def test_fresh_workers_start_kernels_nobody_has_before_sharing_one():
    """Issue 35: a module of a package that asks the device imports that package anew (FlagGems' generated kernels: a
    worker's first cells took 13 to 20 s each on an H100). On one target every fresh worker used to take the longest
    cell left, so all 16 workers of an H100 started on the first spec's cells and moved on together, each loading
    nearly every spec: 613 captured FlagGems cells took 97 s. Each worker now starts a spec nobody has, and keeps
    to it."""
    from types import SimpleNamespace

    from xisa.compile.runner import _Pending

    cells = _cells([("sm_90", "a")] * 4 + [("sm_90", "b")] * 3 + [("sm_90", "c")] * 2)
    pending = _Pending(cells, list(range(len(cells))))
    one, two, three = (SimpleNamespace(targets=[], places=[]) for _ in range(3))
    assert [pending.next_for(w, others_busy=True) for w in (one, two, three)] == [0, 4, 7]   # a, b, c: one spec each
    assert [pending.next_for(w, others_busy=True) for w in (one, two, three)] == [1, 5, 8]   # each its own spec's
    assert [pending.next_for(w, others_busy=True) for w in (one, two)] == [2, 6]
    # c is done and every spec is started: with no seconds measured yet, a load counts as long as a cell
    assert pending.next_for(three, others_busy=True) is None   # a's 1 cell left would not pay for loading a again
    assert pending.next_for(three) == 3                        # nobody else busy: it takes it (the run goes on)
    assert not pending


@pytest.mark.unit
def test_a_worker_joins_another_s_kernel_only_where_what_is_left_pays_for_its_load():
    """Once every spec is started, a worker whose specs are done loads another's only where half of what is left there
    outlasts a load (this run's seconds of a worker's first cell of a spec, less a cell's)."""
    from types import SimpleNamespace

    from xisa.compile.runner import _Pending

    def run(a_cells: int):
        cells = _cells([("sm_90", "a")] * a_cells + [("sm_90", "b")] * 2 + [("sm_90", "c")])
        pending = _Pending(cells, list(range(len(cells))))
        one, two = (SimpleNamespace(targets=[], places=[]) for _ in range(2))
        b, c = a_cells, a_cells + 2
        assert [pending.next_for(one), pending.next_for(two)] == [0, b]
        pending.observe(0, 8.0)   # each worker's first cell: its warm-up, neither a cell's cost nor a load's
        pending.observe(b, 8.0)
        for _ in range(10):
            pending.observe(pending.next_for(one), 0.5)
        assert pending.next_for(two) == b + 1
        pending.observe(b + 1, 0.5)
        assert pending.next_for(two) == c   # a spec nobody has: its first cell pays a load
        pending.observe(c, 6.5)
        return pending, two

    few, two = run(20)    # 9 cells of a left: 9 * 0.5 s / 2 < 6 s
    assert few.next_for(two, others_busy=True) is None
    assert few.next_for(two) is not None   # nobody else busy: it takes one
    many, two = run(40)   # 29 left: 29 * 0.5 s / 2 > 6 s
    assert many.next_for(two, others_busy=True) is not None
