"""Devices, not only architectures (issue 35, item 2): a device target (`device_of:`) is a GPU of an arch target's
arch with its own cited device facts; the default selection is the arch targets; a spec or --arch selects a device
by name; every bundled AMD target answers name and gcnArchName."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support import REPO, compile_here, write_files
from xisa.errors import TargetError
from xisa.names import CellKey
from xisa.spec.targets import load_targets, select_targets

KNOWN = load_targets([REPO / "targets"])
ARCH_FILES = sorted(p.stem for p in (REPO / "targets").glob("*.yaml") if "device_of" not in yaml.safe_load(p.read_text()))
AMD = sorted(name for name, t in KNOWN.items() if t.backend == "hip")


def names(patterns: list[str] | None) -> list[str]:
    return [t.name for t in select_targets(KNOWN, patterns)]


@pytest.mark.unit
def test_the_default_selection_is_the_arch_targets_and_no_device():
    assert len(ARCH_FILES) == 13 and names(None) == ARCH_FILES == names(["*"])
    devices = {"gfx942-mi308x", "gfx942-mi325x", "gfx950-mi355x", "gfx950-mi350p", "sm_90-h100", "sm_90-h20"}
    assert devices <= set(KNOWN) and not devices & set(names(None))


@pytest.mark.unit
@pytest.mark.parametrize("patterns, chosen", [
    (["gfx94*"], ["gfx942"]),                                    # a glob selects arch targets
    (["gfx942-mi308x"], ["gfx942-mi308x"]),                      # a device by its exact name
    (["gfx942", "gfx942-mi308x"], ["gfx942", "gfx942-mi308x"]),
    (["gfx942-*"], ["gfx942-mi308x", "gfx942-mi325x"]),          # a glob with '-' selects devices
    (["*-h20,sm_90"], ["sm_90", "sm_90-h20"]),
])
def test_globs_select_arch_targets_and_a_device_by_name_or_a_glob_with_a_dash(patterns, chosen):
    assert names(patterns) == chosen


def test_a_device_target_is_its_arch_with_its_own_device_facts():
    mi308x, mi300x, h20 = KNOWN["gfx942-mi308x"], KNOWN["gfx942"], KNOWN["sm_90-h20"]
    assert mi308x.device_of == "gfx942" and mi308x.gpu_target() == mi300x.gpu_target()
    assert (mi308x.occupancy, mi308x.fp8, mi308x.matrix) == (mi300x.occupancy, mi300x.fp8, mi300x.matrix)
    assert (mi308x.device.multiprocessor_count, mi308x.device.name) == (80, "AMD Instinct MI308X")
    assert (mi308x.device.capability, mi308x.device.arch_name) == (mi300x.device.capability, mi300x.device.arch_name)
    assert mi308x.device.l2_cache_size is None             # the MI300X's L2 is not the MI308X's until a source says
    assert "rocMLIR/pull/1927" in mi308x.sources["multiprocessor_count"] and "l2_cache_size" not in mi308x.sources
    assert mi308x.summary() != mi300x.summary()             # so the result cache keys them apart
    assert (h20.device.multiprocessor_count, h20.device.shared_memory_per_block) == (78, 49152)
    assert CellKey.parse("k:c@gfx942-mi308x").target == "gfx942-mi308x"   # a device names cells and golden files


@pytest.mark.parametrize("name", AMD)
def test_every_amd_target_answers_name_and_gcn_arch_name(name):
    import torch

    from xisa.compile.gpu.device_answers import DeviceAnswers
    from xisa.compile.gpu.target_driver import target_driver

    target = KNOWN[name]
    props = DeviceAnswers(target).torch_properties(0)
    if name == "gfx950-mi350p":      # no source gives its driver name: the query is refused, never guessed
        with pytest.raises(BaseException, match="device.name"):
            props.name
    else:
        assert props.name == target.device.name and props.name.startswith("AMD ")
    assert props.gcnArchName == target.device.arch_name and props.gcnArchName.split(":")[0] == target.arch
    assert DeviceAnswers(target).triton_properties(0)["arch"] == props.gcnArchName
    # ROCm's torch has no shared_memory_per_block_optin: a library's getattr default is taken, as on the GPU
    assert getattr(props, "shared_memory_per_block_optin", "absent") == "absent" and props.shared_memory_per_block > 0
    with target_driver(target):
        assert ("gfx95" in torch.cuda.get_device_properties(0).gcnArchName) == (target.arch == "gfx950")  # SGLang's
        assert torch.cuda.get_device_properties(0).multi_processor_count == target.device.multiprocessor_count  # aiter


@pytest.mark.unit
@pytest.mark.parametrize("name", [n for n in AMD if n in ARCH_FILES])
def test_every_amd_arch_target_answers_the_l2_flag_gems_reads(name):
    from xisa.compile.gpu.device_answers import DeviceAnswers

    props = DeviceAnswers(KNOWN[name]).torch_properties(0)
    assert hasattr(props, "L2_cache_size") and props.L2_cache_size >= 2 * 1024 * 1024   # FlagGems' get_device_info


@pytest.mark.unit
def test_a_device_fact_no_source_states_is_refused_not_taken_from_the_arch():
    from xisa.compile.gpu.device_answers import DeviceAnswers

    with pytest.raises(BaseException, match="asks device.l2_cache_size, which xisa's target file gfx942-mi308x.yaml "
                                            "does not state for its AMD Instinct MI308X"):
        hasattr(DeviceAnswers(KNOWN["gfx942-mi308x"]).torch_properties(0), "L2_cache_size")


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(n for n, t in KNOWN.items() if t.backend == "cuda"))
def test_every_nvidia_target_answers_the_opt_in_shared_memory_per_block(name):
    from xisa.compile.gpu.device_answers import DeviceAnswers

    target = KNOWN[name]
    assert DeviceAnswers(target).torch_properties(0).shared_memory_per_block_optin == target.occupancy["smem_per_block"]


DEVICE = """name: {name}
device_of: {of}
device:
  product: "Some GPU"
  multiprocessor_count: 10
