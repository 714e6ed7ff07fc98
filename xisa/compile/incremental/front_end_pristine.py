"""Triton's front end as the compile worker found it: the condition under which a front-end record can vouch.

A front-end record (`front_end_key.py`) holds what a kernel's code reads, not what Triton's code generator and
language do with it. That is the installed Triton's, unless a library changed it at import: a method of the code
generator or of `tl.tensor` swapped (even for another of Triton's own: `TritonSemantic.mul = TritonSemantic.add`), a
function of `tl.standard` or a backend's libdevice rebound, a name added to `CodeGenerator.builtin_namespace`.

So each worker remembers, before it loads any kernel, every namespace of Triton's language and compiler packages
and of `triton.runtime.jit`: each module's and each of its classes' names and the very objects under them, what
each dict, list or set held there (one level), and each function's code and defaults. A record vouches only
while all of it is as it was (compared by identity, C speed: asked once a cell). The first look also walks every
function and method there: its code must be in the installed Triton's files, the standard library's or the
toolchain's (by where the code is, not by its `__module__`); a process whose Triton was changed before that look
never vouches. A module of those packages imported after the look, or one gone, is a change too.
"""

from __future__ import annotations

import itertools
import operator
import os
import sys
import types
from typing import Any

from xisa.compile.incremental.installed import HeldObjects, is_toolchain_file, is_toolchain_module

_PACKAGES = ("triton.language", "triton.compiler", "triton._C")   # _C: the IR builder's methods, which a library
                                                                  # could swap (`ir.builder.create_fadd = ...`)
_JIT = "triton.runtime.jit"   # its registries fill as kernels load: its own containers are not held
_CONTAINERS = (dict, list, set)
_EXACT = frozenset((*_PACKAGES, _JIT))
_SUBMODULES = tuple(package + "." for package in _PACKAGES)
_CODE = operator.attrgetter("__code__", "__defaults__", "__kwdefaults__")


class _Held:
    """One look at the front end's namespaces."""

    def __init__(self):
        self.modules = _front_end_modules()
        self.namespaces = [HeldObjects(_space(name, vars(module))) for name, module in self.modules]
        self.classes = [(klass, HeldObjects(_space(name, _own(klass)))) for name, module in self.modules
                        for klass in list(vars(module).values())
                        if isinstance(klass, type) and klass.__module__ == name]
        spaces = [vars(module) for name, module in self.modules if name != _JIT and not _is_backend_compiler(name)] + \
            [vars(klass) for klass, _ in self.classes
             if klass.__module__ != _JIT and not _is_backend_compiler(klass.__module__)]
        # Python's own dicts are not Triton's: a module's `__builtins__`, and `sys.modules` where a module keeps it
        self.containers = [(value, _contents(value)) for space in spaces for key, value in list(space.items())
                           if type(value) in _CONTAINERS and key != "__builtins__" and value is not sys.modules]
        self.functions = [function for name, module in self.modules for value in list(vars(module).values())
                          for function in _functions_of(value, name)]
        self.code = _code_of(self.functions)

    def still(self) -> bool:
        """Everything held is as it was (asked once a cell: the walks over many items run at C speed)."""
        modules = _front_end_modules()
        if len(modules) != len(self.modules) or \
                not all(name == held_name and module is held_module
                        for (name, module), (held_name, held_module) in zip(modules, self.modules)):
            return False
        return all(held.same_as(_space(name, vars(module)))
                   for held, (name, module) in zip(self.namespaces, self.modules)) and \
            all(held.same_as(_space(klass.__module__, vars(klass))) or
                held.same_as(_space(klass.__module__, _own(klass))) for klass, held in self.classes) and \
            all(_contents(value) == contents for value, contents in self.containers) and \
            all(map(operator.is_, _code_of(self.functions), self.code))


_PRISTINE: list = []   # [pid, _Held] once this process looked, [pid, None] when it found a function not Triton's


def remember_pristine_front_end() -> None:
    """Take the look now (a compile worker, before its first load), with every module the front end runs imported;
    once a process: a worker forked from a process that looked takes its own (it re-imports the backends' compiler
    modules first, `xisa.compile.runner.prepare_worker_toolchain`, so the parent's look is not of its modules)."""
    if not _PRISTINE or _PRISTINE[0] != os.getpid():
        import triton.backends  # noqa: F401   (imports each backend's compiler module)
        import triton.compiler.code_generator  # noqa: F401
        import triton.language.extra.libdevice  # noqa: F401
        import triton.language.semantic  # noqa: F401
        import triton.runtime.jit  # noqa: F401

        held = _Held()
        _PRISTINE[:] = [os.getpid(), held if all(map(_is_tritons, held.functions)) else None]


