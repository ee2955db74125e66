"""The accurate mode's second pass (issue 15): the Numba kernel against the reference oracle,
the distance-weighted edge frequencies against a brute-force sum, and what the pass is for."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpalign import reference
from dpalign.benchmarks.accuracy import score
from dpalign.benchmarks.simulate import INSERTED, simulate
from dpalign.engine import get_backend
from dpalign.papara import dataset, msa, placement, profiles, refine, traceback
from dpalign.scoring import ACCURATE
from dpalign.simd import papara_refine as kernel


@st.composite
def problems(draw):
    """A read, an edge table and a band: window at either end of the reference or inside."""
    n_total = draw(st.integers(1, 9))
    m = draw(st.integers(1, 8))
    codes = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    odds = rng.uniform(0.02, 5.0, (codes, n_total))
    # occupied, keep, leave, enter, stay: independent, so that a swapped one shows
    table = (odds, *rng.uniform(0.001, 0.999, (5, n_total)))
    lo = draw(st.integers(0, n_total - 1))
    hi = draw(st.integers(lo + 1, n_total))
    n = hi - lo
    if draw(st.booleans()):
        centre = np.sort(rng.integers(0, n + 1, m + 1))
        width = draw(st.integers(0, 3))
        first, last = np.clip(centre - width, 0, n), np.clip(centre + width, 0, n)
    else:
        first, last = np.zeros(m + 1, np.int64), np.full(m + 1, n, np.int64)
    read = rng.integers(0, codes, m)
    consts = (
        draw(st.sampled_from([1e-5, 0.01, 0.3])),  # open
        draw(st.sampled_from([0.05, 0.4, 0.9])),  # extend
        draw(st.sampled_from([0.2, 1.0])),  # overhang
    )
    return table, read, lo, hi, first, last, consts


@settings(max_examples=150, deadline=None)
@given(problems())
def test_posteriors_match_the_oracle(problem):
    table, read, lo, hi, first, last, consts = problem
    n_total = table[0].shape[1]
    args = (*table, read, lo, hi, first, last, *consts, lo == 0, hi == n_total)
    want = reference.papara_refine_posteriors(*args)
    got = kernel.posteriors(*args)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert (want[1:].sum(axis=1) <= 1 + 1e-9).all()  # a character is in one column at most
    for j in range(1, len(read) + 1):  # nothing outside the band
        assert not want[j, : first[j]].any() and not want[j, last[j] + 1 :].any()


@settings(max_examples=100, deadline=None)
@given(problems(), st.sampled_from([0.0, 0.2, 0.5]))
def test_decoding_matches_the_oracle(problem, theta):
    table, read, lo, hi, first, last, consts = problem
    n_total = table[0].shape[1]
    band = (lo, hi, first, last)
    want = reference.papara_refine(*table, read, band, *consts, theta)
    assert want.count("M") + want.count("R") == n_total
    assert want.count("M") + want.count("I") == len(read)
    post = kernel.posteriors(*table, read, lo, hi, first, last, *consts, lo == 0, hi == n_total)
    buf = np.empty(len(read) + hi - lo, dtype=np.uint8)
    count = kernel.decode(post, theta, buf)
    got = buf[:count][::-1].tobytes().translate(kernel._OP_TABLE).decode()
    assert got == reference.papara_refine_decode(post, theta)
    many = kernel.refine_many([table], np.zeros(1, np.int64), [read], [band], *consts, [theta])
    assert many == ["R" * lo + got + "R" * (n_total - hi)]


def test_a_read_hanging_over_the_reference_start_keeps_its_overhang_inserted():
    """Three characters that match nothing, then four that match columns 0-3 exactly: the
    first three become insertions before column 0 (overhang weight 1, no insertion cost)."""
    odds = np.full((2, 6), 0.05)
    odds[1, :4] = 8.0
    occupied = np.full(6, 0.95)
    table = (odds, occupied, occupied, 1 - occupied, occupied, 1 - occupied)
    read = np.array([0, 0, 0, 1, 1, 1, 1])
    band = (0, 6, np.zeros(8, np.int64), np.full(8, 6, np.int64))
    ops = reference.papara_refine(*table, read, band, 1e-4, 0.3, 1.0, 0.0)
    assert ops == "IIIMMMMRR"
    got = kernel.refine_many([table], np.zeros(1, np.int64), [read], [band], 1e-4, 0.3, 1.0, [0])
    assert got == [ops]


def test_threads_do_not_change_the_result():
    rng = np.random.default_rng(5)
    tables = [(rng.uniform(0.1, 4, (4, 40)), *rng.uniform(0.1, 0.9, (5, 40)))]
    reads = [rng.integers(0, 4, int(rng.integers(1, 30))) for _ in range(40)]
    bands = [(0, 40, np.zeros(len(r) + 1, np.int64), np.full(len(r) + 1, 40)) for r in reads]
    which = np.zeros(len(reads), np.int64)
    thetas = rng.choice([0.0, 0.5], len(reads))
    one = kernel.refine_many(tables, which, reads, bands, 1e-3, 0.3, 1.0, thetas, threads=1)
    two = kernel.refine_many(tables, which, reads, bands, 1e-3, 0.3, 1.0, thetas, threads=2)
    assert one == two


def _distances(tree, start_u, start_v, length):
    """Tree distance from the middle of edge (u, v) to every node (brute force)."""
    dist = {start_u: length / 2, start_v: length / 2}
    stack = [start_u, start_v]
    while stack:
        node = stack.pop()
        for other, z in tree.neighbors[node]:
            if other not in dist:
                dist[other] = dist[node] + z
                stack.append(other)
    return dist


@pytest.mark.parametrize("protein", [False, True], ids=["dna", "protein"])
def test_edge_frequencies_are_the_distance_weighted_sums(protein):
    sim = simulate(9, 60, 3, (10, 20), seed=11, protein=protein)
    data = dataset.load(sim.newick, sim.msa, sim.reads, protein=protein, keep_ambiguous=True)
    freqs = refine.EdgeFrequencies(data, tau_rel=0.8)
    tau = 0.8 * np.mean([e.length for e in data.tree.edges])
    k = freqs.n_bits
    for edge_id, edge in enumerate(data.tree.edges):
        dist = _distances(data.tree, edge.u, edge.v, edge.length)
        channels = np.zeros((data.n_columns, k + 2))
        for node, row in data.tip_rows.items():
            states = data.ref_states[row]
            gap = states == data.alphabet.gap
            bits = ((states[:, None].astype(np.int64) >> np.arange(k)) & 1).astype(float)
            bits = np.where(gap[:, None], 0.0, bits / np.maximum(bits.sum(1), 1)[:, None])
            both = gap & np.concatenate([[False], gap[:-1]])
            parts = [bits, gap[:, None], both[:, None]]
            channels += math.exp(-dist[node] / tau) * np.concatenate(parts, 1)
        residues, gap, pair = freqs.at_edge(edge_id)
        total = channels[:, :k].sum(1, keepdims=True)
        want = np.where(total > 0, channels[:, :k] / np.maximum(total, 1e-300), freqs.background)
        np.testing.assert_allclose(residues, want, rtol=1e-9, atol=1e-12)
        weight = channels[:, : k + 1].sum(1)
        np.testing.assert_allclose(gap, channels[:, k] / weight, rtol=1e-9)
        np.testing.assert_allclose(pair, channels[:, k + 1] / weight, rtol=1e-9, atol=1e-15)


def _columns(ops):
    out, site = [], 0
    for op in ops:
        if op == "M":
            out.append(site)
        elif op == "I":
            out.append(INSERTED)
        site += op != "I"
    return np.array(out, dtype=np.int64)


def test_the_second_pass_places_more_reads_perfectly_than_the_first():
    """What the pass is for: characters in gappy variable regions, where one Fitch state set
    and one gap flag per column leave the first pass guessing."""
    sim = simulate(30, 700, 150, seed=21)
    data = dataset.load(sim.newick, sim.msa, sim.reads, keep_ambiguous=True)
    states, flags = profiles.dataset_profiles(data)
    backend = get_backend("numba")
    placed = placement.place(states, flags, data.reads, ACCURATE, backend)
    leads, cores = traceback.align_reads(
        states, flags, data.reads, placed.edge, placed.score, ACCURATE, backend
    )
    n_sites = states.shape[1]
    first = [msa.untrim_ops(lead, core, n_sites) for lead, core in zip(leads, cores, strict=True)]
    second = refine.Refiner(data, backend).refine(data.reads, placed.edge, first, states)
    before = score([_columns(o) for o in first], sim.truth)
    after = score([_columns(o) for o in second], sim.truth)
    assert after.perfect > before.perfect + 0.03
    assert after.recall > before.recall and after.precision > before.precision


def test_the_reference_backend_refines_as_numba_does():
    """The engine's CPU backend is Numba's; without Numba the reference backend refines (same
    model, log space), and on ordinary input it writes the same alignments."""
    from dpalign.engine import ReferenceBackend

    rng = np.random.default_rng(9)
    tables = [(rng.uniform(0.05, 6, (4, 25)), *rng.uniform(0.02, 0.98, (5, 25))) for _ in range(2)]
    reads = [rng.integers(0, 4, int(rng.integers(1, 15))) for _ in range(12)]
    bands = [(0, 25, np.zeros(len(r) + 1, np.int64), np.full(len(r) + 1, 25)) for r in reads]
    which = rng.integers(0, 2, len(reads))
    thetas = rng.choice([0.0, 0.5], len(reads))
    model = refine.RefineModel(rows=0, open_ins=1e-3, extend_ins=0.3)
    want = ReferenceBackend().refine_papara(tables, which, reads, bands, thetas, model)
    got = get_backend("numba").refine_papara(tables, which, reads, bands, thetas, model)
    assert got == want


@st.composite
def row_problems(draw):
    """A read, R components (emissions and chains over the window), weights, a switch chance
    and a band."""
    n_total = draw(st.integers(1, 7))
    m = draw(st.integers(1, 6))
    codes = draw(st.integers(1, 3))
    rows = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lo = draw(st.integers(0, n_total - 1))
    hi = draw(st.integers(lo + 1, n_total))
    n = hi - lo
    odds = rng.uniform(0.02, 5.0, (rows, codes, n))
    chains = rng.uniform(0.001, 0.999, (5, rows, n))  # independent: a swapped one shows
    weights = rng.uniform(0.05, 1.0, rows)
    weights /= weights.sum()
    jump = draw(st.sampled_from([0.0, 0.02, 0.5, 1.0]))
    if draw(st.booleans()):
        centre = np.sort(rng.integers(0, n + 1, m + 1))
        width = draw(st.integers(0, 3))
        first, last = np.clip(centre - width, 0, n), np.clip(centre + width, 0, n)
    else:
        first, last = np.zeros(m + 1, np.int64), np.full(m + 1, n, np.int64)
    read = rng.integers(0, codes, m)
    consts = (
        draw(st.sampled_from([1e-5, 0.01, 0.3])),
        draw(st.sampled_from([0.05, 0.4, 0.9])),
        draw(st.sampled_from([0.2, 1.0])),
    )
    args = (odds, *chains, weights, jump, read, lo, hi, first, last, *consts)
    return args, lo == 0, hi == n_total


@settings(max_examples=60, deadline=None)
@given(row_problems())
def test_row_mixture_posteriors_match_the_oracle(problem):
    args, open_lo, open_hi = problem
    want = reference.papara_refine_rows_posteriors(*args, open_lo, open_hi)
    got = kernel.posteriors_rows(*args, open_lo, open_hi)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert (want[1:].sum(axis=1) <= 1 + 1e-9).all()


@settings(max_examples=50, deadline=None)
@given(problems(), st.sampled_from([0.0, 0.3, 1.0]), st.integers(1, 3))
def test_row_mixture_of_copies_of_one_chain_is_the_one_chain_model(problem, jump, copies):
    """Components that are all the edge's chain give :func:`posteriors` whatever the weights
    and the switch chance (a switch changes nothing), also through the long-read scaling."""
    table, read, lo, hi, first, last, consts = problem
    n_total = table[0].shape[1]
    want = kernel.posteriors(*table, read, lo, hi, first, last, *consts, lo == 0, hi == n_total)
    parts = [np.repeat(np.asarray(p)[None, ..., lo:hi], copies, axis=0) for p in table]
    weights = np.arange(1.0, copies + 1) / (copies * (copies + 1) / 2)
    got = kernel.posteriors_rows(
        *(np.ascontiguousarray(p) for p in parts), weights, jump, read, lo, hi, first, last,
        *consts, lo == 0, hi == n_total,
    )  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_a_read_follows_the_gaps_of_the_row_it_is_closest_to():
    """Two rows with the same residues but their gap in different columns; the read's own
    residues cannot tell where its gap goes, the rows' weights can: each row's gaps win when
    that row carries the weight."""
    n = 8
    odds = np.ones((1, n))  # one code, no residue evidence anywhere
    chain = [np.full(n, 0.5)] * 5
    rows = np.ones((2, n), dtype=bool)
    rows[0, 2] = rows[1, 5] = False
    read = np.zeros(n - 1, np.int64)
    band = (np.zeros(n, np.int64), np.full(n, n, np.int64))
    for heavy, gap in ((0, 2), (1, 5)):
        weights = np.array([0.9, 0.1]) if heavy == 0 else np.array([0.1, 0.9])
        window = reference.papara_refine_row_window(
            odds, chain, rows, None, weights, 0, n, 0.05, 0.0
        )
        post = kernel.posteriors_rows(
            *window, 0.01, read, 0, n, *band, 1e-4, 0.3, 1.0, False, False
        )  # fmt: skip
        buf = np.empty(2 * n, dtype=np.uint8)
        count = kernel.decode(post, 0.0, buf)
        ops = buf[:count][::-1].tobytes().translate(kernel._OP_TABLE).decode()
        assert ops == "M" * gap + "R" + "M" * (n - 1 - gap)


def test_row_window_merges_rows_with_the_same_gaps():
    odds = np.ones((2, 6))
    chain = [np.full(6, 0.7)] * 5
    rows = np.array([[1, 1, 0, 1, 1, 1], [1, 1, 0, 1, 0, 1], [1, 0, 0, 1, 1, 1]], dtype=bool)
    weights = np.array([0.5, 0.3, 0.2])
    *parts, merged = reference.papara_refine_row_window(
        odds, chain, rows, None, weights, 2, 5, 0.1, 0.0
    )
    # columns 2-4: rows 0 and 2 agree (gap, residue, residue), row 1 differs
    assert sorted(merged.tolist()) == pytest.approx([0.3, 0.7])
    assert parts[0].shape == (2, 2, 3) and parts[1].shape == (2, 3)
    *parts, merged = reference.papara_refine_row_window(
        odds, chain, rows, None, weights, 2, 5, 0.1, 0.25
    )
    assert merged.sum() == pytest.approx(1.0) and merged[-1] == 0.25
    np.testing.assert_allclose(parts[2][-1], chain[1][2:5])


def test_nearest_tips_are_those_of_a_brute_force_search():
    sim = simulate(15, 40, 2, (10, 20), seed=12)
    data = dataset.load(sim.newick, sim.msa, sim.reads)
    tree = data.tree
    for edge_id, edge in enumerate(tree.edges):
        dist = _distances(tree, edge.u, edge.v, edge.length)
        want = sorted((dist[t], t) for t in tree.tips)[:5]
        got = refine.nearest_tips(tree, edge_id, 5)
        assert [t for _, t in got] == [t for _, t in want]
        np.testing.assert_allclose([d for d, _ in got], [d for d, _ in want])


def test_the_reference_backend_refines_rows_as_numba_does():
    """The row-mixture model through the engine's door on both CPU backends: the same op
    strings (residue-weighted rows, the edge's chain as one more component)."""
    from dpalign.engine import ReferenceBackend

    sim = simulate(12, 80, 12, (15, 30), seed=14)
    data = dataset.load(sim.newick, sim.msa, sim.reads, keep_ambiguous=True)
    states, flags = profiles.dataset_profiles(data)
    backend = get_backend("numba")
    placed = placement.place(states, flags, data.reads, ACCURATE, backend)
    leads, cores = traceback.align_reads(
        states, flags, data.reads, placed.edge, placed.score, ACCURATE, backend
    )
    n_sites = states.shape[1]
    first = [msa.untrim_ops(lead, core, n_sites) for lead, core in zip(leads, cores, strict=True)]
    for model in (
        refine.RefineModel(rows=3, row_residue=0.4, profile_weight=0.2, band=6),
        refine.RefineModel(rows=2, row_residue=0.0, blend=0.4, band=5),
    ):
        got = refine.Refiner(data, backend, model).refine(data.reads, placed.edge, first, states)
        want = refine.Refiner(data, ReferenceBackend(), model).refine(
            data.reads, placed.edge, first, states
        )
        assert got == want
    assert got != first  # the pass moved something, so the comparison has teeth


def test_row_mixture_scales_long_reads_as_the_one_chain_kernel_does():
    """600 characters: the per-row scaling keeps the sums finite, and copies of the edge's
    chain still give :func:`posteriors` (whose own scaling is tested against the oracle)."""
    rng = np.random.default_rng(3)
    n, m = 700, 600
    table = (rng.uniform(0.05, 6.0, (4, n)), *rng.uniform(0.02, 0.98, (5, n)))
    read = rng.integers(0, 4, m)
    centre = np.sort(rng.integers(0, n + 1, m + 1))
    first, last = np.clip(centre - 30, 0, n), np.clip(centre + 30, 0, n)
    consts = (1e-4, 0.3, 1.0, True, True)
    want = kernel.posteriors(*table, read, 0, n, first, last, *consts)
    parts = [np.ascontiguousarray(np.repeat(np.asarray(p)[None], 2, axis=0)) for p in table]
    got = kernel.posteriors_rows(
        *parts, np.array([0.25, 0.75]), 0.05, read, 0, n, first, last, *consts
    )
    assert np.isfinite(got).all() and want.sum() > m / 2
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(problems(), st.sampled_from([0.0, 0.2, 0.5]), st.booleans())
def test_band_decoding_is_the_full_decoding(problem, theta, ties):
    """The fused pass decodes over the band only: the same alignment as :func:`decode` over
    the whole matrix (zeros outside the band), ties included (``ties``: posteriors on a coarse
    grid, so that many paths sum alike)."""
    _, read, lo, hi, first, last, _ = problem
    m, n = len(read), hi - lo
    rng = np.random.default_rng(len(read) * 31 + n)
    post = np.zeros((m + 1, n + 1))
    band = np.zeros((m + 1, int((last - first).max()) + 3))
    for j in range(1, m + 1):
        for i in range(max(first[j], 1), last[j] + 1):
            v = rng.integers(0, 3) / 4 if ties else rng.uniform(0, 1)
            post[j, i] = band[j, i - first[j] + 1] = v
    want = np.empty(m + n, dtype=np.uint8)
    got = np.empty(m + n, dtype=np.uint8)
    value = np.empty_like(band)
    move = np.empty(band.shape, dtype=np.uint8)
    count = kernel.decode(post, theta, want)
    cut = np.full(m + 1, theta)
    assert kernel._decode_band(band, first, last, n, cut, value, move, got) == count
    assert (got[:count] == want[:count]).all()


@pytest.mark.parametrize("insert", [0.0, 1.0])
def test_row_mixture_threads_do_not_change_the_result(insert):
    """The fused pass on one thread and two, and the oracle read by read (both posteriors,
    the blend, the threshold per character)."""
    rng = np.random.default_rng(6)
    n, rows = 40, 2
    tables = [
        (
            rng.uniform(0.1, 4, (4, n)), *rng.uniform(0.1, 0.9, (5, n)),
            rng.random((rows, n)) < 0.8, rng.uniform(0.1, 4, (rows, 4, n)), np.array([0.7, 0.3]),
        )
        for _ in range(3)
    ]  # fmt: skip
    reads = [rng.integers(0, 4, int(rng.integers(1, 30))) for _ in range(50)]
    bands = []
    for read in reads:  # windows anywhere (each edge's components cover only its reads'), bands
        lo = int(rng.integers(0, n - 1))
        hi = int(rng.integers(lo + 1, n + 1))
        centre = np.sort(rng.integers(0, hi - lo + 1, len(read) + 1))
        width = int(rng.integers(0, 6))
        bands.append(
            (lo, hi, np.clip(centre - width, 0, hi - lo), np.clip(centre + width, 0, hi - lo))
        )
    which = rng.integers(0, 3, len(reads))
    thetas = rng.choice([0.0, 0.5], len(reads))
    args = (tables, which, reads, bands, 1e-3, 0.3, 1.0, thetas, 0.6, 0.01, 0.0, 0.3, insert)
    one = kernel.refine_many_rows(*args, threads=1)
    assert one == kernel.refine_many_rows(*args, threads=2)
    want = [
        reference.papara_refine_rows(
            tables[t], r, b, 1e-3, 0.3, 1.0, theta, 0.6, 0.01, 0.0, 0.3, insert
        )
        for t, r, b, theta in zip(which, reads, bands, thetas, strict=True)
    ]
    assert one == want


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    taxa=st.integers(3, 5),
    protein=st.booleans(),
    rates=st.lists(st.floats(0.01, 20.0), min_size=1, max_size=3),
    pendant=st.floats(0.0, 3.0),
    share=st.floats(0.0, 1.0),
    ambiguous=st.integers(0, 6),
)
def test_tree_frequencies_match_the_oracle(seed, taxa, protein, rates, pendant, share, ambiguous):
    """The pruning (scaled partials, shared directed subtrees, eigen-decomposed transitions)
    against a sum over every assignment of states to the inner nodes, with gaps and
    ambiguity codes in the reference."""
    if protein:
        taxa = 3  # one inner node: 20 ** 2 assignments per column and rate
    sim = simulate(taxa, 40, 2, (4, 8), seed=seed, protein=protein, held_out=2)
    data = dataset.load(sim.newick, sim.msa, sim.reads, protein=protein, keep_ambiguous=True)
    rng = np.random.default_rng(seed)
    k = 20 if protein else 4
    for _ in range(ambiguous):  # a state set of two or three residues somewhere
        row, col = rng.integers(0, data.ref_states.shape[0]), rng.integers(0, data.n_columns)
        data.ref_states[row, col] = sum(1 << int(b) for b in rng.choice(k, 2 + (col % 2), False))
    freqs = refine.TreeFrequencies(data, rates, share, pendant / np.mean(
        [e.length for e in data.tree.edges]))  # fmt: skip
    tips = {}
    for node, row in data.tip_rows.items():
        states = data.ref_states[row]
        bits = ((states[:, None].astype(np.int64) >> np.arange(k)) & 1).astype(float)
        bits[states == data.alphabet.gap] = 1.0
        tips[node] = bits
    for edge in range(len(data.tree.edges)):
        want = reference.papara_refine_tree_frequencies(
            data.tree, tips, edge, rates, freqs.prior, freqs.background, pendant,
            None if protein else share,
        )  # fmt: skip
        np.testing.assert_allclose(freqs.at_edge(edge), want, rtol=1e-6, atol=1e-9)


