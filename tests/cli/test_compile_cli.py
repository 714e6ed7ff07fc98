"""`xisa compile`, `targets`, `kernels` as a user runs them."""

from __future__ import annotations

import json

import pytest


def test_compile_json_has_the_documented_fields(run_xisa, tinyproj):
    out = run_xisa("compile", "--arch", "gfx942", "--arch", "gfx11*", "--json", cwd=tinyproj)
    assert out.code == 0, out.err
    payload = json.loads(out.out)
    assert payload["toolchain"]["triton"]
    cells = {(c["kernel"], c["case"], c["target"]): c for c in payload["cells"]}
    assert set(cells) == {("scale", "small", "gfx942"), ("scale", "big", "gfx942"), ("dot", "f16_32", "gfx942"),
                          ("scale", "small", "gfx1100"), ("scale", "big", "gfx1100"), ("dot", "f16_32", "gfx1100")}
    for cell in cells.values():
        assert cell["status"] == "ok" and cell["error"] is None
        assert len(cell["sha256"]) == 64 and cell["instructions"] == sum(cell["histogram"].values())
        for key in ("vgprs", "agprs", "sgprs", "vgpr_spills", "sgpr_spills", "scratch_bytes", "lds_bytes",
                    "occupancy", "llvm_occupancy"):
            assert key in cell["resources"]
        assert cell["signature"]["x_ptr" if cell["kernel"] == "scale" else "a_ptr"].startswith("*")
    assert cells[("dot", "f16_32", "gfx1100")]["classes"]["matrix"] > 0
    assert cells[("scale", "small", "gfx942")]["attrs"]["x_ptr"] == ["tt.divisibility=16", "tt.pointer_range=32"]
    assert cells[("scale", "small", "gfx942")]["signature"]["n"] == "i32"


def test_compile_table_counts_and_emit(run_xisa, tinyproj, tmp_path):
    emit = tmp_path / "stages"
    out = run_xisa("compile", "--arch", "gfx1100", "--kernel", "dot", "--count", "v_wmma*", "--emit", str(emit),
                   cwd=tinyproj)
    assert out.code == 0, out.err
    assert "v_wmma*" in out.out and "dot:f16_32" in out.out
    folder = emit / "dot" / "f16_32" / "gfx1100"
    for stage in ("ttir", "ttgir", "llir", "amdgcn", "hsaco", "normalized"):
        assert (folder / f"dot.{stage}").stat().st_size > 0


@pytest.mark.unit
def test_unknown_arch_exits_2_naming_known_and_closest(run_xisa_in_process, tinyproj):
    out = run_xisa_in_process("compile", "--arch", "gfx1101", cwd=tinyproj)
    assert out.code == 2
    assert "unknown target 'gfx1101'" in out.err and "did you mean 'gfx1100'" in out.err
    assert "gfx942" in out.err and "Traceback" not in out.err


def test_spec_error_names_file_and_field(run_xisa, tinyproj):
    path = tinyproj / "kernels" / "scale.yaml"
    path.write_text(path.read_text().replace("function: scale_kernel", "function: scale_kernal"))
    out = run_xisa("compile", cwd=tinyproj)
    assert out.code == 2
    assert "kernels/scale.yaml: function" in out.err and "did you mean 'scale_kernel'" in out.err


def test_one_broken_cell_is_an_error_cell_while_the_rest_complete(run_xisa, tinyproj):
    # BLOCK=1000 is not a power of two: Triton refuses tl.arange for that case only.
    path = tinyproj / "kernels" / "scale.yaml"
    path.write_text(path.read_text() + "  - name: broken\n    constexprs: {BLOCK: 1000}\n")
    out = run_xisa("compile", "--json", cwd=tinyproj)
    assert out.code == 2
    cells = json.loads(out.out)["cells"]
    broken = [c for c in cells if c["case"] == "broken"]
    assert len(broken) == 3 and all(c["status"] == "error" for c in broken)
    assert all("power of 2" in c["error"] for c in broken)
    assert all(c["status"] == "ok" for c in cells if c["case"] != "broken")
    assert "error scale:broken" in out.err and "gfx942" in out.err
    # each distinct message once, with the targets it concerns
    assert out.err.count("error scale:broken") == len({c["error"] for c in broken})


