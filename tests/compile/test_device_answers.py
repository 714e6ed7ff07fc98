"""Device queries answered per target from the target file (issue 23, item 3): what a library asks torch.cuda and
Triton's driver at import and in its heuristics gets the reference product's numbers of the cell's target, never
another target's, and a query xisa cannot answer is one line naming it, also when the library swallows errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO, count_as_installed, forget_installed, write_files

# A library that sizes its kernel from the device at import, the way fla-core's `check_shared_mem` does: Triton's
# max_shared_mem through a functools.cache, an `except Exception` fallback, torch's SM count in a module global.
SMEMLIB = {
    "smemlib/__init__.py": '''import functools

import torch
import triton


@functools.cache
def big_shared_memory() -> bool:
    try:
        return triton.runtime.driver.active.utils.get_device_properties(0)["max_shared_mem"] >= 200_000
    except Exception:
        return False          # the silent fallback a CPU machine would take


BLOCK = 128 if big_shared_memory() else 64
SMS = torch.cuda.get_device_properties(0).multi_processor_count


def heuristic_block(args) -> int:
    return 256 if big_shared_memory() else 32
''',
    # Asks nothing at import: the first question comes from a heuristic while a cell binds, through a module the
    # heuristic imports then (FlagGems' `from flag_gems.utils.device_info import ...` inside a function).
    "lazylib/__init__.py": """def heuristic_block(args) -> int:
    from lazylib.probe import sms

    return 256 if sms() > 100 else 32
""",
    "lazylib/probe.py": """import functools

import torch


@functools.cache
def sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count
""",
}

# The project's kernel, in another package than the library's: it takes the library's import-time values as
# constexpr defaults and one from a heuristic that asks the library at bind time.
KERNEL = '''import triton
import triton.language as tl

import smemlib


@triton.jit
def kern(y_ptr, BLOCK: tl.constexpr = smemlib.BLOCK, SMS: tl.constexpr = smemlib.SMS):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.full((BLOCK,), SMS, tl.float32))


@triton.heuristics({"BLOCK": smemlib.heuristic_block})
@triton.jit
def tuned(y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.full((BLOCK,), 1.0, tl.float32))
'''

LAZY_KERNEL = KERNEL.split("import smemlib")[0] + """import lazylib


@triton.heuristics({"BLOCK": lazylib.heuristic_block})
@triton.jit
def lazy(y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.full((BLOCK,), 1.0, tl.float32))
"""

SPEC = """name: {name}
source: k.py
function: {function}
targets: [{targets}]
cases:
  - name: c
    args: {{y_ptr: {{tensor: fp32, shape: [256]}}}}
