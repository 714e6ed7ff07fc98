"""The README's two set-up commands are what CI runs, and they never pull an unpinned torch."""

from __future__ import annotations

import re

from support import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", setup, flags=re.S)


def test_two_setup_commands_main_job_and_tests():
    main, tests = readme_commands()
    assert main.startswith("python3 -m venv .venv") and main.endswith("xisa check")
    assert tests.startswith("python3 -m venv .venv") and tests.endswith("python -m pytest")
    for command in (main, tests):
        assert "torch==" in command          # never an unpinned torch: that pulls a CUDA build on a CPU machine
        assert "triton==3.8.0" in command    # the toolchain the goldens are made with


def test_ci_runs_the_readme_test_command_and_the_isolation_check():
    ci = (REPO / ".ci" / "run").read_text()
    _, tests = readme_commands()
    assert tests in ci
    assert "xisa check" in ci.split(tests, 1)[1]


def test_what_the_torch_pin_does_is_said_as_it_is():
    """The README said the pin means pip "never resolves" a CUDA build: true only where the index serves the CPU
    wheel (PyPI's x86-64 Linux torch is the CUDA build). It says which index gives which, and how to get the CPU one."""
    text = (REPO / "README.md").read_text()
    setup = " ".join(text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0].split())
    assert "never resolves" not in setup
    assert "from PyPI on x86-64 Linux it is the multi-GB CUDA build" in setup
    cpu = re.search(r"`(\.venv/bin/pip install [^`]+)`", setup).group(1)
    main, _ = readme_commands()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in cpu and "torch==2.13.0+cpu" in cpu
    pinned = re.search(r"torch==([0-9.]+)", main).group(1)
    assert f"torch=={pinned}+cpu" in cpu and "triton==3.8.0" in cpu     # the same versions as the set-up command
