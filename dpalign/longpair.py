"""Align one long pair (10^4 to 10^6 per side) on every CPU core, traceback in near-linear memory.

The pipeline: validate -> encode -> choose the lane width -> fill the whole matrix in tiles on
all cores (the engine's region contract: :func:`dpalign.engine.cpu_regions`, Numba's
anti-diagonal tiles), keeping a few checkpoint rows and columns -> find the end cell -> trace
back block by block.

Traceback
---------
The forward pass keeps the boundaries (H with D on rows, H with I on columns) of about
``Tiling.blocks`` block rows and block columns. Walking back from the end cell, the block that
holds the current cell is recomputed from its boundaries, cropped to the rows and columns
before the cell (the path only moves up and left), again keeping the boundaries of its own
sub-blocks; the recursion ends in blocks of at most ``leaf_rows x leaf_cols`` cells, which are
recomputed in full and traced with the reference's decision procedure. Every value used in a
decision is the exact value of the full recurrence, so the alignment is identical to
:func:`dpalign.reference.pairwise_align` (tie rules included). Memory is
O((m + n) * blocks) per level and O(log(m n)) levels; the recomputation costs about
``2 / blocks`` of the forward pass (two 100 kb sequences: ~30 MB of checkpoints, ~11 % more
CPU time than the score alone). A region whose leaf-sized block boundaries fit in
``Tiling.leaf_bytes`` (and need no smaller tiles) keeps them all instead, and its blocks are
traced leaf after leaf in one compiled loop (no Python per leaf). Every traced path is
re-scored against the sequences before it is returned (:func:`check_path`, O(m + n)): a path
that does not give the reported score and end is an :class:`~dpalign.errors.InternalError`.

On an OpenCL device
-------------------
A backend with a device region filler (``backend="opencl"``: the anti-diagonal tile kernel,
:func:`dpalign.engine.device_regions`) runs every region of at least ``Tiling.device_cells``
cells (the forward pass, the larger recomputations of the traceback) there; it fills a region
from the same boundaries and keeps the same checkpoints; smaller blocks and the leaves stay on
the CPU. Results are identical. Local mode can prune there (``prune=True``: tiles that cannot
reach the best score so far are skipped; the result stays identical). A pruned tile leaves
lower bounds (H = 0) in its borders and checkpoints, and so does every value computed from
them: exact on every optimal path, and so in every traceback decision, but not near a tile's
corner H, which the 16-bit lanes count from; the CPU's fills then use absolute lanes.

>>> from dpalign.scoring import Scoring
>>> s = Scoring((1, -1), 2)
>>> r = align_long(s.encode("ACGT"), s.encode("AGT"), s)
>>> (r.score, r.cigar)
(1, '1=1D2=')
"""

from __future__ import annotations

import bisect
import queue
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from . import config, engine, reference
from .contract import RegionFill
from .errors import InternalError, OptionError
from .reference import PairwiseResult
from .scoring import Scoring, free_ends_tuple

STATE_H = 0  # the traceback's state in H (D and I are 1 and 2)
_NO_RECORD = np.empty((0, 4), np.int64)  # trace_blocks_merge: record nothing, meet nothing
OP_MATCH, OP_DEL, OP_INS = ord("="), ord("D"), ord("I")
#: Ops re-scored at a time by the check of every traced path (bounded scratch memory).
CHECK_CHUNK = 1 << 20


@dataclass(frozen=True)
class Tiling:
    """How a long pair is cut up (defaults measured on a 2-core AVX-512 machine).

    Attributes
    ----------
    tile_rows, tile_cols : int
        Cells of one compute tile (rows of ``a`` x columns of ``b``).
    blocks : int
        Checkpoint blocks per side at each traceback level (memory ~ blocks, recomputation
        ~ 1 / blocks).
    leaf_rows, leaf_cols : int
        Blocks this small are recomputed in full (one direction byte per cell) and traced back
        directly.
    parallel_cells : int
        Regions with fewer cells run on one thread.
    lane_bits : int, optional
        Force 16-, 32- or 64-bit lanes (tests); by default the narrowest that cannot overflow
        (see :func:`plan_lanes`).
    device_cells : int
        With ``backend="opencl"``: regions with fewer cells stay on the CPU (default 2^28, a
        16k x 16k block: smaller regions have too few tiles per tile diagonal to fill a GPU;
        on the H100 host, recomputing 100 kb traceback blocks of 6k x 6k on the GPU made the
        traceback 1.3x slower than on its 16 cores, BENCHMARKS.md).
    device_tile : (rows, items, per_item[, packed]), optional
        With ``backend="opencl"``: the device's tile shape (tests force tiny ones; default
        the device backend's, ``dpalign.kernels_cl.antidiagonal.default_tile``: packed
        16-bit tiles on Hopper GPUs, whose traceback recomputes in 32-bit ``GPU_TILE``).
    device_retile : (rows, items, per_item), optional
        With ``backend="opencl"``: the tile shape of the traceback's recomputations on the
        device (no wider than the forward pass's; default the backend's choice, e.g.
        ``dpalign.kernels_cl.antidiagonal.GPU_RETILE``, else the same). Those regions are
        small for a GPU (a few hundred tiles per tile diagonal: latency-bound), where
        narrower tiles take fewer steps per launch and make the leaves smaller.
    leaf_bytes : int, optional
        A region whose leaf-sized block boundaries (every ``leaf_rows`` rows and
        ``leaf_cols`` columns; on a device, whole device tiles) fit in this many bytes keeps
        them all, and its traceback traces leaf after leaf in one compiled loop instead of
        recursing through another level of fills (the H100 host's 1 Mb traceback spent most
        of its time in the Python calls of those small levels). Default: what the whole
        pair's ``blocks`` boundaries take, at least 1 GiB (memory stays near-linear plus a
        constant); 0: never.
    fill_ahead : int
        With a device: while the CPU traces a recomputed block's leaves, the device fills
        the next this many blocks in full that a straight line from the path's cell towards
        the region's start crosses (where a path near the diagonal goes; a path that misses
        one leaves that fill unused), each on a queue of its own; 0: none. Same result
        either way.
    trace_ahead : int
        With ``fill_ahead``: CPU threads trace each block filled ahead, as soon as it is
        filled, in this many segments from cells along its diagonal (0: none); the
        traceback, once it enters that block, traces only until its path meets the first
        segment (paths from nearby cells soon meet; from a cell and state on, a path is
        determined), follows it, and so on, so the CPU traces blocks, and parts of a block,
        side by side. Same result either way.
    switch_interval : float, optional
        The interpreter's thread switch interval (``sys.setswitchinterval``) while a walk
        fills or traces ahead, restored after (None: left as it is). The threads that
        launch fills run Python loops; a waiting thread gets the interpreter lock only
        after this long (5 ms by default), several times a block.
    staging_band : float
        With a device that fills ``spans`` (OpenCL): of a traceback block filled leaf by
        leaf, only the leaves within this fraction of the block's side (at least two
        leaves) of the path's likely course (a line through its entry cell, or the cell
        the walk is at, with the slope the path kept so far) reach the host: through
        page-locked staging of about that size (pinned while the forward pass runs, ~2 ms
        a MB) into pageable memory touched only there. A path that leaves them has the
        block's checkpoints fetched in full and is traced again (``band misses`` in the
        run's notes). 0 (the default): every checkpoint through page-locked memory (3 x
        366 MB at 1 Mb, of which a path reads ~2 MB a block). Same result either way. On
        the H100 the band did not lower the peak RSS of a 1 Mb or 10 Mb ``dpalign align``
        (1.73 GB against 1.66; 6.53 GB against 5.68) nor its time, for reasons not yet
        found (BENCHMARKS.md, "fourth session"), so it is an option, not the default.
    """

    tile_rows: int = 1024
    tile_cols: int = 512
    blocks: int = 16
    leaf_rows: int = 128
    leaf_cols: int = 128
    parallel_cells: int = 1 << 20
    lane_bits: int | None = None
    device_cells: int = 1 << 28
    device_tile: tuple[int, ...] | None = None
    device_retile: tuple[int, int, int] | None = None
    leaf_bytes: int | None = None
    fill_ahead: int = 2
    trace_ahead: int = 3
    switch_interval: float | None = 2e-4
    staging_band: float = 0.0

    def __post_init__(self) -> None:
        if self.lane_bits not in (None, 16, 32, 64):
            raise OptionError("Tiling.lane_bits must be 16, 32, 64 or None (narrowest that fits)")
        for name in ("tile_rows", "tile_cols", "leaf_rows", "leaf_cols", "parallel_cells"):
            if getattr(self, name) < 1:
                raise OptionError(f"Tiling.{name} must be at least 1")
        if self.blocks < 2:
            raise OptionError("Tiling.blocks must be at least 2")


