"""The inter-sequence SIMD score kernels against the oracle: every mode, width, edge case."""

import functools
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit
from pairwise_cases import cases, texts

from dpalign import reference
from dpalign.engine import QueryBatch, Task, query_batch, reference_blocks
from dpalign.scoring import Scoring, free_ends_tuple
from dpalign.simd import pairwise as P
from dpalign.simd import vectors


def _encode(case, seqs):
    return [case.scoring.encode(s) for s in seqs]


def _run(case, queries, targets, width):
    """Score through score_block on length-sorted blocks; return ([Q, T] scores, widths)."""
    q_codes, t_codes = _encode(case, queries), _encode(case, targets)
    order = np.argsort([len(t) for t in t_codes], kind="stable")
    blocks = reference_blocks(t_codes, width=width, order=order)
    task = Task("pairwise", case.scoring, case.mode, case.ends)
    scores = np.zeros((len(queries), len(targets)), dtype=np.int64)
    widths = np.zeros((len(queries), len(targets)), dtype=np.int64)
    batch = query_batch(q_codes)
    for block in blocks:
        result = P.score_block(task, batch, block)
        assert result.scores.shape == result.width.shape == (len(queries), block.width)
        for lane, target in enumerate(block.ids):
            if target >= 0:
                scores[:, target] = result.scores[:, lane]
                widths[:, target] = result.width[:, lane]
    return scores, widths


def _scalar(case, a, b):
    s = case.scoring
    return P.score_pair_int64(
        s.encode(a),
        s.encode(b),
        s.matrix.astype(np.int64),
        s.gap_open,
        s.gap_extend,
        case.mode == "local",
        np.array(case.ends),
    )


@given(
    case=cases(),
    queries=st.lists(texts("ACGT"), min_size=1, max_size=3),
    n_targets=st.integers(1, 12),
    data=st.data(),
    width=st.sampled_from([16, 32, 64]),
)
def test_block_scores_equal_reference(case, queries, n_targets, data, width):
    queries = [data.draw(texts(case.letters)) for _ in queries]
    targets = [data.draw(texts(case.letters)) for _ in range(n_targets)]
    scores, widths = _run(case, queries, targets, width)
    for q, a in enumerate(queries):
        for t, b in enumerate(targets):
            assert scores[q, t] == case.ref(a, b), (a, b)
    assert set(np.unique(widths)) <= {8, 16, 32, 64}


@given(case=cases(), data=st.data(), n_targets=st.integers(33, 80))
def test_wide_blocks_equal_scalar_and_reference(case, data, n_targets):
    # More than 32 live lanes: local alignment starts in int8 lanes.
    query = data.draw(texts(case.letters, 1, 20))
    targets = [data.draw(texts(case.letters, 0, 20)) for _ in range(n_targets)]
    scores, _ = _run(case, [query], targets, 64 * data.draw(st.integers(1, 2)))
    for t, b in enumerate(targets):
        assert scores[0, t] == _scalar(case, query, b)
    for t in data.draw(st.lists(st.integers(0, n_targets - 1), max_size=4)):
        assert scores[0, t] == case.ref(query, targets[t])


@given(case=cases(), a=texts("ACGT", 0, 20), b=texts("ACGT", 0, 20), data=st.data())
def test_scalar_int64_kernel_equals_reference(case, a, b, data):
    a = data.draw(texts(case.letters, 0, 20))
    b = data.draw(texts(case.letters, 0, 20))
    assert _scalar(case, a, b) == case.ref(a, b)


def _mutate(rng, seq, rate, letters="ACGT"):
    out = [c if rng.random() > rate else letters[rng.integers(len(letters))] for c in seq]
    return "".join(out)


def _case(sub, gap, mode="local", free_ends=None):
    from pairwise_cases import Case

    return Case(
        "ACGT", sub, gap, Scoring(sub, gap), mode, free_ends, free_ends_tuple(mode, free_ends)
    )


def test_int8_saturation_recomputes_only_those_pairs_at_int16():
    rng = np.random.default_rng(1)
    query = "".join(rng.choice(list("ACGT"), 120))
    targets = ["".join(rng.choice(list("ACGT"), 90)) for _ in range(62)]
    targets[5] = query
    targets[40] = _mutate(rng, query, 0.05)
    case = _case((2, -3), (5, 2))
    scores, widths = _run(case, [query], targets, 64)
    assert widths[0, 5] == widths[0, 40] == 16
    assert (np.delete(widths[0], [5, 40]) == 8).all()
    assert scores[0, 5] == case.ref(query, query) == 240
    assert scores[0, 40] == case.ref(query, targets[40])
    for t in (0, 1, 61):
        assert scores[0, t] == case.ref(query, targets[t])


