"""The package reads as the pipeline: each folder imports only from the folders before it.

Order (lowest first): the shared base modules, then `analyze/` (what an ISA stream is: the vocabulary a
spec is written in), `spec/`, `compile/`, `golden/`, `device/`, `render/`, then the application layer
and the shells over it (`api/`, `cli/`, `pytest_plugin.py`). An import from a later layer into an
earlier one, or a circle between modules, fails here with the offending line.
"""
import ast
from pathlib import Path

import xisa

PACKAGE = Path(xisa.__file__).resolve().parent
LAYERS = ["base", "analyze", "spec", "compile", "golden", "device", "render", "app", "shell"]
BASE = {"errors", "names", "yamlio", "fsio", "__init__", "__main__"}
# The capture hook's settings (variable names, config policies): the app reads them, and they import only sys.
BASE_MODULES = {"xisa.capture_site._xisa_capture_hook"}
APP = {"api", "doctor"}   # the application layer: the api package, and doctor beside it
# capture_site: the hook in a captured program (it answers device queries through xisa.compile)
SHELLS = {"cli", "pytest_plugin", "__main__", "capture_site"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    assert parts[0] == "xisa", module
    head = parts[1] if len(parts) > 1 else "__init__"
    if module in BASE_MODULES:
        return "base"
    if head in SHELLS:
        return "shell"
    if head in BASE:
        return "base"
    if head in LAYERS:
        return head
    assert head in APP, f"{module}: give it a layer in tests/test_layers.py"
    return "app"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


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


def test_no_import_climbs_to_a_later_layer():
    climbs = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        for line, target in imports_of(path):
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


def test_layer_of_names_every_folder():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS) | SHELLS | APP, folders - set(LAYERS) - SHELLS - APP
