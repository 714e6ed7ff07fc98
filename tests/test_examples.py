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
from support import REPO

WORKFLOW = REPO / "examples" / "github-actions" / "xisa.yml"
HOOKS = REPO / ".pre-commit-hooks.yaml"          # at the root: the repository is a pre-commit hook repo
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


def _steps(job) -> list[dict]:
    return job.get("steps", [])


def _step(job, name_start: str) -> dict:
    return next(step for step in _steps(job) if step.get("name", "").startswith(name_start))


def test_workflow_structure():
    wf = _load(WORKFLOW)
    on = wf.get("on", wf.get(True))                      # YAML 1.1 reads a bare `on` as true
    assert isinstance(on, dict) and "pull_request" in on and "edited" in on["pull_request"]["types"]
    jobs = wf["jobs"]
    assert set(jobs) == {"check", "gate"}
    shards = jobs["check"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) > 1
    assert int(wf["env"]["SHARDS"]) == len(shards)
    gate = jobs["gate"]
    assert gate["needs"] == "check" and gate["if"] == "always()"
    assert gate["permissions"]["pull-requests"] == "write"
    checkout = next(s for s in _steps(gate) if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0        # the base branch must be there to read its goldens
    assert gate["env"]["BASE_REF"] == "${{ github.base_ref }}"
    assert 'xisa diff --base "origin/$BASE_REF" "${scope_args[@]}" --format markdown' in _step(gate, "Gate")["run"]
    assert _step(gate, "Verdict")["run"] == 'exit "$CODE"'
    assert _step(gate, "Post or update")["if"] == "always()"
    scripts = "\n".join(_workflow_scripts(wf))
    assert 'xisa check --shard "${{ matrix.shard }}/${SHARDS}"' in scripts and "gh pr comment" in scripts
    downloads = [s for s in _steps(gate) if s.get("uses", "").startswith("actions/download-artifact@")]
    uploads = [s for s in _steps(jobs["check"]) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert ".xisa-cache/results" in uploads[0]["with"]["path"] and downloads[0]["with"]["merge-multiple"] is True


def test_the_gate_runs_whatever_files_a_pull_request_touches():
    """A `paths:` filter skipped the whole workflow for a PR that edits only a helper module outside
    kernels/ (`src/mylib/helpers.py`, imported by every kernel): its machine code changed, no gate ran."""
    on = (lambda wf: wf.get("on", wf.get(True)))(_load(WORKFLOW))
    assert not {"paths", "paths-ignore"} & set(on["pull_request"]), on["pull_request"]


def test_workflow_installs_xisa_and_the_goldens_toolchain_pinned():
    """Not `pip install -e .` (in a user's repository that is their project, and it let pip pick Triton 3.9
    while the goldens are 3.8): xisa, the goldens' Triton and a CPU torch, each pinned."""
    from xisa.compile.toolchain import GOLDEN_TRITON

    wf = _load(WORKFLOW)
    assert wf["env"]["TRITON_VERSION"] == GOLDEN_TRITON and re.fullmatch(r"\d+\.\d+\.\d+", wf["env"]["TORCH_VERSION"])
    # Where xisa comes from is the user's own pinned choice, never a guessed package name.
    assert wf["env"]["XISA_REQUIREMENT"] == "${{ vars.XISA_REQUIREMENT }}"
    for job in wf["jobs"].values():
        install = _step(job, "Install")["run"]
        guard, *lines = [line for line in install.splitlines() if line.strip()]
        unset = subprocess.run(["bash", "-c", guard], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True)
        assert unset.returncode != 0 and "XISA_REQUIREMENT" in unset.stderr
        assert subprocess.run(["bash", "-c", guard], env={"XISA_REQUIREMENT": "xisa @ git+https://example/x@1"}).returncode == 0
        assert all(line.startswith("pip install ") for line in lines) and " -e" not in install and " . " not in install
        assert "download.pytorch.org/whl/cpu" in lines[0]
        words = [w.strip('"') for line in lines for w in shlex.split(line)]
        packages = [w for w in words if w.startswith(("torch", "triton"))]
        assert set(packages) == {"torch==${TORCH_VERSION}", "triton==${TRITON_VERSION}"}, packages
        assert "${XISA_REQUIREMENT}" in words


def _run_gate_step(tmp_path: Path, body: str, code: int) -> tuple[dict[str, list[str]], str, Path]:
    """Run the gate step's own shell script, as the runner would, with a stub `xisa` that records its arguments."""
    script = _step(_load(WORKFLOW)["jobs"]["gate"], "Gate")["run"]
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir()
    stub = stub_dir / "xisa"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$STUB_RECORD/$1"\n'
                    'if [ "$1" = diff ] && [ "$STUB_CODE" != 2 ]; then echo "### report" > xisa-diff.md; fi\n'
                    'if [ "$1" = diff ]; then echo "xisa: error: stub says no" >&2; exit "$STUB_CODE"; fi\n')
    stub.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "gfx11-a-file").write_text("")         # a glob the shell must not expand
    output = tmp_path / "github_output"
    env = {"PATH": f"{stub_dir}:{os.environ['PATH']}", "PR_BODY": body, "BASE_REF": "main",
           "GITHUB_OUTPUT": str(output), "STUB_RECORD": str(tmp_path), "STUB_CODE": str(code)}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    calls = {name: (tmp_path / name).read_text().splitlines() for name in ("diff", "report")
             if (tmp_path / name).exists()}
    return calls, output.read_text(), work


