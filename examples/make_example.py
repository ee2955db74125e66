"""Generate the bundled example: a 16S-like reference alignment, its tree, and reads.

Simulated (seeded, reproducible) by :func:`dpalign.benchmarks.simulate.simulate`: a GC-rich
root sequence with conserved stretches and nine variable regions evolved down a random binary
tree (transitions twice as likely as transversions; deletions and lineage-specific insertions in
the variable regions). The 300 reads are 90-160 nt fragments of 8 taxa that are *not* in the
24-taxon reference, with 0.5% sequencing errors and the occasional N, as from an amplicon run.

Run ``python examples/make_example.py`` to rewrite ``tree.nwk``, ``ref.fasta`` and
``reads.fasta`` beside this script.
"""

from pathlib import Path

from dpalign.benchmarks.simulate import simulate

if __name__ == "__main__":
    here = Path(__file__).parent
    data = simulate(
        n_taxa=24, n_columns=1450, n_reads=300, read_length=(90, 160), held_out=8, seed=16
    )
    data.write(here / "tree.nwk", here / "ref.fasta", here / "reads.fasta")
