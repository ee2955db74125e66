"""dpalign: dynamic-programming sequence alignment kernels on CPUs (Numba) and GPUs (OpenCL).

The public face:

* :func:`align` / :func:`score` / :func:`search`: Needleman-Wunsch, Smith-Waterman and
  semi-global alignment of pairs, batches and databases (scikit-bio's score conventions);
* :func:`papara`: phylogeny-aware read alignment, byte-identical to PaPaRa 2.5;
* :class:`Scoring`, :class:`PaparaScoring`: scoring schemes;
* :func:`backends`: the backends available here (``reference``, ``numba``, ``opencl``...).

Heavy modules (Numba kernels, pyopencl) load on first use, so ``import dpalign`` is fast.
"""

from __future__ import annotations

from importlib import import_module

from .errors import BackendUnavailable, DpalignError, InputError, OptionError
from .scoring import PaparaScoring, Scoring

__version__ = "0.1.0"

_LAZY = {
    "align": ("dpalign.pairwise", "align"),
    "score": ("dpalign.pairwise", "score"),
    "search": ("dpalign.search", "search"),
    "papara": ("dpalign.papara", "papara"),
    "PaparaResult": ("dpalign.papara", "PaparaResult"),
}

__all__ = [
    "BackendUnavailable",
    "DpalignError",
    "InputError",
    "OptionError",
    "PaparaScoring",
    "Scoring",
    "backends",
    *_LAZY,
]


def backends() -> list[str]:
    """Names of the backends that can run on this machine."""
    from .engine import _REGISTRY, backend_names

    return [name for name in backend_names() if _REGISTRY[name].available()]


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpalign' has no attribute {name!r}")
