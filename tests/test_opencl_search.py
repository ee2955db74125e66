"""The OpenCL search kernel against the oracle, on every OpenCL device here (PoCL in CI).

One query against many targets (``kernels_cl/search.py``): every mode, every ``free_ends``,
linear and affine gaps, match/mismatch and matrices, DNA (2-bit-able, IUPAC) and protein
codes, packed 16-bit and int32 kernels, must give exactly ``reference.pairwise_score``'s
scores; pairs that come near the 16-bit limit must come back exact with width 32.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpalign import reference
from dpalign.engine import ReferenceBackend, Task, get_backend, query_batch, reference_blocks
from dpalign.errors import OptionError
from dpalign.kernels_cl import search as search_module
from dpalign.kernels_cl.context import device_context
from dpalign.kernels_cl.search import (
    SearchRunner,
    SearchTask,
    kernel_name,
    pack_targets,
    residue_bits,
)
from dpalign.scoring import Scoring, free_ends_tuple

SCORINGS = [
    ("BLOSUM62", (11, 1)),
    ("BLOSUM62", 4),
    ("NUC.4.4", (10, 1)),
    ((1, -1), 2),
    ((2, -3), (5, 2)),
    ((5, -4), (0, 3)),
    ((1, 0), (2, 0)),
]


def _oracle(query, targets, scoring, mode, ends):
    return np.array(
        [
            reference.pairwise_score(
                query, t, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode, ends
            ).score
            for t in targets
        ],
        dtype=np.int64,
    )


def _codes(rng, size, kind, scoring):
    if kind == "acgt":
        high = 4
    elif kind == "iupac":
        high = min(16, scoring.matrix.shape[0])
    else:
        high = scoring.matrix.shape[0]
    return rng.integers(0, high, size).astype(np.uint8)


def _draw_search(data, longest: int, count: int, m: int):
    """A random search for hypothesis: scoring, mode, free ends, up to ``count`` targets of
    fewer than ``longest`` residues, a query of 1 to ``m`` (codes of one alphabet kind)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    sub, gap = data.draw(st.sampled_from(SCORINGS), label="scoring")
    scoring = Scoring(sub, gap)
    kind = data.draw(st.sampled_from(["acgt", "iupac", "all"]), label="codes")
    mode = data.draw(st.sampled_from(["local", "global", "semiglobal"]), label="mode")
    free = (
        data.draw(st.tuples(*[st.booleans()] * 4), label="free_ends") if mode == "global" else None
    )
    targets = [
        _codes(rng, int(rng.integers(0, longest)), kind, scoring)
        for _ in range(data.draw(st.integers(1, count), label="targets"))
    ]
    query = _codes(rng, data.draw(st.integers(1, m), label="m"), kind, scoring)
    return scoring, mode, free_ends_tuple(mode, free), targets, query


VARIANTS = [
    pytest.param({}, id="default"),
    pytest.param({"shifted": False, "best3": False}, id="gframe"),
    pytest.param({"strip": 16, "group": 32, "profile": "global"}, id="s16-globalprofile"),
]


@pytest.mark.parametrize("options", VARIANTS)
@pytest.mark.parametrize("width", [None, 32], ids=["auto", "i32"])
@given(data=st.data())
def test_search_equals_the_oracle(cl_device, options, width, data):
    scoring, mode, ends, targets, query = _draw_search(data, longest=30, count=40, m=25)
    runner = SearchRunner(device_context(cl_device), targets, **options)
    got = runner.score(query, scoring, mode, ends, width=width)
    np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, mode, ends))
    empty = np.array([len(t) == 0 for t in targets])
    assert set(got.width[empty].tolist()) <= {64}
    assert set(got.width[~empty].tolist()) <= ({32} if width == 32 else {16})
    assert got.cells == len(query) * sum(len(t) for t in targets)


def test_length_one_everything(cl_device):
    dctx = device_context(cl_device)
    scoring = Scoring("BLOSUM62", (11, 1))
    targets = [np.array([k], np.uint8) for k in range(24)] + [np.array([], np.uint8)]
    for query in (np.array([0], np.uint8), np.array([23], np.uint8), np.arange(5, dtype=np.uint8)):
        for mode in ("local", "global", "semiglobal"):
            ends = free_ends_tuple(mode)
            for width in (None, 32):
                got = SearchRunner(dctx, targets).score(query, scoring, mode, ends, width=width)
                want = _oracle(query, targets, scoring, mode, ends)
                np.testing.assert_array_equal(got.scores, want)


def test_empty_query_and_empty_targets(cl_device):
    dctx = device_context(cl_device)
    scoring = Scoring((2, -1), (3, 1))
    targets = [np.zeros(0, np.uint8), np.array([1, 2, 3], np.uint8), np.zeros(0, np.uint8)]
    for query in (np.zeros(0, np.uint8), np.array([1, 2], np.uint8)):
        for mode, free in (
            ("local", None),
            ("global", None),
            ("global", (True, False, True, True)),
        ):
            ends = free_ends_tuple(mode, free)
            got = SearchRunner(dctx, targets).score(query, scoring, mode, ends)
            np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, mode, ends))
    got = SearchRunner(dctx, []).score(np.array([1], np.uint8), scoring, "local", (True,) * 4)
    assert got.scores.shape == (0,) and got.launches == 0


@pytest.mark.parametrize("shifted", [True, False], ids=["shifted", "gframe"])
@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_saturated_pairs_are_recomputed_in_int32(cl_device, mode, shifted):
    """Long similar pairs pass 32,767 (width 32, exact); the rest stay 16-bit (exact)."""
    rng = np.random.default_rng(3)
    scoring = Scoring((100, -50), (20, 5))
    base = rng.integers(0, 4, 400).astype(np.uint8)
    targets = []
    for size in (300, 320, 360, 400, 40, 10):
        target = base[:size].copy()
        mutate = rng.random(size) < 0.02
        target[mutate] = rng.integers(0, 4, int(mutate.sum()))
        targets.append(target)
    targets += [rng.integers(0, 4, int(rng.integers(1, 50))).astype(np.uint8) for _ in range(40)]
    query = base[:390].copy()
    ends = free_ends_tuple(mode)
    runner = SearchRunner(device_context(cl_device), targets, shifted=shifted, best3=shifted)
    got = runner.score(query, scoring, mode, ends)
    want = _oracle(query, targets, scoring, mode, ends)
    np.testing.assert_array_equal(got.scores, want)
    assert want[3] > 2**15 and want[0] < 31_000  # one beyond int16, one just below
    assert got.width[3] == 32 and got.width[0] == 16 and got.recomputed >= 1
    assert set(got.width[4:].tolist()) == {16}


