"""An installed helper package keys the result cache by what it is, not by its name (issue 22, class 6).

A helper reinstalled at the same version with other code (a rebuilt wheel, a git dependency at a new
commit) keeps its dist-info folder's name: with installed packages keyed by those names a warm check
answered with the old code (exit 0) where `--no-cache` saw the new one (exit 1). Each cell's depfile now
holds the RECORD of every installed distribution with a module in the compiling process and the files of
its modules; a package nothing imported is in no depfile, so installing one answers everything from the cache.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from support import count_as_installed, forget_installed, one_case_spec, write_files

KERNEL = """import triton
import triton.language as tl
from fakehelper.consts import SCALE


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * SCALE)
"""

CONSTS = """import json
import os

import triton.language as tl

with open(os.path.join(os.path.dirname(__file__), "table.json")) as handle:
    SCALE = tl.constexpr(json.load(handle)["scale"] * {factor})
"""


def install(site: Path, name: str, files: dict[str, str], version: str = "1.0") -> None:
    """What pip leaves in site-packages: the files, and a dist-info folder whose RECORD hashes each."""
    write_files(site, files)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(name + "\n")
    rows = []
    for path in sorted(files):
        data = (site / path).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}")
    rows += [f"{info.name}/METADATA,,", f"{info.name}/top_level.txt,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def helper(scale: float = 2.0, factor: float = 1.0) -> dict[str, str]:
    return {"fakehelper/__init__.py": "", "fakehelper/consts.py": CONSTS.format(factor=factor),
            "fakehelper/table.json": f'{{"scale": {scale}}}'}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site folder counted as installed (like site-packages) and on sys.path, holding `fakehelper` 1.0."""
    folder = tmp_path / "site"
    install(folder, "fakehelper", helper())
    count_as_installed(monkeypatch, folder)
    yield folder
    forget_installed()


def _project(root: Path, kernels: int = 1) -> Path:
    files = {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n'}
    for index in range(kernels):
        files[f"kernels/k{index}.py"] = KERNEL
        files[f"kernels/k{index}.yaml"] = one_case_spec(f"k{index}", f"source: k{index}.py", "gfx942")
    return write_files(root, files)


def _compile(root: Path, cache: Path, *, use_cache: bool = True) -> dict[str, tuple]:
    """(cached, fingerprint) per cell, through the calls `xisa check` makes, one worker (loads share it)."""
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection().cells(ws)
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=1, use_cache=use_cache))
    assert all(r.ok for r in results), [r.error for r in results]
    return {cell.id: (r.cached, r.analysis.sha256) for cell, r in zip(cells, results)}


@pytest.mark.parametrize("reinstall", ["rebuilt-module", "rebuilt-data-file", "edited-in-place"])
def test_a_helper_reinstalled_at_the_same_version_with_other_code_recompiles(site, tmp_path, reinstall):
    root, cache = _project(tmp_path / "proj", kernels=2), tmp_path / "cache"
    first = _compile(root, cache)
    assert all(cached for cached, _ in _compile(root, cache).values())          # unchanged: every cell a hit
    if reinstall == "rebuilt-module":            # the same version, another build of the module
        install(site, "fakehelper", helper(factor=3.0))
    elif reinstall == "rebuilt-data-file":       # only a file the module reads at import moved: RECORD did
        install(site, "fakehelper", helper(scale=5.0))
    else:                                        # an edit in site-packages, RECORD left as it was
        consts = site / "fakehelper" / "consts.py"
        consts.write_text(consts.read_text().replace("* 1.0", "* 7.0"))
    warm = _compile(root, cache)
    cold = _compile(root, cache, use_cache=False)
    for cell, (cached, sha) in warm.items():     # both kernels: the second found the helper imported already
        assert not cached and sha == cold[cell][1] != first[cell][1], (cell, reinstall)


def test_installing_a_package_nothing_imports_keeps_the_cache_warm(site, tmp_path):
    root, cache = _project(tmp_path / "proj"), tmp_path / "cache"
    first = _compile(root, cache)
    install(site, "unrelatedpkg", {"unrelatedpkg/__init__.py": "VALUE = 1\n"}, version="2.0")
    assert _compile(root, cache) == {cell: (True, sha) for cell, (_, sha) in first.items()}


