"""Named benchmark suites (``dpalign bench --suite ...``): cases, runs, and a results table.

Every case runs one workload on one engine (a dpalign backend or a peer tool), timed around the
kernel call only (set-up such as packing a database or building a peer's profile is outside),
and reports cells, seconds and GCUPS. Peers run the same inputs with the scoring translated to
their convention and their scores are checked equal to dpalign's: a case whose scores differ
is marked (``scores_equal=False``, "DIFFER" in the table, no speed ratio) and
:func:`disagreements` lists it, so a wrong translation is never reported as a speed-up.

Suites: ``quick`` (under two minutes on a 2-core machine), ``seed-tables`` (the seed paper's
Tables 1 and 2 for the PaPaRa kernel), ``search`` (protein and DNA search), ``longpair``
(one long pair, score and traceback), ``all``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from . import peers, workloads

SUITES = ("quick", "seed-tables", "search", "longpair", "all")
PLOTTED = ("quick", "seed-tables", "all")  # the suites with PaPaRa kernel cases
log = logging.getLogger("dpalign.bench")


@dataclass
class Result:
    """One timed case."""

    suite: str
    kernel: str  # papara | search | dna | longpair | traceback
    engine: str  # a dpalign backend ("numba", "opencl"...) or a peer ("parasail"...)
    shape: str
    cells: int
    seconds: float
    threads: int
    params: dict = field(default_factory=dict)  # e.g. ref_length, reads (for the plots)
    # scores equal dpalign's (its first backend's; for "longpair traceback", the score-only
    # run's); None where nothing was compared
    scores_equal: bool | None = None
    note: str = ""

    @property
    def gcups(self) -> float:
        return self.cells / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def is_peer(self) -> bool:
        return self.engine in peers.PAIRWISE_PEERS

    def as_dict(self) -> dict:
        return {**asdict(self), "gcups": self.gcups}


@dataclass
class Settings:
    """What to run: suite, dpalign backends, threads, size scale, peers on or off."""

    suite: str = "quick"
    backends: tuple[str, ...] = ("numba",)
    threads: int | None = None
    scale: float = 1.0
    peers: bool = True
    repeat: int = 1  # best of this many runs


def _best(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        value = run()
        best = min(best, time.perf_counter() - start)
    return best, value


def _threads(settings: Settings) -> int:
    from .. import config

    return config.cpu_threads(settings.threads)


# --------------------------------------------------------------------------------------------
# PaPaRa scoring kernel (seed paper shapes)
# --------------------------------------------------------------------------------------------


def _papara_case(settings: Settings, suite: str, backend: str, work, params: dict) -> Result:
    from ..engine import Task, get_backend, query_batch
    from ..papara.placement import profile_blocks
    from ..scoring import PaparaScoring

    engine = get_backend(backend, threads=settings.threads)
    queries = query_batch(work.reads, dtype=work.states.dtype)
    blocks = profile_blocks(work.states, work.flags)
    task = Task("papara", PaparaScoring())
    engine.score(task, queries.subset(slice(0, 4)), blocks[:1])  # compile / build / upload
    seconds, _ = _best(lambda: engine.score(task, queries, blocks), settings.repeat)
    shape = (
        f"{len(work.reads)} reads x {work.states.shape[0]} profiles x "
        f"{work.states.shape[1]} columns"
    )
    return Result(
        suite,
        "papara",
        backend,
        shape,
        work.cells,
        seconds,
        _threads(settings),
        params,
        note=engine.describe(),
    )


def seed_tables(settings: Settings, lengths=None, reads=None, suite="seed-tables"):
    """Table 1 (reads fixed, reference length swept) and Table 2 (length fixed, reads swept)."""
    yield from seed_table1(settings, lengths, suite)
    yield from seed_table2(settings, reads, suite)


def seed_table1(settings: Settings, lengths=None, suite="seed-tables"):
    """1,250 reads (x scale) of ~100 bp against 320 profiles of each length."""
    n_reads = max(4, round(1_250 * settings.scale))
    for length in lengths or workloads.SEED_TABLE1_LENGTHS:
        work = workloads.papara_kernel(320, length, n_reads)
        for backend in settings.backends:
            yield _papara_case(
                settings, suite, backend, work, {"table": 1, "ref_length": length, "reads": n_reads}
            )


def seed_table2(settings: Settings, reads=None, suite="seed-tables"):
    """Each read count (x scale) against 320 profiles of length 5,000."""
    for count in reads or workloads.SEED_TABLE2_READS:
        count = max(4, round(count * settings.scale))
        work = workloads.papara_kernel(320, 5_000, count)
        for backend in settings.backends:
            yield _papara_case(
                settings, suite, backend, work, {"table": 2, "ref_length": 5_000, "reads": count}
            )


# --------------------------------------------------------------------------------------------
# Pairwise: search and DNA reads
# --------------------------------------------------------------------------------------------


def _pairwise_cases(
    settings: Settings,
    suite: str,
    kernel: str,
    job: peers.PairwiseJob,
    peer_cells: dict[str, float],
) -> Iterator[Result]:
    import dpalign
    from dpalign.search import Database

    threads = _threads(settings)
    shape = (
        f"{len(job.queries)} x {len(job.targets)} ({job.mode}, {job.sub_score}, "
        f"gap {job.gap[0]}+{job.gap[1]}k)"
    )
    expected = None
    for backend in settings.backends:
        if not _runs_pairwise(backend):
            continue
        db = Database(job.targets, sub_score=job.sub_score)
        run = lambda db=db, backend=backend: dpalign.score(  # noqa: E731
            job.queries, db, job.mode, job.sub_score, job.gap, threads=threads, backend=backend
        )
        run()  # compile
        seconds, scores = _best(run, settings.repeat)
        expected = scores if expected is None else expected
        yield Result(
            suite,
            kernel,
            backend,
            shape,
            job.cells,
            seconds,
            threads,
            scores_equal=None if expected is scores else bool(np.array_equal(scores, expected)),
        )
    if not settings.peers or expected is None:
        return
    for peer in peers.PAIRWISE_PEERS:
        if not peers.available(peer):
            continue
        sub = _subset(job, peer_cells.get(peer))
        try:
            run = peers.prepare(peer, sub, threads)
            seconds, scores = _best(run, 1)
        except Exception as exc:  # a peer's failure is reported, not the end of the run
            log.warning(
                "%s failed on %s (%s): %s: %s", peer, kernel, shape, type(exc).__name__, exc
            )
            continue
        want = (
            expected[:, : len(sub.targets)] if expected.ndim == 2 else expected[: len(sub.targets)]
        )
        note = (
            ""
            if len(sub.targets) == len(job.targets)
            else f"first {len(sub.targets)} target{'s' * (len(sub.targets) > 1)} (a slow peer)"
        )
        yield Result(
            suite,
            kernel,
            peer,
            shape,
            sub.cells,
            seconds,
            1 if peer in ("biopython", "scikit-bio") else threads,
            scores_equal=_equal(scores, want),
            note=note,
        )


def _equal(got, want: np.ndarray) -> bool:
    """Peer scores equal dpalign's (a wrong shape counts as unequal, not as an error)."""
    got = np.asarray(got)
    return got.size == want.size and bool(np.array_equal(got.reshape(want.shape), want))


