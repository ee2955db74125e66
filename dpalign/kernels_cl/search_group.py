"""Host side of the thread-group search kernel (``search_group.cl``): every mode, 16 bits.

Two targets per group of G work-items, each work-item R target columns in registers, the query
streamed as DP rows, substitution scores from a pair table in local memory (see the kernel's
header). :class:`GroupSearch` holds one database on one device:

* targets are dealt to buckets by length, each bucket one (G, R, passes) shape whose width
  G * R covers its targets in ``passes`` passes with little padding (:func:`plan_buckets`:
  least estimated cost, the "mid" set of shapes measured on the H100);
* per bucket, the targets in length order are paired (two per group) and stored as uint16
  byte offsets of their column letter pairs in the pair table, ``(a * L + b) * 4``, with
  ``a``, ``b`` compact target letters (the letters the database uses, plus a padding letter);
* per query, the pair table (query letters x L * L, plus a virtual row of -1000 scores for
  the wavefront's fill and drain rows) and each query row's table offset are uploaded, the
  buckets launched (spread over ``queues`` command queues), and the raw 16-bit best scores
  read back. Pairs at or above :func:`flag_limit` are flagged for int32 recomputation.

Measured on the H100 (BENCHMARKS.md): ~3,600 GCUPS (kernel span) for a 375-residue query
against 200,000 proteins, against 1,400 for the strip kernel in local mode.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from .. import config
from ..errors import DpalignError
from .context import DeviceContext, driver_errors, wait
from .programs import build

log = logging.getLogger("dpalign.opencl")

#: Score of the padding letter and of the virtual query row: low enough that padding never
#: raises a best score, high enough that nothing wraps in 16 bits.
PAD_SCORE = -1000
#: Work-items per work-group and the most work-groups per compute unit (the groups loop over
#: pairs beyond that).
WG = 128
GROUPS_PER_CU = 16
#: Single-pass shapes (G, R) ("mid" in the H100 probe: 15 shapes; finer sets paid more in
#: small launches than they saved in padding), and the shapes that may take several passes
#: (targets longer than their G * R).
SHAPES = (
    (4, 16), (8, 12), (8, 16), (8, 20), (8, 24), (8, 28), (8, 32),
    (16, 20), (16, 24), (16, 28), (16, 32), (32, 20), (32, 24), (32, 28), (32, 32),
)  # fmt: skip
MULTI_SHAPES = ((16, 32), (32, 32))
#: The fewest targets of a multi-pass bucket of the narrower multi-pass shapes (see
#: :func:`plan_buckets`).
MIN_MULTI_TARGETS = 8192
#: Per-step work of a work-item besides its R cells, in cells (the bucket cost model).
STEP_OVERHEAD = 3.0
#: Command queues the buckets are spread over: small, latency-bound buckets then overlap the
#: big ones. H100, 375-aa query against 200,000 proteins, best / median of five: 1 queue
#: 3,089 / 3,087 GCUPS, 2 queues 3,439 / 3,436, 4 queues 3,527 / 3,523, 8 queues 3,593 / 3,583.
QUEUES = 8
#: Query lengths the bucket plans are made for: a query takes the plan of the first length
#: at least its own (the last for longer ones). The plan depends on the query only through
#: the wavefront's fill (G - 1 steps against m rows), so three plans serve every length:
#: each plan's buckets are laid out and uploaded once (~1 s of NumPy for 200,000 proteins),
#: and queries of one plan share a launch.
PLAN_LENGTHS = (128, 256, 1024)
#: Queries per launch at most (dimension 1 of the range): 32 UniProt-like proteins against
#: 200,000 take ~0.2 s of an H100, so the host's share of a batch (tables, one copy back,
#: the scores) runs while the next batch computes.
BATCH = 32


#: How :meth:`GroupSearch.submit` hands a batch to the device
#: (:data:`dpalign.config.OPENCL_SEARCH_SUBMIT`): "v0" new input buffers per batch (made from
#: host memory), the pass-column buffer grown launch by launch, the results in one copy on the
#: copy queue behind every launch; "carry" the same with the pass-column buffer sized once per
#: batch; "slots" also each slot's input buffers kept and written by non-blocking copies from
#: page-locked memory, the results into page-locked memory, every buffer made and first used
#: before the search's first launch (:meth:`GroupSearch.reserve`); "rect" (default) also each
#: launch's results read back on its own queue behind it. NVIDIA's driver gives a buffer its
#: memory at the first command that uses it and waits there until the device is idle: in v0
#: every batch's first launch waited for the batch before (H100, 1,000 x 200,000 global,
#: ``bench/search_submit_probe.py``: launches 4.7 s of 7.2 s of submits, the device idle 1.07
#: s of its 7.28 s; "rect" with layouts copied: 0.22 s of 6.41).
SUBMIT_MODES = ("v0", "carry", "slots", "rect")


class _Marks:
    """Host timestamps of one submit's steps (diagnostics: :attr:`GroupSearch.trace`)."""

    def __init__(self) -> None:
        self.marks: list = []

    def __call__(self, label: str) -> None:
        self.marks.append((label, time.perf_counter()))

    def done(self, order, slot: int) -> dict:
        buckets = [(b.G, b.R, b.passes, b.npairs) for b, _ in order]
        return {"marks": self.marks, "buckets": buckets, "slot": slot}


def _no_mark(label: str) -> None:
    return None


def _profile(event) -> tuple | None:
    """An event's (queued, submit, start, end) in device nanoseconds, or None (a queue
    without profiling)."""
    try:
        p = event.profile
        return (p.queued, p.submit, p.start, p.end)
    except Exception:  # noqa: BLE001 - PROFILING_INFO_NOT_AVAILABLE and the like
        return None


