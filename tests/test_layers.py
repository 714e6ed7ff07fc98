"""The package reads as the pipeline: each folder imports only from the folders before it, by rule.

Layers (lowest first): the base (a file directly in `xisa/`), then `analyze/` (what an ISA stream is: the
vocabulary a spec is written in), `spec/`, `compile/`, `golden/`, `device/`, `render/`, the application layer
(`api/`), and the shells over it (`cli/`, `capture_site/`, and every module an entry point in pyproject.toml or
`python -m` starts). Inside `compile/` the rooms are layers of their own, lowest first (`xisa/compile/__init__.py`
says what each does). A module that imports nothing of xisa is a leaf any layer may use (the capture hook, which
runs in a captured program with only sys). An import from a later layer into an earlier one, or a circle between
modules, fails here with the offending line. No module is placed by its name.
"""
import ast
import functools
import tomllib
from pathlib import Path

import pytest

import xisa

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

PACKAGE = Path(xisa.__file__).resolve().parent
FOLDERS = ["analyze", "spec", "compile", "golden", "device", "render", "api", "cli", "capture_site"]
SHELL_FOLDERS = {"cli", "capture_site"}
ROOMS = ["tools", "worker", "gpu", "incremental", "launch", "cell", "export"]   # compile/'s, lowest first
LAYERS = ["base", "analyze", "spec"] + [f"compile/{room}" for room in ROOMS] + \
    ["golden", "device", "render", "api", "shell"]


def _entry_point_modules() -> set[str]:
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    targets = [*project.get("scripts", {}).values()]
    for group in project.get("entry-points", {}).values():
        targets += group.values()
    return {t.partition(":")[0] for t in targets} | {"xisa.__main__"}


ENTRY_POINTS = _entry_point_modules()


def layer_of(module: str) -> str:
    parts = module.split(".")
    assert parts[0] == "xisa", module
    if module in ENTRY_POINTS:
        return "shell"
    if len(parts) == 1 or (PACKAGE / f"{parts[1]}.py").exists():
        return "base"
    head = parts[1]
    if head in SHELL_FOLDERS:
        return "shell"
    if head == "compile":
        room = parts[2] if len(parts) > 2 and (PACKAGE / "compile" / parts[2]).is_dir() else "cell"
        return f"compile/{room}"
    return head


def is_leaf(path: Path) -> bool:
    return not imports_of(path)


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache   # each file is parsed once: the climb check asks of a target once per import of it
def imports_of(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("xisa"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / candidate.replace(".", "/")).with_suffix(".py").exists() or \
                    (PACKAGE.parent / candidate.replace(".", "/") / "__init__.py").exists()
                found.append((node.lineno, candidate if is_module else node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("xisa")]
    return found


def _path_of(module: str) -> Path | None:
    base = PACKAGE.parent / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def test_no_import_climbs_to_a_later_layer():
    climbs = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        for line, target in imports_of(path):
            target_path = _path_of(target)
            if target_path is not None and is_leaf(target_path):
                continue
            if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(source)):
                climbs.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {layer_of(source)} imports {target} "
                              f"({layer_of(target)})")
    assert not climbs, "\n".join(climbs)


def test_no_import_circles():
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        graph[source] = {t for _, t in imports_of(path) if t != source}
    circles = []

    def visit(node, stack, seen):
        for nxt in sorted(graph.get(node, ())):
            if nxt in stack:
                circles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in seen:
                seen.add(nxt)
                visit(nxt, stack + [nxt], seen)

    for start in sorted(graph):
        visit(start, [start], {start})
    assert not circles, "\n".join(sorted(set(circles)))


def test_every_folder_and_room_has_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert folders == set(FOLDERS), folders ^ set(FOLDERS)
    rooms = {p.name for p in (PACKAGE / "compile").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(ROOMS) - {"cell"}, rooms ^ (set(ROOMS) - {"cell"})
    for path in sorted(PACKAGE.rglob("*.py")):
        assert layer_of(module_name(path)) in LAYERS, path


def test_compile_says_what_each_room_does():
    told = ast.get_docstring(ast.parse((PACKAGE / "compile" / "__init__.py").read_text()))
    for room in (r for r in ROOMS if r != "cell"):
        assert f"{room}/" in told, f"xisa/compile/__init__.py: say what {room}/ does"