def test_pairs_too_low_for_16_bits_go_to_int32(cl_device):
    """Pairs whose DP values may fall below the packed "-inf" (-30,720) go straight to int32."""
    rng = np.random.default_rng(4)
    scoring = Scoring((1, -1), (400, 300))
    targets = [rng.integers(0, 4, size).astype(np.uint8) for size in (60, 1, 5, 90)]
    query = rng.integers(0, 4, 70).astype(np.uint8)
    ends = free_ends_tuple("global")
    got = SearchRunner(device_context(cl_device), targets).score(query, scoring, "global", ends)
    want = _oracle(query, targets, scoring, "global", ends)
    np.testing.assert_array_equal(got.scores, want)
    lowest = [scoring.bounds(len(query), len(t), "global")[0] for t in targets]
    assert min(lowest) < -30_720 < max(lowest)
    assert got.width.tolist() == [32, 16, 16, 32]
    # constants too large for the packed kernel: int32 throughout
    scoring = Scoring((1, -1), (3000, 1))
    got = SearchRunner(device_context(cl_device), targets).score(query, scoring, "local", ends)
    np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, "local", ends))
    assert got.width.tolist() == [32] * 4


def test_long_queries_run_in_segments(cl_device, monkeypatch):
    """A query profile larger than the local-memory budget runs in several launches (the
    strip kernel's: the thread-group kernel, the 16-bit default on GPUs with packed PTX,
    reads its profile otherwise)."""
    monkeypatch.setattr(search_module, "PROFILE_LOCAL_MAX", 8 * 2 * 26)  # one strip each
    rng = np.random.default_rng(5)
    scoring = Scoring("BLOSUM62", (11, 1))
    targets = [rng.integers(0, 20, int(rng.integers(1, 60))).astype(np.uint8) for _ in range(70)]
    query = rng.integers(0, 20, 45).astype(np.uint8)
    runner = SearchRunner(device_context(cl_device), targets, strip=8, local_kernel="strip")
    for mode, free in (("local", None), ("global", (True, True, False, True))):
        ends = free_ends_tuple(mode, free)
        for width in (None, 32):
            got = runner.score(query, scoring, mode, ends, width=width)
            np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, mode, ends))
            assert got.launches >= 6


def test_options_are_checked(cl_device):
    dctx = device_context(cl_device)
    with pytest.raises(OptionError, match="multiple of 8"):
        SearchRunner(dctx, [], strip=12)
    with pytest.raises(OptionError, match="multiple of 32"):
        SearchRunner(dctx, [], group=48)
    runner = SearchRunner(dctx, [np.array([1], np.uint8)])
    with pytest.raises(OptionError, match="16 or 32 bits"):
        runner.score(np.array([1], np.uint8), Scoring(), "local", (True,) * 4, width=8)
    with pytest.raises(OptionError, match="outside the scoring matrix"):
        SearchRunner(dctx, [np.array([30], np.uint8)]).score(
            np.array([1], np.uint8), Scoring("NUC.4.4", 2), "local", (True,) * 4
        )


# --------------------------------------------------------------------------------------------
# Layout and helpers (host only)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lpw", [1, 2])
@pytest.mark.parametrize("virtual", [4, 15, 24, 200])
def test_packing_round_trips(lpw, virtual):
    rng = np.random.default_rng(virtual)
    bits = residue_bits(virtual)
    per = 32 // bits
    codes = [
        rng.integers(0, virtual, int(rng.integers(0, 50))).astype(np.uint8) for _ in range(150)
    ]
    lengths = np.array([len(c) for c in codes])
    order = np.argsort(-lengths, kind="stable")
    words, meta, lens, rows = pack_targets(codes, lengths, order, lpw, bits, virtual)
    lpc = 32 * lpw
    assert words.shape[1] == lpc and len(meta) == -(-len(codes) // lpc)
    for chunk, (word0, n_rows, _, _) in enumerate(meta):
        block = words[word0 : word0 + n_rows // per]
        grid = (block[:, None, :] >> (bits * np.arange(per))[None, :, None]) & ((1 << bits) - 1)
        grid = grid.reshape(n_rows, lpc)
        for lane in range(lpc):
            k = chunk * lpc + lane
            n = int(lens[k])
            assert (grid[: n_rows - n, lane] == virtual).all()
            if k < len(order):
                np.testing.assert_array_equal(grid[n_rows - n :, lane], codes[order[k]])
    assert {3: 10, 4: 8, 5: 6, 8: 4}[bits] == per


def test_residue_bits_and_names():
    assert [residue_bits(v) for v in (3, 4, 15, 16, 24, 31, 32, 255)] == [2, 3, 4, 5, 5, 5, 8, 8]
    with pytest.raises(OptionError):
        residue_bits(256)
    assert kernel_name("local", 16) == "sw_score_opencl_search_i16"
    assert kernel_name("semiglobal", 32) == "nw_score_opencl_search_i32"


def test_task_maps_free_ends_to_kernel_borders():
    scoring = Scoring((1, -1), (3, 2))
    task = SearchTask.of(scoring, "global", (True, False, False, True))
    assert (task.left_zero, task.top_zero, task.last_col, task.last_row) == (
        True,
        False,
        False,
        True,
    )
    assert task.top(0) == 0 and task.top(2) == -7
    np.testing.assert_array_equal(
        SearchTask.of(scoring, "local", (False,) * 4).left([0, 3]), [0, 0]
    )


# --------------------------------------------------------------------------------------------
# The engine contract
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [None, 32])
def test_backend_scores_pairwise_blocks(cl_device, width):
    rng = np.random.default_rng(8)
    scoring = Scoring("BLOSUM62", (11, 1))
    targets = [rng.integers(0, 24, int(rng.integers(0, 40))).astype(np.uint8) for _ in range(75)]
    order = np.argsort([-len(t) for t in targets], kind="stable")
    blocks = reference_blocks(targets, order=order)
    queries = query_batch([rng.integers(0, 24, m).astype(np.uint8) for m in (17, 1, 30)])
    backend = get_backend("opencl", device=cl_device, width=width)
    for mode in ("local", "semiglobal"):
        task = Task("pairwise", scoring, mode, free_ends_tuple(mode))
        got = backend.score(task, queries, blocks)
        want = ReferenceBackend().score(task, queries, blocks)
        assert len(got) == len(blocks)
        for g, w, block in zip(got, want, blocks, strict=True):
            lanes = block.lengths > 0
            np.testing.assert_array_equal(g.scores[:, lanes], w.scores[:, lanes])
            assert g.scores.shape == (3, block.width) and g.width.shape == (3, block.width)
            assert set(g.width[:, lanes].ravel().tolist()) == {32 if width == 32 else 16}
    assert backend._search_cached[1] is backend._search_runner(blocks)  # uploaded once
    (worker,) = backend.stats.workers.values()
    assert worker.cells == 2 * queries.residues * sum(len(t) for t in targets)


def test_backend_pairwise_with_no_queries_or_blocks(cl_device):
    backend = get_backend("opencl", device=cl_device)
    task = Task("pairwise", Scoring(), "local", (True,) * 4)
    assert backend.score(task, query_batch([np.array([1], np.uint8)]), []) == []
    blocks = reference_blocks([np.array([1, 2], np.uint8)])
    (result,) = backend.score(task, query_batch([]), blocks)
    assert result.scores.shape == (0, 32)


# --------------------------------------------------------------------------------------------
# The thread-group kernel (local mode, search_group.cl)
# --------------------------------------------------------------------------------------------

#: Small shapes for PoCL (each shape is a build): W = 16 and 32 single pass, and multi-pass
#: at W = 16 so that targets of 17+ residues take several passes.
SMALL_SHAPES = dict(SHAPES=((4, 4), (4, 8)), MULTI_SHAPES=((4, 4),))


@pytest.fixture(scope="module")
def small_group_shapes():
    from dpalign.kernels_cl import search_group

    with pytest.MonkeyPatch.context() as patch:
        for name, value in SMALL_SHAPES.items():
            patch.setattr(search_group, name, value)
        yield


@given(data=st.data())
def test_group_kernel_equals_the_oracle(cl_device, small_group_shapes, data):
    """Every mode and free end, every bucket shape, single and multi-pass, odd buckets (an
    empty partner), empty and length-1 targets, any letters of the matrix: the oracle's
    scores, width 16 where the 16-bit range holds them."""
    scoring, mode, ends, targets, query = _draw_search(data, longest=60, count=30, m=30)
    if data.draw(st.booleans(), label="query inside a target"):
        targets.append(np.concatenate([targets[0], query, targets[-1]]))
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    got = runner.score(query, scoring, mode, ends)
    np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, mode, ends))
    real = np.array([len(t) > 0 for t in targets])
    task = SearchTask.of(scoring, mode, ends)
    if real.any() and task.packable():
        lengths = np.array([len(t) for t in targets])
        low = task.low_ok(len(query), lengths, -30_720 + 1024)
        assert set(got.width[real & low].tolist()) <= {16}
        assert runner._groups


