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
import enum
import functools
import hashlib
import inspect
import json
import sys
import types
from typing import Any

from xisa.compile.incremental.front_end_pristine import front_end_is_pristine, held_object, in_held_front_end

_PLAIN = (bool, int, float, complex, str, bytes, type(None))
# Attributes of a JITFunction that are launch-time state, not what the front end reads.
_LAUNCH_STATE = frozenset({"__doc__", "__globals__", "_hash_lock", "device_caches", "hash", "kernel",
                           "used_global_vals", "fn", "params", "signature", "pre_run_hooks", "launch_metadata",
                           "cache", "compiled_hook", "version"})


class _Refused(Exception):
    """The record cannot say what the front end reads of this value."""


def front_end_record(fn, bound_constexprs: dict, signature: dict, attrs: Any) -> str | None:
    """The SHA-256 of what the front end reads for this JITFunction and specialization, or None (refused)."""
    walk = _Walk()
    try:
        if not front_end_is_pristine():
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
        if held_object(fn):   # tl.sum's combine: Triton's, held as it was
            return f"toolchain:{fn.__module__}.{fn.__qualname__}"
        if type(fn) is not _triton_types()[2] or getattr(fn, "_repr", None) is not None:
            raise _Refused   # a constexpr_function (Python run inside the trace), a subclass whose methods the
                             # front end calls (`parse`), or a name made by the project's code
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
        """A name and the attributes followed from it, as the front end finds them: each step's value recorded. A
        module's attribute is read from its namespace (one with a module `__getattr__` that lacks it refuses: what
        that answers depends on when it is asked); a chain may go on past a value only where the value is recorded
        whole (a namedtuple, a constexpr, a Triton dtype, a class of Triton's held front end)."""
        head = chain[0]
        if head in scope:
            value = scope[head]
        elif hasattr(builtins, head):
            return ["builtin", head, self.value(getattr(builtins, head))]
        else:
            return ["absent"]
        steps = [self._step(value, last=len(chain) == 1)]
        for position, attribute in enumerate(chain[1:], 2):
            if isinstance(value, types.ModuleType):
                namespace = vars(value)
                if attribute not in namespace and "__getattr__" in namespace:
                    raise _Refused
                value = namespace.get(attribute, _ABSENT)
            elif _is_namedtuple_class(value):
                value = getattr(value, attribute, _ABSENT)
            else:
                if not _recorded_whole(value):
                    raise _Refused   # the front end reads an attribute of it the record does not hold
                break
            if value is _ABSENT:
                steps.append(["absent"])
                break
            steps.append(self._step(value, last=position == len(chain)))
        return steps

    def _step(self, value: Any, *, last: bool) -> Any:
        """A module whose attribute the chain reads next is that module (the attribute is recorded as the next
        step); any other value, a module the code uses whole included, is recorded by value (`value` refuses a
        project's module: what the code reads of it, `getattr(cfg, "X")` or a callee's `m.X`, is not in the record)."""
        if not last and isinstance(value, types.ModuleType):
            return ["module", value.__name__]
        return self.value(value)

    def value(self, value: Any) -> Any:
        """`value` as JSON that two values the front end tells apart never share; `_Refused` when it cannot. Types
        are matched exactly: a subclass (an `int` with its own `__add__`, a `float` with its own `__repr__`, a
        constexpr, dtype or JITFunction subclass of the project's) brings behaviour the record does not hold."""
        constexpr, dtype, JITFunction = _triton_types()
        kind = type(value)
        if kind in _PLAIN:
            return [kind.__name__, repr(value)]
        if kind in (tuple, list):
            return [kind.__name__, [self.value(v) for v in value]]
        if kind in (set, frozenset):
            return [kind.__name__, sorted((self.value(v) for v in value), key=repr)]
        if kind is dict:
            return ["dict", sorted(([self.value(k), self.value(v)] for k, v in value.items()), key=repr)]
        if _is_namedtuple_class(kind):
            return ["namedtuple", self._class(kind), [self.value(v) for v in value]]
        if kind is constexpr:
            return ["constexpr", self.value(value.value)]
        if kind is JITFunction:
            return ["jit", self.callable(value)]
        if kind is types.ModuleType:
            if not in_held_front_end(value.__name__):
                raise _Refused   # a module used whole: what is read of it is not in the record (tl's is held)
            return ["module", value.__name__]
        if isinstance(value, dtype) and held_object(kind):   # every field (a pointer's address space is not in
            return [f"{kind.__module__}.{kind.__qualname__}", str(value),   # its text)
                    sorted([k, self.value(v)] for k, v in vars(value).items())]
        if _is_torch_dtype(value):
            return [f"{kind.__module__}.{kind.__qualname__}", str(value), repr(value)]
        if isinstance(value, enum.Enum) and held_object(kind):   # tl.dtype's signedness
            return ["enum", kind.__module__, kind.__qualname__, value.name, self.value(value.value)]
        if value is _EMPTY:
            return ["empty"]
        if isinstance(value, type) and _is_namedtuple_class(value):
            return ["namedtuple class", self._class(value)]
        if held_object(value) or _builtin(value):
            return ["toolchain", value.__module__, value.__qualname__]
        raise _Refused   # a project's function or class, or the toolchain's outside the held front end

    def _class(self, klass: type) -> list:
        """A namedtuple class: its fields, defaults and every other attribute of it and its bases, by value (a
        `SCALE = 2.0` or `helper = some_jit` in its body is read through an instance); a method of its own, a
        property or anything else `value` cannot record refuses."""
        attributes = []
        for base in klass.__mro__:
            if base in (tuple, object) or base.__module__ == "typing":
                continue
            made = "_fields" in vars(base)   # the class namedtuple() made: its machinery and field accessors
            if made and not _made_by_namedtuple(base):
                raise _Refused
            for name, attribute in vars(base).items():
                if name in _CLASS_BOOKKEEPING or (made and (name in _NAMEDTUPLE_MADE or name in base._fields)):
                    continue
                attributes.append([base.__qualname__, name, self.value(attribute)])
        return [klass.__module__, klass.__qualname__, list(klass._fields),
                self.value(dict(getattr(klass, "_field_defaults", {}))), attributes]


