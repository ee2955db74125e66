"""The ``hybrid`` backend: CPU workers and OpenCL device workers on one work queue.

The seed paper's "hybrid CPU-GPU approach": every core runs the Numba kernel on small units,
every GPU takes large groups of units, and they compete for the same queue so that the machine
balances itself. Results are identical to any single backend's.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

from .. import config
from ..engine import Backend, get_backend, register
from ..errors import BackendUnavailable, OptionError
from .queue import WorkQueue, make_units
from .workers import (
    CpuWorker,
    DeviceWorker,
    ProcessDeviceWorker,
    empty_results,
    run_workers,
)

log = logging.getLogger("dpalign.hybrid")


def parse_failures(text: str | None) -> dict[str, int]:
    """Parse ``DPALIGN_INJECT_FAILURES`` (``"cpu-0:2,gpu-0:1"``: fail after that many units)."""
    out: dict[str, int] = {}
    for item in filter(None, (text or "").split(",")):
        name, _, count = item.partition(":")
        try:
            out[name.strip()] = int(count)
        except ValueError:
            raise OptionError(f"DPALIGN_INJECT_FAILURES: bad item {item!r}") from None
    return out


def gpu_selectors() -> list[str]:
    """``platform:device`` ids of every OpenCL GPU on this machine."""
    from ..devices import opencl_devices

    devices, _ = opencl_devices()
    return [d["id"] for d in devices if "GPU" in d["type"]]


def no_gpu_device_nodes() -> bool:
    """True on Linux when no GPU device node exists (``/dev/nvidia0``, ``/dev/kfd``,
    ``/dev/dri/renderD*``): no OpenCL GPU can be there, so ``auto`` need not import pyopencl
    (about half a second) to find that out. Naming a device (``DPALIGN_OPENCL_DEVICE``)
    always asks OpenCL."""
    import glob
    import sys

    if not sys.platform.startswith("linux") or config.OPENCL_DEVICE:
        return False
    patterns = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dri/renderD*", "/dev/dri/card*")
    return not any(glob.glob(pattern) for pattern in patterns)


def unit_reads(queries, blocks) -> int:
    """Reads per unit: about ``config.HYBRID_UNIT_CELLS`` cells against one block."""
    if not len(queries) or not blocks:
        return 1
    mean_read = max(queries.residues / len(queries), 1.0)
    block_cells = max(blocks[0].residues, 1)
    reads = math.floor(config.HYBRID_UNIT_CELLS / (mean_read * block_cells))
    return max(1, min(len(queries), reads))


@register
@dataclass
class HybridBackend(Backend):
    """Numba workers on the CPU cores plus one worker per OpenCL device.

    Parameters
    ----------
    devices : list of str or Backend, optional
        OpenCL device selectors (``"0:1"``, ``"H100"``) or ready device backends; default:
        every GPU.
    cpu_workers : int, optional
        CPU worker threads (default ``threads``, else one per core).
    inject_failures : dict, optional
        Worker name -> number of units after which it raises (fault-tolerance tests); also
        read from ``DPALIGN_INJECT_FAILURES``.
    processes : bool, optional
        Run each OpenCL device worker in a process of its own (default
        ``config.HYBRID_DEVICE_PROCESSES``): no GIL shared with the CPU workers.
    """

    devices: list | None = None
    cpu_workers: int | None = None
    inject_failures: dict | None = None
    processes: bool | None = None
    name = "hybrid"

    def __post_init__(self) -> None:
        self._children: dict[tuple[str, int], object] = {}
        # Measured throughput of each worker (cells/s) per kernel family, carried from run to
        # run: later runs open with device takes of the right size.
        self._rates: dict[str, dict[str, float]] = {}

    @classmethod
    def available(cls, devices=None, **options) -> bool:
        if devices:
            return True
        if no_gpu_device_nodes():
            return False
        try:
            return bool(gpu_selectors()) and "opencl" in _registered()
        except Exception:  # pragma: no cover - a broken OpenCL installation
            return False

    def _device_workers(self, n_blocks: int, failures: dict, chunk_reads: int) -> list:
        """The device workers: ``config.HYBRID_STREAMS`` per OpenCL device (``gpu-0``,
        ``gpu-0.1``...), each with queues of its own, in a child process when ``processes``;
        a ready Backend given in ``devices`` runs on a thread of its own."""
        from .devproc import DeviceProcess

        selectors = self.devices if self.devices is not None else gpu_selectors()
        if not selectors and self.devices is None:
            raise BackendUnavailable("the hybrid backend found no OpenCL GPU")
        processes = config.HYBRID_DEVICE_PROCESSES if self.processes is None else self.processes
        workers = []
        for d, sel in enumerate(selectors):
            if isinstance(sel, Backend):
                name = f"gpu-{d}"
                workers.append(DeviceWorker(name, sel, n_blocks, failures.get(name), chunk_reads))
                continue
            for stream in range(config.HYBRID_STREAMS):
                name = f"gpu-{d}" + (f".{stream}" if stream else "")
                if processes:
                    key = (sel, stream)
                    if key not in self._children:
                        self._children[key] = DeviceProcess(sel, stream)
                    worker = ProcessDeviceWorker(
                        name, self._children[key], n_blocks, failures.get(name), chunk_reads
                    )
                else:
                    backend = get_backend("opencl", device=sel, stream=stream)
                    worker = DeviceWorker(name, backend, n_blocks, failures.get(name), chunk_reads)
                workers.append(worker)
        return workers

    def close(self) -> None:
        """Stop the device processes."""
        for child in self._children.values():
            child.close()
        self._children.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def describe(self) -> str:
        n_cpu = self._n_cpu()
        n_dev = len(self.devices or gpu_selectors())
        return f"hybrid ({n_cpu} CPU workers + {n_dev} OpenCL devices)"

    def _n_cpu(self) -> int:
        if self.cpu_workers is not None:
            return self.cpu_workers
        return config.cpu_threads(self.threads)

    def score(self, task, queries, blocks, progress=None):
        from ..simd.backend import kernel_module

        failures = {
            **parse_failures(os.environ.get("DPALIGN_INJECT_FAILURES")),
            **(self.inject_failures or {}),
        }
        module = kernel_module(task.kernel)
        if not len(queries) or not blocks:
            return empty_results(queries, blocks)
        reads_per_unit = unit_reads(queries, blocks)
        devices = self._device_workers(len(blocks), failures, reads_per_unit)
        nice = config.HYBRID_CPU_NICE if devices else 0
        workers = [
            CpuWorker(f"cpu-{k}", module, failures.get(f"cpu-{k}"), nice)
            for k in range(self._n_cpu())
        ]
        workers = devices + workers  # device threads start first: the GPU is the long pole
        if not workers:
            raise OptionError("the hybrid backend needs at least one worker")
        units = make_units(len(queries), len(blocks), reads_per_unit)
        log.info(
            "hybrid: %d units (%d reads x 1 block each) for %s",
            len(units),
            units[0].stop - units[0].start,
            ", ".join(w.name for w in workers),
        )
        in_processes = [w for w in workers if isinstance(w, ProcessDeviceWorker)]
        if not in_processes:
            self.last_queue = WorkQueue(units)
            return run_workers(
                workers,
                self.last_queue,
                task,
                queries,
                blocks,
                self.stats,
                progress,
                known_rates=self._rates.setdefault(task.kernel, {}),
            )
        from .devproc import SharedResults

        shared = SharedResults(len(queries), blocks)
        for worker in in_processes:
            worker.shared = shared
        try:
            self.last_queue = WorkQueue(units)
            run_workers(
                workers,
                self.last_queue,
                task,
                queries,
                blocks,
                self.stats,
                progress,
                results=[shared.block(b) for b in range(len(blocks))],
                known_rates=self._rates.setdefault(task.kernel, {}),
            )
            return shared.blocks()
        finally:
            shared.close()


def _registered() -> list[str]:
    from ..engine import _REGISTRY

    return list(_REGISTRY)
