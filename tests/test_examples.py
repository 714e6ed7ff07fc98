"""examples/: the GitHub Actions workflow and the pre-commit hook parse, have the right shape, and every
`xisa ...` command they run exists with every flag it passes (checked against the real CLI's --help)."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
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
    found = [shlex.split(inner) for inner in re.findall(r"\$\((xisa [^()]*)\)", text)]   # $(xisa ...) too
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


@pytest.mark.unit
def test_workflow_structure():
    wf = _load(WORKFLOW)
    on = wf.get("on", wf.get(True))                      # YAML 1.1 reads a bare `on` as true
    assert isinstance(on, dict) and "pull_request" in on and "edited" in on["pull_request"]["types"]
    jobs = wf["jobs"]
    assert set(jobs) == {"plan", "check", "gate"}
    # The matrix is the plan's: sized from the recorded timings, the shard count passed along with it.
    assert jobs["check"]["needs"] == "plan"
    assert jobs["check"]["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert jobs["check"]["env"]["SHARDS"] == "${{ needs.plan.outputs.shards }}"
    assert jobs["plan"]["outputs"] == {"matrix": "${{ steps.plan.outputs.matrix }}",
                                       "shards": "${{ steps.plan.outputs.shards }}", "key": "${{ steps.key.outputs.key }}"}
    gate = jobs["gate"]
    assert gate["needs"] == ["plan", "check"] and gate["if"].startswith("always()")
    assert gate["permissions"]["pull-requests"] == "write"
    checkout = next(s for s in _steps(gate) if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0        # the base branch must be there to read its goldens
    assert gate["env"]["BASE_REF"] == "${{ github.base_ref }}"
    assert ('xisa diff --base "origin/$BASE_REF" "${scope_args[@]}" --format markdown --max-chars 60000'
            in _step(gate, "Gate")["run"])
    # a PR's comment whatever the jobs before it did; a push to the default branch only saves the cache
    assert _step(gate, "Post or update")["if"] == "always() && github.event_name == 'pull_request'"
    assert _step(gate, "Gate")["if"] == "always() && github.event_name == 'pull_request'"
    assert on["push"] == {"branches": ["main"]} and "pull_request.number || github.ref" in wf["concurrency"]["group"]
    scripts = "\n".join(_workflow_scripts(wf))
    assert ('xisa check --shard "${{ matrix.shard }}/${SHARDS}" --timings xisa-timings.json' in scripts
            and "gh pr comment" in scripts)
    assert "xisa merge shard-*.json" in _step(gate, "Merge the shards")["run"]
    downloads = [s for s in _steps(gate) if s.get("uses", "").startswith("actions/download-artifact@")]
    uploads = [s for s in _steps(jobs["check"]) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert ".xisa-cache/results" in uploads[0]["with"]["path"] and downloads[0]["with"]["merge-multiple"] is True
    assert {d["with"].get("name") for d in downloads} == {None, "xisa-plan"}
    # every shard splits by the plan's one timings file
    plan_upload = next(s for s in _steps(jobs["plan"]) if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert plan_upload["with"]["name"] == "xisa-plan" and "xisa-timings.json" in plan_upload["with"]["path"]
    assert any(s.get("with", {}).get("name") == "xisa-plan" for s in _steps(jobs["check"]))


@pytest.mark.unit
def test_no_failure_is_hidden():
    """`continue-on-error` hid a comment GitHub refused (over 65,536 characters): no step may carry it."""
    wf = _load(WORKFLOW)
    assert all("continue-on-error" not in job for job in wf["jobs"].values())
    assert all("continue-on-error" not in step for job in wf["jobs"].values() for step in _steps(job))


@pytest.mark.unit
def test_the_cache_key_is_the_configured_inputs_digest():
    """Not `hashFiles('kernels/**', ...)`: a `src/` layout, `pythonpath` helpers and `module:` packages moved no key.
    One key from `xisa cache key`, computed once by the plan; the shards restore it, the gate saves it."""
    wf = _load(WORKFLOW)
    text = json.dumps(wf)                               # what runs, not the comments
    assert "hashFiles" not in text and "kernels/**" not in text
    plan, check, gate = (wf["jobs"][name] for name in ("plan", "check", "gate"))
    assert _step(plan, "Cache key")["run"] == 'echo "key=xisa-${{ runner.os }}-$(xisa cache key)" >> "$GITHUB_OUTPUT"'
    restore = _step(check, "Result cache")
    assert restore["uses"].startswith("actions/cache/restore@")
    assert restore["with"] == {"path": ".xisa-cache/results", "key": "${{ needs.plan.outputs.key }}",
                               "restore-keys": "xisa-${{ runner.os }}-"}
    saves = [s for s in _steps(gate) if s.get("uses", "").startswith("actions/cache/save@")]
    assert {(s["with"]["path"], s["with"]["key"]) for s in saves} == {
        (".xisa-cache/results", "${{ needs.plan.outputs.key }}"), ("xisa-timings.json", "xisa-timings-${{ github.run_id }}")}
    timings = next(s for s in _steps(plan) if s.get("uses", "").startswith("actions/cache/restore@"))
    assert timings["with"]["restore-keys"] == "xisa-timings-"


@pytest.mark.unit
def test_the_readme_says_what_the_workflow_does():
    """The PR gate page's figures for the matrix and the key are the workflow's."""
    wf = _load(WORKFLOW)
    readme = (REPO / "docs" / "pr-gate.md").read_text()
    assert f'XISA_SHARD_SECONDS: "{wf["env"]["XISA_SHARD_SECONDS"]}"' in readme
    assert "xisa shards --max-seconds" in readme and "`xisa-<os>-$(xisa cache key)`" in readme


def _run_step(tmp_path: Path, script: str, env: dict[str, str], stubs: dict[str, str]) -> subprocess.CompletedProcess:
    """A step's shell script as the runner runs it (bash -eo pipefail), with stub commands first on PATH."""
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        (stub_dir / name).write_text("#!/bin/sh\n" + body)
        (stub_dir / name).chmod(0o755)
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=tmp_path,
                          env={"PATH": f"{stub_dir}:{os.environ['PATH']}", **env}, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.unit