def test_group_kernel_recomputes_wrapped_pairs_in_int32(cl_device, small_group_shapes):
    """A best score past 32,767 is flagged and comes back exact from the int32 kernel."""
    rng = np.random.default_rng(9)
    scoring = Scoring((100, -50), (20, 5))
    query = rng.integers(0, 4, 400).astype(np.uint8)
    targets = [query.copy(), query[:300].copy(), rng.integers(0, 4, 30).astype(np.uint8)]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    ends = free_ends_tuple("local")
    got = runner.score(query, scoring, "local", ends)
    want = _oracle(query, targets, scoring, "local", ends)
    np.testing.assert_array_equal(got.scores, want)
    assert want[0] > 2**15 and want[1] < 31_000
    assert got.width.tolist() == [32, 16, 16] and got.recomputed == 1


def test_group_kernel_is_chosen_where_it_pays(cl_device, small_group_shapes):
    dctx = device_context(cl_device)
    scoring = Scoring("BLOSUM62", (11, 1))
    targets = [np.arange(20, dtype=np.uint8)] * 3
    query = np.arange(10, dtype=np.uint8)
    local = SearchTask.of(scoring, "local", free_ends_tuple("local"))
    glob = SearchTask.of(scoring, "global", free_ends_tuple("global"))
    auto = SearchRunner(dctx, targets)
    assert (auto._group_kernel(local, query) is not None) == dctx.caps.ptx_s16x2
    assert (auto._group_kernel(glob, query) is not None) == dctx.caps.ptx_s16x2
    forced = SearchRunner(dctx, targets, local_kernel="group")
    assert forced._group_kernel(local, query) is not None
    assert forced._group_kernel(glob, query) is not None
    assert SearchRunner(dctx, targets, local_kernel="strip")._group_kernel(local, query) is None
    # A pair table bigger than the device's local memory: the strip kernel, still exact.
    small = dataclasses.replace(dctx, caps=dataclasses.replace(dctx.caps, local_mem=8192))
    forced._groups[forced.ptx].dctx = small
    wide = np.arange(20, dtype=np.uint8)  # 21 table rows x 21 x 21 letter pairs: 37 KB
    assert forced._group_kernel(local, wide) is None
    assert forced._group_kernel(local, np.zeros(10, np.uint8)) is not None  # 2 rows: 3.5 KB
    got = forced.score(wide, scoring, "local", free_ends_tuple("local"))
    np.testing.assert_array_equal(
        got.scores, _oracle(wide, targets, scoring, "local", free_ends_tuple("local"))
    )
    with pytest.raises(OptionError, match="local_kernel"):
        SearchRunner(dctx, targets, local_kernel="fast")


@given(
    codes=st.lists(st.integers(0, 255), max_size=300).map(lambda v: np.array(v, np.uint8)),
    high=st.sampled_from([1, 4, 24, 64, 256]),
)
def test_letters_used_are_the_codes_present(codes, high):
    """letters_used: exactly the byte values present (a bit per code below 64, a boolean
    index above), pieces of the buffer included (a strided view, more than one piece)."""
    from dpalign.kernels_cl.search_group import letters_used

    codes = (codes.astype(np.int64) % high).astype(np.uint8)
    for view in (codes, np.tile(codes, 700)[::3]):
        want = np.zeros(256, bool)
        want[view] = True
        np.testing.assert_array_equal(letters_used(view), want)


def test_buckets_cover_every_target_once():
    from dpalign.kernels_cl.search_group import plan_buckets

    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 3000, 5000)
    shapes = ((4, 16), (8, 16), (16, 16), (16, 32), (32, 32))
    multi = ((16, 16), (32, 32))
    buckets = plan_buckets(lengths, 375, shapes, multi)
    picked = np.concatenate([b.targets for b in buckets])
    assert sorted(picked.tolist()) == list(range(len(lengths)))
    for b in buckets:
        n = lengths[b.targets]
        assert (n <= b.passes * b.W).all()
        assert b.passes == 1 or (b.G, b.R) in multi
        assert (np.diff(n) <= 0).all()  # longest first: partners of similar length
    assert max(b.passes for b in buckets) <= -(-int(lengths.max()) // (16 * 16))
    assert {(b.G, b.R) for b in buckets if b.passes > 1} <= set(multi)


@pytest.mark.parametrize("top", [3000, 40_000, 1 << 25])
def test_a_length_index_plans_as_the_plain_sorts(top):
    """plan_buckets with a LengthIndex (radix sorts of the ranks where they fit 16 bits,
    bincount ranks below 2**24): every target once, each bucket longest first with ties in
    index order, and the same plan as without the index, for every query length."""
    from dpalign.kernels_cl.search_group import LengthIndex, plan_buckets

    rng = np.random.default_rng(top)
    lengths = rng.integers(1, top, 6000)
    lengths[::7] = lengths[3]  # many ties
    index = LengthIndex(lengths)
    for m in (1, 128, 375, 1024):
        buckets = plan_buckets(lengths, m, index=index)
        again = plan_buckets(lengths, m)
        assert [(b.G, b.R, b.passes) for b in buckets] == [(b.G, b.R, b.passes) for b in again]
        for b, c in zip(buckets, again, strict=True):
            np.testing.assert_array_equal(b.targets, c.targets)
            n = lengths[b.targets]
            ties = np.diff(n) == 0
            assert (np.diff(n) <= 0).all() and (np.diff(b.targets)[ties] > 0).all()
        picked = np.concatenate([b.targets for b in buckets])
        assert sorted(picked.tolist()) == list(range(len(lengths)))


def test_small_many_pass_buckets_move_to_the_widest_shape():
    """A narrow multi-pass bucket with few targets is one long dependency chain: its targets
    take the widest multi-pass shape (fewer passes); a big one stays."""
    from dpalign.kernels_cl.search_group import MIN_MULTI_TARGETS, plan_buckets

    lengths = np.array([600] * MIN_MULTI_TARGETS + [1500] * 10)
    shapes = multi = ((16, 32), (32, 32))

    def plan(n):
        return {(b.G, b.R, b.passes): len(b.targets) for b in plan_buckets(n, 256, shapes, multi)}

    assert plan(lengths) == {(16, 32, 2): MIN_MULTI_TARGETS, (32, 32, 2): 10}
    assert plan(lengths[MIN_MULTI_TARGETS - 100 :]) == {(32, 32, 1): 100, (32, 32, 2): 10}


def test_group_kernel_sends_pairs_too_low_for_16_bits_to_int32(cl_device, small_group_shapes):
    """Global pairs whose values may fall below the 16-bit range come back exact, width 32."""
    rng = np.random.default_rng(4)
    scoring = Scoring((1, -1), (400, 300))
    targets = [rng.integers(0, 4, size).astype(np.uint8) for size in (60, 1, 5, 90)]
    query = rng.integers(0, 4, 70).astype(np.uint8)
    ends = free_ends_tuple("global")
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    got = runner.score(query, scoring, "global", ends)
    np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, "global", ends))
    assert got.width[0] == 32 and got.width[1] == 16


