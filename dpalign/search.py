"""Database search: one query against many targets, ranked hits, traceback for the top ones.

A :class:`Database` encodes its targets once, sorts them by length and packs them into
inter-sequence blocks (the layout the kernels read), so it can be searched with many queries
without repacking. Slicing it (``db[start:end]``, positions in the length-sorted order,
longest first) gives a view over a chunk of it, which is how a work queue hands out pieces of
a large database.

>>> db = Database(["ACGTACGT", "TTTT", "GACGTAC"], names=["x", "y", "z"])
>>> [(h.target, h.score, h.cigar) for h in search("ACGTA", db, top=2)]
[('x', 5, '5='), ('z', 5, '5=')]
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack

import numpy as np

from . import config
from .alphabet import reverse_complement_codes
from .contract import longest_first
from .engine import (
    Backend,
    ReferenceBlock,
    Task,
    backend_for,
    cpu_backend,
    query_batch,
    reference_blocks,
    tracer,
)
from .errors import InputError, OptionError
from .pairwise import Alignment, _is_single, align, encode_many
from .scoring import Scoring, as_scoring, free_ends_tuple

log = logging.getLogger("dpalign.search")


class Hit:
    """One ranked target.

    The score comes from the score-only pass. In local mode on the numba backend the end
    coordinates come from a second, ends-tracking pass (each target's first best cell in
    row-major order, the cell the traceback starts from), run over the query's hits together
    the first time any of them is asked for its end; the alignment (and with it the start
    coordinates and the CIGAR) is traced back the first time it is asked for, so ranking many
    hits costs neither. Coordinates are 0-based, half-open
    (``query[query_start:query_end]`` aligned to ``target[target_start:target_end]``); a hit
    on the minus strand (``strand == "-"``, ``search(..., strand="both")``) is an alignment of
    the query's reverse complement, and its query coordinates are positions in that reverse
    complement.
    """

    __slots__ = (
        "target", "index", "score", "strand", "_context", "_qend", "_tend", "_ends", "_alignment",
    )  # fmt: skip

    def __init__(
        self,
        target: str,
        index: int,
        score: int | float,
        strand: str = "+",
        context=None,
        query_end: int = -1,
        target_end: int = -1,
        ends: _HitEnds | None = None,
    ):
        # ``context``: (query strands' codes, every target's codes, mode, free ends, scoring,
        # the backend tracing back), shared by a query's hits; ends of -1 are not known until
        # the traceback; ``ends``: the query's pending ends pass (ends None until it ran).
        self.target = target
        self.index = index
        self.score = score
        self.strand = strand
        self._context = context
        if ends is None:
            self._qend = query_end
            self._tend = target_end
        else:
            self._qend = self._tend = None
        self._ends = ends
        self._alignment = None

    def _end_cells(self) -> tuple[int, int]:
        """The end cell from the ends pass (running it for the query's hits if it has not
        run), or (-1, -1) where only a traceback can tell."""
        if self._qend is None:
            self._ends.run()
        return self._qend, self._tend

    @property
    def end_known(self) -> bool:
        """True when the end coordinates come from a scoring pass (no traceback needed)."""
        return self._end_cells()[0] >= 0

    @property
    def alignment(self) -> Alignment:
        """The traced-back alignment (computed once, on first use)."""
        if self._alignment is None:
            self.trace()
        return self._alignment

    def trace(self, threads: int | None = None) -> Alignment:
        """Trace this hit back now (``threads``: for a long pair's tiles; 1 where many hits
        are traced side by side) and keep the alignment."""
        if self._alignment is None:
            _, _, _, _, _, tracer = self._context
            self.adopt(trace_pair(*self.pair(), tracer, threads))
        return self._alignment

    def pair(self) -> tuple:
        """``(query codes, target codes, mode, free ends, scoring)``: what tracing this hit
        back takes (:func:`trace_pair`), e.g. in another process."""
        strands, t_codes, mode, ends, scoring, _ = self._context
        return strands[self.strand == "-"], t_codes[self.index], mode, ends, scoring

    def adopt(self, aln: Alignment) -> None:
        """Keep ``aln`` (this hit's :func:`trace_pair`, traced elsewhere) as its alignment,
        once it is checked against the score and end cell of the scoring pass."""
        have = self._qend is not None and self._qend >= 0  # an ends pass that ran
        known = (self._qend, self._tend) if have else (aln.a_end, aln.b_end)
        if (aln.score, aln.a_end, aln.b_end) != (self.score, *known):  # pragma: no cover
            raise RuntimeError(  # a kernel bug, never expected
                f"internal error: traceback score {aln.score} ending at "
                f"({aln.a_end}, {aln.b_end}) != kernel score {self.score} ending at "
                f"{known} for target {self.target!r}"
            )
        self._alignment = aln

    @property
    def query_start(self) -> int:
        return self.alignment.a_start

    @property
    def query_end(self) -> int:
        end = self._end_cells()[0]
        return end if end >= 0 else self.alignment.a_end

    @property
    def target_start(self) -> int:
        return self.alignment.b_start

    @property
    def target_end(self) -> int:
        end = self._end_cells()[1]
        return end if end >= 0 else self.alignment.b_end

    @property
    def cigar(self) -> str:
        return self.alignment.cigar

    def __repr__(self) -> str:
        return (
            f"Hit(target={self.target!r}, index={self.index}, score={self.score}, "
            f"strand={self.strand!r})"
        )


class _HitEnds:
    """The end cells of one query's hits, from one ends-tracking pass over their targets
    (:meth:`Backend.score_ends`), run when the first of them is asked for its end.

    Ranking needs scores only: the score-only pass is the fast one (the ends pass measured
    0.90-0.93 of its speed), and a search of 10 hits in 20,000 targets pays for 10 targets'
    ends, not 20,000 (searches for :data:`EAGER_ENDS_SHARE` of the database or more take
    them from the scoring pass instead). Where the backend has no ends pass (other modes,
    devices) the hits' ends come from their tracebacks.
    """

    _lock = threading.Lock()

    def __init__(self, hits, strands, t_codes, task, backend):
        self.hits, self.strands, self.t_codes = hits, strands, t_codes
        self.task, self.backend = task, backend

    def run(self) -> None:
        with self._lock:
            if self.hits is None:  # ran already (on another thread)
                return
            self._run(self.hits)
            self.hits = None

    def _run(self, hits) -> None:
        for h in hits:
            h._qend = h._tend = -1
        supported = getattr(self.backend, "ends_supported", None)
        if supported is None or not supported(self.task):
            return
        for minus, codes in enumerate(self.strands):
            mine = [h for h in hits if (h.strand == "-") == bool(minus)]
            if not mine:
                continue
            targets = [self.t_codes[h.index] for h in mine]
            lengths = np.fromiter(map(len, targets), np.int64, len(targets))
            width = self.backend.block_width("pairwise", len(targets))
            order = np.argsort(-lengths, kind="stable")
            blocks = reference_blocks(targets, width=width, order=order)
            got = self.backend.score_ends(self.task, query_batch([codes]), blocks, every=True)
            for (_, a_end, b_end), block in zip(got, blocks, strict=True):
                lanes = np.flatnonzero(block.ids >= 0)
                for k, a, b in zip(
                    block.ids[lanes].tolist(), a_end[0, lanes].tolist(), b_end[0, lanes].tolist(),
                    strict=True,
                ):  # fmt: skip
                    mine[k]._qend, mine[k]._tend = (a, b) if a >= 0 else (-1, -1)


class Database:
    """Targets encoded for one alphabet, sorted by length, packed into inter-sequence blocks.

    Parameters
    ----------
    sequences : a sequence, or a collection of sequences
        str, bytes, scikit-bio sequences (their ``metadata['id']`` names them) or uint8 codes.
        A single sequence (one str, say) is a database of one target.
    names : list of str, optional
        Target names (default: scikit-bio ids, else ``"0"``, ``"1"``...).
    sub_score : (match, mismatch), SubstitutionMatrix or str
        Decides the alphabet the targets are encoded in (a search with another alphabet
        re-encodes them from their text).
    block_width : int, optional
        Lanes per block for every backend (default: the lanes each backend prefers, asked
        once per backend; the CPU backend's is 64, the int8 lanes of one AVX-512 register,
        up to 512 for large databases).

    Notes
    -----
    ``db[start:end]`` is a view over the targets at positions ``start .. end-1`` of the
    length-sorted order (longest first); hits keep their index in the original order.
    """

    def __init__(
        self,
        sequences,
        names: Sequence[str] | None = None,
        *,
        sub_score=(1, -1),
        block_width: int | None = None,
        _parent: Database | None = None,
        _range: tuple[int, int] | None = None,
    ) -> None:
        if _parent is not None:
            self.__dict__.update(_parent.__dict__)
            self._start, self._end = _range
            self._block_cache = {}
            self._root = _parent._root
            return
        scoring = sub_score if isinstance(sub_score, Scoring) else Scoring(sub_score)
        # One sequence (a str, bytes, a code array) is one target, not one per letter.
        seqs = [sequences] if _is_single(sequences) else list(sequences)
        self._texts = [None if isinstance(s, np.ndarray) else s for s in seqs]
        codes, auto_names = encode_many(seqs, scoring, "targets")
        if names is None:
            names = [
                n if not n.startswith("targets[") else str(k) for k, n in enumerate(auto_names)
            ]
        names = [str(n) for n in names]
        if len(names) != len(codes):
            raise OptionError(f"{len(names)} names for {len(codes)} sequences")
        lengths = np.fromiter((len(c) for c in codes), dtype=np.int64, count=len(codes))
        self._setup(names, scoring, codes, lengths, block_width)

    def _setup(self, names, scoring, codes, lengths, block_width) -> None:
        self.names = names
        self.alphabet = scoring.alphabet
        self._fixed_width = block_width is not None
        n = len(lengths)
        self.block_width = int(block_width or cpu_backend().block_width("pairwise", n))
        # (codes None: cut from _flat on first use, see codes())
        self._codes = {scoring.alphabet: codes} if codes is not None else {}
        self.lengths = lengths
        # Longest first: worker threads take blocks in order (heaviest first balances them).
        self.order = longest_first(self.lengths)
        self._start, self._end = 0, n
        self._block_cache = {}
        self._root = self
        self._flat = None  # every target's codes (original order) in one buffer, if given
        self._bounds = None  # and where each starts (n + 1 offsets)

    @classmethod
    def from_codes(
        cls,
        residues: np.ndarray,
        offsets: np.ndarray,
        names: Sequence[str],
        *,
        sub_score=(1, -1),
        block_width: int | None = None,
    ) -> Database:
        """A database from every target's codes in one buffer (no per-target encoding).

        Parameters
        ----------
        residues : ndarray of uint8
            Codes of the scoring's alphabet, all targets concatenated.
        offsets : ndarray of int64, shape (n + 1,)
            Target k is ``residues[offsets[k]:offsets[k + 1]]``.
        names : list of str
        sub_score, block_width
            As for :class:`Database`.
        """
        scoring = sub_score if isinstance(sub_score, Scoring) else Scoring(sub_score)
        residues = np.ascontiguousarray(residues, dtype=np.uint8)
        offsets = np.asarray(offsets, dtype=np.int64)
        if len(names) != len(offsets) - 1:
            raise OptionError(f"{len(names)} names for {len(offsets) - 1} sequences")
        if offsets[0] != 0 or offsets[-1] != len(residues) or (np.diff(offsets) < 0).any():
            raise OptionError("offsets must rise from 0 to the number of residues")
        if residues.size and int(residues.max()) >= scoring.alphabet.size:
            raise OptionError(f"codes outside the {scoring.alphabet.name} alphabet")
        db = cls.__new__(cls)
        db._texts = [None] * len(names)
        # The per-target views are cut on first use (codes()): a device search ranks its
        # first hits while the device works, and reads the targets from _flat until then.
        if not all(type(n) is str for n in names):  # a reader's names are kept as they are
            names = [str(n) for n in names]
        db._setup(list(names), scoring, None, np.diff(offsets), block_width)
        db._flat = residues
        db._bounds = offsets
        return db

    # ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._end - self._start

    def __getitem__(self, item) -> Database:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("a Database is sliced by start:end (positions in length order)")
        start, end, _ = item.indices(len(self))
        end = max(end, start)
        return Database(None, _parent=self, _range=(self._start + start, self._start + end))

    def __repr__(self) -> str:
        return (
            f"Database({len(self)} targets, {self.residues:,} residues, "
            f"{self.alphabet.name} alphabet, {self.block_width}-lane blocks)"
        )

    @property
    def ids(self) -> np.ndarray:
        """Original indices of this view's targets, in length order."""
        return self.order[self._start : self._end]

    @property
    def residues(self) -> int:
        """Total target length of this view."""
        return int(self.lengths[self.ids].sum())

    def codes(self, alphabet) -> list[np.ndarray]:
        """Every target (original order) encoded in ``alphabet``."""
        if alphabet not in self._codes and alphabet == self.alphabet and self._flat is not None:
            with _CUTTING:  # ranking threads may ask at once
                if alphabet not in self._codes:
                    bounds = self._bounds.tolist()
                    flat = self._flat
                    self._codes[alphabet] = [
                        flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)
                    ]
        if alphabet not in self._codes:
            if any(t is None for t in self._texts):
                raise OptionError(
                    f"the database was built from codes of the {self.alphabet.name} alphabet; "
                    f"it cannot be searched with the {alphabet.name} alphabet"
                )
            encoded = [
                np.ascontiguousarray(alphabet.encode(_text(t), record=name), dtype=np.uint8)
                for t, name in zip(self._texts, self.names, strict=True)
            ]
            self._codes[alphabet] = encoded
        return self._codes[alphabet]

    def layout_width(self, backend: Backend) -> int:
        """Lanes per block for ``backend``: the width given at construction, else the one
        the backend prefers for the whole database (packed once per width, then shared by
        every view and query)."""
        if self._fixed_width:
            return self.block_width
        if backend.block_layout("pairwise") == "ragged":  # one block of this view's targets
            return backend.block_width("pairwise", len(self))
        return backend.block_width("pairwise", len(self._root.lengths))

    def score_codes(self, q_codes, scoring, mode, ends, backend, progress=None):
        """:func:`score_database` of this view (``dpalign.score`` with a Database)."""
        return score_database(q_codes, self, scoring, mode, ends, backend, progress)

    def blocks(
        self, alphabet=None, width: int | None = None, ragged: bool = False
    ) -> list[ReferenceBlock]:
        """This view's targets as inter-sequence blocks (lanes in length order; ``ragged``:
        each block's targets one after another)."""
        alphabet = alphabet or self.alphabet
        width = width or self.block_width
        key = (alphabet, width, ragged)
        if key not in self._block_cache:
            root = self._root
            whole = root is self and len(self) == len(self.lengths) and width >= len(self)
            if ragged and whole and self._flat is not None and alphabet == self.alphabet:
                # One ragged block of the whole database: its own buffer, in its own order
                # (no gather into length order; its lane ids say whose scores are where).
                ids = np.arange(len(self), dtype=np.int64)
                self._block_cache[key] = [ReferenceBlock(self._flat, self.lengths.copy(), ids)]
            elif root is not self and self._start % width == 0:
                # A view on block boundaries shares the root's blocks (the last one trimmed).
                shared = root.blocks(alphabet, width, ragged)
                first, stop = self._start // width, -(-self._end // width)
                chosen = list(shared[first:stop])
                if chosen and self._end % width:
                    chosen[-1] = _trim(chosen[-1], self._end % width)
                self._block_cache[key] = chosen
            else:
                self._block_cache[key] = _pack(
                    self.codes(alphabet), self.lengths, self.ids, width, ragged
                )
        return self._block_cache[key]


