"""The registry that finds backends by name, and the helpers that lay data out for them.

Backends keep the contract in :mod:`dpalign.contract` (re-exported here). They register
themselves with :func:`register`; :func:`get_backend` finds one by name, ``"auto"`` picking the
fastest one available for the task.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import config, reference
from .contract import (  # noqa: F401  (re-exported: the contract's types)
    KERNELS,
    Backend,
    BlockScores,
    Progress,
    QueryBatch,
    ReferenceBlock,
    Task,
)
from .errors import BackendUnavailable, OptionError

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
                            a_gap=sc.a_gap,
                            b_gap=sc.b_gap,
                        ).score
                if progress is not None:
                    progress(m * block.residues)
            results.append(BlockScores(scores, np.full(scores.shape, 64, dtype=np.uint8)))
        return results
