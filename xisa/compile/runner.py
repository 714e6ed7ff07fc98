"""Run cells: answer what the cache knows, compile the rest in a pool of warmed, forked workers.

Each worker compiles one cell at a time. A cell that outlives `timeout` or kills its worker becomes
an error cell and the worker is replaced; the other cells go on.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

from xisa.compile.launch.loader import keep_loads_in, kernel_dependencies
from xisa.compile.incremental.reads import ignore_reads_under
from xisa.compile.incremental.backend_store import BackendStore
from xisa.compile.incremental.cache import ResultCache, Timings, open_cache_folder, triton_cache_class
from xisa.compile.incremental.keys import result_key
from xisa.compile.incremental.cache_limit import RunCounts, default_limit, trim_cache
from xisa.compile.cell import compile_cell
from xisa.compile.incremental.front_end_pristine import remember_pristine_front_end
from xisa.compile.incremental.installed import installed_dependencies
from xisa.compile.launch.warm import import_compile_modules
from xisa.compile.worker.result import CellResult
from xisa.spec.cases import Cell
from xisa.compile.worker import toolchain
from xisa.compile.worker.config import WorkerConfig
from xisa.compile.worker.toolchain import apply_pinned_env

# A load allocates ~a million objects (a library's modules, torch._dynamo): at Python's default (700, 10, 10) a worker
# spent 1.5 s of a 6 s library edit check collecting; at these, 0.2 s. Peak memory: 3% higher for fla's cold check
# (bench/incremental.py), 7% to 13% for 2,080 cells (bench/scale.py: 678 to 717 MiB a worker).
WORKER_GC_THRESHOLDS = (50_000, 20, 100)
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class RunOptions:
    jobs: int = 0               # 0: the cores this process may use
    timeout: float = 600.0      # seconds per cell
    use_cache: bool = True
    keep_stages: bool = False
    # An `xisa ab` side's codegen knobs (NAME -> value), set over the pinned environment for this run only:
    # part of every result's cache key, with a Triton cache folder of their own.
    knobs: dict[str, str] = field(default_factory=dict)
    cache_limit: int | None = None   # bytes the cache folder may hold (None: XISA_CACHE_SIZE or the default)


def _die_with_parent(parent_pid: int) -> None:
    """A worker dies with xisa, even when xisa is SIGKILLed (else it waits forever on its pipe, ~300 MB),
    and leaves SIGINT/SIGTERM/SIGHUP to xisa, which stops it: the handlers it inherited would print a
    traceback here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # xisa died before prctl took effect
        os._exit(1)


def _worker_main(conn, config: WorkerConfig) -> None:
    _die_with_parent(config.parent_pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)   # held by the parent across the fork
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    prepare_worker_toolchain(config)
    remember_pristine_front_end()   # before any kernel's load can change Triton's front end
    keep_loads_in(config.cache_dir, lookup=config.lookup)
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            return
        conn.send(_compile_one(index, config))


def prepare_worker_toolchain(config: WorkerConfig) -> None:
    """Triton as a default launch sees it: knobs from the (pinned) environment only, none set in code by
    the parent process; its cache writes fall back to a temp folder when the cache folder cannot take them."""
    from triton import knobs

    for group in vars(knobs).values():
        if isinstance(group, knobs.base_knobs):
            group.reset()
    refresh = getattr(knobs, "refresh_knobs", None)  # knobs read once at import (TRITON_DEBUG)
    if refresh is not None:
        refresh()
    _reimport_backend_compilers()
    fallback = config.triton_fallback
    knobs.cache.manager_class = triton_cache_class(fallback)
    # a compile's own output, and xisa's cache entries (what they answer for is checked by their own keys)
    ignore_reads_under(os.environ.get("TRITON_CACHE_DIR", ""), fallback, str(config.cache_dir or ""))
    # A folder of this worker's own in the run's Triton cache, emptied after each cell: it holds one cell's stages
    # at a time, however many cells the run compiles (what outlives the cell is in the back-end store).
    os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ.get("TRITON_CACHE_DIR", fallback),
                                                  f"worker-{os.getpid()}")


def _reimport_backend_compilers() -> None:
    """Each backend's compiler module again, under the pinned environment. Its options dataclass takes some
    defaults from knobs when the module is imported (Triton 3.8: `CUDAOptions.ptx_options` is
    PTXAS_OPTIONS), and this process imported Triton before the pins (to judge the environment; a pytest
    session long before): those defaults would be the user's, not a default launch's, and reach every
    compile unseen by the cache key. A reload runs the module's definitions again in the same namespace, so
    the backend class, which finds its options class there, builds options with the pinned defaults."""
    import importlib

    from triton.backends import backends

    for backend in backends.values():
        module = sys.modules.get(backend.compiler.__module__)
        if module is not None:
            importlib.reload(module)


