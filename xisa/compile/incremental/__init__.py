"""Reuse keyed on the bytes consumed: the key parts, what a load and a compile read, and the stores that answer."""
