"""What Triton's front end reads of a kernel, as one canonical record: the key that lets a cell skip it (issue 24, item 1).

After an edit anywhere in a library whose `__init__` imports every op, each cell is loaded again and its front end
(`ast_to_ttir`, ~90 ms a cell) runs only to find the TTIR the back-end store already knows. The front end is a
function of: each @triton.jit function it reaches (its source, file, lines, columns, signature with defaults and
annotations, flags), every name those functions' code looks up and every attribute chain it follows from a module,
resolved now, by value; the bound specialization; and what `backend_store.backend_context` holds (options, target,
environment, toolchain, xisa). Triton's own key (`JITFunction.cache_key`) leaves out module attributes (`cfg.BLOCK`),
callees' default values and non-constexpr values: this record holds them.

It is strict, not complete: a value whose effect on the front end this walk cannot see makes it refuse (`None`),
and that cell runs its front end as before. Refused: a `constexpr_function` (Python run at compile time, with
arguments only the trace knows), a custom `repr`, an aggregate or other class of the project, any object that is
not plain data, a dtype, a module or a function; and any front-end code that is not the installed Triton's (a
library that patched the code generator or the language).
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import inspect
import json
import operator
import os
import types
from typing import Any

from xisa.compile.installed import HeldObjects, is_toolchain_file, is_toolchain_module

_PLAIN = (bool, int, float, complex, str, bytes, type(None))
# Attributes of a JITFunction that are launch-time state, not what the front end reads.
_LAUNCH_STATE = frozenset({"__doc__", "__globals__", "_hash_lock", "device_caches", "hash", "kernel",
                           "used_global_vals", "fn", "params", "signature", "pre_run_hooks", "launch_metadata",
                           "cache", "compiled_hook", "version"})
# Modules whose code is Triton's front end: all of it must come from the installed Triton's files.
_FRONT_END_MODULES = ("triton.compiler.code_generator", "triton.compiler.compiler", "triton.language.core",
                      "triton.language.semantic", "triton.language.standard", "triton.language.math",
                      "triton.runtime.jit")
_STANDARD = frozenset({"builtins", "math", "copy", "typing", "functools", "collections"})


class _Refused(Exception):
    """The record cannot say what the front end reads of this value."""


def front_end_record(fn, bound_constexprs: dict, signature: dict, attrs: Any) -> str | None:
    """The SHA-256 of what the front end reads for this JITFunction and specialization, or None (refused)."""
    walk = _Walk()
    try:
        if not _front_end_is_tritons():
            return None
        record = {"kernel": walk.callable(fn), "constexprs": [[repr(k), walk.value(v)] for k, v in
                                                              sorted(bound_constexprs.items(), key=repr)],
                  "signature": [[repr(k), repr(v)] for k, v in sorted(signature.items(), key=repr)],
                  "attrs": walk.value(_plain_attrs(attrs)), "functions": walk.functions}
    except Exception:   # refused, or a Triton whose JIT objects this walk does not know: the front end runs
        return None
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _plain_attrs(attrs: Any) -> Any:
    """Triton's specialization attributes (`{(0,): [['tt.divisibility', 16]]}`) as nested tuples."""
    if isinstance(attrs, dict):
        return tuple(sorted(((k, _plain_attrs(v)) for k, v in attrs.items()), key=repr))
    if isinstance(attrs, (list, tuple)):
        return tuple(_plain_attrs(v) for v in attrs)
    return attrs


