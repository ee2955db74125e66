"""PaPaRa: align short reads to a reference alignment and its tree (PaPaRa 2.5 compatible).

The pipeline reads as its steps: load and validate (``dataset``) → edges in PaPaRa order
(``tree``) → one profile per edge (``profiles``) → score every read against every edge on a
backend (``placement``) → trace back the best pairs (``traceback``) → write the reads into
the alignment (``msa``).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

from ..engine import Backend, get_backend
from ..gcups import RunStats
from ..io import format_fasta, format_phylip
from ..scoring import ACCURATE, PaparaScoring, papara_scoring
from . import dataset, placement, profiles, traceback
from . import msa as msa_output

log = logging.getLogger("dpalign.papara")

__all__ = ["PaparaResult", "ReadPlacement", "papara"]


@dataclass(frozen=True)
class ReadPlacement:
    """Where a read went: its best edge (PaPaRa's index), that edge's smaller clade, score.

    ``edge`` is -1 and ``score`` None for a read that was empty after filtering. The
    confidence: ``second_edge``/``second_score`` the best other edge (the next tied one when
    several tie; None with a single edge), ``ties`` the edges at the best score, ``support``
    in (0, 1] (``1 / ties`` on a tie, else ``1 / (1 + exp(-margin / 2))``): how sure the
    edge is; ``fit`` the score over the best a read of its length could score: how well the
    read fits where it went (low fit flags reads whose columns are likely wrong).
    """

    read: str
    edge: int
    clade: tuple[str, ...]
    score: int | None
    second_edge: int | None = None
    second_score: int | None = None
    ties: int | None = None
    support: float | None = None
    fit: float | None = None


@dataclass
class PaparaResult:
    """The extended alignment and the placements.

    Unpacks and indexes like the pair ``(alignment, placements)``:
    ``alignment, placements = dpalign.papara(...)``, or ``result[0]``, ``result[1]``.

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

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self)[index]
        if index in (0, -2):
            return self.alignment
        if index in (1, -1):
            return self.placements
        raise IndexError(f"PaparaResult index {index} out of range (it is a pair)")

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
        """TSV: read, best edge index, the edge's smaller clade (tip names), score, then the
        confidence: second-best edge, its score, edges tied at the best score, support."""
        lines = ["read\tedge\tclade\tscore\tsecond_edge\tsecond_score\tties\tsupport\tfit\n"]

        def text(value) -> str:
            return "NA" if value is None else str(value)

        for p in self.placements:
            support = "NA" if p.support is None else f"{p.support:.4f}"
            fit = "NA" if p.fit is None else f"{p.fit:.4f}"
            lines.append(
                f"{p.read}\t{p.edge}\t{','.join(p.clade) or 'NA'}\t{text(p.score)}\t"
                f"{text(p.second_edge)}\t{text(p.second_score)}\t{text(p.ties)}\t{support}\t"
                f"{fit}\n"
            )
        return "".join(lines)


class _ReadPrinter:
    """Prints reads with their kept ambiguity codes (the accurate mode): N, not a gap."""

    def __init__(self, alphabet) -> None:
        self.letters = alphabet.read_letters


def papara(
    tree,
    msa=None,
    reads=None,
    *,
    protein: bool = False,
    gap_model: str = "likelihood",
    scoring: str | PaparaScoring = "papara2",
    ref_gaps: bool = True,
    backend: str | Backend = "auto",
    threads: int | None = None,
    progress=None,
    msa_=None,
    accurate: bool = False,
) -> PaparaResult:
    """Align reads to a reference alignment and tree, as PaPaRa 2.5 does.

    Parameters
    ----------
    tree : path, Newick text or skbio.TreeNode
        The reference tree (3-child root or rooted binary).
    msa : path (FASTA/PHYLIP), skbio.TabularMSA or list of (name, row)
        The reference alignment; rows that are not tips become extra reads. (``msa_``, its
        old name, still works and warns.)
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
    accurate : bool
        The accurate mode (not PaPaRa 2.5's output): a mismatch score
        (:data:`dpalign.scoring.ACCURATE` unless ``scoring`` is given), so that a read's
        unrelated ends stay insertions instead of being pulled into reference columns, and
        ambiguity codes (``N``, ``X``...) kept in reads as state sets instead of dropped.

    Returns
    -------
    PaparaResult
    """
    if msa_ is not None:
        if msa is not None:
            raise TypeError("papara() got the reference alignment twice (msa and msa_)")
        warnings.warn(
            "papara(msa_=...) is now papara(msa=...); msa_ will go away",
            DeprecationWarning,
            stacklevel=2,
        )
        msa = msa_
    if msa is None:
        raise TypeError("papara() needs the reference alignment (msa)")
    if accurate and scoring == "papara2":
        scoring = ACCURATE
    scoring = papara_scoring(scoring)
    engine = get_backend(backend, threads=threads) if not isinstance(backend, Backend) else backend
    stats = engine.stats
    with stats.phase("load"):
        data = dataset.load(tree, msa, reads, protein=protein, keep_ambiguous=accurate)
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
            states, flags, data.reads, placed.edge, placed.score, scoring, engine
        )
    with stats.phase("output"):
        rows = msa_output.extended_alignment(
            data.ref_names,
            data.ref_rows,
            data.ref_states,
            data.read_names,
            data.reads,
            ops,
            _ReadPrinter(data.alphabet) if accurate else data.alphabet,
            ref_gaps,
        )
        if accurate and not ref_gaps:  # reference rows print normalised, N as a gap
            for k, states in enumerate(data.ref_states):
                rows[k] = (rows[k][0], data.alphabet.letters(states))
    support = placed.support(scoring)
    fit = placed.fit(scoring, [len(r) for r in data.reads])
    placements = [
        ReadPlacement(
            name,
            int(edge),
            tuple(data.tree.smaller_side(data.tree.edges[edge])) if edge >= 0 else (),
            int(score) if edge >= 0 else None,
            int(placed.second_edge[k]) if edge >= 0 and placed.second_edge[k] >= 0 else None,
            int(placed.second_score[k]) if edge >= 0 and placed.second_edge[k] >= 0 else None,
            int(placed.ties[k]) if edge >= 0 else None,
            float(support[k]) if edge >= 0 else None,
            float(fit[k]) if edge >= 0 else None,
        )
        for k, (name, edge, score) in enumerate(
            zip(data.read_names, placed.edge, placed.score, strict=True)
        )
    ]
    settings = {
        "scoring": str(scoring),
        "gap_model": gap_model,
        "protein": protein,
        "ref_gaps": ref_gaps,
        "accurate": accurate,
        "backend": engine.describe(),
        "reads": len(data.reads),
        "edges": n_edges,
        "columns": n_cols,
        "cells": cells,
    }
    return PaparaResult(rows, placements, stats, settings)
