"""`pytest --xisa`: one test per cell of the bundled corpus; a hand-edited golden fails readably."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO, needs_golden_toolchain


def copy_corpus(dest: Path) -> Path:
    for name in ("kernels", "golden", "targets"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".xisa.lock"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def pytest_xisa(cwd: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["XISA_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "pytest", "--xisa", "--xisa-arch", "gfx*", "-q", "-p",
                           "no:cacheprovider", "--strict-markers", *args, "kernels"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1500)


@needs_golden_toolchain
def test_pytest_xisa_passes_then_fails_with_a_readable_diff(tmp_path, shared_cache):
    project = copy_corpus(tmp_path / "corpus")
    cells = len(list((project / "golden").glob("*/*/gfx*.yaml")))
    ok = pytest_xisa(project, shared_cache)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    assert f"{cells} passed" in ok.stdout
    golden = project / "golden" / "gemm" / "bf16_4k" / "gfx942.yaml"
    import yaml

    # A hand edit that keeps the golden self-consistent, so it reads as a changed cell, not a corrupt one.
    data = yaml.safe_load(golden.read_text())
    name = next(m for m in data["histogram"] if m.startswith("v_mfma"))
    value = data["histogram"][name]
    data["histogram"][name] = value + 3
    data["instructions"] = sum(data["histogram"].values())
    data["sha256"], data["stream"] = "0" * 64, None
    golden.write_text(yaml.safe_dump(data, sort_keys=True))
    bad = pytest_xisa(project, shared_cache)
    assert bad.returncode == 1
    assert "1 failed" in bad.stdout
    assert "gemm:bf16_4k@gfx942: changed: changed outside the declared scope" in bad.stdout
    assert f"{name}: {value + 3} -> {value} (-3)" in bad.stdout
    assert "accept with: xisa bless --arch gfx942 --kernel gemm:bf16_4k" in bad.stdout
    scoped = pytest_xisa(project, shared_cache, "--xisa-scope", "gfx942:gemm")
    assert scoped.returncode == 0, scoped.stdout[-2000:]


def test_xisa_update_blesses_is_refused_in_ci_and_combines_under_xdist(tinyproj, shared_cache):
    def run(*args: str, ci: bool = False) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env["XISA_CACHE_DIR"] = str(shared_cache)
        if ci:
            env["CI"] = "true"
        return subprocess.run([sys.executable, "-m", "pytest", "--xisa", "-q", "-p", "no:cacheprovider",
                               "--strict-markers", *args, "kernels"], cwd=tinyproj, env=env, capture_output=True,
                              text=True, timeout=900)

    refused = run("--xisa-update", ci=True)
    assert refused.returncode == 4 and "CI" in refused.stderr
    assert not (tinyproj / "golden").exists()
    blessed = run("--xisa-update")
    assert blessed.returncode == 0 and "8 passed" in blessed.stdout
    assert len(list((tinyproj / "golden").glob("*/*/*.yaml"))) == 8
    parallel = run("-n", "2")
    assert parallel.returncode == 0 and "8 passed" in parallel.stdout, parallel.stdout[-2000:]
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor + 1.0", "y = x * factor + 3.0"))
    failing = run("-n", "2")
    assert failing.returncode == 1 and "2 failed, 6 passed" in failing.stdout
