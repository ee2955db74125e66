"""Host side of the anti-diagonal tile kernel (``antidiagonal.cl``): one long pair on a device.

A :class:`PairOnDevice` holds one pair's sequences on the device (``a``'s codes and ``b``'s
profile: ``s + o + e`` per residue of ``a``'s alphabet and column of ``b``) and fills any
rectangular region of its DP matrix from the region's boundaries, exactly like
:func:`dpalign.simd.antidiagonal.fill_region` (same inputs, same checkpoint layout), so
``dpalign.longpair`` runs its forward pass and the larger recomputations of its traceback
here and keeps the small blocks and leaves on the CPU.

The region is cut into tiles of ``rows x cols`` cells (``cols = items * per_item``: work-items
per tile times columns per work-item, compile-time); each launch runs every tile of one tile
anti-diagonal, one work-group per tile. Kernel names: ``{nw,sw}_fill_opencl_antidiagonal_i32``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..errors import OptionError
from .context import DeviceContext, driver_errors, int_setter, wait
from .names import ANTIDIAGONAL
from .programs import build

KERNELS = ANTIDIAGONAL

#: Page-locked staging buffers between pairs, one per OpenCL context and staging slot (the
#: largest one given back): pinning ~365 MB took ~0.7 s on the H100 host, once per pair (GPU
#: result 2).
_STAGING: dict[int, tuple] = {}
_STAGING_LOCK = threading.Lock()


@dataclass(frozen=True)
class TileShape:
    """A tile: ``rows`` (run time) x ``items * per_item`` columns (compile time), or with
    ``packed`` twice as many: two 16-bit cells per instruction (``antidiagonal16.cl``)."""

    rows: int
    items: int
    per_item: int
    packed: bool = False

    @property
    def cols(self) -> int:
        return self.items * self.per_item * (2 if self.packed else 1)

    @property
    def wide(self) -> TileShape:
        """The 32-bit tile of the same size (a packed tile's fallback)."""
        if not self.packed:
            return self
        if 2 * self.per_item <= 16:
            return TileShape(self.rows, self.items, 2 * self.per_item)
        return TileShape(self.rows, 2 * self.items, self.per_item)

    def __post_init__(self) -> None:
        if self.rows < 1 or self.items < 1 or self.per_item < 1:
            raise OptionError(f"tile sizes must be positive: {self}")


#: GPUs: one warp per tile (shuffles, no barrier), 8 columns per work-item, 128 rows (the
#: fastest on the H100: 104.5 GCUPS at 100 kb against 92.7 with 256 rows, BENCHMARKS.md).
GPU_TILE = TileShape(rows=128, items=32, per_item=8)
#: GPUs with packed 16-bit PTX (Hopper): two 16-bit cells per instruction, 256 rows, 8
#: columns per work-item and half (1 Mb on the H100: 2.1x GPU_TILE's GCUPS, BENCHMARKS.md).
GPU_TILE_PACKED = TileShape(rows=256, items=32, per_item=8, packed=True)
#: GPUs: the tiles of the long-pair traceback's recomputations (None: the forward pass's, or
#: GPU_TILE after packed ones: a leaf is one tile, traced on the CPU, and packed tiles made
#: the traceback slower). Those regions have few tiles per tile diagonal, so a launch takes
#: the latency of one tile.
GPU_RETILE: TileShape | None = None
#: CPU devices (PoCL): small tiles compile and run quickly.
CPU_TILE = TileShape(rows=64, items=8, per_item=4)


#: The packed profile's largest size (bytes): ``letters**2`` rows of ``b``'s length.
PACKED_PROFILE_BYTES = 1 << 30
#: Launches enqueued between flushes of a fill (a fill of 1 Mb has ~6k-12k; enqueueing
#: them all before the first flush left the GPU idle for ~10 us a launch).
FLUSH_EVERY = 256
#: A fill waits for every this-many-th launch of its own and reads the others' times then.
DRAIN_EVERY = 64
#: The first flush of a fill comes after this many launches (the device starts sooner).
FIRST_FLUSH = 16
#: More -D settings of the 32-bit kernel (benchmarks: {"VECLOAD": 0}, the loads before).
WIDE_DEFINES: dict[str, int] = {}
#: More -D settings of the packed kernel (benchmarks: {"CHAIN": 2}).
PACKED_DEFINES: dict[str, int] = {}
#: antidiagonal16.cl's LIM: the largest value a tile's 16-bit lanes may reach.
PACKED_LIMIT = 30000
#: |s| + o + e at most this (antidiagonal16.cl's SPREAD) for 16-bit lanes.
PACKED_SPREAD = 2048


def _packs(scores: np.ndarray, o: int, e: int, a: np.ndarray, n: int, shape: TileShape) -> bool:
    """Whether a pair can run in packed 16-bit tiles: small scores and gap costs (each tile
    still checks its own range on the device: these are the parts of its bounds that do not
    depend on the data, antidiagonal16.cl's ``above`` and ``below``) and a packed profile of
    bounded size."""
    oe = o + e
    if max(int(np.abs(scores).max(initial=0)) + oe, 0) > PACKED_SPREAD or oe < 0 or e < 0:
        return False
    smax = max(int(scores.max(initial=0)), 0)
    if smax * shape.rows + 2 * oe > PACKED_LIMIT:
        return False
    if o + e * shape.rows + 3 * oe + e + PACKED_SPREAD > PACKED_LIMIT:
        return False
    letters = int(np.count_nonzero(np.bincount(a, minlength=1))) or 1
    return letters * letters * (n + shape.cols + 4) * 4 <= PACKED_PROFILE_BYTES


def _drain(events) -> float:
    """Wait for a fill's launches and return their kernel seconds, read from the events as
    they complete: the host reads the profiles while the device runs the later launches
    (read after the last one, the ~6k events of a 1 Mb fill took ~40 ms of host time on the
    H100 host, after the device was done). One in-order queue: a launch is complete once a
    later one is, so the host waits for every :data:`DRAIN_EVERY`-th only."""
    import pyopencl as cl

    start, end = cl.profiling_info.START, cl.profiling_info.END
    nanoseconds = 0
    for k in range(0, len(events), DRAIN_EVERY):
        chunk = events[k : k + DRAIN_EVERY]
        wait(chunk[-1])
        for ev in chunk:
            try:
                nanoseconds += ev.get_profiling_info(end) - ev.get_profiling_info(start)
            except cl.Error:  # a driver that completes events out of order: wait for it
                wait(ev)
                nanoseconds += ev.get_profiling_info(end) - ev.get_profiling_info(start)
    return nanoseconds * 1e-9


def default_tile(caps) -> TileShape:
    """A device's default tiles: :data:`CPU_TILE`, :data:`GPU_TILE_PACKED` (packed 16-bit
    PTX) or :data:`GPU_TILE`."""
    if caps.is_cpu:
        return CPU_TILE
    return GPU_TILE_PACKED if caps.ptx_s16x2 else GPU_TILE


def span_groups(spans: np.ndarray, length: int, group: int = 16) -> list[tuple[int, int, int, int]]:
    """``(k0, k1, lo, hi)``: checkpoints ``k0 .. k1`` (``group`` at a time) and the union
    ``lo .. hi`` (inclusive, within ``0 .. length - 1``) of their ``spans``: one rectangle
    to copy each (a few dozen copies a block, not one a checkpoint)."""
    out = []
    for k0 in range(0, len(spans), group):
        k1 = min(len(spans), k0 + group)
        lo = max(int(spans[k0:k1, 0].min()), 0)
        hi = min(int(spans[k0:k1, 1].max()), length - 1)
        if hi >= lo:
            out.append((k0, k1, lo, hi))
    return out


def _read_spans(queue, staging: np.ndarray, parts, stores) -> None:
    """Enqueue the copies of ``parts`` (``(store, k0, k1, lo, hi)``: lines ``2 k0 .. 2 k1``,
    entries ``lo .. hi`` of checkpoint store ``store`` (K, 2, L) on the device) into
    ``staging`` (page-locked), one after the other, each packed to its own width.

    Rectangles straight into the (pageable) stores had the driver pin the whole lines
    they cross: every page of the 366 MB of a 1 Mb block, resident and pinned again."""
    import pyopencl as cl

    offset = 0
    for store, k0, k1, lo, hi in parts:
        buf, length = stores[store]
        width, lines = hi - lo + 1, 2 * (k1 - k0)
        cl.enqueue_copy(
            queue, staging[offset : offset + width * lines], buf,
            buffer_origin=(lo * 4, 2 * k0, 0), host_origin=(0, 0, 0),
            region=(width * 4, lines, 1), buffer_pitches=(length * 4, 0),
            host_pitches=(width * 4, 0), is_blocking=False,
        )  # fmt: skip
        offset += width * lines


@dataclass
class DeviceFill:
    """What :meth:`PairOnDevice.fill_region` leaves behind (the fields of
    :class:`dpalign.simd.antidiagonal.RegionFill`)."""

    last_row: np.ndarray
    row_store: np.ndarray
    col_store: np.ndarray
    best: tuple[int, int, int]
    kernel_seconds: float = 0.0
    launches: int = 0
    pruned_tiles: int = 0
    widened: bool = False  # a packed fill that did not fit 16 bits, filled again in 32
    row_spans: np.ndarray | None = None  # with ``spans``: what reached the host
    col_spans: np.ndarray | None = None
    fetch_rest: object = None  # with ``spans``: copies the rest of the checkpoints


class PairOnDevice:
    """One long pair on one OpenCL device.

    Parameters
    ----------
    dctx : DeviceContext
    a, b : ndarray uint8
        Residue codes (``a`` down the rows, ``b`` across).
    matrix : ndarray (K, K)
        Substitution scores.
    gap_open, gap_extend : int
    local : bool
        Smith-Waterman (H >= 0, the first maximum is tracked).
    shape : TileShape, optional
        Default :func:`default_tile`.
    shuffle : bool, optional
        Pass the row state between work-items by PTX warp shuffles (default: on NVIDIA GPUs
        when a tile is one warp); otherwise through local memory with a barrier per step.
    prefetch : bool
        Load each row's profile values and left input a step ahead of their use.
    """

    def __init__(
        self,
        dctx: DeviceContext,
        a: np.ndarray,
        b: np.ndarray,
        matrix: np.ndarray,
        gap_open: int,
        gap_extend: int,
        local: bool,
        shape: TileShape | None = None,
        shuffle: bool | None = None,
        prefetch: bool = True,
    ) -> None:

        self.dctx = dctx
        self.shape = shape or default_tile(dctx.caps)
        self.o, self.e, self.local = int(gap_open), int(gap_extend), bool(local)
        self.m, self.n = len(a), len(b)
        oe = self.o + self.e
        letters = int(a.max(initial=0)) + 1
        scores = np.asarray(matrix, np.int64)[:letters]
        self.smax = max(int(scores.max()), 0)  # pruning's bound
        if self.shape.packed and not _packs(scores, self.o, self.e, a, self.n, self.shape):
            # the same tiles in 32-bit lanes; by default the 32-bit default tiles
            self.shape = self.shape.wide if shape else GPU_TILE
        wide = self.shape.wide
        can_shuffle = dctx.caps.nvidia and wide.items == 32
        self.shuffle = can_shuffle if shuffle is None else bool(shuffle) and can_shuffle
        self.stride = -(-(self.n + self.shape.cols) // 4) * 4  # 16-byte rows
        self._inputs = (a, b, scores, oe, shuffle)  # the profiles' inputs
        # the 32-bit kernel's inputs, uploaded on first use (a packed pair's score-only fill
        # never needs them) and shared with reshaped copies
        self._wide_bufs: dict[str, object] = {}
        self._b_buf = None  # b's codes on the device, which the profiles are built from
        if not self.shape.packed:
            self._wide_buffers()
        defines = {
            "TW": wide.items,
            "CPT": wide.per_item,
            "LOCAL_MODE": int(self.local),
            "USE_SHFL": int(self.shuffle),
            "PREFETCH": int(prefetch),
            "MAXTR": max(512, wide.rows),  # LDS_EDGES: the left/right columns' rows
            **WIDE_DEFINES,
        }
        self.defines = defines
        self._kernels: dict[tuple, object] = {}
        self._kernel(False, False, True)  # built now: a driver's complaint comes early
        self.packed = None  # (row pairs, packed profile, letters, its stride)
        self.packed_defines: dict[str, int] = {}
        if self.shape.packed:
            self.packed = self._packed_pair(a, b, scores, oe, shuffle)
            self._kernel(True, False, True)
        self.kernel_seconds = 0.0
        self.launches = 0
        self.cells = 0
        self.pruned_cells = 0
        self.widened = 0  # packed fills that did not fit 16 bits and ran again in 32
        # staging slot -> (buffer, mapped array): page-locked host memory, reused
        self._staging: dict[int, tuple] = {}
        self._scratch: dict[str, object] = {}  # device buffers of the leaf-level fills
        # fills with spans: device checkpoint buffers per staging slot (shared by the pair's
        # queues: a slot's checkpoints stay on the device until the slot is filled again,
        # for ``fetch_rest``) and pageable host arrays per slot (pages touched only where
        # spans are copied)
        self._slot_stores: dict[tuple[str, int], object] = {}
        self._span_hosts: dict[int, np.ndarray] = {}

    def _wide_buffers(self):
        """The 32-bit kernel's ``a`` (residue codes) and profile (``s + o + e`` per residue
        of ``a``'s alphabet and column of ``b``) on the device."""
        import pyopencl as cl

        if not self._wide_bufs:
            a, b, scores, oe, _ = self._inputs
            flags, ctx = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, self.dctx.context
            with driver_errors(self.dctx.caps, "uploading a long pair"):
                codes = np.append(a, 0).astype(np.uint8)
                self._wide_bufs["a"] = cl.Buffer(ctx, flags, hostbuf=codes)
            self._wide_bufs["prof"] = self._profile(scores + oe, self.stride)
        return self._wide_bufs["a"], self._wide_bufs["prof"]

    def _profile(self, table: np.ndarray, stride: int, half: int | None = None):
        """A profile built on the device from ``b``'s codes (``antidiagonal_profile.cl``):
        ``table`` (rows x alphabet, ``s + o + e``) per column of ``b``, 32-bit, or with
        ``half`` packed (row ``x * L + y``: ``x``'s value in the low half, ``y``'s ``half``
        columns to the right in the high half). The upload is ``n`` bytes, not the
        profile's ``L x n`` (or ``L^2 x n``) words."""
        import pyopencl as cl

        dctx, mf = self.dctx, cl.mem_flags
        given = mf.READ_ONLY | mf.COPY_HOST_PTR
        rows = table.shape[0] if half is None else table.shape[0] ** 2
        with driver_errors(dctx.caps, "building a long pair's profile"):
            if self._b_buf is None:
                _, b, *_ = self._inputs
                codes = np.ascontiguousarray(b, np.uint8) if len(b) else np.zeros(1, np.uint8)
                self._b_buf = cl.Buffer(dctx.context, given, hostbuf=codes)
            scores = np.ascontiguousarray(table, np.int32)
            table_buf = cl.Buffer(dctx.context, given, hostbuf=scores)
            prof = cl.Buffer(dctx.context, mf.READ_WRITE, rows * stride * 4)
            program, _ = build(dctx, "antidiagonal_profile.cl", {})
            name = "ad_profile32" if half is None else "ad_profile16"
            kernel = cl.Kernel(program, name)
            args = [self._b_buf, table_buf, np.int32(self.n), np.int32(stride)]
            args.append(np.int32(scores.shape[1]))
            if half is not None:
                args += [np.int32(half), np.int32(table.shape[0])]
            kernel.set_args(*args, prof)
            group = 128
            size = (-(-stride // group) * group, rows)
            # the fills run on the same in-order queue: no wait here
            cl.enqueue_nd_range_kernel(dctx.queue, kernel, size, (group, 1))
        return prof

    def _kernel(self, packed: bool, prune: bool, aligned: bool, tall: bool = False):
        """The kernel (built on first use): 16-bit (``packed``) or 32-bit lanes, with block
        pruning (32-bit), for regions whose first column is a multiple of 4 (``aligned``:
        the profile in 16-byte loads) or any."""
        import pyopencl as cl

        key = (packed, prune, aligned, tall)
        if key not in self._kernels:
            if packed:
                name, defines = "antidiagonal16.cl", dict(self.packed_defines)
            else:
                name, defines = "antidiagonal.cl", dict(self.defines)
                if prune:
                    defines["PRUNE"] = 1
                if tall:  # more rows than local memory was sized for
                    defines["LDS_EDGES"] = 0
            defines["ALIGNED"] = int(aligned)
            program, _ = build(self.dctx, name, defines)
            with driver_errors(self.dctx.caps, "preparing the anti-diagonal kernel"):
                self._kernels[key] = cl.Kernel(program, "ad_tiles16" if packed else "ad_tiles")
        return self._kernels[key]

    def _packed_pair(self, a, b, scores, oe, shuffle):
        """The packed tile's inputs: pairs of residue codes of ``a`` (dense: the residues it
        holds) and the packed profile: row ``x * L + y``, column ``j``: ``s(x, b[j]) + o + e`` in
        the low half, ``s(y, b[j + half]) + o + e`` in the high half (the high half's
        columns lie ``half = items * per_item`` to the right)."""
        import pyopencl as cl

        shape, caps = self.shape, self.dctx.caps
        present = np.flatnonzero(np.bincount(a, minlength=scores.shape[0]))
        if present.size == 0:
            present = np.zeros(1, np.int64)
        dense = np.zeros(scores.shape[0], np.uint8)
        dense[present] = np.arange(present.size)
        letters = present.size
        half = shape.items * shape.per_item
        stride = -(-(self.n + shape.cols) // 4) * 4
        prof_buf = self._profile(scores[present] + oe, stride, half)
        # the profile row of each row and the row TW above it (antidiagonal16.cl's pairs)
        items = shape.items
        codes = dense[a].astype(np.uint16)
        pairs = np.zeros(len(a) + 2 * items + 8, np.uint16)
        pairs[items : items + len(a)] = codes * letters
        pairs[2 * items : 2 * items + len(a)] += codes  # past a's end too: the high half
        mf = cl.mem_flags
        with driver_errors(caps, "uploading a long pair"):
            a_buf = cl.Buffer(self.dctx.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=pairs)
        can_shuffle = caps.nvidia and shape.items == 32
        defines = {
            "TW": shape.items,
            "CPT": shape.per_item,
            "LOCAL_MODE": int(self.local),
            "USE_SHFL": int(can_shuffle if shuffle is None else bool(shuffle) and can_shuffle),
            "USE_PTX": int(caps.ptx_s16x2),
            "MAXTR": max(512, shape.rows),  # the left/right columns in local memory
            **PACKED_DEFINES,
        }
        self.packed_defines = defines
        return a_buf, prof_buf, letters, stride

    def taller(self, tile_rows: int, factor: int, wide: bool = True) -> int:
        """The tallest tile rows, a multiple of ``tile_rows`` at most ``factor`` times it,
        that this pair's kernel runs as it runs ``tile_rows`` (packed tiles within the packed
        kernel's local memory and 16-bit bounds; 32-bit ones within their local memory, and
        only with ``wide``), for fills that want fewer, longer launches (several devices: a
        launch's gap and start-up cost the same for a tile of 256 rows as for one of 512)."""
        tile_rows = int(tile_rows)
        packed = self.packed is not None and tile_rows <= self.packed_defines["MAXTR"]
        if not (packed or wide):
            return tile_rows
        for f in range(max(int(factor), 1), 1, -1):
            rows = f * tile_rows
            if packed:
                if rows > self.packed_defines["MAXTR"]:
                    continue
                a, _, scores, _, _ = self._inputs
                shape = TileShape(rows, self.shape.items, self.shape.per_item, True)
                if not _packs(scores, self.o, self.e, a, self.n, shape):
                    continue
            elif rows > self.defines["MAXTR"]:
                continue
            return rows
        return tile_rows

    def reshaped(self, shape: TileShape) -> PairOnDevice:
        """The same pair on the device (shared buffers; packed tiles of another width get
        their own packed profile) with tiles of another shape, at most as wide (e.g.
        narrower tiles for the traceback's smaller, latency-bound regions)."""
        import copy

        if shape.cols > self.shape.cols:
            raise OptionError(f"a reshaped pair's tiles must not be wider than {self.shape}")
        a, b, scores, oe, shuffle = self._inputs
        if shape.packed and not _packs(scores, self.o, self.e, a, self.n, shape):
            shape = shape.wide
        wide = shape.wide
        other = copy.copy(self)
        other.shape = shape
        other.packed = None
        other.shuffle = self.dctx.caps.nvidia and wide.items == 32 and shuffle is not False
        other.defines = {
            **self.defines,
            "TW": wide.items,
            "CPT": wide.per_item,
            "USE_SHFL": int(other.shuffle),
        }
        other._kernels = {}
        other._kernel(False, False, True)
        if shape.packed:  # its own packed profile: the halves lie half a tile width apart
            other.packed = other._packed_pair(a, b, scores, oe, shuffle)
            other._kernel(True, False, True)
        other._staging = {}
        other._scratch = {}
        other._slot_stores, other._span_hosts = {}, {}
        other.kernel_seconds, other.launches, other.cells, other.pruned_cells = 0.0, 0, 0, 0
        return other

    def on_stream(self, stream: int) -> PairOnDevice:
        """The same pair on queues of their own (``device_context(..., stream)``: the same
        context, buffers and programs), so that two host threads fill two regions on the
        device at once; the staging slots are shared (a fill's slot is its own)."""
        import copy

        from .context import device_context

        if not self.shape.packed:
            self._wide_buffers()  # built on this queue, before the other one reads it
        self.dctx.queue.finish()
        other = copy.copy(self)
        other.dctx = device_context(self.dctx.ident, stream)
        other._kernels = {}
        other._scratch = {}
        for key in self._kernels:
            other._kernel(*key)
        other.kernel_seconds, other.launches, other.cells, other.pruned_cells = 0.0, 0, 0, 0
        other.widened = 0
        return other

    def _host_staging(self, nbytes: int, slot: int = 0, queue=None) -> np.ndarray:
        """At least ``nbytes`` of page-locked host memory (int32) for staging slot ``slot``,
        mapped once and reused (taken from the context's pool when one is there and large
        enough)."""
        import pyopencl as cl

        key = (self.dctx.context.int_ptr, slot)
        if slot not in self._staging:
            with _STAGING_LOCK:
                kept = _STAGING.pop(key, None)
            if kept is not None:
                self._staging[slot] = kept
        if slot not in self._staging or self._staging[slot][1].nbytes < nbytes:
            self._unmap_staging(slot)
            size = max(nbytes, 4)
            with driver_errors(self.dctx.caps, "allocating page-locked host memory"):
                buf = cl.Buffer(
                    self.dctx.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size
                )
                flags = cl.map_flags.READ | cl.map_flags.WRITE
                mapped, _ = cl.enqueue_map_buffer(
                    queue or self.dctx.queue, buf, flags, 0, (size // 4,), np.int32
                )
            self._staging[slot] = (buf, mapped)
        return self._staging[slot][1]

    def _span_host(self, nbytes: int, slot: int) -> np.ndarray:
        """At least ``nbytes`` of pageable host memory (int32) for staging slot ``slot``, kept
        for the next fill into it: only the pages that spans are copied into are ever
        touched."""
        kept = self._span_hosts.get(slot)
        if kept is None or kept.nbytes < nbytes:
            import mmap

            area = mmap.mmap(-1, max(nbytes, 4) // 4 * 4)
            if hasattr(mmap, "MADV_NOHUGEPAGE"):
                # NumPy asks for huge pages for large arrays: a band touches every 2 MB of
                # a block's stores (lines of ~250 KB), and all of it became resident
                area.madvise(mmap.MADV_NOHUGEPAGE)
            self._span_hosts[slot] = kept = np.frombuffer(area, np.int32)
        return kept

    def reserve_stores(self, nbytes: int, slots) -> None:
        """Have page-locked host memory of at least ``nbytes`` ready in each staging slot of
        ``slots`` (pinning takes ~2 ms a MB on the H100 host: done while the forward pass
        runs, not when the traceback's first fills need it). Maps on the copy queue, so
        it does not wait for the kernels before it."""
        for slot in slots:
            self._host_staging(nbytes, slot, self.dctx.copy_queue)

    def release_staging(self) -> None:
        """Hand the page-locked host memory to the context's pool (the next pair on this
        context takes it); the pool keeps the largest buffer of each slot and unmaps the
        other."""
        for slot in list(self._staging):
            staging = self._staging.pop(slot)
            key = (self.dctx.context.int_ptr, slot)
            with _STAGING_LOCK:
                kept = _STAGING.get(key)
                if kept is None or kept[1].nbytes < staging[1].nbytes:
                    _STAGING[key], staging = staging, kept
            if staging is not None:
                self._staging[slot] = staging
                self._unmap_staging(slot)

    def _unmap_staging(self, slot: int) -> None:
        staging = self._staging.pop(slot, None)
        if staging is not None:
            buf, mapped = staging
            mapped.base.release(self.dctx.queue)
            buf.release()

    def __del__(self) -> None:
        try:
            self.release_staging()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver is going anyway
            pass

    @property
    def name(self) -> str:
        return f"{'sw' if self.local else 'nw'}_fill_opencl_antidiagonal_i32"

    def fill_region(
        self,
        r0: int,
        c0: int,
        top: np.ndarray,
        left: np.ndarray,
        row_slot: np.ndarray,
        col_slot: np.ndarray,
        tile_rows: int,
        neg_store: int,
        prune: bool = False,
        reuse_stores: bool = False,
        wide: bool = False,
        stores_slot: int = 0,
        while_running=None,
        spans: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> DeviceFill:
        """Fill rows ``r0 .. r0+h`` and columns ``c0 .. c0+w`` (h, w from the boundaries).

        Parameters
        ----------
        top, left : ndarray int32, shapes (2, w+1), (2, h+1)
            H and D of the region's row 0; H and I of its column 0.
        row_slot, col_slot : ndarray
            Per tile row (of ``tile_rows``) / tile column (of ``shape.cols``): the
            checkpoint slot to keep its bottom row / right column in, or -1.
        neg_store : int
            "-inf" of the store type, for the checkpoints' first entries.
        prune : bool
            Local mode: skip tiles whose best possible score cannot reach the best H found
            so far (block pruning). Only for the forward pass of the whole matrix: the
            first maximum, and every value on an optimal path to it, stay exact, but the
            values of pruned tiles (and checkpoints through them) are lower bounds.
        reuse_stores : bool
            Copy the checkpoints into page-locked host memory that the next call with
            ``reuse_stores`` overwrites (the caller is done with them by then). Copies from
            the device run at DMA speed; into fresh pageable arrays the H100 host managed
            ~3.4 GB/s, 1.7 s of a 1 Mb traceback.
        stores_slot : int
            With ``reuse_stores``: which page-locked buffer (a call overwrites only what the
            last call with the same slot returned: the traceback traces one block while the
            next one is filled into the other slot).
        while_running : callable, optional
            Called once every launch is enqueued, while the device runs them (host work
            that would otherwise wait its turn, e.g. :meth:`reserve_stores`).
        wide : bool
            Packed tiles: fill in 32-bit lanes (what a fill does again when one of its
            tiles did not fit 16 bits; pruning always does).
        spans : (row_spans, col_spans), optional
            With ``reuse_stores``: copy only these parts of the checkpoints (per kept row,
            columns ``lo .. hi`` inclusive; per kept column, rows) into pageable host
            memory, ``group`` checkpoints to a rectangle, instead of every checkpoint into
            page-locked memory (pinning the 1 Mb traceback's 3 x 366 MB took ~2.2 s of a
            process's first traceback, of which the path reads ~2 MB a block). The fill's
            ``fetch_rest`` copies the rest while the slot is not filled again.
        """
        import pyopencl as cl

        h, w = left.shape[1] - 1, top.shape[1] - 1
        tr, tc = int(tile_rows), self.shape.cols
        n_tr, n_tc = -(-h // tr), -(-w // tc)
        if len(row_slot) != n_tr or len(col_slot) != n_tc:
            raise OptionError("one checkpoint slot per tile row and tile column is needed")
        n_rows = max(int(np.max(row_slot, initial=-1)) + 1, 0)
        n_cols = max(int(np.max(col_slot, initial=-1)) + 1, 0)
        dctx = self.dctx
        mf = cl.mem_flags
        ctx = dctx.context
        i32 = np.int32

        def upload(array):
            data = np.ascontiguousarray(array, dtype=i32)
            data = data if data.size else np.zeros(1, i32)
            return cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)

        def scratch(name, nbytes):
            # the traceback's leaf-level fills (one a block, ~366 MB each at 1 Mb) keep their
            # device buffers for the next one: a free can wait for the whole device, and
            # another queue may be filling the next block. Every byte read is written first.
            if not reuse_stores:
                return cl.Buffer(ctx, mf.READ_WRITE, nbytes)
            pool, key = self._scratch, name
            if spans is not None and name in ("rstore", "cstore"):
                pool, key = self._slot_stores, (name, stores_slot)
            kept = pool.get(key)
            if kept is None or kept.size < nbytes:
                pool[key] = kept = cl.Buffer(ctx, mf.READ_WRITE, nbytes)
            return kept

        if prune and not self.local:
            raise OptionError("block pruning is for local alignments")
        packed = self.packed if not (prune or wide) else None
        if packed and tr > self.packed_defines["MAXTR"]:
            packed = None  # taller than the packed kernel's tiles: the same in 32 bits
        stride = packed[3] if packed else self.stride
        params = [h, w, tr, n_tc, self.o, self.e, r0, c0, stride, self.smax]
        params.append(packed[2] if packed else 0)
        params = np.array(params, dtype=i32)
        a_buf, prof_buf = packed[:2] if packed else self._wide_buffers()
        with driver_errors(dctx.caps, f"allocating {self.name} buffers"):
            bufs = [
                a_buf,
                prof_buf,
                upload(top),
                upload(left),
                scratch("hrow", 3 * (w + 1) * 8),
                scratch("vcol", (h + 1) * 8),
                upload(row_slot),
                upload(col_slot),
                scratch("rstore", max(n_rows * 2 * (w + 1) * 4, 4)),
                scratch("cstore", max(n_cols * 2 * (h + 1) * 4, 4)),
                cl.Buffer(  # local mode: each tile row's first maximum (H, i, j, 0)
                    ctx,
                    mf.READ_WRITE | mf.COPY_HOST_PTR,
                    hostbuf=np.zeros((n_tr if self.local else 1, 4), i32),
                ),
                upload(params),
                cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(3, i32)),
            ]
        tall = not packed and tr > self.defines["MAXTR"]
        kernel = self._kernel(bool(packed), prune, c0 % 4 == 0 and stride % 4 == 0, tall)
        for index, buf in enumerate(bufs):
            kernel.set_arg(index, buf)
        events = []
        items = self.shape.items
        set_int = int_setter(kernel)
        with driver_errors(dctx.caps, f"running {self.name}"):
            for d in range(n_tr + n_tc - 1):
                ti0, ti1 = max(0, d - n_tc + 1), min(d, n_tr - 1)
                set_int(13, d)
                set_int(14, ti0)
                groups = ti1 - ti0 + 1
                events.append(
                    cl.enqueue_nd_range_kernel(dctx.queue, kernel, (groups * items,), (items,))
                )
                if d % FLUSH_EVERY == FLUSH_EVERY - 1 or d == FIRST_FLUSH:
                    dctx.queue.flush()  # the device starts while the host enqueues the rest
            dctx.queue.flush()
            if while_running is not None:
                while_running()
            seconds = _drain(events)
            if packed:
                flags = np.zeros(3, i32)
                cl.enqueue_copy(dctx.queue, flags, bufs[12])
                if flags[2]:  # a tile did not fit 16 bits: the whole region again, wider
                    self.kernel_seconds += seconds
                    self.launches += len(events)
                    self.widened += 1
                    fill = self.fill_region(
                        r0,
                        c0,
                        top,
                        left,
                        row_slot,
                        col_slot,
                        tile_rows,
                        neg_store,
                        reuse_stores=reuse_stores,
                        wide=True,
                        stores_slot=stores_slot,
                        spans=spans,
                    )
                    fill.kernel_seconds += seconds
                    fill.launches += len(events)
                    fill.widened = True
                    return fill
            last = np.empty((w + 1, 2), i32)
            cl.enqueue_copy(dctx.queue, last, bufs[4], src_offset=((n_tr - 1) % 3) * (w + 1) * 8)
            nbytes = (n_rows * (w + 1) + n_cols * (h + 1)) * 8
            row_spans = col_spans = None
            if reuse_stores and spans is not None:
                host = self._span_host(nbytes, stores_slot)
            elif reuse_stores:
                host = self._host_staging(nbytes, stores_slot)
            if reuse_stores:
                split = n_rows * 2 * (w + 1)
                row_store = host[:split].reshape(n_rows, 2, w + 1)
                col_store = host[split : split + n_cols * 2 * (h + 1)].reshape(n_cols, 2, h + 1)
            else:
                row_store = np.empty((n_rows, 2, w + 1), i32)
                col_store = np.empty((n_cols, 2, h + 1), i32)
            if spans is not None and reuse_stores:
                parts = [(0, *g) for g in span_groups(spans[0], w + 1)]
                parts += [(1, *g) for g in span_groups(spans[1], h + 1)]
                size = sum(2 * (k1 - k0) * (hi - lo + 1) for _, k0, k1, lo, hi in parts)
                staging = self._host_staging(size * 4, stores_slot)
                _read_spans(dctx.queue, staging, parts, ((bufs[8], w + 1), (bufs[9], h + 1)))
                dctx.queue.finish()
                # nothing copied (lo > hi) unless a part says so
                row_spans, col_spans = (
                    np.zeros((n_rows, 2), np.int64),
                    np.zeros((n_cols, 2), np.int64),
                )
                row_spans[:, 0], col_spans[:, 0] = 1, 1
                offset = 0
                for store, k0, k1, lo, hi in parts:
                    width = hi - lo + 1
                    part = staging[offset : offset + 2 * (k1 - k0) * width]
                    target = (row_store, col_store)[store]
                    target[k0:k1, :, lo : hi + 1] = part.reshape(k1 - k0, 2, width)
                    (row_spans, col_spans)[store][k0:k1] = lo, hi
                    offset += part.size
            else:
                if n_rows:
                    cl.enqueue_copy(dctx.queue, row_store, bufs[8])
                if n_cols:
                    cl.enqueue_copy(dctx.queue, col_store, bufs[9])
            tiles = np.empty((n_tr, 4), i32) if self.local else None
            if tiles is not None:
                cl.enqueue_copy(dctx.queue, tiles, bufs[10])
            pruning = np.zeros(2, i32)
            if prune:
                cl.enqueue_copy(dctx.queue, pruning, bufs[12])
        self.kernel_seconds += seconds
        self.launches += len(events)
        self.cells += h * w
        pruned = int(pruning[1])
        self.pruned_cells += pruned * tr * tc  # about: edge tiles are smaller
        last_row = np.ascontiguousarray(last.T)
        last_row[0, 0], last_row[1, 0] = left[0, h], neg_store

        def first_entries():  # the checkpoints' first entries come from the boundaries
            for ti in np.flatnonzero(np.asarray(row_slot) >= 0):
                rs = row_slot[ti]
                row_store[rs, 0, 0] = left[0, min((ti + 1) * tr, h)]
                row_store[rs, 1, 0] = neg_store
            for tj in np.flatnonzero(np.asarray(col_slot) >= 0):
                cs = col_slot[tj]
                col_store[cs, 0, 0] = top[0, min((tj + 1) * tc, w)]
                col_store[cs, 1, 0] = neg_store

        first_entries()
        fetch_rest = None
        if row_spans is not None:
            stores, queue = (bufs[8], bufs[9]), dctx.copy_queue

            def fetch_rest():
                with driver_errors(dctx.caps, f"copying {self.name} checkpoints"):
                    if n_rows:
                        cl.enqueue_copy(queue, row_store, stores[0], is_blocking=True)
                    if n_cols:
                        cl.enqueue_copy(queue, col_store, stores[1], is_blocking=True)
                first_entries()
                row_spans[:] = 0, w
                col_spans[:] = 0, h

        best = (0, 0, 0)
        if tiles is not None:  # the tile rows' maxima: the first in row-major order
            order = np.lexsort((tiles[:, 2], tiles[:, 1], -tiles[:, 0].astype(np.int64)))
            v, i, j = (int(x) for x in tiles[order[0], :3])
            best = (v, i, j) if v > 0 else (0, 0, 0)
        return DeviceFill(
            last_row, row_store, col_store, best, seconds, len(events), pruned,
            row_spans=row_spans, col_spans=col_spans, fetch_rest=fetch_rest,
        )  # fmt: skip
