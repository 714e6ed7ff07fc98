"""pytest integration: `@pytest.mark.xisa_device(...)` gating, and `pytest --xisa` (one item per cell).

Thin glue, as in syrupy: a session compiles the cells in one pool and judges them in one report
(`xisa.api`); pytest only presents the verdicts, and fails the session on goldens the selection
leaves unused, as `xisa check` does.

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
_UNUSED_KEY = pytest.StashKey[list]()
_SELECTION_KEY = pytest.StashKey[tuple]()
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


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class XisaSession:
    """The cells of one pytest process, as syrupy keeps its snapshots: compiled in one pool when the
    first of them runs (an xdist worker compiles each cell it is handed), judged in one report; the
    goldens the selection leaves unused are listed at the end and fail the session."""

    def __init__(self, config: pytest.Config, selection, ws, chosen, cells):
        self.config, self.selection, self.ws, self.chosen, self.cells = config, selection, ws, chosen, cells
        self.results: dict[str, object] = {}
        self.failures: dict[str, list] = {}
        self.verdicts: dict[str, object] = {}
        self.problems: list[str] = []

    def _compile(self, cells) -> None:
        from xisa import api
        from xisa.compile.runner import RunOptions

        run = api.compile_cells(self.ws, self.chosen, cells, options=RunOptions())
        self.results.update((result.id, result) for result in run.results)
        self.failures.update(run.failures)
        if not self.config.getoption("xisa_update"):
            report = api.judge(self.ws, run, kernel_filters=[f"{c.kernel.name}:{c.case}" for c in cells],
                               scopes=self.selection.scope)
            self.verdicts.update((v.id, v) for v in report.verdicts)
            self.problems = report.problems

    def outcome(self, item: "XisaCellItem"):
        """The item's result and verdict; the first item compiles every cell this process will run."""
        if item.cell.id not in self.results:
            if _is_xdist_worker(self.config):
                cells = [item.cell]
            else:
                cells = [i.cell for i in item.session.items
                         if isinstance(i, XisaCellItem) and i.cell.id not in self.results]
            self._compile(cells)
        return self.results[item.cell.id], self.verdicts.get(item.cell.id)

    def bless(self, cell, result) -> None:
        """One cell's golden, and nothing else: a -k that deselects cells must not remove their goldens."""
        from xisa import api

        run = api.Run(targets=[cell.target], results=[result], failures={})
        api.bless_run(self.ws, run, kernel_filters=[f"{cell.kernel.name}:{cell.case}"])


class XisaCellItem(pytest.Item):
    def __init__(self, *, cell, xisa_session: XisaSession, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell
        self.xisa_session = xisa_session
        self.add_marker("xisa_cell")

    def runtest(self) -> None:
        import sys

        session = self.xisa_session
        result, verdict = session.outcome(self)
        for failure in session.failures.get(self.cell.id, []):   # on stderr, as every xisa command prints them
            print(f"expectation failed {self.cell.id}: {failure}", file=sys.stderr)
        if result.launch is not None and not result.launch.launchable:   # expected or not, the item says so
            self.user_properties.append(("xisa_launch", str(result.launch)))
            print(f"{self.cell.id} {result.launch}", file=sys.stderr)
        if self.config.getoption("xisa_update"):
            if not result.ok:
                raise XisaCellFailure(f"compile error, nothing blessed: {result.error}")
            session.bless(self.cell, result)
            return
        if session.problems:
            raise XisaCellFailure("untrusted: " + "; ".join(session.problems))
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
        if verdict.base and verdict.base.review_stream() and verdict.head and verdict.head.analysis:
            diff = difflib.unified_diff(verdict.base.review_stream().splitlines(), verdict.head.analysis.stream_text.splitlines(),
                                        "golden", "now", lineterm="", n=2)
            body = list(diff)
            lines += body[:60] + ([f"... {len(body) - 60} more diff lines"] if len(body) > 60 else [])
        elif verdict.review_note:
            lines.append(verdict.review_note)
    from xisa.render.review import accept_commands

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


def _select(config: pytest.Config):
    """The selection of `--xisa` (its --xisa-arch, --xisa-kernel and --xisa-scope), its workspace, and the
    targets and cells it and the `xisa::` node ids select, the scopes checked; a bad option is a usage error."""
    if _SELECTION_KEY in config.stash:
        return config.stash[_SELECTION_KEY]
    from xisa import api
    from xisa.errors import XisaError
    from xisa.names import closest

    try:
        selection = api.Selection(arch=config.getoption("xisa_arch") or None,
                                  kernel=config.getoption("xisa_kernel") or None, scope=config.getoption("xisa_scope"))
        ws = selection.workspace(cwd=Path(str(config.rootpath)))
        chosen, cells = selection.cells(ws)
        api.validate_scopes(selection.scope, ws)
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
    config.stash[_SELECTION_KEY] = selection, ws, chosen, cells
    return selection, ws, chosen, cells


@pytest.hookimpl(tryfirst=True)   # before -k / -m deselect, so they apply to cells too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("xisa"):
        return
    selection, ws, chosen, cells = _select(config)
    xisa_session = XisaSession(config, selection, ws, chosen, cells)
    parent = XisaCollector.from_parent(session, name="xisa", nodeid="xisa")
    for cell in cells:
        items.append(XisaCellItem.from_parent(parent, name=cell.id, cell=cell, xisa_session=xisa_session))


def _unused_goldens(config: pytest.Config) -> list:
    """The goldens of the selection with no cell, as `xisa check` finds them (in the process that
    reports: not in an xdist worker)."""
    from xisa import api

    selection, ws, chosen, cells = _select(config)
    return api.unused_goldens(ws, chosen, cells, kernel_filters=selection.kernel,
                              cell_patterns=config.stash.get(_SELECT_KEY, []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if config.getoption("xisa", default=False) and _SELECTION_KEY in config.stash:
        config.stash[_SELECTION_KEY][1].keep_cache_bounded()   # this process's review writes: the limit holds
    if (not config.getoption("xisa", default=False) or _is_xdist_worker(config) or config.option.collectonly
            or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)):
        return
    try:
        unused = _unused_goldens(config)
    except pytest.UsageError:   # an xdist controller, whose workers have reported it already
        return
    config.stash[_UNUSED_KEY] = unused
    if unused and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if config.getoption("xisa", default=False):
        from xisa.compile.worker.toolchain import pinned_note

        note = pinned_note()   # as every command says it: the cells ignored a knob the environment sets
        if note:
            terminalreporter.write_line(f"xisa: note: {note}")
    unused = config.stash.get(_UNUSED_KEY, [])
    if not unused:
        return
    terminalreporter.write_sep("-", f"xisa: {len(unused)} unused golden{'s' if len(unused) != 1 else ''}", red=True)
    for verdict in unused:
        terminalreporter.write_line(f"unused golden: {verdict.id}: {verdict.golden_file}: {verdict.message}")
