"""Long pairs: block pruning's lower bounds reach the traceback safely, and every traced path is
re-scored against the sequences before it is returned (a wrong path is an error, never an
alignment).

The pruning bug these tests pin down: a pruned device tile leaves H = 0 in its borders and
checkpoints (a lower bound), and the traceback's CPU recomputations ran in 16-bit lanes relative
to each CPU tile's corner H. Where a corner was such a 0 and the path beside it scored above
2^15, the path's values were clamped and the traceback walked through garbage: same score
reported, a path scoring less (100 kb, default scoring: 83,213 reported, 82,930 traced).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pairwise_cases import cases, texts

from dpalign import longpair, reference
from dpalign.errors import InternalError
from dpalign.gcups import RunStats
from dpalign.longpair import Tiling, align_long, check_path, path_score, plan_lanes
from dpalign.scoring import Scoring

# Scores past 2^15 in a pair of 1,000 (CPU tiles of 32 x 16 still take 16-bit lanes), device
# tiles of 8 x 8 (tiles beside the path pruned), every level recomputed (leaf_bytes=0): the
# smallest shape found where the unfixed code traced a wrong path for every seed tried (20 of
# 20; at 800 residues none, at 870 19 of 20).
PRUNE_SCORING = Scoring((99, -99), (0, 198))
PRUNE_LENGTH = 1000


def _prune_tiling(m: int, n: int) -> Tiling:
    return Tiling(
        tile_rows=32,
        tile_cols=16,
        blocks=4,
        leaf_rows=4,
        leaf_cols=4,
        device_cells=m * n,  # the forward pass on the device, every recomputation on the CPU
        device_tile=(8, 2, 4),
        leaf_bytes=0,
    )


def _similar_pair(seed: int):
    """``a`` random, ``b`` its first 980 residues with 20% redrawn: one long diagonal."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, PRUNE_LENGTH).astype(np.uint8)
    b = a[: PRUNE_LENGTH - 20].copy()
    redrawn = rng.random(b.size) < 0.2
    b[redrawn] = rng.integers(0, 4, int(redrawn.sum()))
    return a, b


def _pruned(a, b, cl_device, stats=None):
    return align_long(
        a,
        b,
        PRUNE_SCORING,
        "local",
        tiling=_prune_tiling(len(a), len(b)),
        backend="opencl",
        device=cl_device,
        prune=True,
        stats=stats,
    )


def test_pruned_traceback_is_the_oracles_past_sixteen_bits(cl_device):
    a, b = _similar_pair(0)
    tiling = _prune_tiling(len(a), len(b))
    # the shape must still choose 16-bit lanes when not pruning, or this test tests nothing
    assert plan_lanes(PRUNE_SCORING, len(a), len(b), "local", tiling).relative
    stats = RunStats()
    got = _pruned(a, b, cl_device, stats)
    scoring = PRUNE_SCORING
    want = reference.pairwise_align(
        a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, "local", (False,) * 4
    )
    assert want.score > 2**15
    assert got == want
    assert any("pruning skipped" in note for note in stats.notes)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_pruned_traceback_equals_the_unpruned_one(cl_device, seed):
    """Any seed: the CPU's unpruned path (16-bit lanes, identical to the oracle elsewhere)."""
    a, b = _similar_pair(seed)
    tiling = _prune_tiling(len(a), len(b))
    want = align_long(a, b, PRUNE_SCORING, "local", tiling=tiling)
    assert _pruned(a, b, cl_device) == want


@given(data=st.data())
def test_pruned_forward_pass_with_cpu_recomputations(cl_device, data):
    """Small pairs, any scoring: the forward pass pruned on the device, every recomputation of
    the traceback on the CPU (the earlier pruning tests recomputed on the device only)."""
    from pairwise_cases import draw_long_pair

    scorings = [((1, -1), 2), ((2, -3), (5, 2)), ("BLOSUM62", (11, 1))]
    scoring, a, b = draw_long_pair(data, scorings, 90)
    m, n = len(a), len(b)
    tiling = Tiling(
        tile_rows=data.draw(st.integers(1, 8), label="cpu tile rows"),
        tile_cols=data.draw(st.integers(1, 8), label="cpu tile cols"),
        blocks=3,
        leaf_rows=4,
        leaf_cols=4,
        device_cells=m * n,
        device_tile=(data.draw(st.integers(1, 6), label="device tile rows"), 2, 2),
        leaf_bytes=data.draw(st.sampled_from([0, None]), label="leaf_bytes"),
    )
    got = align_long(
        a, b, scoring, "local", tiling=tiling, backend="opencl", device=cl_device, prune=True
    )
    want = reference.pairwise_align(
        a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend, "local", (False,) * 4
    )
    assert got == want


