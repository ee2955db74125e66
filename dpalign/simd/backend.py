"""The ``numba`` backend: CPU worker threads, one block at a time, kernels that release the GIL.

Each kernel family provides ``score_block(task, queries, block) -> BlockScores`` in its own
module (``simd.papara_score``, ``simd.pairwise``); the kernels are ``@njit(nogil=True)`` so the
worker threads run in parallel. Results do not depend on the number of threads. The backend
also keeps the CPU side of the engine's traceback door (pairwise and PaPaRa traceback, pairs
scored one by one) and of the long-pair region contract (:class:`NumbaRegions`).

The engine registers this class (see :mod:`dpalign.engine`); nothing here imports it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import cache, partial

import numpy as np

from .. import config
from ..contract import Backend, BlockScores, RegionFill, RegionFiller
from .threads import map_threads


def query_slices(lengths: np.ndarray, n_blocks: int, threads: int) -> list[slice]:
    """Split the queries into contiguous slices of about equal residues.

    With one block per work unit, 7 blocks on 2 threads would leave one thread idle for a
    seventh of the run; splitting every block's queries into c slices, with c chosen so that
    ``n_blocks * c`` is a multiple of ``threads`` (and at least 2 units per thread), gives
    every thread the same work.
    """
    n = len(lengths)
    if threads <= 1 or n < 2 or n_blocks == 0:
        return [slice(0, n)]
    c = max(1, -(-2 * threads // n_blocks))
    while (n_blocks * c) % threads and c < n:
        c += 1
    c = min(c, n)
    total = np.cumsum(lengths)
    middle = total - np.asarray(lengths) / 2
    cuts = np.searchsorted(middle, total[-1] * np.arange(1, c) / c) if total[-1] else []
    edges = sorted({0, n, *(int(x) for x in cuts)})
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def kernel_module(kernel: str):
    """The module holding ``score_block`` for a kernel family."""
    if kernel == "papara":
        from . import papara_score as module
    else:
        from . import pairwise as module
    return module


#: The engine's table entries of this backend (parasail-style names: family, operation,
#: backend, strategy, integer width; the width is chosen per pair, narrowest first).
KERNELS = (
    *(f"{f}_score_numba_inter_i{w}" for f in ("nw", "sg", "sw") for w in (8, 16, 32)),
    *(f"{f}_score_numba_scalar_i64" for f in ("nw", "sg", "sw")),
    "sw_score_numba_striped_i16",
    *(f"{f}_trace_numba_scalar_i64" for f in ("nw", "sg", "sw")),
    *(f"{f}_fill_numba_antidiagonal_i{w}" for f in ("nw", "sg", "sw") for w in (16, 32, 64)),
    "papara_score_numba_inter_i16",
    "papara_score_numba_inter_i32",
    "papara_trace_numba_inter_i16",
    "papara_trace_numba_inter_i32",
)

#: Lanes per block for pairwise kernels: 64 int8 lanes (one AVX-512 register) per lane group,
#: up to :data:`MAX_GROUPS` groups per block when there are many targets (fewer calls from
#: Python per cell, and the GIL-bound part of a block shrinks), as long as every thread still
#: gets about :data:`BLOCKS_PER_THREAD` blocks; one thread has nothing to balance and takes
#: the widest blocks.
PAIRWISE_BLOCK_WIDTH = 64
MAX_GROUPS = 8
BLOCKS_PER_THREAD = 16


#: Blocks per thread from which a pairwise run hands out whole blocks (every query at once)
#: rather than blocks times query slices.
PAIRWISE_UNITS_PER_THREAD = 4


def pairwise_block_width(n_targets: int, threads: int | None = None) -> int:
    """Lanes per pairwise block for ``n_targets`` targets on ``threads`` worker threads."""
    threads = config.cpu_threads(threads)
    if threads == 1:  # each block costs ~0.1 ms of Python: 16 of them were 15% of 1e3 x 1 kb
        per_block = -(-n_targets // PAIRWISE_BLOCK_WIDTH)
    else:
        per_block = n_targets // (PAIRWISE_BLOCK_WIDTH * BLOCKS_PER_THREAD * threads)
    return PAIRWISE_BLOCK_WIDTH * min(MAX_GROUPS, max(1, per_block))


class NumbaRegions(RegionFiller):
    """One long pair for :mod:`dpalign.simd.antidiagonal`: region fills in tiles on the CPU
    cores, and the leaf traceback kernels.

    Parameters
    ----------
    a, b : ndarray uint8
    matrix : ndarray (K, K)
        Substitution scores in the lane dtype (int16, int32 or int64).
    gap_open, gap_extend : int
    local : bool
    neg, neg_store : int
        "-inf" of the lanes and of the store type.
    relative : bool
        16-bit lanes relative to each tile's corner.
    """

    def __init__(self, a, b, matrix, gap_open, gap_extend, local, neg, neg_store, relative):
        from . import antidiagonal as K

        self.K = K
        self.a, self.b, self.matrix = a, b, matrix
        self.o, self.e, self.local = gap_open, gap_extend, bool(local)
        self.neg, self.neg_store, self.relative = neg, neg_store, relative
        self.STATE_H = K.STATE_H

    def fill_region(self, r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads):
        K = self.K
        h, w = left.shape[1] - 1, top.shape[1] - 1
        params = np.zeros(K.N_PARAMS, np.int64)
        params[[K.P_OPEN, K.P_EXTEND, K.P_LOCAL, K.P_TILE_ROWS, K.P_TILE_COLS]] = (
            self.o,
            self.e,
            self.local,
            tile_rows,
            tile_cols,
        )
        params[[K.P_NEG, K.P_LANES, K.P_LANE_MAX, K.P_NEG_STORE, K.P_RELATIVE]] = (
            self.neg,
            512 // (self.matrix.dtype.itemsize * 8),
            np.iinfo(self.matrix.dtype).max,
            self.neg_store,
            self.relative,
        )
        fill = K.fill_region(
            self.a[r0 : r0 + h],
            self.b[c0 : c0 + w],
            self.matrix,
            params,
            top,
            left,
            row_slot,
            col_slot,
            threads,
        )
        return RegionFill(fill.last_row, fill.row_store, fill.col_store, fill.best)

    # The methods below hand the Numba kernels this pair's arrays and scores, which the
    # kernels take as plain arguments: a compiled function holds no Python object, and
    # longpair (a driver) reaches the kernels only through this object (engine.cpu_regions),
    # past the import wall between drivers and simd. The arguments are spelt out, not
    # unpacked from a tuple of the pair's (50-160 ns more a call, measured). They convert
    # nothing they need not: the cuts become int64 arrays (a tuple or an int32 array would
    # be a Numba specialisation of its own) and the boundaries pass as given.

    def trace_leaf(self, r0, c0, top, left, i, j, state, ops, pos):
        """Recompute the leaf of ``i x j`` cells at (r0, c0) in full and trace it back."""
        return self.K.trace_leaf(
            self.a[r0 : r0 + i], self.b[c0 : c0 + j], self.matrix, self.o, self.e, self.local,
            top, left, i, j, state, ops, pos,
        )  # fmt: skip

    def trace_blocks(self, r0, c0, rc, cc, top, left, rows, cols, i, j, state, ops, pos):
        """Trace through a region filled with every block boundary kept (cuts ``rc``, ``cc``),
        each block on the path as a leaf, in one compiled loop."""
        return self.K.trace_blocks(
            self.a, self.b, self.matrix, self.o, self.e, self.local, r0, c0,
            np.asarray(rc, np.int64), np.asarray(cc, np.int64), top, left, rows, cols,
            i, j, state, ops, pos,
        )  # fmt: skip

    def trace_blocks_merge(
        self, r0, c0, rc, cc, top, left, rows, cols, i, j, state, ops, pos, record, other, n,
        i_stop=0, j_stop=0,
    ):  # fmt: skip
        """:meth:`trace_blocks`, recording the leaves it enters and stopping where it meets
        the record ``other[:n]`` of another trace of the region, or past row ``i_stop`` or
        column ``j_stop`` (see the kernel)."""
        return self.K.trace_blocks_merge(
            self.a, self.b, self.matrix, self.o, self.e, self.local, r0, c0,
            np.asarray(rc, np.int64), np.asarray(cc, np.int64), top, left, rows, cols,
            i, j, state, ops, pos, record, other, n, i_stop, j_stop,
        )  # fmt: skip

    def fill_bits(self, top, left, bits, last_col):
        """The whole matrix on one thread, one direction byte per cell."""
        return self.K.fill_bits(
            self.a, self.b, self.matrix, self.o, self.e, self.local, top, left, bits, last_col
        )

    def trace_bits(self, bits, i, j, state, ops, pos):
        return self.K.trace_bits(self.a, self.b, bits, self.local, i, j, state, ops, pos)


@cache
def _numba_installed() -> bool:
    # find_spec, not import: importing numba takes half a second, and `dpalign devices` and
    # `auto` ask every backend whether it is available (once: a path search, ~0.2 ms)
    from importlib.util import find_spec

    return find_spec("numba") is not None


@dataclass
class NumbaBackend(Backend):
    """Numba SIMD kernels on every CPU core."""

    name = "numba"
    kernels = KERNELS
    traces = True

    @classmethod
    def available(cls, **options) -> bool:
        return _numba_installed()

    def describe(self) -> str:
        return f"numba ({config.cpu_threads(self.threads)} threads)"

    def block_width(self, kernel, n_targets):
        if kernel == "pairwise":
            return pairwise_block_width(n_targets, self.threads)
        return config.BLOCK_WIDTH

    def score_block(self, task, queries, block):
        return kernel_module(task.kernel).score_block(task, queries, block)

    # -- the engine's traceback door (CPU side) -------------------------------------------

    def align_pair(self, task, a, b):
        """``(score, a_start, a_end, b_start, b_end, ops)`` of one pair (scalar int64)."""
        from .traceback import align_pair

        return align_pair(a, b, task.scoring, task.mode == "local", task.free_ends)

    def align_papara(self, states, flags, reads, edges, scoring):
        """``(scores, ops)`` of many reads, each against its own edge (32 pairs a pass)."""
        from .papara_trace import papara_align_many

        return papara_align_many(states, flags, reads, edges, scoring, threads=self.threads)

    def refine_papara(self, tables, table_of, reads, bands, thetas, model):
        """The accurate mode's second pass, reads on every core (the row-mixture model where
        ``model.rows`` > 0)."""
        from .papara_refine import refine_many, refine_many_rows

        consts = (model.open_ins, model.extend_ins, model.overhang)
        if model.rows:
            extra = (model.row_mix, model.jump, model.profile_weight, model.blend, model.insert)
            return refine_many_rows(
                tables, table_of, reads, bands, *consts, thetas, *extra, threads=self.threads
            )
        return refine_many(tables, table_of, reads, bands, *consts, thetas, threads=self.threads)

    def refine_papara_log_z(self, tables, table_of, reads, bands, model):
        """Each read's row-mixture log likelihood over its band, reads on every core."""
        from .papara_refine import log_z_many_rows

        return log_z_many_rows(
            tables, table_of, reads, bands, model.open_ins, model.extend_ins, model.overhang,
            model.row_mix, model.jump, model.profile_weight, threads=self.threads,
        )  # fmt: skip

    def align_papara_trimmed(self, states, flags, reads, edges, scoring):
        """``(scores, leads, cores)``: :meth:`align_papara` with the ops trimmed in the
        kernel's threads (see :func:`dpalign.engine.align_papara_trimmed`)."""
        from .papara_trace import papara_align_many

        return papara_align_many(
            states, flags, reads, edges, scoring, threads=self.threads, trimmed=True
        )

    def score_pairs(self, task, a_list, b_list, progress=None):
        """Scores of pair k = (a_list[k], b_list[k]), one pair at a time on every core:
        local pairs in the striped int16 kernel (int64 only if it saturates), the others in
        scalar int64."""
        from .pairwise import local_width_ok, score_pair_int64
        from .striped import local_score

        scoring = task.scoring
        local = task.mode == "local"
        out = np.zeros(len(a_list), dtype=np.int64)
        matrix = scoring.matrix.astype(np.int64)
        ends_arr = np.array(task.free_ends, dtype=np.bool_)
        o, e = scoring.gap_open, scoring.gap_extend
        striped = local and local_width_ok(scoring, 16)

        def work(chunk):
            for k in chunk:
                if striped:
                    value, saturated = local_score(a_list[k], b_list[k], matrix, o, e)
                    if not saturated:
                        out[k] = value
                        continue
                out[k] = score_pair_int64(a_list[k], b_list[k], matrix, o, e, local, ends_arr)
            if progress is not None:
                progress(sum(len(a_list[k]) * len(b_list[k]) for k in chunk))

        chunks = [range(k, min(k + 64, len(a_list))) for k in range(0, len(a_list), 64)]
        map_threads(work, chunks, self.threads)
        return out

    # -- the long-pair region contract (CPU side) -----------------------------------------

    @staticmethod
    def papara_fold(scores, width, lanes, ids, sign, running, threads=None):
        """Fold a block of PaPaRa scores into the running best/second/ties (in place)."""
        from .papara_best import fold_block

        fold_block(scores, width, lanes, ids, sign, *running, threads=threads)

    @staticmethod
    def papara_profiles(tips, gap_state, ops, trans, n_edges, cgap, threads=None):
        """PaPaRa's edge profiles from a combine schedule, the columns over the cores."""
        from .papara_profiles import run_profile_schedule

        return run_profile_schedule(tips, gap_state, ops, trans, n_edges, cgap, threads)

    @staticmethod
    def regions(a, b, matrix, gap_open, gap_extend, local, neg, neg_store, relative):
        """A :class:`NumbaRegions` for one long pair."""
        return NumbaRegions(a, b, matrix, gap_open, gap_extend, local, neg, neg_store, relative)

    def score(self, task, queries, blocks, progress=None):
        module = kernel_module(task.kernel)
        parts = self._run(module.score_block, task, queries, blocks, progress)
        return [_join(per_block) for per_block in parts]

    def score_ends(self, task, queries, blocks, progress=None, every=False):
        """Local scores with end cells: ``[(BlockScores, a_end [Q, W], b_end [Q, W])]``.

        Only where :func:`dpalign.simd.ends.ends_supported` says so (local pairwise scoring
        with positive gap costs); ends are 0-based, half-open (the first best cell in
        row-major order, as :mod:`dpalign.reference` picks it), -1 for the few saturated
        pairs rescored by the striped kernel, unless ``every`` (see
        :func:`~dpalign.simd.ends.score_block_ends`).
        """
        from .ends import ends_supported, score_block_ends

        if not ends_supported(task):
            raise ValueError("score_ends needs local pairwise scoring with gap costs > 0")
        block_ends = partial(score_block_ends, every=every) if every else score_block_ends
        parts = self._run(block_ends, task, queries, blocks, progress)
        out = []
        for per_block in parts:
            out.append(
                (
                    _join([p[0] for p in per_block]),
                    np.concatenate([p[1] for p in per_block]),
                    np.concatenate([p[2] for p in per_block]),
                )
            )
        return out

    def warm_up(self, task) -> None:
        """Load the kernels ``task`` runs before a timed run (:func:`warm_up`)."""
        warm_up(task)

    def ends_supported(self, task) -> bool:
        """Whether :meth:`score_ends` can run ``task``."""
        from .ends import ends_supported

        return ends_supported(task)

    def _run(self, score_block, task, queries, blocks, progress):
        """``score_block(task, part, block)`` for every block and query slice, on the
        worker threads; results per block, one per query slice."""
        threads = config.cpu_threads(self.threads)
        if task.kernel == "pairwise" and len(blocks) >= PAIRWISE_UNITS_PER_THREAD * threads:
            # enough blocks to balance: slicing the queries too only multiplies the GIL-held
            # Python per unit (16 threads, 313 blocks: 16 slices made 5,008 units, whose
            # Python took 0.54 s against 1.3 s of kernels)
            slices = [slice(0, len(queries))]
        else:
            slices = query_slices(queries.lengths, len(blocks), threads)
        parts = [queries if len(slices) == 1 else queries.subset(s) for s in slices]
        units = [(b, p) for b in range(len(blocks)) for p in range(len(parts))]
        threads = min(threads, max(len(units), 1))
        results = [[None] * len(parts) for _ in blocks]

        def work(unit: tuple[int, int]) -> None:
            index, part = unit
            block = blocks[index]
            start = time.perf_counter()
            results[index][part] = score_block(task, parts[part], block)
            cells = parts[part].residues * block.residues
            self.stats.record(
                f"cpu-{threading.current_thread().name.rsplit('_', 1)[-1]}",
                cells,
                time.perf_counter() - start,
            )
            if progress is not None:
                progress(cells)

        map_threads(work, units, threads, name="dpalign")
        return results