@pytest.mark.skipif(shutil.which("jq") is None, reason="jq (on GitHub's runners) is not installed here")
def test_the_plan_step_sizes_the_matrix_from_xisa_shards(tmp_path):
    script = _step(_load(WORKFLOW)["jobs"]["plan"], "Size the matrix")["run"]
    plan = {"count": 3, "matrix": [1, 2, 3], "slowest_over_mean": 1.01}
    stub = ('printf "%s\\n" "$@" >> calls\n'
            f'case "$*" in *json*) echo \'{json.dumps(plan)}\' ;; *) echo "3 shards" ;; esac\n')
    out = tmp_path / "out"
    proc = _run_step(tmp_path, script, {"XISA_SHARD_SECONDS": "420", "GITHUB_OUTPUT": str(out)}, {"xisa": stub})
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "matrix=[1,2,3]\nshards=3\n"
    assert (tmp_path / "xisa-timings.json").read_text() == "{}\n"       # a first run: nothing recorded
    calls = (tmp_path / "calls").read_text().split()
    assert calls[:4] == ["shards", "--max-seconds", "420", "--cores"] and int(calls[4]) >= 1
    assert calls[5:9] == ["--timings", "xisa-timings.json", "--format", "json"]


@pytest.mark.unit
def test_the_project_package_is_installed_with_the_pins_held(tmp_path):
    wf = _load(WORKFLOW)
    for job in wf["jobs"].values():
        script = _step(job, "Install the project's own package")["run"]
        for pyproject, installs in (("[project]\nname = 'mykernels'\n", True), ("[tool.xisa]\n", False)):
            (tmp_path / "pyproject.toml").write_text(pyproject)
            (tmp_path / "calls").unlink(missing_ok=True)
            proc = _run_step(tmp_path, script, {"TRITON_VERSION": "3.8.0", "TORCH_VERSION": "2.13.0"},
                             {"pip": 'printf "%s\\n" "$@" >> calls\n'})
            assert proc.returncode == 0, proc.stderr
            calls = (tmp_path / "calls").read_text().split() if (tmp_path / "calls").exists() else []
            assert calls == (["install", "-e", ".", "triton==3.8.0", "torch==2.13.0"] if installs else [])


