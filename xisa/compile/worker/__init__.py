"""What a compile worker is: the toolchain it compiles with, its state and configuration, the platform facts its
loads read, the result of a cell."""
