"""The example GitHub Actions workflow (examples/github-actions/xisa.yml), run: its jobs' own `run:` steps, parsed
from the YAML, execute in bash on emulated runners against a scratch repository with a pull request (issue 36,
item 4). Every job gets a fresh runner (a fresh clone, HOME, temporary folder and XISA_CACHE_DIR) at the same paths,
as GitHub's hosted runners have them; nothing passes from one job or one run to the next but what the YAML names:
`actions/cache` (restore, save) and `actions/upload-artifact` / `download-artifact` are emulated by copying exactly
the paths their `with: path:` names, with the actions' rules (a run restores only its own ref's caches and the
base and default branch's; the exact key, then the newest entry under a restore-key prefix, of the same paths; a key
its ref has saved is not saved again; an artifact's root is the common folder of its paths, hidden files only when
asked). The steps that install (pip) or post (gh) meet stubs that record and succeed; `xisa` is the real one, and
an expression the emulator does not know fails the test.

Three runs: a push to main is cold and saves the cache; a pull request that touches no kernel, on fresh runners with
main's cache restored as the YAML restores it, answers every cell from it and no job loads or compiles anything;
after the PR edits one kernel, that kernel's cell alone compiles and the gate's comment reports it changed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import REPO, git, needs_golden_toolchain, xisa_process

WORKFLOW = REPO / "examples" / "github-actions" / "xisa.yml"
XISA = Path(sys.executable).with_name("xisa")
REPOSITORY = "octo/kernels"
PR_NUMBER = 7

pytestmark = [
    needs_golden_toolchain,
    pytest.mark.skipif(not XISA.exists(), reason=f"no xisa entry point beside {sys.executable} (pip install -e .)"),
    pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("jq", "git", "bash")),
                       reason="jq, git and bash (on GitHub's runners) are needed"),
]


# --- GitHub's expression language, as much of it as the workflow uses (anything else fails the test) --------------

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>==|!=|<=|>=|&&|\|\||[!()<>,])"
                    r"|(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_*][\w-]*)*))")
STATUS_FUNCTIONS = ("always", "success", "failure", "cancelled")


class Expression:
    """One `${{ }}` expression evaluated in `contexts` (name -> value); `status` answers success() and failure()."""

    def __init__(self, text: str, contexts: dict[str, Any], status: dict[str, bool]):
        self.tokens, position = [], 0
        text = text.strip()
        while position < len(text):
            match = _TOKEN.match(text, position)
            assert match and match.end() > position, f"expression {text!r}: cannot read {text[position:]!r}"
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind)))
            position = match.end()
        self.index, self.contexts, self.status, self.text = 0, contexts, status, text

    def value(self) -> Any:
        result = self._or()
        assert self.index == len(self.tokens), f"expression {self.text!r}: trailing {self.tokens[self.index:]}"
        return result

    def _peek(self):
        return self.tokens[self.index] if self.index < len(self.tokens) else (None, None)

    def _take(self, op: str | None = None):
        token = self._peek()
        assert op is None or token == ("op", op), f"expression {self.text!r}: expected {op!r} at {token}"
        self.index += 1
        return token

    def _or(self):
        left = self._and()
        while self._peek() == ("op", "||"):
            self._take()
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self):
        left = self._compare()
        while self._peek() == ("op", "&&"):
            self._take()
            right = self._compare()
            left = right if truthy(left) else left
        return left

    def _compare(self):
        left = self._unary()
        while self._peek() in (("op", "=="), ("op", "!=")):
            op = self._take()[1]
            right = self._unary()
            equal = _loose(left) == _loose(right)
            left = equal if op == "==" else not equal
        return left

    def _unary(self):
        if self._peek() == ("op", "!"):
            self._take()
            return not truthy(self._unary())
        return self._primary()

    def _primary(self):
        kind, text = self._take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text) if "." in text else int(text)
        if kind == "op" and text == "(":
            inner = self._or()
            self._take(")")
            return inner
        assert kind == "name", f"expression {self.text!r}: unexpected {text!r}"
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self._peek() == ("op", "("):
            self._take()
            args = []
            while self._peek() != ("op", ")"):
                args.append(self._or())
                if self._peek() == ("op", ","):
                    self._take()
            self._take(")")
            return self._call(text, args)
        head, *rest = text.split(".")
        assert head in self.contexts, f"expression {self.text!r}: the emulated runner has no context {head!r}"
        value = self.contexts[head]
        for part in rest:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def _call(self, name: str, args: list) -> Any:
        if name in STATUS_FUNCTIONS:
            return {"always": True, "cancelled": False, "success": self.status["success"],
                    "failure": not self.status["success"]}[name]
        if name == "fromJSON":
            return json.loads(args[0])
        if name == "toJSON":
            return json.dumps(args[0])
        if name == "startsWith":
            return str(args[0]).lower().startswith(str(args[1]).lower())
        if name == "contains":
            return str(args[1]).lower() in str(args[0]).lower()
        raise AssertionError(f"expression {self.text!r}: the emulated runner has no function {name}()")


def truthy(value: Any) -> bool:
    return value not in (False, 0, "", None)


def _loose(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def as_text(value: Any) -> str:
    """A value as GitHub writes it into a string (a script, an input, an environment variable)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


