"""Host side of the PaPaRa OpenCL kernels (``papara.cl``): widths, layouts, batches, launches.

A :class:`PaparaRunner` holds one set of edge profiles on one device (uploaded once, in the
layout its design wants) and scores any number of reads against all of them:

validate → choose each read's width → sort reads by length → size batches from device memory →
upload (pinned host memory, a copy queue) → launch (one work-group per read and group of
profiles) → download while the next batch runs → combine last-row / last-column maxima.

Kernel names follow ``papara_score_opencl_{design}_{i16,i32}`` (:data:`KERNELS`).

Packing, by alphabet
--------------------
* DNA: an element is one byte, ``state | flag << 4`` (the strip design and the square blocks);
  the blocked design's middle is :func:`dpalign.alphabet.pack5`-compressed, 6 elements per
  uint32 (the seed paper's layout).
* Protein: states need 20 bits, so an element is a uint32 ``state | flag << 20`` everywhere,
  the blocked design's middle included (one element per word: 21 bits do not fit 5).
* Packed 16-bit kernels put two profiles' cells in one register: DNA states go to bits 11-14 of
  each half so that one AND and one fused add-min give the match bonus of both; protein
  states stay 20-bit and are tested lane by lane (two more instructions per pair of cells).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .. import config
from ..alphabet import pack5
from ..errors import DpalignError, OptionError
from ..scoring import PaparaScoring
from .context import DeviceContext, driver_errors, wait
from .names import PAPARA, PAPARA_DESIGNS
from .programs import build

DESIGNS = PAPARA_DESIGNS


@dataclass(frozen=True)
class KernelSpec:
    """One entry of the kernel table: a design at an integer width."""

    name: str
    design: str
    width: int

    @property
    def entry(self) -> str:
        """The ``__kernel`` function in ``papara.cl``."""
        return f"papara_{self.design}"

    @property
    def lanes_per_item(self) -> int:
        """Profiles per work-item: packed 16-bit kernels take two."""
        return 2 if self.width == 16 else 1


KERNELS = {name: KernelSpec(name, design, width) for name, (design, width) in PAPARA.items()}


#: Work-items per work-group of the edge-profile kernel (one column each).
PROFILE_GROUP = 64


def edge_profiles(
    dctx: DeviceContext, tips, gap_state: int, ops, trans, n_edges: int, cgap: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """PaPaRa's (E, n) edge states and uint8 gap flags from a combine schedule
    (:func:`dpalign.papara.profiles.combine_schedule`) on the device of ``dctx``
    (``papara_profiles.cl``: a work-item per column runs the whole schedule), bit-identical to
    the CPU kernel; None where the device has no double precision or too little memory for
    every subtree's values (the CPU kernel then runs)."""
    import pyopencl as cl

    tips = np.ascontiguousarray(tips)
    n_tips, n = tips.shape
    ops = np.ascontiguousarray(ops, dtype=np.int64)
    trans = np.ascontiguousarray(trans, dtype=np.float64)
    if tips.dtype == np.uint8:
        state_type = "uchar"
    elif tips.dtype == np.uint32:
        state_type = "uint"
    else:
        return None
    caps, device = dctx.caps, dctx.device
    if not n or not len(ops) or "cl_khr_fp64" not in device.extensions:
        return None
    n_slots = n_tips + int((ops[:, 0] >= 0).sum())
    slot_bytes = n_slots * n * 8
    total = slot_bytes * 2 + n_slots * n * (tips.itemsize + 1) + n_edges * n * (tips.itemsize + 1)
    if slot_bytes > caps.max_alloc or total > config.OPENCL_MEMORY_FRACTION * caps.global_mem:
        return None
    program, _ = build(dctx, "papara_profiles.cl", {"STATE_T": state_type})
    mf = cl.mem_flags
    ctx, queue = dctx.context, dctx.queue
    with driver_errors(caps, "computing the edge profiles"):
        state = cl.Buffer(ctx, mf.READ_WRITE, n_slots * n * tips.itemsize)
        lik0 = cl.Buffer(ctx, mf.READ_WRITE, slot_bytes)
        lik1 = cl.Buffer(ctx, mf.READ_WRITE, slot_bytes)
        aux = cl.Buffer(ctx, mf.READ_WRITE, n_slots * n)
        ops_d = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ops)
        trans_d = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=trans)
        out_states = np.empty((n_edges, n), dtype=tips.dtype)
        out_flags = np.empty((n_edges, n), dtype=np.uint8)
        states_d = cl.Buffer(ctx, mf.WRITE_ONLY, max(1, out_states.nbytes))
        flags_d = cl.Buffer(ctx, mf.WRITE_ONLY, max(1, out_flags.nbytes))
        cl.enqueue_copy(queue, state, tips, is_blocking=False)  # the tips are slots 0..T-1
        group = min(PROFILE_GROUP, caps.max_work_group)
        cl.Kernel(program, "edge_profiles")(
            queue,
            (-(-n // group) * group,),
            (group,),
            np.int32(n),
            np.int32(n_tips),
            np.int32(len(ops)),
            tips.dtype.type(gap_state),
            np.int32(1 if cgap else 0),
            ops_d,
            trans_d,
            state,
            lik0,
            lik1,
            aux,
            states_d,
            flags_d,
        )
        cl.enqueue_copy(queue, out_states, states_d, is_blocking=False)
        done = cl.enqueue_copy(queue, out_flags, flags_d, is_blocking=False)
        wait(done)
        for buf in (state, lik0, lik1, aux, ops_d, trans_d, states_d, flags_d):
            buf.release()
    return out_states, out_flags


def kernel_spec(design: str, width: int) -> KernelSpec:
    """The table entry for a design and width."""
    if design not in DESIGNS:
        raise OptionError(f"unknown OpenCL PaPaRa design {design!r} (designs: strip, blocked)")
    return KERNELS[f"papara_score_opencl_{design}_i{width}"]


@dataclass(frozen=True)
class StripGeometry:
    """The strip design's compile-time shape (papara.cl): strip width S, row-loop
    unrolling (1 or 2), and SPLIT (unfused add-max steps)."""

    strip: int
    row_unroll: int = 1
    split: bool = False


#: Strip geometry per kernel width on GPUs, as measured fastest on the H100 (BENCHMARKS.md,
#: "PaPaRa (OpenCL)"), and on CPU devices (small S: PoCL compiles it quickly).
GPU_STRIP = {16: StripGeometry(32, 2, False), 32: StripGeometry(32, 2, False)}
CPU_STRIP = StripGeometry(8)
#: The seed's rectangular block: 12 columns (two 5-bit-packed words), unrolled.
BLOCK_WIDTH = 12
#: The square blocks are as wide as the longest read, at most this.
SQUARE_MAX = 256
#: Work-items per work-group, at most (a kernel or the device may allow fewer).
GROUP_MAX = 256
#: Cells per launch on CPU devices (progress granularity); GPUs are limited by memory only.
CPU_LAUNCH_CELLS = 2_000_000_000

#: Packed kernels: -inf is -30720 in each half, and every parameter must stay within
#: +-511 for the match-bonus trick (its constants absorb E's open in the strip design) and
#: the sentinel arithmetic not to wrap (papara.cl).
NEG16 = -30720
PACKED_PARAM_LIMIT = 511
NEG32 = -(1 << 29)
INT32_PARAM_LIMIT = 1 << 20


# --------------------------------------------------------------------------------------------
# Scoring constants and widths
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelScoring:
    """The kernel's constants for a :class:`~dpalign.scoring.PaparaScoring`.

    Read off its :meth:`~dpalign.scoring.PaparaScoring.max_form` (the one derivation both
    backends share): F opens at ``go`` and extends at ``ge``, E opens at ``goe`` and extends at
    ``gee`` (both 0 on flagged columns); a diagonal step adds ``mm`` plus ``ma`` on a match plus
    ``mc`` on a flagged column; the left border is ``H[j][-1] = lb (j + 1)``. bmc2012 (lower is
    better) runs negated (``negate``) and takes its score over the last row only
    (``last_column`` false).
    """

    go: int
    ge: int
    goe: int
    gee: int
    ma: int
    mc: int
    mm: int
    lb: int
    last_column: bool
    negate: bool

    @property
    def gov(self) -> int:
        """E open on virtual columns: low enough that E leaves them below any real E."""
        return min(0, self.goe - self.gee) - 1

    @classmethod
    def of(cls, scoring: PaparaScoring) -> KernelScoring:
        form = scoring.max_form()
        if form.border0 != form.border_step:
            raise DpalignError(f"the OpenCL PaPaRa kernels need H[j][-1] = lb (j + 1): {form}")
        return cls(
            go=form.f_open,
            ge=form.f_ext,
            goe=form.e_open,
            gee=form.e_ext,
            ma=form.match - form.mismatch,
            mc=form.cgap,
            mm=form.mismatch,
            lb=form.border_step,
            last_column=form.last_column,
            negate=form.negate,
        )

    def params(self) -> tuple[int, ...]:
        return (self.go, self.ge, self.goe, self.gee, self.ma, self.mc, self.mm)

    def packable(self) -> bool:
        """Whether the packed 16-bit kernels can hold these constants."""
        return max(abs(v) for v in self.params()) <= PACKED_PARAM_LIMIT


def kernel_range(scoring: PaparaScoring, m: int) -> tuple[int, int]:
    """Bounds on every value the kernel computes for a read of length m (max form)."""
    lo, hi = scoring.bounds(m)
    if scoring.minimize:
        return -hi, -lo
    return lo + min(scoring.match, 0), hi  # SM with a negative match score


def frame_margin(ks: KernelScoring, strip: int) -> int:
    """How far above H the strip design's shifted frame reaches (papara.cl): S E-opens + GO."""
    return strip * max(-ks.goe, -ks.gov) - ks.go


def read_width(scoring: PaparaScoring, m: int, allow16: bool = True, margin: int = 0) -> int:
    """The integer width (16 or 32) of the kernel that scores a read of length m.

    Starts from ``scoring.width_for(m)`` with the packed kernels' sentinel as headroom and
    checks the kernel's own range (bmc2012 runs negated, a negative match lowers SM, the
    strip design's frame reaches ``margin`` above H), so a 16-bit kernel never wraps.
    """
    ks = KernelScoring.of(scoring)
    lo, hi = kernel_range(scoring, m)
    headroom = -NEG16 - 2**15 + 1 - min(scoring.match, 0)  # lo - headroom >= -32768 <=> lo > NEG16
    if (
        allow16
        and ks.packable()
        and scoring.width_for(m, headroom=max(headroom, 0)) == 16
        and lo > NEG16
        and hi + margin < 2**15
    ):
        return 16
    if max(abs(v) for v in ks.params()) > INT32_PARAM_LIMIT or lo <= NEG32 // 2 or hi >= 2**29:
        raise DpalignError(
            f"a read of length {m} with scoring {scoring} overflows the 32-bit OpenCL kernels"
        )
    return 32


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------

DNA_FLAG, DNA_VIRTUAL = 1 << 4, 1 << 5
PROTEIN_FLAG, PROTEIN_VIRTUAL = 1 << 20, 1 << 21


def elements(states: np.ndarray, flags: np.ndarray, protein: bool) -> np.ndarray:
    """Profile states and gap flags ``[n, L]`` as kernel elements (``state | flag << k``)."""
    if protein:
        return (states.astype(np.uint32) & 0xFFFFF) | (flags.astype(np.uint32) << 20)
    return (states.astype(np.uint8) & 15) | (flags.astype(np.uint8) << 4)


def strip_layout(elems: np.ndarray, strip: int, protein: bool) -> tuple[np.ndarray, int]:
    """Left-pad ``[n, L]`` elements with virtual columns to whole strips; return (array, pad)."""
    n, lanes = elems.shape
    pad = -n % strip
    virtual = PROTEIN_VIRTUAL if protein else DNA_VIRTUAL
    out = np.empty((n + pad, lanes), dtype=elems.dtype)
    out[:pad] = virtual
    out[pad:] = elems
    return out, pad


@dataclass(frozen=True)
class BlockedLayout:
    """The seed's three parts: uncompressed head and tail squares, a compressed middle."""

    head: np.ndarray
    mid: np.ndarray
    tail: np.ndarray
    nh: int
    nb: int
    nt: int


def blocked_layout(
    states: np.ndarray, flags: np.ndarray, square: int, width: int, protein: bool
) -> BlockedLayout:
    """Split ``[n, L]`` profiles into a head square, NB middle blocks and a tail square.

    The head is ``min(n, square)`` columns; the middle holds as many whole blocks of ``width``
    columns as leave at least ``square`` columns (or all that remain) for the tail, so the
    last column is always in a square block.
    """
    n = states.shape[0]
    nh = min(n, square)
    rest = n - nh
    nb = max(0, rest - square) // width
    nt = rest - nb * width
    elems = elements(states, flags, protein)
    mid_slice = slice(nh, nh + nb * width)
    if protein:
        mid = np.ascontiguousarray(elems[mid_slice]).astype(np.uint32)
    else:
        mid = pack5(states[mid_slice], flags[mid_slice])
    return BlockedLayout(
        np.ascontiguousarray(elems[:nh]),
        np.ascontiguousarray(mid),
        np.ascontiguousarray(elems[nh + nb * width :]),
        nh,
        nb,
        nt,
    )


def group_geometry(lanes: int, lanes_per_item: int, cap: int) -> tuple[int, int]:
    """Work-items per group and groups per read for ``lanes`` profiles.

    A work-group is one read against as many profiles as ``cap`` work-items allow (the seed's
    R_padded when it fits); the lanes are split evenly into groups of a multiple of 32.
    """
    items = math.ceil(lanes / lanes_per_item / 32) * 32
    cap = max(32, cap // 32 * 32)
    groups = math.ceil(items / cap)
    size = math.ceil(items / groups / 32) * 32
    return size, groups


# --------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------


@dataclass
class PaparaScores:
    """Scores of reads against all profiles of a :class:`PaparaRunner`.

    ``scores[q, r]`` (int64), ``width[q]`` (16/32), ``kernel_seconds`` (OpenCL profiling
    events, all launches), ``launches`` and ``cells`` (reads × columns × real profiles).
    """

    scores: np.ndarray
    width: np.ndarray
    kernel_seconds: float
    launches: int
    cells: int


@dataclass
class _Variant:
    spec: KernelSpec
    kernel: object
    group: int  # work-items per group
    groups: int  # groups per read
    lanes: int  # lanes the launch covers (row stride of the reference arrays)
    buffers: tuple
    params: np.ndarray
    square_rows: int  # per-work-item rows of the square blocks' DP row (blocked design)
    carry_local: bool  # strip design: boundary column in local memory


class PaparaRunner:
    """Edge profiles uploaded to one device, ready to score reads.

    Parameters
    ----------
    dctx : DeviceContext
    scoring : PaparaScoring
    states, flags : ndarray, shape (n, R)
        Profile states and gap flags in the inter-reference layout (R lanes, any padding
        lanes included: they are scored and ignored by the caller).
    protein : bool
    design : {"strip", "blocked"}, optional
        Default :data:`dpalign.config.OPENCL_DESIGN`.
    strip, block, square, group_max : int, optional
        Geometry overrides (benchmarks): strip width S (default :data:`GPU_STRIP` /
        :data:`CPU_STRIP`), block width BW (a multiple of 6), square side, work-items per
        group at most.
    carry : {None, "global", "local"}
        Where the strip design keeps its boundary column; None: local memory on GPUs when
        a group of at least 32 work-items fits, else global memory.
    profiles : int, optional
        How many lanes hold real profiles, for cell counts (default: all R).
    ptx : bool, optional
        Packed kernels through inline PTX (default: where the device has it); False uses the
        portable OpenCL C ``short2`` arithmetic everywhere (benchmarks compare the two).
    row_unroll : {1, 2}, optional
        Row-loop unrolling of the strip design.
    split : bool, optional
        Strip design: unfused add-then-max for three of the five steps of a cell (papara.cl).
    """

    def __init__(
        self,
        dctx: DeviceContext,
        scoring: PaparaScoring,
        states: np.ndarray,
        flags: np.ndarray,
        protein: bool,
        design: str | None = None,
        strip: int | None = None,
        block: int | None = None,
        square: int | None = None,
        group_max: int | None = None,
        carry: str | None = None,
        profiles: int | None = None,
        ptx: bool | None = None,
        row_unroll: int | None = None,
        split: bool | None = None,
    ) -> None:
        self.dctx = dctx
        self.scoring = scoring
        self.ks = KernelScoring.of(scoring)
        self.design = design or config.OPENCL_DESIGN
        kernel_spec(self.design, 32)  # validates the name
        self.protein = protein
        self.states = np.ascontiguousarray(states)
        self.flags = np.ascontiguousarray(flags, dtype=np.uint8)
        self.n, self.n_lanes = self.states.shape
        self.profiles = self.n_lanes if profiles is None else profiles
        self.ptx = dctx.caps.ptx_s16x2 if ptx is None else ptx and dctx.caps.ptx_s16x2
        if row_unroll not in (None, 1, 2):
            raise OptionError(f"row_unroll must be 1 or 2, not {row_unroll}")
        self._strip_overrides = {"strip": strip, "row_unroll": row_unroll, "split": split}
        if self.n == 0:
            raise DpalignError("the profiles have no columns")
        self.block = block or BLOCK_WIDTH
        if self.block % 6:
            raise OptionError(f"the block width must be a multiple of 6, not {self.block}")
        self.square_cap = square or SQUARE_MAX
        self.group_max = group_max or GROUP_MAX
        if carry not in (None, "global", "local"):
            raise OptionError(f"carry must be 'global' or 'local', not {carry!r}")
        self.carry = carry
        self._variants: dict[tuple, _Variant] = {}
        self._references: dict[tuple, tuple] = {}

    # -- kernels ------------------------------------------------------------------------------

    def strip_geometry(self, width: int) -> StripGeometry:
        """The strip design's geometry at ``width``: the device default, then overrides."""
        base = CPU_STRIP if self.dctx.caps.is_cpu else GPU_STRIP[width]
        chosen = {k: v for k, v in self._strip_overrides.items() if v is not None}
        return dataclasses.replace(base, **chosen)

    def defines(self, width: int, carry_local: bool = False) -> dict:
        """The ``-D`` constants of this runner's kernel at ``width``."""
        packed = width == 16
        strip = self.strip_geometry(width)
        return {
            "PACKED": int(packed),
            "USE_PTX": int(packed and self.ptx),
            "PROTEIN": int(self.protein),
            "MATCH_NEG": int(self.ks.ma < 0),
            "S": strip.strip,
            "BW": self.block,
            "CARRY_LOCAL": int(carry_local),
            "ROW_UNROLL": strip.row_unroll,
            "SPLIT": int(strip.split),
        }

    def _local_carry_cap(self, m_max: int) -> int:
        """Work-items per group whose boundary columns fit local memory (0: none do)."""
        if self.design != "strip" or self.carry == "global":
            return 0
        if self.carry is None and self.dctx.caps.is_cpu:
            return 0  # a CPU's local memory is ordinary memory: nothing to gain
        cap = self.dctx.caps.local_mem // (max(m_max, 1) * 8) // 32 * 32
        if cap < 32 and self.carry == "local":
            raise OptionError(f"reads of length {m_max} leave no room for a local-memory carry")
        return cap

    def _variant(self, width: int, square: int, m_max: int) -> _Variant:
        if self.design == "strip":
            # Only the blocked design's layout depends on the square side; keying the strip
            # design on it re-laid out and re-uploaded the profiles for every batch whose
            # longest read differed (most calls of a hybrid run's device worker).
            square = 0
        local_cap = self._local_carry_cap(m_max)
        key = (width, square, local_cap)
        if key in self._variants:
            return self._variants[key]
        import pyopencl as cl

        spec = kernel_spec(self.design, width)
        caps = self.dctx.caps
        program, _ = build(self.dctx, "papara.cl", self.defines(width, local_cap > 0))
        with driver_errors(caps, f"preparing {spec.name}"):
            kernel = cl.Kernel(program, spec.entry)
            limit = kernel.get_work_group_info(
                cl.kernel_work_group_info.WORK_GROUP_SIZE, self.dctx.device
            )
        cap = min(self.group_max, limit, caps.max_work_group)
        if spec.design == "blocked":  # two rows of BW cells per work-item in local memory
            cap = min(cap, caps.local_mem // (2 * self.block * 4))
        if local_cap:
            cap = min(cap, local_cap)
        group, groups = group_geometry(self.n_lanes, spec.lanes_per_item, cap)
        lanes = group * groups * spec.lanes_per_item
        ref_key = (spec.design, lanes, square, self.strip_geometry(width).strip)
        if ref_key not in self._references:
            self._references[ref_key] = self._upload_reference(spec, lanes, square)
        buffers, geometry = self._references[ref_key]
        ks = self.ks
        params = np.array(
            [self.n, lanes, 0, ks.go, ks.ge, ks.goe, ks.gee, ks.ma, ks.mc, ks.mm, ks.lb, ks.gov]
            + geometry
            + [1],  # P_ONE
            dtype=np.int32,
        )
        square_rows = max(geometry[2], geometry[4])  # head and tail widths
        variant = _Variant(
            spec, kernel, group, groups, lanes, buffers, params, square_rows, local_cap > 0
        )
        self._variants[key] = variant
        return variant

    def _upload_reference(self, spec: KernelSpec, lanes: int, square: int):
        """Reference buffers in the design's layout, lanes padded with empty profiles."""
        import pyopencl as cl

        states = np.zeros((self.n, lanes), dtype=self.states.dtype)
        flags = np.zeros((self.n, lanes), dtype=np.uint8)
        states[:, : self.n_lanes] = self.states
        flags[:, : self.n_lanes] = self.flags
        mf = cl.mem_flags
        ctx = self.dctx.context

        def upload(array):
            # An empty part (no middle blocks) still needs a valid buffer argument.
            data = array if array.size else np.zeros(1, dtype=array.dtype)
            return cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)

        with driver_errors(self.dctx.caps, "uploading the profiles"):
            if spec.design == "strip":
                strip = self.strip_geometry(spec.width).strip
                array, pad = strip_layout(
                    elements(states, flags, self.protein), strip, self.protein
                )
                return (upload(array),), [array.shape[0] // strip, pad, 0, 0, 0]
            layout = blocked_layout(states, flags, square, self.block, self.protein)
            buffers = (upload(layout.head), upload(layout.mid), upload(layout.tail))
            return buffers, [0, 0, layout.nh, layout.nb, layout.nt]

    # -- scoring ------------------------------------------------------------------------------

    def widths(self, lengths: np.ndarray, width: int | None = None) -> np.ndarray:
        """Each read's kernel width (``width=32`` forces the int32 kernels)."""
        allow16 = width != 32
        strip = self.strip_geometry(16).strip
        margin = frame_margin(self.ks, strip) if self.design == "strip" else 0
        distinct, index = np.unique(np.asarray(lengths, dtype=np.int64), return_inverse=True)
        found = [read_width(self.scoring, int(m), allow16, margin) for m in distinct]
        return np.asarray(found, dtype=np.uint8).reshape(-1)[index.reshape(-1)]

    def score(
        self,
        codes: np.ndarray,
        lengths: np.ndarray,
        width: int | None = None,
        progress=None,
        out: np.ndarray | None = None,
        out_width: np.ndarray | None = None,
    ) -> PaparaScores:
        """Score reads (``codes [Q, m_max]`` states, ``lengths [Q]``) against every profile.

        Parameters
        ----------
        width : {None, 16, 32}
            None: the narrowest safe width per read; 32 forces the int32 kernels; 16 asks
            for the packed kernels where they are safe (the same as None).
        progress : callable, optional
            Called with the cells of each finished launch.
        out : ndarray, shape (Q, lanes), int64, optional
            Where the scores go (rows of reads of length 0 are set to 0); default a new array.
        out_width : ndarray, shape (Q, k), uint8, optional
            Filled with each read's width as its launch finishes (inside the pipeline, not
            after the last kernel); the returned ``width`` is the same either way.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        n_reads = len(lengths)
        if out is None:
            scores = np.zeros((n_reads, self.n_lanes), dtype=np.int64)
        else:
            if out.shape != (n_reads, self.n_lanes) or out.dtype != np.int64:
                raise OptionError(
                    f"out must be int64 of shape {(n_reads, self.n_lanes)}, not "
                    f"{out.dtype} {out.shape}"
                )
            scores = out
            scores[lengths == 0] = 0
        widths = self.widths(lengths, width)
        if self.protein:
            codes = np.asarray(codes, dtype=np.uint32)
        else:
            codes = np.asarray(codes, dtype=np.uint8)
        seconds, launches = 0.0, 0
        square = min(int(lengths.max(initial=1)), self.square_cap, self.n)
        widths[lengths == 0] = 16 if self.ks.packable() else 32
        if out_width is not None:
            out_width[lengths == 0] = widths[lengths == 0, None]
        for w in (16, 32):
            picked = np.flatnonzero((widths == w) & (lengths > 0))
            if not picked.size:
                continue
            order = picked[np.argsort(-lengths[picked], kind="stable")]
            variant = self._variant(w, max(square, 1), int(lengths[order[0]]))
            s, n = self._run_variant(
                variant, codes, lengths, order, (scores, out_width, w), progress
            )
            seconds += s
            launches += n
        cells = int(lengths.sum()) * self.n * self.profiles
        return PaparaScores(scores, widths, seconds, launches, cells)

    def _slots(self, count: int, mstride: int, lanes: int, read_dtype) -> list[_Slot]:
        """Two batch slots big enough for this launch plan, kept for later calls: pinned
        allocations cost milliseconds each, and a hybrid run calls this runner many times."""
        kept = getattr(self, "_kept_slots", None)
        if kept is not None:
            dims, slots = kept
            if (
                dims[0] >= count
                and dims[1] >= count * mstride
                and dims[2] >= lanes
                and dims[3] == np.dtype(read_dtype)
            ):
                return slots
            count = max(count, dims[0])
        # Room for half as many reads again: a hybrid device's takes vary in size from run to
        # run, and two new pinned buffers of ~23 MB each cost a take ~20 ms on the H100 host.
        count += count // 2
        slots = [_Slot(self.dctx, count, mstride, lanes, read_dtype) for _ in range(2)]
        self._kept_slots = ((count, count * mstride, lanes, np.dtype(read_dtype)), slots)
        return slots

    def _batches(self, variant: _Variant, lengths: np.ndarray, order: np.ndarray):
        """Split reads (longest first) into launches that fit the device memory budget.

        The seed's dynamic sizing: as many reads per launch as the device memory left after
        the profiles holds, given the batch's longest read (its boundary column and, for the
        blocked design, its square-block rows are per work-item state).
        """
        caps = self.dctx.caps
        items = variant.group * variant.groups
        ref_bytes = sum(b.size for b in variant.buffers)
        budget = int(config.OPENCL_MEMORY_FRACTION * caps.global_mem) - ref_bytes
        itemsize = 4 if self.protein else 1
        batches, start = [], 0
        share = -(-len(order) // config.OPENCL_PIPELINE_LAUNCHES)
        while start < len(order):
            m = int(lengths[order[start]])
            carry_rows = 0 if variant.carry_local else m
            per_read_state = max(1, items * (carry_rows + variant.square_rows) * 8)
            per_read = per_read_state + variant.lanes * 8 + m * itemsize + 8
            if budget < per_read:
                raise DpalignError(
                    f"{caps.name} has too little memory for one read of length {m} against "
                    f"{self.n_lanes} profiles of {self.n} columns"
                )
            count = min(budget // per_read, caps.max_alloc // per_read_state)
            if caps.is_cpu:
                count = min(count, CPU_LAUNCH_CELLS // (m * self.n * variant.lanes))
            else:
                # Several launches, so that the host's work on one launch's scores overlaps
                # the next one's kernel: one launch for everything left that work exposed
                # after the kernel (~0.2 s of a 2.7 s run on the H100 host).
                row_cells = m * self.n * variant.lanes
                least = -(-config.OPENCL_MIN_LAUNCH_CELLS // row_cells)
                count = min(count, max(least, share))
            count = max(1, min(count, len(order) - start))
            batches.append((start, count, m))
            start += count
        return batches

    def _run_variant(self, variant, codes, lengths, order, into, progress):
        """Launch every batch; copies of batch k+1 overlap the kernel of batch k.
        ``into`` = (scores, widths or None, this variant's width)."""
        import pyopencl as cl

        scores, out_width, width = into

        dctx, caps = self.dctx, self.dctx.caps
        batches = self._batches(variant, lengths, order)
        items = variant.group * variant.groups
        max_count = max(c for _, c, _ in batches)
        mstride = max(m for _, _, m in batches)
        max_state = max(c * m for _, c, m in batches)
        variant.params[2] = mstride
        read_dtype = np.uint32 if self.protein else np.uint8
        mf = cl.mem_flags
        ctx = dctx.context
        with driver_errors(caps, f"allocating buffers for {variant.spec.name}"):
            carry_bytes = 8 if variant.carry_local else items * max_state * 8
            carry = cl.Buffer(ctx, mf.READ_WRITE, max(8, carry_bytes))
            extra = []
            if variant.spec.design == "blocked":
                rows = max(8, items * max_count * variant.square_rows * 8)
                extra = [cl.Buffer(ctx, mf.READ_WRITE, rows)]
            params = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=variant.params)
            slots = self._slots(max_count, mstride, variant.lanes, read_dtype)
        if variant.spec.design == "blocked":  # H and F rows of BW cells per work-item
            local = [cl.LocalMemory(2 * self.block * variant.group * 4)]
        else:  # the boundary column, when it lives in local memory
            local = [cl.LocalMemory(8 * variant.group * mstride if variant.carry_local else 8)]
        seconds = 0.0

        def finish(job):
            nonlocal seconds
            slot, kernel_event, download, rows, count = job
            wait(download)
            out = slot.host_out[: count * variant.lanes * 2].reshape(count, variant.lanes, 2)
            # In int32, widened by the assignment: an int64 copy first made this 3-4x slower
            # (0.2-0.27 s for 16,040 reads x 1,601 profiles on the 2-core machine).
            best = out[:, : self.n_lanes, 0]
            if self.ks.last_column:
                best = np.maximum(best, out[:, : self.n_lanes, 1])
            scores[rows] = np.negative(best) if self.ks.negate else best
            if out_width is not None:
                out_width[rows] = width
            seconds += (kernel_event.profile.end - kernel_event.profile.start) * 1e-9
            if progress is not None:
                progress(int(lengths[rows].sum()) * self.n * self.profiles)

        pending = None
        with driver_errors(caps, f"running {variant.spec.name}"):
            for k, (start, count, m) in enumerate(batches):
                slot = slots[k % 2]
                rows = order[start : start + count]
                host_reads = slot.host_reads[: count * mstride].reshape(count, mstride)
                host_reads[:, :m] = codes[rows, :m]
                slot.host_lengths[:count] = lengths[rows]
                copy = dctx.copy_queue
                up = [
                    cl.enqueue_copy(copy, slot.reads, slot.host_reads, is_blocking=False),
                    cl.enqueue_copy(copy, slot.lengths, slot.host_lengths, is_blocking=False),
                ]
                copy.flush()
                event = variant.kernel(
                    dctx.queue,
                    (items, count),
                    (variant.group, 1),
                    *variant.buffers,
                    slot.reads,
                    slot.lengths,
                    carry,
                    *extra,
                    slot.out,
                    params,
                    *local,
                    wait_for=up,
                )
                dctx.queue.flush()
                download = cl.enqueue_copy(
                    copy, slot.host_out, slot.out, wait_for=[event], is_blocking=False
                )
                copy.flush()
                if pending is not None:
                    finish(pending)  # the host works on batch k-1 while batch k runs
                pending = (slot, event, download, rows, count)
            finish(pending)
        return seconds, len(batches)


class _Slot:
    """Pinned host buffers and device buffers of one batch in flight."""

    def __init__(self, dctx: DeviceContext, count: int, mstride: int, lanes: int, read_dtype):
        import pyopencl as cl

        mf = cl.mem_flags
        self._buffers = []

        def pinned(size, dtype):
            # ALLOC_HOST_PTR memory is page-locked on GPUs: fast, asynchronous copies.
            nbytes = max(1, size) * np.dtype(dtype).itemsize
            buf = cl.Buffer(dctx.context, mf.READ_WRITE | mf.ALLOC_HOST_PTR, nbytes)
            array, _ = cl.enqueue_map_buffer(
                dctx.copy_queue,
                buf,
                cl.map_flags.READ | cl.map_flags.WRITE,
                0,
                (max(1, size),),
                dtype,
            )
            self._buffers.append(buf)
            return array

        self.host_reads = pinned(count * mstride, read_dtype)
        self.host_lengths = pinned(count, np.int32)
        self.host_out = pinned(count * lanes * 2, np.int32)
        self.reads = cl.Buffer(dctx.context, mf.READ_ONLY, self.host_reads.nbytes)
        self.lengths = cl.Buffer(dctx.context, mf.READ_ONLY, self.host_lengths.nbytes)
        self.out = cl.Buffer(dctx.context, mf.WRITE_ONLY, self.host_out.nbytes)
