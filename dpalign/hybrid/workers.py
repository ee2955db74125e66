"""Workers that pull units from the queue: one per CPU core, one per device.

A CPU worker runs the CPU backend's kernel on one unit at a time (the Numba kernels release the
GIL). A device worker takes many units at once and runs them through a device backend (OpenCL),
sized from its measured throughput so that every worker finishes at about the same time.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict

import numpy as np

from .. import config
from ..engine import Backend, BlockScores, QueryBatch, ReferenceBlock, Task
from ..errors import DpalignError
from .queue import Unit, WorkQueue

log = logging.getLogger("dpalign.hybrid")


class InjectedFailure(DpalignError):
    """Raised by a worker on purpose (tests of fault tolerance)."""


class Worker:
    """Base: a name, a way to take units, a way to compute them."""

    kind = "worker"

    def __init__(self, name: str, fail_after: int | None = None) -> None:
        self.name = name
        self.fail_after = fail_after  # raise after this many units (fault injection)
        self.units_done = 0

    def take(self, queue: WorkQueue, rates: dict[str, float]) -> list[Unit]:
        raise NotImplementedError

    def compute(self, task: Task, queries: QueryBatch, blocks, units: list[Unit]):
        """Return ``[(unit, BlockScores)]`` for the given units."""
        raise NotImplementedError

    def device_wait(self) -> tuple[float, float]:
        """(wall, CPU) seconds spent waiting for a device since the last call (0 here)."""
        return 0.0, 0.0

    def thread_wait(self) -> tuple[float, float]:
        """This thread's (wall, CPU) time inside device waits so far (0 on a CPU)."""
        return 0.0, 0.0

    def prepare(self, task: Task, queries: QueryBatch, blocks) -> None:
        """Get ready for a run before the first take (on the worker's own thread)."""

    def _maybe_fail(self, n_new: int) -> None:
        if self.fail_after is not None and self.units_done + n_new > self.fail_after:
            raise InjectedFailure(f"injected failure after {self.fail_after} units")


class CpuWorker(Worker):
    """One CPU core: the CPU backend's kernel on one unit (read chunk x block) at a time."""

    kind = "cpu"

    def __init__(
        self, name: str, backend: Backend, fail_after: int | None = None, nice: int = 0
    ) -> None:
        super().__init__(name, fail_after)
        self.backend = backend
        self.nice = nice  # lower this worker thread's priority by this much for the run

    def prepare(self, task, queries, blocks):
        if self.nice:
            lower_thread_priority(self.nice)

    def take(self, queue, rates):
        return queue.take_back()

    def compute(self, task, queries, blocks, units):
        self._maybe_fail(len(units))
        out = []
        for unit in units:
            reads = queries.subset(slice(unit.start, unit.stop))
            out.append((unit, self.backend.score_block(task, reads, blocks[unit.block])))
        return out


class DeviceWorker(Worker):
    """One device, fed many units per call through a device backend."""

    kind = "device"

    def __init__(
        self,
        name: str,
        backend: Backend,
        n_blocks: int,
        fail_after: int | None = None,
        chunk_reads: int = 1,
    ) -> None:
        super().__init__(name, fail_after)
        self.backend = backend
        self.n_blocks = n_blocks
        self.chunk_reads = chunk_reads  # reads per unit
        self.peers: list[str] = []  # the other device workers of the run
        self.devices_only = False  # no CPU worker in the run (set by run_workers)
        self.takes = 0  # takes so far in this run

    def take(self, queue, rates):
        # Weighted by measured throughput: once this device's rate is known (from its first
        # take, or from an earlier run), take HYBRID_DEVICE_SHARE of its share of what
        # remains; never less than HYBRID_DEVICE_MIN_READS reads against every block: smaller
        # launches lose GPU efficiency (the seed's Table 2 shape is flat only from ~2,500
        # reads), and each take costs a round trip. The first take with no rate to go by takes
        # that minimum.
        from .. import config

        mine = rates.get(self.name)
        if self.devices_only and self.takes == 0 and config.HYBRID_WHOLE_SHARE and mine:
            # Devices alone, rates known: the first take is this device's share of the whole
            # queue by the devices' rates (the other devices take theirs), one launch each,
            # rounded to the nearest whole chunk and with no minimum: on two H200s the
            # minimum (13 chunks) took 13 of a small batch's 20 chunks, and rounding up gave
            # the first taker a chunk more (the other GPU idled 0.07-0.18 s a batch).
            together = mine + sum(rates.get(peer, mine) for peer in self.peers)
            n_chunks = queue.total // self.n_blocks
            chunks = max(1, math.floor(n_chunks * mine / together + 0.5))
            self.takes += 1
            return queue.take_front(chunks * self.n_blocks)
        chunks = max(1, math.ceil(config.HYBRID_DEVICE_MIN_READS / max(1, self.chunk_reads)))
        k = self.n_blocks * chunks
        if mine is not None:
            # A device not measured yet counts as fast as this one: otherwise the first of two
            # GPUs to finish its first take saw itself as the only device and took 95% of the
            # rest (measured on two H200s: shares 0.80 / 0.20, 1.15x one GPU).
            unmeasured = sum(1 for peer in self.peers if peer not in rates)
            total = sum(rates.values()) + unmeasured * mine
        if mine is not None and total > 0:
            share = config.HYBRID_DEVICE_SHARE
            k = max(k, math.ceil(queue.remaining * (mine / total) * share))
        # Whole read chunks: a chunk split between two takes is two launches, each scoring
        # the chunk against every block (see devproc), the second ~40 ms on the H100.
        k = math.ceil(k / self.n_blocks) * self.n_blocks
        self.takes += 1
        return queue.take_front(k)

    def prepare(self, task, queries, blocks):
        self.backend.prepare(task, queries, blocks)

    def take_note(self) -> str:
        """What the run's timeline adds to this worker's last take (its child's own times)."""
        return ""

    def thread_wait(self):
        return self.backend.device_wait()

    def compute(self, task, queries, blocks, units):
        self._maybe_fail(len(units))
        groups = _launch_groups(units)
        out = []
        for start, stop, _blocks, group_units in groups:
            reads = queries.subset(slice(start, stop))
            # Every block, as in devproc: a subset would re-upload the device's profiles.
            results = self.backend.score(task, reads, blocks)
            for unit in group_units:
                result = results[unit.block]
                rows = slice(unit.start - start, unit.stop - start)
                out.append((unit, BlockScores(result.scores[rows], result.width[rows])))
        return out