_EMBEDDED = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def substitute(text: Any, contexts: dict[str, Any], status: dict[str, bool] | None = None) -> Any:
    """`text` with each `${{ }}` replaced; a string that is one whole expression keeps its value's type."""
    if not isinstance(text, str):
        return text
    status = status or {"success": True}
    whole = _EMBEDDED.fullmatch(text.strip()) if text.count("${{") == 1 else None
    if whole:
        return Expression(whole.group(1), contexts, status).value()
    return _EMBEDDED.sub(lambda m: as_text(Expression(m.group(1), contexts, status).value()), text)


def condition(text: Any, contexts: dict[str, Any], status: dict[str, bool]) -> bool:
    """An `if:` (bare or in `${{ }}`); without a status function it means `success() && (...)`."""
    if text is None:
        return status["success"]
    if isinstance(text, bool):
        return text and status["success"]
    inner = _EMBEDDED.fullmatch(text.strip()) if text.count("${{") == 1 else None
    inner_text = inner.group(1) if inner else text
    if not any(f"{name}(" in inner_text for name in STATUS_FUNCTIONS):
        inner_text = f"success() && ({inner_text})"
    return truthy(Expression(inner_text, contexts, status).value())


# --- the runner and the services it talks to -------------------------------------------------------------------------

def _lines(value: Any) -> list[str]:
    return [line.strip() for line in as_text(value).splitlines() if line.strip()]


def _files_under(path: Path, *, hidden: bool) -> list[Path]:
    """The files a path names (itself, or every file below it), those under a hidden name left out unless `hidden`."""
    if path.is_file():
        return [path]
    found = []
    for folder, dirs, files in os.walk(path):
        if not hidden:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            files = [f for f in files if not f.startswith(".")]
        found += [Path(folder) / f for f in files]
    return sorted(found)


@dataclass
class Step:
    job: str
    name: str
    conclusion: str            # success | failure | skipped
    code: int | None = None
    log: str = ""
    seconds: float = 0.0


@dataclass
class WorkflowRun:
    run_id: int
    steps: list[Step] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)             # job (matrix: job-value) -> its result
    runners: dict[str, Path] = field(default_factory=dict)         # job (matrix: job-value) -> its runner, kept
    artifacts: dict[str, Path] = field(default_factory=dict)       # name -> its files

    def log(self) -> str:
        return "\n".join(f"--- {s.job} / {s.name}: {s.conclusion} (exit {s.code}, {s.seconds:.1f} s)\n{s.log[-3000:]}"
                         for s in self.steps)

    def step(self, job: str, name_start: str) -> Step:
        return next(s for s in self.steps if s.job == job and s.name.startswith(name_start))