@dataclass
class Bucket:
    """Targets (indices, longest first, paired consecutively) of one kernel shape."""

    G: int
    R: int
    passes: int
    targets: np.ndarray

    @property
    def W(self) -> int:
        return self.G * self.R

    @property
    def npairs(self) -> int:
        return -(-len(self.targets) // 2)


@dataclass
class Lanes:
    """One plan's buckets and where their lanes lie in a query's row of results."""

    buckets: list[Bucket]
    bases: list[int]  # each bucket's first lane (two per pair)
    n_lanes: int
    lane_of: np.ndarray  # every target's lane (empty targets: 0, overwritten by the host)


@dataclass
class GroupBatch:
    """A batch's raw 16-bit results: ``values[query, target]`` (local mode ``[..., 1]``: the
    best; global modes ``[..., 4]`` in the strip kernel's order), ``flagged`` (may have
    wrapped: recompute in int32), which targets are ``real`` (non-empty), kernel
    ``seconds`` (first start to last end) and ``launches``."""

    values: np.ndarray
    flagged: np.ndarray
    real: np.ndarray
    seconds: float
    launches: int

    def results(self, k: int) -> np.ndarray:
        """Query ``k``'s results in the one-query form ``[targets, 4]`` int64 (empty targets
        zero)."""
        out = np.zeros((self.values.shape[1], 4), np.int64)
        if self.values.shape[2] == 4:
            out[:] = self.values[k]
        else:
            out[:, 3] = self.values[k, :, 0]
        out[~self.real] = 0
        return out


def plan_buckets(
    lengths: np.ndarray, m: int, shapes=None, multi=None, index: LengthIndex | None = None
) -> list[Bucket]:
    """Deal targets of ``lengths`` (all > 0) to the shape of least estimated cost for a query
    of length ``m``: padded cells, the wavefront's fill (G - 1 steps per pass) and a per-step
    overhead of :data:`STEP_OVERHEAD` cells per work-item. Only the ``multi`` shapes (default
    :data:`MULTI_SHAPES`) take several passes; ``shapes`` defaults to :data:`SHAPES`.

    A multi-pass bucket of any but the widest multi-pass shape needs at least
    :data:`MIN_MULTI_TARGETS` targets, else its targets go to wider shapes (fewer passes): a
    small many-pass launch is one long dependency chain that the rest of the search waits
    for (H100: 16 x 32 in up to 6 passes for the longest of 200,000 proteins cost 16% of the
    search; for 100,000 DNA targets of ~900 nt, 50,000 of them in 2-3 passes of 16 x 32
    gained 20% over 32 x 32).

    ``index`` (:class:`LengthIndex` of ``lengths``): the sorts that do not depend on ``m``,
    made once for every plan of one database."""
    shapes = SHAPES if shapes is None else shapes
    multi = MULTI_SHAPES if multi is None else multi
    widest = max(multi, key=lambda gr: gr[0] * gr[1])
    forbidden: set[tuple[int, int, int]] = set()
    if index is None:
        index = LengthIndex(lengths)
    while True:
        buckets = _plan(index, m, shapes, multi, forbidden)
        small = {
            (b.G, b.R, b.passes)
            for b in buckets
            if b.passes > 1 and (b.G, b.R) != widest and len(b.targets) < MIN_MULTI_TARGETS
        }
        if not small:
            return buckets
        forbidden |= small


class LengthIndex:
    """Target lengths sorted once for :func:`plan_buckets` (its plans differ per query length
    only in which shape each distinct length takes): the distinct lengths, the targets longest
    first (ties in index order), and each of those targets' distinct length.

    Sorted by radix (NumPy's stable sort of 8- and 16-bit integers) where the values fit:
    ~0.025 s a plan for 200,000 proteins against 0.08 s with the int64 sorts."""

    def __init__(self, lengths: np.ndarray) -> None:
        n = np.asarray(lengths, np.int64)
        if n.size and 0 <= int(n.min()) and int(n.max()) < 1 << 24:
            present = np.bincount(n)  # distinct lengths and each one's rank, in O(n)
            self.lengths = np.flatnonzero(present)
            rank = np.cumsum(present > 0) - 1
            inverse = rank[n]
        else:
            self.lengths, inverse = np.unique(n, return_inverse=True)
            inverse = inverse.reshape(-1)
        # longest first, ties in index order: a stable sort of the ranks, descending
        self.order = np.argsort(_narrow(len(self.lengths) - 1 - inverse), kind="stable")
        self.inverse = inverse[self.order]  # distinct-length rank of each target in order


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in the narrowest of int16 / int32 / int64 that holds them (NumPy
    sorts 16-bit integers stably by radix)."""
    top = int(values.max(initial=0))
    for dtype in (np.int16, np.int32):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values


def _plan(index: LengthIndex, m, shapes, multi, forbidden) -> list[Bucket]:
    # The choice depends on the length alone: made once per distinct length (a few
    # thousand for 200,000 proteins), then each bucket's targets taken from the targets in
    # length order, grouped by (shape, passes) with one stable sort.
    options = list(dict.fromkeys([*shapes, *multi]))
    lengths = index.lengths
    best = np.full(len(lengths), np.inf)
    choice = np.zeros(len(lengths), np.int64)
    npass = np.ones(len(lengths), np.int64)
    for k, (g, r) in enumerate(options):
        w = g * r
        passes = np.maximum(1, -(-lengths // w))
        cost = passes * w * (m + g - 1) * (1 + STEP_OVERHEAD / r)
        if (g, r) not in multi:
            cost = np.where(passes == 1, cost, np.inf)
        for fg, fr, fp in forbidden:
            if (fg, fr) == (g, r):
                cost = np.where(passes == fp, np.inf, cost)
        better = cost < best
        best[better] = cost[better]
        choice[better] = k
        npass[better] = passes[better]
    span = int(npass.max(initial=1)) + 1
    key = (choice * span + npass)[index.inverse]
    grouped = np.argsort(_narrow(key), kind="stable")
    order, key = index.order[grouped], key[grouped]
    cuts = np.flatnonzero(np.diff(key)) + 1
    buckets = []
    for picked, first in zip(np.split(order, cuts), np.split(key, cuts), strict=True):
        if len(picked):
            k, p = divmod(int(first[0]), span)
            g, r = options[k]
            buckets.append(Bucket(g, r, p, picked))
    return buckets


def group_defines(G: int, R: int, multi: bool, glob: bool, ptx: bool, nobest: bool = False) -> dict:
    """The ``-D`` constants of one shape's program (nothing of the query or the targets;
    ``nobest``: global modes without the best H, see :func:`keeps_best`)."""
    return {
        "G": G,
        "R": R,
        "WG": WG,
        "USE_PTX": int(ptx),
        "MULTI": int(multi),
        "GLOBAL_MODE": int(glob),
        "NO_BEST": int(glob and nobest),
    }


#: The query length global-mode programs are built for before the queries are known (the
#: warm-up): scorings whose best score cannot reach :func:`flag_limit` at this length take
#: the programs without the best H (:func:`keeps_best`).
WARM_QUERY_LENGTH = 1024


def keeps_best(glob: bool, scoring, m: int) -> bool:
    """Whether launches of queries of up to ``m`` residues keep every target's best H.

    Local mode: always (it is the score). Global modes keep it only to flag pairs that may
    have wrapped past 16 bits; where no H can come near :func:`flag_limit` (every H is at
    most ``max(s) * m``: a path gains only on its diagonal steps, at most ``m`` of them, with
    gap costs >= 0 and borders <= 0), the kernel does without it (``NO_BEST``: half a
    three-input max per cell less)."""
    if not glob:
        return True
    smax = max(int(scoring.matrix.max(initial=0)), 0)
    gaps_cost = scoring.gap_open >= 0 and scoring.gap_extend >= 0
    return not (gaps_cost and smax * m < flag_limit(scoring.matrix))


def every_shape_defines(glob: bool, ptx: bool, nobest: bool = False) -> list[dict]:
    """The ``-D`` constants of every program a search in this mode may take (each of
    :data:`SHAPES`, each of :data:`MULTI_SHAPES` in several passes)."""
    shapes = sorted({*((g, r, False) for g, r in SHAPES), *((g, r, True) for g, r in MULTI_SHAPES)})
    return [group_defines(g, r, multi, glob, ptx, nobest) for g, r, multi in shapes]


def build_every_shape(
    dctx: DeviceContext, glob: bool, ptx: bool, threads: int, nobest: bool = False
) -> int:
    """Build every program a search in this mode may take (:func:`every_shape_defines`),
    side by side, before the targets are known (a first run builds them while it reads its
    files); return how many."""
    from .programs import build_all

    defines = every_shape_defines(glob, ptx, nobest)
    build_all(dctx, "search_group.cl", defines, threads)
    return len(defines)


def group_queues(dctx: DeviceContext, n: int) -> list:
    """``n`` command queues for bucket launches: the context's compute queue and ``n - 1``
    more (profiling on), made once per context (the warm-up makes them while the command
    reads its files, not the first launch)."""
    import pyopencl as cl

    with dctx.lock:
        queues = dctx.shared.setdefault("group_queues", [dctx.queue])
        if len(queues) < n:
            with driver_errors(dctx.caps, "creating command queues"):
                profiling = cl.command_queue_properties.PROFILING_ENABLE
                while len(queues) < n:
                    queues.append(cl.CommandQueue(dctx.context, dctx.device, properties=profiling))
        return list(queues[:n])


def preload(dctx: DeviceContext, defines: list[dict]) -> None:
    """Make the bucket queues and launch each program of ``defines`` once on no work (no
    pair, an empty query: the kernel returns after its prologue), so that what a driver does
    at a kernel's first launch (loading its module onto the device, say) is done by the
    warm-up, beside the reading, rather than by the search's first batch."""
    import pyopencl as cl

    group_queues(dctx, QUEUES)
    mf = cl.mem_flags
    with driver_errors(dctx.caps, "preloading the group search kernel"):
        dummy = cl.Buffer(dctx.context, mf.READ_WRITE, 64)
        zeros = np.zeros(8, np.int32)  # one query's qinfo: m = 0, no table
        info = cl.Buffer(dctx.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=zeros)
        events = []
        for d in defines:
            program, _ = build(dctx, "search_group.cl", d)
            kernel = cl.Kernel(program, "group_search")
            zero = np.int32(0)
            kernel.set_args(
                dummy, dummy, dummy, info, dummy, dummy, dummy,
                zero, np.int32(1), zero, zero, zero, zero, zero, zero, zero,
                cl.LocalMemory(4), cl.LocalMemory(8 * d["G"]),
            )  # fmt: skip
            events.append(cl.enqueue_nd_range_kernel(dctx.queue, kernel, (WG, 1), (WG, 1)))
        for event in events:
            wait(event)


