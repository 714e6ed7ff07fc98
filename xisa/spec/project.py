"""Where things are: the project root, its `[tool.xisa]` settings, specs, targets, goldens, cache."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from xisa.errors import SpecError
from xisa.names import display_path

BUNDLED_TARGETS = Path(__file__).resolve().parent.parent / "_targets"         # in an installed wheel
REPO_TARGETS = Path(__file__).resolve().parent.parent.parent / "targets"     # in a source checkout
_SETTINGS = {"specs", "targets", "golden", "golden_layout", "stream_files", "cache", "cache_size", "pythonpath",
             "import_hooks"}
DEFAULT_CACHE_SIZE = 2 * 1024 ** 3   # bytes: ~20,000 cells of this repository's corpus (~100 KB a result)
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?B?)\s*", re.IGNORECASE)
GOLDEN_LAYOUTS = ("compact", "full")


@dataclass(frozen=True)
class Project:
    root: Path
    spec_paths: tuple[Path, ...]
    target_dirs: tuple[Path, ...]
    golden_dir: Path
    stream_files: bool
    cache_dir: Path
    # "compact" (the default: every judged field, the stream and source lines by fingerprint) or "full" (the
    # stream file beside each golden, the lines inside it); `stream_files` applies to the full layout only.
    golden_layout: str = "compact"
    config_file: Path | None = None
    kernel_roots: tuple[Path, ...] = field(default=())
    pythonpath: tuple[Path, ...] = field(default=())     # put ahead of sys.path for every kernel load
    import_hooks: tuple[Path, ...] = field(default=())   # run before every kernel load (stubs of GPU queries)
    cache_limit: int = DEFAULT_CACHE_SIZE                # bytes the cache folder may hold

    def display(self, path: Path) -> str:
        return display_path(path, self.root)


def parse_cache_size(value, *, path: str, field: str) -> int:
    """A cache size: bytes as a number, or a string such as "500MB", "2GiB", "1.5G" (K, M, G, T are powers of 1024)."""
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if match is None or float(match.group(1)) <= 0:
        raise SpecError(f"{value!r} is not a cache size", path=path, field=field,
                        fix='a number of bytes or a size such as "500MB" or "2GiB"')
    return int(float(match.group(1)) * 1024 ** " KMGT".index(match.group(2).upper() or " "))


def cache_size_from_environment() -> int | None:
    """XISA_CACHE_SIZE, None when unset."""
    value = os.environ.get("XISA_CACHE_SIZE")
    return parse_cache_size(value, path="the environment", field="XISA_CACHE_SIZE") if value else None


def find_root(start: Path) -> tuple[Path, Path | None]:
    """The nearest folder holding a pyproject.toml with [tool.xisa], else one holding kernels/, else `start`."""
    start = start.resolve()
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "[tool.xisa" in pyproject.read_text(encoding="utf-8", errors="replace"):
            return folder, pyproject
    for folder in (start, *start.parents):
        if (folder / "kernels").is_dir():
            return folder, None
    return start, None


def read_settings(text: str, *, path: str) -> dict:
    """The `[tool.xisa]` table of a pyproject.toml's text (`path` names it in errors), its keys checked."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"invalid TOML: {exc}", path=path) from None
    settings = data.get("tool", {}).get("xisa", {}) or {}
    unknown = sorted(set(settings) - _SETTINGS)
    if unknown:
        raise SpecError(f"unknown setting {unknown[0]!r}", path=path, field=f"tool.xisa.{unknown[0]}",
                        fix=f"allowed: {', '.join(sorted(_SETTINGS))}")
    return settings


def setting_paths(settings: dict, key: str, default: list[str], *, path: str = "pyproject.toml") -> list[str]:
    """A path setting (`specs`, `targets`, `golden`) as a list of paths relative to the project root."""
    value = settings.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError("must be a path or a list of paths", path=path, field=f"tool.xisa.{key}")
    return value


GOLDEN_DEFAULT = ["golden"]


