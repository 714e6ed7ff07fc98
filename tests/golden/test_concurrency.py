"""Interruption and concurrency: SIGINT during `bless`, and two `bless` runs at once.

SIGKILL at random moments of a bless is tested in test_goldens.py
(test_bless_killed_midway_leaves_every_golden_old_or_new).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from xisa.errors import LockError
from xisa.golden.store import golden_lock, golden_paths, read_golden

KEYS = [("scale", case, target) for case in ("small", "big") for target in ("gfx1100", "gfx1201", "gfx942")] + \
       [("dot", "f16_32", target) for target in ("gfx1100", "gfx942")]

# The real CLI (xisa.cli.main) with os.replace slowed down right after a golden's new YAML becomes
# `.pending`, i.e. inside the window where SIGINT is deferred, and a marker on stderr when the
# second golden is in that window, so the test can interrupt at a known moment.
DRIVER = r"""
import os, sys, time
import xisa.cli
real = os.replace
count = 0
def replace(src, dst):
    global count
    real(src, dst)
    if str(dst).endswith(".pending"):
        count += 1
        if count == 2:
            print("TEST: second golden in flight", file=sys.stderr, flush=True)
        time.sleep(0.3)
os.replace = replace
sys.argv = ["xisa", *sys.argv[1:]]
xisa.cli.main(sys.argv[1:])
"""


def _as_from_a_terminal() -> None:
    """Run in the child before xisa starts: SIGINT as a foreground process in a terminal has it. A shell starts
    background jobs (`cmd &`, as some CI runners do) with SIGINT ignored, and Python keeps an ignored SIGINT
    ignored, so Ctrl-C could not be tested there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(shared_cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    env["XISA_CACHE_DIR"] = str(shared_cache)
    return env


def _goldens(project: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted((project / "golden").rglob("*")) if p.is_file()
            and p.suffix in (".yaml", ".isa")}


@pytest.fixture
def changed_after_bless(run_xisa, tinyproj) -> Path:
    """Goldens blessed, then a code edit that changes every scale cell, compiled once so bless only writes."""
    assert run_xisa("bless", cwd=tinyproj).code == 0
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("mask = offsets < n", "mask = offsets < n - 1"))
    assert run_xisa("compile", cwd=tinyproj).code == 0
    return tinyproj


def test_sigint_during_bless_leaves_every_golden_old_or_new(changed_after_bless, shared_cache, tmp_path):
    project = changed_after_bless
    old = _goldens(project)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), "bless"], cwd=project, env=_env(shared_cache),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)
    first = proc.stderr.readline()
    assert first.startswith("TEST: second golden in flight"), first + proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    err = proc.stderr.read()      # not communicate(): it would skip what readline() buffered
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == 130
    assert [line for line in err.splitlines() if line.strip()] == ["xisa: interrupted"]
    # The golden in flight when SIGINT came was finished (signals wait for both renames), no later one began.
    new = _goldens(project)
    assert set(new) == set(old)
    changed = [p for p in new if new[p] != old[p]]
    assert len(changed) == 4          # two goldens, YAML and stream each
    for key in KEYS:
        golden = read_golden(*golden_paths(project / "golden", *key), display=str(key))
        assert golden.stream_text is not None
    assert not list((project / "golden").rglob("*.pending")) and not list((project / "golden").rglob(".*.tmp"))
    # A later bless finishes the job.
    proc = subprocess.run([sys.executable, "-m", "xisa", "bless"], cwd=project, env=_env(shared_cache),
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "4 written, 4 unchanged" in proc.stdout


def test_sigint_at_any_moment_of_bless_exits_130_with_one_line(changed_after_bless, shared_cache):
    """The real entry point, interrupted at several moments: 130 and one line, or done; goldens whole."""
    project = changed_after_bless
    interrupted = 0
    for delay in (0.6, 0.8, 1.0, 1.3):
        proc = subprocess.Popen([sys.executable, "-m", "xisa", "bless"], cwd=project, env=_env(shared_cache),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_as_from_a_terminal)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        # -SIGINT: the signal came during interpreter shutdown, after the work was done (Python restores
        # the default handler there); a shell reports it as 130 too.
        assert proc.returncode in (0, 130, -signal.SIGINT) and "Traceback" not in err, (delay, proc.returncode, err)
        if proc.returncode == 130:
            interrupted += 1
            assert [line for line in err.splitlines() if line.strip()] == ["xisa: interrupted"]
        for key in KEYS:
            read_golden(*golden_paths(project / "golden", *key), display=str(key))
        assert not list((project / "golden").rglob(".*.tmp"))


def test_a_second_bless_gives_up_after_the_lock_timeout(run_xisa, tinyproj):
    assert run_xisa("bless", "--arch", "gfx942", cwd=tinyproj).code == 0
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor\n", "y = x * factor * factor\n"))
    before = _goldens(tinyproj)
    with golden_lock(tinyproj / "golden", timeout=1):
        started = time.monotonic()
        out = run_xisa("bless", "--arch", "gfx942", "--lock-timeout", "1", cwd=tinyproj)
    assert out.code == 2 and "Traceback" not in out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("xisa: error: ")
    assert "golden: another xisa bless is writing this golden folder for more than 1 s" in lines[0]
    assert "fix: wait for it" in lines[0]
    assert time.monotonic() - started >= 1
    assert _goldens(tinyproj) == before


def test_two_blesses_at_once_are_serialized(run_xisa, tinyproj):
    """While one writer holds the lock the other waits, then runs: both succeed, one after the other."""
    assert run_xisa("compile", "--arch", "gfx942", cwd=tinyproj).code == 0      # warm: bless only writes
    released = threading.Event()
    released_at: list[float] = []

    def hold() -> None:
        with golden_lock(tinyproj / "golden", timeout=5):
            time.sleep(1.5)
            released_at.append(time.time())
        released.set()

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.2)
    out = run_xisa("bless", "--arch", "gfx942", "--lock-timeout", "30", cwd=tinyproj)
    holder.join()
    assert released.is_set()
    assert out.code == 0, out.err
    assert "3 written" in out.out
    written = [p.stat().st_mtime for p in (tinyproj / "golden").rglob("*.yaml")]
    assert len(written) == 3 and min(written) >= released_at[0] - 0.05    # it waited for the other writer


