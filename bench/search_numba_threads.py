"""Protein search on the Numba backend from one thread to every core: the search phase alone.

Issue 13's CPU goal: ``dpalign search --backend numba`` on a 16-core host at >= 300 GCUPS in
its search phase, i.e. ~19 GCUPS a core with perfect scaling. This runs
:func:`dpalign.search.search_many` in one process (kernels loaded first, each thread count's
database layout packed before its timed run) on ``--queries`` UniProt-like proteins
(50-1,000 aa) against ``workloads.protein_database(--targets)``, BLOSUM62, a gap of k costing
11 + k, local, top 10, for each thread count in ``--threads``, ``--repeat`` times each; and
reports wall GCUPS of the search call, the kernels' summed CPU seconds (GCUPS per busy
thread) and the process CPU outside the kernels (Python under the GIL, the part that does not
scale). One JSON object per run to ``$OUT/search_numba_threads.jsonl`` and a table to stdout.

    python bench/search_numba_threads.py                        # 16 x 50,000, 1..16 threads
    python bench/search_numba_threads.py --threads 1 2 --targets 5000 --queries 4   # here
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_e2e import query_set  # noqa: E402

from dpalign.benchmarks import workloads  # noqa: E402


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=16)
    parser.add_argument("--targets", type=int, default=50_000)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2, 4, 8, 16])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    from importlib import import_module

    from dpalign.engine import backend_for
    from dpalign.scoring import as_scoring
    from dpalign.simd import ends as ends_kernels
    from dpalign.simd import pairwise as score_kernels

    S = import_module("dpalign.search")  # the module (dpalign.search is also the function)
    t0 = time.perf_counter()
    scoring = as_scoring("BLOSUM62", (11, 1), None)
    db = S.Database([s for _, s in workloads.protein_database(args.targets)], sub_score=scoring)
    queries = [s for _, s in query_set(args.queries)]
    cells = sum(map(len, queries)) * db.residues
    built = time.perf_counter() - t0

    kernel_cpu = [0.0]
    lock = threading.Lock()

    def timed(module, name):  # the kernels' thread CPU time (they run without the GIL)
        original = getattr(module, name)

        def run(*a):
            start = time.thread_time()
            out = original(*a)
            spent = time.thread_time() - start
            with lock:
                kernel_cpu[0] += spent
            return out

        setattr(module, name, run)

    timed(score_kernels, "sweep")
    timed(ends_kernels, "sweep_ends")
    t0 = time.perf_counter()
    S.search_many(queries[:1], db[:64], 10, "local", scoring=scoring, threads=1, backend="numba")
    warm = time.perf_counter() - t0

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "name": "workload",
        "queries": len(queries),
        "targets": len(db),
        "cells": cells,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "build_s": built,
        "kernel_load_s": warm,
    }
    results = out_dir / "search_numba_threads.jsonl"
    with open(results, "a") as fh:
        fh.write(json.dumps(meta) + "\n")
    print(json.dumps(meta))
    print(f"{'threads':>7} {'wall s':>8} {'GCUPS':>8} {'per thread':>10} {'kernel cpu':>10} "
          f"{'outside':>8}")  # fmt: skip
    one_thread = None
    for threads in args.threads:
        backend = backend_for("numba", scoring, threads=threads)
        db.blocks(scoring.alphabet, db.layout_width(backend))  # packed outside the timing
        for _ in range(args.repeat):
            kernel_cpu[0] = 0.0
            c0, t0 = time.process_time(), time.perf_counter()
            S.search_many(queries, db, 10, "local", scoring=scoring, threads=threads,
                          backend="numba")  # fmt: skip
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            gcups = cells / wall / 1e9
            if threads == 1:
                one_thread = max(one_thread or 0.0, gcups)
            row = {
                "threads": threads,
                "wall_s": wall,
                "gcups": gcups,
                "kernel_cpu_s": kernel_cpu[0],
                "gcups_per_kernel_thread": cells / kernel_cpu[0] / 1e9,
                "outside_kernels_cpu_s": cpu - kernel_cpu[0],
                "scaling": gcups / one_thread if one_thread else None,
                "block_width": db.layout_width(backend),
            }
            with open(results, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(
                f"{threads:>7} {wall:>8.2f} {gcups:>8.1f} {row['gcups_per_kernel_thread']:>10.1f} "
                f"{kernel_cpu[0]:>10.2f} {row['outside_kernels_cpu_s']:>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