def project_entries(settings: dict, key: str, root: Path, *, path: str, kind: str) -> tuple[Path, ...]:
    """`pythonpath` (kind "folder") or `import_hooks` (kind "file"): paths relative to the project root, each
    one existing inside the project and reached through no link, so a spec loads alike from any folder and no
    setting leads a load out of the project."""
    value = settings.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SpecError(f"must be a list of {kind} paths relative to the project root", path=path,
                        field=f"tool.xisa.{key}", fix=f'e.g. {key} = ["src"]' if kind == "folder"
                        else f'e.g. {key} = ["tests/xisa_stubs.py"]')
    root = Path(os.path.abspath(root))
    entries = []
    for index, entry in enumerate(value):
        where = f"tool.xisa.{key}[{index}]"
        candidate = Path(os.path.abspath(root / entry))
        if Path(entry).is_absolute() or not candidate.is_relative_to(root):
            raise SpecError(f"{entry!r} is outside the project", path=path, field=where,
                            fix=f"give a {kind} inside {root} relative to it (vendor outside code into the project)")
        links = [p for p in (candidate, *candidate.parents) if p.is_relative_to(root) and p != root and p.is_symlink()]
        if links:
            raise SpecError(f"{entry!r} goes through the link {links[-1].relative_to(root).as_posix()}", path=path,
                            field=where, fix=f"name the real {kind}, inside the project")
        exists = candidate.is_dir() if kind == "folder" else (candidate.is_file() and candidate.suffix == ".py")
        if not exists:
            what = "no such folder" if kind == "folder" else "no such .py file"
            raise SpecError(f"{entry!r}: {what} in {root}", path=path, field=where,
                            fix=f"create it, or remove it from [tool.xisa] {key}")
        if candidate in entries:
            raise SpecError(f"{entry!r} is listed twice", path=path, field=where, fix="list it once")
        entries.append(candidate)
    return tuple(entries)


def _refuse_links_below(root: Path, folder: Path) -> None:
    """Refuse a link between the project root and `folder` (the golden folder): git stores links, so a
    committed `data -> ../elsewhere` with `golden = "data/golden"` would lead every golden write and
    removal out of the project. The folder itself is checked wherever a golden path is made."""
    from xisa.fsio import refuse_link

    folder = Path(os.path.abspath(folder))
    for ancestor in reversed(folder.parents):
        if ancestor != root and ancestor.is_relative_to(root):
            refuse_link(ancestor)


def load_project(*, cwd: Path | None = None, spec: list[Path] | None = None, golden: Path | None = None) -> Project:
    root, config_file = find_root(cwd or Path.cwd())
    settings: dict = {}
    if config_file is not None:
        settings = read_settings(config_file.read_text(encoding="utf-8"), path=str(config_file))

    def paths(key: str, default: list[str]) -> list[Path]:
        return [(root / v) for v in setting_paths(settings, key, default)]

    spec_paths = [p if p.is_absolute() else (Path.cwd() / p) for p in spec] if spec else paths("specs", ["kernels"])
    bundled = BUNDLED_TARGETS if BUNDLED_TARGETS.is_dir() else REPO_TARGETS
    target_dirs = [bundled] + [p for p in paths("targets", ["targets"]) if p.resolve() != bundled.resolve()]
    golden_dir = golden or paths("golden", GOLDEN_DEFAULT)[0]
    stream_files = settings.get("stream_files", True)
    if not isinstance(stream_files, bool):
        raise SpecError("must be true or false", path="pyproject.toml", field="tool.xisa.stream_files")
    # A project that asked for stream files before the compact layout existed keeps the layout that has them.
    golden_layout = settings.get("golden_layout", "full" if "stream_files" in settings else "compact")
    if golden_layout not in GOLDEN_LAYOUTS:
        raise SpecError(f"must be one of {', '.join(repr(v) for v in GOLDEN_LAYOUTS)}, not {golden_layout!r}",
                        path="pyproject.toml", field="tool.xisa.golden_layout",
                        fix='golden_layout = "compact" (small goldens) or "full" (stream files committed)')
    cache_env = os.environ.get("XISA_CACHE_DIR")
    if cache_env:
        cache_dir = Path(cache_env)
    elif "cache" in settings:
        cache_dir = root / str(settings["cache"])
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cache_dir = base / "xisa"
    cache_limit = cache_size_from_environment() or (
        parse_cache_size(settings["cache_size"], path=str(config_file), field="tool.xisa.cache_size")
        if "cache_size" in settings else DEFAULT_CACHE_SIZE)
    _refuse_links_below(root, golden_dir)
    shown = display_path(config_file, root) if config_file is not None else "pyproject.toml"
    pythonpath = project_entries(settings, "pythonpath", root, path=shown, kind="folder")
    import_hooks = project_entries(settings, "import_hooks", root, path=shown, kind="file")
    roots = {root.resolve()}
    for path in spec_paths:
        roots.add((path if path.is_dir() else path.parent).resolve())
    return Project(root=root, spec_paths=tuple(spec_paths), target_dirs=tuple(target_dirs), golden_dir=golden_dir,
                   stream_files=stream_files, cache_dir=cache_dir, golden_layout=golden_layout, config_file=config_file,
                   kernel_roots=tuple(sorted(roots)), pythonpath=pythonpath, import_hooks=import_hooks,
                   cache_limit=cache_limit)