def _subset(job: peers.PairwiseJob, max_cells: float | None) -> peers.PairwiseJob:
    if max_cells is None or job.cells <= max_cells:
        return job
    per_target = job.cells / max(sum(map(len, job.targets)), 1)
    keep, cells = 0, 0.0
    for target in job.targets:
        cells += per_target * len(target)
        if cells > max_cells and keep:
            break
        keep += 1
    return peers.PairwiseJob(job.queries, job.targets[:keep], job.mode, job.sub_score, job.gap)


def _runs_pairwise(backend: str) -> bool:
    """A backend runs pairwise scores: the engine's kernel table has one for it, or it has no
    kernels of its own (a work queue running the others')."""
    from ..engine import backend_class, kernel_table

    if not backend_class(backend).kernels:
        return True
    return any(e.task == "pairwise" for e in kernel_table(backend=backend, op="score"))


# Pure-Python-speed peers get a budget of cells (their GCUPS come from that subset).
SLOW_PEERS = {"scikit-bio": 2e6, "biopython": 5e7}


def search_cases(settings: Settings, suite: str = "search"):
    n = max(50, round(20_000 * settings.scale))
    db = [s for _, s in workloads.protein_database(n)]
    job = peers.PairwiseJob([workloads.protein_query()], db, "local", "BLOSUM62", (11, 1))
    yield from _pairwise_cases(settings, suite, "search", job, SLOW_PEERS)
    reads, targets = workloads.dna_reads_and_targets(
        max(10, round(1_000 * settings.scale)), max(10, round(1_000 * settings.scale))
    )
    job = peers.PairwiseJob(reads, targets, "local", (2, -3), (5, 2))
    yield from _pairwise_cases(settings, suite, "dna", job, SLOW_PEERS)