@dataclass(frozen=True)
class _Region:
    """Rows ``r0 .. r0+h`` and columns ``c0 .. c0+w`` of the matrix, with their boundaries."""

    r0: int
    c0: int
    h: int
    w: int
    top: np.ndarray  # (2, w+1): H, D of row r0
    left: np.ndarray  # (2, h+1): H, I of column c0


@dataclass
class _Checkpoints:
    """A filled region's checkpoints: block cut positions and the boundaries kept there."""

    row_cuts: list[int]
    col_cuts: list[int]
    fill: RegionFill
    leaves: bool = False  # every block is a leaf: trace them in one compiled loop


@dataclass(frozen=True)
class Lanes:
    """The integer types one pair is computed in.

    Attributes
    ----------
    lane : type
        Vector lanes: ``int16`` (32 per AVX-512 register; values relative to the H of each
        tile's top-left corner), ``int32`` (16) or ``int64`` (8) (absolute values).
    store : type
        Boundary rows, columns and checkpoints (absolute values): ``int32`` or ``int64``.
    neg, neg_store : int
        "-inf" in each: far enough above the type's minimum that subtracting a gap cost
        cannot wrap.
    """

    lane: type
    store: type
    neg: int
    neg_store: int

    @property
    def bits(self) -> int:
        return np.dtype(self.lane).itemsize * 8

    @property
    def relative(self) -> bool:
        return self.lane is np.int16

    def absolute(self) -> Lanes:
        """The same store with absolute lanes of the store's type (no 16-bit lanes)."""
        return Lanes(self.store, self.store, self.neg_store, self.neg_store)


def plan_lanes(scoring: Scoring, m: int, n: int, mode: str, tiling: Tiling | None = None) -> Lanes:
    """The narrowest lanes that cannot overflow for this pair (``tiling.lane_bits`` forces one).

    Absolute values lie within :meth:`Scoring.bounds` (plus a few gap costs for padding rows
    and "-inf" boundaries): int32, else int64. Within one tile every value lies within
    ``(max|s| + e) * (tile_rows + 32 + tile_cols) + 2 o`` of the tile's corner H (an
    alignment to a cell can be cut and re-ended at the corner for at most that), so 16-bit
    lanes relative to that corner are exact when this fits.
    """
    tiling = tiling or Tiling()
    o, e = scoring.gap_open, scoring.gap_extend
    smax, smin = max(int(scoring.matrix.max()), 0), min(int(scoring.matrix.min()), 0)
    spare = o + e - smin + 1
    slack = 2 * o + 40 * e + spare
    width = scoring.width_for(m, n, mode, headroom=slack + 2 * spare)
    if width > 64:  # pragma: no cover - width_for never says more than 64
        raise OptionError("scores of this pair do not fit in 64-bit integers")
    store = np.int32 if width <= 32 else np.int64
    if tiling.lane_bits == 64:
        store = np.int64
    neg_store = int(np.iinfo(store).min) + 2 * spare
    rows, cols = min(tiling.tile_rows, m) + 32, min(tiling.tile_cols, n)
    spread = (max(smax, -smin) + e) * (rows + cols) + 2 * o + slack
    fits16 = spread <= 2**15 - 1 - 2 * spare
    if tiling.lane_bits in (None, 16) and fits16:
        return Lanes(np.int16, store, -(2**15) + 2 * spare, neg_store)
    if tiling.lane_bits == 16 or (tiling.lane_bits == 32 and store is np.int64):
        raise OptionError(f"{tiling.lane_bits}-bit lanes cannot hold this pair's scores")
    return Lanes(store, store, neg_store, neg_store)


