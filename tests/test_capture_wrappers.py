"""Kernels inside library wrappers (any triton KernelInterface chain ending in a JITFunction, found by type), and
`xisa capture --no-run` / `--config-policy`: captured through the wrappers, with the interpreter or without running
anything, and every spec capture writes compiles."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

# Hand-written wrappers of the shapes real libraries use (FlagGems' LibEntry and LibTuner, fla's CachedAutotuner),
# none of them named Autotuner or Heuristics.
WRAPPERS = '''
import triton
import triton.language as tl
from triton.runtime import KernelInterface
from triton.runtime.autotuner import Autotuner


class PassThrough(KernelInterface):
    """LibEntry's shape: holds `.fn`, compiles through it on the first launch of a key, then keeps the result."""

    def __init__(self, fn):
        self.fn = fn
        self.kernels = {}

    def run(self, *args, **kwargs):
        key = tuple(str(getattr(a, "dtype", a)) for a in args)
        if key not in self.kernels:
            self.kernels[key] = self.fn.run(*args, **kwargs)
        return self.kernels[key]


class OwnTuner(Autotuner):
    """LibTuner's shape: its own run, cache and benchmark loop; never Autotuner.run."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        key = tuple(self.nargs[name] for name in self.keys)
        if len(self.configs) == 1:
            config = self.configs[0]
        else:
            if key not in self.cache:
                configs = self.prune_configs(kwargs)
                timings = {c: self._bench(*args, config=c, **kwargs) for c in configs}
                self.cache[key] = min(timings, key=timings.get)
            config = self.cache[key]
        self.best_config = config
        return self.fn.run(*args, **kwargs, **config.all_kwargs())


class SuperTuner(Autotuner):
    """CachedAutotuner's shape: its run does its own thing, then Autotuner.run."""

    def run(self, *args, **kwargs):
        return super().run(*args, **kwargs)


class Opaque(KernelInterface):
    """A wrapper xisa cannot see through: the kernel is not in `.fn`."""

    def __init__(self, kernel):
        self.kernel = kernel

    def run(self, *args, **kwargs):
        return self.kernel.run(*args, **kwargs)


class Loop(KernelInterface):
    def __init__(self):
        self.fn = self


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2),
           triton.Config({"BLOCK": 128}, num_warps=4)]


def big_blocks(configs, nargs, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] >= 64]   # the first config left is CONFIGS[1]


even = triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})(copy_kernel)
entry_tuned = PassThrough(OwnTuner(even, even.arg_names, CONFIGS, ["n"], None, None,
                                   prune_configs_by={"early_config_prune": big_blocks}))
super_tuned = SuperTuner(even, even.arg_names, CONFIGS, ["n"], None, None)
plain_tuned = triton.autotune(CONFIGS, key=["n"])(even)
dup_tuned = triton.autotune([CONFIGS[0], triton.Config({"BLOCK": 32}, num_warps=1)], key=["n"])(even)   # twice
warped = PassThrough(triton.heuristics({"num_warps": lambda args: 2})(copy_kernel))   # a heuristic launch option
opaque = Opaque(copy_kernel)
loop = Loop()
'''

PROGRAM = '''
import os
import torch
import triton
from wrapped import CONFIGS, dup_tuned, entry_tuned, plain_tuned, super_tuned, warped

x = torch.arange(256, dtype=torch.float32)
out = torch.zeros_like(x)
grid = lambda meta: (triton.cdiv(200, meta["BLOCK"]),)
entry_tuned[grid](x, out, 200)
entry_tuned[grid](x, out, 200)          # PassThrough keeps the first: no second launch
cached = triton.Config({"BLOCK": 256}, num_warps=8) if os.environ.get("UNLISTED") else CONFIGS[2]
super_tuned.cache[(256, "torch.float32", "torch.float32")] = cached   # what a library's cache would hold
super_tuned[lambda meta: (triton.cdiv(256, meta["BLOCK"]),)](x, out, 256)
plain_tuned[grid](x, torch.zeros_like(x), 200)
warped[(4,)](x, torch.zeros_like(x), 200, BLOCK=64, EVEN=False)
dup_tuned[grid](x, torch.zeros_like(x), 200)
if os.environ.get("TRITON_INTERPRET") == "1":
    assert torch.equal(out, x), "the interpreted launches ran"
