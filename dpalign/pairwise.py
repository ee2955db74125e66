"""Pairwise alignment: :func:`align` one pair with traceback, :func:`score` many pairs at once.

Scores follow scikit-bio 0.7's ``pair_align`` exactly (higher is better; ``gap_cost=g`` is
linear, ``gap_cost=(o, e)`` makes a gap of length k cost ``o + e*k``; see
:mod:`dpalign.scoring` for the table translating to parasail and Biopython). Modes:

* ``"global"``: Needleman-Wunsch. **End gaps are penalised** unless ``free_ends`` says
  otherwise (scikit-bio's own default is the overlap alignment, ``free_ends=True``; pass
  ``free_ends=True`` here to get it);
* ``"local"``: Smith-Waterman;
* ``"semiglobal"``: the query (``a``) aligned end to end, the target's ends free (read
  mapping); the same as ``mode="global", free_ends=(True, True, False, False)``.

Empty sequences have a defined result: aligned against an empty sequence, the other one is a
single gap, so the global score is ``-(o + e*k)`` for its k characters (0 when that end gap is
free), the CIGAR ``kI`` or ``kD`` (empty when free); local scores are 0 with an empty alignment
at (0, 0).

>>> r = align("ACGT", "AGT", gap_cost=2)
>>> r.score, r.cigar, (r.a_start, r.a_end, r.b_start, r.b_end)
(1, '1=1D2=', (0, 4, 0, 3))
>>> score(["ACGT", "AC"], ["AGT", "ACGT", "T"], mode="local").tolist()
[[2, 4, 1], [1, 2, 0]]
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import config, engine, reference
from .alphabet import reverse_complement_codes
from .engine import Backend, Task, gather_scores, query_batch
from .errors import OptionError
from .scoring import Scoring, as_scoring, free_ends_tuple

#: In ``pairs="zip"``, pairs sharing a query go through the SIMD kernels when at least this many
#: share it; the others are scored one by one by the scalar kernel.
ZIP_GROUP_MIN = 8
CIGAR_STYLES = ("=X", "M")


@dataclass(frozen=True)
class Alignment:
    """One pairwise alignment.

    Attributes
    ----------
    score : int or float
        In the user's units: a float when the scores had decimals (see :class:`Scoring`).
    a_start, a_end, b_start, b_end : int
        0-based, half-open: ``a[a_start:a_end]`` is aligned to ``b[b_start:b_end]``. Free end
        gaps are not part of the alignment; penalised ones are.
    ops : str
        One character per alignment column: ``=`` match, ``X`` mismatch, ``D`` a character of
        a against a gap, ``I`` a character of b against a gap.
    width : int
        Bits of the integer arithmetic that produced the score (64: scalar int64 traceback).
    backend : str
        What computed it (``numba`` or ``reference``).
    mode : str
    cigar_style : str
        ``"=X"`` (default) or ``"M"`` (matches and mismatches both ``M``).
    strand : {"+", "-"} or None
        With ``strand="minus"`` or ``"both"``: the strand of b aligned (``"-"``: b's reverse
        complement, and ``b_start``/``b_end`` count along that reverse complement, whose
        position p is b's position ``len(b) - 1 - p``). ``None`` when only the given strand
        was aligned.
    """

    score: int | float
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    ops: str
    width: int
    backend: str
    mode: str
    cigar_style: str = "=X"
    strand: str | None = None
    a_text: str = field(default="", repr=False)
    b_text: str = field(default="", repr=False)

    @property
    def cigar(self) -> str:
        """Run-length encoded operations (``=``/``X`` or ``M``, ``I``, ``D``)."""
        ops = self.ops
        if self.cigar_style == "M":
            ops = ops.replace("=", "M").replace("X", "M")
        return reference.run_length(ops)

    @property
    def path(self):
        """The alignment as a ``skbio.alignment.PairAlignPath`` (starts = a_start, b_start)."""
        from skbio.alignment import PairAlignPath

        if not self.ops:
            return PairAlignPath(
                lengths=np.zeros(0, dtype=np.int64),
                states=np.zeros((1, 0), dtype=np.uint8),
                starts=[self.a_start, self.b_start],
            )
        return PairAlignPath.from_cigar(
            reference.run_length(self.ops.replace("=", "M").replace("X", "M")),
            starts=[self.a_start, self.b_start],
        )

    def gapped(self) -> tuple[str, str]:
        """The aligned parts of a and b with ``-`` for gaps (equal lengths; vectorised)."""
        ops = np.frombuffer(self.ops.encode("ascii"), dtype=np.uint8)
        takes_a = ops != ord("I")
        takes_b = ops != ord("D")
        return (
            _gapped(self.a_text, self.a_start, takes_a),
            _gapped(self.b_text, self.b_start, takes_b),
        )

    def as_dict(self) -> dict:
        """A JSON-ready summary (coordinates 0-based, half-open)."""
        return {
            "score": self.score,
            "a_start": self.a_start,
            "a_end": self.a_end,
            "b_start": self.b_start,
            "b_end": self.b_end,
            "cigar": self.cigar,
            "mode": self.mode,
            "width": self.width,
            "backend": self.backend,
        } | ({"strand": self.strand} if self.strand is not None else {})


def _gapped(text: str, start: int, takes: np.ndarray) -> str:
    """``text[start:]`` laid along the columns where ``takes``, ``-`` elsewhere."""
    out = np.full(takes.size, ord("-"), dtype=np.uint8)
    if text.isascii():
        raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        out[takes] = raw[start : start + int(takes.sum())]
        return out.tobytes().decode("ascii")
    letters = iter(text[start:])  # non-ASCII symbols: rare and short
    return "".join(next(letters) if t else "-" for t in takes.tolist())


# --------------------------------------------------------------------------------------------
# Input
# --------------------------------------------------------------------------------------------


def _is_single(seq) -> bool:
    """A single sequence (as opposed to a collection of them)."""
    if isinstance(seq, (str, bytes, bytearray, memoryview)):
        return True
    if isinstance(seq, np.ndarray):
        return seq.ndim == 1
    return hasattr(seq, "values") and hasattr(seq, "metadata")  # a scikit-bio sequence


def encode_many(seqs, scoring: Scoring, what: str) -> tuple[list[np.ndarray], list[str]]:
    """Encode a collection of sequences; return ``(codes, names)``.

    Names are scikit-bio ``metadata['id']`` where present, else ``what[k]``.
    """
    if isinstance(seqs, np.ndarray) and seqs.ndim == 2:
        seqs = list(seqs)
    if not isinstance(seqs, Iterable):
        raise TypeError(f"{what} must be a sequence or a collection of sequences")
    codes, names = [], []
    for k, seq in enumerate(seqs):
        name = None
        if hasattr(seq, "metadata"):
            name = seq.metadata.get("id") or None
        name = name or f"{what}[{k}]"
        codes.append(np.ascontiguousarray(scoring.encode(seq, record=name), dtype=np.uint8))
        names.append(name)
    return codes, names


def _settings(mode, sub_score, gap_cost, free_ends, scoring):
    scoring = as_scoring(sub_score, gap_cost, scoring)
    ends = free_ends_tuple(mode, free_ends)
    return scoring, ends


_oracle_cells = 0  # cells align(backend="auto") has run in the oracle (config.ALIGN_ORACLE_CELLS)


def _oracle_pays(backend, cells: int) -> bool:
    """True when ``align(backend="auto")`` should run the NumPy oracle: the Numba traceback
    kernels are not loaded yet (loading them costs ~1 s) and the process has aligned at most
    ``config.ALIGN_ORACLE_CELLS`` cells in the oracle so far."""
    global _oracle_cells
    if backend != "auto" or "dpalign.simd.traceback" in sys.modules:
        return False
    if _oracle_cells + cells > config.ALIGN_ORACLE_CELLS:
        return False
    _oracle_cells += cells
    return True


# --------------------------------------------------------------------------------------------
# align
# --------------------------------------------------------------------------------------------


def align(
    a,
    b,
    mode: str = "global",
    sub_score=(1, -1),
    gap_cost=2,
    free_ends=None,
    *,
    backend: str = "auto",
    cigar: str = "=X",
    scoring: Scoring | None = None,
    threads: int | None = None,
    device: str | None = None,
    strand: str = "plus",
    progress=None,
    bands=None,
    prune: bool = False,
) -> Alignment:
    """Align two sequences with traceback.

    Parameters
    ----------
    a, b : str, bytes, scikit-bio sequence, or 1-D uint8 array of codes
        The query (rows of the DP matrix) and the target. Code arrays index the scoring's
        alphabet (``Scoring.alphabet``).
    mode : {"global", "local", "semiglobal"}
    sub_score : (match, mismatch), skbio.SubstitutionMatrix or str
        As in ``skbio.alignment.pair_align`` (e.g. ``"BLOSUM62"``).
    gap_cost : number or (o, e)
        Linear ``g`` per position, or affine: a gap of length k costs ``o + e*k``.
    free_ends : bool, 2-tuple or 4-tuple, optional
        Global mode only: which end gaps are free (scikit-bio's meaning). Default: none
        (true Needleman-Wunsch).
    backend : str or Backend
        Any registered backend (``"auto"``, ``"numba"``, ``"opencl"``, ``"reference"``...);
        the engine's traceback door runs the pair on it when it traces (``numba``,
        ``reference``), else on the CPU backend. ``numba``: compiled kernels; pairs of more
        than ``config.LONG_PAIR_CELLS`` cells take the long-pair path
        (:func:`dpalign.longpair.align_long`: tiles on every core, traceback in near-linear
        memory, the same alignment). ``opencl``: the long-pair path with its forward pass
        (and large recomputations) in anti-diagonal tiles on an OpenCL device, for any pair
        size (regions under ``Tiling.device_cells`` stay on the CPU, where they are faster).
        ``reference``: the plain-Python oracle.
    cigar : {"=X", "M"}
        CIGAR operations for aligned pairs.
    scoring : Scoring, optional
        A prepared scoring scheme (then ``sub_score`` and ``gap_cost`` are ignored).
    threads : int, optional
        CPU threads for long pairs (default: one per core).
    device : str, optional
        OpenCL device for ``backend="opencl"`` (see ``dpalign devices``; default: the
        ``DPALIGN_OPENCL_DEVICE`` variable, else the first GPU, else the first CPU device).
    strand : {"plus", "minus", "both"}
        Which strand of b (nucleotides) to align a with: b as given, its reverse complement,
        or both, keeping the better (ties: plus); ``Alignment.strand`` says which.
    progress : callable, optional
        Long pairs: called with the cells of each piece filled (see
        :func:`dpalign.longpair.align_long`).
    bands : dpalign.bands.Bands, optional
        Long pairs: column bands across several fillers (CPU fillers, devices, Dask workers).
    prune : bool
        Local long pairs on a device: skip the forward pass's tiles that cannot reach the
        best score found so far (CUDAlign's block pruning); the same alignment.

    Returns
    -------
    Alignment
        Ties are broken as :mod:`dpalign.reference` documents (end cell: first in row-major
        order; traceback prefers the diagonal, then a gap in b, then a gap in a).

    Raises
    ------
    InputError
        A character outside the scoring's alphabet (the message gives the position).
    OptionError
        Bad mode, scores or gap costs; a scheme the chosen backend's kernels cannot run
        (separate gap costs for a and b, or ``o < 0``: backend ``"reference"`` only, which
        ``"auto"`` then picks).
    """
    if cigar not in CIGAR_STYLES:
        raise OptionError(f"cigar must be '=X' or 'M', not {cigar!r}")
    scoring, ends, a_codes, b_codes, runner = _one_pair(
        a, b, mode, sub_score, gap_cost, free_ends, scoring, backend, threads, device, strand, prune
    )
    long = {"progress": progress, "bands": bands, "prune": prune}
    fields, which, b_shown, shown_strand = _best_strand(
        a_codes, b_codes, scoring, mode, ends, runner, threads, strand, **long
    )
    decode = scoring.alphabet.decode
    return Alignment(
        scoring.user(fields[0]),
        *fields[1:],
        width=64,
        backend=which,
        mode=mode,
        cigar_style=cigar,
        strand=shown_strand,
        a_text=decode(a_codes),
        b_text=decode(b_shown),
    )


@dataclass(frozen=True)
class PairScore:
    """One pair's best score and where its alignment ends, without the alignment.

    Attributes
    ----------
    score : int or float
        In the user's units (as :attr:`Alignment.score`).
    a_end, b_end : int
        Where the alignment ends: 0-based, exclusive, the same as :class:`Alignment`'s.
    strand : {"+", "-"} or None
        The strand of b scored (None unless ``strand`` was asked for).
    backend : str
        What filled the matrix.
    """

    score: int | float
    a_end: int
    b_end: int
    strand: str | None
    backend: str


def score_pair(
    a,
    b,
    mode: str = "global",
    sub_score=(1, -1),
    gap_cost=2,
    free_ends=None,
    *,
    backend: str = "auto",
    scoring: Scoring | None = None,
    threads: int | None = None,
    device: str | None = None,
    strand: str = "plus",
    progress=None,
    bands=None,
    prune: bool = False,
) -> PairScore:
    """Score one pair and find where its alignment ends, without the traceback.

    The parameters are :func:`align`'s. Long pairs (over ``config.LONG_PAIR_CELLS`` cells,
    or any pair on a device) run the forward pass of :func:`dpalign.longpair.align_long`
    only: on every device of ``bands.devices`` in skewed row bands, and a global pair whose
    ``bands`` allow it as two halves joined in the middle (``Bands(halves=True)``). Shorter
    pairs are aligned (a traceback costs little there). Score and end cell are
    :func:`align`'s, with the same tie rules.

    Returns
    -------
    PairScore
    """
    scoring, ends, a_codes, b_codes, runner = _one_pair(
        a, b, mode, sub_score, gap_cost, free_ends, scoring, backend, threads, device, strand, prune
    )
    long = {"progress": progress, "bands": bands, "prune": prune, "traceback": False}
    fields, which, _, shown_strand = _best_strand(
        a_codes, b_codes, scoring, mode, ends, runner, threads, strand, **long
    )
    return PairScore(scoring.user(fields[0]), fields[2], fields[4], shown_strand, which)


def _one_pair(
    a, b, mode, sub_score, gap_cost, free_ends, scoring, backend, threads, device, strand, prune
):
    """What :func:`align` and :func:`score_pair` check and prepare from their arguments:
    ``(scoring, free ends, a's codes, b's codes, backend)``."""
    scoring, ends = _settings(mode, sub_score, gap_cost, free_ends, scoring)
    if threads is not None:
        config.cpu_threads(threads)  # refuse 0 and negatives now, as score and search do
    check_strand(strand)
    a_codes = scoring.encode(a, record="a")
    b_codes = scoring.encode(b, record="b")
    if _oracle_pays(backend, len(a_codes) * len(b_codes) * (1 if strand == "plus" else 2)):
        backend = "reference"
    runner = engine.backend_for(backend, scoring, threads=threads, device=device)
    if prune and mode != "local":
        raise OptionError("block pruning (prune=True) is for local alignments")
    return scoring, ends, a_codes, b_codes, runner


def _best_strand(a_codes, b_codes, scoring, mode, ends, runner, threads, strand, **long):
    """:func:`_align_codes` on the strands of b asked for, the better kept (ties: plus):
    ``(fields, backend label, b as aligned, strand shown)``."""
    b_shown, shown_strand = b_codes, None
    if strand != "minus":
        fields, which = _align_codes(a_codes, b_codes, scoring, mode, ends, runner, threads, **long)
    if strand != "plus":
        shown_strand = "+"
        b_minus = reverse_complement_codes(b_codes, scoring.alphabet, record="b")
        if strand == "minus":
            fields, which = _align_codes(
                a_codes, b_minus, scoring, mode, ends, runner, threads, **long
            )
            b_shown, shown_strand = b_minus, "-"
        else:
            minus, which_minus = _align_codes(
                a_codes, b_minus, scoring, mode, ends, runner, threads, **long
            )
            if minus[0] > fields[0]:  # ties stay on the plus strand
                fields, which, b_shown, shown_strand = minus, which_minus, b_minus, "-"
    return fields, which, b_shown, shown_strand


STRANDS = ("plus", "minus", "both")


def check_strand(strand: str) -> None:
    """Refuse a ``strand`` other than ``"plus"``, ``"minus"`` and ``"both"``."""
    if strand not in STRANDS:
        raise OptionError(f"strand must be 'plus', 'minus' or 'both', not {strand!r}")


def _long_pair_device(runner, cells: int, threads):
    """A work queue's first GPU (its own backend) for a pair too long for the cores to
    align sooner (``engine.cores_suffice`` of the ``"longpair"`` family), else ``runner``:
    the queue itself aligns a long pair on the cores (H100 host, 1 Mb x 1 Mb with
    traceback: 13.0-14.6 s under auto against 4.7-7.9 s on the GPU)."""
    first = getattr(runner, "first_device", None)
    if runner.kind != "pool" or first is None:
        return runner
    tracer = engine.tracer(runner)
    limit = tracer.long_pair_cells()
    if limit is None or cells <= limit or engine.cores_suffice(cells, "longpair", threads):
        return runner
    return first() or runner


def _align_codes(a_codes, b_codes, scoring, mode, ends, runner, threads, traceback=True, **long):
    """``((score, a_start, a_end, b_start, b_end, ops), backend label)`` of encoded a and b,
    scores in kernel units (``traceback=False``: a long pair's start is its end and its ops
    None)."""
    runner = _long_pair_device(runner, len(a_codes) * len(b_codes), threads)
    tracer = engine.tracer(runner)
    limit = runner.long_pair_cells() if runner.kind == "device" else tracer.long_pair_cells()
    if limit is not None and len(a_codes) * len(b_codes) > limit:
        # Long pairs: tiles on every core (or a device), traceback in near-linear memory
        # (same alignment).
        from .longpair import align_long

        r = align_long(
            a_codes,
            b_codes,
            scoring,
            mode,
            ends if mode == "global" else None,
            threads=threads,
            backend=runner,
            traceback=traceback,
            **long,
        )
        fields = (r.score, r.a_start, r.a_end, r.b_start, r.b_end, r.ops)
        return fields, f"{(runner if runner.kind == 'device' else tracer).name} (long pair)"
    fields = engine.align_pair(runner, Task("pairwise", scoring, mode, ends), a_codes, b_codes)
    return tuple(fields), tracer.name


# --------------------------------------------------------------------------------------------
# score
# --------------------------------------------------------------------------------------------


def transposed(scoring: Scoring) -> Scoring:
    """The scoring with a and b swapped (the matrix transposed, gap costs exchanged)."""
    return scoring.transposed()


def swap_ends(ends):
    """free_ends for b against a."""
    a_lead, a_trail, b_lead, b_trail = ends
    return (b_lead, b_trail, a_lead, a_trail)


def score_all(
    q_codes: Sequence[np.ndarray],
    t_codes: Sequence[np.ndarray],
    scoring: Scoring,
    mode: str,
    ends,
    backend: Backend,
    progress=None,
    with_width: bool = False,
):
    """Every query against every target through a backend; ``[Q, T]`` scores (and widths).

    The larger side goes into the SIMD lanes (sorted by length, longest first); the other side
    is the scalar side. Swapping a and b transposes the matrix and swaps the free ends, which
    leaves every score unchanged.
    """
    Q, T = len(q_codes), len(t_codes)
    if Q == 0 or T == 0:
        empty = np.zeros((Q, T), dtype=np.int64)
        return (empty, np.zeros((Q, T), dtype=np.uint8)) if with_width else empty
    swap = Q > T
    if swap:
        q_codes, t_codes = t_codes, q_codes
        scoring, ends = transposed(scoring), swap_ends(ends)
    queries = query_batch(q_codes)
    lengths = np.fromiter((len(t) for t in t_codes), dtype=np.int64, count=len(t_codes))
    # Longest first: worker threads take blocks in order, so the heaviest go out first and
    # the run does not end with one thread on the longest block.
    order = np.argsort(-lengths, kind="stable")
    blocks = engine.pack(backend, "pairwise", t_codes, order=order)
    task = Task("pairwise", scoring, mode, tuple(ends))
    results = backend.score(task, queries, blocks, progress)
    scores, width = gather_scores(results, blocks, len(t_codes))
    if swap:
        scores, width = scores.T.copy(), width.T.copy()
    return (scores, width) if with_width else scores


def _score_zip(q_codes, t_codes, scoring, mode, ends, backend, progress):
    if len(q_codes) != len(t_codes):
        raise OptionError(
            f"pairs='zip' needs as many queries as targets ({len(q_codes)} != {len(t_codes)})"
        )
    out = np.zeros(len(q_codes), dtype=np.int64)
    groups: dict[bytes, list[int]] = {}
    for k, q in enumerate(q_codes):
        groups.setdefault(q.tobytes(), []).append(k)
    singles = []
    for members in groups.values():
        if len(members) >= ZIP_GROUP_MIN:
            got = score_all(
                [q_codes[members[0]]],
                [t_codes[k] for k in members],
                scoring,
                mode,
                ends,
                backend,
                progress,
            )
            out[members] = got[0]
        else:
            singles.extend(members)
    if not singles:
        return out
    task = Task("pairwise", scoring, mode, tuple(ends))
    out[singles] = engine.score_pairs(
        backend, task, [q_codes[k] for k in singles], [t_codes[k] for k in singles], progress
    )
    return out


def _score_database(q_codes, database, scoring, mode, ends, backend, threads, progress):
    engine_backend = engine.backend_for(backend, scoring, threads=threads)
    got, ids = database.score_codes(q_codes, scoring, mode, ends, engine_backend, progress)
    out = np.empty_like(got)
    out[:, np.argsort(np.argsort(ids))] = got
    return out


def score(
    queries,
    targets,
    mode: str = "global",
    sub_score=(1, -1),
    gap_cost=2,
    free_ends=None,
    *,
    pairs: str = "all",
    threads: int | None = None,
    backend="auto",
    scoring: Scoring | None = None,
    with_width: bool = False,
    progress=None,
    strand: str = "plus",
):
    """Score many pairs at once (no traceback).

    Parameters
    ----------
    queries, targets : a sequence, or a collection of sequences
        Each sequence is a str, bytes, scikit-bio sequence or 1-D uint8 code array. A single
        sequence on either side removes that axis from the result. ``targets`` may also be a
        :class:`dpalign.search.Database` (packed once, reused): its columns are then the
        view's targets in their original order.
    mode, sub_score, gap_cost, free_ends, scoring
        As in :func:`align`.
    pairs : {"all", "zip"}
        ``"all"``: every query against every target, a ``[Q, T]`` array. ``"zip"``: query k
        against target k, a ``[N]`` array (pairs that share a query with at least
        :data:`ZIP_GROUP_MIN` others run through the inter-sequence kernels, the rest one by
        one: local pairs in the striped int16 kernel, global ones in scalar int64).
    threads : int, optional
        CPU worker threads (default: one per core).
    backend : str or Backend
        ``"auto"`` (the fastest available), ``"numba"``, ``"reference"``, ...
    with_width : bool
        Also return the integer width (8, 16, 32, 64) that produced each score.
    progress : callable, optional
        Called with the number of cells finished, as work completes.
    strand : {"plus", "minus", "both"}
        Score each query against the targets as given, their reverse complements
        (nucleotides), or both, keeping the better score per pair (``align`` says which
        strand won).

    Returns
    -------
    ndarray of int64, or float64 when the scores had decimals (and an ndarray of uint8
    widths with ``with_width``)
    """
    if pairs not in ("all", "zip"):
        raise OptionError(f"pairs must be 'all' or 'zip', not {pairs!r}")
    check_strand(strand)
    scoring, ends = _settings(mode, sub_score, gap_cost, free_ends, scoring)
    single_q, single_t = _is_single(queries), _is_single(targets)
    q_codes, _ = encode_many([queries] if single_q else queries, scoring, "queries")
    if hasattr(targets, "blocks") and hasattr(targets, "ids"):  # a search.Database
        if pairs != "all" or with_width:
            raise OptionError("a Database takes pairs='all' without with_width")
        if strand != "plus":
            raise OptionError("a Database is scored on its plus strand (dpalign.search has strand)")
        got = _score_database(q_codes, targets, scoring, mode, ends, backend, threads, progress)
        return scoring.user(got[0 if single_q else slice(None)])
    t_codes, _ = encode_many([targets] if single_t else targets, scoring, "targets")
    engine_backend = engine.backend_for(backend, scoring, threads=threads)
    strands = [t_codes]
    if strand != "plus":
        minus = [
            reverse_complement_codes(t, scoring.alphabet, record=f"targets[{k}]")
            for k, t in enumerate(t_codes)
        ]
        strands = [minus] if strand == "minus" else [t_codes, minus]
    if pairs == "zip":
        if with_width:
            raise OptionError("with_width is available for pairs='all'")
        got = [
            _score_zip(q_codes, t, scoring, mode, ends, engine_backend, progress) for t in strands
        ]
        return scoring.user(np.maximum.reduce(got))
    scores = width = None
    for t in strands:  # both strands: the better score, and the width that produced it
        s, w = score_all(q_codes, t, scoring, mode, ends, engine_backend, progress, True)
        if scores is None:
            scores, width = s, w
        else:
            better = s > scores
            scores, width = np.where(better, s, scores), np.where(better, w, width)
    index = (0 if single_q else slice(None), 0 if single_t else slice(None))
    scores, width = scoring.user(scores[index]), width[index]
    return (scores, width) if with_width else scores