@pytest.mark.unit
@pytest.mark.parametrize("case", ["posted", "gh-fails", "fork", "too-long", "shards-do-not-add-up"])
def test_the_comment_is_posted_or_the_step_fails_loudly(tmp_path, case):
    script = _step(_load(WORKFLOW)["jobs"]["gate"], "Post or update")["run"]
    (tmp_path / "xisa-diff.md").write_text("### report\n" + ("x" * 70000 if case == "too-long" else "") + "\n")
    (tmp_path / "xisa-merge.err").write_text("xisa: error: shard-2.json: missing shard(s) 3/3\n")
    summary = tmp_path / "summary"
    env = {"PR_NUMBER": "7", "RUN_URL": "https://example/run/1", "REPORT_URL": "https://example/artifact/2",
           "FORK": "true" if case == "fork" else "false", "GITHUB_STEP_SUMMARY": str(summary),
           "MERGE": "2" if case == "shards-do-not-add-up" else "1"}
    gh = 'printf "%s\\n" "$*" >> calls\n' + ("exit 1\n" if case == "gh-fails" else "")
    proc = _run_step(tmp_path, script, env, {"gh": gh})
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    comment = (tmp_path / "xisa-diff.md").read_text()
    if case == "shards-do-not-add-up":
        assert proc.returncode == 0 and len(calls) == 1
        assert comment.startswith("> :warning: the shards' reports do not add up to one check: xisa: error: "
                                  "shard-2.json: missing shard(s) 3/3") and "### report" in comment
    elif case == "posted":
        assert proc.returncode == 0 and calls == ["pr comment 7 --body-file xisa-diff.md --edit-last"]
        assert comment.startswith("### report")
        assert comment.endswith("[`xisa-report` artifact](https://example/artifact/2) of [this run](https://example/run/1)._\n")
    elif case == "gh-fails":                              # no comment, no silent pass
        assert proc.returncode != 0 and len(calls) == 2
    elif case == "fork":
        assert proc.returncode == 0 and calls == [] and "::warning::" in proc.stdout
        assert summary.read_text() == comment
    else:
        assert proc.returncode == 1 and calls == [] and "over GitHub's 65,536-character limit" in proc.stdout


@pytest.mark.unit
def test_the_gate_runs_whatever_files_a_pull_request_touches():
    """A `paths:` filter skipped the whole workflow for a PR that edits only a helper module outside
    kernels/ (`src/mylib/helpers.py`, imported by every kernel): its machine code changed, no gate ran."""
    on = (lambda wf: wf.get("on", wf.get(True)))(_load(WORKFLOW))
    for event in ("pull_request", "push"):   # a push to the default branch saves the cache the PRs start from
        assert not {"paths", "paths-ignore"} & set(on[event]), on[event]


@pytest.mark.unit
def test_workflow_installs_xisa_and_the_goldens_toolchain_pinned():
    """xisa, the goldens' Triton and a CPU torch, each pinned; the project's own package only after them, in a
    step of its own, with the pins repeated so that its requirements cannot move Triton (it let pip pick
    Triton 3.9 while the goldens are 3.8)."""
    from xisa.compile.worker.toolchain import GOLDEN_TRITON

    wf = _load(WORKFLOW)
    assert wf["env"]["TRITON_VERSION"] == GOLDEN_TRITON and re.fullmatch(r"\d+\.\d+\.\d+", wf["env"]["TORCH_VERSION"])
    # Where xisa comes from is the user's own pinned choice, never a guessed package name.
    assert wf["env"]["XISA_REQUIREMENT"] == "${{ vars.XISA_REQUIREMENT }}"
    for job in wf["jobs"].values():
        names = [step.get("name", "") for step in _steps(job)]
        assert names.index("Install the project's own package") == names.index("Install xisa and the pinned toolchain") + 1
        install = _step(job, "Install xisa")["run"]
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


