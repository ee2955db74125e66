"""Writing aligned reads into the reference alignment (spec §7).

Each read arrives as an op string over the reference sites: ``M`` (read state on a site),
``R`` (site against a gap), ``I`` (read character inserted between sites). Insertions open
gap slots in the reference: slot k lies before site k, slot n after the last site.
"""

from __future__ import annotations

import numpy as np

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


# --------------------------------------------------------------------------------------------
# Many reads at once: compact op storage and batch rendering
# --------------------------------------------------------------------------------------------

_R = ord("R")


def trim_ops(ops: str) -> tuple[int, bytes]:
    """An op string as (leading ``R`` count, the ops from the first non-``R`` to the last).

    A ~100 bp read on a 3,000-site reference keeps ~130 bytes instead of 3,100, so that all
    reads' alignments fit in memory until the reference's gap columns are known.
    """
    core = ops.lstrip("R")
    lead = len(ops) - len(core)
    return lead, core.rstrip("R").encode("ascii")


def untrim_ops(lead: int, core: bytes, n_sites: int) -> str:
    """The op string that :func:`trim_ops` made ``(lead, core)`` of (``R`` pads both ends
    out to ``n_sites`` site ops), for a pass that works on whole op strings."""
    text = core.decode("ascii")
    sites = lead + len(text) - text.count("I")
    return "R" * lead + text + "R" * (n_sites - sites)


class TrimmedOps:
    """The alignments of many reads, trimmed (:func:`trim_ops`), in read order."""

    def __init__(self, n_sites: int) -> None:
        self.n_sites = n_sites
        self.leads: list[np.ndarray] = []
        self.cores: list[bytes] = []
        self.widths = np.zeros(n_sites + 1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.cores)

    def extend(self, ops: list[str]) -> None:
        """Add alignments (in read order) and raise the gap-slot widths to cover them."""
        trimmed = [trim_ops(o) for o in ops]
        leads = np.fromiter((t[0] for t in trimmed), dtype=np.int64, count=len(trimmed))
        self.extend_trimmed(leads, [t[1] for t in trimmed])

    def extend_trimmed(self, leads: np.ndarray, cores: list[bytes]) -> None:
        """:meth:`extend` with alignments already trimmed (:func:`trim_ops` of each)."""
        leads = np.asarray(leads, dtype=np.int64)
        self.leads.append(leads)
        self.cores.extend(cores)
        if not cores:
            return
        layout = _Layout(leads, cores)
        if layout.is_ins.any():
            slots = layout.site[layout.is_ins]
            run_len = layout.run_length()
            # one run of insertions per (read, slot): its length is that read's slot count
            np.maximum.at(self.widths, slots, run_len[layout.run_id[layout.is_ins]])

    def batch(self, start: int, stop: int) -> tuple[np.ndarray, list[bytes]]:
        leads = np.concatenate(self.leads) if len(self.leads) != 1 else self.leads[0]
        self.leads = [leads]
        return leads[start:stop], self.cores[start:stop]


class _Layout:
    """Per-op positions for a batch of trimmed alignments laid end to end."""

    def __init__(self, leads: np.ndarray, cores: list[bytes]) -> None:
        lens = np.fromiter(map(len, cores), dtype=np.int64, count=len(cores))
        self.codes = np.frombuffer(b"".join(cores), dtype=np.uint8)
        self.read_of = np.repeat(np.arange(len(cores)), lens)
        self.is_ins = self.codes == _I
        is_site = ~self.is_ins
        first = np.cumsum(lens) - lens  # each read's first op
        site_incl = np.cumsum(is_site)
        site_excl = site_incl - is_site
        base = np.concatenate(([0], site_incl))[first]  # sites before each read's first op
        self.site = site_excl - base[self.read_of] + leads[self.read_of]
        consumes = self.codes != _R
        self.char = np.cumsum(consumes) - 1  # index into the batch's letters, laid end to end
        index = np.arange(self.codes.size)
        new_read = np.zeros(self.codes.size, dtype=bool)
        new_read[first[lens > 0]] = True
        prev_ins = np.r_[False, self.is_ins[:-1]] & ~new_read
        self.new_run = self.is_ins & ~prev_ins
        self.run_id = np.cumsum(self.new_run) - 1
        self.rank = index - np.maximum.accumulate(np.where(self.new_run, index, 0))

    def run_length(self) -> np.ndarray:
        return np.bincount(self.run_id[self.is_ins])


def render_reads(
    leads: np.ndarray,
    cores: list[bytes],
    letters: np.ndarray,
    n_sites: int,
    slot_widths: np.ndarray | None,
) -> np.ndarray:
    """Rows of many reads at once as a (reads, columns) uint8 matrix (see :func:`read_row`).

    ``letters`` holds the reads' printed characters laid end to end (one per ``M`` or ``I``).
    """
    width = n_sites if slot_widths is None else n_sites + int(slot_widths.sum())
    out = np.full((len(cores), width), _GAP, dtype=np.uint8)
    if not cores:
        return out
    lay = _Layout(np.asarray(leads, dtype=np.int64), cores)
    matched = lay.codes == _M
    if slot_widths is None:
        out[lay.read_of[matched], lay.site[matched]] = letters[lay.char[matched]]
        return out
    slot_widths = np.asarray(slot_widths, dtype=np.int64)
    starts = _slot_starts(slot_widths)
    out[lay.read_of[matched], (starts + slot_widths)[lay.site[matched]]] = letters[
        lay.char[matched]
    ]
    ins = lay.is_ins
    if ins.any():
        slot = lay.site[ins]
        count = lay.run_length()[lay.run_id[ins]]
        pad = np.where(slot == 0, slot_widths[0] - count, 0)
        out[lay.read_of[ins], starts[slot] + pad + lay.rank[ins]] = letters[lay.char[ins]]
    return out
