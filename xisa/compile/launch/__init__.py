"""Imitating a launch: a kernel module loaded in isolation, stand-in arguments, autotuners and Triton's binder."""
