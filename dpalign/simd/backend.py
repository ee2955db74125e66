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
        try:
            import numba  # noqa: F401
        except ImportError:  # pragma: no cover - numba is a dependency
            return False
        return True

    def describe(self) -> str:
        return f"numba ({config.cpu_threads(self.threads)} threads)"

    def score(self, task, queries, blocks, progress=None):
        module = kernel_module(task.kernel)
        parts = self._run(module.score_block, task, queries, blocks, progress)
        return [_join(per_block) for per_block in parts]

    def score_ends(self, task, queries, blocks, progress=None):
        """Local scores with end cells: ``[(BlockScores, a_end [Q, W], b_end [Q, W])]``.

        Only where :func:`dpalign.simd.ends.ends_supported` says so (local pairwise scoring
        with positive gap costs); ends are 0-based, half-open (the first best cell in
        row-major order, as :mod:`dpalign.reference` picks it).
        """
        from .ends import ends_supported, score_block_ends

        if not ends_supported(task):
            raise ValueError("score_ends needs local pairwise scoring with gap costs > 0")
        parts = self._run(score_block_ends, task, queries, blocks, progress)
        out = []
        for per_block in parts:
            out.append(
                (
                    _join([p[0] for p in per_block]),
                    np.concatenate([p[1] for p in per_block]),
                    np.concatenate([p[2] for p in per_block]),
                )
            )
        return out

    def warm_up(self, task) -> None:
        """Load the kernels ``task`` runs before a timed run (:func:`warm_up`)."""
        warm_up(task)

    def ends_supported(self, task) -> bool:
        """Whether :meth:`score_ends` can run ``task``."""
        from .ends import ends_supported

        return ends_supported(task)

    def _run(self, score_block, task, queries, blocks, progress):
        """``score_block(task, part, block)`` for every block and query slice, on the
        worker threads; results per block, one per query slice."""
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
            results[index][part] = score_block(task, parts[part], block)
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
        return results


def _join(per_block: list[BlockScores]) -> BlockScores:
    """One block's results over query slices, stacked."""
    if len(per_block) == 1:
        return per_block[0]
    return BlockScores(
        np.concatenate([r.scores for r in per_block]),
        np.concatenate([r.width for r in per_block]),
    )


def warm_up(task) -> None:
    """Load (or compile) the kernels ``task`` runs on tiny inputs, once per process.

    Numba loads each cached kernel on its first call (about a second for a search's
    kernels); a run that warms up first keeps that out of its timed phases.
    """
    import numpy as np

    from ..engine import QueryBatch
    from . import pairwise
    from .ends import ends_supported, run_pass_ends
    from .traceback import align_pair

    if task.kernel != "pairwise":
        return
    scoring = task.scoring
    local = task.mode == "local"
    queries = QueryBatch(np.zeros((1, 4), dtype=np.uint8), np.array([4], dtype=np.int64))
    qsel = np.zeros(1, dtype=np.int64)
    codes = np.zeros((4, 64), dtype=np.uint8)
    lengths = np.full(64, 4, dtype=np.int64)
    if local and ends_supported(task):
        for w in pairwise._local_widths(scoring, True):
            run_pass_ends(w, codes, lengths, queries, qsel, scoring)
    widths = pairwise._local_widths(scoring, True) if local else (8, 16, 32)
    for w in widths:
        pairwise.run_pass(w, codes, lengths, queries, qsel, scoring, local, task.free_ends)
    align_pair(queries.codes[0], codes[:, 0].copy(), scoring, local, task.free_ends)
