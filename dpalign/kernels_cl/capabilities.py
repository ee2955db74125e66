"""What an OpenCL device can do, in one place: memory, work-group limits, vendor quirks.

Every device-specific decision of the OpenCL layer reads a :class:`Capabilities` instead of
asking the driver again or testing vendor names in scattered places.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """The facts about one OpenCL device that the kernels and the host code depend on.

    Attributes
    ----------
    name, platform, vendor : str
        As the driver reports them (stripped).
    kind : str
        ``"gpu"``, ``"cpu"`` or ``"accelerator"``.
    driver, platform_version : str
        Driver and platform version strings (part of the program cache key).
    compute_units : int
    global_mem, max_alloc, local_mem : int
        Bytes of global memory, of the largest single buffer, of local memory per work-group.
    max_work_group : int
        Largest work-group the device accepts for any kernel (a kernel may allow fewer).
    compute_capability : tuple of int, optional
        NVIDIA devices only (``cl_nv_device_attribute_query``), e.g. ``(9, 0)`` for the H100.
    """

    name: str
    platform: str
    vendor: str
    kind: str
    driver: str
    platform_version: str
    compute_units: int
    global_mem: int
    max_alloc: int
    local_mem: int
    max_work_group: int
    compute_capability: tuple[int, int] | None = None

    @property
    def nvidia(self) -> bool:
        """NVIDIA's own OpenCL (inline PTX is available)."""
        return self.compute_capability is not None or "NVIDIA" in self.platform.upper()

    @property
    def ptx_s16x2(self) -> bool:
        """Packed 16-bit ``add/max/min.s16x2`` PTX (and their DPX fusion): sm_90 and later."""
        return self.nvidia and (self.compute_capability or (0, 0)) >= (9, 0)

    @property
    def is_cpu(self) -> bool:
        return self.kind == "cpu"

    @property
    def cache_key(self) -> str:
        """What a compiled program depends on besides its source and options."""
        return "|".join(
            (
                self.platform,
                self.platform_version,
                self.name,
                self.driver,
                str(self.compute_capability),
            )
        )

    def describe(self) -> str:
        """One line: the device and the features the kernels use."""
        extras = []
        if self.compute_capability:
            major, minor = self.compute_capability
            extras.append(f"compute capability {major}.{minor}")
        if self.ptx_s16x2:
            extras.append("PTX s16x2/DPX")
        extras.append(f"{self.global_mem / 2**30:.1f} GiB")
        extras.append(f"{self.local_mem // 1024} KiB local")
        return f"{self.name} ({self.kind}, {self.platform}; {', '.join(extras)})"


def _kind(device) -> str:
    import pyopencl as cl

    if device.type & cl.device_type.GPU:
        return "gpu"
    if device.type & cl.device_type.CPU:
        return "cpu"
    return "accelerator"


def capabilities(device) -> Capabilities:
    """Read a ``pyopencl.Device`` into :class:`Capabilities`."""
    from pyopencl.characterize import nv_compute_capability

    cc = nv_compute_capability(device)  # None unless cl_nv_device_attribute_query
    return Capabilities(
        name=device.name.strip(),
        platform=device.platform.name.strip(),
        vendor=device.vendor.strip(),
        kind=_kind(device),
        driver=device.driver_version.strip(),
        platform_version=device.platform.version.strip(),
        compute_units=int(device.max_compute_units),
        global_mem=int(device.global_mem_size),
        max_alloc=int(device.max_mem_alloc_size),
        local_mem=int(device.local_mem_size),
        max_work_group=int(device.max_work_group_size),
        compute_capability=tuple(cc) if cc else None,
    )
