"""Targets: one YAML per GPU target in `targets/`, each number carrying its source."""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xisa.analyze.backends import BACKEND_NAMES, Backend, backend as backend_entry
from xisa.errors import TargetError
from xisa.spec.device_facts import ARCH_FACTS, DeviceFacts, parse_device_facts
from xisa.names import TARGET_NAME, closest, display_path
from xisa.yamlio import load_yaml

FP8_ENCODINGS = ("none", "e4m3fn", "e4m3fnuz")
MATRIX_FAMILIES = ("mfma", "wmma", "hmma", "wgmma", "tcgen05", "none")

_TOP_KEYS = {"name", "backend", "arch", "warp_size", "family", "description", "fp8", "matrix",
             "occupancy", "device", "sources"}
# A device target (docs/targets.md) states the device and takes everything else from its arch target's file.
_DEVICE_TARGET_KEYS = {"name", "device_of", "description", "device", "sources"}
DEVICE_SEPARATOR = "-"   # gfx942-mi308x: the arch target's name, then the device's
# The folders of the target files xisa ships: in an installed wheel, and in a source checkout.
XISA_TARGET_DIRS = frozenset({Path(__file__).resolve().parent.parent / "_targets",
                              Path(__file__).resolve().parent.parent.parent / "targets"})


@dataclass(frozen=True)
class Target:
    name: str
    backend: str
    arch: str | int
    warp_size: int
    family: str
    description: str
    fp8: str
    matrix: str
    occupancy: dict[str, Any]
    device_match: tuple[str, ...]
    device: DeviceFacts                     # what the reference product answers a library asking the device
    sources: dict[str, str] = field(compare=False, repr=False)
    path: str = field(compare=False, repr=False, default="")
    device_of: str | None = None            # a device target: its arch target's name (None: an arch target)
    bundled: bool = field(compare=False, repr=False, default=False)   # its file is one xisa ships (not the project's)

    @property
    def handler(self) -> Backend:
        """What xisa does for this target's family (stages, analysis, resources): `xisa.analyze.backends`."""
        return backend_entry(self.backend)

    def gpu_target(self):
        """Triton's GPUTarget for this target (imports Triton)."""
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name, "backend": self.backend, "arch": self.arch, "warp_size": self.warp_size,
            "family": self.family, "fp8": self.fp8, "matrix": self.matrix, "description": self.description,
            "occupancy": dict(self.occupancy), "device_match": list(self.device_match),
            "device": self.device.stated(),   # the answers a load's device queries get: part of the cache key
            "device_of": self.device_of,
        }


def _require(cond: bool, message: str, path: str, fieldname: str, fix: str | None = None) -> None:
    if not cond:
        raise TargetError(message, path=path, field=fieldname, fix=fix)


