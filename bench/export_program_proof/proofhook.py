"""Issue 37's program proof: with PROOF_OUT set, count Triton's compiles with its compilation listener, record each
autotuner's chosen config, and save the ops' outputs (torch.save) at exit. Unset (under `xisa capture`): nothing."""
import atexit
import os
import sys

import torch

OUT = os.environ.get("PROOF_OUT")
outputs, events, chosen = {}, [], {}


def keep(name, *tensors):
    outputs[name] = [None if t is None else t.detach().cpu().clone() for t in tensors]


def _save():
    torch.save({"outputs": outputs, "events": events, "chosen": {k: sorted(v) for k, v in chosen.items()}}, OUT)
    miss = sum(not e["cache_hit"] for e in events)
    print(f"PROOF {os.path.basename(OUT)}: compiles={miss} cache_hits={len(events) - miss} outputs={len(outputs)} "
          f"autotuned={len(chosen)}", flush=True)


if OUT:
    from triton import knobs
    from triton.runtime.autotuner import Autotuner

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        events.append({"name": metadata.get("name"), "hash": metadata.get("hash"), "cache_hit": bool(cache_hit)})
        if not cache_hit:
            print(f"PROOF compiled {metadata.get('name')} {metadata.get('hash')}", file=sys.stderr, flush=True)

    knobs.compilation.listener = listener
    _run = Autotuner.run

    def run(self, *args, **kwargs):
        result = _run(self, *args, **kwargs)
        fn = self.fn
        while not hasattr(fn, "__name__") and hasattr(fn, "fn"):
            fn = fn.fn
        chosen.setdefault(getattr(fn, "__name__", "?"), set()).add(str(self.best_config))
        return result

    Autotuner.run = run
    atexit.register(_save)
