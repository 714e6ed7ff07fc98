"""Golden files: one YAML per (kernel, case, target) and the normalized stream beside it. This module alone
knows where goldens lie; what one records is `xisa.golden.record`'s.

Canonical YAML (sorted keys, no aliases, LF, no timestamps, no absolute paths), written through a
temp file in the same folder and `os.replace`. A corrupt or hand-broken golden is an error, never
silently regenerated. Layout: golden/<kernel>/<case>/<target>.yaml and <target>.isa

golden/ holds no links: git stores symlinks, so a pull request can plant one that leads outside the
project, and nothing here reads, writes or deletes through one (each is refused, naming the link).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xisa.errors import GoldenError, LockError
from xisa.fsio import refuse_link, write_temp
from xisa.names import CASE_NAME, KERNEL_NAME, TARGET_NAME, display_path, is_valid_name
from xisa.compile.worker.result import CellResult
from xisa.golden.material import MaterialStore, lines_digest
from xisa.golden.record import FORMAT, FORMAT_COMPACT, Golden, cell_fields, parse_golden
from xisa.yamlio import dump_yaml, parse_yaml

PENDING_SUFFIX = ".pending"


def golden_paths(golden_dir: Path, kernel: str, case: str, target: str) -> tuple[Path, Path]:
    """The YAML and stream paths of a cell's golden; refused when a name cannot be a path or a link is on the way."""
    for kind, value, pattern in (("kernel", kernel, KERNEL_NAME), ("case", case, CASE_NAME),
                                 ("target", target, TARGET_NAME)):
        if not is_valid_name(value, pattern):
            raise GoldenError(f"{kind} name {value!r} cannot become a path", field=kind)
    folder = golden_dir / kernel / case
    yaml_path, stream_path = folder / f"{target}.yaml", folder / f"{target}.isa"
    for path in (golden_dir, folder.parent, folder, yaml_path, stream_path, _pending(yaml_path)):
        refuse_link(path)
    return yaml_path, stream_path


def _pending(yaml_path: Path) -> Path:
    return yaml_path.with_name(yaml_path.name + PENDING_SUFFIX)


def render_golden(result: CellResult, *, toolchain: dict[str, str], stream_file: bool, layout: str = "full",
                  stages: Mapping[str, str] | None = None, lines: list[Mapping[str, Any]] | None = None,
                  lines_sha256: str | None = None) -> tuple[str, str | None]:
    """The golden's text and its stream file's (None: no stream file): a function of the cell's result and the
    toolchain facts of its backend only (`describe_toolchain(backends={backend})`), so re-blessing an unchanged
    cell changes no byte. `stages`: the stage fingerprints to write instead of the result's (`{}`: none, as a
    golden made before xisa recorded them), so `bless` can tell whether a golden differs in anything else;
    `lines` the same for the source-line table (`[]`: none), `lines_sha256` for a compact golden's fingerprint of
    it (`""`: none).

    `layout` "compact" (`xisa-golden/2`): the same record, every field a verdict judges, but no stream file and
    no source-line table: `lines_sha256` names the table, `sha256` the stream (`xisa.golden.material`)."""
    analysis = result.analysis
    assert analysis is not None
    record = cell_fields(result)
    record.pop("stages", None)
    record.pop("lines", None)
    stages = analysis.stages if stages is None else stages
    if stages:
        record["stages"] = dict(stages)
    lines = analysis.lines if lines is None else lines
    if layout == "compact":
        digest = (lines_digest(lines) if lines else "") if lines_sha256 is None else lines_sha256
        if digest:
            record["lines_sha256"] = digest
        return dump_yaml({"format": FORMAT_COMPACT, "toolchain": dict(toolchain), **record}), None
    if lines:
        record["lines"] = [dict(row) for row in lines]
    data = {"format": FORMAT, "toolchain": dict(toolchain), **record,
            "stream": f"{result.target}.isa" if stream_file else None}
    return dump_yaml(data), analysis.stream_text if stream_file else None


def read_golden(path: Path, stream_path: Path, *, display: str, material: MaterialStore | None = None) -> Golden:
    """Read and validate a golden. A bless killed between its two renames left the new YAML as
    `<name>.pending` beside a new stream (or, migrating to the compact layout, with the stream gone): that is
    read as the new golden (and `bless` finishes it). `material`: where a compact golden's stream is looked up."""
    pending = _pending(path)
    if os.path.lexists(pending):
        try:
            return _read_golden(pending, stream_path, display=display, material=material)
        except GoldenError:
            pass
    return _read_golden(path, stream_path, display=display, material=material)


