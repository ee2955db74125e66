"""PaPaRa: align short reads to a reference alignment and its tree (PaPaRa 2.5 compatible).

The pipeline reads as its steps: load and validate (``dataset``) → edges in PaPaRa order
(``tree``) → one profile per edge (``profiles``) → score every read against every edge on a
backend (``placement``) → trace back the best pairs (``traceback``) → write the reads into
the alignment (``msa``).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .. import config
from ..alphabet import DNA, PROTEIN
from ..engine import Backend, get_backend
from ..gcups import RunStats
from ..io import RowWriter
from ..scoring import ACCURATE, PaparaScoring, papara_scoring
from . import dataset, placement, profiles, refine, traceback
from . import msa as msa_output

log = logging.getLogger("dpalign.papara")

__all__ = ["PHASES", "PaparaResult", "ReadPlacement", "papara"]


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


class PaparaResult:
    """The extended alignment and the placements.

    Unpacks and indexes like the pair ``(alignment, placements)``:
    ``alignment, placements = dpalign.papara(...)``, or ``result[0]``, ``result[1]``. The output
    rows are rendered
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
        self, data, ops, placed, support, fit, clades, ref_gaps: bool, stats, settings, printer=None
    ):
        self._data = data
        self._placed = placed  # placement.Placements of every read, with the confidence
        self._support = support
        self._fit = fit
        self._printer = printer or data.alphabet  # prints read states (``.letters``)
        self._ops = ops
        self._edge = placed.edge
        self._score = placed.score
        self._clades = clades
        self._widths = ops.widths if ref_gaps else None
        self.stats: RunStats = stats
        self.settings: dict = settings
        self._rows: list[tuple[str, str]] | None = None
        self._placements: list[ReadPlacement] | None = None

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
        """Where each read went (read order), with the confidence of each placement."""
        if self._placements is None:
            self._placements = [
                ReadPlacement(
                    name,
                    edge,
                    self._clades[edge] if edge >= 0 else (),
                    *(conf if edge >= 0 else (None,) * 6),
                )
                for name, edge, conf in zip(
                    self._data.read_names, self._edge.tolist(), self._confidence(), strict=True
                )
            ]
        return self._placements

    def _confidence(self, start: int = 0, stop: int | None = None):
        """(score, second_edge, second_score, ties, support, fit) per read of a range."""
        p = self._placed
        stop = len(p.edge) if stop is None else stop
        for k in range(start, stop):
            has_second = int(p.second_edge[k]) >= 0
            yield (
                int(p.score[k]),
                int(p.second_edge[k]) if has_second else None,
                int(p.second_score[k]) if has_second else None,
                int(p.ties[k]),
                float(self._support[k]),
                float(self._fit[k]),
            )

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
            return [
                msa_output.reference_row(row, self._widths).encode("ascii") for row in data.ref_rows
            ]
        return [data.alphabet.letters(states).encode("ascii") for states in data.ref_states]

    def _blocks(self):
        """(names, uint8 rows matrix) for the references, then the reads in batches."""
        data = self._data
        refs = self._reference_rows()
        width = len(refs[0]) if refs else 0
        yield data.ref_names, np.frombuffer(b"".join(refs), dtype=np.uint8).reshape(-1, width)
        yield from _read_blocks(data, self._ops, self._printer, self._widths, 0, len(data.reads))

    def write(self, handle, fmt: str = "phylip", threads: int | None = None) -> None:
        """Stream the alignment to a binary ``handle`` (``phylip`` or ``fasta``).

        The reads' rows are rendered and encoded a block of ``PAPARA_WRITE_READS`` at a time
        on ``threads`` threads (default: up to ``PAPARA_WRITE_THREADS``) while this thread
        writes the blocks in order; at most two blocks per thread are held at once.
        """
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        data = self._data
        names = data.ref_names + data.read_names
        refs = self._reference_rows()
        width = len(refs[0]) if refs else 0
        writer = RowWriter(handle, fmt, names, width)
        writer.write(data.ref_names, np.frombuffer(b"".join(refs), np.uint8).reshape(-1, width))
        step = config.PAPARA_WRITE_READS
        ranges = [(lo, min(lo + step, len(data.reads))) for lo in range(0, len(data.reads), step)]
        if not ranges:
            return
        self._ops.batch(0, 0)  # the leads joined once, before the threads read them
        printer, widths = self._printer, self._widths

        def encoded(lo: int, hi: int):
            return writer.encode(*_read_block(data, self._ops, printer, widths, lo, hi))

        n = threads or min(config.PAPARA_WRITE_THREADS, config.cpu_threads(None))
        if n <= 1 or len(ranges) == 1:
            for lo, hi in ranges:
                writer.write_encoded(encoded(lo, hi))
            return
        with ThreadPoolExecutor(n, thread_name_prefix="dpalign-write") as pool:
            pending: deque = deque()
            for lo, hi in ranges:
                pending.append(pool.submit(encoded, lo, hi))
                if len(pending) >= 2 * n:
                    writer.write_encoded(pending.popleft().result())
            while pending:
                writer.write_encoded(pending.popleft().result())

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
        handle.write("read\tedge\tclade\tscore\tsecond_edge\tsecond_score\tties\tsupport\tfit\n")
        joined = {edge: ",".join(clade) or "NA" for edge, clade in self._clades.items()}
        names, edges = self._data.read_names, self._edge.tolist()

        def text(value) -> str:
            return "NA" if value is None else str(value)

        step = 65_536
        for start in range(0, len(names), step):
            stop = min(start + step, len(names))
            rows = []
            for name, edge, conf in zip(
                names[start:stop], edges[start:stop], self._confidence(start, stop), strict=True
            ):
                if edge < 0:
                    rows.append(f"{name}\t{edge}\tNA\tNA\tNA\tNA\tNA\tNA\tNA\n")
                    continue
                score, second_edge, second_score, ties, support, fit = conf
                rows.append(
                    f"{name}\t{edge}\t{joined[edge]}\t{score}\t{text(second_edge)}\t"
                    f"{text(second_score)}\t{ties}\t{support:.4f}\t{fit:.4f}\n"
                )
            handle.write("".join(rows))

    def placements_tsv(self) -> str:
        """TSV: read, best edge index, the edge's smaller clade (tip names), score, then the
        confidence: second-best edge, its score, edges tied at the best score, support, fit."""
        import io

        buffer = io.StringIO()
        self.write_placements(buffer)
        return buffer.getvalue()


