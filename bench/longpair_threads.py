"""One thread against two on a shared machine: ``python bench/longpair_threads.py --help``.

Times ``align_long`` with 1 and 2 threads only while nothing else is runnable (the run queue
in ``/proc/loadavg`` holds just this process before each case), for ``--minutes``, and prints
the best time of each case. On a machine shared by several login sessions Linux's autogroup
scheduler gives this process one core whenever another session is busy, so timings taken at
other moments say nothing about scaling. The figures are in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import time

from dpalign.longpair import align_long


def _runnable() -> int:
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="10000,100000")
    parser.add_argument("--modes", default="global,local")
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--json")
    args = parser.parse_args()

    from test_longpair import SCORING, related_pair  # bench/ is on sys.path when run from there

    lengths = [int(n) for n in args.lengths.split(",")]
    cases = [
        (n, mode, traceback)
        for n in lengths
        for mode in args.modes.split(",")
        for traceback in (False, True)
    ]
    pairs = {n: related_pair(n) for n in lengths}
    for n, mode, traceback in cases:
        a, b = pairs[n]
        align_long(a[:3000], b[:3000], SCORING, mode, threads=2, traceback=traceback)
    best: dict[tuple, float] = {}
    windows = 0
    deadline = time.time() + 60 * args.minutes
    while time.time() < deadline:
        if _runnable() > 1:
            time.sleep(0.2)
            continue
        windows += 1
        for n, mode, traceback in cases:
            if _runnable() > 1:
                break
            a, b = pairs[n]
            for threads in (1, 2, 1, 2):
                start = time.perf_counter()
                align_long(a, b, SCORING, mode, threads=threads, traceback=traceback)
                key = (n, mode, traceback, threads)
                best[key] = min(best.get(key, float("inf")), time.perf_counter() - start)
    print(f"{windows} quiet windows in {args.minutes} minutes")
    rows = []
    for n, mode, traceback in cases:
        if (n, mode, traceback, 2) not in best:
            continue
        one, two = best[(n, mode, traceback, 1)], best[(n, mode, traceback, 2)]
        kind = "traceback" if traceback else "score"
        rows.append({"n": n, "mode": mode, "kind": kind, "one": one, "two": two})
        print(
            f"{n} x {n} {mode} {kind}: 1 thread {n * n / one / 1e9:.2f} GCUPS, "
            f"2 threads {n * n / two / 1e9:.2f} GCUPS, speed-up {one / two:.2f}"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
