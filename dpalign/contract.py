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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

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
    """W references in the inter-reference layout.

    Attributes
    ----------
    codes : ndarray, shape (n_max, W)
        Element i of reference w at ``codes[i, w]``; padding is 0.
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
        return self.codes.shape[1]

    @property
    def residues(self) -> int:
        """Total reference length (the reference side of the cell count)."""
        return int(self.lengths.sum())


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
class Backend(abc.ABC):
    """A way to run kernels. Subclasses set ``name`` and implement :meth:`score`."""

    threads: int | None = None
    stats: RunStats = field(default_factory=RunStats)
    name = "abstract"

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

    def describe(self) -> str:
        """One line saying what runs (shown in run summaries)."""
        return self.name
