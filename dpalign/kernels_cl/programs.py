"""OpenCL programs: package-data sources rendered with ``-D`` constants, built once, cached.

Three layers keep compilation out of the way:

1. **Memory**: built programs are memoised per :class:`~.context.DeviceContext` by
   (source name, options).
2. **Disk (ours)**: the device binary (PTX on NVIDIA, PoCL's own format on PoCL) is saved
   under ``DPALIGN_CACHE_DIR`` (default ``~/.cache/dpalign/opencl``) by the SHA-256 of the
   rendered source, the options and the device/driver identity, and loaded with
   ``clCreateProgramWithBinary`` next time. ``DPALIGN_OPENCL_CACHE=0`` turns it off.
3. **The driver's own**: PoCL keeps the per-work-group-size machine code in its kernel cache
   (``POCL_CACHE_DIR``) and NVIDIA's driver its PTX-to-SASS results in ``~/.nv/ComputeCache``;
   pyopencl's own binary cache is bypassed for both (pyopencl defers to those caches).

A compile failure is re-raised as :class:`KernelBuildError` with the options, the build log and
the path of the saved rendered source.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .. import config
from .context import DeviceContext, OpenCLError

log = logging.getLogger("dpalign.opencl")


class KernelBuildError(OpenCLError):
    """An OpenCL program did not compile (the message holds the log and the source's path)."""


@dataclass(frozen=True)
class BuildInfo:
    """How a program was obtained: ``"compiled"``, ``"disk"`` (our binary cache) or
    ``"memory"``, and the seconds it took."""

    origin: str
    seconds: float


_INCLUDE = re.compile(r'^#include "([\w.]+)"[ \t]*$', re.MULTILINE)


def source(name: str) -> str:
    """The text of a kernel source shipped in this package (``papara.cl``), with its
    ``#include "file.cl"`` lines replaced by those files of the package.

    Expanded here rather than by the OpenCL compiler: the cache key (the SHA-256 of this
    text) then changes with every file a program reads, and no include path is needed.
    """
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda match: source(match.group(1)), text)


def render_options(defines: dict[str, int | str]) -> list[str]:
    """``{"S": 16}`` -> ``["-DS=16"]`` (sorted, so equal settings give equal cache keys)."""
    return [f"-D{key}={value}" for key, value in sorted(defines.items())]


def cache_dir() -> Path | None:
    """Where device binaries are kept, or None when the disk cache is off."""
    if not config.OPENCL_CACHE:
        return None
    return Path(config.OPENCL_CACHE_DIR).expanduser()


def build(dctx: DeviceContext, name: str, defines: dict[str, int | str]):
    """Return the built program ``name`` (a ``.cl`` file here) with ``-D`` ``defines``.

    Threads may build different programs at the same time; one program is built once.

    Returns
    -------
    (pyopencl.Program, BuildInfo)
    """
    return _build(dctx, name, defines, capture=True)


