"""Device workers in processes of their own, so no GIL is shared with the CPU workers.

Measured on the H100 host (16 cores, 2026-11-21): the OpenCL path called the way a hybrid
device worker calls it reaches 3,052 GCUPS on 0.34 s of host CPU alone, but in the same
process as 16 Numba worker threads its Python host work waits on the GIL, and the run reached
only 0.64-0.79 x (CPU-only + GPU-only). The same GPU work in a second process beside the 16
CPU threads reached the full sum. So each device worker is a thin thread here that hands unit
ranges to a child process over a pipe (a blocking receive: no spinning, no GIL held) and
reads the scores back from shared memory.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import tempfile
import threading
import time

import numpy as np

from ..engine import BlockScores
from ..errors import DpalignError


class ChildFailed(DpalignError):
    """The device process raised or died; its units go back to the queue."""


def _arrays(buffer, n_queries: int, n_lanes: int):
    scores = np.ndarray((n_queries, n_lanes), dtype=np.int64, buffer=buffer)
    width = np.ndarray((n_queries, n_lanes), dtype=np.uint8, buffer=buffer, offset=scores.nbytes)
    return scores, width


def _map(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _child(  # pragma: no cover - a child
    conn, kind: str, device: str, stream: int, idle: float | None = None
) -> None:
    """The device process: score what the parent asks for, write it to shared memory.

    ``idle``: a child started ahead (:func:`prestart`) ends if no request comes within that
    many seconds (its parent never needed it)."""
    from ..engine import get_backend

    try:
        backend = get_backend(kind, device=device, stream=stream)
        backend.describe()  # the device's context made now: the driver starts before any request
    except Exception:
        if idle is None:
            raise
        # started ahead for a GPU that OpenCL does not show: nobody will ask for it, and
        # the user's terminal gets no traceback of it
        os._exit(0)
    wait_totals = backend.device_wait
    scores = width = mapping = None
    task = queries = blocks = offsets = None
    while True:
        try:
            if idle is not None:
                if not conn.poll(idle):
                    break
                idle = None
            message = conn.recv()
        except (EOFError, OSError):  # the parent ended (the CLI exits without a "stop")
            break
        kind = message[0]
        try:
            if kind == "stop":
                break
            if kind == "setup":
                t0 = time.perf_counter()
                _, new_task, queries, new_blocks, path, size = message
                # The last run's results file goes in the background: unmapping its ~230 MB
                # of written pages (the file is already unlinked) took 20-40 ms of each warm
                # run's set-up on the H100 host.
                scores = width = None
                if mapping is not None:
                    threading.Thread(target=mapping.close, daemon=True).start()
                mapping = None
                if new_blocks is not None:  # else the last run's task and blocks again
                    task, blocks = new_task, new_blocks
                    offsets = np.cumsum([0] + [b.width for b in blocks])
                mapping = _map(path, size)
                scores, width = _arrays(mapping, len(queries), int(offsets[-1]))
                t1 = time.perf_counter()
                if new_blocks is not None:
                    # Lay out and upload the profiles now; the kernels are built by the
                    # first take. (A warm-up launch here no longer pays: the first take's
                    # time includes this set-up anyway, since the parent reads this answer
                    # with the take's. Measured on the H100 host: 0.13 s for the 1604.PRANK
                    # profiles beside 16 busy CPU workers, 0.05 s more for a warm-up launch.)
                    backend.prepare(task, queries, blocks)
                timing = {"setup_s": time.perf_counter() - t0, "layout_s": time.perf_counter() - t1}
                conn.send(("ready", timing))
                continue
            _, start, stop, parts = message
            kernel_before = sum(w.seconds for w in backend.stats.workers.values())
            waited = wait_totals()
            t0 = time.perf_counter()
            reads = queries.subset(slice(start, stop))
            if len(parts) == 1 and len(parts[0][2]) == len(blocks):
                # The whole row range is this worker's: the kernel's scores go straight into
                # the shared results, with no copy (measured on the H100: copying a big
                # take's scores cost ~0.17 s of a 2.6 s run).
                backend.score(task, reads, blocks, out=(scores[start:stop], width[start:stop]))
            else:
                # One launch for the whole row range against every block, still: the device
                # backend keeps one set of profiles uploaded, and a subset (where a take meets
                # the CPU workers' units) would lay out and upload the profiles again (~60 ms
                # per such launch on the H100); a launch per part would cost its own pipeline
                # fill and drain (~30 ms). The extra cells are at most one chunk of reads.
                # Only this worker's lanes are written: the others are the CPU workers'.
                results = backend.score(task, reads, blocks)
                for first, last, block_ids in parts:
                    rows = slice(first - start, last - start)
                    for b in block_ids:
                        lanes = slice(int(offsets[b]), int(offsets[b + 1]))
                        scores[first:last, lanes] = results[b].scores[rows]
                        width[first:last, lanes] = results[b].width[rows]
            t1 = time.perf_counter()
            now = wait_totals()
            kernel = sum(w.seconds for w in backend.stats.workers.values()) - kernel_before
            timing = {"score_s": t1 - t0, "kernel_s": kernel}
            conn.send(("done", kernel, now[0] - waited[0], now[1] - waited[1], timing))
        except Exception as exc:  # reported to the parent, which gives the units back
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    # Stopped, or the parent is gone: nothing is left to hand back (the results are in the
    # parent's shared file), so the interpreter's teardown of the OpenCL context and the
    # arrays is skipped. A parent that reads the command's output through a pipe this child
    # inherited would otherwise wait for that teardown too; the standard streams are let go
    # first, since the process's own exit still tears the device context down (0.1 s or more
    # on two H200s, after the command itself had ended).
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    except OSError:
        pass
    os._exit(0)


class SharedResults:
    """One run's scores and widths (all blocks side by side) in a memory-mapped file that the
    device processes map too.

    Device processes write their units straight into it and CPU workers write theirs, so no
    result is copied between processes or units while the run goes on; the blocks handed back
    are views of it (the mapping lives as long as they do). The file lies in ``/dev/shm``
    where there is one (memory, not disk) and is unlinked when the run ends. A new file reads
    as zeros, so nothing is cleared up front (clearing 235 MB took ~0.1 s).
    """

    def __init__(self, n_queries: int, blocks) -> None:
        self.offsets = np.cumsum([0] + [b.width for b in blocks])
        self.shape = (n_queries, int(self.offsets[-1]))
        self.size = max(1, n_queries * self.shape[1] * 9)
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, self.path = tempfile.mkstemp(prefix="dpalign-results-", dir=folder)
        try:
            os.ftruncate(fd, self.size)
            buffer = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.scores, self.width = _arrays(buffer, *self.shape)

    def block(self, b: int) -> BlockScores:
        lanes = slice(int(self.offsets[b]), int(self.offsets[b + 1]))
        return BlockScores(self.scores[:, lanes], self.width[:, lanes])

    def blocks(self) -> list[BlockScores]:
        """Every block's results: views of the shared arrays, no copy."""
        return [self.block(b) for b in range(len(self.offsets) - 1)]

    def close(self) -> None:
        """Remove the file; the mapping stays while views of it are alive."""
        self.scores = self.width = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


