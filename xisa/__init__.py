"""xisa: cross-compile Triton kernels ahead of time and guard their machine code."""

__version__ = "0.1.0"
