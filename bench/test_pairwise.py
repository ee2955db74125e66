"""Pairwise and search throughput: dpalign against parasail and pyopal on the same workloads.

(a) DNA: 1,000 reads (100-300 nt) against 1,000 targets of 1 kb, local, affine (BLASTN's
2/-3, gap 5 + 2k). (b) Protein search: a 375-aa query against 20,000 proteins, BLOSUM62,
gap 11 + k. One and two threads. Every engine's scores are checked equal to dpalign's, with
the gap convention translated (parasail and pyopal charge "open" for a gap of length 1:
open = o + e; checked empirically by the equality). GCUPS go to ``extra_info``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from multiprocessing.pool import ThreadPool

import numpy as np
import pytest
from conftest import ROUNDS, Contention, record

import dpalign
from dpalign.search import Database

parasail = pytest.importorskip("parasail")
pyopal = pytest.importorskip("pyopal")
scoring_matrices = pytest.importorskip("scoring_matrices")

THREADS = [1, 2]


def _warm_up():
    dpalign.score(["ACGT" * 10], ["ACGT" * 10] * 70, "local", (2, -3), (5, 2))
    dpalign.score(["ACDE" * 10], ["ACDE" * 10] * 70, "local", "BLOSUM62", (11, 1))


# --------------------------------------------------------------------------------------------
# One runner per engine; the tests interleave engines so that peers run under the same load.
# Each runner sets up outside the timed region and returns (run, function name, cleanup).
# --------------------------------------------------------------------------------------------


def _dpalign_dna(w, threads):
    def run():
        return dpalign.score(w.queries, w.targets, w.mode, w.sub_score, w.gap, threads=threads)

    return run, "dpalign.score (numba, int8 lanes)", None


def _dpalign_protein(w, threads):
    db = Database(w.targets, sub_score="BLOSUM62")  # packed once, like pyopal's Database

    def run():
        return dpalign.score(w.queries[0], db, w.mode, "BLOSUM62", w.gap, threads=threads)[None]

    return run, "dpalign.score(query, Database)", None


# pyopal: Aligner/Database; overflow="simple" (8 bits, then 16 for the targets that overflowed)
# measured faster here than its default "buckets" on both workloads; pyopal.align chunks the
# database over threads.


def _pyopal_matrix(w):
    if w.name == "protein":
        return scoring_matrices.ScoringMatrix.from_name("BLOSUM62")
    letters = "ACGT"
    scores = [[2 if a == b else -3 for b in letters] for a in letters]
    return scoring_matrices.ScoringMatrix(scores, alphabet=letters)


def _pyopal(w, threads):
    matrix = _pyopal_matrix(w)
    db = pyopal.Database(w.targets, alphabet=matrix.alphabet)
    pool = ThreadPool(threads) if threads > 1 else None

    def one(query):
        out = np.empty(len(db), dtype=np.int64)
        for r in pyopal.align(
            query,
            db,
            matrix,
            gap_open=w.peer_open,
            gap_extend=w.peer_extend,
            overflow="simple",
            threads=threads,
            pool=pool,
        ):
            out[r.target_index] = r.score
        return out

    def run():
        return np.stack([one(q) for q in w.queries])

    return run, "pyopal.align, overflow=simple", pool.terminate if pool else None


# parasail: striped, profile, saturation-checked 8 then 16 bits (its fastest here); ctypes
# releases the GIL, so threads share the pairs.


def _parasail_dna(w, threads):
    matrix = parasail.matrix_create("ACGT", 2, -3)
    o, e = w.peer_open, w.peer_extend

    def column(target):  # the 1 kb target as the profile: 2x faster than the reads here
        profile = parasail.profile_create_sat(target, matrix)
        return [parasail.sw_striped_profile_sat(profile, r, o, e).score for r in w.queries]

    def run():
        with ThreadPoolExecutor(threads) as pool:
            return np.array(list(pool.map(column, w.targets)), dtype=np.int64).T

    return run, "sw_striped_profile_sat (targets as profiles)", None


def _parasail_protein(w, threads):
    o, e = w.peer_open, w.peer_extend
    profile = parasail.profile_create_sat(w.queries[0], parasail.blosum62)
    chunks = np.array_split(np.arange(len(w.targets)), 8 * threads)

    def chunk(ids):
        return [parasail.sw_striped_profile_sat(profile, w.targets[k], o, e).score for k in ids]

    def run():
        with ThreadPoolExecutor(threads) as pool:
            parts = [np.array(c, dtype=np.int64) for c in pool.map(chunk, chunks)]
        return np.concatenate(parts)[None]

    return run, "sw_striped_profile_sat (query profile)", None


RUNNERS = {
    ("dna", "dpalign"): _dpalign_dna,
    ("dna", "pyopal"): _pyopal,
    ("dna", "parasail"): _parasail_dna,
    ("protein", "dpalign"): _dpalign_protein,
    ("protein", "pyopal"): _pyopal,
    ("protein", "parasail"): _parasail_protein,
}
CASES = [(t, engine) for t in THREADS for engine in ("dpalign", "pyopal", "parasail")]


def _bench(benchmark, w, threads, engine, rounds, warmup):
    _warm_up()
    run, function, cleanup = RUNNERS[(w.name, engine)](w, threads)
    try:
        with Contention() as contention:
            got = benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=warmup)
    finally:
        if cleanup is not None:
            cleanup()
    assert np.array_equal(got, w.expected), f"{engine} scores differ from dpalign's"
    record(benchmark, w, engine, threads, function, contention)


@pytest.mark.parametrize(("threads", "engine"), CASES)
def test_dna(benchmark, dna, threads, engine):
    _bench(benchmark, dna, threads, engine, ROUNDS, 0)


@pytest.mark.parametrize(("threads", "engine"), CASES)
def test_protein(benchmark, protein, threads, engine):
    _bench(benchmark, protein, threads, engine, 15 * ROUNDS, 2)
