"""Stage attribution end to end on tinyproj: fingerprints survive moved lines and checkouts, a changed
cell says which stage its change started at, and goldens without stage fingerprints load, compare and
bless exactly as before (`--record-stages` adds them, to unchanged cells only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support import copy_tinyproj
from xisa.analyze.backends import AMD, NVIDIA
from xisa.analyze.stages import NORMALIZERS
from xisa.golden.store import golden_paths, list_goldens
from xisa.yamlio import dump_yaml

ARCH = "gfx942"          # one target keeps these compiles short; the attribution is the backend table's


def _cells(out) -> dict[str, dict]:
    return {f"{c['kernel']}:{c['case']}@{c['target']}": c for c in json.loads(out.out)["cells"]}


def _goldens(project: Path) -> dict[Path, bytes]:
    folder = project / "golden"
    return {path: path.read_bytes() for key in list_goldens(folder)
            for path in golden_paths(folder, *key) if path.exists()}


def _change_scale(project: Path) -> None:
    """A Python-level edit of the path every non-gfx11 target compiles: TTIR changes."""
    source = project / "kernels" / "scale.py"
    text = source.read_text()
    assert "        y = x * factor\n" in text
    source.write_text(text.replace("        y = x * factor\n", "        y = x * factor - 1.0\n"))


def _drop_stages(project: Path) -> None:
    """Make every golden what an xisa before stage fingerprints wrote: the same canonical YAML, no `stages:`."""
    for key in list_goldens(project / "golden"):
        yaml_path, _ = golden_paths(project / "golden", *key)
        data = yaml.safe_load(yaml_path.read_text())
        assert set(data["stages"]) == set(AMD.fingerprinted_stages)
        del data["stages"]
        yaml_path.write_text(dump_yaml(data))


@pytest.fixture
def blessed(run_xisa, tinyproj) -> Path:
    out = run_xisa("bless", "--arch", ARCH, cwd=tinyproj)
    assert out.code == 0, out.err
    return tinyproj


@pytest.mark.parametrize("arch", [ARCH, "sm_90"])
def test_moving_kernel_lines_or_the_project_or_renaming_a_variable_keeps_every_stage_fingerprint(run_xisa, tmp_path,
                                                                                                 arch):
    handler = NVIDIA if arch.startswith("sm_") else AMD
    here = copy_tinyproj(tmp_path / "a" / "tinyproj")
    there = copy_tinyproj(tmp_path / "somewhere" / "else" / "tinyproj")
    for project in (here, there):
        for spec in (project / "kernels").glob("*.yaml"):
            data = yaml.safe_load(spec.read_text())
            data["targets"] = [arch]
            spec.write_text(yaml.safe_dump(data))
    source = there / "kernels" / "scale.py"
    text = source.read_text()
    # Lines moved, and a local variable renamed (Triton names TTIR values after Python variables).
    assert text.count("mask = offsets") == 1 and text.count("mask=mask") == 2
    source.write_text("# comments and blank lines above both kernels move every line\n\n\n" + text.replace(
        "@triton.jit\ndef dot_kernel", "# one more\n\n\n@triton.jit\ndef dot_kernel").replace(
        "mask = offsets", "in_bounds = offsets").replace("mask=mask", "mask=in_bounds"))
    runs = {}
    for project in (here, there):
        # --emit compiles (never a cached answer), so each side's stages are its own compile's
        out = run_xisa("compile", "--arch", arch, "--json", "--emit", str(project / "emitted"), cwd=project)
        assert out.code == 0, out.err
        runs[project] = _cells(out)
    assert set(runs[here]) == set(runs[there]) and len(runs[here]) == 3
    for cell, result in runs[here].items():
        assert result["status"] == "ok", result["error"]
        moved = runs[there][cell]
        assert sorted(result["stages"]) == sorted(handler.fingerprinted_stages)
        assert result["stages"] == moved["stages"], cell
        assert result["stages"][handler.assembly] == result["sha256"]
        if handler is AMD:
            assert result["stages"]["hsaco"] == result["code_sha256"]
        # not vacuous: the raw stages each compile emitted carry its own path and lines
        kernel, rest = cell.split(":")
        case = rest.split("@")[0]
        text_stages = [s for s in handler.fingerprinted_stages if s in NORMALIZERS]
        for stage in text_stages:
            raw = [(p / "emitted" / kernel / case / arch / f"{kernel}.{stage}").read_text() for p in (here, there)]
            assert raw[0] != raw[1], (cell, stage)
            assert str(here) in raw[0] and str(there) in raw[1]
        if kernel == "scale":
            ttir = (there / "emitted" / kernel / case / arch / "scale.ttir").read_text()
            assert "%in_bounds" in ttir and "%mask" not in ttir


def test_a_python_level_change_is_attributed_to_ttir(run_xisa, blessed):
    _change_scale(blessed)
    out = run_xisa("check", "--arch", ARCH, "--format", "json", cwd=blessed)
    assert out.code == 1, out.err
    cells = _cells(out)
    changed = sorted(cell for cell, c in cells.items() if c["verdict"] == "changed")
    differ = sorted(cell for cell, c in cells.items() if c["head_sha256"] != c["base_sha256"])
    assert changed == differ and changed and all(cell.startswith("scale:") for cell in changed)
    for cell, c in cells.items():
        assert set(c["head_stages"]) == set(c["base_stages"]) == set(AMD.fingerprinted_stages)
        if cell in changed:
            assert c["first_changed_stage"] == "ttir" and c["head_stages"]["ttir"] != c["base_stages"]["ttir"]
            assert c["stage_note"] == "first at ttir"
        else:
            assert c["first_changed_stage"] is None and c["head_stages"] == c["base_stages"]
    text = run_xisa("check", "--arch", ARCH, cwd=blessed)
    for cell in changed:
        assert f"{cell}: changed (first at ttir)" in text.out
    markdown = run_xisa("check", "--arch", ARCH, "--format", "markdown", cwd=blessed)
    assert sum("` stages: first at ttir" in line for line in markdown.out.splitlines()) == len(changed)
    page = blessed / "report.html"
    assert run_xisa("report", "--html", str(page), "--arch", ARCH, cwd=blessed).code == 1
    assert page.read_text().count('"stages":"changed (first at ttir)"') == len(changed)


def test_goldens_without_stages_compare_and_bless_as_before(run_xisa, blessed):
    with_stages = run_xisa("check", "--arch", ARCH, cwd=blessed)
    _drop_stages(blessed)
    before = _goldens(blessed)
    without = run_xisa("check", "--arch", ARCH, cwd=blessed)
    assert without.code == with_stages.code == 0 and without.out == with_stages.out
    # an unchanged cell's golden is never rewritten just to add stages
    rebless = run_xisa("bless", "--arch", ARCH, cwd=blessed)
    assert rebless.code == 0 and f"0 written, {len(list_goldens(blessed / 'golden'))} unchanged" in rebless.out
    assert _goldens(blessed) == before

    _change_scale(blessed)
    changed = run_xisa("check", "--arch", ARCH, "--format", "json", cwd=blessed)
    cells = _cells(changed)
    changed_ids = sorted(cell for cell, c in cells.items() if c["verdict"] == "changed")
    assert changed_ids
    for cell in changed_ids:
        assert cells[cell]["base_stages"] == {} and cells[cell]["first_changed_stage"] is None
        assert cells[cell]["stage_note"].startswith("stage unknown (golden has no stage fingerprints")
    text = run_xisa("check", "--arch", ARCH, cwd=blessed)
    assert (f"{changed_ids[0]}: changed, stage unknown (golden has no stage fingerprints; record them with "
            "`xisa bless --record-stages`)") in text.out

    refused = run_xisa("bless", "--record-stages", "--arch", ARCH, cwd=blessed, env={"CI": "true"})
    assert refused.code == 2 and "CI" in refused.err and _goldens(blessed) == before

    recorded = run_xisa("bless", "--record-stages", "--arch", ARCH, cwd=blessed)
    assert recorded.code == 0, recorded.err
    unchanged_ids = sorted(set(cells) - set(changed_ids))
    assert f"{len(unchanged_ids)} given stage fingerprints and source lines, 0 unchanged, {len(changed_ids)} left" in recorded.out
    for cell in changed_ids:
        assert f"left {cell}" in recorded.out
    after = _goldens(blessed)
    for path, data in before.items():
        kernel, case, target = path.parent.parent.name, path.parent.name, path.stem
        cell = f"{kernel}:{case}@{target}"
        if cell in changed_ids or path.suffix == ".isa":
            assert after[path] == data, path          # a changed cell and every stream file untouched
        else:
            golden = yaml.safe_load(after[path])
            assert golden["stages"] == cells[cell]["head_stages"]
            assert {k: v for k, v in golden.items() if k != "stages"} == yaml.safe_load(data)


def test_a_golden_whose_stages_alone_differ_is_same_and_not_rewritten_unless_asked(run_xisa, blessed):
    yaml_path, _ = golden_paths(blessed / "golden", "scale", "small", ARCH)
    data = yaml.safe_load(yaml_path.read_text())
    true_stages = dict(data["stages"])
    data["stages"]["ttir"] = "0" * 64
    yaml_path.write_text(dump_yaml(data))
    stale = yaml_path.read_bytes()
    check = run_xisa("check", "--arch", ARCH, cwd=blessed)
    assert check.code == 0, check.out          # the gate judges the code, not the stages
    plain = run_xisa("bless", "--arch", ARCH, cwd=blessed)
    assert plain.code == 0 and "0 written" in plain.out and yaml_path.read_bytes() == stale
    recorded = run_xisa("bless", "--record-stages", "--arch", ARCH, cwd=blessed)
    assert recorded.code == 0 and "1 given stage fingerprints and source lines" in recorded.out
    assert yaml.safe_load(yaml_path.read_text())["stages"] == true_stages


def test_a_hand_broken_stages_block_is_a_golden_error_naming_the_field(run_xisa, blessed):
    yaml_path, _ = golden_paths(blessed / "golden", "scale", "small", ARCH)
    data = yaml.safe_load(yaml_path.read_text())
    data["stages"]["llir"] = "not a sha"
    yaml_path.write_text(dump_yaml(data))
    out = run_xisa("check", "--arch", ARCH, cwd=blessed)
    assert out.code == 2 and "stages" in out.out + out.err


def _set_scale_option(project: Path, option: dict) -> None:
    spec = project / "kernels" / "scale.yaml"
    data = yaml.safe_load(spec.read_text())
    data["defaults"]["options"].update(option)
    spec.write_text(yaml.safe_dump(data))


def _hand_first_stage(before: Path, after: Path, cell: str) -> str | None:
    """The first stage whose emitted file differs, byte for byte: both compiles are of one checkout, so
    paths and lines are the same on both sides and need no normalizing."""
    kernel, rest = cell.split(":")
    case, target = rest.split("@")
    for stage in AMD.stages:
        files = [root / kernel / case / target / f"{kernel}.{stage}" for root in (before, after)]
        if files[0].read_bytes() != files[1].read_bytes():
            return stage
    return None


# Options that act only after Triton's own passes, found by compiling and diffing the stages by hand:
# LLVM's fp contraction (the AMD backend fuses x * f + 1.0 into v_fma_f32 on gfx11's path of scale), and
# the waves-per-EU attribute Triton puts on the LLVM function.
@pytest.mark.parametrize(("arch", "option"), [("gfx1100", {"enable_fp_fusion": False}), ("gfx942", {"waves_per_eu": 2})])
def test_a_backend_only_option_is_attributed_to_the_stage_a_hand_diff_finds(run_xisa, tinyproj, arch, option):
    before, after = tinyproj / "before", tinyproj / "after"
    assert run_xisa("compile", "--arch", arch, "--kernel", "scale", "--emit", str(before), cwd=tinyproj).code == 0
    assert run_xisa("bless", "--arch", arch, "--kernel", "scale", cwd=tinyproj).code == 0
    _set_scale_option(tinyproj, option)
    assert run_xisa("compile", "--arch", arch, "--kernel", "scale", "--emit", str(after), cwd=tinyproj).code == 0
    out = run_xisa("check", "--arch", arch, "--kernel", "scale", "--format", "json", cwd=tinyproj)
    assert out.code == 1, out.out + out.err
    cells = _cells(out)
    changed = sorted(cell for cell, c in cells.items() if c["verdict"] == "changed")
    assert changed == sorted(cell for cell, c in cells.items()
                             if (c["head_sha256"], c["head_code_sha256"]) != (c["base_sha256"], c["base_code_sha256"]))
    assert changed
    order = AMD.fingerprinted_stages
    for cell in changed:
        first = cells[cell]["first_changed_stage"]
        assert first == _hand_first_stage(before, after, cell), cell
        assert order.index(first) > order.index("ttgir"), f"{cell}: {first} is not after Triton's own passes"
        same = order[:order.index(first)]
        assert all(cells[cell]["head_stages"][s] == cells[cell]["base_stages"][s] for s in same)
        assert cells[cell]["stage_note"] == f"first at {first}: {', '.join(same)} identical"
