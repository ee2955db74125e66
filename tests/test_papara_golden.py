"""Byte-identical output against the original PaPaRa 2.5 on every golden case.

Reads the full set from ../shared/golden/papara when it exists, else the copy in tests/data.
"""

from __future__ import annotations

import pytest
from conftest import golden_cases

from dpalign import backends
from dpalign.cli import main
from dpalign.papara import papara

# (expected file, keyword arguments, output format)
MODES = [
    ("default.phy", {}, "phylip"),
    ("cgap.phy", {"gap_model": "cgap"}, "phylip"),
    ("noref.phy", {"ref_gaps": False}, "phylip"),
    ("fasta.fasta", {}, "fasta"),
]
SMALL = ("tiny", "small", "protein")


def _cases(backend):
    for case in golden_cases():
        if backend == "reference" and not case.name.startswith(("tiny", "small", "protein")):
            continue
        for expected, kwargs, fmt in MODES:
            if (case / expected).exists():
                slow = backend == "reference" and not case.name.startswith("tiny")
                slow = slow or case.name.startswith(("medium", "bench"))
                marks = [pytest.mark.slow] if slow else []
                yield pytest.param(
                    case, expected, kwargs, fmt, marks=marks, id=f"{case.name}-{expected}"
                )


def _backend_or_skip(name):
    if name not in backends():
        pytest.skip(f"backend {name} not available")
    return name


@pytest.mark.parametrize(("case", "expected", "kwargs", "fmt"), list(_cases("reference")))
def test_reference_backend_api(case, expected, kwargs, fmt):
    result = papara(
        case / "tree.nwk",
        case / "ref.phy",
        case / "queries.fa",
        protein=(case / "PROTEIN").exists(),
        backend="reference",
        **kwargs,
    )
    text = result.to_phylip() if fmt == "phylip" else result.to_fasta()
    assert text == (case / expected).read_text()


@pytest.mark.parametrize(("case", "expected", "kwargs", "fmt"), list(_cases("numba")))
def test_numba_backend_cli(case, expected, kwargs, fmt, capsys):
    backend = _backend_or_skip("numba")
    argv = [
        "papara",
        "--ref",
        str(case / "tree.nwk"),
        "--msa",
        str(case / "ref.phy"),
        "--reads",
        str(case / "queries.fa"),
        "--format",
        fmt,
        "--backend",
        backend,
    ]
    if kwargs.get("gap_model"):
        argv += ["--gap-model", kwargs["gap_model"]]
    if kwargs.get("ref_gaps") is False:
        argv.append("--no-ref-gaps")
    if (case / "PROTEIN").exists():
        argv.append("--protein")
    assert main(argv) == 0
    assert capsys.readouterr().out == (case / expected).read_text()


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in golden_cases()
        if (c / "scores_default.binary.tsv").exists() and c.name.startswith("tiny")
    ],
    ids=lambda c: c.name,
)
def test_placements_match_the_original_scores(case, tmp_path):
    result = papara(case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend="reference")
    want = {}
    for line in (case / "scores_default.binary.tsv").read_text().splitlines()[1:]:
        read, edge, score = line.split("\t")
        want[read] = (int(edge), int(score))
    got = {p.read: (p.edge, p.score) for p in result.placements}
    assert got == want
