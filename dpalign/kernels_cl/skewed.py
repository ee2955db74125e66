"""One region of a long pair on several OpenCL devices at once: skewed row bands.

The region's tile rows are cut into bands of ``H`` tile rows, dealt to the devices in turn
(band ``k`` on device ``k % D``). Each device runs one wavefront over all of its bands: at
step ``s`` its launch holds tile ``(r, tj)`` of band ``k`` (row ``r`` of the band) when
``s = r + tj + k (H + L)``. Without the lag ``L`` that is the one-device wavefront (tile
``(ti, tj)`` at step ``ti + tj``); with it, band ``k``'s first tile row reads the bottom row of
band ``k - 1`` (on another device) ``L + 1`` steps after that device computed it. The
bottom rows go from device to device in batches: every ``batch`` steps a device copies its
bands' newly finished bottom-row tiles into page-locked host memory (its copy queue, after
the launch), and the device of the band below uploads them (its copy queue) before the launch
that first reads them. With every device in one OpenCL context
(:func:`~dpalign.kernels_cl.context.shared_contexts`) the upload waits on the copy's event on
the device; otherwise the host polls the copy's event and then enqueues the upload. Either way
one host thread enqueues every device's launches ahead (up to ``window`` steps), and a device
never waits for a border it does not need yet: the ``L`` steps of slack cover the hand-on.

Why bands dealt in turn rather than one column band per device (``dpalign.bands``): a
column band's right neighbour waits for the whole ramp-up of its left neighbour's wavefront
and is still filling its last triangle after the left band is done (a 1.57x model ceiling for
two devices, 1.2x measured, BENCHMARKS.md), and row chunks pay a ramp per chunk. Here every
step of the one-device wavefront is split between the devices, each holding about
``1 / D`` of its tiles (exactly, when the region's tile columns are a multiple of
``D (H + L)``, which :func:`band_plan` aims for), so each device runs about ``1 / D`` of the
one-device fill's launches' work, in the same number of launches plus ``L`` per band.

Results (checkpoints, last row, local best cell) are exactly one device's: every tile is
computed from the same inputs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import InternalError, OptionError
from .context import driver_errors, int_setter, wait
from .programs import build

#: Tile rows per band (aimed at; :func:`band_plan` adjusts it so the bands divide evenly).
BAND_TILES = 512
#: Steps between a device's copies of its bands' bottom rows.
BATCH = 16
#: Steps of slack between a band's bottom row and the band below reading it (two H200s, 3 Mb:
#: 32 steps 4.40 s, 64 steps 3.84 s: with 32 the launches that read a border still waited on
#: its upload, and their kernel time grew by 0.5 s a device).
LAG = 64
#: Steps a device's launches may be enqueued ahead of its last finished one.
WINDOW = 512
#: Steps between flushes of a device's queue.
FLUSH = 32
#: :func:`band_plan` gives every device as many bands (its total tiles alike) rather than
#: aiming at equal tiles per step (not measured on GPUs in this form: off).
BALANCE = False
#: Tile rows of a skewed fill in packed tiles: up to this many times the caller's
#: (``PairOnDevice.taller``; the caller's checkpoint rows must fall on the taller tiles'
#: bottoms): fewer launches.
#: Two H200s, 3 Mb, global: 2.78 s with 512-row packed tiles against 3.09 s with 256
#: (12 k launches a GPU against 18 k, each GPU's kernels 2.56 / 2.26 s against 2.76 / 2.65).
TALL = 2
#: :data:`TALL` by default only where each device's share of the region's longest tile
#: diagonal in the taller tiles is at least this many tiles (3 Mb on two GPUs: ~2,800). An
#: H200 runs ~1,500 tiles of a launch at once (``bands.DEVICE_CHUNK_TILES``): a launch of
#: fewer takes about one tile's latency, which taller tiles double.
TALL_MIN_TILES = 1500
#: A device's launch profiles are read in chunks of this many while the fill runs.
PROFILE_CHUNK = 256


@dataclass(frozen=True)
class BandPlan:
    """How a region of ``n_tr x n_tc`` tiles is dealt to ``devices`` devices."""

    band_tiles: int  # H
    lag: int  # L
    batch: int
    devices: int

    @property
    def period(self) -> int:
        """Steps from one band to the next (``H + L``)."""
        return self.band_tiles + self.lag


def band_plan(n_tr: int, n_tc: int, devices: int, band_tiles=None, lag=None, batch=None,
              balance=None):  # fmt: skip
    """Bands for a region of ``n_tr x n_tc`` tiles on ``devices`` devices.

    With ``band_tiles`` not given: about :data:`BAND_TILES` tile rows, chosen so that
    ``n_tc`` is a multiple of ``devices * (H + L)`` where it can be: then every device holds
    the same number of tiles at every step of the middle of the fill. With ``balance``
    (default :data:`BALANCE`) instead as many bands on every device, the last one about as
    tall as the others, so that every device holds the same number of tiles in all (the
    middle of the fill, where ``n_tc`` matters, is short where ``n_tr <= n_tc``).
    """
    lag = LAG if lag is None else int(lag)
    batch = BATCH if batch is None else int(batch)
    balance = BALANCE if balance is None else bool(balance)
    if lag < 0 or batch < 1:
        raise OptionError("skewed bands need lag >= 0 and batch >= 1")
    if band_tiles is None:
        q = max(1, round(n_tc / (devices * (BAND_TILES + lag))))
        band_tiles = n_tc // (devices * q) - lag
        if band_tiles < BAND_TILES // 4:  # narrow regions: balance matters less than bands
            band_tiles = BAND_TILES
        elif balance and n_tr > devices * band_tiles:
            # (3 Mb, two devices: 22 bands of 522 tile rows left the second device's last
            # band 171 rows tall, 5,742 tile rows on one device against 5,391; taking up
            # the period with a longer lag instead was slower: every band adds its lag to
            # the fill's steps)
            per = max(1, round(n_tr / (devices * band_tiles)))  # bands per device
            band_tiles = -(-n_tr // (devices * per))
        band_tiles = min(band_tiles, max(1, -(-n_tr // devices)))
    if band_tiles < 1:
        raise OptionError("skewed bands need at least one tile row per band")
    return BandPlan(int(band_tiles), lag, batch, devices)


class _Device:
    """One device's share: its bands stacked, its buffers, kernel and step range."""

    def __init__(self, job, index, pair, bands):
        import pyopencl as cl

        self.job, self.index, self.pair = job, index, pair
        self.dctx = pair.dctx
        self.bands = bands  # region bands k held here, in order (band b of the device)
        plan, tr = job.plan, job.tr
        H = plan.band_tiles
        self.heights = [min(job.h - k * H * tr, H * tr) for k in bands]  # DP rows
        self.h = sum(self.heights)
        self.n_tr = -(-self.h // tr) if bands else 0
        self.first = index * plan.period  # step of its first band's first tile
        self.skew = plan.devices * plan.period
        last_rows = -(-self.heights[-1] // tr) if bands else 0
        self.end = (len(bands) - 1) * self.skew + self.first + last_rows - 1 + job.n_tc - 1
        self.step = self.first
        self.events: list = []  # every launch's event
        self.profiled = 0  # launches whose profile was read (into self.times)
        self.times: list = []  # (starts, ends) arrays of the launches read so far
        self.event_of: dict[int, object] = {}  # step -> its launch (recent ones)
        self.last_event = None
        self.copied = [0] * len(bands)  # tile columns of each band's bottom row copied
        self.needs: dict[int, list] = {b: [] for b in range(len(bands))}  # uploads pending
        self.ready = [0] * len(bands)  # tile columns of each band's top row uploaded
        self.since_flush = 0
        if not bands:
            return
        w, n_tc = job.w, job.n_tc
        # local tile rows: bottoms of bands with a band below, the region's last row, and
        # the caller's checkpoint rows
        self.slot_of_band: dict[int, int] = {}
        row_slot = np.full(self.n_tr, -1, np.int64)
        self.kept: list[tuple[int, int]] = []  # (local slot, caller's slot)
        slots = 0
        for b, k in enumerate(bands):
            rows = -(-self.heights[b] // tr)
            for r in range(rows):
                ti, g = b * H + r, k * H + r
                caller = int(job.row_slot[g])
                bottom = r == rows - 1  # handed on, or the region's last row
                if caller >= 0 or bottom:
                    row_slot[ti] = slots
                    if caller >= 0:
                        self.kept.append((slots, caller))
                    if bottom:
                        self.slot_of_band[b] = slots
                    slots += 1
        self.n_slots = slots
        left = np.empty((2, self.h + 1), np.int32)
        left[:, 0] = job.left[:, 0]
        # each band's top row: the region's for band 0, else uploaded as the band above
        # finishes it; column 0 is the left boundary's
        firsts = []
        at = 0
        for b, k in enumerate(bands):
            g0 = k * H * tr
            rows = self.heights[b]
            left[:, at + 1 : at + 1 + rows] = job.left[:, g0 + 1 : g0 + 1 + rows]
            at += rows
            first = job.top if k == 0 else np.array([[job.left[0, g0]], [job.neg_store]])
            firsts.append((b, np.ascontiguousarray(first, np.int32)))
        packed = job.packed
        stride = pair.packed[3] if packed else pair.stride
        letters = pair.packed[2] if packed else 0
        params = [self.h, w, tr, n_tc, pair.o, pair.e, job.r0, job.c0, stride, pair.smax, letters]
        params += [H, self.skew, self.first, plan.devices, index, self.n_tr]
        a_buf, prof_buf = pair.packed[:2] if packed else pair._wide_buffers()
        ctx, mf, i32 = self.dctx.context, cl.mem_flags, np.int32

        def upload(array):
            data = np.ascontiguousarray(array, dtype=i32)
            data = data if data.size else np.zeros(1, i32)
            return cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)

        n_cols = max(int(np.max(job.col_slot, initial=-1)) + 1, 0)
        self.n_cols = n_cols
        with driver_errors(self.dctx.caps, "allocating skewed band buffers"):
            self.top = cl.Buffer(ctx, mf.READ_WRITE, len(bands) * 2 * (w + 1) * 4)
            for b, first in firsts:
                cl.enqueue_copy(
                    self.dctx.queue,
                    self.top,
                    first,
                    buffer_origin=(0, 2 * b, 0),
                    host_origin=(0, 0, 0),
                    region=(first.shape[1] * 4, 2, 1),
                    buffer_pitches=((w + 1) * 4, 0),
                    host_pitches=(first.shape[1] * 4, 0),
                )
            self.rstore = cl.Buffer(ctx, mf.READ_WRITE, max(slots * 2 * (w + 1) * 4, 4))
            self.cstore = cl.Buffer(ctx, mf.READ_WRITE, max(n_cols * 2 * (self.h + 1) * 4, 4))
            self.best = cl.Buffer(
                ctx,
                mf.READ_WRITE | mf.COPY_HOST_PTR,
                hostbuf=np.zeros((self.n_tr if pair.local else 1, 4), i32),
            )
            self.flags = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(3, i32))
            bufs = [
                a_buf,
                prof_buf,
                self.top,
                upload(left),
                cl.Buffer(ctx, mf.READ_WRITE, 3 * (w + 1) * 8),
                cl.Buffer(ctx, mf.READ_WRITE, (self.h + 1) * 8),
                upload(row_slot),
                upload(job.col_slot),
                self.rstore,
                self.cstore,
                self.best,
                upload(params),
                self.flags,
            ]
        if packed:
            name, defines = "antidiagonal16.cl", dict(pair.packed_defines)
        else:
            name, defines = "antidiagonal.cl", dict(pair.defines)
            if tr > pair.defines["MAXTR"]:
                defines["LDS_EDGES"] = 0
        defines["ALIGNED"] = int(job.c0 % 4 == 0 and stride % 4 == 0)
        defines["BANDS"] = 1
        program, _ = build(self.dctx, name, defines)
        with driver_errors(self.dctx.caps, "preparing the anti-diagonal kernel"):
            self.kernel = cl.Kernel(program, "ad_tiles16" if packed else "ad_tiles")
        self.buffers = bufs  # kernel arguments do not keep their buffers alive
        for i, buf in enumerate(bufs):
            self.kernel.set_arg(i, buf)
        self.set_int = int_setter(self.kernel)

    def read_profiles(self, upto: int) -> None:
        """Read the start and end of launches ``profiled .. upto`` (complete ones: a launch
        on this in-order queue is complete once a later one is)."""
        import pyopencl as cl

        events = self.events[self.profiled : upto]
        if not events:
            return
        start, end = cl.profiling_info.START, cl.profiling_info.END
        try:
            starts = np.fromiter((ev.get_profiling_info(start) for ev in events), np.int64)
            ends = np.fromiter((ev.get_profiling_info(end) for ev in events), np.int64)
        except cl.Error:  # a driver that completes events out of order: wait for them
            for ev in events:
                wait(ev)
            starts = np.fromiter((ev.get_profiling_info(start) for ev in events), np.int64)
            ends = np.fromiter((ev.get_profiling_info(end) for ev in events), np.int64)
        self.times.append((starts, ends))
        self.profiled = upto

    @property
    def done(self) -> bool:
        return not self.bands or self.step > self.end

    def tiles(self, s: int):
        """The first stacked tile row and the tile count of step ``s``'s launch."""
        plan, n_tc = self.job.plan, self.job.n_tc
        H = plan.band_tiles
        u = s - self.first
        if u < 0:
            return 0, 0
        b_hi = min(len(self.bands) - 1, u // self.skew)
        b_lo = max(0, (u - n_tc - H + 1) // self.skew + 1)
        if b_lo > b_hi:
            return 0, 0
        start = b_lo * H + max(0, u - b_lo * self.skew - n_tc + 1)
        stop = min(b_hi * H + min(H - 1, u - b_hi * self.skew), self.n_tr - 1)
        return start, max(0, stop - start + 1)

    def needed(self, s: int):
        """``(band, tile column)``: the top rows step ``s`` reads first (bands below another)."""
        u = s - self.first
        if u < 0:
            return []
        lo = max(0, -(-(u - self.job.n_tc + 1) // self.skew))
        hi = min(len(self.bands) - 1, u // self.skew)
        return [(b, u - b * self.skew) for b in range(lo, hi + 1) if self.bands[b] > 0]


#: The last fill's account (:attr:`SkewedFill.stats`), for benchmarks.
last_stats: dict = {}


class SkewedFill:
    """Fill one region on several devices (one :class:`PairOnDevice` each, the same pair)
    in skewed row bands; see the module docstring.

    Parameters
    ----------
    pairs : list of PairOnDevice
        The pair on each device: the same tile shape; in one OpenCL context when
        ``device_waits`` (queues of one device count as devices: tests on PoCL).
    device_waits : bool, optional
        Uploads wait on the copies' events on the device (default: when every pair shares
        one context); False: the host polls each copy's event, then uploads.
    band_tiles, lag, batch, window : int, optional
        See :func:`band_plan`, :data:`WINDOW`.
    copy_queues : bool
        Border copies and uploads on each device's copy queue, the launches waiting on the
        uploads' events (default); False: on the devices' in-order queues, no event lists
        within a device (see ``_Run``).
    balance : bool, optional
        See :func:`band_plan` (default :data:`BALANCE`).
    tall : int, optional
        Tile rows up to this many times the caller's (``PairOnDevice.taller``), where the
        caller's checkpoint rows allow; default :data:`TALL` for packed tiles (where it was
        measured) in regions large enough (:data:`TALL_MIN_TILES`), else 1.
    """

    def __init__(self, pairs, device_waits=None, band_tiles=None, lag=None, batch=None,
                 window=None, copy_queues=True, balance=None, tall=None):  # fmt: skip
        if len(pairs) < 1:
            raise OptionError("skewed bands need at least one device")
        shapes = {(p.shape.rows, p.shape.cols, p.shape.packed) for p in pairs}
        if len(shapes) > 1:
            raise OptionError(f"skewed bands need one tile shape on every device, not {shapes}")
        shared = len({p.dctx.context.int_ptr for p in pairs}) == 1
        if device_waits and not shared:
            raise OptionError("devices can wait on each other only within one OpenCL context")
        self.pairs = list(pairs)
        self.device_waits = shared if device_waits is None else bool(device_waits)
        self.options = (band_tiles, lag, batch, balance)
        self.tall = tall
        self.window = WINDOW if window is None else int(window)
        self.copy_queues = bool(copy_queues)
        self.stats: dict = {}

    def fill_region(self, r0, c0, top, left, row_slot, col_slot, tile_rows, neg_store,
                    wide=False):  # fmt: skip
        """Like :meth:`PairOnDevice.fill_region` (no pruning); returns a
        :class:`~dpalign.kernels_cl.antidiagonal.DeviceFill`."""
        from .antidiagonal import DeviceFill

        pair = self.pairs[0]
        h, w = left.shape[1] - 1, top.shape[1] - 1
        tr, tc = int(tile_rows), pair.shape.cols
        n_tr, n_tc = -(-h // tr), -(-w // tc)
        if len(row_slot) != n_tr or len(col_slot) != n_tc:
            raise OptionError("one checkpoint slot per tile row and tile column is needed")
        slots = row_slot
        tall = TALL if self.tall is None else int(self.tall)
        if tall > 1 and not wide:
            factor = pair.taller(tr, tall, wide=self.tall is not None) // tr
            diagonal = min(-(-h // (factor * tr)), n_tc)  # tiles, in the taller tiles
            if self.tall is None and diagonal < TALL_MIN_TILES * len(self.pairs):
                factor = 1
            coarse = _coarser(np.asarray(row_slot), n_tr, factor)
            if coarse is not None:  # (the refill in 32 bits below takes the caller's tiles)
                tr, slots, n_tr = factor * tr, coarse, len(coarse)
        packed = bool(pair.packed) and not wide and tr <= pair.packed_defines["MAXTR"]
        plan = band_plan(n_tr, n_tc, len(self.pairs), *self.options)
        job = _Job(r0, c0, top, left, slots, col_slot, tr, tc, neg_store, plan, packed)
        start = time.perf_counter()
        devices = [
            _Device(job, d, p, list(range(d, job.n_bands, plan.devices)))
            for d, p in enumerate(self.pairs)
        ]
        with driver_errors(pair.dctx.caps, "running the skewed bands"):
            run = _Run(job, devices, self.device_waits, self.window, self.copy_queues)
            began = time.perf_counter()
            run.run()
            ran = time.perf_counter() - began
            if packed:
                widened = False
                for dev in (d for d in devices if d.bands):
                    flags = np.zeros(3, np.int32)
                    _read(dev, flags, dev.flags)
                    widened |= bool(flags[2])
                if widened:  # a tile did not fit 16 bits: the whole region again, wider
                    for p in self.pairs:
                        p.widened += 1
                    return self.fill_region(
                        r0, c0, top, left, row_slot, col_slot, tile_rows, neg_store, wide=True
                    )
            fill = job.collect(devices)
        collected = time.perf_counter()
        # the launches' profiles not read while the fill ran (35 k launches for a 3 Mb pair;
        # on PoCL the event.profile proxy took 1.4 us a launch, get_profiling_info 0.2 us a
        # value)
        seconds, spans, idle = [], [], []
        for dev in devices:
            dev.read_profiles(len(dev.events))
            starts = np.concatenate([t[0] for t in dev.times] or [np.zeros(0, np.int64)])
            ends = np.concatenate([t[1] for t in dev.times] or [np.zeros(0, np.int64)])
            seconds.append(float((ends - starts).sum()) * 1e-9)
            spans.append(float(ends[-1] - starts[0]) * 1e-9 if len(ends) else 0.0)
            idle.append(float(np.maximum(starts[1:] - ends[:-1], 0).sum()) * 1e-9)
        for dev, sec in zip(devices, seconds, strict=True):
            dev.pair.kernel_seconds += sec
            dev.pair.launches += len(dev.events)
            dev.pair.cells += sum(dev.heights) * w
        self.stats = {
            "wall": time.perf_counter() - start,
            "set_up": began - start,
            "run": ran,
            "collect": collected - began - ran,  # flags, last row, checkpoints, best cells
            "profiles_after": time.perf_counter() - collected,
            "tile_rows": tr,
            "kernel": seconds,
            "device_span": spans,  # first launch's start to last one's end
            "device_idle": idle,  # gaps between launches within that span
            "host": dict(run.counts),
            "launches": [len(d.events) for d in devices],
            "bands": job.n_bands,
            "band_tiles": plan.band_tiles,
            "lag": plan.lag,
        }
        last_stats.clear()
        last_stats.update(self.stats)
        return DeviceFill(
            fill.last_row, fill.row_store, fill.col_store, fill.best, max(seconds), 0, 0
        )


def _coarser(row_slot: np.ndarray, n_tr: int, factor: int):
    """``row_slot`` for tile rows ``factor`` times as tall, or None where a kept row is not
    the bottom of a taller tile row."""
    if factor <= 1:
        return None
    kept = np.flatnonzero(row_slot >= 0)
    if not (((kept + 1) % factor == 0) | (kept == n_tr - 1)).all():
        return None
    coarse = np.full(-(-n_tr // factor), -1, np.int64)
    coarse[kept // factor] = row_slot[kept]
    return coarse


def _read(dev, host, buf, **more):
    import pyopencl as cl

    cl.enqueue_copy(dev.dctx.queue, host, buf, **more)


@dataclass
class _Fill:
    last_row: np.ndarray
    row_store: np.ndarray
    col_store: np.ndarray
    best: tuple


class _Job:
    """The region being filled (shared by the devices' shares)."""

    def __init__(self, r0, c0, top, left, row_slot, col_slot, tr, tc, neg_store, plan, packed):
        self.r0, self.c0, self.tr, self.tc = int(r0), int(c0), int(tr), int(tc)
        self.top = np.ascontiguousarray(top, np.int32)
        self.left = np.ascontiguousarray(left, np.int32)
        self.row_slot = np.asarray(row_slot)
        self.col_slot = np.ascontiguousarray(col_slot, np.int64)
        self.neg_store = int(neg_store)
        self.plan, self.packed = plan, packed
        self.h, self.w = self.left.shape[1] - 1, self.top.shape[1] - 1
        self.n_tr, self.n_tc = -(-self.h // tr), -(-self.w // tc)
        self.n_bands = -(-self.n_tr // plan.band_tiles)

    def collect(self, devices) -> _Fill:
        """Every device's checkpoints, last row and local best, in the region's rows."""
        import pyopencl as cl

        h, w, tr, H = self.h, self.w, self.tr, self.plan.band_tiles
        n_rows = max(int(np.max(self.row_slot, initial=-1)) + 1, 0)
        n_cols = max(int(np.max(self.col_slot, initial=-1)) + 1, 0)
        row_store = np.empty((n_rows, 2, w + 1), np.int32)
        col_store = np.empty((n_cols, 2, h + 1), np.int32)
        last_row = None
        tiles = []
        for dev in (d for d in devices if d.bands):
            q = dev.dctx.queue
            size = 2 * (w + 1) * 4  # bytes of one kept row
            for local, caller in dev.kept:
                cl.enqueue_copy(q, row_store[caller], dev.rstore, src_offset=local * size)
            if dev.bands[-1] == self.n_bands - 1:
                last_row = np.empty((2, w + 1), np.int32)
                slot = dev.slot_of_band[len(dev.bands) - 1]
                cl.enqueue_copy(q, last_row, dev.rstore, src_offset=slot * size)
            if n_cols:
                cstore = np.empty((n_cols, 2, dev.h + 1), np.int32)
                cl.enqueue_copy(q, cstore, dev.cstore)
                at = 0
                for b, k in enumerate(dev.bands):
                    g0, rows = k * H * tr, dev.heights[b]
                    col_store[:, :, g0 + 1 : g0 + 1 + rows] = cstore[:, :, at + 1 : at + 1 + rows]
                    at += rows
            if dev.pair.local:
                best = np.empty((dev.n_tr, 4), np.int32)
                cl.enqueue_copy(q, best, dev.best)
                best = best[best[:, 0] > 0].astype(np.int64)
                if len(best):  # stacked DP rows -> the region's
                    ti = (best[:, 1] - 1) // tr
                    band = ti // H
                    k = np.asarray(dev.bands)[band]
                    best[:, 1] += (k - band) * H * tr
                    tiles.append(best)
        if last_row is None:  # pragma: no cover - some device holds the last band
            raise InternalError("internal error: no device held the region's last band")
        last_row[0, 0], last_row[1, 0] = self.left[0, h], self.neg_store
        for ti in np.flatnonzero(self.row_slot >= 0):
            rs = self.row_slot[ti]
            row_store[rs, 0, 0] = self.left[0, min((ti + 1) * tr, h)]
            row_store[rs, 1, 0] = self.neg_store
        col_store[:, :, 0] = 0
        for tj in np.flatnonzero(self.col_slot >= 0):
            cs = self.col_slot[tj]
            col_store[cs, 0, 0] = self.top[0, min((tj + 1) * self.tc, w)]
            col_store[cs, 1, 0] = self.neg_store
        best = (0, 0, 0)
        if tiles:
            allt = np.concatenate(tiles)
            order = np.lexsort((allt[:, 2], allt[:, 1], -allt[:, 0]))
            best = tuple(int(x) for x in allt[order[0], :3])
        return _Fill(last_row, row_store, col_store, best)


class _Pinned:
    """Page-locked host slots for bottom rows in transit (reused once their upload ran)."""

    def __init__(self, dctx, cols: int):
        self.dctx, self.cols = dctx, cols
        self.free: list[np.ndarray] = []
        self.busy: list[tuple[object, np.ndarray]] = []  # (upload event, slot)
        self.held: list = []

    def take(self) -> np.ndarray:
        import pyopencl as cl

        if not self.free:
            still = []
            for event, slot in self.busy:
                if event is not None and _complete(event):
                    self.free.append(slot)
                else:
                    still.append((event, slot))
            self.busy = still
        if not self.free:
            count, size = 64, 2 * self.cols
            buf = cl.Buffer(
                self.dctx.context,
                cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                count * size * 4,
            )
            flags = cl.map_flags.READ | cl.map_flags.WRITE
            mapped, _ = cl.enqueue_map_buffer(
                self.dctx.copy_queue, buf, flags, 0, (count, 2, self.cols), np.int32
            )
            self.held.append((buf, mapped))
            self.free.extend(mapped[i] for i in range(count))
        return self.free.pop()

    def give(self, event, slot) -> None:
        self.busy.append((event, slot))

    def release(self) -> None:
        for buf, mapped in self.held:
            mapped.base.release(self.dctx.copy_queue)
            buf.release()
        self.held = []


def _complete(event) -> bool:
    import pyopencl as cl

    status = event.command_execution_status
    if status < 0:
        event.wait()  # raises the driver's error
    return status == cl.command_execution_status.COMPLETE


class _Run:
    """The host loop: enqueue every device's steps as far as their borders and windows
    allow, hand bottom rows on, flush, until every device has enqueued its last step.

    ``copy_queues``: the border copies go on each device's copy queue (waiting on the
    launch's event), uploads too, and the launch that first reads a border waits on its
    upload's event; else everything goes on each device's one in-order queue with no event
    lists within a device (the copy after the launches before it; the upload, enqueued only
    when a launch needs it, right before that launch), the only waits being the upload's
    on the other device's copy (``device_waits``) or the host's poll of it.
    """

    def __init__(self, job, devices, device_waits, window, copy_queues=True):
        self.job, self.devices = job, devices
        self.device_waits, self.window = device_waits, window
        self.copy_queues = copy_queues
        self.pinned = _Pinned(devices[0].dctx, (job.plan.batch + 2) * job.tc + 1)
        # copies in flight per (consumer device, its band): (first col, last col, DP
        # column, columns, copy event, host slot), in column order
        self.handoffs: dict[tuple[int, int], list] = {}
        # the host loop's account: steps blocked on a border or on the window, sleeps; the
        # seconds in the launches' calls (arguments and enqueue), in the window's status
        # polls and in reading launch profiles
        self.counts = {"border": 0, "window": 0, "sleeps": 0, "sleep_s": 0.0, "loops": 0,
                       "enqueue_s": 0.0, "poll_s": 0.0, "profile_s": 0.0}  # fmt: skip

    def _queue(self, dev):
        return dev.dctx.copy_queue if self.copy_queues else dev.dctx.queue

    def run(self) -> None:
        devices = [d for d in self.devices if d.bands]
        try:
            while True:
                moved = self._handoffs() if self.copy_queues else False
                for dev in devices:
                    moved |= self._advance(dev)
                for dev in devices:
                    self._profiles(dev)
                if all(d.done for d in devices):
                    break
                if not moved:
                    # nothing could go: hand on every finished bottom row now (a consumer
                    # may be waiting for a batch not yet full), then give the devices time
                    for dev in devices:
                        dev.dctx.queue.flush()
                        dev.since_flush = 0
                        if self._copy(dev):
                            moved = True
                    if not moved:
                        t0 = time.perf_counter()
                        time.sleep(1e-4)
                        self.counts["sleeps"] += 1
                        self.counts["sleep_s"] += time.perf_counter() - t0
                self.counts["loops"] += 1
            for dev in devices:
                dev.dctx.queue.flush()
            for dev in devices:
                if dev.last_event is not None:
                    wait(dev.last_event)
        finally:
            for dev in devices:
                dev.dctx.queue.finish()
                dev.dctx.copy_queue.finish()
            self.pinned.release()

    def _profiles(self, dev) -> None:
        """Read the profiles of a chunk of finished launches, if one is done (the reading
        then overlaps the fill, not the time after it)."""
        upto = dev.profiled + PROFILE_CHUNK
        if len(dev.events) > upto:
            t0 = time.perf_counter()
            if _complete(dev.events[upto - 1]):
                dev.read_profiles(upto)
            self.counts["profile_s"] += time.perf_counter() - t0

    def _advance(self, dev) -> bool:
        import pyopencl as cl

        moved = False
        plan = self.job.plan
        counts = self.counts
        clock = time.perf_counter
        for _ in range(16):  # then the hand-offs again: a consumer may be waiting
            if dev.done:
                break
            s = dev.step
            back = dev.event_of.get(s - self.window)
            if back is not None:
                t0 = clock()
                complete = _complete(back)
                counts["poll_s"] += clock() - t0
                if not complete:
                    counts["window"] += 1
                    break
                del dev.event_of[s - self.window]
            waits = []
            blocked = False
            for b, tj in dev.needed(s):
                if dev.ready[b] <= tj and not (not self.copy_queues and self._deliver(dev, b, tj)):
                    blocked = True
                    break
                pending = dev.needs[b]
                while pending and pending[0][0] <= tj:
                    waits.append(pending.pop(0)[1])
            if blocked:
                self.counts["border"] += 1
                break
            start, count = dev.tiles(s)
            if count:
                t0 = clock()
                dev.set_int(13, s)
                dev.set_int(14, start)
                items = dev.pair.shape.items
                event = cl.enqueue_nd_range_kernel(
                    dev.dctx.queue, dev.kernel, (count * items,), (items,), wait_for=waits or None
                )
                counts["enqueue_s"] += clock() - t0
                dev.events.append(event)
                dev.event_of[s] = event
                dev.last_event = event
            dev.step += 1
            dev.since_flush += 1
            moved = True
            if (s - dev.first) % plan.batch == plan.batch - 1 or dev.done:
                self._copy(dev)
            elif dev.since_flush >= FLUSH:
                dev.dctx.queue.flush()
                dev.since_flush = 0
        return moved

    def _copy(self, dev) -> bool:
        """Copy each band's newly finished bottom-row tiles (through the last enqueued
        step) to host slots, for the band below (on the next device)."""
        import pyopencl as cl

        job, plan = self.job, self.job.plan
        if dev.last_event is None:
            return False
        u = dev.step - 1 - dev.first
        H, tc, w = plan.band_tiles, job.tc, job.w
        queue = self._queue(dev)
        queued = False
        for b, k in enumerate(dev.bands):
            if k + 1 >= job.n_bands:
                continue
            done = min(job.n_tc, u - b * dev.skew - (H - 1) + 1)  # tile columns finished
            while dev.copied[b] < done:
                lo = dev.copied[b]
                hi = min(done, lo + plan.batch + 2)
                c_lo, c_hi = lo * tc + 1, min(hi * tc, w)  # DP columns
                if not queued:
                    dev.dctx.queue.flush()
                    dev.since_flush = 0
                slot = self.pinned.take()
                n = c_hi - c_lo + 1
                event = cl.enqueue_copy(
                    queue,
                    slot,
                    dev.rstore,
                    buffer_origin=(c_lo * 4, dev.slot_of_band[b] * 2, 0),
                    host_origin=(0, 0, 0),
                    region=(n * 4, 2, 1),
                    buffer_pitches=((w + 1) * 4, 0),
                    host_pitches=(slot.shape[1] * 4, 0),
                    wait_for=[dev.last_event] if self.copy_queues else None,
                    is_blocking=False,
                )
                consumer = (k + 1) % plan.devices, (k + 1) // plan.devices
                self.handoffs.setdefault(consumer, []).append([lo, hi, c_lo, n, event, slot])
                dev.copied[b] = hi
                queued = True
        if queued:
            queue.flush()
        return queued

    def _upload(self, consumer, cb: int, item) -> None:
        import pyopencl as cl

        lo, hi, c_lo, n, event, slot = item
        upload = cl.enqueue_copy(
            self._queue(consumer),
            consumer.top,
            slot,
            buffer_origin=(c_lo * 4, cb * 2, 0),
            host_origin=(0, 0, 0),
            region=(n * 4, 2, 1),
            buffer_pitches=((self.job.w + 1) * 4, 0),
            host_pitches=(slot.shape[1] * 4, 0),
            wait_for=[event] if self.device_waits else None,
            is_blocking=False,
        )
        self.pinned.give(upload, slot)
        if self.copy_queues:
            consumer.needs[cb].append((lo, upload))
        consumer.ready[cb] = hi

    def _deliver(self, consumer, cb: int, tj: int) -> bool:
        """In-order queues: upload the copies band ``cb`` of ``consumer`` needs through tile
        column ``tj`` (those that may go: enqueued, or with the host waiting, finished)."""
        pending = self.handoffs.get((consumer.index, cb))
        while pending and consumer.ready[cb] <= tj:
            if not (self.device_waits or _complete(pending[0][4])):
                break
            self._upload(consumer, cb, pending.pop(0))
        return consumer.ready[cb] > tj

    def _handoffs(self) -> bool:
        """Copy queues: upload every copy that may go to its consumer (in order per band)."""
        moved = False
        touched = set()
        for (index, cb), pending in self.handoffs.items():
            consumer = self.devices[index]
            while pending and (self.device_waits or _complete(pending[0][4])):
                self._upload(consumer, cb, pending.pop(0))
                touched.add(index)
                moved = True
        for index in touched:
            self.devices[index].dctx.copy_queue.flush()
        return moved
