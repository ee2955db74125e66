"""Generate the bundled example: a 16S-like reference alignment, its tree, and reads.

The data are simulated (seeded, reproducible) to look like a small 16S rRNA study: a root
sequence with conserved stretches and nine variable regions (V1-V9), evolved down a random
binary tree with substitutions (transitions twice as likely as transversions) and insertions
and deletions concentrated in the variable regions. Reads are 90-160 nt fragments of taxa that
are *not* in the reference (siblings of reference taxa), with 0.5% sequencing errors and the
occasional N, as from an amplicon or metagenomic run.

Run ``python examples/make_example.py`` to rewrite ``tree.nwk``, ``ref.fasta`` and
``reads.fasta`` beside this script.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from skbio import TreeNode

SEED = 16
N_TAXA = 24  # reference taxa
N_HELD_OUT = 8  # taxa the reads come from
N_READS = 300
LENGTH = 1450  # root sequence length
BASES = np.array(list("ACGT"))
# Variable regions of 16S (approximate E. coli coordinates, scaled to LENGTH).
VARIABLE = [
    (69, 99),
    (137, 242),
    (433, 497),
    (576, 682),
    (822, 879),
    (986, 1043),
    (1117, 1173),
    (1243, 1294),
    (1435, 1465),
]


def site_rates(rng: np.random.Generator) -> np.ndarray:
    rates = rng.gamma(0.5, 0.4, LENGTH)  # conserved background
    for start, end in VARIABLE:
        lo, hi = int(start * LENGTH / 1542), int(end * LENGTH / 1542)
        rates[lo:hi] = rng.gamma(2.0, 1.5, hi - lo)
    return rates


def random_tree(rng: np.random.Generator, names: list[str]) -> TreeNode:
    """A random binary tree (coalescent-like joining) with branch lengths."""
    nodes = [TreeNode(name=n, length=float(rng.uniform(0.01, 0.08))) for n in names]
    while len(nodes) > 3:
        i, j = sorted(rng.choice(len(nodes), 2, replace=False))
        b, a = nodes.pop(j), nodes.pop(i)
        nodes.append(TreeNode(children=[a, b], length=float(rng.uniform(0.005, 0.05))))
    root = TreeNode(children=nodes)  # three children: the unrooted form PaPaRa reads
    for node in root.children:
        node.length = float(rng.uniform(0.005, 0.05))
    return root


def evolve(rng, seq: list[str], rates: np.ndarray, insertion_site: np.ndarray, t: float):
    """Substitutions and indels along a branch of length t (alignment columns kept)."""
    seq = list(seq)
    for k, ch in enumerate(seq):
        if ch == "-" or rng.random() > 1 - np.exp(-rates[k] * t):
            continue
        transition = {"A": "G", "G": "A", "C": "T", "T": "C"}[ch]
        seq[k] = transition if rng.random() < 2 / 3 else rng.choice([b for b in "ACGT" if b != ch])
    for _ in range(rng.poisson(60 * t)):  # deletions, in variable regions
        start, end = VARIABLE[rng.integers(len(VARIABLE))]
        pos = int(rng.integers(start, end) * LENGTH / 1542)
        for k in range(pos, min(pos + int(rng.integers(1, 6)), len(seq))):
            seq[k] = "-"
    for k in np.flatnonzero(insertion_site):  # insertions gained in this lineage
        if seq[k] == "-" and rng.random() < 0.6 * t:
            seq[k] = rng.choice(list("ACGT"))
    return seq


def main() -> None:
    rng = np.random.default_rng(SEED)
    rates = site_rates(rng)
    gc_bias = np.array([0.22, 0.28, 0.31, 0.19])  # 16S is GC-rich
    root_seq = list(rng.choice(BASES, LENGTH, p=gc_bias))
    # Columns where some lineages carry insertions: a gap in the root, in variable regions.
    insertion_site = np.zeros(LENGTH, dtype=bool)
    for start, end in VARIABLE:
        lo, hi = int(start * LENGTH / 1542), int(end * LENGTH / 1542)
        insertion_site[lo:hi] = rng.random(hi - lo) < 0.3
    for k in np.flatnonzero(insertion_site):
        root_seq[k] = "-"
    names = [f"OTU{k + 1:02d}" for k in range(N_TAXA + N_HELD_OUT)]
    tree = random_tree(rng, names)
    # Insertion columns: some taxa carry short insertions, the rest have gaps there.
    seqs: dict[str, list[str]] = {}
    for node in tree.preorder():
        if node.parent is None:
            seqs[id(node)] = root_seq
        else:
            parent = seqs[id(node.parent)]
            seqs[id(node)] = evolve(rng, parent, rates, insertion_site, node.length or 0.0)
    rows = {tip.name: seqs[id(tip)] for tip in tree.tips()}
    held = set(rng.choice(names, N_HELD_OUT, replace=False))
    ref_names = [n for n in names if n not in held]
    for name in list(held):
        tip = tree.find(name)
        parent = tip.parent
        parent.remove(tip)
        if len(parent.children) == 1 and parent.parent is not None:  # splice out unary nodes
            child = parent.children[0]
            child.length = (child.length or 0) + (parent.length or 0)
            parent.parent.append(child)
            parent.parent.remove(parent)
    tree.prune()
    if len(tree.children) == 2:  # keep PaPaRa's unrooted form (three children at the root)
        big = max(tree.children, key=lambda c: c.count(tips=True))
        if not big.is_tip():
            tree.remove(big)
            for child in list(big.children):
                child.length = (child.length or 0) + (big.length or 0) / 2
                tree.append(child)
    out = Path(__file__).parent
    tree.write(str(out / "tree.nwk"), format="newick")
    ref = {n: "".join(rows[n]) for n in ref_names}
    keep = [k for k in range(LENGTH) if any(ref[n][k] != "-" for n in ref_names)]
    with open(out / "ref.fasta", "w") as handle:
        for n in ref_names:
            handle.write(f">{n}\n{''.join(ref[n][k] for k in keep)}\n")
    with open(out / "reads.fasta", "w") as handle:
        held_sorted = sorted(held)
        for r in range(N_READS):
            source = held_sorted[r % len(held_sorted)]
            raw = "".join(rows[source]).replace("-", "")
            size = int(rng.integers(90, 161))
            start = int(rng.integers(0, len(raw) - size))
            read = list(raw[start : start + size])
            for k in range(size):
                if rng.random() < 0.005:
                    read[k] = rng.choice([b for b in "ACGT" if b != read[k]])
                elif rng.random() < 0.001:
                    read[k] = "N"
            handle.write(f">read{r + 1:04d} {source} {start + 1}-{start + size}\n")
            handle.write("".join(read) + "\n")


if __name__ == "__main__":
    main()
