"""One verdict, every renderer: for one run, the HTML page, markdown, text and JSON state the same outcome (pass,
fail or untrusted) and the same exit code as `xisa check` and `xisa diff` with the same flags."""

from __future__ import annotations

import json
import re

import pytest

from support import gfx11_branch_change, git

LABEL = {0: "pass", 1: "fail", 2: "untrusted"}


def _stated(text: str) -> tuple[str, int]:
    """The one outcome line of a text report (`outcome: LABEL: why (exit N)`, its last) or markdown (`**LABEL: why**
    (exit N)`, at the top)."""
    found = re.findall(r"^(?:outcome: )?\**(pass|fail|untrusted): .*?\**\s*\(exit (\d)\)\s*$", text, re.M)
    assert len(found) == 1, text
    return found[0][0], int(found[0][1])


def _page(path) -> tuple[str, int]:
    text = path.read_text()
    outcome = re.search(r'<p class="outcome exit-(\d)" id="outcome">(pass|fail|untrusted):', text)
    exit_code = re.search(r'exit code <b id="exit-code">(\d)</b>', text)
    assert outcome and exit_code, text[:2000]
    assert outcome.group(1) == exit_code.group(1)
    return outcome.group(2), int(exit_code.group(1))


@pytest.fixture
def changed_on_gfx11(run_xisa, tinyproj):
    """tinyproj with its goldens committed, then a change to the gfx11 branch blessed on gfx1100 only."""
    assert run_xisa("bless", cwd=tinyproj).code == 0
    git(tinyproj, "init", "-q")
    git(tinyproj, "add", "-A")
    git(tinyproj, "commit", "-qm", "base")
    gfx11_branch_change(tinyproj)
    assert run_xisa("bless", "--arch", "gfx1100", cwd=tinyproj).code == 0
    return tinyproj


@pytest.mark.parametrize("flags,expected", [
    (["--base", "HEAD", "--scope", "gfx1100"], 0),     # the change inside its scope
    (["--base", "HEAD", "--scope", "gfx942"], 1),      # the same change outside the declared scope: isolation
    (["--base", "HEAD"], 1),                           # no scope: every change violates isolation
    (["--scope", "gfx942"], 0),                        # against this tree's goldens, which the bless updated
])
def test_every_renderer_states_the_gate_verdict(run_xisa, changed_on_gfx11, tmp_path, flags, expected):
    project = changed_on_gfx11
    check = run_xisa("check", *flags, cwd=project)
    assert check.code == expected, check.err
    assert _stated(check.out) == (LABEL[expected], expected)
    for fmt in ("markdown", "text"):
        out = run_xisa("check", *flags, "--format", fmt, "-o", str(tmp_path / f"r.{fmt}"), cwd=project)
        assert out.code == expected
        assert _stated((tmp_path / f"r.{fmt}").read_text()) == (LABEL[expected], expected), fmt
    out = run_xisa("check", *flags, "--format", "json", cwd=project)
    assert out.code == expected and json.loads(out.out)["exit_code"] == expected
    if "--base" in flags:
        diff = run_xisa("diff", *flags, cwd=project)
        assert diff.code == expected and _stated(diff.out) == (LABEL[expected], expected)
    page = tmp_path / "r.html"
    report = run_xisa("report", "--html", str(page), *flags, cwd=project)
    assert report.code == expected, report.err
    assert _page(page) == (LABEL[expected], expected)
    assert "reported and not failed" not in page.read_text()
