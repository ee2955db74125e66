"""OpenCL search over many queries: cold program builds and queries in flight.

Two measurements for issue 13 on one OpenCL device (the H100; ``--quick`` on PoCL):

* **builds**: the thread-group programs a set of UniProt-like queries (50-1,000 aa) needs,
  built by ``SearchRunner.prepare`` in a fresh process with empty kernel caches
  (``DPALIGN_CACHE_DIR``, ``CUDA_CACHE_PATH``, ``POCL_CACHE_DIR``), one thread against
  eight: the number of programs and the seconds.
* **flight**: the same queries against ``workloads.protein_database(N)``, BLOSUM62 11/1,
  local (and ``--modes`` others): ``SearchRunner.score_many`` (two queries in flight)
  against one ``score`` call after another, alternating, warm programs; wall seconds and
  GCUPS (cells / wall), kernel GCUPS from the profiling events.

    python bench/opencl_batch.py                 # H100: 200 queries x 200,000 targets
    python bench/opencl_batch.py --quick         # PoCL: 6 queries x 2,000 targets

One JSON object per measurement goes to ``$OUT/opencl_batch.jsonl`` (``--out`` overrides).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_e2e import query_set  # noqa: E402

from dpalign.benchmarks import workloads  # noqa: E402
from dpalign.scoring import Scoring, free_ends_tuple  # noqa: E402


def _setup(n_queries: int, n_targets: int, local_kernel: str):
    from dpalign.kernels_cl.context import device_context
    from dpalign.kernels_cl.search import SearchRunner

    scoring = Scoring("BLOSUM62", (11, 1))
    queries = [scoring.encode(s) for _, s in query_set(n_queries)]
    targets = [scoring.encode(s) for _, s in workloads.protein_database(n_targets)]
    runner = SearchRunner(device_context(), targets, local_kernel=local_kernel)
    return scoring, queries, targets, runner


def builds_child(args) -> None:
    """One cold build (run in a fresh process): print a JSON line."""
    scoring, queries, _, runner = _setup(args.queries, args.targets, args.local_kernel)
    start = time.perf_counter()
    ends = free_ends_tuple(args.mode)
    runner.prepare(queries, scoring, args.mode, ends, threads=args.threads)
    seconds = time.perf_counter() - start
    programs = sum(1 for key in runner.dctx.programs if key[0] == "search_group.cl")
    print(json.dumps({"threads": args.threads, "programs": programs, "seconds": seconds}))


def builds(args, out) -> None:
    for threads in (1, 8, 1, 8):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ)
            for name in ("DPALIGN_CACHE_DIR", "CUDA_CACHE_PATH", "POCL_CACHE_DIR"):
                env[name] = os.path.join(cache, name)
            cmd = [sys.executable, __file__, "child", "--threads", str(threads)]
            cmd += ["--queries", str(args.queries), "--targets", str(args.targets)]
            cmd += ["--mode", args.mode]
            cmd += ["--local-kernel", args.local_kernel]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode:
                record = {"what": "builds", "threads": threads, "error": proc.stderr[-2000:]}
            else:
                record = {"what": "builds", "mode": args.mode, **json.loads(proc.stdout)}
            out.write(json.dumps(record) + "\n")
            print(record, flush=True)


def flight(args, out) -> None:
    scoring, queries, targets, runner = _setup(args.queries, args.targets, args.local_kernel)
    residues = int(sum(len(t) for t in targets))
    for mode in args.modes.split(","):
        ends = free_ends_tuple(mode)
        runner.prepare(queries, scoring, mode, ends)
        runner.score_many(queries[:2], scoring, mode, ends)  # uploads, programs
        cells = residues * sum(len(q) for q in queries)
        for rnd in range(args.rounds):
            for how in ("one-by-one", "in-flight"):
                start = time.perf_counter()
                if how == "in-flight":
                    results = runner.score_many(queries, scoring, mode, ends)
                else:
                    results = [runner.score(q, scoring, mode, ends) for q in queries]
                wall = time.perf_counter() - start
                kernel = sum(r.kernel_seconds for r in results)
                record = {
                    "what": "flight",
                    "mode": mode,
                    "how": how,
                    "round": rnd,
                    "queries": len(queries),
                    "targets": len(targets),
                    "cells": cells,
                    "wall_s": wall,
                    "gcups_wall": cells / wall / 1e9,
                    "gcups_kernel": cells / kernel / 1e9 if kernel else None,
                }
                out.write(json.dumps(record) + "\n")
                print(
                    f"{mode:10} {how:10} round {rnd}: {wall:7.3f} s wall, "
                    f"{record['gcups_wall']:8.1f} GCUPS wall, "
                    f"{record['gcups_kernel'] or 0:8.1f} kernel",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "what", nargs="?", default="all", choices=["all", "builds", "flight", "child"]
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    parser.add_argument("--queries", type=int)
    parser.add_argument("--targets", type=int)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="local,global")
    parser.add_argument("--mode", default="local", help="builds: the mode")
    parser.add_argument("--threads", type=int, default=8, help="child: build threads")
    parser.add_argument(
        "--local-kernel", default="auto", help="auto (group kernel where PTX), group, strip"
    )
    parser.add_argument("--out", help="output folder (default $OUT, else a temporary one)")
    args = parser.parse_args()
    if args.queries is None:
        args.queries = 6 if args.quick else 200
    if args.targets is None:
        args.targets = 2000 if args.quick else 200_000
    if args.quick and args.local_kernel == "auto":
        args.local_kernel = "group"  # PoCL has no packed PTX: exercise the group kernel
    if args.what == "child":
        builds_child(args)
        return
    folder = Path(args.out or os.environ.get("OUT") or tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "opencl_batch.jsonl", "a") as out:
        if args.what in ("all", "builds"):
            builds(args, out)
        if args.what in ("all", "flight"):
            flight(args, out)
    print(f"results: {folder / 'opencl_batch.jsonl'}")


if __name__ == "__main__":
    main()
