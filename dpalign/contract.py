"""The contract every backend keeps: the types kernels and drivers speak.

A backend scores a **query batch** (codes padded into a 2-D array, plus lengths) against
**reference blocks** (W references each in the inter-reference layout: element i of all W
references stored contiguously, plus per-column flags and lengths) and returns one
``[queries, W]`` score array per block (:class:`BlockScores`). This module is the only dpalign
module that kernels import besides ``scoring``, ``alphabet``, ``config`` and ``errors``; the
registry that finds backends by name is :mod:`dpalign.engine`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from . import config
from .errors import OptionError
from .gcups import RunStats
from .scoring import PaparaScoring, Scoring

KERNELS = ("papara", "pairwise")


@dataclass(frozen=True)
class QueryBatch:
    """Queries (reads) padded into one array.

    Attributes
    ----------
    codes : ndarray, shape (Q, m_max)
        Residue codes (pairwise, uint8) or PaPaRa read states (uint8 DNA / uint32 protein);
        padding after each query's length is 0.
    lengths : ndarray, shape (Q,), int64
    """

    codes: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def residues(self) -> int:
        """Total query length (the query side of the cell count)."""
        return int(self.lengths.sum())

    def subset(self, index) -> QueryBatch:
        """The queries at ``index`` (a slice or an index array), trimmed to their longest."""
        lengths = self.lengths[index]
        width = int(lengths.max()) if len(lengths) else 0
        return QueryBatch(np.ascontiguousarray(self.codes[index, :width]), lengths)


@dataclass(frozen=True)
class ReferenceBlock:
    """W references in the inter-reference layout, or one after another (ragged).

    Attributes
    ----------
    codes : ndarray, shape (n_max, W), or (total,) when ragged
        Element i of reference w at ``codes[i, w]``; padding is 0. Ragged (1-D): the
        references one after another, lane w at ``codes[offsets[w] : offsets[w] + lengths[w]]``
        (the layout a backend that re-packs targets itself asks for, see
        :meth:`Backend.block_layout`).
    lengths : ndarray, shape (W,), int64
        0 for padding lanes.
    ids : ndarray, shape (W,), int64
        Which reference each lane holds (-1 for padding lanes).
    flags : ndarray, shape (n_max, W), uint8, optional
        PaPaRa gap flags.
    """

    codes: np.ndarray
    lengths: np.ndarray
    ids: np.ndarray
    flags: np.ndarray | None = None

    @property
    def width(self) -> int:
        return len(self.lengths)

    @property
    def ragged(self) -> bool:
        return self.codes.ndim == 1

    def lane(self, w: int) -> np.ndarray:
        """The codes of lane ``w`` (a view), in either layout."""
        n = int(self.lengths[w])
        if self.ragged:
            start = int(self.lengths[:w].sum())
            return self.codes[start : start + n]
        return self.codes[:n, w]

    def lanes(self) -> list[np.ndarray]:
        """The codes of every lane (views), in lane order."""
        if not self.ragged:
            return [self.codes[: int(n), w] for w, n in enumerate(self.lengths)]
        ends = np.cumsum(self.lengths).tolist()
        return [self.codes[e - n : e] for e, n in zip(ends, self.lengths.tolist(), strict=True)]

    @property
    def residues(self) -> int:
        """Total reference length (the reference side of the cell count)."""
        return int(self.lengths.sum())


def longest_first(lengths: np.ndarray) -> np.ndarray:
    """Indices of ``lengths`` from the longest, ties in index order (a stable sort; by radix,
    as 16-bit keys, where every length fits: 200,000 proteins in ~4 ms, not ~20)."""
    lengths = np.asarray(lengths)
    if lengths.size and 0 <= int(lengths.min()) and int(lengths.max()) < 1 << 15:
        return np.argsort(-lengths.astype(np.int16), kind="stable")
    return np.argsort(-lengths, kind="stable")


@dataclass(frozen=True)
class Task:
    """What to compute: the kernel family and its parameters.

    ``kernel="papara"`` takes a :class:`~dpalign.scoring.PaparaScoring`; ``"pairwise"`` a
    :class:`~dpalign.scoring.Scoring` with ``mode`` and the normalised ``free_ends``.
    """

    kernel: str
    scoring: Scoring | PaparaScoring
    mode: str = "global"
    free_ends: tuple[bool, bool, bool, bool] = (False, False, False, False)

    def __post_init__(self) -> None:
        if self.kernel not in KERNELS:
            raise OptionError(f"unknown kernel {self.kernel!r}")

    @property
    def minimize(self) -> bool:
        """Lower scores are better (PaPaRa's bmc2012 preset)."""
        return self.kernel == "papara" and self.scoring.minimize


@dataclass
class BlockScores:
    """Scores of a query batch against one block.

    ``scores[q, w]`` is query q against lane w (undefined for padding lanes or empty queries);
    ``width[q, w]`` is the integer width (16 or 32...) that produced it.
    """

    scores: np.ndarray
    width: np.ndarray


Progress = Callable[[int], None]  # called with the number of cells just finished


@dataclass
class RegionFill:
    """What filling a DP region from its boundaries leaves behind (the long-pair contract).

    Attributes
    ----------
    last_row : ndarray (2, w+1)
        H and D of the region's last row.
    row_store, col_store : ndarray
        The checkpoint rows ``(R, 2, w+1)`` (H, D) and columns ``(C, 2, h+1)`` (H, I).
    best : tuple (int, int, int)
        Local mode: the first maximum of H in row-major order ``(H, i, j)`` over the region's
        inner cells, or ``(0, 0, 0)``.
    row_spans, col_spans : ndarray (R, 2), (C, 2), optional
        A fill asked for ``spans``: the part of each checkpoint row (columns ``lo .. hi``,
        inclusive) and column (rows ``lo .. hi``) that holds its values; the rest holds
        anything. None: all of them.
    fetch_rest : callable, optional
        With spans: fetches every checkpoint in full (the spans then cover them).
    """

    last_row: np.ndarray
    row_store: np.ndarray
    col_store: np.ndarray
    best: tuple[int, int, int]
    row_spans: np.ndarray | None = None
    col_spans: np.ndarray | None = None
    fetch_rest: Callable[[], None] | None = None


class RegionFiller(abc.ABC):
    """One long pair held by a backend, which fills any region of its DP matrix from the
    region's boundaries (H, D of the top row; H, I of the left column), keeping the bottom
    rows and right columns of the tile rows and columns it is asked to keep.

    Attributes
    ----------
    tile_cols : int or None
        Columns per tile, fixed by the backend (a device's compiled tile width), or None when
        the caller chooses (``fill_region``'s ``tile_cols``).
    tile_rows : int or None
        The most rows per tile the backend takes, or None.
    label : str
        What fills (run statistics: cells and kernel seconds go under this name).
    prunes : bool
        ``fill_region`` takes ``prune=True`` (local mode, the whole matrix's forward pass:
        skip tiles that cannot reach the best score so far; see
        :meth:`dpalign.kernels_cl.antidiagonal.PairOnDevice.fill_region`).
    reuses_stores : bool
        ``fill_region`` takes ``reuse_stores=True``: the checkpoints it returns may live in
        host memory that its next such call overwrites (a device's page-locked staging).
    stores_slots : int
        With ``reuses_stores``: how many such host buffers ``fill_region`` keeps apart
        (``stores_slot=k``, ``0 <= k < stores_slots``: a call overwrites only what the last
        call with the same slot returned).
    spans_stores : bool
        With ``reuses_stores``, ``fill_region`` also takes ``spans=(row_spans, col_spans)``:
        only those parts of the checkpoints reach the host, the rest when the returned
        fill's ``fetch_rest`` is called (a device's traceback copies a band around the
        path's likely course instead of whole blocks).
    """

    tile_cols: int | None = None
    tile_rows: int | None = None
    label: str = "cpu"
    prunes: bool = False
    reuses_stores: bool = False
    stores_slots: int = 1
    spans_stores: bool = False
    cells: int = 0
    kernel_seconds: float = 0.0

    @abc.abstractmethod
    def fill_region(
        self,
        r0: int,
        c0: int,
        top: np.ndarray,
        left: np.ndarray,
        row_slot: np.ndarray,
        col_slot: np.ndarray,
        tile_rows: int,
        tile_cols: int,
        threads: int,
    ) -> RegionFill:
        """Fill rows ``r0 .. r0+h`` and columns ``c0 .. c0+w`` (h, w from the boundaries).

        ``row_slot`` / ``col_slot`` give, per tile row / column, the checkpoint slot to keep
        its bottom row / right column in, or -1.
        """


@dataclass
class Backend(abc.ABC):
    """A way to run kernels. Subclasses set ``name`` and implement :meth:`score`.

    The other methods have defaults that fit a backend which only scores; the engine asks
    them rather than a backend's name (``kind`` says what it runs on: ``"cpu"``, ``"device"``
    for one accelerator, ``"pool"`` for many workers, ``"oracle"`` for the reference).
    """

    threads: int | None = None
    stats: RunStats = field(default_factory=RunStats)
    name = "abstract"
    kind = "cpu"
    #: The engine's table entries this backend runs (``{family}_{op}_{backend}_..._{width}``).
    kernels: ClassVar[tuple[str, ...]] = ()
    #: This backend traces alignments back itself (else the engine's traceback door uses the
    #: CPU backend).
    traces = False

    @classmethod
    def available(cls, **options) -> bool:
        """True when this backend, built with ``options``, can run on this machine."""
        return True

    @classmethod
    def unavailable_reason(cls, **options) -> str:
        """Why :meth:`available` says no, in words a user can act on."""
        return "it cannot run on this machine"

    @abc.abstractmethod
    def score(
        self,
        task: Task,
        queries: QueryBatch,
        blocks: Sequence[ReferenceBlock],
        progress: Progress | None = None,
    ) -> list[BlockScores]:
        """Score every query against every block; return results in block order."""

    def score_block(self, task: Task, queries: QueryBatch, block: ReferenceBlock) -> BlockScores:
        """One block on the calling thread (a work queue's CPU unit)."""
        return self.score(task, queries, [block])[0]

    def score_stream(
        self,
        task: Task,
        batches: Iterable[QueryBatch],
        blocks: Sequence[ReferenceBlock],
        progress: Progress | None = None,
    ) -> Iterator[list[BlockScores]]:
        """:meth:`score` of each query batch in turn against the same blocks, yielded in
        order. A backend may take the next batches before a batch's results are yielded
        (a device keeps computing across them); the default scores one after another."""
        for queries in batches:
            yield self.score(task, queries, blocks, progress)

    def block_width(self, kernel: str, n_targets: int) -> int:
        """Lanes per reference block this backend prefers for ``n_targets`` references of a
        kernel family (the engine's packer asks once per run)."""
        return config.BLOCK_WIDTH

    def query_chunk(self, kernel: str, n_targets: int) -> int | None:
        """Queries a driver should hand to one :meth:`score` call against ``n_targets``
        references (None: the driver's own default)."""
        return None

    def block_layout(self, kernel: str) -> str:
        """``"lanes"`` (the inter-reference 2-D layout every kernel reads) or ``"ragged"``
        (references one after another, for a backend that lays its targets out itself)."""
        return "lanes"

    def prepare(self, task: Task, queries: QueryBatch, blocks: Sequence[ReferenceBlock]) -> None:
        """Lay the blocks out (and upload them) for the coming :meth:`score` calls.

        ``score`` does it on first use anyway; a work queue calls this ahead of its first
        take so that the set-up stays out of the measured work. The default does nothing.
        """
        return  # a hook: most backends have nothing to lay out ahead

    def device_wait(self) -> tuple[float, float]:
        """(wall, CPU) seconds this thread spent waiting for a device so far (0 on a CPU)."""
        return 0.0, 0.0

    def profile_device(self) -> Backend | None:
        """The backend whose device will compute PaPaRa's edge profiles for this one
        (:meth:`device_papara_profiles`), or None: the CPU kernel computes them.

        A device that scores a run alone computes them itself, so that the first launch
        need not wait for the CPU kernel's load (Numba's import and LLVM's set-up, 0.3-1 s
        of a cold process, beside pyopencl's import and the reading). The default: None.
        """
        return None

    def device_papara_profiles(
        self, tips, gap_state: int, ops, trans, n_edges: int, cgap: bool
    ) -> tuple | None:
        """PaPaRa's (E, n) edge states and uint8 gap flags from a combine schedule (see
        :func:`dpalign.papara.profiles.combine_schedule`) on this backend's device,
        bit-identical to the CPU kernel's; None where the device cannot (no double
        precision, too little memory): the CPU kernel then runs. The default: None."""
        return None

    def long_pair_cells(self) -> int | None:
        """Pairs with more cells than this take the long-pair path (tiles, linear-memory
        traceback); None: never (the backend aligns any pair itself)."""
        return config.LONG_PAIR_CELLS

    def region_filler(
        self, a, b, scoring: Scoring, local: bool, neg_store: int, tile=None
    ) -> RegionFiller | None:
        """The long pair ``a`` x ``b`` held for region fills on this backend's device, or
        None when the backend has none (its regions are filled on the CPU).

        ``neg_store`` is "-inf" of the 32-bit boundaries; ``tile`` a backend-specific tile
        shape (tests force tiny ones)."""
        return None

    def describe(self) -> str:
        """One line saying what runs (shown in run summaries)."""
        return self.name
