"""Host side of the inter-sequence search kernel (``search.cl``): one query against many targets.

A :class:`SearchRunner` holds a set of targets on one device (sorted by length, compressed,
uploaded once) and scores any number of queries against all of them:

validate -> query profile (query x alphabet scores, in the kernel's frame) -> 16-bit packed
pass over every target whose scores cannot fall below the packed range -> detect the pairs
that came near the top of it -> recompute those (and the a-priori excluded ones) in int32 ->
gather scores in target order, with the width that produced each.

Kernel names follow ``{sw,nw}_score_opencl_search_{i16,i32}`` (:data:`KERNELS`; ``nw``
covers global mode with any ``free_ends`` and semiglobal).

Packing of the targets (``BITS``)
---------------------------------
Residue codes (indices into the scoring matrix) are packed ``32 // BITS`` to a uint32, residue
t of a word in bits ``BITS*t ..``. ``BITS`` is the narrowest of 2, 3, 4, 5, 8 that holds
every code of the targets plus one more, the *virtual residue* that pads shorter lanes at the
top of their chunk: plain DNA (``ACGT``, codes 0-3) takes 3 bits (10 residues a word), IUPAC
DNA with ``NUC.4.4`` 4 bits (8 a word), protein and the 27-letter identity alphabet 5 bits
(6 a word), larger custom alphabets 8 bits. Words are stored chunk by chunk, ``[word][lane]``
(a warp's 32 work-items read 128 or 256 contiguous bytes), chunks of ``CHUNK`` work-items
(64 lanes when packed, 32 in int32), each chunk as tall as its longest lane.

Integer widths
--------------
The packed kernel keeps two targets' cells in the 16-bit halves of each register (inline PTX
``add/max.s16x2``, fused into DPX ``VIADDMNMX`` on sm_90; portable ``short2`` arithmetic
elsewhere). Its arithmetic wraps, so a result is never trusted blindly:

* the low side is checked a priori: a target whose lowest possible DP value
  (:meth:`Scoring.bounds`) minus two gap opens is not above the packed "-inf" (-30,720) goes
  straight to int32;
* the high side is detected: values grow by at most the largest substitution score per
  step, so the first cell that passes ``B0 = 32767 - max(s) - 64`` is computed exactly, and
  it is recorded: in local mode in the best score, in global mode (where only the last row
  and column are candidates) in the maximum over every strip's last column, which is within
  ``o + e (S - 1)`` of every cell of its row. Flagged pairs are recomputed in int32
  (``width`` 32); the others are exact (``width`` 16).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .. import config, reference
from ..contract import longest_first
from ..errors import DpalignError, OptionError
from ..scoring import MODES, Scoring
from .context import DeviceContext, driver_errors, wait
from .names import SEARCH
from .programs import build

log = logging.getLogger("dpalign.opencl")

#: Work-items per chunk (one warp): a chunk's lanes run the same number of rows.
CHUNK = 32
#: Query columns per register strip on GPUs (measured, BENCHMARKS.md) and on CPU devices
#: (PoCL: a small unrolled body compiles quickly).
GPU_STRIP = 32
#: The same for alphabets of 5-bit residues (protein): measured on the H100 (375-aa query,
#: 200,000 targets, local, packed): S = 16 670, 32 1,082, 48 1,253, 64 1,276-1,286, 96 1,329,
#: 128 662 kernel GCUPS; global mode 1,154 -> 1,518 from 32 to 64. Each target row's fixed
#: work (its residues, the strip boundary's loads and stores, the profile row addresses) is
#: shared by more columns. 64, not 96: the GPU oracle check ran at 64.
GPU_STRIP_PROTEIN = 64
#: Local protein searches on GPUs run the int32 kernel unless 16 bits are asked for: at S = 64
#: it measured 1,402-1,405 kernel GCUPS on the H100 against 1,275 packed (pairing two targets'
#: scores into one 16x2 word costs more than the second lane saves there); global and
#: semiglobal stay packed (1,518; their int32 figure at S = 64 is not measured yet).
LOCAL_PROTEIN_WIDTH = 32
CPU_STRIP = 8
#: Work-items per work-group (the query profile is copied once per group).
GPU_GROUP = 256
CPU_GROUP = 64
#: Query batches in flight on the group kernel (result buffers on the device): the device
#: computes the next two while the host finishes one.
FLIGHT = 3
#: Threads that finish collected batches (gather the raw results into target order, the
#: scores, the flags: NumPy that releases the GIL). One was slower than the H100 in global
#: modes (~0.35 s a batch of 32 queries against 200,000 targets, the device ~0.2 s).
FINISHERS = 4
#: Default kernel options (measured on the H100, BENCHMARKS.md): global mode in the shifted
#: frame, local mode's running best by three-input max.
SHIFTED = True
BEST3 = True
#: Local memory the query profile may take; longer queries run in several segments.
PROFILE_LOCAL_MAX = 40 * 1024
#: Cells per launch on CPU devices (progress granularity); GPUs are limited by memory only.
CPU_LAUNCH_CELLS = 500_000_000

NEG16 = -30720
NEG32 = -(1 << 29)
#: The packed kernel's parameters (|s| + o + e, o + e) must stay below this.
PACKED_PARAM_LIMIT = 2048
INT32_PARAM_LIMIT = 1 << 24
#: Packing widths, narrowest first.
BIT_WIDTHS = (2, 3, 4, 5, 8)

KERNELS = SEARCH


def kernel_name(mode: str, width: int) -> str:
    """The kernel table entry for a mode and width."""
    return f"{'sw' if mode == 'local' else 'nw'}_score_opencl_search_i{width}"


def residue_bits(virtual: int) -> int:
    """The narrowest packing width holding codes ``0 .. virtual`` (the virtual code included)."""
    for bits in BIT_WIDTHS:
        if virtual < (1 << bits):
            return bits
    raise OptionError(f"alphabets of more than 255 letters cannot be packed (got {virtual})")


# --------------------------------------------------------------------------------------------
# Scoring constants, widths
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchTask:
    """What one kernel run computes: scoring, mode and the border/end-cell flags.

    ``top_zero`` / ``left_zero``: the kernel's top border (the query side; the oracle's
    column 0) and left border (the target side; the oracle's row 0) cost nothing;
    ``last_col`` / ``last_row``: the kernel's last column (the query's end: the oracle's row m)
    and last row (the target's end: the oracle's column n) hold end-cell candidates.
    """

    scoring: Scoring
    mode: str
    ends: tuple[bool, bool, bool, bool]
    top_zero: bool
    left_zero: bool
    last_col: bool
    last_row: bool

    @classmethod
    def of(cls, scoring: Scoring, mode: str, free_ends) -> SearchTask:
        if mode not in MODES:
            raise OptionError(f"unknown mode {mode!r}")
        a_lead, a_trail, b_lead, b_trail = (bool(x) for x in free_ends)
        local = mode == "local"
        ends = (a_lead, a_trail, b_lead, b_trail)
        return cls(scoring, mode, ends, local or b_lead, local or a_lead, a_trail, b_trail)

    @property
    def local(self) -> bool:
        return self.mode == "local"

    @property
    def oe(self) -> int:
        return self.scoring.gap_open + self.scoring.gap_extend

    def top(self, c: int) -> int:
        """H on the kernel's top border at query column c (the oracle's H[c][0])."""
        return 0 if (c == 0 or self.top_zero) else -self.oe - self.scoring.gap_extend * (c - 1)

    def left(self, r: np.ndarray) -> np.ndarray:
        """H on the kernel's left border at target rows r (the oracle's H[0][r])."""
        r = np.asarray(r, dtype=np.int64)
        if self.left_zero:
            return np.zeros_like(r)
        return np.where(r == 0, 0, -(self.scoring.gap_open + self.scoring.gap_extend * r))

    def packable(self) -> bool:
        """Whether the packed 16-bit kernel can hold the scoring's constants."""
        sc = self.scoring
        smax = int(np.abs(sc.matrix).max(initial=0))
        return self.oe <= PACKED_PARAM_LIMIT and smax + self.oe <= PACKED_PARAM_LIMIT

    def low_ok(self, m: int, n: np.ndarray, neg: int) -> np.ndarray:
        """Targets (lengths n) whose every DP value stays above the kernel's "-inf" ``neg``."""
        sc = self.scoring
        smin = min(int(sc.matrix.min(initial=0)), -self.oe, 0)
        if self.local:
            lo = np.full(len(n), smin, dtype=np.int64)
        else:
            lo = -(2 * sc.gap_open + sc.gap_extend * (m + np.asarray(n, np.int64))) + smin
        return lo - 2 * self.oe - 64 > neg

    def high_limit(self, strip: int, shifted: bool) -> int:
        """B0: while every H is at most B0, no stored value wraps (the shifted frame stores
        up to (S + 1)(o + e) above H; a diagonal step adds at most the largest score)."""
        frame = (strip + 1) * self.oe if shifted else 0
        return 2**15 - 1 - max(int(self.scoring.matrix.max(initial=0)), 0) - frame - 64

    def flagged(self, best: np.ndarray, strip: int, shifted: bool = False) -> np.ndarray:
        """Packed results that may have wrapped (``best``: the kernel's 4th result): the
        first cell past B0 is exact and lies within o + e (S - 1) of its strip's last column
        (global mode), or is the best score itself (local mode)."""
        b0 = self.high_limit(strip, shifted)
        if self.local:
            return best > b0
        sc = self.scoring
        return best >= b0 - sc.gap_open - sc.gap_extend * (strip - 1)