class ProcessDeviceWorker(DeviceWorker):
    """A device worker whose OpenCL work runs in a child process (see :mod:`.devproc`).

    This thread only takes units and waits on a pipe, so the child's host work never queues on
    the GIL behind the CPU workers.
    """

    def __init__(
        self,
        name: str,
        process,
        n_blocks: int,
        fail_after: int | None = None,
        chunk_reads: int = 1,
    ):
        super().__init__(name, None, n_blocks, fail_after, chunk_reads)
        self.process = process
        self.shared = None  # the run's SharedResults, set by the backend
        self._wait = [0.0, 0.0]

    def prepare(self, task, queries, blocks):
        # Here rather than before the run: the CPU workers start at once, and the child's
        # set-up (profiles laid out and uploaded, kernels built) stays out of this worker's
        # first measured take, which sizes the next take.
        self.process.setup(task, queries, blocks, self.shared)

    def compute(self, task, queries, blocks, units):
        self._maybe_fail(len(units))
        groups = _launch_groups(units)
        # Groups whose read ranges follow each other go in one launch (see devproc); a take
        # is normally one run of whole chunks, plus the partial chunk where it met the CPU
        # workers' units.
        runs = [[groups[0]]]
        for group in groups[1:]:
            if group[0] == runs[-1][-1][1]:
                runs[-1].append(group)
            else:
                runs.append([group])
        out = []
        self._timed = len(self.process.timings)
        for run in runs:
            _, wait = self.process.score([(start, stop, ids) for start, stop, ids, _ in run])
            self._wait[0] += wait[0]
            self._wait[1] += wait[1]
            for group in run:  # already in the shared results
                out.extend((unit, None) for unit in group[3])
        return out

    def device_wait(self) -> tuple[float, float]:
        wait, self._wait = tuple(self._wait), [0.0, 0.0]
        return wait

    def take_note(self) -> str:
        timed = self.process.timings[getattr(self, "_timed", 0) :]
        items = [" ".join(f"{k} {v:.3f}" for k, v in t.items()) for t in timed]
        return f" (child: {'; '.join(items)})" if items else ""

    def thread_wait(self):
        return 0.0, 0.0  # this thread waits on a pipe; the child's waits come by device_wait


def lower_thread_priority(step: int) -> bool:
    """Raise the calling thread's nice value by ``step`` (Linux, where it is per thread);
    returns whether it did.

    The hybrid's CPU workers run at a lower priority than the host threads that feed the
    GPUs: with one worker per core, a device's host work (launching, collecting scores) had
    to wait for a core, and the GPU idled meanwhile (H100 host: the GPU side ran 2-5% slower
    beside 16 CPU workers than alone). The worker threads end with the run, and their nice
    value with them.
    """
    import sys
    import threading

    if not sys.platform.startswith("linux"):  # elsewhere PRIO_PROCESS names a process
        return False
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + step))
    except (AttributeError, OSError):
        return False
    return True


def _launch_groups(units: list[Unit]):
    """Group units by read range; consecutive chunks with the same blocks share a launch."""
    by_chunk: dict[tuple[int, int], list[Unit]] = defaultdict(list)
    for unit in units:
        by_chunk[(unit.start, unit.stop)].append(unit)
    groups: list[tuple[int, int, tuple[int, ...], list[Unit]]] = []
    for (start, stop), chunk_units in sorted(by_chunk.items()):
        ids = tuple(sorted(u.block for u in chunk_units))
        if groups and groups[-1][1] == start and groups[-1][2] == ids:
            first, _, _, earlier = groups[-1]
            groups[-1] = (first, stop, ids, earlier + chunk_units)
        else:
            groups.append((start, stop, ids, chunk_units))
    return groups