"""


@pytest.fixture
def library_project(tmp_path, monkeypatch) -> Path:
    """A project whose kernel imports `smemlib`, installed (a site folder, as site-packages is)."""
    site = write_files(tmp_path / "site", SMEMLIB)
    count_as_installed(monkeypatch, site)
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
        "kernels/k.py": KERNEL,
        "kernels/k.yaml": SPEC.format(name="k", function="kern", targets="sm_90, sm_86, gfx942"),
        "kernels/tuned.yaml": SPEC.format(name="tuned", function="tuned", targets="sm_90, sm_86"),
        "kernels/t.py": LAZY_KERNEL,
        "kernels/t.yaml": SPEC.format(name="lazy", function="lazy", targets="sm_90, sm_86, gfx942")
        .replace("source: k.py", "source: t.py"),
    })
    yield root
    forget_installed()
    for name in [n for n in sys.modules if n.partition(".")[0] in ("smemlib", "lazylib")]:
        del sys.modules[name]


def _compile(root: Path, cache: Path) -> dict:
    """Each cell's result, compiled in one run by one worker (every target's load in the same process)."""
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection().cells(ws)
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=1, use_cache=False))
    return {cell.id: result for cell, result in zip(cells, results)}


def test_one_run_gives_each_target_its_own_answers_at_import_and_in_heuristics(library_project, tmp_path):
    results = _compile(library_project, tmp_path / "cache")
    assert all(r.status == "ok" for r in results.values()), {c: r.error for c, r in results.items()}
    constexprs = {cell: r.binding["constexprs"] for cell, r in results.items()}
    # H200 227 KiB opt-in, RTX 3090 99 KiB, MI300X 64 KiB LDS per workgroup; SMs / CUs of each
    assert constexprs["k:c@sm_90"] == {"BLOCK": 128, "SMS": 132}
    assert constexprs["k:c@sm_86"] == {"BLOCK": 64, "SMS": 82}
    assert constexprs["k:c@gfx942"] == {"BLOCK": 64, "SMS": 304}
    assert constexprs["tuned:c@sm_90"] == {"BLOCK": 256} and constexprs["tuned:c@sm_86"] == {"BLOCK": 32}
    # first asked while a cell binds (the load asked nothing, so it served every target): each still gets its own
    assert [constexprs[f"lazy:c@{t}"] for t in ("gfx942", "sm_86", "sm_90")] == [{"BLOCK": 256}, {"BLOCK": 32},
                                                                                  {"BLOCK": 256}]


@pytest.mark.unit
def test_the_answers_are_the_target_files_and_derive_from_the_occupancy_tables():
    from xisa.api import open_workspace
    from xisa.compile.gpu.device_answers import DeviceAnswers

    targets = open_workspace(cwd=REPO).targets
    properties = {name: DeviceAnswers(t).triton_properties(0) for name, t in targets.items()}
    assert {n: p["max_shared_mem"] for n, p in properties.items() if n in ("sm_90", "sm_86", "gfx942", "gfx950")} \
        == {"sm_90": 232448, "sm_86": 101376, "gfx942": 65536, "gfx950": 163840}
    h200 = DeviceAnswers(targets["sm_90"]).torch_properties(0)   # what torch said on the H200 (targets/sm_90.yaml)
    assert (h200.name, h200.major, h200.minor, h200.multi_processor_count, h200.total_memory, h200.warp_size) == \
        ("NVIDIA H200", 9, 0, 132, 150109880320, 32)
    assert (h200.shared_memory_per_block, h200.shared_memory_per_block_optin, h200.shared_memory_per_multiprocessor,
            h200.regs_per_multiprocessor, h200.max_threads_per_multi_processor, h200.L2_cache_size) == \
        (49152, 232448, 233472, 65536, 2048, 62914560)
    assert dict(properties["sm_90"]) == {"max_shared_mem": 232448, "max_num_regs": 65536, "multiprocessor_count": 132,
                                         "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 3201000,
                                         "mem_bus_width": 6016}   # Triton 3.6 get_device_properties(0) on the H200
    assert DeviceAnswers(targets["gfx942"]).capability("q") == (9, 4)
    assert getattr(h200, "max_shared_memory_per_multiprocessor", None) is None   # not torch's: as on a GPU


def test_a_query_the_file_cannot_answer_is_one_line_even_when_the_library_swallows_it(library_project, tmp_path):
    swallowing = SMEMLIB["smemlib/__init__.py"].replace(
        'BLOCK = 128 if', 'try:\n    CLOCK = triton.runtime.driver.active.utils.get_device_properties(0)'
        '["mem_clock_rate"]\nexcept:\n    CLOCK = 0\nBLOCK = 128 if')
    write_files(tmp_path / "site", {"smemlib/__init__.py": swallowing})
    results = _compile(library_project, tmp_path / "cache")
    assert results["k:c@sm_90"].status == "ok"                       # the H200's memory clock was measured
    error = results["k:c@sm_86"].error
    assert results["k:c@sm_86"].status == "error" and "\n" not in error
    # the library's line, what it asked, and where to state the fact: never xisa's target file as the place
    assert error.endswith("smemlib/__init__.py:16: triton.runtime.driver.active.utils.get_device_properties(0)"
                          "['mem_clock_rate'] asks device.memory_clock_rate, which xisa's target file sm_86.yaml does "
                          "not state for its NVIDIA GeForce RTX 3090 (fix: state device.memory_clock_rate, with its "
                          "source under sources.memory_clock_rate, in a targets/sm_86.yaml of the project (a copy of "
                          "xisa's: the project's file of a name replaces xisa's); or stub the query in an import hook "
                          "(`xisa_import_hook(target)` in a file [tool.xisa] import_hooks names: "
                          "docs/platform.md#stub-it-in-an-import-hook))"), error


def test_torch_cuda_is_answered_during_a_load_only_and_gpu_work_is_refused():
    import torch

    from xisa.api import open_workspace
    from xisa.compile.gpu.device_answers import UnansweredDeviceQuery
    from xisa.compile.gpu.target_driver import target_driver
    from xisa.errors import TargetError

    target = open_workspace(cwd=REPO).targets["gfx942"]
    with target_driver(target):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        assert torch.cuda.get_device_capability() == (9, 4) and torch.cuda.get_device_name(0) == "AMD Instinct MI300X"
        assert torch.version.hip is not None and torch.version.cuda is None
        with torch.cuda.device(0), torch.cuda.device(None):   # FlagGems' generated wrappers enter the device
            assert torch.cuda.current_device() == 0
    assert not torch.cuda.is_available() and torch.version.hip is None
    with pytest.raises(AssertionError):      # the CPU torch's own answer again
        torch.cuda.get_device_properties(0)
    for gpu_work in (lambda: torch.cuda.synchronize(), lambda: torch.cuda.get_device_properties(1),
                     lambda: torch.cuda.device(1).__enter__(),
                     lambda: torch.cuda.get_device_properties(0).uuid):
        with pytest.raises(TargetError) as caught:
            with target_driver(target):
                try:
                    gpu_work()
                except Exception:            # a library's fallback: the query stays refused
                    pytest.fail("an unanswerable query was an Exception a library could swallow")
        line = str(caught.value)   # the test's own line asked: no frame of torch's, xisa's or a target file's
        assert line.startswith("test_device_answers.py:") and ": torch.cuda." in line and \
            "targets/gfx942.yaml" not in line, line
    assert issubclass(UnansweredDeviceQuery, BaseException) and not issubclass(UnansweredDeviceQuery, Exception)


@pytest.mark.unit
def test_the_cache_key_covers_the_device_facts():
    from xisa.api import Selection, open_workspace
    from xisa.compile.incremental.keys import result_key as cell_key

    ws = open_workspace(cwd=REPO)
    cell = next(c for c in Selection().cells(ws)[1] if c.target.name == "sm_90")
    fewer = dataclasses.replace(cell.target, device=dataclasses.replace(cell.target.device, multiprocessor_count=114))
    assert cell_key(cell, ()) != cell_key(dataclasses.replace(cell, target=fewer), ())


@pytest.mark.unit
@pytest.mark.parametrize("edit, field, message", [
    ({"multiprocessor_count": None}, "device.multiprocessor_count", "missing"),
    ({"l2_cache_size": 1}, "sources.l2_cache_size", "this fact cites no source"),
    ({"capability": [9, 0]}, "device.capability", "capability is derived from the rest of the file on cuda targets"),
    ({"total_memory": "80GB"}, "device.total_memory", "must be a positive int"),
    ({"clocks": 1}, "device", "unknown key(s) ['clocks']"),
])
def test_a_wrong_device_fact_is_one_line_naming_it(edit, field, message):
    import yaml

    from xisa.errors import TargetError
    from xisa.spec.targets import parse_target

    data = yaml.safe_load((REPO / "targets" / "sm_90.yaml").read_text())
    data["sources"].pop("l2_cache_size")
    for key, value in edit.items():
        data["device"].pop(key) if value is None else data["device"].update({key: value})
    if "l2_cache_size" not in edit:
        data["device"].pop("l2_cache_size")
    with pytest.raises(TargetError) as caught:
        parse_target(data, "targets/sm_90.yaml")
    assert str(caught.value).startswith(f"targets/sm_90.yaml: {field}: {message}")


def test_capture_answers_as_a_target_for_the_whole_process(tmp_path):
    """`XISA_CAPTURE_AS=sm_86`: a program run under capture on a machine with no GPU sees an RTX 3090."""
    program = ("from xisa.compile.gpu.target_driver import answer_device_queries\n"
               f"answer_device_queries('sm_86', [__import__('pathlib').Path({str(REPO / 'targets')!r})])\n"
               "import torch, triton\n"
               "print(torch.cuda.get_device_name(), torch.cuda.get_device_capability(),\n"
               "      triton.runtime.driver.active.utils.get_device_properties(0)['max_shared_mem'])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.stdout.strip() == "NVIDIA GeForce RTX 3090 (8, 6) 101376", done.stderr


# --- real libraries: fla-core 0.6.0 and FlagGems 5.0.2 as installed (skipped where they are not) ----------------

FLA_KERNEL = '''import triton
import triton.language as tl

from fla.utils import IS_NVIDIA_HOPPER, check_shared_mem

BLOCK = 128 if check_shared_mem("hopper") else 64 if check_shared_mem("ampere") else 32


@triton.jit
def kern(y_ptr, BLOCK: tl.constexpr = BLOCK, HOPPER: tl.constexpr = IS_NVIDIA_HOPPER):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.full((BLOCK,), HOPPER, tl.float32))
'''


def _library_project(root: Path, spec: str, kernel: str | None = None) -> Path:
    files = {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/k.yaml": spec}
    if kernel is not None:
        files["kernels/k.py"] = kernel
    return write_files(root, files)


def test_fla_picks_on_each_target_what_it_picks_on_that_gpu(tmp_path):
    """fla's hardware probe (IS_NVIDIA_HOPPER, check_shared_mem) asked from a project kernel: the H200's answers on
    sm_90 (Hopper, 227 KiB), an A100's on sm_80 (163 KiB: 'ampere'), 99 KiB on sm_86 and 64 KiB on gfx942 are
    neither; on a CPU without the answers fla falls back to 'cpu' and False everywhere."""
    pytest.importorskip("fla.utils")
    root = _library_project(tmp_path / "proj", SPEC.format(name="k", function="kern", targets="sm_90, sm_80, sm_86, "
                                                           "gfx942").replace("shape: [256]", "shape: [128]"), FLA_KERNEL)
    results = _compile(root, tmp_path / "cache")
    assert {cell: r.binding["constexprs"] for cell, r in results.items()} == {
        "k:c@sm_90": {"BLOCK": 128, "HOPPER": True}, "k:c@sm_80": {"BLOCK": 64, "HOPPER": False},
        "k:c@sm_86": {"BLOCK": 32, "HOPPER": False}, "k:c@gfx942": {"BLOCK": 32, "HOPPER": False}}


def test_an_fla_kernel_autotunes_over_the_configs_of_the_targets_shared_memory(tmp_path):
    """fla.ops...dplr.chunk_o_fwd builds its autotuner at import from check_shared_mem(): BK/BV of 32, 64, 128 on a
    GPU with over 100 KiB per block (an H100 or H200), 16 and 32 below it (an RTX 3090's 99 KiB)."""
    pytest.importorskip("fla.ops")
    from xisa.api import open_workspace
    from xisa.compile.launch.loader import load_kernel_object, unwrap_kernel

    spec_text = ("name: o\nmodule: fla.ops.generalized_delta_rule.dplr.chunk_o_fwd\nfunction: chunk_dplr_fwd_kernel_o\n"
                 "targets: [sm_90, sm_86]\ncases:\n  - name: c\n    args: {qg: {tensor: bf16, shape: [1]}}\n")
    ws = open_workspace(cwd=_library_project(tmp_path / "proj", spec_text))
    blocks = {}
    for name in ("sm_90", "sm_86"):
        kernel = load_kernel_object(ws.specs[0], roots=list(ws.project.kernel_roots), target=ws.targets[name])
        tuner = next(w for w in unwrap_kernel(kernel, ws.specs[0])[1] if hasattr(w, "configs"))
        blocks[name] = (len(tuner.configs), sorted({c.kwargs["BK"] for c in tuner.configs}))
    assert blocks == {"sm_90": (135, [32, 64, 128]), "sm_86": (60, [16, 32])}


def test_flag_gems_imports_on_a_cpu_machine_and_asks_each_target(tmp_path, monkeypatch):
    """FlagGems asks torch.cuda at import (device count, arch, SM count, L2): it loads for each target."""
    from importlib.util import find_spec

    if find_spec("flag_gems") is None or find_spec("sqlalchemy") is None:   # (importing it here would ask torch.cuda)
        pytest.skip("flag_gems (and its sqlalchemy) is not installed")
    monkeypatch.setenv("GEMS_VENDOR", "nvidia")   # FlagGems' own switch past its vendor probe
    spec_text = ("name: absolute\nmodule: flag_gems.ops.absolute\nfunction: _absolute_kernel\ntargets: [sm_90, sm_86]\n"
                 "cases:\n  - name: c\n    args: {x_ptr: {tensor: fp32, shape: [1024]}, out_ptr: {tensor: fp32, shape: "
                 "[1024]}, n_elements: 1024}\n    constexprs: {BLOCK_SIZE: 1024}\n")
    results = _compile(_library_project(tmp_path / "proj", spec_text), tmp_path / "cache")
    assert {cell: r.status for cell, r in results.items()} == {"absolute:c@sm_90": "ok", "absolute:c@sm_86": "ok"}, \
        {cell: r.error for cell, r in results.items()}


def test_the_capture_hook_answers_as_the_target_xisa_capture_as_names(tmp_path):
    """xisa/capture_site/sitecustomize.py with XISA_CAPTURE_AS=gfx950: every Python process of the captured program
    sees an MI350X; an unknown target stops the program in one line (it would otherwise see this machine)."""
    site = REPO / "xisa" / "capture_site"
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XISA_CAPTURE_RECORDS")},
           "PYTHONPATH": str(site), "XISA_CAPTURE_AS": "gfx950", "XISA_CAPTURE_TARGETS": str(REPO / "targets")}
    program = ("import torch, triton\nprint(torch.cuda.get_device_capability(), torch.version.hip is not None,\n"
               "      triton.runtime.driver.active.utils.get_device_properties(0)['max_shared_mem'])\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.stdout.strip() == "(9, 5) True 163840", done.stderr
    wrong = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True, cwd=tmp_path,
                           env={**env, "XISA_CAPTURE_AS": "gfx9"}, timeout=120)
    assert wrong.returncode == 2 and wrong.stdout == "" and len(wrong.stderr.splitlines()) == 1
    assert wrong.stderr.startswith("xisa capture: XISA_CAPTURE_AS=gfx9: ") and "did you mean 'gfx90a'?" in wrong.stderr