# --------------------------------------------------------------------------------------------
# Long pairs and traceback
# --------------------------------------------------------------------------------------------


def longpair_cases(settings: Settings, suite: str = "longpair", lengths=(10_000, 100_000)):
    from ..longpair import align_long
    from ..scoring import Scoring

    scoring = Scoring("NUC.4.4", (10, 1))
    warm = workloads.long_pair(2_000)
    for traceback in (False, True):  # compile on a small pair first
        align_long(scoring.encode(warm[0]), scoring.encode(warm[1]), scoring, traceback=traceback)
    for length in lengths:
        length = max(1_000, round(length * settings.scale))
        a, b = (scoring.encode(s) for s in workloads.long_pair(length))
        cells = len(a) * len(b)
        shape = f"{len(a)} x {len(b)} (global, NUC.4.4, gap 10+k)"
        scores = {}
        for traceback in (False, True):
            seconds, result = _best(
                lambda a=a, b=b, traceback=traceback: align_long(
                    a, b, scoring, traceback=traceback, threads=settings.threads
                ),
                settings.repeat,
            )
            scores[traceback] = result.score
            yield Result(
                suite,
                "longpair traceback" if traceback else "longpair score",
                "numba",
                shape,
                cells,
                seconds,
                _threads(settings),
                {"length": length},
                scores_equal=None if not traceback else bool(scores[True] == scores[False]),
            )
        if settings.peers and peers.available("parasail"):
            import parasail

            text_a, text_b = scoring.alphabet.decode(a), scoring.alphabet.decode(b)
            start = time.perf_counter()
            got = parasail.nw_striped_32(text_a, text_b, 11, 1, parasail.nuc44).score
            yield Result(
                suite,
                "longpair score",
                "parasail",
                shape,
                cells,
                time.perf_counter() - start,
                1,
                {"length": length},
                scores_equal=bool(scores[False] == got),
                note="nw_striped_32",
            )