STUBS = {
    # installs are the runner image's business here: the real xisa, Triton and torch are those of this venv
    "pip": 'printf "%s\\n" "$*" >> "$STUB_RECORD/pip"\n',
    # `gh pr comment N --body-file FILE ...`: the comment it would post is kept
    "gh": 'printf "%s\\n" "$*" >> "$STUB_RECORD/gh"\n'
          'while [ $# -gt 0 ]; do [ "$1" = --body-file ] && cp "$2" "$STUB_RECORD/comment.md"; shift; done\n',
    # one core: the plan's matrix does not depend on the machine the tests run on
    "nproc": "echo 1\n",
}


class GitHub:
    """Pull-request runs of one workflow on emulated hosted runners: jobs in the order `needs` gives, a matrix
    expanded, each job on a fresh runner whose paths are the same every time (`/home/runner/work/REPO/REPO` on
    GitHub; here under `root`), the cache service and each run's artifact store kept outside every runner."""

    def __init__(self, root: Path, origin: Path, workflow: dict, *, env: dict[str, str], variables: dict[str, str]):
        self.root, self.origin, self.workflow = root, origin, workflow
        self.workflow_env = {**workflow.get("env", {}), **env}
        self.variables = variables
        self.runner = root / "runner"
        self.workspace = self.runner / "work" / "kernels" / "kernels"
        # (scope: the ref of the run that saved it, key, paths, snapshot), oldest first
        self.caches: list[tuple[str, str, tuple[str, ...], Path]] = []
        self.stubs = root / "stubs"
        self.stubs.mkdir(parents=True)
        for name, body in STUBS.items():
            (self.stubs / name).write_text("#!/bin/sh\n" + body)
            (self.stubs / name).chmod(0o755)

    def pull_request(self, run_id: int, *, body: str) -> WorkflowRun:
        """A `pull_request` run of PR_NUMBER (opened, synchronized or edited): its merge ref checked out."""
        event = {"pull_request": {"number": PR_NUMBER, "body": body, "head": {"repo": {"full_name": REPOSITORY}}}}
        return self._start(run_id, "pull_request", f"refs/pull/{PR_NUMBER}/merge", event, base_ref="main")

    def push(self, run_id: int, branch: str = "main") -> WorkflowRun:
        return self._start(run_id, "push", f"refs/heads/{branch}", {"ref": f"refs/heads/{branch}"}, base_ref="")

    def _start(self, run_id: int, event_name: str, ref: str, event: dict, *, base_ref: str) -> WorkflowRun:
        on = self.workflow.get("on", self.workflow.get(True))
        trigger = on.get(event_name) if isinstance(on, dict) else None
        assert isinstance(on, dict) and event_name in on, f"the workflow does not run on {event_name}"
        branches = (trigger or {}).get("branches")
        assert event_name != "push" or branches is None or ref.removeprefix("refs/heads/") in branches, \
            f"the workflow does not run on a push to {ref}"
        sha = git(self.origin, "rev-parse", ref).strip()
        run = WorkflowRun(run_id)
        github = {"workspace": str(self.workspace), "run_id": str(run_id), "repository": REPOSITORY,
                  "server_url": "https://github.com", "token": "stub-token", "sha": sha, "ref": ref,
                  "base_ref": base_ref, "event_name": event_name, "event": event}
        self._run = run
        self._github = github
        needs_results: dict[str, dict] = {}
        pending = dict(self.workflow["jobs"])
        while pending:
            name, job = next((n, j) for n, j in pending.items()
                             if all(need in needs_results for need in _needs(j)))
            del pending[name]
            needs = {need: needs_results[need] for need in _needs(job)}
            needs_results[name] = self._job(name, job, needs)
        return run

    def _contexts(self, **extra) -> dict[str, Any]:
        return {"github": self._github, "vars": self.variables, "secrets": {},
                "runner": {"os": "Linux", "arch": "X64", "temp": str(self.runner / "temp")}, **extra}

    def _job(self, name: str, job: dict, needs: dict[str, dict]) -> dict:
        all_succeeded = all(n["result"] == "success" for n in needs.values())
        contexts = self._contexts(needs=needs, matrix={}, env={})
        if not condition(job.get("if"), contexts, {"success": all_succeeded}):
            self._run.jobs[name] = "skipped"
            return {"result": "skipped", "outputs": {}}
        matrix = (job.get("strategy") or {}).get("matrix")
        combinations: list[dict] = [{}]
        if matrix:
            assert not {"include", "exclude"} & set(matrix), f"matrix {matrix}: include and exclude are not emulated"
            for key, values in matrix.items():
                values = substitute(values, contexts)
                assert isinstance(values, list) and values, f"matrix {key}: {values!r}"
                combinations = [{**c, key: v} for c in combinations for v in values]
        results, outputs = [], {}
        for combination in combinations:
            label = name + "".join(f"-{v}" for v in combination.values())
            result, outputs = self._on_fresh_runner(label, job, needs, combination)
            results.append(result)
            self._run.jobs[label] = result
        result = "success" if all(r == "success" for r in results) else "failure"
        self._run.jobs[name] = result
        return {"result": result, "outputs": outputs}

    def _on_fresh_runner(self, label: str, job: dict, needs: dict, matrix: dict) -> tuple[str, dict]:
        shutil.rmtree(self.runner, ignore_errors=True)
        for folder in (self.workspace, self.runner / "home", self.runner / "temp", self.runner / "files"):
            folder.mkdir(parents=True)
        steps: dict[str, dict] = {}
        contexts = self._contexts(needs=needs, matrix=matrix, steps=steps, env={})
        job_env = {k: as_text(substitute(v, contexts)) for k, v in self.workflow_env.items()}
        contexts["env"] = job_env
        job_env.update({k: as_text(substitute(v, contexts)) for k, v in (job.get("env") or {}).items()})
        status = {"success": True}
        added_env: dict[str, str] = {}
        for number, step in enumerate(job["steps"]):
            contexts["env"] = {**job_env, **added_env}
            name = as_text(substitute(step.get("name") or step.get("uses") or step.get("run", "").split("\n")[0],
                                      contexts))
            if not condition(step.get("if"), contexts, status):
                self._run.steps.append(Step(label, name, "skipped"))
                continue
            started = time.monotonic()
            env = {**job_env, **added_env,
                   **{k: as_text(substitute(v, contexts)) for k, v in (step.get("env") or {}).items()}}
            if "run" in step:
                code, log, outputs, more_env = self._shell(substitute(step["run"], contexts), env, number)
                added_env.update(more_env)
            else:
                inputs = {k: substitute(v, contexts) for k, v in (step.get("with") or {}).items()}
                code, log, outputs = self._action(step["uses"], inputs)
            conclusion = "success" if code == 0 else "failure"
            if step.get("id"):
                steps[step["id"]] = {"outputs": outputs, "outcome": conclusion, "conclusion": conclusion}
            self._run.steps.append(Step(label, name, conclusion, code, log, time.monotonic() - started))
            if code != 0:
                status["success"] = False
        outputs = {k: as_text(substitute(v, contexts)) for k, v in (job.get("outputs") or {}).items()}
        kept = self.root / "runners" / f"run{self._run.run_id}" / label
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(self.runner), str(kept))   # the runner is gone; its files stay for the test to read
        self._run.runners[label] = kept / "work" / "kernels" / "kernels"
        return ("success" if status["success"] else "failure"), outputs

    def _shell(self, script: str, env: dict[str, str], number: int) -> tuple[int, str, dict, dict]:
        files = self.runner / "files"
        output, github_env = files / f"output-{number}", files / f"env-{number}"
        for path in (output, github_env):
            path.write_text("")
        (files / f"step-{number}.sh").write_text(script)
        full = {"PATH": f"{self.stubs}:{XISA.parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.runner / "home"),
                "TMPDIR": str(self.runner / "temp"), "RUNNER_TEMP": str(self.runner / "temp"), "RUNNER_OS": "Linux",
                "LANG": "C.UTF-8", "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(self.workspace),
                "GITHUB_OUTPUT": str(output), "GITHUB_ENV": str(github_env),
                "GITHUB_STEP_SUMMARY": str(self.root / "summary.md"), "GITHUB_RUN_ID": self._github["run_id"],
                "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_SHA": self._github["sha"], "GITHUB_REF": self._github["ref"],
                "GITHUB_BASE_REF": self._github["base_ref"], "GITHUB_EVENT_NAME": self._github["event_name"],
                "STUB_RECORD": str(self.root), **env}
        # a `run:` step without `shell:` is `bash -e {0}` on GitHub's Linux runners
        proc = subprocess.run(["bash", "-e", str(files / f"step-{number}.sh")], cwd=self.workspace, env=full,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        return proc.returncode, proc.stdout, _key_values(output.read_text()), _key_values(github_env.read_text())

    def _action(self, uses: str, inputs: dict[str, Any]) -> tuple[int, str, dict]:
        action = uses.split("@")[0]
        handler = {"actions/checkout": self._checkout, "actions/setup-python": self._setup_python,
                   "actions/cache/restore": self._cache_restore, "actions/cache/save": self._cache_save,
                   "actions/upload-artifact": self._upload, "actions/download-artifact": self._download}.get(action)
        assert handler is not None, f"the emulated runner has no action {uses}"
        return handler(inputs)

    def _checkout(self, inputs) -> tuple[int, str, dict]:
        """As actions/checkout does: the run's ref (a PR's merge ref, a pushed branch) at the run's commit, one
        commit deep unless fetch-depth 0 (then every branch as origin/NAME too)."""
        depth = int(inputs.get("fetch-depth", 1))
        refspecs = [f"+{self._github['ref']}:refs/remotes/checkout"]
        run = lambda *args: git(self.workspace, *args)   # noqa: E731
        run("init", "-q")
        run("remote", "add", "origin", self.origin.as_uri())
        if depth == 0:
            run("fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*", *refspecs)
        else:
            run("fetch", "-q", f"--depth={depth}", "origin", *refspecs)
        run("checkout", "-q", "--detach", self._github["sha"])
        return 0, f"checked out {self._github['sha']} (fetch-depth {depth})", {}

    def _setup_python(self, inputs) -> tuple[int, str, dict]:
        assert inputs.get("python-version"), inputs
        return 0, f"python {inputs['python-version']}: this venv's", {"python-version": inputs["python-version"]}

    def _cache_restore(self, inputs) -> tuple[int, str, dict]:
        """GitHub's rules: a run may restore the caches of its own ref and of the base and default branch
        (refs/heads/main here), searched in that order, each for the exact key and then the newest cache under each
        restore-key prefix in turn; only caches saved with the same paths (their version) count."""
        paths, key = tuple(_lines(inputs["path"])), as_text(inputs["key"])
        scopes = dict.fromkeys([self._github["ref"], *([f"refs/heads/{self._github['base_ref']}"]
                                                      if self._github["base_ref"] else []), "refs/heads/main"])
        found = None
        for scope in scopes:
            same = [(k, snapshot) for where, k, p, snapshot in self.caches if p == paths and where == scope]
            found = next(((k, s) for k, s in same if k == key), None)
            for prefix in _lines(inputs.get("restore-keys")) if found is None else []:
                found = next(((k, s) for k, s in reversed(same) if k.startswith(prefix)), None)
                if found:
                    break
            if found:
                break
        if found is None:
            return 0, f"cache not found for input keys: {key}", {"cache-hit": "false"}
        shutil.copytree(found[1], self.workspace, dirs_exist_ok=True, symlinks=True)
        return 0, f"cache restored from key: {found[0]} (saved by {scope})", {
            "cache-hit": as_text(found[0] == key), "cache-matched-key": found[0], "cache-primary-key": key}

    def _cache_save(self, inputs) -> tuple[int, str, dict]:
        paths, key, scope = tuple(_lines(inputs["path"])), as_text(inputs["key"]), self._github["ref"]
        if any(where == scope and k == key and p == paths for where, k, p, _ in self.caches):
            return 0, f"Failed to save: Unable to reserve cache with key {key}, another job may be creating this cache.", {}
        snapshot = self.root / "caches" / str(len(self.caches))
        copied = 0
        for path in paths:
            assert not set("*?[!") & set(path), f"cache path {path}: globs are not emulated"
            for file in _files_under(self.workspace / path, hidden=True):
                target = snapshot / file.relative_to(self.workspace)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, target)
                copied += 1
        if not copied:
            return 0, "Path Validation Error: Path(s) specified in the action for caching do(es) not exist", {}
        self.caches.append((scope, key, paths, snapshot))
        return 0, f"cache saved with key: {key} ({copied} files)", {}

    def _upload(self, inputs) -> tuple[int, str, dict]:
        """Every file the paths name, stored relative to their common folder (one path: itself, or its folder if it
        is a file), hidden ones only with include-hidden-files; a name uploaded twice in a run fails."""
        name = as_text(inputs.get("name") or "artifact")
        if name in self._run.artifacts:
            return 1, f"an artifact named {name} was uploaded in this run already", {}
        paths = [self.workspace / p for p in _lines(inputs["path"])]
        for path in paths:
            assert not set("*?[!") & set(str(path)), f"artifact path {path}: globs are not emulated"
        hidden = truthy(inputs.get("include-hidden-files", False))
        files = [f for p in paths if p.exists() for f in _files_under(p, hidden=hidden)]
        if not files:
            missing = as_text(inputs.get("if-no-files-found", "warn"))
            return (1 if missing == "error" else 0), f"no files found for artifact {name}", {}
        if len(paths) == 1:
            root = paths[0] if paths[0].is_dir() else paths[0].parent
        else:
            root = Path(os.path.commonpath([str(p) for p in paths]))
        store = self.root / "artifacts" / f"run{self._run.run_id}" / name
        for file in files:
            target = store / file.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target)
        self._run.artifacts[name] = store
        url = f"https://github.com/{REPOSITORY}/actions/runs/{self._run.run_id}/artifacts/{len(self._run.artifacts)}"
        return 0, f"uploaded {len(files)} files as {name}", {"artifact-id": str(len(self._run.artifacts)),
                                                              "artifact-url": url}

    def _download(self, inputs) -> tuple[int, str, dict]:
        import fnmatch

        into = self.workspace / as_text(inputs.get("path") or ".")
        if inputs.get("name"):
            name = as_text(inputs["name"])
            if name not in self._run.artifacts:
                return 1, f"Unable to download artifact(s): Artifact not found for name: {name}", {}
            shutil.copytree(self._run.artifacts[name], into, dirs_exist_ok=True)
            return 0, f"downloaded {name}", {}
        pattern = as_text(inputs.get("pattern") or "*")
        names = [n for n in self._run.artifacts if fnmatch.fnmatchcase(n, pattern)]
        for name in names:
            target = into if truthy(inputs.get("merge-multiple", False)) else into / name
            shutil.copytree(self._run.artifacts[name], target, dirs_exist_ok=True)
        return 0, f"downloaded {', '.join(names) or 'nothing'}", {}


