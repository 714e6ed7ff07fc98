"""What a command selects, built once by the shell that parsed it (a CLI command, the pytest plugin, the
`xisa ab` side process) and handed down whole."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xisa.api.workspace import Workspace, open_workspace
from xisa.spec.cases import Cell
from xisa.errors import UsageError
from xisa.spec.shard import ShardPlan, make_plan, parse_shard, read_timings
from xisa.spec.targets import Target


@dataclass(frozen=True)
class Selection:
    """The cells a command works on and how they are judged; None where the option was not given.

    `arch`: target names or globs; `kernel`: KERNEL or KERNEL:CASE globs; `spec`: spec files or folders
    (default: the project's); `golden`: the golden folder (default: the project's); `scope`: the
    TARGET[:KERNEL[:CASE]] globs allowed to change; `shard`: the `I/N` text of --shard; `timings`: the
    recorded per-cell seconds (`{cell id: seconds}`) that split the shards longest-first (else by cell hash)."""

    arch: list[str] | None = None
    kernel: list[str] | None = None
    spec: list[Path] | None = None
    golden: Path | None = None
    scope: list[str] | None = None
    shard: str | None = None
    timings: Path | None = None

    def workspace(self, *, cwd: Path | None = None) -> Workspace:
        return open_workspace(spec=self.spec, golden=self.golden, cwd=cwd)

    def whole(self) -> Selection:
        """Every cell of the same specs and goldens: no target, kernel or shard narrows it."""
        return dataclasses.replace(self, arch=None, kernel=None, shard=None, timings=None)

    def shard_plan(self, cells: list[Cell]) -> ShardPlan | None:
        """How --shard splits `cells` (the whole selection): None without --shard."""
        shard = parse_shard(self.shard)
        if shard is None:
            if self.timings is not None:
                raise UsageError("--timings splits shards: it needs --shard", field="--timings",
                                 fix="add --shard I/N, or drop --timings")
            return None
        return make_plan([c.id for c in cells], shard[1], read_timings(self.timings) if self.timings else None)

    def cells(self, ws: Workspace, *, sharded: bool = True) -> tuple[list[Target], list[Cell]]:
        """The targets and cells selected in `ws` (this shard's only, unless `sharded` is false)."""
        chosen, cells = ws.select(arch=self.arch, kernel=self.kernel)
        plan = self.shard_plan(cells) if sharded else None
        if plan is not None:
            index = parse_shard(self.shard)[0] - 1   # type: ignore[index]
            cells = [c for c in cells if plan.shard_of(c.id) == index]
        return chosen, cells

    def require_cells(self, ws: Workspace, cells: list[Cell], *,
                      goldens_left: Callable[[], bool] | None = None) -> None:
        """Refuse an --arch or --kernel that selects no cell (exit 2, one line naming the filter that matched
        nothing and what does have cells): a check of nothing must not pass. `cells` is the whole selection (every
        shard's). A selection without filters passes (a project with no cells has nothing to do), and so does one
        whose targets and kernels still hold goldens (`goldens_left()` true: the check reports them as unused,
        bless removes them)."""
        if cells or not (self.arch or self.kernel):
            return
        _, everything = ws.select()
        if everything and not (goldens_left is not None and goldens_left()):
            raise nothing_selected(ws, self.arch, self.kernel, everything)

    def location_args(self) -> list[str]:
        """`--spec` and `--golden` as given: what a suggested command repeats to mean the same project."""
        words = [word for path in self.spec or [] for word in ("--spec", str(path))]
        return words + (["--golden", str(self.golden)] if self.golden is not None else [])

    def ab_command(self) -> str:
        """The `xisa ab` that compares this selection's goldens with this toolchain's compile of it."""
        words = ["xisa", "ab", "--a-golden"]
        for flag, values in (("--arch", self.arch), ("--kernel", self.kernel), ("--spec", self.spec),
                             ("--golden", [self.golden] if self.golden else [])):
            words += [word for value in values or [] for word in (flag, str(value))]
        return shlex.join(words)

    def side_args(self) -> list[str]:
        """The selection as `xisa ab-side` arguments, for a process in another Python (spec paths absolute)."""
        words = [word for name in self.arch or [] for word in ("--arch", name)]
        words += [word for name in self.kernel or [] for word in ("--kernel", name)]
        return words + [word for path in self.spec or [] for word in ("--spec", str(Path(path).resolve()))]


def _listed(names, limit: int = 12) -> str:
    names = sorted(set(names))
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _quoted(values: list[str]) -> str:
    """--arch or --kernel values as given, each as a shell would take it back."""
    return " ".join(shlex.quote(v) for v in values)


def nothing_selected(ws: Workspace, arch: list[str] | None, kernel: list[str] | None,
                     everything: list[Cell]) -> UsageError:
    """The error for filters that together select no cell: the filter to blame (an --arch none of whose targets
    has a cell, a --kernel matching no case, or the two together) and what exists instead."""
    by_arch = ws.select(arch=arch)[1] if arch else everything
    by_kernel = ws.select(kernel=kernel)[1] if kernel else everything
    with_cells = _listed(c.target.name for c in everything)
    if arch and not by_arch:
        chosen = [t.name for t in ws.select(arch=arch)[0]]
        named = f"{'targets' if len(chosen) > 1 else 'target'} {_listed(chosen)}"
        return UsageError(f"{_quoted(arch)} selects no cell: no case of the specs runs on {named}",
                          field="--arch", fix=f"the targets with cells: {with_cells}")
    if kernel and not by_kernel:
        return UsageError(f"{_quoted(kernel)} selects no cell: no kernel:case matches it", field="--kernel",
                          fix=f"the cases: {_listed(f'{c.kernel.name}:{c.case}' for c in everything)}")
    return UsageError(f"--arch {_quoted(arch or [])} with --kernel {_quoted(kernel or [])} selects no cell: the "
                      f"cases --kernel matches run on {_listed(c.target.name for c in by_kernel)}",
                      field="--arch", fix="pick one of those targets, or another --kernel")