@settings(max_examples=60, deadline=None)
@given(case=cases(), data=st.data())
def test_path_score_of_the_oracles_alignments(case, data):
    """The check's re-scoring gives the oracle's score and end for every mode and free ends
    (free end gaps are not in the ops; penalised ones are): it never refuses a right path."""
    a = case.scoring.encode(data.draw(texts(case.letters, 0, 30), label="a"))
    b = case.scoring.encode(data.draw(texts(case.letters, 0, 30), label="b"))
    s = case.scoring
    if s.kernel_problem() is not None:
        return  # schemes the long-pair kernels refuse
    r = reference.pairwise_align(a, b, s.matrix, s.gap_open, s.gap_extend, case.mode, case.ends)
    ops = np.frombuffer(r.ops.encode("ascii"), np.uint8)
    got = path_score(ops, a, b, r.a_start, r.b_start, s.matrix, s.gap_open, s.gap_extend)
    assert got == (r.score, r.a_end, r.b_end, True)
    check_path(r, a, b, s, case.mode)


def _corrupt(result, how: str):
    ops = result.ops
    k = ops.index("=") if "=" in ops else None
    if how == "gap pair":  # one match column becomes a deletion and an insertion
        ops = ops[:k] + "DI" + ops[k + 1 :]
    elif how == "letter":  # a match called a mismatch (same score)
        ops = ops[:k] + "X" + ops[k + 1 :]
    elif how == "short":  # one column lost: the path ends before its reported end
        ops = ops[:-1]
    else:  # one column too many: past the end of a
        ops = ops + "D"
    return dataclasses.replace(result, ops=ops)


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
@pytest.mark.parametrize("how", ["gap pair", "letter", "short", "past the end"])
def test_a_corrupted_path_is_an_internal_error(monkeypatch, mode, how):
    scoring = Scoring((2, -3), (5, 2))
    rng = np.random.default_rng(4)
    a = rng.integers(0, 4, 300).astype(np.uint8)
    b = a.copy()
    b[::7] = (b[::7] + 1) % 4
    real = longpair._Aligner.finish
    monkeypatch.setattr(
        longpair._Aligner,
        "finish",
        lambda self, *args: _corrupt(real(self, *args), how),
    )
    tiling = Tiling(tile_rows=16, tile_cols=16, leaf_rows=8, leaf_cols=8)
    expected = {
        "gap pair": "scores .* against the sequences, not its reported",
        "letter": "marks a pair of residues",
        "short": "ends at",
        "past the end": "runs past the end",
    }[how]
    with pytest.raises(InternalError, match=f"internal error: .*300 x 300 .*{expected}"):
        align_long(a, b, scoring, mode, tiling=tiling)
    monkeypatch.setattr(longpair._Aligner, "finish", real)
    align_long(a, b, scoring, mode, tiling=tiling)  # the real path passes the check


def test_the_command_names_the_pair_and_writes_nothing(files, capsys, monkeypatch, tmp_path):
    from cli_helpers import run_cli

    real = longpair._Aligner.finish
    monkeypatch.setattr(
        longpair._Aligner, "finish", lambda self, *args: _corrupt(real(self, *args), "gap pair")
    )
    rng = np.random.default_rng(5)
    seq = "".join(np.array(list("ACGT"))[rng.integers(0, 4, 300)])
    fa = files("a.fa", f">query one\n{seq}\n")
    fb = files("b.fa", f">chr1\n{seq[10:290]}\n")  # 84,000 cells: the long-pair path
    out = tmp_path / "out.sam"
    code, _, err = run_cli(
        [
            "align",
            fa,
            fb,
            "--mode",
            "local",
            "--backend",
            "numba",
            "--format",
            "sam",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code != 0 and not out.exists()
    assert "A record 'query' with B record 'chr1': internal error" in err
