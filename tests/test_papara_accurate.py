"""The accurate mode (issue 15): identical on every backend, ambiguity kept, overhangs inserted."""

import numpy as np
import pytest

import dpalign
from dpalign.benchmarks.accuracy import columns_from_alignment, score
from dpalign.benchmarks.simulate import simulate
from dpalign.engine import get_backend


def _case(protein=False, seed=3):
    return simulate(
        8, 160, 12, (30, 70), held_out=3, seed=seed, window=(0.2, 0.8), min_overlap=12,
        ambiguity=0.05, indel_rate=0.02, protein=protein,
    )  # fmt: skip


def _run(data, backend, protein=False, **options):
    reads = [(name, seq) for name, (_, seq) in zip(data.read_names, data.reads, strict=True)]
    return dpalign.papara(
        data.newick, data.msa, reads, protein=protein, backend=backend, accurate=True, **options
    )


def _same(a, b):
    assert a.rows == b.rows
    assert a.placements == b.placements


@pytest.mark.parametrize("protein", [False, True], ids=["dna", "protein"])
def test_numba_equals_the_reference(protein):
    data = _case(protein)
    _same(_run(data, "numba", protein), _run(data, "reference", protein))


@pytest.mark.parametrize("protein", [False, True], ids=["dna", "protein"])
def test_opencl_equals_the_reference(cl_device, protein):
    data = _case(protein, seed=4)
    _same(
        _run(data, get_backend("opencl", device=cl_device), protein), _run(data, "numba", protein)
    )


def test_ambiguity_codes_are_kept_and_printed():
    msa = [("a", "ACGTACGTAC"), ("b", "ACGTTCGTAC"), ("c", "ACCTACGGAC"), ("d", "TCGTACGTAA")]
    tree = "((a:0.1,b:0.1):0.1,c:0.1,d:0.1);"
    reads = [("r1", "ACGTNCGTAC"), ("r2", "ACRTACGUAC")]
    accurate = dpalign.papara(tree, msa, reads, backend="reference", accurate=True)
    rows = dict(accurate.rows)
    assert rows["r1"] == "ACGTNCGTAC" and rows["r2"] == "ACRTACGTAC"
    default = dict(dpalign.papara(tree, msa, reads, backend="reference").rows)
    assert "N" not in default["r1"]  # PaPaRa drops N
    assert accurate.settings["accurate"] and accurate.settings["scoring"].count(":") == 4


def test_unrelated_read_ends_become_insertions():
    """A read whose second half lies beyond the reference: the accurate mode inserts that half
    instead of scattering it over the reference's columns as PaPaRa does."""
    data = simulate(
        12, 600, 40, (150, 200), error_rate=0.0, window=(0.3, 0.7), min_overlap=30, seed=8
    )
    reads = {name: seq for name, (_, seq) in zip(data.read_names, data.reads, strict=True)}
    got = {}
    for accurate in (False, True):
        result = dpalign.papara(
            data.newick, data.msa, list(reads.items()), backend="numba", accurate=accurate
        )
        pred = columns_from_alignment(result.rows, [n for n, _ in data.msa], reads)
        got[accurate] = score([pred[n] for n in data.read_names], data.truth)
    assert got[True].precision > 0.97
    assert got[True].precision > got[False].precision + 0.05
    assert got[True].recall > got[False].recall


def test_default_mode_is_unchanged_by_the_new_options():
    """accurate=False is PaPaRa 2.5: N dropped, mismatch 0 (the golden tests check bytes)."""
    data = _case()
    reads = [(name, seq) for name, (_, seq) in zip(data.read_names, data.reads, strict=True)]
    result = dpalign.papara(data.newick, data.msa, reads, backend="numba")
    assert result.settings["scoring"] == "-3:-1:2:-3" and not result.settings["accurate"]
    assert all("N" not in row for name, row in result.rows if name.startswith("read"))
    assert np.all([p.ties >= 1 for p in result.placements if p.edge >= 0])
