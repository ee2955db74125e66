"""The PaPaRa pipeline in batches: the same bytes as one batch, phases reported, files whole."""

from __future__ import annotations

import json

import pytest
from conftest import golden_cases
from hypothesis import given
from hypothesis import strategies as st

from dpalign import config
from dpalign.cli import main
from dpalign.io import RowWriter, format_fasta, format_phylip
from dpalign.papara import papara

_CASES = {c.name: c for c in golden_cases()}


@pytest.mark.parametrize("name", ["small_11_messy_ref", "medium_01", "tiny_02"])
@pytest.mark.parametrize(
    ("expected", "kwargs", "fmt"),
    [
        ("default.phy", {}, "phylip"),
        ("noref.phy", {"ref_gaps": False}, "phylip"),
        ("fasta.fasta", {}, "fasta"),
    ],
)
def test_small_batches_give_the_original_bytes(monkeypatch, name, expected, kwargs, fmt):
    case = _CASES.get(name)
    if case is None or not (case / expected).exists():
        pytest.skip(f"{name}/{expected} not in the golden set")
    edges = 2 * len((case / "tree.nwk").read_text().split(",")) - 2
    monkeypatch.setattr(config, "PAPARA_BATCH_BYTES", 9 * edges * 3)  # 3 reads a batch
    monkeypatch.setattr(config, "PAPARA_WRITE_READS", 2)
    result = papara(
        case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend="numba", **kwargs
    )
    text = result.to_phylip() if fmt == "phylip" else result.to_fasta()
    assert text == (case / expected).read_text()
    assert (format_phylip if fmt == "phylip" else format_fasta)(result.rows) == text


@pytest.mark.parametrize("fmt", ["phylip", "fasta"])
def test_blocks_rendered_on_threads_give_the_bytes_of_one_thread(monkeypatch, fmt):
    import io

    case = _CASES["small_11_messy_ref"]
    monkeypatch.setattr(config, "PAPARA_WRITE_READS", 1)  # a block per read: many in flight
    result = papara(case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend="numba")
    texts = []
    for threads in (1, 3):
        buffer = io.BytesIO()
        result.write(buffer, fmt, threads=threads)
        texts.append(buffer.getvalue().decode("ascii"))
    assert texts[0] == texts[1] == (result.to_phylip() if fmt == "phylip" else result.to_fasta())
    assert fmt == "fasta" or texts[0] == (case / "default.phy").read_text()


def _argv(case, tmp_path, *extra):
    return [
        "papara",
        "--ref",
        str(case / "tree.nwk"),
        "--msa",
        str(case / "ref.phy"),
        "--reads",
        str(case / "queries.fa"),
        "--backend",
        "numba",
        "--out",
        str(tmp_path / "out.phy"),
        *extra,
    ]


def test_phases_in_the_summary_and_the_report(tmp_path, capsys):
    case = _CASES["tiny_01"]
    report = tmp_path / "run.json"
    assert main(_argv(case, tmp_path, "--report", str(report), "-v")) == 0
    err = capsys.readouterr().err
    summary = err.strip().splitlines()[-1]
    phases = ("read", "tree and profiles", "scoring", "traceback", "write")
    assert "phases: " + ", ".join(f"{p} " for p in phases) not in summary  # times in between
    for label in phases:
        assert f"{label} " in summary.split("phases: ")[1]
        assert f"dpalign: info: {label}: " in err  # -v: each phase as it ends
    data = json.loads(report.read_text())
    assert list(data["phases"]) == ["read", "tree_profiles", "scoring", "traceback", "write"]
    assert all(p["seconds"] >= 0 for p in data["phases"].values())
    assert data["phase_names"]["tree_profiles"] == "tree and profiles"
    assert (tmp_path / "out.phy").read_text() == (case / "default.phy").read_text()