class _Walk:
    """One record: each JIT function reached once (by identity), its references resolved by value."""

    def __init__(self):
        self.functions: dict[str, Any] = {}
        self._seen: dict[int, str] = {}

    def callable(self, fn) -> str:
        """A JIT function of the project: recorded whole under a name, its name returned (toolchain ones by name)."""
        from triton.runtime.jit import ConstexprFunction

        if is_toolchain_module(getattr(fn, "__module__", "") or ""):
            return f"toolchain:{fn.__module__}.{fn.__qualname__}"
        if isinstance(fn, ConstexprFunction) or getattr(fn, "_repr", None) is not None:
            raise _Refused   # Python that runs inside the trace, or a name made by the project's code
        if id(fn) in self._seen:
            return self._seen[id(fn)]
        name = f"{type(fn).__module__}.{type(fn).__qualname__}:{fn.__module__}.{fn.__qualname__}#{len(self._seen)}"
        self._seen[id(fn)] = name
        self.functions[name] = None   # reserved: a recursion refers to it by name
        self.functions[name] = self._function(fn)
        return name

    def _function(self, fn) -> dict:
        python = fn.fn
        entry = {attr: self.value(value) for attr, value in sorted(vars(fn).items()) if attr not in _LAUNCH_STATE}
        entry["signature"] = [[p.name, str(p.kind), self.value(p.default), self.value(p.annotation)]
                              for p in fn.signature.parameters.values()]
        entry["defaults"] = self.value(python.__defaults__)
        entry["kwdefaults"] = self.value(dict(python.__kwdefaults__ or {}))
        entry["code_file"] = python.__code__.co_filename
        scope = fn.get_capture_scope()
        entry["names"] = [[chain, self._resolved(scope, chain)] for chain in _references(fn.src)]
        return entry

    def _resolved(self, scope: dict, chain: tuple[str, ...]) -> Any:
        """A name and the attributes followed from it, as the front end finds them: each step's value recorded."""
        head = chain[0]
        if head in scope:
            value = scope[head]
        elif hasattr(builtins, head):
            return ["builtin", head]
        else:
            return ["absent"]
        steps = [self.value(value)]
        for attribute in chain[1:]:
            if not isinstance(value, types.ModuleType) and not _is_namedtuple_class(value):
                break   # a local's attribute, a tensor method: not resolved from the module
            value = getattr(value, attribute, _ABSENT)
            if value is _ABSENT:
                steps.append(["absent"])
                break
            steps.append(self.value(value))
        return steps

    def value(self, value: Any) -> Any:
        """`value` as JSON that two values the front end tells apart never share; `_Refused` when it cannot."""
        constexpr, dtype, JITCallable = _triton_types()
        if isinstance(value, _PLAIN):
            return [type(value).__name__, repr(value)]
        if type(value) in (tuple, list):
            return [type(value).__name__, [self.value(v) for v in value]]
        if type(value) in (set, frozenset):
            return [type(value).__name__, sorted((self.value(v) for v in value), key=repr)]
        if type(value) is dict:
            return ["dict", sorted(([self.value(k), self.value(v)] for k, v in value.items()), key=repr)]
        if isinstance(value, tuple) and hasattr(type(value), "_fields"):   # a namedtuple
            return ["namedtuple", self._class(type(value)), [self.value(v) for v in value]]
        if isinstance(value, constexpr):
            return ["constexpr", self.value(value.value)]
        if isinstance(value, JITCallable):
            return ["jit", self.callable(value)]
        if isinstance(value, types.ModuleType):
            return ["module", value.__name__]
        if isinstance(value, dtype) or _is_torch_dtype(value):
            return [f"{type(value).__module__}.{type(value).__qualname__}", str(value), repr(value)]
        if value is _EMPTY:
            return ["empty"]
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
            return self._toolchain_object(value)
        raise _Refused

    def _toolchain_object(self, value) -> list:
        module = getattr(value, "__module__", None) or ""
        if isinstance(value, type) and _is_namedtuple_class(value) and not is_toolchain_module(module):
            return ["namedtuple class", self._class(value)]
        if module in _STANDARD or is_toolchain_module(module):
            if module == "builtins" and getattr(builtins, value.__name__, None) is not value:
                raise _Refused
            return ["toolchain", module, value.__qualname__]
        raise _Refused   # a project's plain function or class: what it does is not in the record

    def _class(self, klass: type) -> list:
        """A namedtuple class: its fields and defaults; one with methods of its own is refused."""
        own = {k: v for k, v in vars(klass).items() if isinstance(v, (types.FunctionType, classmethod, staticmethod,
                                                                         property))}
        if any(getattr(v, "__module__", "collections") != "collections" and k not in ("__new__", "__repr__",
               "_make", "_replace", "__getnewargs__", "_asdict") for k, v in own.items()):
            raise _Refused
        return [klass.__module__, klass.__qualname__, list(klass._fields),
                self.value(dict(getattr(klass, "_field_defaults", {})))]


