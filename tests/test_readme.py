"""The README's two set-up commands are what CI runs, and they never pull an unpinned torch; the README is short,
links every docs page, every link of it and of docs/ resolves, every command block parses and names real xisa
commands and options, and its shard-and-merge lines run as written."""

from __future__ import annotations

import re

import pytest

from support import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", setup, flags=re.S)


@pytest.mark.unit
def test_two_setup_commands_main_job_and_tests():
    main, tests = readme_commands()
    assert main.startswith("python3 -m venv .venv") and main.endswith("xisa check")
    assert tests.startswith("python3 -m venv .venv") and tests.endswith("python -m pytest")
    for command in (main, tests):
        assert "torch==" in command          # never an unpinned torch: that pulls a CUDA build on a CPU machine
        assert "triton==3.8.0" in command    # the toolchain the goldens are made with


@pytest.mark.unit
def test_ci_runs_the_readme_test_command_and_the_isolation_check():
    ci = (REPO / ".ci" / "run").read_text()
    _, tests = readme_commands()
    assert tests in ci
    assert "xisa check" in ci.split(tests, 1)[1]


@pytest.mark.unit
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


# ---------------------------------------------------------------- the README is short, its pages are linked, every
# link resolves and every command block parses (the README's shard lines run as written, below)

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples" / "pre-commit" / "README.md"]
SHELL = {"bash", "sh", "shell", "console"}
SHELL_WORDS = {"do", "then", "else", "if", "elif", "while", "until", "time", "!", "{"}   # before a command