def test_the_report_has_the_run_timeline(tmp_path):
    """--report's timeline: every phase, batch and warm-up step with its start and end,
    seconds since the process started, in time order."""
    case = _CASES["tiny_01"]
    report = tmp_path / "run.json"
    assert main(_argv(case, tmp_path, "--report", str(report))) == 0
    timeline = json.loads(report.read_text())["timeline"]
    names = [e["event"] for e in timeline]
    for expected in (
        "papara() called",
        "backend found",
        "reads file read (beside the reference and profiles)",
        "read: the tree and the reference",
        "tree and profiles",
        "scoring reads 0:3",
        "best edges of reads 0:3",
        "traceback reads 0:3",
        "write",
    ):
        assert expected in names
    starts = [e["start_s"] for e in timeline]
    assert starts == sorted(starts) and starts[0] >= 0
    assert all(e["end_s"] >= e["start_s"] for e in timeline if "end_s" in e)
    at = {e["event"]: e for e in timeline}
    assert at["tree and profiles"]["start_s"] >= at["read: the tree and the reference"]["end_s"]
    assert at["traceback reads 0:3"]["start_s"] >= at["scoring reads 0:3"]["end_s"]


def test_a_failure_while_streaming_leaves_no_file(tmp_path, monkeypatch):
    case = _CASES["tiny_01"]
    real = RowWriter.write_encoded  # every block goes out through it
    calls = []

    def failing(self, encoded):
        calls.append(len(encoded))
        if len(calls) == 2:  # after the reference rows went out
            raise OSError(28, "No space left on device")
        real(self, encoded)

    monkeypatch.setattr(RowWriter, "write_encoded", failing)
    out = tmp_path / "out.phy"
    out.write_text("old content\n")
    with pytest.raises(OSError):
        main(_argv(case, tmp_path, "--placements", str(tmp_path / "p.tsv")))
    assert out.read_text() == "old content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.phy"]


def test_batches_capped_by_reads_give_the_original_bytes(monkeypatch):
    case = _CASES["small_11_messy_ref"]
    monkeypatch.setattr(config, "PAPARA_BATCH_READS", 2)
    result = papara(case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend="numba")
    assert result.to_phylip() == (case / "default.phy").read_text()


@pytest.mark.parametrize("name", ["small_11_messy_ref", "small_01_trifurc"])
def test_traceback_beside_device_scoring_gives_the_original_bytes(monkeypatch, cl_device, name):
    """A device backend scores batch k + 1 while the cores trace batch k back."""
    from dpalign.engine import get_backend
    from dpalign.papara import _batches

    case = _CASES[name]
    monkeypatch.setattr(config, "PAPARA_OVERLAP_MIN_READS", 1)
    monkeypatch.setattr(config, "PAPARA_OVERLAP_BATCHES", 3)
    n_reads = sum(1 for line in open(case / "queries.fa") if line.startswith(">"))
    assert len(_batches(n_reads, 10, overlap=True)) >= min(3, n_reads) > 1
    backend = get_backend("opencl", device=cl_device)
    result = papara(case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend=backend)
    assert result.to_phylip() == (case / "default.phy").read_text()
    assert set(result.stats.phases) >= {"scoring", "traceback"}


def test_batches_cover_the_reads_once():
    from dpalign.papara import _batches

    for n_reads in (0, 1, 5, 4096, 10_000, 100_003):
        for edges in (3, 1601):
            for overlap in (False, True):
                got = _batches(n_reads, edges, overlap)
                assert got[0][0] == 0 and got[-1][1] == n_reads
                assert all(a[1] == b[0] for a, b in zip(got, got[1:], strict=False))
                assert all(stop - start <= config.PAPARA_BATCH_READS for start, stop in got)
    assert len(_batches(16_040, 1601, overlap=False)) == 1


