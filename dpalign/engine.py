"""The engine: the registry of backends and kernels, the packer, and the doors drivers use.

Drivers (``pairwise``, ``search``, ``longpair``, ``papara``) reach every backend through here
and never by name:

* the **registry**: :func:`get_backend` finds a backend by name (``"auto"``: the fastest one
  available), :func:`kernel_table` lists every kernel of every backend under parasail-style
  names (``{family}_{op}_{backend}_{strategy}_{width}``, e.g. ``sw_score_numba_inter_i8``);
  the CLI, the tests and ``dpalign bench`` read that one table;
* the **packer**: :func:`query_batch`, :func:`reference_blocks` and :func:`pack` lay data out
  in the lanes a backend prefers (:meth:`Backend.block_width`, asked once per run);
* the **traceback door**: :func:`align_pair`, :func:`align_papara` and :func:`score_pairs`
  run on the backend when it traces, else on the CPU backend (:func:`tracer`);
* the **long-pair region contract**: :func:`cpu_regions` and :func:`device_regions` hand the
  long-pair driver something that fills a DP region from its boundaries.

Backends keep the contract in :mod:`dpalign.contract` (re-exported here); the modules that
define them are imported on first use, so ``import dpalign`` stays fast.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cache

import numpy as np

from . import config, reference
from .contract import (  # noqa: F401  (re-exported: the contract's types)
    KERNELS,
    Backend,
    BlockScores,
    Progress,
    QueryBatch,
    ReferenceBlock,
    RegionFill,
    RegionFiller,
    Task,
)
from .errors import BackendUnavailable, OptionError

_REGISTRY: dict[str, type[Backend]] = {}
#: Preference order for "auto" (first available wins).
_AUTO_ORDER = ["hybrid", "numba", "reference"]
_LOADED = [0]  # 0: not yet, 1: being loaded, 2: loaded
# Held while the built-in backends load: a second thread (the PaPaRa driver's profiles beside
# its backend's warm-up) waits for the registry to be complete instead of finding it empty.
_LOADING = threading.RLock()


def register(cls: type[Backend]) -> type[Backend]:
    """Make a backend findable by its ``name`` (also usable as a class decorator)."""
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtin_backends() -> None:
    # The modules defining the built-in backends, imported on first use; a backend whose
    # optional dependencies are missing reports available() False, or is left out when its
    # module cannot be imported at all.
    if _LOADED[0] == 2:
        return
    with _LOADING:
        if _LOADED[0]:  # loaded meanwhile, or being loaded by this thread (an import's call)
            return
        _LOADED[0] = 1
        try:
            _register_builtin_backends()
        finally:
            _LOADED[0] = 2


def _register_builtin_backends() -> None:
    try:
        from .simd.backend import NumbaBackend

        register(NumbaBackend)
    except ImportError:  # pragma: no cover - numba is a dependency
        pass
    from .kernels_cl.backend import OpenCLBackend

    register(OpenCLBackend)
    # The work-queue backends sit above the engine (they run other backends); the registry
    # is the one place that loads them by their module (see [tool.importlinter]).
    from .hybrid import DaskBackend, HybridBackend

    register(HybridBackend)
    register(DaskBackend)


def backend_names() -> list[str]:
    """Names of the registered backends."""
    _load_builtin_backends()
    return sorted(_REGISTRY)


def backend_class(name: str) -> type[Backend]:
    """The registered backend class of a name."""
    _load_builtin_backends()
    if name not in _REGISTRY:
        raise OptionError(f"unknown backend {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine."""
    return [name for name in backend_names() if _REGISTRY[name].available()]


def device_backends() -> list[type[Backend]]:
    """Registered backends that run on one accelerator (``kind == "device"``), the devices a
    work queue can feed."""
    _load_builtin_backends()
    return [cls for _, cls in sorted(_REGISTRY.items()) if cls.kind == "device"]