def _needs(job: dict) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _key_values(text: str) -> dict[str, str]:
    """`NAME=value` lines and `NAME<<DELIMITER` blocks, as GITHUB_OUTPUT and GITHUB_ENV hold them."""
    values, lines = {}, iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delimiter = line.split("<<", 1)
            block = []
            for more in lines:
                if more == delimiter:
                    break
                block.append(more)
            values[key] = "\n".join(block)
        elif "=" in line:
            key, value = line.split("=", 1)
            values[key] = value
    return values


# --- the scratch repository ------------------------------------------------------------------------------------------

KERNELS = {
    "pyproject.toml": '[project]\nname = "kernels"\nversion = "0"\n\n[tool.xisa]\nspecs = ["kernels"]\n',
    "README.md": "Some kernels.\n",
    "kernels/scale.py": '''\
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * factor, mask=mask)
''',
    "kernels/scale.yaml": '''\
name: scale
source: scale.py
function: scale_kernel
targets: [gfx942]
defaults:
  args: {x_ptr: '*fp32', y_ptr: '*fp32', n: 4096, factor: 2.0}
cases:
  - name: small
    constexprs: {BLOCK: 128}
  - name: big
    constexprs: {BLOCK: 1024}
''',
    "kernels/add.py": '''\
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))
''',
    "kernels/add.yaml": '''\
name: add
source: add.py
function: add_kernel
targets: [gfx942]
cases:
  - name: c
    args: {x_ptr: '*fp32', y_ptr: '*fp32', out_ptr: '*fp32'}
    constexprs: {BLOCK: 256}
''',
}
CELLS = ["add:c@gfx942", "scale:big@gfx942", "scale:small@gfx942"]