def test_pipelined_batches_come_in_order_with_at_most_two_batches_of_scores():
    """The scoring thread runs ahead of a slow caller, but starts a batch only once the
    fold of the batch two before it is done; an error in the scoring reaches the caller
    after the batches before it."""
    import threading
    import time
    import weakref

    from dpalign.papara import _pipelined

    alive, peak, lock = [0], [0], threading.Lock()

    class Scores:
        pass

    def let_go():
        with lock:
            alive[0] -= 1

    def score(start, stop):
        if start == 4:
            raise RuntimeError("device lost")
        scores = Scores()
        with lock:
            alive[0] += 1
            peak[0] = max(peak[0], alive[0])
        weakref.finalize(scores, let_go)
        return scores

    def fold(start, stop, scores):
        time.sleep(0.01)
        return (start, stop)

    batches = [(k, k + 1) for k in range(6)]
    got = []
    with pytest.raises(RuntimeError, match="device lost"):
        for start, stop, placed in _pipelined(batches, score, fold):
            time.sleep(0.03)  # a slow caller (its traceback)
            assert placed == (start, stop)
            got.append(placed)
    assert got == batches[:4] and peak[0] <= 2
    got = [placed for *_, placed in _pipelined(batches[:3], lambda a, b: (a, b), fold)]
    assert got == batches[:3]


def test_overlapped_batches_taper(monkeypatch):
    """Where the traceback hides behind the device, each batch is half the reads left, so the
    last batch (whose traceback nothing hides) is between the least batch and twice that."""
    from dpalign.papara import _batches

    least = config.PAPARA_OVERLAP_MIN_READS
    assert [b - a for a, b in _batches(16_040, 1601, overlap=True)] == [8020, 4010, 4010]
    for n_reads in (2 * least, 2 * least + 1, 16_040, 32_080, 100_003, 1_000_000):
        got = [b - a for a, b in _batches(n_reads, 1601, overlap=True)]
        assert sum(got) == n_reads and len(got) >= 2
        assert all(least <= size for size in got)
        assert got[-1] < 2 * least
        assert all(a >= b for a, b in zip(got, got[1:], strict=False))  # never growing
    monkeypatch.setattr(config, "PAPARA_TAPER", False)  # the equal halves of before
    assert [b - a for a, b in _batches(16_040, 1601, overlap=True)] == [8020, 8020]


@given(
    seqs=st.lists(st.text("ACGTUacgtNRY-.?*X1 é", max_size=12), max_size=8),
    protein=st.booleans(),
    keep=st.booleans(),
)
def test_reads_encoded_at_once_equal_one_at_a_time(seqs, protein, keep):
    import numpy as np

    from dpalign.alphabet import DNA, PROTEIN
    from dpalign.errors import InputError

    alphabet = PROTEIN if protein else DNA
    states, lost = alphabet.encode_reads(seqs, keep_ambiguous=keep)
    assert len(states) == len(lost) == len(seqs)
    for seq, got, got_lost in zip(seqs, states, lost.tolist(), strict=True):
        try:
            want, want_lost = alphabet.encode_read(seq, keep_ambiguous=keep)
        except (InputError, UnicodeEncodeError):  # left to the one-read encoder, which names it
            assert got is None
            continue
        if got is None:  # only text that is not ASCII sends a good read to the one-read encoder
            assert not all(s.isascii() for s in seqs)
            continue
        assert got.dtype == want.dtype and np.array_equal(got, want) and got_lost == want_lost


def test_the_warm_up_leaves_no_trace_in_the_accounting():
    case = _CASES["tiny_01"]
    result = papara(case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend="numba")
    cells = sum(w.cells for w in result.stats.workers.values())
    assert cells == result.settings["cells"] == result.stats.phase_cells["scoring"]


def test_a_failing_warm_up_leaves_the_run_to_report(monkeypatch):
    import importlib

    module = importlib.import_module("dpalign.papara")
    calls = []
    real = module.placement.score  # the warm-up's place() and the run both score through it

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("warm-up only")
        return real(*args, **kwargs)

    monkeypatch.setattr(module.placement, "score", flaky)
    case = _CASES["tiny_01"]
    result = papara(case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend="numba")
    assert len(calls) == 2 and result.to_phylip() == (case / "default.phy").read_text()


