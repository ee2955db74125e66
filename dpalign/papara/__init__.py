"""PaPaRa: align short reads to a reference alignment and its tree (PaPaRa 2.5 compatible).

The pipeline reads as its steps: load and validate (``dataset``) → edges in PaPaRa order
(``tree``) → one profile per edge (``profiles``) → score every read against every edge on a
backend (``placement``) → trace back the best pairs (``traceback``) → write the reads into
the alignment (``msa``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..engine import Backend, get_backend
from ..gcups import RunStats
from ..io import format_fasta, format_phylip
from ..scoring import PaparaScoring, papara_scoring
from . import dataset, msa, placement, profiles, traceback

log = logging.getLogger("dpalign.papara")

__all__ = ["PaparaResult", "ReadPlacement", "papara"]


@dataclass(frozen=True)
class ReadPlacement:
    """Where a read went: its best edge (PaPaRa's index), that edge's smaller clade, score.

    ``edge`` is -1 and ``score`` None for a read that was empty after filtering.
    """

    read: str
    edge: int
    clade: tuple[str, ...]
    score: int | None


@dataclass
class PaparaResult:
    """The extended alignment and the placements.

    Unpacks as ``alignment, placements = dpalign.papara(...)``.

    Attributes
    ----------
    rows : list of (name, row)
        The output rows exactly as ``dpalign papara`` writes them.
    placements : list of ReadPlacement
    stats : RunStats
        Phases, cells and GCUPS.
    settings : dict
        The settings in effect (scoring, gap model, backend...).
    """

    rows: list[tuple[str, str]]
    placements: list[ReadPlacement]
    stats: RunStats
    settings: dict = field(default_factory=dict)

    def __iter__(self):
        yield self.alignment
        yield self.placements

    @property
    def alignment(self):
        """The rows as an ``skbio.TabularMSA`` (DNA/Protein; plain ``Sequence`` if a raw
        reference character such as ``?`` is not valid for the grammared type)."""
        import skbio

        kind = skbio.Protein if self.settings.get("protein") else skbio.DNA
        try:
            seqs = [kind(row, lowercase=True) for _, row in self.rows]
        except ValueError:
            seqs = [skbio.Sequence(row) for _, row in self.rows]
        return skbio.TabularMSA(seqs, index=[name for name, _ in self.rows])

    def to_phylip(self) -> str:
        """PHYLIP text, byte-identical to PaPaRa 2.5's ``papara_alignment.*``."""
        return format_phylip(self.rows)

    def to_fasta(self) -> str:
        """FASTA text, byte-identical to PaPaRa 2.5's ``-g`` output."""
        return format_fasta(self.rows)

    def placements_tsv(self) -> str:
        """TSV: read, best edge index, the edge's smaller clade (tip names), score."""
        lines = ["read\tedge\tclade\tscore\n"]
        for p in self.placements:
            score = "NA" if p.score is None else str(p.score)
            lines.append(f"{p.read}\t{p.edge}\t{','.join(p.clade) or 'NA'}\t{score}\n")
        return "".join(lines)


def papara(
    tree,
    msa_,
    reads=None,
    *,
    protein: bool = False,
    gap_model: str = "likelihood",
    scoring: str | PaparaScoring = "papara2",
    ref_gaps: bool = True,
    backend: str | Backend = "auto",
    threads: int | None = None,
    progress=None,
) -> PaparaResult:
    """Align reads to a reference alignment and tree, as PaPaRa 2.5 does.

    Parameters
    ----------
    tree : path, Newick text or skbio.TreeNode
        The reference tree (3-child root or rooted binary).
    msa_ : path (FASTA/PHYLIP), skbio.TabularMSA or list of (name, row)
        The reference alignment; rows that are not tips become extra reads.
    reads : path (FASTA), list of (name, seq) or skbio sequences, optional
    protein : bool
        Protein data.
    gap_model : {"likelihood", "cgap"}
        How gap flags are set per edge (PaPaRa's default, or ``-c``).
    scoring : "papara2", "bmc2012", "o:e:m:mc" or PaparaScoring
    ref_gaps : bool
        Let insertions add gap columns to the reference (False = PaPaRa's ``-r``).
    backend : str or Backend
        ``"auto"``, ``"numba"``, ``"reference"``, ``"opencl"``, ``"hybrid"``...
    threads : int, optional
        CPU worker threads.
    progress : callable, optional
        ``progress(cells_just_finished, total_cells)``, called as the scoring goes.

    Returns
    -------
    PaparaResult
    """
    scoring = papara_scoring(scoring)
    engine = get_backend(backend, threads=threads) if not isinstance(backend, Backend) else backend
    stats = engine.stats
    with stats.phase("load"):
        data = dataset.load(tree, msa_, reads, protein=protein)
    with stats.phase("profiles"):
        states, flags = profiles.dataset_profiles(data, gap_model)
    n_edges, n_cols = states.shape
    cells = n_edges * n_cols * sum(len(r) for r in data.reads)
    log.info(
        "%d reads x %d edges x %d columns, scoring %s, gap model %s, backend %s",
        len(data.reads),
        n_edges,
        n_cols,
        scoring,
        gap_model,
        engine.describe(),
    )
    with stats.phase("scoring", cells):
        tick = (lambda done: progress(done, cells)) if progress is not None else None
        placed = placement.place(states, flags, data.reads, scoring, engine, tick)
    with stats.phase("traceback"):
        ops = traceback.align_reads(
            states,
            flags,
            data.reads,
            placed.edge,
            placed.score,
            scoring,
            engine.name,
            threads=engine.threads,
        )
    with stats.phase("output"):
        rows = msa.extended_alignment(
            data.ref_names,
            data.ref_rows,
            data.ref_states,
            data.read_names,
            data.reads,
            ops,
            data.alphabet,
            ref_gaps,
        )
    clades = data.tree.clades(sorted({int(e) for e in placed.edge if e >= 0}))
    placements = [
        ReadPlacement(
            name,
            int(edge),
            clades[edge] if edge >= 0 else (),
            int(score) if edge >= 0 else None,
        )
        for name, edge, score in zip(data.read_names, placed.edge, placed.score, strict=True)
    ]
    settings = {
        "scoring": str(scoring),
        "gap_model": gap_model,
        "protein": protein,
        "ref_gaps": ref_gaps,
        "backend": engine.describe(),
        "reads": len(data.reads),
        "edges": n_edges,
        "columns": n_cols,
        "cells": cells,
    }
    return PaparaResult(rows, placements, stats, settings)
