"""Writing reads into the MSA: the NumPy rendering equals a plain character-by-character one."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dpalign.papara import msa


def _plain_counts(ops: str, n_sites: int) -> list[int]:
    counts, site = [0] * (n_sites + 1), 0
    for op in ops:
        if op == "I":
            counts[site] += 1
        else:
            site += 1
    return counts


def _plain_read_row(ops: str, letters: str, n_sites: int, widths) -> str:
    """Spec §7 written out: slot k's insertions then padding (slot 0: padding first)."""
    out, pending, site, k = [], [], 0, 0

    def flush(slot):
        if widths is not None:
            pad = "-" * (int(widths[slot]) - len(pending))
            out.append(pad + "".join(pending) if slot == 0 else "".join(pending) + pad)

    for op in ops:
        if op == "I":
            pending.append(letters[k])
            k += 1
            continue
        flush(site)
        pending.clear()
        out.append(letters[k] if op == "M" else "-")
        k += op == "M"
        site += 1
    flush(n_sites)
    return "".join(out)


@st.composite
def alignment(draw, n=None):
    n = draw(st.integers(0, 12)) if n is None else n
    matched = draw(st.integers(0, n))
    ops = ["M"] * matched + ["R"] * (n - matched) + ["I"] * draw(st.integers(0, 8))
    ops = "".join(draw(st.permutations(ops)))
    letters = draw(st.text("ACGTRY", min_size=len(ops) - n + matched, max_size=len(ops)))
    letters = letters[: len(ops) - n + matched]
    extra = draw(st.lists(st.integers(0, 3), min_size=n + 1, max_size=n + 1))
    return ops, letters, n, np.maximum(_plain_counts(ops, n), extra)


@given(case=alignment())
def test_rows_equal_the_plain_rendering(case):
    ops, letters, n, widths = case
    assert msa.insertion_counts(ops, n).tolist() == _plain_counts(ops, n)
    assert msa.read_row(ops, letters, n, widths) == _plain_read_row(ops, letters, n, widths)
    assert msa.read_row(ops, letters, n, None) == _plain_read_row(ops, letters, n, None)
    row = "".join("ACGT-"[k % 5] for k in range(n))
    plain = "".join("-" * int(widths[k]) + row[k] for k in range(n)) + "-" * int(widths[n])
    assert msa.reference_row(row, widths) == plain


def test_rows_by_hand():
    # slot 0 right-justified, other slots left-justified
    assert msa.read_row("IMRIM", "ACGT", 3, np.array([2, 0, 2, 1])) == "-AC-G-T-"
    assert msa.read_row("IMRIM", "ACGT", 3, None) == "C-T"
    assert msa.reference_row("xyz", np.array([2, 0, 2, 1])) == "--xy--z-"


@given(
    cases=st.integers(0, 12).flatmap(lambda n: st.lists(alignment(n), min_size=1, max_size=6)),
    ref_gaps=st.booleans(),
)
def test_batch_rendering_equals_one_row_at_a_time(cases, ref_gaps):
    n = cases[0][2]
    ops = msa.TrimmedOps(n)
    ops.extend([c[0] for c in cases[:2]])  # two batches, as the pipeline adds them
    ops.extend([c[0] for c in cases[2:]])
    want_widths = np.max([msa.insertion_counts(c[0], n) for c in cases], axis=0)
    assert ops.widths.tolist() == want_widths.tolist()
    widths = np.maximum(want_widths, cases[0][3]) if ref_gaps else None
    leads, cores = ops.batch(0, len(cases))
    letters = np.frombuffer("".join(c[1] for c in cases).encode(), dtype=np.uint8)
    block = msa.render_reads(leads, cores, letters, n, widths)
    got = [row.tobytes().decode() for row in block]
    assert got == [msa.read_row(c[0], c[1], n, widths) for c in cases]


def test_trimmed_ops_by_hand():
    assert msa.trim_ops("RRMIRMRR") == (2, b"MIRM")
    assert msa.trim_ops("RRR") == (3, b"")
    assert msa.trim_ops("IM") == (0, b"IM")


def test_untrimmed_ops_are_the_original():
    for ops in ("RRMIRMRR", "RRR", "IM", "MIIRM", "IRRI", "R", "I"):
        n_sites = len(ops) - ops.count("I")
        lead, core = msa.trim_ops(ops)
        assert msa.untrim_ops(lead, core, n_sites) == ops
