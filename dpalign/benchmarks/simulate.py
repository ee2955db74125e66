"""Simulated PaPaRa datasets: a tree, a reference alignment evolved down it, and reads.

Seeded and vectorised, so the 1604.PRANK shape of the seed paper (802 taxa x 3,060 columns,
16,040 reads) builds in seconds. The sequences look like rRNA: a GC-rich root, conserved
stretches and variable regions with faster substitution (transitions twice as likely as
transversions), deletions and lineage-specific insertions in the variable regions. Reads are
fragments of held-out taxa (not in the reference) with sequencing errors and the occasional N.

Every simulation also knows the true alignment of each read character (``SimulatedData.truth``):
the reference column it belongs to, or :data:`INSERTED` when its true place is no reference
column (a column missing from every reference row, a base outside the reference window, an
insertion error). Options make placement harder: a reference that is only a window of the full
alignment (reads overhang its ends), higher divergence, insertion/deletion errors in reads,
ambiguity codes (``N``, IUPAC) in reads, protein.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

BASES = np.frombuffer(b"ACGT", dtype=np.uint8)
AMINO = np.frombuffer(b"ARNDCQEGHILKMFPSTWYV", dtype=np.uint8)
# Background frequencies of the 20 residues (UniProt-like), in AMINO's order.
AMINO_FREQ = np.array(
    "8.3 5.5 4.1 5.5 1.4 3.9 6.8 7.1 2.3 5.9 9.7 5.8 2.4 3.9 4.7 6.6 5.4 1.1 2.9 6.9".split(),
    dtype=float,
)
AMINO_FREQ = AMINO_FREQ / AMINO_FREQ.sum()
GAP = ord("-")
#: Truth value of a read character whose true place is no reference column.
INSERTED = -1
# IUPAC codes that contain each base (two- and three-base codes), for ambiguity in reads.
_IUPAC_WITH = {
    ord("A"): b"MRWVHD",
    ord("C"): b"MSYVHB",
    ord("G"): b"RSKVDB",
    ord("T"): b"WYKHDB",
}
_TRANSITION = np.zeros(256, dtype=np.uint8)
for _a, _b in (("A", "G"), ("G", "A"), ("C", "T"), ("T", "C")):
    _TRANSITION[ord(_a)] = ord(_b)


@dataclass
class SimulatedData:
    """A simulated PaPaRa input: Newick text, MSA rows and reads as (name, sequence).

    ``truth[k][p]`` is the reference column (0-based, in ``msa``'s columns) of character p of
    read k, or :data:`INSERTED`. ``held_rows`` are the held-out taxa (the reads' sources) in
    the reference's columns, as a check on the truth.
    """

    newick: str
    msa: list[tuple[str, str]]
    reads: list[tuple[str, str]]
    truth: list[np.ndarray] = field(default_factory=list)
    held_rows: dict[str, str] = field(default_factory=dict)

    @property
    def read_names(self) -> list[str]:
        """Read names as FASTA readers see them (the header's first word)."""
        return [name.split()[0] for name, _ in self.reads]

    def write_truth(self, path) -> None:
        """Write the truth as JSON lines: ``{"read": name, "columns": [...]}`` per read."""
        with open(path, "w") as handle:
            for name, cols in zip(self.read_names, self.truth, strict=True):
                handle.write(json.dumps({"read": name, "columns": cols.tolist()}) + "\n")

    def write(self, tree_path, msa_path, reads_path) -> None:
        """Write the tree (Newick), the MSA (FASTA) and the reads (FASTA)."""
        with open(tree_path, "w") as handle:
            handle.write(self.newick + "\n")
        for path, rows in ((msa_path, self.msa), (reads_path, self.reads)):
            with open(path, "w") as handle:
                handle.writelines(f">{name}\n{seq}\n" for name, seq in rows)


def _variable_mask(length: int, rng: np.random.Generator, n_regions: int = 9) -> np.ndarray:
    mask = np.zeros(length, dtype=bool)
    starts = np.sort(rng.choice(length - length // 30, n_regions, replace=False))
    for start in starts:
        mask[start : start + max(10, length // 40)] = True
    return mask


def _tree(rng, n_tips: int):
    """Random binary tree as parent links: returns (parent, branch length, tip ids)."""
    parent = [-1] * n_tips
    length = list(rng.uniform(0.01, 0.08, n_tips))
    pool = list(range(n_tips))
    while len(pool) > 3:
        i, j = sorted(rng.choice(len(pool), 2, replace=False))
        b, a = pool.pop(j), pool.pop(i)
        node = len(parent)
        parent.append(-1)
        length.append(float(rng.uniform(0.005, 0.05)))
        parent[a] = parent[b] = node
        pool.append(node)
    root = len(parent)
    parent.append(-1)
    length.append(0.0)
    for node in pool:
        parent[node] = root
    return np.array(parent), np.array(length), root


def _newick(parent, length, names, root, keep: set[int]) -> str:
    children: dict[int, list[int]] = {}
    for node, p in enumerate(parent):
        if p >= 0:
            children.setdefault(int(p), []).append(node)

    def live(node) -> bool:
        return node in keep if node < len(names) else any(live(c) for c in children[node])

    def render(node, extra: float = 0.0) -> str:
        kids = [c for c in children.get(node, []) if live(c)]
        if node < len(names):
            return f"{names[node]}:{length[node] + extra:.5f}"
        if len(kids) == 1:  # splice out nodes left with one child
            return render(kids[0], extra + length[node])
        return "(" + ",".join(render(c) for c in kids) + f"):{length[node] + extra:.5f}"

    kids = [c for c in children[root] if live(c)]
    while len(kids) < 3:  # keep PaPaRa's unrooted form (three children at the root)
        inner = next(c for c in kids if c >= len(names))
        kids.remove(inner)
        kids.extend(c for c in children[inner] if live(c))
    return "(" + ",".join(render(c) for c in kids) + ");"


def simulate(
    n_taxa: int = 24,
    n_columns: int = 1450,
    n_reads: int = 300,
    read_length: tuple[int, int] = (90, 160),
    held_out: int | None = None,
    seed: int = 16,
    prefix: str = "OTU",
    *,
    window: tuple[float, float] | None = None,
    min_overlap: int = 20,
    divergence: float = 1.0,
    read_branch: float = 0.0,
    indel_rate: float = 0.0,
    ambiguity: float = 0.0,
    error_rate: float = 0.005,
    protein: bool = False,
) -> SimulatedData:
    """Simulate a reference alignment of ``n_taxa`` rows, its tree, and ``n_reads`` reads.

    ``n_columns`` is the root length; insertion columns in variable regions add to it, and
    columns that end up all-gap in the reference are removed. ``held_out`` taxa (default a
    quarter of ``n_taxa``, at least 2) are evolved but left out of the reference; reads come
    from them. The defaults give the same data as before the options below existed.

    Parameters
    ----------
    window : (float, float), optional
        Keep only this fraction of the full alignment's columns as the reference (e.g.
        ``(0.2, 0.8)``): reads are drawn from whole held-out sequences so that they overlap
        the window by at least ``min_overlap`` residues, and their characters outside it are
        :data:`INSERTED`.
    divergence : float
        Multiplies every branch length.
    read_branch : float
        Added to the branch above each held-out taxon (reads far from every reference).
    indel_rate : float
        Per-character rate of insertion errors (a random residue, :data:`INSERTED`) and, at the
        same rate, of deletion errors in reads.
    ambiguity : float
        Per-character rate of ambiguity codes in reads: half ``N`` (``X`` for protein), half an
        IUPAC code that contains the true base (DNA only). Their truth is the true base's.
    error_rate : float
        Per-character substitution errors.
    protein : bool
        Amino acids (no transition bias; substitutions drawn from background frequencies).
    """
    rng = np.random.default_rng(seed)
    held_out = max(2, n_taxa // 4) if held_out is None else held_out
    n_tips = n_taxa + held_out
    parent, blen, root = _tree(rng, n_tips)
    blen = blen * divergence
    variable = _variable_mask(n_columns, rng)
    rates = np.where(variable, rng.gamma(2.0, 1.5, n_columns), rng.gamma(0.5, 0.4, n_columns))
    insertion = variable & (rng.random(n_columns) < 0.3)
    if protein:
        root_seq = rng.choice(AMINO, n_columns, p=AMINO_FREQ)
    else:
        root_seq = rng.choice(BASES, n_columns, p=[0.22, 0.28, 0.31, 0.19])
    root_seq[insertion] = GAP
    width = len(str(n_tips))
    names = [f"{prefix}{k + 1:0{width}d}" for k in range(n_tips)]
    seqs = {root: root_seq}
    order = sorted(range(len(parent)), key=lambda n: _depth(parent, n))
    if read_branch:
        held = _held(rng, n_tips, held_out)
        for k in held:
            blen[k] += read_branch
    for node in order:
        if node == root:
            continue
        seqs[node] = _evolve(
            rng, seqs[int(parent[node])], rates, variable, insertion, blen[node], protein
        )
    if not read_branch:
        held = _held(rng, n_tips, held_out)
    ref_ids = [k for k in range(n_tips) if k not in held]
    matrix = np.stack([seqs[k] for k in ref_ids])
    keep = (matrix != GAP).any(axis=0)
    full = len(keep)
    lo, hi = 0, full
    if window is not None:
        lo, hi = int(window[0] * full), int(window[1] * full)
        keep[:lo] = False
        keep[hi:] = False
    ref_column = np.where(keep, np.cumsum(keep) - 1, INSERTED)  # full column -> reference column
    msa = [(names[k], seqs[k][keep].tobytes().decode()) for k in ref_ids]
    reads, truth = [], []
    held_ids = sorted(held)
    letters = AMINO if protein else BASES
    for r in range(n_reads):
        source = held_ids[r % len(held_ids)]
        cols = np.flatnonzero(seqs[source] != GAP)
        raw = seqs[source][cols]
        size = int(min(rng.integers(read_length[0], read_length[1] + 1), len(raw)))
        if window is None:
            start = int(rng.integers(0, len(raw) - size + 1))
        else:
            start = _overlapping_start(rng, cols, size, lo, hi, min_overlap)
        read = raw[start : start + size].copy()
        true = ref_column[cols[start : start + size]].astype(np.int64)
        errors = rng.random(size) < error_rate
        if protein:
            read[errors] = rng.choice(AMINO, int(errors.sum()), p=AMINO_FREQ)
            read[rng.random(size) < 0.001] = ord("X")
        else:
            read[errors] = rng.choice(BASES, int(errors.sum()))
            read[rng.random(size) < 0.001] = ord("N")
        if ambiguity:
            read = _ambiguous(rng, read, ambiguity, protein)
        if indel_rate:
            read, true = _indels(rng, read, true, indel_rate, letters)
        reads.append(
            (
                f"read{r + 1:0{len(str(n_reads))}d} {names[source]} {start + 1}-{start + size}",
                read.tobytes().decode(),
            )
        )
        truth.append(true)
    newick = _newick(parent, blen, names, root, set(ref_ids))
    held_rows = {names[k]: seqs[k][keep].tobytes().decode() for k in held_ids}
    return SimulatedData(newick, msa, reads, truth, held_rows)


def _held(rng, n_tips: int, held_out: int) -> set[int]:
    return set(rng.choice(n_tips, held_out, replace=False).tolist())


def _overlapping_start(rng, cols, size: int, lo: int, hi: int, min_overlap: int) -> int:
    """A read start whose ``size`` residues have at least ``min_overlap`` inside [lo, hi)."""
    inside = (cols >= lo) & (cols < hi)
    counts = np.convolve(inside, np.ones(size, dtype=np.int64), mode="valid")
    need = min(min_overlap, int(counts.max()))
    return int(rng.choice(np.flatnonzero(counts >= need)))


def _ambiguous(rng, read: np.ndarray, rate: float, protein: bool) -> np.ndarray:
    read = read.copy()
    hit = np.flatnonzero(rng.random(len(read)) < rate)
    as_n = rng.random(len(hit)) < 0.5
    read[hit[as_n]] = ord("X") if protein else ord("N")
    if not protein:
        for p in hit[~as_n]:
            options = _IUPAC_WITH.get(int(read[p]))
            if options:
                read[p] = options[int(rng.integers(len(options)))]
    return read


def _indels(rng, read: np.ndarray, true: np.ndarray, rate: float, letters: np.ndarray):
    """Insertion errors (a random residue after a character) and deletions, at ``rate`` each."""
    out, out_true = [], []
    deleted = rng.random(len(read)) < rate
    inserted = rng.random(len(read)) < rate
    extra = rng.choice(letters, len(read))
    for p in range(len(read)):
        if not deleted[p]:
            out.append(read[p])
            out_true.append(true[p])
        if inserted[p]:
            out.append(extra[p])
            out_true.append(INSERTED)
    return np.array(out, dtype=np.uint8), np.array(out_true, dtype=np.int64)


def _depth(parent, node) -> int:
    depth = 0
    while parent[node] >= 0:
        node = parent[node]
        depth += 1
    return depth


def _evolve(rng, seq, rates, variable, insertion, t: float, protein: bool = False) -> np.ndarray:
    out = seq.copy()
    site = out != GAP
    change = site & (rng.random(len(out)) < 1 - np.exp(-rates * t))
    if protein:
        other = rng.choice(AMINO, len(out), p=AMINO_FREQ)
        out = np.where(change, other, out)
    else:
        transition = rng.random(len(out)) < 2 / 3
        shift = rng.integers(1, 4, len(out))
        codes = np.searchsorted(BASES, out)  # A C G T -> 0..3 (gaps map past the end, unused)
        transversion = BASES[(codes + shift) % 4]
        out = np.where(change & transition, _TRANSITION[out], np.where(change, transversion, out))
    positions = np.flatnonzero(variable)
    for start in rng.choice(positions, rng.poisson(60 * t)) if positions.size else []:
        out[start : start + int(rng.integers(1, 6))] = GAP
    gained = insertion & (out == GAP) & (rng.random(len(out)) < 0.6 * t)
    if protein:
        out[gained] = rng.choice(AMINO, int(gained.sum()), p=AMINO_FREQ)
    else:
        out[gained] = rng.choice(BASES, int(gained.sum()))
    return out.astype(np.uint8)