def build_all(dctx: DeviceContext, name: str, defines: list[dict], threads: int = 8) -> list:
    """:func:`build` every set of ``defines`` of program ``name``, up to ``threads`` at a
    time (the driver's compiler runs without the GIL): a cold run pays for its builds side
    by side rather than one after another.

    Returns the :class:`BuildInfo` of each, in order.
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyopencl as cl

    if len(defines) <= 1 or threads <= 1:
        return [build(dctx, name, d)[1] for d in defines]
    # One capture of the build logs for the whole batch: warnings.catch_warnings swaps
    # process-wide state, so nested captures on several threads would not restore it.
    with _WARNINGS, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", cl.CompilerWarning)
        workers = min(threads, len(defines))
        with ThreadPoolExecutor(workers, thread_name_prefix="dpalign-cl") as pool:
            infos = [i for _, i in pool.map(lambda d: _build(dctx, name, d, False), defines)]
    for warning in caught:
        log.debug("building %s: %s", name, warning.message)
    return infos


#: Held while the build logs are captured (``warnings.catch_warnings`` is process-wide).
_WARNINGS = threading.RLock()


def _build(dctx: DeviceContext, name: str, defines: dict, capture: bool):
    """:func:`build`; ``capture``: catch the build logs here, else the caller (holding
    ``_WARNINGS``) does. Locks are taken in one order: ``_WARNINGS``, the program's own,
    ``dctx.lock``."""
    options = render_options(defines)
    key = (name, tuple(options))
    with dctx.lock:
        hit = dctx.programs.get(key)
    if hit is not None:
        return hit[0], BuildInfo("memory", 0.0)
    if not capture:
        return _build_once(dctx, name, key, options)
    import pyopencl as cl

    # A successful build's log (register use, unrolling remarks) is for -vv, not a warning.
    with _WARNINGS, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", cl.CompilerWarning)
        found = _build_once(dctx, name, key, options)
    for warning in caught:
        log.debug("building %s %s: %s", name, " ".join(options), warning.message)
    return found


def _build_once(dctx: DeviceContext, name: str, key, options: list[str]):
    with dctx.lock:
        building = dctx.building.setdefault(key, threading.Lock())
    with building:
        with dctx.lock:
            hit = dctx.programs.get(key)
        if hit is not None:  # another thread built it meanwhile
            return hit[0], BuildInfo("memory", 0.0)
        start = time.perf_counter()
        text = source(name)
        digest = _digest(dctx.caps.cache_key, text, options)
        program, origin = _from_disk(dctx, name, digest, options), "disk"
        if program is None:
            program, origin = _compile(dctx, name, text, options, digest), "compiled"
        info = BuildInfo(origin, time.perf_counter() - start)
        with dctx.lock:
            dctx.programs[key] = (program, info)
        return program, info


def _digest(cache_key: str, text: str, options: list[str]) -> str:
    """The disk cache's key of a program: its rendered source, options and device/driver
    (``Capabilities.cache_key``)."""
    key = "\0".join([text, *options, cache_key])
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def on_disk(caps, name: str, defines: dict) -> bool:
    """Whether the binary of program ``name`` with ``defines`` for the device of ``caps``
    (:class:`~.capabilities.Capabilities`: no context needed) is in the disk cache."""
    path = _binary_path(name, _digest(caps.cache_key, source(name), render_options(defines)))
    return path is not None and path.is_file()


def cached(dctx: DeviceContext, name: str, defines: dict) -> bool:
    """Whether program ``name`` with ``defines`` is built already (in memory) or its binary is
    in the disk cache."""
    with dctx.lock:
        if (name, tuple(render_options(defines))) in dctx.programs:
            return True
    return on_disk(dctx.caps, name, defines)


#: A child of :func:`start_builds`: builds its share of the programs into the disk cache.
_BUILD_CHILD = """
import time
times = [time.perf_counter()]
import importlib.util, pickle, sys, types
# dpalign's package without its __init__ (pairwise, papara, search...): this child needs only
# kernels_cl, config and errors (0.46-0.75 s of imports on the H100 host with them)
spec = importlib.util.find_spec("dpalign")
package = types.ModuleType("dpalign")
package.__path__ = list(spec.submodule_search_locations)
package.__spec__ = spec
sys.modules["dpalign"] = package
from dpalign.kernels_cl.context import device_context
from dpalign.kernels_cl.programs import build
ident, name, defines = pickle.load(sys.stdin.buffer)
times.append(time.perf_counter())
dctx = device_context(ident)
times.append(time.perf_counter())
for d in defines:
    build(dctx, name, d)
    times.append(time.perf_counter())
