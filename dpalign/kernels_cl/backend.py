"""The ``opencl`` backend: every block at once on one OpenCL device (a GPU, or PoCL's CPU).

It keeps the engine's batch/block contract: the blocks' lanes are concatenated into one
inter-reference array, cut into work-groups of up to a few hundred profiles (the seed's
R_padded), and read batches are sized from the device memory and the reads' lengths. Results
come back as one :class:`~dpalign.engine.BlockScores` per block. Traceback stays on the CPU.

``Task(kernel="pairwise")`` runs the inter-sequence search kernel
(:mod:`dpalign.kernels_cl.search`): the blocks' lanes become the targets (uploaded once and
kept for the next call with the same blocks), each query is searched against all of them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .. import config
from ..contract import Backend, BlockScores, RegionFill, RegionFiller
from ..errors import BackendUnavailable, OptionError
from .names import ANTIDIAGONAL, PAPARA, SEARCH

if TYPE_CHECKING:
    from .papara import PaparaRunner
    from .search import SearchRunner

# The host modules (papara, search, antidiagonal, context and its programs) load where they
# are used: the registry imports this module on every command, for its name and kernels.

log = logging.getLogger("dpalign.opencl")

#: Profiles are padded to a multiple of this many lanes (the engine's default block width).
LANE_GROUP = config.BLOCK_WIDTH
#: Queries per search chunk: at most this many, and at most this many scores in all.
QUERY_CHUNK_MAX = 1024
QUERY_CHUNK_CELLS = config.OPENCL_SEARCH_CHUNK_SCORES


def concatenate(blocks) -> tuple[np.ndarray, np.ndarray]:
    """The blocks' lanes side by side: ``(states, flags)`` of shape ``[n, 32 * blocks]``.

    PaPaRa profiles all span the same columns; padding lanes (length 0) are left empty. One
    block laid out by this backend's own width (the engine's packer) is used as it is.
    """
    lengths = np.concatenate([b.lengths for b in blocks])
    real = lengths[lengths > 0]
    if real.size and (real != real[0]).any():
        raise OptionError("the opencl backend scores PaPaRa profiles, which share one length")
    n = int(real[0]) if real.size else 0
    if len(blocks) == 1 and blocks[0].flags is not None and blocks[0].codes.shape[0] == n:
        return blocks[0].codes, blocks[0].flags
    width = sum(b.width for b in blocks)
    dtype = np.result_type(*(b.codes.dtype for b in blocks))
    states = np.zeros((n, width), dtype=dtype)
    flags = np.zeros((n, width), dtype=np.uint8)
    lane = 0
    for block in blocks:
        rows = min(n, block.codes.shape[0])
        states[:rows, lane : lane + block.width] = block.codes[:rows]
        if block.flags is not None:
            flags[:rows, lane : lane + block.width] = block.flags[:rows]
        lane += block.width
    return states, flags


class DeviceRegions(RegionFiller):
    """One long pair on the device (:class:`~dpalign.kernels_cl.antidiagonal.PairOnDevice`)
    behind the engine's region contract."""

    prunes = True
    reuses_stores = True
    stores_slots = 8  # page-locked buffers are pinned for the slots used only
    spans_stores = True
    retile: tuple[int, int, int] | None = None  # the traceback's tiles, if not the same

    def __init__(self, pair, neg_store: int) -> None:
        self.pair = pair
        self.neg_store = neg_store
        self.tile_rows, self.tile_cols = pair.shape.rows, pair.shape.cols
        self.label = f"opencl {pair.dctx.caps.name}"

    @property
    def cells(self) -> int:
        return self.pair.cells

    @property
    def kernel_seconds(self) -> float:
        return self.pair.kernel_seconds

    @property
    def pruned_cells(self) -> int:
        return self.pair.pruned_cells

    def reshaped(self, tile) -> DeviceRegions:
        """The same pair with tiles ``(rows, items, per_item)`` (no wider than these)."""
        from .antidiagonal import TileShape

        return DeviceRegions(self.pair.reshaped(TileShape(*tile)), self.neg_store)

    def taller(self, tile_rows: int, factor: int, wide: bool = True) -> int:
        """Tile rows up to ``factor`` times ``tile_rows`` that fill as these do
        (``PairOnDevice.taller``): fewer launches for fills with no checkpoint rows."""
        return self.pair.taller(tile_rows, factor, wide)

    def together(self, others, **options) -> RegionFiller | None:
        """One filler for this pair and the same pair on ``others`` (DeviceRegions of other
        devices): large regions in skewed row bands across all of them
        (:class:`~dpalign.kernels_cl.skewed.SkewedFill`), None when their tiles differ."""
        pairs = [self.pair] + [getattr(o, "pair", None) for o in others]
        if any(p is None or p.shape != self.pair.shape for p in pairs):
            return None
        return SkewedRegions(self, pairs, **options)

    def on_stream(self, stream: int) -> DeviceRegions:
        """The same pair and tiles on queues of their own (``PairOnDevice.on_stream``)."""
        other = DeviceRegions(self.pair.on_stream(stream), self.neg_store)
        other.retile = self.retile
        return other

    def reserve_stores(self, nbytes: int, slots) -> None:
        """Page-locked host memory for the fills with ``reuse_stores`` into ``slots``,
        ready before they need it (see ``PairOnDevice.reserve_stores``)."""
        self.pair.reserve_stores(nbytes, slots)

    def fill_region(
        self,
        r0,
        c0,
        top,
        left,
        row_slot,
        col_slot,
        tile_rows,
        tile_cols,
        threads,
        prune=False,
        reuse_stores=False,
        stores_slot=0,
        while_running=None,
        spans=None,
    ):
        fill = self.pair.fill_region(
            r0,
            c0,
            top,
            left,
            row_slot,
            col_slot,
            tile_rows,
            self.neg_store,
            prune,
            reuse_stores,
            stores_slot=stores_slot,
            while_running=while_running,
            spans=spans,
        )
        return RegionFill(
            fill.last_row, fill.row_store, fill.col_store, fill.best,
            fill.row_spans, fill.col_spans, fill.fetch_rest,
        )  # fmt: skip


