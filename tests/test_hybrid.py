"""The hybrid work queue and the Dask backend: same results as one backend, whatever fails."""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass

import numpy as np
import pytest

from dpalign import backends
from dpalign.engine import Backend, ReferenceBackend, Task, get_backend, query_batch
from dpalign.errors import DpalignError
from dpalign.hybrid.queue import WorkQueue, make_units
from dpalign.papara.placement import profile_blocks
from dpalign.scoring import PaparaScoring

needs_numba = pytest.mark.skipif("numba" not in backends(), reason="numba kernels not present")


def _problem(seed=0, n_edges=70, n_cols=60, n_reads=40):
    rng = np.random.default_rng(seed)
    states = rng.integers(1, 16, (n_edges, n_cols)).astype(np.uint8)
    flags = (rng.random((n_edges, n_cols)) < 0.15).astype(np.uint8)
    reads = [
        (1 << rng.integers(0, 4, rng.integers(1, 30))).astype(np.uint8) for _ in range(n_reads)
    ]
    return Task("papara", PaparaScoring()), query_batch(reads), profile_blocks(states, flags)


def _scores(results):
    return np.concatenate([r.scores for r in results], axis=1)


@pytest.fixture(scope="module")
def problem():
    task, queries, blocks = _problem()
    expected = _scores(ReferenceBackend().score(task, queries, blocks))
    if "numba" in backends():
        # load the Numba kernels now (backends() no longer imports numba): CPU workers that
        # spent their first second loading them would leave every unit to the device
        np.testing.assert_array_equal(
            _scores(get_backend("numba").score(task, queries, blocks)), expected
        )
    return task, queries, blocks, expected


def _device():
    """A device for the hybrid queue: PoCL/any OpenCL device if present, else a stand-in."""
    if "opencl" in backends():
        return get_backend("opencl")
    return ReferenceBackend()


@dataclass
class HeldDevice(Backend):
    """A device backend that takes no work until ``until()`` holds (at most a minute): its
    worker's first take waits, so injected CPU failures happen whatever the device's speed
    (a fast PoCL device otherwise took every unit before ``cpu-0`` reached its third)."""

    inner: Backend | None = None
    until: object = None
    name = "held"
    kind = "device"

    def prepare(self, task, queries, blocks):
        deadline = time.monotonic() + 60
        while not self.until() and time.monotonic() < deadline:
            time.sleep(0.005)
        self.inner.prepare(task, queries, blocks)

    def score(self, task, queries, blocks, progress=None):
        return self.inner.score(task, queries, blocks, progress)


def _held_hybrid(failures: dict, **options):
    """A hybrid backend whose device starts only once every injected CPU failure happened."""
    cpu_failures = sum(name.startswith("cpu") for name in failures)
    device = HeldDevice(inner=_device())
    hybrid = get_backend("hybrid", devices=[device], cpu_workers=2, **options)
    device.until = lambda: len(hybrid.stats.notes) >= cpu_failures
    return hybrid


def test_units_cover_the_work_once():
    units = make_units(10, 3, 4)
    assert [(u.start, u.stop) for u in units[::3]] == [(0, 4), (4, 8), (8, 10)]
    assert len(units) == 9 and len({(u.start, u.block) for u in units}) == 9
    queue = WorkQueue(units)
    front, back = queue.take_front(4), queue.take_back()
    assert [u.index for u in front] == [0, 1, 2, 3] and [u.index for u in back] == [8]
    queue.give_back(front[:2])
    assert [u.index for u in queue.take_front(1)] == [0]