def _group_programs(dctx) -> set:
    return {key for key in dctx.programs if key[0] == "search_group.cl"}


@pytest.mark.parametrize("mode", ["local", "global"])
def test_group_builds_do_not_depend_on_the_query(cl_device, small_group_shapes, mode):
    """Queries of other lengths and letter sets (pair tables of other sizes) run on the
    programs already built: one per shape, nothing of the query in the build options; and
    prepare() builds them all before the first query."""
    rng = np.random.default_rng(11)
    scoring = Scoring("BLOSUM62", (11, 1))
    ends = free_ends_tuple(mode)
    targets = [rng.integers(0, 20, size).astype(np.uint8) for size in (1, 7, 16, 30, 40, 3)]
    queries = [
        rng.integers(0, 3, 5).astype(np.uint8),  # 3 letters: a small pair table
        rng.integers(0, 24, 300).astype(np.uint8),  # every letter, another length class
        rng.integers(0, 20, 40).astype(np.uint8),
    ]
    dctx = device_context(cl_device)
    runner = SearchRunner(dctx, targets, local_kernel="group")
    runner.prepare(queries, scoring, mode, ends)
    built = _group_programs(dctx)
    assert built and not any("TAB" in opt or "QMAX" in opt for _, opts in built for opt in opts)
    for query in queries:
        got = runner.score(query, scoring, mode, ends)
        np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, mode, ends))
        assert set(got.width.tolist()) == {16}
    assert _group_programs(dctx) == built  # nothing built per query


def test_global_launches_keep_the_best_only_where_16_bits_may_wrap(cl_device, small_group_shapes):
    """Global modes drop the best H (NO_BEST) where max(s) * m stays under the flag limit
    and keep it where a score may pass 16 bits: both give the oracle's scores, and the pair
    that passes 16 bits is recomputed in int32."""
    from dpalign.kernels_cl.search_group import keeps_best

    blosum, big = Scoring("BLOSUM62", (11, 1)), Scoring((100, -50), (20, 5))
    assert not keeps_best(True, blosum, 2000) and keeps_best(True, blosum, 3000)  # 11 m, 32,692
    assert keeps_best(False, blosum, 5)  # local: the best is the score
    assert not keeps_best(True, big, 300) and keeps_best(True, big, 400)  # 100 m, 32,603
    rng = np.random.default_rng(19)
    hot = rng.integers(0, 4, 400).astype(np.uint8)
    targets = [rng.integers(0, 4, n).astype(np.uint8) for n in (3, 20, 41, 0)] + [hot.copy()]
    dctx = device_context(cl_device)
    runner = SearchRunner(dctx, targets, local_kernel="group")
    for mode in ("global", "semiglobal"):
        ends = free_ends_tuple(mode)
        for query in (hot, hot[:300].copy(), hot[:7].copy()):
            got = runner.score(query, big, mode, ends)
            np.testing.assert_array_equal(got.scores, _oracle(query, targets, big, mode, ends))
            assert (got.width[-1] == 32) == (len(query) == 400)
    options = {opt for _, opts in _group_programs(dctx) for opt in opts}
    assert {"-DNO_BEST=0", "-DNO_BEST=1"} <= options


def test_build_all_builds_each_program_once(cl_device, small_group_shapes):
    from dpalign.kernels_cl import programs

    dctx = device_context(cl_device)
    first = dict(G=4, R=4, WG=128, USE_PTX=0, MULTI=0, GLOBAL_MODE=0)
    second = dict(first, R=8)
    infos = programs.build_all(dctx, "search_group.cl", [first, second, first], threads=3)
    assert len(infos) == 3
    one, _ = programs.build(dctx, "search_group.cl", first)
    assert one is programs.build(dctx, "search_group.cl", dict(first))[0]
    assert one is not programs.build(dctx, "search_group.cl", second)[0]


@pytest.mark.parametrize("kernel", ["group", "strip"])
def test_queries_in_flight_score_as_one_at_a_time(cl_device, small_group_shapes, kernel):
    """score_many (two queries in flight on the group kernel, result buffers per slot)
    gives every query the oracle's scores: empty and length-1 queries, one whose best
    score passes 16 bits (recomputed in int32) between others, more queries than slots."""
    rng = np.random.default_rng(21)
    scoring = Scoring((100, -50), (20, 5))
    ends = free_ends_tuple("local")
    hot = rng.integers(0, 4, 400).astype(np.uint8)
    targets = [rng.integers(0, 4, size).astype(np.uint8) for size in (1, 9, 17, 33, 0, 50)]
    targets.append(hot.copy())
    queries = [rng.integers(0, 4, m).astype(np.uint8) for m in (12, 1, 0, 45, 30)]
    queries.insert(2, hot)
    runner = SearchRunner(device_context(cl_device), targets, local_kernel=kernel)
    many = runner.score_many(queries, scoring, "local", ends)
    for query, got in zip(queries, many, strict=True):
        expected = _oracle(query, targets, scoring, "local", ends)
        np.testing.assert_array_equal(got.scores, expected)
        one = runner.score(query, scoring, "local", ends)
        np.testing.assert_array_equal(got.scores, one.scores)
        np.testing.assert_array_equal(got.width, one.width)
    assert many[2].scores[-1] > 2**15 and many[2].width[-1] == 32


@given(data=st.data())
def test_query_batches_equal_the_oracle(cl_device, small_group_shapes, data):
    """score_block: queries of mixed lengths (up to three plans, so several batches), empty and
    length-1 queries, batches cut at two queries (a batch boundary inside a plan), every
    mode and free end: each query's row is the oracle's, and the same as score() alone."""
    from dpalign.kernels_cl import search_group

    scoring, mode, ends, targets, _ = _draw_search(data, longest=40, count=12, m=2)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="query seed"))
    high = int(max((t.max(initial=0) for t in targets), default=0)) + 1
    lengths = data.draw(st.lists(st.integers(0, 300), min_size=0, max_size=7), label="ms")
    queries = [rng.integers(0, high, m).astype(np.uint8) for m in lengths]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_group, "BATCH", data.draw(st.sampled_from([1, 2, 32])))
        block = runner.score_block(queries, scoring, mode, ends)
    assert block.scores.shape == (len(queries), len(targets))
    for k, query in enumerate(queries):
        np.testing.assert_array_equal(block.scores[k], _oracle(query, targets, scoring, mode, ends))
        one = runner.score(query, scoring, mode, ends)
        np.testing.assert_array_equal(block.width[k], one.width)


