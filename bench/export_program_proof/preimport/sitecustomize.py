# For `xisa export` only (issue 37's GPU proof): torch's compile stack imported before any kernel load. Else a load
# that first imports torch._dynamo (fla.modules: torch.compile at import) records torch._dynamo and ~25 of its and
# inductor's modules as modules that asked the device, and every later load in the worker re-imports them by name
# without their submodules: "module 'torch._dynamo' has no attribute 'decorators'" (80 of fla's cells on the H100).
import torch
import torch._dynamo
import torch._inductor.config

torch.compile(lambda x: x)