@pytest.mark.parametrize("match", [2, 20])
def test_int8_scores_near_the_top_are_recomputed_before_they_wrap(match):
    # The local cell adds without saturating: best scores from the type's maximum less the
    # largest substitution score up are recomputed wider, so no lane wraps unflagged.
    rng = np.random.default_rng(match)
    query = "".join(rng.choice(list("ACGT"), 80))
    targets = [query[:k] for k in range(1, 80)]  # every best from 2 (or 20) upward
    case = _case((match, -3), (5, 2))
    scores, widths = _run(case, [query], targets, 64)
    limit = P.local_limit(case.scoring, 8)
    assert limit == 127 - match
    for t, b in enumerate(targets):
        want = case.ref(query, b)
        assert scores[0, t] == want, (len(b), want)
        assert widths[0, t] == (8 if want < limit else 16)


def test_int16_saturation_goes_to_int32():
    rng = np.random.default_rng(2)
    query = "".join(rng.choice(list("ACGT"), 400))
    targets = ["".join(rng.choice(list("ACGT"), 60)) for _ in range(40)] + [query]
    case = _case((100, -100), (100, 10))
    assert P.local_width_ok(case.scoring, 8)  # int8 runs first, then saturates twice
    scores, widths = _run(case, [query], targets, 64)
    assert widths[0, -1] == 32
    assert scores[0, -1] == 40000 == case.ref(query, query)
    for t in range(40):
        assert scores[0, t] == _scalar(case, query, targets[t])
        assert widths[0, t] in (8, 16)


def test_int32_saturation_goes_to_scalar_int64():
    case = _case((2**24, -1), 3)
    query = "ACGT" * 50
    scores, widths = _run(case, [query], [query, "ACGA"], 32)
    assert scores[0, 0] == 200 * 2**24 == case.ref(query, query)
    assert widths[0, 0] == 64
    assert scores[0, 1] == case.ref(query, "ACGA") and widths[0, 1] == 32


@pytest.mark.parametrize(
    ("gap", "m", "want"), [((0, 100), 200, 32), (2**22, 300, 64), ((3, 1), 200, 16)]
)
def test_global_width_comes_from_the_bound(gap, m, want):
    rng = np.random.default_rng(3)
    a = "".join(rng.choice(list("ACGT"), m))
    b = "".join(rng.choice(list("ACGT"), m - 20))
    case = _case((1, -1), gap, mode="global")
    scores, widths = _run(case, [a], [b, b[:50]], 32)
    assert widths[0, 0] == want == case.scoring.width_for(m, m - 20, "global")
    assert scores[0, 0] == case.ref(a, b)
    assert scores[0, 1] == case.ref(a, b[:50])


def test_semiglobal_long_reads_are_exact():
    rng = np.random.default_rng(4)
    ref = "".join(rng.choice(list("ACGT"), 500))
    reads = [ref[100:250], _mutate(rng, ref[300:420], 0.1)]
    case = _case((2, -3), (5, 2), mode="semiglobal")
    scores, _ = _run(case, reads, [ref, ref[::-1]], 64)
    for q, read in enumerate(reads):
        assert scores[q, 0] == case.ref(read, ref)
    assert scores[0, 0] == 300


def test_empty_batches_and_empty_sequences():
    case = _case((1, -1), (3, 1), mode="global")
    blocks = reference_blocks([case.scoring.encode("ACG")], width=32)
    task = Task("pairwise", case.scoring, "global", case.ends)
    none = QueryBatch(np.zeros((0, 0), np.uint8), np.zeros(0, np.int64))
    result = P.score_block(task, none, blocks[0])
    assert result.scores.shape == (0, 32)
    for mode, fe in [("global", None), ("global", (True, False)), ("local", None)]:
        c = _case((1, -1), (3, 1), mode=mode, free_ends=fe)
        scores, _ = _run(c, ["", "AC"], ["", "ACGT", "T"], 32)
        for q, a in enumerate(["", "AC"]):
            for t, b in enumerate(["", "ACGT", "T"]):
                assert scores[q, t] == c.ref(a, b), (mode, fe, a, b)


