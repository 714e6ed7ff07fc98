"""Answering as the target's GPU while a kernel loads, binds or compiles: what a library asks of the platform."""
