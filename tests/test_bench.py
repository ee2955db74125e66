"""`dpalign bench`: the table, --json, --plot, the errors it gives before any benchmarking, and
the peers' scores (parasail, pyopal, Biopython, scikit-bio) against dpalign's on tiny inputs.

Tiny workloads throughout (``--scale 0.001``, a two-length seed table), so the file runs in
seconds once Numba has compiled the kernels.
"""

from __future__ import annotations

import json
import logging
import re
import sys

import numpy as np
import pytest

import dpalign
from dpalign import reference
from dpalign.benchmarks import peers, plot, suites, workloads
from dpalign.cli import main
from dpalign.scoring import Scoring

COLUMNS = ["kernel", "backend", "shape", "cells", "seconds", "GCUPS", "dpalign is", "scores"]
NUMBER = re.compile(r"^\d+(\.\d+)?(e[+-]\d+)?$")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _rows(out: str) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """Split the bench output into header, rows (cells sliced at the header's columns), and
    the lines after the table."""
    lines = out.rstrip("\n").split("\n")
    header, rule = lines[0], lines[1]
    assert set(rule) <= {"-", " "}
    starts = [m.start() for m in re.finditer(r"-+", rule)]
    names = [header[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
    end = lines.index("", 2)
    rows = []
    for line in lines[2:end]:
        cells = [line[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return names, rows, lines[end + 1 :]


def _check_numbers(row: dict[str, str]) -> None:
    for key in ("cells", "seconds", "GCUPS"):
        assert NUMBER.match(row[key]), (key, row)
    assert float(row["seconds"]) > 0
    assert float(row["GCUPS"]) == pytest.approx(
        float(row["cells"]) / float(row["seconds"]) / 1e9, rel=0.02, abs=0.01
    )


@pytest.fixture
def no_benchmarking(monkeypatch):
    """Fail the test if the bench gets as far as running a case."""

    def refuse(*args, **kwargs):
        raise AssertionError("benchmarking started before the options were checked")

    monkeypatch.setattr(suites, "run_suite", refuse)


@pytest.fixture
def tiny_seed_tables(monkeypatch):
    """--suite seed-tables --scale 0.004: Table 1 with 5 reads x 320 profiles of 200 and
    400 columns, Table 2 with 4 and 8 reads against 5,000 columns."""
    monkeypatch.setattr(workloads, "SEED_TABLE1_LENGTHS", [200, 400])
    monkeypatch.setattr(workloads, "SEED_TABLE2_READS", [1_000, 2_000])
    return ["--suite", "seed-tables", "--scale", "0.004", "--backend", "numba"]


# --------------------------------------------------------------------------------------------
# the table and --json
# --------------------------------------------------------------------------------------------


def test_search_table_rows_cells_and_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "--suite", "search", "--scale", "0.001", "--backend", "numba"]
    code, out, err = _run([*argv, "--json", str(path)], capsys)
    assert code == 0, err
    names, rows, after = _rows(out)
    assert names[: len(COLUMNS)] == COLUMNS and names[len(COLUMNS) :] == ["note"]
    installed = [p for p in peers.PAIRWISE_PEERS if peers.available(p)]
    assert [(r["kernel"], r["backend"]) for r in rows] == [
        (kernel, engine) for kernel in ("search", "dna") for engine in ("numba", *installed)
    ]
    for row in rows:
        _check_numbers(row)
    # cells: the workloads' own counts (a slow peer's note says which targets it ran)
    protein = [s for _, s in workloads.protein_database(50)]
    reads, targets = workloads.dna_reads_and_targets(10, 10)
    query = len(workloads.protein_query())
    jobs = {
        "search": ([query], list(map(len, protein))),
        "dna": (list(map(len, reads)), list(map(len, targets))),
    }
    for row in rows:
        q, t = jobs[row["kernel"]]
        first = re.match(r"first (\d+) targets? \(a slow peer\)", row["note"])
        t = t[: int(first.group(1))] if first else t
        assert int(float(row["cells"])) == pytest.approx(sum(q) * sum(t), rel=0.005)
        if row["backend"] == "numba":
            assert first is None and row["dpalign is"] == "" and row["scores"] == ""
        else:
            assert row["scores"] == "equal"
            assert re.fullmatch(r"\d+\.\dx (faster|slower)", row["dpalign is"]), row
    checks = len(rows) - 2
    assert after == [f"{len(rows)} cases; scores equal to dpalign's in all {checks} checks"]
    assert "dpalign bench --suite search" in err and "backends numba" in err

    data = json.loads(path.read_text())
    assert data["suite"] == "search" and data["backends"] == ["numba"]
    assert data["scale"] == 0.001 and data["repeat"] == 1 and data["scores_equal"] is True
    assert data["peers"] == installed
    assert isinstance(data["cpu"]["cores"], int) and isinstance(data["cpu"]["name"], str)
    types = {
        "suite": str,
        "kernel": str,
        "engine": str,
        "shape": str,
        "cells": int,
        "seconds": float,
        "gcups": float,
        "threads": int,
        "params": dict,
        "note": str,
    }
    assert len(data["results"]) == len(rows)
    for result, row in zip(data["results"], rows, strict=True):
        assert set(result) == {*types, "scores_equal"}
        for key, kind in types.items():
            assert isinstance(result[key], kind), (key, result)
        assert result["scores_equal"] in (None, True)
        assert (result["kernel"], result["engine"], result["shape"]) == (
            row["kernel"],
            row["backend"],
            row["shape"],
        )
        assert f"{result['cells']:.2e}" == row["cells"]
        assert float(row["seconds"]) == pytest.approx(result["seconds"], rel=0.006)
        assert f"{result['gcups']:.2f}" == row["GCUPS"]
        assert result["gcups"] == pytest.approx(result["cells"] / result["seconds"] / 1e9)
        assert result["scores_equal"] is (None if row["backend"] == "numba" else True)


def test_no_peers_gives_dpalign_rows_only(capsys):
    argv = ["bench", "--suite", "search", "--scale", "0.001", "--backend", "numba", "--no-peers"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    _, rows, after = _rows(out)
    assert [(r["kernel"], r["backend"]) for r in rows] == [("search", "numba"), ("dna", "numba")]
    assert after == ["2 cases; no scores compared (no peer installed, or --no-peers)"]
    assert "peers off" in err


def test_seed_tables_table_json_and_plot(tiny_seed_tables, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    json_path, png = tmp_path / "b.json", tmp_path / "b.png"
    argv = ["bench", *tiny_seed_tables, "--json", str(json_path), "--plot", str(png)]
    papara_log = logging.getLogger("dpalign.papara")
    level = papara_log.level
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert papara_log.level == level  # quietened for the run only
    _, rows, after = _rows(out)
    shapes = [
        "5 reads x 320 profiles x 200 columns",
        "5 reads x 320 profiles x 400 columns",
        "4 reads x 320 profiles x 5000 columns",
        "8 reads x 320 profiles x 5000 columns",
    ]
    assert [(r["kernel"], r["backend"], r["shape"]) for r in rows] == [
        ("papara", "numba", s) for s in shapes
    ]
    data = json.loads(json_path.read_text())
    for row, result in zip(rows, data["results"], strict=True):
        _check_numbers(row)
        assert row["note"].startswith("numba")
        n = int(row["shape"].split()[0])
        columns = int(row["shape"].split()[-2])
        work = workloads.papara_kernel(320, columns, n)
        assert result["cells"] == work.cells == 320 * columns * sum(map(len, work.reads))
    assert [r["params"] for r in data["results"]] == [
        {"table": 1, "ref_length": 200, "reads": 5},
        {"table": 1, "ref_length": 400, "reads": 5},
        {"table": 2, "ref_length": 5_000, "reads": 4},
        {"table": 2, "ref_length": 5_000, "reads": 8},
    ]
    assert after == ["4 cases; no scores compared (no peer installed, or --no-peers)"]
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert {p.name for p in tmp_path.iterdir()} == {"b.json", "b.png"}  # no temporary files


def test_plot_draws_one_line_per_backend_and_the_seed_figures(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    real = plt.subplots

    def spy(*args, **kwargs):
        fig, axes = real(*args, **kwargs)
        made.append(axes)
        return fig, axes

    monkeypatch.setattr(plt, "subplots", spy)
    results = [
        suites.Result("t", "papara", engine, "s", 10**9, 0.1 * k, 2, {"table": 1, "ref_length": x})
        for engine in ("numba", "opencl")
        for k, x in enumerate((500, 2_000, 5_000), 1)
    ] + [
        suites.Result("t", "papara", "numba", "s", 10**9, 0.1 * k, 2, {"table": 2, "reads": n})
        for k, n in enumerate((50, 200), 1)
    ]
    results.append(suites.Result("t", "search", "parasail", "s", 10, 1.0, 1))  # not plotted
    path = tmp_path / "p.png"
    plot.plot(results, path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    left, right = made[0]
    lines = {line.get_label(): line for line in left.get_lines()}
    assert list(lines["dpalign numba"].get_xdata()) == [500, 2_000, 5_000]
    assert list(lines["dpalign numba"].get_ydata()) == pytest.approx([10, 5, 10 / 3])
    assert "dpalign opencl" in lines
    seed = lines["seed i7-2600, 4 cores (SSE)"]
    assert list(seed.get_ydata()) == [y for _, y in workloads.SEED_I7_BY_REFERENCE_LENGTH]
    assert any("GTX 560 peak" in label for label in lines)
    right_labels = [line.get_label() for line in right.get_lines()]
    assert right_labels[0] == "dpalign numba" and "dpalign opencl" not in right_labels
    assert left.get_xscale() == "log" and left.get_ylim()[0] == 0


# --------------------------------------------------------------------------------------------
# errors before any benchmarking
# --------------------------------------------------------------------------------------------


def test_plot_without_matplotlib_fails_first(no_benchmarking, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # "import matplotlib" raises
    png = tmp_path / "b.png"
    code, out, err = _run(["bench", "--suite", "quick", "--plot", str(png)], capsys)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("dpalign: error: plotting needs matplotlib")
    assert "pip install matplotlib" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--json", "{tmp}/missing/b.json"], "does not exist"),
        (["--plot", "{tmp}/missing/b.png"], "does not exist"),
        (["--json", "{tmp}"], "is a folder"),
        (["--json", "{tmp}/same.png", "--plot", "{tmp}/same.png"], "same file"),
        (["--json", "-"], "take a file name"),
        (["--plot", "{tmp}/b.pdf"], "*.png"),
        (["--plot", "{tmp}/b.png", "--suite", "search"], "--suite search does not run"),
        (["--backend", ","], "names no backend"),
        (["--backend", "numba,nonesuch"], "not available here: nonesuch"),
    ],
)
def test_bad_outputs_and_options_fail_first(
    extra, message, no_benchmarking, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(plot, "check", lambda: None)  # matplotlib or not, the same answer
    argv = ["bench", "--suite", "quick", *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    code, out, err = _run(argv, capsys)
    assert code == 1 and out == ""
    assert err.startswith("dpalign: error: ") and err.count("\n") == 1 and message in err
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("option, value", [("--repeat", "0"), ("--threads", "0"), ("--scale", "0")])
def test_bad_numbers_are_usage_errors(option, value, no_benchmarking, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", option, value])
    assert exc.value.code == 2
    assert option in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# a peer that disagrees, or fails, is reported
# --------------------------------------------------------------------------------------------


def _fake_peers(monkeypatch, behaviour):
    """Two fake peers in place of the real ones: "parasail" runs ``behaviour(dpalign's
    scores)``, "pyopal" returns dpalign's scores."""

    def prepare(peer, job, threads=1):
        def run():
            right = dpalign.score(job.queries, job.targets, job.mode, job.sub_score, job.gap)
            return behaviour(right) if peer == "parasail" else right

        return run

    monkeypatch.setattr(peers, "available", lambda peer: peer in ("parasail", "pyopal"))
    monkeypatch.setattr(peers, "prepare", prepare)


def test_a_disagreeing_peer_is_marked_and_fails_the_run(monkeypatch, tmp_path, capsys):
    _fake_peers(monkeypatch, lambda scores: scores + np.eye(*scores.shape, dtype=scores.dtype))
    path = tmp_path / "b.json"
    argv = ["bench", "--suite", "search", "--scale", "0.001", "--backend", "numba"]
    code, out, err = _run([*argv, "--json", str(path)], capsys)
    assert code == 1
    _, rows, after = _rows(out)
    marks = {(r["kernel"], r["backend"]): (r["scores"], r["dpalign is"]) for r in rows}
    for kernel in ("search", "dna"):
        assert marks[(kernel, "parasail")] == ("DIFFER", "-")  # no speed ratio
        assert marks[(kernel, "pyopal")][0] == "equal" and "x " in marks[(kernel, "pyopal")][1]
    assert after == [
        "6 cases; scores DIFFER from dpalign's in 2 of 4 checks (search parasail, dna parasail): "
        "their speed ratios are not comparisons"
    ]
    assert "dpalign: warning: scores differ from dpalign's in search parasail" in err
    data = json.loads(path.read_text())
    assert data["scores_equal"] is False
    equal = {(r["kernel"], r["engine"]): r["scores_equal"] for r in data["results"]}
    assert equal[("dna", "parasail")] is False and equal[("dna", "pyopal")] is True


def test_a_peer_with_wrongly_shaped_scores_disagrees(monkeypatch, capsys):
    _fake_peers(monkeypatch, lambda scores: scores.ravel()[:-1])
    argv = ["bench", "--suite", "search", "--scale", "0.001", "--backend", "numba"]
    code, out, _ = _run(argv, capsys)
    assert code == 1 and "DIFFER" in out


def test_a_failing_peer_is_a_warning_not_the_end(monkeypatch, capsys):
    def boom(scores):
        raise RuntimeError("no such matrix")

    _fake_peers(monkeypatch, boom)
    argv = ["bench", "--suite", "search", "--scale", "0.001", "--backend", "numba"]
    code, out, err = _run(argv, capsys)
    assert code == 0
    _, rows, after = _rows(out)
    assert [r["backend"] for r in rows] == ["numba", "pyopal", "numba", "pyopal"]
    assert "dpalign: warning: parasail failed on search" in err and "no such matrix" in err
    assert after == ["4 cases; scores equal to dpalign's in all 2 checks"]


# --------------------------------------------------------------------------------------------
# each peer's scores equal dpalign's and the reference's, with the gaps translated
# --------------------------------------------------------------------------------------------

DNA, PROTEIN = "ACGT", "ARNDCQEGHILKMFPSTWYV"
# (letters, sub_score, gap): linear (o = 0), and affine with open != extend
SCORINGS = [
    pytest.param(DNA, (2, -3), (0, 2), id="dna-linear"),
    pytest.param(DNA, (2, -3), (5, 2), id="dna-affine"),
    pytest.param(DNA, (1, -1), (2, 1), id="dna-affine-small"),
    pytest.param(PROTEIN, "BLOSUM62", (0, 4), id="protein-linear"),
    pytest.param(PROTEIN, "BLOSUM62", (10, 1), id="protein-affine"),
]
PEERS = {"parasail": "parasail", "pyopal": "pyopal", "biopython": "Bio", "scikit-bio": "skbio"}


def _related(letters: str, seed: int) -> tuple[list[str], list[str]]:
    """Four tiny targets (18 to 24 letters) and four queries: one short and unrelated, and
    three cut from the targets with an insertion, a deletion and a substitution each between
    flanks long enough that even a local alignment takes the gap."""
    rng = np.random.default_rng(seed)
    alphabet = np.array(list(letters))
    targets = ["".join(rng.choice(alphabet, int(rng.integers(18, 25)))) for _ in range(4)]
    queries = ["".join(rng.choice(alphabet, int(rng.integers(1, 4))))]
    for k, size in enumerate((1, 2, 3)):
        piece = list(targets[k][int(rng.integers(0, 3)) :][:18])
        if k == 1:
            del piece[9 : 9 + size]
        else:
            piece[9:9] = rng.choice(alphabet, size)
        i = int(rng.integers(1, 4))
        piece[i] = str(rng.choice(alphabet))
        queries.append("".join(piece))
    return queries, targets


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
@pytest.mark.parametrize("letters, sub, gap", SCORINGS)
def test_the_inputs_catch_a_wrong_gap_translation(letters, sub, gap, mode):
    """The tiny inputs below are worth testing on: off-by-one in either gap number (the
    mistakes a convention translation makes) changes some score."""
    queries, targets = _related(letters, seed=len(letters) + gap[0] * 7 + gap[1])
    want = dpalign.score(queries, targets, mode, sub, gap)
    o, e = gap
    for wrong in {(o + 1, e), (o, e + 1), (o + e, e), (max(o - e, 0), e)} - {gap}:
        assert not np.array_equal(dpalign.score(queries, targets, mode, sub, wrong), want)


@pytest.mark.parametrize("mode", ["global", "local", "semiglobal"])
@pytest.mark.parametrize("letters, sub, gap", SCORINGS)
@pytest.mark.parametrize("peer", list(PEERS))
def test_peer_scores_equal_dpalign_and_the_reference(peer, letters, sub, gap, mode):
    pytest.importorskip(PEERS[peer])
    queries, targets = _related(letters, seed=len(letters) + gap[0] * 7 + gap[1])
    job = peers.PairwiseJob(queries, targets, mode, sub, gap)
    mine = dpalign.score(queries, targets, mode, sub, gap)
    scoring = Scoring(sub, gap)
    oracle = [
        [
            reference.pairwise_score(
                scoring.encode(q), scoring.encode(t), scoring.matrix, *gap, mode
            ).score
            for t in targets
        ]
        for q in queries
    ]
    np.testing.assert_array_equal(mine, oracle)
    got = peers.prepare(peer, job, threads=1)()
    np.testing.assert_array_equal(np.asarray(got).reshape(mine.shape), mine)


def test_peer_availability_names_the_packages():
    import importlib.util

    for peer, module in PEERS.items():
        assert peers.available(peer) == (importlib.util.find_spec(module) is not None)
    with pytest.raises(KeyError):
        peers.prepare("nonesuch", peers.PairwiseJob(["A"], ["A"], "local", (1, -1), (1, 1)))


def test_prank_like_scales_taxa_apart_from_reads():
    both = workloads.prank_like(0.01)
    reads_only = workloads.prank_like(0.02, taxa_scale=0.01)
    assert len(reads_only.reads) == round(16_040 * 0.02) > len(both.reads) == round(16_040 * 0.01)
    assert len(reads_only.msa) == len(both.msa)
    assert len(workloads.prank_like(0.02).msa) > len(both.msa)
