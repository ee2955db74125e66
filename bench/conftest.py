"""Seeded workloads for the benchmarks, and GCUPS bookkeeping.

Run with ``PYTHONPATH=$PWD pytest bench/ --benchmark-only``. ``--bench-scale X`` scales the
seed-shaped PaPaRa workloads (reads, and taxa of the PRANK shape; also
``DPALIGN_BENCH_SCALE``): the default suits this 2-core machine, ``--bench-scale 1`` is the
seed's full shapes (the GPU machine). ``DPALIGN_BENCH_ROUNDS`` sets the rounds of the long DNA
runs (default 1: one run is about 2e11 cells); ``DPALIGN_BENCH_SMALL=1`` shrinks both pairwise
workloads tenfold for a quick smoke run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest

DNA_LETTERS = "ACGT"
AMINO_ACIDS = "ARNDCQEGHILKMFPSTWYV"
#: Background amino-acid frequencies (Robinson & Robinson 1991, as in BLAST), in AMINO_ACIDS order.
AA_FREQ = np.array(
    [7.805, 5.129, 4.487, 5.364, 1.925, 4.264, 6.295, 7.377, 2.199, 5.142,
     9.019, 5.744, 2.243, 3.856, 5.203, 7.120, 5.841, 1.330, 3.216, 6.441]
)  # fmt: skip
AA_FREQ = AA_FREQ / AA_FREQ.sum()

ROUNDS = int(os.environ.get("DPALIGN_BENCH_ROUNDS", "1"))


def pytest_addoption(parser):
    parser.addoption(
        "--bench-scale",
        type=float,
        default=None,
        help="scale of the seed-shaped PaPaRa workloads (1: the seed's sizes; default: "
        "$DPALIGN_BENCH_SCALE, else each module's size for a 2-core machine)",
    )


def pytest_configure(config):
    # Before the bench modules are imported: they read their scale at import.
    scale = config.getoption("--bench-scale", default=None)
    if scale is not None:
        if scale <= 0:
            raise pytest.UsageError("--bench-scale must be above 0")
        os.environ["DPALIGN_BENCH_SCALE"] = str(scale)


SMALL = os.environ.get("DPALIGN_BENCH_SMALL", "") not in ("", "0")


@dataclass
class Workload:
    """Sequences, scoring in every tool's convention, and the cells one run computes."""

    name: str
    queries: list[str]
    targets: list[str]
    mode: str
    sub_score: object
    gap: tuple[int, int]  # dpalign / scikit-bio (o, e): a gap of length k costs o + e*k
    cells: int
    expected: np.ndarray | None = None  # [Q, T] scores, filled once by dpalign

    @property
    def peer_open(self) -> int:
        """parasail's and pyopal's gap "open" (the cost of a gap of length 1) = o + e."""
        return self.gap[0] + self.gap[1]

    @property
    def peer_extend(self) -> int:
        return self.gap[1]


def _mutate(rng, seq: str, sub: float, indel: float, letters: str) -> str:
    out = []
    for ch in seq:
        r = rng.random()
        if r < indel / 2:
            continue  # deletion
        if r < indel:
            out.append(letters[rng.integers(len(letters))])  # insertion before ch
        out.append(letters[rng.integers(len(letters))] if rng.random() < sub else ch)
    return "".join(out)


def dna_workload(n_reads: int = 1000, n_targets: int = 1000) -> Workload:
    """Reads of 100-300 nt sampled (5% substitutions, 1% indels) from 1 kb targets."""
    rng = np.random.default_rng(20240601)
    letters = np.array(list(DNA_LETTERS))
    targets = ["".join(rng.choice(letters, 1000)) for _ in range(n_targets)]
    reads = []
    for _ in range(n_reads):
        length = int(rng.integers(100, 301))
        source = targets[rng.integers(n_targets)]
        start = int(rng.integers(0, 1000 - length + 1))
        reads.append(_mutate(rng, source[start : start + length], 0.05, 0.01, DNA_LETTERS))
    cells = sum(map(len, reads)) * sum(map(len, targets))
    # BLASTN's defaults: reward 2, penalty 3, gap 5 + 2k.
    return Workload("dna", reads, targets, "local", (2, -3), (5, 2), cells)


def protein_workload(n_targets: int = 20000, query_length: int = 375) -> Workload:
    """A 375-aa query against 20,000 proteins with a Swiss-Prot-like length distribution.

    Lengths are lognormal (median 290, mean about 360, clipped to 20..5,000), residues drawn
    from the background frequencies; 20 targets are homologs of the query (30-90% identity)
    so the top hits and the int16 recomputation are exercised as in a real search.
    """
    rng = np.random.default_rng(20240602)
    letters = np.array(list(AMINO_ACIDS))
    query = "".join(rng.choice(letters, query_length, p=AA_FREQ))
    lengths = np.clip(rng.lognormal(np.log(290), 0.65, n_targets).astype(int), 20, 5000)
    targets = ["".join(rng.choice(letters, n, p=AA_FREQ)) for n in lengths]
    for k in rng.choice(n_targets, 20, replace=False):
        identity = rng.uniform(0.3, 0.9)
        targets[k] = _mutate(rng, query, 1 - identity, 0.02, AMINO_ACIDS)
    cells = query_length * sum(map(len, targets))
    return Workload("protein", [query], targets, "local", "BLOSUM62", (11, 1), cells)


@pytest.fixture(scope="session")
def dna():
    return _with_expected(dna_workload(100, 100) if SMALL else dna_workload())


@pytest.fixture(scope="session")
def protein():
    return _with_expected(protein_workload(2000) if SMALL else protein_workload())


def _with_expected(w: Workload) -> Workload:
    import dpalign

    w.expected = dpalign.score(w.queries, w.targets, w.mode, w.sub_score, w.gap)
    return w


class Contention:
    """How many cores other processes kept busy while a benchmark ran (this is a shared machine).

    Machine-wide busy time from ``/proc/stat`` minus this process's own CPU time, divided by
    the wall time; 0 on an otherwise idle machine, up to the core count when it is saturated.
    """

    def __enter__(self):
        self._start = self._sample()
        return self

    def __exit__(self, *exc):
        busy0, mine0, wall0 = self._start
        busy1, mine1, wall1 = self._sample()
        wall = wall1 - wall0
        self.other_cores = max(0.0, ((busy1 - busy0) - (mine1 - mine0)) / wall) if wall else 0.0
        return False

    @staticmethod
    def _sample():
        import time

        try:
            with open("/proc/stat") as handle:
                fields = [int(x) for x in handle.readline().split()[1:]]
            busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            busy = 0.0
        times = os.times()
        return busy, times.user + times.system, time.perf_counter()


def record(
    benchmark, workload: Workload, engine: str, threads: int, function: str, contention=None
):
    """Put GCUPS (from the fastest and the mean run) and the set-up into extra_info."""
    stats = benchmark.stats.stats
    benchmark.extra_info.update(
        engine=engine,
        threads=threads,
        function=function,
        cells=workload.cells,
        gcups=round(workload.cells / stats.min / 1e9, 3),
        gcups_mean=round(workload.cells / stats.mean / 1e9, 3),
        load=os.getloadavg()[0],
        other_cores_busy=round(contention.other_cores, 2) if contention else None,
    )
