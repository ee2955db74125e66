"""One long pair on the OpenCL device, every mode, wall against kernel: issue 16's figures.

    python bench/longpair_device.py [--length 1000000] [--out DIR] [--budget 200]

Runs ``align_long(backend="opencl")`` on ``workloads.long_pair(L)`` (NUC.4.4, gaps 10/1) in
global, local and semiglobal mode (``--modes``), score only and with traceback, each twice
(the first run builds the kernel; the second is reported warm), then local mode with block
pruning (``prune=True``, reported apart). Traceback runs once more per variant of the traceback's
tiling (``leaf_bytes=0`` is the recursion through every level of fills that this session
replaced, measured in the same run), and the CPU path (every core) once per mode for the
identity check (before the variants). Prints one line per run and writes
``longpair_device.json`` (and the cProfile of a default run of each mode) under ``--out``
(default ``$OUT``). Stops starting new runs after ``--budget`` seconds. ``--quick``: the
default runs and the variants of ``QUICK`` only (no profiles: cProfile mixes threads).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time

from dpalign.benchmarks import workloads
from dpalign.errors import OptionError
from dpalign.gcups import RunStats
from dpalign.longpair import Tiling, align_long
from dpalign.scoring import Scoring

VARIANTS = {
    "default": {},
    "recursive (before)": {"leaf_bytes": 0},
    "pageable stores": {},  # the default tiling, checkpoints copied into fresh arrays
    "retile 128x32x4": {"device_retile": (128, 32, 4)},
    "retile 128x32x2": {"device_retile": (128, 32, 2)},
    "blocks 32, retile 128x32x4": {"blocks": 32, "device_retile": (128, 32, 4)},
    "no fill ahead": {"fill_ahead": 0},  # the traceback's blocks one after the other
    "fill ahead 1, trace ahead 1": {"fill_ahead": 1, "trace_ahead": 1},  # request 2's default
    "fill ahead 3, trace ahead 1": {"fill_ahead": 3, "trace_ahead": 1},
    "fill ahead 1, trace ahead 4": {"fill_ahead": 1, "trace_ahead": 4},
    "fill ahead 3, trace ahead 3": {"fill_ahead": 3, "trace_ahead": 3},
    "fill ahead 2, trace ahead 3, switch interval as is": {"switch_interval": None},
    # only a band of each block's checkpoints to the host (an option: no gain measured)
    "band 1/16": {"staging_band": 1 / 16},
    "band 1/32": {"staging_band": 1 / 32},
    "band 1/8": {"staging_band": 1 / 8},
}
#: --quick: the default runs and these variants only, in global mode (no profiles, no
#: pruning, no CPU), those of BOTH in local mode too
BOTH = ("band 1/16", "band 1/32", "band 1/8")
QUICK = ("band 1/16", "band 1/32", "band 1/8", "no fill ahead")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1_000_000)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--budget", type=float, default=200.0)
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU identity runs")
    parser.add_argument(
        "--quick", action="store_true", help="no pruning, no CPU, only the variants of QUICK"
    )
    parser.add_argument(
        "--modes", default="global,local,semiglobal", help="comma-separated modes to time"
    )
    args = parser.parse_args()
    modes = tuple(args.modes.split(","))
    os.makedirs(args.out, exist_ok=True)
    began = time.perf_counter()
    scoring = Scoring("NUC.4.4", (10, 1))
    a_text, b_text = workloads.long_pair(args.length)
    a, b = scoring.encode(a_text), scoring.encode(b_text)
    cells = len(a) * len(b)
    for mode in modes:  # Numba and the OpenCL programs build here
        for traceback in (False, True):
            align_long(a[:3000], b[:3000], scoring, mode, traceback=traceback, backend="opencl")
        # and the traceback's kernels of blocks filled and traced ahead (device blocks)
        warm = Tiling(device_cells=1 << 20, leaf_bytes=4 << 20)
        align_long(a[:20000], b[:20000], scoring, mode, tiling=warm, backend="opencl")
    records = []

    def run(mode, traceback, name="default", backend="opencl", profile=False, prune=False):
        from dpalign.kernels_cl.backend import DeviceRegions

        tiling = Tiling(**VARIANTS[name])
        DeviceRegions.reuses_stores = name != "pageable stores"
        stats = RunStats()
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if prof:
            prof.enable()
        result = align_long(
            a,
            b,
            scoring,
            mode,
            traceback=traceback,
            tiling=tiling,
            backend=backend,
            stats=stats,
            prune=prune,
        )
        if prof:
            prof.disable()
        wall = time.perf_counter() - start
        device_cells = sum(w.cells for w in stats.workers.values())
        kernel = sum(w.seconds for w in stats.workers.values())
        record = {
            "backend": backend,
            "mode": mode,
            "traceback": traceback,
            "variant": name + (" + block pruning" if prune else ""),
            "notes": stats.notes,
            "m": len(a),
            "n": len(b),
            "wall_s": round(wall, 3),
            "gcups_wall": round(cells / wall / 1e9, 1),
            "kernel_s": round(kernel, 3),
            "device_cells": device_cells,
            "gcups_kernel": round(device_cells / kernel / 1e9, 1) if kernel else None,
            "wall_over_kernel": round(kernel / wall, 3) if kernel else None,
            "score": result.score,
            "end": [result.a_end, result.b_end],
            "start": [result.a_start, result.b_start],
            "cigar_len": len(result.ops or ""),
        }
        records.append(record)
        print(json.dumps(record), flush=True)
        if prof:
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
            path = os.path.join(args.out, f"prof_{mode}_{'tb' if traceback else 'score'}.txt")
            with open(path, "w") as f:
                f.write(text.getvalue())
        return result

    results = {}
    for mode in modes:
        for traceback in (False, True):
            run(mode, traceback)  # warm-up at full size (buffers, caches)
            results[mode, traceback] = run(mode, traceback)
    for mode in modes if not args.quick else ():  # cProfile mixes threads
        for traceback in (False, True):
            run(mode, traceback, profile=True)
    # block pruning, reported apart from the plain figures
    for traceback in (False, True) if "local" in modes and not args.quick else ():
        for _ in range(2):
            got = run("local", traceback, prune=True)
        if got != results["local", traceback]:
            print(f"MISMATCH local traceback={traceback} with block pruning", flush=True)
    if not (args.no_cpu or args.quick):
        for mode in modes:
            if time.perf_counter() - began > args.budget:
                print(f"skipped the CPU check of {mode}: over budget", flush=True)
                continue
            want = run(mode, True, backend="cpu")
            same = want == results[mode, True]
            score_same = (want.score, want.a_end, want.b_end) == (
                results[mode, False].score,
                results[mode, False].a_end,
                results[mode, False].b_end,
            )
            print(f"identical to the CPU path, {mode}: traceback {same}, score {score_same}")
            records.append({"check": mode, "traceback_same": same, "score_same": score_same})
    for name in VARIANTS:
        for mode in ("global", "local") if not args.quick or name in BOTH else ("global",):
            if name == "default" or time.perf_counter() - began > args.budget:
                continue
            if args.quick and name not in QUICK:
                continue
            try:
                for _ in range(2 if args.quick else 1):  # --quick: the second one warm
                    got = run(mode, True, name)
            except OptionError as exc:  # e.g. a retile wider than a CPU device's tiles
                print(f"skipped {name}: {exc}", flush=True)
                continue
            if got != results[mode, True]:
                print(f"MISMATCH {mode} {name}", flush=True)
    with open(os.path.join(args.out, "longpair_device.json"), "w") as f:
        json.dump(records, f, indent=1)
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
