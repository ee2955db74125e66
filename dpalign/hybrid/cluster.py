"""The ``dask`` backend: the same work units on a Dask cluster, for data beyond one machine.

Each task scores a range of reads against a range of blocks with the worker's best local
backend (Numba). Queries and blocks go to the cluster once, as tasks; results are gathered
and reduced to the same per-block arrays as every other backend. A worker lost mid-run is
handled by Dask: its tasks are recomputed elsewhere, never lost or counted twice (results are
written by unit position, so a recomputed unit overwrites nothing else).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from ..engine import Backend, BlockScores, cpu_backend
from ..errors import BackendUnavailable, OptionError
from .workers import empty_results

log = logging.getLogger("dpalign.hybrid")


def _hold(data):
    """Run on a Dask worker: the data itself (a recomputable copy of the run's inputs)."""
    return data


def _score_task(task, queries, blocks, start: int, stop: int, first: int, last: int):
    """Run on a Dask worker: reads [start, stop) against blocks [first, last)."""
    try:
        from distributed import get_worker

        worker = get_worker().address
    except (ImportError, ValueError):  # pragma: no cover - run outside a worker
        worker = "local"
    cpu = cpu_backend(threads=1)
    reads = queries.subset(slice(start, stop))
    t0 = time.perf_counter()
    results = [cpu.score_block(task, reads, blocks[b]) for b in range(first, last)]
    return worker, time.perf_counter() - t0, results


@dataclass
class DaskBackend(Backend):
    """Score on a Dask cluster (``kind = "cluster"``).

    Parameters
    ----------
    scheduler : str, optional
        Address of an existing ``dask.distributed`` scheduler (``tcp://host:8786``).
    workers : int, optional
        Start a ``LocalCluster`` of this many single-threaded worker processes for the run.
    tasks_per_worker : int
        Tasks per worker (more: better balance and recovery; fewer: less overhead).
    retries : int
        Times a task that raised is retried.
    """

    scheduler: str | None = None
    workers: int | None = None
    tasks_per_worker: int = 4
    retries: int = 2
    name = "dask"
    kind = "cluster"

    def __post_init__(self) -> None:
        self._client = None
        self._cluster = None

    @classmethod
    def available(cls, **options) -> bool:
        # find_spec, not import: importing distributed (and dask) takes a second, and
        # `dpalign devices` asks every backend whether it is available
        from importlib.util import find_spec

        return find_spec("distributed") is not None

    @classmethod
    def unavailable_reason(cls, **options) -> str:
        return "Dask's 'distributed' package is not installed (pip install dpalign[dask])"

    def describe(self) -> str:
        where = self.scheduler or f"LocalCluster of {self.n_workers()} workers"
        return f"dask ({where})"

    def n_workers(self) -> int:
        if self._client is not None:
            return max(1, len(self._client.scheduler_info()["workers"]))
        return self.workers or 2

    def client(self):
        """The Dask client (starting a LocalCluster on first use if asked to)."""
        if self._client is not None:
            return self._client
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise BackendUnavailable("the dask backend needs 'dask[distributed]'") from None
        if self.scheduler:
            try:
                self._client = Client(self.scheduler, timeout="20s")
            except OSError as exc:
                raise BackendUnavailable(
                    f"cannot reach the Dask scheduler at {self.scheduler}: {exc}"
                ) from None
        else:
            if self.workers is not None and self.workers < 1:
                raise OptionError(
                    "workers (the local Dask cluster's processes) must be at least 1",
                    parameter="workers",
                )
            self._cluster = LocalCluster(
                n_workers=self.workers or 2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self._client = Client(self._cluster)
        return self._client

    def close(self) -> None:
        """Shut the client (and a cluster we started) down."""
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None

    def score(self, task, queries, blocks, progress=None):
        results = empty_results(queries, blocks)
        if not len(queries) or not blocks:
            return results
        from distributed import as_completed

        client = self.client()
        n_tasks = max(1, self.tasks_per_worker * self.n_workers())
        # Split over blocks first (no read batch is sent twice to a worker that holds it),
        # then over reads when there are fewer blocks than tasks.
        block_step = max(1, math.ceil(len(blocks) / n_tasks))
        block_ranges = [
            (b, min(b + block_step, len(blocks))) for b in range(0, len(blocks), block_step)
        ]
        read_parts = max(1, math.ceil(n_tasks / len(block_ranges)))
        read_step = max(1, math.ceil(len(queries) / read_parts))
        # As tasks, not scattered: scattered data lost with a killed worker cannot be
        # recomputed, and every task that needs it is cancelled ("lose scattered data, which
        # can't be recovered"; seen in CI's killed-worker test). A task holding the data as
        # its argument is simply run again on a surviving worker.
        queries_f = client.submit(_hold, queries, pure=False)
        blocks_f = client.submit(_hold, list(blocks), pure=False)
        futures = {}
        for start in range(0, len(queries), read_step):
            stop = min(start + read_step, len(queries))
            for first, last in block_ranges:
                fut = client.submit(
                    _score_task,
                    task,
                    queries_f,
                    blocks_f,
                    start,
                    stop,
                    first,
                    last,
                    pure=False,
                    retries=self.retries,
                )
                futures[fut] = (start, stop, first, last)
        for fut in as_completed(list(futures)):
            start, stop, first, last = futures[fut]
            worker, seconds, block_results = fut.result()
            cells = int(queries.lengths[start:stop].sum()) * sum(
                blocks[b].residues for b in range(first, last)
            )
            for b, scores in zip(range(first, last), block_results, strict=True):
                results[b].scores[start:stop] = scores.scores
                results[b].width[start:stop] = scores.width
            self.stats.record(f"dask {worker}", cells, seconds, blocks=last - first)
            if progress is not None:
                progress(cells)
        return [BlockScores(r.scores, r.width) for r in results]