@needs_numba
def test_hybrid_equals_reference(problem, monkeypatch):
    task, queries, blocks, expected = problem
    monkeypatch.setattr("dpalign.config.HYBRID_UNIT_CELLS", 20_000)
    monkeypatch.setattr("dpalign.config.HYBRID_DEVICE_MIN_READS", 1)
    # the device waits until both CPU workers have scored a unit: a fast PoCL device otherwise
    # took every unit first now and then ({cpu-0, gpu-0} or {gpu-0} in full-suite runs)
    device = HeldDevice(inner=_device())
    hybrid = get_backend("hybrid", devices=[device], cpu_workers=2)
    device.until = lambda: {"cpu-0", "cpu-1"} <= set(hybrid.stats.workers)
    np.testing.assert_array_equal(_scores(hybrid.score(task, queries, blocks)), expected)
    workers = hybrid.stats.workers
    assert set(workers) == {"cpu-0", "cpu-1", "gpu-0"}
    total = sum(w.cells for w in workers.values())
    assert total == queries.residues * sum(b.residues for b in blocks)


@needs_numba
@pytest.mark.parametrize("failures", [{"cpu-0": 2}, {"gpu-0": 0}, {"cpu-1": 1, "gpu-0": 1}])
def test_failed_workers_lose_nothing(problem, monkeypatch, failures):
    task, queries, blocks, expected = problem
    monkeypatch.setattr("dpalign.config.HYBRID_UNIT_CELLS", 20_000)
    monkeypatch.setattr("dpalign.config.HYBRID_DEVICE_MIN_READS", 1)
    hybrid = _held_hybrid(failures, inject_failures=failures)
    np.testing.assert_array_equal(_scores(hybrid.score(task, queries, blocks)), expected)
    assert len(hybrid.stats.notes) == len(failures)
    assert all("injected failure" in note for note in hybrid.stats.notes)


@needs_numba
def test_every_worker_failing_is_an_error(problem):
    task, queries, blocks, _ = problem
    hybrid = get_backend(
        "hybrid",
        devices=[ReferenceBackend()],
        cpu_workers=1,
        inject_failures={"cpu-0": 0, "gpu-0": 0},
    )
    with pytest.raises(DpalignError, match="every worker failed"):
        hybrid.score(task, queries, blocks)


