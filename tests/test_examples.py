"""examples/: the GitHub Actions workflow and the pre-commit hook parse, have the right shape, and every
`xisa ...` command they run exists with every flag it passes (checked against the real CLI's --help)."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "examples" / "github-actions" / "xisa.yml"
HOOKS = REPO / "examples" / "pre-commit" / ".pre-commit-hooks.yaml"
HOOKS_README = REPO / "examples" / "pre-commit" / "README.md"


def _load(path: Path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data, f"{path} is empty"
    return data


def xisa_commands(script: str) -> list[list[str]]:
    """Every `xisa ...` invocation in a shell snippet, as words (GitHub expressions replaced by `X`)."""
    text = re.sub(r"\$\{\{.*?\}\}", "X", script).replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0]
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            if words[:3] == ["python", "-m", "xisa"]:
                words = words[2:]
            if words and words[0] == "xisa":
                found.append(words)
    return found


@functools.lru_cache(maxsize=None)
def _help(subcommand: str) -> tuple[int, str]:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "xisa", subcommand, "--help"], capture_output=True, text=True,
                          env=env, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def validate(words: list[str]) -> list[str]:
    """The problems of one `xisa SUB [--flag ...]` command line against the real CLI."""
    assert words[0] == "xisa" and len(words) > 1, words
    sub = words[1]
    code, text = _help(sub)
    if code != 0:
        return [f"`xisa {sub}` is not a command: {text.strip()[-300:]}"]
    problems = []
    for word in words[2:]:
        if word.startswith("-") and word != "-":
            flag = word.split("=", 1)[0]
            if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text):
                problems.append(f"`xisa {sub}` has no option {flag}")
    return problems


def _workflow_scripts(workflow) -> list[str]:
    return [step["run"] for job in workflow["jobs"].values() for step in job.get("steps", []) if "run" in step]


def test_workflow_structure():
    wf = _load(WORKFLOW)
    on = wf.get("on", wf.get(True))                      # YAML 1.1 reads a bare `on` as true
    assert isinstance(on, dict) and "pull_request" in on
    jobs = wf["jobs"]
    assert {"check", "merge", "comment"} <= set(jobs)
    shards = jobs["check"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) > 1
    assert int(wf["env"]["SHARDS"]) == len(shards)
    assert jobs["merge"]["needs"] == "check" and jobs["merge"]["if"] == "always()"
    assert jobs["comment"]["permissions"]["pull-requests"] == "write"
    uses = [step.get("uses", "") for job in jobs.values() for step in job["steps"]]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    assert any(u.startswith("actions/download-artifact@") for u in uses)
    scripts = "\n".join(_workflow_scripts(wf))
    assert "--shard ${{ matrix.shard }}/${{ env.SHARDS }} --format json --output shard-${{ matrix.shard }}.json" \
        in scripts
    assert "xisa merge shard-*.json" in scripts
    assert "xisa diff --base origin/${{ github.base_ref }} --format markdown" in scripts
    assert "gh pr comment" in scripts


def test_pre_commit_hook_structure():
    hooks = _load(HOOKS)
    assert isinstance(hooks, list) and len(hooks) == 1
    hook = hooks[0]
    assert hook["id"] == "xisa-check" and hook["entry"] == "xisa check --quiet"
    assert hook["pass_filenames"] is False and hook["language"] == "system"
    pattern = re.compile(hook["files"])
    assert all(pattern.search(p) for p in ("kernels/gemm.yaml", "golden/gemm/f16/gfx942.isa", "targets/gfx942.yaml"))
    assert not pattern.search("README.md") and not pattern.search("src/kernels/x.py")
    snippet = re.search(r"```yaml\n(.*?)```", HOOKS_README.read_text(), re.S).group(1)
    local = yaml.safe_load(snippet)["repos"][0]
    assert local["repo"] == "local"
    assert {k: v for k, v in local["hooks"][0].items()} == {k: hook[k] for k in local["hooks"][0]}


def _all_commands() -> list[list[str]]:
    commands = [c for script in _workflow_scripts(_load(WORKFLOW)) for c in xisa_commands(script)]
    commands += [c for hook in _load(HOOKS) for c in xisa_commands(hook["entry"])]
    readme = HOOKS_README.read_text()
    for block in re.findall(r"`([^`\n]*xisa [^`\n]*)`", readme):
        commands += xisa_commands(re.sub(r"^entry:\s*", "", block))
    return commands


def test_every_xisa_command_in_the_examples_exists_with_its_flags():
    commands = _all_commands()
    subcommands = {c[1] for c in commands}
    assert {"check", "merge", "diff", "report", "doctor", "bless"} <= subcommands, subcommands
    problems = [p for c in commands for p in validate(c)]
    assert problems == []


@pytest.mark.parametrize("line,expected", [
    ("xisa check --no-such-flag", "has no option --no-such-flag"),
    ("xisa chekc --quiet", "is not a command"),
    ("xisa check --shard=1/2 --format json", None),
])
def test_the_validator_can_fail(line, expected):
    (words,) = xisa_commands(f"echo start && {line} || true")
    problems = validate(words)
    if expected is None:
        assert problems == []
    else:
        assert problems and expected in problems[0]
