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

from . import config, reference
from .engine import Backend, Task, gather_scores, get_backend, query_batch, reference_blocks
from .errors import OptionError
from .scoring import Scoring, as_scoring, free_ends_tuple

#: Lanes per block for the numba backend: 64 int8 lanes (one AVX-512 register) per lane
#: group, up to :data:`NUMBA_MAX_GROUPS` groups per block when there are many targets (fewer
#: calls from Python per cell, and the GIL-bound part of a block shrinks), as long as every
#: thread still gets about :data:`BLOCKS_PER_THREAD` blocks.
NUMBA_BLOCK_WIDTH = 64
NUMBA_MAX_GROUPS = 8
BLOCKS_PER_THREAD = 16
#: In ``pairs="zip"``, pairs sharing a query go through the SIMD kernels when at least this many
#: share it; the others are scored one by one by the scalar kernel.
ZIP_GROUP_MIN = 8
CIGAR_STYLES = ("=X", "M")


@dataclass(frozen=True)
class Alignment:
    """One pairwise alignment.

    Attributes
    ----------
    score : int
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
    """

    score: int
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    ops: str
    width: int
    backend: str
    mode: str
    cigar_style: str = "=X"
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
        """The aligned parts of a and b with ``-`` for gaps (equal lengths)."""
        a_out, b_out = [], []
        i, j = self.a_start, self.b_start
        for op in self.ops:
            if op in "=X":
                a_out.append(self.a_text[i])
                b_out.append(self.b_text[j])
                i, j = i + 1, j + 1
            elif op == "D":
                a_out.append(self.a_text[i])
                b_out.append("-")
                i += 1
            else:
                a_out.append("-")
                b_out.append(self.b_text[j])
                j += 1
        return "".join(a_out), "".join(b_out)

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
        }


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


