"""One long pair on several fillers at once: column bands in a wavefront pipeline.

The DP region is cut into ``k`` column bands (one per filler: an OpenCL device, a single-threaded
CPU filler, a Dask worker) and into row chunks. Band ``b`` fills its chunks top to bottom; chunk
``r`` of band ``b`` needs the bottom row of chunk ``r-1`` of the same band (its top boundary,
kept by the band itself) and the right column of chunk ``r`` of band ``b-1`` (its left boundary:
H and I, passed on). So band ``b`` works on chunk ``r`` while band ``b+1`` works on chunk
``r-1``: with ``R`` chunks the ``k`` bands finish in ``R + k - 1`` piece times instead of
``R k``. Every piece is one call of the engine's region contract
(:class:`dpalign.contract.RegionFiller`) with tile-aligned cuts, and the checkpoints of the
pieces are written into the region's own checkpoint rows and columns, so the result (scores,
checkpoints, local best cell, and hence the traceback) is identical to one filler's.

The same pieces report progress: after each one the callback receives its cells (a single CPU
filler's fill is cut into about 32 pieces, filled one after another, so that a long fill
reports as it goes; on a device, where each piece costs a fill of its own, the bar advances per
region).

>>> import numpy as np
>>> from dpalign.longpair import align_long
>>> from dpalign.scoring import Scoring
>>> s = Scoring((1, -1), 2)
>>> a, b = s.encode("ACGTTGCA" * 40), s.encode("ACGTAGCA" * 40)
>>> plain = align_long(a, b, s, "local")
>>> banded = align_long(a, b, s, "local", bands=Bands(cpu=3, chunk_rows=64))
>>> (banded.score, banded.ops) == (plain.score, plain.ops)
True
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .contract import Progress, RegionFill, RegionFiller
from .errors import OptionError

#: Row chunks per band that the pipeline aims for (pipeline efficiency k R / (R + k - 1):
#: 0.94 for two bands, 0.84 for eight).
CHUNKS_PER_BAND = 16
#: With one CPU filler and a progress callback: pieces for the bar.
PROGRESS_PIECES = 32


@dataclass
class Bands:
    """How a long pair's large regions are split across fillers.

    Attributes
    ----------
    cpu : int
        Column bands filled by single-threaded CPU fillers (Numba's anti-diagonal tiles) in
        the calling process; 0 or 1: the region is filled by one filler on every thread (the
        plain path).
    devices : list of Backend
        One band per device backend (``engine.device_regions`` of each): every OpenCL GPU of
        the host, or two queues of one device (``OpenCLBackend(stream=1)``).
    cluster : Backend, optional
        A Dask backend (``kind == "cluster"``): one actor per worker, one band per actor, each
        filling on its worker's CPU cores.
    chunk_rows : int, optional
        Rows per chunk (rounded to whole tiles); default: ``CHUNKS_PER_BAND`` chunks per band,
        but at least ``min_chunk_tiles`` tile rows.
    min_chunk_tiles : int
        The fewest tile rows in one chunk (a device fills a chunk's tile diagonals in
        parallel; short chunks starve it).
    min_cells : int
        Regions with fewer cells are filled by the plain filler (traceback recomputations).
    cluster_device : (str, dict), optional
        With ``cluster``: each worker holds the pair on a device of its own, built as
        ``engine.get_backend(name, **options)`` there (``("opencl", {"device": "gpu"})``),
        instead of filling on its CPU cores.
    skewed : bool
        Devices fill each large region in skewed row bands, every device's launches
        enqueued by one host thread (:mod:`dpalign.kernels_cl.skewed`; devices sharing one
        OpenCL context wait on each other's copies on the device) instead of column bands
        of row chunks. Regions of other tile shapes (the traceback's) stay on one device.
    halves : bool
        Score-only global alignments ending in the last cell (:func:`halves_apply`): the
        top half of the matrix forward on the first filler and the bottom half backward on
        the second (the pair reversed), joined on the middle row (:func:`halves_score`);
        no border passes between them. Traceback and other modes take the bands.
    skew_options : dict, optional
        ``SkewedFill``'s options (``band_tiles``, ``lag``, ``batch``, ``window``,
        ``device_waits``).
    processes : bool
        Drive every device after the first from a process of its own (default: threads of
        this process; on two H200s processes were no faster, 12.5 s against 11.3 s for a
        3 Mb pair, the spawn included: the interpreter lock is not what limits bands).
    """

    cpu: int = 0
    devices: list = field(default_factory=list)
    cluster: object | None = None
    chunk_rows: int | None = None
    min_chunk_tiles: int = 8
    min_cells: int = 1 << 24
    processes: bool = False
    cluster_device: tuple | None = None
    skewed: bool = False
    skew_options: dict | None = None
    halves: bool = False

    def __post_init__(self) -> None:
        if self.cpu < 0:
            raise OptionError("Bands.cpu must be 0 or more")
        if self.chunk_rows is not None and self.chunk_rows < 1:
            raise OptionError("Bands.chunk_rows must be at least 1")
        if sum((self.cpu > 1, bool(self.devices), self.cluster is not None)) > 1:
            raise OptionError("bands go on CPU fillers, devices or a Dask cluster: one of them")
        if self.cluster_device is not None and self.cluster is None:
            raise OptionError("Bands.cluster_device is for the workers of a Dask cluster")

    @property
    def active(self) -> bool:
        """More than one band."""
        return self.cpu > 1 or len(self.devices) > 1 or self.cluster is not None


class PieceFiller(RegionFiller):
    """Fills a region as a grid of (row chunk, column band) pieces, band ``b`` on
    ``fills[b]``, in a wavefront pipeline of one host thread per band.

    Parameters
    ----------
    fills : list of callables
        ``fill(r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads)`` returning
        a :class:`RegionFill` (a filler's ``fill_region``, or a call to a remote actor).
    chunk_rows : int or None
        See :class:`Bands`.
    min_chunk_tiles : int
    threads : int
        Threads each piece fill is given.
    progress : callable, optional
        Called with the cells of each finished piece (from the band threads, serialised).
    members : list of RegionFiller, optional
        The fillers behind ``fills`` (tile shape, label and statistics).
    pieces : int, optional
        One filler (``fills[0]``) cutting the region into about this many pieces, filled one
        after another (progress reports of a single filler): row chunks of at least
        ``min_chunk_tiles`` tile rows where the region is tall enough, column bands as well
        where it is wide and short.
    """

    def __init__(
        self,
        fills: Sequence[Callable[..., RegionFill]],
        chunk_rows: int | None = None,
        min_chunk_tiles: int = 8,
        threads: int | None = None,
        progress: Progress | None = None,
        members: Sequence[RegionFiller] = (),
        pieces: int | None = None,
    ) -> None:
        if not fills:
            raise OptionError("a banded fill needs at least one filler")
        self.fills = list(fills)
        self.chunk_rows = chunk_rows
        self.min_chunk_tiles = min_chunk_tiles
        self.threads = threads
        self.progress = progress
        self.pieces = pieces
        self.members = list(dict.fromkeys(members))
        if self.members:
            first = self.members[0]
            self.tile_rows, self.tile_cols = first.tile_rows, first.tile_cols
            self.label = first.label
        self._lock = threading.Lock()

    def _report(self, cells: int) -> None:
        if self.progress is not None:
            with self._lock:
                self.progress(cells)

    def fill_region(self, r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads):
        h, w = left.shape[1] - 1, top.shape[1] - 1
        th, tw = int(tile_rows), int(tile_cols)
        n_rows, n_cols = -(-h // th), -(-w // tw)
        threads = self.threads if self.threads is not None else threads
        # each worker thread of a fill takes a tile row: a chunk of fewer rows idles some
        least = max(self.min_chunk_tiles, 4 * threads if threads > 1 else 1)
        if self.pieces is not None:
            # one filler, about `pieces` pieces: row chunks where the region is tall enough,
            # else column bands too (filled one after another)
            chunks = max(1, min(self.pieces, n_rows // least))
            # column pieces no narrower than a chunk's least height either: a tile diagonal
            # holds at most min(rows, columns) tiles of a piece
            k = max(1, min(n_cols // max(self.min_chunk_tiles, 1), -(-self.pieces // chunks)))
            want = chunks
        else:
            k = min(len(self.fills), n_cols)
            want = CHUNKS_PER_BAND * k
        # bands: whole tile columns, as equal as they come
        col_edges = [round(n_cols * b / k) for b in range(k + 1)]
        if self.chunk_rows is not None:
            per = max(1, -(-self.chunk_rows // th))
        else:
            per = max(least if self.pieces is None else 1, -(-n_rows // want))
        row_edges = list(range(0, n_rows, per)) + [n_rows]
        dtype = top.dtype
        row_store = np.empty((max(int(row_slot.max(initial=-1)) + 1, 0), 2, w + 1), dtype)
        col_store = np.empty((max(int(col_slot.max(initial=-1)) + 1, 0), 2, h + 1), dtype)
        last_row = np.empty((2, w + 1), dtype)
        bests: list[tuple[int, int, int]] = []
        borders = [queue.SimpleQueue() for _ in range(k + 1)]
        failed: list[BaseException] = []

        def band(b: int) -> None:
            t0, t1 = col_edges[b], col_edges[b + 1]
            cb0, cb1 = t0 * tw, min(t1 * tw, w)
            own = 0 if b == 0 else 1
            local_cols, globals_c = _relabel(col_slot[t0:t1], keep_last=b < k - 1)
            band_top = np.ascontiguousarray(top[:, cb0 : cb1 + 1])
            for r in range(len(row_edges) - 1):
                s0, s1 = row_edges[r], row_edges[r + 1]
                rr0, rr1 = s0 * th, min(s1 * th, h)
                if b == 0:
                    band_left = np.ascontiguousarray(left[:, rr0 : rr1 + 1])
                else:
                    band_left = borders[b].get()
                    if band_left is None:  # a band to the left failed
                        borders[b + 1].put(None)
                        return
                local_rows, globals_r = _relabel(row_slot[s0:s1], keep_last=False)
                piece = self.fills[b % len(self.fills)](
                    r0 + rr0,
                    c0 + cb0,
                    band_top,
                    band_left,
                    local_rows,
                    local_cols,
                    th,
                    tw,
                    threads,
                )
                if b < k - 1:
                    borders[b + 1].put(np.ascontiguousarray(piece.col_store[-1]))
                # a band's first column is its left neighbour's last, where only that
                # neighbour knows D (the border passes H and I)
                for slot, g in enumerate(globals_r):
                    row_store[g, :, cb0 + own : cb1 + 1] = piece.row_store[slot, :, own:]
                for slot, g in enumerate(globals_c):
                    first = 0 if r == 0 else 1
                    col_store[g, :, rr0 + first : rr1 + 1] = piece.col_store[slot, :, first:]
                value, i, j = (int(x) for x in piece.best)
                if value > 0:
                    bests.append((value, i + rr0, j + cb0))
                band_top = piece.last_row
                self._report((rr1 - rr0) * (cb1 - cb0))
            last_row[:, cb0 + own : cb1 + 1] = band_top[:, own:]

        def guarded(b: int) -> None:
            try:
                band(b)
            except BaseException as exc:
                failed.append(exc)
                borders[b + 1].put(None)

        if k == 1 or self.pieces is not None:
            for b in range(k):
                band(b)
        else:
            workers = [
                threading.Thread(target=guarded, args=(b,), name=f"dpalign-band-{b}")
                for b in range(k)
            ]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            if failed:
                raise failed[0]
        best = (0, 0, 0)
        for value, i, j in bests:
            if value > best[0] or (value == best[0] and (i, j) < best[1:]):
                best = (value, i, j)
        return RegionFill(last_row, row_store, col_store, best)

    @property
    def cells(self) -> int:
        return sum(member.cells for member in self.members)

    @property
    def kernel_seconds(self) -> float:
        return sum(member.kernel_seconds for member in self.members)


def _relabel(slots: np.ndarray, keep_last: bool) -> tuple[np.ndarray, list[int]]:
    """Slots of one piece's tile rows (or columns), numbered from 0, and the region slot of
    each; ``keep_last`` also keeps the last one (a band's right border), as the last slot."""
    kept = np.flatnonzero(slots >= 0)
    local = np.full(len(slots), -1, np.int64)
    local[kept] = np.arange(len(kept))
    globals_ = [int(slots[t]) for t in kept]
    if keep_last and local[-1] < 0:  # (a kept last one is the last slot already)
        local[-1] = len(kept)
    return local, globals_


class CountingFiller(RegionFiller):
    """A filler that reports the cells of each region it fills (small regions: the
    traceback's recomputations)."""

    def __init__(self, inner: RegionFiller, progress: Progress) -> None:
        self.inner, self.progress = inner, progress
        self.tile_rows, self.tile_cols, self.label = inner.tile_rows, inner.tile_cols, inner.label

    def fill_region(
        self, r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads, **more
    ):
        fill = self.inner.fill_region(
            r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads, **more
        )
        self.progress((left.shape[1] - 1) * (top.shape[1] - 1))
        return fill

    # the options a filler may take per fill (block pruning, reused host stores) pass through
    @property
    def prunes(self) -> bool:
        return getattr(self.inner, "prunes", False)

    @property
    def reuses_stores(self) -> bool:
        return getattr(self.inner, "reuses_stores", False)

    @property
    def spans_stores(self) -> bool:
        return getattr(self.inner, "spans_stores", False)

    @property
    def cells(self) -> int:
        return self.inner.cells

    @property
    def kernel_seconds(self) -> float:
        return self.inner.kernel_seconds


#: Fewest tile rows per chunk on a device. A device fills the tiles of one tile diagonal at
#: once, at most one per tile row of the chunk, and takes about as long for a diagonal of a few
#: tiles as for one that fills it: on an H200 a diagonal fills it at ~1,500 tiles (one 3 Mb
#: pair: chunks of 1,024 tile rows took 1.65x as long as one fill, BENCHMARKS.md), so chunks
#: must be taller than that, and every chunk still pays one fill and drain of the wavefront.
DEVICE_CHUNK_TILES = 2048


class Plan:
    """Chooses the filler of each region of one long pair (the long-pair driver's hook).

    Parameters
    ----------
    bands : Bands or None
    progress : callable, optional
        Called with cells filled (forward pass and traceback recomputations).
    device_fillers : list of RegionFiller
        The pair held on each device of ``bands.devices`` (the first is the driver's own).
    remote : list of RegionFiller
        The Dask actors filling on their workers' CPUs (``bands.cluster``).
    """

    def __init__(self, bands, progress=None, device_fillers=(), remote=()) -> None:
        self.bands = bands or Bands()
        self.progress = progress
        self.device_fillers = list(device_fillers)
        self.remote = list(remote)
        self._skewed = None  # the skewed filler of the device fillers (False: none)

    def __call__(self, filler: RegionFiller, on_device: bool, cells: int) -> RegionFiller:
        """The filler for a region of ``cells`` cells that ``filler`` would fill alone."""
        bands = self.bands
        if cells < bands.min_cells:
            return filler if self.progress is None else CountingFiller(filler, self.progress)
        chunk_tiles = DEVICE_CHUNK_TILES if on_device else bands.min_chunk_tiles
        common = dict(
            chunk_rows=bands.chunk_rows, min_chunk_tiles=chunk_tiles, progress=self.progress
        )
        if on_device and len(self.device_fillers) > 1 and bands.skewed:
            first, *others = self.device_fillers
            if self._skewed is None:
                together = getattr(first, "together", None)
                options = bands.skew_options or {}
                self._skewed = (together(others, **options) if together else None) or False
            # the forward pass's tiles on every device; the traceback's own tiles (a
            # reshaped pair on the first device) stay there
            chosen = self._skewed if filler is first else filler
            if chosen is not False:
                return chosen if self.progress is None else CountingFiller(chosen, self.progress)
        if on_device and len(self.device_fillers) > 1:
            fills = [f.fill_region for f in self.device_fillers]
            return PieceFiller(fills, members=self.device_fillers, **common)
        if not on_device and self.remote:
            fills = [f.fill_region for f in self.remote]
            return PieceFiller(fills, members=self.remote, **common)
        if not on_device and bands.cpu > 1:
            fills = [filler.fill_region] * bands.cpu
            return PieceFiller(fills, threads=1, members=[filler], **common)
        if self.progress is None:
            return filler
        if on_device:
            # each piece pays a fill of its own on a device (one H200, 3 Mb pair: 11 chunks
            # took 18.5 s against 13.4 s in one fill): the bar advances per region there
            return CountingFiller(filler, self.progress)
        return PieceFiller([filler.fill_region], members=[filler], pieces=PROGRESS_PIECES, **common)


# --------------------------------------------------------------------------------------------
# Dask: one actor per band
# --------------------------------------------------------------------------------------------


class BandActor:
    """A Dask actor holding one long pair on its worker: on the worker's CPU cores (the
    engine's CPU region filler, ``cpu_args``), or on a device of the worker (``device``:
    ``(backend name, options, device_regions arguments)``)."""

    def __init__(self, cpu_args: tuple | None, device: tuple | None = None):
        from . import engine

        if device is not None:
            name, options, pair_args = device
            backend = engine.get_backend(name, **options)
            self.filler = engine.device_regions(backend, *pair_args)
            if self.filler is None:
                raise OptionError(f"backend {name!r} has no device region filler")
        else:
            self.filler = engine.cpu_regions(*cpu_args)

    def shape(self) -> tuple:
        """``(tile_rows, tile_cols, label)`` of the filler."""
        return self.filler.tile_rows, self.filler.tile_cols, self.filler.label

    def fill(self, r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads):
        """One region fill (see :meth:`RegionFiller.fill_region`), as plain arrays, with the
        filler's cells and kernel seconds so far."""
        fill = self.filler.fill_region(
            r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads
        )
        best = tuple(int(x) for x in fill.best)
        stats = (int(self.filler.cells), float(self.filler.kernel_seconds))
        return fill.last_row, fill.row_store, fill.col_store, best, stats


class ActorFiller(RegionFiller):
    """A :class:`BandActor` on a Dask worker behind the region contract."""

    def __init__(self, actor, threads: int) -> None:
        self.actor, self.threads = actor, threads
        self.tile_rows, self.tile_cols, self.label = actor.shape().result()

    def fill_region(self, r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads):
        last_row, rows, cols, best, (cells, seconds) = self.actor.fill(
            r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, self.threads
        ).result()
        self.cells, self.kernel_seconds = cells, seconds  # the remote filler's totals
        return RegionFill(last_row, rows, cols, best)


def dask_fillers(cluster, cpu_args: tuple | None, device: tuple | None = None) -> list:
    """One :class:`ActorFiller` per worker of the Dask backend ``cluster`` (one band each),
    holding the pair on the worker's CPU cores (``cpu_args``: the CPU region filler's
    arguments; each fill on the worker's threads) or on its device (``device``, see
    :class:`BandActor`)."""
    client = cluster.client()
    workers = client.scheduler_info()["workers"]
    if not workers:
        raise OptionError("the Dask cluster has no workers")
    addresses = sorted(workers)
    futures = [
        client.submit(BandActor, cpu_args, device, actor=True, workers=[address], pure=False)
        for address in addresses
    ]
    actors = [future.result() for future in futures]
    threads = [int(workers[address].get("nthreads", 1) or 1) for address in addresses]
    return [ActorFiller(actor, t) for actor, t in zip(actors, threads, strict=True)]


# --------------------------------------------------------------------------------------------
# Devices: the pair held on each, the bands after the first in processes of their own
# --------------------------------------------------------------------------------------------


def hold_devices(runners, a, b, scoring, local, neg_store, tile, processes: bool):
    """The pair held on each device backend of ``runners`` (None where a backend has no
    device region filler: then only the ones before it).

    ``processes``: every device after the first is driven from a process of its own
    (:class:`ProcessFiller`), so that the host loops that launch each device's tile
    diagonals do not wait for each other's turn at the interpreter lock.
    """
    from . import engine

    if processes or len(runners) < 2:
        made = []
        for k, runner in enumerate(runners):
            if k and processes:
                made.append(ProcessFiller(runner, (a, b, scoring, local, neg_store, tile)))
            else:
                made.append(engine.device_regions(runner, a, b, scoring, local, neg_store, tile))
    else:
        # every device's set-up at once (profiles built and uploaded: ~0.3 s per device for
        # a 3 Mb pair, a tenth of its two-GPU fill)
        made = [None] * len(runners)
        failed: list[BaseException] = []

        def hold(k: int) -> None:
            try:
                made[k] = engine.device_regions(runners[k], a, b, scoring, local, neg_store, tile)
            except BaseException as exc:  # raised in the caller's thread
                failed.append(exc)

        workers = [threading.Thread(target=hold, args=(k,)) for k in range(len(runners))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if failed:
            raise failed[0]
    held = []
    for filler in made:
        if filler is None:
            break
        held.append(filler)
    return held


def _plain_options(backend) -> dict:
    """A backend's dataclass fields that a process can rebuild it from (simple values)."""
    from dataclasses import fields

    simple = (str, int, float, bool, type(None))
    return {
        f.name: getattr(backend, f.name)
        for f in fields(backend)
        if isinstance(getattr(backend, f.name), simple)
    }


def _serve(conn, name: str, options: dict, pair_args: tuple) -> None:
    """A band's process: hold the pair on a device, fill regions until told to stop."""
    from . import engine

    try:
        backend = engine.get_backend(name, **options)
        filler = engine.device_regions(backend, *pair_args)
        if filler is None:
            raise OptionError(f"backend {name!r} has no device region filler")
        conn.send(("ready", (filler.tile_rows, filler.tile_cols, filler.label)))
    except Exception as exc:  # reported to the driver, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        kind, args = conn.recv()
        if kind == "stop":
            return
        try:
            fill = filler.fill_region(*args)
            stats = (filler.cells, filler.kernel_seconds)
            best = tuple(int(x) for x in fill.best)
            conn.send(("done", (fill.last_row, fill.row_store, fill.col_store, best, stats)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class ProcessFiller(RegionFiller):
    """A device region filler driven from a process of its own (spawned; the pair is sent
    once), behind the region contract. Its tile shape is known once :meth:`ready`; the
    driver takes the shape from the first band's filler, held in its own process."""

    def __init__(self, runner, pair_args: tuple) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, runner.name, _plain_options(runner), pair_args),
            name="dpalign-band",
            daemon=True,
        )
        self.process.start()
        child.close()
        # the process stops when the driver lets go of this filler (the pair is aligned)
        self._stop = weakref.finalize(self, _stop, self.conn, self.process)
        self._started = False  # the process starts while the first band fills its first chunk

    def ready(self) -> None:
        """Wait until the process holds the pair (raises what went wrong there)."""
        if not self._started:
            _, payload = self._receive()
            self.tile_rows, self.tile_cols, self.label = payload
            self._started = True

    def _receive(self):
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            raise OptionError("a band's device process stopped") from None
        if kind == "error":
            raise OptionError(f"a band's device process failed: {payload}")
        return kind, payload

    def fill_region(self, r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads):
        self.ready()
        self.conn.send(("fill", (r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, 1)))
        _, (last_row, rows, cols, best, (cells, seconds)) = self._receive()
        self.cells, self.kernel_seconds = cells, seconds  # the remote filler's totals
        return RegionFill(last_row, rows, cols, best)

    def close(self) -> None:
        """Stop the process (also done when this filler is garbage-collected)."""
        self._stop()


def _stop(conn, process) -> None:
    if process.is_alive():
        try:
            conn.send(("stop", None))
        except OSError:
            pass
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()
    conn.close()


# --------------------------------------------------------------------------------------------
# Global scores: the top half forward and the bottom half backward, on two fillers at once
# --------------------------------------------------------------------------------------------


def halves_apply(mode: str, ends, m: int, n: int) -> bool:
    """Whether :func:`halves_score` gives this alignment's score and end cell: global mode
    whose end is cell ``(m, n)`` and whose left column is penalised (free leading gaps of
    ``a``, along the top row, are fine)."""
    _, a_trail, b_lead, b_trail = ends
    return mode == "global" and not (a_trail or b_lead or b_trail) and m >= 2 and n >= 1


def halves_score(job, top_filler, bottom_filler, threads: int, progress=None):
    """The global score of ``job``'s pair (:func:`halves_apply`) from two independent fills,
    and the two fillers used (either may be a callable that makes it: then it is made in the
    thread that fills its half, beside the other half's set-up and fill).

    ``top_filler`` fills rows ``0 .. r`` (``r = m // 2``) of the matrix forward, from the
    mode's boundaries; ``bottom_filler``, holding both sequences reversed, fills rows
    ``0 .. m - r`` of the reversed problem (the suffixes ``a[r:]``, ``b[j:]`` aligned from
    their ends). Every path crosses row ``r`` and leaves it at some cell ``(r, j)``: the best
    alignment through it scores ``F_H(r, j) + R_H(r, j)``, or, when a vertical gap runs across
    the cut, ``F_D(r, j) + R_D(r, j) + o`` (each half paid the gap's opening); the score is the
    largest of these. The two fills share no border (on two devices: no hand-on at all), each
    half a wavefront as long as the whole matrix's but with half its rows.
    """
    m, n = len(job.a), len(job.b)
    r = m // 2
    o, e = job.o, job.e
    store, neg = job.lanes.store, job.lanes.neg_store
    whole = job.global_region()
    gap = lambda k: -(o + e * np.arange(k + 1, dtype=np.int64))  # noqa: E731
    rev_top = np.empty((2, n + 1), store)
    rev_left = np.empty((2, m - r + 1), store)
    rev_top[0], rev_left[0] = gap(n), gap(m - r)
    rev_top[0, 0] = rev_left[0, 0] = 0
    rev_top[1] = rev_left[1] = neg
    pieces = [
        (top_filler, whole.top, np.ascontiguousarray(whole.left[:, : r + 1])),
        (bottom_filler, rev_top, rev_left),
    ]
    rows: list = [None, None]
    made = [top_filler, bottom_filler]
    failed: list[BaseException] = []

    def fill(k: int) -> None:
        filler, top, left = pieces[k]
        h = left.shape[1] - 1
        t0 = time.perf_counter()
        if not isinstance(filler, RegionFiller) and callable(filler):
            try:
                filler = made[k] = filler()
            except BaseException as exc:
                failed.append(exc)
                return
        last_halves[f"set_up_{k}"] = time.perf_counter() - t0
        last_halves[f"began_{k}"] = t0 - began  # this half's start after the other's
        th = getattr(filler, "tile_rows", None) or min(job.tiling.tile_rows, h)
        tw = getattr(filler, "tile_cols", None) or min(job.tiling.tile_cols, n)
        if HALVES_TALL > 1 and hasattr(filler, "taller"):  # no checkpoint rows are kept
            tall = filler.taller(th, HALVES_TALL, wide=False)  # (measured on packed tiles)
            if min(-(-h // tall), -(-n // tw)) >= HALVES_TALL_MIN_TILES:
                th = tall
        last_halves[f"tile_rows_{k}"] = th
        n_rows, n_cols = -(-h // th), -(-n // tw)
        try:
            done = filler.fill_region(
                0, 0, top, left, np.full(n_rows, -1), np.full(n_cols, -1), th, tw, threads
            )
            rows[k] = np.asarray(done.last_row, np.int64)
            last_halves[f"fill_{k}"] = time.perf_counter() - t0 - last_halves[f"set_up_{k}"]
            if progress is not None:
                progress(h * n)
        except BaseException as exc:  # raised in the caller's thread
            failed.append(exc)

    last_halves.clear()
    began = time.perf_counter()
    worker = threading.Thread(target=fill, args=(1,), name="dpalign-bottom-half")
    worker.start()
    fill(0)
    worker.join()
    if failed:
        raise failed[0]
    f_h, f_d = rows[0][0], rows[0][1].copy()
    r_h, r_d = rows[1][0][::-1], rows[1][1][::-1].copy()
    # column 0 (and n, for the reversed half) is a boundary: the only path along it is a
    # vertical gap, whose D the fills do not keep
    f_d[0], r_d[n] = f_h[0], r_h[n]
    score = int(max((f_h + r_h).max(), (f_d + r_d).max() + o))
    last_halves["wall"] = time.perf_counter() - began
    return score, made


#: Device halves in packed tiles fill in tile rows up to this many times the pair's
#: (``taller``): fewer, longer launches (two H200s, 3 Mb: 2.89-2.92 s with 512-row packed
#: tiles, 3.13 s with 256), where a half's longest tile diagonal in them still holds at
#: least HALVES_TALL_MIN_TILES tiles (3 Mb: ~2,800; a launch of fewer than the ~1,500 an
#: H200 runs at once takes a tile's latency, which taller tiles double).
HALVES_TALL = 2
HALVES_TALL_MIN_TILES = 1500

#: The last :func:`halves_score`'s account (each half's set-up and fill, seconds), for
#: benchmarks.
last_halves: dict = {}


def halves_fillers(job, bands: Bands, devices, scoring, device_tile):
    """``(top, bottom)`` for :func:`halves_score`: callables that hold the pair on the first
    device backend of ``devices`` and the reversed pair on the second (each made in its
    half's thread, so the two set-ups overlap); with no devices, two CPU fillers."""
    from . import engine

    a_rev, b_rev = np.ascontiguousarray(job.a[::-1]), np.ascontiguousarray(job.b[::-1])
    if devices:
        neg_store = job.lanes.neg_store

        def holder(backend, a, b):
            def hold():
                made = engine.device_regions(backend, a, b, scoring, False, neg_store, device_tile)
                if made is None:
                    raise OptionError(f"{backend.name} holds no long pair for a half")
                return made

            return hold

        return holder(devices[0], job.a, job.b), holder(devices[1], a_rev, b_rev)
    lanes = job.lanes
    bottom = engine.cpu_regions(
        a_rev, b_rev, job.matrix, job.o, job.e, False, lanes.neg, lanes.neg_store, lanes.relative
    )
    return job.cpu, bottom
