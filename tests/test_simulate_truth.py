"""The simulation's true alignment of every read character (issue 15's measuring stick)."""

import numpy as np
import pytest

from dpalign.benchmarks.simulate import INSERTED, simulate

IUPAC = {
    "M": "AC",
    "R": "AG",
    "W": "AT",
    "S": "CG",
    "Y": "CT",
    "K": "GT",
    "V": "ACG",
    "H": "ACT",
    "D": "AGT",
    "B": "CGT",
    "N": "ACGT",
}


def _source(data, k):
    return data.reads[k][0].split()[1]


def _check_placed(data, k, read):
    """Every placed character equals its source's residue in that column (errors aside)."""
    truth = data.truth[k]
    row = data.held_rows[_source(data, k)]
    placed = np.flatnonzero(truth != INSERTED)
    assert np.all(np.diff(truth[placed]) > 0)  # columns strictly increase along the read
    return [(read[p], row[truth[p]]) for p in placed]


def test_error_free_reads_map_onto_their_source_columns():
    data = simulate(20, 600, 40, (60, 120), error_rate=0.0, seed=5)
    n = len(data.msa[0][1])
    for k, (_, read) in enumerate(data.reads):
        assert len(data.truth[k]) == len(read)
        pairs = _check_placed(data, k, read)
        assert all(a == b or a == "N" for a, b in pairs)
        # a full-length source without window: every read residue has a column or was in a
        # column that no reference row has (then INSERTED)
        assert data.truth[k].max() < n


def test_inserted_characters_are_in_no_reference_column():
    data = simulate(20, 600, 60, (60, 120), error_rate=0.0, seed=7)
    ref = np.array([list(row) for _, row in data.msa])
    assert (ref != "-").any(axis=0).all()  # every reference column holds a residue
    n_inserted = sum(int((t == INSERTED).sum()) for t in data.truth)
    assert n_inserted > 0  # lineage-specific insertions of the held-out taxa


def test_window_reads_overhang_and_their_outside_is_inserted():
    data = simulate(
        20, 800, 80, (100, 200), error_rate=0.0, window=(0.3, 0.7), min_overlap=25, seed=2
    )
    overhanging = 0
    for k, (_, read) in enumerate(data.reads):
        truth = data.truth[k]
        assert (truth != INSERTED).sum() >= 20
        pairs = _check_placed(data, k, read)
        assert all(a == b or a == "N" for a, b in pairs)
        overhanging += bool(truth[0] == INSERTED or truth[-1] == INSERTED)
    assert overhanging > len(data.reads) // 3


def test_indel_errors_change_lengths_and_mark_insertions():
    clean = simulate(20, 600, 50, (80, 120), error_rate=0.0, seed=9)
    noisy = simulate(20, 600, 50, (80, 120), error_rate=0.0, indel_rate=0.03, seed=9)
    assert [len(r) for _, r in clean.reads] != [len(r) for _, r in noisy.reads]
    for k, (_, read) in enumerate(noisy.reads):
        assert len(noisy.truth[k]) == len(read)
        pairs = _check_placed(noisy, k, read)
        assert all(a == b or a == "N" for a, b in pairs)
    extra = sum(int((t == INSERTED).sum()) for t in noisy.truth)
    assert extra > sum(int((t == INSERTED).sum()) for t in clean.truth)


def test_ambiguity_codes_contain_the_true_base():
    data = simulate(20, 600, 50, (80, 120), error_rate=0.0, ambiguity=0.05, seed=4)
    codes = 0
    for k, (_, read) in enumerate(data.reads):
        for a, b in _check_placed(data, k, read):
            if a != b:
                assert a in IUPAC and b in IUPAC[a]
                codes += 1
    assert codes > 50


@pytest.mark.parametrize("divergence", [1.0, 3.0])
def test_protein_reads_are_residues_of_their_source(divergence):
    data = simulate(
        20, 300, 30, (40, 80), error_rate=0.0, protein=True, divergence=divergence, seed=1
    )
    for k, (_, read) in enumerate(data.reads):
        assert set(read) <= set("ARNDCQEGHILKMFPSTWYVX")
        pairs = _check_placed(data, k, read)
        assert all(a == b or a == "X" for a, b in pairs)


def test_divergence_lowers_identity_to_the_reference():
    def identity(data):
        ref = np.array([list(row) for _, row in data.msa])
        same = total = 0
        for k, (_, read) in enumerate(data.reads):
            for p in np.flatnonzero(data.truth[k] != INSERTED):
                column = ref[:, data.truth[k][p]]
                same += read[p] in column
                total += 1
        return same / total

    near = simulate(20, 600, 40, (80, 120), seed=3)
    far = simulate(20, 600, 40, (80, 120), seed=3, divergence=3.0, read_branch=0.3)
    assert identity(far) < identity(near) - 0.03


def test_truth_file_round_trips(tmp_path):
    import json

    data = simulate(20, 400, 10, (50, 60), seed=1)
    data.write_truth(tmp_path / "truth.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "truth.jsonl").read_text().splitlines()]
    assert [x["read"] for x in lines] == data.read_names
    assert all(x["columns"] == t.tolist() for x, t in zip(lines, data.truth, strict=True))