def traceback_cases(settings: Settings, suite: str, pairs: int = 200, length: int = 300):
    import dpalign

    rng = np.random.default_rng(99)
    pairs = max(5, round(pairs * settings.scale))
    seqs = [
        workloads.long_pair(length, 0.15, seed=int(rng.integers(1 << 30))) for _ in range(pairs)
    ]
    cells = sum(len(a) * len(b) for a, b in seqs)
    shape = f"{pairs} pairs of ~{length} (local, 2/-3, gap 5+2k)"
    dpalign.align(*seqs[0], "local", (2, -3), (5, 2))  # compile
    seconds, mine = _best(
        lambda: [dpalign.align(a, b, "local", (2, -3), (5, 2)).score for a, b in seqs],
        settings.repeat,
    )
    yield Result(suite, "traceback", "numba", shape, cells, seconds, 1)
    if settings.peers and peers.available("parasail"):
        import parasail

        matrix = parasail.matrix_create("ACGT", 2, -3)
        start = time.perf_counter()
        got = [parasail.sw_trace_striped_16(a, b, 7, 2, matrix).score for a, b in seqs]
        yield Result(
            suite,
            "traceback",
            "parasail",
            shape,
            cells,
            time.perf_counter() - start,
            1,
            scores_equal=got == mine,
            note="sw_trace_striped_16",
        )
    if settings.peers and peers.available("scikit-bio"):
        from skbio.alignment import pair_align

        few = seqs[: max(2, pairs // 20)]
        start = time.perf_counter()
        got = [
            pair_align(a, b, mode="local", sub_score=(2, -3), gap_cost=(5, 2)).score for a, b in few
        ]
        yield Result(
            suite,
            "traceback",
            "scikit-bio",
            shape,
            sum(len(a) * len(b) for a, b in few),
            time.perf_counter() - start,
            1,
            scores_equal=[int(x) for x in got] == mine[: len(few)],
            note=f"first {len(few)} pairs",
        )


# --------------------------------------------------------------------------------------------


def run_suite(settings: Settings, on_result: Callable[[Result], None] | None = None):
    """Run a suite; return its results (``on_result`` sees each as it finishes)."""
    if settings.suite not in SUITES:
        from ..errors import OptionError

        raise OptionError(f"unknown suite {settings.suite!r} (known: {', '.join(SUITES)})")
    generators = []
    suite = settings.suite
    if suite == "quick":
        quick = Settings(**{**asdict(settings), "scale": settings.scale * 0.08})
        generators = [
            seed_table1(quick, lengths=[500, 2_000, 5_000], suite=suite),  # 100 reads
            seed_table2(settings, reads=[50, 200, 500], suite=suite),
            search_cases(Settings(**{**asdict(settings), "scale": settings.scale * 0.1}), suite),
            longpair_cases(settings, suite, lengths=(5_000,)),
            traceback_cases(settings, suite, pairs=100),
        ]
    if suite in ("seed-tables", "all"):
        generators.append(seed_tables(settings))
    if suite in ("search", "all"):
        generators.append(search_cases(settings))
    if suite in ("longpair", "all"):
        generators.append(longpair_cases(settings))
    if suite == "all":
        generators.append(traceback_cases(settings, "traceback"))
    results = []
    papara_log = logging.getLogger("dpalign.papara")
    level = papara_log.level
    papara_log.setLevel(logging.ERROR)  # quiet during the run; restored after it
    try:
        for generator in generators:
            for result in generator:
                results.append(result)
                if on_result is not None:
                    on_result(result)
    finally:
        papara_log.setLevel(level)
    return results


COLUMNS = (
    "kernel",
    "backend",
    "shape",
    "cells",
    "seconds",
    "GCUPS",
    "dpalign is",
    "scores",
    "note",
)


def _seconds(seconds: float) -> str:
    """Three significant digits: 0.00327, 0.900, 12.3, 456."""
    return f"{seconds:.0f}" if seconds >= 99.95 else f"{seconds:#.3g}"


def _ratio(r: Result, best: dict) -> str:
    """How much faster dpalign's fastest backend is than this peer, on the same case."""
    key = (r.suite, r.kernel, r.shape)
    if not r.is_peer or r.gcups <= 0 or key not in best:
        return ""
    if r.scores_equal is False:
        return "-"  # a peer that computes something else is not slower or faster
    ratio = best[key] / r.gcups
    return f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"


def table(results: list[Result]) -> str:
    """A plain-text table (:data:`COLUMNS`), with each peer's speed relative to dpalign's
    fastest backend on the same case, then a line saying whether every score check passed."""
    best: dict[tuple[str, str, str], float] = {}
    for r in results:
        if not r.is_peer:
            key = (r.suite, r.kernel, r.shape)
            best[key] = max(best.get(key, 0.0), r.gcups)
    rows = [COLUMNS]
    for r in results:
        rows.append(
            (
                r.kernel,
                r.engine,
                r.shape,
                f"{r.cells:.2e}",
                _seconds(r.seconds),
                f"{r.gcups:.2f}",
                _ratio(r, best),
                {None: "", True: "equal", False: "DIFFER"}[r.scores_equal],
                r.note,
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", summary(results)])


def disagreements(results: list[Result]) -> list[Result]:
    """The cases whose scores differ from dpalign's."""
    return [r for r in results if r.scores_equal is False]


def summary(results: list[Result]) -> str:
    """One line: how many score checks ran and whether they all passed."""
    checked = [r for r in results if r.scores_equal is not None]
    bad = disagreements(results)
    if not checked:
        return f"{len(results)} cases; no scores compared (no peer installed, or --no-peers)"
    if not bad:
        return f"{len(results)} cases; scores equal to dpalign's in all {len(checked)} checks"
    which = ", ".join(f"{r.kernel} {r.engine}" for r in bad)
    return (
        f"{len(results)} cases; scores DIFFER from dpalign's in {len(bad)} of "
        f"{len(checked)} checks ({which}): their speed ratios are not comparisons"
    )