def front_end_is_pristine() -> bool:
    """Triton's front end is as this process first found it, and that was the installed Triton's own."""
    remember_pristine_front_end()
    return _PRISTINE[1] is not None and _PRISTINE[1].still()


def in_held_front_end(module_name: str) -> bool:
    """A module whose namespace `front_end_is_pristine` holds (a JIT function of it is Triton's, as it was)."""
    return module_name in _EXACT or module_name.startswith(_SUBMODULES)


def held_object(value: Any) -> bool:
    """A function or class of the held front end, found under its qualified name in its module's namespace (its
    `__module__` and `__qualname__` can be set to anything: the object itself must be there)."""
    module_name = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or not in_held_front_end(module_name):
        return False
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        try:
            found = vars(found).get(part, _MISSING)
        except TypeError:
            return False
    return found is value


_MISSING = object()


def _front_end_modules() -> list[tuple[str, Any]]:
    modules = sys.modules
    # names first, at C speed: sys.modules holds thousands once torch is in, these packages a hundred
    names = sorted(name for name in list(modules) if type(name) is str and
                   (name in _EXACT or name.startswith(_SUBMODULES) or _is_backend_compiler(name)))
    return [(name, module) for name in names if isinstance(module := modules.get(name), types.ModuleType)]


def _is_backend_compiler(name: str) -> bool:
    """`triton.backends.compiler` and each backend's `compiler` module: the back end's code (its classes' methods
    and the module functions they call, `sm_arch_from_capability`, `min_dot_size`): a library rebinding one changes
    the code object while the front end's output stays the same, so the back-end store vouches only while they
    are as found."""
    return name.startswith("triton.backends.") and name.endswith(".compiler") and name.count(".") <= 3


def _space(module_name: str, namespace: dict) -> dict:
    """What is held of a namespace: all of it; of a backend's compiler module and its classes, the code (functions,
    classes, methods), not the state they fill lazily (`HIPBackend._torch_available`, set by the first compile)."""
    if not _is_backend_compiler(module_name):
        return namespace
    return {name: value for name, value in namespace.items()
            if callable(value) or isinstance(value, (staticmethod, classmethod, property))}


def _code_of(functions: list) -> list:
    """Each function's code, defaults and keyword defaults, in one flat list (compared item by item by identity)."""
    return list(itertools.chain.from_iterable(map(_CODE, functions)))


def _own(klass: type) -> dict:
    """A class's namespace less `__slotnames__`, which copyreg adds the first time one of its objects is copied or
    pickled (Triton deep-copies constexprs while it compiles): Python's cache, not a change."""
    return {name: value for name, value in vars(klass).items() if name != "__slotnames__"}


def _contents(value) -> Any:
    """What a dict, list or set holds, one level down (kept alive, so an equal item is the same one or equal)."""
    if type(value) is dict:
        return tuple(value.items())
    return tuple(value) if type(value) is list else frozenset(value)


def _is_tritons(function) -> bool:
    import triton

    file = function.__code__.co_filename
    if file in _TRITONS_FILES:
        return True
    if os.path.abspath(file).startswith(os.path.join(os.path.dirname(os.path.abspath(triton.__file__)), "")):
        _TRITONS_FILES.add(file)
        return True
    if file == "<string>":   # made from text by the standard library (a dataclass's __init__, a namedtuple's __new__)
        module = getattr(function, "__module__", None) or ""
        return module.partition(".")[0] in sys.stdlib_module_names or is_toolchain_module(module)
    return is_toolchain_file(file)   # where its code is, whatever its `__module__` says


_TRITONS_FILES: set[str] = set()   # code file names found inside the installed Triton


def _functions_of(value: Any, module_name: str):
    """A module-level function, or the methods of a class defined in that module."""
    members = list(vars(value).values()) if isinstance(value, type) and value.__module__ == module_name else []
    for member in [value, *members]:
        member = getattr(member, "__func__", member)
        if isinstance(getattr(member, "__code__", None), types.CodeType):
            yield member

