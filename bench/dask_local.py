"""Dask LocalCluster against in-process Numba on the same PaPaRa scoring phase.

Usage (on this 2-core machine)::

    PYTHONPATH=$PWD python bench/dask_local.py [--scale 0.15] [--workers 2] [--repeat 3]

The workload is the 1604.PRANK shape scaled (``workloads.prank_like``). Both sides are warmed
first (Numba compilation, the cluster's start and its workers' imports); the figures are the
best of ``--repeat`` timed runs of ``backend.score`` over every read and block. The criterion
(issue 4): a 2-worker LocalCluster reaches >= 0.8 x the in-process Numba GCUPS. Prints one JSON
line per measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybrid_gpu import _workload  # noqa: E402  (the same workload as the GPU benchmark)


def best_of(backend, task, queries, blocks, repeat: int):
    times, scores = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        results = backend.score(task, queries, blocks)
        times.append(time.perf_counter() - t0)
        scores = np.concatenate([r.scores for r in results], axis=1)
    return min(times), scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.15)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from dpalign.engine import get_backend

    task, queries, blocks, cells, shape = _workload(args.scale)
    print(
        json.dumps(
            {
                "workload": {
                    "edges": shape[0],
                    "columns": shape[1],
                    "reads": len(queries),
                    "cells": cells,
                }
            }
        ),
        flush=True,
    )
    numba = get_backend("numba", threads=args.workers)
    numba.score(task, queries.subset(slice(0, 64)), blocks[:2])
    numba_s, want = best_of(numba, task, queries, blocks, args.repeat)
    print(
        json.dumps(
            {
                "backend": "numba",
                "threads": args.workers,
                "seconds": numba_s,
                "gcups": cells / numba_s / 1e9,
            }
        ),
        flush=True,
    )
    dask = get_backend("dask", workers=args.workers)
    try:
        dask.score(task, queries.subset(slice(0, 64)), blocks[:2])
        dask_s, got = best_of(dask, task, queries, blocks, args.repeat)
    finally:
        dask.close()
    print(
        json.dumps(
            {
                "backend": "dask",
                "workers": args.workers,
                "seconds": dask_s,
                "gcups": cells / dask_s / 1e9,
                "identical": bool((got == want).all()),
                "ratio_to_numba": numba_s / dask_s,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
