"""The ``hybrid`` backend: CPU workers and device workers on one work queue.

The seed paper's "hybrid CPU-GPU approach": every core runs the Numba kernel on small units,
every GPU takes large groups of units, and they compete for the same queue so that the machine
balances itself. Results are identical to any single backend's.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from functools import cache

from .. import config
from ..engine import Backend, cpu_backend, device_backends, get_backend
from ..errors import BackendUnavailable, DpalignError, OptionError
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


def device_backend() -> type[Backend] | None:
    """The registered device backend (``kind == "device"``) whose devices the work queue
    feeds: the first one with a GPU here, else the first registered."""
    candidates = device_backends()
    for cls in candidates:
        if cls.gpus():
            return cls
    return candidates[0] if candidates else None


def gpu_selectors() -> list[str]:
    """Ids of every GPU of the device backend (OpenCL: ``platform:device``)."""
    cls = device_backend()
    return cls.gpus() if cls is not None else []


def no_gpu_device_nodes() -> bool:
    """True on Linux when no GPU device node exists (``/dev/nvidia0``, ``/dev/kfd``,
    ``/dev/dri/renderD*``): no OpenCL GPU can be there, so ``auto`` need not import pyopencl
    (about half a second) to find that out. Naming a device (``DPALIGN_OPENCL_DEVICE``)
    always asks OpenCL."""
    import sys

    if not sys.platform.startswith("linux") or config.OPENCL_DEVICE:
        return False
    return not _gpu_device_nodes()


@cache
def _gpu_device_nodes() -> bool:
    """Whether a GPU device node exists (looked up once a process: ~0.2 ms, and every
    ``auto`` backend lookup asks)."""
    import glob

    patterns = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dri/renderD*", "/dev/dri/card*")
    return any(glob.glob(pattern) for pattern in patterns)


def gpu_node_count() -> int | None:
    """How many GPUs the device nodes show (``/dev/nvidiaN``, else ``/dev/dri/renderD*``),
    without OpenCL; None off Linux. A guess: OpenCL may list fewer (or, named by
    ``DPALIGN_OPENCL_DEVICE``, others)."""
    import glob
    import sys

    if not sys.platform.startswith("linux"):
        return None
    nvidia = glob.glob("/dev/nvidia[0-9]*")
    return len(nvidia) if nvidia else len(glob.glob("/dev/dri/renderD*"))


def may_profile_on_device(name: str) -> bool:
    """Whether the backend asked for by ``name`` may be one whose GPU computes PaPaRa's edge
    profiles (known before it is built, without OpenCL): ``opencl``; a work queue
    (``auto``, ``hybrid``) where one GPU device node shows (or none can be counted), since
    several GPUs score from processes of their own and the profiles stay on the CPU there."""
    if name == "opencl":
        return True
    if name not in ("auto", "hybrid"):
        return False
    if name == "auto" and no_gpu_device_nodes():
        return False
    return gpu_node_count() in (None, 1)


def start_ahead(name: str) -> int:
    """Where the backend asked for by ``name`` is a work queue (``auto``, ``hybrid``) whose
    device workers will run in processes of their own on several GPUs (as the device nodes
    show), start those processes now (:func:`.devproc.prestart`; the queue takes them),
    before the GPUs are listed here. Returns how many were started."""
    if name not in ("auto", "hybrid") or not config.HYBRID_DEVICE_PROCESSES:
        return 0
    if config.OPENCL_DEVICE:  # a device named: the work queue may not take every GPU
        return 0
    n_gpus = gpu_node_count() or 0
    if n_gpus < 2:
        return 0
    from .devproc import prestart

    # the OpenCL backend's processes, named rather than looked up in the registry (whose
    # load would hold the caller up before its reading); another device backend would
    # simply not take them, and they would end unused
    prestart("opencl", n_gpus, config.HYBRID_STREAMS)
    return n_gpus * config.HYBRID_STREAMS


def _rates_path():
    from pathlib import Path

    return Path(os.path.expanduser(config.HYBRID_RATES_FILE)) if config.HYBRID_RATES_FILE else None


def _read_rates() -> dict:
    """The kept rates (``{key: {worker: cells/s}}``); nothing where the file is missing or
    unreadable."""
    import json

    path = _rates_path()
    try:
        data = json.loads(path.read_text()) if path is not None else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_rates(key: str, rates: dict[str, float]) -> None:
    """Keep ``rates`` under ``key`` (written whole to a temporary file, then renamed in);
    a cache that cannot be written is left alone."""
    import json
    import tempfile

    path = _rates_path()
    if path is None:
        return
    data = _read_rates()
    if data.get(key) == rates:
        return
    data[key] = dict(rates)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
            json.dump(data, handle)
        os.replace(handle.name, path)
    except OSError:
        pass


def unit_reads(queries, blocks) -> int:
    """Reads per unit: about ``config.HYBRID_UNIT_CELLS`` cells against one block."""
    if not len(queries) or not blocks:
        return 1
    mean_read = max(queries.residues / len(queries), 1.0)
    block_cells = max(blocks[0].residues, 1)
    reads = math.floor(config.HYBRID_UNIT_CELLS / (mean_read * block_cells))
    return max(1, min(len(queries), reads))


@dataclass
class HybridBackend(Backend):
    """Workers of the CPU backend on the cores plus workers of the device backend (OpenCL) on
    every GPU, on one queue.

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
    kind = "pool"

    def __post_init__(self) -> None:
        self._children: dict[tuple[str, int], object] = {}
        self._in_thread: dict[tuple[str, int], Backend] = {}
        # Measured throughput of each worker (cells/s) per kernel family, carried from run to
        # run: later runs open with device takes of the right size.
        self._rates: dict[str, dict[str, float]] = {}
        self._devices_alone = False  # the last run left the CPU workers out (cpu_pays)

    @classmethod
    def available(cls, devices=None, **options) -> bool:
        if devices:
            return True
        if no_gpu_device_nodes():
            return False
        try:
            return bool(gpu_selectors())
        except Exception:  # pragma: no cover - a broken OpenCL installation
            return False

    @classmethod
    def unavailable_reason(cls, devices=None, **options) -> str:
        try:
            found = gpu_selectors()
        except Exception as exc:  # pragma: no cover - a broken OpenCL installation
            return f"OpenCL does not work here ({exc})"
        if device_backend() is None:
            return "no device backend could be loaded (is pyopencl installed?)"
        if not found:
            return (
                "it shares the work between the CPU and OpenCL GPUs, and no GPU was found "
                "('dpalign devices' lists the devices; --device names a CPU device, or use "
                "--backend numba)"
            )
        return "it cannot run with these options"

    def _device_workers(
        self, selectors: list, n_blocks: int, failures: dict, chunk_reads: int, alone: bool
    ) -> list:
        """The device workers of ``selectors`` (:meth:`_selectors`):
        ``config.HYBRID_STREAMS`` per OpenCL device (``gpu-0``,
        ``gpu-0.1``...), each with queues of its own, in a child process when ``processes``;
        a ready Backend given in ``devices`` runs on a thread of its own. One device working
        ``alone`` (no CPU workers, no other device to share the GIL with) runs on a thread
        unless ``processes`` was set: a child process costs a second interpreter's start and a
        copy of each run's reads."""
        from .devproc import DeviceProcess, claim

        if not selectors and self.devices is None:
            raise BackendUnavailable("the hybrid backend found no GPU")
        device_cls = device_backend()
        if device_cls is None and any(not isinstance(s, Backend) for s in selectors):
            raise BackendUnavailable("the hybrid backend found no device backend")
        if self.processes is not None:
            processes = self.processes
        else:
            # one device alone has nothing to share the GIL with; several still would
            processes = config.HYBRID_DEVICE_PROCESSES and not (alone and len(selectors) == 1)
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
                        # the one started ahead for the d-th GPU (every GPU's, in order)
                        ahead = claim(device_cls.name, d, stream) if self.devices is None else None
                        self.stats.mark(
                            f"{name}: device process "
                            + ("started ahead, taken" if ahead else "started")
                        )
                        self._children[key] = ahead or DeviceProcess(device_cls.name, sel, stream)
                    worker = ProcessDeviceWorker(
                        name, self._children[key], n_blocks, failures.get(name), chunk_reads
                    )
                else:
                    backend = self._in_thread_backend(device_cls, sel, stream)
                    worker = DeviceWorker(name, backend, n_blocks, failures.get(name), chunk_reads)
                workers.append(worker)
        return workers

    def block_width(self, kernel, n_targets):
        # The CPU workers' layout (the pairwise int8 pass needs its 64-lane groups); a device
        # backend reads any block width. One device working alone takes its own layout (the
        # OpenCL backend: every profile in one block; the CPU's 51 blocks of 32 cost the PRANK
        # shape's scoring 2.54 s against opencl's 2.32 on the H100), which the CPU workers
        # also read should the device fail.
        alone = self._device_alone(kernel)
        if alone is not None:
            return alone.block_width(kernel, n_targets)
        return cpu_backend(self._n_cpu()).block_width(kernel, n_targets)

    def _device_alone(self, kernel) -> Backend | None:
        """The device backend that will run ``kernel`` alone on a thread of this process
        (one device, the CPU's share below the rule), else None."""
        selectors = self._selectors()
        if len(selectors) != 1 or self.cpu_pays(kernel) or self.processes:
            return None
        sel = selectors[0]
        if isinstance(sel, Backend):
            return sel
        device_cls = device_backend()
        if device_cls is None:
            return None
        return self._in_thread_backend(device_cls, sel, 0)

    def first_device(self) -> Backend | None:
        """The first GPU's own backend (of those named, else of every GPU), on a thread of
        this process, where this work queue has a GPU and was asked for nothing only the
        queue does (device processes, injected failures); else None. ``auto`` runs a large
        search and a long pair on it, which the queue does far worse: the flagship search
        (1,000 proteins x 200,000) took the queue 16.3-19.7 s on one H100 and 37-46 s on two
        H200s (its 32 CPU workers took 64-89% of the cells) against 7.8-9.6 s on one GPU's
        backend, which traces hits back in worker processes while it searches and lays the
        targets out for the device; a 1 Mb pair went to the queue's cores (13-15 s against
        5-6 s)."""
        if self.processes or self.inject_failures or os.environ.get("DPALIGN_INJECT_FAILURES"):
            return None
        selectors = self._selectors()
        if selectors and isinstance(selectors[0], Backend):
            return selectors[0]
        device_cls = device_backend()
        if not selectors or device_cls is None:
            return None
        return self._in_thread_backend(device_cls, selectors[0], 0)

    def profile_device(self):
        # The device, where it will score alone on a thread of this process: with the CPU
        # workers in the run, their kernels load Numba anyway, and a device process holds
        # its own context.
        alone = self._device_alone("papara")
        return alone.profile_device() if alone is not None else None

    def _in_thread_backend(self, device_cls, sel, stream: int) -> Backend:
        """The device backend of ``sel``'s queue ``stream`` run on a thread of this process,
        made once: the device keeps the profiles it holds from run to run."""
        key = (sel, stream)
        if key not in self._in_thread:
            self._in_thread[key] = get_backend(device_cls.name, device=sel, stream=stream)
        return self._in_thread[key]

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
        n_dev = len(self._selectors())
        device_cls = device_backend()
        kind = device_cls.name if device_cls is not None else "device"
        if self._devices_alone:
            share = config.HYBRID_MIN_CPU_SHARE
            return (
                f"hybrid ({n_dev} {kind} devices alone: the CPU workers' measured share is "
                f"below {share:.0%})"
            )
        return f"hybrid ({n_cpu} CPU workers + {n_dev} {kind} devices)"

    def _selectors(self) -> list:
        """The devices of this backend: those given, else every GPU."""
        return self.devices if self.devices is not None else gpu_selectors()

    def _n_cpu(self) -> int:
        if self.cpu_workers is not None:
            return self.cpu_workers
        return config.cpu_threads(self.threads)

    def _known_rates(self, kernel: str) -> dict[str, float]:
        """The workers' measured rates (cells/s) for a kernel family: this process's, else
        the ones kept in ``config.HYBRID_RATES_FILE`` for this CPU count and these devices."""
        if kernel not in self._rates:
            kept = _read_rates().get(self._rates_key(kernel), {})
            self._rates[kernel] = {k: float(v) for k, v in kept.items()}
        return self._rates[kernel]

    def _rates_key(self, kernel: str) -> str:
        selectors = self._selectors()
        names = ",".join(s if isinstance(s, str) else type(s).__name__ for s in selectors)
        return f"{kernel}|{self._n_cpu()} cpu|{names}"

    def _keep_rates(self, kernel: str) -> None:
        """Store this kernel family's rates where the next process finds them."""
        rates = self._rates.get(kernel)
        if rates:
            _write_rates(self._rates_key(kernel), rates)

    def cpu_pays(self, kernel: str) -> bool:
        """Whether the CPU workers join the devices' queue (the rule of ``auto`` on a GPU
        machine): yes unless their measured share of the cells is below
        ``config.HYBRID_MIN_CPU_SHARE``; with nothing measured yet, yes (the queue measures)."""
        rates = self._known_rates(kernel)
        cpu = sum(v for k, v in rates.items() if k.startswith("cpu-"))
        device = sum(v for k, v in rates.items() if not k.startswith("cpu-"))
        if cpu <= 0 or device <= 0:
            return True
        return cpu / (cpu + device) >= config.HYBRID_MIN_CPU_SHARE

    def score(self, task, queries, blocks, progress=None):
        failures = {
            **parse_failures(os.environ.get("DPALIGN_INJECT_FAILURES")),
            **(self.inject_failures or {}),
        }
        if not len(queries) or not blocks:
            return empty_results(queries, blocks)
        self._devices_alone = False
        if self.cpu_pays(task.kernel):
            return self._score(task, queries, blocks, progress, failures, with_cpu=True)
        log.info(
            "hybrid: the devices alone (the CPU's measured share is below %.0f%%)",
            100 * config.HYBRID_MIN_CPU_SHARE,
        )
        try:
            results = self._score(task, queries, blocks, progress, failures, with_cpu=False)
        except DpalignError as exc:  # every device failed: the cores take the run, as they
            log.warning("hybrid: %s; the run starts again with the CPU workers", exc)
            return self._score(task, queries, blocks, progress, failures, with_cpu=True)
        self._devices_alone = True  # what the summary line names
        return results

    def _score(self, task, queries, blocks, progress, failures: dict, with_cpu: bool):
        """One run of the work queue: the device workers, and the CPU workers ``with_cpu``
        (or where there is no device)."""
        cpu = cpu_backend(threads=1)
        reads_per_unit = unit_reads(queries, blocks)
        selectors = self._selectors()
        if not with_cpu and len(selectors) == 1:
            # one device alone takes everything in one launch per block, as --backend opencl
            # does: its first small take and the takes after it cost the PRANK shape's
            # scoring 2.55-2.60 s against opencl's 2.29-2.32 s on the H100
            reads_per_unit = max(len(queries), 1)
        devices = self._device_workers(
            selectors, len(blocks), failures, reads_per_unit, not with_cpu
        )
        nice = config.HYBRID_CPU_NICE if devices else 0
        n_cpu = self._n_cpu() if with_cpu or not devices else 0
        workers = [CpuWorker(f"cpu-{k}", cpu, failures.get(f"cpu-{k}"), nice) for k in range(n_cpu)]
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
            results = run_workers(
                workers,
                self.last_queue,
                task,
                queries,
                blocks,
                self.stats,
                progress,
                known_rates=self._known_rates(task.kernel),
            )
            self._keep_rates(task.kernel)
            return results
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
                known_rates=self._known_rates(task.kernel),
            )
            self._keep_rates(task.kernel)
            return shared.blocks()
        finally:
            shared.close()
