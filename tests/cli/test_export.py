"""`xisa export` and `xisa export --verify`: the bundle is Triton's own cache entries under the keys a launch
computes, proven by Triton's launch path run in a process of its own (tests/launch_probe.py: no xisa in it) with
TRITON_CACHE_DIR at the bundle, for AMD (gfx942, gfx1100) and NVIDIA (sm_90) targets. And bench/export_gpu_proof.py,
the parts that need no GPU: the copy its launches use is found where it lies (not through the original's files), its
verdict fails on a compile, a key outside the bundle, a changed cache, unequal outputs or a JIT run that compiled
nothing, and without a GPU it says so in its one JSON line (exit 2)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from support import REPO, copy_tinyproj, write_files, xisa_process

PROBE = Path(__file__).resolve().parent.parent / "launch_probe.py"
ARGS = {"x_ptr": {"tensor": "fp32", "shape": [4096]}, "y_ptr": {"tensor": "fp32", "shape": [4096]}, "n": 4096,
        "factor": 2.0}
CONSTEXPRS = {"BLOCK": 256, "GFX11_PATH": False}
SPEC = """name: launched
source: scale.py
function: scale_kernel
targets: [gfx942, gfx1100, sm_90]
cases:
  - name: c
    args: {x_ptr: {tensor: fp32, shape: [4096]}, y_ptr: {tensor: fp32, shape: [4096]}, n: 4096, factor: 2.0}
    constexprs: {BLOCK: 256, GFX11_PATH: false}
    options: {num_warps: 4}
