"""`xisa merge` trusts no shard: each report names its selection, and merge refuses (exit 2, one line
naming the file and the field) anything that does not add up to one complete, consistent selection.

One project is blessed, then a kernel edit changes the gfx1100 cells: the unsharded check exits 1.
The shards of that check merge to the same verdict; tampered, mixed, malformed or missing shards are
refused. Tampering is done on the JSON, and merge runs in-process (the real CLI entry point).
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

import xisa.cli
from support import copy_tinyproj, xisa_process


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_cache) -> dict[str, object]:
    """The unsharded report, its two shards, and two shards of different --arch selections."""
    root = tmp_path_factory.mktemp("merge")
    project = copy_tinyproj(root / "tinyproj")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    assert xisa_process("bless", cwd=project, cache=shared_cache).code == 0
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "goldens"], cwd=project,
                   check=True)
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor + 1.0", "y = x * factor + 3.0"))  # gfx11 only
    whole = xisa_process("check", "--format", "json", cwd=project, cache=shared_cache)
    out: dict[str, object] = {"project": project, "whole": whole}
    runs = {"s1": ["--shard", "1/2"], "s2": ["--shard", "2/2"],
            "gfx1100": ["--arch", "gfx1100", "--shard", "1/2"], "gfx942": ["--arch", "gfx942", "--shard", "2/2"]}
    for name, args in runs.items():
        path = root / f"{name}.json"
        result = xisa_process("check", *args, "--format", "json", "--output", str(path), cwd=project, cache=shared_cache)
        assert result.code in (0, 1), result.err
        out[name] = json.loads(path.read_text())
    return out


def _merge(tmp_path: Path, capsys, *reports, args: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Write each report (a dict, or raw text) to a file and run `xisa merge` on them in-process."""
    paths = []
    for index, report in enumerate(reports, 1):
        path = tmp_path / f"shard-{index}.json"
        path.write_text(report if isinstance(report, str) else json.dumps(report))
        paths.append(str(path))
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        xisa.cli.main(["merge", *paths, *args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def _one_line(err: str, *needles: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("xisa: error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_each_check_report_names_its_selection(shards):
    whole, s1 = json.loads(shards["whole"].out), shards["s1"]
    selection = whole["selection"]
    assert selection["arguments"] == {"arch": None, "kernel": None, "specs": ["kernels"], "golden": "golden"}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=shards["project"], capture_output=True, text=True)
    assert selection["commit"] == head.stdout.strip()
    assert len(selection["golden_sha256"]) == 64
    assert selection["xisa_version"] == xisa.__version__
    assert selection["cells"] == sorted(f"{c['kernel']}:{c['case']}@{c['target']}" for c in whole["cells"])
    # A shard names the whole selection, and how it was split (by hash: no --timings).
    assert selection["shard_plan"] is None
    assert {**s1["selection"], "shard_plan": None} == selection and s1["shard"] == [1, 2]
    assert s1["selection"]["shard_plan"] == {"method": "hash", "count": 2, "weights_ms": None}
    assert shards["gfx1100"]["selection"]["arguments"]["arch"] == ["gfx1100"]


def test_shards_merge_to_the_unsharded_verdict(shards, tmp_path, capsys):
    whole = json.loads(shards["whole"].out)
    assert shards["whole"].code == whole["exit_code"] == 1
    code, out, err = _merge(tmp_path, capsys, shards["s1"], shards["s2"], args=("--format", "json"))
    merged = json.loads(out)
    assert code == merged["exit_code"] == shards["whole"].code, err
    for key in ("counts", "isolation_violated", "selection", "toolchain", "scopes", "problems"):
        assert merged[key] == whole[key], key
    # Each cell as the unsharded run judged it; whether a run found it in the cache is that run's own fact.
    def verdicts(report: dict) -> list[dict]:
        return [{k: v for k, v in cell.items() if k != "cached"} for cell in report["cells"]]

    assert verdicts(merged) == verdicts(whole)
    assert all(isinstance(cell["cached"], bool) for cell in merged["cells"])


def test_shards_of_different_selections_are_refused(shards, tmp_path, capsys):
    """An --arch gfx1100 shard 1/2 and an --arch gfx942 shard 2/2: 3 of 8 cells, byte-identical."""
    code, _, err = _merge(tmp_path, capsys, shards["gfx1100"], shards["gfx942"])
    assert code == 2
    _one_line(err, "shard-2.json: selection.arguments.arch", "not of one selection")


def _cell(report: dict, verdict: str) -> dict:
    return next(c for c in report["cells"] if c["verdict"] == verdict)


def _tamper(case: str, s1: dict, s2: dict) -> tuple[object, object]:
    """A change to shard 1 (or both), as a sloppy script or a hostile artifact would make it."""
    if case == "verdict-relabelled-ok":
        _cell(s1, "changed")["verdict"] = "ok"
    elif case == "changed-relabelled-same":
        cell = _cell(s1, "changed")
        cell["verdict"], cell["delta"] = "same", None
        s1["counts"] = {"same": s1["counts"]["same"] + 1, **{k: v for k, v in s1["counts"].items()
                                                             if k not in ("same", "changed")}}
    elif case == "in-scope-a-string":
        _cell(s1, "changed")["in_scope"] = "false"
    elif case == "in-scope-not-the-scopes":
        _cell(s1, "changed")["in_scope"] = True
    elif case == "instructions-a-string":
        s1["cells"][0]["head_instructions"] = str(s1["cells"][0]["head_instructions"])
    elif case == "field-missing":
        del s1["cells"][0]["verdict"]
    elif case == "exit-code-edited":
        s1["exit_code"] = 0
    elif case == "cell-dropped":
        dropped = _cell(s1, "same")
        s1["cells"].remove(dropped)
        s1["counts"]["same"] -= 1
    elif case == "cell-in-the-wrong-shard":
        moved = _cell(s2, "same")
        s2["cells"].remove(moved)
        s2["counts"]["same"] -= 1
        s1["cells"].append(moved)
        s1["counts"]["same"] += 1
    elif case == "other-commit":
        s1["selection"]["commit"] = "0" * 40
    elif case == "other-goldens":
        s1["selection"]["golden_sha256"] = "0" * 64
    elif case == "other-toolchain":
        s1["toolchain"]["triton"] = "3.6.0"
    elif case == "other-schema":
        s1["schema"] = 99
    elif case == "no-selection":
        del s1["selection"]
    elif case == "truncated":
        return json.dumps(s1)[:300], s2
    elif case == "not-an-object":
        return "[1, 2]", s2
    elif case == "nan":
        return json.dumps(s1).replace('"exit_code": 1', '"exit_code": NaN'), s2
    elif case == "duplicate-key":
        return json.dumps(s1)[:-1] + ', "exit_code": 0}', s2
    elif case == "unsharded":
        s1["shard"] = None
    return s1, s2


# case -> needles in the one-line error
TAMPERED = {
    "verdict-relabelled-ok": ["shard-1.json: cells[", ".verdict", "unknown verdict 'ok'"],
    "changed-relabelled-same": ["shard-1.json: cells[", ".verdict", "'same' disagrees with the fingerprints"],
    "in-scope-a-string": ["shard-1.json: cells[", ".in_scope", "must be bool, got str"],
    "in-scope-not-the-scopes": ["shard-1.json: cells[", ".in_scope", "the report's scopes say otherwise"],
    "instructions-a-string": ["shard-1.json: cells[0]", ".head_instructions", "must be int or null, got str"],
    "field-missing": ["shard-1.json: cells[0]", ".verdict: missing"],
    "exit-code-edited": ["shard-1.json: exit_code", "disagrees with the cells"],
    "cell-dropped": ["shard-1.json: cells", "cell(s) of the selection are missing"],
    "cell-in-the-wrong-shard": ["shard-1.json: cells[", "belongs to shard 2/2, not 1/2"],
    "other-commit": ["shard-2.json: selection.commit", "not of one selection"],
    "other-goldens": ["shard-2.json: selection.golden_sha256", "not of one selection"],
    "other-toolchain": ["shard-2.json: toolchain.triton", "different toolchains"],
    "other-schema": ["shard-1.json: schema", "is not 1"],
    "no-selection": ["shard-1.json: selection: missing"],
    "truncated": ["shard-1.json: not a JSON report"],
    "not-an-object": ["shard-1.json: kind: not an `xisa check --format json` report"],
    "nan": ["shard-1.json: not a JSON report", "NaN is not JSON"],
    "duplicate-key": ["shard-1.json: not a JSON report", "duplicate key 'exit_code'"],
    "unsharded": ["shard-1.json: shard", "not from a sharded run"],
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_or_malformed_shard_is_refused(shards, tmp_path, capsys, case):
    s1, s2 = _tamper(case, copy.deepcopy(shards["s1"]), copy.deepcopy(shards["s2"]))
    code, out, err = _merge(tmp_path, capsys, s1, s2)
    assert code == 2 and not out
    _one_line(err, *TAMPERED[case])


def test_missing_and_duplicate_shards_are_refused(shards, tmp_path, capsys):
    code, _, err = _merge(tmp_path, capsys, shards["s1"])
    assert code == 2
    _one_line(err, "missing shard(s) 2/2")
    code, _, err = _merge(tmp_path, capsys, shards["s1"], shards["s1"], shards["s2"])
    assert code == 2
    _one_line(err, "shard-2.json: shard", "shard 1/2 is given twice")


# ---------------------------------------------------------------- shards split by recorded timings

@pytest.fixture(scope="module")
def timed_shards(shards, tmp_path_factory, shared_cache) -> dict[str, object]:
    """The changed project's check in 3 shards split by a timings file in which one cell costs 100 s, the
    others about 1 s: that cell alone in its shard, by hash it would share one."""
    project, root = shards["project"], tmp_path_factory.mktemp("timed")
    cells = json.loads(shards["whole"].out)["selection"]["cells"]
    heavy = "dot:f16_32@gfx942"
    timings = root / "timings.json"
    timings.write_text(json.dumps({cid: 100.0 if cid == heavy else 1.0 + i / 10 for i, cid in enumerate(cells)}))
    out: dict[str, object] = {"cells": cells, "heavy": heavy, "timings": timings, "project": project}
    for index in (1, 2, 3):
        path = root / f"t{index}.json"
        result = xisa_process("check", "--shard", f"{index}/3", "--timings", str(timings), "--format", "json",
                              "--output", str(path), cwd=project, cache=shared_cache)
        assert result.code in (0, 1), result.err
        assert "split by cell hash" not in result.err and f"note: shard {index}/3 by recorded timings: " in result.err
        if index == 1:   # the 100 s cell alone: the slowest shard, its seconds over the mean of the three
            assert "1 cells, 100.0 s; slowest shard 100.0 s" in result.err
        out[f"t{index}"] = json.loads(path.read_text())
    return out


def _ids(report: dict) -> list[str]:
    return [f"{c['kernel']}:{c['case']}@{c['target']}" for c in report["cells"]]


def test_shards_by_timings_hold_every_cell_once_and_merge_to_the_unsharded_verdict(shards, timed_shards, tmp_path,
                                                                                 capsys):
    parts = [_ids(timed_shards[f"t{i}"]) for i in (1, 2, 3)]
    assert sorted(cid for part in parts for cid in part) == sorted(timed_shards["cells"])
    assert parts[0] == [timed_shards["heavy"]]                  # the 100 s cell alone in the first shard
    plan = timed_shards["t1"]["selection"]["shard_plan"]
    assert plan["method"] == "timings" and plan["count"] == 3 and set(plan["weights_ms"]) == set(timed_shards["cells"])
    code, out, err = _merge(tmp_path, capsys, timed_shards["t3"], timed_shards["t1"], timed_shards["t2"],
                            args=("--format", "json"))
    whole = json.loads(shards["whole"].out)
    assert code == whole["exit_code"] == 1, err
    merged = json.loads(out)
    assert merged["counts"] == whole["counts"] and merged["selection"] == whole["selection"]
    # `xisa shards` shows the same split, without compiling
    shown = xisa_process("shards", "3", "--timings", str(timed_shards["timings"]), "--format", "json",
                         cwd=timed_shards["project"])
    assert shown.code == 0, shown.err
    summary = json.loads(shown.out)
    assert [s["cells"] for s in summary["shards"]] == [len(part) for part in parts]
    assert summary["shards"][0]["seconds"] == 100.0 and summary["matrix"] == [1, 2, 3]


def _timed_tamper(case: str, t1: dict, t2: dict, t3: dict) -> None:
    if case == "weight-edited":
        cid = next(iter(t2["selection"]["shard_plan"]["weights_ms"]))
        t2["selection"]["shard_plan"]["weights_ms"][cid] += 1
    elif case == "weights-for-one-cell-too-few":
        for report in (t1, t2, t3):
            report["selection"]["shard_plan"]["weights_ms"].popitem()
    elif case == "plan-of-another-count":
        for report in (t1, t2, t3):
            report["selection"]["shard_plan"]["count"] = 2
    elif case == "split-by-hash-instead":
        for report in (t1, t2, t3):
            report["selection"]["shard_plan"] = {"method": "hash", "count": 3, "weights_ms": None}
    elif case == "a-cell-moved":
        moved = t2["cells"].pop()
        t2["counts"][moved["verdict"]] -= 1
        t1["cells"].append(moved)
        t1["counts"][moved["verdict"]] = t1["counts"].get(moved["verdict"], 0) + 1


TIMED_TAMPERED = {
    "weight-edited": ["selection.shard_plan.weights_ms.", "not of one selection"],
    "weights-for-one-cell-too-few": ["selection.shard_plan.weights_ms", "does not weigh exactly the selected cells"],
    "plan-of-another-count": ["selection.shard_plan.count", "the shard plan is for 2 shards"],
    "split-by-hash-instead": ["shard-1.json: cells"],       # another split: a cell missing or in the wrong shard
    "a-cell-moved": ["shard-1.json: cells[", "not 1/3"],
}


@pytest.mark.parametrize("case", sorted(TIMED_TAMPERED))
def test_a_shard_whose_plan_or_cells_were_edited_is_refused(timed_shards, tmp_path, capsys, case):
    t1, t2, t3 = (copy.deepcopy(timed_shards[f"t{i}"]) for i in (1, 2, 3))
    _timed_tamper(case, t1, t2, t3)
    code, out, err = _merge(tmp_path, capsys, t1, t2, t3)
    assert code == 2 and not out
    _one_line(err, *TIMED_TAMPERED[case])


def test_timings_without_a_shard_or_from_the_runs_own_cache_are_refused(timed_shards, shared_cache):
    project = timed_shards["project"]
    alone = xisa_process("check", "--timings", str(timed_shards["timings"]), cwd=project, cache=shared_cache)
    assert alone.code == 2 and "--timings: --timings splits shards: it needs --shard" in alone.err
    live = shared_cache / "timings.json"
    own = xisa_process("check", "--shard", "1/2", "--timings", str(live), cwd=project, cache=shared_cache)
    assert own.code == 2 and "is the timings file of this run's own cache" in own.err
    bad = timed_shards["timings"].with_name("bad.json")
    bad.write_text('{"dot:f16_32@gfx942": -3}')
    refused = xisa_process("check", "--shard", "1/2", "--timings", str(bad), cwd=project, cache=shared_cache)
    assert refused.code == 2 and f"{bad}: dot:f16_32@gfx942: -3 is not a number of seconds >= 0" in refused.err
