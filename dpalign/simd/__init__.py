"""Numba CPU kernels, one module per kernel shape. Pure compute on arrays: no I/O here.

Importing this package loads nothing heavy (the registry imports ``simd.backend`` for every
command); the kernel modules load Numba through :mod:`dpalign.simd.vectors`, which first calls
:func:`load_numba_target`.
"""

from __future__ import annotations

import sys


class _NoBlasProbe:
    """Import finder that refuses ``scipy.linalg`` to Numba's BLAS probe alone (this
    thread's ``numba.np.linalg.ensure_blas`` on the stack), so the probe reports no BLAS."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in ("scipy", "scipy.linalg"):
            return None
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "ensure_blas" and code.co_filename.endswith("linalg.py"):
                raise ImportError("scipy.linalg is not loaded for Numba's BLAS probe")
            frame = frame.f_back
        return None


def load_numba_target() -> None:
    """Load Numba's CPU target (``numba.np.arraymath``) without importing SciPy.

    Numba loads ``numba.np.arraymath`` before it compiles or loads its first kernel, and that
    module probes for BLAS by importing ``scipy.linalg``: 0.13-0.28 s of a ~1 s search
    command here, for nothing, since no kernel of dpalign calls BLAS. Refused, the probe only
    turns off BLAS for ``np.convolve``/``np.correlate`` of floats inside Numba code; ``np.dot``
    and ``np.linalg`` in Numba code still import SciPy when they are compiled.
    """
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    finder = _NoBlasProbe()
    sys.meta_path.insert(0, finder)
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        sys.meta_path.remove(finder)
