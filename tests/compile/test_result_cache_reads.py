"""What a kernel module's load reads reaches the result cache's key however it is read (red-team findings).

Each test compiles, changes one thing the load reads in a way an earlier version of the key missed, and asserts the
cached compile is the compile with no cache: a file opened read-write, a SQLite database (opened in C, out of sight
of Python's `open`), a module compiled by an import hook's loader that rewrites its source from another file, the
case's recorded heuristics, and the interpreter's `-O`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import compile_here, one_case_spec, write_files

CELL = "k:c@gfx942"
SPEC = one_case_spec("k", "source: k.py")
KERNEL = """import triton
import triton.language as tl
{reads}
SCALE = tl.constexpr(S)


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * SCALE)
"""


def _project(root: Path, reads: str, extra: dict[str, str] | None = None, pyproject: str = "") -> Path:
    return write_files(root, {"pyproject.toml": f'[tool.xisa]\nspecs = ["kernels"]\n{pyproject}',
                              "kernels/k.yaml": SPEC, "kernels/k.py": KERNEL.format(reads=reads), **(extra or {})})


def _cached_is_cold(tmp_path: Path, root: Path, change) -> None:
    cache = tmp_path / "cache"
    first = compile_here(root, cache)[CELL]
    change()
    cached = compile_here(root, cache)[CELL]
    cold = compile_here(root, tmp_path / "cold", use_cache=False)[CELL]
    assert cold.analysis.code_sha256 != first.analysis.code_sha256   # the change changes the code
    assert not cached.cached and cached.analysis.code_sha256 == cold.analysis.code_sha256


def test_a_file_the_load_opens_read_write_is_a_dependency(tmp_path):
    reads = "import os\nwith open(os.path.join(os.path.dirname(__file__), 'scale.txt'), 'r+') as f:\n    S = float(f.read())\n"
    root = _project(tmp_path / "proj", reads, {"kernels/scale.txt": "2.0"})
    _cached_is_cold(tmp_path, root, lambda: (root / "kernels" / "scale.txt").write_text("3.0"))


def test_a_sqlite_database_the_load_reads_is_a_dependency(tmp_path):
    import sqlite3

    reads = ("import os, sqlite3\n_db = sqlite3.connect(os.path.join(os.path.dirname(__file__), 't.db'))\n"
             "S = _db.execute('select s from t').fetchone()[0]\n_db.close()\n")
    root = _project(tmp_path / "proj", reads)

    def scale(value: float) -> None:
        with sqlite3.connect(root / "kernels" / "t.db") as db:
            db.execute("create table if not exists t (s real)")
            db.execute("delete from t")
            db.execute("insert into t values (?)", (value,))
        db.close()

    scale(2.0)
    _cached_is_cold(tmp_path, root, lambda: scale(3.0))


HOOK = """import contextlib, importlib.util, os, sys
from importlib.machinery import SourceFileLoader

HERE = os.path.dirname(os.path.abspath(__file__))


class TemplateLoader(SourceFileLoader):
    def source_to_code(self, data, path, *, _optimize=-1):
        with open(os.path.join(HERE, "scale.txt"), "rb") as f:
            data = data.replace(b"@S@", f.read().strip())
        return super().source_to_code(data, path)


class Finder:
    def find_spec(self, name, path=None, target=None):
        if name == "consts":
            p = os.path.join(HERE, "kernels", "consts.py")
            return importlib.util.spec_from_file_location(name, p, loader=TemplateLoader(name, p))
        return None


@contextlib.contextmanager
def xisa_import_hook(target):
    finder = Finder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
