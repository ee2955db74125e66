"""The engine's table drives these tests: every (kernel family, backend) that scores, against the
reference; every name in the table follows the naming grammar."""

from __future__ import annotations

import numpy as np
import pytest

from dpalign import engine
from dpalign.engine import ReferenceBackend, Task, get_backend, query_batch, reference_blocks
from dpalign.scoring import PaparaScoring, Scoring

FAMILIES = {"nw", "sg", "sw", "papara"}
OPS = {"score", "trace", "fill"}
WIDTHS = {"i8", "i16", "i32", "i64"}


def test_every_table_name_follows_the_grammar():
    table = engine.kernel_table()
    assert len({e.name for e in table}) == len(table) > 0
    for e in table:
        assert e.family in FAMILIES and e.op in OPS and e.width in WIDTHS, e.name
        assert e.name == f"{e.family}_{e.op}_{e.backend}_{e.strategy}_{e.width}"
        assert e.backend in engine.backend_names()


def _problem(kernel: str, rng):
    if kernel == "papara":
        states = rng.integers(1, 16, (40, 30)).astype(np.uint8)
        flags = (rng.random((40, 30)) < 0.2).astype(np.uint8)
        reads = [(1 << rng.integers(0, 4, rng.integers(1, 25))).astype(np.uint8) for _ in range(9)]
        blocks = reference_blocks(list(states), flags=list(flags), dtype=np.uint8)
        return [Task("papara", PaparaScoring())], query_batch(reads), blocks
    scoring = Scoring((2, -3), (5, 2))
    queries = [rng.integers(0, 4, rng.integers(1, 30)).astype(np.uint8) for _ in range(5)]
    targets = [rng.integers(0, 4, rng.integers(1, 40)).astype(np.uint8) for _ in range(70)]
    tasks = [
        Task("pairwise", scoring, "global", (False,) * 4),
        Task("pairwise", scoring, "local", (False,) * 4),
        Task("pairwise", scoring, "semiglobal", (False, False, True, True)),
    ]
    return tasks, query_batch(queries), reference_blocks(targets, width=64)


@pytest.mark.parametrize(("kernel", "backend"), engine.kernel_families())
def test_every_scoring_backend_of_the_table_equals_the_reference(kernel, backend, cl_device):
    if backend not in engine.available_backends():
        pytest.skip(f"backend {backend} is not available here")
    options = {"device": cl_device} if engine.backend_class(backend).kind == "device" else {}
    runner = get_backend(backend, **options)
    tasks, queries, blocks = _problem(kernel, np.random.default_rng(7))
    for task in tasks:
        want = ReferenceBackend().score(task, queries, blocks)
        got = runner.score(task, queries, blocks)
        for w, g, block in zip(want, got, blocks, strict=True):
            live = block.ids >= 0
            np.testing.assert_array_equal(g.scores[:, live], w.scores[:, live], err_msg=task.mode)


@pytest.mark.parametrize("backend", engine.backend_names())
def test_every_backend_reaches_a_tracer(backend):
    cls = engine.backend_class(backend)
    tracer = cls() if cls.traces else engine.cpu_backend()
    assert tracer.traces
    task = Task("pairwise", Scoring(), "global", (False,) * 4)
    a, b = Scoring().encode("ACGT"), Scoring().encode("AGT")
    assert tracer.align_pair(task, a, b)[0] == ReferenceBackend().align_pair(task, a, b)[0]


def test_the_packer_lays_data_out_as_each_backend_asks(cl_device):
    """OpenCL: PaPaRa profiles in one block its runner reads as it is; database targets in one
    ragged block per view. Numba: its 64-lane int8 groups. Scores agree on every view."""
    import dpalign
    from dpalign.kernels_cl.backend import concatenate
    from dpalign.search import Database

    opencl, numba = get_backend("opencl", device=cl_device), get_backend("numba")
    rng = np.random.default_rng(3)
    states = rng.integers(1, 16, (45, 20)).astype(np.uint8)
    flags = (rng.random((45, 20)) < 0.2).astype(np.uint8)
    blocks = engine.pack(opencl, "papara", list(states), flags=list(flags))
    assert len(blocks) == 1 and blocks[0].width == 64
    assert concatenate(blocks)[0] is blocks[0].codes
    assert {b.width for b in engine.pack(numba, "papara", list(states), flags=list(flags))} == {32}

    targets = ["".join(rng.choice(list("ACGT"), int(n))) for n in rng.integers(0, 50, 90)]
    queries = ["".join(rng.choice(list("ACGT"), 30)) for _ in range(3)]
    db = Database(targets)
    for view in (db, db[0:20], db[7:41], db[60:]):
        want = dpalign.score(queries, view, "local", backend=numba)
        np.testing.assert_array_equal(dpalign.score(queries, view, "local", backend=opencl), want)
        laid = view.blocks(view.alphabet, view.layout_width(opencl), ragged=True)
        assert len(laid) == 1 and laid[0].ragged and laid[0].width == len(view)
        assert [len(t) for t in laid[0].lanes()] == view.lengths[view.ids].tolist()


