"""search(top=N) against score() and pyopal on one thread: the cost of ranking many hits.

One 1 kb DNA query against 1,000 reads of 100-300 nt (about 2e8 cells; the workload of
:func:`dpalign.benchmarks.workloads.dna_reads_and_targets`), local, BLASTN's
2/-3 with a gap of k costing 5 + 2k, one thread. The calls run alternately, ``--rounds``
times each; the best round of each is reported (GCUPS = cells / seconds) as JSON on stdout.
``search_top{N}_ends`` also asks every hit for its end cell (the ends pass), against
pyopal's ``mode="end"``. Times are the process's CPU time (``time.process_time``: every call
runs on one thread, and on a shared machine CPU time does not count the time other processes
held the core); ``--clock wall`` uses wall time instead.

    python bench/search_top.py [--rounds 7] [--top 1000]
"""

from __future__ import annotations

import argparse
import json
import time

import dpalign
from dpalign.benchmarks.workloads import dna_reads_and_targets
from dpalign.search import Database, search


def workload():
    """The issue's call: the first 1 kb target of the DNA benchmark against its 1,000 reads."""
    reads, targets = dna_reads_and_targets()
    return targets[0], reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--top", type=int, default=1000)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    args = parser.parse_args()
    query, reads = workload()
    cells = len(query) * sum(len(r) for r in reads)
    db = Database(reads, sub_score=(2, -3))
    sub, gap = (2, -3), (5, 2)
    want = dpalign.score(query, db, "local", sub, gap, threads=1)

    def run_score():
        return dpalign.score(query, db, "local", sub, gap, threads=1)

    def run_search():
        hits = search(query, db, args.top, "local", sub, gap, threads=1)
        return [h.score for h in hits]

    def run_search_ends():  # every hit's end cell too (one ends pass over the hits)
        hits = search(query, db, args.top, "local", sub, gap, threads=1)
        return [(h.score, h.query_end, h.target_end) for h in hits]

    runners = {
        "score": run_score,
        f"search_top{args.top}": run_search,
        f"search_top{args.top}_ends": run_search_ends,
    }
    try:
        import pyopal
        import scoring_matrices

        matrix = scoring_matrices.ScoringMatrix(
            [[2 if a == b else -3 for b in "ACGT"] for a in "ACGT"], alphabet="ACGT"
        )
        pdb = pyopal.Database(reads, alphabet=matrix.alphabet)

        def run_pyopal():
            return [
                r.score
                for r in pyopal.align(
                    query, pdb, matrix, gap_open=7, gap_extend=2, overflow="simple", threads=1
                )
            ]

        def run_pyopal_end():  # scores and end cells (pyopal's mode="end")
            return [
                (r.score, r.query_end, r.target_end)
                for r in pyopal.align(
                    query, pdb, matrix, gap_open=7, gap_extend=2, overflow="simple", threads=1,
                    mode="end",
                )
            ]  # fmt: skip

        runners["pyopal"] = run_pyopal
        runners["pyopal_end"] = run_pyopal_end
    except ImportError:
        pass
    assert sorted(run_search(), reverse=True) == sorted(want, reverse=True)[: args.top]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    best = {name: float("inf") for name in runners}
    for _ in range(args.rounds):
        for name, run in runners.items():
            start = clock()
            run()
            best[name] = min(best[name], clock() - start)
    out = {name: {"seconds": s, "gcups": cells / s / 1e9} for name, s in best.items()}
    out["search_over_score"] = best["score"] / best[f"search_top{args.top}"]
    if "pyopal" in best:
        out["score_over_pyopal"] = best["pyopal"] / best["score"]
        out["search_over_pyopal"] = best["pyopal"] / best[f"search_top{args.top}"]
        out["search_ends_over_pyopal_end"] = best["pyopal_end"] / best[f"search_top{args.top}_ends"]
    out["cells"] = cells
    out["clock"] = args.clock
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