def parse_target(data: Any, path: str) -> Target:
    _require(isinstance(data, dict), "a target file must be a mapping", path, "<top>")
    # Earlier xisa let a target erase register numbers from its fingerprint (`normalize: [register-numbers]`), which
    # made `a*b + c` and `a*c + b` one program; ptxas now runs deterministically instead (xisa.compile.cell).
    _require("normalize" not in data, "normalization rules are gone: no fingerprint may erase what the code does",
             path, "normalize", "delete the `normalize:` line (the bundled sm_100.yaml no longer has one)")
    unknown = set(data) - _TOP_KEYS
    _require(not unknown, f"unknown key(s) {sorted(unknown)}", path, ",".join(sorted(unknown)),
             f"allowed keys: {sorted(_TOP_KEYS)}")
    for key in ("name", "backend", "arch", "warp_size", "family", "fp8", "matrix", "occupancy", "device", "sources"):
        _require(key in data, "missing", path, key)
    name = data["name"]
    _require(isinstance(name, str) and bool(TARGET_NAME.match(name)) and DEVICE_SEPARATOR not in name,
             f"bad target name {name!r}", path, "name",
             "use letters, digits and '_' ('-' only in a device target's name, which has `device_of:`)")
    expected_stem = Path(path).stem
    _require(name == expected_stem, f"name {name!r} differs from the file name {expected_stem!r}", path, "name")
    backend = data["backend"]
    _require(backend in BACKEND_NAMES, f"backend {backend!r} unknown", path, "backend", f"one of {BACKEND_NAMES}")
    handler = backend_entry(backend)
    arch = data["arch"]
    wrong_arch = handler.check_arch(arch)
    _require(wrong_arch is None, wrong_arch, path, "arch")
    _require(data["warp_size"] in (32, 64), "warp_size must be 32 or 64", path, "warp_size")
    _require(data["fp8"] in FP8_ENCODINGS, f"fp8 {data['fp8']!r} unknown", path, "fp8", f"one of {FP8_ENCODINGS}")
    _require(data["matrix"] in MATRIX_FAMILIES, f"matrix {data['matrix']!r} unknown", path, "matrix",
             f"one of {MATRIX_FAMILIES}")
    occ = data["occupancy"]
    _require(isinstance(occ, dict), "must be a mapping", path, "occupancy")
    sources = data["sources"]
    _require(isinstance(sources, dict), "must be a mapping of field -> citation", path, "sources")
    required, optional = handler.occupancy_required, handler.occupancy_optional
    for key in required:
        _require(isinstance(occ.get(key), int) and occ[key] > 0, "missing or not a positive int", path,
                 f"occupancy.{key}")
    for key, choices in handler.occupancy_choices.items():
        _require(occ.get(key) in choices, f"must be {' or '.join(repr(c) for c in choices)}", path, f"occupancy.{key}")
    unknown_occ = set(occ) - set(required) - set(optional) - set(handler.occupancy_choices)
    _require(not unknown_occ, f"unknown key(s) {sorted(unknown_occ)}", path, "occupancy")
    for key, value in occ.items():
        if isinstance(value, int) and not isinstance(value, bool):
            cite = sources.get(key)
            _require(isinstance(cite, str) and len(cite.strip()) > 10, "this number cites no source", path,
                     f"sources.{key}", f"add sources.{key}: '<document, section, URL>'")
    device = data["device"]
    _require(isinstance(device, dict) and isinstance(device.get("match"), list) and device["match"],
             "must have a non-empty `match` list", path, "device.match")
    return Target(
        name=name, backend=backend, arch=arch, warp_size=data["warp_size"], family=str(data["family"]),
        description=str(data.get("description", "")), fp8=data["fp8"], matrix=data["matrix"],
        occupancy=dict(occ), device_match=tuple(str(m) for m in device["match"]),
        device=parse_device_facts(device, sources, path, backend), sources=dict(sources), path=path,
    )


def parse_device_target(data: Any, path: str, arch_targets: dict[str, Target]) -> Target:
    """A device target: `device_of:` names the arch target whose file gives everything but the device's own facts
    (its `device:`, cited under its `sources:`); its name is that arch target's, '-', the device's."""
    unknown = set(data) - _DEVICE_TARGET_KEYS
    _require(not unknown, f"unknown key(s) {sorted(unknown)}: a device target states its device only", path,
             ",".join(sorted(unknown)), f"allowed keys: {sorted(_DEVICE_TARGET_KEYS)}; the rest is its arch target's")
    for key in ("name", "device", "sources"):
        _require(key in data, "missing", path, key)
    of = data["device_of"]
    arch_names = sorted(n for n, t in arch_targets.items() if t.device_of is None)
    _require(of in arch_names, f"device_of {of!r} is no arch target", path, "device_of",
             f"one of {arch_names} (an arch target file: no `device_of:` of its own)")
    arch = arch_targets[of]
    name, expected_stem = data["name"], Path(path).stem
    _require(isinstance(name, str) and bool(TARGET_NAME.match(name)) and name.startswith(of + DEVICE_SEPARATOR),
             f"bad device target name {name!r}", path, "name",
             f"name it {of}{DEVICE_SEPARATOR}<device>, e.g. {of}{DEVICE_SEPARATOR}mi308x (letters, digits, '_')")
    _require(name == expected_stem, f"name {name!r} differs from the file name {expected_stem!r}", path, "name",
             f"name the file {name}.yaml")
    device, sources = data["device"], data["sources"]
    _require(isinstance(device, dict), "must be a mapping of the device's facts", path, "device")
    _require(isinstance(sources, dict), "must be a mapping of field -> citation", path, "sources")
    facts = parse_device_facts(device, sources, path, arch.backend, arch=arch)
    # the arch's citations stay with the numbers it gives; the device's own facts cite the device file
    own = {f.name for f in dataclasses.fields(DeviceFacts)} - set(ARCH_FACTS)
    kept = {k: v for k, v in arch.sources.items() if k not in own}
    return dataclasses.replace(arch, name=name, description=str(data.get("description", "")), device=facts,
                               sources={**kept, **sources}, path=path, device_of=of)