"""
GPU_TARGETS = {"gfx942": ["hip", "gfx942", 64], "gfx1100": ["hip", "gfx1100", 32], "sm_90": ["cuda", 90, 32]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, shared_cache):
    """One export of the three cells of `launched`: (project, bundle folder, the command's outcome)."""
    root = tmp_path_factory.mktemp("export")
    project = copy_tinyproj(root / "proj")
    write_files(project, {"kernels/launched.yaml": SPEC})
    bundle = root / "bundle"
    outcome = xisa_process("export", "--kernel", "launched", "-j", "1", "-o", str(bundle), cwd=project,
                           cache=shared_cache)
    return project, bundle, outcome


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def _launch(project: Path, target: str, cache: Path) -> dict:
    """Triton's launch path for the case on `target` with TRITON_CACHE_DIR=`cache`, in a process of its own."""
    request = {"file": str(project / "kernels" / "scale.py"), "function": "scale_kernel",
               "gpu_target": GPU_TARGETS[target], "args": ARGS, "constexprs": CONSTEXPRS,
               "options": {"num_warps": 4}}
    return _probe(request, cache)


def _probe(request: dict, cache: Path) -> dict:
    from xisa.compile.export.launch_cache import default_launch_environ

    env = {**default_launch_environ(dict(os.environ)), "TRITON_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, str(PROBE), json.dumps(request)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cells(bundle: Path) -> dict[str, dict]:
    manifest = json.loads((bundle / "manifest.json").read_text())
    return {cell["target"]: cell for cell in manifest["cells"]}


def test_the_bundle_is_tritons_entries_and_a_manifest(exported):
    project, bundle, outcome = exported
    assert outcome.code == 1, outcome.err        # written, but the check is not green: no goldens for these cells
    assert "the selection's check: not green (new: 3)" in outcome.err
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["deploy_dir"] == str(bundle)
    toolchain = manifest["toolchain"]
    assert toolchain["triton_key"].startswith(toolchain["triton"])
    assert toolchain["python"]["ext_suffix"] and toolchain["ptxas"] and toolchain["cache_invalidating_env"] == {}
    assert manifest["check"]["status"] == "not green"
    cells = _cells(bundle)
    assert sorted(cells) == ["gfx1100", "gfx942", "sm_90"]
    names = {p.name for p in bundle.iterdir()}
    assert names == {"manifest.json"} | {cell["folder"] for cell in cells.values()}
    for cell in cells.values():
        assert cell["golden"] == "new" and cell["checked_code"] is True and cell["env"] == {}
        entry = bundle / cell["folder"]
        group = json.loads((entry / cell["group_file"]).read_text())["child_paths"]
        assert {p.name for p in entry.iterdir()} == {*group, cell["group_file"]}   # nothing of xisa's
        assert all(path == str(entry / name) for name, path in group.items())
        assert hashlib.sha256((entry / cell["code_object"]).read_bytes()).hexdigest() == cell["code_sha256"]
    assert cells["sm_90"]["code_object"].endswith(".cubin") and cells["gfx942"]["code_object"].endswith(".hsaco")
    # The key holds no path, but the line information names the file the export compiled (docs/export.md)
    for target, stage in (("sm_90", "ptx"), ("gfx942", "amdgcn")):
        text = (bundle / cells[target]["folder"] / f"scale_kernel.{stage}").read_text()
        assert str(project.resolve() / "kernels") in text


@pytest.mark.parametrize("target", sorted(GPU_TARGETS))
def test_a_launch_on_the_target_finds_its_entry_and_compiles_nothing(exported, target):
    project, bundle, _ = exported
    before = _snapshot(bundle)
    seen = _launch(project, target, bundle)
    assert seen == {"cache_hit": True, "key": _cells(bundle)[target]["key"]}
    assert _snapshot(bundle) == before     # Triton wrote nothing: it found the entry whole


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_an_entry_is_byte_for_byte_what_a_cold_launch_writes(exported, tmp_path, target):
    from xisa.compile.export.launch_cache import relocate_group

    project, bundle, _ = exported
    cold = tmp_path / "cold"
    seen = _launch(project, target, cold)
    cell = _cells(bundle)[target]
    assert seen == {"cache_hit": False, "key": cell["key"]}
    ours, theirs = bundle / cell["folder"], cold / cell["folder"]
    assert sorted(p.name for p in theirs.iterdir()) == sorted(p.name for p in ours.iterdir())
    for name in cell["files"]:
        assert (theirs / name).read_bytes() == (ours / name).read_bytes(), name
    group = (ours / cell["group_file"]).read_text()
    assert relocate_group(group, bundle, cold) == (theirs / cell["group_file"]).read_text()


def test_verify_finds_every_cell_here(exported, shared_cache):
    project, bundle, _ = exported
    out = xisa_process("export", "--verify", str(bundle), "--json", cwd=project, cache=shared_cache)
    assert out.code == 0, out.err
    report = json.loads(out.out)
    assert report["found"] == 3 and all(cell["found"] and cell["key_here"] == cell["key"] for cell in report["cells"])


def test_verify_names_a_knob_that_changes_the_key(exported, shared_cache):
    project, bundle, _ = exported
    out = xisa_process("export", "--verify", str(bundle), cwd=project, cache=shared_cache,
                       env={"TRITON_DEFAULT_FP_FUSION": "1"})
    assert out.code == 1, out.out + out.err
    assert out.out.count("missed: the cache-invalidating variables set here are {'TRITON_DEFAULT_FP_FUSION'") == 3
    assert "0 of 3 cells would be found" in out.out


def test_verify_of_a_moved_bundle_says_where_its_groups_point(exported, tmp_path, shared_cache):
    project, bundle, _ = exported
    moved = shutil.copytree(bundle, tmp_path / "moved")
    out = xisa_process("export", "--verify", str(moved), cwd=project, cache=shared_cache)
    assert out.code == 1
    assert out.out.count(f"the key holds, but its group names files under {bundle}") == 3


def _other_triton_python() -> str | None:
    named = os.environ.get("XISA_OTHER_TRITON_PYTHON")
    for candidate in ([named] if named else ["/work/venv-t39/bin/python", "/tmp/venv-t36/bin/python"]):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.mark.skipif(_other_triton_python() is None, reason="no Python with another Triton build and xisa "
                    "(XISA_OTHER_TRITON_PYTHON, /work/venv-t39, /tmp/venv-t36) on this machine")
def test_a_bundle_taken_to_another_triton_misses_every_cell(exported):
    project, bundle, _ = exported
    env = {k: v for k, v in os.environ.items() if k != "XISA_CACHE_DIR"}
    proc = subprocess.run([_other_triton_python(), "-m", "xisa", "export", "--verify", str(bundle)], cwd=project,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("missed: another Triton build or Python") == 3


def test_verify_refuses_a_bundle_that_is_not_whole(exported, tmp_path, shared_cache):
    project, bundle, _ = exported
    broken = shutil.copytree(bundle, tmp_path / "broken")
    cell = _cells(broken)["gfx942"]
    (broken / cell["folder"] / cell["code_object"]).write_bytes(b"\0")
    out = xisa_process("export", "--verify", str(broken), cwd=project, cache=shared_cache)
    assert out.code == 2 and "has sha256" in out.err and out.err.count("\n") == 1
    (broken / "manifest.json").write_text("{")
    assert xisa_process("export", "--verify", str(broken), cwd=project, cache=shared_cache).code == 2
    (broken / "manifest.json").unlink()
    (broken / ".xisa-export-partial-1").mkdir()
    out = xisa_process("export", "--verify", str(broken), cwd=project, cache=shared_cache)
    assert out.code == 2 and "has no manifest.json: its export was interrupted" in out.err


def test_an_archive_unpacked_where_it_says_is_found(exported, tmp_path, shared_cache):
    project, _, _ = exported
    archive, deploy = tmp_path / "b.tar.gz", tmp_path / "deploy"
    out = xisa_process("export", "--kernel", "launched:c", "--arch", "gfx942", "-j", "1", "-o", str(archive),
                       "--tar", "--deploy-dir", str(deploy), cwd=project, cache=shared_cache)
    assert out.code == 1, out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz"]    # nothing left beside it
    with tarfile.open(archive) as opened:
        names = opened.getnames()
        assert names[-1] == "manifest.json"                             # last: a cut archive has none
        opened.extractall(deploy)
    assert xisa_process("export", "--verify", str(deploy), cwd=project, cache=shared_cache).code == 0


@pytest.mark.parametrize("args, message", [
    (["-o", "{nonempty}"], "is not an empty folder"),
    (["-o", "{tmp}/b.tar", "--tar"], "--deploy-dir: an archive is unpacked elsewhere"),
    (["-o", "{tmp}/b.zip", "--tar", "--deploy-dir", "/x"], "an archive's name ends in .tar"),
    (["--verify", "{tmp}", "-o", "{tmp}/x"], "--verify reads a bundle"),
    (["-o", "{tmp}/b", "--deploy-dir", "cache"], "--deploy-dir: cache is relative"),
    ([], "names no bundle to write"),
])
def test_refusals_are_one_line_exit_2(tmp_path, tinyproj, shared_cache, args, message):
    (tmp_path / "nonempty").mkdir()
    (tmp_path / "nonempty" / "f").write_text("")
    args = [a.format(tmp=tmp_path, nonempty=tmp_path / "nonempty") for a in args]
    out = xisa_process("export", "--kernel", "scale:small", *args, cwd=tinyproj, cache=shared_cache)
    assert out.code == 2 and message in out.err and out.err.count("\n") == 1, out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nonempty", "tinyproj"]


def test_an_interrupted_export_leaves_no_manifest(tinyproj, tmp_path, monkeypatch, shared_cache):
    from xisa.api import export as export_module
    from xisa.api.selection import Selection

    def interrupted(folder, manifest):
        raise KeyboardInterrupt

    monkeypatch.setattr(export_module, "write_manifest", interrupted)
    monkeypatch.setenv("XISA_CACHE_DIR", str(shared_cache))
    monkeypatch.chdir(tinyproj)
    saved = dict(os.environ)
    with pytest.raises(KeyboardInterrupt):
        export_module.export(Selection(kernel=["scale:small"], arch=["gfx942"]), output=tmp_path / "b",
                             options=export_module.RunOptions(jobs=1))
    assert os.environ == saved
    left = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert "manifest.json" not in left and not any(name.startswith(".xisa-export-partial") for name in left)
    out = xisa_process("export", "--verify", str(tmp_path / "b"), cwd=tinyproj, cache=shared_cache)
    assert out.code == 2 and "has no manifest.json" in out.err


GEMM_ARGS = {"a_ptr": {"tensor": "bf16", "shape": [4096, 4096]}, "b_ptr": {"tensor": "bf16", "shape": [4096, 4096]},
             "c_ptr": {"tensor": "bf16", "shape": [4096, 4096]}, "scale_ptr": {"tensor": "fp32", "shape": [2]},
             "M": 4096, "N": 4096, "K": 4096, "stride_am": 4096, "stride_ak": 1, "stride_bk": 4096, "stride_bn": 1,
             "stride_cm": 4096, "stride_cn": 1}
GEMM_CONSTEXPRS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "UPCAST_F16": False, "EVEN_K": True,
                   "FP8_IN": False}


@pytest.mark.parametrize("target, options", [("gfx942", {"num_warps": 8, "num_stages": 2}),
                                             ("sm_90", {"num_warps": 8, "num_stages": 3})])
def test_a_launch_of_the_bundled_corpus_gemm_finds_its_entry(tmp_path, shared_cache, target, options):
    """The corpus's gemm (a kernel of a package, its launch options per target) exported from this repository."""
    repo = REPO
    bundle = tmp_path / "bundle"
    out = xisa_process("export", "--kernel", "gemm:bf16_4k", "--arch", target, "-j", "1", "-o", str(bundle), cwd=repo,
                       cache=shared_cache)
    assert out.code in (0, 1), out.err      # 1: the tree's check of the cell is not green (said, not refused)
    (cell,) = json.loads((bundle / "manifest.json").read_text())["cells"]
    request = {"file": str(repo / "kernels" / "gemm.py"), "function": "gemm_kernel", "args": GEMM_ARGS,
               "gpu_target": GPU_TARGETS[target], "constexprs": GEMM_CONSTEXPRS, "options": options}
    before = _snapshot(bundle)
    assert _probe(request, bundle) == {"cache_hit": True, "key": cell["key"]}
    assert _snapshot(bundle) == before


# --- bench/export_gpu_proof.py ---------------------------------------------------------------------------

SCRIPT = REPO / "bench" / "export_gpu_proof.py"


@pytest.fixture(scope="module")
def proof():
    spec = importlib.util.spec_from_file_location("export_gpu_proof", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launches_copy_is_found_in_its_own_folder(exported, tmp_path, proof):
    from xisa.api.export import verify

    _, bundle, _ = exported
    manifest = json.loads((bundle / "manifest.json").read_text())
    plain = tmp_path / "plain"
    shutil.copytree(bundle, plain)
    assert verify(plain).found == 0          # its groups name the original's files
    proof._copy_for_launches(bundle, manifest, tmp_path / "copy")
    assert verify(tmp_path / "copy").found == 3


def _run(events, tensors=(torch.ones(3),), status="pass"):
    return {"status": status, "message": "", "events": events, "tensors": list(tensors)}


HIT, MISS = {"key": "k1", "cache_hit": True}, {"key": "k1", "cache_hit": False}


@pytest.mark.parametrize("bundled, jit, unchanged, keys, ok", [
    (_run([HIT]), _run([MISS]), True, {"k1"}, True),
    (_run([MISS]), _run([MISS]), True, {"k1"}, False),                 # the bundle run compiled
    (_run([HIT]), _run([MISS]), True, {"k2"}, False),                  # a key the bundle does not hold
    (_run([HIT]), _run([MISS]), False, {"k1"}, False),                 # the cache folder changed
    (_run([HIT]), _run([HIT]), True, {"k1"}, False),                   # the JIT run compiled nothing
    (_run([HIT]), _run([MISS], [torch.zeros(3)]), True, {"k1"}, False),   # other outputs
    (_run([HIT], status="fail"), _run([MISS]), True, {"k1"}, False),   # the check failed
    (_run([]), _run([MISS]), True, {"k1"}, False),                     # no launch seen
])
def test_the_verdict(proof, bundled, jit, unchanged, keys, ok):
    cache = {"bundle_files_unchanged": unchanged, "entries_added": [], "launcher_builds": 2}
    summary = proof._judge({**cache, "verify_found": 1}, ["a:b@sm_90"],
                           {"a:b@sm_90": bundled}, {"a:b@sm_90": jit}, keys)
    assert summary["ok"] is ok, summary


def test_a_launcher_build_is_no_compile_and_a_new_entry_is(proof):
    before = {"KEY": "dir", "KEY/k.cubin": "1", "KEY/__grp__k.json": "2"}
    launcher = {**before, "L": "dir", "L/cuda_utils.cpython-312-x86_64-linux-gnu.so": "3"}
    assert proof._cache_change(before, launcher) == {"bundle_files_unchanged": True, "entries_added": [],
                                                     "launcher_builds": 1}
    compiled = {**before, "NEW": "dir", "NEW/k.cubin": "4", "NEW/__grp__k.json": "5"}
    assert proof._cache_change(before, compiled)["entries_added"] == ["NEW/__grp__k.json", "NEW/k.cubin"]
    assert proof._cache_change(before, {**before, "KEY/k.cubin": "9"})["bundle_files_unchanged"] is False
    assert proof._cache_change(before, {"KEY": "dir", "KEY/k.cubin": "1"})["bundle_files_unchanged"] is False


def test_a_kernel_entry_added_fails_the_verdict(proof):
    cache = {"bundle_files_unchanged": True, "entries_added": ["NEW/__grp__k.json"], "launcher_builds": 0}
    summary = proof._judge({**cache, "verify_found": 1}, ["a:b@sm_90"], {"a:b@sm_90": _run([HIT])},
                           {"a:b@sm_90": _run([MISS])}, {"k1"})
    assert summary["ok"] is False


def test_outputs_compare_as_bytes(proof):
    nan = torch.tensor([float("nan"), 1.0])
    assert proof._same_bytes(nan, nan.clone())
    assert not proof._same_bytes(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not proof._same_bytes(torch.ones(2), torch.ones(2, dtype=torch.float16))


def test_without_a_gpu_it_says_so_in_one_json_line(exported):
    project, bundle, _ = exported
    proc = subprocess.run([sys.executable, str(SCRIPT), str(bundle)], cwd=project, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    line, = proc.stdout.strip().splitlines()
    assert json.loads(line) == {"kind": "export-gpu-proof", "ok": False,
                                "error": "LookupError: no GPU with index 0 is visible"}


BAD_KERNEL = """import triton
import triton.language as tl


@triton.jit
def kern(x_ptr, FAIL: tl.constexpr):
    tl.static_assert(not FAIL)
    tl.store(x_ptr, 1.0)
"""
BAD_SPEC = """name: bad
source: bad.py
function: kern
targets: [gfx942, gfx1100]
cases:
  - name: c
    args: {x_ptr: '*fp32'}
    constexprs: {FAIL: false}
    overrides:
      gfx1100: {constexprs: {FAIL: true}}
"""


def test_a_cell_that_does_not_compile_is_named_and_the_others_are_exported(tinyproj, tmp_path, shared_cache):
    write_files(tinyproj, {"kernels/bad.py": BAD_KERNEL, "kernels/bad.yaml": BAD_SPEC})
    out = xisa_process("export", "--kernel", "bad", "-j", "1", "-o", str(tmp_path / "b"), cwd=tinyproj,
                       cache=shared_cache)
    assert out.code == 2 and "error bad:c@gfx1100: CompileTimeAssertionFailure" in out.err, out.err
    assert "tl.static_assert(not FAIL)" in out.err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert [cell["target"] for cell in manifest["cells"]] == ["gfx942"]
    assert manifest["check"]["status"] == "untrusted"
    (error,) = manifest["errors"]
    assert error.startswith("bad:c@gfx1100: CompileTimeAssertionFailure")


def test_a_manifest_cell_the_project_does_not_have_fails_the_proof(proof):
    summary = proof._judge({"bundle_files_unchanged": True, "entries_added": [], "verify_found": 1}, ["gone:c@sm_90"],
                           {}, {}, set())
    assert summary["ok"] is False and "not a cell of the project's specs" in summary["failures"][0]
