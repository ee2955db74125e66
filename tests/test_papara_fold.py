"""The per-read best/second/ties fold of the scoring phase: Numba kernel against NumPy form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpalign.engine import get_backend
from dpalign.papara import placement
from dpalign.scoring import PaparaScoring

pytest.importorskip("numba")


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_edges=st.integers(1, 80),
    n_cols=st.integers(1, 12),
    n_reads=st.integers(0, 40),
    states=st.sampled_from([1, 2, 15]),  # few states: many tied edges
    scoring=st.sampled_from([PaparaScoring(), PaparaScoring("bmc2012")]),
)
def test_kernel_fold_equals_numpy(seed, n_edges, n_cols, n_reads, states, scoring):
    rng = np.random.default_rng(seed)
    profile = rng.integers(1, states + 1, (n_edges, n_cols)).astype(np.uint8)
    flags = (rng.random((n_edges, n_cols)) < 0.2).astype(np.uint8)
    reads = [rng.integers(1, states + 1, m).astype(np.uint8) for m in rng.integers(0, 8, n_reads)]
    backend = get_backend("numba", threads=2)
    got = placement.place(profile, flags, reads, scoring, backend)
    want = placement.place(profile, flags, reads, scoring, backend, fold_kernel=False)
    for name in ("edge", "score", "width", "second_edge", "second_score", "ties"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name


def test_kernel_fold_over_several_blocks_with_ties():
    """Every edge the same: every read ties on all of them, across blocks."""
    n_edges = 200
    profile = np.full((n_edges, 5), 1, dtype=np.uint8)
    flags = np.zeros((n_edges, 5), dtype=np.uint8)
    reads = [np.array([1, 1], np.uint8), np.array([2], np.uint8)]
    backend = get_backend("numba", threads=2)
    blocks = placement.pack_profiles(profile, flags, backend)
    assert len(blocks) > 1
    got = placement.place(profile, flags, reads, PaparaScoring(), backend)
    want = placement.place(profile, flags, reads, PaparaScoring(), backend, fold_kernel=False)
    assert got.ties.tolist() == want.ties.tolist() == [n_edges, n_edges]
    assert got.edge.tolist() == [0, 0] and got.second_edge.tolist() == [1, 1]
