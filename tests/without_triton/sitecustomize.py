"""Triton and torch as absent as where they are not installed: the unit tier's rule (`pytest -m unit`).

`import triton` and `import torch` raise ModuleNotFoundError ("No module named 'triton'"), `importlib.util.find_spec`
answers None and `importlib.metadata` finds no distribution of either. tests/conftest.py calls `hide()` for a run of
the unit tier and puts this folder first on PYTHONPATH, where Python imports this file at start-up as `sitecustomize`:
every process a unit test starts is held to the rule too (and then runs the environment's own sitecustomize, if any).
"""

import importlib.machinery
import importlib.util
import os
import sys

HIDDEN = ("triton", "torch")
FOLDER = os.path.dirname(os.path.abspath(__file__))


def hide() -> None:
    """Python's path finder (which finds what site-packages holds) finds neither package nor its distribution."""
    for name in HIDDEN:
        if name in sys.modules:
            raise RuntimeError(f"{name} was imported before the unit tier could hide it")
    finder = importlib.machinery.PathFinder
    if getattr(finder.find_spec, "hides", None) == HIDDEN:
        return
    find_spec, find_distributions = finder.find_spec, finder.find_distributions

    def find_spec_but_hidden(cls, fullname, path=None, target=None):
        return None if fullname.partition(".")[0] in HIDDEN else find_spec(fullname, path, target)

    def find_distributions_but_hidden(cls, *args, **kwargs):
        return (dist for dist in find_distributions(*args, **kwargs) if (dist.name or "").lower() not in HIDDEN)

    find_spec_but_hidden.hides = HIDDEN
    # classmethods, as the originals are: a copy kept as a class attribute (pytest's import hook keeps one) stays bound
    finder.find_spec = classmethod(find_spec_but_hidden)
    finder.find_distributions = classmethod(find_distributions_but_hidden)


def _run_the_next_sitecustomize() -> None:
    others = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != FOLDER]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if __name__ == "sitecustomize":
    hide()
    _run_the_next_sitecustomize()
