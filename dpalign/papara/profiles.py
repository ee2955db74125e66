"""One ancestral profile per edge: Fitch states and gap flags at a virtual root (spec §4).

For an edge (u, v) a virtual root is placed on the edge; the subtree at u (away from v) and at
v (away from u) are computed bottom-up from the tips and combined at the virtual root. Each
directed subtree is computed once and shared by every edge that needs it.

Gap flags come from one of two models:

* ``likelihood`` (PaPaRa 2.5's default): a two-state ("gap" / "non-gap") likelihood with the
  gap frequency g of the reference; the flag is set where the gap state is more likely;
* ``cgap``: PaPaRa 1.0's parsimony-like rule on an auxiliary value per column.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from .. import engine
from ..errors import DpalignError, OptionError
from .tree import PaparaTree

log = logging.getLogger("dpalign.papara")

GAP_MODELS = ("likelihood", "cgap")
_TINY = 2.0**-256
_SCALE = 2.0**256


@dataclass
class _Subtree:
    """Per-column values of a directed subtree."""

    state: np.ndarray
    lik0: np.ndarray  # likelihood of "non-gap"
    lik1: np.ndarray  # likelihood of "gap"
    aux: np.ndarray  # CGAP value
    tip: bool


def _transition(g: float, t: float) -> tuple[float, float, float, float]:
    decay = math.exp(-t)
    return (1 - g + g * decay, g * (1 - decay), (1 - g) * (1 - decay), g + (1 - g) * decay)


def _combine(a: _Subtree, za: float, b: _Subtree, zb: float, g: float) -> _Subtree:
    state = a.state & b.state
    state = np.where(state == 0, a.state | b.state, state)
    pa, pb = _transition(g, za), _transition(g, zb)
    lik0 = (pa[0] * a.lik0 + pa[1] * a.lik1) * (pb[0] * b.lik0 + pb[1] * b.lik1)
    lik1 = (pa[2] * a.lik0 + pa[3] * a.lik1) * (pb[2] * b.lik0 + pb[3] * b.lik1)
    tiny = (lik0 < _TINY) & (lik1 < _TINY)
    if tiny.any():
        lik0 = np.where(tiny, lik0 * _SCALE, lik0)
        lik1 = np.where(tiny, lik1 * _SCALE, lik1)
    if a.tip or b.tip:
        x, y = (a.aux & 1).astype(bool), (b.aux & 1).astype(bool)
    else:
        x, y = a.aux == 1, b.aux == 1
    aux = np.where(x & y, 1, np.where(x ^ y, 3, 0)).astype(np.uint8)
    return _Subtree(state, lik0, lik1, aux, tip=False)


def combine_schedule(tree: PaparaTree, gap_fraction: float) -> tuple[list, np.ndarray, np.ndarray]:
    """The combines that give every edge's profile, in bottom-up order, for the CPU kernel.

    Returns ``(tips, ops, trans)``: the tip nodes (slot k is ``tips[k]``'s row), one row
    ``(dst, a, b, a or b is a tip)`` per combine (dst >= 0: a new slot after the tips; dst < 0:
    the virtual root of edge ``-1 - dst``) and its eight transition probabilities (a's branch
    then b's, :func:`_transition`). Each directed subtree is one combine, shared by every edge
    that needs it, as in :func:`edge_profiles`' NumPy form.
    """
    g = gap_fraction
    tips = [node for node in range(len(tree.names)) if tree.is_tip(node)]
    slot: dict[tuple[int, int], int] = {}  # directed subtree -> its slot (tips: their own)
    tip_slot = {node: k for k, node in enumerate(tips)}
    ops: list[tuple[int, int, int, int]] = []
    trans: list[tuple[float, ...]] = []
    next_slot = len(tips)

    def combine(q: int, kids) -> int:
        nonlocal next_slot
        (c1, z1, a), (c2, z2, b) = kids
        ops.append((next_slot, a, b, int(tree.is_tip(c1) or tree.is_tip(c2))))
        trans.append(_transition(g, z1) + _transition(g, z2))
        next_slot += 1
        return next_slot - 1

    def directed(parent: int, node: int) -> int:
        return tree.directed(parent, node, slot, tip_slot.__getitem__, combine)

    for k, edge in enumerate(tree.edges):
        a, b = directed(edge.v, edge.u), directed(edge.u, edge.v)
        ops.append((-1 - k, a, b, int(tree.is_tip(edge.u) or tree.is_tip(edge.v))))
        trans.append(_transition(g, edge.length) * 2)
    return (
        tips,
        np.array(ops, dtype=np.int64).reshape(-1, 4),
        np.array(trans, dtype=np.float64).reshape(-1, 8),
    )


def edge_profiles(
    tree: PaparaTree,
    tip_states: dict[int, np.ndarray],
    gap_state: int,
    gap_fraction: float,
    gap_model: str = "likelihood",
    threads: int | None = None,
    kernel: bool = True,
    device=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Compute the state and gap-flag vector of every edge.

    Parameters
    ----------
    tree : PaparaTree
    tip_states : dict
        Tip node -> its MSA row as states (after all-gap column removal).
    gap_state : int
        The all-bits state (15 for DNA).
    gap_fraction : float
        g: literal ``-`` characters / (reference rows x kept columns).
    gap_model : {"likelihood", "cgap"}
    threads : int, optional
        CPU threads for the kernel (default: one per core).
    kernel : bool
        Run the schedule in the engine's CPU kernel where there is one (False: the NumPy
        form, one combine of whole rows at a time, which the kernel is tested against).
    device : Backend, optional
        Run the schedule on this backend's device first
        (:meth:`~dpalign.contract.Backend.device_papara_profiles`); where it cannot, or its
        driver fails, the CPU kernel runs.

    Returns
    -------
    states : ndarray (E, n)
    flags : ndarray (E, n), uint8
        In edge order.
    """
    if gap_model not in GAP_MODELS:
        raise OptionError(f"unknown gap model {gap_model!r} (known: likelihood, cgap)")
    if kernel and tip_states:
        tips, ops, trans = combine_schedule(tree, gap_fraction)
        rows = np.stack([tip_states[node] for node in tips])
        cgap = gap_model == "cgap"
        if device is not None:
            try:
                done = device.device_papara_profiles(
                    rows, gap_state, ops, trans, len(tree.edges), cgap
                )
            except DpalignError as exc:  # the scoring meets it again, or runs elsewhere
                log.info("edge profiles on the device: %s; on the CPU instead", exc)
                done = None
            if done is not None:
                return done
        done = engine.cpu_papara_profiles(
            rows, gap_state, ops, trans, len(tree.edges), cgap, threads
        )
        if done is not None:
            return done
    g = gap_fraction
    memo: dict[tuple[int, int], _Subtree] = {}

    def tip_value(node: int) -> _Subtree:
        states = tip_states[node]
        gap = states == gap_state
        return _Subtree(
            states, (~gap).astype(np.float64), gap.astype(np.float64), gap.astype(np.uint8), True
        )

    def combine(q: int, kids) -> _Subtree:
        (_, z1, a), (_, z2, b) = kids
        return _combine(a, z1, b, z2, g)

    def directed(parent: int, node: int) -> _Subtree:
        return tree.directed(parent, node, memo, tip_value, combine)

    n_edges = len(tree.edges)
    n_cols = len(next(iter(tip_states.values())))
    states = np.zeros((n_edges, n_cols), dtype=next(iter(tip_states.values())).dtype)
    flags = np.zeros((n_edges, n_cols), dtype=np.uint8)
    for k, edge in enumerate(tree.edges):
        at_u = directed(edge.v, edge.u)
        at_v = directed(edge.u, edge.v)
        root = _combine(at_u, edge.length, at_v, edge.length, g)
        states[k] = root.state
        if gap_model == "likelihood":
            flags[k] = root.lik0 < root.lik1
        else:
            flags[k] = root.aux == 1
    return states, flags


def load_kernel(dtype, gap_state: int) -> None:
    """Load the CPU kernel of :func:`edge_profiles` for tip states of ``dtype`` (Numba's
    cached machine code, and in a new process LLVM's set-up) by running a one-column
    schedule: called on a thread of its own at the start of a run, so that the load is not
    left until the reference is read (where a device scores, nothing else loads Numba
    before the first launch; the load's LLVM calls run without the interpreter lock)."""
    tips = np.full((2, 1), gap_state, dtype=dtype)
    ops = np.array([[-1, 0, 1, 1]], dtype=np.int64)
    trans = np.ones((1, 8), dtype=np.float64)
    engine.cpu_papara_profiles(tips, gap_state, ops, trans, 1, False, 1)


def dataset_profiles(
    data, gap_model: str = "likelihood", threads: int | None = None, device=None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`edge_profiles` of a loaded :class:`dpalign.papara.dataset.PaparaData` (its tips'
    reference rows, its alphabet's gap state and gap fraction)."""
    tips = {node: data.ref_states[row] for node, row in data.tip_rows.items()}
    return edge_profiles(
        data.tree,
        tips,
        data.alphabet.gap,
        data.gap_fraction,
        gap_model,
        threads=threads,
        device=device,
    )