_ABSENT = object()
_EMPTY = inspect.Parameter.empty   # a parameter without a default or an annotation


@functools.lru_cache(maxsize=1)
def _triton_types() -> tuple[type, type, type]:
    from triton.language import constexpr, dtype
    from triton.runtime.jit import JITCallable

    return constexpr, dtype, JITCallable


def _is_namedtuple_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")


def _is_torch_dtype(value: Any) -> bool:
    torch = __import__("sys").modules.get("torch")
    return torch is not None and isinstance(value, torch.dtype)


_REFERENCES: dict[str, tuple[tuple[str, ...], ...]] = {}


def _references(source: str) -> tuple[tuple[str, ...], ...]:
    """Every name the source loads, with the attribute chain read from it (`tl.math.exp` -> (tl, math, exp)); locals
    too (a local that shadows a global is resolved anyway: only stricter). Kept by source text."""
    found = _REFERENCES.get(source)
    if found is None:
        chains: set[tuple[str, ...]] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute):
                chain, base = [node.attr], node.value
                while isinstance(base, ast.Attribute):
                    chain.insert(0, base.attr)
                    base = base.value
                if isinstance(base, ast.Name):
                    chains.add((base.id, *chain))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                chains.add((node.id,))
        found = _REFERENCES[source] = tuple(sorted(chains))
    return found


def _front_end_is_tritons() -> bool:
    """No function or method of Triton's front-end modules is a project's: each comes from the installed Triton's
    files or from the standard library or toolchain it imports (`functools.wraps`, torch). Asked once a cell: the
    answer is walked again only when a module's or class's namespace or a function's code is not what it was."""
    import sys

    modules = [sys.modules.get(name) for name in _FRONT_END_MODULES]
    last = _LAST_FRONT_END
    if last and all(held.same_as(vars(module)) if module is not None else held is None
                    for held, module in zip(last[0], modules)) and \
            all(held.same_as(vars(klass)) for held, klass in last[1]) and \
            all(map(operator.is_, (f.__code__ for f in last[2]), last[3])):
        return True
    held = [HeldObjects(vars(module)) if module is not None else None for module in modules]
    classes = [(HeldObjects(vars(value)), value) for name, module in zip(_FRONT_END_MODULES, modules)
               if module is not None for value in list(vars(module).values())
               if isinstance(value, type) and value.__module__ == name]
    functions = [function for name, module in zip(_FRONT_END_MODULES, modules) if module is not None
                 for value in list(vars(module).values()) for function in _functions_of(value, name)]
    if not all(map(_is_tritons, functions)):
        _LAST_FRONT_END.clear()
        return False
    _LAST_FRONT_END[:] = [held, classes, functions, tuple(f.__code__ for f in functions)]
    return True


# The namespaces, classes, functions and code objects of the last walk that found only Triton's own code.
_LAST_FRONT_END: list = []


def _is_tritons(function) -> bool:
    import triton

    file = function.__code__.co_filename
    if file in _TRITONS_FILES:
        return True
    if os.path.abspath(file).startswith(os.path.join(os.path.dirname(os.path.abspath(triton.__file__)), "")):
        _TRITONS_FILES.add(file)
        return True
    if file == "<string>":   # made from text by the standard library (a dataclass's __init__, a namedtuple's __new__)
        return _standard_or_toolchain(getattr(function, "__module__", None) or "")
    return is_toolchain_file(file)   # where its code is, whatever its `__module__` says


_TRITONS_FILES: set[str] = set()   # code file names found inside the installed Triton


def _standard_or_toolchain(module: str) -> bool:
    import sys

    return module.partition(".")[0] in sys.stdlib_module_names or is_toolchain_module(module)


def _functions_of(value: Any, module_name: str):
    """A module-level function, or the methods of a class defined in that module."""
    members = list(vars(value).values()) if isinstance(value, type) and value.__module__ == module_name else []
    for member in [value, *members]:
        member = getattr(member, "__func__", member)
        if isinstance(getattr(member, "__code__", None), types.CodeType):
            yield member
