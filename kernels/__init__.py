"""xisa's bundled kernel corpus: our own Triton kernels for the seeds' workloads.

Each module holds one workload: the @triton.jit kernels, a torch reference and a host
launcher. Each kernel has a spec `kernels/<kernel>.yaml` that xisa compiles for every target.
"""
