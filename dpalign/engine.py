"""The one contract every backend keeps, and the registry that finds backends by name.

A backend scores a **query batch** (codes padded into a 2-D array, plus lengths) against
**reference blocks** (W references each in the inter-reference layout: element i of all W
references stored contiguously, plus per-column flags and lengths) and returns one
``[queries, W]`` score array per block. PaPaRa placement and database search only build
batches and blocks and reduce results; they never know which backend ran.

Backends register themselves with :func:`register`; :func:`get_backend` finds one by name,
``"auto"`` picking the fastest one available for the task.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import config, reference
from .errors import BackendUnavailable, OptionError
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


_REGISTRY: dict[str, type[Backend]] = {}
#: Preference order for "auto" (first available wins).
_AUTO_ORDER = ["hybrid", "numba", "reference"]


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend findable by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


_BACKEND_MODULES = ("dpalign.simd.backend", "dpalign.kernels_cl.backend", "dpalign.hybrid")


def _load_builtin_backends() -> None:
    # Imported lazily so that ``import dpalign`` stays fast; each module registers its
    # backends, and a backend whose dependencies are missing reports available() False.
    for module in _BACKEND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def backend_names() -> list[str]:
    """Names of the registered backends."""
    _load_builtin_backends()
    return sorted(_REGISTRY)


def get_backend(name: str | Backend = "auto", **options) -> Backend:
    """Return a backend instance by name (``"auto"``: the fastest one available)."""
    if isinstance(name, Backend):
        return name
    _load_builtin_backends()
    if name == "auto":
        for candidate in _AUTO_ORDER:
            cls = _REGISTRY.get(candidate)
            if cls is not None and cls.available(**options):
                return cls(**options)
        raise BackendUnavailable("no backend is available")
    if name not in _REGISTRY:
        raise OptionError(f"unknown backend {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    cls = _REGISTRY[name]
    if not cls.available(**options):
        raise BackendUnavailable(
            f"backend {name!r} is not available on this machine: "
            f"{cls.unavailable_reason(**options)}"
        )
    return cls(**options)


# --------------------------------------------------------------------------------------------
# Building batches and blocks
# --------------------------------------------------------------------------------------------


def query_batch(sequences: Sequence[np.ndarray], dtype=np.uint8) -> QueryBatch:
    """Pad encoded sequences into a :class:`QueryBatch`."""
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    codes = np.zeros((len(sequences), int(lengths.max()) if len(sequences) else 0), dtype=dtype)
    for row, seq in enumerate(sequences):
        codes[row, : len(seq)] = seq
    return QueryBatch(codes, lengths)


def reference_blocks(
    sequences: Sequence[np.ndarray],
    width: int = config.BLOCK_WIDTH,
    flags: Sequence[np.ndarray] | None = None,
    order: np.ndarray | None = None,
    dtype=np.uint8,
) -> list[ReferenceBlock]:
    """Lay references out in blocks of ``width`` lanes (inter-reference layout).

    Parameters
    ----------
    sequences : sequence of 1-D arrays
        Encoded references.
    width : int
        Lanes per block; the last block is padded with empty lanes.
    flags : sequence of 1-D arrays, optional
        Per-element flags (PaPaRa gap flags), same lengths as ``sequences``.
    order : ndarray, optional
        The order in which references fill lanes (e.g. sorted by length so that a block's
        lanes have similar lengths); default: as given.
    """
    order = np.arange(len(sequences)) if order is None else np.asarray(order)
    blocks = []
    for start in range(0, len(order), width):
        ids = np.full(width, -1, dtype=np.int64)
        chunk = order[start : start + width]
        ids[: len(chunk)] = chunk
        lengths = np.zeros(width, dtype=np.int64)
        lengths[: len(chunk)] = [len(sequences[k]) for k in chunk]
        n_max = int(lengths.max()) if len(chunk) else 0
        codes = np.zeros((n_max, width), dtype=dtype)
        block_flags = np.zeros((n_max, width), dtype=np.uint8) if flags is not None else None
        for lane, k in enumerate(chunk):
            codes[: len(sequences[k]), lane] = sequences[k]
            if block_flags is not None:
                block_flags[: len(flags[k]), lane] = flags[k]
        blocks.append(ReferenceBlock(codes, lengths, ids, block_flags))
    return blocks


def gather_scores(results: Sequence[BlockScores], blocks: Sequence[ReferenceBlock], n_refs: int):
    """Scatter per-block results into ``(scores, width)`` arrays of shape ``[Q, n_refs]``."""
    n_queries = results[0].scores.shape[0] if results else 0
    scores = np.zeros((n_queries, n_refs), dtype=np.int64)
    width = np.zeros((n_queries, n_refs), dtype=np.uint8)
    for result, block in zip(results, blocks, strict=True):
        lanes = np.flatnonzero(block.ids >= 0)
        scores[:, block.ids[lanes]] = result.scores[:, lanes]
        width[:, block.ids[lanes]] = result.width[:, lanes]
    return scores, width


# --------------------------------------------------------------------------------------------
# The reference backend: reference.py behind the contract (slow; the judge of the others)
# --------------------------------------------------------------------------------------------


@register
@dataclass
class ReferenceBackend(Backend):
    """Runs :mod:`dpalign.reference` pair by pair (PaPaRa: one read against a whole block)."""

    name = "reference"

    def score(self, task, queries, blocks, progress=None):
        results = []
        for block in blocks:
            scores = np.zeros((len(queries), block.width), dtype=np.int64)
            lanes = np.flatnonzero(block.lengths > 0)
            # Pairwise scores are defined for empty sequences too; only padding lanes
            # (id -1) are left out.
            targets = np.flatnonzero(block.ids >= 0)
            for q in range(len(queries)):
                m = int(queries.lengths[q])
                read = queries.codes[q, :m]
                if task.kernel == "papara" and (m == 0 or not lanes.size):
                    continue
                if task.kernel == "papara":
                    n = int(block.lengths[lanes[0]])
                    fill = reference.papara_fill(
                        block.codes[:n, lanes], block.flags[:n, lanes], read, task.scoring
                    )
                    scores[q, lanes] = fill.scores
                else:
                    sc = task.scoring
                    for lane in targets:
                        target = block.codes[: block.lengths[lane], lane]
                        scores[q, lane] = reference.pairwise_score(
                            read,
                            target,
                            sc.matrix,
                            sc.gap_open,
                            sc.gap_extend,
                            task.mode,
                            task.free_ends,
                        ).score
                if progress is not None:
                    progress(m * block.residues)
            results.append(BlockScores(scores, np.full(scores.shape, 64, dtype=np.uint8)))
        return results
