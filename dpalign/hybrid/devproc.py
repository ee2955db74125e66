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

import multiprocessing
from multiprocessing import shared_memory

import numpy as np

from ..engine import BlockScores
from ..errors import DpalignError


class ChildFailed(DpalignError):
    """The device process raised or died; its units go back to the queue."""


def _arrays(shm, n_queries: int, n_lanes: int):
    scores = np.ndarray((n_queries, n_lanes), dtype=np.int64, buffer=shm.buf)
    width = np.ndarray((n_queries, n_lanes), dtype=np.uint8, buffer=shm.buf, offset=scores.nbytes)
    return scores, width


def _child(conn, device: str, stream: int) -> None:  # pragma: no cover - runs in a child
    """The device process: score what the parent asks for, write it to shared memory."""
    from ..engine import get_backend
    from ..kernels_cl.context import wait_totals

    backend = get_backend("opencl", device=device, stream=stream)
    shm = scores = width = None
    task = queries = blocks = offsets = None
    while True:
        message = conn.recv()
        kind = message[0]
        try:
            if kind == "stop":
                break
            if kind == "setup":
                _, task, queries, blocks, name = message
                scores = width = None
                if shm is not None:
                    shm.close()
                shm = shared_memory.SharedMemory(name=name)
                offsets = np.cumsum([0] + [b.width for b in blocks])
                scores, width = _arrays(shm, len(queries), int(offsets[-1]))
                conn.send(("ready",))
                continue
            _, start, stop, block_ids = message
            kernel_before = sum(w.seconds for w in backend.stats.workers.values())
            waited = wait_totals()
            results = backend.score(
                task, queries.subset(slice(start, stop)), [blocks[b] for b in block_ids]
            )
            for b, result in zip(block_ids, results, strict=True):
                lanes = slice(int(offsets[b]), int(offsets[b + 1]))
                scores[start:stop, lanes] = result.scores
                width[start:stop, lanes] = result.width
            now = wait_totals()
            kernel = sum(w.seconds for w in backend.stats.workers.values()) - kernel_before
            conn.send(("done", kernel, now[0] - waited[0], now[1] - waited[1]))
        except Exception as exc:  # reported to the parent, which gives the units back
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    scores = width = None
    if shm is not None:
        shm.close()


class SharedResults:
    """One run's scores and widths (all blocks side by side) in shared memory.

    Device processes write their units straight into it and CPU workers write theirs, so no
    result is copied between processes or units while the run goes on.
    """

    def __init__(self, n_queries: int, blocks) -> None:
        self.offsets = np.cumsum([0] + [b.width for b in blocks])
        self.shape = (n_queries, int(self.offsets[-1]))
        self.shm = shared_memory.SharedMemory(
            create=True, size=max(1, n_queries * self.shape[1] * 9)
        )
        self.scores, self.width = _arrays(self.shm, *self.shape)
        self.scores[:] = 0
        self.width[:] = 0

    def block(self, b: int) -> BlockScores:
        lanes = slice(int(self.offsets[b]), int(self.offsets[b + 1]))
        return BlockScores(self.scores[:, lanes], self.width[:, lanes])

    def copy_out(self) -> list[BlockScores]:
        """Private copies of every block's results (the shared memory is then freed)."""
        return [
            BlockScores(r.scores.copy(), r.width.copy())
            for r in (self.block(b) for b in range(len(self.offsets) - 1))
        ]

    def close(self) -> None:
        self.scores = self.width = None
        self.shm.close()
        self.shm.unlink()


class DeviceProcess:
    """A child process holding one OpenCL device (one stream of it)."""

    def __init__(self, device: str, stream: int = 0) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork after a driver started threads
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(
            target=_child,
            args=(child_conn, device, stream),
            daemon=True,
            name=f"dpalign-device-{device}-{stream}",
        )
        self.process.start()
        child_conn.close()

    def setup(self, task, queries, blocks, shared: SharedResults) -> None:
        """Send one run's reads and blocks, and where its results go."""
        self._send(("setup", task, queries, list(blocks), shared.shm.name))
        self._receive()

    def score(self, start: int, stop: int, block_ids) -> tuple[float, tuple[float, float]]:
        """Reads [start, stop) against the given blocks, written into the shared results;
        returns the kernel seconds and the child's (wall, CPU) time waiting for the device."""
        self._send(("score", start, stop, list(block_ids)))
        _, kernel, wait_wall, wait_cpu = self._receive()
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
