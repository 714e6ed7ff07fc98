"""The GPU driver Triton sees while a kernel module loads or a cell compiles: it answers for the cell's target.

`target_driver(target)` makes xisa's stand-in Triton's active driver and answers torch.cuda's device queries
(`xisa.compile.gpu.device_answers`) for the target, and puts both back after. `answer_device_queries(name)` does the
same for the rest of a process (`xisa capture` on a machine without the target's GPU, `XISA_CAPTURE_AS`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from xisa.capture_site._xisa_capture_hook import spec_from_other_finders
from xisa.compile.gpu.device_answers import DeviceAnswers, UnansweredDeviceQuery, clear_torch_caches, current_answers
from xisa.compile.gpu.torch_answers import torch_answers
from xisa.compile.worker.platform_facts import DEVICE, GPU_TARGET
from xisa.errors import in_chain


class TargetUtils:
    """`driver.active.utils`: the device's properties with the backend's keys; nothing that needs a GPU."""

    def __init__(self, answers: DeviceAnswers):
        self._answers = answers

    @property
    def _now(self) -> DeviceAnswers:   # kept by a module from one load, it answers as the target under way
        return current_answers(self._answers)

    def get_device_properties(self, device):
        return self._now.triton_properties(device)

    def get_device_capability(self, device):
        query = f"triton.runtime.driver.active.utils.get_device_capability({device!r})"
        self._now.device_index(device, query)
        return self._now.capability(query)

    def get_current_device(self):
        self._now.note("triton.runtime.driver.active.utils.get_current_device()")
        return 0

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise self._now.refuse(f"triton.runtime.driver.active.utils.{name}")


class LoadTargetDriver:
    """Triton's active driver while a kernel module loads or a cell compiles: `get_current_target()` is the target's
    GPUTarget (a module sizing a kernel from it gets that target's value, and its load serves only targets of the
    same GPUTarget), the device queries are the target's (`DeviceAnswers`), and `get_active_torch_device()` is the device a launch
    would use. What needs a GPU (streams, benchmarks, launchers) is refused in one line naming it: an answer from
    this machine's own GPU would be another target's."""

    def __init__(self, target, answers: DeviceAnswers | None = None):
        self.answers = answers if answers is not None else DeviceAnswers(target)
        self.utils = TargetUtils(self.answers)

    @property
    def _now(self) -> DeviceAnswers:   # kept by a module from one load, it answers as the target under way
        return current_answers(self.answers)

    def give_target(self) -> None:
        """An import hook is given the target: whatever it does with it is this device's."""
        self.answers.note("the import hook's target", DEVICE)

    def get_current_target(self):
        now = self._now
        if now.target is None:
            raise now.refuse("triton.runtime.driver.active.get_current_target()")
        now.note("triton.runtime.driver.active.get_current_target()", GPU_TARGET)
        return now.target.gpu_target()

    def get_current_device(self):
        self._now.note("triton.runtime.driver.active.get_current_device()")
        return 0

    def set_current_device(self, device):
        self._now.device_index(device, f"triton.runtime.driver.active.set_current_device({device!r})")

    def get_device_capability(self, device=None):
        query = f"triton.runtime.driver.active.get_device_capability({'' if device is None else repr(device)})"
        self._now.device_index(device, query)
        return self._now.capability(query)

    def get_device_interface(self):
        import torch

        self._now.note("triton.runtime.driver.active.get_device_interface()")
        return torch.cuda   # answered for the target while this driver is active (torch_answers)

    def get_active_torch_device(self):
        import torch

        return torch.device("cuda")   # what a launch on either vendor's GPU uses (ROCm's torch says cuda too)

    def is_active(self) -> bool:
        return True

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise self._now.refuse(f"triton.runtime.driver.active.{name}")


@contextlib.contextmanager
def target_driver(target) -> Iterator[LoadTargetDriver]:
    """Triton's driver and torch.cuda answer for `target` (None: a load for no particular target, which answers
    nothing) until the block ends. A query with no answer is a TargetError naming it, also when the library
    caught the UnansweredDeviceQuery and went on (its fallback would compile another kernel than the GPU's)."""
    from triton.runtime.driver import driver

    saved = driver._active
    _torch_caches_for(target)
    stand_in = LoadTargetDriver(target)
    driver.set_active(stand_in)
    refused: UnansweredDeviceQuery | None = None
    try:
        with torch_answers(stand_in.answers):
            yield stand_in
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        refused = exc if isinstance(exc, UnansweredDeviceQuery) else _first(stand_in.answers.refused)
        if refused is None:
            raise
    finally:
        driver._active = saved
        _remember_askers(stand_in.answers)
    refused = refused or _first(stand_in.answers.refused)
    if refused is not None:
        raise refused.error from None


def _torch_caches_for(target) -> None:
    """torch's modules that asked keep what they cached for the target they last answered: cleared for another."""
    from xisa.compile.worker.state import WORKER

    name = getattr(target, "name", None)
    if name is not None and name != WORKER.torch_answered:
        clear_torch_caches(WORKER.torch_askers)
        WORKER.torch_answered = name


