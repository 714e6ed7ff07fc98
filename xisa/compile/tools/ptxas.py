"""ptxas as one program of its inputs: fixed addresses, and nothing of the checkout or the temp folder in them.

Measured with Triton 3.8.0's ptxas-blackwell (targets/sm_100.yaml): the same PTX gives one of several register
allocations. With address randomization on, run to run; with it off, by the lengths of the strings ptxas holds:
the `.file` paths and the DWARF `DW_AT_comp_dir` in the PTX (the checkout), the input file's path (Triton's random
temp name) and argv[0] (the virtual environment). gemm:bf16_4k flipped between a checkout at /work/main and one at
/check/work/main, fp8_4k-ocp between input names of 5 and 9 characters. A launch's own compile takes whichever its
paths give; a golden must be one program, so ptxas here always gets the same bytes: randomization off, the PTX with
every path as `SourceFiles.path_of` shows it, run in a fresh folder as `ptxas ... kernel.ptx -o kernel.cubin`.
Only ptxas's input changes: Triton's `ptx` stage, its cache key and everything before are untouched.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from xisa.errors import ToolchainError

# personality(2)'s ADDR_NO_RANDOMIZE: inherited by every process this one forks and execs.
_ADDR_NO_RANDOMIZE = 0x0040000


@functools.lru_cache(maxsize=1)   # the flag stays set for this process and the workers it forks
def fixed_addresses() -> None:
    """Turn address-space randomization off for the tools this process starts from now on (ptxas). Where the flag
    cannot be set, the compile is refused rather than left to chance (a refusal is not cached: each compile says
    so)."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        current = libc.personality(0xFFFFFFFF)     # 0xffffffff: query only
        if current != -1 and (current & _ADDR_NO_RANDOMIZE or libc.personality(current | _ADDR_NO_RANDOMIZE) != -1):
            return
        if _randomization_off_system_wide():
            return
        reason = os.strerror(ctypes.get_errno())
    else:
        reason = f"not supported on {sys.platform}"
    raise ToolchainError(f"cannot turn address-space randomization off for ptxas (personality: {reason}): its "
                         "register allocation would differ from run to run",
                         fix="run xisa where personality(2) is allowed (e.g. docker run --security-opt "
                             "seccomp=unconfined), or set kernel.randomize_va_space=0")


def _randomization_off_system_wide() -> bool:
    try:
        return Path("/proc/sys/kernel/randomize_va_space").read_text().strip() == "0"
    except OSError:
        return False


# --- the PTX: its paths as `path_of` shows them --------------------------------------------------------------

# A `.file` directive of the PTX: its quoted paths (LLVM may write the folder and the name apart).
_PTX_FILE_LINE = re.compile(r"^[ \t]*\.file[ \t].*$", re.MULTILINE)
_QUOTED_ABSOLUTE = re.compile(r'"(/[^"]*)"')
_SECTION = re.compile(r"^[ \t]*\.section[ \t]+(\.debug_\w+)\s*\{([^{}]*)\}", re.MULTILINE)
_DATA = re.compile(r"^\s*\.b(8|16|32|64)\s+([^/\n]*?)\s*(?://\s*(.*?))?\s*$")
_REFERENCE_FORMS = {"DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8", "DW_FORM_ref_udata",
                    "DW_FORM_ref_addr"}


def ptx_file_paths(ptx: str) -> list[str]:
    """The absolute paths of the PTX's `.file` directives as Triton wrote them (folders and files)."""
    return [m.group(1) for line in _PTX_FILE_LINE.finditer(ptx) for m in _QUOTED_ABSOLUTE.finditer(line.group(0))]


def relative_ptx(ptx: str, path_of) -> str:
    """`ptx` with every absolute path of its `.file` directives and its DWARF compile unit's `DW_AT_comp_dir` as
    `path_of` shows it, and no comments in its `.debug_info` (they give offsets that follow the path's length)."""
    ptx = _PTX_FILE_LINE.sub(
        lambda line: _QUOTED_ABSOLUTE.sub(lambda m: '"' + path_of(m.group(1)) + '"', line.group(0)), ptx)
    sections = {m.group(1): m for m in _SECTION.finditer(ptx)}
    info = sections.get(".debug_info")
    if info is None:
        return ptx
    forms = _attribute_forms(sections[".debug_abbrev"].group(2)) if ".debug_abbrev" in sections else {}
    body = _relative_debug_info(info.group(2), forms, path_of)
    return ptx[:info.start(2)] + body + ptx[info.end(2):]


