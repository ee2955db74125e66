"""The scoring phase: every read against every edge profile, the best edge per read."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import config, engine
from ..engine import Backend, Task, query_batch, reference_blocks
from ..scoring import PaparaScoring


@dataclass(frozen=True)
class Placements:
    """Best edge and score per read (edge -1 and score 0 for empty reads).

    ``width`` is the integer width that produced each best score.
    """

    edge: np.ndarray
    score: np.ndarray
    width: np.ndarray
    cells: int


def profile_blocks(states: np.ndarray, flags: np.ndarray, width: int = config.BLOCK_WIDTH):
    """Lay the edge profiles (E, n) out as inter-reference blocks of ``width`` lanes."""
    return reference_blocks(list(states), width=width, flags=list(flags), dtype=states.dtype)


def place(
    states: np.ndarray,
    flags: np.ndarray,
    reads: list[np.ndarray],
    scoring: PaparaScoring,
    backend: Backend,
    progress=None,
) -> Placements:
    """Score all reads against all edges and keep the best edge of each read.

    Ties go to the lower edge index. Lower is better for ``bmc2012``.
    """
    n_edges, n_cols = states.shape
    nonempty = np.flatnonzero([len(r) > 0 for r in reads])
    edge = np.full(len(reads), -1, dtype=np.int64)
    best = np.zeros(len(reads), dtype=np.int64)
    width = np.zeros(len(reads), dtype=np.uint8)
    if nonempty.size == 0 or n_edges == 0:
        return Placements(edge, best, width, 0)
    batch = query_batch([reads[k] for k in nonempty], dtype=states.dtype)
    # In the lanes the backend prefers (the OpenCL kernels read every profile side by side).
    blocks = engine.pack(backend, "papara", list(states), flags=list(flags), dtype=states.dtype)
    task = Task("papara", scoring)
    results = backend.score(task, batch, blocks, progress=progress)
    sign = -1 if scoring.minimize else 1
    run_best = np.full(len(nonempty), np.iinfo(np.int64).min, dtype=np.int64)
    run_edge = np.full(len(nonempty), -1, dtype=np.int64)
    run_width = np.zeros(len(nonempty), dtype=np.uint8)
    for block, result in zip(blocks, results, strict=True):
        lanes = np.flatnonzero(block.ids >= 0)
        signed = sign * result.scores[:, lanes]
        lane = np.argmax(signed, axis=1)  # first maximum: the lower edge
        value = signed[np.arange(len(lane)), lane]
        better = value > run_best
        run_best = np.where(better, value, run_best)
        run_edge = np.where(better, block.ids[lanes][lane], run_edge)
        run_width = np.where(better, result.width[np.arange(len(lane)), lanes[lane]], run_width)
    edge[nonempty] = run_edge
    best[nonempty] = sign * run_best
    width[nonempty] = run_width
    return Placements(edge, best, width, batch.residues * n_cols * n_edges)
