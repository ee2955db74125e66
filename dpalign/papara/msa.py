"""Writing aligned reads into the reference alignment (spec §7).

Each read arrives as an op string over the reference sites: ``M`` (read state on a site),
``R`` (site against a gap), ``I`` (read character inserted between sites). Insertions open
gap slots in the reference: slot k lies before site k, slot n after the last site.
"""

from __future__ import annotations

import numpy as np

from ..alphabet import StateAlphabet

_I, _M = ord("I"), ord("M")
_GAP = ord("-")


def _op_codes(ops: str) -> np.ndarray:
    return np.frombuffer(ops.encode("ascii"), dtype=np.uint8)


def _sites_before(codes: np.ndarray) -> np.ndarray:
    """For every op, the number of site ops (``M``/``R``) before it: an ``I``'s gap slot."""
    is_site = codes != _I
    return np.cumsum(is_site) - is_site


def insertion_counts(ops: str, n_sites: int) -> np.ndarray:
    """Number of inserted read characters in each gap slot 0..n of one alignment."""
    codes = _op_codes(ops)
    slots = _sites_before(codes)[codes == _I]
    return np.bincount(slots, minlength=n_sites + 1).astype(np.int64)


def _slot_starts(slot_widths: np.ndarray) -> np.ndarray:
    """Output column where gap slot k begins (site k follows it at ``+ slot_widths[k]``)."""
    return np.arange(len(slot_widths)) + np.cumsum(slot_widths) - slot_widths


def read_row(ops: str, letters: str, n_sites: int, slot_widths: np.ndarray | None) -> str:
    """Render one read's row.

    Parameters
    ----------
    ops : str
        The alignment (``M``/``R``/``I``).
    letters : str
        The read's characters (one per ``M`` or ``I``).
    slot_widths : ndarray or None
        Width of each gap slot (reference gaps allowed), or None to drop insertions.

    Inserted characters fill their slot from the left, except slot 0 which is right-justified
    (padding first), as PaPaRa 2.5 writes them.
    """
    codes = _op_codes(ops)
    chars = np.frombuffer(letters.encode("ascii"), dtype=np.uint8)
    is_ins = codes == _I
    consumes = is_ins | (codes == _M)  # ops that take the next read character
    char_of = np.cumsum(consumes) - 1
    site = _sites_before(codes)
    if slot_widths is None:
        out = np.full(n_sites, _GAP, dtype=np.uint8)
        placed = codes == _M
        out[site[placed]] = chars[char_of[placed]]
        return out.tobytes().decode("ascii")
    slot_widths = np.asarray(slot_widths, dtype=np.int64)
    starts = _slot_starts(slot_widths)
    out = np.full(n_sites + int(slot_widths.sum()), _GAP, dtype=np.uint8)
    matched = codes == _M
    out[(starts + slot_widths)[site[matched]]] = chars[char_of[matched]]
    if is_ins.any():
        index = np.arange(len(codes))
        run_start = np.maximum.accumulate(np.where(is_ins & ~np.r_[False, is_ins[:-1]], index, 0))
        rank = (index - run_start)[is_ins]  # position inside its slot
        slot = site[is_ins]
        count = np.bincount(slot, minlength=n_sites + 1)[slot]
        pad = np.where(slot == 0, slot_widths[0] - count, 0)
        out[starts[slot] + pad + rank] = chars[char_of[is_ins]]
    return out.tobytes().decode("ascii")


def reference_row(row: str, slot_widths: np.ndarray | None) -> str:
    """A reference row with ``slot_widths[k]`` gaps before site k (and after the last)."""
    if slot_widths is None:
        return row
    slot_widths = np.asarray(slot_widths, dtype=np.int64)
    raw = np.frombuffer(row.encode("ascii"), dtype=np.uint8)
    out = np.full(len(raw) + int(slot_widths.sum()), _GAP, dtype=np.uint8)
    out[(_slot_starts(slot_widths) + slot_widths)[: len(raw)]] = raw
    return out.tobytes().decode("ascii")


def extended_alignment(
    ref_names: list[str],
    ref_rows: list[str],
    ref_states: np.ndarray,
    read_names: list[str],
    read_states: list[np.ndarray],
    read_ops: list[str],
    alphabet: StateAlphabet,
    ref_gaps: bool = True,
) -> list[tuple[str, str]]:
    """All output rows: references (MSA order), then reads (FASTA reads, then non-tree rows).

    With ``ref_gaps`` (PaPaRa's default) reference rows are printed as given and gain gap
    columns for insertions; without it (``-r``) insertions are dropped and reference rows are
    printed normalised (uppercase, ``U`` as ``T``, ``N ? .`` as ``-``).
    """
    n_sites = ref_states.shape[1]
    widths = None
    if ref_gaps:
        widths = np.zeros(n_sites + 1, dtype=np.int64)
        for ops in read_ops:
            np.maximum(widths, insertion_counts(ops, n_sites), out=widths)
        refs = [reference_row(row, widths) for row in ref_rows]
    else:
        refs = [alphabet.letters(states) for states in ref_states]
    rows = list(zip(ref_names, refs, strict=True))
    for name, states, ops in zip(read_names, read_states, read_ops, strict=True):
        rows.append((name, read_row(ops, alphabet.letters(states), n_sites, widths)))
    return rows