def test_bench_list_prints_the_table(capsys):
    from dpalign.cli import main

    assert main(["bench", "--list", "--backend", "reference"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        e.name for e in engine.kernel_table(backend="reference")
    ]


def test_backends_load_once_for_every_thread(monkeypatch):
    """A thread that asks for a backend while another is loading the built-in ones waits
    for the registry to be complete (it used to find it empty: the PaPaRa profiles then ran
    their NumPy form beside the backend's warm-up)."""
    import threading
    import time

    started = threading.Event()

    class Late:
        name = "late-backend"

    def register_slowly():
        started.set()
        time.sleep(0.2)
        engine.register(Late)

    monkeypatch.setattr(engine, "_LOADED", [0])
    monkeypatch.setattr(engine, "_REGISTRY", {})
    monkeypatch.setattr(engine, "_register_builtin_backends", register_slowly)
    loader = threading.Thread(target=engine._load_builtin_backends)
    loader.start()
    assert started.wait(10)
    assert engine.backend_names() == ["late-backend"]
    loader.join()


def test_auto_takes_the_cores_alone_for_small_work(monkeypatch):
    """``auto`` below AUTO_CPU_CELLS_PER_CORE cells a core is the CPU backend, whatever
    ``auto`` would pick otherwise (here made to pick the reference, as a GPU would hybrid)."""
    from dpalign import config, engine

    monkeypatch.setattr(engine, "_AUTO_ORDER", ["reference"])
    monkeypatch.setattr(config, "AUTO_CPU_CELLS_PER_CORE", 1e6)
    assert engine.get_backend("auto").name == "reference"
    small = engine.auto_backend(2e6 - 1, threads=2)
    assert small.name == engine.cpu_backend().name != "reference"
    assert small.threads == 2
    assert engine.auto_backend(2e6, threads=2).name == "reference"
    assert engine.auto_backend(1.5e6, threads=1).name == "reference"


def test_search_cells_from_file_sizes(tmp_path):
    import argparse

    from dpalign.cli import _search_cells

    (tmp_path / "q.fa").write_text(">q\nACGT\n")  # 8 bytes
    (tmp_path / "d.fa").write_text(">d\nACGTACGT\n")  # 12 bytes
    args = argparse.Namespace(query=str(tmp_path / "q.fa"), db=str(tmp_path / "d.fa"))
    args.strand = "plus"
    assert _search_cells(args) == 8 * 12
    args.strand = "both"
    assert _search_cells(args) == 2 * 8 * 12
    assert _search_cells(argparse.Namespace(query="-", db=args.db, strand="plus")) is None
    (tmp_path / "d.fa.gz").write_bytes(b"x" * 10)
    gz = argparse.Namespace(query=args.query, db=str(tmp_path / "d.fa.gz"), strand="plus")
    assert _search_cells(gz) == 8 * 10 * 4  # GZIP_EXPANSION
    xz = argparse.Namespace(query=args.query, db=str(tmp_path / "d.fa.xz"), strand="plus")
    assert _search_cells(xz) is None


def test_papara_cells_and_its_own_threshold(tmp_path, monkeypatch):
    import argparse

    from dpalign import config, engine
    from dpalign.cli import _papara_cells

    (tmp_path / "r.fa").write_text(">r\n" + "A" * 97 + "\n")  # 101 bytes
    (tmp_path / "m.fa").write_text(">t\n" + "A" * 47 + "\n")  # 51 bytes
    args = argparse.Namespace(reads=str(tmp_path / "r.fa"), msa=str(tmp_path / "m.fa"))
    assert _papara_cells(args) == 2 * 101 * 51
    assert _papara_cells(argparse.Namespace(reads="-", msa=args.msa)) is None
    monkeypatch.setattr(config, "AUTO_CPU_CELLS_PER_CORE", 1e6)
    monkeypatch.setattr(config, "AUTO_CPU_PAPARA_CELLS_PER_CORE", 1e3)
    assert engine.cores_suffice(5e5, "pairwise", threads=1)
    assert not engine.cores_suffice(5e5, "papara", threads=1)
    assert engine.cores_suffice(5e2, "papara", threads=1)