def load_targets(directories: list[Path], *, root: Path | None = None) -> dict[str, Target]:
    """All targets in the given folders; a later folder's target of the same name replaces an earlier one. Device
    targets load after every arch target, so a project's device may be of a bundled arch."""
    found: dict[str, tuple[Any, str]] = {}
    bundled: set[str] = set()
    for directory in directories:
        if not directory.is_dir():
            continue
        ours = directory.resolve() in XISA_TARGET_DIRS
        for path in sorted(directory.glob("*.yaml")):
            shown = display_path(path, root)
            found[path.stem] = (load_yaml(path, error=TargetError, display=shown), shown)
            (bundled.add if ours else bundled.discard)(path.stem)
    if not found:
        raise TargetError("no target files found", path=", ".join(display_path(d, root) for d in directories),
                          fix="add targets/<name>.yaml")
    is_device = {stem: isinstance(data, dict) and "device_of" in data for stem, (data, _) in found.items()}
    targets = {stem: parse_target(data, shown) for stem, (data, shown) in found.items() if not is_device[stem]}
    for stem, (data, shown) in found.items():
        if is_device[stem]:
            targets[stem] = parse_device_target(data, shown, targets)
    return {name: dataclasses.replace(targets[name], bundled=name in bundled) for name in sorted(targets)}


def selects(pattern: str, target: Target) -> bool:
    """Whether a pattern (--arch, a case's `targets:`) selects a target: a glob selects arch targets; a device
    target only by its exact name or by a glob that has the device separator ('gfx942-*', '*-h20')."""
    if not fnmatch.fnmatchcase(target.name, pattern):
        return False
    return target.device_of is None or pattern == target.name or DEVICE_SEPARATOR in pattern


def select_targets(known: dict[str, Target], patterns: list[str] | None) -> list[Target]:
    """Targets named by names or globs (`selects`), in a stable order; none: every arch target (the default
    selection has no device target); an unknown name suggests the closest."""
    if not patterns:
        return [known[name] for name in sorted(known) if known[name].device_of is None]
    chosen: dict[str, Target] = {}
    for pattern in patterns:
        for piece in (p.strip() for p in pattern.split(",")):
            if not piece:
                continue
            matched = [name for name in sorted(known) if selects(piece, known[name])]
            if not matched:
                raise unknown_target(piece, known)
            for name in matched:
                chosen[name] = known[name]
    return [chosen[name] for name in sorted(chosen)]


def unknown_target(name: str, known: dict[str, Target]) -> TargetError:
    near = closest(name, sorted(known))
    hint = f"did you mean {near!r}? " if near else ""
    return TargetError(f"unknown target {name!r}; {hint}known targets: {', '.join(sorted(known))}",
                       field="--arch", fix="pick a known target or add targets/<name>.yaml")