def test_tree_frequencies_follow_near_rows_in_slow_columns_only():
    """What the tree model is for: at a slow rate the read is expected to carry its nearest
    relative's residue, at a fast one about the background whatever the relatives hold."""
    sim = simulate(8, 40, 2, (10, 20), seed=5, held_out=2)
    data = dataset.load(sim.newick, sim.msa, sim.reads, keep_ambiguous=True)
    edge = next(k for k, e in enumerate(data.tree.edges) if data.tree.is_tip(e.v))
    tip = data.tree.edges[edge].v
    states = data.ref_states[data.tip_rows[tip]]
    col = int(np.flatnonzero(states != data.alphabet.gap)[0])
    residue = int(states[col]).bit_length() - 1
    slow = refine.TreeFrequencies(data, rates=(0.001,)).at_edge(edge)
    fast = refine.TreeFrequencies(data, rates=(1000.0,)).at_edge(edge)
    assert slow[col, residue] > 0.95
    np.testing.assert_allclose(fast, np.full_like(fast, 0.25), atol=1e-6)


def test_gap_runs_count_inner_gaps_only():
    """A row's end gaps (a fragment) are no deletions; inside its span, residues followed by
    a gap over residues, gaps followed by a gap over gaps."""
    gap = 0
    rows = ["--AA-AAA--", "A--A------", "----------"]
    states = np.array([[gap if ch == "-" else 1 for ch in row] for row in rows], np.uint8)
    opened, extended = refine._gap_runs(states, gap)
    assert opened == pytest.approx(2 / 5)  # residues at 2, 3, 5, 6 and 0; gaps after 3 and 0
    assert extended == pytest.approx(1 / 3)  # gaps at 4, 1 and 2; only 1 -> 2 continues