class SkewedRegions(RegionFiller):
    """The same pair on several devices, filling each region in skewed row bands across
    them (:mod:`dpalign.kernels_cl.skewed`); regions of other tiles, pruned fills and
    regions too short for a band per device go to ``first`` alone."""

    prunes = True
    reuses_stores = True

    def __init__(self, first: DeviceRegions, pairs, **options) -> None:
        from .skewed import SkewedFill

        self.first = first
        self.pairs = pairs
        self.filler = SkewedFill(pairs, **options)
        self.tile_rows, self.tile_cols = first.tile_rows, first.tile_cols
        self.label = f"{first.label} x {len(pairs)} (skewed bands)"

    @property
    def cells(self) -> int:
        return sum(p.cells for p in self.pairs)

    @property
    def kernel_seconds(self) -> float:
        return sum(p.kernel_seconds for p in self.pairs)

    def fill_region(
        self, r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads, **more
    ):
        if more.get("prune") or tile_cols != self.pairs[0].shape.cols:
            return self.first.fill_region(
                r0, c0, top, left, row_slot, col_slot, tile_rows, tile_cols, threads, **more
            )
        fill = self.filler.fill_region(
            r0, c0, top, left, row_slot, col_slot, tile_rows, self.first.neg_store
        )
        return RegionFill(fill.last_row, fill.row_store, fill.col_store, fill.best)


def _prepare_quietly(runner, codes, scoring, mode, ends) -> None:
    """:meth:`SearchRunner.prepare` of later queries, ahead of their turn; an error is left
    for the search itself to meet (it prepares every chunk it takes)."""
    try:
        runner.prepare(codes, scoring, mode, ends, build=False)
    except Exception:  # noqa: BLE001 - raised again where the search prepares these queries
        log.debug("opencl search: preparing later queries ahead failed", exc_info=True)


