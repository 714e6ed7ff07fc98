"""Triton's own cache entries for a launch on a target, and the bundle that ships them (`xisa export`)."""
