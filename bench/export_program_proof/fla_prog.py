"""A handful of flash-linear-attention (fla-core) ops forward and backward on small tensors: norms, a chunked
cumsum, gated-delta-rule and GLA in their recurrent and chunked forms. What an adopter runs under `xisa capture`.
On a GPU the launches are real (fla's autotuners benchmark); without one, under `xisa capture --no-run`. Each op is
tried on its own: one that fails is reported, the others go on. Outputs are checked loosely where cheap."""
import os
import sys
import traceback

import torch

from proofhook import keep

from fla.modules.norm.layernorm import layer_norm, rms_norm
from fla.modules.norm.l2norm import l2norm
from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
from fla.ops.gla import chunk_gla, fused_recurrent_gla
from fla.ops.utils.cumsum import chunk_local_cumsum

torch.manual_seed(0)
# Under `xisa capture --no-run` the device's queries are answered as a GPU, but tensors live on this machine.
DEVICE = "cpu" if os.environ.get("XISA_CAPTURE_NO_RUN") == "1" or not torch.cuda.is_available() else "cuda"
B, T, H, K, V = 1, 128, 2, 64, 64


def norms():
    x = torch.randn(4, 256, device=DEVICE, requires_grad=True)
    w, b = torch.ones(256, device=DEVICE, requires_grad=True), torch.zeros(256, device=DEVICE, requires_grad=True)
    y = rms_norm(x, w, None) + layer_norm(x, w, b) + l2norm(x)
    y.sum().backward()
    keep('norms', y, x.grad, w.grad, b.grad)


def cumsum():
    g = torch.randn(B, T, H, device=DEVICE)
    keep('cumsum', chunk_local_cumsum(g, chunk_size=64))


def _qkv():
    q, k = (torch.randn(B, T, H, K, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(B, T, H, V, device=DEVICE, dtype=torch.bfloat16)
    k = torch.nn.functional.normalize(k.float(), dim=-1).to(torch.bfloat16)
    return [t.requires_grad_() for t in (q, k, v)]


def gated_delta_rule():
    q, k, v = _qkv()
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, device=DEVICE)).requires_grad_()
    beta = torch.rand(B, T, H, device=DEVICE, dtype=torch.bfloat16).sigmoid().requires_grad_()
    r, _ = fused_recurrent_gated_delta_rule(q.detach(), k.detach(), v.detach(), g=g.detach(), beta=beta.detach())
    keep('gated_delta_rule_recurrent', r)
    o, _ = chunk_gated_delta_rule(q, k, v, g, beta)
    keep('gated_delta_rule_chunk_fwd', o)
    o.sum().backward()   # fla 0.6.0 refuses this on Hopper with Triton >= 3.4, < 3.7.1 (its issue #640)
    keep('gated_delta_rule_chunk_bwd', q.grad, k.grad, v.grad, g.grad, beta.grad)


def gla():
    q, k, v = _qkv()
    gk = torch.nn.functional.logsigmoid(torch.randn(B, T, H, K, device=DEVICE)).requires_grad_()
    o, _ = chunk_gla(q, k, v, gk)
    o.sum().backward()
    r, _ = fused_recurrent_gla(q.detach(), k.detach(), v.detach(), gk=gk.detach())
    keep('gla', o, q.grad, k.grad, v.grad, gk.grad, r)


failed = []
for op in (norms, cumsum, gated_delta_rule, gla):
    try:
        op()
        print(f"{op.__name__}: ran")
    except Exception as exc:   # one op's failure (e.g. no GPU without --no-run) is reported, the rest go on
        failed.append(op.__name__)
        print(f"{op.__name__}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        traceback.print_exc(limit=3, file=sys.stderr)
sys.exit(1 if failed else 0)