print("done")
'''

HAND = '''
name: copy_hand
source: wrapped.py
function: copy_kernel
cases:
  - name: block64
    args: {x_ptr: {tensor: fp32, shape: [256]}, out_ptr: {tensor: fp32, shape: [256]}, n: 200}
    constexprs: {BLOCK: 64, EVEN: false}
    options: {num_warps: 2, num_stages: 3}
'''


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "wrapped.py").write_text(WRAPPERS)
    (root / "run_wrapped.py").write_text(PROGRAM)
    (root / "hand.yaml").write_text(HAND)
    return root


def _capture(root: Path, *options: str, interpret: bool, out: str, env: dict | None = None):
    from support import xisa_process

    env = {"TRITON_INTERPRET": "1" if interpret else "0", **(env or {})}
    return xisa_process("capture", "--no-check", "--out", out, *options, "--", sys.executable, "run_wrapped.py", cwd=root, env=env,
                        timeout=300)


def _cases(root: Path, out: str, name: str) -> list[dict]:
    return yaml.safe_load((root / out / f"{name}.yaml").read_text())["cases"]


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The program captured twice: under the interpreter (the launches run) and with --no-run and no interpreter."""
    root = _project(tmp_path_factory.mktemp("wrapped"))
    interpreted = _capture(root, interpret=True, out="interp")
    not_run = _capture(root, "--no-run", interpret=False, out="norun")
    return root, interpreted, not_run


def test_wrapper_chains_unwrap_by_type_to_the_jit_function(tmp_path):
    from triton.runtime.autotuner import Autotuner, Heuristics

    from xisa.compile.launch.loader import load_kernel_object, unwrap_kernel
    from xisa.spec.cases import load_spec

    root = _project(tmp_path / "proj")
    (root / "k.yaml").write_text("name: k\nsource: wrapped.py\nfunction: entry_tuned\ncases:\n  - {name: c, config: 0}\n")
    spec = load_spec(root / "k.yaml", display="k.yaml")
    fn, wrappers = unwrap_kernel(load_kernel_object(spec, roots=[root]), spec)
    assert [type(w).__name__ for w in wrappers] == ["PassThrough", "OwnTuner", "Heuristics"]
    assert isinstance(wrappers[1], Autotuner) and isinstance(wrappers[2], Heuristics)
    assert fn.__name__ == "copy_kernel" and wrappers[-1].fn is fn


@pytest.mark.parametrize("function, message, fix", [
    ("opaque", "'opaque': the Opaque is a triton KernelInterface that holds no `.fn`",
     "name the @triton.jit function it launches (its `.kernel` is the @triton.jit 'copy_kernel')"),
    ("loop", "'loop' is a Loop whose `.fn` chain comes back to the Loop", "name the @triton.jit function"),
])
def test_a_wrapper_xisa_cannot_see_through_is_a_one_line_error(tmp_path, run_xisa, function, message, fix):
    root = _project(tmp_path / "proj")
    (root / "k.yaml").write_text(f"name: k\nsource: wrapped.py\nfunction: {function}\ncases:\n  - {{name: c}}\n")
    result = run_xisa("compile", "--spec", "k.yaml", "--arch", "gfx942", cwd=root)
    lines = [line for line in result.err.splitlines() if "error" in line]
    assert result.code == 2 and len(lines) == 1, result.err
    assert "k.yaml: function" in lines[0] and message in lines[0] and fix in lines[0], lines[0]


def test_launches_through_wrappers_are_captured_with_their_roles_and_chosen_config(captured):
    """Under the interpreter the autotuners cannot benchmark (no driver): each takes its first config after its own
    pruning, runs it for real (the program's check passes), and the case names that config."""
    root, interpreted, _ = captured
    assert interpreted.code == 0 and "done" in interpreted.out, interpreted.err[-3000:]
    text = (root / "interp" / "entry_tuned.yaml").read_text()
    assert "entry_tuned is the PassThrough over Autotuner over Heuristics the program launched" in text
    (case,) = _cases(root, "interp", "entry_tuned")   # PassThrough kept the first launch's kernel
    assert case["config"] == {"BLOCK": 64, "num_warps": 2, "num_stages": 3}   # CONFIGS[1]: big_blocks pruned CONFIGS[0]
    assert case["heuristics"] == {"EVEN": False} and "constexprs" not in case   # 200 % 64
    assert [c["config"]["BLOCK"] for c in _cases(root, "interp", "super_tuned")] == [32]   # first: its cache not asked
    assert [c["config"]["BLOCK"] for c in _cases(root, "interp", "plain_tuned")] == [32]   # a plain @triton.autotune
    (case,) = _cases(root, "interp", "warped")   # the option a heuristic set is its value, computed again
    assert case["heuristics"] == {"num_warps": 2} and "options" not in case


def test_no_run_captures_the_same_cases_without_a_gpu_or_the_interpreter(captured):
    root, interpreted, not_run = captured
    assert not_run.code == 0 and "done" in not_run.out, not_run.err[-3000:]
    assert "--no-run: no kernel ran" in not_run.err and "garbage" in not_run.err
    for name in ("entry_tuned", "super_tuned", "plain_tuned", "warped"):
        assert _cases(root, "norun", name) == _cases(root, "interp", name)
    text = (root / "norun" / "entry_tuned.yaml").read_text()
    assert "Captured with --no-run" in text and "# config: chosen by the capture's config policy (first)" in text


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
def test_every_spec_captured_through_wrappers_compiles_to_the_jit_functions_code(captured, run_xisa, arch):
    root, _, _ = captured
    for folder in ("interp", "norun"):   # one kernel name each: two folders are two compiles
        result = run_xisa("compile", "--spec", folder, "--spec", "hand.yaml", "--arch", arch, "--json", cwd=root)
        assert result.code == 0, result.err
        cells = json.loads(result.out)["cells"]
        assert len(cells) == 6 and all(cell["status"] == "ok" for cell in cells), cells
        sha = {c["kernel"]: c["sha256"] for c in cells}
        assert next(c for c in cells if c["kernel"] == "warped")["options"]["num_warps"] == 2
        # the wrapped kernel's case compiles what the plain function compiles with the config's and heuristic's values
        assert sha["entry_tuned"] == sha["copy_hand"]


@pytest.mark.parametrize("policy, blocks", [
    ("all", {"entry_tuned": [64, 128], "super_tuned": [32, 64, 128]}),      # every config left after pruning
    ("cached", {"entry_tuned": [64], "super_tuned": [128]}),                # what super_tuned's cache holds, else first
    ("first", {"entry_tuned": [64], "super_tuned": [32]}),
])
def test_a_config_policy_decides_what_the_autotuners_pick(tmp_path, policy, blocks):
    root = _project(tmp_path / "proj")
    result = _capture(root, "--no-run", "--config-policy", policy, interpret=False, out="c")
    assert result.code == 0, result.err[-3000:]
    for name, expected in blocks.items():
        assert [case["config"]["BLOCK"] for case in _cases(root, "c", name)] == expected, name


def test_a_config_the_autotuner_does_not_list_is_a_note_not_a_case(tmp_path):
    """fla's CachedAutotuner can launch a config from its own files that is none of its `configs`: xisa compiles
    listed configs only, so the launch is noted instead of written as a case its compile would refuse."""
    root = _project(tmp_path / "proj")
    result = _capture(root, "--no-run", "--config-policy", "cached", interpret=False, out="c", env={"UNLISTED": "1"})
    assert result.code == 0, result.err[-3000:]
    assert not (root / "c" / "super_tuned.yaml").exists() and (root / "c" / "entry_tuned.yaml").exists()
    (note,) = [line for line in result.err.splitlines() if "super_tuned" in line or "copy_kernel" in line]
    assert "a launch was not recorded" in note and "none of its 3 configs" in note and "BLOCK: 256" in note


@pytest.mark.unit
def test_a_benchmark_policy_without_running_is_refused(tmp_path, run_xisa_in_process):
    result = run_xisa_in_process("capture", "--no-check", "--no-run", "--config-policy", "bench", "--", sys.executable, "-c", "1",
                                 cwd=tmp_path)
    assert result.code == 2 and "--config-policy" in result.err and "--no-run" in result.err
    assert len(result.err.strip().splitlines()) == 1


# ------------------------------------------------------------------ this repo's kernels, captured without running

REPO = Path(__file__).resolve().parent.parent
# One cell of each kernel, launched on the target named (each compiles for both: no vendor-only dtype).
CELLS = ["decode_reduce:d256_s64@gfx942", "decode_stage1:d256-bf16@sm_90", "extend_attention:d128@gfx942",
         "gemm:bf16_4k@sm_90", "gqa_decode:base-bf16@gfx942", "kv_dequant:int8_d128@sm_90"]


@pytest.mark.slow
def test_every_spec_a_no_run_capture_of_this_repos_kernels_writes_compiles(tmp_path, shared_cache):
    """--no-run on the CPU, no interpreter: each kernel's launch (tests/kernels/spec_launches.py) is recorded and not
    run (its check then fails on garbage); every case written compiles for gfx942 and sm_90, and the one compiled
    for the target it was launched for is the hand-written cell's code."""
    import shutil

    from support import copy_corpus, xisa_process

    root = copy_corpus(tmp_path / "repo")
    (root / "tests" / "kernels").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "kernels" / "spec_launches.py", root / "tests" / "kernels" / "spec_launches.py")
    capture = xisa_process("capture", "--no-check", "--no-run", "--", sys.executable, "tests/kernels/spec_launches.py", *CELLS,
                           cwd=root, env={"TRITON_INTERPRET": "0"}, cache=shared_cache, timeout=600)
    assert capture.code == 1, capture.err[-3000:]   # the checks fail on unrun outputs; the launches are recorded
    written = sorted(path.stem for path in (root / "captured").glob("*.yaml"))
    assert len(written) == len(CELLS)
    hand_cases = [cell.partition("@")[0] for cell in CELLS]   # KERNEL:CASE
    compiled = xisa_process("compile", "--spec", "captured", "--spec", "kernels", "--arch", "gfx942", "--arch", "sm_90",
                            *(f"--kernel={k}" for k in hand_cases + written), "--json", cwd=root, cache=shared_cache,
                            timeout=900)
    cells = json.loads(compiled.out)["cells"]
    captured = [c for c in cells if c["kernel"] in written]
    assert captured and all(c["status"] == "ok" for c in captured), [c for c in captured if c["status"] != "ok"]
    hand = {(c["kernel"], c["case"], c["target"]): c for c in cells if c["kernel"] not in written}
    for index, cell_id in enumerate(CELLS):
        kernel_case, _, target = cell_id.partition("@")
        kernel, _, case = kernel_case.partition(":")
        twin = hand[(kernel, case, target)]
        launched = [c for c in captured if c["target"] == target and c["signature"] == twin["signature"]
                    and c["constexprs"] == twin["constexprs"] and c["attrs"] == twin["attrs"]
                    and c["options"] == twin["options"]]
        assert launched and {c["sha256"] for c in launched} == {twin["sha256"]}, cell_id


# --- device queries under --no-run: a program that sizes its launch from the GPU it is asked about ----------------

SIZED_BY_DEVICE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def fill(y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.full((BLOCK,), 1.0, tl.float32))


def run():
    # fla's shape: a block size from the device's shared memory (no GPU here: torch.cuda is not available)
    smem = torch.cuda.get_device_properties(0).shared_memory_per_block_optin if torch.cuda.is_available() else 0
    block = 256 if smem > 200 * 1024 else 128 if smem > 64 * 1024 else 32
    fill[(1,)](torch.empty(block), BLOCK=block)


if __name__ == "__main__":
    run()
'''


