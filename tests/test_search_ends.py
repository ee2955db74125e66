"""End cells from the scoring pass: search hits know where they end without a traceback."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pairwise_cases import cases, texts

from dpalign import reference
from dpalign.engine import Task, query_batch, reference_blocks
from dpalign.scoring import Scoring
from dpalign.search import Database, search
from dpalign.simd.ends import ends_supported, score_block_ends

LOCAL_GAPS = [1, 2, 3, (2, 1), (3, 1), (5, 2), (11, 1), (0, 2), (1, 0)]


def _check_hits(hits, query, targets, scoring):
    for h in hits:
        ref = reference.pairwise_align(
            scoring.encode(query),
            scoring.encode(targets[h.index]),
            scoring.matrix,
            scoring.gap_open,
            scoring.gap_extend,
            "local",
        )
        assert h.score == ref.score
        assert h.end_known
        assert (h.query_end, h.target_end) == (ref.a_end, ref.b_end)
        assert h._alignment is None  # the ends came without a traceback


@settings(max_examples=25, deadline=None)
@given(case=cases(modes=["local"], gaps=LOCAL_GAPS), data=st.data(), n=st.integers(0, 80))
def test_local_hit_ends_are_the_references_without_a_traceback(case, data, n):
    targets = [data.draw(texts(case.letters, 0, 30)) for _ in range(n)]
    query = data.draw(texts(case.letters, 0, 30))
    db = Database(targets, sub_score=case.sub)
    hits = search(query, db, n, "local", case.sub, case.gap)
    _check_hits(hits, query, targets, case.scoring)


@pytest.mark.parametrize("copies", [1, 12])
def test_ends_survive_saturation(copies):
    # Scores above 127 leave the int8 pass: 12 such lanes go through the int16 lanes pass
    # (ends kept), one through the striped kernel (no ends there: an ends pass over that hit
    # gives them when asked, still without a traceback).
    rng = np.random.default_rng(copies)
    letters = list("ACGT")
    targets = ["".join(rng.choice(letters, rng.integers(20, 60))) for _ in range(100)]
    query = "".join(rng.choice(letters, 160))
    for k in range(copies):
        targets[3 + 7 * k] = "TT" + query[k : k + 150] + "GG"
    scoring = Scoring((1, -1), (2, 1))
    hits = search(query, targets, 100, "local", (1, -1), (2, 1), backend="numba")
    strong = [h for h in hits if h.score > 127]
    assert len(strong) == copies
    if copies == 1:
        assert strong[0]._qend is None  # rescored alone by the striped kernel: no ends yet
    _check_hits(hits, query, targets, scoring)


def test_block_ends_against_the_oracle_with_ties_and_int32():
    # 2/-3 DNA is full of ties between cells; a huge match score forces int32 and int64.
    rng = np.random.default_rng(9)
    for scoring in (Scoring((2, -3), (5, 2)), Scoring((100, -1), (1, 1))):
        targets = [rng.integers(0, 4, rng.integers(0, 40)).astype(np.uint8) for _ in range(70)]
        queries = [rng.integers(0, 4, rng.integers(0, 30)).astype(np.uint8) for _ in range(3)]
        queries.append(np.concatenate([targets[0]] * 3))
        block = reference_blocks(targets, width=128)[0]
        task = Task("pairwise", scoring, "local", (False,) * 4)
        got, a_end, b_end = score_block_ends(task, query_batch(queries), block)
        for q, query in enumerate(queries):
            for lane, target in enumerate(targets):
                ref = reference.pairwise_align(
                    query, target, scoring.matrix, scoring.gap_open, scoring.gap_extend, "local"
                )
                known = a_end[q, lane] >= 0
                assert got.scores[q, lane] == ref.score
                assert not known or (a_end[q, lane], b_end[q, lane]) == (ref.a_end, ref.b_end)


def test_other_modes_and_free_gaps_leave_ends_to_the_traceback():
    assert not ends_supported(Task("pairwise", Scoring((1, -1), 0), "local"))
    assert not ends_supported(Task("pairwise", Scoring((1, -1), 2), "global"))
    hits = search("ACGTACGT", ["ACGTTT", "CGTA"], 2, "semiglobal")
    assert not any(h.end_known for h in hits)
    assert hits[0].query_end == 8  # from the traceback


def test_ends_pass_runs_once_for_all_hits_when_first_asked(monkeypatch):
    # Ranking runs the score-only pass; the first hit asked for its end runs one ends pass
    # over the query's hits (only theirs), which answers every other hit.
    from dpalign.simd.backend import NumbaBackend

    rng = np.random.default_rng(4)
    targets = ["".join(rng.choice(list("ACGT"), rng.integers(10, 50))) for _ in range(90)]
    query = targets[7][3:30]
    runs = []
    original = NumbaBackend.score_ends

    def counted(self, task, queries, blocks, progress=None, every=False):
        runs.append(sum(int((b.ids >= 0).sum()) for b in blocks))
        return original(self, task, queries, blocks, progress, every)

    monkeypatch.setattr(NumbaBackend, "score_ends", counted)
    hits = search(query, targets, 6, "local", (2, -3), (5, 2), backend="numba")
    assert runs == [] and all(h._qend is None for h in hits)
    assert hits[3].query_end >= 0
    assert runs == [6]
    _check_hits(hits, query, targets, Scoring((2, -3), (5, 2)))
    assert runs == [6]
    # a tenth of the database or more: the ends come with the scores, no second pass
    hits = search(query, targets, 9, "local", (2, -3), (5, 2), backend="numba")
    assert runs == [6, 90] and all(h._qend is not None for h in hits)
    _check_hits(hits, query, targets, Scoring((2, -3), (5, 2)))
    assert runs == [6, 90]


def test_a_few_saturated_hits_still_get_their_ends_from_the_kernel():
    # The ends pass over a few hits sends saturated pairs to the int16 lanes (not the striped
    # kernel, which keeps no ends): the one strong hit knows its end without a traceback.
    rng = np.random.default_rng(12)
    targets = ["".join(rng.choice(list("ACGT"), rng.integers(20, 60))) for _ in range(100)]
    query = "".join(rng.choice(list("ACGT"), 160))
    targets[3] = "TT" + query[:150] + "GG"
    hits = search(query, targets, 2, "local", (1, -1), (2, 1), backend="numba")
    assert hits[0].index == 3 and hits[0].score > 127
    _check_hits(hits, query, targets, Scoring((1, -1), (2, 1)))


def test_eager_ends_of_a_striped_pair_come_from_an_ends_pass():
    # One target and top=1 take the ends from the scoring pass (eager); this self-hit leaves
    # the int8 pass and is rescored alone by the striped kernel, which keeps no ends: they
    # come from an ends pass over the hit, not from a traceback (hypothesis found it).
    query = "AAAAAAACCCCWW"
    (hit,) = search(query, [query], 1, "local", "BLOSUM45", 1, backend="numba")
    _check_hits([hit], query, [query], Scoring("BLOSUM45", 1))
