"""`xisa doctor`'s verdict as plain text (the dict `xisa.api.diagnose` returns)."""

from __future__ import annotations

from typing import Any


def render_doctor_text(info: dict[str, Any]) -> str:
    """Plain lines, `label  value`, for people and for logs (no colour, no markup)."""
    rows: list[tuple[str, str]] = []
    t = info["triton"]
    rows.append(("triton", f"{t['version'] or 'not installed'}"
                           + (f" (supported {t['supported_range']})" if t["supported"] else
                              f" (NOT supported; xisa supports {t['supported_range']})")))
    rows.append(("amd codegen", t["amd_codegen_revision"] or "no revision exposed (Triton < 3.9)"))
    rows.append(("backends", ", ".join(info["backends"]) or "none"))
    for name, tool in info["tools"].items():
        value = tool["path"] or tool["note"]
        if tool["path"] and tool["note"]:
            value += f" ({tool['note']})"
        if tool.get("version"):
            value += f", release {tool['version']}"
        rows.append((name, value if tool["found"] else f"missing: {value}"))
    mca = info.get("llvm_mca") or {}
    if mca.get("found"):
        value = f"{mca['path']} (LLVM {mca['version']}): loop estimates (a model) for " + \
            (", ".join(mca["models"]) or "none of the project's targets")
        if mca["no_model"]:
            value += f"; it does not know {', '.join(mca['no_model'])}"
        rows.append(("llvm-mca", value))
    else:
        rows.append(("llvm-mca", "not found: no loop cost estimates (optional; Debian's llvm-20 or newer has one)"))
    pinned_set = sum(1 for v in info["pinned"].values() if v is not None)
    rows.append(("pinned knobs", f"{len(info['pinned'])} pinned ({pinned_set} set, "
                                 f"{len(info['pinned']) - pinned_set} unset)"))
    for name, o in info["overridden"].items():
        pinned = "unset" if o["pinned"] is None else repr(o["pinned"])
        rows.append(("  overridden", f"{name}={o['user']!r} is ignored: xisa pins {pinned}"))
    if info["refused"]:
        for name, why in info["refused"].items():
            rows.append(("refused", f"{name} is set: it {why}"))
    else:
        rows.append(("refused vars", "none set (checked: " + ", ".join(info["refused_known"]) + ")"))
    for name in info["unclassified"]:
        rows.append(("unknown", f"{name} is set: Triton reads it, xisa cannot vouch for it"))
    for name, why in info["harmless"].items():
        rows.append(("  harmless", f"{name} is set: {why}"))
    if info["devices"]:
        for d in info["devices"]:
            rows.append(("gpu", f"GPU {d['index']}: {d['name']} ({d['arch']}, "
                                + (f"target {d['target']})" if d["target"] else "no target)")))
    else:
        rows.append(("gpu", "none (compile, check, bless and diff need none; `xisa device` skips)"))
    g = info["goldens"]
    if g["dir"] is None:
        rows.append(("goldens", "no project found"))
    elif not g["files"]:
        rows.append(("goldens", f"none in {g['dir']}"))
    else:
        made = ", ".join(f"Triton {v} x{n}" for v, n in g["triton"].items()) or "unknown toolchain"
        if g["amd_codegen"]:
            made += "; amd codegen " + ", ".join(f"{v} x{n}" for v, n in g["amd_codegen"].items())
        if g["ptxas"]:
            made += "; ptxas " + ", ".join(f"{v} x{n}" for v, n in g["ptxas"].items())
        installed = ", ".join(f"{k} {v}" for k, v in g["installed"].items())
        rows.append(("goldens", f"{g['files']} files in {g['dir']}: {made}"))
        rows.append(("", ("matches the installed " if g["matches"] else "DIFFERS from the installed ") + installed))
    for warning in info["warnings"]:
        rows.append(("warning", warning))
    rows.append(("verdict", info["verdict"]))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}".rstrip() for label, value in rows) + "\n"