# --- what a library does with the GPU outside a launch (issue 38, item 4) ----------------------------------------

GPULIB = '''import subprocess

import torch
import triton


def setup():
    return {call}
'''


@pytest.mark.parametrize("target_name, call, query", [
    ("sm_90", "torch.cuda.synchronize()", "torch.cuda.synchronize() is refused while xisa answers as sm_90"),
    ("sm_90", "torch.cuda.mem_get_info()", "torch.cuda.mem_get_info() is refused"),            # not its cudart()
    ("sm_90", "torch.cuda.Stream()", "torch.cuda.Stream() is refused"),                        # a dummy class on CPU
    ("sm_90", "torch.cuda.reset_peak_memory_stats()", "torch.cuda.reset_peak_memory_stats() is refused"),
    ("sm_90", "torch.cuda.nvtx.range_push('x')", "torch.cuda.nvtx.range_push() is refused"),
    ("sm_90", "torch.accelerator.current_stream()", "torch.accelerator.current_stream() is refused"),
    ("gfx942", "torch.cuda.get_device_properties(1)", "torch.cuda.get_device_properties(1) is refused while xisa "
                                                      "answers as gfx942 (AMD Instinct MI300X): xisa compiles for one"),
    ("sm_90", "triton.runtime.driver.active.get_current_stream(0)", "triton.runtime.driver.active.get_current_stream "
                                                                    "is refused"),
    ("sm_90", "subprocess.run(['nvidia-smi', '-L'])", "nvidia-smi (subprocess.Popen) is refused"),   # from the line
    ("sm_86", "triton.runtime.driver.active.utils.get_device_properties(0)['mem_clock_rate']",
     "asks device.memory_clock_rate, which xisa's target file sm_86.yaml does not state for its NVIDIA GeForce RTX "
     "3090 (fix: state device.memory_clock_rate, with its source under sources.memory_clock_rate, in a "
     "targets/sm_86.yaml of the project"),
])
def test_a_refusal_is_one_line_naming_the_librarys_line_and_the_import_hook_never_a_target_file(
        tmp_path, monkeypatch, target_name, call, query):
    """Each way a library touches the GPU that xisa cannot answer is one line: the library's file and line (not
    torch's, Triton's, the standard library's or xisa's frames under it), what it asked, and the fix, an import
    hook with its docs; never xisa's target file as the place (it read `targets/sm_90.yaml: device: ...`)."""
    from xisa.api import open_workspace
    from xisa.compile.gpu.target_driver import target_driver
    from xisa.errors import TargetError

    site = write_files(tmp_path / "site", {"gpulib/__init__.py": GPULIB.format(call=call)})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "gpulib", raising=False)
    target = open_workspace(cwd=REPO).targets[target_name]
    with pytest.raises(TargetError) as caught:
        with target_driver(target):
            import gpulib

            try:
                gpulib.setup()
            except Exception:
                pytest.fail("an unanswerable query was an Exception a library could swallow")
    sys.modules.pop("gpulib", None)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("gpulib/__init__.py:8 (in setup): "), line
    assert query in line, line
    assert "import hook" in line and "docs/platform.md#stub-it-in-an-import-hook" in line, line
    assert f"targets/{target_name}.yaml:" not in line and str(REPO / "targets") not in line, line