def test_a_backend_built_beside_the_reading_reports_its_error_after_the_inputs(tmp_path):
    """The backend is built on the warm-up thread: its error reaches the caller, but an
    error in the inputs comes first."""
    from dpalign.errors import DpalignError, InputError

    case = _CASES["tiny_01"]
    args = (case / "tree.nwk", case / "ref.phy", case / "queries.fa")
    with pytest.raises(DpalignError, match="no-such-backend"):
        papara(*args, backend="no-such-backend")
    bad = tmp_path / "bad.fa"
    bad.write_text(">r1\nAC1GT\n")
    with pytest.raises(InputError, match="bad.fa"):
        papara(args[0], args[1], bad, backend="no-such-backend")

    def build():
        from dpalign.engine import get_backend

        return get_backend("numba")

    result = papara(*args, backend=build)
    assert result.to_phylip() == (case / "default.phy").read_text()
    assert list(result.stats.phases)[:3] == ["read", "tree_profiles", "scoring"]


@pytest.mark.parametrize("name", ["small_11_messy_ref", "small_01_trifurc", "tiny_02"])
def test_rows_streamed_during_the_batches_are_the_original_bytes(monkeypatch, tmp_path, name):
    """Without reference gaps the alignment is written as each batch is traced back."""
    import io

    case = _CASES[name]
    if not (case / "noref.phy").exists():
        pytest.skip(f"{name}/noref.phy not in the golden set")
    want = (case / "noref.phy").read_text()
    edges = 2 * len((case / "tree.nwk").read_text().split(",")) - 2
    monkeypatch.setattr(config, "PAPARA_BATCH_BYTES", 9 * edges * 3)  # 3 reads a batch
    monkeypatch.setattr(config, "PAPARA_WRITE_READS", 2)
    args = (case / "tree.nwk", case / "ref.phy", case / "queries.fa")
    buffer = io.BytesIO()
    result = papara(*args, backend="numba", ref_gaps=False, stream=(buffer, "phylip"))
    assert buffer.getvalue().decode() == want == result.to_phylip()
    assert result.stats.phases["write"] > 0
    out = tmp_path / "out.phy"
    argv = ["papara", "--ref", str(args[0]), "--msa", str(args[1]), "--reads", str(args[2])]
    argv += ["--no-ref-gaps", "--out", str(out), "--backend", "numba", "--no-progress"]
    assert main(argv) == 0
    assert out.read_text() == want
    with pytest.raises(ValueError, match="ref_gaps=False"):
        papara(*args, backend="numba", stream=(io.BytesIO(), "phylip"))


