"""`xisa capture`'s hook, part two: the source text of a kernel no other machine can import.

A kernel generated at run time (FlagGems' `pointwise_dynamic` writes a module into `~/.flaggems/code_cache/`
and loads it as `_gen_module_<hash>_rank_N` without putting it in `sys.modules`; other libraries `exec`
source under a `<string>`-like name) lives in a module that exists on this machine only, maybe only for
this process. For such a kernel the hook keeps, once per kernel and process:
- the module's text as Triton read it (`linecache`, which `inspect.getsourcelines` filled when the
  `@triton.jit` decorator ran: the text survives the file's deletion), written content-addressed as
  `source-<sha256>.py` beside the launch records;
- the module globals its functions read that the text does not bind, or that were rebound after the
  module ran (FlagGems copies the scalar function's module globals into the generated module), as imports
  the kept copy can repeat (`epilogue`), and those it cannot (`unresolved`);
- the code that called the generated kernel: the innermost frame outside Triton, the hook, kernel
  wrappers and generated code (for FlagGems, `PointwiseDynamicFunction.__call__`), its file's sha256 and
  its distribution's version, so a later `xisa check` can tell that the generator changed.

Like `sitecustomize`, this module runs in a foreign program: it imports nothing from xisa and nothing that
the program has not already imported, and every failure is the caller's to note, never the program's.
"""

import hashlib
import importlib.machinery
import linecache
import os
import re
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
STARTUP_PATH = [os.path.abspath(p or os.curdir) for p in sys.path]   # before the program adds any folder


