"""Every variable the installed Triton reads is refused, pinned or known harmless (issue 11, items 5 and 13).

The tables live in `xisa/compile/worker/toolchain.py`; these tests walk the installed Triton, so a Triton upgrade
that adds a knob fails here until the knob is classified.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import xisa.cli
from xisa.compile.worker import toolchain
from xisa.errors import ToolchainError
from xisa.compile.worker.toolchain import (HARMLESS_ENV, PINNED_ENV, REFUSED_ENV, check_environment, classified,
                            triton_knob_variables)


def test_every_knob_of_the_installed_triton_is_classified():
    knobs = triton_knob_variables()
    assert {"TRITON_CACHE_MANAGER", "TRITON_CUOBJDUMP_PATH", "TRITON_HIP_USE_COEXEC_SCHEDULER"} <= knobs
    assert sorted(name for name in knobs if not classified(name)) == []
    tables = [set(REFUSED_ENV), set(PINNED_ENV), set(HARMLESS_ENV)]
    assert all(not (a & b) for i, a in enumerate(tables) for b in tables[i + 1:])   # one class per name


def _libtriton_names() -> set[str]:
    """Variable-like strings in libtriton's read-only data: candidates for what its C++ side reads."""
    import triton

    library = Path(triton.__file__).parent / "_C" / "libtriton.so"
    with open(library, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        assert data[:5] == b"\x7fELF\x02"                     # ELF64, little-endian below
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

        def section(index):
            name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + index * shentsize)
            return name, offset, size

        _, names_at, _ = section(shstrndx)
        for index in range(shnum):
            name, offset, size = section(index)
            if data[names_at + name:names_at + name + 8] == b".rodata\0":
                found = re.findall(rb"(?<![A-Z0-9_])((?:TRITON|AMDGCN|MLIR|LLVM|NVPTX|DISABLE|ALLOW|USE_IR)_[A-Z0-9_]+)\0",
                                   data[offset:offset + size])
                return {n.decode() for n in found}
    return set()


def test_every_variable_tritons_compiler_keys_on_is_classified():
    candidates = _libtriton_names() - set(REFUSED_ENV)      # refused ones load plugins: never set them here
    assert "TRITON_HIP_USE_EXPERT_SCHEDULING" in candidates
    probe = ("import json; from triton._C.libtriton import get_cache_invalidating_env_vars as read; "
             "print(json.dumps(sorted(read())))")
    env = {**os.environ, **{name: "0" for name in candidates}}
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    keyed = json.loads(proc.stdout)
    assert "LLVM_EXTRACT_DI_LOCAL_VARIABLES" in keyed
    assert sorted(name for name in keyed if not classified(name)) == []


