"""Where an import would find a module other than the one it found, or one it found nowhere: the files whose
appearing changes what a load imports, recorded in a depfile as absent (`reads.dependency_files`)."""

from __future__ import annotations

import os
import sys
from typing import Any

from xisa.compile.worker.state import WORKER

# In a recording only (never a depfile name): `?/abs/file`, a file whose appearing would make a module that an import
# or `importlib.util.find_spec` found nowhere importable (`try: import fastcfg` then `fastcfg.py` added).
ABSENT_ENTRY = "?"
# A depfile entry `dir:/abs/folder` stands for whether that folder exists: a folder without `__init__.py` where an
# import found nothing is a namespace package that the import finds from then on.
FOLDER_ENTRY = "dir:"


def shadowing_files(name: str, module: Any) -> dict[str, None]:
    """The files that, appearing, would make `name` import from somewhere else: the module or package of that name
    in each search folder before the one that served it (sys.path for a top-level name, the parent's `__path__`
    for a submodule: a namespace package has several). A depfile records them as absent."""
    import importlib.machinery

    namespace = vars(module)
    origin = namespace.get("__file__")
    if not origin and not namespace.get("__path__"):
        return {}
    parent, _, leaf = name.rpartition(".")
    if parent:
        folders = list(vars(sys.modules[parent]).get("__path__") or []) if parent in sys.modules else []
        if parent in sys.modules and not vars(sys.modules[parent]).get("__file__"):
            # a namespace package: a new portion in any folder of the path joins its __path__, in path order,
            # so every folder where one could appear is searched, not only the portions found at the load
            folders = _namespace_portions(parent, folders)
    else:
        folders = [entry or os.getcwd() for entry in sys.path]
    # A namespace package is served only while no folder at all holds a regular module of its name.
    serving = None if not origin else \
        os.path.dirname(os.path.dirname(origin)) if origin.endswith("__init__.py") else os.path.dirname(origin)
    absent: dict[str, None] = {}
    for folder in folders:
        folder = os.path.abspath(folder)
        if serving is not None and folder == os.path.abspath(serving):
            break
        absent[os.path.join(folder, leaf, "__init__.py")] = None
        absent.update((os.path.join(folder, leaf + suffix), None) for suffix in importlib.machinery.all_suffixes())
    return absent


def _namespace_portions(package: str, found: list[str]) -> list[str]:
    """Where a portion of namespace package `package` is or could be, in the order its `__path__` would list them:
    one folder per sys.path entry (those found at the load kept where the path put them)."""
    relative = os.path.join(*package.split("."))
    candidates = [os.path.join(os.path.abspath(entry or os.getcwd()), relative) for entry in sys.path]
    return list(dict.fromkeys(candidates + [os.path.abspath(folder) for folder in found]))


class FoundNowhere:
    """Last on sys.meta_path, so asked only for a module no other finder found: an optional import that failed
    (`try: import fastcfg`) or `importlib.util.find_spec` answering None. The files that would make the name
    importable in each folder searched, and the folder that would make it a namespace package, are recorded as absent: one appearing later is a change, as a file the load
    looked for and did not find is. It never finds anything itself."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        reads = WORKER.reads
        if reads is not None:
            import importlib.machinery

            leaf = name.rpartition(".")[2]
            folders = list(path) if path is not None else [entry or os.getcwd() for entry in sys.path]
            for folder in folders:
                if isinstance(folder, str) and os.path.isdir(folder):
                    reads.append(ABSENT_ENTRY + FOLDER_ENTRY + os.path.join(os.path.abspath(folder), leaf))
                    reads.append(ABSENT_ENTRY + os.path.join(os.path.abspath(folder), leaf, "__init__.py"))
                    reads.extend(ABSENT_ENTRY + os.path.join(os.path.abspath(folder), leaf + suffix)
                                 for suffix in importlib.machinery.all_suffixes())
        return None
