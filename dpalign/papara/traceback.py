"""The alignment phase: re-run the best (read, edge) pairs with traceback, on the CPU."""

from __future__ import annotations

import numpy as np

from .. import reference
from ..errors import DpalignError
from ..scoring import PaparaScoring


def _aligner(backend_name: str):
    """The pair aligner: Numba's when it is available, else the reference."""
    if backend_name != "reference":
        try:
            from ..simd.papara_trace import papara_align

            return papara_align
        except ImportError:
            pass
    return reference.papara_align


def _batch_aligner(backend_name: str):
    """Numba's many-pairs aligner (32 pairs per SIMD pass), or None."""
    if backend_name != "reference":
        try:
            from ..simd.papara_trace import papara_align_many

            return papara_align_many
        except ImportError:
            pass
    return None


def align_reads(
    states: np.ndarray,
    flags: np.ndarray,
    reads: list[np.ndarray],
    best_edge: np.ndarray,
    best_score: np.ndarray,
    scoring: PaparaScoring,
    backend_name: str = "numba",
    threads: int | None = None,
) -> list[str]:
    """Trace back every read against its best edge; return one op string per read.

    Empty reads (edge -1) become all ``R``. The traceback's score is checked against the
    scoring phase's: a mismatch means a kernel is wrong, and is reported, never written.
    ``threads``: CPU threads for the traceback (default: one per core).
    """
    n_cols = states.shape[1]
    batch = _batch_aligner(backend_name)
    if batch is not None:
        scores, many = batch(states, flags, reads, best_edge, scoring, threads=threads)
        pairs = zip(scores, many, strict=True)
    else:
        align = _aligner(backend_name)
        pairs = (
            align(states[edge], flags[edge], read, scoring) if edge >= 0 else (0, None)
            for read, edge in zip(reads, best_edge, strict=True)
        )
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
