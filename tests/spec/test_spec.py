"""Spec loading: matrix expansion, merge order, and errors that name the file, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import REPO
from xisa.errors import SpecError
from xisa.spec.cases import build_cells, load_spec
from xisa.spec.targets import load_targets, select_targets, unknown_target

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)



@pytest.fixture(scope="module")
def targets():
    return load_targets([REPO / "targets"])


def write(tmp_path: Path, text: str, name: str = "k.yaml") -> Path:
    (tmp_path / "k.py").write_text("# kernel\n")
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = """\
source: k.py
function: kern
targets: ['gfx*']
defaults:
  options: {num_warps: 4}
  constexprs: {A: 1}
cases:
  - name: c
    constexprs: {A: 2}
    options: {num_stages: 2}
    matrix:
      kv: {bf16: {args: {x: '*bf16'}}, fp8: {args: {x: '*fp8e4nv'}, constexprs: {FP8: true}}}
      d: {d128: {constexprs: {D: 128}}, d256: {constexprs: {D: 256}, targets: [gfx942]}}
    overrides:
      'gfx11*': {options: {num_warps: 2}, constexprs: {A: 3}}
      'gfx1100': {options: {num_stages: 1}}
    expect:
      'gfx11*': {'v_cvt*fp8*': 0}
"""


def test_matrix_expands_and_merges_in_order(tmp_path, targets):
    spec = load_spec(write(tmp_path, BASE))
    assert spec.name == "k"
    assert [c.name for c in spec.cases] == ["c-bf16-d128", "c-bf16-d256", "c-fp8-d128", "c-fp8-d256"]
    cells = {c.id: c for c in build_cells([spec], select_targets(targets, ["gfx*"]))}
    assert "k:c-fp8-d256@gfx942" in cells and "k:c-fp8-d256@gfx1100" not in cells
    gfx1100 = cells["k:c-fp8-d128@gfx1100"]
    assert gfx1100.options == {"num_warps": 2, "num_stages": 1}
    assert gfx1100.constexprs == {"A": 3, "FP8": True, "D": 128}
    assert gfx1100.args == {"x": "*fp8e4nv"}
    gfx942 = cells["k:c-bf16-d128@gfx942"]
    assert gfx942.options == {"num_warps": 4, "num_stages": 2} and gfx942.constexprs == {"A": 2, "D": 128}
    assert {pattern: {e.key: e.written for e in checks} for pattern, checks in gfx1100.expect} == \
        {"gfx11*": {"v_cvt*fp8*": 0}}


@pytest.mark.parametrize("text,field,message", [
    (BASE.replace("function: kern", "functon: kern"), "functon", "did you mean 'function'"),
    (BASE.replace("  - name: c", "  - name: ../c"), "cases[0].name", "not allowed"),
    (BASE.replace("source: k.py", "source: missing.py"), "source", "does not exist"),
    (BASE.replace("targets: ['gfx*']", "targets: []"), "targets", "non-empty"),
    (BASE.replace("    options: {num_stages: 2}", "    options: [1, 2]"), "options", "must be a mapping"),
    (BASE + "  - name: c-bf16\n    matrix: {d: {d128: {}}}\n", "cases[1]", "used twice"),
    ("source: k.py\nfunction: kern\nfunction: kern2\ncases: []\n", None, "duplicate key 'function'"),
    ("source: k.py\n\tfunction: kern\n", None, "tab"),
    ("source: [k.py\n", None, "invalid YAML"),
    ("source: k.py\nfunction: kern\ncases: []\n", "cases", "non-empty"),
])
def test_spec_errors_name_file_and_field(tmp_path, text, field, message):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    rendered = str(info.value)
    assert rendered.startswith(str(tmp_path / "k.yaml"))
    assert message in rendered
    if field:
        assert field in rendered


def test_unknown_target_suggests_the_closest(targets):
    error = unknown_target("gfx1102", targets)
    assert "did you mean 'gfx1100'" in str(error)
    assert "gfx942" in str(error) and error.exit_code == 2


# the arch target files (a device target's file, `device_of:`, has no occupancy: tests/spec/test_devices.py)
TARGET_FILES = sorted(p for p in (REPO / "targets").glob("*.yaml") if "\ndevice_of:" not in p.read_text())


@pytest.mark.parametrize("path", TARGET_FILES, ids=[p.stem for p in TARGET_FILES])
def test_every_bundled_target_loads_and_cites_each_number(path, targets):
    """Each file in targets/ loads, and every number under occupancy: has a non-empty source."""
    import yaml

    data = yaml.safe_load(path.read_text())
    assert targets[path.stem].name == data["name"]
    numbers = [k for k, v in data["occupancy"].items() if isinstance(v, int) and not isinstance(v, bool)]
    assert numbers
    for key in numbers:
        assert isinstance(data["sources"].get(key), str) and data["sources"][key].strip(), key


@pytest.mark.parametrize("path", TARGET_FILES, ids=[p.stem for p in TARGET_FILES])
def test_a_bundled_target_without_a_source_for_a_number_is_refused(path):
    import yaml

    from xisa.errors import TargetError
    from xisa.spec.targets import parse_target

    data = yaml.safe_load(path.read_text())
    key = next(k for k, v in data["occupancy"].items() if isinstance(v, int) and not isinstance(v, bool))
    del data["sources"][key]
    with pytest.raises(TargetError) as info:
        parse_target(data, f"targets/{path.name}")
    assert f"sources.{key}" in str(info.value) and "cites no source" in str(info.value)


# ---------------------------------------------------------------- expectations that can fail

def _expect_spec(tmp_path: Path, expect: str, targets: str = "['gfx*', 'sm_*']") -> Path:
    return write(tmp_path, f"source: k.py\nfunction: kern\ntargets: {targets}\ncases:\n  - name: c\n"
                           f"    expect:\n      {expect}\n")


@pytest.mark.parametrize("expect,field,fix", [
    ("'*': {scrach_bytes: 0}", "cases[0] (c).expect.*.scrach_bytes", "did you mean 'scratch_bytes'?"),
    ("'gfx*': {vgpr_spils: 0}", "cases[0] (c).expect.gfx*.vgpr_spils", "did you mean 'vgpr_spills'?"),
    ("'*': {'class:matirx': 0}", "cases[0] (c).expect.*.class:matirx", "did you mean 'class:matrix'?"),
    ("'*': {sgpr: 0}", "cases[0] (c).expect.*.sgpr", "did you mean 'sgprs'?"),
    ("'*': {scratch_byte: 0}", "cases[0] (c).expect.*.scratch_byte", "did you mean 'scratch_bytes'?"),
    ("'*': {occupancy: '>>2'}", "cases[0] (c).expect.*.occupancy", "'>=4'"),
])
def test_a_misspelt_expectation_key_is_an_error_when_the_spec_loads(tmp_path, expect, field, fix):
    with pytest.raises(SpecError) as info:
        load_spec(_expect_spec(tmp_path, expect))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'k.yaml'}: {field}: ") and fix in message


def test_mnemonics_globs_and_classes_of_either_vendor_load(tmp_path, targets):
    spec = load_spec(_expect_spec(tmp_path, "'*': {v_cvt_pk_f32_fp8: 0, 'v_wmma*': '>0', 'I2F.U32': 1, "
                                            "'*v_dual_and_b32*': 0, v_dual_mov_b32::v_dual_and_b32: 0, HMMA: 1, "
                                            "'class:matrix': '>0', 'class:tensor': '>0', instructions: '<9000'}"))
    assert len(build_cells([spec], select_targets(targets, ["gfx942", "sm_90"]))) == 2


@pytest.mark.parametrize("expect,target,message", [
    ("'*': {vgpr_spills: 0}", "sm_90", "sm_90 (NVIDIA) does not report 'vgpr_spills'"),
    ("'*': {agprs: 0}", "sm_90", "sm_90 (NVIDIA) does not report 'agprs'"),
    ("'*': {stack_bytes: 0}", "gfx942", "gfx942 (AMD) does not report 'stack_bytes'"),
    ("'*': {registers: '<128'}", "gfx942", "gfx942 (AMD) does not report 'registers'"),
    ("'*': {'class:wait': 0}", "sm_90", "sm_90 (NVIDIA) has no instruction class 'wait'"),
    ("'*': {'class:uniform': 0}", "gfx942", "gfx942 (AMD) has no instruction class 'uniform'"),
])
def test_an_expectation_on_what_a_target_does_not_report_names_the_target(tmp_path, targets, expect, target,
                                                                          message):
    spec = load_spec(_expect_spec(tmp_path, expect))
    with pytest.raises(SpecError) as info:
        build_cells([spec], select_targets(targets, [target]))
    assert message in str(info.value) and "expect.*." in str(info.value) and str(tmp_path / "k.yaml") in str(info.value)
    other = "gfx942" if target.startswith("sm_") else "sm_90"
    assert build_cells([spec], select_targets(targets, [other]))        # the other vendor reports it


@pytest.mark.parametrize("expect,message", [
    ("'gfx110': {'v_add*': 0}", "expect.gfx110: target pattern 'gfx110' matches no known target (fix: did you mean "
                                "'gfx1100'?)"),
    ("'gfx11*': {V_CVT_PK_F32_FP8: 0}", "expect.gfx11*.V_CVT_PK_F32_FP8: 'V_CVT_PK_F32_FP8' can never count anything "
                                        "on the targets 'gfx11*' matches (AMD)"),
    ("'gfx*': {'V_WMMA*': '>0'}", "AMD mnemonics are lower case, as LLVM prints them (fix: 'v_wmma*'"),
    ("'sm_*': {v_mfma_f32_16x16x16_f16: 0}", "NVIDIA opcodes are upper case"),
])
def test_an_expectation_that_can_never_apply_or_count_is_refused(tmp_path, targets, expect, message):
    """A target pattern that matches no target, or an instruction spelt so that no target the pattern
    matches can ever print it (AMD's manuals write `V_CVT_PK_F32_FP8`; LLVM prints lower case), made an
    expectation that always held: `V_CVT_PK_F32_FP8: 0` counted 0 on gfx11 whatever the code."""
    from xisa.api import Workspace

    workspace = Workspace(project=None, targets=targets, specs=[load_spec(_expect_spec(tmp_path, expect))])
    with pytest.raises(SpecError) as info:
        workspace.select(arch=["gfx942"])          # refused whatever the selection
    assert message in str(info.value) and str(tmp_path / "k.yaml") in str(info.value)


def test_expectations_for_both_vendors_under_one_pattern_are_accepted(tmp_path, targets):
    from xisa.api import Workspace

    expect = "'*': {HMMA: 0, v_mfma_f32_16x16x16_f16: 0, 'V*': 0, 'HGMMA.64x128x16*': 0}"
    workspace = Workspace(project=None, targets=targets, specs=[load_spec(_expect_spec(tmp_path, expect))])
    assert workspace.select(arch=["gfx942", "sm_90"])[1]


def _sass_analysis(**resources):
    from xisa.analyze.model import Analysis

    res = {"registers": 64, "stack_bytes": 0, "local_bytes": 0, "lds_bytes": 0, "occupancy": 32}
    res.update(resources)
    return Analysis(isa="sass", sha256="0" * 64, instructions=3, blocks=1, histogram={"HMMA.16816.F32": 2, "EXIT": 1},
                    base_histogram={"HMMA": 2, "EXIT": 1}, classes={"tensor": 2, "branch": 1}, resources=res,
                    stream_text="")


def test_scratch_bytes_on_nvidia_is_stack_plus_local_bytes():
    from xisa.analyze.expect import evaluate, measure, parse_expectations

    expect = parse_expectations({"*": {"scratch_bytes": 0}}, path="k.yaml", field="cases[0]")
    # The case of issue 12: a kernel with 3,144 bytes of stack passed `'*': {scratch_bytes: 0}` on sm_90.
    [failure] = evaluate(expect, "sm_90", _sass_analysis(stack_bytes=3144))
    assert failure.actual == 3144 and "scratch_bytes == 0" in str(failure)
    assert measure("scratch_bytes", _sass_analysis(stack_bytes=16, local_bytes=8)) == 24
    assert evaluate(expect, "sm_90", _sass_analysis()) == []
    # Classes that name the same work on both vendors: matrix is NVIDIA's tensor class.
    assert measure("class:matrix", _sass_analysis()) == 2 and measure("class:tensor", _sass_analysis()) == 2
    assert measure("vgpr_spills", _sass_analysis()) is None         # not reported: never read as 0


# --- one record per cell, one table per backend --------------------------------------------------

def test_a_cell_key_is_written_kernel_case_at_target_and_parsed_back():
    from xisa.errors import UsageError
    from xisa.names import CellKey

    key = CellKey("attn", "decode-fp8", "gfx1201")
    assert str(key) == "attn:decode-fp8@gfx1201" and CellKey.parse(str(key)) == key
    for text, kind in (("attn:decode@gfx/../x", "target"), ("at tn:decode@gfx942", "kernel"), ("attn@gfx942", "case")):
        with pytest.raises(UsageError) as info:
            CellKey.parse(text)
        assert info.value.field == kind and f"is not a {kind} name" in str(info.value)


def test_cells_and_results_spell_their_id_through_the_cell_key(tmp_path, targets):
    from xisa.compile.worker.result import CellResult

    cell = build_cells([load_spec(write(tmp_path, BASE))], select_targets(targets, ["gfx942"]))[0]
    result = CellResult(kernel=cell.kernel.name, case=cell.case, target=cell.target.name, status="ok")
    assert cell.key == result.key and cell.id == result.id == str(cell.key) == f"k:{cell.case}@gfx942"


def test_every_target_family_has_one_table_entry_that_the_reports_read():
    from xisa.analyze.backends import BACKENDS, RESOURCE_ORDER, backend, backend_of_isa
    from xisa.render.compiled import COMPILE_COLUMNS
    from xisa.render.review import CHECK_COLUMNS

    known = load_targets([REPO / "targets"])
    assert {t.backend for t in known.values()} == {b.name for b in BACKENDS}
    for entry in BACKENDS:
        assert backend(entry.name) is backend_of_isa(entry.isa) is entry
        assert set(entry.resources) <= set(RESOURCE_ORDER)
        # each check column is a key `measure` can read on this ISA, each compile column one it reports
        assert {key for _, key in CHECK_COLUMNS[entry.isa]} <= set(entry.expectable_resources) | set(entry.resource_aliases)
        assert {key for _, key in COMPILE_COLUMNS[entry.isa] if isinstance(key, str)} <= set(entry.resources)
        assert set(entry.stages) >= {entry.assembly, entry.binary}


def test_expectations_are_parsed_once_when_the_spec_loads(tmp_path, targets):
    from xisa.analyze.expect import Condition

    text = BASE.replace("      'gfx11*': {'v_cvt*fp8*': 0}", "      'gfx11*': {'v_cvt*fp8*': '>=2'}")
    assert text != BASE
    cell = build_cells([load_spec(write(tmp_path, text))], select_targets(targets, ["gfx1100"]))[0]
    [(pattern, [check])] = [(p, list(checks)) for p, checks in cell.expect]
    assert (pattern, check.key, check.condition) == ("gfx11*", "v_cvt*fp8*", Condition(">=", 2))


# --- issue 14, item 4: specs may be *.yml ---------------------------------------------------------------

def test_yml_and_yaml_specs_are_both_found(tmp_path):
    from xisa.spec.cases import discover_spec_files, load_specs

    write(tmp_path, BASE, name="first.yaml")
    write(tmp_path, BASE, name="second.yml")
    (tmp_path / "notes.txt").write_text("not a spec\n")
    files = discover_spec_files([tmp_path])
    assert [f.name for f in files] == ["first.yaml", "second.yml"]
    assert [spec.name for spec in load_specs(files, root=tmp_path)] == ["first", "second"]


def test_one_name_as_both_yaml_and_yml_is_an_error(tmp_path):
    from xisa.spec.cases import discover_spec_files

    write(tmp_path, BASE, name="gemm.yaml")
    write(tmp_path, BASE, name="gemm.yml")
    with pytest.raises(SpecError) as caught:
        discover_spec_files([tmp_path])
    message = str(caught.value)
    assert "gemm.yaml" in message and "gemm.yml" in message and "\n" not in message
    assert "(fix: keep one spec named 'gemm'" in message