# What every class body holds, and what namedtuple() (or typing.NamedTuple) puts in the class it makes.
_CLASS_BOOKKEEPING = frozenset({"__module__", "__qualname__", "__doc__", "__slots__", "__dict__", "__weakref__",
                                "__annotations__", "__orig_bases__", "__parameters__"})
_NAMEDTUPLE_MADE = frozenset({"_fields", "_field_defaults", "__new__", "_make", "_replace", "__repr__", "_asdict",
                              "__getnewargs__", "__match_args__"})
_ABSENT = object()
_EMPTY = inspect.Parameter.empty   # a parameter without a default or an annotation


@functools.lru_cache(maxsize=1)
def _triton_types() -> tuple[type, type, type]:
    from triton.language import constexpr, dtype
    from triton.runtime.jit import JITFunction

    return constexpr, dtype, JITFunction


def _is_namedtuple_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")


def _made_by_namedtuple(klass: type) -> bool:
    """The class `collections.namedtuple` made (directly or for typing.NamedTuple): each field read by a
    `_tuplegetter` (the item, which the record holds) and its methods collections' own, not a tuple subclass that
    only says `_fields`."""
    import collections

    own = vars(klass)
    fields = own.get("_fields")
    if type(fields) is not tuple or not all(type(vars(klass).get(f)) is collections._tuplegetter for f in fields):
        return False
    for name in _NAMEDTUPLE_MADE - {"_fields", "_field_defaults", "__match_args__"}:
        method = getattr(own.get(name), "__func__", own.get(name))
        code = getattr(method, "__code__", None)
        if name in own and (code is None or (code.co_filename != collections.__file__ and not (
                name == "__new__" and code.co_filename == "<string>" and
                method.__module__ == f"namedtuple_{klass.__name__}"))):
            return False
    return True


def _recorded_whole(value: Any) -> bool:
    """A value whose attributes the record holds: what the front end reads of it cannot differ unseen."""
    constexpr, dtype, _ = _triton_types()
    return _is_namedtuple_class(type(value)) or type(value) is constexpr or \
        (isinstance(value, dtype) and held_object(type(value))) or (isinstance(value, type) and held_object(value))


def _builtin(value: Any) -> bool:
    """A function or type of the interpreter's own (C: its names cannot be set), found under its name in its
    module."""
    if not isinstance(value, (types.BuiltinFunctionType, type)) or \
            (isinstance(value, type) and value.__flags__ & _HEAPTYPE):
        return False
    module = sys.modules.get(getattr(value, "__module__", None) or "")
    return module is not None and vars(module).get(value.__qualname__) is value


_HEAPTYPE = 1 << 9   # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, whose names can be set


def _is_torch_dtype(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.dtype)


_REFERENCES: dict[str, tuple[tuple[str, ...], ...]] = {}


def _references(source: str) -> tuple[tuple[str, ...], ...]:
    """Every name the source loads, with the attribute chain read from it (`tl.math.exp` -> (tl, math, exp)); locals
    too (a local that shadows a global is resolved anyway: only stricter). Kept by source text."""
    found = _REFERENCES.get(source)
    if found is None:
        chains: set[tuple[str, ...]] = set()
        bases: set[int] = set()   # Name nodes read as a chain's start (ast.walk meets the chain first)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute):
                chain, base = [node.attr], node.value
                while isinstance(base, ast.Attribute):
                    chain.insert(0, base.attr)
                    bases.add(id(base))
                    base = base.value
                if isinstance(base, ast.Name) and id(node) not in bases:
                    chains.add((base.id, *chain))
                    bases.add(id(base))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in bases:
                chains.add((node.id,))   # used whole: passed on, called, or given to getattr
        found = _REFERENCES[source] = tuple(sorted(chains))
    return found