def _join(per_block: list[BlockScores]) -> BlockScores:
    """One block's results over query slices, stacked."""
    if len(per_block) == 1:
        return per_block[0]
    return BlockScores(
        np.concatenate([r.scores for r in per_block]),
        np.concatenate([r.width for r in per_block]),
    )


def warm_up(task) -> None:
    """Load (or compile) the kernels ``task`` runs on tiny inputs, once per process.

    Numba loads each cached kernel on its first call (about a second for a search's
    kernels); a run that warms up first keeps that out of its timed phases.
    """
    import numpy as np

    from ..contract import QueryBatch
    from . import pairwise
    from .ends import ends_supported, run_pass_ends
    from .traceback import align_pair

    if task.kernel != "pairwise":
        return
    scoring = task.scoring
    local = task.mode == "local"
    queries = QueryBatch(np.zeros((1, 4), dtype=np.uint8), np.array([4], dtype=np.int64))
    qsel = np.zeros(1, dtype=np.int64)
    codes = np.zeros((4, 64), dtype=np.uint8)
    lengths = np.full(64, 4, dtype=np.int64)
    if local and ends_supported(task):
        for w in pairwise._local_widths(scoring, True):
            run_pass_ends(w, codes, lengths, queries, qsel, scoring)
    widths = pairwise._local_widths(scoring, True) if local else (8, 16, 32)
    for w in widths:
        pairwise.run_pass(w, codes, lengths, queries, qsel, scoring, local, task.free_ends)
    align_pair(queries.codes[0], codes[:, 0].copy(), scoring, local, task.free_ends)
