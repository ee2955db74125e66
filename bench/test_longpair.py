"""Long pairs on the CPU: ``align_long`` against parasail and against a full-matrix alignment.

Run: ``PYTHONPATH=$PWD pytest bench/test_longpair.py --benchmark-only`` (add ``-m "not slow"``
to skip the 100 kb pair). GCUPS are in each case's ``extra_info``: cells / best (minimum)
seconds, the figure least disturbed by other work on a shared machine.

Peers use the same pair and the same scoring: NUC.4.4 with a gap of length k costing 10 + k,
which is parasail's ``open=11, extend=1`` (parasail counts the first gap position in "open");
their scores are checked equal to ours. parasail's functions run on one thread.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpalign.longpair import Tiling, align_full, align_long
from dpalign.scoring import Scoring

SCORING = Scoring("NUC.4.4", (10, 1))
OPEN, EXTEND = SCORING.gap_open + SCORING.gap_extend, SCORING.gap_extend
SIZES = [pytest.param(10_000, id="10kb"), pytest.param(100_000, id="100kb", marks=pytest.mark.slow)]
PARASAIL = {
    "global": ["nw_scan_32", "nw_striped_32", "nw_diag_32"],
    "local": ["sw_scan_32", "sw_striped_32", "sw_diag_32"],
}
_PAIRS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def related_pair(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two DNA sequences of about n bases: 10 % substitutions, an insertion and a deletion."""
    if n not in _PAIRS:
        rng = np.random.default_rng(seed)
        a = rng.integers(0, 4, n).astype(np.uint8)
        b = a.copy()
        changed = rng.random(n) < 0.1
        b[changed] = rng.integers(0, 4, int(changed.sum()))
        k = n // 100
        b = np.concatenate([b[: n // 3], rng.integers(0, 4, k).astype(np.uint8), b[n // 3 :]])
        b = np.concatenate([b[: 2 * n // 3], b[2 * n // 3 + k :]])
        _PAIRS[n] = a, b
    return _PAIRS[n]


def _text(codes: np.ndarray) -> str:
    letters = np.frombuffer(SCORING.alphabet.letters.encode(), np.uint8)
    return letters[codes].tobytes().decode()


def _record(benchmark, cells: int, **info) -> None:
    seconds = benchmark.stats.stats.min
    benchmark.extra_info.update(cells=cells, gcups=round(cells / seconds / 1e9, 3), **info)


@pytest.mark.parametrize("mode", ["global", "local"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("traceback", [False, True], ids=["score", "trace"])
@pytest.mark.parametrize("n", SIZES)
def test_align_long(benchmark, n, traceback, threads, mode):
    a, b = related_pair(n)
    align_long(a[:3000], b[:3000], SCORING, mode, traceback=traceback, threads=threads)
    result = benchmark.pedantic(
        align_long,
        args=(a, b, SCORING, mode),
        kwargs={"traceback": traceback, "threads": threads},
        rounds=7 if n <= 10_000 else 3,
        iterations=1,
    )
    _record(benchmark, a.size * b.size, score=result.score, threads=threads)


@pytest.mark.parametrize("mode", ["global", "local"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", range(3), ids=["scan", "striped", "diag"])
def test_parasail(benchmark, n, mode, name):
    parasail = pytest.importorskip("parasail")
    function = PARASAIL[mode][name]
    a, b = related_pair(n)
    sa, sb = _text(a), _text(b)
    result = benchmark.pedantic(
        getattr(parasail, function),
        args=(sa, sb, OPEN, EXTEND, parasail.nuc44),
        rounds=7 if n <= 10_000 else 2,
        iterations=1,
    )
    ours = align_long(a, b, SCORING, mode, traceback=False)
    assert result.score == ours.score
    _record(benchmark, a.size * b.size, score=result.score, function=function, threads=1)


@pytest.mark.parametrize("mode", ["global", "local"])
def test_parasail_traceback(benchmark, mode):
    """parasail's traceback keeps the full matrix: 10 kb only."""
    parasail = pytest.importorskip("parasail")
    function = {"global": "nw_trace_scan_32", "local": "sw_trace_striped_32"}[mode]
    a, b = related_pair(10_000)
    result = benchmark.pedantic(
        lambda: (
            getattr(parasail, function)(_text(a), _text(b), OPEN, EXTEND, parasail.nuc44)
            .get_traceback()
            .ref
        ),
        rounds=3,
        iterations=1,
    )
    assert len(result) >= max(a.size, b.size) or mode == "local"
    _record(benchmark, a.size * b.size, function=function, threads=1)


# where the long-pair path starts to pay: config.LONG_PAIR_CELLS
CROSSOVER = [100, 200, 300, 500, 800, 1300, 2000, 3000]


@pytest.mark.parametrize("path", ["full", "long-1", "long-2"])
@pytest.mark.parametrize("n", CROSSOVER)
def test_threshold(benchmark, n, path):
    """align_full (one thread, a direction byte per cell) against align_long."""
    a, b = related_pair(n, seed=n)
    if path == "full":
        run = lambda: align_full(a, b, SCORING)  # noqa: E731
    else:
        threads = int(path[-1])
        run = lambda: align_long(a, b, SCORING, threads=threads, tiling=Tiling())  # noqa: E731
    run()
    benchmark.pedantic(run, rounds=5 if n < 1000 else 3, iterations=1, warmup_rounds=1)
    _record(benchmark, a.size * b.size, path=path)
