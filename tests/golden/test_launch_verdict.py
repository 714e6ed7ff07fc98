"""`cannot-launch`: a cell whose one workgroup exceeds its target's per-workgroup LDS fails `xisa check`
(exit 1, a message naming the resource, the use and the limit) in every output, unless its spec says
`launchable: false` for that target. The fixture's `big` tile fits gfx950's workgroups, not gfx942's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support import FIXTURES, REPO
from xisa.spec.targets import load_targets

GFX942 = load_targets([REPO / "targets"])["gfx942"]
LIMIT = GFX942.occupancy["lds_per_workgroup"]


@pytest.fixture
def launchproj(tmp_path, run_xisa) -> Path:
    project = tmp_path / "launchproj"
    shutil.copytree(FIXTURES / "launchproj", project)
    blessed = run_xisa("bless", cwd=project)
    assert blessed.code == 1, blessed.err      # blessed, and the cell that cannot launch said so
    return project


def _cells(outcome) -> dict[str, dict]:
    return {f"{c['kernel']}:{c['case']}@{c['target']}": c for c in json.loads(outcome.out)["cells"]}


def _expect_no_launch_on_gfx942(project: Path) -> None:
    spec = project / "kernels" / "tiles.yaml"
    spec.write_text(spec.read_text().replace("    constexprs: {BLOCK_M: 128, BLOCK_N: 256, BLOCK_K: 64}",
                                             "    constexprs: {BLOCK_M: 128, BLOCK_N: 256, BLOCK_K: 64}\n"
                                             "    expect: {gfx942: {launchable: false}}"))


def test_a_cell_over_the_lds_limit_fails_check_in_every_output(launchproj, run_xisa, tmp_path):
    compiled = run_xisa("compile", "--json", cwd=launchproj)
    assert compiled.code == 1
    cells = _cells(compiled)
    lds = cells["tiles:big@gfx942"]["resources"]["lds_bytes"]
    assert lds > LIMIT
    line = f"tiles:big@gfx942 cannot launch: lds_bytes {lds} > {LIMIT} per workgroup"
    assert line in compiled.err and "gfx942.yaml" in compiled.err
    assert cells["tiles:big@gfx942"]["launch"]["launchable"] is False
    assert [c for c, v in cells.items() if not v["launch"]["launchable"]] == ["tiles:big@gfx942"]

    check = run_xisa("check", "--format", "json", cwd=launchproj)
    assert check.code == 1
    verdicts = {cid: c["verdict"] for cid, c in _cells(check).items()}
    assert verdicts == {"tiles:big@gfx942": "cannot-launch", "tiles:big@gfx950": "same",
                        "tiles:small@gfx942": "same", "tiles:small@gfx950": "same"}
    big = _cells(check)["tiles:big@gfx942"]
    assert big["message"].startswith(f"cannot launch: lds_bytes {lds} > {LIMIT} per workgroup")
    assert big["launch"]["exceeds"] == [{"resource": "lds_bytes", "used": lds, "limit": LIMIT,
                                         "per": "per workgroup", "limit_key": "lds_per_workgroup"}]
    assert json.loads(check.out)["counts"] == {"cannot-launch": 1, "same": 3}

    text = run_xisa("check", cwd=launchproj)
    assert text.code == 1 and "cannot-launch: tiles:big@gfx942: cannot launch: lds_bytes" in text.out
    markdown = run_xisa("check", "--format", "markdown", cwd=launchproj)
    assert "| cannot-launch |" in markdown.out and f"- `tiles:big`: cannot launch: lds_bytes {lds}" in markdown.out
    junit = run_xisa("check", "--format", "junit", cwd=launchproj)
    assert 'failures="1"' in junit.out and "cannot-launch: cannot launch: lds_bytes" in junit.out
    page = tmp_path / "report.html"
    assert run_xisa("report", "--html", str(page), cwd=launchproj).code == 1
    html = page.read_text()
    assert 'data-cell="tiles:big@gfx942" data-verdict="cannot-launch"' in html
    assert f"lds_bytes {lds} &gt; {LIMIT} per workgroup" in html

    shard = tmp_path / "shard.json"
    assert run_xisa("check", "--shard", "1/1", "--format", "json", "--output", str(shard), cwd=launchproj).code == 1
    merged = run_xisa("merge", str(shard), cwd=launchproj)
    assert merged.code == 1 and f"cannot-launch: tiles:big@gfx942: cannot launch: lds_bytes {lds}" in merged.out
    # A shard that calls the cell `same` disagrees with its own launch: refused.
    data = json.loads(shard.read_text())
    for cell in data["cells"]:
        if cell["verdict"] == "cannot-launch":
            cell["verdict"], cell["message"] = "same", ""
    data["counts"], data["exit_code"] = {"same": 4}, 0
    shard.write_text(json.dumps(data))
    refused = run_xisa("merge", str(shard), cwd=launchproj)
    assert refused.code == 2 and "disagrees with its launch" in refused.err


def test_launchable_false_makes_it_pass_and_it_is_still_shown(launchproj, run_xisa, tmp_path):
    _expect_no_launch_on_gfx942(launchproj)
    check = run_xisa("check", "--format", "json", cwd=launchproj)
    assert check.code == 0, check.out[-2000:] + check.err
    big = _cells(check)["tiles:big@gfx942"]
    assert big["verdict"] == "same"
    assert big["launch"]["launchable"] is False and big["launch"]["expected"] is False
    text = run_xisa("check", cwd=launchproj)
    assert text.code == 0 and "cannot launch (expected)" in text.out
    compiled = run_xisa("compile", cwd=launchproj)
    assert compiled.code == 0 and "cannot launch (expected)" in compiled.out
    page = tmp_path / "report.html"
    assert run_xisa("report", "--html", str(page), cwd=launchproj).code == 0
    assert "cannot launch (expected)" in page.read_text()
    # The golden still guards its code: a changed golden is a changed cell.
    import yaml

    golden = launchproj / "golden" / "tiles" / "big" / "gfx942.yaml"
    data = yaml.safe_load(golden.read_text())      # edited self-consistently: a changed cell, not a corrupt one
    data["resources"]["sgprs"] += 1
    golden.write_text(yaml.safe_dump(data, sort_keys=True))
    changed = run_xisa("check", "--format", "json", cwd=launchproj)
    assert changed.code == 1 and _cells(changed)["tiles:big@gfx942"]["verdict"] == "changed"


def test_launchable_false_on_a_target_where_it_launches_is_a_failed_expectation(launchproj, run_xisa):
    spec = launchproj / "kernels" / "tiles.yaml"
    spec.write_text(spec.read_text().replace("    constexprs: {BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 32}",
                                             "    constexprs: {BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 32}\n"
                                             "    expect: {gfx950: {launchable: false}}"))
    check = run_xisa("check", "--format", "json", cwd=launchproj)
    assert check.code == 1
    small = _cells(check)["tiles:small@gfx950"]
    assert small["verdict"] == "expectation-failed"
    assert small["expectations"] == ["launchable == false expected (target pattern 'gfx950'), got true"]


def test_the_pytest_plugin_fails_the_item_and_shows_an_expected_one(launchproj, shared_cache):
    import os
    import subprocess
    import sys

    def pytest_xisa() -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env["XISA_CACHE_DIR"] = str(shared_cache)
        return subprocess.run([sys.executable, "-m", "pytest", "--xisa", "-q", "-rA", "-p", "no:cacheprovider",
                               "kernels"], cwd=launchproj, env=env, capture_output=True, text=True, timeout=900)

    failing = pytest_xisa()
    assert failing.returncode == 1 and "1 failed, 3 passed" in failing.stdout, failing.stdout[-3000:]
    assert "tiles:big@gfx942: cannot-launch: cannot launch: lds_bytes" in failing.stdout
    _expect_no_launch_on_gfx942(launchproj)
    passing = pytest_xisa()
    assert passing.returncode == 0 and "4 passed" in passing.stdout, passing.stdout[-3000:]
    assert "tiles:big@gfx942 cannot launch: lds_bytes" in passing.stdout + passing.stderr
    assert "(expected: launchable: false)" in passing.stdout + passing.stderr
