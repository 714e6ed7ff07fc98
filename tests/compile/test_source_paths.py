"""Where a source-line table's paths are shown from: never an absolute path, so a moved checkout, a moved or
re-created virtual environment or another Python version changes no golden."""

from __future__ import annotations

import sys

import pytest

from xisa.compile.cell import SourceFiles

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)


def test_project_files_are_project_relative_and_installed_ones_package_relative(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    venv_site = project / ".venv" / "lib" / "python3.11" / "site-packages"   # a venv inside the checkout
    other_site = tmp_path / "usr" / "lib" / "python3" / "dist-packages"
    monkeypatch.setattr(sys, "path", [str(project / "kernels"), str(venv_site), str(other_site), ""])
    files = SourceFiles([project / "kernels", project])
    assert files.path_of(str(project / "kernels" / "decode.py")) == "kernels/decode.py"
    assert files.path_of(str(venv_site / "liger_kernel" / "ops" / "softmax.py")) == "liger_kernel/ops/softmax.py"
    assert files.path_of(str(other_site / "triton" / "language" / "standard.py")) == "triton/language/standard.py"
    assert files.path_of("/nowhere/else/k.py") == "k.py"
    assert files.path_of("<string>") == "<string>"


def test_line_texts_are_read_stripped_and_a_missing_file_or_line_is_empty(tmp_path):
    source = tmp_path / "k.py"
    source.write_text("import triton\n\n    x = tl.load(p)  \n")
    files = SourceFiles([tmp_path])
    assert files.text_of(str(source), 3) == "x = tl.load(p)"
    assert files.text_of(str(source), 4) == "" and files.text_of(str(source), 0) == ""
    assert files.text_of(str(tmp_path / "gone.py"), 1) == ""


def _package(folder, name="fakelib"):
    from support import write_files

    return write_files(folder, {f"{name}/__init__.py": "", f"{name}/ops/__init__.py": "", f"{name}/ops/gla.py": "x\n"})


def test_a_package_file_has_one_name_in_site_packages_vendor_and_a_src_layout(tmp_path, monkeypatch):
    """Issue 26, item 3: moving a library between them leaves the line tables comparable."""
    project = tmp_path / "proj"
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for folder in (site, project / "vendor", project / "src", project / "third_party" / "deep"):
        _package(folder)
    monkeypatch.setattr(sys, "path", [str(site), str(project / "src"), ""])
    files = SourceFiles([project, project / "kernels"], pythonpath=[project / "src"])
    names = {files.path_of(str(folder / "fakelib" / "ops" / "gla.py"))
             for folder in (site, project / "vendor", project / "src", project / "third_party" / "deep")}
    assert names == {"fakelib/ops/gla.py"}
    # DWARF's compile directory (a folder) is named the same way: ptxas reads the same bytes after a move
    assert files.path_of(str(project / "vendor" / "fakelib" / "ops")) == files.path_of(str(site / "fakelib" / "ops"))
    # a file in a plain folder keeps its project-relative name
    (project / "vendor" / "loose.py").write_text("x\n")
    assert files.path_of(str(project / "vendor" / "loose.py")) == "vendor/loose.py"


def test_a_namespace_package_keeps_its_namespace_and_the_checkout_name_never_shows(tmp_path, monkeypatch):
    project = tmp_path / "checkout-name"
    site = tmp_path / "site-packages"
    _package(site / "nsx")                                  # nsx/ has no __init__.py: a namespace package
    _package(project / "vendor" / "nsx")
    monkeypatch.setattr(sys, "path", [str(site)])
    files = SourceFiles([project], pythonpath=[project / "vendor"])
    assert files.path_of(str(site / "nsx" / "fakelib" / "ops" / "gla.py")) == "nsx/fakelib/ops/gla.py"
    assert files.path_of(str(project / "vendor" / "nsx" / "fakelib" / "ops" / "gla.py")) == "nsx/fakelib/ops/gla.py"
    # without the pythonpath entry nothing says nsx/ is a namespace: the name starts at the package
    assert SourceFiles([project]).path_of(str(project / "vendor" / "nsx" / "fakelib" / "ops" / "gla.py")) == \
        "fakelib/ops/gla.py"
    # a project whose root is itself a package: the walk stops at the project's edge
    (project / "__init__.py").write_text("")
    (project / "kernels").mkdir()
    (project / "kernels" / "__init__.py").write_text("")
    (project / "kernels" / "k.py").write_text("x\n")
    assert SourceFiles([project]).path_of(str(project / "kernels" / "k.py")) == "kernels/k.py"
    assert SourceFiles([project]).path_of(str(project / "kernels")) == "kernels"


def test_the_names_ptxas_read_lead_back_to_their_files_also_without_a_ptxas_run(tmp_path):
    """The SASS's line information holds the names ptxas was given (`fakelib/ops.py`, folder and name joined):
    the line texts are read from the files they stand for, learnt from the PTX's own `.file` paths (a compile
    Triton answered from its cache runs no ptxas), whatever the working folder."""
    from xisa.compile.tools.ptxas import ptx_file_paths

    project = tmp_path / "proj"
    _package(project / "vendor")
    (project / "vendor" / "fakelib" / "ops" / "gla.py").write_text("import triton\n  y = x * 2.0\n")
    folder = project / "vendor" / "fakelib" / "ops"
    ptx = f'.file 1 "{folder}" "gla.py"\n.file 2 "/elsewhere/triton/language/standard.py"\n'
    assert ptx_file_paths(ptx) == [str(folder), "/elsewhere/triton/language/standard.py"]
    files = SourceFiles([project], pythonpath=[project / "vendor"])
    for path in ptx_file_paths(ptx):
        files.path_of(path)
    assert files.text_of("fakelib/ops/gla.py", 2) == "y = x * 2.0"
    assert SourceFiles([project]).text_of("fakelib/ops/gla.py", 2) == ""   # nothing says where it is
    assert SourceFiles([project], pythonpath=[project / "vendor"]).text_of("fakelib/ops/gla.py", 2) == "y = x * 2.0"
