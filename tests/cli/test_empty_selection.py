"""An --arch or --kernel that selects no cell is refused (exit 2, one line naming the filter and what has cells) by
every command that works on cells, instead of passing a check of nothing (issue 36, finding 6: `xisa check --arch T`
for a real target with no cells printed "no cells selected" and exited 0). Goldens left on such a selection are still
reported as unused (check) and removed (bless); a project with no cells at all still has nothing to do (exit 0)."""

from __future__ import annotations

import json

import pytest
from support import git

# tinyproj: scale on gfx1100, gfx1201, gfx942; dot on gfx1100, gfx942. sm_90 is a known target with no cell.
WITH_CELLS = "the targets with cells: gfx1100, gfx1201, gfx942"


def _one_error_line(out) -> str:
    assert out.code == 2, (out.code, out.out, out.err)
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xisa: error: "), out.err
    return lines[0]


@pytest.mark.parametrize("command", [["check"], ["check", "--shard", "1/2"], ["check", "--format", "json"],
                                     ["compile"], ["compile", "--json"], ["bless"], ["shards", "2"],
                                     ["report", "--html", "page.html"], ["export", "-o", "bundle"]])
def test_an_arch_with_no_cells_is_refused_by_every_command(run_xisa_in_process, tinyproj, command):
    out = run_xisa_in_process(*command, "--arch", "sm_90", cwd=tinyproj)
    line = _one_error_line(out)
    assert line == (f"xisa: error: --arch: sm_90 selects no cell: no case of the specs runs on target sm_90 "
                    f"(fix: {WITH_CELLS})"), line
    assert out.out == "" and not (tinyproj / "golden").exists() and not (tinyproj / "bundle").exists()


@pytest.mark.unit
def test_a_comma_separated_arch_is_expanded_as_the_selection_expands_it(run_xisa_in_process, tinyproj):
    """`--arch 'sm_90,sm_100'` names two targets, as the selection splits it (tests/test_capture_specs.py passes
    `--arch gfx942,sm_90`); with one that has cells beside one that has none the selection is not empty."""
    line = _one_error_line(run_xisa_in_process("check", "--arch", "sm_90,sm_100", cwd=tinyproj))
    assert "--arch: sm_90,sm_100 selects no cell: no case of the specs runs on targets sm_100, sm_90" in line
    line = _one_error_line(run_xisa_in_process("compile", "--arch", "sm_9*", "--arch", "sm_100", cwd=tinyproj))
    assert "--arch: 'sm_9*' sm_100 selects no cell" in line and "targets sm_100, sm_90" in line
    for arch in (["sm_90,gfx1201"], ["sm_90", "gfx1201"]):   # scale's two cells on gfx1201; nothing compiles here
        flags = [word for value in arch for word in ("--arch", value)]
        shards = run_xisa_in_process("shards", "2", *flags, "--format", "json", cwd=tinyproj)
        assert shards.code == 0, shards.err
        assert sorted(json.loads(shards.out)["cell_ids"]) == ["scale:big@gfx1201", "scale:small@gfx1201"]


@pytest.mark.unit
def test_a_kernel_filter_matching_no_case_and_two_filters_that_do_not_meet(run_xisa_in_process, tinyproj):
    line = _one_error_line(run_xisa_in_process("check", "--kernel", "dot:nope", cwd=tinyproj))
    assert line == ("xisa: error: --kernel: dot:nope selects no cell: no kernel:case matches it "
                    "(fix: the cases: dot:f16_32, scale:big, scale:small)"), line
    # each filter selects cells, together none: dot has no gfx1201 case
    line = _one_error_line(run_xisa_in_process("bless", "--arch", "gfx1201", "--kernel", "dot", cwd=tinyproj))
    assert line == ("xisa: error: --arch: --arch gfx1201 with --kernel dot selects no cell: the cases --kernel "
                    "matches run on gfx1100, gfx942 (fix: pick one of those targets, or another --kernel)"), line
    # an --arch without cells is blamed first, whatever --kernel says
    line = _one_error_line(run_xisa_in_process("compile", "--arch", "sm_90", "--kernel", "dot", cwd=tinyproj))
    assert "--arch: sm_90 selects no cell" in line


@pytest.mark.unit
def test_the_gate_refuses_any_filter(run_xisa_in_process, tinyproj):
    """`xisa diff` and `xisa check --base` judge every cell: a filter is refused there whether it selects cells
    or not (one rule, said before anything is resolved)."""
    for command in (["diff", "--base", "HEAD"], ["check", "--base", "HEAD"]):
        for arch in ("sm_90", "gfx942"):
            line = _one_error_line(run_xisa_in_process(*command, "--arch", arch, cwd=tinyproj))
            assert "--arch cannot narrow the gate against a base" in line


def test_a_project_with_no_cells_at_all_still_has_nothing_to_do(run_xisa_in_process, tinyproj):
    (tinyproj / "kernels" / "dot.yaml").unlink()
    spec = tinyproj / "kernels" / "scale.yaml"
    spec.write_text(spec.read_text().replace("targets: [gfx1100, gfx1201, gfx942]", "targets: ['zz*']"))
    for args in (["check"], ["check", "--arch", "gfx942"], ["compile", "--arch", "gfx942"]):
        out = run_xisa_in_process(*args, cwd=tinyproj)
        assert out.code == 0 and "xisa: error" not in out.err, (args, out.err)


def test_goldens_left_on_an_empty_selection_are_reported_then_removed(run_xisa, tinyproj):
    """A spec that drops a target leaves its goldens: `check` on that target (no cell now) reports them unused
    (exit 1, not 2), `bless` on it removes them, and only then is the filter one that selects nothing."""
    git(tinyproj, "init", "-q")   # any git state the report records
    selection = ["--arch", "gfx942", "--kernel", "scale:small"]
    assert run_xisa("bless", *selection, cwd=tinyproj).code == 0      # one cell compiled
    assert (tinyproj / "golden" / "scale" / "small" / "gfx942.yaml").is_file()
    spec = tinyproj / "kernels" / "scale.yaml"
    spec.write_text(spec.read_text().replace("targets: [gfx1100, gfx1201, gfx942]", "targets: [gfx1100, gfx1201]"))

    checked = run_xisa("check", *selection, "--format", "json", cwd=tinyproj)
    assert checked.code == 1, checked.err
    report = json.loads(checked.out)
    assert [(c["kernel"], c["case"], c["target"], c["verdict"]) for c in report["cells"]] == \
        [("scale", "small", "gfx942", "unused")]
    assert report["accept"] == ["xisa bless --arch gfx942 --kernel scale:small"]
    assert run_xisa("check", "--arch", "gfx942", "--kernel", "scale", cwd=tinyproj).code == 1   # the kernel's goldens

    blessed = run_xisa("bless", *selection, cwd=tinyproj)
    assert blessed.code == 0 and "removed golden/scale/small/gfx942.yaml" in blessed.out, blessed.out + blessed.err
    line = _one_error_line(run_xisa("check", *selection, cwd=tinyproj))
    assert line == ("xisa: error: --arch: --arch gfx942 with --kernel scale:small selects no cell: the cases "
                    "--kernel matches run on gfx1100, gfx1201 (fix: pick one of those targets, or another --kernel)")