def build_threads() -> int:
    """Programs built at a time: NVIDIA's compiler runs one build per thread without the
    GIL, and a first run has 17 programs to build (every shape of a mode). Up to twice the
    cores, so that all 17 build at once on a 16-core host: 16 threads built them in two
    rounds, the 17th alone after the others (2.6-4.0 s of a cold run on the H100 host)."""
    import os

    return max(1, min(2 * (os.cpu_count() or 1), len(SHAPES) + len(MULTI_SHAPES) + 1))


def letters_used(codes: np.ndarray) -> np.ndarray:
    """Which of the 256 byte values occur in ``codes`` (uint8). Codes below 64 (every
    alphabet but custom ones): a bit per code, OR-ed over cache-sized pieces (~2x a
    boolean fancy index, 0.06 s for 200,000 proteins here)."""
    used = np.zeros(256, bool)
    if not codes.size:
        return used
    if int(codes.max()) >= 64:
        used[codes] = True
        return used
    bits, one = 0, np.uint64(1)
    piece = np.empty(1 << 16, np.uint64)
    for start in range(0, codes.size, piece.size):
        part = codes[start : start + piece.size]
        out = piece[: part.size]
        np.left_shift(one, part, out=out, casting="unsafe")
        bits |= int(np.bitwise_or.reduce(out))
    used[:64] = [(bits >> k) & 1 == 1 for k in range(64)]
    return used


def flag_limit(matrix: np.ndarray) -> int:
    """Best scores at or above this may have wrapped past the 16-bit range."""
    return 32767 - max(int(matrix.max(initial=0)), 0) - 64


