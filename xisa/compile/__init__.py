"""Compile cells as a launch on each target's GPU would, with no GPU: one room per subsystem, lowest first.

    tools/        the vendors' tools run on a compiled binary (disassembly, ptxas, llvm-mca)
    worker/       what a compile worker is: its toolchain, its state and the platform facts its loads read, the
                  result of a cell
    gpu/          answering as the target's GPU: device answers, the driver Triton sees, refused probes, tensors
    incremental/  reuse keyed on what was consumed: key parts, reads, the result cache, the load and back-end stores
    launch/       imitating a launch: load a kernel module, stand-in arguments, autotuners, Triton's binder
    cell.py, runner.py, emit.py   one cell's compile, the worker pool, `--emit`
    export/       Triton's own cache entries for a launch, from a cell's compile (`xisa export`)

A module imports only from its own room and the rooms before it (tests/test_layers.py, by folder).
"""
