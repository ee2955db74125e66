"""What this machine offers: the CPU as Numba sees it and every OpenCL device."""

from __future__ import annotations

import platform

from . import config


def cpu_info() -> dict:
    """CPU name, worker cores, widest SIMD extension LLVM reports, int16 lanes per register."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    simd = next(
        (name for name in ("avx512bw", "avx2", "sse4.1", "neon") if features.get(name)), "none"
    )
    lanes = {"avx512bw": 32, "avx2": 16, "sse4.1": 8, "neon": 8}.get(simd, 1)
    name = platform.processor() or llvm.get_host_cpu_name()
    try:
        with open("/proc/cpuinfo") as handle:
            name = next(
                (ln.split(":", 1)[1].strip() for ln in handle if ln.startswith("model name")), name
            )
    except OSError:
        pass
    return {
        "name": name,
        "llvm_cpu": llvm.get_host_cpu_name(),
        "cores": config.cpu_threads(),
        "simd": simd,
        "int16_lanes": lanes,
    }


def opencl_devices() -> tuple[list[dict], str | None]:
    """Every OpenCL device (id ``platform:device``), or an explanation when there are none."""
    try:
        import pyopencl as cl
    except ImportError:
        return [], "pyopencl is not installed"
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        return [], f"no OpenCL platform found ({exc})"
    devices = []
    for p, plat in enumerate(platforms):
        try:
            found = plat.get_devices()
        except cl.Error:
            continue
        for d, dev in enumerate(found):
            devices.append(
                {
                    "id": f"{p}:{d}",
                    "name": dev.name.strip(),
                    "platform": plat.name.strip(),
                    "type": _device_kind(cl, dev.type),
                    "compute_units": dev.max_compute_units,
                    "global_mem_gib": dev.global_mem_size / 2**30,
                    "local_mem_kib": dev.local_mem_size / 2**10,
                }
            )
    _add_opencl_features(devices)
    return devices, None if devices else "no OpenCL devices found"


def _device_kind(cl, bits: int) -> str:
    for flag, label in (
        (cl.device_type.GPU, "GPU"),
        (cl.device_type.ACCELERATOR, "accelerator"),
        (cl.device_type.CPU, "CPU"),
    ):
        if bits & flag:
            return label
    return "other"


def _add_opencl_features(devices: list[dict]) -> None:
    """Mark the device ``--backend opencl`` would choose and what its kernels use there."""
    from .errors import DpalignError

    try:
        from .kernels_cl.capabilities import capabilities
        from .kernels_cl.context import choose_device, list_devices
    except ImportError:  # pragma: no cover - pyopencl is a dependency
        return
    try:
        chosen = choose_device()[0]
    except DpalignError:
        chosen = None
    for (ident, device), entry in zip(list_devices(), devices, strict=False):
        caps = capabilities(device)
        features = [f"work-groups up to {caps.max_work_group}"]
        if caps.compute_capability:
            features.append("compute capability {}.{}".format(*caps.compute_capability))
        if caps.ptx_s16x2:
            features.append("packed 16-bit PTX (DPX)")
        entry["features"] = features
        entry["chosen"] = ident == chosen and entry["id"] == ident


def describe_devices() -> dict:
    """Everything ``dpalign devices`` prints."""
    from .engine import available_backends, kernel_table

    devices, error = opencl_devices()
    available = available_backends()
    kernels: dict[str, list[str]] = {}
    for entry in kernel_table():
        if entry.backend in available:
            kernels.setdefault(entry.backend, []).append(entry.name)
    return {
        "cpu": cpu_info(),
        "opencl": devices,
        "opencl_error": error,
        "backends": available,
        "kernels": kernels,
    }
