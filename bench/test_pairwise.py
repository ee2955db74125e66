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
from conftest import ROUNDS, record

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
# dpalign
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", THREADS)
def test_dna_dpalign(benchmark, dna, threads):
    _warm_up()

    def run():
        return dpalign.score(
            dna.queries, dna.targets, dna.mode, dna.sub_score, dna.gap, threads=threads
        )

    got = benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    assert np.array_equal(got, dna.expected)
    record(benchmark, dna, "dpalign", threads, "dpalign.score (numba, int8 lanes)")


@pytest.mark.parametrize("threads", THREADS)
def test_protein_dpalign(benchmark, protein, threads):
    _warm_up()
    db = Database(protein.targets, sub_score="BLOSUM62")  # packed once, like pyopal's

    def run():
        return dpalign.score(
            protein.queries[0], db, protein.mode, "BLOSUM62", protein.gap, threads=threads
        )

    got = benchmark.pedantic(run, rounds=5 * ROUNDS, iterations=1, warmup_rounds=1)
    assert np.array_equal(got, protein.expected[0])
    record(benchmark, protein, "dpalign", threads, "dpalign.score(query, Database)")


# --------------------------------------------------------------------------------------------
# pyopal: Aligner/Database; overflow="simple" (8 bits, then 16 for the targets that overflowed)
# measured faster here than its default "buckets" on both workloads; database chunked over
# threads by pyopal.align
# --------------------------------------------------------------------------------------------


def _dna_matrix():
    letters = "ACGT"
    scores = [[2 if a == b else -3 for b in letters] for a in letters]
    return scoring_matrices.ScoringMatrix(scores, alphabet=letters)


def _pyopal_scores(query, db, matrix, w, threads, pool):
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


@pytest.mark.parametrize("threads", THREADS)
def test_dna_pyopal(benchmark, dna, threads):
    matrix = _dna_matrix()
    db = pyopal.Database(dna.targets, alphabet=matrix.alphabet)
    pool = ThreadPool(threads) if threads > 1 else None

    def run():
        return np.stack([_pyopal_scores(q, db, matrix, dna, threads, pool) for q in dna.queries])

    try:
        got = benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    finally:
        if pool is not None:
            pool.terminate()
    assert np.array_equal(got, dna.expected)
    record(benchmark, dna, "pyopal", threads, "pyopal.align, overflow=simple (reads as queries)")


@pytest.mark.parametrize("threads", THREADS)
def test_protein_pyopal(benchmark, protein, threads):
    matrix = scoring_matrices.ScoringMatrix.from_name("BLOSUM62")
    db = pyopal.Database(protein.targets, alphabet=matrix.alphabet)
    pool = ThreadPool(threads) if threads > 1 else None

    def run():
        return _pyopal_scores(protein.queries[0], db, matrix, protein, threads, pool)

    try:
        got = benchmark.pedantic(run, rounds=5 * ROUNDS, iterations=1, warmup_rounds=1)
    finally:
        if pool is not None:
            pool.terminate()
    assert np.array_equal(got, protein.expected[0])
    record(benchmark, protein, "pyopal", threads, "pyopal.align, overflow=simple")


# --------------------------------------------------------------------------------------------
# parasail: striped, query profile, saturation-checked 8 then 16 bits (its fastest here);
# ctypes releases the GIL, so threads share the pairs.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", THREADS)
def test_dna_parasail(benchmark, dna, threads):
    matrix = parasail.matrix_create("ACGT", 2, -3)
    o, e = dna.peer_open, dna.peer_extend

    def column(target):  # the 1 kb target as the profile: 2x faster than the reads here
        profile = parasail.profile_create_sat(target, matrix)
        return [parasail.sw_striped_profile_sat(profile, r, o, e).score for r in dna.queries]

    def run():
        with ThreadPoolExecutor(threads) as pool:
            return np.array(list(pool.map(column, dna.targets)), dtype=np.int64).T

    got = benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    assert np.array_equal(got, dna.expected)
    record(benchmark, dna, "parasail", threads, "sw_striped_profile_sat (targets as profiles)")


@pytest.mark.parametrize("threads", THREADS)
def test_protein_parasail(benchmark, protein, threads):
    o, e = protein.peer_open, protein.peer_extend
    profile = parasail.profile_create_sat(protein.queries[0], parasail.blosum62)
    chunks = np.array_split(np.arange(len(protein.targets)), 8 * threads)

    def chunk(ids):
        return [
            parasail.sw_striped_profile_sat(profile, protein.targets[k], o, e).score for k in ids
        ]

    def run():
        with ThreadPoolExecutor(threads) as pool:
            return np.concatenate([np.array(c, dtype=np.int64) for c in pool.map(chunk, chunks)])

    got = benchmark.pedantic(run, rounds=5 * ROUNDS, iterations=1, warmup_rounds=1)
    assert np.array_equal(got, protein.expected[0])
    record(benchmark, protein, "parasail", threads, "sw_striped_profile_sat (query profile)")
