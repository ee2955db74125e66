"""Writing aligned reads into the reference alignment (spec §7).

Each read arrives as an op string over the reference sites: ``M`` (read state on a site),
``R`` (site against a gap), ``I`` (read character inserted between sites). Insertions open
gap slots in the reference: slot k lies before site k, slot n after the last site.
"""

from __future__ import annotations

import numpy as np

from ..alphabet import StateAlphabet


def insertion_counts(ops: str, n_sites: int) -> np.ndarray:
    """Number of inserted read characters in each gap slot 0..n of one alignment."""
    counts = np.zeros(n_sites + 1, dtype=np.int64)
    site = 0
    for op in ops:
        if op == "I":
            counts[site] += 1
        else:
            site += 1
    return counts


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
    """
    out: list[str] = []
    pending: list[str] = []  # inserted characters of the current slot
    site, k = 0, 0

    def flush(slot: int) -> None:
        if slot_widths is None:
            return
        pad = "-" * (int(slot_widths[slot]) - len(pending))
        # slot 0 is right-justified (padding first), every other slot left-justified
        out.append(pad + "".join(pending) if slot == 0 else "".join(pending) + pad)

    for op in ops:
        if op == "I":
            pending.append(letters[k])
            k += 1
            continue
        flush(site)
        pending.clear()
        if op == "M":
            out.append(letters[k])
            k += 1
        else:
            out.append("-")
        site += 1
    flush(n_sites)
    return "".join(out)


def reference_row(row: str, slot_widths: np.ndarray | None) -> str:
    """A reference row with ``slot_widths[k]`` gaps before site k (and after the last)."""
    if slot_widths is None:
        return row
    parts = []
    for k, ch in enumerate(row):
        parts.append("-" * int(slot_widths[k]))
        parts.append(ch)
    parts.append("-" * int(slot_widths[len(row)]))
    return "".join(parts)


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