def test_a_problem_shared_by_several_targets_is_printed_once_with_them(run_xisa, tinyproj):
    path = tinyproj / "kernels" / "scale.yaml"
    path.write_text(path.read_text().replace("    n: 4096", "    count: 4096"))
    out = run_xisa("compile", "--json", cwd=tinyproj)
    assert out.code == 2
    cells = [c for c in json.loads(out.out)["cells"] if c["kernel"] == "scale" and c["status"] == "error"]
    targets = sorted({c["target"] for c in cells})
    assert len(targets) > 1
    cases = sorted({c["case"] for c in cells})
    assert len(cases) > 1 and len(cells) == len(cases) * len(targets)    # JSON: every cell keeps its error
    # the value is written once, in `defaults:`: one problem, named there, for every case on every target
    assert {c["error"].split(": ", 1)[0] for c in cells} == {"kernels/scale.yaml"}
    assert {c["error"].split(": ")[1] for c in cells} == {"defaults.args.count"}
    (head,) = [line for line in out.err.splitlines() if line.startswith("error scale:")]
    named, _, rest = head.removeprefix("error ").partition(" on ")
    assert sorted(named.split(", ")) == [f"scale:{case}" for case in cases]
    assert rest.startswith(f"{len(targets)} targets (") and all(t in rest for t in targets)
    assert out.err.count("no parameter 'count'") == 1
    blessed = run_xisa("bless", cwd=tinyproj)
    assert blessed.code == 2
    assert blessed.err.count("no parameter 'count'") == 1, blessed.err
    assert f"on {len(targets)} targets (" in blessed.err and "(no golden written)" in blessed.err


def test_argument_not_matching_kernel_is_a_bind_error(run_xisa, tinyproj):
    path = tinyproj / "kernels" / "scale.yaml"
    path.write_text(path.read_text().replace("    n: 4096", "    count: 4096"))
    out = run_xisa("compile", "--arch", "gfx942", "--json", cwd=tinyproj)
    assert out.code == 2
    errors = [c["error"] for c in json.loads(out.out)["cells"] if c["kernel"] == "scale"]
    assert errors and all("no parameter 'count'" in e for e in errors)


@pytest.mark.unit
def test_targets_and_kernels_list(run_xisa, tinyproj):
    out = run_xisa("targets", "--json", cwd=tinyproj)
    assert out.code == 0
    payload = json.loads(out.out)
    assert payload["schema"] == 1 and payload["kind"] == "targets"
    names = {t["name"] for t in payload["targets"]}
    assert {"gfx1100", "gfx1200", "gfx1201", "gfx942", "gfx950"} <= names
    text = run_xisa("targets", cwd=tinyproj, env={"COLUMNS": "200"})   # the README: "the known targets and their tables"
    assert text.code == 0 and "hip: occupancy tables" in text.out and "cuda: occupancy tables" in text.out
    gfx950 = next(line for line in text.out.splitlines() if "gfx950" in line and "163840" in line)
    assert [cell.strip() for cell in gfx950.split("│")[1:-1]] == \
        ["gfx950", "8", "512", "512", "unified", "800", "16", "8", "4", "163840", "163840"]
    out = run_xisa("kernels", cwd=tinyproj)
    assert out.code == 0 and "2 kernels, 3 cases, 8 cells" in out.out
    kernels = json.loads(run_xisa("kernels", "--json", cwd=tinyproj).out)
    assert kernels["schema"] == 1 and kernels["kind"] == "kernels"
    assert {(k["kernel"], k["case"]) for k in kernels["kernels"]} == {("scale", "small"), ("scale", "big"),
                                                                      ("dot", "f16_32")}


def test_refused_environment_variable_exits_2(run_xisa, tinyproj):
    out = run_xisa("compile", "--no-cache", cwd=tinyproj, env={"TRITON_KERNEL_OVERRIDE": "1"})
    assert out.code == 2 and "TRITON_KERNEL_OVERRIDE" in out.err


@pytest.mark.parametrize("edit, field", [
    (("    n: 4096", "    n: 4096\n    count: 1"), "defaults.args.count"),
    (("  - name: small\n", "  - name: small\n    args: {count: 1}\n"), "cases[0] (small).args.count"),
    (("'gfx11*': {constexprs: {GFX11_PATH: true}}", "'gfx11*': {constexprs: {GFX11_PATH: true, COUNT: 1}}"),
     "defaults.overrides.gfx11*.constexprs.COUNT"),
    (("options: {num_warps: 4}", "options: {num_warp: 4}"), "defaults.options.num_warp"),
])
def test_an_error_about_a_value_names_the_layer_that_set_it(run_xisa, tinyproj, edit, field):
    path = tinyproj / "kernels" / "scale.yaml"
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    out = run_xisa("compile", "--arch", "gfx1100", "--arch", "gfx942", "--kernel", "scale", "--json", cwd=tinyproj)
    errors = {(c["case"], c["target"]): c["error"] for c in json.loads(out.out)["cells"] if c["status"] == "error"}
    assert out.code == 2 and errors
    said = "unknown launch option" if "options" in field else "the kernel has no parameter"
    assert all(e.startswith(f"kernels/scale.yaml: {field}: {said} ") for e in errors.values()), errors
    if field.startswith("cases[0]"):
        assert {case for case, _ in errors} == {"small"}
    if "overrides" in field:
        assert {target for _, target in errors} == {"gfx1100"}
