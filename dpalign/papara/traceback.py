"""The alignment phase: re-run the best (read, edge) pairs with traceback, on the CPU."""

from __future__ import annotations

import numpy as np

from .. import engine
from ..engine import Backend
from ..errors import DpalignError
from ..scoring import PaparaScoring


def align_reads(
    states: np.ndarray,
    flags: np.ndarray,
    reads: list[np.ndarray],
    best_edge: np.ndarray,
    best_score: np.ndarray,
    scoring: PaparaScoring,
    backend: Backend | str = "auto",
) -> tuple[np.ndarray, list[bytes]]:
    """Trace back every read against its best edge, in the writer's trimmed form.

    The pairs go through the engine's traceback door (``backend`` when it traces, else the
    CPU backend). Returns ``(leads, cores)`` (see :class:`dpalign.papara.msa.TrimmedOps`):
    per read the number of ``R`` before its first ``M``/``I`` and the ops from there to the
    last ``M``/``I``; empty reads (edge -1) are all ``R``. The traceback's score is checked
    against the scoring phase's: a mismatch means a kernel is wrong, and is reported, never
    written.
    """
    best_edge = np.asarray(best_edge, dtype=np.int64)
    scores, leads, cores = engine.align_papara_trimmed(
        engine.get_backend(backend), states, flags, reads, best_edge, scoring
    )
    wrong = np.flatnonzero((best_edge >= 0) & (np.asarray(scores) != np.asarray(best_score)))
    if wrong.size:
        k = int(wrong[0])
        raise DpalignError(
            f"internal error: read {k} scored {best_score[k]} on edge {best_edge[k]} in the "
            f"scoring phase but {scores[k]} in traceback; please report this"
        )
    leads = np.where(best_edge >= 0, leads, states.shape[1])
    return leads, [
        core if edge >= 0 else b"" for core, edge in zip(cores, best_edge.tolist(), strict=True)
    ]