@pytest.mark.parametrize("pseudo", [0.0, 0.02, 0.5])
def test_skip_chances_take_the_references_gap_runs_as_pseudo_rows(pseudo):
    """``stay`` and ``leave`` are the weighted rows' chances of a gap given the column before,
    with ``gap_pseudo`` rows of the reference's own gap-run chances: where hardly any
    weighted row skips column c - 1, skipping c after it is the reference's extension chance,
    not whatever the sliver of weight says."""
    sim = simulate(12, 300, 3, (10, 20), seed=5)
    data = dataset.load(sim.newick, sim.msa, sim.reads, keep_ambiguous=True)
    model = refine.RefineModel(gap_pseudo=pseudo)
    refiner = refine.Refiner(data, get_backend("numba"), model)
    freqs = refiner._freqs
    for edge in range(0, len(data.tree.edges), 5):
        _, _, keep, leave, enter, stay = refiner._tables(edge, np.array([1, 2], np.uint8))
        _, gap, pair = freqs.at_edge(edge)
        g = np.clip((1 - model.gap_prior) * gap + model.gap_prior * freqs.gap_fraction, 1e-3, 0.999)
        both = (1 - model.gap_prior) * pair + model.gap_prior * freqs.gap_fraction**2
        before = np.concatenate([[0.5], g[:-1]])
        both = np.clip(both, np.maximum(0.0, before + g - 1), np.minimum(before, g))
        want_stay = (both + pseudo * freqs.gap_extend) / (before + pseudo)
        want_leave = (g - both + pseudo * freqs.gap_open) / (1 - before + pseudo)
        np.testing.assert_allclose(stay[1:], np.clip(want_stay, 1e-3, 0.999)[1:], rtol=1e-12)
        np.testing.assert_allclose(leave[1:], np.clip(want_leave, 1e-3, 0.999)[1:], rtol=1e-12)
        np.testing.assert_allclose(keep, 1 - leave)
        np.testing.assert_allclose(enter, 1 - stay)
    assert 0.0 < freqs.gap_open < freqs.gap_extend < 1.0
    # After a column almost no weighted row skips, the chance tends to the pseudo-rows'.
    rare = before < 1e-2
    if pseudo >= 0.5 and rare.any():
        assert np.all(np.abs(want_stay[rare] - freqs.gap_extend) < 0.05)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.0, 0.01, 0.5]),
    st.sampled_from([0.0, 0.3]),
    st.sampled_from([1e-5, 0.3]),
)
def test_row_mixture_log_likelihood_matches_the_oracle(seed, jump, profile_weight, open_ins):
    """The forward pass alone (the accurate mode's choice among neighbouring edges): the same
    log likelihood as the oracle's, read by read, on one thread and two, windows anywhere."""
    rng = np.random.default_rng(seed)
    n, rows = int(rng.integers(1, 30)), int(rng.integers(1, 4))
    weights = rng.uniform(0.1, 1, rows)
    tables = [
        (
            rng.uniform(0.1, 4, (3, n)), *rng.uniform(0.01, 0.99, (5, n)),
            rng.random((rows, n)) < 0.7, rng.uniform(0.1, 4, (rows, 3, n)),
            weights / weights.sum(),
        )
        for _ in range(2)
    ]  # fmt: skip
    reads = [rng.integers(0, 3, int(rng.integers(1, 25))) for _ in range(20)]
    bands = []
    for read in reads:
        lo = int(rng.integers(0, n))
        hi = int(rng.integers(lo + 1, n + 1))
        centre = np.sort(rng.integers(0, hi - lo + 1, len(read) + 1))
        width = int(rng.integers(0, 5))
        bands.append(
            (lo, hi, np.clip(centre - width, 0, hi - lo), np.clip(centre + width, 0, hi - lo))
        )
    which = rng.integers(0, 2, len(reads))
    args = (tables, which, reads, bands, open_ins, 0.3, 0.7, 0.6, jump, profile_weight)
    got = kernel.log_z_many_rows(*args, threads=1)
    np.testing.assert_array_equal(got, kernel.log_z_many_rows(*args, threads=2))
    want = [
        reference.papara_refine_rows_log_z(
            tables[t], r, b, open_ins, 0.3, 0.7, 0.6, jump, profile_weight
        )
        for t, r, b in zip(which, reads, bands, strict=True)
    ]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_row_mixture_log_likelihood_of_one_character_is_its_sum_over_rows():
    """One character, one column: the only path aligns it there, entered from the start:
    ``Z = sum_r w_r * ((1 - mix) * has_r + mix * occupied) * odds_r``."""
    odds = np.array([[2.0], [0.5]])
    profile = [np.array([0.9]), *np.full((4, 1), 0.5)]
    rows = np.array([[True], [False]])
    row_odds = np.array([[[3.0], [1.0]], [[0.2], [0.7]]])
    weights = np.array([0.25, 0.75])
    table = (odds, *profile, rows, row_odds, weights)
    band = (0, 1, np.array([0, 0]), np.array([1, 1]))
    mix = 0.6
    want = math.log(0.25 * (0.4 + mix * 0.9) * 1.0 + 0.75 * (mix * 0.9) * 0.7)
    got = reference.papara_refine_rows_log_z(
        table, np.array([1]), band, 1e-3, 0.3, 1.0, mix, 0.1, 0
    )
    assert got == pytest.approx(want, rel=1e-12)
    fast = kernel.log_z_many_rows(
        [table], [0], [np.array([1])], [band], 1e-3, 0.3, 1.0, mix, 0.1, 0
    )
    assert fast[0] == pytest.approx(want, rel=1e-12)


