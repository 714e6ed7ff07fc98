"""Shared fixtures: a small project of our own kernels, and a way to run the real `xisa` command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def _golden_toolchain_skip():
    """The repo's goldens are made with one Triton; under another one they are a toolchain difference."""
    from importlib.metadata import version

    from xisa.compile.toolchain import GOLDEN_TRITON

    installed = version("triton")
    return pytest.mark.skipif(installed != GOLDEN_TRITON, reason=f"the repo's goldens are made with Triton "
                              f"{GOLDEN_TRITON}; {installed} is installed (xisa check reports that, exit 2)")


needs_golden_toolchain = _golden_toolchain_skip()

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One result cache for the session, so a cell compiled by one test is free for the next
    (`XISA_CACHE_DIR` set by the caller, as .ci/run does, shares it with later runs too)."""
    preset = os.environ.get("XISA_CACHE_DIR")
    return Path(preset) if preset else tmp_path_factory.mktemp("xisa-cache")


@pytest.fixture
def run_xisa(shared_cache):
    def run(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> Outcome:
        full_env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
        full_env.setdefault("XISA_CACHE_DIR", str(shared_cache))
        full_env["COLUMNS"] = "250"
        full_env.update(env or {})
        proc = subprocess.run([sys.executable, "-m", "xisa", *args], cwd=cwd, env=full_env, capture_output=True,
                              text=True, timeout=timeout)
        return Outcome(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def tinyproj(tmp_path) -> Path:
    """A copy of tests/fixtures/tinyproj: two kernels, three targets, a gfx11-only branch."""
    dest = tmp_path / "tinyproj"
    shutil.copytree(FIXTURES / "tinyproj", dest)
    return dest