def empty_results(queries: QueryBatch, blocks) -> list[BlockScores]:
    """Zeroed per-block results for every query (filled in as units finish)."""
    return [
        BlockScores(
            np.zeros((len(queries), b.width), np.int64), np.zeros((len(queries), b.width), np.uint8)
        )
        for b in blocks
    ]


def run_workers(
    workers: list[Worker],
    queue: WorkQueue,
    task: Task,
    queries: QueryBatch,
    blocks: list[ReferenceBlock],
    stats,
    progress=None,
    results: list[BlockScores] | None = None,
    known_rates: dict[str, float] | None = None,
):
    """Run every worker on its own thread until the queue is empty; gather the results.

    Returns per-block ``BlockScores`` covering all queries. A worker that raises gives its
    units back to the queue and stops; the run fails only if every worker has failed.
    """
    import threading

    results = empty_results(queries, blocks) if results is None else results
    read_ends = [0, *np.cumsum(queries.lengths, dtype=np.int64).tolist()]
    block_residues = [b.residues for b in blocks]
    # Throughput per worker (cells/s), seeded from earlier runs when the caller knows them, so
    # a device's first take can already be its share rather than a calibration minimum.
    rates: dict[str, float] = dict(known_rates or {})
    measured: set[str] = set()
    failures: list[BaseException] = []
    alive = [len(workers)]
    lock = threading.Lock()

    def fail(worker: Worker, exc: BaseException, units: list) -> None:
        with lock:  # a failed worker's rate no longer counts in anybody's share
            rates.pop(worker.name, None)
            for d in devices:
                if worker.name in d.peers:
                    d.peers.remove(worker.name)
        queue.give_back(units)
        stats.failed(worker.name, str(exc))
        log.warning(
            "%s failed (%s); its %d units went back to the queue", worker.name, exc, len(units)
        )
        with lock:
            failures.append(exc)
            alive[0] -= 1
            if alive[0] == 0:
                queue.stop()

    def loop(worker: Worker) -> None:
        try:
            with stats.span(f"{worker.name}: prepare"):
                worker.prepare(task, queries, blocks)
        except Exception as exc:  # a device that cannot even start: the others go on
            fail(worker, exc, [])
            return
        while True:
            units = worker.take(queue, rates)
            if not units:
                return
            start, cpu_start = time.perf_counter(), time.thread_time()
            waited = worker.thread_wait()
            try:
                done = worker.compute(task, queries, blocks, units)
            except Exception as exc:  # a lost device, out of resources, a kernel error
                fail(worker, exc, units)
                return
            seconds = time.perf_counter() - start
            cpu_seconds = time.thread_time() - cpu_start  # a spinning wait would show here
            if isinstance(worker, DeviceWorker):  # (a CPU worker's many units would flood it)
                note = worker.take_note()
                stats.mark(f"{worker.name}: {len(units)} units{note}", start, start + seconds)
            cells = 0
            for unit, scores in done:
                if scores is not None:  # None: the worker wrote into the results itself
                    results[unit.block].scores[unit.start : unit.stop] = scores.scores
                    results[unit.block].width[unit.start : unit.stop] = scores.width
                # Plain integers: a NumPy sum per unit cost ~15 ms for a GPU's take of 3,800
                # units, all of it after the device had finished.
                cells += (read_ends[unit.stop] - read_ends[unit.start]) * block_residues[unit.block]
            worker.units_done += len(units)
            now, child = worker.thread_wait(), worker.device_wait()
            stats.record(
                worker.name,
                cells,
                seconds,
                blocks=len(units),
                cpu_seconds=cpu_seconds,
                wait=(now[0] - waited[0] + child[0], now[1] - waited[1] + child[1]),
            )
            with lock:
                # Cells per second, smoothed over the worker's whole history.
                w = stats.workers[worker.name]
                rates[worker.name] = w.cells / w.seconds if w.seconds > 0 else 0.0
                measured.add(worker.name)
            queue.done(units)
            if progress is not None:
                progress(cells)

    devices = [w for w in workers if isinstance(w, DeviceWorker)]
    for w in devices:
        w.peers = [d.name for d in devices if d is not w]
        w.devices_only = len(devices) == len(workers)
    threads = [threading.Thread(target=loop, args=(w,), name=w.name, daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.2)
    except KeyboardInterrupt:
        queue.stop()
        raise
    if alive[0] == 0:
        raise DpalignError(f"every worker failed; the last error: {failures[-1]}")
    run_cells = sum(stats.workers[name].cells for name in measured)
    # Hand the measurements back for the next run, but not from a run smaller than one unit
    # (dpalign.papara's warm-up read): its times are start-up, not throughput.
    if known_rates is not None and run_cells >= config.HYBRID_UNIT_CELLS:
        for name in measured:
            if name in rates:
                known_rates[name] = rates[name]
            else:  # it failed: the next run measures it afresh
                known_rates.pop(name, None)
    return results
