"""pytest integration: `@pytest.mark.xisa_device(...)` gating, and `pytest --xisa` (one item per cell).

Thin glue, as in syrupy: the verdicts come from xisa's report objects, pytest only presents them.

`pytest --xisa` runs the cells only; naming test paths too (`pytest --xisa tests/`) runs those as
well. Each cell's node id is `xisa::KERNEL:CASE@TARGET`, and passing one back (a glob too, as in
`pytest 'xisa::gemm:*@gfx942'`) runs just those cells, --xisa implied.
"""

from __future__ import annotations

import difflib
import fnmatch
import shlex
from pathlib import Path

import pytest

_DEVICES_KEY = pytest.StashKey[object]()
_SELECT_KEY = pytest.StashKey[list]()
NODE_PREFIX = "xisa::"          # a cell's node id: xisa::kernel:case@target


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("xisa", "xisa: ISA goldens per GPU architecture")
    group.addoption("--xisa", action="store_true", help="Collect one test per (kernel, case, target) cell.")
    group.addoption("--xisa-update", action="store_true", help="Bless the collected cells (refused when CI is set).")
    group.addoption("--xisa-scope", action="append", default=[], help="TARGET[:KERNEL[:CASE]] allowed to change.")
    group.addoption("--xisa-arch", action="append", default=[], help="Target name or glob (repeatable).")
    group.addoption("--xisa-kernel", action="append", default=[], help="KERNEL or KERNEL:CASE glob (repeatable).")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xisa_device(pattern): run only when a GPU of that target, glob or family "
                                       "is present (e.g. 'sm_90', 'gfx11*', 'cdna3'); skipped with the reason")
    config.addinivalue_line("markers", "xisa_cell: an xisa (kernel, case, target) golden check")
    _take_cell_arguments(config)
    if config.getoption("xisa_update", default=False):
        from xisa.golden.bless import refuse_in_ci
        from xisa.errors import XisaError

        try:
            refuse_in_ci()
        except XisaError as exc:
            raise pytest.UsageError(str(exc)) from None


def _take_cell_arguments(config: pytest.Config) -> None:
    """Turn `xisa::...` arguments into a cell selection (they are node ids, not paths), and with
    --xisa collect test files only where the user named some: `pytest --xisa` runs the cells alone."""
    selectors = [arg[len(NODE_PREFIX):] for arg in config.args if arg.startswith(NODE_PREFIX)]
    config.stash[_SELECT_KEY] = selectors
    if selectors:
        config.option.xisa = True
    if not config.getoption("xisa", default=False):
        return
    named = config.args_source == pytest.Config.ArgsSource.ARGS
    config.args[:] = [arg for arg in config.args if named and not arg.startswith(NODE_PREFIX)]


def _devices(config: pytest.Config):
    if _DEVICES_KEY not in config.stash:
        from xisa.device.detect import detect_devices
        from xisa.spec.project import load_project
        from xisa.spec.targets import load_targets

        project = load_project(cwd=Path(str(config.rootpath)))
        targets = load_targets(list(project.target_dirs), root=project.root)
        config.stash[_DEVICES_KEY] = (detect_devices(targets), targets)
    return config.stash[_DEVICES_KEY]


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("xisa_device"):
        if not marker.args or not isinstance(marker.args[0], str):
            raise pytest.UsageError(f"{item.nodeid}: xisa_device needs a target pattern, e.g. xisa_device('sm_90')")
        from xisa.device.detect import gate

        devices, targets = _devices(item.config)
        device, reason = gate(marker.args[0], devices, targets)
        if device is None:
            pytest.skip(reason)


class XisaCellFailure(Exception):
    pass


