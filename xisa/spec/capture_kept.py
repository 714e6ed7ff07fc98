"""The kept copy of a kernel module no other machine can import, and whether its generator has changed since.

A kernel generated at run time (FlagGems' `pointwise_dynamic`, any `exec`'d source) is captured as the text
the program generated, kept beside the specs in `generated/<spec name>.py`, followed by a trailer that says
what generated it, repeats what the program set in the module after loading it (`epilogue`), and ends in
one machine-readable line, `# xisa-kept: {json}`. The text keeps its line numbers (the trailer comes
after it), so the copy compiles to the code the launch compiled, lines included.

The copy, not the generator, is what compiles: a change to the generator changes no verdict until capture
runs again. Re-running capture writes the copy again when the program now generates another text or
another generator made it (the goldens then show what the change did), leaves it alone when nothing
changed, and never replaces a copy whose text was edited by hand since it was written. `xisa check` reads the trailer and says
when the generator's file or its package version on this machine differs from the one that generated the
copy (`stale_note`): the copy may then no longer be what the library generates.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from xisa.spec.portable import portable_text

MARK = "# xisa-kept: "
RULE = "# " + "-" * 98


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def kept_text(text: str, generated: dict, *, root: Path) -> str:
    """The file kept for a generated module: its text unchanged, then the trailer."""
    body = text if text.endswith("\n") else text + "\n"
    generator = generated.get("launched_from") or {}
    provenance = {"module": generated.get("module"), "file": generated.get("filename"), "text_sha256": sha256(body),
                  "generator": {k: generator.get(k) for k in ("module", "function", "file", "sha256", "package")}
                  if generator else None}
    why = portable_text(str(generated.get("why", "")), root)
    lines = ["", RULE,
             f"# Kept by `xisa capture`: the text above is what the program generated at run time, module "
             f"{generated.get('module')} (file {generated.get('filename')}), kept because {why}."]
    if generator:
        package = f" ({generator['package']})" if generator.get("package") else ""
        lines.append(f"# Launched from {generator.get('module')}:{generator.get('function')}{package}, "
                     f"file {generator.get('file')}.")
    lines += ["# This copy, not the generator, is what xisa compiles: a generator change shows only when capture",
              "# runs again (`xisa check` notes when the generator's file differs from the one recorded below)."]
    if not generated.get("complete", True):
        lines.append("# Only the kernel function's own text was left (the module's was gone): names it reads from "
                     "its module may be missing.")
    for item in generated.get("unresolved") or []:
        lines.append(f"# Not restored: the module global {item}: no import brings it back, the copy may not compile.")
    if generated.get("epilogue"):
        lines.append("# The imports below repeat what the program set in the module after it ran:")
        lines += list(generated["epilogue"])
    lines.append(MARK + json.dumps(provenance, sort_keys=True))
    return body + "\n".join(lines) + "\n"


def provenance(text: str) -> dict | None:
    """The trailer's record of a kept file's text (None: not a file capture kept)."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARK):
            try:
                value = json.loads(line[len(MARK):])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def kept_body(text: str) -> str:
    """The generated text of a kept file, without its trailer."""
    head, sep, _ = text.rpartition("\n" + RULE + "\n")
    return head if sep else text


def refresh_action(existing: str | None, new: str) -> str:
    """What re-running capture does with a kept file: `write` (none yet), `same` (nothing changed), `refresh`
    (another text or another generator: written again), `edited` (its text was edited by hand: kept)."""
    if existing is None:
        return "write"
    if existing == new:
        return "same"
    recorded = provenance(existing)
    if recorded is None or recorded.get("text_sha256") != sha256(kept_body(existing)):
        return "edited"
    return "refresh"


def kept_source_notes(specs, *, search: list[Path]) -> list[str]:
    """One `note:` line per spec whose `source:` is a kept copy that may be stale here (`stale_note`)."""
    notes = []
    for spec in specs:
        if spec.source_file is not None:
            note = stale_note(spec.source_file, search=search)
            if note:
                notes.append(f"note: {spec.spec_path}: source: {spec.source_file.name}: {note}")
    return notes


def _tail(path: Path, size: int = 8192) -> str:
    """The end of a file, where a kept copy's `# xisa-kept:` line is (a kernel source is read no further)."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - size))
        return handle.read().decode("utf-8", errors="replace")


def stale_note(source_file: Path, *, search: list[Path] | tuple = ()) -> str | None:
    """Why a kept copy may be stale on this machine: its generator's file (looked up under `search`, then
    `sys.path`) differs from the one that generated it, or its package has another version; None when it
    is the same, or when `source_file` is no kept copy."""
    try:
        recorded = provenance(_tail(source_file))
    except OSError:
        return None
    generator = (recorded or {}).get("generator") or {}
    relative = generator.get("file")
    if not relative or not generator.get("sha256"):
        return None
    name = f"{generator.get('module')}:{generator.get('function')}"
    found = next((Path(folder) / relative for folder in [*search, *sys.path]
                  if (Path(folder or os.curdir) / relative).is_file()), None)
    if found is None:
        return f"its generator {name} ({relative}) is not installed here: whether the copy is stale cannot be told"
    with open(found, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    installed = _installed_package(generator.get("package"))
    if digest == generator["sha256"] and installed in (None, generator.get("package")):
        return None
    changed = [f"its generator {name} ({relative}) differs from the one that generated the copy"
               if digest != generator["sha256"] else f"its generator {name} is the same file"]
    if installed not in (None, generator.get("package")):
        changed.append(f"{generator.get('package')} generated it, {installed} is installed")
    return "; ".join(changed) + ": the copy may not be what the library generates now (re-run `xisa capture`)"


def _installed_package(recorded: str | None) -> str | None:
    """`name version` of the distribution named in `recorded` (`flag-gems 5.0.2`) as installed here."""
    if not recorded:
        return None
    from importlib import metadata

    name = recorded.split(" ")[0]
    try:
        return f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return f"{name} (not installed)"