"""


def test_a_module_an_import_hooks_loader_rewrites_is_compiled_from_what_it_rewrites_now(tmp_path):
    """The load store keys a code object by the source bytes: a loader of an import hook that makes the code from
    those bytes and another file must compile it itself."""
    root = _project(tmp_path / "proj", "from consts import S\n",
                    {"hook.py": HOOK, "scale.txt": "2.0", "kernels/consts.py": "S = @S@\n"},
                    pyproject='import_hooks = ["hook.py"]\n')
    _cached_is_cold(tmp_path, root, lambda: (root / "scale.txt").write_text("3.0"))


@pytest.mark.unit
def test_the_case_s_recorded_heuristics_are_in_the_key(tmp_path):
    from xisa.api import Selection, open_workspace
    from xisa.compile.incremental.keys import result_key as cell_key

    root = _project(tmp_path / "proj", "S = 2.0\n")
    ws = open_workspace(cwd=root)
    _, cells = Selection().cells(ws)
    cell = cells[0]
    other = type(cell)(**{**vars(cell), "heuristics": {"SCALE": 5}})
    roots = tuple(ws.project.kernel_roots)
    assert cell_key(cell, roots) != cell_key(other, roots)


def test_the_interpreter_s_optimization_level_is_in_the_key(tmp_path):
    """`python -O` drops asserts and sets `__debug__` false: a module that reads it compiles otherwise."""
    root = _project(tmp_path / "proj", "S = 2.0 if __debug__ else 3.0\n")
    script = ("import sys; from xisa.api import Selection, open_workspace; from xisa.compile.incremental.keys import result_key as cell_key\n"
              "from pathlib import Path\n"
              f"ws = open_workspace(cwd=Path({str(root)!r})); cells = Selection().cells(ws)[1]\n"
              "print(cell_key(cells[0], tuple(ws.project.kernel_roots)))\n")
    keys = [subprocess.run([sys.executable, *flags, "-c", script], capture_output=True, text=True, check=True,
                           cwd=root).stdout for flags in ([], ["-O"])]
    assert keys[0].strip() and keys[0] != keys[1]


HEURISTIC_KERNEL = """import triton
import triton.language as tl
{imports}


def _scale(args):
    {read}


