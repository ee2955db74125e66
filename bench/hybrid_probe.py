"""Diagnostics for the hybrid queue on a GPU machine (where does the GPU thread's time go?).

``python3 bench/hybrid_probe.py --out $OUT``: (1) the GPU backend called the way a hybrid
device worker calls it (guided chunks), single-threaded, under cProfile: host CPU per call and
the top functions; (2) CPU-only in this process while a second process runs GPU-only at the
same time: the sum two processes reach with no GIL shared.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybrid_gpu import _timed, _warm, _workload  # noqa: E402


def chunked_profile(out: Path, scale: float, device: str) -> None:
    from dpalign.engine import get_backend
    from dpalign.kernels_cl.context import wait_totals

    task, queries, blocks, cells, _ = _workload(scale)
    gpu = get_backend("opencl", device=device)
    _warm(gpu, task, queries, blocks)
    n = len(queries)
    bounds, start, share = [], 0, 0.25
    while start < n:  # guided: a quarter of what remains, then less
        size = max(200, int((n - start) * share))
        bounds.append((start, min(n, start + size)))
        start += size
    prof = cProfile.Profile()
    w0, c0, t0 = wait_totals(), time.process_time(), time.perf_counter()
    prof.enable()
    for a, b in bounds:
        gpu.score(task, queries.subset(slice(a, b)), blocks)
    prof.disable()
    wall, cpu, w1 = time.perf_counter() - t0, time.process_time() - c0, wait_totals()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(18)
    record = {
        "step": "gpu-chunked",
        "calls": len(bounds),
        "wall": wall,
        "process_cpu": cpu,
        "wait_wall": w1[0] - w0[0],
        "gcups": cells / wall / 1e9,
    }
    print(json.dumps(record), flush=True)
    print(text.getvalue()[:4000], flush=True)
    (out / "probe_profile.txt").write_text(text.getvalue())


def two_processes(out: Path, scale: float, device: str, cpu: int) -> None:
    from dpalign.engine import get_backend

    task, queries, blocks, cells, _ = _workload(scale)
    numba = get_backend("numba", threads=cpu)
    _warm(numba, task, queries, blocks)
    child = subprocess.Popen(
        [sys.executable, __file__, "--gpu-child", device, "--scale", str(scale)],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # let the child get going (its own warm-up is before its timer)
    _, cpu_s = _timed(numba, task, queries, blocks)
    print(
        json.dumps(
            {"step": "cpu-beside-gpu-process", "seconds": cpu_s, "gcups": cells / cpu_s / 1e9}
        ),
        flush=True,
    )
    print(child.communicate()[0].strip(), flush=True)


def gpu_child(device: str, scale: float) -> None:
    from dpalign.engine import get_backend

    task, queries, blocks, cells, _ = _workload(scale)
    gpu = get_backend("opencl", device=device)
    _warm(gpu, task, queries, blocks)
    total, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 20:  # keep the GPU busy while the CPU run goes on
        _, secs = _timed(gpu, task, queries, blocks)
        total += 1
    print(
        json.dumps(
            {"step": "gpu-process-beside-cpu", "runs": total, "gcups_last": cells / secs / 1e9}
        ),
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--cpu", type=int, default=16)
    parser.add_argument("--device", default="0:0")
    parser.add_argument("--gpu-child")
    args = parser.parse_args()
    if args.gpu_child:
        gpu_child(args.gpu_child, args.scale)
    else:
        chunked_profile(args.out, args.scale, args.device)
        two_processes(args.out, args.scale, args.device, args.cpu)
