"""`xisa capture -- COMMAND`: a program's Triton launches, recorded under the interpreter, become spec cases that
compile exactly like hand-written ones."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


_timings = iter([2.0, 1.0])   # the second config "wins" the autotuner's benchmark


def _bench(call, quantiles):
    call()
    t = next(_timings)
    return [t, t, t]


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)],
                 key=["n"], do_bench=_bench)
@triton.jit
def tuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"]), "EVEN": lambda args: args["n"] % 2 == 0})
@triton.jit
def sized_kernel(x_ptr, out_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * SCALE, mask=mask)


# autotune over heuristics: the heuristic sees the config's BLOCK
@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=1, num_stages=1, maxnreg=128)], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def tuned_sized_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
'''

PROGRAM = '''
import sys
import torch
import triton
from tiny import scale_kernel, sized_kernel, tuned_kernel, tuned_sized_kernel

x = torch.arange(256, dtype=torch.float32)
out = torch.empty_like(x)
scale_kernel[(2,)](x, out, 256, 2.0, BLOCK=128)
y = torch.arange(512, dtype=torch.float32)
scale_kernel[(4,)](y, torch.empty_like(y), 512, 3.0, BLOCK=128)   # the same specialization: n % 16 == 0, aligned
scale_kernel[(2,)](x[1:], out, 255, 2.0, BLOCK=128, num_warps=8)   # 4-byte aligned, n not a multiple of 16
assert torch.equal(out[:255], x[1:] * 2.0)
tuned_kernel[lambda meta: (triton.cdiv(256, meta["BLOCK"]),)](x, out, 256)
sized_kernel[(1,)](x, out, 100, SCALE=2)
assert torch.equal(out[:100], x[:100] * 2)
sized_kernel[(1,)](x, out, 37, SCALE=2)
tuned_sized_kernel[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, out, 40)
scale_kernel.warmup(torch.float16, torch.float16, 64, 1.0, BLOCK=64, grid=(1,))   # compiles, launches nothing
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
'''

# The same launches, written by hand (other values, the same specializations).
HAND_SPEC = '''
name: scale_hand
source: tiny.py
function: scale_kernel
cases:
  - name: aligned
    args: {x_ptr: {tensor: fp32, shape: [4096]}, out_ptr: '*fp32', n: 4096, factor: 0.5}
    constexprs: {BLOCK: 128}
  - name: offset
    args: {x_ptr: {tensor: fp32, shape: [4096], align: 4}, out_ptr: '*fp32', n: 1000, factor: 0.5}
    constexprs: {BLOCK: 128}
    options: {num_warps: 8}
'''


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tiny.py").write_text(KERNEL)
    (root / "run_tiny.py").write_text(PROGRAM)
    (root / "hand.yaml").write_text(HAND_SPEC)
    return root


def _capture(run_xisa, root: Path, *extra: str, exit_with: int = 0):
    return run_xisa("capture", "--no-check", *extra, "--", sys.executable, "run_tiny.py", str(exit_with), cwd=root,
                    env={"TRITON_INTERPRET": "1"})


@pytest.fixture(scope="module")
def captured(tmp_path_factory, shared_cache):
    import subprocess   # run_xisa is function-scoped: the module's one capture calls the CLI the same way

    root = _project(tmp_path_factory.mktemp("capture"))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    env.update({"TRITON_INTERPRET": "1", "XISA_CACHE_DIR": str(shared_cache)})
    # capture's own compile of the new cases, for the targets these tests compile: their cache is warm;
    # tuned_kernel's own do_bench works under the interpreter: the autotuner benchmarks, as on a GPU (the default
    # under the interpreter is the first config: tests/test_capture_wrappers.py)
    proc = subprocess.run([sys.executable, "-m", "xisa", "capture", "--targets", "gfx942", "--targets", "sm_90",
                           "--config-policy", "bench", "--", sys.executable, "run_tiny.py"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return root, proc


def test_launches_deduplicated_by_specialization(captured):
    root, proc = captured
    spec = yaml.safe_load((root / "captured" / "scale_kernel.yaml").read_text())
    assert spec["source"] == "../tiny.py" and spec["function"] == "scale_kernel"
    cases = spec["cases"]
    assert len(cases) == 3   # three launches, two specializations; and a warm-up compile
    first, second, _ = cases
    assert first["args"]["x_ptr"] == {"tensor": "fp32", "shape": [256]}
    assert list(first["args"]) == ["x_ptr", "out_ptr", "n", "factor"]   # the kernel's parameter order
    assert first["args"]["n"] == 256 and first["constexprs"] == {"BLOCK": 128}
    assert second["args"]["x_ptr"] == {"tensor": "fp32", "shape": [255], "offset": 1}   # 4 bytes in: aligned to 4
    assert second["args"]["n"] == 255 and second["options"] == {"num_warps": 8}
    assert "wrote captured/scale_kernel.yaml (3 cases)" in proc.stdout


def test_autotuned_kernel_names_the_autotuner_and_writes_the_chosen_config(captured):
    root, _ = captured
    text = (root / "captured" / "tuned_kernel.yaml").read_text()
    spec = yaml.safe_load(text)
    assert spec["function"] == "tuned_kernel" and "Autotuner" in text
    (case,) = spec["cases"]   # the benchmark launches of the other config are not cases
    # the winner (BLOCK 64), its options in full; num_ctas/maxnreg at their defaults are left out
    assert case["config"] == {"BLOCK": 64, "num_warps": 4, "num_stages": 3}
    assert "constexprs" not in case and "options" not in case   # the config's values are not restated
    assert "refused" not in text


def test_heuristics_values_are_left_to_the_heuristics_and_shown(captured):
    root, _ = captured
    text = (root / "captured" / "sized_kernel.yaml").read_text()
    spec = yaml.safe_load(text)
    assert spec["function"] == "sized_kernel" and "Heuristics" in text
    assert [case["constexprs"] for case in spec["cases"]] == [{"SCALE": 2}, {"SCALE": 2}]   # what the caller passed
    assert [case["args"]["n"] for case in spec["cases"]] == [100, 37]
    # what the heuristics computed from those arguments: each case's `heuristics:`, checked when it compiles
    assert [case["heuristics"] for case in spec["cases"]] == [{"BLOCK": 128, "EVEN": True}, {"BLOCK": 64, "EVEN": False}]


def test_autotune_over_heuristics_writes_the_config_and_leaves_the_heuristic(captured):
    root, _ = captured
    text = (root / "captured" / "tuned_sized_kernel.yaml").read_text()
    (case,) = yaml.safe_load(text)["cases"]
    assert case["config"] == {"BLOCK": 16, "num_warps": 1, "num_stages": 1, "maxnreg": 128}
    assert "constexprs" not in case
    assert case["heuristics"] == {"EVEN": False}   # 40 % 16: computed with the config's BLOCK



def test_wrapped_kernels_compile_with_the_values_the_launch_had(captured, run_xisa):
    """Compiling the captured autotune/heuristics cases binds the constexprs the program's launch had: the case's own,
    the config's, and what the heuristics compute again (the case's `heuristics:` says what they gave at the launch)."""
    root, _ = captured
    names = ("tuned_kernel", "sized_kernel", "tuned_sized_kernel")
    result = run_xisa("compile", *(f"--spec=captured/{n}.yaml" for n in names), "--arch", "gfx942", "--json", cwd=root)
    if result.code == 2 and "unknown key 'config'" in result.err:
        pytest.skip("this branch's specs have no `config:` and bind names no Autotuner or Heuristics (issue 14 item 2)")
    assert result.code == 0, result.err
    cells = {(c["kernel"], c["case"]): c for c in json.loads(result.out)["cells"]}
    checked = 0
    for name in names:
        text = (root / "captured" / f"{name}.yaml").read_text()
        for case in yaml.safe_load(text)["cases"]:
            cell = cells[(name, case["name"])]
            config = {k: v for k, v in case.get("config", {}).items() if not k.startswith(("num_", "maxnreg"))}
            expected = {**case.get("constexprs", {}), **config, **case.get("heuristics", {})}
            assert cell["status"] == "ok" and cell["constexprs"] == expected, (name, case, cell)
            for option in ("num_warps", "num_stages"):
                if option in case.get("config", {}):
                    assert cell["options"][option] == case["config"][option]
            checked += 1
    assert checked == 4


def test_a_warmup_compile_is_a_case(captured):
    root, _ = captured
    text = (root / "captured" / "scale_kernel.yaml").read_text()
    warm = yaml.safe_load(text)["cases"][-1]
    assert warm["args"]["x_ptr"]["tensor"] == "fp16" and warm["constexprs"] == {"BLOCK": 64}
    assert "a warm-up compile" in text


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
def test_captured_cases_compile_to_the_hand_written_fingerprints(captured, run_xisa, arch):
    root, _ = captured
    result = run_xisa("compile", "--spec", "captured/scale_kernel.yaml", "--spec", "hand.yaml", "--arch", arch,
                      "--json", cwd=root)
    assert result.code == 0, result.err
    sha = {(c["kernel"], c["case"]): c["sha256"] for c in json.loads(result.out)["cells"]}
    assert sha[("scale_kernel", "launch1")] == sha[("scale_hand", "aligned")]
    assert sha[("scale_kernel", "launch2")] == sha[("scale_hand", "offset")]
    assert sha[("scale_kernel", "launch1")] != sha[("scale_kernel", "launch2")]


def test_capturing_the_same_launches_again_changes_no_spec(captured, run_xisa):
    root, _ = captured
    before = {path.name: path.read_bytes() for path in (root / "captured").glob("*.yaml")}
    again = _capture(run_xisa, root, "--config-policy", "bench")   # as the fixture captured them
    assert again.code == 0, again.err
    assert "unchanged captured/scale_kernel.yaml" in again.out and "wrote" not in again.out
    assert {path.name: path.read_bytes() for path in (root / "captured").glob("*.yaml")} == before


def test_the_command_failing_is_its_exit_code_and_the_launches_are_kept(tmp_path, run_xisa):
    root = _project(tmp_path / "proj")
    result = _capture(run_xisa, root, "--out", "specs", exit_with=3)
    assert result.code == 3
    assert "the command exited with 3" in result.err
    assert len(yaml.safe_load((root / "specs" / "scale_kernel.yaml").read_text())["cases"]) == 3


def test_specs_outside_the_project_are_refused_before_the_command_runs(tmp_path, run_xisa):
    """A spec outside the project would name the kernel's file by a path that project's compile refuses."""
    root = _project(tmp_path / "proj")
    result = _capture(run_xisa, root, "--out", str(tmp_path / "elsewhere"))
    assert result.code == 2 and "--out" in result.err and "outside the project" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1 and not (tmp_path / "elsewhere").exists()


def test_no_spec_is_written_through_a_link(tmp_path, run_xisa):
    root = _project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "specs").symlink_to(elsewhere)
    result = _capture(run_xisa, root, "--out", "specs")
    assert result.code == 2 and "is a link" in result.err
    assert not list(elsewhere.iterdir())


def test_a_command_without_launches_is_an_error(tmp_path, run_xisa):
    result = run_xisa("capture", "--", sys.executable, "-c", "print('no kernels')", cwd=tmp_path)
    assert result.code == 2 and "no Triton kernel launch" in result.err


# ------------------------------------------------------------------ this repo's kernels, captured

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("gfx942", "gfx1100", "sm_90")


@pytest.fixture(scope="module")
def repo_captured(tmp_path_factory, shared_cache):
    """One capture of tests/kernels/spec_launches.py (two hand-written spec cases launched through their runtime
    checks under the interpreter) in a copy of the corpus, and one compile of captured and hand cells together."""
    import shutil
    import subprocess

    from support import copy_corpus, xisa_process

    root = copy_corpus(tmp_path_factory.mktemp("repo-capture"))
    (root / "tests" / "kernels").mkdir(parents=True)
    for name in ("spec_launches.py", "interp_checks.py"):
        shutil.copy(REPO / "tests" / "kernels" / name, root / "tests" / "kernels" / name)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    env.update({"TRITON_INTERPRET": "1", "XISA_CACHE_DIR": str(shared_cache)})
    proc = subprocess.run([sys.executable, "-m", "xisa", "capture", *(f"--targets={t}" for t in TARGETS), "--",
                           sys.executable, "tests/kernels/spec_launches.py"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    kernels = ["decode_reduce", "decode_reduce_kernel", "kv_dequant:int8_d128", "kv_dequant_kernel"]
    compiled = xisa_process("compile", "--spec", "captured", "--spec", "kernels", *(f"--arch={t}" for t in TARGETS),
                            *(f"--kernel={k}" for k in kernels), "--json", cwd=root, cache=shared_cache)
    assert compiled.code == 0, compiled.err
    return root, json.loads(compiled.out)["cells"]


def test_captured_launches_of_this_repos_kernels_compile_to_the_hand_written_fingerprints(repo_captured):
    _, cells = repo_captured
    def specialization(cell):   # what the binder handed the compiler: the cells describe the same launch
        return json.dumps([cell["target"], cell["signature"], cell["constexprs"], cell["attrs"], cell["options"]],
                          sort_keys=True)

    hand = {}
    for cell in cells:
        if not cell["kernel"].endswith("_kernel"):
            assert cell["status"] == "ok", cell
            hand.setdefault(specialization(cell), []).append(cell)
    matched = set()
    for cell in cells:
        if cell["kernel"].endswith("_kernel"):
            assert cell["status"] == "ok", cell
            twins = hand.get(specialization(cell), [])
            assert twins, f"no hand-written cell launches like {cell['kernel']}:{cell['case']}@{cell['target']}"
            assert {twin["sha256"] for twin in twins} == {cell["sha256"]}
            matched.add((cell["kernel"], cell["target"]))
    assert matched == {(k, t) for k in ("decode_reduce_kernel", "kv_dequant_kernel") for t in TARGETS}
    shas = {cell["sha256"] for cell in cells}
    assert len(shas) == 2 * len(TARGETS)   # two kernels, three targets: six distinct codes, none compared with itself


# ------------------------------------------------------------------ the hook never changes the program

FAILING = '''
import torch
from tiny import scale_kernel

x = torch.arange(64, dtype=torch.float32)
scale_kernel[(1,)](x, torch.empty_like(x), 64, 2.0, BLOCK=64)
scale_kernel[(1,)](x, torch.empty_like(x), 64, object(), BLOCK=64)   # Triton refuses the argument: the program's error
'''


def test_the_programs_exception_and_exit_code_are_unchanged(tmp_path, run_xisa):
    import subprocess

    root = _project(tmp_path / "proj")
    (root / "failing.py").write_text(FAILING)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    plain = subprocess.run([sys.executable, "failing.py"], cwd=root, env=env, capture_output=True, text=True)
    assert plain.returncode == 1
    result = run_xisa("capture", "--no-check", "--", sys.executable, "failing.py", cwd=root, env={"TRITON_INTERPRET": "1"},
                      process=True)
    assert result.code == plain.returncode
    # the same exception, raised from the same place, with the hook in the way
    tail = [line for line in plain.stderr.strip().splitlines()[-3:]]
    assert all(line in result.err for line in tail), (tail, result.err[-2000:])
    spec = yaml.safe_load((root / "captured" / "scale_kernel.yaml").read_text())
    assert [case["args"]["factor"] for case in spec["cases"]] == [2.0]   # the refused launch noted, not a case
    assert "a launch was not recorded" in result.err


PARALLEL_TESTS = '''
import torch
import pytest
from tiny import scale_kernel


@pytest.mark.parametrize("n", [64, 63, 64, 63])
def test_scale(n):
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    scale_kernel[(1,)](x, out, n, 2.0, BLOCK=64)
    assert torch.equal(out, x * 2)
'''


def test_launches_of_several_test_processes_are_merged_and_deduplicated(tmp_path, run_xisa):
    pytest.importorskip("xdist")
    root = _project(tmp_path / "proj")
    (root / "test_parallel.py").write_text(PARALLEL_TESTS)
    result = run_xisa("capture", "--no-check", "--", sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                      "test_parallel.py", cwd=root, env={"TRITON_INTERPRET": "1"}, process=True)
    assert result.code == 0, result.out[-2000:] + result.err[-2000:]
    assert "4 passed" in result.out
    cases = yaml.safe_load((root / "captured" / "scale_kernel.yaml").read_text())["cases"]
    assert sorted(case["args"]["n"] for case in cases) == [63, 64]   # 2 workers, 4 launches, 2 specializations
    assert all("test_parallel.py::test_scale" in line for line in (root / "captured" / "scale_kernel.yaml").read_text()
               .splitlines() if "first launched in" in line)


def test_a_real_launch_records_what_the_interpreter_records(captured, tmp_path, run_xisa):
    """Without TRITON_INTERPRET the hook sits on JITFunction.run, the GPU launch path: it records the launch before
    it runs, so here, with no GPU, the case is written and then the launch fails as it would without capture."""
    root = _project(tmp_path / "proj")
    result = run_xisa("capture", "--no-check", "--", sys.executable, "run_tiny.py", cwd=root, env={"TRITON_INTERPRET": "0"},
                      process=True)
    import torch

    if torch.cuda.is_available():   # a GPU machine: the launches run
        assert result.code == 0, result.err
    else:
        assert result.code == 1 and "active drivers" in result.err   # the program's own failure, unchanged
    case = yaml.safe_load((root / "captured" / "scale_kernel.yaml").read_text())["cases"][0]
    interpreted = yaml.safe_load((captured[0] / "captured" / "scale_kernel.yaml").read_text())["cases"][0]
    assert case == interpreted


TMA_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def copy_tile(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    out_desc.store([0, 0], in_desc.load([0, 0]))
'''

TMA_PROGRAM = '''
import torch
from triton.tools.tensor_descriptor import TensorDescriptor
from tma import copy_tile

x = torch.randn(64, 64, dtype=torch.float16)
y = torch.empty_like(x)
copy_tile[(1,)](TensorDescriptor.from_tensor(x, [32, 32]), TensorDescriptor.from_tensor(y, [32, 32]), BM=32, BN=32)
assert torch.equal(x[:32, :32], y[:32, :32])
'''

TMA_HAND = '''
name: copy_hand
source: tma.py
function: copy_tile
cases:
  - name: tile
    args:
      in_desc: {descriptor: fp16, shape: [64, 64], block_shape: [32, 32]}
      out_desc: {descriptor: fp16, shape: [64, 64], block_shape: [32, 32]}
    constexprs: {BM: 32, BN: 32}
'''


def test_a_host_tensor_descriptor_is_captured_as_the_spec_descriptor_form(tmp_path, run_xisa):
    (tmp_path / "tma.py").write_text(TMA_KERNEL)
    (tmp_path / "run_tma.py").write_text(TMA_PROGRAM)
    (tmp_path / "hand.yaml").write_text(TMA_HAND)
    capture = run_xisa("capture", "--targets", "sm_90", "--", sys.executable, "run_tma.py", cwd=tmp_path,
                       env={"TRITON_INTERPRET": "1"})
    assert capture.code == 0, capture.err
    spec = yaml.safe_load((tmp_path / "captured" / "copy_tile.yaml").read_text())
    assert spec["cases"][0]["args"]["in_desc"] == {"descriptor": "float16", "shape": [64, 64], "strides": [64, 1],
                                                   "block_shape": [32, 32]}
    result = run_xisa("compile", "--spec", "captured/copy_tile.yaml", "--spec", "hand.yaml", "--arch", "sm_90",
                      "--json", cwd=tmp_path)
    assert result.code == 0, result.err
    sha = {c["kernel"]: c["sha256"] for c in json.loads(result.out)["cells"]}
    assert sha["copy_tile"] == sha["copy_hand"] and sha["copy_tile"]
