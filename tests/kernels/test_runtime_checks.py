"""The runtime checks of the kernel corpus (`check_<kernel>(case)`, xisa's on-device tier).

On the CPU they run under Triton's interpreter, in one child process (runtime_smoke.py), with a
fake case of small shapes for every KV format and reader but the inline-asm gfx12 one.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
KERNELS = ROOT / "kernels"
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="module")
def smoke() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, str(HERE / "runtime_smoke.py")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, f"smoke run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULTS "):])


def _variants():
    sys.path.insert(0, str(HERE))
    text = (HERE / "runtime_smoke.py").read_text()
    start = text.index("VARIANTS = {")
    return [line.split('"')[1] for line in text[start:].splitlines()[1:] if line.strip().startswith('"')]


@pytest.mark.parametrize("variant", _variants())
def test_runtime_check_passes_in_the_interpreter(smoke, variant):
    r = smoke[variant]
    assert r["status"] == "pass", r.get("error", r)
    assert r["launches"] >= 1


def _specs():
    return sorted(KERNELS.glob("*.yaml"))


@pytest.mark.parametrize("spec", _specs(), ids=lambda p: p.stem)
def test_every_spec_names_a_defined_runtime_check(spec):
    data = yaml.safe_load(spec.read_text())
    module = importlib.import_module("kernels." + Path(data["source"]).stem)
    names = {data.get("defaults", {}).get("runtime")} | {c.get("runtime") for c in data["cases"]}
    names.discard(None)
    assert names, f"{spec.name} names no runtime check"
    for name in names:
        assert callable(getattr(module, name, None)), f"{spec.name}: {name} is not defined in {module.__name__}"


@pytest.mark.unit
@pytest.mark.parametrize("spec", _specs(), ids=lambda p: p.stem)
def test_every_spec_has_nvidia_cells(spec):
    targets = yaml.safe_load(spec.read_text())["targets"]
    assert "sm_90" in targets
