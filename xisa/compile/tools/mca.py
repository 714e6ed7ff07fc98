"""llvm-mca's static estimate of one loop: resource pressure per iteration per pipe, from LLVM's own
AMDGPU scheduling model. A model, not a measurement: it is never fingerprinted nor written to a golden,
and is computed only where it is shown (a changed loop in the HTML report, `xisa compile --loops`), so
a check that shows nothing costs nothing.

The loop body is the normalized stream's instructions, which are LLVM's own spelling; a line LLVM's
assembler refuses (a data word of inline asm, a label it does not know) is dropped and counted. LLVM 14
(Debian 12's default) has no model for gfx942, gfx950 or gfx12: xisa takes the newest `llvm-mca` it finds
(`llvm-mca-NN` on PATH, `/usr/lib/llvm-NN/bin/llvm-mca`, then `llvm-mca`) and says which targets it
knows (`xisa doctor`).
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from xisa.analyze.loops import Loop

ITERATIONS = 10         # the pressure table is per iteration already; more iterations only cost time (measured: same figures)
TIMEOUT_S = 60
_VERSION = re.compile(r"LLVM version (\d+)\.(\d+)(?:\.(\d+))?")
_ERROR_LINE = re.compile(r"^<stdin>:(\d+):\d+: error:", re.MULTILINE)
_CPU = re.compile(r"^\s+([\w.-]+)\s+- Select the ", re.MULTILINE)
MAX_RETRIES = 8          # each pass drops the lines LLVM's assembler refused; stop when none is left


@dataclass(frozen=True)
class McaTool:
    path: str
    version: str             # `22.1.8`


@dataclass(frozen=True)
class Estimate:
    """llvm-mca's resource pressure of one loop iteration, per pipe (resource), in cycles."""

    tool: McaTool
    cpu: str
    pressure: dict[str, float]          # resource name -> cycles per iteration, as llvm-mca's table says
    block_rthroughput: float | None     # llvm-mca's reciprocal throughput of the body
    instructions: int                   # the body's instructions handed to llvm-mca
    dropped: int                        # of them, those LLVM's assembler refused
    seconds: float = field(default=0.0, compare=False)

    def text(self) -> str:
        busiest = sorted(self.pressure.items(), key=lambda kv: (-kv[1], kv[0]))
        pipes = ", ".join(f"{name} {cycles:g}" for name, cycles in busiest if cycles)
        dropped = f"; {self.dropped} of {self.instructions} instructions dropped (llvm-mca cannot parse them)" \
            if self.dropped else ""
        rthroughput = f"; block reciprocal throughput {self.block_rthroughput:g}" if self.block_rthroughput else ""
        return (f"model estimate (llvm-mca {self.tool.version} -mcpu={self.cpu}, not a measurement): "
                f"cycles per iteration per pipe: {pipes or 'none'}{rthroughput}{dropped}")

    def to_json(self) -> dict[str, Any]:
        return {"model": f"llvm-mca {self.tool.version}", "cpu": self.cpu, "pressure": dict(self.pressure),
                "block_rthroughput": self.block_rthroughput, "instructions": self.instructions,
                "dropped": self.dropped}