sources:
  product: "a reference that is long enough"
  multiprocessor_count: "a reference that is long enough"
"""


@pytest.mark.unit
@pytest.mark.parametrize("file, text, field, message", [
    ("gfx942-x", DEVICE.format(name="gfx942-x", of="gfx94"), "device_of", "device_of 'gfx94' is no arch target"),
    ("gfx942-x-y", DEVICE.format(name="gfx942-x-y", of="gfx942"), "name", "bad device target name"),
    ("gfx950-x", DEVICE.format(name="gfx950-x", of="gfx942"), "name", "bad device target name 'gfx950-x'"),
    ("gfx942-y", DEVICE.format(name="gfx942-x", of="gfx942"), "name", "name 'gfx942-x' differs from the file name"),
    ("gfx942-x", DEVICE.format(name="gfx942-x", of="gfx942-mi308x"), "device_of", "device_of 'gfx942-mi308x' is no arch target"),
    ("gfx942-x", DEVICE.format(name="gfx942-x", of="gfx942").replace("device:\n", "device:\n  capability: [9, 4]\n"),
     "device.capability", "capability is the architecture's, stated once in"),
    ("gfx942-x", DEVICE.format(name="gfx942-x", of="gfx942").replace("device:\n", "device:\n  match: [gfx942]\n"),
     "device.match", "match is the architecture's"),
    ("gfx942-x", DEVICE.format(name="gfx942-x", of="gfx942") + "occupancy: {}\n", "occupancy",
     "unknown key(s) ['occupancy']: a device target states its device only"),
    ("gfx942-x", DEVICE.format(name="gfx942-x", of="gfx942").replace('  multiprocessor_count: "a reference that is '
                                                                      'long enough"\n', ""),
     "sources.multiprocessor_count", "this fact cites no source"),
    ("gfx942-x", DEVICE.format(name="gfx942-x", of="gfx942").replace("  multiprocessor_count: 10\n", ""),
     "device.multiprocessor_count", "missing"),
])
def test_a_bad_device_target_is_one_line_naming_file_field_and_fix(tmp_path, file, text, field, message):
    write_files(tmp_path / "targets", {f"{file}.yaml": text})
    with pytest.raises(TargetError) as caught:
        load_targets([REPO / "targets", tmp_path / "targets"], root=tmp_path)
    said = str(caught.value)
    assert said.startswith(f"targets/{file}.yaml: {field}: {message}") and "\n" not in said, said
    assert "(fix: " in said and caught.value.exit_code == 2


@pytest.mark.unit
def test_an_arch_target_name_with_a_dash_is_refused(tmp_path):
    data = yaml.safe_load((REPO / "targets" / "gfx942.yaml").read_text())
    data["name"] = "gfx942-b"
    write_files(tmp_path / "targets", {"gfx942-b.yaml": yaml.safe_dump(data)})
    with pytest.raises(TargetError, match=r"^targets/gfx942-b.yaml: name: bad target name 'gfx942-b' \(fix: .*"
                                          r"device_of"):
        load_targets([tmp_path / "targets"], root=tmp_path)


# --- selection through specs, and a compile that binds each device's answers ------------------------------------

KERNEL = '''import torch
import triton
import triton.language as tl

NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count


@triton.jit
def kern(y_ptr, SMS: tl.constexpr = NUM_SMS):
    tl.store(y_ptr + tl.arange(0, 64), tl.full((64,), SMS, tl.float32))
'''

SPEC = """name: {name}
source: k.py
function: kern
targets: [{targets}]
cases:
  - name: c
    args: {{y_ptr: {{tensor: fp32, shape: [64]}}}}
