"""What a CI log needs: progress lines on stderr when it is not a terminal, `xisa --version`, shards from Buildkite's
parallel-job variables, and `xisa shards --format json` listing each shard's cells as an exact, disjoint cover."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from support import copy_tinyproj, xisa_process
from xisa import __version__
from xisa.compile.worker.result import CellResult
from xisa.errors import UsageError
from xisa.render.progress import Heartbeat, LineProgress, line_progress, progress_interval
from xisa.spec.shard import shard_from_environment

OK = CellResult(kernel="k", case="c", target="gfx942", status="ok")
FAILED = CellResult(kernel="k", case="c", target="gfx942", status="error", error="boom")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.unit
def test_progress_lines_say_cells_done_of_total_elapsed_and_rate():
    clock, lines = FakeClock(), []
    progress = LineProgress(75, write=lines.append, interval=10, clock=clock)
    clock.now += 4
    progress.advance(OK)
    assert lines == []                                   # under the interval: nothing yet
    clock.now += 6
    progress.advance(FAILED)
    assert lines == ["xisa: 2/75 cells, 1 errors, 10 s, 0.20 cells/s"]
    clock.now += 9
    progress.tick()
    assert len(lines) == 1
    clock.now += 1                                       # a slow cell: the timer's tick still writes a line
    progress.tick()
    assert lines[-1] == "xisa: 2/75 cells, 1 errors, 20 s, 0.10 cells/s"
    progress.finish()
    assert lines[-1] == "xisa: 2/75 cells, 1 errors, 20 s, 0.10 cells/s (done)"


@pytest.mark.unit
def test_a_short_run_prints_no_progress():
    clock, lines = FakeClock(), []
    progress = LineProgress(3, write=lines.append, interval=10, clock=clock)
    for _ in range(3):
        clock.now += 1
        progress.advance(OK)
    progress.finish()
    assert lines == []


@pytest.mark.unit
def test_the_timer_writes_while_no_cell_finishes():
    """A cell that compiles for minutes still gets its lines: a thread ticks (here with a short interval)."""
    lines, seen = [], threading.Event()

    def write(line: str) -> None:
        lines.append(line)
        seen.set()

    with line_progress(10, interval=0.01, write=write):
        assert seen.wait(60), "no progress line from the timer"
    assert lines[0].startswith("xisa: 0/10 cells, ") and lines[-1].endswith("(done)")


@pytest.mark.unit
def test_a_capture_says_it_is_running_and_keeps_quiet_while_cells_are_counted():
    """The program `xisa capture` runs has no cells to count: a heartbeat says it runs, every interval; while the
    new cases compile, their own progress lines speak instead."""
    clock, lines = FakeClock(), []
    beat = Heartbeat("capture: the command is running", write=lines.append, interval=10, clock=clock)
    clock.now += 9
    beat.tick()
    assert lines == []
    clock.now += 1
    beat.tick()
    assert lines == ["xisa: capture: the command is running, 10 s"]
    with line_progress(5, interval=3600, write=lines.append):
        clock.now += 10
        beat.tick()
    assert lines == ["xisa: capture: the command is running, 10 s"]
    clock.now += 10
    beat.tick()
    assert lines[-1] == "xisa: capture: the command is running, 30 s"


@pytest.mark.unit
@pytest.mark.parametrize("value,seconds", [(None, 10.0), ("2.5", 2.5), ("0", 0.0), ("soon", 10.0), ("-1", 10.0)])
def test_progress_interval_from_the_environment(value, seconds):
    assert progress_interval({} if value is None else {"XISA_PROGRESS_SECONDS": value}) == seconds


def test_check_writes_progress_lines_to_a_log(tmp_path):
    project = copy_tinyproj(tmp_path / "proj")
    out = xisa_process("bless", "-j", "1", "--no-cache", cwd=project, env={"XISA_PROGRESS_SECONDS": "0"})
    assert out.code == 0, out.err
    lines = [line for line in out.err.splitlines() if line.startswith("xisa: ") and " cells" in line]
    assert lines and lines[-1].startswith("xisa: 8/8 cells, ") and lines[-1].endswith("cells/s (done)"), out.err
    assert "xisa: 8/8" not in out.out                     # diagnostics on stderr, results on stdout


def test_version(tmp_path):
    from importlib import metadata

    out = xisa_process("--version", cwd=tmp_path)
    assert out.code == 0 and out.err == ""
    assert out.out.startswith(f"xisa {__version__} (triton {metadata.version('triton')}, python 3.")


def test_check_takes_its_shard_from_buildkite(tmp_path):
    """A Buildkite step with `parallelism: 4` runs `xisa check` as is: job 1 (0-based) checks shard 2/4, and the
    shards' JSON lists the same cells; --shard wins over the variables."""
    project = copy_tinyproj(tmp_path / "proj")
    assert xisa_process("bless", "-j", "1", cwd=project).code == 0
    env = {"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}
    out = xisa_process("check", "-j", "1", "--format", "json", cwd=project, env=env)
    assert out.code == 0, out.err
    report = json.loads(out.out)
    assert report["shard"] == [2, 4] and "--shard 2/4 from BUILDKITE_PARALLEL_JOB" in out.err
    plan = json.loads(xisa_process("shards", "4", "--format", "json", cwd=project).out)
    assert sorted(f"{c['kernel']}:{c['case']}@{c['target']}" for c in report["cells"]) == \
        sorted(plan["shards"][1]["cell_ids"])
    given = json.loads(xisa_process("check", "-j", "1", "--shard", "3/4", "--format", "json", cwd=project,
                                    env=env).out)
    assert given["shard"] == [3, 4]
    broken = xisa_process("check", cwd=project, env={"BUILDKITE_PARALLEL_JOB": "4",
                                                     "BUILDKITE_PARALLEL_JOB_COUNT": "4"})
    assert broken.code == 2 and "BUILDKITE_PARALLEL_JOB" in broken.err


@pytest.mark.parametrize("count", ["1", "3", "8"])
def test_shards_json_is_an_exact_disjoint_cover(tmp_path, count):
    project = copy_tinyproj(tmp_path / "proj")
    data = json.loads(xisa_process("shards", count, "--format", "json", cwd=project).out)
    whole = data["cell_ids"]
    parts = [cid for shard in data["shards"] for cid in shard["cell_ids"]]
    assert len(whole) == len(set(whole)) == data["cells"] == 8
    assert sorted(parts) == sorted(whole) and len(parts) == len(set(parts))


@pytest.mark.unit
@pytest.mark.parametrize("environ,shard", [
    ({}, None),
    ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "1/4"),
    ({"BUILDKITE_PARALLEL_JOB": "3", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "4/4"),
])
def test_buildkite_parallel_job_is_a_shard(environ, shard):
    assert shard_from_environment(environ) == shard


@pytest.mark.unit
@pytest.mark.parametrize("environ,said", [
    ({"BUILDKITE_PARALLEL_JOB": "4", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "not a job 0 to N-1 of N"),
    ({"BUILDKITE_PARALLEL_JOB": "x", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "not a job 0 to N-1 of N"),
    ({"BUILDKITE_PARALLEL_JOB": "1"}, "BUILDKITE_PARALLEL_JOB_COUNT is not set"),
])
def test_a_broken_buildkite_pair_is_refused(environ, said):
    with pytest.raises(UsageError, match=said):
        shard_from_environment(environ)


def test_capture_writes_heartbeat_lines_to_a_log(tmp_path):
    project = copy_tinyproj(tmp_path / "proj")
    out = xisa_process("capture", "--no-check", "--", sys.executable, "-c", "import time; time.sleep(2)", cwd=project,
                       env={"XISA_PROGRESS_SECONDS": "0.2"})
    assert out.code == 2 and "made no Triton kernel launch" in out.err      # the program launched nothing
    assert "xisa: capture: the command (then the new cases' compile) is running, " in out.err
