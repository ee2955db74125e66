"""Sweep the long-pair tile shape and thread count: ``python bench/longpair_tiles.py --help``.

Prints one line per setting (best wall time of ``--repeat`` runs, GCUPS) and, with ``--json``,
writes them out. Used to choose ``Tiling``'s defaults; the figures are in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from dpalign.longpair import Tiling, align_long
from dpalign.scoring import Scoring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=20_000)
    parser.add_argument("--rows", default="256,512,1024,2048")
    parser.add_argument("--cols", default="512")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--modes", default="global,local")
    parser.add_argument("--traceback", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()

    from test_longpair import SCORING, related_pair  # bench/ is on sys.path when run from there

    scoring: Scoring = SCORING
    a, b = related_pair(args.length)
    rows = []
    print(f"load {os.getloadavg()[0]:.2f}, pair {a.size} x {b.size}, {scoring}")
    for mode in args.modes.split(","):
        for tile_rows in map(int, args.rows.split(",")):
            for tile_cols in map(int, args.cols.split(",")):
                tiling = Tiling(tile_rows=tile_rows, tile_cols=tile_cols)
                for threads in map(int, args.threads.split(",")):
                    kwargs = {"traceback": args.traceback, "threads": threads, "tiling": tiling}
                    align_long(a[:2000], b[:2000], scoring, mode, **kwargs)
                    best = float("inf")
                    for _ in range(args.repeat):
                        start = time.perf_counter()
                        align_long(a, b, scoring, mode, **kwargs)
                        best = min(best, time.perf_counter() - start)
                    row = {
                        "mode": mode,
                        "tile_rows": tile_rows,
                        "tile_cols": tile_cols,
                        "threads": threads,
                        "traceback": args.traceback,
                        "seconds": best,
                        "gcups": a.size * b.size / best / 1e9,
                    }
                    rows.append(row)
                    print(
                        f"{mode:8s} tile {tile_rows:5d} x {tile_cols:5d}  threads {threads}  "
                        f"{best:8.3f} s  {row['gcups']:6.2f} GCUPS",
                        flush=True,
                    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