def _first(refused: list[UnansweredDeviceQuery]) -> UnansweredDeviceQuery | None:
    return refused[0] if refused else None


def _remember_askers(answers: DeviceAnswers) -> None:
    """The packages that asked keep what they were told (module globals, functools.cache): every later load in
    this process imports them anew (`xisa.compile.launch.loader`), so no target's answers reach another's compile."""
    from xisa.compile.worker.state import WORKER

    WORKER.learn_device_packages(answers.askers)


def answer_device_queries(target_name: str, target_dirs: list[Path] | None = None,
                          import_hooks: list[Path] | None = None) -> LoadTargetDriver:
    """Answer the device queries of the rest of this process as `target_name` would (`xisa capture` with
    XISA_CAPTURE_AS=<target> on a machine without that GPU): Triton's driver and torch.cuda, from the target
    file found in `target_dirs` (default: the project of the working folder). The project's `import_hooks` are
    entered for the process once torch is imported (after xisa's answers, so a hook's stubs win, as in a load). An
    unanswerable query raises UnansweredDeviceQuery, which a library cannot swallow; one that stops the program is
    its one line on stderr, not a traceback (`_report_refusals`)."""
    from xisa.spec.project import load_project
    from xisa.spec.targets import load_targets, unknown_target

    if target_dirs is None:
        project = load_project(cwd=Path.cwd())
        targets = load_targets(list(project.target_dirs), root=project.root)
    else:
        targets = load_targets(list(target_dirs))
    if target_name not in targets:
        raise unknown_target(target_name, targets)
    stand_in = LoadTargetDriver(targets[target_name], DeviceAnswers(targets[target_name], capturing=True))
    _report_refusals(stand_in.answers)

    def answer_torch() -> None:
        answering = torch_answers(stand_in.answers)
        answering.__enter__()    # for the process's lifetime: never exited (held, so it is not collected and undone)
        _PROCESS_ANSWERS.append(answering)
        if import_hooks:
            from xisa.compile.gpu.import_hooks import enter_for_process
            from xisa.errors import XisaError

            try:
                enter_for_process(list(import_hooks), targets[target_name], stand_in.answers)
            except XisaError as exc:   # a hook that does not load: the program would run unstubbed
                print(f"xisa: error: {exc}", file=sys.stderr, flush=True)
                os._exit(2)

    def activate_driver() -> None:
        from triton.runtime.driver import driver

        driver.set_active(stand_in)

    # each as soon as its module is imported: a program reads torch.version.hip before it imports Triton (vLLM's
    # platform probe, SGLang's is_hip()), and would see this machine's build
    for name, then in (("torch", answer_torch), ("triton.runtime.driver", activate_driver)):
        if name in sys.modules:
            then()
        else:
            sys.meta_path.insert(0, _AfterImport(name, then))
    return stand_in


def _report_refusals(answers: DeviceAnswers) -> None:
    """A refusal that stops the captured program is its one line on stderr (`xisa: error: LIBRARY:LINE: ... (fix:
    ...)`), not a traceback through torch; one the program swallowed and went on past (a bare `except:`, a test
    runner reporting the test) is named once more as the process ends (a warning: what followed ran on a fallback,
    and the exit code is the program's)."""
    import atexit
    import threading

    reported: set[str] = set()

    def refusal_in(exc: BaseException | None) -> UnansweredDeviceQuery | None:
        return in_chain(exc, UnansweredDeviceQuery)

    def report(line: str, prefix: str = "xisa: error: ") -> None:
        if line not in reported:
            reported.add(line)
            print(f"{prefix}{line}", file=sys.stderr, flush=True)

    previous_hook, previous_thread_hook = sys.excepthook, threading.excepthook

    def excepthook(kind, exc, traceback) -> None:
        refused = refusal_in(exc)
        if refused is None:
            return previous_hook(kind, exc, traceback)
        report(str(refused))

    def thread_excepthook(args) -> None:
        refused = refusal_in(args.exc_value)
        if refused is None:
            return previous_thread_hook(args)
        report(str(refused))

    def at_exit() -> None:
        for refused in answers.refused:
            report(str(refused), "xisa: warning: the program went on past a refused device query: ")

    sys.excepthook, threading.excepthook = excepthook, thread_excepthook
    atexit.register(at_exit)


_PROCESS_ANSWERS: list = []


class _AfterImport:
    """A meta-path finder that runs `then` right after module `name` has executed (once), so answering the device
    imports neither torch nor Triton before the program does (as xisa/capture_site's own finder patches)."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        spec = spec_from_other_finders(self, name, path, target)
        if spec is None:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        sys.meta_path.remove(self)
        loader, then = spec.loader, self.then
        original = loader.exec_module

        def exec_module(module):
            original(module)
            then()

        loader.exec_module = exec_module
        return spec
