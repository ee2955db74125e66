"""GCUPS accounting: cells, seconds and blocks per worker and per phase."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field


def process_start() -> float:
    """This process's start on the ``time.perf_counter`` clock (Linux: from
    ``/proc/self/stat``, to 10 ms; elsewhere the first call's time)."""
    if _START:
        return _START[0]
    start = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / ticks
        if 0 <= age < 3600:  # a clock that disagrees (a container's namespace) is ignored
            start -= age
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    _START.append(start)
    return start


_START: list[float] = []


def gcups(cells: float, seconds: float) -> float:
    """Giga cell updates per second (0 when no time has passed)."""
    return cells / seconds / 1e9 if seconds > 0 else 0.0


@dataclass
class WorkerStats:
    """What one worker (a CPU thread, an OpenCL device, a Dask worker) did."""

    name: str
    blocks: int = 0
    cells: int = 0
    seconds: float = 0.0  # time spent inside kernels
    cpu_seconds: float = 0.0  # CPU time of the worker's own thread over the same spans
    wait_seconds: float = 0.0  # a device worker's time waiting for its device
    wait_cpu_seconds: float = 0.0  # CPU time its thread used while waiting (spinning shows)
    failures: int = 0

    @property
    def gcups(self) -> float:
        return gcups(self.cells, self.seconds)


@dataclass
class RunStats:
    """Cells and time of a run, per phase and per worker; thread-safe to update."""

    phases: dict[str, float] = field(default_factory=dict)
    phase_cells: dict[str, int] = field(default_factory=dict)
    workers: dict[str, WorkerStats] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: (event, start, end or None) on the ``time.perf_counter`` clock: when each phase, batch
    #: and device take ran (the report gives them in seconds since the process started)
    timeline: list[tuple[str, float, float | None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @contextmanager
    def phase(self, name: str, cells: int = 0):
        """Time a phase (``with stats.phase("scoring", cells): ...``)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start
                self.phase_cells[name] = self.phase_cells.get(name, 0) + cells

    def mark(self, event: str, start: float | None = None, end: float | None = None) -> None:
        """Note ``event`` on the timeline: at ``start`` (default now), lasting to ``end``."""
        with self._lock:
            self.timeline.append((event, time.perf_counter() if start is None else start, end))

    @contextmanager
    def span(self, event: str):
        """Note the time a block takes on the timeline (``with stats.span("read"): ...``)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.mark(event, start, time.perf_counter())

    def add_phases(self, other: RunStats) -> None:
        """Add ``other``'s phase times, cells and timeline to this run's."""
        with self._lock:
            self.timeline.extend(other.timeline)
            for name, seconds in other.phases.items():
                self.phases[name] = self.phases.get(name, 0.0) + seconds
                cells = other.phase_cells.get(name, 0)
                self.phase_cells[name] = self.phase_cells.get(name, 0) + cells

    def record(
        self,
        worker: str,
        cells: int,
        seconds: float,
        blocks: int = 1,
        cpu_seconds: float = 0.0,
        wait: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        """Add one finished piece of work to a worker's account (``wait``: wall, CPU)."""
        with self._lock:
            stats = self.workers.setdefault(worker, WorkerStats(worker))
            stats.blocks += blocks
            stats.cells += cells
            stats.seconds += seconds
            stats.cpu_seconds += cpu_seconds
            stats.wait_seconds += wait[0]
            stats.wait_cpu_seconds += wait[1]

    def failed(self, worker: str, message: str) -> None:
        """Note a worker failure (its blocks went back to the queue)."""
        with self._lock:
            self.workers.setdefault(worker, WorkerStats(worker)).failures += 1
            self.notes.append(f"{worker}: {message}")

    def phase_gcups(self, name: str) -> float:
        return gcups(self.phase_cells.get(name, 0), self.phases.get(name, 0.0))

    def as_dict(self) -> dict:
        """A JSON-ready summary."""
        total = sum(w.cells for w in self.workers.values())
        return {
            "phases": {
                name: {
                    "seconds": secs,
                    "cells": self.phase_cells.get(name, 0),
                    "gcups": self.phase_gcups(name),
                }
                for name, secs in self.phases.items()
            },
            "workers": [
                {
                    "name": w.name,
                    "blocks": w.blocks,
                    "cells": w.cells,
                    "kernel_seconds": w.seconds,
                    "thread_cpu_seconds": w.cpu_seconds,
                    "wait_seconds": w.wait_seconds,
                    "wait_cpu_seconds": w.wait_cpu_seconds,
                    "gcups": w.gcups,
                    "share": w.cells / total if total else 0.0,
                    "failures": w.failures,
                }
                for w in self.workers.values()
            ],
            "notes": list(self.notes),
            "timeline": self.timeline_seconds(),
        }

    def timeline_seconds(self) -> list[dict]:
        """The timeline in time order, seconds since the process started."""
        origin = process_start()
        with self._lock:
            events = sorted(self.timeline, key=lambda e: e[1])
        return [
            {
                "event": name,
                "start_s": round(start - origin, 4),
                **({} if end is None else {"end_s": round(end - origin, 4)}),
            }
            for name, start, end in events
        ]