@pytest.mark.parametrize("answer_as, block", [(None, 256), ("sm_86", 128)])
def test_no_run_answers_the_programs_device_queries_as_a_gpu(tmp_path, run_xisa, answer_as, block):
    """Without the answers, a CPU machine's --no-run capture records the block the program picks with no GPU (32),
    a config no GPU would pick; the default answers as an H200 (sm_90: 227 KiB), `--as sm_86` as an RTX 3090
    (99 KiB), and the spec says which GPU answered."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "sized.py").write_text(SIZED_BY_DEVICE)
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    options = ["--as", answer_as] if answer_as else []
    out = run_xisa("capture", "--no-run", "--no-check", *options, "--", sys.executable, "sized.py", cwd=root,
                   env={"XISA_CAPTURE_AS": ""})
    assert out.code == 0, out.err
    text = (root / "captured" / "fill.yaml").read_text()
    assert yaml.safe_load(text)["cases"][0]["constexprs"] == {"BLOCK": block}
    assert f"device queries were answered as {answer_as or 'sm_90'}" in text
    assert f"answered as {answer_as or 'sm_90'}'s GPU" in out.err


@pytest.mark.unit
def test_an_unknown_target_to_answer_as_is_refused_before_the_command_runs(tmp_path, run_xisa_in_process):
    (tmp_path / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    marker = tmp_path / "ran"
    out = run_xisa_in_process("capture", "--no-run", "--as", "sm_99", "--", sys.executable, "-c",
                              f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert out.code == 2 and "--as: 'sm_99' is not a target of this project" in out.err and not marker.exists()


def test_a_no_run_program_that_makes_a_cuda_tensor_is_captured_with_the_tensor_on_the_cpu(tmp_path, run_xisa):
    """Under --no-run the device's queries are answered as a GPU (is_available() is True), so a program that picks
    its tensors' device by it makes CUDA tensors on a machine with none: they are made on the CPU with the same
    values (no kernel runs), and the launch is captured as the GPU's would be. What still needs a live GPU (a
    stream, a synchronize) is one line naming the program's own line."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "uses_gpu.py").write_text(USES_GPU)
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\n')
    out = run_xisa("capture", "--no-run", "--no-check", "--as", "sm_90", "--", sys.executable, "uses_gpu.py",
                   cwd=root, process=True)
    assert out.code == 0, out.err
    assert "y_ptr: {tensor: fp32, shape: [4]}" in (root / "captured" / "fill.yaml").read_text()
    (root / "uses_gpu.py").write_text(USES_GPU + "torch.cuda.synchronize()\n")
    out = run_xisa("capture", "--no-run", "--no-check", "--as", "sm_90", "--", sys.executable, "uses_gpu.py",
                   cwd=root, process=True)
    assert out.code == 1 and "xisa: error: uses_gpu.py:13: torch.cuda.synchronize() is refused while xisa answers as " \
        "sm_90" in out.err and "Traceback" not in out.err, out.err


USES_GPU = """import torch
import triton
import triton.language as tl


@triton.jit
def fill(y_ptr):
    tl.store(y_ptr, 1.0)


DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'
fill[(1,)](torch.empty(4, device=DEVICE))
"""
