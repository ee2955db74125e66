"""Finding and choosing an OpenCL device, one context per device, driver errors made readable.

Device choice, in order: an explicit ``spec`` (``dpalign papara --device``), else the
``DPALIGN_OPENCL_DEVICE`` environment variable (:data:`dpalign.config.OPENCL_DEVICE`), else the
first GPU, else the first CPU device (such as PoCL), else any device. A spec is a
``platform:device`` id as ``dpalign devices`` prints it (``0:1``), a kind (``gpu``, ``cpu``), the
k-th GPU (``gpu#1``: the second, in the order of ``OpenCLBackend.gpus``), or a fragment of the
device or platform name (``H100``, ``pocl``), case-insensitive.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import config
from ..errors import BackendUnavailable, DpalignError
from .capabilities import Capabilities, capabilities

_KINDS = ("gpu", "cpu", "accelerator")


def _cl():
    try:
        import pyopencl as cl
    except ImportError as exc:  # pragma: no cover - pyopencl is a dependency
        raise BackendUnavailable(f"pyopencl cannot be imported ({exc})") from None
    return cl


def list_devices() -> list[tuple[str, object]]:
    """Every OpenCL device as ``(id, pyopencl.Device)``, ids ``platform:device``."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return []  # no ICD registered: the same as no device
    found = []
    for p, plat in enumerate(platforms):
        try:
            devices = plat.get_devices()
        except cl.Error:
            continue
        found.extend((f"{p}:{d}", dev) for d, dev in enumerate(devices))
    return found


def _describe_all(devices) -> str:
    if not devices:
        return "no OpenCL device was found (is an ICD such as pocl-binary-distribution installed?)"
    return "devices here: " + "; ".join(f"{i} {d.name.strip()}" for i, d in devices)


def choose_device(spec: str | None = None):
    """Return ``(id, pyopencl.Device)`` for a device spec (see the module docstring).

    Raises
    ------
    BackendUnavailable
        When no device exists or none matches ``spec``; the message lists the devices.
    """
    devices = list_devices()
    spec = (spec if spec is not None else config.OPENCL_DEVICE) or ""
    spec = spec.strip()
    if not devices:
        raise BackendUnavailable(_describe_all(devices))
    if not spec:
        for kind in _KINDS:
            for ident, dev in devices:
                if capabilities(dev).kind == kind:
                    return ident, dev
        return devices[0]
    lowered = spec.lower()
    for ident, dev in devices:
        if ident == spec:
            return ident, dev
    if lowered in _KINDS:
        for ident, dev in devices:
            if capabilities(dev).kind == lowered:
                return ident, dev
    if lowered.startswith("gpu#") and lowered[4:].isdigit():
        cl = _cl()
        gpus = [(ident, dev) for ident, dev in devices if dev.type & cl.device_type.GPU]
        if int(lowered[4:]) < len(gpus):
            return gpus[int(lowered[4:])]
    for ident, dev in devices:
        if lowered in dev.name.lower() or lowered in dev.platform.name.lower():
            return ident, dev
    raise BackendUnavailable(f"no OpenCL device matches {spec!r}; {_describe_all(devices)}")


@dataclass
class DeviceContext:
    """An OpenCL context on one device with two in-order queues (compute, transfers).

    Kernels run on ``queue`` (profiling enabled, for kernel times); host-device copies go on
    ``copy_queue`` so that they overlap with the kernel of the previous batch. ``programs``
    memoises built programs (see :mod:`dpalign.kernels_cl.programs`); ``building`` holds a
    lock per program being built (different programs build at the same time); ``shared``
    holds objects made once per context on first use (under ``lock``), e.g. the group
    search's extra command queues.
    """

    ident: str
    device: object
    caps: Capabilities
    context: object
    queue: object
    copy_queue: object
    programs: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    building: dict = field(default_factory=dict)
    shared: dict = field(default_factory=dict)

    def describe(self) -> str:
        return f"OpenCL {self.ident}: {self.caps.describe()}"


_CONTEXTS: dict[str, DeviceContext] = {}
_CONTEXTS_LOCK = threading.Lock()


def device_context(spec: str | None = None, stream: int = 0) -> DeviceContext:
    """The (memoised) :class:`DeviceContext` of the device that ``spec`` chooses.

    ``stream`` > 0 gives the same context (programs, memory) with queues of its own, so two
    host threads can keep one device busy: one prepares or unpacks a batch while the other's
    kernels run.
    """
    cl = _cl()
    ident, device = choose_device(spec)
    with _CONTEXTS_LOCK:
        ctx = _CONTEXTS.get(ident)
        if ctx is None:
            caps = capabilities(device)
            with driver_errors(caps, "creating a context"):
                context = cl.Context([device])
                queue, copy_queue = _queues(cl, context, device)
            ctx = _CONTEXTS[ident] = DeviceContext(ident, device, caps, context, queue, copy_queue)
        if stream == 0:
            return ctx
        key = f"{ident}#{stream}"
        other = _CONTEXTS.get(key)
        if other is None:
            with driver_errors(ctx.caps, "creating queues"):
                queue, copy_queue = _queues(cl, ctx.context, device)
            other = _CONTEXTS[key] = DeviceContext(
                ident,
                device,
                ctx.caps,
                ctx.context,
                queue,
                copy_queue,
                ctx.programs,
                ctx.lock,
                ctx.building,
            )
        return other