class _Aligner:
    """One pair: encoded sequences, scoring in the lane dtype, the tiling and the ops buffer."""

    def __init__(self, a, b, scoring, mode, ends, tiling, threads, lanes: Lanes, device=None):
        self.a, self.b = a, b
        self.device = device  # the engine's device region filler, or None
        self.redevice = device  # the one for the traceback's recomputations
        retile = tiling.device_retile or getattr(device, "retile", None)
        if device is not None and retile and hasattr(device, "reshaped"):
            self.redevice = device.reshaped(retile)
        self.o, self.e = scoring.gap_open, scoring.gap_extend
        self.local = mode == "local"
        self.ends = ends
        self.tiling = tiling
        self.threads = threads
        self.lanes = lanes
        self.matrix = np.ascontiguousarray(scoring.matrix, dtype=lanes.lane)
        self.cpu = engine.cpu_regions(
            a,
            b,
            self.matrix,
            self.o,
            self.e,
            self.local,
            lanes.neg,
            lanes.neg_store,
            lanes.relative,
        )
        self.ops = np.empty(len(a) + len(b), np.uint8)
        self.pos = 0
        self.plan = None  # dpalign.bands.Plan: bands across fillers, progress
        # blocks filled ahead of the traceback: a device's only (on the CPU the fill of a
        # block takes every core; tracing in segments made a 60 kb pair on 2 cores slower)
        self.ahead = int(tiling.fill_ahead) if self.redevice is not None else 0
        # the traceback's device fills take one of these (the pair on a queue each)
        self.streams: queue.SimpleQueue = queue.SimpleQueue()
        self.stream_devices = [self.redevice] if self.redevice is not None else []
        if self.redevice is not None:
            self.streams.put(self.redevice)
        self._pool = None  # the threads that fill blocks ahead of the traceback
        self._tracers = None  # the threads that trace them ahead
        self.merged = 0  # blocks whose path met the one traced ahead
        # the walk's main thread: leaf traces, waits for blocks filled / traced ahead
        self.seconds = {"trace": 0.0, "wait fill": 0.0, "wait trace": 0.0}
        self.ahead_filled = self.ahead_used = 0  # blocks filled ahead, and those traced
        self.band_misses = 0  # blocks whose path left the checkpoints copied (spans)
        self.path_start = None  # the traceback's first cell: the path's slope so far
        store = np.dtype(lanes.store).itemsize
        self.leaf_bytes = tiling.leaf_bytes
        if self.leaf_bytes is None:  # the forward pass's checkpoints: H and D or I, per block
            self.leaf_bytes = max(2 * store * tiling.blocks * (len(a) + len(b) + 2), 1 << 30)

    # -- forward ----------------------------------------------------------------------------

    def global_region(self) -> _Region:
        """The whole matrix with the boundaries of the mode (reference ``_fill_pairwise``)."""
        m, n = len(self.a), len(self.b)
        a_lead, _, b_lead, _ = self.ends
        # in the store's type: the bounds of plan_lanes hold every gap of the pair
        gap = lambda k: -(self.o + self.e * np.arange(k + 1, dtype=self.lanes.store))  # noqa: E731
        top = np.empty((2, n + 1), self.lanes.store)
        left = np.empty((2, m + 1), self.lanes.store)
        top[0] = 0 if (self.local or a_lead) else gap(n)
        left[0] = 0 if (self.local or b_lead) else gap(m)
        top[0, 0] = left[0, 0] = 0
        top[1] = left[1] = self.lanes.neg_store
        return _Region(0, 0, m, n, top, left)

    def layout(self, h: int, w: int, keep: bool, recompute: bool = False):
        """How a region of ``h x w`` cells is filled: ``(device, th, tw, kr, kc, leaves)``,
        the device region filler or None (the CPU), the tile size, tiles per kept block, and
        whether every kept block is a leaf."""
        t = self.tiling
        if keep:
            bh = max(t.leaf_rows, -(-h // t.blocks))
            bw = max(t.leaf_cols, -(-w // t.blocks))
        else:
            bh, bw = h, w
        device = self.redevice if recompute else self.device
        if device is not None and (h * w < t.device_cells or bw < device.tile_cols):
            device = None

        def tiles(bh, bw):  # tile sizes, and tiles per block: never wider than bh x bw
            if device is not None:  # the device's tiles: any number of rows, fixed columns
                th, tw = min(device.tile_rows, bh), device.tile_cols
            else:
                th, tw = min(t.tile_rows, bh), min(t.tile_cols, bw)
            return th, tw, bh // th, bw // tw

        th, tw, kr, kc = tiles(bh, bw)
        leaves = False
        if keep and self.leaf_bytes > 0:
            # leaf-sized blocks (on a device: whole tiles), if their boundaries fit and their
            # tiles are the same (smaller CPU tiles would slow the fill down more than the
            # fewer calls gain: 100 kb on 2 cores)
            lw = t.leaf_cols if device is None else max(t.leaf_cols // tw, 1) * tw
            fine = tiles(min(t.leaf_rows, bh), min(lw, bw))
            kept = (-(-h // (fine[0] * fine[2])) - 1) * (w + 1)
            kept += (-(-w // (fine[1] * fine[3])) - 1) * (h + 1)
            same_tiles = fine[:2] == (th, tw)
            if same_tiles and 2 * kept * np.dtype(self.lanes.store).itemsize <= self.leaf_bytes:
                (th, tw, kr, kc), leaves = fine, True
        return device, th, tw, kr, kc, leaves

    def fill(
        self,
        region: _Region,
        keep: bool,
        final_col: bool = False,
        prune: bool = False,
        recompute: bool = False,
        slot: int = 0,
        course=None,
    ) -> _Checkpoints:
        """Fill ``region``; keep block boundaries when ``keep`` (and the last column if asked);
        ``prune``: the forward pass of a local alignment may skip hopeless tiles (devices);
        ``recompute``: a block of the traceback (the device's recomputation tiles); ``slot``:
        the host buffer a device leaves a leaf-level fill's checkpoints in (of its
        ``stores_slots``); ``course``: the line ``(i0, j0, i1, j1)`` a path is likely to
        follow through a leaf-level fill (only a band around it reaches the host, see
        ``Tiling.staging_band``)."""
        t = self.tiling
        h, w = region.h, region.w
        device, th, tw, kr, kc, leaves = self.layout(h, w, keep, recompute)
        n_rows, n_cols = -(-h // th), -(-w // tw)
        row_slot = np.full(n_rows, -1, np.int64)
        col_slot = np.full(n_cols, -1, np.int64)
        kept_rows = [ti for ti in range(n_rows - 1) if (ti + 1) % kr == 0] if keep else []
        kept_cols = [tj for tj in range(n_cols - 1) if (tj + 1) % kc == 0] if keep else []
        row_slot[kept_rows] = np.arange(len(kept_rows))
        col_slot[kept_cols] = np.arange(len(kept_cols))
        if final_col:
            col_slot[n_cols - 1] = len(kept_cols)
        row_cuts = [0] + [(ti + 1) * th for ti in kept_rows] + [h]
        col_cuts = [0] + [(tj + 1) * tw for tj in kept_cols] + [w]
        threads = self.threads if h * w >= t.parallel_cells else 1
        filler = device if device is not None else self.cpu
        if self.plan is not None:
            filler = self.plan(filler, device is not None, h * w)
        more = {"prune": True} if prune and self.local and filler.prunes else {}
        if more and self.lanes.relative:  # pragma: no cover - align_long chose absolute lanes
            raise InternalError("internal error: block pruning with 16-bit relative lanes")
        if leaves and filler.reuses_stores:
            # only trace_blocks reads a leaf-level fill's checkpoints, before the next fill
            # into the same slot (walk: the block traced and the one filled ahead)
            more["reuse_stores"] = True
            if slot:
                more["stores_slot"] = slot
            if course is not None and self._bands_stores(filler):
                more["spans"] = _band_spans(row_cuts, col_cuts, course, t.staging_band)
        if keep and not recompute and device is not None and not leaves:
            reserve = self._reserve_ahead(row_cuts, col_cuts)
            if reserve is not None:
                more["while_running"] = reserve
        args = (region.r0, region.c0, region.top, region.left, row_slot, col_slot, th, tw)
        if device is None or not recompute:
            fill = filler.fill_region(*args, threads, **more)
        else:
            # the walk fills ahead in threads: each fill takes one of the pair's device
            # copies (a queue each), and gives it back
            held = self.streams.get()
            try:
                if held is not device:
                    filler = held if self.plan is None else self.plan(held, True, h * w)
                fill = filler.fill_region(*args, threads, **more)
            finally:
                self.streams.put(held)
        return _Checkpoints(row_cuts, col_cuts, fill, leaves)

    def end_cell(self, points: _Checkpoints) -> tuple[int, int, int]:
        """Score and end cell (first maximum in row-major order among the candidates)."""
        fill = points.fill
        return _end_cell(
            fill.last_row[0],
            fill.col_store[-1, 0] if not self.local else None,
            fill.best,
            self.local,
            self.ends,
        )

    # -- traceback --------------------------------------------------------------------------

    def trace(self, region: _Region, i: int, j: int, state: int):
        """Trace from region cell (i, j) to the region's top row or left column, or a stop."""
        t = self.tiling
        if i <= t.leaf_rows and j <= t.leaf_cols:
            # one leaf: trace_blocks over a single block, which runs trace_leaf on it as is
            # (a direct trace_leaf call from here, with C-contiguous boundaries where
            # trace_blocks passes views, was a Numba specialisation of its own: ~3 s more
            # to compile in a first run, in each traceback worker that met such a pair)
            none = np.empty((0, 2, 1), region.top.dtype)
            i, j, state, stopped, self.pos = self.cpu.trace_blocks(
                region.r0, region.c0, (0, i), (0, j), region.top, region.left, none, none,
                i, j, state, self.ops, self.pos,
            )  # fmt: skip
            return i, j, state, stopped
        cropped = _crop(region, i, j)
        return self.walk(cropped, self.fill(cropped, keep=True, recompute=True), i, j, state)

    def walk(self, region: _Region, points: _Checkpoints, i: int, j: int, state: int, spec=None):
        """Trace through the blocks of a filled region, recomputing each block on the path
        (``spec``: futures of this leaf-level region's segments traced ahead, in path order,
        see :meth:`_trace_ahead`, which this one follows from where they meet)."""
        rc, cc = points.row_cuts, points.col_cuts
        rows, cols = points.fill.row_store, points.fill.col_store
        if points.leaves:
            i0, j0, began = i, j, time.perf_counter()
            state0, pos0 = state, self.pos
            waits = self.seconds["wait trace"]
            args = (region.r0, region.c0, rc, cc, region.top, region.left, rows, cols)
            if spec is None:
                i, j, state, stopped, self.pos = self.cpu.trace_blocks(
                    *args, i, j, state, self.ops, self.pos
                )
            else:
                for segment in spec:  # traced ahead from cells along the block's diagonal
                    waited = time.perf_counter()
                    record, n, ops, end, final, bounds = segment.result()
                    self.seconds["wait trace"] += time.perf_counter() - waited
                    # until the path meets this segment, or passes its end: then the next
                    i, j, state, stopped, pos, _, met = self.cpu.trace_blocks_merge(
                        *args, i, j, state, self.ops, self.pos, _NO_RECORD, record, n, *bounds
                    )
                    if met >= 0:  # the same path from here on: the ops traced ahead
                        start = int(record[met, 3])
                        self.ops[pos : pos + end - start] = ops[start:end]
                        pos += end - start
                        i, j, state, stopped = final
                        self.merged += 1
                    self.pos = pos
                    if stopped or i == 0 or j == 0:
                        break
                if not stopped and i > 0 and j > 0:  # past the last segment's start
                    i, j, state, stopped, self.pos = self.cpu.trace_blocks(
                        *args, i, j, state, self.ops, self.pos
                    )
            fill = points.fill
            if getattr(fill, "row_spans", None) is not None and _outside_spans(
                self.ops[pos0 : self.pos], i0, j0, rc, cc, fill.row_spans, fill.col_spans
            ):  # the path read leaves whose checkpoints were not copied: again, with all
                self.band_misses += 1
                fill.fetch_rest()
                i, j, state, stopped, self.pos = self.cpu.trace_blocks(
                    *args, i0, j0, state0, self.ops, pos0
                )
            waits = self.seconds["wait trace"] - waits
            self.seconds["trace"] += time.perf_counter() - began - waits
            if self.plan is not None and self.plan.progress is not None:
                # the leaves recomputed on the path, about half a block each (a progress
                # bar's estimate: the compiled loop does not count them)
                bh, bw = rc[-1] / max(len(rc) - 1, 1), cc[-1] / max(len(cc) - 1, 1)
                cells = int(((i0 - i) * bw + (j0 - j) * bh) / 2)
                if cells > 0:
                    self.plan.progress(cells)
            return i, j, state, stopped
        t = self.tiling
        ahead = []  # blocks filled ahead of the path, nearest first: (bi, bj, block, slot, fill)
        dropped = []  # (slot, fill) of blocks filled ahead that the path passed by
        pending = []  # every block filled ahead: the device finishes them before we return
        current = None  # the staging slot of the block traced now
        try:
            while i > 0 and j > 0:
                bi, bj = bisect.bisect_left(rc, i) - 1, bisect.bisect_left(cc, j) - 1
                r0, c0 = rc[bi], cc[bj]
                li, lj = i - r0, j - c0
                slope = self._slope(region.r0 + i, region.c0 + j) if self._banding() else None
                hit = next((k for k, e in enumerate(ahead) if e[:2] == (bi, bj)), None)
                traced = None
                if hit is not None:
                    _, _, block, current, future = ahead.pop(hit)
                    began = time.perf_counter()
                    filled, traced = future.result()
                    self.seconds["wait fill"] += time.perf_counter() - began
                    self.ahead_used += 1
                else:
                    block = self._block(region, points, bi, bj)
                    if li <= t.leaf_rows and lj <= t.leaf_cols:
                        current = None
                        i, j, state, stopped = self.trace(block, li, lj, state)
                        i, j = i + r0, j + c0
                        if stopped:
                            return i, j, state, True
                        continue
                    block = _crop(block, li, lj)
                # the blocks that a line from here to the region's start crosses next, in
                # full, on the device while the CPU traces this one: a path near that line
                # enters them (after a corner of a neighbour, maybe); any entry cell can be
                # traced from a full block. The others filled ahead are passed by.
                want = []
                if self.ahead:
                    for nb in self._blocks_ahead(rc, cc, i, j):
                        if len(want) == self.ahead:
                            break
                        if self._fills_ahead(self._block(region, points, *nb, crop=False)):
                            want.append(nb)
                dropped += [entry[3:] for entry in ahead if entry[:2] not in want]
                ahead = [entry for entry in ahead if entry[:2] in want]
                if hit is None:
                    current = self._free_slot(ahead, dropped, None)
                    # filled here, traced in segments on the tracer threads like the blocks
                    # ahead (the first block of a walk: its first segment starts at the
                    # path's own cell)
                    course = _course(block.h, block.w, block.h, block.w, slope)
                    filled, traced = self._fill_ahead(block, current, course)
                for nb in want:
                    if any(entry[:2] == nb for entry in ahead):
                        continue
                    nxt = self._block(region, points, *nb)
                    slot = self._free_slot(ahead, dropped, current)
                    course = _course(nxt.h, nxt.w, i - rc[nb[0]], j - cc[nb[1]], slope)
                    future = self._ahead_pool().submit(self._fill_ahead, nxt, slot, course)
                    ahead.append((*nb, nxt, slot, future))
                    pending.append(future)
                    self.ahead_filled += 1
                # (the blocks after it are filling by now)
                i, j, state, stopped = self.walk(block, filled, li, lj, state, traced)
                i, j = i + r0, j + c0
                if stopped:
                    return i, j, state, True
            return i, j, state, False
        finally:
            for future in pending:  # never a fill or trace still running after the traceback
                if future.cancel():  # not started (a local alignment stopped early)
                    continue
                if future.exception() is None:
                    for part in future.result()[1] or ():
                        part.exception()

    def _fill_ahead(self, block: _Region, slot: int, course=None):
        """Fill a block ahead of the path (on a device, into staging ``slot``), and start
        tracing it on CPU threads (:meth:`_trace_ahead`, ``Tiling.trace_ahead`` segments
        from cells along its diagonal, or along ``course`` when only a band around it was
        copied): ``(checkpoints, futures of those traces, in path order, or None)``."""
        filled = self.fill(block, True, False, False, True, slot, course)
        parts = int(self.tiling.trace_ahead) if self.ahead else 0
        if not parts or not filled.leaves:
            return filled, None
        i0, j0, i1, j1 = (block.h, block.w, 0, 0)
        if getattr(filled.fill, "row_spans", None) is not None:
            i0, j0, i1, j1 = course
        cuts = [
            (i1 + (i0 - i1) * k // parts, j1 + (j0 - j1) * k // parts) for k in range(parts, -1, -1)
        ]
        segments = []
        for (i, j), (i_stop, j_stop) in zip(cuts, cuts[1:], strict=False):
            if i > i_stop and j > j_stop:
                args = (block, filled, i, j, i_stop, j_stop)
                segments.append(self._trace_pool().submit(self._trace_ahead, *args))
        return filled, segments

    def _trace_ahead(self, block: _Region, points: _Checkpoints, i, j, i_stop, j_stop):
        """Trace a leaf-level block from cell (i, j) in state H until it enters a leaf past
        row ``i_stop`` or column ``j_stop``, recording the leaves the path enters. Paths
        from nearby cells soon meet, and from a cell and state on a path is determined: so
        the walk, once it knows where the path enters the block, traces only until it meets
        the first of these segments, takes its ops, traces on from its end until it meets
        the next one, and so on (the CPU traces a block in pieces, side by side).
        ``(record, n, ops, end, (i, j, state, stopped), (i_stop, j_stop))``."""
        rc, cc = points.row_cuts, points.col_cuts
        bounds = (i_stop, j_stop)
        ops = np.empty(i + j + 1, np.uint8)
        record = np.empty((len(rc) + len(cc), 4), np.int64)
        i, j, state, stopped, end, n, _ = self.cpu.trace_blocks_merge(
            block.r0,
            block.c0,
            rc,
            cc,
            block.top,
            block.left,
            points.fill.row_store,
            points.fill.col_store,
            i,
            j,
            STATE_H,
            ops,
            0,
            record,
            _NO_RECORD,
            0,
            i_stop,
            j_stop,
        )
        return record, n, ops, end, (i, j, state, stopped), bounds

    def _banding(self) -> bool:
        """Whether the traceback's device fills copy bands (``Tiling.staging_band``)."""
        return self.redevice is not None and self._bands_stores(self.redevice)

    def _bands_stores(self, filler) -> bool:
        return self.tiling.staging_band > 0 and getattr(filler, "spans_stores", False)

    def _slope(self, i: int, j: int) -> float:
        """Rows per column of the path's likely course at matrix cell ``(i, j)``: the slope
        it kept since the traceback began, once that is a few thousand cells long; before,
        the line to the matrix's start in global mode, else 45 degrees."""
        if self.path_start is None:
            self.path_start = (i, j)
        di, dj = self.path_start[0] - i, self.path_start[1] - j
        if di > 0 and dj > 0 and di + dj >= 4096:
            return di / dj
        return i / j if not self.local and not any(self.ends) else 1.0

    def _free_slot(self, ahead, dropped, current) -> int:
        """A staging slot that no block filled ahead, none still being filled or traced
        ahead and not the block traced now holds (``self.ahead + 1`` slots: there always is
        one, once the blocks the path passed by are done)."""

        def running(future) -> bool:
            if not future.done():
                return True
            traced = future.result()[1] if future.exception() is None else None
            return any(not part.done() for part in traced or ())

        while True:
            dropped[:] = [entry for entry in dropped if running(entry[1])]
            busy = {entry[3] for entry in ahead} | {slot for slot, _ in dropped} | {current}
            for slot in range(self.ahead + 1):
                if slot not in busy:
                    return slot
            future = dropped[0][1]  # wait for the oldest one passed by
            if future.exception() is None:
                for part in future.result()[1] or ():
                    part.exception()

    def _blocks_ahead(self, rc, cc, i: int, j: int):
        """The blocks (of cuts ``rc``, ``cc``) that a straight line from cell (i, j) towards
        the region's start crosses after the block of (i, j), except those it only cuts a
        corner of (less than a quarter of their height and width): where a path near the
        diagonal goes next. The line runs to (0, 0) in global mode, else at 45 degrees."""
        slope = i / j if not self.local and not any(self.ends) else 1.0  # rows per column
        bi, bj = bisect.bisect_left(rc, i) - 1, bisect.bisect_left(cc, j) - 1
        x, y, first = float(i), float(j), True
        while bi >= 0 and bj >= 0:
            r0, c0 = rc[bi], cc[bj]
            rows = min(x - r0, (y - c0) * slope)  # rows of the line in this block
            h, w = rc[bi + 1] - r0, cc[bj + 1] - c0
            if not first and (rows >= h / 4 or rows / slope >= w / 4):
                yield bi, bj
            first = False
            x, y = x - rows, y - rows / slope
            up, left = x <= r0 + 1e-9, y <= c0 + 1e-9
            bi, bj = bi - up, bj - left
            if not (up or left):  # pragma: no cover - the line always leaves by an edge
                return

    def _block(
        self, region: _Region, points: _Checkpoints, bi: int, bj: int, crop: bool = True
    ) -> _Region:
        """Block ``(bi, bj)`` of a filled region, with its boundaries (``crop=False``: its
        size only)."""
        rc, cc = points.row_cuts, points.col_cuts
        rows, cols = points.fill.row_store, points.fill.col_store
        r0, r1, c0, c1 = rc[bi], rc[bi + 1], cc[bj], cc[bj + 1]
        if not crop:
            return _Region(region.r0 + r0, region.c0 + c0, r1 - r0, c1 - c0, None, None)
        top = region.top[:, c0 : c1 + 1] if bi == 0 else rows[bi - 1, :, c0 : c1 + 1]
        left = region.left[:, r0 : r1 + 1] if bj == 0 else cols[bj - 1, :, r0 : r1 + 1]
        return _Region(
            region.r0 + r0,
            region.c0 + c0,
            r1 - r0,
            c1 - c0,
            np.ascontiguousarray(top),
            np.ascontiguousarray(left),
        )

    def _fills_ahead(self, block: _Region) -> bool:
        """Whether the walk fills ``block`` ahead of the path: a leaf-level fill on the
        device (a larger one would cost too much when the path misses it), whose filler
        keeps two fills' checkpoints apart, and no bands of several fillers."""
        if not self.ahead or self.redevice is None:
            return False
        if getattr(self.redevice, "stores_slots", 1) < self.ahead + 1:
            return False
        plan = self.plan
        if plan is not None and (len(plan.device_fillers) > 1 or plan.remote):
            return False
        device, *_, leaves = self.layout(block.h, block.w, True, recompute=True)
        return device is not None and leaves

    def _reserve_ahead(self, row_cuts, col_cuts):
        """What the forward pass of a traceback runs while the device fills: the walk's
        compiled traces loaded (:meth:`_warm_traces`), and page-locked host memory for the
        leaf-level checkpoints of the largest of its blocks in every slot that the walk's
        fills take turns in (pinning 2 x 366 MB took up to ~1.4 s on the H100 host, else
        paid by the traceback's first fills of each process), or None."""
        reserve = getattr(self.redevice, "reserve_stores", None)
        bh, bw = int(np.diff(row_cuts).max()), int(np.diff(col_cuts).max())
        if reserve is None or not self._fills_ahead(_Region(0, 0, bh, bw, None, None)):
            return None
        _, th, tw, kr, kc, _ = self.layout(bh, bw, True, recompute=True)
        nbytes = ((-(-bh // (th * kr)) - 1) * (bw + 1) + (-(-bw // (tw * kc)) - 1) * (bh + 1)) * 8
        if self._banding():  # a band of each block passes through: about this much of it
            nbytes = int(nbytes * min(1.0, 2.5 * self.tiling.staging_band + 0.05))

        def run():
            self._warm_traces()
            reserve(nbytes, range(self.ahead + 1))

        return run

    def _warm_traces(self) -> None:
        """Call the walk's compiled traces once on a one-cell region with the argument
        types the walk passes: a process's first traceback loads (or compiles) them while
        the device runs its forward pass, not while the walk waits for them."""
        store = self.lanes.store
        top, left = np.zeros((2, 2), store), np.zeros((2, 2), store)
        none = np.zeros((0, 2, 2), store)
        ops, cuts = np.empty(4, np.uint8), np.array([0, 1], np.int64)
        record = np.empty((2, 4), np.int64)
        self.cpu.trace_leaf(0, 0, top, left, 1, 1, STATE_H, ops, 0)
        self.cpu.trace_blocks(0, 0, cuts, cuts, top, left, none, none, 1, 1, STATE_H, ops, 0)
        args = (0, 0, cuts, cuts, top, left, none, none, 1, 1, STATE_H, ops, 0, record)
        self.cpu.trace_blocks_merge(*args, _NO_RECORD, 0, 0, 0)

    def _ahead_pool(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            # more than one block ahead: the others on queues of their own (a recomputed
            # block has too few tiles per tile diagonal to fill a GPU alone)
            on_stream = getattr(self.redevice, "on_stream", None)
            for k in range(1, self.ahead if on_stream is not None else 1):
                self.stream_devices.append(on_stream(k))
                self.streams.put(self.stream_devices[-1])
            self._pool = ThreadPoolExecutor(self.ahead, thread_name_prefix="dpalign-ahead")
        return self._pool

    def _trace_pool(self):
        if self._tracers is None:
            from concurrent.futures import ThreadPoolExecutor

            # the segments of the block traced now and of every block filled ahead at once
            workers = max(1, (self.ahead + 1) * int(self.tiling.trace_ahead))
            self._tracers = ThreadPoolExecutor(workers, thread_name_prefix="dpalign-trace")
        return self._tracers

    def close(self) -> None:
        """Stop the threads that fill and trace blocks ahead of the traceback, if any."""
        for pool in (self._pool, self._tracers):
            if pool is not None:
                pool.shutdown(wait=True)
        self._pool = self._tracers = None

    def finish(self, score: int, a_end: int, b_end: int, stop) -> PairwiseResult:
        """The result, from where the traceback stopped: free end gaps left out, penalised
        ones (the path runs along row 0 or column 0, always in state H there) added."""
        if self.local and score == 0:
            return PairwiseResult(0, 0, 0, 0, 0, "")
        i, j, _, stopped = stop
        if not stopped and not self.local:
            a_lead, _, b_lead, _ = self.ends
            if i == 0 and j > 0 and not a_lead:
                self.ops[self.pos : self.pos + j] = OP_INS
                self.pos, j = self.pos + j, 0
            elif j == 0 and i > 0 and not b_lead:
                self.ops[self.pos : self.pos + i] = OP_DEL
                self.pos, i = self.pos + i, 0
        ops = self.ops[: self.pos][::-1].tobytes().decode("ascii")
        return PairwiseResult(score, i, a_end, j, b_end, ops)


_SWITCH_LOCK = threading.Lock()
_SWITCH_USERS = [0, None]  # walks in the process that shortened it, the interval before


@contextmanager
def _switch_interval(seconds: float | None):
    """``sys.setswitchinterval(seconds)`` while the block runs (the first of concurrent
    walks sets it, the last restores the one before)."""
    if seconds is None:
        yield
        return
    with _SWITCH_LOCK:
        if _SWITCH_USERS[0] == 0:
            _SWITCH_USERS[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(seconds, _SWITCH_USERS[1]))
        _SWITCH_USERS[0] += 1
    try:
        yield
    finally:
        with _SWITCH_LOCK:
            _SWITCH_USERS[0] -= 1
            if _SWITCH_USERS[0] == 0:
                sys.setswitchinterval(_SWITCH_USERS[1])


def _crop(region: _Region, i: int, j: int) -> _Region:
    """Rows ``0 .. i`` and columns ``0 .. j`` of a region (the path only moves up and left)."""
    return _Region(
        region.r0,
        region.c0,
        i,
        j,
        np.ascontiguousarray(region.top[:, : j + 1]),
        np.ascontiguousarray(region.left[:, : i + 1]),
    )


def _end_cell(last_row, last_col, best, local, ends) -> tuple[int, int, int]:
    """Score and end cell: the first maximum in row-major order among the mode's candidates.

    ``last_row`` is H of row m (columns 0..n), ``last_col`` H of column n (rows 0..m), ``best``
    the local mode's first maximum ``(H, i, j)``.
    """
    if local:
        return tuple(int(x) for x in best)
    m, n = len(last_col) - 1, len(last_row) - 1
    _, a_trail, _, b_trail = ends
    # row-major order: (i, n) for i < m, then (m, j) for j = 0..n
    values = [last_col[:m]] if b_trail else []
    values.append(last_row if a_trail else last_row[n:])
    values = np.concatenate(values).astype(np.int64)
    k = int(np.argmax(values))
    score = int(values[k])
    if b_trail and k < m:
        return score, k, n
    k -= m if b_trail else 0
    return score, m, (k if a_trail else n)


def align_long(
    a_codes,
    b_codes,
    scoring: Scoring,
    mode: str = "global",
    free_ends=None,
    *,
    traceback: bool = True,
    threads: int | None = None,
    tiling: Tiling | None = None,
    backend="cpu",
    device: str | None = None,
    stats=None,
    progress=None,
    bands=None,
    prune: bool = False,
) -> PairwiseResult:
    """Align one long pair on all CPU cores (or an OpenCL device); identical to
    :func:`reference.pairwise_align`.

    Parameters
    ----------
    a_codes, b_codes : ndarray or str
        The sequences (``a`` down the rows, ``b`` across); codes from ``scoring.encode`` or
        anything it accepts.
    scoring : Scoring
        Substitution scores and gap costs (a gap of length k costs ``o + e*k``).
    mode : {"global", "local", "semiglobal"}
    free_ends : bool, 2-tuple or 4-tuple, optional
        Global mode only (scikit-bio's meaning; see :func:`dpalign.scoring.free_ends_tuple`).
    traceback : bool
        False: score and end cell only (``PairwiseResult`` with start = end, ``ops=None``).
    threads : int, optional
        Worker threads (default: ``config.cpu_threads()``).
    tiling : Tiling, optional
        Tile and checkpoint sizes (tests force tiny ones).
    backend : "cpu", or a backend (name or instance)
        ``"cpu"``: every region on the CPU cores. A backend with a device region filler
        (``"opencl"``): the forward pass and the large recomputations on its device
        (anti-diagonal tiles), the rest on the CPU; pairs whose scores need more than 32 bits
        stay on the CPU. Other backends fill on the CPU.
    device : str, optional
        Device spec for a device backend (OpenCL: see ``dpalign devices``).
    stats : dpalign.gcups.RunStats, optional
        Receives the device's cells and kernel seconds.
    progress : callable, optional
        Called with the cells of each piece filled (forward pass in row chunks, then the
        traceback's recomputations; about :func:`expected_cells` in all).
    bands : dpalign.bands.Bands, optional
        Column bands across several fillers for the large regions (CPU fillers, every device
        of ``bands.devices``, which then replace ``backend``, or the workers of a Dask
        cluster); the same result.
        Receives the device's cells and kernel seconds (and a note of the cells pruned).
    prune : bool
        Local mode on a device: block pruning in the forward pass (CUDAlign's: tiles whose
        best possible score cannot reach the best found so far are skipped). The result is
        identical; how much is skipped depends on the pair (similar pairs: most of the
        matrix away from the alignment). Ignored on the CPU.

    Returns
    -------
    PairwiseResult
        Score, 0-based half-open coordinates and ops, with the reference's tie rules.
    """
    a, b, ends = _validate(a_codes, b_codes, scoring, mode, free_ends)
    if isinstance(backend, str) and backend != "cpu" and backend not in engine.backend_names():
        raise OptionError(
            f"backend must be 'cpu' or a backend ({', '.join(engine.backend_names())}), "
            f"not {backend!r}"
        )
    problem = scoring.kernel_problem()
    if problem is not None:
        raise OptionError(
            f"{problem} is computed by the reference backend only, not by the long-pair "
            "kernels (they take one gap cost with o >= 0)"
        )
    threads = config.cpu_threads(threads)
    tiling = tiling or Tiling()
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return _gaps_only(a, b, scoring, mode, ends, traceback)
    if prune and mode != "local":
        raise OptionError("block pruning (prune=True) is for local alignments")
    lanes = plan_lanes(scoring, m, n, mode, tiling)
    pair, others = None, []
    runners = list(bands.devices) if bands is not None and bands.devices else [backend]
    halves = False
    if not traceback and bands is not None and bands.halves:
        from .bands import halves_apply

        halves = halves_apply(mode, ends, m, n) and (len(runners) > 1 or bands.cpu > 1)
    if bands is not None and bands.cluster_device is not None and lanes.store is np.int32:
        from .bands import dask_fillers  # every worker's device, one band each

        name, options = bands.cluster_device
        held = (a, b, scoring, mode == "local", lanes.neg_store, tiling.device_tile)
        others = dask_fillers(bands.cluster, None, (name, options, held))
        pair = others[0]
    elif runners[0] != "cpu" and lanes.store is np.int32:
        from .bands import hold_devices

        runners = [engine.get_backend(r, threads=threads, device=device) for r in runners]
        local = mode == "local"
        args = (a, b, scoring, local, lanes.neg_store, tiling.device_tile)
        devices = [r for r in runners if getattr(r, "kind", None) == "device"]
        if halves and len(devices) == 1:  # one device fills the whole pair, not half of it
            halves = False
        if halves:  # two devices hold a half each, in the half's own thread (none: CPU)
            others = devices
        else:
            others = hold_devices(runners, *args, processes=bands.processes if bands else False)
        pair = others[0] if others and not halves else None
    if prune and getattr(pair, "prunes", False) and m * n >= tiling.device_cells:
        # Pruned tiles leave lower bounds (H = 0), and so does every value computed from
        # them, on every level of the traceback: exact on the optimal paths only. 16-bit
        # lanes hold values relative to each CPU tile's corner H, assumed near every value
        # of the tile; a corner lowered by pruning (0, beside a path at 83,000 in a 100 kb
        # pair) clamped the path's values, and the traceback walked through garbage.
        # Absolute lanes take lower bounds as they come (the CPU's recomputations only: the
        # forward pass is the device's).
        lanes = lanes.absolute()
    job = _Aligner(a, b, scoring, mode, ends, tiling, threads, lanes, pair)
    if bands is not None or progress is not None:
        job.plan = _plan(job, bands, progress, others)
    if halves:
        from .bands import halves_fillers, halves_score

        devices = others  # the device backends (not yet holding the pair), or none
        top, bottom = halves_fillers(job, bands, devices, scoring, tiling.device_tile)
        score, used = halves_score(job, top, bottom, threads if others else max(1, threads // 2),
                                   progress)  # fmt: skip
        for k, held in enumerate(used if stats is not None and others else ()):
            stats.record(f"{held.label} #{k}", held.cells, held.kernel_seconds)
        return PairwiseResult(score, m, m, n, n)
    region = job.global_region()
    points = job.fill(region, keep=traceback, final_col=not job.local, prune=prune)
    score, a_end, b_end = job.end_cell(points)
    if not traceback:
        result = PairwiseResult(score, a_end, a_end, b_end, b_end)
    else:
        try:
            with _switch_interval(tiling.switch_interval if job.ahead else None):
                stop = job.walk(region, points, a_end, b_end, STATE_H)
        finally:
            job.close()
        result = job.finish(score, a_end, b_end, stop)
        label = getattr(pair, "label", "cpu") if pair is not None else "cpu"
        check_path(result, a, b, scoring, f"{mode} mode, {label}{', pruned' if prune else ''}")
    if pair is not None and stats is not None:
        stats.record(pair.label, pair.cells, pair.kernel_seconds)
        for held in job.stream_devices:  # the traceback's fills, on one queue or more
            if held is not pair:
                stats.record(pair.label, held.cells, held.kernel_seconds, blocks=0)
        if prune:
            stats.notes.append(f"block pruning skipped about {pair.pruned_cells} cells")
        if traceback:
            stats.notes.append(
                f"traceback: {job.ahead_filled} blocks filled ahead, {job.ahead_used} traced, "
                f"{job.merged} met the trace ahead, {job.band_misses} band misses; "
                "the walk's thread: " + ", ".join(f"{k} {v:.3f} s" for k, v in job.seconds.items())
            )
    for k, held in enumerate(others[1:] if stats is not None else [], 1):  # bands' devices
        stats.record(f"{held.label} #{k}", held.cells, held.kernel_seconds)
    return result


def _course(h: int, w: int, i: int, j: int, slope: float | None):
    """Where a line through cell ``(i, j)`` (of a block of ``h x w`` cells; the cell may lie
    outside it) with ``slope`` rows per column enters the block (its bottom or right edge)
    and leaves it (top or left): ``(i0, j0, i1, j1)``; the block's diagonal if the line
    misses it; None without a slope."""
    if slope is None:
        return None
    slope = max(slope, 1e-9)
    c_in, c_out = min(w, j + (h - i) / slope), max(0.0, j - i / slope)
    if c_out >= c_in:
        return h, w, 0, 0
    r_in, r_out = i - (j - c_in) * slope, i - (j - c_out) * slope
    i0, j0 = min(h, max(0, round(r_in))), min(w, max(0, round(c_in)))
    i1, j1 = min(h, max(0, round(r_out))), min(w, max(0, round(c_out)))
    return (i0, j0, i1, j1) if (i0, j0) != (i1, j1) else (h, w, 0, 0)


def _band_spans(rc, cc, course, fraction: float):
    """The parts of a leaf-level fill's checkpoints (cuts ``rc``, ``cc``) that a path near
    ``course`` (``(i0, j0, i1, j1)``, see :func:`_course`) reads: per kept row (the top of
    the next leaf row), columns ``lo .. hi``; per kept column, rows; whole leaves within
    ``fraction`` of the region's larger side (at least two leaves) of the line."""
    rc, cc = np.asarray(rc, np.int64), np.asarray(cc, np.int64)
    i0, j0, i1, j1 = course
    margin = max(2 * int(np.diff(rc).max()), 2 * int(np.diff(cc).max()))
    margin = max(margin, fraction * max(int(rc[-1]), int(cc[-1])))

    def leaves(cuts, lo, hi):  # whole leaves (cuts[t] .. cuts[t+1]) over lo .. hi
        last = len(cuts) - 2
        t_lo = np.clip(np.searchsorted(cuts, lo, "left") - 1, 0, last)
        t_hi = np.maximum(np.clip(np.searchsorted(cuts, hi, "left") - 1, 0, last), t_lo)
        return np.stack([cuts[t_lo], cuts[t_hi + 1]], axis=1)

    def along(x, x0, x1, y0, y1):  # the line's other coordinate at x (clamped to its ends)
        if x0 == x1:
            return np.full(len(x), min(y0, y1)), np.full(len(x), max(y0, y1))
        (x0, y0), (x1, y1) = sorted([(x0, y0), (x1, y1)])
        y = np.interp(x, [x0, x1], [y0, y1])
        return y, y

    lo_a, hi_a = along(rc[1:-1], i0, i1, j0, j1)
    lo_b, hi_b = along(rc[2:], i0, i1, j0, j1)
    rows = leaves(cc, np.minimum(lo_a, lo_b) - margin, np.maximum(hi_a, hi_b) + margin)
    lo_a, hi_a = along(cc[1:-1], j0, j1, i0, i1)
    lo_b, hi_b = along(cc[2:], j0, j1, i0, i1)
    cols = leaves(rc, np.minimum(lo_a, lo_b) - margin, np.maximum(hi_a, hi_b) + margin)
    return rows, cols


def _outside_spans(ops, i0: int, j0: int, rc, cc, row_spans, col_spans) -> bool:
    """Whether the path traced through a leaf-level region from cell ``(i0, j0)`` (``ops``,
    in the order traced) recomputed a leaf whose boundaries were not all copied (spans of
    :func:`_band_spans`, or wider)."""
    rc, cc = np.asarray(rc, np.int64), np.asarray(cc, np.int64)
    ops = np.asarray(ops)
    # the cell before each op, and the last: rows and columns never grow along the path
    ii, jj = np.empty(len(ops) + 1, np.int64), np.empty(len(ops) + 1, np.int64)
    ii[0], jj[0] = 0, 0
    np.cumsum(ops != OP_INS, out=ii[1:])
    np.cumsum(ops != OP_DEL, out=jj[1:])
    # where the path enters a leaf: its first cell, or one past a row or column cut (the
    # cuts' cells belong to the leaves before them); O(ops) once, the rest per leaf
    starts = np.concatenate(
        (
            [0],
            np.searchsorted(ii, i0 - rc[1:-1], "left"),
            np.searchsorted(jj, j0 - cc[1:-1], "left"),
        )
    )
    starts = np.unique(starts[starts < len(ii)])
    ci, cj = i0 - ii[starts], j0 - jj[starts]
    inner = (ci > 0) & (cj > 0)  # the cells whose leaves were recomputed
    ti = np.searchsorted(rc, ci[inner], "left") - 1
    tj = np.searchsorted(cc, cj[inner], "left") - 1
    top, left = ti > 0, tj > 0
    spans = row_spans[ti[top] - 1]  # each leaf's top: the kept row above it
    ok = (spans[:, 0] <= cc[tj[top]]) & (cc[tj[top] + 1] <= spans[:, 1])
    if not ok.all():
        return True
    spans = col_spans[tj[left] - 1]
    ok = (spans[:, 0] <= rc[ti[left]]) & (rc[ti[left] + 1] <= spans[:, 1])
    return not ok.all()


def path_score(ops: np.ndarray, a, b, a_start: int, b_start: int, matrix, o: int, e: int):
    """Re-score a traced path against the sequences, in O(len(ops)) vectorised steps.

    Parameters
    ----------
    ops : ndarray uint8
        The path's ops in order (``=``, ``X``, ``D``: ``a`` advances, ``I``: ``b`` advances).
    a, b : ndarray
        Residue codes of the whole sequences; the path starts at ``a[a_start]``,
        ``b[b_start]``.
    matrix : ndarray (K, K)
    o, e : int
        A gap of k columns (a run of ``D`` or of ``I``) costs ``o + e*k`` (``o >= 0``: the
        kernels never split a gap, so a run is one gap).

    Returns
    -------
    (score, a_end, b_end, letters_ok) : (int or None, int, int, bool)
        The path's score and end, and whether every ``=``/``X`` says truly whether the two
        residues are equal; ``score`` is None when the path runs past either sequence.
    """
    score, i, j, prev, letters_ok = 0, a_start, b_start, -1, True
    for lo in range(0, len(ops), CHECK_CHUNK):
        part = ops[lo : lo + CHECK_CHUNK]
        del_a, ins_b = part == OP_DEL, part == OP_INS
        ia = i - 1 + np.cumsum(~ins_b, dtype=np.int64)  # a's residue at each column
        jb = j - 1 + np.cumsum(~del_a, dtype=np.int64)
        if ia[-1] >= len(a) or jb[-1] >= len(b):
            return None, int(ia[-1]) + 1, int(jb[-1]) + 1, letters_ok
        sub = ~(del_a | ins_b)
        ra, rb = a[ia[sub]], b[jb[sub]]
        score += int(np.asarray(matrix)[ra, rb].sum(dtype=np.int64))
        letters_ok &= bool(np.array_equal(part[sub] == OP_MATCH, ra == rb))
        gaps = ~sub
        opens = gaps.copy()
        opens[1:] &= part[1:] != part[:-1]
        opens[0] &= int(part[0]) != prev
        score -= o * int(np.count_nonzero(opens)) + e * int(np.count_nonzero(gaps))
        i, j, prev = int(ia[-1]) + 1, int(jb[-1]) + 1, int(part[-1])
    return score, i, j, letters_ok


def check_path(result: PairwiseResult, a, b, scoring: Scoring, what: str) -> None:
    """Raise :class:`~dpalign.errors.InternalError` unless ``result``'s ops, re-scored
    against the sequences (:func:`path_score`), give its score and span exactly its
    coordinates: a kernel or traceback bug is reported, never written as an alignment."""
    ops = np.frombuffer((result.ops or "").encode("ascii"), np.uint8)
    got, i, j, letters_ok = path_score(
        ops,
        a,
        b,
        result.a_start,
        result.b_start,
        scoring.matrix,
        scoring.gap_open,
        scoring.gap_extend,
    )
    problems = []
    if got is None:
        problems.append("runs past the end of a sequence")
    elif got != result.score:
        problems.append(f"scores {got} against the sequences, not its reported {result.score}")
    if got is not None and (i, j) != (result.a_end, result.b_end):
        problems.append(f"ends at ({i}, {j}), not at its reported ({result.a_end}, {result.b_end})")
    if not letters_ok:
        problems.append("marks a pair of residues = or X wrongly")
    if not problems:
        return
    raise InternalError(
        f"internal error: the traced alignment of a pair of {len(a):,} x {len(b):,} residues "
        f"({what}) {' and '.join(problems)}; it was not written; please report this"
    )


def _plan(job: _Aligner, bands, progress, device_fillers):
    from .bands import Plan, dask_fillers

    remote = []
    if bands is not None and bands.cluster is not None and bands.cluster_device is None:
        args = (job.a, job.b, job.matrix, job.o, job.e, job.local)
        args += (job.lanes.neg, job.lanes.neg_store, job.lanes.relative)
        remote = dask_fillers(bands.cluster, args)
    return Plan(bands, progress, device_fillers, remote)


def expected_cells(m: int, n: int, traceback: bool, tiling: Tiling | None = None) -> int:
    """About the cells :func:`align_long` fills for an ``m x n`` pair (a progress bar's total):
    the forward pass, and with traceback the recomputation of about two blocks per block
    row and column on the way back, at each level."""
    blocks = (tiling or Tiling()).blocks
    return int(m * n * (1 + (2 / blocks + 2 / blocks**2) if traceback else 1))


def warm_up(scoring: Scoring, mode: str, part: str, size: int) -> None:
    """Load the CPU kernels that a long pair of ``size`` x ``size`` takes with this scoring
    (compiling them into Numba's cache the first time), one half of them at a time so that
    two processes can compile the halves side by side: ``part`` "fill" aligns such a pair
    without traceback (the tile fill, ``fill_worker``); "trace" calls the traceback's block
    loop (``trace_blocks``, and the leaf kernels it calls) on an empty path, with the
    argument types a traceback passes it, filling nothing."""
    if part not in ("fill", "trace"):
        raise OptionError(f"part must be 'fill' or 'trace', not {part!r}")
    codes = np.zeros(size, np.uint8)
    if part == "fill":
        align_long(codes, codes, scoring, mode, traceback=False, threads=1)
        return
    a, b, ends = _validate(codes, codes, scoring, mode, None)
    lanes = plan_lanes(scoring, size, size, mode)
    job = _Aligner(a, b, scoring, mode, ends, Tiling(), 1, lanes)
    region = job.global_region()
    none = np.empty((0, 2, 1), region.top.dtype)  # as a fill's row and column stores
    job.cpu.trace_blocks(
        0, 0, (0, size), (0, size), region.top, region.left, none, none, 0, 0, STATE_H, job.ops, 0
    )


def align_full(a_codes, b_codes, scoring: Scoring, mode: str = "global", free_ends=None):
    """Plain full-matrix alignment: one scalar Numba fill keeping a direction byte per cell.

    The short-pair baseline that :func:`align_long` is measured against (``LONG_PAIR_CELLS``
    in :mod:`dpalign.config`); one thread, (m+1)(n+1) bytes of memory. Same arguments and
    result as :func:`align_long` with ``traceback=True``.
    """
    a, b, ends = _validate(a_codes, b_codes, scoring, mode, free_ends)
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return _gaps_only(a, b, scoring, mode, ends, True)
    lanes = Lanes(np.int64, np.int64, -(2**62), -(2**62))
    job = _Aligner(a, b, scoring, mode, ends, Tiling(), 1, lanes)
    region = job.global_region()
    bits = np.empty((m + 1, n + 1), np.uint8)
    last_col = np.empty(m + 1, np.int64)
    last_row, *best = job.cpu.fill_bits(region.top, region.left, bits, last_col)
    score, a_end, b_end = _end_cell(last_row, last_col, best, job.local, ends)
    i, j, state, stopped, job.pos = job.cpu.trace_bits(bits, a_end, b_end, STATE_H, job.ops, 0)
    return job.finish(score, a_end, b_end, (i, j, state, stopped))


def _validate(a_codes, b_codes, scoring, mode, free_ends):
    if not isinstance(scoring, Scoring):
        raise OptionError(f"scoring must be a dpalign Scoring, not {type(scoring).__name__}")
    ends = free_ends_tuple(mode, free_ends)
    a = np.ascontiguousarray(scoring.encode(a_codes, "a"))
    b = np.ascontiguousarray(scoring.encode(b_codes, "b"))
    return a, b, ends


def _gaps_only(a, b, scoring, mode, ends, traceback):
    """An empty sequence aligns to gaps only: the reference is O(m + n) here."""
    args = (a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode, ends)
    return reference.pairwise_align(*args) if traceback else reference.pairwise_score(*args)
