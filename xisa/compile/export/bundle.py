"""An export bundle on disk: Triton cache entries, one folder each, and `manifest.json` beside them.

    DIR/manifest.json          what the bundle is for and what each cell is (written last: no manifest, no bundle)
    DIR/<entry folder>/...     Triton's entry: the folder `get_cache_manager` names for the key (base32 of it), the
                               stages and code object `triton.compile` wrote, `__grp__<kernel>.json`

DIR is a Triton cache folder: `TRITON_CACHE_DIR=DIR` makes a launch find the entries; Triton reads no other file.
Reading a manifest checks its shape and every name it joins to DIR; `bundle_problems` checks the entries against it.
Pure: imports no Triton.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from xisa.errors import XisaError

MANIFEST = "manifest.json"
SCHEMA = 1
KIND = "xisa-export"
PARTIAL_PREFIX = ".xisa-export-partial-"   # an export under way (or interrupted) keeps its work here

_FOLDER = re.compile(r"^[A-Z2-7]{52}$")              # `_base32` of a sha256, as Triton names an entry's folder
_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")
_KEY = re.compile(r"^[0-9a-f]{64}$")
CELL_FIELDS = {"kernel": str, "case": str, "target": str, "key": str, "folder": str, "group_file": str,
               "files": list, "code_object": str, "code_sha256": str, "source_hash": str, "gpu_target": list,
               "launch_options": dict, "golden": str}


class BundleError(XisaError):
    """A bundle that is not whole or not a bundle: nothing it says can be trusted (exit 2)."""


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    from xisa.fsio import write_atomic

    write_atomic(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n", mode=0o644)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of the bundle in `folder`, its shape checked; BundleError names what is wrong."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise BundleError("is not a folder", path=str(folder), fix="name the folder `xisa export -o` wrote "
                          "(extract a --tar archive first)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        partial = any(p.name.startswith(PARTIAL_PREFIX) for p in folder.iterdir())
        raise BundleError("has no manifest.json" + (": its export was interrupted" if partial else ""),
                          path=str(folder), fix="export it again into an empty folder") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"cannot be read: {exc}", path=str(path), fix="export the bundle again") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise BundleError(f"is not an xisa export manifest (kind {data.get('kind') if isinstance(data, dict) else None!r})",
                          path=str(path), field="kind", fix="name the folder `xisa export -o` wrote")
    if data.get("schema") != SCHEMA:
        raise BundleError(f"has schema {data.get('schema')!r}; this xisa reads schema {SCHEMA}", path=str(path),
                          field="schema", fix="verify it with the xisa that exported it, or export it again")
    toolchain = data.get("toolchain")
    if not isinstance(toolchain, dict) or not isinstance(toolchain.get("triton_key"), str):
        raise BundleError("has no toolchain.triton_key", path=str(path), field="toolchain", fix="export it again")
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise BundleError("has no list of cells", path=str(path), field="cells", fix="export it again")
    for index, cell in enumerate(cells):
        _check_cell(cell, path, f"cells[{index}]")
    return data


def _check_cell(cell: Any, path: Path, where: str) -> None:
    if not isinstance(cell, dict):
        raise BundleError("is not an object", path=str(path), field=where, fix="export the bundle again")
    for name, kind in CELL_FIELDS.items():
        if not isinstance(cell.get(name), kind):
            raise BundleError(f"has no {kind.__name__} {name!r}", path=str(path), field=where, fix="export it again")
    if not _KEY.match(cell["key"]) or not _FOLDER.match(cell["folder"]):
        raise BundleError(f"key {cell['key']!r} / folder {cell['folder']!r} are not a Triton key and its folder",
                          path=str(path), field=where, fix="export the bundle again")
    for name in [cell["group_file"], cell["code_object"], *cell["files"]]:
        if not isinstance(name, str) or not _FILE.match(name):
            raise BundleError(f"names a file {name!r} that is not a plain file name", path=str(path), field=where,
                              fix="export the bundle again")


def bundle_problems(folder: Path, manifest: dict[str, Any]) -> list[str]:
    """What does not agree between the manifest and the entries on disk, one line each (empty: whole)."""
    problems = []
    for cell in manifest["cells"]:
        entry = folder / cell["folder"]
        name = f"{cell['kernel']}:{cell['case']}:{cell['target']}"
        try:
            group = json.loads((entry / cell["group_file"]).read_text(encoding="utf-8"))
            listed = sorted(group["child_paths"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{name}: {cell['folder']}/{cell['group_file']} is missing or not a Triton group "
                            f"({type(exc).__name__})")
            continue
        if listed != sorted(cell["files"]):
            problems.append(f"{name}: the group names {listed}, the manifest {sorted(cell['files'])}")
            continue
        missing = [f for f in cell["files"] if not (entry / f).is_file()]
        if missing:
            problems.append(f"{name}: {cell['folder']}/{missing[0]} is missing")
            continue
        digest = hashlib.sha256((entry / cell["code_object"]).read_bytes()).hexdigest()
        if digest != cell["code_sha256"]:
            problems.append(f"{name}: {cell['folder']}/{cell['code_object']} has sha256 {digest[:16]}..., the "
                            f"manifest says {cell['code_sha256'][:16]}...")
    return problems