#: Device processes started ahead (:func:`prestart`), by (kind, GPU index, stream).
_PRESTARTED: dict[tuple[str, int, int], DeviceProcess] = {}
_PRESTART_LOCK = threading.Lock()
#: Seconds a child started ahead waits for its first request before it ends.
PRESTART_IDLE_S = 120.0


def prestart(kind: str, n_gpus: int, streams: int = 1) -> None:
    """Start the device processes of GPUs ``0..n_gpus-1`` (``streams`` each) now, before the
    parent has listed the GPUs (pyopencl's import and the driver's start, ~0.5 s on the GPU
    hosts): each child finds its GPU (``gpu#k``) and makes its context while the parent reads
    its inputs. A work queue takes them with :func:`claim`; those it never takes end on
    their own after :data:`PRESTART_IDLE_S`, or with the parent."""
    with _PRESTART_LOCK:
        for k in range(n_gpus):
            for stream in range(streams):
                if (kind, k, stream) not in _PRESTARTED:
                    _PRESTARTED[(kind, k, stream)] = DeviceProcess(
                        kind, f"gpu#{k}", stream, idle=PRESTART_IDLE_S
                    )


def drop_prestarted() -> int:
    """Stop every device process started ahead that no work queue took; how many. (A
    ``dpalign serve`` after each command: a child started during it holds that client's
    standard streams open while it lives.)"""
    with _PRESTART_LOCK:
        children = list(_PRESTARTED.values())
        _PRESTARTED.clear()
    for child in children:
        child.close()
    return len(children)


