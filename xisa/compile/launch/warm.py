"""What every compile needs imported once, in the process that forks the workers, so they start warm."""

from __future__ import annotations

import threading
import warnings

from xisa.compile.incremental.installed import warm_installed

# torch warns on import when NumPy is not installed (xisa's install does not need it): not xisa's report.
TORCH_WITHOUT_NUMPY = r"Failed to initialize NumPy"


def import_compile_modules() -> None:
    """Import what every compile needs once, in the parent, so forked workers start warm."""
    # Triton hashes its own files for every compile's cache key (0.4 s, mostly hashing its shared library, which
    # lets go of the interpreter lock): on another thread while torch imports here (0.2-0.3 s sooner, measured).
    import triton  # noqa: F401
    import triton.compiler  # noqa: F401
    from triton.runtime.cache import triton_key

    hashing = threading.Thread(target=_quietly, args=(triton_key,), daemon=True)
    hashing.start()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TORCH_WITHOUT_NUMPY, category=UserWarning)
        import torch  # noqa: F401  (stand-in dtypes)
    from triton.backends.amd import compiler as _amd  # noqa: F401
    from triton.backends.nvidia import compiler as _nv  # noqa: F401

    warm_installed()   # which distribution owns which module: once here, not per worker
    hashing.join()     # before the workers fork: they inherit the answer


def _quietly(function) -> None:
    try:
        function()
    except Exception:
        pass   # a worker's compile asks again and gets Triton's own error