def _items(body: str) -> list[tuple[int, str, str]]:
    """The data of a debug section, one (bytes, value, comment) per value: a comment stays with its line's first."""
    items = []
    for line in body.splitlines():
        m = _DATA.match(line)
        if m is None:
            if line.strip():
                raise _unknown(f"a line xisa does not read: {line.strip()[:60]!r}")
            continue
        values = [v.strip() for v in m.group(2).split(",")]
        items += [(int(m.group(1)) // 8, v, (m.group(3) or "") if i == 0 else "") for i, v in enumerate(values)]
    return items


def _attribute_forms(abbrev: str) -> dict[str, set[str]]:
    """Each attribute of `.debug_abbrev` and the forms it is written in (LLVM names both in its comments)."""
    forms: dict[str, set[str]] = {}
    items = _items(abbrev)
    for (_, _, attribute), (_, _, form) in zip(items, items[1:]):
        if attribute.startswith("DW_AT_") and form.startswith("DW_FORM_"):
            forms.setdefault(attribute, set()).add(form)
    return forms


def _relative_debug_info(body: str, forms: dict[str, set[str]], path_of) -> str:
    """Each compile unit (LLVM writes one per function with its own debug information, a noinline callee's too)
    with its `DW_AT_comp_dir` as `path_of` shows it; a unit's own length and references follow."""
    items = _items(body)
    starts = [i for i, (_, _, comment) in enumerate(items) if comment == "Length of Unit"]
    if items and starts[:1] != [0]:
        raise _unknown("data before its first compile unit")
    references = {a for a, f in forms.items() if f & _REFERENCE_FORMS}
    if any(f & _REFERENCE_FORMS != {"DW_FORM_ref4"} or len(f) > 1 for a, f in forms.items() if a in references):
        raise _unknown("references other than DW_FORM_ref4")
    if forms.get("DW_AT_comp_dir", {"DW_FORM_string"}) != {"DW_FORM_string"}:
        raise _unknown(f"DW_AT_comp_dir as {sorted(forms['DW_AT_comp_dir'])}")
    out = []
    for start, end in zip(starts, [*starts[1:], len(items)]):
        out += _relative_unit(items[start:end], references, path_of)
    return "\n" + "".join(line + "\n" for line in out)


def _relative_unit(unit: list[tuple[int, str, str]], references: set[str], path_of) -> list[str]:
    folders = [i for i, (_, _, comment) in enumerate(unit) if comment == "DW_AT_comp_dir"]
    if len(folders) > 1:
        raise _unknown("a compile unit with two DW_AT_comp_dir")
    if not folders:
        return [f".b{size * 8} {value}" for size, value, _ in unit]
    start = folders[0]
    end = next(i for i in range(start, len(unit)) if unit[i][1] == "0")
    folder = bytes(int(value) for _, value, _ in unit[start:end]).decode("utf-8")
    shown = path_of(folder).encode("utf-8")
    delta = len(shown) - (end - start)
    where = sum(size for size, _, _ in unit[:start])       # the string's offset in the unit: later DIEs move
    out = []
    for i, (size, value, comment) in enumerate(unit):
        if start <= i < end:
            if i == start:
                out += [f".b8 {byte}" for byte in shown]
            continue
        if value.isdigit() and (comment == "Length of Unit" or (comment in references and int(value) > where)):
            value = str(int(value) + delta)
        out.append(f".b{size * 8} {value}")
    return out


def _unknown(what: str) -> ToolchainError:
    return ToolchainError(f"the PTX's DWARF .debug_info has {what}: xisa cannot give ptxas its checkout-free form",
                          fix="report it to xisa with the PTX (`xisa compile --emit DIR`)")


# --- ptxas's command: fixed names in a fresh folder ----------------------------------------------------------

class _CanonicalSubprocess:
    """Triton's nvidia compiler module's `subprocess`, whose `run` gives ptxas fixed names: the input's and the
    output's in a fresh folder, and argv[0] its file name. Every other name is the real module's."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def run(cmd, *args, **kwargs):
        if not (isinstance(cmd, list) and Path(str(cmd[0])).name.startswith("ptxas")):
            return subprocess.run(cmd, *args, **kwargs)
        if len(cmd) < 4 or cmd[-2] != "-o" or "cwd" in kwargs or "executable" in kwargs:
            raise ToolchainError(f"this Triton runs ptxas as {cmd!r}: xisa cannot give it fixed file names",
                                 fix="use a Triton xisa supports (xisa doctor)")
        *command, source, _, output = cmd
        with tempfile.TemporaryDirectory(prefix="xisa-ptxas-") as folder:
            shutil.copyfile(source, os.path.join(folder, "kernel.ptx"))
            done = subprocess.run([Path(command[0]).name, *command[1:], "kernel.ptx", "-o", "kernel.cubin"], *args,
                                  executable=command[0], cwd=folder, **kwargs)
            shutil.move(os.path.join(folder, "kernel.cubin"), output)
        return done


@contextlib.contextmanager
def canonical_ptxas(path_of):
    """While Triton compiles here, its ptxas runs with fixed addresses on the PTX of `relative_ptx`, with fixed
    file names (the module docstring says why).

    Patched where Triton looks: the backend class it instantiates (`triton.backends.backends`), and the module
    namespace that class's `make_cubin` runs in. Not `triton.backends.nvidia.compiler.CUDABackend`: the compile
    workers reload that module (`runner._reimport_backend_compilers`), which defines a new class there while
    Triton keeps instantiating the one it discovered."""
    from triton.backends import backends

    fixed_addresses()
    backend = backends["nvidia"].compiler
    original = backend.make_cubin
    namespace = original.__globals__
    original_subprocess = namespace["subprocess"]

    def make_cubin(self, src, *args, **kwargs):   # (src, metadata, opt, capability) on Triton 3.6 to 3.9
        return original(self, relative_ptx(src, path_of), *args, **kwargs)

    backend.make_cubin, namespace["subprocess"] = make_cubin, _CanonicalSubprocess()
    try:
        yield
    finally:
        backend.make_cubin, namespace["subprocess"] = original, original_subprocess