def _compile_one(index: int, config: WorkerConfig) -> tuple[int, CellResult, dict[str, str | None] | None]:
    """A cell's result and its depfile: the project files its kernel's load imported, with their hashes."""
    cell = config.cells[index]
    store = BackendStore(config.cache_dir) if config.cache_dir is not None else None
    result = compile_cell(cell, roots=list(config.roots), keep_stages=config.keep_stages, store=store,
                          lookup=config.lookup)
    dependencies = kernel_dependencies(cell.kernel, cell.target)
    if dependencies is not None:   # and the installed code it could use: a reinstall with other code is a miss
        dependencies = {**dependencies, **installed_dependencies()}
    shutil.rmtree(os.environ["TRITON_CACHE_DIR"], ignore_errors=True)   # this cell's stages: analyzed, kept
    return index, result, dependencies


class _Worker:
    def __init__(self, ctx, config: WorkerConfig):
        self.conn, child = ctx.Pipe()
        # fork: the config (the cells with it) is inherited with the parent's memory, not pickled
        self.process = ctx.Process(target=_worker_main, args=(child, config), daemon=True)
        # No stop signal inside the fork: a KeyboardInterrupt raised in an at-fork handler (logging's lock release)
        # is printed as ignored and lost, and the run ends 0. Held here, it arrives once the worker is started.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        child.close()
        self.index: int | None = None
        self.started = 0.0
        self.targets: list[str] = []                 # the targets and (target, spec file) pairs of the cells it had,
        self.places: list[tuple[str, str]] = []      # in order: its loads (a replaced worker starts with none)

    def give(self, index: int) -> None:
        self.index, self.started = index, time.monotonic()
        self.conn.send(index)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.process.join(timeout=2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()


def run_cells(cells: list[Cell], *, roots: list[Path], cache_dir: Path, options: RunOptions,
              progress: Callable[[CellResult], None] | None = None) -> list[CellResult]:
    """Results in the order of `cells`; identical whatever the job count."""
    # Refused variables and an unsupported Triton make any result untrustworthy, cached answers included.
    toolchain.check_environment()
    toolchain.check_supported(toolchain.triton_version())
    toolchain.check_side_knobs(options.knobs)
    toolchain.check_knobs_read(options.knobs)   # a typo'd knob would answer `same` everywhere
    open_cache_folder(cache_dir)
    # --no-cache compiles every cell but still records the results, so the next run is warm.
    cache = ResultCache(cache_dir)
    read_cache = options.use_cache and not options.keep_stages
    timings = Timings(cache_dir)
    results: list[CellResult | None] = [None] * len(cells)
    keys: list[str | None] = [None] * len(cells)
    todo: list[int] = []
    for index, cell in enumerate(cells):
        keys[index] = result_key(cell, tuple(roots), knobs=options.knobs)
        if read_cache:
            hit = cache.get(keys[index])
            if hit is not None:
                results[index] = hit
                if progress:
                    progress(hit)
                continue
        todo.append(index)
    if todo:
        # Slowest first, so the pool does not end waiting on one long cell.
        todo.sort(key=lambda i: -timings.get(cells[i].id))
        pool = _compile_in_pool(cells, todo, roots=roots, cache_dir=cache_dir, options=options)
        with contextlib.closing(pool):  # interrupted here: stop the workers now, not when the generator is collected
            for index, result, dependencies in pool:
                results[index] = result
                if keys[index] is not None:
                    cache.put(keys[index], result, dependencies)
                if progress:
                    progress(result)
        timings.update([results[i] for i in todo])
    counts = RunCounts.of(results)   # type: ignore[arg-type]
    counts.write(cache_dir)
    if todo:   # only a run that added entries can have grown the cache past its limit
        trim_cache(cache_dir, options.cache_limit if options.cache_limit is not None else default_limit())
    return results  # type: ignore[return-value]


def _compile_in_pool(cells, todo, *, roots, cache_dir, options):
    # Triton's cache is a fresh, empty folder for each run: what it would keep across runs the back-end store
    # keeps, bounded, under a key that holds what the compile consumed (Triton's holds the source alone).
    fresh = fallback = None
    try:
        fresh = _scratch_folder("xisa-triton-", cache_dir)
        fallback = _scratch_folder("xisa-triton-fallback-", cache_dir)
        apply_pinned_env(cache_dir, triton_cache=fresh, knobs=options.knobs)
        import_compile_modules()
        config = WorkerConfig(cells=tuple(cells), roots=tuple(roots), keep_stages=options.keep_stages,
                              parent_pid=os.getpid(), triton_fallback=str(fallback), cache_dir=cache_dir,
                              lookup=options.use_cache)
        yield from _pool(config, todo, options)
    finally:
        for folder in (fresh, fallback):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


def _scratch_folder(prefix: str, cache_dir: Path) -> Path:
    """An empty private folder for this run: in the temp folder, else in the cache folder."""
    for parent in (None, cache_dir):
        try:
            return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        except OSError as exc:
            reason = exc.strerror
    from xisa.errors import ToolchainError

    raise ToolchainError(f"cannot make a folder for Triton's cache in {tempfile.gettempdir()} or {cache_dir}: "
                         f"{reason}", field="TMPDIR", fix="free disk space, or point TMPDIR at a writable folder")


class _Pending:
    """The cells still to give out, longest first, each worker's next chosen where its loads serve it.

    A worker loads each kernel module once (a place: a spec file on a target), and once per target for a library that
    asks the device at import (fla: about a second a load); a module of a package that asks the device imports that
    package anew (FlagGems' generated kernels: a worker's first cells took 13 to 20 s each on an H100). So a worker
    keeps to the places it has loaded; one whose places are done starts a place no worker has started (of its own
    targets first, then of a target nobody has, then, where that target's load pays, of another's); a fresh worker
    any place nobody has. Only when every place is started does a worker join another's place, and only where that
    pays for the load it costs: half of what is left there (at this run's seconds a cell) must outlast a load (at this
    run's seconds of a worker's first cell of a place or target, less a cell's). Before, every worker took the
    longest cell left: on one target all 16 workers of an H100 started on the first spec's cells, then all moved on to
    the next, so each of them loaded nearly every spec (613 FlagGems cells, 47 specs: 97 s at -j 16). A library edit
    answers most cells from the stores in ~15 ms: a worker then leaves another's place to it rather than load the
    library again for a few cells. Which worker compiles a cell changes no result."""

    def __init__(self, cells: list[Cell], todo: list[int]):
        self.order = deque(todo)
        self.by_target: dict[str, deque[int]] = {}
        self.by_kernel: dict[tuple[str, str], deque[int]] = {}
        self.places_of: dict[str, deque[tuple[str, str]]] = {}   # each target's places, by their longest cell
        self.left: dict[tuple[str, str], int] = {}                # cells of each place not given out yet
        self.given: set[int] = set()
        self.place: dict[int, tuple[str, str]] = {}   # each cell: (its target, its spec file)
        for index in todo:
            cell = cells[index]
            place = self.place[index] = (cell.target.name, str(cell.kernel.spec_file))
            self.by_target.setdefault(place[0], deque()).append(index)
            if place not in self.by_kernel:
                self.places_of.setdefault(place[0], deque()).append(place)
            self.by_kernel.setdefault(place, deque()).append(index)
            self.left[place] = self.left.get(place, 0) + 1
        self.started: set[str] = set()   # targets some worker has had a cell of
        self.started_places: set[tuple[str, str]] = set()   # places some worker has had a cell of
        # Cells that were a worker's first of a place or a target after its first cell: they paid what joining costs (a
        # load), not the worker's warm-up.
        self.opened: set[int] = set()
        self.warm_ups: set[int] = set()   # each worker's first cell
        self.cell_seconds: list[float] = []   # this run's seconds: of the other cells,
        self.load_seconds: list[float] = []   # and of the opening ones

    def observe(self, index: int, seconds: float) -> None:
        if index not in self.warm_ups:
            (self.load_seconds if index in self.opened else self.cell_seconds).append(seconds)

    def __bool__(self) -> bool:
        return len(self.given) < len(self.place)

    def next_for(self, worker: "_Worker", *, others_busy: bool = False) -> int | None:
        """The worker's next cell; None (it waits) when only places other workers have started are left, or places
        of targets it lacks, and taking one would not pay for its load while they are busy with them."""
        for place in worker.places:   # 1. what its loads serve
            index = self._first(self.by_kernel.get(place))
            if index is not None:
                return self._give(index, worker)
        fresh = not worker.targets   # its first cell pays a load wherever it is
        for target in worker.targets + [t for t in self.by_target if t not in self.started]:
            index = self._unstarted_place(target)   # 2. a place nobody has: of its targets, of a target nobody has
            if index is not None:
                return self._give(index, worker)
        for target in self.by_target:   # of another's target, where that target's load pays
            if target not in worker.targets:
                index = self._unstarted_place(target)
                if index is not None and (fresh or not others_busy or self._worth_a_load(target)):
                    return self._give(index, worker)
        # 3. another's place: of its own targets first, then the longest cell left
        for index in [self._first(self.by_target.get(t)) for t in worker.targets] + [self._first(self.order)]:
            if index is None:
                continue
            target = self.place[index][0]
            pays = (target in worker.targets or self._worth_a_load(target)) and self._worth_joining(self.place[index])
            if not others_busy or fresh or pays:
                return self._give(index, worker)
        return None

    def _worth_a_load(self, target: str) -> bool:
        left = sum(1 for index in self.by_target[target] if index not in self.given)
        return self._pays(left)

    def _worth_joining(self, place: tuple[str, str]) -> bool:
        return self._pays(self.left[place])

    def _pays(self, left: int) -> bool:
        cell = statistics.median(self.cell_seconds) if self.cell_seconds else 1.0
        load = max(0.0, statistics.median(self.load_seconds) - cell) if self.load_seconds else 1.0
        return left * cell / 2 > load

    def _unstarted_place(self, target: str) -> int | None:
        """The first cell of `target`'s longest place that no worker has started."""
        places = self.places_of.get(target)
        while places:
            if places[0] not in self.started_places:
                index = self._first(self.by_kernel[places[0]])
                if index is not None:
                    return index
            places.popleft()
        return None

    def _first(self, queue: deque[int] | None) -> int | None:
        while queue:
            if queue[0] not in self.given:
                return queue[0]
            queue.popleft()
        return None

    def _give(self, index: int, worker: "_Worker") -> int:
        self.given.add(index)
        place = self.place[index]
        self.left[place] -= 1
        self.started.add(place[0])
        self.started_places.add(place)
        if not worker.targets:
            self.warm_ups.add(index)
        elif place not in worker.places:
            self.opened.add(index)
        if place[0] not in worker.targets:
            worker.targets.append(place[0])
        if place not in worker.places:
            worker.places.append(place)
        return index


def _hand_out(workers: list[_Worker], pending: _Pending) -> None:
    """Give each idle worker its next cell; one that would only load another's target for it waits while some worker
    is busy, and when none is, the first idle one takes it (the run always goes on)."""
    for worker in workers:
        if worker.index is None and pending:
            index = pending.next_for(worker, others_busy=True)
            if index is not None:
                worker.give(index)
    idle = [w for w in workers if w.index is None]
    if pending and idle and len(idle) == len(workers):
        idle[0].give(pending.next_for(idle[0]))


def _pool(config: WorkerConfig, todo, options):
    cells = config.cells
    jobs = options.jobs or available_cores()
    jobs = max(1, min(jobs, len(todo)))
    ctx = multiprocessing.get_context("fork")
    pending = _Pending(cells, todo)
    gc.freeze()   # what the parent holds (torch, Triton) is no worker's garbage: no collection of theirs walks it
    try:
        workers = [_Worker(ctx, config) for _ in range(jobs)]
    finally:
        gc.unfreeze()   # the parent's own garbage is collected as before
    try:
        while pending or any(w.index is not None for w in workers):
            _hand_out(workers, pending)
            busy = [w for w in workers if w.index is not None]
            now = time.monotonic()
            deadline = min(w.started + options.timeout for w in busy)
            waitables = [w.conn for w in busy] + [w.process.sentinel for w in busy]
            ready = wait(waitables, timeout=max(0.0, deadline - now))
            for position, worker in enumerate(workers):
                if worker.index is None:
                    continue
                if worker.conn in ready:
                    try:
                        index, result, dependencies = worker.conn.recv()
                    except (EOFError, OSError):
                        index, result, dependencies = worker.index, None, None
                    if result is not None:
                        worker.index = None
                        pending.observe(index, result.seconds)
                        yield index, result, dependencies
                        continue
                if worker.process.sentinel in ready or worker.conn in ready:
                    code = worker.process.exitcode
                    yield worker.index, _failed(cells[worker.index], "crash",
                                                f"the compiler process died (exit code {code}) compiling this cell"), None
                    worker.kill()
                    workers[position] = _Worker(ctx, config)
                elif time.monotonic() - worker.started >= options.timeout:
                    yield worker.index, _failed(cells[worker.index], "timeout",
                                                f"compile took longer than {options.timeout:g} s (--timeout)"), None
                    worker.kill()
                    workers[position] = _Worker(ctx, config)
    except BaseException:  # interrupted (SIGINT, SIGTERM, SIGHUP) or closed early: no compile is worth waiting for
        for worker in workers:
            worker.kill()
        raise
    finally:
        for worker in workers:
            worker.stop()


def _failed(cell: Cell, kind: str, message: str) -> CellResult:
    return CellResult(kernel=cell.kernel.name, case=cell.case, target=cell.target.name, status="error",
                      error=message, error_kind=kind)