def test_the_cuda_random_state_is_the_cpu_generators_and_torch_compile_runs_the_function_itself():
    """cut-cross-entropy's `@torch.compile(fullgraph=True, dynamic=True)` helpers: dynamo saves and restores
    `torch.cuda.get_rng_state()` around each trace once `is_available()` is True, then traces for a GPU this machine
    does not have. A tensor made on the GPU is made on the CPU, from the CPU generator, so that generator is the one
    torch.cuda's random state stands for; a compiled function runs as written (eagerly), its values its own."""
    import torch

    from xisa.api import open_workspace
    from xisa.compile.gpu.target_driver import target_driver

    original_compile = torch.compile
    with target_driver(open_workspace(cwd=REPO).targets["sm_90"]):
        torch.cuda.manual_seed(7)
        first = torch.randn(3, device="cuda")
        assert torch.cuda.initial_seed() == 7 and torch.cuda.default_generators[0] is torch.default_generator
        state = torch.cuda.get_rng_state()
        assert torch.equal(state, torch.get_rng_state())
        after = torch.randn(3, device="cuda")
        torch.cuda.set_rng_state(state)
        assert torch.equal(torch.randn(3, device="cuda"), after)
        torch.manual_seed(7)                              # torch seeds torch.cuda too (manual_seed_all)
        assert torch.equal(torch.randn(3, device="cuda"), first)
        torch.cuda.manual_seed_all(7)
        assert torch.equal(torch.randn(3, device="cuda"), first)
        torch.cuda.set_rng_state_all(torch.cuda.get_rng_state_all())
        with torch.random.fork_rng(devices=[0]):
            torch.randn(5, device="cuda")
        assert torch.equal(torch.randn(3, device="cuda"), after)   # fork_rng put the state back

        @torch.compile(fullgraph=True, dynamic=True)
        def softcapping(logits, softcap: float):
            return torch.tanh(logits / softcap) * softcap

        logits = torch.randn(4, 8, device="cuda")
        assert torch.equal(softcapping(logits, 2.0), torch.tanh(logits / 2.0) * 2.0)
        assert torch.compile(softcapping) is softcapping
    assert torch.compile is original_compile


def test_seeding_is_deferred_as_in_a_process_that_has_not_touched_the_gpu(monkeypatch):
    """`torch.manual_seed` seeds every GPU through torch.cuda's `_lazy_call`, at once when CUDA is up: answered up,
    a CUDA torch counted its GPUs through NVML (refused) under `xisa capture --no-run` on a GPU machine (found on an
    H100 exporting Liger's and fla's programs). Deferred, as torch defers it before CUDA is initialized."""
    import torch
    import torch.cuda.random

    from xisa.api import open_workspace
    from xisa.compile.gpu.target_driver import target_driver

    counted = []
    monkeypatch.setattr(torch.cuda.random, "device_count", lambda: counted.append("NVML") or 1)   # a CUDA torch's
    with target_driver(open_workspace(cwd=REPO).targets["sm_90"]):
        assert torch.cuda.is_initialized()
        torch.manual_seed(0)
        torch.cuda.manual_seed_all(1)
    assert counted == [] and not torch.cuda.is_initialized()