def _without_collection(func):
    """Run ``func`` with the garbage collector off (as :func:`dataset.no_collection`): a
    PaPaRa run holds ~10 objects a read and makes no cycles; a full collection over them
    stalled the pipeline 36-52 ms now and then (two H200s, PRANK x 2: between two batches
    and right after the load)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with dataset.no_collection():
            return func(*args, **kwargs)

    return wrapper


@_without_collection
def papara(
    tree,
    msa=None,
    reads=None,
    *,
    protein: bool = False,
    gap_model: str = "likelihood",
    scoring: str | PaparaScoring = "papara2",
    ref_gaps: bool = True,
    backend: str | Backend | Callable[[], Backend] = "auto",
    threads: int | None = None,
    progress=None,
    msa_=None,
    accurate: bool = False,
    stream=None,
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
    backend : str, Backend or callable
        ``"auto"``, ``"numba"``, ``"reference"``, ``"opencl"``, ``"hybrid"``..., or a function
        of no arguments that returns a Backend (called on a thread while the inputs are read,
        as the CLI does: finding the OpenCL devices takes a third of a second).
    threads : int, optional
        CPU worker threads.
    progress : callable, optional
        ``progress(cells_just_finished, total_cells)``, called as the scoring goes.
    accurate : bool
        The accurate mode (not PaPaRa 2.5's output): a mismatch score
        (:data:`dpalign.scoring.ACCURATE` unless ``scoring`` is given), so that a read's
        unrelated ends stay insertions instead of being pulled into reference columns;
        ambiguity codes (``N``, ``X``...) kept in reads as state sets instead of dropped; and a
        second pass (:mod:`dpalign.papara.refine`, on the CPU whatever the backend) that
        re-aligns each read against its edge's distance-weighted residue and gap frequencies
        and a mixture of the edge's nearest reference rows, by posterior decoding. The
        placements are the first pass's.
    stream : (binary handle, "phylip" or "fasta"), optional
        With ``ref_gaps=False`` only: write the alignment to the handle as each batch of
        reads is traced back (the columns are the reference's, so no later read changes an
        earlier row), while the device scores the next batch; a million-read run then has
        no write phase of its own at the end. The result's :meth:`PaparaResult.write` still
        renders the same bytes again if asked.

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
    if stream is not None and ref_gaps:
        raise ValueError(
            "papara(stream=...) needs ref_gaps=False (reference gaps are known "
            "only once every read is aligned)"
        )
    if accurate and scoring == "papara2":
        scoring = ACCURATE
    scoring = papara_scoring(scoring)
    if isinstance(backend, Backend):
        threads = backend.threads
    elif not callable(backend):
        name = backend
        backend = lambda: get_backend(name, threads=threads)  # noqa: E731 - built on a thread
    # The backend is found (OpenCL's platforms: ~0.3 s on the H100 host) and its kernels
    # loaded on a thread of its own while the inputs are read.
    early = RunStats()
    early.mark("papara() called")
    # The CPU kernel of the edge profiles loads (Numba) on a thread of its own from the start,
    # unless the backend may be one whose device computes them: then only once the backend
    # is found and turns out not to.
    loader = _ProfileKernel(PROTEIN if protein else DNA, early)
    _start_device_processes(backend, early)
    on_device = _device_may_profile(backend)
    if not on_device:
        loader.start()
    warm = _WarmUp(backend, scoring, protein, early, loader if on_device else None)
    # The reads file is read on a thread of its own while the tree, the reference and the
    # edge profiles (Numba, without the GIL) are built on this one.
    reader = _Reader(reads, early)
    try:
        with early.phase("read"), early.span("read: the tree and the reference"):
            reference = dataset.load_reference(tree, msa, protein)
        data = None
        if on_device:
            # the reads encoded while the backend is still being found (pyopencl's import,
            # the driver's start), rather than after the device's profiles
            with _phase(early, "read"):
                records, reads_path = reader.result()
                data = dataset.add_reads(reference, records, reads_path, accurate)
        with _phase(early, "tree_profiles"):
            device = warm.profile_device() if on_device else None
            if device is None:
                loader.start()  # (started already, unless the device was to compute them)
            states, flags = profiles.dataset_profiles(reference.data, gap_model, threads, device)
        loader.join()  # done: the profiles waited for its load
        if data is None:
            with _phase(early, "read"):  # the reads: what the profiles did not hide
                records, reads_path = reader.result()
                data = dataset.add_reads(reference, records, reads_path, accurate)
    except BaseException:
        reader.result(quiet=True)
        warm.join(quiet=True)  # the inputs' error comes first
        raise
    with early.phase("scoring"), early.span("waiting for the backend's warm-up"):
        # what finding the backend and its kernels did not hide
        engine = warm.join()
    stats = engine.stats
    stats.add_phases(early)
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
    second_edge = np.full(len(data.reads), -1, dtype=np.int64)
    second_score = np.zeros(len(data.reads), dtype=np.int64)
    ties = np.zeros(len(data.reads), dtype=np.int64)
    ops = msa_output.TrimmedOps(n_cols)
    refiner = refine.Refiner(data, engine) if accurate else None
    printer = _ReadPrinter(data.alphabet) if accurate else None
    writer = None
    if stream is not None:
        with stats.phase("write"):
            handle, fmt = stream
            names = data.ref_names + data.read_names
            writer = RowWriter(handle, fmt, names, n_cols)
            refs = [data.alphabet.letters(row).encode("ascii") for row in data.ref_states]
            writer.write(
                data.ref_names, np.frombuffer(b"".join(refs), np.uint8).reshape(-1, n_cols)
            )
    overlap = engine.kind in ("device", "pool")  # the scoring leaves (some) cores free
    batches = _batches(len(data.reads), n_edges, overlap)

    with stats.phase("scoring"), stats.span("profiles laid out for the backend"):
        # laid out once: a device keeps them across batches
        blocks = placement.pack_profiles(states, flags, engine) if n_edges else None
    warm.start_late()  # beside the first batch

    def score_batch(start: int, stop: int):
        cells = n_edges * n_cols * int(lengths[start:stop].sum())
        with stats.phase("scoring", cells), stats.span(f"scoring reads {start}:{stop}"):
            reads = data.reads[start:stop]
            return placement.score(states, flags, reads, scoring, engine, tick, blocks)

    def fold_batch(start: int, stop: int, scored):
        with stats.phase("scoring"), stats.span(f"best edges of reads {start}:{stop}"):
            return placement.fold(scored, scoring, engine)

    def trace_batch(start: int, stop: int, placed) -> None:
        with stats.phase("traceback"), stats.span(f"traceback reads {start}:{stop}"):
            leads, cores = traceback.align_reads(
                states,
                flags,
                data.reads[start:stop],
                placed.edge,
                placed.score,
                scoring,
                engine,
            )
            if refiner is None:
                ops.extend_trimmed(leads, cores)
        if refiner is not None:
            with stats.phase("refine"):
                first = [
                    msa_output.untrim_ops(lead, core, n_cols)
                    for lead, core in zip(leads, cores, strict=True)
                ]
                ops.extend(refiner.refine(data.reads[start:stop], placed.edge, first, states))
        if writer is not None:
            with stats.phase("write"), stats.span(f"write reads {start}:{stop}"):
                for names, block in _read_blocks(
                    data, ops, printer or data.alphabet, None, start, stop
                ):
                    writer.write(names, block)
        edge[start:stop] = placed.edge
        score[start:stop] = placed.score
        second_edge[start:stop] = placed.second_edge
        second_score[start:stop] = placed.second_score
        ties[start:stop] = placed.ties

    if overlap and len(batches) > 1:
        # The device scores the batches back to back while the cores trace the scored ones
        # back (a work queue's CPU workers take fewer units meanwhile); only the last
        # batch's traceback is left in the open.
        from contextlib import closing

        with closing(_pipelined(batches, score_batch, fold_batch)) as placed_batches:
            for start, stop, placed in placed_batches:
                trace_batch(start, stop, placed)
    else:
        for start, stop in batches:
            trace_batch(start, stop, fold_batch(start, stop, score_batch(start, stop)))
    warm.finish(stats)
    _log_phase(stats, "scoring")
    _log_phase(stats, "traceback")
    if refiner is not None:
        _log_phase(stats, "refine")
    clades = data.tree.clades(np.unique(edge[edge >= 0]).tolist())
    placed = placement.Placements(
        edge, score, np.zeros(len(edge), np.uint8), cells, second_edge, second_score, ties
    )
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
    support, fit = placed.support(scoring), placed.fit(scoring, lengths)
    return PaparaResult(data, ops, placed, support, fit, clades, ref_gaps, stats, settings, printer)


def _pipelined(batches, score_batch, fold_batch):
    """``(start, stop, placements)`` of each batch in order, from a scoring thread that scores
    the batches back to back and a fold thread that picks each one's best edges.

    The scoring thread never waits for the caller (two H200s, 05:40 UTC: the device idled
    0.07-0.12 s between batches while the main thread, which used to hand out the next
    batch, finished the traceback before) nor for a fold (16k reads x 1,601 edges: 0.16 s
    there). It starts batch k once batch k - 2's fold is done, so at most two batches' score
    matrices are alive (one being folded, one being filled). Closing the generator (an
    error on the caller's side) stops the scoring after the batch in hand.
    """
    import queue
    import threading
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    ready: queue.Queue = queue.Queue()
    stop = threading.Event()
    folds = ThreadPoolExecutor(1, thread_name_prefix="dpalign-fold")

    def drive() -> None:
        recent: deque = deque()
        try:
            for start, end in batches:
                if stop.is_set():
                    return
                if len(recent) == 2:
                    recent.popleft().result()  # its scores are gone (an error: raised here)
                scored = score_batch(start, end)
                future = folds.submit(fold_batch, start, end, scored)
                del scored  # the fold holds them, and lets them go when it is done
                recent.append(future)
                ready.put(future)
        except BaseException as exc:  # the caller raises it in turn
            ready.put(exc)

    driver = threading.Thread(target=drive, name="dpalign-scoring", daemon=True)
    driver.start()
    try:
        for start, end in batches:
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            yield start, end, item.result()
    finally:
        stop.set()
        driver.join()
        folds.shutdown(wait=True)


def _batches(n_reads: int, n_edges: int, overlap: bool) -> list[tuple[int, int]]:
    """(start, stop) of the read batches: score matrices under ``PAPARA_BATCH_BYTES`` and at
    most ``PAPARA_BATCH_READS`` reads; where the traceback overlaps the scoring, at least
    ``PAPARA_OVERLAP_BATCHES`` batches (of at least ``PAPARA_OVERLAP_MIN_READS`` reads), so
    that all but the last batch's traceback hide behind the device's scoring, and (with
    ``PAPARA_TAPER``) each batch half the reads left, so that the last one is small: between
    ``PAPARA_OVERLAP_MIN_READS`` and twice that."""
    step = max(
        1, min(config.PAPARA_BATCH_BYTES // (9 * max(n_edges, 1)), config.PAPARA_BATCH_READS)
    )
    least = max(1, config.PAPARA_OVERLAP_MIN_READS)
    if overlap:
        parts = min(config.PAPARA_OVERLAP_BATCHES, n_reads // least)
        if parts > 1:
            step = min(step, -(-n_reads // parts))
    if not (overlap and config.PAPARA_TAPER) or n_reads < 2 * least:
        return [(a, min(a + step, n_reads)) for a in range(0, max(n_reads, 1), step)]
    out: list[tuple[int, int]] = []
    start = 0
    while start < n_reads:
        left = n_reads - start
        size = min(step, max(least, -(-left // 2)))
        if left - size < least and left <= step:
            size = left  # no batch smaller than the least: the last takes what remains
        out.append((start, start + size))
        start += size
    return out


def _read_blocks(data, ops, printer, widths, start: int, stop: int):
    """(names, uint8 rows matrix) of reads ``start:stop``, ``PAPARA_WRITE_READS`` at a time."""
    step = config.PAPARA_WRITE_READS
    for lo in range(start, stop, step):
        yield _read_block(data, ops, printer, widths, lo, min(lo + step, stop))


def _read_block(data, ops, printer, widths, lo: int, hi: int):
    """(names, uint8 rows matrix) of reads ``lo:hi``."""
    leads, cores = ops.batch(lo, hi)
    states = data.reads[lo:hi]
    flat = np.concatenate(states) if states else np.zeros(0, data.alphabet.dtype)
    letters = np.frombuffer(printer.letters(flat).encode("ascii"), np.uint8)
    block = msa_output.render_reads(leads, cores, letters, data.n_columns, widths)
    return data.read_names[lo:hi], block


class _Reader:
    """``dataset.reads_records(reads)`` on a thread of its own (``result`` waits for it)."""

    def __init__(self, reads, timeline: RunStats) -> None:
        import threading

        self.records = self.path = self.error = None
        self.timeline = timeline
        self.thread = threading.Thread(
            target=self._run, args=(reads,), name="dpalign-reads", daemon=True
        )
        self.thread.start()

    def _run(self, reads) -> None:
        try:
            with self.timeline.span("reads file read (beside the reference and profiles)"):
                self.records, self.path = dataset.reads_records(reads)
        except BaseException as exc:  # raised on the caller's thread by result()
            self.error = exc

    def result(self, quiet: bool = False):
        """(records, path) of the reads; raises what reading them raised (unless ``quiet``,
        on the way out of another error)."""
        self.thread.join()
        if self.error is not None and not quiet:
            raise self.error
        return self.records, self.path


def _device_may_profile(backend) -> bool:
    """Whether ``backend`` (as :func:`papara` takes it) may turn out to be one whose device
    computes the edge profiles (:meth:`~dpalign.contract.Backend.profile_device`): a ready
    device or work-queue backend, else as its name says
    (:func:`dpalign.hybrid.backend.may_profile_on_device`); a function that does not say is
    taken as a CPU backend."""
    if isinstance(backend, Backend):
        return backend.kind in ("device", "pool")
    name = _backend_name(backend)
    if name is None:
        return False
    from ..hybrid.backend import may_profile_on_device  # (no OpenCL import)

    return may_profile_on_device(name)


def _start_device_processes(backend, timeline: RunStats) -> None:
    """Start the device processes of a work queue on several GPUs now, while this process
    reads the inputs and lists the GPUs (:func:`dpalign.hybrid.backend.start_ahead`; two
    H200s: they used to start 0.55 s after the run, and scored their first read 0.86 s after
    that). ``backend`` as :func:`papara` takes it (a function by its ``backend_name``)."""
    name = _backend_name(backend)
    if name is None:
        return
    from ..hybrid.backend import start_ahead

    try:
        started = start_ahead(name)
    except OSError as exc:  # (no process could be started: the work queue starts its own)
        log.debug("device processes started ahead: %s", exc)
        return
    if started:
        timeline.mark(f"{started} device processes started ahead")


def _backend_name(backend) -> str | None:
    """The name a backend is asked for by (a function: its ``backend_name``, the CLI's),
    None for a ready Backend or a function that does not say."""
    if isinstance(backend, str):
        return backend
    if isinstance(backend, Backend):
        return None
    return getattr(backend, "backend_name", None)


class _ProfileKernel:
    """:func:`profiles.load_kernel` on a thread of its own, from :meth:`start` (at the run's
    start, or where a device was to compute the profiles, once the backend is found not to):
    Numba's import and LLVM's set-up for the edge profiles begin beside the backend's warm-up
    and the reading, not once the reference is read (an error is left for the profiles to
    raise)."""

    def __init__(self, alphabet, timeline: RunStats) -> None:
        import threading

        self.timeline = timeline
        self.thread = threading.Thread(
            target=self._run, args=(alphabet,), name="dpalign-profile-kernel", daemon=True
        )
        self._lock = threading.Lock()
        self._started = False

    def start(self) -> None:
        """Start the load (once; later calls do nothing)."""
        with self._lock:
            if not self._started:
                self._started = True
                self.thread.start()

    def join(self) -> None:
        """Wait for the load, if it was started."""
        if self._started:
            self.thread.join()

    def _run(self, alphabet) -> None:
        try:
            with self.timeline.span("profile kernel loaded (beside the reading)"):
                profiles.load_kernel(alphabet.dtype, alphabet.gap)
        except Exception as exc:  # the profiles themselves will meet and report it
            log.debug("profile kernel load: %s", exc)


class _ReadPrinter:
    """Prints reads with their kept ambiguity codes (the accurate mode): N, not a gap."""

    def __init__(self, alphabet) -> None:
        self.letters = alphabet.read_letters


class _WarmUp:
    """Build the backend, then score and trace back one tiny read, on a thread of its own, so
    that the backend is found and loads its kernels (Numba's cached machine code, an OpenCL
    program) while the inputs are read.

    ``backend`` is a Backend or a function that builds one (an error building it is raised
    by :meth:`join`). The warm-up goes through the same backend calls as the run, so it loads
    exactly what the run needs; its accounting goes to a throw-away ``RunStats``, and any
    error of the warm-up itself is left for the real run to raise.

    Where a device scores (``kind`` device or pool: the traceback runs on the CPU backend),
    :meth:`join` returns once the read is scored, and the fold's and the traceback's Numba
    kernels load once :meth:`start_late` is called, beside the first batch (nothing needs them
    before its scores are back; earlier, they would slow the edge profiles' kernel, which the
    first launch waits for). :meth:`finish` waits for them.
    """

    def __init__(
        self,
        backend,
        scoring: PaparaScoring,
        protein: bool,
        timeline: RunStats,
        loader: _ProfileKernel | None = None,
    ) -> None:
        import threading

        self.timeline = timeline  # where the warm-up's own spans go
        # ``loader``: the profiles' CPU kernel, to start once the backend is found without
        # a device for them (None: no device was expected to compute them)
        self.loader = loader
        self.found = threading.Event()
        self._profile_device: Backend | None = None
        self.late: list[tuple[str, float, float | None]] = []  # spans after join()
        self.scored = threading.Event()
        self._late_args: tuple | None = None  # the warm-up read's scores, to fold and trace
        self._late: threading.Thread | None = None
        self.engine: Backend | None = None
        self.stats: RunStats | None = None
        self.error: BaseException | None = None
        alphabet = PROTEIN if protein else DNA
        self.thread = threading.Thread(
            target=self._run,
            args=(backend, scoring, alphabet),
            name="dpalign-warmup",
            daemon=True,
        )
        self.thread.start()

    def _run(self, backend, scoring: PaparaScoring, alphabet) -> None:
        try:
            with self.timeline.span("backend found"):
                engine = backend if isinstance(backend, Backend) else backend()
        except BaseException as exc:  # raised on the caller's thread by join()
            self.error = exc
            self.found.set()
            self.scored.set()
            return
        if self.loader is not None:
            try:
                self._profile_device = engine.profile_device()
            except Exception as exc:  # the run itself will meet and report it
                log.debug("warm-up: %s", exc)
            if self._profile_device is None:
                self.loader.start()
        self.found.set()
        self.engine, self.stats = engine, engine.stats
        engine.stats = self.scratch = RunStats()
        early = engine.kind in ("device", "pool")
        states = np.full((1, 4), alphabet.gap, dtype=alphabet.dtype)
        flags = np.zeros((1, 4), dtype=np.uint8)
        read = [np.ones(2, dtype=alphabet.dtype)]
        scored = None
        try:
            start = time.perf_counter()
            scored = placement.score(states, flags, read, scoring, self.engine)
            self.timeline.mark("warm-up: one read scored", start, time.perf_counter())
        except Exception as exc:  # the run itself will meet and report it
            log.debug("warm-up: %s", exc)
        if early:
            # The fold's and the traceback's Numba kernels are first needed when the first
            # batch's scores are back: they load beside that batch (:meth:`start_late`), not
            # now, when they would share Numba's compiler lock and the interpreter lock with
            # the edge profiles' kernel, which the first launch waits for.
            if scored is not None:
                self._late_args = (scored, states, flags, read, scoring)
            self.scored.set()
            return
        try:
            self._fold_and_trace(scored, states, flags, read, scoring)
        finally:
            self.scored.set()

    def _fold_and_trace(self, scored, states, flags, read, scoring) -> None:
        """Fold and trace back the warm-up read (the fold's and traceback's kernels load)."""
        try:
            if scored is not None:
                start = time.perf_counter()
                placed = placement.fold(scored, scoring, self.engine)
                traceback.align_reads(
                    states, flags, read, placed.edge, placed.score, scoring, self.engine
                )
                span = ("warm-up: one read folded and traced", start, time.perf_counter())
                (self.late if self._late_args else self.timeline.timeline).append(span)
        except Exception as exc:
            log.debug("warm-up: %s", exc)

    def start_late(self) -> None:
        """Where a device scores: start loading the fold's and the traceback's kernels (on
        a thread of their own), once the first launch is on its way."""
        import threading

        if self._late_args is None or self._late is not None:
            return
        self._late = threading.Thread(
            target=self._fold_and_trace,
            args=self._late_args,
            name="dpalign-warmup-late",
            daemon=True,
        )
        self._late.start()

    def profile_device(self) -> Backend | None:
        """The backend whose device computes the edge profiles, once the backend is found
        (its device may still be scoring the warm-up read: the profiles' program builds and
        runs beside it), or None: the CPU kernel does."""
        with self.timeline.span("waiting for the backend (edge profiles)"):
            self.found.wait()
        return self._profile_device

    def join(self, quiet: bool = False) -> Backend:
        """The backend, its own accounting back in place; raises what building it raised
        (unless ``quiet``, on the way out of another error)."""
        self.scored.wait()
        if self.engine is not None:
            self.engine.stats = self.stats
            # the backend's own events of the warm-up (device processes started, ...)
            self.timeline.timeline.extend(
                (f"warm-up: {name}", start, end) for name, start, end in self.scratch.timeline
            )
        if self.error is not None and not quiet:
            raise self.error
        return self.engine

    def finish(self, stats: RunStats) -> None:
        """Wait for the rest of the warm-up (the traceback's kernels); its spans go to
        ``stats``."""
        self.thread.join()
        if self._late is not None:
            self._late.join()
        stats.timeline.extend(self.late)


#: What the phases are called where a user reads them.
PHASES = {
    "read": "read",
    "tree_profiles": "tree and profiles",
    "scoring": "scoring",
    "traceback": "traceback",
    "refine": "second pass (accurate)",
    "write": "write",
}


@contextmanager
def _phase(stats: RunStats, name: str):
    """``stats.phase`` that logs the phase's time (``-v``) when it ends."""
    with stats.phase(name), stats.span(PHASES.get(name, name)):
        yield
    _log_phase(stats, name)


def _log_phase(stats: RunStats, name: str) -> None:
    log.info("%s: %.2f s", PHASES.get(name, name), stats.phases.get(name, 0.0))