def test_query_batches_keep_one_plan_and_local_memory(cl_device, small_group_shapes):
    """Batches hold queries of one plan (a power of two of the length), in length order,
    at most BATCH, and never more than local memory holds at once."""
    from dpalign.kernels_cl import search_group

    rng = np.random.default_rng(5)
    targets = [rng.integers(0, 20, size).astype(np.uint8) for size in (5, 17, 40)]
    dctx = device_context(cl_device)
    group = SearchRunner(dctx, targets, local_kernel="group")._group_kernel(
        SearchTask.of(Scoring("BLOSUM62", (11, 1)), "local", free_ends_tuple("local")),
        targets[0],
    )
    ms = [3, 100, 64, 65, 5, 128, 64, 4, 200]
    queries = [rng.integers(0, 20, m).astype(np.uint8) for m in ms]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_group, "BATCH", 2)
        batches = group.batches(queries)
    assert sorted(k for b in batches for k in b) == list(range(len(ms)))
    for batch in batches:
        assert 1 <= len(batch) <= 2
        assert len({group.plan_key(ms[k]) for k in batch}) == 1
        assert [ms[k] for k in batch] == sorted(ms[k] for k in batch)
    # Every letter but short, and two letters but longer (one plan): each fits alone, the
    # two together (the larger table and the longer row offsets) do not.
    wide, long = np.arange(20, dtype=np.uint8)[rng.permutation(100) % 20], np.zeros(128, np.uint8)
    long[::2] = 1
    need = group.geometry(wide)[2]
    assert group.geometry(long)[2] < need
    group.dctx = dataclasses.replace(dctx, caps=dataclasses.replace(dctx.caps, local_mem=need + 50))
    assert group.fits(wide) and group.fits(long) and not group.batch_fits([wide, long])
    assert group.batches([long, wide, wide]) == [[1, 2], [0]]


def test_query_batches_recompute_wrapped_pairs_per_query(cl_device, small_group_shapes):
    """In a batch, only the query whose best score passes 16 bits is recomputed in int32,
    for the targets it wrapped on; the others keep width 16."""
    rng = np.random.default_rng(31)
    scoring = Scoring((100, -50), (20, 5))
    ends = free_ends_tuple("local")
    hot = rng.integers(0, 4, 400).astype(np.uint8)
    targets = [hot.copy(), rng.integers(0, 4, 30).astype(np.uint8), np.zeros(0, np.uint8)]
    queries = [rng.integers(0, 4, 300).astype(np.uint8), hot, hot[:260].copy()]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    block = runner.score_block(queries, scoring, "local", ends)
    for k, query in enumerate(queries):
        np.testing.assert_array_equal(
            block.scores[k], _oracle(query, targets, scoring, "local", ends)
        )
    assert block.width[1].tolist() == [32, 16, 64] and block.recomputed.tolist() == [0, 1, 0]
    assert block.width[0].tolist() == [16, 16, 64]
    empty = runner.score_block([], scoring, "local", ends)
    assert empty.scores.shape == (0, 3) and empty.launches == 0


def test_a_database_from_one_buffer_is_searched_in_that_buffer(cl_device):
    """A database made from one buffer of codes (as the command reads one) gives the device
    that buffer as its one ragged block, targets in their own order (no gather into length
    order); hits, and those of a view of it, are the reference's."""
    from dpalign.search import Database, search_many

    rng = np.random.default_rng(9)
    scoring = Scoring("BLOSUM62", (11, 1))
    lengths = rng.integers(0, 40, 30)
    lengths[4] = 0
    residues = rng.integers(0, 20, int(lengths.sum())).astype(np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    names = [f"t{k}" for k in range(len(lengths))]
    db = Database.from_codes(residues, offsets, names, sub_score=scoring)
    device = get_backend("opencl", device=cl_device)
    (block,) = db.blocks(scoring.alphabet, db.layout_width(device), ragged=True)
    assert np.shares_memory(block.codes, residues) and block.ids.tolist() == list(range(30))
    queries = [residues[offsets[k] : offsets[k] + 15] for k in (1, 7)] + [residues[:3]]
    for view in (db, db[3:20]):
        got = search_many(queries, view, top=5, mode="local", scoring=scoring, backend=device)
        want = search_many(queries, view, top=5, scoring=scoring, backend="reference")
        assert [[(h.target, h.score) for h in hits] for hits in got] == [
            [(h.target, h.score) for h in hits] for hits in want
        ]


@pytest.mark.parametrize("mode", ["local", "global"])
def test_a_stream_of_chunks_scores_each_chunk_as_alone(cl_device, small_group_shapes, mode):
    """score_stream: chunks in one pipeline (batches of one and two queries, so a chunk's
    batches and the next chunk's are in flight together), an empty chunk, a chunk of empty
    queries only (nothing for the group kernel), a query whose best passes 16 bits (its
    pairs recomputed in int32 when its chunk closes): each chunk's result is score_block's
    of that chunk alone, and the oracle's; chunks are taken as the pipeline reaches them."""
    from dpalign.kernels_cl import search_group

    rng = np.random.default_rng(17)
    scoring = Scoring((100, -50), (20, 5))
    ends = free_ends_tuple(mode)
    hot = rng.integers(0, 4, 400).astype(np.uint8)
    targets = [rng.integers(0, 4, size).astype(np.uint8) for size in (1, 9, 0, 33, 50)]
    targets.append(hot.copy())
    q = [rng.integers(0, 4, m).astype(np.uint8) for m in (12, 1, 45, 30, 7, 200)]
    empty = np.zeros(0, np.uint8)
    chunks = [[q[0], q[1], q[2]], [], [empty, empty], [hot, q[3]], [q[4]], [q[5], q[2]]]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    taken = []

    def source():
        for k, chunk in enumerate(chunks):
            taken.append(k)
            yield chunk

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_group, "BATCH", 2)
        stream = runner.score_stream(source(), scoring, mode, ends)
        first = next(stream)
        assert taken[:4] == [0, 1, 2, 3]  # chunk 3's first batch was in flight: two ahead
        results = [first, *stream]
        alone = [runner.score_block(chunk, scoring, mode, ends) for chunk in chunks]
    assert len(results) == len(chunks)
    for chunk, got, want in zip(chunks, results, alone, strict=True):
        assert got.scores.shape == (len(chunk), len(targets))
        np.testing.assert_array_equal(got.scores, want.scores)
        np.testing.assert_array_equal(got.width, want.width)
        np.testing.assert_array_equal(got.recomputed, want.recomputed)
        for k, query in enumerate(chunk):
            np.testing.assert_array_equal(
                got.scores[k], _oracle(query, targets, scoring, mode, ends)
            )
    assert results[3].width[0, -1] == 32  # the hot pair, recomputed in int32


