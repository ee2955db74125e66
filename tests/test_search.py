"""Database search: ranking, coordinates, database views and reuse."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pairwise_cases import cases, texts

from dpalign.errors import OptionError
from dpalign.pairwise import align, score
from dpalign.search import Database, search


def _random_db(rng, n, letters="ACGT", lo=0, hi=60):
    return ["".join(rng.choice(list(letters), rng.integers(lo, hi + 1))) for _ in range(n)]


@settings(max_examples=20)
@given(case=cases(), data=st.data(), n=st.integers(0, 90), top=st.integers(1, 12))
def test_hits_are_the_best_targets_in_order(case, data, n, top):
    targets = [data.draw(texts(case.letters, 0, 16)) for _ in range(n)]
    query = data.draw(texts(case.letters, 0, 16))
    db = Database(targets, sub_score=case.sub)
    hits = search(query, db, top, case.mode, case.sub, case.gap, case.free_ends)
    want = [case.ref(query, t) for t in targets]
    ranked = sorted(range(n), key=lambda k: (-want[k], k))[:top]
    assert [h.index for h in hits] == ranked
    assert [h.score for h in hits] == [want[k] for k in ranked]
    for h in hits[:3]:
        aln = align(query, targets[h.index], case.mode, case.sub, case.gap, case.free_ends)
        assert (h.query_start, h.query_end, h.target_start, h.target_end, h.cigar) == (
            aln.a_start,
            aln.a_end,
            aln.b_start,
            aln.b_end,
            aln.cigar,
        )
        assert h.target == str(h.index)


def test_views_share_blocks_and_give_the_same_scores():
    rng = np.random.default_rng(11)
    targets = _random_db(rng, 300)
    db = Database(targets, names=[f"t{k}" for k in range(300)], block_width=64)
    query = targets[123][5:40]
    full = score(query, targets, "local", (2, -3), (5, 2))
    for start, end in [(0, 300), (64, 192), (64, 150), (10, 200), (250, 400), (5, 5)]:
        view = db[start:end]
        assert len(view) == len(range(*slice(start, end).indices(300)))
        hits = search(query, view, top=len(view), sub_score=(2, -3), gap_cost=(5, 2))
        got = {h.index: h.score for h in hits}
        assert set(got) == set(view.ids.tolist())
        assert all(got[k] == full[k] for k in got)
        assert all(h.target == f"t{h.index}" for h in hits)
    aligned = db[64:192].blocks()
    assert aligned[0].codes is db.blocks()[1].codes  # a view on block boundaries shares them
    assert db[64:150].blocks()[-1].ids[150 - 128 :].tolist() == [-1] * (64 - 22)
    nested = db[64:192][64:128]
    assert nested.ids.tolist() == db.ids[128:192].tolist()


def test_a_database_is_reused_across_queries_and_alphabets():
    rng = np.random.default_rng(12)
    proteins = _random_db(rng, 80, "ARNDCQEGHILKMFPSTWYV", 1, 50)
    db = Database(proteins)  # encoded for match/mismatch letters
    for query in (proteins[3][:20], proteins[70], "WWWW"):
        hits = search(query, db, 5, "local", "BLOSUM62", (11, 1))  # re-encoded for BLOSUM62
        want = score(query, proteins, "local", "BLOSUM62", (11, 1))
        assert [h.score for h in hits] == sorted(want, reverse=True)[:5]
    coded = Database([db.codes(db.alphabet)[0]])
    with pytest.raises(OptionError, match="cannot be searched with the BLOSUM62"):
        search("ACD", coded, sub_score="BLOSUM62")


def test_edge_cases():
    db = Database(["ACGT", "", "TTTT"], names=["a", "empty", "t"])
    assert [h.target for h in search("ACGT", db, top=10)] == ["a", "t", "empty"]
    hits = search("ACGT", db, top=3, mode="global", gap_cost=(3, 1))
    assert [(h.target, h.score) for h in hits][-1] == ("empty", -(3 + 4))
    assert search("ACGT", db, top=1)[0].target == "a"
    assert search("", db, top=2)[0].score == 0
    assert search("ACGT", Database([]), top=3) == []
    assert search("ACGT", ["AC", "ACGT"], top=1)[0].index == 1  # plain lists work too
    with pytest.raises(OptionError):
        search("ACGT", db, top=-1)
    with pytest.raises(TypeError):
        db[2]
    with pytest.raises(OptionError, match="names"):
        Database(["A", "C"], names=["x"])
    assert "3 targets" in repr(db)


def test_backends_agree():
    rng = np.random.default_rng(13)
    targets = _random_db(rng, 70, lo=1, hi=30)
    query = targets[7]
    for mode in ("local", "semiglobal", "global"):
        fast = search(query, targets, 6, mode, (1, -1), (2, 1))
        slow = search(query, targets, 6, mode, (1, -1), (2, 1), backend="reference")
        assert [(h.index, h.score, h.cigar) for h in fast] == [
            (h.index, h.score, h.cigar) for h in slow
        ]


def test_score_accepts_a_database():
    rng = np.random.default_rng(14)
    targets = _random_db(rng, 200)
    db = Database(targets, block_width=64)
    queries = [targets[3][:30], "ACGTTGCA"]
    want = score(queries, targets, "local", (2, -3), (5, 2))
    assert np.array_equal(score(queries, db, "local", (2, -3), (5, 2)), want)
    view = db[64:130]
    got = score(queries[0], view, "local", (2, -3), (5, 2))
    assert np.array_equal(got, want[0, np.sort(view.ids)])
    with pytest.raises(OptionError):
        score(queries, db, pairs="zip")


def test_dpalign_search_stays_callable_after_importing_the_module():
    import importlib

    import dpalign
    from dpalign.search import Database as FromModule

    module = importlib.import_module("dpalign.search")
    assert FromModule is module.Database is dpalign.Database
    assert dpalign.search is module.search
    assert dpalign.search("ACGT", ["TT", "ACGT"], top=1)[0].index == 1


def test_search_many_equals_one_search_per_query(monkeypatch):
    """Several chunks (scored longest query first): each query's hits are its own search's,
    returned in the order given, and each chunk is reported once as it is ranked."""
    import importlib

    S = importlib.import_module("dpalign.search")

    monkeypatch.setattr(S, "QUERY_CHUNK", 3)  # several chunks
    rng = np.random.default_rng(17)
    targets = _random_db(rng, 150, lo=1)
    queries = [t[2:30] for t in targets[:7]] + ["", "ACGT"]
    db = Database(targets)
    seen: dict = {}

    def ranked(indices, hits):  # each chunk as it is ranked: queries by index, longest first
        assert len(indices) == len(hits) <= 3 and not set(indices) & set(seen)
        seen.update(zip(indices, hits, strict=True))

    many = S.search_many(queries, db, 4, "semiglobal", (2, -3), (5, 2), on_ranked=ranked)
    assert len(many) == len(queries) and sorted(seen) == list(range(len(queries)))
    assert all(seen[k] is hits for k, hits in enumerate(many))
    for query, hits in zip(queries, many, strict=True):
        one = search(query, db, 4, "semiglobal", (2, -3), (5, 2))
        assert [(h.index, h.score, h.cigar) for h in hits] == [
            (h.index, h.score, h.cigar) for h in one
        ]
    both = S.search_many(queries, db, 4, "local", (2, -3), (5, 2), strand="both")
    for query, hits in zip(queries, both, strict=True):
        one = search(query, db, 4, "local", (2, -3), (5, 2), strand="both")
        assert [(h.index, h.score, h.strand, h.cigar) for h in hits] == [
            (h.index, h.score, h.strand, h.cigar) for h in one
        ]


@pytest.mark.parametrize("strand", ["plus", "both"])
def test_ranking_on_threads_equals_ranking_in_turn(monkeypatch, strand):
    """Large databases rank a chunk's queries on threads: the same hits, in the same order,
    as one query after another (ties included: few distinct scores)."""
    import importlib

    S = importlib.import_module("dpalign.search")

    rng = np.random.default_rng(23)
    targets = _random_db(rng, 300, lo=1, hi=12)
    queries = [t[1:9] for t in targets[:9]] + ["ACGTAC"] * 3
    db = Database(targets)

    def hits():
        found = S.search_many(queries, db, 6, "local", (2, -3), (5, 2), strand=strand, threads=2)
        return [[(h.index, h.score, h.strand, h.query_end, h.target_end) for h in q] for q in found]

    monkeypatch.setattr(S, "RANK_THREADS", 1)
    serial = hits()
    monkeypatch.setattr(S, "RANK_THREADS", 4)
    monkeypatch.setattr(S, "RANK_THREADS_TARGETS", 0)
    assert hits() == serial
    assert any(len({h[1] for h in q}) < len(q) for q in serial)  # ties were ranked


def test_longest_first_is_the_stable_descending_sort():
    """contract.longest_first (a radix sort of 16-bit keys where lengths fit): the order of
    a stable argsort of the negated lengths, ties in index order, long lengths included."""
    from dpalign.contract import longest_first

    rng = np.random.default_rng(6)
    for top in (1, 5, 3000, 32767, 32768, 10**7):
        lengths = rng.integers(0, top + 1, 5000)
        np.testing.assert_array_equal(longest_first(lengths), np.argsort(-lengths, kind="stable"))
    assert longest_first(np.zeros(0, np.int64)).size == 0