class GroupSearch:
    """A database of targets (uint8 matrix codes) on one device, for the group kernel.

    Parameters
    ----------
    dctx : DeviceContext
    codes : list of 1-D uint8 arrays
    lengths : ndarray of int64
    queues : int, optional
        Command queues for the bucket launches (default :data:`QUEUES`).
    ptx : bool, optional
        Inline PTX arithmetic and shuffles (default: where the device has them).
    residues : ndarray of uint8, optional
        Every target's codes in one buffer, in any order (saves concatenating them to find
        the letters in use).
    """

    def __init__(
        self,
        dctx: DeviceContext,
        codes,
        lengths,
        queues: int | None = None,
        ptx: bool | None = None,
        residues: np.ndarray | None = None,
    ) -> None:
        self.dctx = dctx
        self.codes = codes
        self.lengths = np.asarray(lengths, np.int64)
        self.real = np.flatnonzero(self.lengths > 0)
        used = np.zeros(256, bool)
        if len(self.real):
            if residues is None:
                residues = np.concatenate([codes[t] for t in self.real.tolist()])
            used = letters_used(residues)
        self.letters = np.flatnonzero(used)  # compact target letter -> matrix code
        self.L = len(self.letters) + 1  # and the padding letter
        self.compact = np.full(256, self.L - 1, np.uint8)
        self.compact[self.letters] = np.arange(len(self.letters))
        self.ptx = dctx.caps.ptx_s16x2 if ptx is None else bool(ptx) and dctx.caps.ptx_s16x2
        self.n_queues = max(1, queues or QUEUES)
        self._packed: dict = {}
        self._outs: dict = {}
        self._plans: dict = {}
        self._length_index: LengthIndex | None = None  # made with the first plan
        self._plan_lock = threading.Lock()
        self._lanes_lock = threading.Lock()
        self._lane_maps: dict = {}
        self._kernels: dict = {}
        self._packing: dict = {}  # bucket key -> layout job of build_for (kept once done)
        self._pack_lock = threading.Lock()
        self.layout_waited = 0.0  # seconds submit() waited for build_for's layouts
        self._pinned_free: list = []  # page-locked result memory of collected batches
        self._pinned_lock = threading.Lock()
        self._pack_pool = None  # build_for's layout threads
        self._queues: list = []
        self._carry = None
        self._inputs: dict = {}  # slot -> staged (host, device) inputs (submit_mode "slots")
        #: Batches the caller keeps in flight (slots 0 .. slots - 1; SearchRunner's FLIGHT)
        #: and batches whose results may be out at once (in flight or being gathered).
        self.slots = 3
        self.pool = 7
        self._reserving = None  # reserve()'s job on the layout threads
        self._reserve_checked = False  # a submit has waited for it
        #: How a batch is submitted (see :data:`SUBMIT_MODES`).
        self.submit_mode = config.OPENCL_SEARCH_SUBMIT
        #: Diagnostics (bench/search_submit_probe.py): a list to which every collected batch
        #: appends its host timestamps and event times, or None.
        self.trace: list | None = None
        self.layout_trace: list = []  # (began, packed, uploaded, bytes) per layout, when tracing
        self._trace_lock = threading.Lock()
        #: How bucket layouts reach the device: "create" (buffers made from host memory) or
        #: "copy" (empty buffers, then a blocking copy on a queue of their own).
        self.upload_mode = config.OPENCL_SEARCH_UPLOAD

    # -- capacity -----------------------------------------------------------------------------

    def geometry(self, query: np.ndarray) -> tuple[int, int, int]:
        """(pair table words, query row offsets, local bytes per work-group) for this query.

        Both are local buffers sized at launch, exactly (local memory limits residency on
        GPUs), not compile-time constants: no build depends on the query.
        """
        # the query's letters (a bincount: ~10x np.unique, asked per query several times),
        # + the virtual row
        rows = np.count_nonzero(np.bincount(query)) + 1
        words = rows * self.L * self.L
        qmax = len(query) + 2 * max(g for g, _ in (*SHAPES, *MULTI_SHAPES))
        exchange = 0 if self.ptx else 8 * WG
        return words, qmax, words * 4 + qmax * 4 + exchange

    def fits(self, query: np.ndarray) -> bool:
        """Whether the pair table of this query fits the device's local memory (and the pair
        offsets their 16 bits)."""
        if not len(self.real) or not len(query):
            return False
        need = self.geometry(query)[2]
        return self.L * self.L * 4 < 2**16 and need <= self.dctx.caps.local_mem

    # -- per query ------------------------------------------------------------------------------

    def score(self, query: np.ndarray, task):
        """16-bit results of ``query`` against every target for a
        :class:`~dpalign.kernels_cl.search.SearchTask` (any mode and free ends).

        Returns
        -------
        results : ndarray, shape (targets, 4), int64
            Per target, in the strip kernel's order (``search.scores_from`` reads them): the
            maximum over the target's last residue (every query row), over the query's last
            residue (every target column), the corner, and the best H of the whole matrix
            (local mode: the score). Empty targets: zeros.
        flagged : ndarray of bool
            Results that may have wrapped in 16 bits: recompute in int32.
        seconds : float
            Kernel time, first start to last end.
        launches : int
        """
        batch = self.collect(self.submit([query], task))
        return batch.results(0), batch.flagged[0], batch.seconds, batch.launches

    # -- batches of queries -------------------------------------------------------------------

    def plan_key(self, m: int) -> int:
        """The bucket plan a query of length ``m`` takes (queries of one plan share a batch):
        the first of :data:`PLAN_LENGTHS` at least ``m``, the last for longer queries."""
        for key in PLAN_LENGTHS:
            if m <= key:
                return key
        return PLAN_LENGTHS[-1]

    def batch_fits(self, queries) -> bool:
        """Whether one launch can hold these queries: the largest pair table and the longest
        query's row offsets in local memory at once."""
        words = max(self.geometry(q)[0] for q in queries)
        return self._local_need(words, max(len(q) for q in queries))

    def _local_need(self, words: int, m: int) -> bool:
        qmax = m + 2 * max(g for g, _ in (*SHAPES, *MULTI_SHAPES))
        exchange = 0 if self.ptx else 8 * WG
        return words * 4 + qmax * 4 + exchange <= self.dctx.caps.local_mem

    def batches(self, queries, limit: int | None = None) -> list[list[int]]:
        """Indices of ``queries`` (each one that :meth:`fits`) in launch batches: one plan
        per batch (queries sorted by length), at most ``limit`` (default :data:`BATCH`)
        queries, and what local memory holds."""
        limit = max(1, limit or BATCH)
        order = sorted(range(len(queries)), key=lambda k: len(queries[k]))
        words = [self.geometry(q)[0] for q in queries]
        out: list[list[int]] = []
        widest = 0
        for k in order:
            last = out[-1] if out else None
            if (
                last is not None
                and len(last) < limit
                and self.plan_key(len(queries[last[0]])) == self.plan_key(len(queries[k]))
                and self._local_need(max(widest, words[k]), len(queries[k]))  # the longest
            ):
                last.append(k)
                widest = max(widest, words[k])
            else:
                out.append([k])
                widest = words[k]
        return out

    def submit(self, queries, task, slot: int = 0) -> dict:
        """Enqueue every launch of a batch of ``queries`` (one plan: see :meth:`batches`) and
        return at once; :meth:`collect` gives the results. Batches in different ``slot``s
        (buffers of their own) may be in flight together: the next batch's kernels run while
        this one's results come back and are finished. A slot's buffers are reused by its
        next batch, which the caller submits only after :meth:`wait_for` of this one."""
        import pyopencl as cl

        mark = _Marks() if self.trace is not None else _no_mark
        mark("start")
        if not queries or not all(self.fits(q) for q in queries):
            raise DpalignError(
                "the pair table of this query does not fit the device's local memory"
            )
        keys = {self.plan_key(len(q)) for q in queries}
        if len(keys) != 1 or not self.batch_fits(queries):
            raise DpalignError("the queries of a batch must share one plan and local memory")
        sc = task.scoring
        glob = not task.local
        nq = len(queries)
        ms = np.array([len(q) for q in queries], np.int64)
        m_max = int(ms.max())
        nobest = not keeps_best(glob, sc, m_max)  # its best results stay at -30720
        caps = self.dctx.caps
        mode = self.submit_mode
        # Global modes: each target ends on its last pass's last column, after virtual
        # columns that carry the left border (scoring 0 when that border is free, else too
        # low to matter: H there follows F down the column, -(o + e (i + 1))).
        pad_score = 0 if glob and task.top_zero else PAD_SCORE
        parts = [self._table(q, sc.matrix, pad_score) for q in queries]
        qinfo = np.zeros((nq, 8), np.int32)
        qinfo[:, 0] = ms
        qinfo[:, 2] = [len(t) for t, _, _ in parts]
        qinfo[1:, 1] = np.cumsum(qinfo[:-1, 2])
        qinfo[1:, 3] = np.cumsum(ms[:-1])
        qinfo[:, 4] = [v for _, _, v in parts]
        words_max = int(qinfo[:, 2].max())
        lanes = self._lanes(m_max)
        mark("tables")
        per_lane = 4 if glob else 1
        stride = lanes.n_lanes * per_lane
        if self._reserving is not None and not self._reserve_checked:
            try:  # the buffers reserve() is making (pack phase)
                self._reserving.result()
            except DpalignError as exc:  # (the batches then make what they need)
                log.info("opencl search: the search buffers were not reserved: %s", exc)
            self._reserve_checked = True
        pinned = None
        if self._pinned_results():
            pinned = self._take_pinned(nq * stride)
            host = pinned[1][: nq * stride].reshape(nq, stride)
        else:
            host = np.empty((nq, stride), np.uint16)
        mark("host")
        queues = self._queue_list()
        cap = max(1, caps.compute_units * GROUPS_PER_CU // nq)
        # Latency-bound buckets first (most steps per pair), then the biggest.
        order = sorted(
            zip(lanes.buckets, lanes.bases, strict=True),
            key=lambda bb: (-bb[0].passes * (m_max + bb[0].G), -len(bb[0].targets)),
        )
        sizes = [max(1, min(-(-b.npairs // (WG // b.G)), cap)) for b, _ in order]
        events, copies, retired, uploads = [], [], [], []
        with driver_errors(caps, "running the group search kernel"):
            if mode in ("slots", "rect"):
                table_buf, qoff_buf, info_buf, uploads = self._slot_inputs(
                    slot, parts, qinfo, self._side_queue("search_inputs")
                )
            else:
                table = np.concatenate([t for t, _, _ in parts])
                qoff = np.concatenate([o for _, o, _ in parts])
                table_buf, qoff_buf, info_buf = self._new_inputs(table, qoff, qinfo)
            mark("inputs")
            out = self._out_buffer(slot, host.nbytes)
            if mode != "v0":
                # The pass-column buffer of the batch's widest multi-pass launch, made once
                # before the launches; a smaller one it replaces stays referenced until the
                # batch is collected (released while a launch may still use it otherwise).
                need = max(
                    [wgs * nq * (WG // b.G) * m_max * 8
                     for (b, _), wgs in zip(order, sizes, strict=True) if b.passes > 1] or [8]
                )  # fmt: skip
                retired = self._carry_buffer(need, keep_old=True)
            mark("buffers")
            for j, ((bucket, base), wgs) in enumerate(zip(order, sizes, strict=True)):
                cols, pads, _ = self._upload(bucket, glob)
                mark("layout")
                kernel = self._kernel(bucket, glob, nobest)
                slots = wgs * nq * (WG // bucket.G)
                if mode == "v0":
                    carry = self._carry_buffer(slots * m_max * 8 if bucket.passes > 1 else 8)
                else:
                    carry = self._carry
                mark("kernel")
                kernel.set_args(
                    cols,
                    table_buf,
                    qoff_buf,
                    info_buf,
                    out,
                    carry,
                    pads,
                    np.int32(bucket.npairs),
                    np.int32(bucket.passes),
                    np.int32(sc.gap_open),
                    np.int32(sc.gap_extend),
                    np.int32(task.left_zero),  # the kernel's row -1: the strip kernel's column 0
                    np.int32(task.top_zero),  # its column -1: the strip kernel's row 0
                    np.int32(base),
                    np.int32(stride),
                    np.int32(m_max),
                    cl.LocalMemory(4 * words_max),
                    cl.LocalMemory(4 * (m_max + 2 * bucket.G)),
                )
                mark("set_args")
                # Multi-pass launches share the pass-column buffer: one queue for them (in
                # order, also across batches in flight).
                queue = queues[j % len(queues)] if bucket.passes == 1 else queues[0]
                wait = uploads or None  # the inputs' copies (slots), on a queue of their own
                events.append(
                    cl.enqueue_nd_range_kernel(queue, kernel, (wgs * WG, nq), (WG, 1),
                                               wait_for=wait)
                )  # fmt: skip
                mark("enqueue")
                if mode == "rect":
                    # this bucket's lanes of every query, read back on the launch's own
                    # queue behind it (no wait on other queues' events)
                    width = 2 * bucket.npairs * per_lane * 2
                    copies.append(
                        cl.enqueue_copy(
                            queue, host, out,
                            buffer_origin=(2 * base * per_lane, 0, 0),
                            host_origin=(2 * base * per_lane, 0, 0),
                            region=(width, nq, 1),
                            buffer_pitches=(2 * stride,), host_pitches=(2 * stride,),
                            is_blocking=False,
                        )
                    )  # fmt: skip
                    mark("copy")
                queue.flush()  # running while the next bucket's layout may still be under way
                mark("flush")
            if mode != "rect":
                # The whole batch's results in one copy, queued behind every launch.
                copies.append(
                    cl.enqueue_copy(
                        self.dctx.copy_queue, host, out, wait_for=events, is_blocking=False
                    )
                )
                mark("copy")
                self.dctx.copy_queue.flush()
                mark("flush")
        # the inputs stay referenced until the launches are collected
        return {
            "task": task,
            "ms": ms,
            "events": events,
            "copies": copies,
            "host": host,
            "pinned": pinned,
            "lanes": lanes,
            "inputs": (table_buf, qoff_buf, info_buf, uploads, retired),
            "trace": mark.done(order, slot) if self.trace is not None else None,
        }

    def _new_inputs(self, table, qoff, qinfo) -> tuple:
        """The batch's pair tables, row offsets and query information in new buffers."""
        import pyopencl as cl

        mf = cl.mem_flags
        ctx = self.dctx.context
        return (
            cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=table),
            cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=qoff),
            cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=qinfo),
        )

    def _slot_inputs(self, slot: int, parts, qinfo, queue) -> tuple:
        """The batch's pair tables, row offsets and query information written into
        ``slot``'s buffers (kept, grown as needed) from its page-locked staging, by
        non-blocking copies on ``queue``: ``(table, qoff, info, [copy events])``. No
        buffer is made or released per batch (NVIDIA's driver may wait for the device
        there)."""
        import pyopencl as cl

        words = sum(len(t) for t, _, _ in parts)
        rows = sum(len(o) for _, o, _ in parts)
        kept = self._slot_buffers(slot, words, rows, qinfo.size)
        (table_host, table_buf), (qoff_host, qoff_buf), (info_host, info_buf) = (
            (k[0], k[1]) for k in kept
        )
        at = 0
        for t, _, _ in parts:
            table_host[at : at + len(t)] = t
            at += len(t)
        np.concatenate([o for _, o, _ in parts], out=qoff_host[:rows])
        info_host[: qinfo.size] = qinfo.reshape(-1)
        uploads = [
            cl.enqueue_copy(queue, table_buf, table_host[:words], is_blocking=False),
            cl.enqueue_copy(queue, qoff_buf, qoff_host[:rows], is_blocking=False),
            cl.enqueue_copy(queue, info_buf, info_host[: qinfo.size], is_blocking=False),
        ]
        queue.flush()
        return table_buf, qoff_buf, info_buf, uploads

    def _slot_buffers(self, slot: int, words: int, rows: int, info: int) -> tuple:
        """``slot``'s staged input buffers, (re)made to hold at least these sizes."""
        kept = self._inputs.get(slot)
        need = (words, rows, info)
        if kept is None or any(k[0].size < n for k, n in zip(kept, need, strict=True)):
            have = [0, 0, 0] if kept is None else [k[0].size for k in kept]
            least = (1 << 16, 1 << 12, 8 * BATCH)
            grow = [max(t) for t in zip(need, have, least, strict=True)]
            kept = self._inputs[slot] = tuple(
                self._staged(n, dtype)
                for n, dtype in zip(grow, (np.uint32, np.int32, np.int32), strict=True)
            )
        return kept

    def _pinned_results(self) -> bool:
        """Whether batches' results come back into page-locked memory (GPUs, every submit
        mode but v0 unless :data:`~dpalign.config.OPENCL_SEARCH_PINNED`)."""
        wanted = self.submit_mode != "v0" or config.OPENCL_SEARCH_PINNED
        return wanted and not self.dctx.caps.is_cpu

    def reserve(self, longest: int, glob: bool, letters: int = 255, multi: bool = True) -> None:
        """Make, before the search's first launch, every buffer its batches take: each
        slot's result, input and staging buffers, the pass-column buffer, and page-locked
        result memory for :attr:`pool` batches, for :data:`BATCH` queries of up to
        ``longest`` residues and ``letters`` distinct letters (``multi``: the plans have
        multi-pass buckets; submit modes "slots" and "rect"; batches beyond these sizes grow
        them as before).

        NVIDIA's driver gives a buffer its memory at the first command that uses it, and
        that command waits until the device has nothing running (H100 host: a slot's
        first input copy waited 0.35-0.40 s for the batch in flight, a new page-locked
        buffer 0.43-0.52 s), so each device buffer is also filled once here, while the
        device is idle."""
        import pyopencl as cl

        if self.submit_mode not in ("slots", "rect"):
            return
        per_lane = 4 if glob else 1
        lanes = len(self.real) + 256  # any plan's lanes (a padding lane per bucket at most)
        words = (min(letters, 255) + 1) * self.L * self.L  # a query's pair table, at most
        made = []
        with driver_errors(self.dctx.caps, "reserving the search buffers"):
            for slot in range(self.slots):
                made.append(self._out_buffer(slot, BATCH * lanes * per_lane * 2))
                kept = self._slot_buffers(slot, BATCH * words, BATCH * longest, 8 * BATCH)
                made.extend(k[1] for k in kept)
            groups = self.dctx.caps.compute_units * GROUPS_PER_CU
            carry = groups * (WG // min(g for g, _ in MULTI_SHAPES)) * longest * 8
            if multi and carry <= min(1 << 30, self.dctx.caps.max_alloc):
                # as wide as a batch's multi-pass launch can be (see submit); a longer query
                # grows it when it comes
                made.append(self._carry_buffer(carry))
            queue = self._side_queue("search_inputs")
            zero = np.zeros(1, np.uint8)
            for buf in made:
                cl.enqueue_fill_buffer(queue, buf, zero, 0, buf.size)
            queue.finish()
            if self._pinned_results():
                with self._pinned_lock:
                    have = len(self._pinned_free)
                count = BATCH * lanes * per_lane
                # at most ~2 GiB of page-locked memory up front (a database of millions of
                # targets: the batches in flight only, the rest made when needed)
                wanted = max(self.slots + 1, min(self.pool, (2 << 30) // (2 * count)))
                more = [self._take_pinned(count) for _ in range(wanted - have)]
                with self._pinned_lock:
                    self._pinned_free.extend(more)

    def _staged(self, count: int, dtype):
        """``(page-locked host array, device buffer, its host-side buffer)`` of ``count``
        elements."""
        import pyopencl as cl

        mf = cl.mem_flags
        nbytes = count * np.dtype(dtype).itemsize
        ctx = self.dctx.context
        pinned = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, nbytes)
        array, _ = cl.enqueue_map_buffer(
            self._side_queue("search_maps"), pinned, cl.map_flags.READ | cl.map_flags.WRITE, 0,
            (count,), dtype,
        )  # fmt: skip
        return array, cl.Buffer(ctx, mf.READ_ONLY, nbytes), pinned

    def wait_for(self, pending: dict) -> None:
        """Wait until a :meth:`submit`'s results are on the host (its slot's buffers may then
        take another batch); :meth:`collect` may follow on another thread."""
        began = time.perf_counter()
        with driver_errors(self.dctx.caps, "running the group search kernel"):
            for copy in pending["copies"]:
                wait(copy)
        if pending.get("trace") is not None:
            pending["trace"]["wait"] = (began, time.perf_counter())

    def collect(self, pending: dict) -> GroupBatch:
        """The results of a :meth:`submit`, once its launches and copy finish."""
        task, ms, events = pending["task"], pending["ms"], pending["events"]
        self.wait_for(pending)
        began = time.perf_counter()
        lanes = pending["lanes"]
        glob = not task.local
        # [queries, targets, 1 or 4]: a lane's results gathered as one 2- or 8-byte element
        # (a fancy index of 4-value rows took 5x as long: 0.38 s a global batch here)
        host = pending["host"].reshape(len(ms), -1)
        if glob:
            whole = np.take(host.view(np.uint64), lanes.lane_of, axis=1)
            values = whole.view(np.int16).reshape(len(ms), -1, 4)
        else:
            values = np.take(host.view(np.int16), lanes.lane_of, axis=1)[:, :, None]
        pinned = pending.pop("pinned", None)
        if pinned is not None:  # gathered out of it: the next batch may take it
            with self._pinned_lock:
                self._pinned_free.append(pinned)
        real = self.lengths > 0
        limit = flag_limit(task.scoring.matrix)
        flagged = values[:, :, -1] >= limit
        if glob:  # values that may fall below the 16-bit range, the virtual columns' included
            # low_ok is linear in the target length: the shortest and longest decide for all
            ends = np.array([self.lengths.min(initial=0), self.lengths.max(initial=0)])
            for k, m in enumerate(ms.tolist()):
                if not task.low_ok(m, ends, -30_720 + 1024).all():
                    flagged[k] |= ~task.low_ok(m, self.lengths, -30_720 + 1024)
        flagged &= real
        start = min(e.profile.start for e in events)
        end = max(e.profile.end for e in events)
        trace = pending.get("trace")
        if trace is not None:
            trace["gather"] = (began, time.perf_counter())
            trace["events"] = [
                (e.profile.queued, e.profile.submit, e.profile.start, e.profile.end) for e in events
            ]
            trace["copies"] = [_profile(c) for c in pending["copies"]]
            trace["uploads"] = [_profile(c) for c in pending["inputs"][3]]
            with self._trace_lock:
                self.trace.append(trace)
        return GroupBatch(values, flagged, real, (end - start) * 1e-9, len(events))

    def _take_pinned(self, count: int):
        """``(buffer, mapped uint16 array of at least count)``: page-locked host memory for a
        batch's results, from the batches collected before (or :meth:`reserve`'s) or new (a
        new one waits for the device to be idle on NVIDIA's driver: 0.43-0.52 s mid-search
        on the H100 host)."""
        import pyopencl as cl

        with self._pinned_lock:
            for k, item in enumerate(self._pinned_free):
                if item[1].size >= count:
                    return self._pinned_free.pop(k)
        with driver_errors(self.dctx.caps, "allocating page-locked result memory"):
            mf = cl.mem_flags
            buf = cl.Buffer(self.dctx.context, mf.READ_WRITE | mf.ALLOC_HOST_PTR, 2 * count)
            flags = cl.map_flags.READ | cl.map_flags.WRITE
            # (a blocking map on a queue of its own: on the copy queue it would wait for the
            # batches in flight)
            array, _ = cl.enqueue_map_buffer(
                self._side_queue("search_maps"), buf, flags, 0, (count,), np.uint16
            )
        return buf, array

    def _table(self, query: np.ndarray, matrix: np.ndarray, pad_score: int = PAD_SCORE):
        """The pair table (uint32 words), each query row's table offset (bytes), and the
        virtual row's offset; the padding letter scores ``pad_score``."""
        letters, rows = np.unique(query, return_inverse=True)
        L = self.L
        sub = np.full((len(letters) + 1, L), PAD_SCORE, np.int64)  # + the virtual row
        sub[: len(letters), : L - 1] = matrix[np.ix_(letters, self.letters)]
        sub[: len(letters), L - 1] = pad_score
        bits = (sub & 0xFFFF).astype(np.uint32)
        table = (bits[:, :, None] | (bits[:, None, :] << 16)).reshape(-1)
        qoff = (rows.reshape(-1) * L * L * 4).astype(np.int32)
        return np.ascontiguousarray(table), qoff, len(letters) * L * L * 4

    def _plan(self, m: int) -> list[Bucket]:
        # Plans depend on the query length only through the wavefront's fill; one per
        # power of two of m keeps the packed columns reusable across queries.
        key = self.plan_key(m)
        plan = self._plans.get(key)  # made already: no lock (a thread may be making another)
        if plan is not None:
            return plan
        with self._plan_lock:  # the search's thread and prepare()'s may ask at once
            if key not in self._plans:
                if self._length_index is None:
                    self._length_index = LengthIndex(self.lengths[self.real])
                plan = plan_buckets(self.lengths[self.real], key, index=self._length_index)
                for bucket in plan:
                    bucket.targets = self.real[bucket.targets]
                self._plans[key] = plan
            return self._plans[key]

    def _lanes(self, m: int) -> Lanes:
        """Where each target's results lie in a query's row of results (plan of ``m``)."""
        key = self.plan_key(m)
        lanes = self._lane_maps.get(key)
        if lanes is not None:
            return lanes
        with self._lanes_lock:
            return self._lane_map(key, m)

    def _lane_map(self, key: int, m: int) -> Lanes:
        if key not in self._lane_maps:
            buckets = self._plan(m)
            lane_of = np.zeros(len(self.codes), np.int64)  # empty targets: any lane
            bases, base = [], 0
            for bucket in buckets:
                bases.append(base)
                lane_of[bucket.targets] = base + np.arange(len(bucket.targets))
                base += 2 * bucket.npairs
            self._lane_maps[key] = Lanes(buckets, bases, max(base, 1), lane_of)
        return self._lane_maps[key]

    def _upload(self, bucket: Bucket, right: bool):
        """The bucket's column pair offsets and per-pair virtual columns on the device
        (cached; laid out here unless :meth:`build_for`'s threads are at it); ``right``:
        each target ends on the last column (global modes), else it starts on the first
        (local mode)."""
        key = self._bucket_key(bucket, right)
        with self._pack_lock:  # build_for may be handing out layouts on another thread
            job = self._packing.get(key)
            if job is None and key not in self._packed:
                self._lay_out(key, bucket, right)
        if job is not None and not job.done():
            mark = time.perf_counter()
            job.result()
            self.layout_waited += time.perf_counter() - mark
        elif job is not None:
            job.result()
        return self._packed[key]

    def _lay_out(self, key, bucket: Bucket, right: bool) -> None:
        import pyopencl as cl

        began = time.perf_counter()
        cols, pads, targets = self._pack(bucket, right)
        packed = time.perf_counter()
        mf = cl.mem_flags
        ctx = self.dctx.context
        with driver_errors(self.dctx.caps, "uploading the search targets"):
            if self.upload_mode == "copy":
                # Copied on a queue of the layouts' own, not with the buffer's creation
                # (which NVIDIA's driver may order behind the kernels running meanwhile).
                queue = self._side_queue("search_layouts")
                made = []
                for array in (cols, pads):
                    buf = cl.Buffer(ctx, mf.READ_ONLY, max(array.nbytes, 1))
                    cl.enqueue_copy(queue, buf, array, is_blocking=True)
                    made.append(buf)
                self._packed[key] = (*made, targets)
            else:
                self._packed[key] = (
                    cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=cols),
                    cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=pads),
                    targets,
                )
        if self.trace is not None:
            with self._trace_lock:
                self.layout_trace.append((began, packed, time.perf_counter(), int(cols.nbytes)))

    def _side_queue(self, name: str):
        """An in-order queue of the context for one kind of copy (``name``: the bucket
        layouts', a batch's inputs'), made once per context: its copies wait for nothing
        else queued on the device."""
        import pyopencl as cl

        with self.dctx.lock:
            queue = self.dctx.shared.get(name)
            if queue is None:
                with driver_errors(self.dctx.caps, "creating a command queue"):
                    profiling = cl.command_queue_properties.PROFILING_ENABLE
                    queue = cl.CommandQueue(self.dctx.context, self.dctx.device, profiling)
                self.dctx.shared[name] = queue
            return queue

    def _out_buffer(self, slot: int, nbytes: int):
        """The result buffer of batches in ``slot`` (grown as needed)."""
        import pyopencl as cl

        have = self._outs.get(slot)
        if have is None or have.size < nbytes:
            with driver_errors(self.dctx.caps, "allocating the search results"):
                have = self._outs[slot] = cl.Buffer(
                    self.dctx.context, cl.mem_flags.READ_WRITE, max(nbytes, 8)
                )
        return have

    @staticmethod
    def _bucket_key(bucket: Bucket, right: bool) -> tuple:
        first = int(bucket.targets[0])
        return (bucket.G, bucket.R, bucket.passes, first, len(bucket.targets), right)

    def _pack(self, bucket: Bucket, right: bool = False):
        """uint16 pair offsets ``[pairs, passes * W]``, the virtual columns before each
        lane's target (int32 ``[pairs, 2]``), and the target of every lane (-1: the odd
        bucket's empty partner)."""
        width = bucket.passes * bucket.W
        targets = bucket.targets
        if len(targets) % 2:
            targets = np.concatenate([targets, [-1]])
        lens = np.where(targets >= 0, self.lengths[np.maximum(targets, 0)], 0)
        # Each lane's residues fill a run of its row (from the left, or up to the right end),
        # and a boolean mask walks rows in order: one masked store of every residue of the
        # bucket, concatenated in lane order (uint8 cells: the old int64 scatter of row and
        # column indices cost ~4 s per plan for 200,000 proteins).
        at = np.arange(width)
        mask = at >= (width - lens)[:, None] if right else at < lens[:, None]
        lanes = np.full((len(targets), width), self.L - 1, np.uint8)
        lanes[mask] = self.compact[
            np.concatenate([self.codes[t] for t in targets[targets >= 0].tolist()])
        ]
        pads = (width - lens if right else np.where(lens > 0, 0, width)).astype(np.int32)
        lanes = lanes.reshape(-1, 2, width)
        cols = (lanes[:, 0].astype(np.uint16) * self.L + lanes[:, 1]) * 4
        return (
            np.ascontiguousarray(cols, np.uint16),
            np.ascontiguousarray(pads.reshape(-1, 2)),
            targets,
        )

    def defines(self, G: int, R: int, multi: bool, glob: bool, nobest: bool = False) -> dict:
        """The ``-D`` constants of one shape's program (nothing of the query)."""
        return group_defines(G, R, multi, glob, self.ptx, nobest)

    def build_for(
        self, lengths, glob: bool, threads: int = 8, scoring=None, build: bool = True
    ) -> int:
        """Build, side by side, the programs that queries of ``lengths`` take (the shapes of
        their bucket plans), and start laying out and uploading their buckets on threads that
        carry on after this returns (:meth:`submit` waits for each bucket's own layout);
        return how many programs that is (``scoring``: global modes' programs without the
        best H where :func:`keeps_best` allows, as :meth:`submit` takes them; ``build``
        False: the layouts only, the programs are left to whoever builds them)."""
        from concurrent.futures import ThreadPoolExecutor

        from .programs import build_all

        keys = {self.plan_key(m) for m in lengths if m > 0}
        buckets = {self._bucket_key(b, glob): b for key in keys for b in self._plan(key)}
        variants = {
            (self.plan_key(m), glob and scoring is not None and not keeps_best(glob, scoring, m))
            for m in lengths
            if m > 0
        }
        shapes = {
            (b.G, b.R, b.passes > 1, nobest) for key, nobest in variants for b in self._plan(key)
        }
        defines = [
            self.defines(g, r, multi, glob, nobest) for g, r, multi, nobest in sorted(shapes)
        ]
        # Laid out in the order the launches take them (see submit), on threads that keep
        # going after this returns: the first launches wait for their own buckets only
        # (_upload), so the device starts while the rest are packed.
        with self._pack_lock:
            todo = [
                (k, b)
                for k, b in buckets.items()
                if k not in self._packed and k not in self._packing
            ]
            todo.sort(key=lambda kb: (-kb[1].passes * (max(keys) + kb[1].G), -len(kb[1].targets)))
            # One pool for every call: a later call's layouts queue behind an earlier one's (a
            # search prepares its first chunk's plan, then the others').
            if self._pack_pool is None:
                layout_threads = config.OPENCL_SEARCH_LAYOUT_THREADS or threads
                self._pack_pool = ThreadPoolExecutor(
                    max(1, layout_threads), thread_name_prefix="dpalign-pack"
                )
            if self._reserving is None and self.submit_mode in ("slots", "rect"):
                # the first call's queries are the run's longest (a search prepares its
                # first chunk first, longest queries first)
                longest = max(lengths, default=1)
                letters = scoring.matrix.shape[0] if scoring is not None else 255
                multi = any(b.passes > 1 for b in buckets.values())
                self._reserving = self._pack_pool.submit(
                    self.reserve, longest, glob, letters, multi
                )
            for k, b in todo:
                self._packing[k] = self._pack_pool.submit(self._lay_out, k, b, glob)
        if build:
            build_all(self.dctx, "search_group.cl", defines, threads)
        return len(defines)

    def _kernel(self, bucket: Bucket, glob: bool, nobest: bool = False):
        # One kernel object per program: making one runs pyopencl's argument-setter
        # generation (~0.25 ms, a per-bucket-per-query cost before batching).
        key = (bucket.G, bucket.R, bucket.passes > 1, glob, nobest)
        if key not in self._kernels:
            import pyopencl as cl

            program, _ = build(self.dctx, "search_group.cl", self.defines(*key))
            with driver_errors(self.dctx.caps, "preparing the group search kernel"):
                self._kernels[key] = cl.Kernel(program, "group_search")
        return self._kernels[key]

    def _queue_list(self) -> list:
        if not self._queues:
            self._queues = group_queues(self.dctx, self.n_queues)
        return self._queues

    def _carry_buffer(self, nbytes: int, keep_old: bool = False):
        """The pass-column buffer, grown to ``nbytes``; ``keep_old``: return the buffer it
        replaces (or None), for the caller to hold until the launches that used it are done,
        else the buffer itself."""
        import pyopencl as cl

        old = None
        if self._carry is None or self._carry.size < nbytes:
            old = self._carry
            with driver_errors(self.dctx.caps, "allocating the pass columns"):
                self._carry = cl.Buffer(self.dctx.context, cl.mem_flags.READ_WRITE, max(nbytes, 8))
        return old if keep_old else self._carry
