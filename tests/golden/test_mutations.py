"""The verdict's oracle (issue 22): source and spec mutations of scratch kernels; wherever a cell's code object
changed (any section but debug information), `xisa check` says `changed` there, warm and cold, and wherever it
did not, `same`. The table and the runner are `bench/mutation.py` (which adds the bundled kernels with --corpus)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "bench"))

import mutation  # noqa: E402  (bench/ is not a package)
import yaml  # noqa: E402

TARGETS = ("gfx942", "sm_90", "sm_100")


def test_every_changed_code_object_is_a_changed_verdict_warm_and_cold(tmp_path, capsys):
    selection = [flag for target in TARGETS for flag in ("--arch", target)]
    project = mutation.scratch_project(tmp_path / "scratch", TARGETS)
    rows = mutation.run_mutations(project, mutation.SCRATCH_MUTATIONS, selection, tmp_path / "work", focus=True)
    disagreements = mutation.print_table(rows)
    table = capsys.readouterr().out
    assert disagreements == 0, table
    # not vacuous: every mutation but the comment changed a code object, on each target it can reach
    changed = {(row.mutation, row.cell.rsplit("@", 1)[1]) for row in rows if row.sections}
    for m in mutation.SCRATCH_MUTATIONS:
        reached = {target for name, target in changed if name == m.name}
        if m.name == "comment above the kernel":
            assert not reached, table
        elif "constant table" in m.name:
            assert reached == {"sm_90", "sm_100"}, table
        elif "data section" in m.name:
            assert reached == {"gfx942"}, table
        else:
            assert reached == set(TARGETS), (m.name, table)
    # what the text stream cannot show: the constant bank, the data section, the launch attribute
    unseen = {row.mutation: row.sections for row in rows if row.sections and row.cell.endswith("@sm_90")}
    assert any(".nv.constant" in s for s in unseen["constant table {1,2,3,4} -> {5,6,7,8}"]), table
    assert any(".nv.info" in s for s in unseen["launch option num_warps 4 -> 8"]), table


def test_goldens_of_another_ptxas_under_the_same_triton_are_untrusted(run_xisa, tmp_path):
    project = mutation.scratch_project(tmp_path / "scratch", ("sm_90",))
    for spec in ("fma.yaml", "table.yaml"):
        (project / "kernels" / spec).unlink()
    assert run_xisa("bless", cwd=project).code == 0
    golden = project / "golden" / "scalar" / "one" / "sm_90.yaml"
    text = golden.read_text()
    installed = yaml.safe_load(text)["toolchain"]["ptxas"]
    golden.write_text(text.replace(f"ptxas: '{installed}'", "ptxas: '11.0'"))
    out = run_xisa("check", cwd=project)
    assert out.code == 2 and out.out == "", out.err
    assert f"made with ptxas 11.0 but {installed} is installed" in out.err and "sm_90.yaml" in out.err
