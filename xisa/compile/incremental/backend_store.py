"""The back end's work, kept by what Triton's front end handed it (issue 24, item 1).

A library whose `__init__` imports every op puts every one of its files in every kernel's depfile (`cache.py`), so
an edit anywhere in it misses every cell. Behind that miss a worker loads the module, binds, and runs Triton's front
end; the TTIR it makes, locations included, holds what the compile consumed of the source: the traced kernel, its
inlined callees, constexpr values, inline asm. The expensive stages (TTGIR down to the code object) and the
analysis of their output are a function of that text and of what this module adds to the key: the options, the
GPUTarget and the target file, the toolchain, every variable that changes compilation (pinned ones, side knobs,
toolchain-like ones, Triton's cache-invalidating ones), xisa's own code, and how each path in the TTIR's locations
is shown (ptxas is given those shown paths, the line table shows them). The files the back end reads (an inline-asm
`.include`, a file an option names) are the entry's depfile, each with its SHA-256, checked on every hit.

A hit answers the cell without the back end. What a result holds that is not the back end's output is made again
by this run: the binding and options (its bind), the line table's paths and the text of each source line (read from
the files now), the per-instruction locations. The back end's code must be Triton's own: where a backend class or
the compile function has code from elsewhere (a library patched it), the store is not used for that compile.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xisa.analyze.model import Analysis
from xisa.compile.incremental.cache import BACKEND, FRONTEND, EntryStore, stream_holds
from xisa.compile.incremental.front_end_key import front_end_record
from xisa.compile.incremental.keys import backend_key, canonical, compile_context
from xisa.compile.incremental.front_end_pristine import front_end_is_pristine
from xisa.compile.incremental.reads import compile_reads, note_compile_reads, reads_so_far
from xisa.compile.worker.result import analysis_from_cache, analysis_to_cache
from xisa.compile.incremental import keys
from xisa.compile.worker.toolchain import knob_settings

# A file location in MLIR's printed form: `loc("/path/k.py":12:5)` (a callsite or a name refers to these).
_LOCATION_FILE = re.compile(r'loc\("([^"]*)":[0-9]+:[0-9]+\)')


class BackendHit(BaseException):
    """Raised inside `triton.compile` at the front end's output when the store holds the back end's work. A
    BaseException: no `except Exception` on its way out of Triton can take it for a compile error."""

    def __init__(self, analysis: Analysis, reads: dict[str, str | None], *, front_end: bool = False):
        super().__init__("the back end's work is in xisa's store")
        self.analysis = analysis
        self.reads = reads
        self.front_end = front_end   # raised before the front end ran: its inputs were ones seen before


class BackendStore:
    """Back-end entries by key: the analysis with the compiler's own paths, and the files the back end read."""

    def __init__(self, cache_dir: Path):
        self.entries = EntryStore(cache_dir / BACKEND)
        self.front_ends = EntryStore(cache_dir / FRONTEND)   # what the front end read -> the key of its output

    def get(self, key: str) -> tuple[Analysis, dict[str, str | None]] | None:
        data = self.entries.read_holding(key, "reads")   # None: absent, or a file the back end read changed
        if data is None:
            return None
        try:
            reads = data["reads"]
            analysis = analysis_from_cache(data)
            return (analysis, reads) if analysis is not None and stream_holds(analysis) else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None   # corrupt: compile again

    def put(self, key: str, analysis: Analysis, reads: dict[str, str | None]) -> None:
        self.entries.write(key, {**analysis_to_cache(analysis), "reads": reads})

    def front_end(self, front_key: str) -> tuple[str, dict[str, str | None], dict[str, str]] | None:
        """The back-end key the front end made for these inputs, the files it read (while they are unchanged), and
        how the paths in its output were shown."""
        data = self.front_ends.read_holding(front_key, "reads")
        try:
            key, reads, shown = data["backend"], data["reads"], data["shown"]
            if isinstance(key, str) and isinstance(shown, dict):
                return key, reads, shown
        except (KeyError, TypeError):
            pass   # absent or corrupt: the front end runs
        return None

    def put_front_end(self, front_key: str, key: str, reads: dict[str, str | None], shown: dict[str, str]) -> None:
        self.front_ends.write(front_key, {"backend": key, "reads": reads, "shown": shown})