@pytest.mark.unit
def test_gate_step_passes_the_declared_scopes_and_the_base_ref(tmp_path):
    body = ("Tune the gfx11 decode path.\r\n\r\nxisa-scope: gfx11*\r\nxisa-scope:   gfx942:sparse_mla\r\n"
            "not a scope: sm_90\r\nxisa-scope: $(touch pwned)\r\n")
    calls, output, work = _run_gate_step(tmp_path, body, code=1)
    scopes = ["--scope", "gfx11*", "--scope", "gfx942:sparse_mla", "--scope", "$(touch", "--scope", "pwned)"]
    assert calls["diff"] == ["diff", "--base", "origin/main", *scopes, "--format", "markdown", "--max-chars", "60000",
                             "--output", "xisa-diff.md"]
    assert calls["report"][:3] == ["report", "--html", "xisa-report.html"] and calls["report"][5:-1] == scopes
    assert output == "code=1\n" and not (work / "pwned").exists()     # the PR body is data, never run


@pytest.mark.unit
def test_gate_step_without_a_scope_and_when_the_gate_cannot_judge(tmp_path):
    calls, output, work = _run_gate_step(tmp_path, "no scope declared", code=2)
    assert calls["diff"] == ["diff", "--base", "origin/main", "--format", "markdown", "--max-chars", "60000", "--output",
                             "xisa-diff.md"]
    assert output == "code=2\n"
    comment = (work / "xisa-diff.md").read_text()
    assert "could not judge this PR (exit 2)" in comment and "xisa: error: stub says no" in comment


@pytest.mark.unit
def test_pre_commit_hook_structure():
    hooks = _load(HOOKS)
    assert isinstance(hooks, list) and len(hooks) == 1
    assert not list((REPO / "examples").rglob(".pre-commit-hooks.yaml"))    # one home: the root
    hook = hooks[0]
    assert hook["id"] == "xisa-check" and hook["entry"] == "xisa check --quiet"
    assert hook["pass_filenames"] is False and hook["language"] == "system"
    pattern = re.compile(hook["files"])
    # pyproject.toml too: `[tool.xisa]` moves the specs, targets and goldens the check reads.
    # captured/ too: `xisa capture`'s default folder, whose specs a project commits like kernels/.
    assert all(pattern.search(p) for p in ("kernels/gemm.yaml", "golden/gemm/f16/gfx942.isa", "targets/gfx942.yaml",
                                           "pyproject.toml", "captured/matmul_kernel.yaml",
                                           "captured/generated/_gen_module_x.py"))
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
    assert {"check", "diff", "report", "doctor", "bless", "shards", "merge", "cache"} <= subcommands, subcommands
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


@pytest.mark.unit
@pytest.mark.parametrize("event, merge, gate, expected", [
    ("pull_request", "0", "0", 0), ("pull_request", "1", "0", 0),   # the PR is judged by the gate against its base
    ("pull_request", "0", "1", 1), ("pull_request", "2", "0", 2), ("pull_request", "0", "", 2),
    ("push", "0", "", 0), ("push", "1", "", 1), ("push", "2", "", 2), ("push", "", "", 2)])
def test_the_verdict_is_the_gates_on_a_pull_request_and_the_merged_checks_on_a_push(tmp_path, event, merge, gate,
                                                                                      expected):
    step = _step(_load(WORKFLOW)["jobs"]["gate"], "Verdict")
    assert step["env"]["EVENT"] == "${{ github.event_name }}"
    proc = _run_step(tmp_path, step["run"], {"EVENT": event, "MERGE": merge, "CODE": gate}, {})
    assert proc.returncode == expected, proc.stderr
