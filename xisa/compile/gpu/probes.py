"""The ways a library asks this machine's GPU behind torch's and Triton's back, refused while xisa answers as a
target: NVML and AMD SMI (pynvml, amdsmi and the libraries they open), the vendors' tools (nvidia-smi, rocminfo,
rocm-smi, amd-smi) and the drivers' own libraries. vLLM picks its platform through NVML and amdsmi, aiter its
arch and CU count through rocminfo, FlagGems its vendor through the tools: the answer would be this machine's GPU,
or with none a fallback the library picks silently, never the target's. Python's audit events see each one
(`subprocess.Popen`, `os.system`, `os.posix_spawn`, `os.exec`, `ctypes.dlopen`), whoever calls it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable

from xisa.compile.gpu.where import IMPORT_HOOK_FIX

PROBE_TOOLS = frozenset({"nvidia-smi", "rocminfo", "rocm-smi", "amd-smi", "rocm_agent_enumerator", "amdgpu-arch",
                         "offload-arch", "nvptx-arch", "hipInfo", "deviceQuery", "clinfo", "lspci"})
PROBE_LIBRARIES = ("libnvidia-ml", "libamd_smi", "librocm_smi", "libcuda.so", "libcudart", "libamdhip64",
                   "libhsa-runtime64")
_PROCESS_EVENTS = {"subprocess.Popen": 1, "os.posix_spawn": 1, "os.exec": 1, "os.system": 0}

_CURRENT: list[Callable[[], Any]] = []   # once hooked: what answers now (a DeviceAnswers), None outside


def probe_of(event: str, args: tuple) -> str | None:
    """The GPU probe an audit event is ('nvidia-smi', 'libnvidia-ml.so.1'), or None."""
    if event == "ctypes.dlopen":
        name = os.path.basename(os.fsdecode(args[0])) if isinstance(args[0], (str, bytes)) else ""
        return name if name.startswith(PROBE_LIBRARIES) else None
    where = _PROCESS_EVENTS.get(event)
    if where is None:
        return None
    argv = args[where]
    text = os.fsdecode(argv) if isinstance(argv, (str, bytes)) else " ".join(
        os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in (argv or ()))
    for word in re.split(r"[\s|;&()<>`'\"$]+", text):   # a shell command's words: `rocminfo|grep gfx` too
        if os.path.basename(word) in PROBE_TOOLS:
            return os.path.basename(word)
    return None


def _refuse_probes(event: str, args: tuple) -> None:
    if event not in _WATCHED:
        return
    answers = _CURRENT[0]()
    probe = probe_of(event, args) if answers is not None else None
    if probe is not None:
        raise answers.refuse(
            f"{probe} ({event})", why="it asks this machine's GPU, not the target's (with none, the library falls "
                                      "back to a value of its own)",
            fix=f"answer the library's platform in {IMPORT_HOOK_FIX}; or set the library's own switch for the "
                "target (e.g. GEMS_VENDOR)")


_WATCHED = frozenset({"ctypes.dlopen", *_PROCESS_EVENTS})


def refuse_probes(current: Callable[[], Any]) -> None:
    """Refuse GPU probes whenever `current()` gives the answers of a target (once a process: an audit hook
    cannot be removed; it does nothing while `current()` is None)."""
    if not _CURRENT:
        _CURRENT.append(current)
        sys.addaudithook(_refuse_probes)