class XisaCellItem(pytest.Item):
    def __init__(self, *, cell, workspace, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell
        self.workspace = workspace
        self.add_marker("xisa_cell")

    def runtest(self) -> None:
        from xisa.golden.bless import bless
        from xisa.compile.runner import RunOptions, run_cells
        from xisa.compile.toolchain import describe_toolchain
        from xisa.golden.verdict import build_report
        from xisa.workspace import expectation_failures

        cell, ws, config = self.cell, self.workspace, self.config
        [result] = run_cells([cell], roots=list(ws.project.kernel_roots), cache_dir=ws.project.cache_dir,
                             options=RunOptions(jobs=1))
        failures = {cell.id: expectation_failures(cell, result)}
        toolchain = describe_toolchain(backends={cell.target.backend})
        if config.getoption("xisa_update"):
            if not result.ok:
                raise XisaCellFailure(f"compile error, nothing blessed: {result.error}")
            bless([result], golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                  toolchains={cell.target.name: toolchain}, stream_files=ws.project.stream_files,
                  selected_targets={cell.target.name}, kernel_filters=[f"{cell.kernel.name}:{cell.case}"])
            return
        report = build_report([result], failures, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                              selected_targets={cell.target.name}, kernel_filters=[f"{cell.kernel.name}:{cell.case}"],
                              scopes=config.getoption("xisa_scope"), toolchain=toolchain)
        verdict = next(v for v in report.verdicts if v.id == cell.id)
        if report.problems:
            raise XisaCellFailure("untrusted: " + "; ".join(report.problems))
        if verdict.verdict == "error" or verdict.is_regression:
            raise XisaCellFailure(_explain(verdict))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, XisaCellFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.cell.kernel.spec_file, None, f"xisa {self.cell.id}"


def _explain(verdict) -> str:
    lines = [f"{verdict.id}: {verdict.verdict}: {verdict.message}", f"golden: {verdict.golden_file}"]
    delta = verdict.delta
    if delta is not None:
        lines.append(f"instructions: {delta.instructions[0]} -> {delta.instructions[1]}")
        for mnemonic, base, head in delta.histogram[:15]:
            lines.append(f"  {mnemonic}: {base} -> {head} ({head - base:+d})")
        for key, (base, head) in delta.resources.items():
            lines.append(f"  {key}: {base} -> {head}")
        if verdict.base and verdict.base.stream_text and verdict.head and verdict.head.analysis:
            diff = difflib.unified_diff(verdict.base.stream_text.splitlines(), verdict.head.analysis.stream_text.splitlines(),
                                        "golden", "now", lineterm="", n=2)
            body = list(diff)
            lines += body[:60] + ([f"... {len(body) - 60} more diff lines"] if len(body) > 60 else [])
    from xisa.render.report import accept_commands

    for command in accept_commands(_one_cell_report(verdict), kernel_filters=[f"{verdict.kernel}:{verdict.case}"]):
        lines.append(f"accept with: {command}")
    lines.append(f"re-run: pytest --xisa {shlex.quote(NODE_PREFIX + verdict.id)}")
    return "\n".join(lines)


def _one_cell_report(verdict):
    from xisa.golden.verdict import CheckReport

    return CheckReport(verdicts=[verdict], toolchain={}, golden_toolchains={}, scopes=[])


class XisaCollector(pytest.Collector):
    """The parent of every cell item, so each node id reads `xisa::kernel:case@target`."""

    def collect(self):
        return []


@pytest.hookimpl(tryfirst=True)   # before -k / -m deselect, so they apply to cells too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("xisa"):
        return
    from xisa.errors import XisaError
    from xisa.names import closest
    from xisa.golden.verdict import check_scopes
    from xisa.workspace import open_workspace

    try:
        ws = open_workspace(cwd=Path(str(config.rootpath)))
        _, cells = ws.select(arch=config.getoption("xisa_arch") or None, kernel=config.getoption("xisa_kernel") or None)
        check_scopes(config.getoption("xisa_scope"), targets=sorted(ws.targets),
                     cases={spec.name: [case.name for case in spec.cases] for spec in ws.specs})
    except XisaError as exc:
        raise pytest.UsageError(f"xisa: {exc}") from None
    selectors = config.stash.get(_SELECT_KEY, [])
    for selector in selectors:
        if not any(fnmatch.fnmatchcase(cell.id, selector) for cell in cells):
            near = closest(selector, [cell.id for cell in cells])
            raise pytest.UsageError(f"xisa: no cell matches {NODE_PREFIX}{selector}"
                                    + (f" (did you mean {NODE_PREFIX}{near}?)" if near else ""))
    if selectors:
        cells = [cell for cell in cells if any(fnmatch.fnmatchcase(cell.id, s) for s in selectors)]
    parent = XisaCollector.from_parent(session, name="xisa", nodeid="xisa")
    for cell in cells:
        items.append(XisaCellItem.from_parent(parent, name=cell.id, cell=cell, workspace=ws))