print(" ".join(f"{t:.6f}" for t in times), flush=True)
"""


@dataclass
class ChildBuilds:
    """Programs being compiled by child processes (:func:`start_builds`)."""

    children: list
    given: int  # programs handed to the children
    started: float = 0.0  # perf_counter when the first child was started
    #: Per child, once waited for: perf_counter (a system-wide clock) at its start, after
    #: its imports, after its context, after each build (empty if it said nothing).
    times: list = field(default_factory=list)

    def wait(self, timeout: float = 600.0) -> int:
        """Wait for the children (killed after ``timeout``); return how many programs they
        were given (a program a child did not build is compiled by :func:`build` as
        before)."""
        import subprocess

        deadline = time.monotonic() + timeout
        for child in self.children:
            out = b""
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
                out = child.stdout.read()  # one short line: it fits the pipe's buffer
            except subprocess.TimeoutExpired:
                child.kill()
            except OSError:
                pass
            finally:
                child.stdout.close()
            try:
                self.times.append([float(x) for x in (out or b"").split()])
            except ValueError:
                self.times.append([])
        return self.given

    def describe(self) -> str:
        """The children's steps in seconds after the first was started (for ``-v``):
        ``start+imports / context / builds...``."""
        parts = []
        for times in self.times:
            if len(times) >= 3:
                start, imports, context = (
                    times[0] - self.started,
                    *(b - a for a, b in zip(times[:2], times[1:3], strict=True)),
                )
                builds = "/".join(
                    f"{b - a:.2f}" for a, b in zip(times[2:], times[3:], strict=False)
                )
                done = times[-1] - self.started
                parts.append(
                    f"started +{start:.2f}, imports {imports:.2f}, context {context:.2f}, "
                    f"builds {builds}, done +{done:.2f}"
                )
        return "; ".join(parts)


def start_builds(
    caps, ident: str, name: str, defines: list[dict], processes: int, keep: bool = False
) -> tuple[ChildBuilds | None, list[dict]]:
    """Start compiling the programs of ``name`` with ``defines`` that the disk cache lacks in
    ``processes`` child processes (each with a context of its own on device ``ident``) and
    return at once: ``(the children or None, the programs left to the caller)``. ``keep``:
    the caller takes a share of its own (built meanwhile in its process), else none.

    NVIDIA's driver compiles one program at a time per process whatever the threads (H100
    host: one global search program 0.54 s, 17 on 17 threads 4.45 s), so a first run's
    programs build side by side only in several processes; :func:`build` then loads the
    children's binaries from the disk cache (17 in 0.02 s)."""
    import pickle
    import subprocess
    import sys

    todo = [d for d in defines if not on_disk(caps, name, d)]
    if len(todo) < 2 or processes < 1 or cache_dir() is None:
        return None, todo
    parts = min(processes + int(keep), len(todo))
    shares = [todo[k::parts] for k in range(parts)]
    mine = shares.pop(0) if keep else []
    children, given, started = [], 0, time.perf_counter()
    for share in shares:
        try:
            child = subprocess.Popen(
                [sys.executable, "-c", _BUILD_CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            child.stdin.write(pickle.dumps((ident, name, share)))
            child.stdin.close()
        except (OSError, pickle.PicklingError):
            mine.extend(share)  # built by the caller (or by build() afterwards)
            continue
        children.append(child)
        given += len(share)
    return ChildBuilds(children, given, started), mine


def build_in_processes(
    dctx: DeviceContext, name: str, defines: list[dict], processes: int, timeout: float = 600
) -> int:
    """:func:`start_builds` for ``dctx``'s device, waiting for the children: the programs
    that are not built or cached yet go to ``processes`` children; returns how many they
    were given (0: nothing to do, or no disk cache)."""
    left = [d for d in defines if not cached(dctx, name, d)]
    children, _ = start_builds(dctx.caps, dctx.ident, name, left, processes)
    return 0 if children is None else children.wait(timeout)


def _binary_path(name: str, digest: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"{Path(name).stem}-{digest}.bin"


def _from_disk(dctx: DeviceContext, name: str, digest: str, options: list[str]):
    import pyopencl as cl

    path = _binary_path(name, digest)
    if path is None or not path.is_file():
        return None
    try:
        binary = path.read_bytes()
        return cl.Program(dctx.context, [dctx.device], [binary]).build(options=options)
    except (OSError, cl.Error):
        return None  # a stale or foreign binary: compile from source instead


def _compile(dctx: DeviceContext, name: str, text: str, options: list[str], digest: str):
    import pyopencl as cl

    try:
        # for this device only: a context may hold several (kernels_cl.context.shared_contexts)
        program = cl.Program(dctx.context, text).build(options=options, devices=[dctx.device])
    except cl.Error as exc:
        rendered = (
            "".join("#define {} {}\n".format(*opt[2:].split("=", 1)) for opt in options) + text
        )
        saved = _save_failed_source(name, rendered, digest)
        raise KernelBuildError(
            f"building {name} for {dctx.caps.name} failed with options {' '.join(options)}; "
            f"rendered source saved as {saved}\n{str(exc).strip()}"
        ) from exc
    path = _binary_path(name, digest)
    if path is not None:
        try:
            binaries = program.binaries
            binary = binaries[program.devices.index(dctx.device) if len(binaries) > 1 else 0]
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
                handle.write(binary)
            os.replace(handle.name, path)
        except (OSError, ValueError, cl.Error):
            pass  # the cache is an optimisation; a read-only home must not stop the run
    return program


def _save_failed_source(name: str, text: str, digest: str) -> str:
    folder = cache_dir() or Path(tempfile.gettempdir())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"failed-{Path(name).stem}-{digest}.cl"
        path.write_text(text, encoding="utf-8")
        return str(path)
    except OSError:
        with tempfile.NamedTemporaryFile("w", suffix=".cl", delete=False) as handle:
            handle.write(text)
        return handle.name
