"""The vendors' tools run on a compiled kernel's binary (cuobjdump, ptxas, llvm-mca), so `xisa.analyze` stays pure."""