def _publish_merge_ref(dev: Path) -> None:
    """refs/pull/N/merge on the origin: the PR merged into main, what a pull_request run checks out."""
    git(dev, "checkout", "-q", "--detach", "origin/main")
    git(dev, "merge", "-q", "--no-ff", "pr", "-m", f"Merge pr into main (#{PR_NUMBER})")
    git(dev, "push", "-q", "--force", "origin", f"HEAD:refs/pull/{PR_NUMBER}/merge", "pr:pr")
    git(dev, "checkout", "-q", "pr")


def scratch_repository(root: Path) -> tuple[Path, Path]:
    """An origin (bare) with main (two kernels, three cells on gfx942, blessed) and a PR branch touching no kernel,
    and the developer's clone. The developer's xisa cache is their own."""
    origin, dev = root / "origin.git", root / "dev"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    for name, text in KERNELS.items():
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).write_text(text)
    (dev / ".gitignore").write_text(".xisa-cache/\n")
    blessed = xisa_process("bless", cwd=dev, cache=root / "dev-cache", entry_point=True)
    assert blessed.code == 0, blessed.err
    git(dev, "add", "-A")
    git(dev, "commit", "-q", "-m", "kernels and their goldens")
    git(dev, "remote", "add", "origin", origin.as_uri())
    git(dev, "push", "-q", "origin", "main")
    git(dev, "checkout", "-q", "-b", "pr")
    (dev / "README.md").write_text("Some kernels, documented.\n")
    git(dev, "commit", "-q", "-am", "docs")
    git(dev, "fetch", "-q", "origin")
    _publish_merge_ref(dev)
    return origin, dev


