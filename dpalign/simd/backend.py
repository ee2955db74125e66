"""The ``numba`` backend: CPU worker threads, one block at a time, kernels that release the GIL.

Each kernel family provides ``score_block(task, queries, block) -> BlockScores`` in its own
module (``simd.papara``, ``simd.pairwise``); the kernels are ``@njit(nogil=True)`` so the
worker threads run in parallel. Results do not depend on the number of threads.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .. import config
from ..engine import Backend, register


def kernel_module(kernel: str):
    """The module holding ``score_block`` for a kernel family."""
    if kernel == "papara":
        from . import papara as module
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
        try:
            import numba  # noqa: F401
        except ImportError:  # pragma: no cover - numba is a dependency
            return False
        return True

    def describe(self) -> str:
        return f"numba ({config.cpu_threads(self.threads)} threads)"

    def score(self, task, queries, blocks, progress=None):
        module = kernel_module(task.kernel)
        threads = min(config.cpu_threads(self.threads), max(len(blocks), 1))
        results = [None] * len(blocks)

        def work(index: int) -> None:
            block = blocks[index]
            start = time.perf_counter()
            results[index] = module.score_block(task, queries, block)
            cells = queries.residues * block.residues
            self.stats.record(
                f"cpu-{threading.current_thread().name.rsplit('_', 1)[-1]}",
                cells,
                time.perf_counter() - start,
            )
            if progress is not None:
                progress(cells)

        if threads == 1:
            for index in range(len(blocks)):
                work(index)
        else:
            with ThreadPoolExecutor(threads, thread_name_prefix="dpalign") as pool:
                for future in [pool.submit(work, k) for k in range(len(blocks))]:
                    future.result()
        return results