def test_length_one_and_iupac():
    for sub in [(1, -1), "NUC.4.4"]:
        for mode in ("global", "local", "semiglobal"):
            case = _case(sub, (2, 1), mode=mode)
            queries, targets = ["A", "N", "R"], ["A", "C", "Y", "ACGTNRY", "KMBDHV"]
            scores, _ = _run(case, queries, targets, 64)
            for q, a in enumerate(queries):
                for t, b in enumerate(targets):
                    assert scores[q, t] == case.ref(a, b)


def test_padding_lanes_and_ragged_lengths_in_one_block():
    # Lane ends in every strip position, strips shared by lanes of different lengths.
    rng = np.random.default_rng(5)
    targets = ["".join(rng.choice(list("ACGT"), n)) for n in range(1, 45)]
    query = "".join(rng.choice(list("ACGT"), 30))
    for fe in [None, (False, False, False, True), (False, True, False, False), True]:
        case = _case((2, -1), (3, 1), mode="global", free_ends=fe)
        scores, _ = _run(case, [query], targets, 64)
        assert list(scores[0]) == [case.ref(query, t) for t in targets]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
def test_portable_lookup_equals_the_permute(dtype):
    @njit
    def both(table, idx, fast, slow):
        vectors.vstore(fast, 0, vectors.vlookup(table, 3, vectors.vload(idx, 0)))
        vectors.vstore(slow, 0, vectors.vlookup_portable(table, 3, vectors.vload(idx, 0)))

    V = vectors.LANES[np.dtype(dtype)]
    entries = vectors.LOOKUP_ENTRIES[np.dtype(dtype).itemsize * 8]
    rng = np.random.default_rng(6)
    table = rng.integers(-100, 100, entries + 3).astype(dtype)
    idx = rng.integers(0, entries, V).astype(dtype)
    fast, slow = np.zeros(V, dtype), np.zeros(V, dtype)
    both(table, idx, fast, slow)
    assert np.array_equal(fast, table[3:][idx]) and np.array_equal(slow, fast)


@functools.cache
def _sweep_group_asm() -> str:
    """The int8 strip kernel's assembly for this host."""
    kernel = njit(nogil=True)(P._sweep_group.py_func)
    s = Scoring((2, -3), (5, 2))
    V = 64
    matrix = P.padded_matrix(s, 8)
    codes = np.full((17, V), matrix.shape[0] - 1, np.int8)
    q = np.zeros((1, 5), np.uint8)
    scratch = [np.empty(6 * V, np.int8), np.empty(6 * V, np.int8), np.empty(28 * 64, np.int8)]
    scratch += [np.empty(28 * 8 * V, np.int8), np.empty(8 * V, np.int8)]
    scratch += [np.empty(5, np.int64), np.empty(28, np.int64)]
    kernel(
        codes,
        np.zeros(V, np.int64),
        q,
        np.array([5]),
        np.array([0]),
        matrix,
        5,
        2,
        True,
        np.zeros(4, bool),
        -128,
        np.zeros((1, V), np.int8),
        tuple(scratch),
    )
    return "\n".join(kernel.inspect_asm().values())


@pytest.mark.skipif(not vectors.host_features().get("avx512bw"), reason="needs an AVX-512 host")
def test_strip_loop_runs_in_zmm_registers():
    asm = _sweep_group_asm()
    assert len(re.findall(r"zmm", asm)) > 100
    assert "vpmaxsb" in asm


@pytest.mark.skipif(
    not vectors.host_features().get("avx512vbmi"), reason="vpermb needs AVX-512 VBMI"
)
def test_profile_lookup_is_one_byte_permute():
    assert "vpermb" in _sweep_group_asm()


def test_results_do_not_depend_on_thread_count():
    from dpalign.pairwise import score

    rng = np.random.default_rng(7)
    queries = ["".join(rng.choice(list("ACGT"), rng.integers(1, 60))) for _ in range(5)]
    targets = ["".join(rng.choice(list("ACGT"), rng.integers(0, 80))) for _ in range(300)]
    targets[17] = queries[0] * 3
    runs = [
        score(queries, targets, "local", (2, -3), (5, 2), threads=t, with_width=True)
        for t in (1, 2, 3)
    ]
    for scores, widths in runs[1:]:
        assert np.array_equal(scores, runs[0][0]) and np.array_equal(widths, runs[0][1])
    ref = reference.pairwise_score
    s = Scoring((2, -3), (5, 2))
    for t in (0, 17, 299):
        want = ref(s.encode(queries[0]), s.encode(targets[t]), s.matrix, 5, 2, "local").score
        assert runs[0][0][0, t] == want


