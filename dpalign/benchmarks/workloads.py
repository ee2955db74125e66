"""Seeded benchmark workloads, the same on every machine (sizes scale with ``scale``).

* PaPaRa kernel shapes of the seed paper: Table 1 (1,250 reads of ~100 bp x 320 profiles,
  reference length 500 ... 500,000) and Table 2 (reference 5,000, 100 ... 10,000 reads);
* the 1604.PRANK-shaped end-to-end set (802 taxa x 3,060 columns, 16,040 reads of ~100 bp);
* a protein database (UniProt-like length distribution and residue frequencies) and a query;
* DNA reads against 1 kb targets; long similar pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .simulate import SimulatedData, simulate

#: Seed-paper reference figures (BMC Bioinformatics 13:196, 2012), GCUPS.
SEED_GTX560_PEAK = 22.1
SEED_GTX560_AVERAGE = 18.4
#: i7-2600, 4 cores, SSE 4.1, 16-bit: (reference length, GCUPS) quoted in the text.
SEED_I7_BY_REFERENCE_LENGTH = [(500, 18.01), (10_000, 13.66), (50_000, 6.25), (500_000, 2.22)]
SEED_TABLE1_LENGTHS = [500, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000]
SEED_TABLE2_READS = [100, 500, 1_000, 5_000, 10_000]

# Background residue frequencies (BLOSUM62's, order ARNDCQEGHILKMFPSTWYV).
PROTEIN_FREQUENCIES = np.array(
    [
        0.074,
        0.052,
        0.045,
        0.054,
        0.025,
        0.034,
        0.054,
        0.074,
        0.026,
        0.068,
        0.099,
        0.058,
        0.025,
        0.047,
        0.039,
        0.057,
        0.051,
        0.013,
        0.032,
        0.073,
    ]
)
PROTEIN_FREQUENCIES = PROTEIN_FREQUENCIES / PROTEIN_FREQUENCIES.sum()
PROTEIN_LETTERS = np.frombuffer(b"ARNDCQEGHILKMFPSTWYV", dtype=np.uint8)
DNA_LETTERS = np.frombuffer(b"ACGT", dtype=np.uint8)


@dataclass
class PaparaKernelWorkload:
    """Edge profiles and reads for the scoring kernel alone (inter-reference shapes)."""

    states: np.ndarray  # (profiles, n) uint8 DNA states
    flags: np.ndarray  # (profiles, n) uint8
    reads: list[np.ndarray]  # read states

    @property
    def cells(self) -> int:
        return self.states.shape[0] * self.states.shape[1] * sum(len(r) for r in self.reads)


def papara_kernel(
    n_profiles: int = 320,
    ref_length: int = 5_000,
    n_reads: int = 1_250,
    read_length: int = 100,
    seed: int = 2012,
) -> PaparaKernelWorkload:
    """Profiles that look like Fitch ancestral states (mostly one base, some ambiguity, ~10%
    flagged gap columns) and reads of ``read_length`` +-10% taken from them with 5% noise."""
    rng = np.random.default_rng(seed)
    single = (1 << rng.integers(0, 4, (n_profiles, ref_length))).astype(np.uint8)
    ambiguous = rng.integers(1, 16, (n_profiles, ref_length)).astype(np.uint8)
    states = np.where(rng.random((n_profiles, ref_length)) < 0.9, single, ambiguous)
    flags = (rng.random((n_profiles, ref_length)) < 0.1).astype(np.uint8)
    reads = []
    for _ in range(n_reads):
        size = int(rng.integers(int(read_length * 0.9), int(read_length * 1.1) + 1))
        size = min(size, ref_length)
        start = int(rng.integers(0, ref_length - size + 1))
        source = states[int(rng.integers(n_profiles)), start : start + size]
        lowest = (source & -source).astype(np.uint8)  # one base out of each state
        noise = rng.random(size) < 0.05
        read = np.where(noise, 1 << rng.integers(0, 4, size), lowest).astype(np.uint8)
        reads.append(read)
    return PaparaKernelWorkload(states, flags, reads)


def prank_like(
    scale: float = 1.0, seed: int = 1604, *, taxa_scale: float | None = None
) -> SimulatedData:
    """The 1604.PRANK shape (802 taxa x 3,060 columns, 16,040 reads of ~100 bp) x ``scale``
    (taxa and reads scale; columns stay). ``taxa_scale`` scales the taxa apart from the reads:
    ``prank_like(4, taxa_scale=1)`` is 64,160 reads on the PRANK-sized reference."""
    taxa = max(8, round(802 * (scale if taxa_scale is None else taxa_scale)))
    reads = max(10, round(16_040 * scale))
    return simulate(
        taxa,
        3_060,
        reads,
        read_length=(90, 110),
        held_out=max(4, taxa // 4),
        seed=seed,
        prefix="taxon",
    )


def protein_database(n: int = 20_000, seed: int = 62) -> list[tuple[str, str]]:
    """``n`` protein sequences with a UniProt-like length distribution (median ~300)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(300), 0.55, n).astype(int), 30, 3_000)
    out = []
    for k, size in enumerate(lengths):
        seq = rng.choice(PROTEIN_LETTERS, size, p=PROTEIN_FREQUENCIES)
        out.append((f"sp{k:06d}", seq.tobytes().decode()))
    return out


def protein_query(length: int = 375, seed: int = 375) -> str:
    rng = np.random.default_rng(seed)
    return rng.choice(PROTEIN_LETTERS, length, p=PROTEIN_FREQUENCIES).tobytes().decode()


def dna_reads_and_targets(
    n_reads: int = 1_000,
    n_targets: int = 1_000,
    read_length: tuple[int, int] = (100, 300),
    target_length: int = 1_000,
    seed: int = 300,
) -> tuple[list[str], list[str]]:
    """Reads of 100-300 nt (half of them taken from a target with 10% divergence) and 1 kb
    targets."""
    rng = np.random.default_rng(seed)
    targets = [rng.choice(DNA_LETTERS, target_length).tobytes().decode() for _ in range(n_targets)]
    reads = []
    for k in range(n_reads):
        size = int(rng.integers(read_length[0], read_length[1] + 1))
        if k % 2:
            source = np.frombuffer(targets[int(rng.integers(n_targets))].encode(), np.uint8)
            start = int(rng.integers(0, target_length - size + 1))
            read = source[start : start + size].copy()
            mutate = rng.random(size) < 0.1
            read[mutate] = rng.choice(DNA_LETTERS, int(mutate.sum()))
        else:
            read = rng.choice(DNA_LETTERS, size)
        reads.append(read.tobytes().decode())
    return reads, targets


def long_pair(length: int = 10_000, divergence: float = 0.1, seed: int = 7) -> tuple[str, str]:
    """Two related DNA sequences of about ``length`` (substitutions and short indels)."""
    rng = np.random.default_rng(seed)
    a = rng.choice(DNA_LETTERS, length)
    b = a.copy()
    mutate = rng.random(length) < divergence * 0.8
    b[mutate] = rng.choice(DNA_LETTERS, int(mutate.sum()))
    keep = rng.random(length) > divergence * 0.1
    b = b[keep]
    inserts = np.flatnonzero(rng.random(len(b)) < divergence * 0.1)
    b = np.insert(b, inserts, rng.choice(DNA_LETTERS, len(inserts)))
    return a.tobytes().decode(), b.tobytes().decode()