@triton.heuristics({{"S": _scale}})
@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr, S: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * S)
"""


def test_a_variable_a_heuristic_reads_while_the_cell_binds_is_a_dependency(tmp_path, monkeypatch):
    monkeypatch.delenv("MYLIB_SCALE", raising=False)
    kernel = HEURISTIC_KERNEL.format(imports="import os", read='return float(os.environ.get("MYLIB_SCALE", "2"))')
    root = _project(tmp_path / "proj", "", {"kernels/k.py": kernel})
    _cached_is_cold(tmp_path, root, lambda: monkeypatch.setenv("MYLIB_SCALE", "3"))


def test_a_module_a_heuristic_imports_is_compiled_from_its_source_not_its_bytecode(tmp_path):
    """A heuristic's lazy import runs after the load: with a __pycache__ entry beside it (trusted by mtime and size),
    the source itself must be what is read, so that it is in the depfile."""
    import importlib.util
    import py_compile

    kernel = HEURISTIC_KERNEL.format(imports="", read="from fakelib.lazyconsts import S\n    return S")
    root = _project(tmp_path / "proj", "", {"src/fakelib/__init__.py": "", "src/fakelib/k.py": kernel,
                                            "src/fakelib/lazyconsts.py": "S = 2.0\n",
                                            "kernels/k.yaml": SPEC.replace("source: k.py", "module: fakelib.k")},
                    pyproject='pythonpath = ["src"]\n')
    consts = root / "src" / "fakelib" / "lazyconsts.py"
    py_compile.compile(str(consts), cfile=importlib.util.cache_from_source(str(consts)))

    def edit() -> None:   # the same size, and the bytecode left as it was
        stat = consts.stat()
        consts.write_text("S = 3.0\n")
        os.utime(consts, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    _cached_is_cold(tmp_path, root, edit)


def test_a_file_the_load_looked_for_and_did_not_find_is_a_dependency_once_it_appears(tmp_path):
    reads = ("import json, os\ntry:\n    with open(os.path.join(os.path.dirname(__file__), 'tune.json')) as f:\n"
             "        S = json.load(f)['s']\nexcept FileNotFoundError:\n    S = 2.0\n")
    root = _project(tmp_path / "proj", reads)
    _cached_is_cold(tmp_path, root, lambda: (root / "kernels" / "tune.json").write_text('{"s": 3.0}'))


def test_a_helper_module_appearing_earlier_on_the_path_is_a_dependency(tmp_path):
    """A top-level helper the kernel imports (`from helper import S`, served from the project's second pythonpath
    folder): a `helper.py` added to the first folder is what the import finds now."""
    root = _project(tmp_path / "proj", "from helper import S", {"B/helper.py": "S = 2.0\n", "A/.keep": ""},
                    pyproject='pythonpath = ["A", "B"]\n')
    _cached_is_cold(tmp_path, root, lambda: (root / "A" / "helper.py").write_text("S = 3.0\n"))


@pytest.mark.parametrize("read", ['os.environ.copy().get("MYLIB_SCALE", "2")',
                                  '(os.environ | {}).get("MYLIB_SCALE", "2")',
                                  'os.environb.get(b"MYLIB_SCALE", b"2").decode()',
                                  'os.getenvb(b"MYLIB_SCALE", b"2").decode()'])
def test_a_variable_the_load_reads_through_a_copy_or_in_bytes_is_a_dependency(tmp_path, monkeypatch, read):
    monkeypatch.delenv("MYLIB_SCALE", raising=False)
    root = _project(tmp_path / "proj", f"import os\nS = float({read})")
    _cached_is_cold(tmp_path, root, lambda: monkeypatch.setenv("MYLIB_SCALE", "3"))


@pytest.mark.parametrize("count", [
    "len(os.listdir(PLUGINS))",
    "len(list(os.scandir(PLUGINS)))",
    "len(glob.glob(os.path.join(PLUGINS, '*.cfg')))",
    "len(list(pathlib.Path(PLUGINS).iterdir()))",
    "sum(len(files) for _, _, files in os.walk(PLUGINS))",
])
def test_a_folder_the_load_lists_is_a_dependency_once_it_gains_a_file(tmp_path, count):
    """A library that discovers its plugins or configs by listing a folder: a file added there (nothing it had read
    changed) changes what the load computes."""
    reads = (f"import glob, os, pathlib\nPLUGINS = os.path.join(os.path.dirname(__file__), 'plugins')\n"
             f"S = float(1 + {count})\n")
    root = _project(tmp_path / "proj", reads, {"kernels/plugins/a.cfg": "a"})
    _cached_is_cold(tmp_path, root, lambda: (root / "kernels" / "plugins" / "b.cfg").write_text("b"))


def test_the_import_system_s_own_folder_listings_are_not_dependencies(tmp_path):
    """Python lists each folder it imports from (its finder's cache): a file added beside the kernel that no
    import asked for, and that the load never listed itself, keeps the cell a hit."""
    root = _project(tmp_path / "proj", "S = 2.0\n")
    cache = tmp_path / "cache"
    compile_here(root, cache)
    (root / "kernels" / "notes.txt").write_text("unrelated")
    assert compile_here(root, cache)[CELL].cached


def test_a_listed_file_replaced_by_a_folder_of_its_name_is_a_change(tmp_path):
    reads = ("import os\nPLUGINS = os.path.join(os.path.dirname(__file__), 'plugins')\n"
             "S = float(2 + sum(entry.is_dir() for entry in os.scandir(PLUGINS)))\n")
    root = _project(tmp_path / "proj", reads, {"kernels/plugins/a": "a file"})

    def swap() -> None:
        (root / "kernels" / "plugins" / "a").unlink()
        (root / "kernels" / "plugins" / "a").mkdir()

    _cached_is_cold(tmp_path, root, swap)


SAVED_DURING_THE_LOAD = """import pathlib
S = 2.0
# an editor (or a `git checkout`) saving the file while xisa loads it: the load ran the old code
_me = pathlib.Path(__file__)
_me.write_text(_me.read_text().replace("S = 2.0", "S = 3.0"))
"""
TABLE_SAVED_DURING_THE_LOAD = """import pathlib
_table = pathlib.Path(__file__).with_name("scale.txt")
S = float(_table.read_text())
_table.write_text("3.0")
"""


@pytest.mark.parametrize("saved", ["kernel", "table"])
def test_a_file_saved_while_the_load_reads_it_is_never_recorded_as_read(tmp_path, saved):
    """Issue 36, finding 1: the depfile hashed files after the load, not the bytes read: a kernel file saved while a
    check loaded it was recorded under its new hash with the old code, and every later warm check answered 0."""
    reads = SAVED_DURING_THE_LOAD if saved == "kernel" else TABLE_SAVED_DURING_THE_LOAD
    root = _project(tmp_path / "proj", reads, {"kernels/scale.txt": "2.0"})
    cache = tmp_path / "cache"
    first = compile_here(root, cache)[CELL]            # compiled S = 2.0; the file now says 3.0
    warm = compile_here(root, cache)[CELL]
    cold = compile_here(root, tmp_path / "cold", use_cache=False)[CELL]
    assert cold.analysis.code_sha256 != first.analysis.code_sha256
    assert not warm.cached and warm.analysis.code_sha256 == cold.analysis.code_sha256


def test_a_restored_results_folder_alone_answers_on_a_fresh_runner(tmp_path):
    """Issue 36, finding 5: every depfile named files of the cache's own `loads/` store, so a CI cache restoring
    `results/` (as the example workflow does) never hit: every CI run was cold. xisa's stores are its own."""
    import json
    import shutil

    root = _project(tmp_path / "proj", "S = 2.0\n")
    first = compile_here(root, tmp_path / "cache")[CELL]
    for entry in (tmp_path / "cache" / "results").rglob("*.json"):
        named = json.loads(entry.read_bytes().partition(b"\n")[2])["dependencies"]
        assert not [name for name in named if name.startswith(str(tmp_path / "cache"))], named
    shutil.copytree(tmp_path / "cache" / "results", tmp_path / "restored" / "results")   # a fresh runner
    again = compile_here(root, tmp_path / "restored")[CELL]
    assert again.cached and again.analysis.code_sha256 == first.analysis.code_sha256


@pytest.mark.parametrize("lookup", [
    "try:\n    from fastcfg import S\nexcept ImportError:\n    S = 2.0\n",
    "import importlib.util\nS = 3.0 if importlib.util.find_spec('fastcfg') is not None else 2.0\n",
    "try:\n    import fastcfg_pkg.tables as t\n    S = t.S\nexcept ImportError:\n    S = 2.0\n",
])
@pytest.mark.parametrize("where", ["A", "kernels"])
def test_an_optional_import_that_found_nothing_is_a_dependency_once_the_module_appears(tmp_path, lookup, where):
    """A library's optional accelerator or config module (`try: import fastcfg`): found nowhere when the cell was
    cached, then installed where the import searches (a pythonpath folder, the kernel's own folder)."""
    root = _project(tmp_path / "proj", lookup, {"A/.keep": ""}, pyproject='pythonpath = ["A"]\n')

    def appear():
        if "fastcfg_pkg" in lookup:
            write_files(root / where, {"fastcfg_pkg/__init__.py": "", "fastcfg_pkg/tables.py": "S = 3.0\n"})
        else:
            (root / where / "fastcfg.py").write_text("S = 3.0\n")

    _cached_is_cold(tmp_path, root, appear)


# Found by a red-team pass of issue 36's floor (FoundNowhere): each an input whose cached answer differed from a
# compile with no cache.

# --- 1. FoundNowhere records leaf/__init__.py and leaf.<suffix>: a namespace package (a folder with no __init__.py)
# appearing makes the import succeed with none of those files present.

@pytest.mark.parametrize("lookup", [
    "try:\n    from fastcfg.tables import S\nexcept ImportError:\n    S = 2.0\n",
    "import importlib.util\nS = 3.0 if importlib.util.find_spec('fastcfg') is not None else 2.0\n",
])
@pytest.mark.parametrize("where", ["A", "kernels"])
def test_an_optional_import_found_nowhere_then_appearing_as_a_namespace_package_recompiles(tmp_path, lookup, where):
    root = _project(tmp_path / "proj", lookup, {"A/.keep": ""}, pyproject='pythonpath = ["A"]\n')
    _cached_is_cold(tmp_path, root, lambda: write_files(root / where, {"fastcfg/tables.py": "S = 3.0\n"}))


# --- 2. An editable install (setuptools' `__editable___*_finder`, put on sys.meta_path by a .pth at start-up) makes
# an optional import succeed from a folder that is not on sys.path: no absent file appears, sys.path is unchanged.

class EditableFinder:
    """What `pip install -e ./fastcfg-src` puts on sys.meta_path at interpreter start (setuptools' MAPPING finder)."""

    def __init__(self, mapping: dict[str, str]):
        self.mapping = mapping

    def find_spec(self, name, path=None, target=None):
        if name in self.mapping:
            return importlib.util.spec_from_file_location(name, self.mapping[name])
        return None


def test_an_optional_import_found_nowhere_then_installed_editable_recompiles(tmp_path, monkeypatch):
    root = _project(tmp_path / "proj", "try:\n    from fastcfg import S\nexcept ImportError:\n    S = 2.0\n")
    source = write_files(tmp_path / "fastcfg-src", {"fastcfg.py": "S = 3.0\n"})

    def install_editable():
        # the next interpreter starts with the editable finder on sys.meta_path (before anything xisa adds)
        monkeypatch.setattr(sys, "meta_path", [EditableFinder({"fastcfg": str(source / "fastcfg.py")}),
                                               *sys.meta_path])
        sys.modules.pop("fastcfg", None)

    _cached_is_cold(tmp_path, root, install_editable)