@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_search_many_on_query_batches_equals_the_reference(cl_device, small_group_shapes, mode):
    """The whole search on the batched group kernel (more queries than one call takes, mixed
    lengths, an empty query and an empty target): the reference backend's hits."""
    from dpalign.kernels_cl import backend as backend_module
    from dpalign.search import Database, search_many

    rng = np.random.default_rng(41)
    letters = np.array(list("ARNDCQEGHILKMFPSTWYV"))
    texts = ["".join(rng.choice(letters, n)) for n in rng.integers(1, 50, 40)] + [""]
    queries = ["".join(rng.choice(letters, n)) for n in (0, 1, 5, 30, 31, 64, 65, 90, 3)]
    queries.insert(4, texts[7][3:20])  # a real hit
    scoring = Scoring("BLOSUM62", (11, 1))
    db = Database(texts, sub_score=scoring)
    device = get_backend("opencl", device=cl_device, search_kernel="group")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend_module, "QUERY_CHUNK_MAX", 4)  # three calls
        got = search_many(queries, db, top=6, mode=mode, scoring=scoring, backend=device)
    want = search_many(queries, db, top=6, mode=mode, scoring=scoring, backend="reference")
    assert [[(h.target, h.score) for h in hits] for hits in got] == [
        [(h.target, h.score) for h in hits] for hits in want
    ]
    assert device._search_cached[1]._groups  # the group kernel ran


def test_prepare_search_lays_out_without_building(cl_device, small_group_shapes):
    """prepare_search (what the command runs while the warm-up builds on another thread):
    the targets on the device and the bucket layouts started, no program built; the search
    then uses that runner and gives the reference's hits."""
    from dpalign.search import Database, prepare_search, search_many

    rng = np.random.default_rng(27)
    scoring = Scoring("BLOSUM62", (11, 1))
    texts = ["".join(rng.choice(list("ARNDCQEGHILKMFPSTWYV"), n)) for n in (3, 17, 40, 9, 60)]
    db = Database(texts, sub_score=scoring)
    queries = [scoring.encode(q) for q in ("ARNDCQ", "W" * 20, texts[4][5:50])]
    device = get_backend("opencl", device=cl_device, search_kernel="group")
    dctx = device_context(cl_device)
    before = _group_programs(dctx)
    prepare_search(queries, db, scoring, "global", device)
    assert _group_programs(dctx) == before  # nothing built
    runner = device._search_cached[1]
    group = next(iter(runner._groups.values()))
    assert group._packed or group._packing  # layouts made or under way
    got = search_many(queries, db, top=3, mode="global", scoring=scoring, backend=device)
    assert device._search_cached[1] is runner
    want = search_many(queries, db, top=3, mode="global", scoring=scoring, backend="reference")
    assert [[(h.index, h.score) for h in q] for q in got] == [
        [(h.index, h.score) for h in q] for q in want
    ]


def test_prepare_search_hands_later_chunks_to_a_thread(cl_device, small_group_shapes):
    """More queries than a chunk, of every plan length: prepare_search prepares the first
    chunk and leaves the others' plans to a thread; the search, started at once, gives the
    reference's hits, and every plan the queries take is made once."""
    from dpalign.kernels_cl import backend as backend_module
    from dpalign.kernels_cl.search_group import PLAN_LENGTHS
    from dpalign.search import Database, prepare_search, search_many

    rng = np.random.default_rng(5)
    scoring = Scoring("BLOSUM62", (11, 1))
    letters = list("ARNDCQEGHILKMFPSTWYV")
    texts = ["".join(rng.choice(letters, n)) for n in rng.integers(1, 80, 30)]
    db = Database(texts, sub_score=scoring)
    lengths = (1100, 700, 200, 150, 90, 40, 12, 3)  # plans 1024, 256 and 128
    queries = [scoring.encode("".join(rng.choice(letters, n))) for n in lengths]
    device = get_backend("opencl", device=cl_device, search_kernel="group")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend_module, "QUERY_CHUNK_MAX", 2)
        prepare_search(queries, db, scoring, "local", device)
        got = search_many(queries, db, top=4, mode="local", scoring=scoring, backend=device)
    want = search_many(queries, db, top=4, mode="local", scoring=scoring, backend="reference")
    assert [[(h.index, h.score) for h in q] for q in got] == [
        [(h.index, h.score) for h in q] for q in want
    ]
    group = next(iter(device._search_cached[1]._groups.values()))
    assert set(group._plans) == set(PLAN_LENGTHS)


@pytest.mark.parametrize("mode", ["local", "global"])
def test_warm_up_builds_what_the_search_takes(cl_device, small_group_shapes, mode):
    """The backend's warm-up (run while a command reads its files) builds every shape of
    the mode before the targets are known: the search then builds nothing more."""
    from dpalign.kernels_cl.search_group import MULTI_SHAPES, SHAPES
    from dpalign.search import Database, search_many

    rng = np.random.default_rng(8)
    scoring = Scoring("BLOSUM62", (11, 1))
    device = get_backend("opencl", device=cl_device, search_kernel="group")
    dctx = device_context(cl_device)
    before = _group_programs(dctx)
    device.warm_up(Task("pairwise", scoring, mode, free_ends_tuple(mode)))
    built = _group_programs(dctx)
    glob = f"-DGLOBAL_MODE={int(mode != 'local')}"
    nobest = f"-DNO_BEST={int(mode != 'local')}"  # BLOSUM62 queries of ~1,000: no best H
    mine = {key for key in built if glob in key[1] and nobest in key[1]}
    shapes = {(g, r, False) for g, r in SHAPES} | {(g, r, True) for g, r in MULTI_SHAPES}
    assert len(mine) == len(shapes)
    assert before <= built
    texts = ["".join(rng.choice(list("ARNDCQEGHILKMFPSTWYV"), n)) for n in (3, 17, 40, 9)]
    db = Database(texts, sub_score=scoring)
    search_many(["ARNDCQ", "W" * 20], db, top=2, mode=mode, scoring=scoring, backend=device)
    assert _group_programs(dctx) == built
    strip = get_backend("opencl", device=cl_device, search_kernel="strip")
    strip.warm_up(Task("pairwise", scoring, mode, free_ends_tuple(mode)))
    assert _group_programs(dctx) == built  # the strip kernel takes none of them


def test_programs_built_in_child_processes_load_from_the_disk_cache(
    cl_device, tmp_path, monkeypatch
):
    """build_in_processes: the programs not cached yet are compiled by child processes (a
    context each) into the disk cache, from which build() then loads them; what is cached
    already is given to no child."""
    import uuid

    from dpalign import config
    from dpalign.kernels_cl import programs
    from dpalign.kernels_cl.search_group import group_defines

    monkeypatch.setattr(config, "OPENCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DPALIGN_CACHE_DIR", str(tmp_path))  # the children's
    dctx = device_context(cl_device)
    tag = uuid.uuid4().hex[:8]  # options no earlier test built (nor any memoised program)
    defines = [
        {**group_defines(4, r, False, False, False), "DPALIGN_TEST_TAG": f"0x{tag}"} for r in (2, 4)
    ]
    assert not any(programs.cached(dctx, "search_group.cl", d) for d in defines)
    assert programs.build_in_processes(dctx, "search_group.cl", defines, 2) == 2
    assert all(programs.cached(dctx, "search_group.cl", d) for d in defines)
    infos = programs.build_all(dctx, "search_group.cl", defines, 2)
    assert [info.origin for info in infos] == ["disk", "disk"]
    assert programs.build_in_processes(dctx, "search_group.cl", defines, 2) == 0


