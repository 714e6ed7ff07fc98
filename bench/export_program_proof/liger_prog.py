"""A few Liger Kernel ops forward and backward on small tensors, compared with torch: what an adopter runs under
`xisa capture` (docs/capture.md, "Adopting a library from PyPI"). On a GPU the launches are real; without one, run it
under TRITON_INTERPRET=1 (CPU tensors). Each op is tried on its own: one that fails is reported, the others go on."""
import os

import torch

from proofhook import keep

from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
from liger_kernel.ops.layer_norm import LigerLayerNormFunction
from liger_kernel.ops.rms_norm import LigerRMSNormFunction
from liger_kernel.ops.geglu import LigerGELUMulFunction
from liger_kernel.ops.softmax import LigerSoftmaxFunction
from liger_kernel.ops.swiglu import LigerSiLUMulFunction

torch.manual_seed(0)
# Under `xisa capture --no-run` the device's queries are answered as a GPU, but tensors live on this machine.
CPU_ONLY = os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("XISA_CAPTURE_NO_RUN") == "1"
DEVICE = "cpu" if CPU_ONLY or not torch.cuda.is_available() else "cuda"
torch.set_default_device(DEVICE)


def rms_norm():
    x, w = torch.randn(4, 64, requires_grad=True), torch.ones(64, requires_grad=True)
    y = LigerRMSNormFunction.apply(x, w, 1e-6)
    y.sum().backward()
    keep('rms_norm', y, x.grad, w.grad)
    assert torch.allclose(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), atol=1e-5)


def layer_norm():
    x, w, b = torch.randn(4, 64, requires_grad=True), torch.ones(64, requires_grad=True), torch.zeros(64, requires_grad=True)
    y = LigerLayerNormFunction.apply(x, w, b, 1e-6)
    y.sum().backward()
    keep('layer_norm', y, x.grad, w.grad, b.grad)
    assert torch.allclose(y, torch.nn.functional.layer_norm(x, (64,), w, b, 1e-6), atol=1e-4)


def swiglu():
    a, b = torch.randn(4, 128, requires_grad=True), torch.randn(4, 128, requires_grad=True)
    ref = torch.nn.functional.silu(a.detach()) * b.detach()   # first: Liger's backward writes into a and b
    c = LigerSiLUMulFunction.apply(a, b)
    c.sum().backward()
    keep('swiglu', c, a, b, a.grad, b.grad)
    assert torch.allclose(c, ref, atol=1e-5)


def cross_entropy():
    logits, target = torch.randn(8, 256, requires_grad=True), torch.randint(0, 256, (8,), device=DEVICE)
    ref = torch.nn.functional.cross_entropy(logits.detach(), target)   # first: Liger writes the gradient into logits
    loss = LigerCrossEntropyFunction.apply(logits, target, None)[0]
    loss.backward()
    keep('cross_entropy', loss, logits, logits.grad)
    assert torch.allclose(loss, ref, atol=1e-4)


def geglu():
    a, b = torch.randn(4, 128, requires_grad=True), torch.randn(4, 128, requires_grad=True)
    ref = torch.nn.functional.gelu(a.detach(), approximate="tanh") * b.detach()   # before the in-place backward
    c = LigerGELUMulFunction.apply(a, b)
    c.sum().backward()
    keep('geglu', c, a, b, a.grad, b.grad)
    assert torch.allclose(c, ref, atol=1e-4)


def softmax():
    x = torch.randn(4, 100, requires_grad=True)
    y = LigerSoftmaxFunction.apply(x)
    y.sum().backward()
    keep('softmax', y, x.grad)
    assert torch.allclose(y, torch.softmax(x, -1), atol=1e-5)


for op in (rms_norm, layer_norm, swiglu, geglu, softmax, cross_entropy):
    try:
        op()
        print(f"{op.__name__}: ok")
    except Exception as exc:
        first = (str(exc).splitlines() or [repr(exc)])[0][:120]
        print(f"{op.__name__}: {type(exc).__name__}: {first}")
