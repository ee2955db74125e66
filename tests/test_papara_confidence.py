"""Confidence per read (issue 15): second-best edge, its score, ties, support."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpalign import reference
from dpalign.engine import get_backend
from dpalign.papara import placement
from dpalign.scoring import ACCURATE, PaparaScoring


def _brute(states, flags, read, scoring):
    scores = np.array(
        [int(reference.papara_fill(states[e], flags[e], read, scoring).scores[0])
         for e in range(len(states))]
    )  # fmt: skip
    signed = -scores if scoring.minimize else scores
    order = np.argsort(-signed, kind="stable")  # best first, ties to the lower edge
    ties = int((signed == signed[order[0]]).sum())
    second = int(order[1]) if len(order) > 1 else -1
    return int(order[0]), int(scores[order[0]]), second, scores[second] if second >= 0 else 0, ties


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_edges=st.integers(1, 70),  # several blocks of 32 lanes
    scoring=st.sampled_from([PaparaScoring(), PaparaScoring("bmc2012"), ACCURATE]),
    backend=st.sampled_from(["reference", "numba"]),
)
def test_second_best_and_ties_equal_a_full_sort(seed, n_edges, scoring, backend):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    # few distinct states and short reads: many ties across edges and blocks
    states = (1 << rng.integers(0, 2, (n_edges, n))).astype(np.uint8)
    flags = (rng.random((n_edges, n)) < 0.2).astype(np.uint8)
    reads = [(1 << rng.integers(0, 2, int(m))).astype(np.uint8) for m in rng.integers(0, 6, 5)]
    engine = get_backend(backend, threads=1)
    got = placement.place(states, flags, reads, scoring, engine)
    support = got.support(scoring)
    for k, read in enumerate(reads):
        if len(read) == 0:
            assert got.edge[k] == -1 and np.isnan(support[k])
            continue
        edge, score, second, second_score, ties = _brute(states, flags, read, scoring)
        assert (got.edge[k], got.score[k], got.ties[k]) == (edge, score, ties)
        assert (got.second_edge[k], got.second_score[k]) == (second, second_score)
        if second < 0:
            assert support[k] == 1.0
        elif ties > 1:
            assert support[k] == 1.0 / ties
        else:
            assert 0.5 < support[k] < 1.0


def test_placements_tsv_has_the_confidence_columns():
    import dpalign

    msa = [("a", "ACGTACGTAC"), ("b", "ACGTTCGTAC"), ("c", "ACCTACGGAC"), ("d", "TCGTACGTAA")]
    result = dpalign.papara(
        "((a:0.1,b:0.1):0.1,c:0.1,d:0.1);", msa, [("r1", "ACGTTCG"), ("r2", "NNN")],
        backend="reference",
    )  # fmt: skip
    lines = [line.split("\t") for line in result.placements_tsv().splitlines()]
    assert lines[0][4:] == ["second_edge", "second_score", "ties", "support", "fit"]
    assert lines[2][1] == "-1" and lines[2][4:] == ["NA"] * 5  # N dropped: empty
    p = result.placements[0]
    assert p.ties >= 1 and p.second_edge is not None and 0 < p.support <= 1
    assert p.fit == p.score / (2 * 7)  # papara2: score over match x read length


def test_fit_is_the_score_over_the_best_possible():
    scores = np.array([10, 4, 0, 9])
    placed = placement.Placements(
        np.array([0, 1, -1, 2]), scores, None, 0, np.array([1, 0, -1, -1]), scores, np.ones(4)
    )
    fit = placed.fit(PaparaScoring(), np.array([5, 4, 0, 3]))
    assert fit[[0, 1, 3]].tolist() == [1.0, 0.5, 1.5] and np.isnan(fit[2])
    cost = placed.fit(PaparaScoring("bmc2012"), np.array([5, 4, 0, 3]))
    assert cost[[0, 1]].tolist() == [1 - 10 / 15, 1 - 4 / 12]