def shared_contexts(specs) -> list[DeviceContext]:
    """One OpenCL context holding every device of ``specs`` (memoised), as one
    :class:`DeviceContext` per spec (its device, its own queues and programs).

    Events of one context can be waited on by any of its queues, so one device's copy can
    wait on another device's kernel without a host thread in between
    (:mod:`dpalign.kernels_cl.skewed`). The devices must share a platform. A spec named
    twice gets the same device with queues of its own.
    """
    cl = _cl()
    chosen = [choose_device(spec) for spec in specs]
    idents = tuple(ident for ident, _ in chosen)
    with _CONTEXTS_LOCK:
        found = _SHARED.get(idents)
        if found is not None:
            return found
        devices = list({ident: dev for ident, dev in chosen}.values())
        platforms = {dev.platform.int_ptr for dev in devices}
        caps = [capabilities(dev) for _, dev in chosen]
        if len(platforms) > 1:
            raise BackendUnavailable(
                f"devices {', '.join(idents)} are on different OpenCL platforms: they cannot "
                "share a context"
            )
        with driver_errors(caps[0], "creating a context of several devices"):
            context = cl.Context(devices)
            found = []
            for (ident, device), cap in zip(chosen, caps, strict=True):
                queue, copy_queue = _queues(cl, context, device)
                found.append(DeviceContext(ident, device, cap, context, queue, copy_queue))
        _SHARED[idents] = found
        return found


_SHARED: dict[tuple, list[DeviceContext]] = {}


def _queues(cl, context, device):
    profiling = cl.command_queue_properties.PROFILING_ENABLE
    return cl.CommandQueue(context, device, properties=profiling), cl.CommandQueue(context, device)


def int_setter(kernel):
    """``set(index, value)``: set a kernel's 32-bit integer argument, for launch loops.

    pyopencl's ``Kernel.set_arg(i, np.int32(v))`` took ~6 us a call on a 2-core host (its
    type dispatch), two of them per launch of a tile diagonal; the raw bytes take ~0.1 us.
    Falls back to ``set_arg`` where pyopencl has no ``_set_arg_buf``.
    """
    import struct

    import numpy as np

    raw = getattr(kernel, "_set_arg_buf", None)
    if raw is None:  # pragma: no cover - older or newer pyopencl
        return lambda index, value: kernel.set_arg(index, np.int32(value))
    pack = struct.Struct("=i").pack  # host order, as np.int32 is passed
    return lambda index, value: raw(index, pack(value))


# --------------------------------------------------------------------------------------------
# Driver errors
# --------------------------------------------------------------------------------------------

_HINTS = {
    "OUT_OF_RESOURCES": "the kernel needs more registers or local memory per work-group than "
    "the device offers, or it ran too long for the driver's watchdog",
    "MEM_OBJECT_ALLOCATION_FAILURE": "device memory is exhausted; lower "
    "DPALIGN_OPENCL_MEMORY_FRACTION or use fewer reads per run",
    "OUT_OF_HOST_MEMORY": "host memory is exhausted",
    "INVALID_WORK_GROUP_SIZE": "the work-group size does not suit this device",
    "DEVICE_NOT_AVAILABLE": "the device is busy or was reset",
    "INVALID_BUFFER_SIZE": "a buffer is larger than the device allows in one allocation",
}


_waits = threading.local()


def wait_totals() -> tuple[float, float]:
    """``(wall, cpu)`` seconds this thread has spent inside :func:`wait` so far."""
    return getattr(_waits, "wall", 0.0), getattr(_waits, "cpu", 0.0)


def wait(event) -> None:
    """Wait for an OpenCL event without spinning a CPU core.

    ``clWaitForEvents`` in NVIDIA's driver busy-waits (the seed paper measured it wasting a
    core per waiting thread, next to the CPU workers of a hybrid run). With
    ``config.OPENCL_WAIT == "poll"`` (the default) the host sleeps between status checks, from
    0.1 ms doubling up to 2 ms, which adds at most ~2 ms to a launch that takes tens of ms.
    """
    start, cpu_start = time.perf_counter(), time.thread_time()
    try:
        _wait(event)
    finally:
        _waits.wall = getattr(_waits, "wall", 0.0) + time.perf_counter() - start
        _waits.cpu = getattr(_waits, "cpu", 0.0) + time.thread_time() - cpu_start


def _wait(event) -> None:
    if config.OPENCL_WAIT != "poll":
        event.wait()
        return
    import pyopencl as cl

    complete = cl.command_execution_status.COMPLETE
    pause = 1e-4
    while True:
        status = event.command_execution_status
        if status == complete:
            break
        if status < 0:  # an error code: let wait() raise the driver's error
            event.wait()
            break
        time.sleep(pause)
        pause = min(pause * 2, 2e-3)
    event.wait()  # completes at once; surfaces errors the same way as a blocking wait


class OpenCLError(BackendUnavailable):
    """An OpenCL driver call failed; the message names the device, the step and a hint."""


@contextmanager
def driver_errors(caps: Capabilities, what: str):
    """Turn ``pyopencl`` errors raised inside the block into :class:`OpenCLError`.

    ``what`` names the step (``"running papara_strip"``) for the message.
    """
    cl = _cl()
    try:
        yield
    except DpalignError:
        raise
    except cl.Error as exc:
        code = getattr(exc, "code", None)
        name = _error_name(code)
        hint = next((text for key, text in _HINTS.items() if key in name), "")
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else name
        message = f"OpenCL error on {caps.name} while {what}: {name or detail}"
        if detail and detail != name:
            message += f" ({detail})"
        if hint:
            message += f"; {hint}"
        raise OpenCLError(message) from exc


def _error_name(code) -> str:
    if code is None:
        return ""
    cl = _cl()
    for name in dir(cl.status_code):
        if not name.startswith("_") and getattr(cl.status_code, name) == code:
            return name
    return f"error {code}"