class SourceRecorder:
    def __init__(self, folder: str):
        self.folder = folder
        self.known: dict = {}       # id(python function) -> (function, description or None)
        self.distributions = None   # top-level package -> distribution names, read once

    def describe(self, kernel) -> "dict | None":
        """None for a kernel whose module imports by name, fresh, from the file it came from; else what the
        spec writer needs to keep its source (see the module docstring)."""
        fn = kernel.fn
        known = self.known.get(id(fn))
        if known is not None and known[0] is fn:
            return known[1]
        try:
            why = not_importable(fn.__module__, fn.__code__.co_filename)
            described = None if why is None else self.keep(kernel, fn, why)
        except Exception as exc:   # the launch is still recorded; the spec writer says the source was not kept
            described = {"why": "unknown", "error": f"{type(exc).__name__}: {exc}"}
        self.known[id(fn)] = (fn, described)
        return described

    def keep(self, kernel, fn, why: str) -> dict:
        text, complete = module_text(kernel, fn)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        path = os.path.join(self.folder, f"source-{digest}.py")
        if not os.path.exists(path):
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, path)
        epilogue, unresolved = rebound_globals(text, fn) if complete else ([], [])
        try:   # a file written while the program ran is generated, even inside the project
            written = os.stat(fn.__code__.co_filename).st_mtime_ns
        except OSError:
            written = None
        return {"why": why, "sha256": digest, "complete": complete, "module": fn.__module__, "written_ns": written,
                "filename": os.path.basename(fn.__code__.co_filename), "epilogue": epilogue,
                "unresolved": unresolved, "launched_from": self.caller(fn)}

    def caller(self, fn) -> "dict | None":
        """The innermost frame outside Triton, this hook, kernel wrappers and the generated module itself."""
        import triton

        triton_dir = os.path.dirname(os.path.abspath(triton.__file__))
        generated = os.path.abspath(fn.__code__.co_filename)
        frame = sys._getframe(1)
        while frame is not None:
            file = os.path.abspath(frame.f_code.co_filename)
            wrapper = isinstance(frame.f_locals.get("self"), triton.runtime.KernelInterface)
            if not (file.startswith((triton_dir + os.sep, _HERE + os.sep)) or file == generated or wrapper
                    or not os.path.isfile(file) or not_importable(frame.f_globals.get("__name__", ""), file)):
                return self.code_of(frame, file)
            frame = frame.f_back
        return None

    def code_of(self, frame, file: str) -> dict:
        module = frame.f_globals.get("__name__", "")
        with open(file, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        tail = module.replace(".", "/") + ("/__init__.py" if os.path.basename(file) == "__init__.py" else ".py")
        return {"module": module, "function": getattr(frame.f_code, "co_qualname", frame.f_code.co_name),
                "file": tail if file.replace(os.sep, "/").endswith("/" + tail) else os.path.basename(file),
                "sha256": digest, "package": self.package_of(module)}

    def package_of(self, module: str) -> "str | None":
        """`name version` of the installed distribution that holds the module's top package, if any."""
        try:
            from importlib import metadata

            if self.distributions is None:
                self.distributions = metadata.packages_distributions()
            names = self.distributions.get(module.partition(".")[0]) or []
            return f"{names[0]} {metadata.version(names[0])}" if names else None
        except Exception:
            return None


def not_importable(module: str, filename: str) -> "str | None":
    """Why `import module` in a fresh process would not load `filename` (None: it would), judged without
    importing anything: every parent package must be loaded already, a finder of `sys.meta_path` must find
    the name (not `sys.modules`: a generated module may sit there), from this very file, and its top package
    either through an installed finder (an editable install) or under a folder that was on `sys.path` at
    start-up (the current folder and the script's count; a folder the program put on `sys.path` at run
    time, such as a code cache, does not)."""
    if not os.path.isfile(filename):
        return f"its code has no file ({filename}): the source was exec'd"
    if not module or module == "__main__":
        return "it is the program's script (__main__), no importable module"
    parent, _, _ = module.rpartition(".")
    path = None
    if parent:
        path = getattr(sys.modules.get(parent), "__path__", None)
        if path is None:
            return f"its parent package {parent} is not loaded: the module was loaded by path"
    _, spec = _find(module, path)
    origin = getattr(spec, "origin", None)
    if not origin or not os.path.isfile(origin):
        return f"no importer finds a module named {module}: it was loaded from its file by the program"
    if os.path.realpath(origin) != os.path.realpath(filename):
        return f"the name {module} imports another file than the one the kernel came from"
    top = module.partition(".")[0]
    finder, top_spec = _find(top, None) if parent else _find(module, None)
    if finder is None:
        return f"no importer finds its top package {top}"
    if finder is not importlib.machinery.PathFinder:
        return None   # an installed finder (an editable install, a zip importer) serves it
    locations = list(getattr(top_spec, "submodule_search_locations", None) or [])
    folder = os.path.dirname(locations[0]) if locations else os.path.dirname(top_spec.origin)
    started = STARTUP_PATH + [os.path.abspath(os.curdir)]
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if script:
        started.append(os.path.dirname(os.path.abspath(script)))
    if not any(os.path.realpath(folder) == os.path.realpath(entry) for entry in started):
        return f"it imports only from {folder}, a folder the program put on sys.path at run time"
    return None


def _find(name: str, path):
    """The first finder of `sys.meta_path` that finds `name` (under the package `path`), and its spec."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None or type(finder).__name__ == "_PatchOnImport":
            continue
        try:
            spec = find(name, path)
        except Exception:
            spec = None
        if spec is not None:
            return finder, spec
    return None, None


def module_text(kernel, fn) -> "tuple[str, bool]":
    """The text of the kernel's module as Triton read it, and whether it is the whole module (else: the
    function's own source under the imports a `@triton.jit` kernel usually has)."""
    filename = fn.__code__.co_filename
    lines = linecache.getlines(filename, fn.__globals__)   # what inspect read; no checkcache: a deleted file
    raw = getattr(kernel, "raw_src", None)
    first = getattr(kernel, "starting_line_number", fn.__code__.co_firstlineno)
    if raw is not None:
        whole = lines[first - 1:first - 1 + len(raw)] == list(raw)
    else:   # the interpreter keeps no source: the function's `def` must still be where its code says
        head = "".join(lines[first - 1:first + 40])
        whole = re.search(rf"^\s*def\s+{re.escape(fn.__name__)}\s*\(", head, re.MULTILINE) is not None
    if lines and whole:
        return "".join(lines), True
    src = getattr(kernel, "src", None) or "".join(raw or [])
    if not src.strip():
        raise LookupError(f"no source text of {fn.__qualname__} is left ({filename})")
    return f"import triton\nimport triton.language as tl\n\n\n@triton.jit\n{src}", False


def rebound_globals(text: str, fn) -> "tuple[list[str], list[str]]":
    """Import lines for the globals the module's functions read that its text does not bind or that the
    program rebound after it ran, and `name: type` of those no import can bring back."""
    import symtable

    try:
        table = symtable.symtable(text, "<generated>", "exec")
    except SyntaxError:
        return [], []
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    defined = {s.get_name() for s in table.get_symbols() if s.is_namespace()}   # def and class statements
    read: set = set()
    stack = list(table.get_children())
    while stack:
        child = stack.pop()
        read.update(s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced())
        stack.extend(child.get_children())
    scope = fn.__globals__
    lines, unresolved = [], []
    for name in sorted(read | defined):
        if name not in scope or name.startswith("__"):
            continue
        value = scope[name]
        if name in bound and not (name in defined and _defined_elsewhere(value, fn.__code__.co_filename)):
            continue
        line = _import_line(name, value)
        if line is None:
            unresolved.append(f"{name}: {type(value).__name__}")
        else:
            lines.append(line)
    return lines, unresolved


def _defined_elsewhere(value, filename: str) -> bool:
    """A function the text defines whose current value, through any kernel wrappers (`.fn`), is code of another
    file: the program rebound the name after the module ran."""
    for _ in range(8):
        code = getattr(value, "__code__", None)
        if code is not None:
            return code.co_filename != filename
        value = getattr(value, "fn", None)
        if value is None:
            return False
    return False


def _import_line(name: str, value) -> "str | None":
    import types

    if isinstance(value, types.ModuleType):
        return f"import {value.__name__} as {name}" if value.__name__ != name else f"import {name}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return f"{name} = {value!r}"
    inner = getattr(value, "value", None)
    if type(value).__name__ == "constexpr" and (inner is None or isinstance(inner, (bool, int, float, str))):
        return f"{name} = __import__('triton').language.constexpr({inner!r})"
    inner = value   # a kernel wrapper (JITFunction, InterpretedFunction, an autotuner): its function's module
    for _ in range(8):
        if hasattr(inner, "__code__") or getattr(inner, "fn", None) is None:
            break
        inner = inner.fn
    owner, qualname = getattr(inner, "__module__", None), getattr(inner, "__qualname__", None)
    candidates = _candidates(owner)
    for module_name in candidates:
        module = sys.modules.get(module_name)
        for attribute in ([qualname] if qualname and "." not in qualname else []) + [name]:
            if module is not None and getattr(module, attribute, None) is value:
                return (f"from {module_name} import {attribute}" + (f" as {name}" if attribute != name else ""))
    for module_name in candidates[:1]:   # held by an object of its module (FlagGems: PointwiseDynamicFunction._scalar_fn)
        for attribute, holder in list(vars(sys.modules.get(module_name) or object).items()):
            held = getattr(holder, "__dict__", None)
            if attribute.startswith("__") or not isinstance(held, dict) or isinstance(holder, (type, types.ModuleType)):
                continue
            for key, item in list(held.items()):
                if item is value and key.isidentifier():
                    return f"from {module_name} import {attribute} as _xisa_{name}; {name} = _xisa_{name}.{key}"
    return None


def _candidates(owner) -> list:
    """Modules that may hold an object whose `__module__` is `owner`: that module, then its package's others."""
    if not isinstance(owner, str) or not owner:
        return []
    top = owner.partition(".")[0]
    return [owner] + sorted(m for m in list(sys.modules) if m != owner and (m == top or m.startswith(top + ".")))