def test_the_depfile_names_the_helpers_record_and_files_not_the_toolchains(site, tmp_path):
    from xisa.compile.incremental.installed import installed_dependencies, toolchain_distributions

    root, cache = _project(tmp_path / "proj"), tmp_path / "cache"
    _compile(root, cache)
    import fakehelper.consts  # noqa: F401  (as the compile worker had it)

    entries = installed_dependencies()
    assert str(site / "fakehelper-1.0.dist-info" / "RECORD") in entries
    assert str(site / "fakehelper" / "consts.py") in entries
    assert {"triton", "torch", "xisa", "pyyaml", "typer", "rich"} <= toolchain_distributions()
    assert not any(f"{os.sep}triton{os.sep}" in path or f"{os.sep}torch{os.sep}" in path for path in entries)


@pytest.mark.unit
def test_the_held_modules_are_seen_again_when_one_is_replaced_added_or_moved():
    """`installed_dependencies` answers from its last walk while the process holds the very same module objects under
    the same names: a module put in another's place (same name, same count) must be a different holding."""
    import types

    from xisa.compile.incremental.installed import HeldObjects

    first, second = types.ModuleType("a"), types.ModuleType("b")
    modules = {"a": first, "b": second}
    held = HeldObjects(modules)
    assert held.same_as(dict(modules))
    assert not held.same_as({"a": first, "b": types.ModuleType("b")})   # replaced: same name, same count
    assert not held.same_as({"a": first})                                # one gone
    assert not held.same_as({**modules, "c": first})                      # one more
    assert not held.same_as({"b": second, "a": first})                    # taken out and put back: walked again


@pytest.mark.unit
def test_installed_dependencies_names_a_module_imported_after_the_last_answer(site, tmp_path):
    import sys

    from xisa.compile.incremental.installed import installed_dependencies

    install(site, "laterhelper", {"laterhelper/__init__.py": "VALUE = 1\n"})
    before = installed_dependencies()
    import laterhelper  # noqa: F401

    try:
        after = installed_dependencies()
        assert str(site / "laterhelper" / "__init__.py") not in before
        assert str(site / "laterhelper" / "__init__.py") in after
    finally:
        sys.modules.pop("laterhelper", None)


@pytest.mark.unit
def test_each_folder_of_sys_path_is_read_for_distributions_once(tmp_path, monkeypatch):
    """Issue 35: a load changes sys.path several times (FlagGems puts its backend's folder first, a `source:` kernel its
    own folder), and each new sys.path read every installed distribution again, RECORD files too (7 reads in a
    worker's 3 FlagGems loads; the GPU machines' image holds about 200 distributions). Each folder is read once a
    process now, with the same answer: the first distribution on the path owns a name."""
    from importlib import metadata

    from xisa.compile.incremental import installed

    first, second, third = (tmp_path / name for name in ("first", "second", "third"))
    install(first, "fakehelper", helper(), version="1.0")
    install(second, "fakehelper", helper(), version="2.0")
    install(second, "otherhelper", {"otherhelper/__init__.py": ""})
    install(third, "thirdhelper", {"thirdhelper/__init__.py": ""})
    read: list[list[str]] = []
    distributions = metadata.distributions

    def counted(**kwargs):
        read.append(list(kwargs["path"]))
        return distributions(**kwargs)

    monkeypatch.setattr(installed.metadata, "distributions", counted)
    path = (str(first), str(second))
    owners = installed._distributions_by_top_level(path)
    assert owners["fakehelper"] == ("fakehelper", str(first / "fakehelper-1.0.dist-info" / "RECORD"))
    assert owners["otherhelper"][0] == "otherhelper"
    later = installed._distributions_by_top_level((str(third), *path))   # a folder put first, as a load does
    assert later["thirdhelper"][0] == "thirdhelper" and later["fakehelper"] == owners["fakehelper"]
    reversed_owner = installed._distributions_by_top_level(path[::-1])["fakehelper"]
    assert reversed_owner[1].endswith("fakehelper-2.0.dist-info/RECORD")
    assert sorted(map(tuple, read)) == [(str(first),), (str(second),), (str(third),)]   # each folder read once
