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
) -> list[str]:
    """Trace back every read against its best edge; return one op string per read.

    The pairs go through the engine's traceback door (``backend`` when it traces, else the
    CPU backend). Empty reads (edge -1) become all ``R``. The traceback's score is checked
    against the scoring phase's: a mismatch means a kernel is wrong, and is reported, never
    written.
    """
    n_cols = states.shape[1]
    scores, many = engine.align_papara(
        engine.get_backend(backend), states, flags, reads, best_edge, scoring
    )
    pairs = zip(scores, many, strict=True)
    ops = []
    for k, ((score, read_ops), edge) in enumerate(zip(pairs, best_edge, strict=True)):
        if edge < 0:
            ops.append("R" * n_cols)
            continue
        if score != best_score[k]:
            raise DpalignError(
                f"internal error: read {k} scored {best_score[k]} on edge {edge} in the scoring "
                f"phase but {score} in traceback; please report this"
            )
        ops.append(read_ops)
    return ops
