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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .engine import Backend, ReferenceBlock, Task, cpu_backend, get_backend, query_batch
from .errors import OptionError
from .pairwise import Alignment, align, encode_many
from .scoring import Scoring, as_scoring, free_ends_tuple


@dataclass(frozen=True)
class Hit:
    """One ranked target.

    Coordinates are 0-based, half-open (``query[query_start:query_end]`` aligned to
    ``target[target_start:target_end]``), from a traceback of this pair.
    """

    target: str
    index: int
    score: int
    query_start: int
    query_end: int
    target_start: int
    target_end: int
    cigar: str
    alignment: Alignment


class Database:
    """Targets encoded for one alphabet, sorted by length, packed into inter-sequence blocks.

    Parameters
    ----------
    sequences : collection of sequences
        str, bytes, scikit-bio sequences (their ``metadata['id']`` names them) or uint8 codes.
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
        seqs = list(sequences)
        self._texts = [None if isinstance(s, np.ndarray) else s for s in seqs]
        codes, auto_names = encode_many(seqs, scoring, "targets")
        if names is None:
            names = [
                n if not n.startswith("targets[") else str(k) for k, n in enumerate(auto_names)
            ]
        names = [str(n) for n in names]
        if len(names) != len(codes):
            raise OptionError(f"{len(names)} names for {len(codes)} sequences")
        self.names = names
        self.alphabet = scoring.alphabet
        self._fixed_width = block_width is not None
        self.block_width = int(block_width or cpu_backend().block_width("pairwise", len(codes)))
        self._codes = {scoring.alphabet: codes}
        self.lengths = np.fromiter((len(c) for c in codes), dtype=np.int64, count=len(codes))
        # Longest first: worker threads take blocks in order (heaviest first balances them).
        self.order = np.argsort(-self.lengths, kind="stable")
        self._start, self._end = 0, len(codes)
        self._block_cache = {}
        self._root = self

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
            if root is not self and self._start % width == 0:
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
    blocks = []
    for start in range(0, len(ids), width):
        chunk = ids[start : start + width]
        lane_ids = np.full(width, -1, dtype=np.int64)
        lane_ids[: len(chunk)] = chunk
        lane_len = np.zeros(width, dtype=np.int64)
        lane_len[: len(chunk)] = lengths[chunk]
        if ragged:
            parts = [codes[k] for k in chunk]
            flat = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
            blocks.append(ReferenceBlock(flat.astype(np.uint8, copy=False), lane_len, lane_ids))
            continue
        packed = np.zeros((int(lane_len.max()), width), dtype=np.uint8)
        for lane, k in enumerate(chunk):
            packed[: lengths[k], lane] = codes[k]
        blocks.append(ReferenceBlock(packed, lane_len, lane_ids))
    return blocks


#: Queries scored together in one pass over the database by :func:`search_many` (the kernels
#: loop over them inside each block; a chunk's scores take ``chunk x targets`` int64).
QUERY_CHUNK = 64


def search(
    query,
    database,
    top: int = 10,
    mode: str = "local",
    sub_score=(1, -1),
    gap_cost=2,
    free_ends=None,
    *,
    threads: int | None = None,
    backend="auto",
    scoring: Scoring | None = None,
    progress=None,
) -> list[Hit]:
    """Score a query against every target of a database; trace back the best ``top``.

    Parameters
    ----------
    query : str, bytes, scikit-bio sequence or uint8 codes
    database : Database or a collection of sequences
    top : int
        How many hits to return (ranked by score, ties by database index).
    mode, sub_score, gap_cost, free_ends, scoring
        As in :func:`dpalign.align`; the default mode here is ``"local"``.
    threads, backend
        Where the scoring runs (default: every core, the fastest backend).
    progress : callable, optional
        Called with the number of cells finished.

    Returns
    -------
    list of Hit
        Top hits are traced back with :func:`dpalign.align`, so long pairs take its
        near-linear-memory path.
    """
    return search_many(
        [query],
        database,
        top,
        mode,
        sub_score,
        gap_cost,
        free_ends,
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
    threads: int | None = None,
    backend="auto",
    scoring: Scoring | None = None,
    progress=None,
    _names: list[str] | None = None,
) -> list[list[Hit]]:
    """:func:`search` for many queries: one list of hits per query.

    Queries are scored together, :data:`QUERY_CHUNK` at a time, in one pass over the
    database each (fewer, longer kernel calls than one search per query).
    """
    if top < 0:
        raise OptionError(f"top must be at least 0, not {top}")
    scoring = as_scoring(sub_score, gap_cost, scoring)
    ends = free_ends_tuple(mode, free_ends)
    if not isinstance(database, Database):
        database = Database(database, sub_score=scoring)
    engine_backend = (
        backend if isinstance(backend, Backend) else get_backend(backend, threads=threads)
    )
    if _names is not None:
        q_codes = [scoring.encode(q, record=n) for q, n in zip(queries, _names, strict=True)]
    else:
        q_codes, _ = encode_many(queries, scoring, "queries")
    results = []
    for start in range(0, len(q_codes), QUERY_CHUNK):
        chunk = q_codes[start : start + QUERY_CHUNK]
        scores, ids = score_database(chunk, database, scoring, mode, ends, engine_backend, progress)
        for row, codes in enumerate(chunk):
            results.append(_top_hits(codes, scores[row], ids, database, top, scoring, mode, ends))
    return results


def _top_hits(q_codes, scores, ids, database, top, scoring, mode, ends) -> list[Hit]:
    """Rank one query's scores (ties by database index) and trace back the best ``top``."""
    if top == 0 or not len(ids):
        return []
    ranked = np.lexsort((ids, -scores))[:top]
    t_codes = database.codes(scoring.alphabet)
    hits = []
    for k in ranked:
        index = int(ids[k])
        aln = align(
            q_codes,
            t_codes[index],
            mode,
            free_ends=ends if mode == "global" else None,
            scoring=scoring,
        )
        if aln.score != scores[k]:  # pragma: no cover - a kernel bug, never expected
            raise RuntimeError(
                f"internal error: traceback score {aln.score} != kernel score {scores[k]} "
                f"for target {database.names[index]!r}"
            )
        hits.append(
            Hit(
                database.names[index],
                index,
                int(scores[k]),
                aln.a_start,
                aln.a_end,
                aln.b_start,
                aln.b_end,
                aln.cigar,
                aln,
            )
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
    (``[Q, N]``); columns follow ``ids``, the view's targets in length order.
    Returns ``(scores, ids)``.
    """
    single = isinstance(q_codes, np.ndarray)
    batch = query_batch([q_codes] if single else list(q_codes))
    width = database.layout_width(backend)
    ragged = backend.block_layout("pairwise") == "ragged"
    blocks = database.blocks(scoring.alphabet, width, ragged)
    task = Task("pairwise", scoring, mode, tuple(ends))
    results = backend.score(task, batch, blocks, progress)
    ids = database.ids
    scores = np.empty((len(batch), len(ids)), dtype=np.int64)
    for k, (result, block) in enumerate(zip(results, blocks, strict=True)):
        lanes = block.ids >= 0
        scores[:, k * width : k * width + int(lanes.sum())] = result.scores[:, lanes]
    return (scores[0] if single else scores), ids