@cache
def _fields(cls) -> frozenset[str]:
    # cached: every backend lookup asks, and dataclasses.fields is slow (~10 us a class)
    return (
        frozenset(f.name for f in fields(cls))
        if hasattr(cls, "__dataclass_fields__")
        else frozenset()
    )


def _options_for(cls: type[Backend], options: dict) -> dict:
    """The options ``cls`` takes; options of other backends (a device for a CPU backend) are
    left out, options no backend takes are an error."""
    unknown = set(options) - set().union(*(_fields(c) for c in _REGISTRY.values()))
    if unknown:
        raise OptionError(f"no backend takes the option(s) {', '.join(sorted(unknown))}")
    names = _fields(cls)
    return {k: v for k, v in options.items() if k in names}


def get_backend(name: str | Backend = "auto", **options) -> Backend:
    """Return a backend instance by name (``"auto"``: the fastest one available).

    Options a backend does not take (``device`` for a CPU backend) are left out.
    """
    if isinstance(name, Backend):
        return name
    _load_builtin_backends()
    if name == "auto":
        for candidate in _AUTO_ORDER:
            cls = _REGISTRY.get(candidate)
            if cls is not None and cls.available(**_options_for(cls, options)):
                return cls(**_options_for(cls, options))
        raise BackendUnavailable("no backend is available")
    cls = backend_class(name)
    if not cls.available(**_options_for(cls, options)):
        raise BackendUnavailable(
            f"backend {name!r} is not available on this machine: "
            f"{cls.unavailable_reason(**_options_for(cls, options))}"
        )
    return cls(**_options_for(cls, options))


def cores_suffice(cells: float, kernel: str = "pairwise", threads: int | None = None) -> bool:
    """Whether work of about ``cells`` cells of a kernel family (``"pairwise"``,
    ``"papara"``, ``"longpair"``: one pair with traceback) is small enough for the cores
    alone under ``auto``: below ``config.AUTO_CPU_CELLS_PER_CORE`` (``..._PAPARA_...``,
    ``..._LONGPAIR_...``) cells a core, a GPU's start in a fresh process would take longer
    than the cores' work."""
    per_core = {
        "papara": config.AUTO_CPU_PAPARA_CELLS_PER_CORE,
        "longpair": config.AUTO_CPU_LONGPAIR_CELLS_PER_CORE,
    }.get(kernel, config.AUTO_CPU_CELLS_PER_CORE)
    return cells < per_core * config.cpu_threads(threads)


def auto_backend(cells: float, threads: int | None = None, kernel: str = "pairwise") -> Backend:
    """``auto`` for work of about ``cells`` cells: the CPU backend where
    :func:`cores_suffice`, else what ``get_backend("auto")`` picks."""
    if cores_suffice(cells, kernel, threads):
        return cpu_backend(threads)
    return get_backend("auto", threads=threads)


def backend_for(name: str | Backend, scoring, **options) -> Backend:
    """The backend ``name`` for a pairwise scoring scheme.

    Schemes the compiled kernels cannot run (:meth:`Scoring.kernel_problem`: separate gap
    costs for a and b, gap opening cheaper than extension) run on the reference: ``"auto"``
    picks it, and a kernel backend asked for by name is refused with the reason.
    """
    problem = scoring.kernel_problem()
    if problem is not None and name == "auto":
        name = "reference"
    backend = get_backend(name, **options)
    if problem is not None and backend.kind != "oracle":
        raise OptionError(
            f"{problem} is computed by the reference backend only, not by {backend.name!r} "
            "(its kernels take one gap cost with o >= 0); the 'auto' backend picks the "
            "reference for it"
        )
    return backend


def cpu_backend(threads: int | None = None) -> Backend:
    """The CPU backend: Numba's kernels, else the reference."""
    _load_builtin_backends()
    cls = _REGISTRY.get("numba")
    if cls is not None and cls.available():
        return cls(threads=threads)
    return ReferenceBackend(threads=threads)


