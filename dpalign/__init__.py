"""dpalign: dynamic-programming sequence alignment kernels on CPUs (Numba) and GPUs (OpenCL).

The public face:

* :func:`align` / :func:`score` / :func:`search`: Needleman-Wunsch, Smith-Waterman and
  semi-global alignment of pairs, batches and databases (scikit-bio's score conventions);
* :func:`papara`: phylogeny-aware read alignment, byte-identical to PaPaRa 2.5;
* :class:`Scoring`, :class:`PaparaScoring`: scoring schemes;
* :func:`backends`: the backends available here (``reference``, ``numba``, ``opencl``...).

Heavy modules (Numba kernels, pyopencl, scikit-bio) load on first use, so ``import dpalign``
is fast.
"""

from __future__ import annotations

from .errors import BackendUnavailable, DpalignError, InputError, OptionError
from .pairwise import align, score
from .papara import PaparaResult, papara
from .scoring import PaparaScoring, Scoring
from .search import Database, search

# The functions are bound after their modules load, so ``dpalign.search`` and
# ``dpalign.papara`` stay functions even though modules of those names exist
# (``from dpalign.search import Database`` still works through ``sys.modules``).

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "Database",
    "DpalignError",
    "InputError",
    "OptionError",
    "PaparaResult",
    "PaparaScoring",
    "Scoring",
    "align",
    "backends",
    "papara",
    "score",
    "search",
]


def backends() -> list[str]:
    """Names of the backends that can run on this machine."""
    from .engine import available_backends

    return available_backends()
