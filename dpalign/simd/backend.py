"""The ``numba`` backend: CPU worker threads, one block at a time, kernels that release the GIL.

Each kernel family provides ``score_block(task, queries, block) -> BlockScores`` in its own
module (``simd.papara_score``, ``simd.pairwise``); the kernels are ``@njit(nogil=True)`` so the
worker threads run in parallel. Results do not depend on the number of threads.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .. import config
from ..contract import Backend, BlockScores
from ..engine import register


def query_slices(lengths: np.ndarray, n_blocks: int, threads: int) -> list[slice]:
    """Split the queries into contiguous slices of about equal residues.

    With one block per work unit, 7 blocks on 2 threads would leave one thread idle for a
    seventh of the run; splitting every block's queries into c slices, with c chosen so that
    ``n_blocks * c`` is a multiple of ``threads`` (and at least 2 units per thread), gives
    every thread the same work.
    """
    n = len(lengths)
    if threads <= 1 or n < 2 or n_blocks == 0:
        return [slice(0, n)]
    c = max(1, -(-2 * threads // n_blocks))
    while (n_blocks * c) % threads and c < n:
        c += 1
    c = min(c, n)
    total = np.cumsum(lengths)
    middle = total - np.asarray(lengths) / 2
    cuts = np.searchsorted(middle, total[-1] * np.arange(1, c) / c) if total[-1] else []
    edges = sorted({0, n, *(int(x) for x in cuts)})
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def kernel_module(kernel: str):
    """The module holding ``score_block`` for a kernel family."""
    if kernel == "papara":
        from . import papara_score as module
    else:
        from . import pairwise as module
    return module


@register
@dataclass
class NumbaBackend(Backend):
    """Numba SIMD kernels on every CPU core."""

    name = "numba"

    @classmethod
    def available(cls, **options) -> bool:
        # find_spec, not import: importing numba takes half a second, and `dpalign devices`
        # and `auto` ask every backend whether it is available
        from importlib.util import find_spec

        return find_spec("numba") is not None

    def describe(self) -> str:
        return f"numba ({config.cpu_threads(self.threads)} threads)"

    def score(self, task, queries, blocks, progress=None):
        module = kernel_module(task.kernel)
        threads = config.cpu_threads(self.threads)
        slices = query_slices(queries.lengths, len(blocks), threads)
        parts = [queries if len(slices) == 1 else queries.subset(s) for s in slices]
        units = [(b, p) for b in range(len(blocks)) for p in range(len(parts))]
        threads = min(threads, max(len(units), 1))
        results = [[None] * len(parts) for _ in blocks]

        def work(unit: tuple[int, int]) -> None:
            index, part = unit
            block = blocks[index]
            start = time.perf_counter()
            results[index][part] = module.score_block(task, parts[part], block)
            cells = parts[part].residues * block.residues
            self.stats.record(
                f"cpu-{threading.current_thread().name.rsplit('_', 1)[-1]}",
                cells,
                time.perf_counter() - start,
            )
            if progress is not None:
                progress(cells)

        if threads == 1:
            for unit in units:
                work(unit)
        else:
            with ThreadPoolExecutor(threads, thread_name_prefix="dpalign") as pool:
                for future in [pool.submit(work, u) for u in units]:
                    future.result()
        if len(parts) == 1:
            return [r[0] for r in results]
        return [
            BlockScores(
                np.concatenate([r.scores for r in per_block]),
                np.concatenate([r.width for r in per_block]),
            )
            for per_block in results
        ]