def test_start_builds_leaves_a_share_to_the_caller(cl_device, tmp_path, monkeypatch):
    """start_builds(keep=True) (what a first run's warm-up does on a GPU): the children take
    all but the caller's share, from the device's capabilities alone (no context); once the
    caller has built its share and the children are done, every program loads from memory
    or the disk cache."""
    import uuid

    from dpalign import config
    from dpalign.kernels_cl import programs
    from dpalign.kernels_cl.search_group import group_defines

    monkeypatch.setattr(config, "OPENCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DPALIGN_CACHE_DIR", str(tmp_path))
    dctx = device_context(cl_device)
    tag = uuid.uuid4().hex[:8]
    defines = [
        {**group_defines(4, r, False, False, False), "DPALIGN_TEST_TAG": f"0x{tag}"}
        for r in (2, 4, 6)
    ]
    children, mine = programs.start_builds(
        dctx.caps, dctx.ident, "search_group.cl", defines, 2, keep=True
    )
    assert children is not None and children.given == 2 and len(mine) == 1
    assert [i.origin for i in programs.build_all(dctx, "search_group.cl", mine, 2)] == ["compiled"]
    assert children.wait() == 2
    # each child's times: start, imports, context, one build (for -v), in order
    assert [len(t) for t in children.times] == [4, 4]
    assert all(children.started <= t[0] <= t[1] <= t[2] <= t[3] for t in children.times)
    assert children.describe().count("builds") == 2
    origins = [i.origin for i in programs.build_all(dctx, "search_group.cl", defines, 2)]
    assert sorted(origins) == ["disk", "disk", "memory"]
    # everything cached: nothing for children, nothing left
    assert programs.start_builds(dctx.caps, dctx.ident, "search_group.cl", defines, 2) == (
        None,
        [],
    )


def test_warm_up_splits_a_first_runs_builds_with_children(
    cl_device, small_group_shapes, tmp_path, monkeypatch
):
    """On a GPU (here PoCL taken for one) a first run's warm-up hands all but its own share
    of the missing programs to config.OPENCL_BUILD_PROCESSES children; afterwards every
    program of the mode is built in this process (its own share) or loaded (the rest)."""
    from dpalign import config
    from dpalign.kernels_cl import capabilities as caps_module
    from dpalign.kernels_cl import programs
    from dpalign.kernels_cl.search_group import every_shape_defines

    monkeypatch.setattr(config, "OPENCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DPALIGN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(config, "OPENCL_BUILD_PROCESSES", 2)
    monkeypatch.setattr(caps_module.Capabilities, "is_cpu", property(lambda self: False))
    started = []
    real = programs.start_builds

    def spy(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(programs, "start_builds", spy)
    scoring = Scoring((1, -1), (3, 1))  # the default best-keeping rule: one variant
    device = get_backend("opencl", device=cl_device, search_kernel="group")
    device.warm_up(Task("pairwise", scoring, "local", free_ends_tuple("local")))
    ((children, mine),) = started
    dctx = device_context(cl_device)
    defines = every_shape_defines(False, dctx.caps.ptx_s16x2)
    assert children is not None and children.given + len(mine) == len(defines) == 3
    assert all(programs.cached(dctx, "search_group.cl", d) for d in defines)
    # the children's binaries (this process's share may have been built by an earlier test)
    assert len(list(tmp_path.glob("search_group-*.bin"))) >= children.given >= 1


@pytest.mark.parametrize("glob", [False, True])
def test_preload_launches_every_program_on_no_work(cl_device, small_group_shapes, glob):
    """preload (a GPU warm-up's last step): every shape's program launched once on no
    pair and an empty query returns (single and multi-pass, both modes), the bucket queues
    are made once per context, and a search afterwards gives the oracle's scores."""
    from dpalign.kernels_cl.search_group import (
        QUEUES,
        every_shape_defines,
        group_queues,
        preload,
    )

    dctx = device_context(cl_device)
    defines = every_shape_defines(glob, dctx.caps.ptx_s16x2, glob)
    preload(dctx, defines)
    queues = group_queues(dctx, QUEUES)
    assert len(queues) == QUEUES and queues[0] is dctx.queue
    assert group_queues(dctx, QUEUES) == queues  # made once
    rng = np.random.default_rng(12)
    scoring = Scoring("BLOSUM62", (11, 1))
    mode = "global" if glob else "local"
    ends = free_ends_tuple(mode)
    targets = [rng.integers(0, 20, n).astype(np.uint8) for n in (3, 40, 17, 70)]
    query = rng.integers(0, 20, 25).astype(np.uint8)
    got = SearchRunner(dctx, targets, local_kernel="group").score(query, scoring, mode, ends)
    np.testing.assert_array_equal(got.scores, _oracle(query, targets, scoring, mode, ends))


@pytest.mark.parametrize("mode", ["local", "global"])
def test_page_locked_results_equal_the_oracle_and_are_reused(
    cl_device, small_group_shapes, monkeypatch, mode
):
    """config.OPENCL_SEARCH_PINNED (here PoCL taken for a GPU): batches' results come back
    in page-locked buffers handed back once gathered: the oracle's scores, and a second
    pass over the same batches reuses the first pass's buffers."""
    from dpalign import config
    from dpalign.kernels_cl import capabilities as caps_module
    from dpalign.kernels_cl import search_group

    monkeypatch.setattr(config, "OPENCL_SEARCH_PINNED", True)
    monkeypatch.setattr(caps_module.Capabilities, "is_cpu", property(lambda self: False))
    rng = np.random.default_rng(21)
    scoring = Scoring("BLOSUM62", (11, 1))
    ends = free_ends_tuple(mode)
    targets = [rng.integers(0, 20, n).astype(np.uint8) for n in rng.integers(1, 60, 25)]
    queries = [rng.integers(0, 20, n).astype(np.uint8) for n in (5, 30, 31, 12, 40)]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_module, "FLIGHT", 2)
        patch.setattr(search_group, "BATCH", 2)  # three batches, two in flight
        first = runner.score_block(queries, scoring, mode, ends)
        group = next(iter(runner._groups.values()))
        pool = len(group._pinned_free)
        again = runner.score_block(queries, scoring, mode, ends)
    # every buffer is back in the pool, so its size is how many were ever made: at most one
    # a batch in the concurrent window (3 batches), not one for each of the 6 batches
    assert 1 <= pool <= len(group._pinned_free) <= 3
    for k, query in enumerate(queries):
        want = _oracle(query, targets, scoring, mode, ends)
        np.testing.assert_array_equal(first.scores[k], want)
        np.testing.assert_array_equal(again.scores[k], want)


def _search_buffers(group) -> tuple:
    """Ids of every buffer a GroupSearch's batches take (results, inputs, pass columns,
    page-locked results)."""
    return (
        {slot: id(buf) for slot, buf in group._outs.items()},
        {slot: [id(k[1]) for k in kept] for slot, kept in group._inputs.items()},
        id(group._carry),
        sorted(id(buf) for buf, _ in group._pinned_free),
    )


@pytest.mark.parametrize("submit", ["v0", "carry", "slots", "rect"])
@pytest.mark.parametrize("upload", ["create", "copy"])
@pytest.mark.parametrize("mode", ["local", "global"])
def test_every_submit_mode_scores_as_the_oracle(
    cl_device, small_group_shapes, monkeypatch, submit, upload, mode
):
    """GroupSearch.submit_mode / upload_mode (here PoCL taken for a GPU, so that results go
    to page-locked memory): batches of one plan and several (multi-pass buckets, an odd
    bucket, three slots in flight) give the oracle's scores. In the modes that reserve, the
    search prepared as a command prepares it (its longest queries first) makes no buffer
    after the reservation, over two passes."""
    from dpalign.kernels_cl import capabilities as caps_module
    from dpalign.kernels_cl import search_group

    monkeypatch.setattr(caps_module.Capabilities, "is_cpu", property(lambda self: False))
    rng = np.random.default_rng(23)
    scoring = Scoring("BLOSUM62", (11, 1))
    ends = free_ends_tuple(mode)
    targets = [rng.integers(0, 20, n).astype(np.uint8) for n in rng.integers(1, 90, 27)]
    queries = [rng.integers(0, 20, n).astype(np.uint8) for n in (5, 30, 31, 12, 40, 200, 1)]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_group, "BATCH", 2)
        patch.setattr(search_group.config, "OPENCL_SEARCH_SUBMIT", submit)
        patch.setattr(search_group.config, "OPENCL_SEARCH_UPLOAD", upload)
        runner.prepare(queries, scoring, mode, ends, build=False)
        group = next(iter(runner._groups.values()))
        assert (group.submit_mode, group.upload_mode) == (submit, upload)
        reserves = submit in ("slots", "rect")
        assert (group._reserving is not None) == reserves
        if reserves:
            group._reserving.result()
            assert sorted(group._inputs) == sorted(group._outs) == [0, 1, 2]
            assert len(group._pinned_free) == group.pool == 7
        reserved = _search_buffers(group)
        first = runner.score_block(queries, scoring, mode, ends)
        again = runner.score_block(queries, scoring, mode, ends)
    for k, query in enumerate(queries):
        want = _oracle(query, targets, scoring, mode, ends)
        np.testing.assert_array_equal(first.scores[k], want)
        np.testing.assert_array_equal(again.scores[k], want)
    if reserves:
        assert _search_buffers(group) == reserved
    else:
        assert not group._inputs