def test_lock_timeout_in_process(tmp_path):
    with golden_lock(tmp_path / "golden", timeout=1):
        started = time.monotonic()
        with pytest.raises(LockError) as info:
            with golden_lock(tmp_path / "golden", timeout=0.3):
                pass
        assert time.monotonic() - started >= 0.3
    assert info.value.exit_code == 2 and "another xisa bless is writing this golden folder" in str(info.value)
    assert list((tmp_path / "golden").iterdir()) == []      # the lock is the folder: no file to commit
    with golden_lock(tmp_path / "golden", timeout=0.3):     # released: free again
        pass


# --- SIGTERM / SIGHUP / SIGKILL: a clean stop, no orphaned worker, no stray temp file -------------------

def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (dead, not yet reaped by its new parent) is not alive."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _until(condition, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def hanging_check(tinyproj, shared_cache, tmp_path):
    """`xisa check` of three cells on two workers, one stuck in its compile (an import that sleeps):
    yields the process, its workers and its stderr file once both workers run; kills leftovers after."""
    from support import FIXTURES

    for name in ("hang.py", "hang.yaml"):
        (tinyproj / "kernels" / name).write_text((FIXTURES / "faulty" / name).read_text())
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr_file:
        proc = subprocess.Popen([sys.executable, "-m", "xisa", "check", "--arch", "gfx942", "--kernel", "hang",
                                 "--kernel", "scale", "-j", "2", "--no-cache"], cwd=tinyproj, env=_env(shared_cache),
                                stdout=subprocess.DEVNULL, stderr=stderr_file)
    workers: list[int] = []
    try:
        assert _until(lambda: len(_children(proc.pid)) >= 2), stderr_path.read_text()
        workers = _children(proc.pid)
        time.sleep(1.0)            # the workers have their cells: one compiles scale, one hangs in `hang`
        yield proc, workers, stderr_path
    finally:
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_mid_compile_stops_cleanly(hanging_check, tinyproj, signum):
    proc, workers, stderr_path = hanging_check
    proc.send_signal(signum)
    proc.wait(timeout=60)
    assert proc.returncode == 128 + signum           # the shell's convention: 143 for SIGTERM, 129 for SIGHUP
    lines = [line for line in stderr_path.read_text().splitlines() if line.strip()]
    assert lines == [f"xisa: interrupted by {signal.Signals(signum).name}"]
    assert _until(lambda: not any(_alive(pid) for pid in workers)), "a worker outlived xisa"
    assert not [p for p in tinyproj.rglob("*") if p.name.endswith((".tmp", ".pending"))]


def test_workers_die_with_a_sigkilled_xisa(hanging_check):
    proc, workers, _ = hanging_check
    proc.kill()
    proc.wait(timeout=60)
    assert _until(lambda: not any(_alive(pid) for pid in workers)), "a worker outlived a SIGKILLed xisa"


# The real CLI with fsync slowed down on the third golden temp file (the second golden's YAML), and a
# marker on stderr then, so the test can send SIGTERM while a temp file exists.
DRIVER_TEMP = r"""
import os, stat, sys, time
import xisa.cli
real = os.fsync
count = 0
def fsync(fd):
    global count
    real(fd)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        count += 1
        if count == 3:
            print("TEST: a temp file is being written", file=sys.stderr, flush=True)
            time.sleep(60)
os.fsync = fsync
xisa.cli.main(sys.argv[1:])
"""


def test_sigterm_while_bless_writes_a_temp_file_leaves_none(changed_after_bless, shared_cache, tmp_path):
    project = changed_after_bless
    old = _goldens(project)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER_TEMP)
    proc = subprocess.Popen([sys.executable, str(driver), "bless"], cwd=project, env=_env(shared_cache),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()
    assert first.startswith("TEST: a temp file is being written"), first + proc.stderr.read()
    assert list((project / "golden").rglob(".*.tmp"))          # the moment is right: a temp file exists
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.returncode == 143
    assert [line for line in err.splitlines() if line.strip()] == ["xisa: interrupted by SIGTERM"]
    assert not [p for p in (project / "golden").rglob("*") if p.name.endswith((".tmp", ".pending"))]
    new = _goldens(project)
    assert set(new) == set(old)
    for key in KEYS:                                   # every golden whole: old or new
        read_golden(*golden_paths(project / "golden", *key), display=str(key))