@needs_numba
def test_cli_output_unchanged_under_injected_failures(tmp_path, monkeypatch, capsys):
    from conftest import golden_root

    from dpalign.cli import main

    case = golden_root() / "small_01_trifurc"
    # cpu-0 fails on its first take: with the device process already warm (papara starts it
    # while reading the inputs) the GPU can finish this small case before cpu-0's second take
    monkeypatch.setenv("DPALIGN_INJECT_FAILURES", "cpu-0:0")
    monkeypatch.setattr("dpalign.config.HYBRID_UNIT_CELLS", 50_000)
    monkeypatch.setattr("dpalign.config.HYBRID_DEVICE_MIN_READS", 1)
    hybrid = _held_hybrid({"cpu-0": 1})
    monkeypatch.setattr("dpalign.cli._backend_from_args", lambda args, *rest: hybrid)
    report = tmp_path / "report.json"
    argv = [
        "papara",
        "--ref",
        str(case / "tree.nwk"),
        "--msa",
        str(case / "ref.phy"),
        "--reads",
        str(case / "queries.fa"),
        "--report",
        str(report),
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == (case / "default.phy").read_text()
    assert "cpu-0 failed" in captured.err and "split:" in captured.err
    assert "injected failure" in report.read_text()


# ---------------------------------------------------------------------------------------------
# Dask


@pytest.fixture(scope="module")
def dask_backend():
    pytest.importorskip("distributed")
    if "numba" not in backends():
        pytest.skip("numba kernels not present")
    backend = get_backend("dask", workers=2)
    yield backend
    backend.close()


def test_dask_equals_reference(problem, dask_backend):
    task, queries, blocks, expected = problem
    np.testing.assert_array_equal(_scores(dask_backend.score(task, queries, blocks)), expected)
    assert sum(w.cells for w in dask_backend.stats.workers.values()) == queries.residues * sum(
        b.residues for b in blocks
    )


def test_dask_survives_a_killed_worker(dask_backend):
    task, queries, blocks = _problem(seed=5, n_edges=200, n_cols=120, n_reads=120)
    expected = _scores(get_backend("numba").score(task, queries, blocks))
    client = dask_backend.client()
    killed = []

    def kill_one(_cells):
        if not killed:
            pids = client.run(os.getpid)  # worker address -> pid
            address, pid = sorted(pids.items())[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(address)

    dask_backend.tasks_per_worker = 16
    results = dask_backend.score(task, queries, blocks, progress=kill_one)
    assert killed
    np.testing.assert_array_equal(_scores(results), expected)


def test_device_takes_follow_the_minimum_then_its_share(problem, monkeypatch):
    """The first device take is HYBRID_DEVICE_MIN_READS worth of whole chunks, not
    everything; once its rate is measured it takes HYBRID_DEVICE_SHARE of its share of what
    remains (all of the share here: no CPU workers), rounded up to whole chunks."""
    from dpalign.hybrid.backend import unit_reads

    task, queries, blocks, _ = problem
    monkeypatch.setattr("dpalign.config.HYBRID_UNIT_CELLS", 20_000)
    monkeypatch.setattr("dpalign.config.HYBRID_DEVICE_MIN_READS", 6)
    monkeypatch.setattr("dpalign.config.HYBRID_DEVICE_SHARE", 0.5)
    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    hybrid = get_backend("hybrid", devices=["0:0"], cpu_workers=0, processes=True)
    try:
        results = hybrid.score(task, queries, blocks)
    finally:
        hybrid.close()
    np.testing.assert_array_equal(
        _scores(results), _scores(get_backend("reference").score(task, queries, blocks))
    )
    fronts = [t for t in hybrid.last_queue.log if t[2] == "front"]
    n = len(blocks)
    chunk = unit_reads(queries, blocks)
    first = n * -(-6 // chunk)
    assert fronts[0][3] == first
    left = hybrid.last_queue.total - first
    assert left > 0, "the problem is too small to see a second take"
    assert fronts[1][3] == min(left, n * math.ceil(math.ceil(left * 0.5) / n))
    assert sum(t[3] for t in fronts) == hybrid.last_queue.total


def test_a_device_counts_unmeasured_peers_as_fast_as_itself():
    """Sizing a take: the device's share of what remains, peers not yet measured counted at
    its own rate, HYBRID_DEVICE_SHARE of it, rounded up to whole chunks (of 4 blocks)."""
    from dpalign import config
    from dpalign.hybrid.workers import DeviceWorker

    gpu = DeviceWorker("gpu-0", ReferenceBackend(), n_blocks=4, chunk_reads=10_000)
    gpu.peers = ["gpu-1"]
    queue = WorkQueue(make_units(400_000, 4, 10_000))  # 40 chunks, 160 units
    assert len(gpu.take(queue, {})) == 4  # no rate: the minimum, one chunk
    share = config.HYBRID_DEVICE_SHARE
    # Measured itself only: half of the 156 left (gpu-1 as fast), rounded up to chunks.
    want = 4 * math.ceil(math.ceil(156 * 0.5 * share) / 4)
    assert len(gpu.take(queue, {"gpu-0": 2.0})) == want
    left = 156 - want
    # Both measured, plus a CPU worker: its share of the sum.
    want = 4 * math.ceil(math.ceil(left * 3.0 / 5.0 * share) / 4)
    assert len(gpu.take(queue, {"gpu-0": 3.0, "gpu-1": 1.0, "cpu-0": 1.0})) == want


def test_devices_alone_with_known_rates_split_the_queue_in_one_take_each(monkeypatch):
    """Devices without CPU workers, rates known: each first take is the device's share of
    the whole queue (not of what the others left), so two GPUs take one launch each."""
    from dpalign import config
    from dpalign.hybrid.workers import DeviceWorker

    queue = WorkQueue(make_units(400_000, 4, 10_000))  # 40 chunks, 160 units
    rates = {"gpu-0": 3.0, "gpu-1": 1.0}
    gpus = [DeviceWorker(f"gpu-{k}", ReferenceBackend(), 4, chunk_reads=10_000) for k in (0, 1)]
    for gpu, peer in zip(gpus, ("gpu-1", "gpu-0"), strict=True):
        gpu.peers, gpu.devices_only = [peer], True
    rates["cpu-0"] = 100.0  # a CPU worker's kept rate: not in a devices-alone split
    assert len(gpus[0].take(queue, rates)) == 120  # three quarters of all 160
    assert len(gpus[1].take(queue, rates)) == 40  # its quarter: the rest
    assert queue.remaining == 0
    # no minimum take (HYBRID_DEVICE_MIN_READS is a chunk here), the nearest whole chunk
    monkeypatch.setattr(config, "HYBRID_DEVICE_MIN_READS", 10 * 10_000)
    queue = WorkQueue(make_units(50_000, 4, 10_000))  # 5 chunks
    gpus = [DeviceWorker(f"gpu-{k}", ReferenceBackend(), 4, chunk_reads=10_000) for k in (0, 1)]
    for gpu, peer in zip(gpus, ("gpu-1", "gpu-0"), strict=True):
        gpu.peers, gpu.devices_only = [peer], True
    even = {"gpu-0": 1.01, "gpu-1": 1.0}
    assert len(gpus[0].take(queue, even)) == 4 * 3  # 2.51 chunks: the nearest, 3
    assert len(gpus[1].take(queue, even)) == 4 * 2
    assert queue.remaining == 0
    # with CPU workers in the run (or the rule off), a share of what remains, as before
    monkeypatch.setattr(config, "HYBRID_DEVICE_MIN_READS", 10_000)
    monkeypatch.setattr(config, "HYBRID_WHOLE_SHARE", False)
    rates.pop("cpu-0")
    queue = WorkQueue(make_units(400_000, 4, 10_000))
    gpus = [DeviceWorker(f"gpu-{k}", ReferenceBackend(), 4, chunk_reads=10_000) for k in (0, 1)]
    for gpu in gpus:
        gpu.devices_only = True
    assert len(gpus[0].take(queue, rates)) == 120
    assert len(gpus[1].take(queue, rates)) == 4 * math.ceil(math.ceil(40 * 0.25) / 4)


def test_device_process_keeps_its_blocks_between_runs(problem, monkeypatch):
    """A second run against the same blocks sends the child only the reads (the profiles
    stay laid out on its device); other blocks are sent again. Scores stay exact."""
    from dpalign.hybrid.devproc import DeviceProcess

    task, queries, blocks, expected = problem
    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    sent = []
    original = DeviceProcess._send

    def spy(self, message):
        if message[0] == "setup":
            sent.append(message[3] is not None)  # were blocks sent?
        return original(self, message)

    monkeypatch.setattr(DeviceProcess, "_send", spy)
    monkeypatch.setattr("dpalign.config.HYBRID_UNIT_CELLS", 20_000)
    monkeypatch.setattr("dpalign.config.HYBRID_DEVICE_MIN_READS", 1)
    hybrid = get_backend("hybrid", devices=["0:0"], cpu_workers=0, processes=True)
    other_task, other_queries, other_blocks = _problem(seed=3, n_edges=40)
    reference = ReferenceBackend()
    try:
        np.testing.assert_array_equal(_scores(hybrid.score(task, queries, blocks)), expected)
        fewer = queries.subset(slice(5, 30))
        np.testing.assert_array_equal(
            _scores(hybrid.score(task, fewer, blocks)),
            _scores(reference.score(task, fewer, blocks)),
        )
        np.testing.assert_array_equal(
            _scores(hybrid.score(task, fewer, other_blocks)),
            _scores(reference.score(task, fewer, other_blocks)),
        )
    finally:
        hybrid.close()
    assert sent == [True, False, True]


def test_lowering_a_thread_priority_leaves_the_others_alone():
    import sys
    import threading

    from dpalign.hybrid.workers import lower_thread_priority

    if not sys.platform.startswith("linux"):
        pytest.skip("per-thread nice values are Linux's")
    seen = {}

    def worker():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        seen["changed"] = lower_thread_priority(3)
        seen["delta"] = os.getpriority(os.PRIO_PROCESS, tid) - before
        seen["cap"] = min(19, before + 3) - before

    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["changed"] and seen["delta"] == seen["cap"]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before


def test_a_take_that_meets_the_cpu_units_is_one_launch(problem):
    """Whole chunks plus the partial chunk where a take met the CPU workers' units go to the
    device process as one request; it writes exactly the lanes of the units it was given."""
    from dpalign.hybrid.devproc import DeviceProcess, SharedResults
    from dpalign.hybrid.workers import ProcessDeviceWorker

    task, queries, blocks, expected = problem
    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    n = len(blocks)
    units = make_units(len(queries), n, 10)  # chunks of 10 reads
    # chunk 0 whole, and chunk 1's first two blocks (the CPU workers hold its others)
    taken = [u for u in units if u.start == 0] + [u for u in units if u.start == 10][:2]
    shared = SharedResults(len(queries), blocks)
    process = DeviceProcess("opencl", "0:0")
    calls = []
    original = process.score

    def spy(parts):
        calls.append(parts)
        return original(parts)

    process.score = spy
    try:
        worker = ProcessDeviceWorker("gpu-0", process, n)
        worker.shared = shared
        worker.prepare(task, queries, blocks)
        done = worker.compute(task, queries, blocks, taken)
    finally:
        process.close()
    assert [u for u, _ in done] == taken
    assert calls == [[(0, 10, tuple(range(n))), (10, 20, (0, 1))]]
    got = shared.scores
    lanes = int(shared.offsets[2])
    np.testing.assert_array_equal(got[:10], expected[:10])
    np.testing.assert_array_equal(got[10:20, :lanes], expected[10:20, :lanes])
    assert not got[10:20, lanes:].any() and not got[20:].any()  # not this worker's
    shared.close()


@needs_numba
def test_hybrid_pairwise_runs_the_int8_pass():
    """The hybrid queue packs pairwise targets at its CPU workers' width, so their int8 lanes
    run (32-lane blocks skipped that pass, and every score came from int16)."""
    from dpalign import score
    from dpalign.hybrid import HybridBackend

    rng = np.random.default_rng(5)
    queries = ["".join(rng.choice(list("ACGT"), 40)) for _ in range(3)]
    targets = ["".join(rng.choice(list("ACGT"), int(n))) for n in rng.integers(5, 60, 150)]
    hybrid = HybridBackend(devices=[], cpu_workers=2)
    got, width = score(queries, targets, "local", backend=hybrid, with_width=True)
    want = score(queries, targets, "local", backend="reference")
    np.testing.assert_array_equal(got, want)
    assert (width == 8).any()


def test_the_devices_work_alone_where_the_cpu_share_does_not_pay(problem, monkeypatch, tmp_path):
    """The rule of ``auto`` on a GPU machine (``HybridBackend.cpu_pays``): CPU workers join
    the queue unless their measured share is below ``config.HYBRID_MIN_CPU_SHARE``; the rates
    outlive the process in ``config.HYBRID_RATES_FILE``."""
    from dpalign import config
    from dpalign.hybrid import backend as hb
    from dpalign.hybrid.backend import HybridBackend

    task, queries, blocks, expected = problem
    monkeypatch.setattr(config, "HYBRID_RATES_FILE", str(tmp_path / "rates.json"))
    fresh = HybridBackend(devices=[_device()], threads=2, processes=False)
    assert fresh.cpu_pays("papara")  # nothing measured: the queue measures
    key = fresh._rates_key("papara")
    slow_cpu = {"gpu-0": 100.0, "cpu-0": 10.0, "cpu-1": 10.0}  # 17%: below 25%
    hb._write_rates(key, slow_cpu)
    alone = HybridBackend(devices=[_device()], threads=2, processes=False)
    assert not alone.cpu_pays("papara")
    np.testing.assert_array_equal(_scores(alone.score(task, queries, blocks)), expected)
    assert alone.stats.workers and not any(n.startswith("cpu-") for n in alone.stats.workers)
    assert "alone" in alone.describe() and "CPU workers +" not in alone.describe()
    # alone, the device's own layout (OpenCL: every profile in one block); joined, the CPU's
    device = alone._selectors()[0]
    assert alone.block_width("papara", 200) == device.block_width("papara", 200)
    hb._write_rates(key, {"gpu-0": 100.0, "cpu-0": 20.0, "cpu-1": 20.0})  # 29%: they join
    joined = HybridBackend(devices=[_device()], threads=2, processes=False)
    assert joined.cpu_pays("papara")
    cpu_width = hb.cpu_backend(2).block_width("papara", 200)
    assert joined.block_width("papara", 200) == cpu_width
    monkeypatch.setattr(config, "HYBRID_RATES_FILE", "")  # nothing kept: the queue measures
    assert HybridBackend(devices=[_device()], threads=2, processes=False).cpu_pays("papara")


def test_describe_counts_the_devices_it_was_given(monkeypatch):
    from dpalign.hybrid import backend as hb
    from dpalign.hybrid.backend import HybridBackend

    monkeypatch.setattr(hb, "gpu_selectors", lambda: ["0:0", "0:1"])  # a machine's GPUs
    assert "+ 2 " in HybridBackend(threads=2, processes=False).describe()
    assert "+ 0 " in HybridBackend(devices=[], threads=2, processes=False).describe()
    assert "+ 1 " in HybridBackend(devices=[_device()], threads=2, processes=False).describe()


def test_devices_alone_fall_back_to_the_cores_when_every_device_fails(
    problem, monkeypatch, tmp_path
):
    from dpalign import config
    from dpalign.hybrid import backend as hb
    from dpalign.hybrid.backend import HybridBackend

    task, queries, blocks, expected = problem
    monkeypatch.setattr(config, "HYBRID_RATES_FILE", str(tmp_path / "rates.json"))
    failing = HybridBackend(
        devices=[_device()], threads=2, processes=False, inject_failures={"gpu-0": 0}
    )
    hb._write_rates(failing._rates_key("papara"), {"gpu-0": 100.0, "cpu-0": 1.0, "cpu-1": 1.0})
    assert not failing.cpu_pays("papara")
    np.testing.assert_array_equal(_scores(failing.score(task, queries, blocks)), expected)
    assert any(name.startswith("cpu-") for name in failing.stats.workers)
    assert "CPU workers +" in failing.describe()  # the run the cores took is what it names


def test_devices_alone_run_on_threads_of_this_process(problem, monkeypatch, tmp_path, cl_device):
    """No CPU workers to share the GIL with: no device process to start and feed."""
    from dpalign import config
    from dpalign.hybrid import backend as hb
    from dpalign.hybrid.backend import HybridBackend

    task, queries, blocks, expected = problem
    monkeypatch.setattr(config, "HYBRID_RATES_FILE", str(tmp_path / "rates.json"))
    monkeypatch.setattr(config, "HYBRID_DEVICE_PROCESSES", True)
    alone = HybridBackend(devices=[cl_device], threads=2)
    hb._write_rates(alone._rates_key("papara"), {"gpu-0": 100.0, "cpu-0": 1.0, "cpu-1": 1.0})
    for _ in range(2):  # the second run finds the device (and its profiles) kept
        np.testing.assert_array_equal(_scores(alone.score(task, queries, blocks)), expected)
    assert not alone._children and len(alone._in_thread) == 1
    assert not any(name.startswith("cpu-") for name in alone.stats.workers)


def test_a_device_process_started_ahead_is_taken_by_the_queue(problem, monkeypatch):
    """A process started before the GPUs were listed (``devproc.prestart``, here by hand on
    the first OpenCL device) is the one the work queue's device worker uses: exact scores,
    and the timeline says so."""
    import importlib

    from dpalign.hybrid import devproc

    task, queries, blocks, expected = problem
    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    module = importlib.import_module("dpalign.hybrid.backend")
    monkeypatch.setattr(module, "gpu_selectors", lambda: ["0:0"])
    monkeypatch.setitem(
        devproc._PRESTARTED, ("opencl", 0, 0), devproc.DeviceProcess("opencl", "0:0")
    )
    ahead = devproc._PRESTARTED[("opencl", 0, 0)]
    hybrid = module.HybridBackend(cpu_workers=0, processes=True)  # (no GPU device node here)
    try:
        np.testing.assert_array_equal(_scores(hybrid.score(task, queries, blocks)), expected)
        assert hybrid._children[("0:0", 0)] is ahead
    finally:
        hybrid.close()
    assert ("opencl", 0, 0) not in devproc._PRESTARTED
    assert any("started ahead, taken" in name for name, _, _ in hybrid.stats.timeline)
    assert devproc.claim("opencl", 0, 0) is None  # taken once


def test_a_device_process_started_ahead_and_never_taken_ends(monkeypatch):
    from dpalign.hybrid.devproc import DeviceProcess

    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    child = DeviceProcess("opencl", "0:0", idle=0.2)
    child.process.join(timeout=120)
    assert child.process.exitcode == 0


def test_the_kth_gpu_spec():
    from dpalign.errors import BackendUnavailable
    from dpalign.kernels_cl.backend import OpenCLBackend
    from dpalign.kernels_cl.context import choose_device

    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    gpus = OpenCLBackend.gpus()
    for k, ident in enumerate(gpus):
        assert choose_device(f"gpu#{k}")[0] == ident
    with pytest.raises(BackendUnavailable, match="gpu#"):
        choose_device(f"gpu#{len(gpus)}")


def test_the_profiles_go_to_a_gpu_that_scores_alone(monkeypatch, tmp_path):
    """``profile_device``: the device that will score alone on a thread of this process,
    where it is a GPU (a CPU device's profiles are the Numba kernel's: faster there); none
    while the CPU workers take part."""
    import importlib

    from dpalign.kernels_cl.backend import OpenCLBackend

    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    module = importlib.import_module("dpalign.hybrid.backend")
    monkeypatch.setattr(module, "gpu_selectors", lambda: ["0:0"])
    monkeypatch.setattr("dpalign.config.HYBRID_RATES_FILE", str(tmp_path / "rates.json"))
    hybrid = module.HybridBackend(threads=2)
    assert hybrid.profile_device() is None  # nothing measured: the CPU workers take part
    hybrid._rates["papara"] = {"cpu-0": 1.0, "gpu-0": 1000.0}
    alone = hybrid._device_alone("papara")
    assert alone is not None
    monkeypatch.setattr(OpenCLBackend, "profile_device", lambda self: self)  # as on a GPU
    assert hybrid.profile_device() is alone
    monkeypatch.setattr(OpenCLBackend, "profile_device", lambda self: None)  # a CPU device
    assert hybrid.profile_device() is None


def test_a_device_process_started_ahead_for_a_missing_gpu_ends_quietly(capfd):
    from dpalign.hybrid.devproc import DeviceProcess

    if "opencl" not in backends():
        pytest.skip("no OpenCL device")
    child = DeviceProcess("opencl", "gpu#99", idle=60.0)  # no 100th GPU anywhere
    child.process.join(timeout=120)
    assert child.process.exitcode == 0
    assert "Traceback" not in capfd.readouterr().err


def test_first_device_is_the_first_gpu_on_a_thread(cl_device, monkeypatch):
    """A GPU and nothing asked of the queue alone: the first GPU's own backend (of those
    named, else of all); otherwise None."""
    from dpalign.hybrid import backend as hybrid_backend
    from dpalign.hybrid.backend import HybridBackend

    monkeypatch.setattr(hybrid_backend, "gpu_selectors", lambda: [cl_device])
    monkeypatch.delenv("DPALIGN_INJECT_FAILURES", raising=False)
    first = HybridBackend().first_device()
    assert first is not None and first.kind == "device" and first.device == cl_device
    assert HybridBackend(processes=True).first_device() is None
    assert HybridBackend(devices=[cl_device]).first_device().device == cl_device  # --device
    ready = get_backend("opencl", device=cl_device)
    assert HybridBackend(devices=[ready]).first_device() is ready
    assert HybridBackend(inject_failures={"gpu-0": 1}).first_device() is None
    monkeypatch.setattr(hybrid_backend, "gpu_selectors", lambda: [cl_device, "other"])
    assert HybridBackend().first_device().device == cl_device
    monkeypatch.setattr(hybrid_backend, "gpu_selectors", lambda: [])
    assert HybridBackend().first_device() is None


def test_auto_searches_on_the_first_device(cl_device, monkeypatch, tmp_path):
    """``dpalign search`` with auto on a host whose work queue has one GPU runs on that
    device's own backend (its traceback in worker processes, its layout), same hits."""
    import json

    from dpalign import cli
    from dpalign.hybrid import backend as hybrid_backend
    from dpalign.hybrid.backend import HybridBackend

    monkeypatch.setattr(hybrid_backend, "gpu_selectors", lambda: [cl_device])
    monkeypatch.delenv("DPALIGN_INJECT_FAILURES", raising=False)
    monkeypatch.setattr(cli, "_backend_from_args", lambda args, *rest: HybridBackend())
    (tmp_path / "q.fa").write_text(">q\nMKTAYIAKQRQISFVKSHFSRQ\n")
    (tmp_path / "d.fa").write_text(">a\nMKTAYIAKQRQISFVKSH\n>b\nMSDNGPQNQRNAPRITFGG\n")
    out = {}
    for backend in ("auto", "numba"):
        argv = ["search", "--query", str(tmp_path / "q.fa"), "--db", str(tmp_path / "d.fa"),
                "--backend", backend, "--out", str(tmp_path / f"{backend}.tsv"),
                "--report", str(tmp_path / f"{backend}.json")]  # fmt: skip
        if backend == "numba":
            monkeypatch.undo()
        assert cli.main(argv) == 0
        out[backend] = (tmp_path / f"{backend}.tsv").read_text()
        report = json.loads((tmp_path / f"{backend}.json").read_text())
        if backend == "auto":
            assert report["settings"]["backend"].startswith("opencl")
    assert out["auto"] == out["numba"]


def test_a_long_pair_under_a_work_queue_goes_to_its_first_gpu(cl_device, monkeypatch):
    """A pair too long for the cores to align sooner runs on the queue's one GPU (same
    alignment as the cores'); a shorter one stays with the queue's cores."""
    from dpalign import config, pairwise
    from dpalign.hybrid import backend as hybrid_backend
    from dpalign.hybrid.backend import HybridBackend

    monkeypatch.setattr(hybrid_backend, "gpu_selectors", lambda: [cl_device])
    monkeypatch.delenv("DPALIGN_INJECT_FAILURES", raising=False)
    rng = np.random.default_rng(3)
    a = "".join(rng.choice(list("ACGT"), 400))
    b = a[:150] + "".join(rng.choice(list("ACGT"), 30)) + a[170:]
    queue = HybridBackend(threads=1)
    cells = len(a) * len(b)
    assert cells > config.LONG_PAIR_CELLS
    monkeypatch.setattr(config, "AUTO_CPU_LONGPAIR_CELLS_PER_CORE", cells + 1.0)
    assert pairwise._long_pair_device(queue, cells, 1) is queue  # the cores suffice
    monkeypatch.setattr(config, "AUTO_CPU_LONGPAIR_CELLS_PER_CORE", cells / 2)
    device = pairwise._long_pair_device(queue, cells, 1)
    assert device.kind == "device" and device.device == cl_device
    assert pairwise._long_pair_device(queue, config.LONG_PAIR_CELLS, 1) is queue
    on_gpu = pairwise.align(a, b, "local", (2, -3), 5, backend=queue, threads=1)
    on_cores = pairwise.align(a, b, "local", (2, -3), 5, backend="numba", threads=1)
    assert on_gpu.backend.startswith("opencl")
    assert (on_gpu.score, on_gpu.cigar) == (on_cores.score, on_cores.cigar)
