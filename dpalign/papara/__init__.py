"""PaPaRa: align short reads to a reference alignment and its tree (PaPaRa 2.5 compatible).

The pipeline reads as its steps: load and validate (``dataset``) → edges in PaPaRa order
(``tree``) → one profile per edge (``profiles``) → score every read against every edge on a
backend (``placement``) → trace back the best pairs (``traceback``) → write the reads into
the alignment (``msa``).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .. import config
from ..alphabet import DNA, PROTEIN
from ..engine import Backend, get_backend
from ..gcups import RunStats
from ..io import RowWriter
from ..scoring import PaparaScoring, papara_scoring
from . import dataset, msa, placement, profiles, traceback

log = logging.getLogger("dpalign.papara")

__all__ = ["PHASES", "PaparaResult", "ReadPlacement", "papara"]


@dataclass(frozen=True)
class ReadPlacement:
    """Where a read went: its best edge (PaPaRa's index), that edge's smaller clade, score.

    ``edge`` is -1 and ``score`` None for a read that was empty after filtering.
    """

    read: str
    edge: int
    clade: tuple[str, ...]
    score: int | None


class PaparaResult:
    """The extended alignment and the placements.

    Unpacks as ``alignment, placements = dpalign.papara(...)``. The output rows are rendered
    when asked for (``rows``, ``to_phylip``...) or streamed to a file (:meth:`write`), a batch
    of reads at a time, so a run over millions of reads never holds them all as text.

    Attributes
    ----------
    stats : RunStats
        Phases, cells and GCUPS.
    settings : dict
        The settings in effect (scoring, gap model, backend...).
    """

    def __init__(
        self, data, ops, edge, score, clades, ref_gaps: bool, stats, settings, printer=None
    ):
        self._data = data
        self._printer = printer or data.alphabet  # prints read states (``.letters``)
        self._ops = ops
        self._edge = edge
        self._score = score
        self._clades = clades
        self._widths = ops.widths if ref_gaps else None
        self.stats: RunStats = stats
        self.settings: dict = settings
        self._rows: list[tuple[str, str]] | None = None
        self._placements: list[ReadPlacement] | None = None

    def __iter__(self):
        yield self.alignment
        yield self.placements

    @property
    def rows(self) -> list[tuple[str, str]]:
        """The output rows, (name, row), exactly as ``dpalign papara`` writes them."""
        if self._rows is None:
            self._rows = [
                (name, row.tobytes().decode("ascii"))
                for names, block in self._blocks()
                for name, row in zip(names, block, strict=True)
            ]
        return self._rows

    @property
    def placements(self) -> list[ReadPlacement]:
        """Where each read went (read order)."""
        if self._placements is None:
            self._placements = [
                ReadPlacement(
                    name,
                    int(edge),
                    self._clades[edge] if edge >= 0 else (),
                    int(score) if edge >= 0 else None,
                )
                for name, edge, score in zip(
                    self._data.read_names, self._edge.tolist(), self._score, strict=True
                )
            ]
        return self._placements

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

    def _reference_rows(self) -> list[bytes]:
        data = self._data
        if self._widths is not None:
            return [msa.reference_row(row, self._widths).encode("ascii") for row in data.ref_rows]
        return [data.alphabet.letters(states).encode("ascii") for states in data.ref_states]

    def _blocks(self):
        """(names, uint8 rows matrix) for the references, then the reads in batches."""
        data = self._data
        refs = self._reference_rows()
        width = len(refs[0]) if refs else 0
        yield data.ref_names, np.frombuffer(b"".join(refs), dtype=np.uint8).reshape(-1, width)
        step = config.PAPARA_WRITE_READS
        n_sites = data.n_columns
        for start in range(0, len(data.reads), step):
            stop = min(start + step, len(data.reads))
            leads, cores = self._ops.batch(start, stop)
            states = data.reads[start:stop]
            flat = np.concatenate(states) if states else np.zeros(0, data.alphabet.dtype)
            letters = np.frombuffer(self._printer.letters(flat).encode("ascii"), np.uint8)
            block = msa.render_reads(leads, cores, letters, n_sites, self._widths)
            yield data.read_names[start:stop], block

    def write(self, handle, fmt: str = "phylip") -> None:
        """Stream the alignment to a binary ``handle`` (``phylip`` or ``fasta``)."""
        names = self._data.ref_names + self._data.read_names
        blocks = self._blocks()
        first = next(blocks)
        n_cols = first[1].shape[1]
        writer = RowWriter(handle, fmt, names, n_cols)
        writer.write(*first)
        for names_block, block in blocks:
            writer.write(names_block, block)

    def to_phylip(self) -> str:
        """PHYLIP text, byte-identical to PaPaRa 2.5's ``papara_alignment.*``."""
        return self._text("phylip")

    def to_fasta(self) -> str:
        """FASTA text, byte-identical to PaPaRa 2.5's ``-g`` output."""
        return self._text("fasta")

    def _text(self, fmt: str) -> str:
        import io

        buffer = io.BytesIO()
        self.write(buffer, fmt)
        return buffer.getvalue().decode("ascii")

    def write_placements(self, handle) -> None:
        """Stream the placements TSV (see :meth:`placements_tsv`) to a text ``handle``."""
        handle.write("read\tedge\tclade\tscore\n")
        joined = {edge: ",".join(clade) or "NA" for edge, clade in self._clades.items()}
        step = 65_536
        names, edges, scores = self._data.read_names, self._edge.tolist(), self._score.tolist()
        for start in range(0, len(names), step):
            handle.write(
                "".join(
                    f"{name}\t{edge}\t{joined[edge]}\t{score}\n"
                    if edge >= 0
                    else f"{name}\t{edge}\tNA\tNA\n"
                    for name, edge, score in zip(
                        names[start : start + step],
                        edges[start : start + step],
                        scores[start : start + step],
                        strict=True,
                    )
                )
            )

    def placements_tsv(self) -> str:
        """TSV: read, best edge index, the edge's smaller clade (tip names), score."""
        import io

        buffer = io.StringIO()
        self.write_placements(buffer)
        return buffer.getvalue()


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
    warm = _WarmUp(engine, scoring, protein)  # kernels load while the inputs are read
    try:
        with _phase(stats, "read"):
            data = dataset.load(tree, msa_, reads, protein=protein)
        with _phase(stats, "tree_profiles"):
            states, flags = profiles.dataset_profiles(data, gap_model)
    finally:
        with stats.phase("scoring"):  # what kernel loading the reading did not hide
            warm.join()
    n_edges, n_cols = states.shape
    lengths = np.fromiter(map(len, data.reads), dtype=np.int64, count=len(data.reads))
    cells = n_edges * n_cols * int(lengths.sum())
    log.info(
        "%d reads x %d edges x %d columns, scoring %s, gap model %s, backend %s",
        len(data.reads),
        n_edges,
        n_cols,
        scoring,
        gap_model,
        engine.describe(),
    )
    tick = (lambda done: progress(done, cells)) if progress is not None else None
    edge = np.full(len(data.reads), -1, dtype=np.int64)
    score = np.zeros(len(data.reads), dtype=np.int64)
    ops = msa.TrimmedOps(n_cols)
    step = max(1, config.PAPARA_BATCH_BYTES // (9 * max(n_edges, 1)))
    for start in range(0, max(len(data.reads), 1), step):
        stop = min(start + step, len(data.reads))
        reads_b = data.reads[start:stop]
        with stats.phase("scoring", n_edges * n_cols * int(lengths[start:stop].sum())):
            placed = placement.place(states, flags, reads_b, scoring, engine, tick)
        with stats.phase("traceback"):
            ops.extend(
                traceback.align_reads(
                    states,
                    flags,
                    reads_b,
                    placed.edge,
                    placed.score,
                    scoring,
                    engine.name,
                    threads=engine.threads,
                )
            )
        edge[start:stop] = placed.edge
        score[start:stop] = placed.score
    _log_phase(stats, "scoring")
    _log_phase(stats, "traceback")
    clades = data.tree.clades(np.unique(edge[edge >= 0]).tolist())
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
    return PaparaResult(data, ops, edge, score, clades, ref_gaps, stats, settings)


class _WarmUp:
    """Score and trace back one tiny read on a thread of its own, so that the backend loads
    its kernels (Numba's cached machine code, an OpenCL program) while the inputs are read.

    The warm-up goes through the same backend calls as the run, so it loads exactly what the
    run needs; its accounting goes to a throw-away ``RunStats``, and any error is left for the
    real run to raise.
    """

    def __init__(self, engine: Backend, scoring: PaparaScoring, protein: bool) -> None:
        import threading

        self.engine = engine
        self.stats = engine.stats
        engine.stats = RunStats()
        alphabet = PROTEIN if protein else DNA
        self.thread = threading.Thread(
            target=self._run, args=(scoring, alphabet), name="dpalign-warmup", daemon=True
        )
        self.thread.start()

    def _run(self, scoring: PaparaScoring, alphabet) -> None:
        try:
            states = np.full((1, 4), alphabet.gap, dtype=alphabet.dtype)
            flags = np.zeros((1, 4), dtype=np.uint8)
            read = [np.ones(2, dtype=alphabet.dtype)]
            placed = placement.place(states, flags, read, scoring, self.engine)
            traceback.align_reads(
                states, flags, read, placed.edge, placed.score, scoring, self.engine.name, 1
            )
        except Exception as exc:  # the run itself will meet and report it
            log.debug("warm-up: %s", exc)

    def join(self) -> None:
        self.thread.join()
        self.engine.stats = self.stats


#: What the phases are called where a user reads them.
PHASES = {
    "read": "read",
    "tree_profiles": "tree and profiles",
    "scoring": "scoring",
    "traceback": "traceback",
    "write": "write",
}


@contextmanager
def _phase(stats: RunStats, name: str):
    """``stats.phase`` that logs the phase's time (``-v``) when it ends."""
    with stats.phase(name):
        yield
    _log_phase(stats, name)


def _log_phase(stats: RunStats, name: str) -> None:
    log.info("%s: %.2f s", PHASES.get(name, name), stats.phases.get(name, 0.0))
