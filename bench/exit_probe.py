"""How long a process takes to end after its last instruction: plain memory against an OpenCL
context holding pinned host memory and device buffers the size of a PaPaRa run's (1604.PRANK:
two launch slots of ~160 MB pinned results each, ~1 GB on the device).

The CLI ends a PaPaRa run with ``os._exit`` once its outputs are closed; what the user still
waits for then is the kernel's teardown of the process: its memory, and a GPU driver's context.
Each mode runs in a fresh process; the time from the child's last mark to its end, as seen
from outside, is printed (median of ``--repeat``)::

    python bench/exit_probe.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import os, sys, time
import numpy as np
mode = sys.argv[1]
pinned_mb, device_mb, host_mb = (int(x) for x in sys.argv[2:5])
host = np.ones(host_mb << 20, np.uint8)  # the run's own arrays
keep = []
if mode.startswith("cl"):
    import pyopencl as cl
    devs = [d for p in cl.get_platforms() for d in p.get_devices()]
    dev = ([d for d in devs if d.type & cl.device_type.GPU] or devs)[0]
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    for _ in range(2):
        buf = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, (pinned_mb << 20) // 2)
        arr, _ = cl.enqueue_map_buffer(q, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                       ((pinned_mb << 20) // 2,), np.uint8)
        arr[:] = 1
        keep.append((buf, arr))
    big = cl.Buffer(ctx, mf.READ_WRITE, device_mb << 20)
    cl.enqueue_fill_buffer(q, big, np.uint8(0), 0, device_mb << 20)
    q.finish()
    keep.append(big)
    if mode == "cl-release":
        t0 = time.perf_counter()
        for item in keep:
            (item[0] if isinstance(item, tuple) else item).release()
        del keep[:], q, ctx, item, buf, arr, big
        sys.stderr.write(f"release {time.perf_counter() - t0:.4f}\n")
sys.stdout.write(f"{time.time():.6f}\n")
sys.stdout.flush()
os._exit(0)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pinned-mb", type=int, default=320)
    parser.add_argument("--device-mb", type=int, default=1024)
    parser.add_argument("--host-mb", type=int, default=600)
    args = parser.parse_args()
    sizes = [str(args.pinned_mb), str(args.device_mb), str(args.host_mb)]
    for mode in ("none", "cl", "cl-release"):
        tails, releases = [], []
        for _ in range(args.repeat):
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, mode, *sizes], capture_output=True, text=True
            )
            end = time.time()
            if done.returncode != 0:
                print(f"{mode}: failed: {done.stderr[-500:]}")
                break
            tails.append(end - float(done.stdout.split()[-1]))
            releases += [float(x.split()[1]) for x in done.stderr.splitlines() if "release" in x]
        if tails:
            extra = f", release in process {statistics.median(releases):.4f} s" if releases else ""
            print(
                f"{mode:10s} last mark to process end: median {statistics.median(tails):.4f} s "
                f"({', '.join(f'{t:.3f}' for t in tails)}){extra}",
                flush=True,
            )
    print("host:", os.cpu_count(), "cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