def test_reselect_takes_the_likeliest_of_the_edge_and_its_neighbours():
    """Each read's edge becomes the one of highest row-mixture likelihood among its own and
    those that share a node with it (its own on ties), on both CPU backends alike."""
    from dpalign.engine import ReferenceBackend

    sim = simulate(12, 80, 12, (15, 30), seed=14)
    data = dataset.load(sim.newick, sim.msa, sim.reads, keep_ambiguous=True)
    states, flags = profiles.dataset_profiles(data)
    backend = get_backend("numba")
    placed = placement.place(states, flags, data.reads, ACCURATE, backend)
    leads, cores = traceback.align_reads(
        states, flags, data.reads, placed.edge, placed.score, ACCURATE, backend
    )
    n_sites = states.shape[1]
    first = [msa.untrim_ops(lead, core, n_sites) for lead, core in zip(leads, cores, strict=True)]
    model = refine.RefineModel(band=6, reselect_band=6)
    live = [k for k in range(len(data.reads)) if placed.edge[k] >= 0 and len(data.reads[k])]
    bands, _ = refine._bands(
        [first[k] for k in live], [data.reads[k] for k in live], placed.edge[live], states, 6
    )
    fast = refine.Refiner(data, backend, model)
    slow = refine.Refiner(data, ReferenceBackend(), model)
    got = fast.reselect(data.reads, placed.edge, live, bands)
    assert (got == slow.reselect(data.reads, placed.edge, live, bands)).all()
    tree = data.tree
    codes, index = np.unique(np.concatenate([data.reads[k] for k in live]), return_inverse=True)
    starts = np.cumsum([0] + [len(data.reads[k]) for k in live])
    for t, k in enumerate(live):
        e0 = int(placed.edge[k])
        ends = {tree.edges[e0].u, tree.edges[e0].v}
        near = [e for e, edge in enumerate(tree.edges) if {edge.u, edge.v} & ends]
        read = index[starts[t] : starts[t + 1]]
        value = {
            e: reference.papara_refine_rows_log_z(
                slow._row_table(e, slow._tables(e, codes), codes),
                read,
                bands[t],
                model.open_ins,
                model.extend_ins,
                model.overhang,
                model.row_mix,
                model.jump,
                model.profile_weight,
            )  # fmt: skip
            for e in near
        }
        top = max(value.values())
        want = e0 if value[e0] == top else min(e for e in near if value[e] == top)
        assert got[k] == want
    assert (got != placed.edge).any()  # some read moved, so the check has teeth