def scores_from(task: SearchTask, m: int, n: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Each target's score from the kernel's four results (and the border candidates)."""
    if task.local:
        return np.maximum(out[:, 3].astype(np.int64), 0)
    score = out[:, 2].astype(np.int64)
    if task.last_col:
        score = np.maximum(score, out[:, 1])
        score = np.maximum(score, task.top(m))
    if task.last_row:
        score = np.maximum(score, out[:, 0])
        score = np.maximum(score, task.left(n))
    return score


def scores_from_batch(
    task: SearchTask, ms: np.ndarray, n: np.ndarray, values: np.ndarray
) -> np.ndarray:
    """:func:`scores_from` of many queries at once: ``values[query, target]`` holds the
    kernel's results (local mode ``[..., 1]``: the best; else ``[..., 4]``), ``ms`` the
    queries' lengths, ``n`` the targets'. Returns ``[queries, targets]``: int64, or in local
    mode the kernel's int16 (scores there are 0 ... 32,767; the caller widens on copying)."""
    if task.local:
        return np.maximum(values[:, :, -1], 0)
    score = values[:, :, 2].astype(np.int64)
    if task.last_col:
        np.maximum(score, values[:, :, 1], out=score)
        top = np.array([task.top(int(m)) for m in ms], np.int64)
        np.maximum(score, top[:, None], out=score)
    if task.last_row:
        np.maximum(score, values[:, :, 0], out=score)
        np.maximum(score, task.left(n)[None, :], out=score)
    return score


def query_profile(task: SearchTask, query: np.ndarray, virtual: int, pad: int, dtype):
    """The kernel's query profile ``[virtual + 1, pad + m]``: ``s + o + e`` per target residue
    (rows) and padded query column; the virtual rows and columns reproduce the borders."""
    sc = task.scoring
    oe, o, e = task.oe, sc.gap_open, sc.gap_extend
    m = len(query)
    matrix = sc.matrix.astype(np.int64)
    prof = np.empty((virtual + 1, pad + m), dtype=np.int64)
    k = min(virtual, matrix.shape[1])
    prof[:k, pad:] = matrix[query][:, :k].T
    prof[k:virtual, pad:] = 0  # codes the targets do not use
    prof[:virtual, :pad] = 0 if task.left_zero else -(o + e)
    prof[virtual, pad:] = 0 if task.top_zero else -(o + e)
    prof[virtual, :pad] = 0
    return (prof + oe).astype(dtype)


# --------------------------------------------------------------------------------------------
# Layout of the targets
# --------------------------------------------------------------------------------------------


@dataclass
class _Layout:
    """Some targets in the kernel's chunked, packed layout, uploaded."""

    lpw: int
    order: np.ndarray  # the targets in lane order (lane k holds target order[k])
    rows: np.ndarray  # per chunk
    carry_rows: np.ndarray  # per chunk: first carry row (prefix sums of rows)
    buffers: tuple  # db words, meta, lengths
    bytes: int


def pack_targets(
    codes: list[np.ndarray],
    lengths: np.ndarray,
    order: np.ndarray,
    lpw: int,
    bits: int,
    virtual: int,
):
    """Lay the targets ``order`` (longest first) out in chunks; return (words, meta, lens, rows).

    ``words`` is ``[total words, CHUNK * lpw]`` uint32; ``meta`` per chunk (first word row,
    rows, first carry row, 0); ``lens`` per lane; ``rows`` per chunk.
    """
    per = 32 // bits
    lpc = CHUNK * lpw
    n = len(order)
    n_chunks = max(1, -(-n // lpc))
    lens = np.zeros(n_chunks * lpc, dtype=np.int64)
    lens[:n] = lengths[order]
    per_chunk = lens.reshape(n_chunks, lpc)
    rows = np.maximum(-(-per_chunk.max(axis=1) // per) * per, per)
    row_off = np.concatenate([[0], np.cumsum(rows)])
    grid = np.full((int(row_off[-1]), lpc), virtual, dtype=np.uint8)
    if n:
        flat = np.concatenate([codes[t] for t in order]) if lens.sum() else np.zeros(0, np.uint8)
        lane = np.arange(n)
        chunk = lane // lpc
        # each lane ends on its chunk's last row
        start = row_off[chunk] + rows[chunk] - lens[:n]
        counts = lens[:n]
        first = np.repeat(start - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        grid[first + np.arange(len(flat)), np.repeat(lane % lpc, counts)] = flat
    shifts = (bits * np.arange(per, dtype=np.uint32))[None, :, None]
    words = np.bitwise_or.reduce(
        grid.reshape(-1, per, lpc).astype(np.uint32) << shifts, axis=1
    ).astype(np.uint32)
    meta = np.zeros((n_chunks, 4), dtype=np.int32)
    meta[:, 0] = row_off[:-1] // per
    meta[:, 1] = rows
    meta[:, 2] = row_off[:-1]
    return words, meta, lens.astype(np.int32), rows


# --------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------


@dataclass
class SearchScores:
    """Scores of one query against every target of a :class:`SearchRunner`.

    ``scores[t]`` (int64), ``width[t]`` (16/32; 64 for pairs with an empty side, which the
    oracle scores on the host), ``kernel_seconds`` (OpenCL profiling events), ``launches``,
    ``cells`` (query length x total target length) and ``recomputed`` (targets whose packed
    pass came near the 16-bit limit and were recomputed in int32).
    """

    scores: np.ndarray
    width: np.ndarray
    kernel_seconds: float
    launches: int
    cells: int
    recomputed: int


@dataclass
class BlockResult:
    """Scores of many queries against every target of a :class:`SearchRunner`:
    ``scores[q, t]`` (int64), ``width[q, t]`` (as :class:`SearchScores`), ``kernel_seconds``
    and ``launches`` of the whole block, ``recomputed[q]``."""

    scores: np.ndarray
    width: np.ndarray
    kernel_seconds: float
    launches: int
    recomputed: np.ndarray


def takes_group_kernel(task: SearchTask, local_kernel: str | None, ptx: bool) -> bool:
    """Whether queries of ``task`` take the thread-group kernel (those whose pair table
    fits) with the runner option ``local_kernel`` on a device with (``ptx``) or without
    packed 16-bit PTX (:meth:`SearchRunner.uses_group_kernel`; a device's capabilities
    suffice, no context)."""
    if not task.packable() or local_kernel == "strip":
        return False
    return local_kernel == "group" or ptx


#: Held while a runner makes its GroupSearch (once per runner and PTX setting).
_GROUPS_LOCK = threading.Lock()


def _serialized(call):
    """``call`` behind a lock (a progress callback called from several threads)."""
    lock = threading.Lock()

    def locked(*args):
        with lock:
            return call(*args)

    return locked


@dataclass
class _Chunk:
    """One chunk of queries in :meth:`SearchRunner.score_stream`'s pipeline: its results
    so far and where its batches are."""

    queries: list
    scores: np.ndarray
    widths: np.ndarray
    recomputed: np.ndarray
    began: float
    group: object = None  # the GroupSearch its batches run on
    batches: list = field(default_factory=list)  # rows of each launch batch
    left: int = 0  # batches not collected yet
    jobs: list = field(default_factory=list)  # finishing of collected batches
    wrapped: list = field(default_factory=list)  # (query, one-query results, flags)
    seconds: float = 0.0
    launches: int = 0
    first: float | None = None  # its first launch
    last: float = 0.0  # its last collect
    waited: float = 0.0


class SearchRunner:
    """Targets uploaded to one device, ready to be searched with any number of queries.

    Parameters
    ----------
    dctx : DeviceContext
    targets : sequence of 1-D uint8 arrays
        Residue codes (indices into a scoring matrix); empty targets are allowed.
    strip : int, optional
        Query columns per register strip (default :data:`GPU_STRIP` / :data:`CPU_STRIP`); a
        multiple of 8.
    group : int, optional
        Work-items per work-group (a multiple of :data:`CHUNK`).
    ptx : bool, optional
        Packed kernel through inline PTX (default: where the device has it).
    shifted : bool, optional
        Global mode in the shifted frame (four add-max steps a cell; default True).
    best3 : bool, optional
        Local mode: one three-input max for the running best of two cells (default True).
    profile : {"local", "global"}, optional
        Where the kernel reads the query profile: a copy in local memory per work-group
        (default) or global memory through the caches.
    local_kernel : {"auto", "strip", "group"}, optional
        The 16-bit pass: the thread-group kernel (``search_group.cl``) or the strip kernel.
        "auto" (default): the group kernel in every mode on devices with packed 16-bit PTX
        (NVIDIA sm_90+) wherever the query's pair table fits local memory (H100: local
        3,520 GCUPS; global and semiglobal 3,065 / 3,070 against the strip kernel's 1,513 /
        1,523 in issue 13's measurements, and ``bench/opencl_search.py check`` passed in every
        mode); "group": the group kernel on any device (how PoCL tests it); "strip": never.
    residues : ndarray of uint8, optional
        Every target's codes in one buffer, in any order (where the caller has one: saves
        concatenating them again to find the letters in use).
    lengths : ndarray of int64, optional
        The targets' lengths, where the caller has them, with ``targets`` contiguous uint8
        arrays (views of one ragged block: 200,000 of them are taken as they are, not
        checked and measured one by one).
    """

    def __init__(
        self,
        dctx: DeviceContext,
        targets,
        strip: int | None = None,
        group: int | None = None,
        ptx: bool | None = None,
        shifted: bool | None = None,
        best3: bool | None = None,
        profile: str | None = None,
        local_kernel: str | None = None,
        residues: np.ndarray | None = None,
        lengths: np.ndarray | None = None,
    ) -> None:
        self.dctx = dctx
        if lengths is not None:
            self.codes = list(targets)
            self.lengths = np.asarray(lengths, np.int64)
            if len(self.lengths) != len(self.codes):
                raise OptionError(f"{len(self.lengths)} lengths for {len(self.codes)} targets")
        else:
            self.codes = [np.ascontiguousarray(t, dtype=np.uint8) for t in targets]
            self.lengths = np.fromiter((len(t) for t in self.codes), np.int64, len(self.codes))
        if residues is None and self.codes:
            residues = np.concatenate(self.codes)
        self.residues = residues  # every target's codes in one buffer (any order)
        top = int(residues.max(initial=0)) if self.codes else 0
        self.virtual = top + 1
        self.bits = residue_bits(self.virtual)
        self._options(strip, group, ptx, shifted, best3, profile, local_kernel)
        self._groups: dict = {}  # GroupSearch of these targets per PTX setting, made on use
        self.real = np.flatnonzero(self.lengths > 0)
        self.by_length = self.real[longest_first(self.lengths[self.real])]
        self._layouts: dict = {}
        self._kernels: dict = {}
        self._carry = None
        self._carry_bytes = 0

    def _options(self, strip, group, ptx, shifted, best3, profile=None, local_kernel=None) -> None:
        cpu = self.dctx.caps.is_cpu
        gpu_strip = GPU_STRIP_PROTEIN if self.bits >= 5 else GPU_STRIP
        self.strip = strip or (CPU_STRIP if cpu else gpu_strip)
        if self.strip % 8 or self.strip < 8:
            raise OptionError(f"the strip width must be a multiple of 8, not {self.strip}")
        self.group = group or (CPU_GROUP if cpu else GPU_GROUP)
        if self.group % CHUNK:
            raise OptionError(f"the work-group size must be a multiple of {CHUNK}")
        caps = self.dctx.caps
        self.ptx = caps.ptx_s16x2 if ptx is None else bool(ptx) and caps.ptx_s16x2
        self.shifted = SHIFTED if shifted is None else bool(shifted)
        self.best3 = BEST3 if best3 is None else bool(best3)
        self.profile = profile or "local"
        if self.profile not in ("local", "global"):
            raise OptionError(f"profile must be 'local' or 'global', not {profile!r}")
        self.local_kernel = local_kernel or "auto"
        if self.local_kernel not in ("auto", "strip", "group"):
            raise OptionError(
                f"local_kernel must be 'auto', 'strip' or 'group', not {local_kernel!r}"
            )

    def with_options(self, **options) -> SearchRunner:
        """The same targets, their uploaded layouts included, with other kernel options
        (``strip``, ``group``, ``ptx``, ``shifted``, ``best3``: benchmarks compare them)."""
        clone = copy.copy(self)
        chosen = dict.fromkeys(
            ("strip", "group", "ptx", "shifted", "best3", "profile", "local_kernel")
        )
        unknown = set(options) - set(chosen)
        if unknown:
            raise OptionError(f"unknown search kernel options: {', '.join(sorted(unknown))}")
        clone._options(**{**chosen, **options})
        clone._kernels = {}
        return clone

    # -- device objects ---------------------------------------------------------------------

    def defines(self, width: int, local: bool) -> dict:
        """The ``-D`` constants of the kernel at ``width`` (16: packed) for a mode."""
        packed = width == 16
        return {
            "PACKED": int(packed),
            "USE_PTX": int(packed and self.ptx),
            "LOCAL_MODE": int(local),
            "SHIFTED": int(self.shifted and not local),
            "BEST3": int(self.best3 and local),
            "PROFILE_GLOBAL": int(self.profile == "global"),
            "S": self.strip,
            "BITS": self.bits,
            "CHUNK": CHUNK,
        }

    def _kernel(self, width: int, local: bool):
        key = (width, local)
        if key not in self._kernels:
            import pyopencl as cl

            program, _ = build(self.dctx, "search.cl", self.defines(width, local))
            name = kernel_name("local" if local else "global", width)
            with driver_errors(self.dctx.caps, f"preparing {name}"):
                kernel = cl.Kernel(program, "search_strip")
                limit = kernel.get_work_group_info(
                    cl.kernel_work_group_info.WORK_GROUP_SIZE, self.dctx.device
                )
            group = min(self.group, limit, self.dctx.caps.max_work_group) // CHUNK * CHUNK
            if group < CHUNK:
                raise DpalignError(f"{self.dctx.caps.name} runs fewer than {CHUNK} work-items")
            self._kernels[key] = (kernel, group)
        return self._kernels[key]

    def _layout(self, lpw: int, order: np.ndarray, key) -> _Layout:
        if key is not None and key in self._layouts:
            return self._layouts[key]
        import pyopencl as cl

        words, meta, lens, rows = pack_targets(
            self.codes, self.lengths, order, lpw, self.bits, self.virtual
        )
        mf = cl.mem_flags
        ctx = self.dctx.context

        def upload(array):
            data = array if array.size else np.zeros(1, dtype=array.dtype)
            return cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)

        with driver_errors(self.dctx.caps, "uploading the targets"):
            buffers = (upload(words), upload(meta), upload(lens))
        layout = _Layout(
            lpw,
            order,
            rows,
            meta[:, 2].astype(np.int64),
            buffers,
            words.nbytes + meta.nbytes + lens.nbytes,
        )
        if key is not None:
            self._layouts[key] = layout
        return layout

    def _batches(self, layout: _Layout, m: int):
        """Chunk ranges whose boundary columns fit the memory budget (CPU: a cell budget)."""
        caps = self.dctx.caps
        per_row = CHUNK * 8
        budget = int(config.OPENCL_MEMORY_FRACTION * caps.global_mem) - layout.bytes
        budget = min(budget, caps.max_alloc)
        cells_per_chunk = layout.rows * CHUNK * layout.lpw * max(m, 1)
        batches, start = [], 0
        n_chunks = len(layout.rows)
        while start < n_chunks:
            end, used, cells = start, 0, 0
            while end < n_chunks:
                need = int(layout.rows[end]) * per_row
                if end > start and (
                    used + need > budget
                    or (caps.is_cpu and cells + cells_per_chunk[end] > CPU_LAUNCH_CELLS)
                ):
                    break
                used += need
                cells += int(cells_per_chunk[end])
                end += 1
            if used > budget:
                raise DpalignError(
                    f"{caps.name} has too little memory for a target of "
                    f"{int(layout.rows[start])} residues"
                )
            batches.append((start, end, used))
            start = end
        return batches

    def _carry_buffer(self, nbytes: int):
        import pyopencl as cl

        if self._carry is None or self._carry_bytes < nbytes:
            with driver_errors(self.dctx.caps, "allocating the boundary columns"):
                self._carry = cl.Buffer(self.dctx.context, cl.mem_flags.READ_WRITE, max(nbytes, 8))
            self._carry_bytes = max(nbytes, 8)
        return self._carry

    # -- scoring ----------------------------------------------------------------------------

    def score(
        self,
        query: np.ndarray,
        scoring: Scoring,
        mode: str = "local",
        free_ends=(True, True, True, True),
        width: int | None = None,
        progress=None,
        _group_result=None,
    ) -> SearchScores:
        """Score one query (residue codes) against every target.

        Parameters
        ----------
        query : ndarray of uint8
        scoring : Scoring
        mode : {"local", "global", "semiglobal"}
        free_ends : 4-tuple of bool
            Normalised (:func:`dpalign.scoring.free_ends_tuple`).
        width : {None, 16, 32}
            None/16: packed 16-bit where it is exact, int32 elsewhere; 32: int32 only.
        progress : callable, optional
            Called with the cells of each finished launch.
        """
        query = self._checked(query, scoring, width)
        task = SearchTask.of(scoring, mode, free_ends)
        m = len(query)
        n_targets = len(self.codes)
        scores = np.zeros(n_targets, dtype=np.int64)
        widths = np.full(n_targets, 64, dtype=np.uint8)
        self._empty_pairs(task, query, scores)
        if m == 0 or not len(self.real):
            return SearchScores(scores, widths, 0.0, 0, 0, 0)
        seconds, launches = 0.0, 0
        todo = self.by_length
        recomputed = 0
        group = self._group_kernel(task, query) if width != 32 else None
        if group is not None:
            found, flagged, s, k = _group_result or group.score(query, task)
            seconds, launches = seconds + s, launches + k
            good = ~flagged[todo]
            picked = todo[good]
            scores[picked] = scores_from(task, m, self.lengths[picked], found[picked])
            widths[picked] = 16
            recomputed = int((~good).sum())
            todo = todo[~good]
            if progress is not None:
                progress(m * int(self.lengths.sum()))
            width = 32  # whatever is left wrapped in 16 bits
        if width is None and task.local and self.bits >= 5 and not self.dctx.caps.is_cpu:
            width = LOCAL_PROTEIN_WIDTH
        if width != 32 and task.packable():
            low = task.low_ok(m, self.lengths[todo], NEG16)
            if low.mean() >= 0.5:
                layout = self._layout(2, self.by_length, ("packed", 2))
                out, s, k = self._run(layout, 16, task, query, progress)
                seconds, launches = seconds + s, launches + k
                shifted = self.shifted and not task.local
                good = low & ~task.flagged(out[: len(todo), 3], self.strip, shifted)
                picked = todo[good]
                scores[picked] = scores_from(task, m, self.lengths[picked], out[: len(todo)][good])
                widths[picked] = 16
                recomputed = int((low & ~good).sum())
                todo = todo[~good]
        if len(todo):
            self._check_int32(task, m, self.lengths[todo])
            key = ("int32",) if len(todo) == len(self.by_length) else None
            layout = self._layout(1, todo, key)
            out, s, k = self._run(layout, 32, task, query, progress)
            seconds, launches = seconds + s, launches + k
            scores[todo] = scores_from(task, m, self.lengths[todo], out[: len(todo)])
            widths[todo] = 32
        cells = m * int(self.lengths.sum())
        return SearchScores(scores, widths, seconds, launches, cells, recomputed)

    def score_many(
        self,
        queries,
        scoring: Scoring,
        mode: str = "local",
        free_ends=(True, True, True, True),
        width: int | None = None,
        progress=None,
    ) -> list[SearchScores]:
        """:meth:`score` of each query (a list of code arrays), as :meth:`score_block`
        computes them: many queries per launch on the thread-group kernel."""
        block = self.score_block(queries, scoring, mode, free_ends, width, progress)
        n = max(len(queries), 1)
        m = [len(q) for q in queries]
        total = int(self.lengths.sum())
        return [
            SearchScores(
                block.scores[k],
                block.width[k],
                block.kernel_seconds / n,
                block.launches,
                m[k] * total,
                int(block.recomputed[k]),
            )
            for k in range(len(queries))
        ]

    def score_block(
        self,
        queries,
        scoring: Scoring,
        mode: str = "local",
        free_ends=(True, True, True, True),
        width: int | None = None,
        progress=None,
    ) -> BlockResult:
        """Scores of many queries (a list of code arrays) against every target.

        On the thread-group kernel the queries run in batches of one length class
        (:meth:`GroupSearch.batches <dpalign.kernels_cl.search_group.GroupSearch.batches>`),
        each batch a launch per bucket with the queries along the range's second dimension,
        its results read back in one copy and finished with whole-array NumPy; two batches in
        flight, so the device computes the next batch while the host finishes this one. Pairs
        flagged in 16 bits are recomputed per query in int32, and queries the group kernel
        does not take (an empty query, a pair table too big for local memory, ``width=32``,
        devices where the strip kernel runs) go through :meth:`score` one by one.
        """
        (result,) = self.score_stream([queries], scoring, mode, free_ends, width, progress)
        return result

    def score_stream(
        self,
        chunks: Iterable,
        scoring: Scoring,
        mode: str = "local",
        free_ends=(True, True, True, True),
        width: int | None = None,
        progress=None,
    ) -> Iterator[BlockResult]:
        """:meth:`score_block` of each chunk of ``chunks`` (lists of code arrays), yielded in
        order, from one pipeline of batches: the next chunk's first batches are launched
        before this chunk's last results are back, so the device does not wait for the host
        at a chunk's end (the drain and refill cost ~0.3 s a chunk on the H100). A chunk is
        taken from ``chunks`` when the pipeline reaches it (``FLIGHT - 1`` batches ahead);
        the results of the chunks before it have been yielded or are being finished.
        """
        task = SearchTask.of(scoring, mode, free_ends)
        if progress is not None:  # called from the finishing threads, one at a time
            progress = _serialized(progress)
        source = iter(chunks)
        opened: deque[_Chunk] = deque()  # taken, not yet yielded, in order
        todo: deque = deque()  # (chunk, rows) not launched yet
        flight: deque = deque()  # (chunk, rows, pending) launched, not collected
        launched = 0
        totals = {"chunks": 0, "batches": 0, "first": None, "kernels": 0.0, "exhausted": False}

        def take() -> bool:
            queries = next(source, None)
            if queries is None:
                totals["exhausted"] = True
                return False
            chunk = self._open_chunk(list(queries), task, width, progress)
            opened.append(chunk)
            todo.extend((chunk, rows) for rows in chunk.batches)
            return True

        def launch() -> None:
            nonlocal launched
            while not todo and take():
                pass
            if todo:
                chunk, rows = todo.popleft()
                mark = time.perf_counter()
                pending = chunk.group.submit(
                    [chunk.queries[k] for k in rows], task, slot=launched % FLIGHT
                )
                if chunk.first is None:
                    chunk.first = time.perf_counter()
                if not launched:
                    log.info(
                        "opencl search: the first batch's launches submitted in %.3f s, %.3f s "
                        "after its chunk was opened",
                        chunk.first - mark, chunk.first - chunk.began,
                    )  # fmt: skip
                launched += 1
                flight.append((chunk, rows, pending))

        with ThreadPoolExecutor(FINISHERS, thread_name_prefix="dpalign-finish") as finisher:
            for _ in range(FLIGHT - 1):
                launch()
            totals["first"] = time.perf_counter()
            while True:
                # A chunk is closed once its batches are finished, not waited for while
                # there are batches to collect: this thread goes on launching meanwhile.
                while (
                    opened
                    and opened[0].left == 0
                    and (not flight or all(job.done() for job in opened[0].jobs))
                ):
                    chunk = opened.popleft()
                    totals["chunks"] += 1
                    totals["batches"] += len(chunk.batches)
                    result = self._close_chunk(chunk, scoring, mode, free_ends, width)
                    totals["kernels"] += result.kernel_seconds
                    if totals["exhausted"] and not (opened or flight) and totals["chunks"] > 1:
                        waited = sum(g.layout_waited for g in self._groups.values())
                        log.info(
                            "opencl search: %d chunks in one pipeline, %d batches, %.3f s from "
                            "the first launch to the last result; kernels %.3f s; %.3f s "
                            "waiting for bucket layouts",
                            totals["chunks"], totals["batches"],
                            time.perf_counter() - totals["first"], totals["kernels"], waited,
                        )  # fmt: skip
                    yield result
                if not flight:
                    break
                launch()  # behind the FLIGHT - 1 queued: its slot's last batch is collected
                chunk, rows, pending = flight.popleft()
                mark = time.perf_counter()
                chunk.group.wait_for(pending)
                chunk.last = time.perf_counter()
                chunk.waited += chunk.last - mark
                # the raw results' gather and the scores on the finishing thread: this one
                # goes straight back to launching
                job = finisher.submit(self._finish, chunk, rows, pending, task, progress)
                chunk.jobs.append(job)
                chunk.left -= 1

    def _open_chunk(self, queries, task: SearchTask, width, progress) -> _Chunk:
        """A chunk's arrays and batches; the queries the group kernel does not take are
        scored here, one by one."""
        began = time.perf_counter()
        sc = task.scoring
        queries = [self._checked(q, sc, width) for q in queries]
        nq, n_targets = len(queries), len(self.codes)
        # every row is written (by score() here or a batch), so no fill pass first
        chunk = _Chunk(
            queries,
            np.empty((nq, n_targets), dtype=np.int64),
            np.empty((nq, n_targets), dtype=np.uint8),
            np.zeros(nq, dtype=np.int64),
            began,
        )
        eligible: list[int] = []
        if width != 32 and len(self.real):
            for k, query in enumerate(queries):
                g = self._group_kernel(task, query) if len(query) else None
                if g is not None:
                    chunk.group = g
                    eligible.append(k)
        chosen = set(eligible)
        ends = task.ends
        for k, query in enumerate(queries):
            if k not in chosen:
                one = self.score(query, sc, task.mode, ends, width, progress)
                chunk.scores[k], chunk.widths[k] = one.scores, one.width
                chunk.seconds += one.kernel_seconds
                chunk.launches += one.launches
                chunk.recomputed[k] = one.recomputed
        if eligible:
            chunk.batches = [
                [eligible[j] for j in batch]
                for batch in chunk.group.batches([queries[k] for k in eligible])
            ]
        chunk.left = len(chunk.batches)
        return chunk

    def _finish(self, chunk: _Chunk, rows, pending, task: SearchTask, progress):
        """A batch whose results are on the host into its rows of the chunk's ``scores`` and
        ``widths`` (NumPy, on one of the finishing threads: the launching thread goes
        straight back to the device); returns the batch's kernel seconds and launches."""
        got = chunk.group.collect(pending)
        queries = chunk.queries
        ms = np.array([len(queries[k]) for k in rows], np.int64)
        part = scores_from_batch(task, ms, self.lengths, got.values)
        hot = got.flagged.any(axis=1)
        empty = len(self.real) < len(self.lengths)
        width_part = np.where(self.lengths > 0, 16, 64).astype(np.uint8)
        for j, k in enumerate(rows):
            if empty:
                self._empty_pairs(task, queries[k], part[j])
            if hot[j]:  # rare: a score near 32,767 or a long global pair
                chunk.wrapped.append((k, got.results(j), got.flagged[j]))
        chunk.widths[rows] = width_part
        chunk.scores[rows] = part
        if progress is not None:
            progress(int(ms.sum()) * int(self.lengths.sum()))
        return got.seconds, got.launches

    def _close_chunk(self, chunk: _Chunk, scoring, mode, free_ends, width) -> BlockResult:
        """A chunk whose batches are all collected: its finishing waited for, its wrapped
        pairs recomputed in int32; its result."""
        for job in chunk.jobs:
            seconds, launches = job.result()
            chunk.seconds += seconds
            chunk.launches += launches
        for k, found, flagged in sorted(chunk.wrapped, key=lambda w: w[0]):
            one = self.score(
                chunk.queries[k], scoring, mode, free_ends, width, None, (found, flagged, 0.0, 0)
            )
            chunk.scores[k], chunk.widths[k] = one.scores, one.width
            chunk.seconds += one.kernel_seconds
            chunk.launches += one.launches
            chunk.recomputed[k] = one.recomputed
        end = time.perf_counter()
        if chunk.batches:
            log.info(
                "opencl search: %d queries in %d batches, %.3f s: %.3f s to the first launch, "
                "%.3f s waiting for results, %.3f s on the host after the last; kernels %.3f s",
                len(chunk.queries), len(chunk.batches), end - chunk.began,
                chunk.first - chunk.began, chunk.waited, end - chunk.last, chunk.seconds,
            )  # fmt: skip
        return BlockResult(
            chunk.scores, chunk.widths, chunk.seconds, chunk.launches, chunk.recomputed
        )

    def _checked(self, query, scoring: Scoring, width) -> np.ndarray:
        if width not in (None, 16, 32):
            raise OptionError(f"the OpenCL search kernels compute in 16 or 32 bits, not {width}")
        query = np.ascontiguousarray(query, dtype=np.uint8)
        if len(query) and int(query.max()) >= scoring.matrix.shape[0]:
            raise OptionError("the query has codes outside the scoring matrix")
        if self.virtual - 1 >= scoring.matrix.shape[1] and len(self.real):
            raise OptionError("the targets have codes outside the scoring matrix")
        return query

    def prepare(
        self,
        queries,
        scoring: Scoring,
        mode: str,
        free_ends,
        width=None,
        threads: int | None = None,
        build: bool = True,
    ) -> None:
        """Build the thread-group programs that ``queries`` (a list of code arrays) will
        take, up to ``threads`` at a time (default: ``search_group.build_threads()``), and
        lay out their buckets, before the first is scored (``build`` False: the layouts
        only, e.g. while another thread builds the programs)."""
        from .search_group import build_threads

        threads = threads or build_threads()
        if width == 32:
            return
        task = SearchTask.of(scoring, mode, free_ends)
        lengths = {}
        for query in queries:
            group = self._group_kernel(task, np.asarray(query, dtype=np.uint8))
            if group is not None:
                lengths.setdefault(id(group), (group, set()))[1].add(len(query))
        for group, ms in lengths.values():
            group.build_for(sorted(ms), not task.local, threads, scoring, build)

    def uses_group_kernel(self, task: SearchTask) -> bool:
        """Whether queries of ``task`` (those whose pair table fits) take the thread-group
        kernel here."""
        return takes_group_kernel(task, self.local_kernel, bool(self.ptx))

    def _group_kernel(self, task: SearchTask, query: np.ndarray):
        """The thread-group kernel for this query, or None where the strip kernel runs
        (scorings the packed kernels cannot hold, a pair table too big for local memory, and
        by default devices without packed 16-bit PTX)."""
        if not self.uses_group_kernel(task):
            return None
        group = self._groups.get(self.ptx)
        if group is None:
            from .search_group import GroupSearch

            with _GROUPS_LOCK:  # a backend's prepare() may be at it on another thread
                if self.ptx not in self._groups:
                    self._groups[self.ptx] = GroupSearch(
                        self.dctx, self.codes, self.lengths, ptx=self.ptx, residues=self.residues
                    )
                    # the batches this runner keeps in flight and gathers at once
                    self._groups[self.ptx].slots = FLIGHT
                    self._groups[self.ptx].pool = FLIGHT + FINISHERS
                group = self._groups[self.ptx]
        return group if group.fits(query) else None

    def _empty_pairs(self, task: SearchTask, query: np.ndarray, scores: np.ndarray) -> None:
        """Pairs with an empty side align to gaps only: the oracle's score, once per length."""
        sc = task.scoring
        ends = task.ends
        cache: dict[int, int] = {}
        empty_query = len(query) == 0
        for t in np.flatnonzero(self.lengths == 0) if not empty_query else range(len(self.codes)):
            n = int(self.lengths[t])
            if n not in cache:
                target = self.codes[t] if empty_query else np.zeros(0, np.uint8)
                cache[n] = reference.pairwise_score(
                    query, target, sc.matrix, sc.gap_open, sc.gap_extend, task.mode, ends
                ).score
            scores[t] = cache[n]

    def _check_int32(self, task: SearchTask, m: int, n: np.ndarray) -> None:
        sc = task.scoring
        smax = int(np.abs(sc.matrix).max(initial=0))
        hi = max(int(sc.matrix.max(initial=0)), 0) * min(m, int(n.max(initial=0)))
        if (
            smax + task.oe > INT32_PARAM_LIMIT
            or not task.low_ok(m, n, NEG32).all()
            or hi + smax >= 2**31 - 2**20
        ):
            raise DpalignError(
                f"scores of a query of length {m} against targets of up to {int(n.max())} "
                f"residues with {sc} overflow the 32-bit OpenCL kernels"
            )

    def _run(self, layout: _Layout, width: int, task: SearchTask, query, progress):
        """Every batch and segment of one layout; return (results [lanes, 4], seconds, n)."""
        import pyopencl as cl

        dctx, caps = self.dctx, self.dctx.caps
        kernel, group = self._kernel(width, task.local)
        m = len(query)
        strips = -(-m // self.strip)
        pad = strips * self.strip - m
        dtype = np.int16 if width == 16 else np.int32
        prof = query_profile(task, query, self.virtual, pad, dtype)
        letters = prof.shape[0]
        words = np.ascontiguousarray(prof).view(np.uint32)  # the kernel reads 32-bit words
        vpw = 4 // prof.itemsize  # values per word
        per_strip = letters * self.strip * prof.itemsize
        local_cap = min(PROFILE_LOCAL_MAX, caps.local_mem - 1024)
        seg_strips = max(1, min(strips, local_cap // per_strip))
        if self.profile == "global":
            seg_strips = strips  # one segment; the kernel reads rows of the whole profile
        segments = [(s, min(seg_strips, strips - s)) for s in range(0, strips, seg_strips)]
        lstride = seg_strips * self.strip // vpw  # in words
        if (lstride * 4) % 128 == 0 and not caps.is_cpu:
            lstride += 4  # rows start in different banks (16 bytes on)
        lpc = CHUNK * layout.lpw
        n_lanes = len(layout.rows) * lpc
        mf = cl.mem_flags
        ctx = dctx.context
        batches = self._batches(layout, m)
        with driver_errors(caps, "allocating search buffers"):
            prof_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=words)
            out_buf = cl.Buffer(ctx, mf.READ_WRITE, n_lanes * 16)
            carry = self._carry_buffer(max(used for _, _, used in batches))
        local = cl.LocalMemory(letters * lstride * 4 if self.profile == "local" else 16)
        o, e = task.scoring.gap_open, task.scoring.gap_extend
        seconds, launches = 0.0, 0
        name = kernel_name(task.mode, width)
        with driver_errors(caps, f"running {name}"):
            for start, end, _ in batches:
                items = (end - start) * CHUNK
                global_size = -(-items // group) * group
                for seg, (s0, count) in enumerate(segments):
                    params = np.array(
                        [
                            start,
                            end,
                            int(layout.carry_rows[start]),
                            strips * self.strip,
                            s0 * self.strip,
                            count,
                            lstride,
                            letters,
                            int(seg == 0),
                            int(seg == len(segments) - 1),
                            o,
                            e,
                            int(task.top_zero),
                            int(task.left_zero),
                            pad,
                            0,
                        ],
                        dtype=np.int32,
                    )
                    pbuf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=params)
                    event = kernel(
                        dctx.queue,
                        (global_size,),
                        (group,),
                        *layout.buffers,
                        prof_buf,
                        carry,
                        out_buf,
                        pbuf,
                        local,
                    )
                    wait(event)
                    seconds += (event.profile.end - event.profile.start) * 1e-9
                    launches += 1
                cells = m * int(self.lengths[layout.order[start * lpc : end * lpc]].sum())
                if progress is not None:
                    progress(cells)
            out = np.empty((n_lanes, 4), dtype=np.int32)
            cl.enqueue_copy(dctx.queue, out, out_buf)
        return out, seconds, launches
