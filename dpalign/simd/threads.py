"""The CPU kernels' one way to spread independent pieces of work over threads.

Numba kernels compiled with ``nogil=True`` release the GIL, so plain threads run them on every
core; one thread (or one piece) runs inline, without a pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from .. import config


def map_threads(
    work: Callable[[object], object],
    items: Iterable,
    threads: int | None,
    chunksize: int = 1,
    name: str = "",
) -> None:
    """Call ``work(item)`` for every item on up to ``config.cpu_threads(threads)`` threads.

    Parameters
    ----------
    work : callable
        Called once per item; what it returns is dropped (it writes its results).
    items : iterable
        The pieces, handed out in this order.
    threads : int or None
        The request (None: ``DPALIGN_THREADS``, else the core count).
    chunksize : int
        Items handed to a thread at a time.
    name : str
        The pool's thread-name prefix.

    Raises the first exception a call raised, in item order.
    """
    items = list(items)
    workers = min(config.cpu_threads(threads), len(items))
    if workers <= 1:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        list(pool.map(work, items, chunksize=chunksize))