def _check_reports(run: WorkflowRun) -> dict[str, dict]:
    """Every cell of the check's shard reports (the artifacts), by id: exactly once across the shards."""
    cells: dict[str, dict] = {}
    for name, folder in run.artifacts.items():
        for report in folder.glob("shard-*.json"):
            for cell in json.loads(report.read_text())["cells"]:
                cell_id = f"{cell['kernel']}:{cell['case']}@{cell['target']}"
                assert cell_id not in cells, f"{cell_id} in two shards"
                cells[cell_id] = cell
    return cells


def _stores(runner: Path) -> dict[str, int]:
    """The entries a runner's xisa cache holds per store: a compile (or a load) leaves some outside results/."""
    cache = runner / ".xisa-cache"
    return {store: sum(1 for p in (cache / store).rglob("*") if p.is_file())
            for store in ("results", "backend", "frontend", "loads") if (cache / store).is_dir()}


def _last_run(runner: Path) -> dict:
    return json.loads((runner / ".xisa-cache" / "last-run.json").read_text())


def test_the_example_workflow_answers_every_unchanged_cell_from_the_cache_it_restores(tmp_path):
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert "XISA_SHARD_SECONDS" in workflow["env"]
    origin, dev = scratch_repository(tmp_path)
    # XISA_SHARD_SECONDS is the user's to set in their copy: 2 s on one core splits the cold run's three cells
    # (1 s each, nothing recorded yet) into two shards, so that the matrix, the artifacts and the merge are exercised
    actions = GitHub(tmp_path / "gh", origin, workflow, env={"XISA_SHARD_SECONDS": "2"},
                     variables={"XISA_REQUIREMENT": "xisa @ git+https://github.com/OWNER/xisa@0123456"})
    record = tmp_path / "gh"

    # 1. main is pushed: a cold run, which saves the cache every pull request may restore.
    first = actions.push(100)
    assert first.jobs == {"plan": "success", "check-1": "success", "check-2": "success", "check": "success",
                          "gate": "success"}, first.log()
    cold = _check_reports(first)
    assert sorted(cold) == CELLS and all(c["verdict"] == "same" and c["cached"] is False for c in cold.values()), \
        first.log()
    assert "cache not found" in first.step("check-1", "Result cache").log
    assert set(_stores(first.runners["gate"])) == {"results"}, first.log()   # the shards' results, to be saved
    assert first.step("gate", "Gate against").conclusion == "skipped" and not (record / "gh").exists()
    assert first.step("gate", "Verdict").code == 0
    pip = (record / "pip").read_text()
    assert "install triton==3.8.0 torch==2.13.0 xisa @ git+https://github.com/OWNER/xisa@0123456" in pip
    assert "install -e . triton==3.8.0 torch==2.13.0" in pip

    # 2. A pull request that touches no kernel: on fresh runners, with main's cache restored as the YAML restores
    # it, every cell is answered from it; no job loads or compiles anything.
    second = actions.pull_request(101, body="Docs only.\n")
    assert second.jobs["check"] == "success" and second.jobs["gate"] == "success", second.log()
    warm = _check_reports(second)
    assert sorted(warm) == CELLS and all(c["verdict"] == "same" and c["cached"] is True for c in warm.values()), \
        second.log()
    assert "(saved by refs/heads/main)" in second.step("check-1", "Result cache").log
    for label, runner in second.runners.items():
        if label != "plan":   # the shards and the gate's `xisa diff` and `xisa report`
            assert set(_stores(runner)) == {"results"} and _last_run(runner)["compiled"] == 0, (label, _stores(runner))
    comment = (record / "comment.md").read_text()
    assert "**pass" in comment and "(exit 0)" in comment and second.step("gate", "Verdict").code == 0, comment

    # 3. The PR edits one kernel (and re-blesses it): that cell alone compiles, and the gate reports it changed.
    add = dev / "kernels" / "add.py"
    add.write_text(add.read_text().replace("+ tl.load(y_ptr + offsets))", "* tl.load(y_ptr + offsets))"))
    blessed = xisa_process("bless", cwd=dev, cache=tmp_path / "dev-cache", entry_point=True)
    assert blessed.code == 0 and "wrote golden/add/c/gfx942.yaml" in blessed.out, blessed.out + blessed.err
    git(dev, "commit", "-q", "-am", "add: multiply")
    _publish_merge_ref(dev)
    third = actions.pull_request(102, body="Multiply.\r\n\r\nxisa-scope: gfx942:add\r\n")
    assert third.jobs["check"] == "success" and third.jobs["gate"] == "success", third.log()
    edited = _check_reports(third)
    assert {cell: report["cached"] for cell, report in edited.items()} == \
        {"add:c@gfx942": False, "scale:big@gfx942": True, "scale:small@gfx942": True}, third.log()
    assert all(c["verdict"] == "same" for c in edited.values())   # against the PR's own, re-blessed goldens
    # the key moved with the kernel: the PR's own last cache, under the restore-key prefix
    assert "(saved by refs/pull/7/merge)" in third.step("check-1", "Result cache").log
    comment = (record / "comment.md").read_text()
    assert "`add:c`" in comment and "changed (in scope)" in comment and "**pass" in comment, comment
    assert third.step("gate", "Verdict").code == 0