#: Held while a database's per-target views are cut from its buffer (Database.codes).
_CUTTING = threading.Lock()


def _text(seq):
    from .alphabet import sequence_text

    return sequence_text(seq)[1]


def _trim(block: ReferenceBlock, lanes: int) -> ReferenceBlock:
    """The block with only its first ``lanes`` lanes live (codes shared)."""
    ids = block.ids.copy()
    lengths = block.lengths.copy()
    ids[lanes:] = -1
    lengths[lanes:] = 0
    codes = block.codes[: int(lengths.sum())] if block.ragged else block.codes
    return ReferenceBlock(codes, lengths, ids, block.flags)


def _pack(codes, lengths, ids, width, ragged=False) -> list[ReferenceBlock]:
    """Blocks of ``width`` lanes (``ragged``: a block's targets one after another), filled by
    gathers from one buffer of every target."""
    buf = np.concatenate(codes) if codes and not ragged else np.zeros(0, dtype=np.uint8)
    starts = np.zeros(len(codes), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    blocks = []
    for start in range(0, len(ids), width):
        chunk = ids[start : start + width]
        lane_ids = np.full(width, -1, dtype=np.int64)
        lane_ids[: len(chunk)] = chunk
        lane_len = np.zeros(width, dtype=np.int64)
        lane_len[: len(chunk)] = lengths[chunk]
        spans = zip(starts[chunk].tolist(), lengths[chunk].tolist(), strict=True)
        if ragged:  # straight from the targets' own arrays (no slices of ``buf``)
            parts = [codes[k] for k in chunk.tolist()]
            flat = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
            blocks.append(ReferenceBlock(flat.astype(np.uint8, copy=False), lane_len, lane_ids))
            continue
        # Lane-major first (each target's residues are one contiguous copy), then transposed.
        lanes = np.zeros((width, int(lane_len.max())), dtype=np.uint8)
        for k, (a, size) in enumerate(spans):
            lanes[k, :size] = buf[a : a + size]
        packed = np.ascontiguousarray(lanes.T)
        blocks.append(ReferenceBlock(packed, lane_len, lane_ids))
    return blocks


#: Threads that rank a chunk's queries (their partial selections run without the GIL), for
#: databases of at least this many targets.
RANK_THREADS = 8
RANK_THREADS_TARGETS = 10_000

#: A search for at least this share of the database's targets takes every end cell from its
#: scoring pass (1 kb x 1,000 reads, all ranked: 24 GCUPS, against 11 with the ends of all
#: 1,000 asked for afterwards); fewer hits get theirs from a pass over their own targets when
#: first asked, and ranking runs the score-only kernel.
EAGER_ENDS_SHARE = 0.1

#: Queries scored together in one pass over the database by :func:`search_many` (the kernels
#: loop over them inside each block; a chunk's scores take ``chunk x targets`` int64).
QUERY_CHUNK = 64


STRANDS = ("plus", "both")


def search(
    query,
    database,
    top: int = 10,
    mode: str = "local",
    sub_score=(1, -1),
    gap_cost=2,
    free_ends=None,
    *,
    strand: str = "plus",
    threads: int | None = None,
    backend="auto",
    scoring: Scoring | None = None,
    progress=None,
) -> list[Hit]:
    """Score a query against every target of a database; rank the best ``top``.

    Parameters
    ----------
    query : str, bytes, scikit-bio sequence or uint8 codes
    database : Database, a collection of sequences, or one sequence (one target)
    top : int
        How many hits to return (ranked by score, ties by database index, then the plus
        strand first).
    mode, sub_score, gap_cost, free_ends, scoring
        As in :func:`dpalign.align`; the default mode here is ``"local"``.
    strand : {"plus", "both"}
        ``"both"`` (nucleotides): the query's reverse complement is scored in the same pass,
        and each target is ranked by its better strand (``Hit.strand``).
    threads, backend
        Where the scoring runs (default: every core, the fastest backend).
    progress : callable, optional
        Called with the number of cells finished.

    Returns
    -------
    list of Hit
        Ranking needs scores only; a hit's alignment is traced back with
        :func:`dpalign.align` when first asked for (long pairs take its near-linear-memory
        path).
    """
    return search_many(
        [query],
        database,
        top,
        mode,
        sub_score,
        gap_cost,
        free_ends,
        strand=strand,
        threads=threads,
        backend=backend,
        scoring=scoring,
        progress=progress,
        _names=["query"],
    )[0]


def search_many(
    queries: Sequence,
    database,
    top: int = 10,
    mode: str = "local",
    sub_score=(1, -1),
    gap_cost=2,
    free_ends=None,
    *,
    strand: str = "plus",
    threads: int | None = None,
    backend="auto",
    scoring: Scoring | None = None,
    progress=None,
    on_ranked: Callable[[list[int], list[list[Hit]]], None] | None = None,
    _names: list[str] | None = None,
) -> list[list[Hit]]:
    """:func:`search` for many queries: one list of hits per query.

    Queries are scored together, :data:`QUERY_CHUNK` at a time (or as many as the
    backend's ``query_chunk`` asks for), in one pass over the database each (fewer, longer
    kernel calls than one search per query); a device backend scores the chunks in one
    pipeline (``Backend.score_stream``).

    ``on_ranked(indices, hits)``, where given, is called (on the calling thread) as soon as
    a chunk's queries are ranked, with their indices in ``queries`` and their lists of hits,
    while the next chunks are still being scored: e.g. to start tracing them back. Queries
    are scored longest first.
    """
    if top < 0:
        raise OptionError(f"top must be at least 0, not {top}")
    if strand not in STRANDS:
        raise OptionError(f"strand must be 'plus' or 'both', not {strand!r}")
    scoring = as_scoring(sub_score, gap_cost, scoring)
    ends = free_ends_tuple(mode, free_ends)
    if not isinstance(database, Database):
        database = Database(database, sub_score=scoring)
    engine_backend = backend_for(backend, scoring, threads=threads)
    if _names is not None:
        q_codes = [scoring.encode(q, record=n) for q, n in zip(queries, _names, strict=True)]
    else:
        q_codes, _ = encode_many(queries, scoring, "queries")
    both = strand == "both"
    if both and not _nucleotide_scoring(scoring):
        raise OptionError(
            f"strand='both' searches reverse complements: it needs a nucleotide scoring "
            f"(match/mismatch scores or a nucleotide matrix), not {scoring.sub_label}"
        )
    # Scored longest first: a chunk's queries are of similar lengths (a device fills its
    # launches with queries of one length class), and the last chunk, whose ranking and
    # traceback nothing overlaps, is the shortest. Hits come back in the order given.
    order = sorted(range(len(q_codes)), key=lambda k: -len(q_codes[k]))
    q_codes = [q_codes[k] for k in order]
    if both:
        q_codes = [c for codes in q_codes for c in (codes, minus_strand(codes, scoring))]
    chunk = engine_backend.query_chunk("pairwise", len(database)) or QUERY_CHUNK
    step = chunk * (2 if both else 1)
    chunks = [q_codes[start : start + step] for start in range(0, len(q_codes), step)]

    trace_on = traceback_backend(engine_backend)

    # Hits many enough that an ends pass over them would cost about a pass over the whole
    # database get their end cells from the scoring pass itself (the ends-tracking kernel,
    # 0.90-0.93 of the score-only one); fewer get them from a pass over theirs when asked.
    eager_ends = top > 0 and top >= EAGER_ENDS_SHARE * len(database)
    stream = _score_chunks(
        chunks, database, scoring, mode, ends, engine_backend, progress, with_ends=eager_ends
    )

    results = []
    waited = ranked = 0.0
    # The next chunks are scored while this one is ranked (ranking is serial host work);
    # two are asked for, so the scoring thread goes from one chunk to the next without
    # waiting for this thread to hand it over (and a device backend's pipeline runs on
    # across chunks).
    rank_threads = min(RANK_THREADS, config.cpu_threads(threads)) if len(q_codes) > 1 else 1
    ranking = ThreadPoolExecutor(rank_threads, "dpalign-rank") if rank_threads > 1 else None
    try:
        with ExitStack() as stack:
            if ranking is not None:
                stack.callback(ranking.shutdown)
            if len(chunks) > 1:
                pool = stack.enter_context(ThreadPoolExecutor(1, "dpalign-search"))
                submit = pool.submit
            else:  # one chunk: nothing to overlap, so no thread to start (~0.2 ms a search)
                submit = _run_now
            pending = deque(submit(next, stream) for _ in chunks[:2])
            try:
                for k, chunk in enumerate(chunks):
                    mark = time.perf_counter()
                    scores, ids, cells = pending.popleft().result()
                    waited += time.perf_counter() - mark
                    mark = time.perf_counter()
                    if k + 2 < len(chunks):
                        pending.append(submit(next, stream))
                    rows = range(0, len(chunk), 2) if both else range(len(chunk))

                    def rank(row, chunk=chunk, scores=scores, ids=ids, cells=cells):
                        strands = (chunk[row], chunk[row + 1]) if both else (chunk[row],)
                        here = slice(row, row + len(strands))
                        end_cells = None if cells is None else (cells[0][here], cells[1][here])
                        settings = (scoring, mode, ends, trace_on, engine_backend)
                        return _top_hits(
                            strands, scores[here], ids, database, top, settings, end_cells
                        )

                    first = len(results)
                    if ranking is not None and len(ids) >= RANK_THREADS_TARGETS:
                        results.extend(ranking.map(rank, rows))  # the selections free the GIL
                    else:
                        results.extend(rank(row) for row in rows)
                    ranked += time.perf_counter() - mark
                    if on_ranked is not None:
                        on_ranked(order[first : len(results)], results[first:])
            except BaseException:  # an error or an interrupt: no chunk is scored after it
                for job in pending:
                    job.cancel()
                raise
    finally:
        stream.close()  # the scoring thread is done with it (the pool has shut down)
    log.info(
        "search: %d queries in %d chunks; %.3f s waiting for scores, %.3f s ranking",
        len(q_codes), len(chunks), waited, ranked,
    )  # fmt: skip
    in_order: list = [None] * len(results)
    for k, hits in zip(order, results, strict=True):
        in_order[k] = hits
    return in_order


def prepare_search(q_codes, database: Database, scoring: Scoring, mode: str, backend) -> None:
    """Lay ``database`` out for ``backend`` ahead of a :func:`search_many` of these encoded
    queries (``backend`` as :func:`~dpalign.engine.backend_for` gives it): the blocks
    packed, and a device's targets uploaded and bucket layouts started, e.g. while the
    backend's programs are still being built. The search does it itself otherwise."""
    ends = free_ends_tuple(mode, None)
    width = database.layout_width(backend)
    ragged = backend.block_layout("pairwise") == "ragged"
    blocks = database.blocks(scoring.alphabet, width, ragged)
    if len(q_codes):
        task = Task("pairwise", scoring, mode, tuple(ends))
        backend.prepare(task, query_batch(list(q_codes)), blocks)


def _run_now(fn, *args) -> Future:
    """``fn(*args)`` run here, as a finished future (``ThreadPoolExecutor.submit``'s stand-in
    where there is nothing to overlap)."""
    done: Future = Future()
    done.set_result(fn(*args))
    return done


def trace_pair(q_codes, t_codes, mode, ends, scoring, tracer, threads=None) -> Alignment:
    """The alignment of one hit's pair (:meth:`Hit.pair`) on the ``tracer`` backend
    (``threads``: a long pair's tile threads, default every core)."""
    return align(
        q_codes,
        t_codes,
        mode,
        free_ends=ends if mode == "global" else None,
        scoring=scoring,
        backend=tracer,
        threads=threads,
    )


def traceback_backend(backend: Backend) -> Backend:
    """The backend that traces a search's hits back: the CPU's (the search's own backend
    where it traces itself, the reference included), never a device, and no second look for
    the fastest backend per hit."""
    return cpu_backend(backend.threads) if backend.kind == "device" else tracer(backend)


def _nucleotide_scoring(scoring: Scoring) -> bool:
    letters = set(scoring.alphabet.letters) - set("*-")
    return scoring.alphabet.name == "letters" or letters <= set("ACGTUNRYSWKMBDHV")


def minus_strand(codes: np.ndarray, scoring: Scoring) -> np.ndarray:
    """The reverse complement of encoded nucleotides, in the same alphabet."""
    try:
        rc = reverse_complement_codes(codes, scoring.alphabet)
    except InputError as exc:
        raise OptionError(
            f"strand='both' needs nucleotide sequences: {exc} (the {scoring.sub_label} scoring)"
        ) from None
    return np.ascontiguousarray(rc, dtype=np.uint8)


def _top_hits(strands, scores, ids, database, top, settings, end_cells) -> list[Hit]:
    """Rank one query's scores (ties by database index, then plus strand first).

    ``strands`` holds the query's codes (and its reverse complement's); ``scores`` one row of
    scores per strand, ``end_cells`` (a_end, b_end) rows alike or None; ``settings`` is
    ``(scoring, mode, free ends, traceback backend, search backend)``. No traceback here, and
    without ``end_cells`` no ends pass: the hits run them when asked.
    """
    scoring, mode, ends, trace_on, backend = settings
    if top == 0 or not len(ids):
        return []
    if len(strands) == 1:
        best_strand = None  # the plus strand everywhere
        best = scores[0]
    else:
        best_strand = np.argmax(scores, axis=0)  # first maximum: plus wins ties
        best = np.take_along_axis(scores, best_strand[None], 0)[0]
    if top < len(best):  # partial selection first: ranking needs only the best ``top``
        cut = np.argpartition(best, len(best) - top)[len(best) - top :]  # no negated copy
        threshold = best[cut].min()
        keep = np.flatnonzero(best >= threshold)
    else:
        keep = np.arange(len(best))
    ranked = keep[np.lexsort((ids[keep], -best[keep]))][:top]
    chosen = np.zeros(len(ranked), np.intp) if best_strand is None else best_strand[ranked]
    t_codes = database.codes(scoring.alphabet)
    context = (strands, t_codes, mode, ends, scoring, trace_on)
    names = database.names
    index = ids[ranked].tolist()
    score = scoring.user(best[ranked]).tolist()  # Python ints (floats for scaled scores)
    sign = ["+"] * len(index) if best_strand is None else ["+-"[s] for s in chosen.tolist()]
    task = Task("pairwise", scoring, mode, ends)
    if end_cells is not None:
        q_end = end_cells[0][chosen, ranked].tolist()
        t_end = end_cells[1][chosen, ranked].tolist()
        hits = [
            Hit(names[k], k, v, s, context, a, b)
            for k, v, s, a, b in zip(index, score, sign, q_end, t_end, strict=True)
        ]
        # Pairs the scoring pass rescored on the striped kernel (a few saturated lanes of a
        # block) came without ends: they get them from an ends pass over them when asked,
        # as the hits of a search without eager ends do, not from a traceback.
        unknown = [h for h in hits if h._qend < 0]
        if unknown:
            pending = _HitEnds(unknown, strands, t_codes, task, backend)
            for h in unknown:
                h._qend = h._tend = None
                h._ends = pending
        return hits
    hits = []
    pending = _HitEnds(hits, strands, t_codes, task, backend)
    hits.extend(
        Hit(names[k], k, v, s, context, ends=pending)
        for k, v, s in zip(index, score, sign, strict=True)
    )
    return hits


def score_database(
    q_codes,
    database: Database,
    scoring: Scoring,
    mode: str,
    ends: tuple,
    backend: Backend,
    progress=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of encoded queries against a database view.

    ``q_codes`` is one code array (then scores has shape ``[N]``) or a list of them
    (``[Q, N]``); columns follow ``ids``, the view's targets (in length order, or in the
    database's order where one block holds the whole database).
    Returns ``(scores, ids)``.
    """
    single = isinstance(q_codes, np.ndarray)
    scores, ids, _ = _score_view(
        [q_codes] if single else list(q_codes), database, scoring, mode, ends, backend, progress
    )
    return (scores[0] if single else scores), ids


def _score_view(q_codes, database, scoring, mode, ends, backend, progress, with_ends=False):
    """``(scores [Q, N], ids, end cells)`` of queries against a view; the end cells
    (``(a_end, b_end)``, each ``[Q, N]``) only where asked for and the backend reports them
    (``backend.score_ends``, local mode), else None."""
    (scored,) = _score_chunks(
        [q_codes], database, scoring, mode, ends, backend, progress, with_ends
    )
    return scored


def _score_chunks(chunks, database, scoring, mode, ends, backend, progress, with_ends=False):
    """:func:`_score_view` of each chunk of ``chunks`` (lists of query codes), in order:
    through the backend's :meth:`~dpalign.engine.Backend.score_stream` (a device scores the
    next chunk while this one is ranked), or chunk by chunk with end cells."""
    width = database.layout_width(backend)
    ragged = backend.block_layout("pairwise") == "ragged"
    blocks = database.blocks(scoring.alphabet, width, ragged)
    task = Task("pairwise", scoring, mode, tuple(ends))
    ids = database.ids
    supported = getattr(backend, "ends_supported", None)
    if with_ends and supported is not None and supported(task):
        for q_codes in chunks:
            got = backend.score_ends(task, query_batch(q_codes), blocks, progress)
            yield _gathered([r[0] for r in got], len(q_codes), blocks, ids, width, got)
        return
    sizes = []

    def batches():
        for q_codes in chunks:
            sizes.append(len(q_codes))
            yield query_batch(q_codes)

    for k, results in enumerate(backend.score_stream(task, batches(), blocks, progress)):
        yield _gathered(results, sizes[k], blocks, ids, width)


def _gathered(results, n_queries, blocks, ids, width, got=None):
    """``(scores, ids, end cells)`` of ``n_queries`` queries from per-block results
    (``got``: per block ``(scores, a_end, b_end)``, from ``score_ends``)."""
    one = blocks[0] if len(blocks) == 1 else None
    if one is not None and got is None and one.width == len(ids) and (one.ids >= 0).all():
        return results[0].scores, one.ids, None  # one block of the whole view: no copy
    scores = np.empty((n_queries, len(ids)), dtype=np.int64)
    a_end = np.empty_like(scores) if got is not None else None
    b_end = np.empty_like(scores) if got is not None else None
    for k, (result, block) in enumerate(zip(results, blocks, strict=True)):
        lanes = block.ids >= 0
        span = slice(k * width, k * width + int(lanes.sum()))
        scores[:, span] = result.scores[:, lanes]
        if got is not None:
            a_end[:, span] = got[k][1][:, lanes]
            b_end[:, span] = got[k][2][:, lanes]
    return scores, ids, ((a_end, b_end) if got is not None else None)


# --------------------------------------------------------------------------------------------
# BLAST tabular rows
# --------------------------------------------------------------------------------------------

#: The columns of BLAST's ``-outfmt 6``.
TABULAR_COLUMNS = (
    "qseqid",
    "sseqid",
    "pident",
    "length",
    "mismatch",
    "gapopen",
    "qstart",
    "qend",
    "sstart",
    "send",
    "evalue",
    "bitscore",
)


def alignment_counts(ops: str) -> tuple[int, int, int, int]:
    """``(length, identities, mismatches, gap openings)`` of alignment columns.

    ``ops`` as :attr:`dpalign.pairwise.Alignment.ops`; a gap opening is a run of ``I`` or of
    ``D`` columns (a D run followed by an I run opens two), as BLAST counts them.
    """
    length = len(ops)
    identities = ops.count("=")
    gaps = ops.count("I") + ops.count("D")
    opens = sum(1 for k, op in enumerate(ops) if op in "ID" and (k == 0 or ops[k - 1] != op))
    return length, identities, length - identities - gaps, opens


def blast_coordinates(hit: Hit, query_length: int) -> tuple[int, int, int, int]:
    """1-based inclusive ``(qstart, qend, sstart, send)`` as BLAST prints them.

    A minus-strand hit is given on the query's plus strand with the target coordinates
    reversed (``sstart > send``), as blastn does. An empty alignment gives zeros.
    """
    aln = hit.alignment
    if aln.a_end <= aln.a_start and aln.b_end <= aln.b_start:
        return 0, 0, 0, 0
    if hit.strand == "-":
        return query_length - aln.a_end + 1, query_length - aln.a_start, aln.b_end, aln.b_start + 1
    return aln.a_start + 1, aln.a_end, aln.b_start + 1, aln.b_end


def within_evalue(
    hits: Sequence[Hit],
    query_length: int,
    stats,
    db_residues: int,
    db_count: int,
    max_evalue: float,
) -> list[Hit]:
    """The hits whose E-value is at most ``max_evalue`` (BLAST's ``-evalue``), in order."""
    if not hits:
        return []
    scores = np.array([h.score for h in hits], dtype=np.int64)
    keep = stats.evalue(scores, query_length, db_residues, db_count) <= max_evalue
    return [h for h, ok in zip(hits, keep.tolist(), strict=True) if ok]


def tabular_rows(
    query_name: str,
    query_length: int,
    hits: Sequence[Hit],
    stats,
    db_residues: int,
    db_count: int,
) -> list[str]:
    """BLAST ``-outfmt 6`` lines (with newlines) for one query's hits.

    ``stats`` is a :class:`dpalign.stats.KarlinAltschul`; E-values use BLAST's effective
    search space for this query against ``db_count`` targets of ``db_residues`` in all.
    """
    from .stats import format_bit_score, format_evalue, format_percent

    if not hits:
        return []
    scores = np.array([h.score for h in hits], dtype=np.int64)
    evalues = stats.evalue(scores, query_length, db_residues, db_count)
    bits = stats.bit_score(scores)
    rows = []
    for hit, evalue, bit in zip(hits, evalues, bits, strict=True):
        length, ident, mismatch, opens = alignment_counts(hit.alignment.ops)
        pident = 100.0 * ident / length if length else 0.0
        q0, q1, s0, s1 = blast_coordinates(hit, query_length)
        rows.append(
            f"{query_name}\t{hit.target}\t{format_percent(pident)}\t{length}\t{mismatch}\t"
            f"{opens}\t{q0}\t{q1}\t{s0}\t{s1}\t{format_evalue(float(evalue))}\t"
            f"{format_bit_score(float(bit))}\n"
        )
    return rows
