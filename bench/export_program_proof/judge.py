"""judge.py NAME BUNDLE BEFORE.json AFTER.json BUNDLE_RUN.pt JIT_RUN.pt: issue 37's program proof, one JSON line.
Files Triton added to the bundle during the bundle run (host launchers / cuda_utils, autotune results, anything else
= a kernel compile), files changed or removed, the compilation listener's compiles and lookups (every key a launch
asked for must be a bundle cell's), the ops' outputs compared byte for byte with the JIT run's, the configs chosen."""
import json, sys
import torch
name, bundle, before, after, brun, jrun = sys.argv[1:7]
added_cases = set(json.load(open(sys.argv[7]))) if len(sys.argv) > 7 else set()
man = json.load(open(f"{bundle}/manifest.json"))
keys = {c["key"] for c in man["cells"]}
b, a = json.load(open(before)), json.load(open(after))
added = sorted(set(a) - set(b)); removed = sorted(set(b) - set(a)); changed = sorted(k for k in b if k in a and a[k] != b[k])
launcher = [f for f in added if "__triton_launcher" in f or "cuda_utils" in f]
autotune = [f for f in added if f.endswith(".autotune.json")]
other = [f for f in added if f not in launcher and f not in autotune]
B, J = torch.load(brun, weights_only=False), torch.load(jrun, weights_only=False)
ev = B["events"]
outside = sorted({e["hash"] for e in ev if e["hash"] not in keys})
def same(x, y):
    if x is None or y is None: return x is y
    if x.dtype != y.dtype or x.shape != y.shape: return False
    return torch.equal(x.reshape(-1).contiguous().view(torch.uint8), y.reshape(-1).contiguous().view(torch.uint8))
per_op = {}
for op in sorted(set(B["outputs"]) | set(J["outputs"])):
    xs, ys = B["outputs"].get(op), J["outputs"].get(op)
    if xs is None or ys is None or len(xs) != len(ys):
        per_op[op] = "missing in one run"; continue
    eq = all(same(x, y) for x, y in zip(xs, ys))
    if eq:
        per_op[op] = "equal"
    else:
        diffs = [float((x.float() - y.float()).abs().max()) if x is not None and y is not None and x.shape == y.shape else None for x, y in zip(xs, ys)]
        per_op[op] = f"differ (max abs diff per tensor {diffs})"
summary = {
    "program": name, "triton": __import__("triton").__version__,
    "bundle_cells": len(man["cells"]), "bundle_entries": len({c["folder"] for c in man["cells"]}),
    "export_errors": len(man.get("errors") or []),
    "files_added": len(added), "added_launchers": len(launcher), "added_autotune_results": len(autotune),
    "added_other": other[:8], "added_other_count": len(other), "files_changed": changed, "files_removed": removed,
    "compiles_with_bundle": sum(not e["cache_hit"] for e in ev), "lookups_with_bundle": len(ev),
    "hits_with_bundle": sum(e["cache_hit"] for e in ev), "keys_outside_bundle": outside[:5], "keys_outside_bundle_count": len(outside),
    "compiled_names_with_bundle": sorted({e["name"] for e in ev if not e["cache_hit"]}),
    "compiles_jit": sum(not e["cache_hit"] for e in J["events"]), "lookups_jit": len(J["events"]),
    "cells_hit": len({e["hash"] for e in ev if e["cache_hit"]}),
    "cells_hit_only_gpu_capture_has": sorted({f'{c["kernel"]}:{c["case"]}' for c in man["cells"] for e in ev
                                              if e["cache_hit"] and e["hash"] == c["key"] and f'{c["kernel"]}:{c["case"]}' in added_cases}),
    "outputs": per_op, "outputs_equal": all(v == "equal" for v in per_op.values()) and bool(per_op),
    "same_configs_chosen": B["chosen"] == J["chosen"], "autotuned_kernels": len(B["chosen"]),
}
summary["ok"] = (summary["compiles_with_bundle"] == 0 and not other and not summary["export_errors"] and not changed and not removed and not outside
                 and summary["outputs_equal"] and summary["compiles_jit"] > 0 and len(ev) > 0)
print("JUDGE " + json.dumps(summary))
if B["chosen"] != J["chosen"]:
    print("chosen (bundle run):", json.dumps(B["chosen"])[:3000]); print("chosen (jit run):", json.dumps(J["chosen"])[:3000])
sys.exit(0 if summary["ok"] else 1)
