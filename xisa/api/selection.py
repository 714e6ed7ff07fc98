"""What a command selects, built once by the shell that parsed it (a CLI command, the pytest plugin, the
`xisa ab` side process) and handed down whole."""

from __future__ import annotations

import dataclasses
import shlex
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
