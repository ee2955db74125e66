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

    ``width`` is the integer width that produced each best score. ``second_edge`` and
    ``second_score`` are the best of the other edges (the next tied edge when several tie;
    -1 and 0 with a single edge), ``ties`` the number of edges at the best score.
    """

    edge: np.ndarray
    score: np.ndarray
    width: np.ndarray
    cells: int
    second_edge: np.ndarray | None = None
    second_score: np.ndarray | None = None
    ties: np.ndarray | None = None

    def support(self, scoring: PaparaScoring) -> np.ndarray:
        """A support value per read in (0, 1]: ``1 / ties`` when edges tie at the best score,
        else ``1 / (1 + exp(-margin / 2))`` with the margin to the second-best edge in score
        units (bmc2012: costs), so 1 ~ "no other edge comes close". NaN for empty reads."""
        sign = -1 if scoring.minimize else 1
        margin = sign * (self.score - self.second_score).astype(np.float64)
        out = np.where(
            self.ties > 1, 1.0 / np.maximum(self.ties, 1), 1.0 / (1.0 + np.exp(-margin / 2))
        )
        out = np.where(self.second_edge < 0, 1.0, out)  # a single edge: nothing competes
        return np.where(self.edge < 0, np.nan, out)

    def fit(self, scoring: PaparaScoring, lengths: np.ndarray) -> np.ndarray:
        """How well each read fits its placement: the score over the best a read of its length
        could score (``match * m``; bmc2012: ``1 - cost / (3 m)``). Near 1: every character
        matches; low: much of the read is forced into columns or left out. NaN when empty."""
        m = np.maximum(np.asarray(lengths, dtype=np.float64), 1.0)
        if scoring.minimize:
            out = 1.0 - self.score / (3.0 * m)
        else:
            out = self.score / (max(scoring.match, 1) * m)
        return np.where(self.edge < 0, np.nan, out)


def profile_blocks(states: np.ndarray, flags: np.ndarray, width: int = config.BLOCK_WIDTH):
    """Lay the edge profiles (E, n) out as inter-reference blocks of ``width`` lanes."""
    return reference_blocks(list(states), width=width, flags=list(flags), dtype=states.dtype)


def pack_profiles(states: np.ndarray, flags: np.ndarray, backend: Backend) -> list:
    """The edge profiles as reference blocks in the lanes ``backend`` prefers (the OpenCL
    kernels read every profile side by side)."""
    return engine.pack(backend, "papara", list(states), flags=list(flags), dtype=states.dtype)


@dataclass
class Scored:
    """One batch's scores of every read against every edge, before the best edges are
    picked (:func:`fold`): the device can go on to the next batch meanwhile."""

    n_reads: int
    n_edges: int
    n_cols: int
    nonempty: np.ndarray  # indices of the reads that were scored (non-empty)
    residues: int
    blocks: list | None = None
    results: list | None = None  # per block, BlockScores of the non-empty reads


def place(
    states: np.ndarray,
    flags: np.ndarray,
    reads: list[np.ndarray],
    scoring: PaparaScoring,
    backend: Backend,
    progress=None,
    blocks=None,
    fold_kernel: bool = True,
) -> Placements:
    """Score all reads against all edges and keep the best edge of each read.

    Ties go to the lower edge index. Lower is better for ``bmc2012``. ``blocks``: the
    profiles as :func:`pack_profiles` laid them out for ``backend``, shared by the batches of
    one run (a device keeps the set it last uploaded; new blocks are laid out and sent again).
    Each block's scores are folded into the per-read best in the engine's CPU kernel where
    there is one (``fold_kernel=False``: the NumPy form it is tested against). The two steps
    are :func:`score` and :func:`fold`.
    """
    scored = score(states, flags, reads, scoring, backend, progress, blocks)
    return fold(scored, scoring, backend, fold_kernel)


def score(
    states: np.ndarray,
    flags: np.ndarray,
    reads: list[np.ndarray],
    scoring: PaparaScoring,
    backend: Backend,
    progress=None,
    blocks=None,
) -> Scored:
    """The scoring step of :func:`place`: every non-empty read against every edge."""
    n_edges, n_cols = states.shape
    nonempty = np.flatnonzero([len(r) > 0 for r in reads])
    scored = Scored(len(reads), n_edges, n_cols, nonempty, 0)
    if nonempty.size == 0 or n_edges == 0:
        return scored
    batch = query_batch([reads[k] for k in nonempty], dtype=states.dtype)
    if blocks is None:
        blocks = pack_profiles(states, flags, backend)
    task = Task("papara", scoring)
    scored.results = backend.score(task, batch, blocks, progress=progress)
    scored.blocks, scored.residues = blocks, int(batch.residues)
    return scored


def fold(
    scored: Scored, scoring: PaparaScoring, backend: Backend, fold_kernel: bool = True
) -> Placements:
    """The best edge (and the runner-up, the ties) of every read of a :func:`score` result."""
    n_edges, n_cols, nonempty = scored.n_edges, scored.n_cols, scored.nonempty
    n_reads = scored.n_reads
    edge = np.full(n_reads, -1, dtype=np.int64)
    best = np.zeros(n_reads, dtype=np.int64)
    width = np.zeros(n_reads, dtype=np.uint8)
    second_edge = np.full(n_reads, -1, dtype=np.int64)
    second = np.zeros(n_reads, dtype=np.int64)
    ties = np.zeros(n_reads, dtype=np.int64)
    if scored.results is None:
        return Placements(edge, best, width, 0, second_edge, second, ties)
    blocks, results = scored.blocks, scored.results
    sign = -1 if scoring.minimize else 1
    run_best = np.full(len(nonempty), np.iinfo(np.int64).min, dtype=np.int64)
    run_edge = np.full(len(nonempty), -1, dtype=np.int64)
    run_width = np.zeros(len(nonempty), dtype=np.uint8)
    low = np.iinfo(np.int64).min
    run_second = np.full(len(nonempty), low, dtype=np.int64)
    run_second_edge = np.full(len(nonempty), -1, dtype=np.int64)
    run_ties = np.zeros(len(nonempty), dtype=np.int64)
    rows = np.arange(len(nonempty))
    running = (run_best, run_edge, run_width, run_second, run_second_edge, run_ties)
    for block, result in zip(blocks, results, strict=True):
        lanes = np.flatnonzero(block.ids >= 0)
        ids = block.ids[lanes]
        if fold_kernel and engine.cpu_papara_fold(
            result.scores, result.width, lanes, ids, sign, running, backend.threads
        ):
            continue
        run_best, run_edge, run_width, run_second, run_second_edge, run_ties = running
        signed = sign * result.scores[:, lanes]
        lane = np.argmax(signed, axis=1)  # first maximum: the lower edge
        value = signed[rows, lane]
        tied = (signed == value[:, None]).sum(axis=1)
        others = signed.copy()
        others[rows, lane] = low
        lane2 = np.argmax(others, axis=1)  # the block's best other edge (the next tie first)
        value2 = others[rows, lane2]
        edge2 = np.where(value2 > low, ids[lane2], -1)
        better = value > run_best
        same = value == run_best
        # the runner-up: a better block demotes the old best unless its own second beats it;
        # otherwise the block's best competes with the old second (ties keep the lower edge)
        keep_old = run_best >= value2
        new_second = np.where(better, np.where(keep_old, run_best, value2), run_second)
        new_second_edge = np.where(better, np.where(keep_old, run_edge, edge2), run_second_edge)
        challenger = ~better & (value > run_second)
        new_second = np.where(challenger, value, new_second)
        new_second_edge = np.where(challenger, ids[lane], new_second_edge)
        run_ties = np.where(better, tied, np.where(same, run_ties + tied, run_ties))
        run_second, run_second_edge = new_second, new_second_edge
        run_best = np.where(better, value, run_best)
        run_edge = np.where(better, ids[lane], run_edge)
        run_width = np.where(better, result.width[rows, lanes[lane]], run_width)
        running = (run_best, run_edge, run_width, run_second, run_second_edge, run_ties)
    run_best, run_edge, run_width, run_second, run_second_edge, run_ties = running
    edge[nonempty] = run_edge
    best[nonempty] = sign * run_best
    width[nonempty] = run_width
    second_edge[nonempty] = run_second_edge
    second[nonempty] = np.where(run_second_edge >= 0, sign * run_second, 0)
    ties[nonempty] = run_ties
    return Placements(
        edge, best, width, scored.residues * n_cols * n_edges, second_edge, second, ties
    )
