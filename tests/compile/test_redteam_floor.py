"""Red team of the issue-36 floor (FoundNowhere, keys, clear_torch_caches): each test is an input whose cached
answer differs from a compile with no cache, or a mixed-target run that differs from each target alone."""

from __future__ import annotations

import importlib.util
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