def test_gate_step_passes_the_declared_scopes_and_the_base_ref(tmp_path):
    body = ("Tune the gfx11 decode path.\r\n\r\nxisa-scope: gfx11*\r\nxisa-scope:   gfx942:sparse_mla\r\n"
            "not a scope: sm_90\r\nxisa-scope: $(touch pwned)\r\n")
    calls, output, work = _run_gate_step(tmp_path, body, code=1)
    scopes = ["--scope", "gfx11*", "--scope", "gfx942:sparse_mla", "--scope", "$(touch", "--scope", "pwned)"]
    assert calls["diff"] == ["diff", "--base", "origin/main", *scopes, "--format", "markdown", "--output",
                             "xisa-diff.md"]
    assert calls["report"][:3] == ["report", "--html", "xisa-report.html"] and calls["report"][5:-1] == scopes
    assert output == "code=1\n" and not (work / "pwned").exists()     # the PR body is data, never run


def test_gate_step_without_a_scope_and_when_the_gate_cannot_judge(tmp_path):
    calls, output, work = _run_gate_step(tmp_path, "no scope declared", code=2)
    assert calls["diff"] == ["diff", "--base", "origin/main", "--format", "markdown", "--output", "xisa-diff.md"]
    assert output == "code=2\n"
    comment = (work / "xisa-diff.md").read_text()
    assert "could not judge this PR (exit 2)" in comment and "xisa: error: stub says no" in comment


def test_pre_commit_hook_structure():
    hooks = _load(HOOKS)
    assert isinstance(hooks, list) and len(hooks) == 1
    assert not list((REPO / "examples").rglob(".pre-commit-hooks.yaml"))    # one home: the root
    hook = hooks[0]
    assert hook["id"] == "xisa-check" and hook["entry"] == "xisa check --quiet"
    assert hook["pass_filenames"] is False and hook["language"] == "system"
    pattern = re.compile(hook["files"])
    # pyproject.toml too: `[tool.xisa]` moves the specs, targets and goldens the check reads.
    assert all(pattern.search(p) for p in ("kernels/gemm.yaml", "golden/gemm/f16/gfx942.isa", "targets/gfx942.yaml",
                                           "pyproject.toml"))
    assert not pattern.search("README.md") and not pattern.search("src/kernels/x.py")
    assert not pattern.search("docs/pyproject.toml")
    remote, local = (yaml.safe_load(block)["repos"][0]
                     for block in re.findall(r"```yaml\n(.*?)```", HOOKS_README.read_text(), re.S))
    assert remote["repo"] != "local" and remote["hooks"] == [{"id": "xisa-check"}]
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
    assert {"check", "diff", "report", "doctor", "bless"} <= subcommands, subcommands
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