def _cpu_backend(backend, cells: int = 0) -> str:
    global _oracle_cells
    if isinstance(backend, Backend):
        backend = backend.name
    if backend == "auto":
        if (
            "dpalign.simd.traceback" not in sys.modules
            and _oracle_cells + cells <= config.ALIGN_ORACLE_CELLS
        ):
            _oracle_cells += cells
            return "reference"
        try:
            import numba  # noqa: F401
        except ImportError:  # pragma: no cover - numba is a dependency
            return "reference"
        return "numba"
    if backend not in ("numba", "reference", "opencl"):
        raise OptionError(
            f"align() backend must be 'auto', 'numba', 'opencl' or 'reference', not {backend!r}"
        )
    return backend


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
    backend : {"auto", "numba", "opencl", "reference"}
        ``numba``: compiled kernels; pairs of more than ``config.LONG_PAIR_CELLS`` cells take
        the long-pair path (:func:`dpalign.longpair.align_long`: tiles on every core,
        traceback in near-linear memory, the same alignment). ``opencl``: the long-pair path
        with its forward pass (and large recomputations) in anti-diagonal tiles on an
        OpenCL device, for any pair size (regions under ``Tiling.device_cells`` stay on the
        CPU, where they are faster). ``reference``: the plain-Python oracle.
    cigar : {"=X", "M"}
        CIGAR operations for aligned pairs.
    scoring : Scoring, optional
        A prepared scoring scheme (then ``sub_score`` and ``gap_cost`` are ignored).
    threads : int, optional
        CPU threads for long pairs (default: one per core).
    device : str, optional
        OpenCL device for ``backend="opencl"`` (see ``dpalign devices``; default: the
        ``DPALIGN_OPENCL_DEVICE`` variable, else the first GPU, else the first CPU device).

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
        Bad mode, scores or gap costs.
    """
    if cigar not in CIGAR_STYLES:
        raise OptionError(f"cigar must be '=X' or 'M', not {cigar!r}")
    scoring, ends = _settings(mode, sub_score, gap_cost, free_ends, scoring)
    a_codes = scoring.encode(a, record="a")
    b_codes = scoring.encode(b, record="b")
    which = _cpu_backend(backend, len(a_codes) * len(b_codes))
    local = mode == "local"
    if which == "reference":
        r = reference.pairwise_align(
            a_codes, b_codes, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode, ends
        )
        fields = (r.score, r.a_start, r.a_end, r.b_start, r.b_end, r.ops)
    elif which == "opencl" or len(a_codes) * len(b_codes) > config.LONG_PAIR_CELLS:
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
            backend="opencl" if which == "opencl" else "cpu",
            device=device,
        )
        fields = (r.score, r.a_start, r.a_end, r.b_start, r.b_end, r.ops)
        which = f"{which} (long pair)"
    else:
        from .simd.traceback import align_pair

        fields = align_pair(a_codes, b_codes, scoring, local, ends)
    decode = scoring.alphabet.decode
    return Alignment(
        *fields,
        width=64,
        backend=which,
        mode=mode,
        cigar_style=cigar,
        a_text=decode(a_codes),
        b_text=decode(b_codes),
    )


# --------------------------------------------------------------------------------------------
# score
# --------------------------------------------------------------------------------------------


def transposed(scoring: Scoring) -> Scoring:
    """The scoring with a and b swapped (the matrix transposed)."""
    if np.array_equal(scoring.matrix, scoring.matrix.T):
        return scoring
    from types import SimpleNamespace

    matrix = SimpleNamespace(alphabet=list(scoring.alphabet.letters), scores=scoring.matrix.T)
    return Scoring(matrix, scoring.gap_cost)


def swap_ends(ends):
    """free_ends for b against a."""
    a_lead, a_trail, b_lead, b_trail = ends
    return (b_lead, b_trail, a_lead, a_trail)


def block_width(backend: Backend | None, n_targets: int) -> int:
    """Lanes per block for ``n_targets`` targets on a backend (``None``: the numba kernels).

    Numba: 64 lanes (int8), widened to up to 512 while every worker thread still gets about
    :data:`BLOCKS_PER_THREAD` blocks; other backends: :data:`dpalign.config.BLOCK_WIDTH`.
    """
    if backend is not None and backend.name != "numba":
        return config.BLOCK_WIDTH
    threads = config.cpu_threads(backend.threads if backend is not None else None)
    per_block = n_targets // (NUMBA_BLOCK_WIDTH * BLOCKS_PER_THREAD * threads)
    return NUMBA_BLOCK_WIDTH * min(NUMBA_MAX_GROUPS, max(1, per_block))


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
    blocks = reference_blocks(t_codes, width=block_width(backend, T), order=order)
    task = Task("pairwise", scoring, mode, tuple(ends))
    results = backend.score(task, queries, blocks, progress)
    scores, width = gather_scores(results, blocks, len(t_codes))
    if swap:
        scores, width = scores.T.copy(), width.T.copy()
    return (scores, width) if with_width else scores


def _score_zip(q_codes, t_codes, scoring, mode, ends, backend, threads, progress):
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
        if len(members) >= ZIP_GROUP_MIN and backend.name != "reference":
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
    local = mode == "local"
    if backend.name == "reference":
        for k in singles:
            out[k] = reference.pairwise_score(
                q_codes[k],
                t_codes[k],
                scoring.matrix,
                scoring.gap_open,
                scoring.gap_extend,
                mode,
                ends,
            ).score
            if progress is not None:
                progress(len(q_codes[k]) * len(t_codes[k]))
        return out
    from concurrent.futures import ThreadPoolExecutor

    from .simd.pairwise import local_width_ok, score_pair_int64
    from .simd.striped import local_score

    matrix = scoring.matrix.astype(np.int64)
    ends_arr = np.array(ends, dtype=np.bool_)
    o, e = scoring.gap_open, scoring.gap_extend
    striped = local and local_width_ok(scoring, 16)

    def work(chunk):
        for k in chunk:
            if striped:  # int16 lanes over the pair's own cells; int64 only if it saturates
                value, saturated = local_score(q_codes[k], t_codes[k], matrix, o, e)
                if not saturated:
                    out[k] = value
                    continue
            out[k] = score_pair_int64(q_codes[k], t_codes[k], matrix, o, e, local, ends_arr)
        if progress is not None:
            progress(sum(len(q_codes[k]) * len(t_codes[k]) for k in chunk))

    n_threads = config.cpu_threads(threads)
    chunks = [singles[k : k + 64] for k in range(0, len(singles), 64)]
    if n_threads == 1 or len(chunks) == 1:
        for chunk in chunks:
            work(chunk)
    else:
        with ThreadPoolExecutor(n_threads) as pool:
            for future in [pool.submit(work, c) for c in chunks]:
                future.result()
    return out


def _score_database(q_codes, database, scoring, mode, ends, backend, threads, progress):
    from .search import score_database

    engine_backend = get_backend(backend, threads=threads)
    got, ids = score_database(q_codes, database, scoring, mode, ends, engine_backend, progress)
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

    Returns
    -------
    ndarray of int64 (and an ndarray of uint8 widths with ``with_width``)
    """
    if pairs not in ("all", "zip"):
        raise OptionError(f"pairs must be 'all' or 'zip', not {pairs!r}")
    scoring, ends = _settings(mode, sub_score, gap_cost, free_ends, scoring)
    single_q, single_t = _is_single(queries), _is_single(targets)
    q_codes, _ = encode_many([queries] if single_q else queries, scoring, "queries")
    if hasattr(targets, "blocks") and hasattr(targets, "ids"):  # a search.Database
        if pairs != "all" or with_width:
            raise OptionError("a Database takes pairs='all' without with_width")
        return _score_database(q_codes, targets, scoring, mode, ends, backend, threads, progress)[
            0 if single_q else slice(None)
        ]
    t_codes, _ = encode_many([targets] if single_t else targets, scoring, "targets")
    engine_backend = get_backend(backend, threads=threads)
    if pairs == "zip":
        if with_width:
            raise OptionError("with_width is available for pairs='all'")
        return _score_zip(q_codes, t_codes, scoring, mode, ends, engine_backend, threads, progress)
    result = score_all(
        q_codes, t_codes, scoring, mode, ends, engine_backend, progress, with_width=True
    )
    scores, width = result
    index = (0 if single_q else slice(None), 0 if single_t else slice(None))
    scores, width = scores[index], width[index]
    return (scores, width) if with_width else scores
