"""The on-device tier on whatever GPU is present; skipped, with the reason, everywhere else."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import REPO


def device_report(arch: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "xisa", "device", "--arch", arch, "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=1800, env=dict(os.environ))
    assert proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.xisa_device("sm_90")
def test_corpus_runs_and_matches_ahead_of_time_on_hopper():
    report = device_report("sm_90")
    ran = [c for c in report["cells"] if c["status"] != "skip"]
    assert ran, "no sm_90 case names a runtime check"
    failed = [f"{c['kernel']}:{c['case']}: {c['status']}: {c['message']}" for c in ran if c["status"] != "pass"]
    assert not failed, "\n".join(failed)
    assert all(c["fidelity"] == "equal" for c in ran)


@pytest.mark.xisa_device("gfx*")
def test_corpus_runs_and_matches_ahead_of_time_on_amd():
    device = next(d for d in device_report("gfx*")["devices"] if d["target"])
    report = device_report(device["target"])
    ran = [c for c in report["cells"] if c["status"] != "skip"]
    failed = [f"{c['kernel']}:{c['case']}: {c['status']}: {c['message']}" for c in ran if c["status"] != "pass"]
    assert ran and not failed, "\n".join(failed)