def claim(kind: str, gpu: int, stream: int) -> DeviceProcess | None:
    """The device process started ahead for the ``gpu``-th GPU's queue ``stream``, if one is
    still alive (it is then the caller's), else None."""
    with _PRESTART_LOCK:
        child = _PRESTARTED.pop((kind, gpu, stream), None)
    if child is not None and not child.process.is_alive():
        return None
    return child


class DeviceProcess:
    """A child process holding one device (one stream of it) of the device backend ``kind``
    (``idle``: see :func:`_child`)."""

    def __init__(self, kind: str, device: str, stream: int = 0, idle: float | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork after a driver started threads
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(
            target=_child,
            args=(child_conn, kind, device, stream, idle),
            daemon=True,
            name=f"dpalign-device-{device}-{stream}",
        )
        self.process.start()
        child_conn.close()
        self.timings: list[dict[str, float]] = []
        self._sent = None  # (task, blocks) the child holds, laid out on its device
        self._ready = None  # (task, blocks) of a set-up whose answer is still to be read

    def setup(self, task, queries, blocks, shared: SharedResults) -> None:
        """Send one run's reads, and where its results go; the task and blocks only when
        they are not the ones the child already holds.

        A library session scores read set after read set against one reference: resending
        and laying out the same profiles cost the device ~0.1-0.19 s of each run on the H100
        (while the CPU workers went on alone). The blocks are compared by identity and kept
        referenced here, so an id cannot be reused by other blocks while the child holds
        their copies.
        """
        blocks = list(blocks)
        try:  # the last run's set-up, if no score request of that run read its answer
            self._await_ready()
        except ChildFailed:
            pass  # nothing is known to be laid out then: everything is sent again
        same = (
            self._sent is not None
            and self._sent[0] == task
            and len(self._sent[1]) == len(blocks)
            and all(a is b for a, b in zip(self._sent[1], blocks, strict=True))
        )
        sent_task, sent_blocks = (None, None) if same else (task, blocks)
        self._sent = None  # unknown until the child answers
        self._send(("setup", sent_task, queries, sent_blocks, shared.path, shared.size))
        # The answer is read with the first score request's: the parent sizes its first
        # take while the child sets up.
        self._ready = (task, blocks)

    def _await_ready(self) -> None:
        if self._ready is not None:
            sent, self._ready = self._ready, None
            _, timing = self._receive()
            self.timings.append(timing)
            self._sent = sent

    def score(self, parts) -> tuple[float, tuple[float, float]]:
        """Score ``parts`` (``(first read, stop read, block ids)``, consecutive read ranges)
        in one launch, written into the shared results; returns the kernel seconds and the
        child's (wall, CPU) time waiting for the device.

        The child's own timing of the call (``score_s``: the backend call with the results
        written, ``kernel_s``: device kernel time) is appended to :attr:`timings`.
        """
        parts = [(int(a), int(b), list(ids)) for a, b, ids in parts]
        self._send(("score", parts[0][0], parts[-1][1], parts))
        try:
            self._await_ready()
        except ChildFailed:
            try:  # the request's own answer (an error too, most likely) must not linger
                self.conn.recv()
            except (EOFError, OSError):
                pass
            raise
        _, kernel, wait_wall, wait_cpu, timing = self._receive()
        self.timings.append(timing)
        return kernel, (wait_wall, wait_cpu)

    def _send(self, message) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            raise ChildFailed(f"the device process {self.process.name} has exited") from None

    def _receive(self):
        try:
            reply = self.conn.recv()
        except (EOFError, OSError):
            raise ChildFailed(
                f"the device process {self.process.name} died (exit code {self.process.exitcode})"
            ) from None
        if reply[0] == "error":
            raise ChildFailed(reply[1])
        return reply

    def close(self) -> None:
        """Stop the child."""
        try:
            if self.process.is_alive():
                self.conn.send(("stop",))
                self.process.join(timeout=5)
        except (BrokenPipeError, OSError):
            pass
        if self.process.is_alive():
            self.process.terminate()