# --------------------------------------------------------------------------------------------
# The kernel table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of the table: ``{family}_{op}_{backend}_{strategy}_{width}``.

    ``family``: ``nw``, ``sg``, ``sw`` (pairwise global, semi-global, local) or ``papara``;
    ``op``: ``score``, ``trace`` or ``fill`` (a long pair's regions); ``task``: the
    :class:`Task` kernel family it serves (``"pairwise"`` or ``"papara"``).
    """

    name: str
    family: str
    op: str
    backend: str
    strategy: str
    width: str

    @property
    def task(self) -> str:
        return "papara" if self.family == "papara" else "pairwise"

    @classmethod
    def parse(cls, name: str) -> KernelEntry:
        family, op, backend, strategy, width = name.split("_")
        return cls(name, family, op, backend, strategy, width)


def kernel_table(
    family: str | None = None, backend: str | None = None, op: str | None = None
) -> list[KernelEntry]:
    """Every kernel of every registered backend (optionally one family, backend, operation),
    sorted by name."""
    _load_builtin_backends()
    entries = [KernelEntry.parse(name) for cls in _REGISTRY.values() for name in cls.kernels]
    return sorted(
        (
            e
            for e in entries
            if (family is None or e.family == family)
            and (backend is None or e.backend == backend)
            and (op is None or e.op == op)
        ),
        key=lambda e: e.name,
    )


def kernel_families() -> list[tuple[str, str]]:
    """The (Task kernel family, backend) pairs of the table that score, e.g.
    ``("pairwise", "numba")``."""
    return sorted({(e.task, e.backend) for e in kernel_table(op="score")})


# --------------------------------------------------------------------------------------------
# The traceback door and pairs scored one by one
# --------------------------------------------------------------------------------------------


def tracer(backend: Backend) -> Backend:
    """The backend that traces alignments back for ``backend``: itself when it can, else the
    CPU backend (traceback runs for the chosen pairs only, on every core)."""
    return backend if backend.traces else cpu_backend(backend.threads)


def align_pair(backend: Backend, task: Task, a: np.ndarray, b: np.ndarray) -> tuple:
    """``(score, a_start, a_end, b_start, b_end, ops)`` of one pairwise alignment (``ops`` a
    str of ``=``/``X``/``D``/``I``), with the reference's tie rules."""
    return tracer(backend).align_pair(task, a, b)


def align_papara(backend: Backend, states, flags, reads, edges, scoring):
    """PaPaRa traceback of each read against its edge (-1: skipped): ``(scores, ops)``,
    ops a str of ``M``/``R``/``I`` per read (None where skipped)."""
    return tracer(backend).align_papara(states, flags, reads, edges, scoring)


def refine_papara(backend: Backend, tables, table_of, reads, bands, thetas, model) -> list[str]:
    """The accurate mode's second pass (:mod:`dpalign.papara.refine`): reads re-aligned
    against their edges' probabilistic profiles (``tables[table_of[k]]`` for read k, decoded
    with threshold ``thetas[k]``), one op string per read. Always on the CPU backend, whichever
    backend scored, so that every backend writes the same alignment."""
    return cpu_backend(backend.threads).refine_papara(tables, table_of, reads, bands, thetas, model)


def refine_papara_log_z(backend: Backend, tables, table_of, reads, bands, model) -> np.ndarray:
    """Each read's log likelihood under the row-mixture model of ``tables[table_of[k]]`` over
    its band (the accurate mode's choice among an edge and its neighbours). On the CPU
    backend, as :func:`refine_papara`."""
    return cpu_backend(backend.threads).refine_papara_log_z(tables, table_of, reads, bands, model)


def align_papara_trimmed(backend: Backend, states, flags, reads, edges, scoring):
    """:func:`align_papara` in the form the PaPaRa writer keeps: ``(scores, leads, cores)``,
    ``leads[k]`` the number of ``R`` before read k's first ``M``/``I`` (n where skipped) and
    ``cores[k]`` its ops from there to the last ``M``/``I`` as ASCII bytes (``b""`` where
    skipped). A tracer without its own trimmed form has its op strings trimmed here."""
    tracing = tracer(backend)
    trimmed = getattr(tracing, "align_papara_trimmed", None)
    if trimmed is not None:
        return trimmed(states, flags, reads, edges, scoring)
    scores, ops = tracing.align_papara(states, flags, reads, edges, scoring)
    n = states.shape[1] if np.ndim(states) == 2 else 0
    leads = np.full(len(ops), n, dtype=np.int64)
    cores = [b""] * len(ops)
    for k, read_ops in enumerate(ops):
        if read_ops is not None:
            core = read_ops.lstrip("R")
            leads[k] = len(read_ops) - len(core)
            cores[k] = core.rstrip("R").encode("ascii")
    return np.asarray(scores, dtype=np.int64), leads, cores


def score_pairs(backend: Backend, task: Task, a_list, b_list, progress=None) -> np.ndarray:
    """Scores of the pairs ``(a_list[k], b_list[k])``, one pair at a time."""
    return tracer(backend).score_pairs(task, a_list, b_list, progress)


# --------------------------------------------------------------------------------------------
# The long-pair region contract
# --------------------------------------------------------------------------------------------


def cpu_regions(a, b, matrix, gap_open, gap_extend, local, neg, neg_store, relative):
    """The long pair's regions on the CPU cores (Numba's anti-diagonal tiles), with the leaf
    traceback kernels; ``matrix`` is in the lane dtype (int16, int32 or int64)."""
    _load_builtin_backends()
    cls = _REGISTRY.get("numba")
    if cls is None:  # pragma: no cover - numba is a dependency
        raise BackendUnavailable("long pairs need the numba backend")
    return cls.regions(a, b, matrix, gap_open, gap_extend, local, neg, neg_store, relative)


def cpu_papara_fold(scores, width, lanes, ids, sign, running, threads=None) -> bool:
    """Fold one block's PaPaRa scores (reads x lanes) into the running per-read ``(best, edge,
    width, second, second_edge, ties)`` arrays in place on the CPU cores in Numba; False
    where Numba is not there (the driver then folds in NumPy)."""
    _load_builtin_backends()
    cls = _REGISTRY.get("numba")
    if cls is None or not cls.available():
        return False
    cls.papara_fold(scores, width, lanes, ids, sign, running, threads)
    return True


def cpu_papara_profiles(tips, gap_state, ops, trans, n_edges, cgap, threads=None):
    """PaPaRa's (E, n) edge states and gap flags from a combine schedule (see
    :func:`dpalign.papara.profiles.edge_profiles`) on the CPU cores in Numba, or None where
    Numba is not there (the driver then runs its NumPy form)."""
    _load_builtin_backends()
    cls = _REGISTRY.get("numba")
    if cls is None or not cls.available():
        return None
    return cls.papara_profiles(tips, gap_state, ops, trans, n_edges, cgap, threads)


def device_regions(backend: Backend, a, b, scoring, local, neg_store, tile=None):
    """The long pair held on ``backend``'s device for its large regions, or None."""
    return backend.region_filler(a, b, scoring, local, neg_store, tile)


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


def pack(
    backend: Backend,
    kernel: str,
    sequences: Sequence[np.ndarray],
    order: np.ndarray | None = None,
    flags: Sequence[np.ndarray] | None = None,
    dtype=np.uint8,
) -> list[ReferenceBlock]:
    """References in blocks of the lanes and layout ``backend`` prefers for a kernel family."""
    width = backend.block_width(kernel, len(sequences))
    ragged = backend.block_layout(kernel) == "ragged"
    return reference_blocks(
        sequences, width=width, flags=flags, order=order, dtype=dtype, ragged=ragged
    )


def reference_blocks(
    sequences: Sequence[np.ndarray],
    width: int = config.BLOCK_WIDTH,
    flags: Sequence[np.ndarray] | None = None,
    order: np.ndarray | None = None,
    dtype=np.uint8,
    ragged: bool = False,
) -> list[ReferenceBlock]:
    """Lay references out in blocks of ``width`` lanes (inter-reference layout, or ragged).

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
    ragged : bool
        Each block's references one after another in a 1-D array (no flags).
    """
    order = np.arange(len(sequences)) if order is None else np.asarray(order)
    blocks = []
    for start in range(0, len(order), width):
        ids = np.full(width, -1, dtype=np.int64)
        chunk = order[start : start + width]
        ids[: len(chunk)] = chunk
        lengths = np.zeros(width, dtype=np.int64)
        lengths[: len(chunk)] = [len(sequences[k]) for k in chunk]
        if ragged:
            parts = [np.asarray(sequences[k], dtype=dtype) for k in chunk]
            codes = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
            blocks.append(ReferenceBlock(codes, lengths, ids))
            continue
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
    kind = "oracle"
    traces = True
    kernels = (
        *(f"{f}_{op}_reference_full_i64" for f in ("nw", "sg", "sw") for op in ("score", "trace")),
        "papara_score_reference_full_i64",
        "papara_trace_reference_full_i64",
    )

    def long_pair_cells(self):
        return None

    def refine_papara(self, tables, table_of, reads, bands, thetas, model):
        """The accurate mode's second pass, read by read (:func:`reference.papara_refine`, or
        :func:`reference.papara_refine_rows` for the row-mixture model, ``model.rows`` > 0)."""
        consts = (model.open_ins, model.extend_ins, model.overhang)
        if model.rows:
            extra = (model.row_mix, model.jump, model.profile_weight, model.blend, model.insert)
            return [
                reference.papara_refine_rows(
                    tables[int(t)], read, band, *consts, float(theta), *extra
                )
                for t, read, band, theta in zip(table_of, reads, bands, thetas, strict=True)
            ]
        return [
            reference.papara_refine(*tables[int(t)], read, band, *consts, float(theta))
            for t, read, band, theta in zip(table_of, reads, bands, thetas, strict=True)
        ]

    def refine_papara_log_z(self, tables, table_of, reads, bands, model):
        """Each read's row-mixture log likelihood over its band, read by read
        (:func:`reference.papara_refine_rows_log_z`)."""
        consts = (model.open_ins, model.extend_ins, model.overhang)
        extra = (model.row_mix, model.jump, model.profile_weight)
        return np.array(
            [
                reference.papara_refine_rows_log_z(tables[int(t)], read, band, *consts, *extra)
                for t, read, band in zip(table_of, reads, bands, strict=True)
            ],
            dtype=np.float64,
        )

    def _pairwise(self, task, a, b, align=False):
        sc = task.scoring
        run = reference.pairwise_align if align else reference.pairwise_score
        return run(
            a,
            b,
            sc.matrix,
            sc.gap_open,
            sc.gap_extend,
            task.mode,
            task.free_ends,
            a_gap=sc.a_gap,
            b_gap=sc.b_gap,
        )

    def align_pair(self, task, a, b):
        r = self._pairwise(task, a, b, align=True)
        return (r.score, r.a_start, r.a_end, r.b_start, r.b_end, r.ops)

    def align_papara(self, states, flags, reads, edges, scoring):
        scores, ops = [], []
        for read, edge in zip(reads, edges, strict=True):
            if edge < 0 or len(read) == 0:
                scores.append(0)
                ops.append(None)
                continue
            score, read_ops = reference.papara_align(states[edge], flags[edge], read, scoring)
            scores.append(score)
            ops.append(read_ops)
        return scores, ops

    def score_pairs(self, task, a_list, b_list, progress=None):
        out = np.zeros(len(a_list), dtype=np.int64)
        for k, (a, b) in enumerate(zip(a_list, b_list, strict=True)):
            out[k] = self._pairwise(task, a, b).score
            if progress is not None:
                progress(len(a) * len(b))
        return out

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
                    for lane in targets:
                        scores[q, lane] = self._pairwise(task, read, block.lane(lane)).score
                if progress is not None:
                    progress(m * block.residues)
            results.append(BlockScores(scores, np.full(scores.shape, 64, dtype=np.uint8)))
        return results