@dataclass
class OpenCLBackend(Backend):
    """PaPaRa scoring (:mod:`dpalign.kernels_cl.papara`) and pairwise scores of queries
    against targets (:mod:`dpalign.kernels_cl.search`) on one OpenCL device.

    Parameters
    ----------
    device : str, optional
        Device spec (see :func:`dpalign.kernels_cl.context.choose_device`); default the
        ``DPALIGN_OPENCL_DEVICE`` variable, else the first GPU, else the first CPU device.
    design : {"strip", "blocked"}, optional
        Kernel design (default :data:`dpalign.config.OPENCL_DESIGN`).
    width : {None, 32}, optional
        None: 16-bit packed kernels wherever they cannot overflow (PaPaRa) or did not come
        near overflowing (pairwise; those pairs are recomputed), else 32-bit; 32: always the
        int32 kernels.
    search_kernel : {None, "auto", "strip", "group"}, optional
        The search's 16-bit kernel (:class:`~dpalign.kernels_cl.search.SearchRunner`'s
        ``local_kernel``; "group" runs the thread-group kernel on any device, as the PoCL
        tests do).
    """

    device: str | None = None
    design: str | None = None
    width: int | None = None
    search_kernel: str | None = None  # SearchRunner's local_kernel (None: "auto")
    stream: int = 0  # queues of their own on the device (a second host thread per GPU)
    #: Device specs (comma-separated) sharing one OpenCL context with this backend's device
    #: (its own among them), for fills whose devices wait on each other's events
    #: (:func:`~dpalign.kernels_cl.context.shared_contexts`); the backend's device is the
    #: ``stream``-th of them naming it.
    share: str | None = None
    name = "opencl"
    kind = "device"
    kernels = (*PAPARA, *SEARCH, *ANTIDIAGONAL)

    @classmethod
    def available(cls, **options) -> bool:
        from .context import list_devices

        try:
            return bool(list_devices())
        except BackendUnavailable:
            return False

    @classmethod
    def unavailable_reason(cls, **options) -> str:
        from .context import list_devices

        try:
            list_devices()
        except BackendUnavailable as exc:
            return str(exc)
        return "no OpenCL device was found (is an ICD such as pocl-binary-distribution installed?)"

    @classmethod
    def gpus(cls) -> list[str]:
        """``platform:device`` ids of every OpenCL GPU on this machine (a work queue's
        device workers)."""
        from .context import list_devices

        try:
            import pyopencl as cl

            return [ident for ident, dev in list_devices() if dev.type & cl.device_type.GPU]
        except (ImportError, BackendUnavailable):
            return []

    def block_width(self, kernel, n_targets):
        # Everything in one block: the PaPaRa kernels read all profiles side by side (cut into
        # work-groups on the device), and the search runner sorts, packs and buckets its
        # targets itself, so smaller blocks were only concatenated or unpacked again.
        if kernel == "papara":
            return max(LANE_GROUP, -(-n_targets // LANE_GROUP) * LANE_GROUP)
        return max(1, n_targets)

    def query_chunk(self, kernel, n_targets):
        # Many queries per chunk: the runner batches them per launch and keeps two batches
        # in flight, across chunks (score_stream). Bounded by the [queries, targets] int64
        # scores a chunk returns (~200 MB against 200,000 targets).
        if kernel != "pairwise":
            return None
        return int(min(QUERY_CHUNK_MAX, max(64, QUERY_CHUNK_CELLS // max(n_targets, 1))))

    def block_layout(self, kernel):
        # Search targets one after another: no 2-D lane padding to unpack.
        return "ragged" if kernel == "pairwise" else "lanes"

    def prepare(self, task, queries, blocks):
        """PaPaRa: the profiles on the device. Search: the targets on the device and the
        bucket layouts of the queries' plans started (no program builds: a command's
        warm-up may be building them on another thread meanwhile)."""
        if task.kernel == "papara" and len(queries) and blocks:
            self._runner(task, blocks, int(queries.codes.max(initial=0)))
        elif task.kernel == "pairwise" and len(queries) and blocks and self.width != 32:
            began = time.perf_counter()
            runner = self._search_runner(blocks)
            made = time.perf_counter()
            codes = [queries.codes[q, : int(queries.lengths[q])] for q in range(len(queries))]
            codes.sort(key=len, reverse=True)
            # The first chunk's plans here (a search takes the longest queries first, a chunk
            # at a time), the other chunks' on a thread (their plans, ~0.1 s of NumPy for
            # 200,000 targets, and their layouts' hand-out): the search starts without them,
            # and the layout threads take the first chunk's buckets first.
            first = self.query_chunk("pairwise", len(runner.codes))
            sc, mode, ends = task.scoring, task.mode, task.free_ends
            runner.prepare(codes[:first], sc, mode, ends, build=False)
            log.info(
                "opencl search: prepared in %.3f s (targets %.3f s, the first chunk's plans "
                "and layouts handed out %.3f s)",
                time.perf_counter() - began, made - began, time.perf_counter() - made,
            )  # fmt: skip
            if len(codes) > first:
                threading.Thread(
                    target=_prepare_quietly,
                    args=(runner, codes[first:], sc, mode, ends),
                    name="dpalign-prepare",
                    daemon=True,
                ).start()

    def warm_up(self, task) -> None:
        """Build the search programs ``task`` may take before the database is read (a
        command calls this while it reads its files): every shape of the thread-group
        kernel for the mode, where that kernel runs. Programs in the disk cache load in
        milliseconds; a first run compiles them beside the reading, those the disk cache
        lacks split between this process and :data:`config.OPENCL_BUILD_PROCESSES` child
        processes on GPUs (the driver compiles one program at a time per process), which
        start before this process's context exists."""
        if task.kernel != "pairwise" or self.width == 32:
            return
        from .capabilities import capabilities
        from .context import choose_device, device_context
        from .programs import build_all, start_builds
        from .search import SearchTask, takes_group_kernel
        from .search_group import (
            WARM_QUERY_LENGTH,
            build_threads,
            every_shape_defines,
            keeps_best,
            preload,
        )

        ident, device = choose_device(self.device)
        caps = capabilities(device)
        search_task = SearchTask.of(task.scoring, task.mode, task.free_ends)
        if not takes_group_kernel(search_task, self.search_kernel, caps.ptx_s16x2):
            return
        glob = not search_task.local
        nobest = not keeps_best(glob, task.scoring, WARM_QUERY_LENGTH)
        defines = every_shape_defines(glob, caps.ptx_s16x2, nobest)
        children, mine = None, defines
        if config.OPENCL_BUILD_PROCESSES and not caps.is_cpu:
            name, processes = "search_group.cl", config.OPENCL_BUILD_PROCESSES
            children, mine = start_builds(caps, ident, name, defines, processes, keep=True)
        began = time.perf_counter()
        dctx = device_context(self.device, self.stream)
        context = time.perf_counter()
        build_all(dctx, "search_group.cl", mine, build_threads())
        own = time.perf_counter()
        if children is not None:
            children.wait()
        waited = time.perf_counter()
        build_all(dctx, "search_group.cl", defines, build_threads())  # the children's, loaded
        built = time.perf_counter()
        if not caps.is_cpu:  # (PoCL would compile each kernel again at its first launch)
            preload(dctx, defines)
        log.info(
            "opencl search: warm-up %.3f s (%d programs, %d of them by child processes), "
            "queues and first launches %.3f s",
            built - began, len(defines), children.given if children is not None else 0,
            time.perf_counter() - built,
        )  # fmt: skip
        if children is not None:
            log.info(
                "opencl search: warm-up steps: context %.3f s, %d programs here %.3f s, "
                "then waiting for the children %.3f s, loading %.3f s; children: %s",
                context - began, len(mine), own - context, waited - own, built - waited,
                children.describe(),
            )  # fmt: skip

    def device_wait(self):
        from .context import wait_totals

        return wait_totals()

    def profile_device(self):
        # A GPU's with double precision, not a CPU device's: there the Numba kernel is the
        # faster (PoCL on 2 cores: 0.8 s against 0.1 s for the 1604.PRANK profiles).
        from .capabilities import capabilities
        from .context import choose_device

        device = choose_device(self.device)[1]
        if capabilities(device).is_cpu or "cl_khr_fp64" not in device.extensions:
            return None
        return self

    def device_papara_profiles(self, tips, gap_state, ops, trans, n_edges, cgap):
        from .context import device_context
        from .papara import edge_profiles

        return edge_profiles(
            device_context(self.device, self.stream), tips, gap_state, ops, trans, n_edges, cgap
        )

    def long_pair_cells(self):
        # Every pair takes the long-pair path: its large regions fill on the device.
        return 0

    def _context(self):
        """The device context the long-pair fillers use (shared with ``share``'s devices)."""
        from .context import choose_device, device_context, shared_contexts

        if not self.share:
            return device_context(self.device, self.stream)
        specs = [spec.strip() for spec in self.share.split(",") if spec.strip()]
        try:
            contexts = shared_contexts(specs)
        except BackendUnavailable:  # devices of several platforms: a context each
            return device_context(self.device, self.stream)
        ident = choose_device(self.device)[0]
        mine = [dctx for dctx in contexts if dctx.ident == ident]
        if len(mine) <= self.stream:
            raise OptionError(f"device {self.device!r} is not among the shared devices {specs}")
        return mine[self.stream]

    def region_filler(self, a, b, scoring, local, neg_store, tile=None):
        from .antidiagonal import GPU_RETILE, GPU_TILE, PairOnDevice, TileShape

        shape = TileShape(*tile) if tile else None
        pair = PairOnDevice(
            self._context(),
            a,
            b,
            scoring.matrix,
            scoring.gap_open,
            scoring.gap_extend,
            local,
            shape,
        )
        regions = DeviceRegions(pair, neg_store)
        retile = GPU_RETILE or (GPU_TILE if pair.shape.packed else None)
        if tile is None and retile is not None and not pair.dctx.caps.is_cpu:
            regions.retile = (retile.rows, retile.items, retile.per_item)
        return regions

    def describe(self) -> str:
        from .context import device_context

        design = self.design or config.OPENCL_DESIGN
        return f"opencl ({device_context(self.device, self.stream).describe()}; {design} design)"

    def _runner(self, task, blocks, max_read_state: int) -> PaparaRunner:
        """The profiles on the device; the last set is kept, since a hybrid run's device
        worker scores many read chunks against the same blocks."""
        from .context import device_context
        from .papara import PaparaRunner

        key = (task.scoring, tuple(id(b) for b in blocks), max_read_state > 15)
        cached = getattr(self, "_cached", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        states, flags = concatenate(blocks)
        # Protein kernels whenever a state does not fit DNA's 4 bits; protein data whose
        # states all do (residues A, R, N, D only) score the same in the DNA kernels.
        protein = max(int(states.max(initial=0)), max_read_state) > 15
        profiles = int(sum((b.lengths > 0).sum() for b in blocks))
        runner = PaparaRunner(
            device_context(self.device, self.stream),
            task.scoring,
            states,
            flags,
            protein,
            self.design,
            profiles=profiles,
        )
        self._cached = (key, runner, blocks)  # holding the blocks keeps their ids unique
        return runner

    def _search_runner(self, blocks) -> SearchRunner:
        """The blocks' lanes as search targets on the device; the last set is kept (a search
        runs query chunk after query chunk against the same database blocks)."""
        from .context import device_context
        from .search import SearchRunner

        key = tuple(id(b) for b in blocks)
        cached = getattr(self, "_search_cached", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        targets = [lane for block in blocks for lane in block.lanes()]
        one = blocks[0] if len(blocks) == 1 and blocks[0].ragged else None
        # one ragged block of uint8 codes: its lanes are contiguous views, lengths known
        as_they_are = one is not None and one.codes.dtype == np.uint8
        runner = SearchRunner(
            device_context(self.device, self.stream),
            targets,
            local_kernel=self.search_kernel,
            residues=one.codes[: one.residues] if one is not None else None,
            lengths=one.lengths if as_they_are else None,
        )
        self._search_cached = (key, runner, blocks)  # holding the blocks keeps their ids unique
        return runner

    def _score_pairwise(self, task, queries, blocks, progress):
        (out,) = self._stream_pairwise(task, [queries], blocks, progress)
        return out

    def _stream_pairwise(self, task, batches, blocks, progress):
        """The search runner's pipeline over query batches: each batch's programs and bucket
        layouts are started when the pipeline takes it, its scores cut into the blocks."""
        began = time.perf_counter()
        runner = self._search_runner(blocks)
        log.info("opencl search: targets on the device %.3f s", time.perf_counter() - began)
        name = f"opencl {runner.dctx.caps.name}"
        total = int(runner.lengths.sum())
        batches = [
            [queries.codes[q, : int(queries.lengths[q])] for q in range(len(queries))]
            for queries in batches
        ]
        cells = [sum(len(q) for q in codes) * total for codes in batches]

        def prepare(codes) -> None:
            mark = time.perf_counter()
            runner.prepare(codes, task.scoring, task.mode, task.free_ends, width=self.width)
            log.info(
                "opencl search: %d queries' programs and layouts started %.3f s",
                len(codes), time.perf_counter() - mark,
            )  # fmt: skip

        def chunks():
            # The first batch's programs and layouts first; every other batch's once the
            # first batch's launches are queued (the pipeline takes the second batch then):
            # their layouts are made while the device runs the first ones.
            for k, codes in enumerate(batches):
                if k < 2:
                    prepare(codes if k == 0 else [q for later in batches[1:] for q in later])
                yield codes

        stream = runner.score_stream(
            chunks(), task.scoring, task.mode, task.free_ends, width=self.width, progress=progress
        )
        for k, result in enumerate(stream):
            self.stats.record(name, cells[k], result.kernel_seconds, blocks=len(blocks))
            scores, widths = result.scores, result.width
            out, lane = [], 0
            for block in blocks:
                out.append(
                    BlockScores(
                        scores[:, lane : lane + block.width], widths[:, lane : lane + block.width]
                    )
                )
                lane += block.width
            yield out

    def score_stream(self, task, batches, blocks, progress=None):
        """Search batches in one device pipeline (:meth:`SearchRunner.score_stream`): the
        device goes on to the next batch while this one's last results come back; other
        tasks as :meth:`score` one after another."""
        if task.kernel != "pairwise" or not blocks or self.width not in (None, 16, 32):
            yield from super().score_stream(task, batches, blocks, progress)
            return
        yield from self._stream_pairwise(task, batches, blocks, progress)

    def score(self, task, queries, blocks, progress=None, out=None):
        """The Backend contract's ``score``; PaPaRa tasks also take ``out``.

        Parameters
        ----------
        out : (scores, width) arrays of shape ``[len(queries), total block width]``, optional
            Write the scores (int64) and widths (uint8) of all blocks side by side into these
            (a hybrid device process's shared results) instead of new arrays; returns None.
        """
        if out is not None and (task.kernel == "pairwise" or not len(queries)):
            raise OptionError("out= is for PaPaRa scores of a non-empty batch")
        if not blocks:
            return []
        if len(queries) == 0:
            return [
                BlockScores(np.zeros((0, b.width), np.int64), np.zeros((0, b.width), np.uint8))
                for b in blocks
            ]
        if self.width not in (None, 16, 32):
            raise OptionError(f"the opencl backend computes in 16 or 32 bits, not {self.width}")
        if task.kernel == "pairwise":
            return self._score_pairwise(task, queries, blocks, progress)
        codes = queries.codes
        runner = self._runner(task, blocks, int(codes.max(initial=0)))
        dctx = runner.dctx
        result = runner.score(
            codes,
            queries.lengths,
            width=self.width,
            progress=progress,
            out=None if out is None else out[0],
            out_width=None if out is None else out[1],
        )
        self.stats.record(
            f"opencl {dctx.caps.name}", result.cells, result.kernel_seconds, blocks=len(blocks)
        )
        if out is not None:
            return None
        out, lane = [], 0
        for block in blocks:
            scores = result.scores[:, lane : lane + block.width]
            width = np.repeat(result.width[:, None], block.width, axis=1)
            out.append(BlockScores(scores, width))
            lane += block.width
        return out
