"""Simulated PaPaRa datasets: a tree, a reference alignment evolved down it, and reads.

Seeded and vectorised, so the 1604.PRANK shape of the seed paper (802 taxa x 3,060 columns,
16,040 reads) builds in seconds. The sequences look like rRNA: a GC-rich root, conserved
stretches and variable regions with faster substitution (transitions twice as likely as
transversions), deletions and lineage-specific insertions in the variable regions. Reads are
fragments of held-out taxa (not in the reference) with sequencing errors and the occasional N.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BASES = np.frombuffer(b"ACGT", dtype=np.uint8)
GAP = ord("-")
_TRANSITION = np.zeros(256, dtype=np.uint8)
for _a, _b in (("A", "G"), ("G", "A"), ("C", "T"), ("T", "C")):
    _TRANSITION[ord(_a)] = ord(_b)


@dataclass
class SimulatedData:
    """A simulated PaPaRa input: Newick text, MSA rows and reads as (name, sequence)."""

    newick: str
    msa: list[tuple[str, str]]
    reads: list[tuple[str, str]]

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
) -> SimulatedData:
    """Simulate a reference alignment of ``n_taxa`` rows, its tree, and ``n_reads`` reads.

    ``n_columns`` is the root length; insertion columns in variable regions add to it, and
    columns that end up all-gap in the reference are removed. ``held_out`` taxa (default a
    quarter of ``n_taxa``, at least 2) are evolved but left out of the reference; reads come
    from them.
    """
    rng = np.random.default_rng(seed)
    held_out = max(2, n_taxa // 4) if held_out is None else held_out
    n_tips = n_taxa + held_out
    parent, blen, root = _tree(rng, n_tips)
    variable = _variable_mask(n_columns, rng)
    rates = np.where(variable, rng.gamma(2.0, 1.5, n_columns), rng.gamma(0.5, 0.4, n_columns))
    insertion = variable & (rng.random(n_columns) < 0.3)
    root_seq = rng.choice(BASES, n_columns, p=[0.22, 0.28, 0.31, 0.19])
    root_seq[insertion] = GAP
    seqs = {root: root_seq}
    order = sorted(range(len(parent)), key=lambda n: _depth(parent, n))
    for node in order:
        if node == root:
            continue
        seqs[node] = _evolve(rng, seqs[int(parent[node])], rates, variable, insertion, blen[node])
    width = len(str(n_tips))
    names = [f"{prefix}{k + 1:0{width}d}" for k in range(n_tips)]
    held = set(rng.choice(n_tips, held_out, replace=False).tolist())
    ref_ids = [k for k in range(n_tips) if k not in held]
    matrix = np.stack([seqs[k] for k in ref_ids])
    keep = (matrix != GAP).any(axis=0)
    msa = [(names[k], seqs[k][keep].tobytes().decode()) for k in ref_ids]
    reads = []
    held_ids = sorted(held)
    for r in range(n_reads):
        source = held_ids[r % len(held_ids)]
        raw = seqs[source][seqs[source] != GAP]
        size = int(min(rng.integers(read_length[0], read_length[1] + 1), len(raw)))
        start = int(rng.integers(0, len(raw) - size + 1))
        read = raw[start : start + size].copy()
        errors = rng.random(size) < 0.005
        read[errors] = rng.choice(BASES, int(errors.sum()))
        read[rng.random(size) < 0.001] = ord("N")
        reads.append(
            (
                f"read{r + 1:0{len(str(n_reads))}d} {names[source]} {start + 1}-{start + size}",
                read.tobytes().decode(),
            )
        )
    newick = _newick(parent, blen, names, root, set(ref_ids))
    return SimulatedData(newick, msa, reads)


def _depth(parent, node) -> int:
    depth = 0
    while parent[node] >= 0:
        node = parent[node]
        depth += 1
    return depth


def _evolve(rng, seq, rates, variable, insertion, t: float) -> np.ndarray:
    out = seq.copy()
    site = out != GAP
    change = site & (rng.random(len(out)) < 1 - np.exp(-rates * t))
    transition = rng.random(len(out)) < 2 / 3
    shift = rng.integers(1, 4, len(out))
    codes = np.searchsorted(BASES, out)  # A C G T -> 0..3 (gaps map past the end, unused)
    transversion = BASES[(codes + shift) % 4]
    out = np.where(change & transition, _TRANSITION[out], np.where(change, transversion, out))
    positions = np.flatnonzero(variable)
    for start in rng.choice(positions, rng.poisson(60 * t)) if positions.size else []:
        out[start : start + int(rng.integers(1, 6))] = GAP
    gained = insertion & (out == GAP) & (rng.random(len(out)) < 0.6 * t)
    out[gained] = rng.choice(BASES, int(gained.sum()))
    return out.astype(np.uint8)