"""


def _project(root: Path) -> Path:
    return write_files(root, {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
        "kernels/k.py": KERNEL,
        "kernels/devices.yaml": SPEC.format(name="devices", targets="gfx942, 'gfx942-mi3*', sm_90-h20"),
        "kernels/arches.yaml": SPEC.format(name="arches", targets="'*'"),
    })


def _cells(root: Path, arch: list[str] | None) -> list[str]:
    from xisa.api import Selection, open_workspace

    return sorted(cell.id for cell in Selection(arch=arch).cells(open_workspace(cwd=root))[1])


@pytest.mark.unit
def test_a_spec_selects_its_devices_whenever_their_arch_is_selected(tmp_path):
    root = _project(tmp_path / "proj")
    arches = [f"arches:c@{name}" for name in ARCH_FILES]
    devices = ["devices:c@gfx942", "devices:c@gfx942-mi308x", "devices:c@gfx942-mi325x", "devices:c@sm_90-h20"]
    assert _cells(root, None) == sorted(arches + devices)       # '*' in another spec selects no device
    assert _cells(root, ["gfx94*"]) == ["arches:c@gfx942", *devices[:3]]
    # --arch naming a device compiles every case whose targets match its name, '*' included
    assert _cells(root, ["gfx942-mi308x"]) == ["arches:c@gfx942-mi308x", "devices:c@gfx942-mi308x"]
    assert _cells(root, ["sm_90-h100"]) == ["arches:c@sm_90-h100"]


def test_a_device_compiles_with_its_own_answers_bound(tmp_path):
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/k.py": KERNEL,
        "kernels/k.yaml": SPEC.format(name="k", targets="gfx942, gfx942-mi308x, sm_90-h20"),
    })
    results = compile_here(root, tmp_path / "cache", use_cache=False)
    assert {cell: r.binding["constexprs"]["SMS"] for cell, r in results.items()} == \
        {"k:c@gfx942": 304, "k:c@gfx942-mi308x": 80, "k:c@sm_90-h20": 78}
