"""Time and memory of one long alignment with traceback: ``python bench/longpair_memory.py``.

Prints wall time, the peak of NumPy memory traced by ``tracemalloc`` during the call, and the
growth of the process's peak RSS; e.g. ``--rows 10000 --cols 1000000 --mode semiglobal`` maps
a 10 kb read into 1 Mb. The figures are in BENCHMARKS.md ("Long pairs (CPU)").
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np

from dpalign.longpair import align_long
from dpalign.scoring import Scoring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="length of a")
    parser.add_argument("--cols", type=int, default=100_000, help="length of b")
    parser.add_argument("--mode", default="global")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    scoring = Scoring("NUC.4.4", (10, 1))
    rng = np.random.default_rng(0)
    b = rng.integers(0, 4, args.cols).astype(np.uint8)
    a = b[: args.rows].copy() if args.rows <= args.cols else rng.integers(0, 4, args.rows)
    a = a.astype(np.uint8)
    changed = rng.random(a.size) < 0.1
    a[changed] = rng.integers(0, 4, int(changed.sum()))
    align_long(a[:2000], b[:2000], scoring, args.mode, threads=args.threads)  # compile

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    start = time.perf_counter()
    result = align_long(a, b, scoring, args.mode, threads=args.threads)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    print(
        f"{a.size} x {b.size} {args.mode}: {seconds:.2f} s, traced peak {peak / 1e6:.1f} MB, "
        f"peak RSS +{rss_growth / 1024:.0f} MB, score {result.score}, {len(result.ops)} columns"
    )


if __name__ == "__main__":
    main()