def _version(path: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(out)
    return tuple(int(g or 0) for g in match.groups()) if match else None


@functools.lru_cache(maxsize=1)
def find_llvm_mca() -> McaTool | None:
    """The newest llvm-mca on this machine, or None."""
    candidates: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidates += sorted(glob.glob(os.path.join(folder, "llvm-mca-[0-9]*")))
    candidates += sorted(glob.glob("/usr/lib/llvm-[0-9]*/bin/llvm-mca"))
    plain = shutil.which("llvm-mca")
    if plain:
        candidates.append(plain)
    best: tuple[tuple[int, ...], str] | None = None
    for path in dict.fromkeys(candidates):
        if not os.access(path, os.X_OK):
            continue
        version = _version(path)
        if version is not None and (best is None or version > best[0]):
            best = (version, path)
    if best is None:
        return None
    return McaTool(path=best[1], version=".".join(str(v) for v in best[0]))


@functools.lru_cache(maxsize=8)
def known_cpus(tool: McaTool, triple: str) -> tuple[str, ...]:
    """The `-mcpu` values `tool` knows for `triple` (`-mcpu=help`)."""
    proc = subprocess.run([tool.path, f"-mtriple={triple}", "-mcpu=help"], input="", capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    return tuple(_CPU.findall(proc.stdout + proc.stderr))


def parse_pressure(output: str) -> tuple[dict[str, float], float | None]:
    """(resource -> cycles per iteration, block reciprocal throughput) from llvm-mca's summary view."""
    names: dict[str, str] = dict(re.findall(r"^(\[\d+(?:\.\d+)?\])\s+-\s+(\S+)", output, re.MULTILINE))
    pressure: dict[str, float] = {}
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Resource pressure per iteration:") and index + 2 < len(lines):
            columns = lines[index + 1].split()
            values = lines[index + 2].split()
            for column, value in zip(columns, values):
                pressure[names.get(column, column)] = 0.0 if value == "-" else float(value)
            break
    match = re.search(r"^Block RThroughput:\s+([\d.]+)", output, re.MULTILINE)
    return pressure, float(match.group(1)) if match else None


# 16-bit register halves (`v185.l`): the compiler ran with real true16 (gfx11+), which llvm-mca's assembler
# accepts only when told.
_TRUE16 = re.compile(r"\bv\d+\.[lh]\b")
# LLVM 19+ drops a line its assembler refuses itself (one run); an older one is run again without them.
_SKIP_FLAG = "-skip-unsupported-instructions=parse-failure"


def estimate_body(tool: McaTool, triple: str, cpu: str, lines: Sequence[str]) -> Estimate:
    """llvm-mca on `lines` (one instruction each), dropping what its assembler refuses."""
    started = time.monotonic()
    command = [tool.path, f"-mtriple={triple}", f"-mcpu={cpu}", f"-iterations={ITERATIONS}", "-timeline=false",
               "-instruction-info=false", "-resource-pressure=true"]
    if any(_TRUE16.search(line) for line in lines):
        command.append("-mattr=+real-true16")
    skips = tuple(int(v) for v in tool.version.split(".")[:1]) >= (19,)
    kept = list(lines)
    output = ""
    for _ in range(MAX_RETRIES):
        proc = subprocess.run([*command, *([_SKIP_FLAG] if skips else [])], input="\n".join(kept) + "\n",
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        refused = {int(n) - 1 for n in _ERROR_LINE.findall(proc.stderr)}
        if skips and proc.returncode == 0:
            output = proc.stdout
            kept = [line for i, line in enumerate(kept) if i not in refused]
            break
        if proc.returncode == 0 or not refused:
            output = proc.stdout
            break
        kept = [line for i, line in enumerate(kept) if i not in refused]
    pressure, rthroughput = parse_pressure(output)
    return Estimate(tool=tool, cpu=cpu, pressure=pressure, block_rthroughput=rthroughput, instructions=len(lines),
                    dropped=len(lines) - len(kept) if output else len(lines), seconds=time.monotonic() - started)


def estimate_loop(loop: Loop, *, triple: str | None, cpu: str) -> Estimate | str:
    """The estimate of one loop, or one line saying why there is none (no model for the ISA, no llvm-mca,
    or an llvm-mca without a model for `cpu`)."""
    if triple is None:
        return "no llvm-mca model for this ISA"
    tool = find_llvm_mca()
    if tool is None:
        return "llvm-mca not found: no model estimate (install Debian's llvm-20 or newer; `xisa doctor`)"
    if cpu not in known_cpus(tool, triple):
        return f"llvm-mca {tool.version} ({tool.path}) does not know -mcpu={cpu}: no model estimate (a newer LLVM may)"
    return estimate_body(tool, triple, cpu, [ins.text() for ins in loop.body])


def doctor_facts(triples: dict[str, str], targets: dict[str, str]) -> dict[str, Any]:
    """What `xisa doctor` says: llvm-mca's path and version, and which of `targets` (name -> arch, of a
    backend with a triple in `triples`: name -> triple) it has a model for."""
    tool = find_llvm_mca()
    if tool is None:
        return {"found": False, "path": None, "version": None, "models": [], "no_model": sorted(targets)}
    models, missing = [], []
    for name, arch in sorted(targets.items()):
        (models if arch in known_cpus(tool, triples[name]) else missing).append(name)
    return {"found": True, "path": tool.path, "version": tool.version, "models": models, "no_model": missing}
