"""One module per group of commands; each command is a thin wrapper over a library call."""