@dataclass
class BackendReuse:
    """The store's part in one compile: the key's parts known before the front end runs, and what it found."""

    store: BackendStore
    context: dict[str, Any]            # everything in the key but the TTIR and its shown paths
    path_of: Callable[[str], str]      # how a source path is shown (`cell.SourceFiles.path_of`)
    lookup: bool                       # False: record only (--no-cache compiles every cell)
    key: str | None = None             # set at the front end's output
    mark: int | None = None            # the compile's reads so far at that point: the back end's reads follow
    front_key: str | None = None       # what the front end reads (`front_end_key.py`); None: refused, it runs
    front_mark: int = 0                # the compile's reads before the front end: its reads follow
    shown: dict[str, str] = field(default_factory=dict)   # the TTIR's paths as `key_of` showed them

    def before_front_end(self) -> None:
        """Raises `BackendHit` when the front end's inputs are ones it has seen and the store holds the back end's
        work for the output it made then: neither runs."""
        self.front_mark = reads_so_far()
        if not self.lookup or self.front_key is None:
            return
        found = self.store.front_end(self.front_key)
        # The back-end key holds how each path of the TTIR is shown (ptxas gets those names): asked again here, as
        # the key's making asks it, so a path shown otherwise now (another layout) runs the front end.
        if found is None or any(self.path_of(path) != name for path, name in found[2].items()):
            return
        back = self.store.get(found[0])
        if back is not None:
            note_compile_reads(named_files(self.context["options"]))   # what the back end reads by an option
            raise BackendHit(back[0], {**found[1], **back[1]}, front_end=True)

    def at_front_end(self, ttir: str) -> None:
        """Called with the TTIR as Triton is about to keep it; raises `BackendHit` when the store answers."""
        self.key = self.key_of(ttir)
        self.mark = reads_so_far()
        if self.front_key is not None:
            self.store.put_front_end(self.front_key, self.key, compile_reads(since=self.front_mark), self.shown)
        note_compile_reads(named_files(self.context["options"]))   # what the back end reads by an option
        if self.lookup:
            found = self.store.get(self.key)
            if found is not None:
                raise BackendHit(*found)

    def key_of(self, ttir: str) -> str:
        shown = self.shown = {}
        for path in sorted(set(_LOCATION_FILE.findall(ttir))):
            for name in (path, os.path.dirname(path)):   # ptxas gets the folder apart (`DW_AT_comp_dir`)
                shown[name] = self.path_of(name)
        return backend_key(self.context, ttir, shown, code_knobs())

    def back_end_reads(self) -> dict[str, str | None]:
        """What the compile read since its front end's output (all of it when the front end did not run here: a
        Triton cache entry of this run answered)."""
        return compile_reads(since=self.mark or 0)

    def record(self, compiled, analysis: Analysis, reads: dict[str, str | None]) -> None:
        key = self.key
        if key is None:
            ttir = compiled.asm.get("ttir")
            if not isinstance(ttir, str):
                return
            key = self.key_of(ttir)
        self.store.put(key, analysis, reads)


def backend_context(cell, bound) -> dict[str, Any]:
    """The key's parts that are not the front end's output, as the worker compiling `cell` has them."""
    return compile_context(cell, bound, code_knobs())


def code_knobs() -> Any:
    """Triton's knobs as code set them (a heuristic or a pre_hook may, while the cell binds; a constexpr function
    while the front end traces), with whether knobs follow the environment: a knob the front end or the back end
    reads that way is in no variable."""
    from triton import knobs

    return canonical({"groups": knob_settings(), "propagate_env": getattr(knobs, "propagate_env", None)})


@contextlib.contextmanager
def backend_reuse(store: BackendStore | None, cell, bound, path_of, *, lookup: bool) -> Iterator[BackendReuse | None]:
    """The store's part in the compile inside the block (None: not used for it)."""
    if store is None or not back_end_is_tritons(bound.target):
        yield None
        return
    context = backend_context(cell, bound)
    yield BackendReuse(store, context, path_of, lookup, front_key=front_end_key(context, bound))


def front_end_key(context: dict[str, Any], bound) -> str | None:
    """The key of what the front end reads for `bound` under `context`; None where `front_end_key.py` refuses."""
    record = front_end_record(bound.fn, bound.constexprs, bound.signature, bound.attrs)
    return None if record is None else keys.front_end_key(context, record)


def back_end_is_tritons(target) -> bool:
    """Whether the code between the front end's output and the code object is the installed Triton's own: the
    backend class for `target` (each function of its classes), the backends' compiler modules as the worker found
    them (a module function their methods call rebound is another back end), the compile function, no stage
    inspection hook."""
    import triton
    from triton import knobs
    from triton.compiler import compiler

    folder = os.path.join(os.path.dirname(os.path.abspath(triton.__file__)), "")
    if getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None:
        return False
    if not front_end_is_pristine():   # the backends' compiler modules as found, each function Triton's own
        return False
    codes = [getattr(compiler.compile, "__code__", None)]
    for klass in type(compiler.make_backend(target)).__mro__[:-1]:
        for value in vars(klass).values():
            codes.append(getattr(getattr(value, "__func__", value), "__code__", None))
    return all(code is None or os.path.abspath(code.co_filename).startswith(folder) for code in codes)


def named_files(options: Any) -> list[str]:
    """Absolute paths of existing files among the option values (`extern_libs`' libraries, `ir_override`)."""
    if isinstance(options, str):
        return [options] if os.path.isabs(options) and os.path.isfile(options) else []
    if isinstance(options, dict):
        options = list(options.values())
    if isinstance(options, list):
        return [path for value in options for path in named_files(value)]
    return []