def test_a_batch_sizes_its_pass_columns_once(cl_device, small_group_shapes, monkeypatch):
    """submit_mode "carry" (and those after it): the pass-column buffer is grown once per
    batch, before its launches, to its widest multi-pass launch, and the buffer it replaces
    stays referenced by the batch until it is collected."""
    from dpalign.kernels_cl import search_group

    rng = np.random.default_rng(29)
    scoring = Scoring("BLOSUM62", (11, 1))
    ends = free_ends_tuple("global")
    targets = [rng.integers(0, 20, n).astype(np.uint8) for n in (3, 17, 40, 70, 90, 33, 65)]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    task = search_module.SearchTask.of(scoring, "global", ends)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_group.config, "OPENCL_SEARCH_SUBMIT", "carry")
        group = runner._group_kernel(task, rng.integers(0, 20, 10).astype(np.uint8))
        assert any(b.passes > 1 for b in group._lanes(10).buckets)
        calls = []
        grow = group._carry_buffer
        patch.setattr(group, "_carry_buffer", lambda *a, **k: calls.append(a) or grow(*a, **k))
        small = group.submit([rng.integers(0, 20, 10).astype(np.uint8)], task)
        before = group._carry
        big = group.submit([rng.integers(0, 20, 40).astype(np.uint8)], task, slot=1)
        assert len(calls) == 2  # one per batch, not one per launch
        assert group._carry is not before and big["inputs"][-1] is before  # kept, retired
        for pending in (small, big):
            assert group.collect(pending).values.shape[:2] == (1, len(targets))


def test_a_traced_search_records_every_batch(cl_device, small_group_shapes):
    """GroupSearch.trace (bench/search_submit_probe.py): each collected batch's submit steps
    in order, one launch profile and one "enqueue" mark per launch, the launcher's wait and
    the gather; the layouts' times."""
    from dpalign.kernels_cl import search_group

    rng = np.random.default_rng(31)
    scoring = Scoring("BLOSUM62", (11, 1))
    ends = free_ends_tuple("local")
    targets = [rng.integers(0, 20, n).astype(np.uint8) for n in rng.integers(1, 60, 20)]
    queries = [rng.integers(0, 20, n).astype(np.uint8) for n in (5, 30, 31, 12, 40)]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    group = runner._group_kernel(search_module.SearchTask.of(scoring, "local", ends), queries[0])
    group.trace = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_group, "BATCH", 2)
        runner.score_block(queries, scoring, "local", ends)
    assert len(group.trace) == 3
    for batch in group.trace:
        labels = [label for label, _ in batch["marks"]]
        times = [t for _, t in batch["marks"]]
        assert labels[0] == "start" and times == sorted(times)
        assert labels.count("enqueue") == len(batch["events"]) == len(batch["buckets"])
        assert all(q <= s <= b <= e for q, s, b, e in batch["events"])
        assert batch["wait"][0] <= batch["wait"][1] <= batch["gather"][1]
    assert group.layout_trace and all(a <= b <= c for a, b, c, _ in group.layout_trace)


def test_a_failed_reservation_leaves_the_batches_to_make_their_buffers(
    cl_device, small_group_shapes, monkeypatch
):
    """GroupSearch.reserve failing (device or page-locked memory exhausted, say) is logged by
    the first submit, and the batches make what they need: the oracle's scores."""
    from dpalign.errors import DpalignError
    from dpalign.kernels_cl import search_group

    def fail(self, *args):
        raise DpalignError("no memory for the reservation")

    monkeypatch.setattr(search_group.GroupSearch, "reserve", fail)
    rng = np.random.default_rng(37)
    scoring = Scoring("BLOSUM62", (11, 1))
    ends = free_ends_tuple("local")
    targets = [rng.integers(0, 20, n).astype(np.uint8) for n in rng.integers(1, 60, 20)]
    queries = [rng.integers(0, 20, n).astype(np.uint8) for n in (5, 30, 31, 12, 40)]
    runner = SearchRunner(device_context(cl_device), targets, local_kernel="group")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_group, "BATCH", 2)
        runner.prepare(queries, scoring, "local", ends, build=False)
        block = runner.score_block(queries, scoring, "local", ends)
    for k, query in enumerate(queries):
        np.testing.assert_array_equal(
            block.scores[k], _oracle(query, targets, scoring, "local", ends)
        )
