"""Spec loading: matrix expansion, merge order, and errors that name the file, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from xisa.errors import SpecError
from xisa.spec import build_cells, load_spec
from xisa.target import load_targets, select_targets, unknown_target

REPO = Path(__file__).resolve().parent.parent


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
    assert dict(gfx1100.expect) == {"gfx11*": {"v_cvt*fp8*": 0}}


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