@pytest.mark.unit
def test_refused_variables_need_no_triton_import():
    for name in ("TRITON_CACHE_MANAGER", "TRITON_REMOTE_CACHE_BACKEND", "TRITON_PTXAS_PATH",
                 "TRITON_PTXAS_BLACKWELL_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH"):
        with pytest.raises(ToolchainError, match=f"fix: unset {name}"):
            check_environment({name: "/tmp/x"})
    code = ("import sys; from xisa.compile.worker.toolchain import check_environment; check_environment({}); "
            "print('triton' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


TOOL_VARIABLES = ["TRITON_CACHE_MANAGER", "TRITON_REMOTE_CACHE_BACKEND", "TRITON_CUOBJDUMP_PATH", "TRITON_PTXAS_PATH",
                  "TRITON_PTXAS_BLACKWELL_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBDEVICE_PATH"]


def test_tool_and_cache_variables_are_refused_warm_and_cold(run_xisa, tinyproj):
    selection = ("--arch", "gfx942", "--kernel", "scale:small")
    assert run_xisa("bless", *selection, cwd=tinyproj).code == 0        # now cached
    for name in TOOL_VARIABLES:
        for extra in ((), ("--no-cache",)):
            out = run_xisa("check", *selection, *extra, cwd=tinyproj, env={name: "mod:Cls" if "CACHE" in name
                                                                            else "/tmp/wrapper"})
            lines = [line for line in out.err.splitlines() if line.strip()]
            assert out.code == 2 and len(lines) == 1, (name, extra, out.err)
            assert f"{name} is set" in lines[0] and f"fix: unset {name}" in lines[0]


def test_unclassified_triton_variable_is_refused_before_compiling(tinyproj, tmp_path, monkeypatch, capsys):
    monkeypatch.delitem(HARMLESS_ENV, "TRITON_PRINT_AUTOTUNING")        # as if a new Triton had added it
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    monkeypatch.setenv("XISA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tinyproj)
    before = dict(os.environ)
    with pytest.raises(SystemExit) as info:
        xisa.cli.main(["compile", "--no-cache", "--arch", "gfx942", "--kernel", "scale:small"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TRITON_PRINT_AUTOTUNING is set: the installed Triton reads it" in err
    assert "fix: unset TRITON_PRINT_AUTOTUNING" in err
    assert dict(os.environ) == before                                   # refused before anything was pinned
    assert toolchain.unclassified_environment({"TRITON_PRINT_AUTOTUNING": "1"}) == {"TRITON_PRINT_AUTOTUNING": "1"}


@pytest.mark.parametrize("variable", ["TRITON_HIP_USE_COEXEC_SCHEDULER", "TRITON_HIP_USE_EXPERT_SCHEDULING",
                                      "LLVM_EXTRACT_DI_LOCAL_VARIABLES"])
def test_pinned_codegen_knobs_leave_the_result_unchanged(run_xisa, tinyproj, variable):
    """Each changed gfx1100 or gfx1201 code (or broke the compile) before it was pinned."""
    selection = ("--arch", "gfx1100", "--arch", "gfx1201", "--kernel", "scale:small", "--json")
    plain = run_xisa("compile", *selection, cwd=tinyproj)
    pinned = run_xisa("compile", *selection, "--no-cache", cwd=tinyproj, env={variable: "1"})
    assert plain.code == pinned.code == 0, pinned.err
    shas = lambda out: {c["target"]: c["sha256"] for c in json.loads(out.out)["cells"]}  # noqa: E731
    assert shas(pinned) == shas(plain)
    again = run_xisa("compile", *selection, cwd=tinyproj)                  # and the cache was not poisoned
    assert shas(again) == shas(plain)


# --- a pin is never silent (issue 22, class 7) --------------------------------------------------------

NOTE = "xisa: note: the environment sets "


@pytest.mark.parametrize("variable,value,pinned", [
    ("TRITON_HIP_USE_COEXEC_SCHEDULER", "1", "TRITON_HIP_USE_COEXEC_SCHEDULER unset"),
    ("AMDGCN_USE_BUFFER_OPS", "0", "AMDGCN_USE_BUFFER_OPS=1"),
    ("TRITON_DEFAULT_FP_FUSION", "0", "TRITON_DEFAULT_FP_FUSION=1"),
    ("PTXAS_OPTIONS", "-O1 -v", "PTXAS_OPTIONS unset"),
])
def test_a_pinned_variable_the_environment_sets_is_named_once_warm_and_cold(run_xisa, tinyproj, variable, value,
                                                                            pinned):
    selection = ("--arch", "gfx942", "--kernel", "scale:small")
    assert run_xisa("bless", *selection, cwd=tinyproj).code == 0
    for extra in ((), ("--no-cache",)):
        out = run_xisa("check", *selection, *extra, cwd=tinyproj, env={variable: value})
        notes = [line for line in out.err.splitlines() if line.startswith("xisa: note:")]
        assert out.code == 0 and len(notes) == 1, (extra, out.err)
        shown = f"{variable}='{value}'" if " " in value else f"{variable}={value}"
        assert notes[0].startswith(f"{NOTE}{shown}, which xisa pins ({pinned}, as a default launch has them)")
        assert f"to see what it changes: xisa ab --b-env {shown} (with this command's --arch/--kernel)" in notes[0]


@pytest.mark.unit
def test_no_note_for_a_pinned_value_or_an_ab_side():
    assert toolchain.pinned_note({}) is None
    assert toolchain.pinned_note({"TRITON_DEFAULT_FP_FUSION": "1", "AMDGCN_USE_BUFFER_OPS": "1"}) is None


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(PINNED_ENV))
def test_every_pinned_variable_is_named_with_how_to_measure_it(name):
    """Each pinned variable, set otherwise, is named in one line; the `xisa ab` offered is one xisa runs (its
    knob is a side's knob), and a variable no side may set says why instead."""
    value = "1" if PINNED_ENV[name] in (None, "0") else "0"
    note = toolchain.pinned_note({name: value, "TRITON_HIP_USE_BLOCK_PINGPONG": "1"})
    assert note is not None and "\n" not in note and note.startswith("the environment sets ")
    assert f"{name}={value}" in note.partition(", which xisa pins")[0]
    offered = re.findall(r"--b-env (\w+)=", note)
    toolchain.check_side_knobs({knob: "1" for knob in offered})
    if name in toolchain.NOT_SIDE_KNOBS:
        assert offered == ["TRITON_HIP_USE_BLOCK_PINGPONG"] and f"; {name} {toolchain.NOT_SIDE_KNOBS[name]}" in note
    else:
        assert sorted(offered) == sorted({name, "TRITON_HIP_USE_BLOCK_PINGPONG"})


def test_the_offered_ab_measures_the_knob(run_xisa, tinyproj):
    """The command the note offers runs and shows the change the pin kept out of the results."""
    selection = ("--arch", "gfx942", "--kernel", "scale:big")
    out = run_xisa("compile", *selection, cwd=tinyproj, env={"AMDGCN_USE_BUFFER_OPS": "0"})
    assert out.code == 0, out.err
    offered = re.search(r"xisa ab (--b-env \S+)", out.err).group(1).split()
    ab = run_xisa("ab", *offered, *selection, cwd=tinyproj)
    assert ab.code == 1 and "scale:big@gfx942" in ab.out, ab.out + ab.err


# --- a pinned variable is pinned in the compile itself (issue 22, class 6) ----------------------------

def _unpinned_values(tmp_path: Path) -> dict[str, str]:
    """Every pinned variable set to another value than its pin (one that changes code where it reaches it)."""
    strings = {"PTXAS_OPTIONS": "-O0", "TRITON_F32_DEFAULT": "ieee", "TRITON_INSTRUMENTATION_MODE": "fpsan",
               "TRITON_OVERRIDE_ARCH": "sm80", "TRITON_MOCK_PTX_VERSION": "80", "TRITON_LLVM_DEBUG_ONLY": "isel",
               "TRITON_HIP_GLOBAL_PREFETCH": "2", "TRITON_HIP_LOCAL_PREFETCH": "2", "TRITON_HOME": str(tmp_path / "home"),
               "MLIR_DUMP_PATH": str(tmp_path / "dump"), "TRITON_REPRODUCER_PATH": str(tmp_path / "repro")}
    return {name: strings.get(name, "1" if pinned in (None, "0") else "0") for name, pinned in PINNED_ENV.items()}


def test_every_pinned_variable_set_when_xisa_starts_leaves_the_compile_pinned(run_xisa, tinyproj, tmp_path):
    """With every pinned variable set in the environment xisa starts in (so Triton is imported under it),
    a fresh compile agrees with the warm answer: PTXAS_OPTIONS was read into CUDAOptions' defaults when
    Triton's NVIDIA backend was imported, before the pins, and reached every sm_* compile (warm exit 0,
    `--no-cache` exit 1)."""
    spec = tinyproj / "kernels" / "scale.yaml"
    spec.write_text(spec.read_text().replace("targets: [gfx1100, gfx1201, gfx942]",
                                             "targets: [gfx1100, gfx942, sm_90, sm_100]"))
    selection = ("--kernel", "scale:small")
    assert run_xisa("bless", *selection, cwd=tinyproj).code == 0
    env = _unpinned_values(tmp_path)
    for extra in ((), ("--no-cache",)):
        out = run_xisa("check", *selection, *extra, cwd=tinyproj, env=env)
        assert out.code == 0, (extra, out.out, out.err)
        note = next(line for line in out.err.splitlines() if line.startswith("xisa: note:"))
        assert all(f"{name}=" in note for name in PINNED_ENV)


_OPTION_DEFAULTS = """
import json, os, sys
from xisa.compile import runner
from xisa.compile.worker import toolchain
import triton                                    # imported under the user's environment, as xisa does
from triton.backends.compiler import GPUTarget
toolchain.apply_pinned_env(__import__("pathlib").Path(sys.argv[1]))
from xisa.compile.worker.config import WorkerConfig
runner.prepare_worker_toolchain(WorkerConfig(cells=(), roots=(), keep_stages=False, parent_pid=os.getpid(),
                                             triton_fallback="", cache_dir=None, lookup=True))
from triton.compiler.compiler import make_backend
out = {}
for target in (GPUTarget("cuda", 90, 32), GPUTarget("cuda", 100, 32), GPUTarget("hip", "gfx942", 64)):
    options = make_backend(target).parse_options({})
    out[f"{target.backend}:{target.arch}"] = {k: repr(v) for k, v in sorted(vars(options).items())}
print(json.dumps(out))
"""


def test_a_compile_workers_backend_options_are_a_default_launchs(tmp_path):
    """Whatever Triton read when it was imported, a worker's backend options (the defaults every compile
    starts from) are those of a process that never saw the pinned variables: checked field by field, so a
    variable no kernel here is sensitive to cannot slip through either."""
    def defaults(env: dict[str, str]) -> dict:
        clean = {k: v for k, v in os.environ.items() if k not in PINNED_ENV}
        proc = subprocess.run([sys.executable, "-c", _OPTION_DEFAULTS, str(tmp_path / "cache")], capture_output=True,
                              text=True, env={**clean, **env}, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    plain = defaults({})
    assert plain["cuda:90"]["ptx_options"] == "None"
    assert defaults(_unpinned_values(tmp_path)) == plain
