"""Device detection and gating with faked torch device properties (AMD and NVIDIA)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from support import REPO
from xisa.analyze.backends import base_gcn_arch
from xisa.device.detect import detect_devices, gate
from xisa.spec.targets import load_targets

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

TARGETS = load_targets([REPO / "targets"])


def fake_torch(props: list[SimpleNamespace], *, hip: bool):
    cuda = SimpleNamespace(is_available=lambda: bool(props), device_count=lambda: len(props),
                           get_device_properties=lambda i: props[i])
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(hip="7.0" if hip else None, cuda=None if hip else "12.8"))


def amd(arch: str, name: str = "AMD GPU") -> SimpleNamespace:
    return SimpleNamespace(name=name, gcnArchName=arch, major=9, minor=4)


def nvidia(major: int, minor: int) -> SimpleNamespace:
    return SimpleNamespace(name="NVIDIA H200", major=major, minor=minor)


@pytest.mark.parametrize("props,hip,expected", [
    (amd("gfx1100", "Radeon PRO W7900D"), True, "gfx1100"),
    (amd("gfx942:sramecc+:xnack-", "AMD Instinct MI300X"), True, "gfx942"),
    (amd("gfx1201"), True, "gfx1201"),
    (nvidia(9, 0), False, "sm_90"),
    (amd("gfx1030"), True, None),
])
def test_detection_maps_devices_to_targets(props, hip, expected):
    devices = detect_devices(TARGETS, torch_module=fake_torch([props], hip=hip))
    assert len(devices) == 1 and devices[0].target == expected
    assert devices[0].backend == ("hip" if hip else "cuda")


def test_feature_suffix_is_stripped():
    assert base_gcn_arch("gfx942:sramecc+:xnack-") == "gfx942"
    assert base_gcn_arch("gfx1100") == "gfx1100"


def test_gating_by_target_glob_and_family():
    mi300 = detect_devices(TARGETS, torch_module=fake_torch([amd("gfx942:sramecc+:xnack-")], hip=True))
    assert gate("gfx942", mi300, TARGETS)[0].target == "gfx942"
    assert gate("gfx9*", mi300, TARGETS)[0] is not None
    assert gate("cdna3", mi300, TARGETS)[0] is not None           # a family name gates too
    device, reason = gate("gfx11*", mi300, TARGETS)
    assert device is None and reason == "no gfx11* device present (found gfx942 (gfx942))"
    h200 = detect_devices(TARGETS, torch_module=fake_torch([nvidia(9, 0)], hip=False))
    assert gate("sm_90", h200, TARGETS)[0].index == 0
    assert gate("gfx1201", h200, TARGETS)[1].startswith("no gfx1201 device present")
    assert gate("sm_90", [], TARGETS) == (None, "no GPU: needs sm_90")


def test_no_torch_cuda_means_no_devices():
    assert detect_devices(TARGETS, torch_module=fake_torch([], hip=False)) == []
    broken = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: (_ for _ in ()).throw(RuntimeError("driver"))))
    assert detect_devices(TARGETS, torch_module=broken) == []


def test_device_command_skips_every_target_without_a_gpu(run_xisa, tinyproj):
    out = run_xisa("device", "--json", cwd=tinyproj)
    assert out.code == 0, out.err
    report = json.loads(out.out)
    assert report["devices"] == [] and report["cells"] == []
    assert set(report["skipped_targets"]) >= {"gfx1100", "gfx1200", "gfx1201", "gfx942", "gfx950", "sm_90"}
    assert set(report["skipped_targets"].values()) == {"no GPU"}


def test_xisa_device_marker_skips_with_the_reason(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.xisa_device("gfx11*")
        def test_needs_rdna3():
            assert False, "must not run without a gfx11 GPU"

        def test_plain():
            pass
    """)
    result = pytester.runpytest("-rs", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*no GPU: needs gfx11*"])


# A selection that ran nothing verified nothing: `xisa device --arch sm_90` with no GPU used to exit 0.

@pytest.mark.parametrize("args,names", [
    (("--arch", "gfx942"), ["--arch gfx942: no cell ran (gfx942: no GPU)"]),
    (("--arch", "gfx9*,gfx1201"), ["--arch gfx9*: no cell ran (gfx942: no GPU)",
                                   "--arch gfx1201: no cell ran (gfx1201: no GPU)"]),
    (("--kernel", "dot"), ["--kernel dot: no cell ran (gfx1100: no GPU; gfx942: no GPU)"]),
])
def test_a_named_selection_that_ran_nothing_exits_2(run_xisa_in_process, tinyproj, args, names):
    out = run_xisa_in_process("device", *args, cwd=tinyproj)
    assert out.code == 2, out.err
    lines = [line for line in out.err.splitlines() if line.startswith("xisa: error:")]
    assert [line.removeprefix("xisa: error: ").partition(") (fix:")[0] + ")" for line in lines] == names
    assert all("(fix: run it where a GPU of that target is visible" in line for line in lines)
    report = json.loads(run_xisa_in_process("device", "--json", *args, cwd=tinyproj).out)
    assert report["exit_code"] == 2 and len(report["not_run"]) == len(names) and report["cells"] == []


def test_without_arch_and_without_a_gpu_the_run_says_so(run_xisa_in_process, tinyproj):
    out = run_xisa_in_process("device", cwd=tinyproj)
    assert out.code == 0 and "xisa: note: no GPU is visible, so no cell ran" in out.err


def test_a_gpu_present_whose_cases_name_no_check_ran_nothing(tinyproj, monkeypatch):
    """A GPU of a selected target is there, but no case of it names a `runtime:` check: nothing ran."""
    from xisa import api

    monkeypatch.chdir(tinyproj)
    mi300 = detect_devices(TARGETS, torch_module=fake_torch([amd("gfx942:sramecc+:xnack-")], hip=True))
    report = api.device(api.Selection(), devices=mi300)
    assert report.exit_code == 2
    assert report.not_run == [
        "the gfx942 GPU present: no cell ran (dot:f16_32@gfx942: skip: the case names no runtime check; "
        "scale:small@gfx942: skip: the case names no runtime check; scale:big@gfx942: skip: the case names no "
        "runtime check) (fix: run it where a GPU of that target is visible and its cases name a `runtime:` check, "
        "or leave it out of the selection)"]
    assert api.device(api.Selection(arch=["gfx942"]), devices=mi300).not_run[0].startswith("--arch gfx942: no cell ran (")


def test_each_part_of_the_selection_needs_a_cell_that_ran(tinyproj, monkeypatch):
    """One target ran, another named one did not (an H200 asked for sm_90 and gfx942): still exit 2; a
    failed check ran (exit 1), an errored one did not verify anything (exit 2 anyway)."""
    from xisa import api
    from xisa.device.launch import RuntimeResult
    from xisa.device.tier import DeviceReport, not_run

    monkeypatch.chdir(tinyproj)
    ws = api.open_workspace()
    _, cells = ws.select(arch=["gfx942", "gfx1100"])
    ran = [RuntimeResult(c.kernel.name, c.case, c.target.name, "pass") for c in cells if c.target.name == "gfx942"]
    report = DeviceReport(devices=[], results=ran, skipped_targets={"gfx1100": "no gfx1100 device present"})
    assert not_run(cells, report, arch=["gfx942", "gfx1100"], kernel=["scale:big"], present=["gfx942"]) == [
        "--arch gfx1100: no cell ran (gfx1100: no gfx1100 device present) (fix: run it where a GPU of that target "
        "is visible and its cases name a `runtime:` check, or leave it out of the selection)"]
    assert not_run(cells, report, arch=["gfx942"], kernel=["scale:big"], present=["gfx942"]) == []
    for result in ran:
        result.status = "fail"
    assert not_run(cells, report, arch=None, kernel=None, present=["gfx942"]) == []
    report.not_run = []
    assert report.exit_code == 1
    report.results = [RuntimeResult("dot", "f16_32", "gfx942", "error", "boom")]
    assert not_run(cells, report, arch=None, kernel=["dot"], present=["gfx942"])[1].startswith(
        "--kernel dot: no cell ran (gfx1100: no gfx1100 device present; dot:f16_32@gfx942: error: boom)")
