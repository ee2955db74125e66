"""The work queue: units of (read chunk x reference block) handed out to competing workers.

Units are ordered chunk-major (all blocks of read chunk 0, then chunk 1, ...). Device workers
take many units from the front (whole chunks of reads against every block make big launches);
CPU workers take one unit at a time from the back. They meet in the middle, so the load balances
itself. A failed worker gives its units back and the others finish them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """Reads ``[start, stop)`` of the batch against block ``block``."""

    index: int
    chunk: int
    start: int
    stop: int
    block: int


def make_units(n_queries: int, n_blocks: int, chunk: int) -> list[Unit]:
    """Split the work into units of ``chunk`` reads x one block, chunk-major."""
    units = []
    for c, start in enumerate(range(0, n_queries, chunk)):
        stop = min(start + chunk, n_queries)
        for b in range(n_blocks):
            units.append(Unit(len(units), c, start, stop, b))
    return units


class WorkQueue:
    """Thread-safe queue of units with give-back on failure and a stop switch."""

    def __init__(self, units: list[Unit]) -> None:
        self._pending = deque(units)
        self._outstanding = 0
        self._lock = threading.Condition()
        self._stopped = False
        self.total = len(units)
        self._start = time.perf_counter()
        #: (seconds since start, thread, "front"/"back", units taken, units left): a record of
        #: how the work was shared, for diagnosing load balance (see bench/hybrid_gpu.py).
        self.log: list[tuple[float, str, str, int, int]] = []

    def take_front(self, k: int) -> list[Unit]:
        """Up to ``k`` units from the front (device workers)."""
        return self._take(k, front=True)

    def take_back(self) -> list[Unit]:
        """One unit from the back (CPU workers)."""
        return self._take(1, front=False)

    def _take(self, k: int, front: bool) -> list[Unit]:
        with self._lock:
            while True:
                if self._stopped:
                    return []
                if self._pending:
                    pop = self._pending.popleft if front else self._pending.pop
                    taken = [pop() for _ in range(min(k, len(self._pending)))]
                    if not front:
                        taken.reverse()
                    self._outstanding += len(taken)
                    self.log.append(
                        (
                            time.perf_counter() - self._start,
                            threading.current_thread().name,
                            "front" if front else "back",
                            len(taken),
                            len(self._pending),
                        )
                    )
                    return taken
                if self._outstanding == 0:
                    return []
                # Work is out with other workers; it may come back if one of them fails.
                self._lock.wait(timeout=0.5)

    def done(self, units: list[Unit]) -> None:
        with self._lock:
            self._outstanding -= len(units)
            self._lock.notify_all()

    def give_back(self, units: list[Unit]) -> None:
        """Return a failed worker's units to the front, in order."""
        with self._lock:
            self._outstanding -= len(units)
            self._pending.extendleft(reversed(units))
            self._lock.notify_all()

    def stop(self) -> None:
        """Hand out nothing more (Ctrl-C, or every worker failed)."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._pending)
