"""`xisa capture --no-run --as A --as B`: the program runs once per target, each target's launches hold what that
target's GPU binds (device-derived constexprs, launch options host code picks by platform), and the specs say it
once where every target agrees, per target where they differ (docs/capture.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from xisa.spec.capture_targets import merge_targets

# The patterns of issue 35: a persistent kernel sized by the SM/CU count, a launch option chosen by `torch.version.hip`
# in host code (SGLang's `num_stages = 2 if is_hip() else 4`), a launch made on one vendor only, and one that is the
# same everywhere.
PROGRAM = '''
import torch

# read before Triton is imported, as vLLM's platform probe and SGLang's `is_hip()` are
DECODE_STAGES = 2 if torch.version.hip else 4

import triton
import triton.language as tl


@triton.jit
def persistent(x_ptr, n, NUM_SMS: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0)
    for tile in range(start, tl.cdiv(n, BLOCK), NUM_SMS):
        offs = tile * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.jit
def decode(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@triton.jit
def amd_only(x_ptr):
    tl.store(x_ptr, 0.0)


@triton.jit
def same(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.float32))


def run():
    x = torch.empty(8192)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    persistent[(sms,)](x, 8192, NUM_SMS=sms, BLOCK=128)
    decode[(64,)](x, 8192, BLOCK=128, num_warps=4, num_stages=DECODE_STAGES)
    if torch.version.hip:
        amd_only[(1,)](x)
    same[(1,)](x, BLOCK=64)


if __name__ == "__main__":
    run()
'''


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    (root / "launches.py").write_text(PROGRAM)
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    return root


def _capture(run_xisa, root: Path, *options: str):
    return run_xisa("capture", "--no-run", *options, "--", sys.executable, "launches.py", cwd=root,
                    env={"XISA_CAPTURE_AS": ""}, process=True)


def _texts(root: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted((root / "captured").glob("*.yaml"))}


def _bound(root: Path, spec: str, target: str) -> dict:
    """What the spec's first case compiles on `target`: its merged constexprs and options, or None where the case is
    not for that target (the loader's own resolution, so this is what a compile binds)."""
    from xisa.spec.cases import case_targets, load_specs, resolve_cell
    from xisa.spec.targets import load_targets

    targets = load_targets([Path(__file__).resolve().parents[1] / "targets"])
    (loaded,) = load_specs([root / "captured" / f"{spec}.yaml"], root=root)
    case = loaded.cases[0]
    if not case_targets(case, [targets[target]]):
        return None
    cell = resolve_cell(loaded, case, targets[target])
    return {"constexprs": cell.constexprs, "options": cell.options}


def test_each_target_compiles_what_its_own_launch_binds_with_one_spec(tmp_path, run_xisa):
    """gfx942 binds NUM_SMS 304 and 2 stages, sm_90 132 and 4; the values every target shares are written once; the
    AMD-only launch is a case for gfx942 alone; and the capture's compile of the new cases finds every cell ok."""
    root = _project(tmp_path)
    out = _capture(run_xisa, root, "--as", "gfx942", "--as", "sm_90", "--targets", "gfx942", "--targets", "sm_90")
    assert out.code == 0, out.err
    assert _bound(root, "persistent", "gfx942")["constexprs"] == {"NUM_SMS": 304, "BLOCK": 128}
    assert _bound(root, "persistent", "sm_90")["constexprs"] == {"NUM_SMS": 132, "BLOCK": 128}
    assert _bound(root, "decode", "gfx942")["options"] == {"num_warps": 4, "num_stages": 2}
    assert _bound(root, "decode", "sm_90")["options"] == {"num_warps": 4, "num_stages": 4}
    assert _bound(root, "amd_only", "gfx942") == {"constexprs": {}, "options": {}}
    assert _bound(root, "amd_only", "sm_90") is None
    texts = _texts(root)
    persistent = yaml.safe_load(texts["persistent.yaml"])["cases"]
    assert len(persistent) == 1 and persistent[0]["constexprs"] == {"BLOCK": 128}   # once, not per target
    assert persistent[0]["targets"] == ["gfx942", "sm_90"]     # the others' NUM_SMS was not observed
    assert texts["persistent.yaml"].count("BLOCK") == 1
    same = yaml.safe_load(texts["same.yaml"])["cases"]
    assert same == [{"name": "launch1", "args": {"x_ptr": {"tensor": "fp32", "shape": [8192]}},
                     "constexprs": {"BLOCK": 64}}]             # equal everywhere: as a one-target capture writes it
    assert "answered as gfx942, sm_90 in turn" in texts["persistent.yaml"]
    assert "compiled the new cases once for 2 targets: 7 cells, 7 ok" in out.err
    assert "unproven" in out.err and "gfx1100" in out.err


def test_the_order_of_the_targets_does_not_change_a_byte_and_a_glob_selects_them(tmp_path, run_xisa):
    first = _project(tmp_path / "a")
    second = _project(tmp_path / "b")
    third = _project(tmp_path / "c")
    assert _capture(run_xisa, first, "--no-check", "--as", "gfx942", "--as", "sm_90").code == 0
    assert _capture(run_xisa, second, "--no-check", "--as", "sm_90", "--as", "gfx942").code == 0
    # a glob selects architectures; a device (an MI308X: gfx942 with 80 CUs) is named
    assert _capture(run_xisa, third, "--no-check", "--as", "sm_90,gfx94*", "--as", "gfx942-mi308x").code == 0
    assert _texts(first) == _texts(second) and len(_texts(first)) == 4
    before = _texts(first)
    again = _capture(run_xisa, first, "--no-check", "--as", "sm_90", "--as", "gfx942")
    assert again.code == 0 and _texts(first) == before   # its merged cases compile every target's launches
    assert again.out.count("unchanged") == 4, again.out
    assert _bound(third, "persistent", "gfx942")["constexprs"]["NUM_SMS"] == 304
    assert _bound(third, "persistent", "gfx942-mi308x")["constexprs"]["NUM_SMS"] == 80
    assert _bound(third, "persistent", "sm_90")["constexprs"]["NUM_SMS"] == 132
    assert yaml.safe_load(_texts(third)["amd_only.yaml"])["cases"][0]["targets"] == ["gfx942", "gfx942-mi308x"]


@pytest.mark.unit
def test_several_targets_to_answer_as_need_no_run(tmp_path, run_xisa_in_process):
    """A launch that runs, runs on this machine's GPU as one target: recording it as several would be false."""
    (tmp_path / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    marker = tmp_path / "ran"
    out = run_xisa_in_process("capture", "--as", "gfx942", "--as", "sm_90", "--", sys.executable, "-c",
                              f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert out.code == 2 and "--as: several targets" in out.err and not marker.exists()
    assert len(out.err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------- the merge, as data

def _record(site: str, *, constexprs=None, options=None, args=None, key=None, target="sm_90", test=None) -> dict:
    args = args if args is not None else {"x": {"tensor": "fp32", "shape": [64], "align": 16}}
    constexprs = constexprs or {}
    options = options or {}
    return {"function": "k", "qualname": "k", "module": "m", "file": "/p/m.py", "wrapper": None, "through": [],
            "args": args, "specialization": {}, "constexprs": constexprs, "options": options, "autotune": None,
            "heuristics": {}, "answered_as": target, "site": site, "test": test,
            # the hook's key is the specialization's, whichever site made it
            "key": key or repr((sorted(constexprs.items()), sorted(options.items()), repr(args))), "time": 0}


BACKENDS = {"gfx942": "hip", "gfx950": "hip", "sm_90": "cuda"}
OWNERS = {"kpack": {"hip"}, "waves_per_eu": {"hip"}, "num_warps": {"hip", "cuda"}}


@pytest.mark.unit
def test_launches_are_matched_by_where_they_were_made_not_by_their_constexprs():
    """The same call site binds another NUM_SMS on each target: one case, the value per target. Two launches from one
    site are matched in the order each target made them."""
    by_target = {
        "gfx942": [_record("s1", constexprs={"NUM_SMS": 304, "B": 16}, target="gfx942"),
                   _record("s1", constexprs={"NUM_SMS": 304, "B": 32}, target="gfx942")],
        "sm_90": [_record("s1", constexprs={"NUM_SMS": 132, "B": 16}),
                  _record("s1", constexprs={"NUM_SMS": 132, "B": 32})],
    }
    merged = merge_targets(by_target, target_backends=BACKENDS, option_backends=OWNERS)
    assert [m["constexprs"] for m in merged] == [{"B": 16}, {"B": 32}]
    assert [m["per_target"] for m in merged] == [{"gfx942": {"constexprs": {"NUM_SMS": 304}},
                                                  "sm_90": {"constexprs": {"NUM_SMS": 132}}}] * 2
    assert all(m["launched_on"] == ["gfx942", "sm_90"] for m in merged)


@pytest.mark.unit
def test_an_autotuners_config_is_shared_whole_or_set_per_target():
    """The config each target's pruning kept: one `config:` where equal, else each target's whole in its override."""
    small, large = {"kwargs": {"BK": 16}, "options": {"num_warps": 4}}, {"kwargs": {"BK": 32}, "options": {"num_warps": 4}}
    records = {target: [dict(_record("s1", constexprs={"N": 1}, target=target), autotune=config)]
               for target, config in (("gfx942", small), ("gfx950", small), ("sm_90", large))}
    (merged,) = merge_targets(records, target_backends=BACKENDS, option_backends=OWNERS)
    assert merged["autotune"] is None and merged["constexprs"] == {"N": 1}
    assert merged["per_target"] == {"gfx942": {"config": small}, "gfx950": {"config": small}, "sm_90": {"config": large}}
    records["sm_90"][0]["autotune"] = small
    (merged,) = merge_targets(records, target_backends=BACKENDS, option_backends=OWNERS)
    assert merged["autotune"] == small and merged["per_target"] == {} and merged["launched_on"] is None


@pytest.mark.unit
def test_a_merge_is_the_same_in_any_order_of_targets_and_one_target_is_a_plain_capture():
    gfx = [_record("s1", constexprs={"N": 304}, target="gfx942"), _record("s2", target="gfx942")]
    sm = [_record("s3"), _record("s1", constexprs={"N": 132})]
    one = merge_targets({"gfx942": gfx, "sm_90": sm}, target_backends=BACKENDS, option_backends=OWNERS)
    other = merge_targets({"sm_90": sm, "gfx942": gfx}, target_backends=BACKENDS, option_backends=OWNERS)
    assert one == other
    assert [(m["site"], m["launched_on"]) for m in one] == [("s1", ["gfx942", "sm_90"]), ("s2", ["gfx942"]),
                                                            ("s3", ["sm_90"])]
    alone = merge_targets({"sm_90": sm}, target_backends=BACKENDS, option_backends=OWNERS)
    assert alone == sm


@pytest.mark.unit
def test_an_option_of_one_backend_is_compared_on_that_backends_targets_only():
    """Host code passing `kpack=2` on AMD only is not a difference on sm_90 (CUDA has no kpack): the case stays for
    every target, kpack under the AMD targets' glob as a one-target capture writes it."""
    by_target = {
        "gfx942": [_record("s1", options={"kpack": 2, "num_warps": 4}, target="gfx942")],
        "gfx950": [_record("s1", options={"kpack": 2, "num_warps": 4}, target="gfx950")],
        "sm_90": [_record("s1", options={"num_warps": 4})],
    }
    (merged,) = merge_targets(by_target, target_backends=BACKENDS, option_backends=OWNERS)
    assert merged["options"] == {"kpack": 2, "num_warps": 4}
    assert merged["per_target"] == {} and merged["launched_on"] is None


@pytest.mark.unit
def test_a_launch_a_target_made_elsewhere_too_is_not_a_second_case_for_it():
    """sm_90 makes the same specialization from two sites (its dedup keeps one record per site), gfx942 another value
    at the second: gfx942's own launch at the second site is a case for gfx942 only, sm_90's is covered already."""
    by_target = {
        "gfx942": [_record("s1", constexprs={"N": 1}, target="gfx942"),
                   _record("s2", constexprs={"N": 2}, target="gfx942")],
        "sm_90": [_record("s1", constexprs={"N": 1}), _record("s2", constexprs={"N": 1})],
    }
    merged = merge_targets(by_target, target_backends=BACKENDS, option_backends=OWNERS)
    assert [(m["constexprs"], m["per_target"], m["launched_on"]) for m in merged] == [
        ({"N": 1}, {}, None), ({"N": 2}, {}, ["gfx942"])]


@pytest.mark.unit
@pytest.mark.parametrize("ran_on, answered, unproven", [(["sm_90"], [], ["gfx942", "sm_80"]),
                                                       ([], ["gfx942", "sm_90"], ["sm_80"]), ([], [], [])])
def test_a_capture_names_the_targets_whose_values_it_did_not_observe(ran_on, answered, unproven):
    """A run on a GPU observed that GPU's target; a --no-run capture the targets that answered; with neither (the
    interpreter with no answers) no target was observed and nothing is claimed."""
    from xisa.api.capture import unproven_targets

    assert unproven_targets(ran_on=ran_on, answered=answered, known=["gfx942", "sm_80", "sm_90"]) == unproven


@pytest.mark.parametrize("arch, backend, seen, target", [(90, "cuda", "9.0", "sm_90"), (100, "cuda", "10.0", "sm_100"),
                                                         ("gfx942:sramecc+:xnack-", "hip", "gfx942", "gfx942")])
def test_a_launch_on_a_gpu_records_that_gpus_target(monkeypatch, arch, backend, seen, target):
    """The hook asks Triton's active driver which GPU the launch runs on; capture names its target, which the spec's
    header and the unproven note then say."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    from xisa.api.capture import _ran_on
    from xisa.capture_site._xisa_capture_hook import active_device
    from xisa.spec.targets import load_targets

    class OnGpu:
        def get_current_target(self):
            return GPUTarget(backend, arch, 32)

    monkeypatch.setattr(driver, "_active", OnGpu())
    assert active_device() == {"backend": backend, "arch": seen}
    records = [_record("s1"), _record("s2")]
    records[0]["ran_on"] = active_device()
    known = load_targets([Path(__file__).resolve().parents[1] / "targets"])
    assert _ran_on({None: records}, known) == [target]
    assert records[0]["ran_on"] == target