def test_a_failure_after_streamed_batches_leaves_no_file(monkeypatch, tmp_path, capsys):
    from dpalign.errors import DpalignError
    from dpalign.papara import traceback as papara_traceback

    case = _CASES["small_11_messy_ref"]
    edges = 2 * len((case / "tree.nwk").read_text().split(",")) - 2
    monkeypatch.setattr(config, "PAPARA_BATCH_BYTES", 9 * edges * 3)
    real, calls = papara_traceback.align_reads, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the warm-up's, then two batches written, then this one fails
            raise DpalignError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(papara_traceback, "align_reads", failing)
    out = tmp_path / "out.phy"
    argv = ["papara", "--ref", str(case / "tree.nwk"), "--msa", str(case / "ref.phy")]
    argv += ["--reads", str(case / "queries.fa"), "--no-ref-gaps", "--out", str(out)]
    argv += ["--backend", "numba", "--no-progress"]
    assert main(argv) != 0
    assert "injected failure" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "kwargs", "expected"),
    [
        ("small_11_messy_ref", {}, "default.phy"),
        ("small_01_trifurc", {"gap_model": "cgap"}, "cgap.phy"),
    ],
)
@pytest.mark.parametrize("as_function", [False, True])
def test_profiles_on_the_device_give_the_original_bytes(
    monkeypatch, cl_device, name, kwargs, expected, as_function
):
    """Where the device computes the edge profiles (a GPU's, here forced on any device), the
    run's first launch waits for no CPU kernel: the same bytes, the profiles from the device,
    and no Numba load for them."""
    import importlib

    from dpalign.engine import backend_class, get_backend

    module = importlib.import_module("dpalign.papara")
    case = _CASES[name]
    if not (case / expected).exists():
        pytest.skip(f"{name}/{expected} not in the golden set")
    cls = backend_class("opencl")
    calls = []
    real = cls.device_papara_profiles

    def spy(self, *args):
        calls.append(1)
        return real(self, *args)

    loads = []
    monkeypatch.setattr(cls, "profile_device", lambda self: self)
    monkeypatch.setattr(cls, "device_papara_profiles", spy)
    monkeypatch.setattr(module.profiles, "load_kernel", lambda *a: loads.append(1))
    backend = get_backend("opencl", device=cl_device)
    if as_function:  # as the CLI gives it: built on the warm-up thread, named up front

        def build():
            return backend

        build.backend_name = "opencl"
        given = build
    else:
        given = backend
    result = module.papara(
        case / "tree.nwk", case / "ref.phy", case / "queries.fa", backend=given, **kwargs
    )
    assert result.to_phylip() == (case / expected).read_text()
    assert calls == [1] and loads == []


def test_the_profiles_kernel_loads_at_once_unless_a_device_may_compute_them(monkeypatch):
    import importlib

    from dpalign.engine import get_backend
    from dpalign.papara import _device_may_profile

    hybrid = importlib.import_module("dpalign.hybrid.backend")

    def build():
        return get_backend("numba")

    assert _device_may_profile("opencl")
    assert not _device_may_profile("numba") and not _device_may_profile(get_backend("numba"))
    assert not _device_may_profile(build)  # a function that says nothing: a CPU backend
    build.backend_name = "opencl"
    assert _device_may_profile(build)
    for nodes, may in ((0, False), (1, True), (2, False), (None, True)):
        monkeypatch.setattr(hybrid, "gpu_node_count", lambda nodes=nodes: nodes)
        monkeypatch.setattr(hybrid, "no_gpu_device_nodes", lambda nodes=nodes: nodes == 0)
        assert _device_may_profile("auto") == may
        assert _device_may_profile("hybrid") == may


def test_device_processes_start_ahead_only_for_a_work_queue_on_several_gpus(monkeypatch):
    import importlib

    from dpalign.gcups import RunStats
    from dpalign.papara import _start_device_processes

    hybrid = importlib.import_module("dpalign.hybrid.backend")
    devproc = importlib.import_module("dpalign.hybrid.devproc")
    started = []
    monkeypatch.setattr(devproc, "prestart", lambda *args: started.append(args))
    monkeypatch.setattr(config, "HYBRID_STREAMS", 1)
    monkeypatch.setattr(config, "OPENCL_DEVICE", None)
    for nodes, name, want in (
        (2, "auto", [("opencl", 2, 1)]),
        (3, "hybrid", [("opencl", 3, 1)]),
        (1, "auto", []),
        (None, "auto", []),
        (2, "opencl", []),
        (2, "numba", []),
    ):
        started.clear()
        monkeypatch.setattr(hybrid, "gpu_node_count", lambda nodes=nodes: nodes)
        _start_device_processes(name, RunStats())
        assert started == want, (nodes, name)

    def build():
        return None

    build.backend_name = "auto"
    monkeypatch.setattr(hybrid, "gpu_node_count", lambda: 2)
    started.clear()
    _start_device_processes(build, RunStats())
    assert started == [("opencl", 2, 1)]
    monkeypatch.setattr(config, "OPENCL_DEVICE", "0:1")  # a device named: not every GPU
    started.clear()
    _start_device_processes(build, RunStats())
    assert started == []