def _read_golden(path: Path, stream_path: Path, *, display: str, material: MaterialStore | None) -> Golden:
    refuse_link(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise GoldenError("not UTF-8 text: corrupt golden", path=display, fix="restore it from git or re-bless") from None
    except OSError as exc:
        raise GoldenError(f"cannot read: {exc.strerror}", path=display) from None
    return parse_golden(path, text, display=display, stream_name=stream_path.name,
                        read_stream=lambda: _read_stream(stream_path, display), material=material)


def _read_stream(stream_path: Path, display: str) -> str:
    stream_display = str(Path(display).with_name(stream_path.name))
    refuse_link(stream_path)
    try:
        return stream_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GoldenError("stream file is missing", path=stream_display, fix="restore it or re-bless") from None
    except (OSError, UnicodeDecodeError):
        raise GoldenError("stream file cannot be read", path=stream_display) from None


_TOOLCHAIN_BLOCK = re.compile(r"^toolchain:\n((?:  [a-z_]+: .*\n)+)", re.MULTILINE)


def read_golden_toolchain(path: Path) -> dict[str, str] | None:
    """The `toolchain` of a golden, read without parsing the whole file (a check reads it for every cell
    before compiling, and a full parse of 120 goldens costs more than a warm check); None when the
    golden cannot be read or has none, which its full read then reports."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    block = _TOOLCHAIN_BLOCK.search(text)
    if block is None:
        return _parsed_toolchain(text, str(path))
    if block.group(0) not in _TOOLCHAIN_BLOCKS:   # the goldens of one toolchain share a few blocks: each parsed once
        _TOOLCHAIN_BLOCKS[block.group(0)] = _parsed_toolchain(block.group(0), str(path))
    found = _TOOLCHAIN_BLOCKS[block.group(0)]
    return dict(found) if found is not None else None


_TOOLCHAIN_BLOCKS: dict[str, dict[str, str] | None] = {}


def _parsed_toolchain(text: str, path: str) -> dict[str, str] | None:
    try:
        data = parse_yaml(text, path=path, error=GoldenError)
    except GoldenError:
        return None
    toolchain = data.get("toolchain") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in toolchain.items()} if isinstance(toolchain, dict) else None


def _golden_files(golden_dir: Path) -> Iterator[Path]:
    """Every file in golden/<kernel>/<case>/, sorted. A link anywhere on the way is refused, never followed:
    a kernel folder linked outside the project would otherwise be listed, its files removed as unused."""
    refuse_link(golden_dir)
    if not golden_dir.is_dir():
        return
    for kernel_dir in sorted(golden_dir.iterdir()):
        refuse_link(kernel_dir)
        if not kernel_dir.is_dir():
            continue
        for case_dir in sorted(kernel_dir.iterdir()):
            refuse_link(case_dir)
            if not case_dir.is_dir():
                continue
            for path in sorted(case_dir.iterdir()):
                refuse_link(path)
                yield path


def list_goldens(golden_dir: Path) -> list[tuple[str, str, str]]:
    """(kernel, case, target) of every golden YAML on disk."""
    return [(path.parent.parent.name, path.parent.name, path.stem) for path in _golden_files(golden_dir)
            if path.suffix == ".yaml" and path.is_file()]


Key = tuple[str, str, str]     # (kernel, case, target)


@dataclass
class GoldenEntry:
    """One cell's golden as a judgement sees it: how outputs name its YAML, the golden (None: there is none)
    or why it cannot be read."""

    display: str
    golden: Golden | None = None
    error: GoldenError | None = None


@dataclass
class GoldenSet:
    """The goldens a judgement compares with, each read once, before judging: the cells' own (`entry`) and
    every golden the set holds (`keys`, for the unused ones). Read from a folder (`read`) or made from
    compiled results in memory (`of_results`: a compiled side is judged as goldens without writing any).
    `owner` names the revision they were read from (a PR gate's base), where re-blessing cannot fix them."""

    entries: dict[Key, GoldenEntry]
    listed: list[Key]
    displays: dict[Key, str | GoldenError]     # each listed golden's name in outputs, or why it has none
    owner: str = ""

    @classmethod
    def read(cls, golden_dir: Path, keys: list[Key], *, display_root: Path, owner: str = "",
             material: MaterialStore | None = None) -> "GoldenSet":
        """The goldens of `keys` read from `golden_dir` (a link on the way is refused: GoldenError), and the
        keys of every golden there. Outputs name each `owner:path` (`main:golden/...`) or its path from
        `display_root`. `material`: where compact goldens' streams and lines are looked up for a review."""
        def show(path: Path) -> str:
            return f"{owner}:" * bool(owner) + display_path(path, display_root)

        entries: dict[Key, GoldenEntry] = {}
        for key in keys:
            yaml_path, stream_path = golden_paths(golden_dir, *key)
            entry = entries[key] = GoldenEntry(display=show(yaml_path))
            if yaml_path.exists():
                try:
                    entry.golden = read_golden(yaml_path, stream_path, display=entry.display, material=material)
                except GoldenError as exc:
                    entry.error = exc
        listed = list_goldens(golden_dir)
        displays: dict[Key, str | GoldenError] = {}
        for key in listed:
            try:
                displays[key] = entries[key].display if key in entries else show(golden_paths(golden_dir, *key)[0])
            except GoldenError as exc:   # a folder name that cannot be a cell's: refused if it is ever named
                displays[key] = exc
        return cls(entries=entries, listed=listed, displays=displays, owner=owner)

    @classmethod
    def for_results(cls, golden_dir: Path, results: list[CellResult], *, display_root: Path,
                    owner: str = "", material: MaterialStore | None = None) -> "GoldenSet":
        """`read` for the cells of `results`."""
        return cls.read(golden_dir, [(r.kernel, r.case, r.target) for r in results], display_root=display_root,
                        owner=owner, material=material)

    @classmethod
    def of_results(cls, results: list[CellResult], toolchains: Mapping[str, dict[str, str]]) -> "GoldenSet":
        """The goldens `xisa bless` would write for the compiled `results` (each with its target's toolchain
        facts, its stream), as a folder `golden/` of them would read back; failed results have none."""
        entries: dict[Key, GoldenEntry] = {}
        for result in results:
            if not result.ok:
                continue
            key = (result.kernel, result.case, result.target)
            golden_paths(Path("golden"), *key)   # names that cannot be paths are refused, as for a folder
            relative = Path("golden", result.kernel, result.case, f"{result.target}.yaml")
            yaml_text, stream_text = render_golden(result, toolchain=toolchains[result.target], stream_file=True)
            golden = parse_golden(relative, yaml_text, display=str(relative), stream_name=f"{result.target}.isa",
                                   read_stream=lambda text=stream_text: text or "")
            entries[key] = GoldenEntry(display=str(relative), golden=golden)
        listed = sorted(entries)
        return cls(entries=entries, listed=listed, displays={key: entries[key].display for key in listed})

    def entry(self, key: Key) -> GoldenEntry:
        """A cell's golden; a cell the set was not read for has none."""
        return self.entries.get(key) or GoldenEntry(display="")

    def keys(self) -> list[Key]:
        """(kernel, case, target) of every golden the set holds, in folder order."""
        return list(self.listed)

    def display(self, key: Key) -> str:
        """How outputs name a listed golden's YAML."""
        shown = self.displays[key]
        if isinstance(shown, GoldenError):
            raise shown
        return shown


def recorded_toolchain(golden_dir: Path, key: Key) -> dict[str, str] | None:
    """The toolchain a cell's golden records (`read_golden_toolchain`), None when it has none."""
    return read_golden_toolchain(golden_paths(golden_dir, *key)[0])


def golden_files(yaml_file: str) -> tuple[str, str]:
    """A golden's two files, named as its YAML is named (`golden/k/c/t.yaml` -> that and `golden/k/c/t.isa`)."""
    return yaml_file, yaml_file[:-len(".yaml")] + ".isa"


def scan_golden_toolchains(golden_dir: Path, *, display_root: Path | None = None) -> dict[str, Any]:
    """Count the goldens per Triton version (and AMD codegen revision, ptxas version) from their `toolchain`."""
    triton: dict[str, int] = {}
    codegen: dict[str, int] = {}
    ptxas: dict[str, int] = {}
    unreadable: list[str] = []
    files = sorted(golden_dir.glob("**/*.yaml")) if golden_dir.is_dir() else []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def show(path: Path) -> str:
        return display_path(path, display_root or golden_dir.parent)

    for path in files:
        try:
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
            chain = data.get("toolchain") if isinstance(data, dict) else None
            if not isinstance(chain, dict) or "triton" not in chain:
                raise ValueError("no toolchain")
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, AttributeError):
            unreadable.append(show(path))
            continue
        for counter, key in ((triton, "triton"), (codegen, "amd_codegen"), (ptxas, "ptxas")):
            if chain.get(key) is not None:
                counter[str(chain[key])] = counter.get(str(chain[key]), 0) + 1
    return {"dir": show(golden_dir), "files": len(files), "triton": dict(sorted(triton.items())),
            "amd_codegen": dict(sorted(codegen.items())), "ptxas": dict(sorted(ptxas.items())),
            "unreadable": unreadable}


def golden_set_digest(golden_dir: Path) -> str:
    """SHA-256 over every golden's YAML and stream (relative path and bytes): which goldens a check compared with."""
    digest = hashlib.sha256()
    for path in _golden_files(golden_dir):
        if path.suffix in (".yaml", ".isa") and path.is_file():
            relative = path.relative_to(golden_dir).as_posix()
            digest.update(f"{relative}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def pending_files(golden_dir: Path) -> list[Path]:
    return [path for path in _golden_files(golden_dir) if path.name.endswith(PENDING_SUFFIX)]


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP wait until a golden's two files are both replaced."""
    if hasattr(signal, "pthread_sigmask"):
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    else:  # pragma: no cover
        yield


def write_golden(yaml_path: Path, stream_path: Path, yaml_text: str, stream_text: str | None) -> None:
    """Replace a golden atomically. The new YAML waits as `<name>.pending` until the stream is in place,
    so even a SIGKILL between the two renames leaves something `recover_pending` completes."""
    yaml_path.parent.mkdir(parents=True, exist_ok=True)
    pending = _pending(yaml_path)
    tmp_yaml = tmp_stream = None
    try:
        tmp_yaml = write_temp(yaml_path, yaml_text, mode=0o666, fsync=True)
        tmp_stream = write_temp(stream_path, stream_text, mode=0o666, fsync=True) if stream_text is not None else None
        with _signals_deferred():
            os.replace(tmp_yaml, pending)
            try:
                if tmp_stream is not None:
                    os.replace(tmp_stream, stream_path)
                elif stream_path.exists():
                    stream_path.unlink()
            except BaseException:  # the old stream is still there: the new YAML must not be finished later
                with contextlib.suppress(OSError):
                    pending.unlink()
                raise
            os.replace(pending, yaml_path)
            _fsync_dir(yaml_path.parent)
    finally:
        for leftover in (tmp_yaml, tmp_stream):
            if leftover is not None and leftover.exists():
                leftover.unlink()


def remove_golden(yaml_path: Path, stream_path: Path) -> None:
    with _signals_deferred():
        for path in (yaml_path, stream_path):
            if path.exists():
                path.unlink()
        for folder in (yaml_path.parent, yaml_path.parent.parent):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


def recover_pending(golden_dir: Path) -> list[Path]:
    """Finish a bless that was killed between a golden's renames; drop stray temp files."""
    finished = []
    for pending in pending_files(golden_dir):
        target = pending.with_name(pending.name[: -len(PENDING_SUFFIX)])
        os.replace(pending, target)
        finished.append(target)
    for tmp in _golden_files(golden_dir):
        if tmp.name.startswith(".") and tmp.name.endswith(".tmp"):
            tmp.unlink()
    return finished


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def golden_lock(golden_dir: Path, *, timeout: float = 30.0) -> Iterator[None]:
    """Serialize writers of one golden folder (two `bless` runs at once).

    The lock is the folder itself (flock on its descriptor), not a file inside it, so nothing that
    could be committed is ever left in the golden folder, and two checkouts never share a lock."""
    refuse_link(golden_dir)
    golden_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(golden_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LockError(f"another xisa bless is writing this golden folder for more than {timeout:g} s",
                                    path=str(golden_dir), fix="wait for it to finish, or stop it") from None
                time.sleep(0.1)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
