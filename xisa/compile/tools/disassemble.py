"""The tools run on a compiled kernel's binary, so that the analysis (`xisa.analyze`) stays pure.

Triton disassembles a cubin with nvdisasm when its `sass` stage is first read; xisa reads a cubin's
resource usage with cuobjdump. Both come from the Triton wheel (`TRITON_*_PATH` are refused).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile

from xisa.analyze.backends import Backend
from xisa.errors import ToolchainError

# Printed by nvdisasm on every disassembly Triton asks for; it says nothing about the kernel.
_TOOL_NOISE = (b"nvdisasm warning : Disassembling Std Elf to Old format",)


def machine_code(backend: Backend, compiled) -> tuple[str, bytes, str | None]:
    """(the assembly text, the binary's bytes, what `binary_tool` prints about it or None) of a Triton
    `CompiledKernel`. Where the backend names an `assembly_tool` (NVIDIA: nvdisasm with line information), it
    prints the assembly from the binary instead of Triton (whose spelling has no source lines); the stream is the
    same."""
    binary = compiled.asm[backend.binary]
    if backend.assembly_tool is not None:
        assembly = run_on_binary(backend.assembly_tool, binary, suffix=f".{backend.binary}")
    else:
        with _drop_known_tool_noise():
            assembly = compiled.asm[backend.assembly]
    if backend.binary_tool is None:
        return assembly, binary, None
    return assembly, binary, run_on_binary(backend.binary_tool, binary, suffix=f".{backend.binary}")


def kept_stages(backend: Backend, compiled) -> dict[str, str | bytes]:
    """Every stage of `backend.stages` the compile has, for `--emit`; the assembly in Triton's own spelling
    (NVIDIA: disassembled now, as Triton does on first use; the analysis read nvdisasm's listing instead)."""
    with _drop_known_tool_noise():
        compiled.asm[backend.assembly]
    return {k: v for k, v in compiled.asm.items() if k in backend.stages}


@contextlib.contextmanager
def _drop_known_tool_noise():
    """Capture fd 2 while Triton runs the disassembler; pass on everything but the known noise."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            for line in capture.read().splitlines(keepends=True):
                if not any(noise in line for noise in _TOOL_NOISE):
                    os.write(2, line)


def tool_path(name: str) -> str:
    """An NVIDIA tool as Triton finds it (`triton.knobs.nvidia.<name>`): the one in its wheel."""
    try:
        from triton import knobs

        path = getattr(knobs.nvidia, name).path
    except Exception as exc:  # noqa: BLE001 -- any failure means: no usable tool
        raise ToolchainError(f"cannot locate {name} through triton.knobs: {exc}") from None
    if not path or not os.path.isfile(path):
        raise ToolchainError(f"{name} not found at {path!r}",
                             fix=f"install a Triton wheel that carries triton/backends/nvidia/bin/{name}")
    return path


def run_on_binary(command: tuple[str, ...], binary: bytes, *, suffix: str) -> str:
    """What `command` (a tool and its options, e.g. `cuobjdump --dump-resource-usage`) prints for `binary`."""
    tool, *options = command
    fd, path = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(binary)
        proc = subprocess.run([tool_path(tool), *options, path], capture_output=True, text=True, timeout=120)
    finally:
        os.remove(path)
    if proc.returncode != 0:
        raise ToolchainError(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr.strip()[:200]}")
    return proc.stdout