def test_work_units_of_many_threads():
    # Many blocks: one unit per block with every query (no query slices, whose Python per
    # unit held the GIL); few blocks: blocks times query slices, as for PaPaRa.
    from dpalign.simd.backend import PAIRWISE_UNITS_PER_THREAD, NumbaBackend, pairwise_block_width

    rng = np.random.default_rng(3)
    s = Scoring((2, -3), (5, 2))
    queries = query_batch([s.encode("".join(rng.choice(list("ACGT"), 30))) for _ in range(6)])
    task = Task("pairwise", s, "local")
    for n_blocks in (2 * PAIRWISE_UNITS_PER_THREAD + 1, 3):  # odd: old rule sliced both
        blocks = reference_blocks([s.encode("ACGTTGCA" * 3)] * (64 * n_blocks), width=64)
        seen = []

        def one(task, part, block, seen=seen):
            seen.append(len(part))
            return P.score_block(task, part, block)

        NumbaBackend(threads=2)._run(one, task, queries, blocks, None)
        if n_blocks > 3:
            assert seen == [6] * n_blocks
        else:
            assert len(seen) > n_blocks and sum(seen) == 6 * n_blocks
    assert pairwise_block_width(1000, 1) == 512 and pairwise_block_width(100, 1) == 128
    assert pairwise_block_width(1000, 2) == 64


@given(case=cases(modes=["local"]), data=st.data())
def test_striped_int16_equals_reference(case, data):
    from dpalign.simd.striped import local_score

    a = data.draw(texts(case.letters, 0, 80))
    b = data.draw(texts(case.letters, 0, 80))
    if data.draw(st.booleans()) and a:
        b = a[data.draw(st.integers(0, len(a) - 1)) :]  # long similar stretches
    s = case.scoring
    value, saturated = local_score(
        s.encode(a), s.encode(b), s.matrix.astype(np.int64), s.gap_open, s.gap_extend
    )
    assert not saturated and value == case.ref(a, b)


@pytest.mark.parametrize("gap", [0, 1, 2, (0, 2), (1, 0), (3, 1), (5, 2), (11, 1), (2, 5)])
def test_striped_int16_long_pairs_every_gap_model(gap):
    # The lazy-F loop only matters when vertical gaps cross segment boundaries (> 32 rows).
    from dpalign.simd.striped import local_score

    rng = np.random.default_rng(16)
    for sub, alphabet in [((1, -1), 2), ((2, -3), 4), ((5, -4), 4), ((1, 0), 4), ("BLOSUM62", 20)]:
        s = Scoring(sub, gap)
        matrix = s.matrix.astype(np.int64)
        for _ in range(12):
            a = rng.integers(0, alphabet, rng.integers(30, 200)).astype(np.uint8)
            b = rng.integers(0, alphabet, rng.integers(30, 200)).astype(np.uint8)
            want = P.score_pair_int64(
                a, b, matrix, s.gap_open, s.gap_extend, True, np.ones(4, bool)
            )
            assert local_score(a, b, matrix, s.gap_open, s.gap_extend) == (want, False)


def test_striped_flags_saturation():
    from dpalign.simd.striped import local_score

    a = np.zeros(400, np.uint8)
    value, saturated = local_score(a, a, np.full((4, 4), 100, np.int64), 3, 1)
    assert saturated and value == 2**15 - 1


def test_few_saturated_lanes_go_striped_then_int32():
    query = "ACGT" * 100
    rng = np.random.default_rng(15)
    others = ["".join(rng.choice(list("NRYS"), 80)) for _ in range(50)]  # no match at all
    targets = others[:20] + [query, query[:100]] + others[20:]
    case = _case((100, -120), (20, 100))
    scores, widths = _run(case, [query], targets, 64)
    assert widths[0, 20] == 32 and scores[0, 20] == 40000 == case.ref(query, query)
    assert widths[0, 21] == 16 and scores[0, 21] == 10000 == case.ref(query, query[:100])
    assert (np.delete(widths[0], [20, 21]) == 8).all() and (
        np.delete(scores[0], [20, 21]) == 0
    ).all()
