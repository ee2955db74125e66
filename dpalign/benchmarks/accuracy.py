"""Placement accuracy against a simulation's truth (issue 15): recall, precision, perfect reads.

Every read character is scored in *reference columns*: its true place is a reference column or
"inserted" (:data:`~dpalign.benchmarks.simulate.INSERTED`), and a tool puts it into a reference
column or not (an insertion column, or dropped from the output). Then

* recall = characters put in their true column / characters whose true place is a column;
* precision = characters put in their true column / characters put in any column;
* perfect = share of reads with every character right (inserted where inserted).

The readers below turn each tool's output into one predicted column per read character.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .simulate import INSERTED

# Letters a tool may print for a read character: itself, uppercase (below), U as T.
_SAME = str.maketrans("U", "T")


@dataclass(frozen=True)
class Accuracy:
    """Counts behind recall, precision and perfect (see the module's text)."""

    correct: int
    true_in_columns: int
    put_in_columns: int
    perfect_reads: int
    reads: int

    @property
    def recall(self) -> float:
        return self.correct / self.true_in_columns if self.true_in_columns else 1.0

    @property
    def precision(self) -> float:
        return self.correct / self.put_in_columns if self.put_in_columns else 1.0

    @property
    def perfect(self) -> float:
        return self.perfect_reads / self.reads if self.reads else 1.0

    def as_dict(self) -> dict:
        return {
            "recall": self.recall,
            "precision": self.precision,
            "perfect": self.perfect,
            "correct": self.correct,
            "true_in_columns": self.true_in_columns,
            "put_in_columns": self.put_in_columns,
            "perfect_reads": self.perfect_reads,
            "reads": self.reads,
        }


def score(predicted: list[np.ndarray], truth: list[np.ndarray]) -> Accuracy:
    """Compare predicted columns (one array per read, INSERTED where none) with the truth."""
    correct = true_in = put_in = perfect = 0
    for pred, true in zip(predicted, truth, strict=True):
        pred, true = np.asarray(pred), np.asarray(true)
        if pred.shape != true.shape:
            raise ValueError(f"a read has {pred.size} predicted columns but {true.size} true ones")
        right = pred == true
        placed = true != INSERTED
        correct += int((right & placed).sum())
        true_in += int(placed.sum())
        put_in += int((pred != INSERTED).sum())
        perfect += bool(right.all())
    return Accuracy(correct, true_in, put_in, perfect, len(truth))


def _match_read(row_chars: list[tuple[int, str]], read: str, name: str) -> np.ndarray:
    """Predicted columns of a read from (column or INSERTED, letter) of its printed characters.

    The printed characters are matched to the read from left to right; characters a tool left
    out (PaPaRa drops ``N``) get INSERTED.
    """
    pred = np.full(len(read), INSERTED, dtype=np.int64)
    text = read.upper().translate(_SAME)
    p = 0
    for column, letter in row_chars:
        letter = letter.upper().translate(_SAME)
        while p < len(text) and text[p] != letter:
            p += 1
        if p == len(text):
            raise ValueError(f"read {name!r}: printed letter {letter!r} is not in the read")
        pred[p] = column
        p += 1
    return pred


def columns_from_alignment(
    rows: list[tuple[str, str]], ref_names: list[str], reads: dict[str, str]
) -> dict[str, np.ndarray]:
    """Predicted columns from an extended alignment that keeps the reference's columns
    (PaPaRa's output, FASTA or PHYLIP rows): a reference column is an output column where a
    reference row has a residue, every other column holds insertions."""
    ref_set = set(ref_names)
    ref = np.array([list(row) for name, row in rows if name in ref_set])
    is_ref = (ref != "-").any(axis=0)
    column_of = np.where(is_ref, np.cumsum(is_ref) - 1, INSERTED)
    out = {}
    for name, row in rows:
        if name not in reads:
            continue
        chars = [(int(column_of[c]), ch) for c, ch in enumerate(row) if ch not in "-."]
        out[name] = _match_read(chars, reads[name], name)
    return out


def columns_from_stockholm(text: str, reads: dict[str, str]) -> dict[str, np.ndarray]:
    """Predicted columns from ``hmmalign`` Stockholm output of an HMM built with ``--hand``
    from the reference (one match state per reference column): residues in match columns
    (``#=GC RF`` not ``.``) take that column, residues in insert columns are INSERTED."""
    seqs: dict[str, list[str]] = {}
    rf: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("# STOCKHOLM") or line.startswith("//"):
            continue
        if line.startswith("#=GC RF"):
            rf.append(line.split()[-1])
        elif not line.startswith("#"):
            name, part = line.split()
            seqs.setdefault(name, []).append(part)
    match = np.array([c not in ".-~" for c in "".join(rf)])
    column_of = np.where(match, np.cumsum(match) - 1, INSERTED)
    out = {}
    for name, parts in seqs.items():
        if name not in reads:
            continue
        row = "".join(parts)
        chars = [(int(column_of[c]), ch) for c, ch in enumerate(row) if ch not in "-.~"]
        out[name] = _match_read(chars, reads[name], name)
    return out


def columns_from_mafft_map(text: str, reads: dict[str, str]) -> dict[str, np.ndarray]:
    """Predicted columns from MAFFT's ``--mapout`` file (``--addfragments --keeplength``):
    per residue ``letter, position in the read, position in the alignment or -`` (1-based;
    ``-`` = deleted to keep the length, an insertion)."""
    out: dict[str, np.ndarray] = {}
    name = None
    pred: list[int] = []
    for line in text.splitlines():
        if line.startswith(">"):
            if name is not None:
                out[name] = np.array(pred, dtype=np.int64)
            name = line[1:].split()[0]
            pred = []
        elif line.strip() and not line.startswith("#"):
            _letter, _pos, col = (x.strip() for x in line.split(","))
            pred.append(INSERTED if col == "-" else int(col) - 1)
    if name is not None:
        out[name] = np.array(pred, dtype=np.int64)
    for name, pred_ in out.items():
        if name in reads and len(pred_) != len(reads[name]):
            raise ValueError(f"MAFFT map of {name!r} has {len(pred_)} residues, the read more")
    return {k: v for k, v in out.items() if k in reads}