def _blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as (language, body)."""
    return re.findall(r"^```([\w-]*)[^\n]*\n(.*?)^```", text, flags=re.S | re.M)


def _prose(text: str) -> str:
    """The text outside fenced blocks and inline code: where a link is a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, code marks and punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose_keep_headings(path.read_text()), flags=re.M):
        slug = _slug(heading.replace("`", ""))
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _prose_keep_headings(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _links(path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", _prose(path.read_text()))


@pytest.mark.unit
def test_the_readme_is_read_in_ten_minutes():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    text = "\n".join(lines)
    # six steps, in order, to adopt it on a library
    steps = re.findall(r"^\*\*(\d)\. ([A-Za-z ]+)\*\*", text, flags=re.M)
    assert [(int(n), name.split()[0]) for n, name in steps] == [
        (1, "Capture"), (2, "Compile"), (3, "Bless"), (4, "Commit"), (5, "CI"), (6, "The")]
    # no figure that needs a commit per CI run, no path of one machine
    assert not re.search(r"\b\d[\d,]* (tests|passed)\b", text)
    for page in PAGES:
        assert not re.search(r"(?<![\w.])/(work|root|tmp)/", page.read_text()), page


@pytest.mark.unit
def test_every_docs_page_is_linked_from_the_readme():
    linked = {(REPO / link.split("#")[0]).resolve() for link in _links(REPO / "README.md") if not link.startswith("http")}
    for page in (REPO / "docs").glob("*.md"):
        assert page.resolve() in linked, f"docs/{page.name} is not linked from the README"


@pytest.mark.unit
def test_every_link_resolves():
    problems = []
    for page in PAGES:
        for link in _links(page):
            if re.match(r"[a-z]+:", link):       # https:, mailto:
                continue
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                problems.append(f"{page.relative_to(REPO)}: {link}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                problems.append(f"{page.relative_to(REPO)}: {link}: no heading #{anchor}")
    assert problems == []


def _words(script: str) -> list[list[str]]:
    """Every `xisa ...` command of a shell script: each simple command split by the shell's rules, a leading
    `NAME=value` dropped; `$(xisa ...)` too."""
    import shlex

    text = re.sub(r"\$\{\{.*?\}\}", "X", script).replace("\\\n", " ")
    found = [shlex.split(inner) for inner in re.findall(r"\$\((xisa [^()]*)\)", text)]
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split, lexer.commenters = True, "#"
        try:
            tokens = list(lexer)
        except ValueError:
            continue
        current: list[str] = []
        for token in [*tokens, ";"]:
            if set(token) <= set(";&|()"):
                while current and (re.match(r"[A-Za-z_]\w*=", current[0]) or current[0] in SHELL_WORDS):
                    current = current[1:]
                if current[:1] == ["xisa"]:
                    found.append(current)
                current = []
            else:
                current.append(token)
    return found


def _xisa_problems(words: list[str]) -> list[str]:
    """What of `xisa SUB... --flag ...` the real command line (the typer app) does not have."""
    import typer.main

    from xisa.cli import app

    command = typer.main.get_command(app)
    at = 1
    while hasattr(command, "commands") and at < len(words) and not words[at].startswith("-"):   # a group
        sub = command.commands.get(words[at])
        if sub is None:
            return [f"{' '.join(words[:at + 1])}: no such command"]
        command, at = sub, at + 1
    options = {"--help"} | {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    problems = []
    for word in words[at:]:
        if word == "--":            # `xisa capture -- COMMAND`: the rest is the command's
            break
        if word.startswith("-") and word != "-" and word.split("=", 1)[0] not in options:
            problems.append(f"{' '.join(words)}: no option {word.split('=', 1)[0]}")
    return problems


def _shell_script(language: str, body: str) -> str:
    if language == "console":       # the commands of a session, not its output
        return "\n".join(line[2:] for line in body.splitlines() if line.startswith("$ "))
    return body


def test_every_command_block_parses_and_names_real_commands():
    import json
    import subprocess
    import tomllib

    import yaml

    problems, xisa_lines = [], 0
    for page in PAGES:
        where = page.relative_to(REPO)
        for language, body in _blocks(page.read_text()):
            try:
                if language in SHELL:
                    script = _shell_script(language, body)
                    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
                    if proc.returncode:
                        problems.append(f"{where}: bash -n: {proc.stderr.strip()}")
                    for words in _words(script):
                        xisa_lines += 1
                        problems += [f"{where}: {p}" for p in _xisa_problems(words)]
                elif language in ("yaml", "yml"):
                    list(yaml.safe_load_all(body))
                elif language == "toml":
                    tomllib.loads(body)
                elif language == "json":
                    json.loads(body)
                elif language == "python":
                    compile(body, str(where), "exec")
            except Exception as exc:   # each parser's own error type
                problems.append(f"{where}: a {language} block does not parse: {exc}")
    assert problems == []
    assert xisa_lines > 50           # the checker saw the commands (not a regex that matches nothing)


@pytest.mark.unit
@pytest.mark.parametrize("words,bad", [
    (["xisa", "check", "--scope", "x"], False),
    (["xisa", "cache", "key", "--list"], False),
    (["xisa", "--version"], False),
    (["xisa", "capture", "--no-run", "--", "python", "-m", "pytest", "-x"], False),
    (["xisa", "check", "--no-such-flag"], True),
    (["xisa", "cache", "purge"], True),
    (["xisa", "chek"], True),
])
def test_the_command_checker_fails_on_what_does_not_exist(words, bad):
    assert bool(_xisa_problems(words)) is bad


@pytest.mark.unit
def test_the_command_finder_sees_every_command_of_a_line():
    script = ("A=1 xisa check --quiet && xisa merge s1.json s2.json   # then\n"
              'echo "key=$(xisa cache key)"\nfor i in 1 2; do xisa check --shard "$i/2"; done\n')
    assert sorted(_words(script)) == sorted([["xisa", "check", "--quiet"], ["xisa", "merge", "s1.json", "s2.json"],
                                             ["xisa", "check", "--shard", "$i/2"], ["xisa", "cache", "key"]])


def test_the_readme_shard_and_merge_lines_run_as_written(tmp_path):
    """They said `xisa check --shard 2/4 --format json -o s2.json && xisa merge s1.json ... s4.json`: `s1.json:
    report not found`. The README's block runs, as is, in a blessed project; merge gives back every cell."""
    import json
    import os
    import subprocess
    import sys

    from support import copy_tinyproj, xisa_process

    text = (REPO / "README.md").read_text()
    [block] = [body for language, body in _blocks(text) if language == "bash" and "xisa merge" in body]
    project = copy_tinyproj(tmp_path / "proj")
    assert xisa_process("bless", "-j", "1", cwd=project).code == 0
    bin_dir = tmp_path / "bin"                        # `xisa` as the installed script would run it
    bin_dir.mkdir()
    (bin_dir / "xisa").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m xisa "$@"\n')
    (bin_dir / "xisa").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", block], cwd=project, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = subprocess.run(["bash", "-c", block.strip().splitlines()[-1].split(" #")[0] + " --format json"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert json.loads(merged.stdout)["counts"] == {"same": 8}
