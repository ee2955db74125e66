"""Block pruning's cost and gain on one local long pair, in one process: ``--help``.

    python bench/longpair_prune.py [--length 100000] [--repeat 3] [--backend opencl] [--out DIR]

Aligns ``make_long_pair.related(length, 0.05, 0.002, 1)`` (match 1, mismatch -1, linear gap 2,
local mode, traceback) with ``align_long``, in three variants taken in turn ``--repeat`` times
after one warm-up run of each (Numba's and OpenCL's builds):

- ``unpruned``: the default (16-bit CPU lanes for the traceback's recomputations);
- ``unpruned, 32-bit CPU lanes``: the same with ``Tiling(lane_bits=32)``, the lanes a pruned
  forward pass's recomputations must use (its lower bounds break 16-bit lanes relative to a
  tile corner): what those lanes cost, apart from pruning;
- ``pruned``: ``prune=True``.

Prints one line per run and writes ``longpair_prune.json`` under ``--out`` (default ``$OUT``
or ``.``); every run's alignment must be the first one's (exit status 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_long_pair import related  # noqa: E402

from dpalign.gcups import RunStats  # noqa: E402
from dpalign.longpair import Tiling, align_long  # noqa: E402
from dpalign.scoring import Scoring  # noqa: E402

VARIANTS = {
    "unpruned": ({}, False),
    "unpruned, 32-bit CPU lanes": ({"lane_bits": 32}, False),
    "pruned": ({}, True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=float, default=1e5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", default="opencl")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    scoring = Scoring((1, -1), 2)
    a_text, b_text = related(int(args.length), 0.05, 0.002, 1)
    a, b = scoring.encode(a_text), scoring.encode(b_text)
    rows, first = [], None

    def run(name: str, rep: int) -> None:
        nonlocal first
        options, prune = VARIANTS[name]
        stats = RunStats()
        t0 = time.perf_counter()
        got = align_long(
            a,
            b,
            scoring,
            "local",
            tiling=Tiling(**options),
            backend=args.backend,
            prune=prune,
            stats=stats,
        )
        seconds = time.perf_counter() - t0
        first = got if first is None else first
        row = {
            "variant": name,
            "repeat": rep,
            "seconds": round(seconds, 4),
            "score": got.score,
            "identical": got == first,
            "notes": stats.notes,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)

    for name in VARIANTS:
        run(name, -1)  # warm-up
    for rep in range(args.repeat):
        for name in VARIANTS:
            run(name, rep)
    summary = {}
    for name in VARIANTS:
        times = sorted(r["seconds"] for r in rows if r["variant"] == name and r["repeat"] >= 0)
        summary[name] = {"median_s": times[len(times) // 2], "all_s": times}
    result = {
        "length": [len(a), len(b)],
        "backend": args.backend,
        "runs": rows,
        "summary": summary,
        "identical": all(r["identical"] for r in rows),
    }
    print(json.dumps(summary), "identical:", result["identical"])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "longpair_prune.json"), "w") as out:
        json.dump(result, out, indent=1)
    if not result["identical"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
