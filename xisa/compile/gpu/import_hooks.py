"""`[tool.xisa] import_hooks`: a project's own stubs for what a library asks the GPU that xisa cannot answer.

Each file defines `xisa_import_hook(target)`, a context manager given the Triton `GPUTarget` being answered for. It is
entered around every kernel module's load (`xisa.compile.launch.loader`), around each cell's bind and compile
(`hooks_entered`: a heuristic or an autotuner's pruning asks the device then, cut-cross-entropy's perf model runs
nvidia-smi) and, under `xisa capture --as TARGET`, for the whole captured program once torch is imported
(`enter_for_process`), so one stub serves the compile and the capture.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from xisa.compile.worker.platform_facts import DEVICE
from xisa.errors import SpecError

IMPORT_HOOK = "xisa_import_hook"


def import_hook(hook: Path, target, answers):
    """A `[tool.xisa] import_hooks` file's `xisa_import_hook(target)` context manager, entered around the kernel
    module's import (it stubs what the module asks the GPU at import, and undoes it on exit). It is given the
    load's GPUTarget, so a load with hooks is one per target. `xisa capture --as` enters it too, for the whole
    captured program (`enter_for_process`)."""
    where = {"path": "pyproject.toml", "field": "tool.xisa.import_hooks"}
    loader_spec = importlib.util.spec_from_file_location(f"xisa_import_hook_{hook.stem}", hook)
    module = importlib.util.module_from_spec(loader_spec)
    try:
        loader_spec.loader.exec_module(module)
        factory = getattr(module, IMPORT_HOOK, None)
        if not callable(factory):
            raise SpecError(f"{hook.name} defines no {IMPORT_HOOK}(target)", **where,
                            fix=f"define @contextlib.contextmanager def {IMPORT_HOOK}(target): ... yield")
        if target is not None:   # whatever the hook does with it is this device's: the load serves this target only
            answers.note("the import hook's target", DEVICE)
        manager = factory(target.gpu_target() if target is not None else None)
        if not (hasattr(manager, "__enter__") and hasattr(manager, "__exit__")):
            raise SpecError(f"{hook.name}: {IMPORT_HOOK}(target) returned no context manager", **where,
                            fix="decorate it with @contextlib.contextmanager and yield once")
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"the import hook {hook.name} failed: {type(exc).__name__}: {first_line(exc)}",
                        **where) from None
    return _entered_hook(hook, manager, where)


@contextlib.contextmanager
def _entered_hook(hook: Path, manager, where: dict) -> Iterator[None]:
    try:
        manager.__enter__()
    except Exception as exc:
        raise SpecError(f"the import hook {hook.name} failed: {type(exc).__name__}: {first_line(exc)}",
                        **where) from None
    with contextlib.ExitStack() as stack:
        stack.push(manager)
        yield


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


_ENTERED: list = []   # the hooks a captured process entered: held for its lifetime, never exited


def enter_for_process(hooks: list[Path], target, answers) -> None:
    """Enter each hook for the rest of this process (a captured program answered as `target`)."""
    for hook in hooks:
        entered = import_hook(hook, target, answers)
        entered.__enter__()
        _ENTERED.append(entered)


@contextlib.contextmanager
def hooks_entered(spec, target) -> Iterator[None]:
    """`spec`'s import hooks entered for `target` while its cell binds and compiles (inside the answering context:
    the answers under way note that the hook was given the target)."""
    from xisa.compile.gpu.device_answers import DeviceAnswers, current_answers

    if not spec.import_hooks or target is None:
        yield
        return
    answers = current_answers(DeviceAnswers(target))
    with contextlib.ExitStack() as stack:
        for hook in spec.import_hooks:
            stack.enter_context(import_hook(hook, target, answers))
        yield
