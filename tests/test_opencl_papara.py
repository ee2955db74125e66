"""The OpenCL PaPaRa kernels against the oracle, on every OpenCL device here (PoCL in CI).

Every kernel (strip and blocked designs, packed 16-bit and int32, DNA and protein, all scoring
presets) must give exactly ``reference.papara_fill``'s scores; the opencl backend must keep
the engine contract and give byte-identical ``dpalign papara`` output on the golden cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import golden_cases, opencl_devices
from hypothesis import given
from hypothesis import strategies as st

from dpalign import reference
from dpalign.cli import main
from dpalign.engine import Task, get_backend, query_batch, reference_blocks
from dpalign.errors import OptionError
from dpalign.kernels_cl.context import device_context
from dpalign.kernels_cl.papara import (
    KERNELS,
    PaparaRunner,
    blocked_layout,
    read_width,
    strip_layout,
)
from dpalign.scoring import ACCURATE, PaparaScoring, papara_scoring

PRESETS = [
    "papara2",
    "bmc2012",
    "-3:-1:2:-3",
    "-1:0:1:0",
    "-4:-2:-1:2",
    "0:0:3:-5",
    str(ACCURATE),
    "-4:-2:-1:2:-3",  # a mismatch below a negative match
    "-2:-1:3:-4:-2",
]


def _profiles(rng, n, lanes, protein=False, flag_rate=0.3):
    if protein:
        states = (1 << rng.integers(0, 20, (n, lanes))).astype(np.uint32)
        extra = (1 << rng.integers(0, 20, (n, lanes))).astype(np.uint32)
        states |= np.where(rng.random((n, lanes)) < 0.3, extra, 0).astype(np.uint32)
        states[rng.random((n, lanes)) < 0.05] = (1 << 20) - 1  # gap state
    else:
        states = rng.integers(1, 16, (n, lanes)).astype(np.uint8)  # IUPAC and the gap state 15
    flags = (rng.random((n, lanes)) < flag_rate).astype(np.uint8)
    return states, flags


def _reads(rng, count, m_max, protein=False, m_min=1):
    lengths = rng.integers(m_min, m_max + 1, count)
    if protein:
        reads = [(1 << rng.integers(0, 20, m)).astype(np.uint32) for m in lengths]
        for read in reads:  # X (every residue), kept by the accurate mode
            read[rng.random(len(read)) < 0.1] = (1 << 20) - 1
        return reads
    return [rng.integers(1, 16, m).astype(np.uint8) for m in lengths]  # IUPAC reads, N = 15


def _expected(states, flags, reads, scoring):
    return np.array([reference.papara_fill(states, flags, r, scoring).scores for r in reads])


def _score(cl_device, states, flags, reads, scoring, protein=False, **options):
    width = options.pop("width", None)
    runner = PaparaRunner(device_context(cl_device), scoring, states, flags, protein, **options)
    batch = query_batch(reads, dtype=states.dtype)
    return runner.score(batch.codes, batch.lengths, width=width)


DESIGNS = [
    pytest.param({"design": "strip"}, id="strip"),
    pytest.param({"design": "strip", "carry": "local"}, id="strip-localcarry"),
    pytest.param({"design": "strip", "split": True, "strip": 5}, id="strip-split"),
    pytest.param({"design": "blocked", "square": 5, "block": 6}, id="blocked"),
]


# --------------------------------------------------------------------------------------------
# Kernels against the oracle
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", DESIGNS)
@pytest.mark.parametrize("width", [None, 32], ids=["auto", "i32"])
@pytest.mark.parametrize("protein", [False, True], ids=["dna", "protein"])
@given(data=st.data())
def test_kernels_equal_the_oracle(cl_device, options, width, protein, data):
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    n = data.draw(st.integers(1, 40), label="n")
    lanes = data.draw(st.integers(1, 70), label="lanes")
    spec = data.draw(st.sampled_from(PRESETS), label="scoring")
    scoring = papara_scoring(spec)
    states, flags = _profiles(rng, n, lanes, protein, data.draw(st.sampled_from([0.0, 0.3, 1.0])))
    reads = _reads(rng, data.draw(st.integers(1, 6), label="reads"), 25, protein)
    got = _score(cl_device, states, flags, reads, scoring, protein, width=width, **options)
    np.testing.assert_array_equal(got.scores, _expected(states, flags, reads, scoring))
    assert set(got.width.tolist()) == {32 if width == 32 else 16}


@pytest.mark.parametrize("options", DESIGNS)
def test_length_one_everything(cl_device, options):
    rng = np.random.default_rng(1)
    for n in (1, 2, 7):
        states, flags = _profiles(rng, n, 33)
        reads = [np.array([state], np.uint8) for state in (1, 2, 4, 8, 5, 14)]
        for spec in ("papara2", "bmc2012", "0:0:-2:3", str(ACCURATE)):
            scoring = papara_scoring(spec)
            got = _score(cl_device, states, flags, reads, scoring, **options)
            np.testing.assert_array_equal(got.scores, _expected(states, flags, reads, scoring))


@pytest.mark.parametrize("options", DESIGNS)
def test_reads_that_need_32_bits(cl_device, options):
    """Scores beyond int16 are computed in 32 bits, exactly, and reported as width 32."""
    rng = np.random.default_rng(2)
    scoring = papara_scoring("-1:-1:500:-1")  # 500 per matching base
    states = np.full((90, 40), 15, np.uint8)  # the gap state matches every base
    flags = np.zeros((90, 40), np.uint8)
    flags[:, 1] = 1
    reads = [rng.integers(1, 15, m).astype(np.uint8) for m in (65, 66, 80, 5)]
    got = _score(cl_device, states, flags, reads, scoring, **options)
    want = _expected(states, flags, reads, scoring)
    np.testing.assert_array_equal(got.scores, want)
    assert want[0].max() == 32_500 and want[2].max() == 40_000
    assert got.width.tolist() == [16, 32, 32, 16]


@pytest.mark.parametrize("options", DESIGNS)
def test_scores_at_the_edge_of_the_16_bit_range(cl_device, options):
    """All-match reads whose scores (and the strip design's shifted frame) approach 32767:
    the width switches exactly where int16 would wrap, and every score is exact.

    The strip design's frame reaches ``strip`` E-opens above H, so the strip is fixed here:
    a device's default (32 on NVIDIA GPUs) would rightly score the shortest read in 32 bits.
    """
    if options["design"] == "strip":
        options = {"strip": 8, **options}
    scoring = papara_scoring("-500:-1:500:0")
    states = np.full((90, 32), 15, np.uint8)  # every base matches; unflagged, so E opens at -500
    flags = np.zeros((90, 32), np.uint8)
    reads = [np.full(m, 1, np.uint8) for m in range(38, 70, 3)]
    got = _score(cl_device, states, flags, reads, scoring, **options)
    np.testing.assert_array_equal(got.scores, _expected(states, flags, reads, scoring))
    assert got.width[0] == 16 and got.width[-1] == 32


def test_parameters_beyond_the_packed_range_use_32_bits(cl_device):
    rng = np.random.default_rng(3)
    scoring = papara_scoring("-3:-1:600:-3")
    states, flags = _profiles(rng, 20, 32)
    reads = _reads(rng, 3, 4)
    got = _score(cl_device, states, flags, reads, scoring)
    np.testing.assert_array_equal(got.scores, _expected(states, flags, reads, scoring))
    assert set(got.width.tolist()) == {32}


@pytest.mark.slow
def test_long_read_default_scoring_switches_to_32_bits(cl_device):
    """papara2 in 16 bits holds reads up to ~16k bases; a longer one is computed in 32."""
    scoring = PaparaScoring()
    assert read_width(scoring, 16_000) == 16 and read_width(scoring, 16_400) == 32
    rng = np.random.default_rng(4)
    states, flags = _profiles(rng, 3, 32)
    reads = [rng.integers(1, 15, 16_400).astype(np.uint8)]
    got = _score(cl_device, states, flags, reads, scoring)
    np.testing.assert_array_equal(got.scores, _expected(states, flags, reads, scoring))
    assert got.width.tolist() == [32]


def test_mixed_widths_and_empty_reads_keep_their_order(cl_device):
    rng = np.random.default_rng(5)
    scoring = papara_scoring("-1:-1:500:-1")
    states, flags = _profiles(rng, 30, 64)
    reads = [rng.integers(1, 15, m).astype(np.uint8) for m in (70, 3, 0, 67, 10)]
    got = _score(cl_device, states, flags, reads, scoring)
    nonempty = [k for k, r in enumerate(reads) if len(r)]
    want = _expected(states, flags, [reads[k] for k in nonempty], scoring)
    np.testing.assert_array_equal(got.scores[nonempty], want)
    assert got.width[[0, 1, 3, 4]].tolist() == [32, 16, 32, 16]
    assert (got.scores[2] == 0).all()


def test_many_launches_give_the_same_scores(cl_device, monkeypatch):
    """Tiny batches (several launches, both pinned slots reused) change nothing."""
    from dpalign.kernels_cl import papara as host

    rng = np.random.default_rng(6)
    states, flags = _profiles(rng, 25, 40)
    reads = _reads(rng, 9, 20)
    scoring = PaparaScoring()
    whole = _score(cl_device, states, flags, reads, scoring)
    monkeypatch.setattr(host, "CPU_LAUNCH_CELLS", 25 * 40 * 20)
    monkeypatch.setattr(host.config, "OPENCL_MEMORY_FRACTION", 0.5)
    split = _score(cl_device, states, flags, reads, scoring)
    if device_context(cl_device).caps.is_cpu:
        assert split.launches > 2
    np.testing.assert_array_equal(split.scores, whole.scores)


def test_large_gpu_calls_are_split_into_pipelined_launches(cl_device, monkeypatch):
    """On a GPU a large call runs in up to OPENCL_PIPELINE_LAUNCHES launches of at least
    OPENCL_MIN_LAUNCH_CELLS cells each, covering every read once, longest first."""
    import dataclasses
    from types import SimpleNamespace

    from dpalign.kernels_cl import papara as host

    rng = np.random.default_rng(8)
    states, flags = _profiles(rng, 30, 40)
    runner = PaparaRunner(device_context(cl_device), PaparaScoring(), states, flags, False)
    lengths = rng.integers(5, 21, 100)
    order = np.argsort(-lengths, kind="stable")
    variant = runner._variant(16, int(lengths.max()), int(lengths.max()))
    caps = dataclasses.replace(runner.dctx.caps, kind="gpu")
    runner.dctx = SimpleNamespace(caps=caps)  # only the GPU sizing rule is under test
    monkeypatch.setattr(host.config, "OPENCL_PIPELINE_LAUNCHES", 4)
    row_cells = 30 * variant.lanes  # cells of a read of length 1 in one launch
    for least_reads, launches in ((1, 4), (40, 3), (1000, 1)):
        monkeypatch.setattr(host.config, "OPENCL_MIN_LAUNCH_CELLS", least_reads * 20 * row_cells)
        batches = runner._batches(variant, lengths, order)
        assert len(batches) == launches, (least_reads, batches)
        assert [b[0] for b in batches] == list(np.cumsum([0] + [b[1] for b in batches])[:-1])
        assert sum(b[1] for b in batches) == len(order)
        assert [b[2] for b in batches] == [int(lengths[order[b[0]]]) for b in batches]


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------


def test_strip_layout_pads_on_the_left_with_virtual_columns():
    elems = np.arange(1, 11, dtype=np.uint8).reshape(5, 2)
    array, pad = strip_layout(elems, 4, protein=False)
    assert pad == 3 and array.shape == (8, 2)
    assert (array[:3] == 1 << 5).all() and (array[3:] == elems).all()


def test_blocked_layout_keeps_the_last_column_in_a_square():
    rng = np.random.default_rng(7)
    for n in (1, 5, 9, 10, 23, 40):
        states, flags = _profiles(rng, n, 4)
        layout = blocked_layout(states, flags, square=5, width=6, protein=False)
        assert layout.nh + layout.nb * 6 + layout.nt == n
        assert layout.nt > 0 or layout.nb == 0
        assert layout.mid.shape == (layout.nb, 4)  # 6 columns per word, one word per block


def test_kernel_table_names_every_design_and_width():
    assert sorted(KERNELS) == [
        "papara_score_opencl_blocked_i16",
        "papara_score_opencl_blocked_i32",
        "papara_score_opencl_strip_i16",
        "papara_score_opencl_strip_i32",
    ]


# --------------------------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["papara2", "bmc2012"])
def test_backend_keeps_the_block_contract(cl_device, spec):
    rng = np.random.default_rng(8)
    states, flags = _profiles(rng, 31, 70)  # 3 blocks, the last one with 26 padding lanes
    blocks = reference_blocks(list(states.T), flags=list(flags.T), order=rng.permutation(70))
    reads = _reads(rng, 5, 30)
    batch = query_batch(reads)
    task = Task("papara", papara_scoring(spec))
    backend = get_backend("opencl", device=cl_device)
    got = backend.score(task, batch, blocks)
    want = get_backend("reference").score(task, batch, blocks)
    assert len(got) == len(blocks)
    for block, mine, theirs in zip(blocks, got, want, strict=True):
        lanes = np.flatnonzero(block.ids >= 0)
        np.testing.assert_array_equal(mine.scores[:, lanes], theirs.scores[:, lanes])
        assert mine.width.shape == mine.scores.shape and set(np.unique(mine.width)) == {16}
    worker = next(iter(backend.stats.workers.values()))
    assert worker.cells == batch.residues * 31 * 70 and worker.seconds > 0


def test_backend_writes_into_given_arrays(cl_device):
    """``out=`` (the hybrid device process's shared results): the same scores, rows of
    empty reads zeroed, every block's lanes side by side."""
    rng = np.random.default_rng(12)
    states, flags = _profiles(rng, 23, 40)
    blocks = reference_blocks(list(states.T), flags=list(flags.T))
    reads = _reads(rng, 6, 25)
    reads[2] = reads[2][:0]
    batch = query_batch(reads)
    task = Task("papara", PaparaScoring())
    backend = get_backend("opencl", device=cl_device)
    want = backend.score(task, batch, blocks)
    scores = np.full((len(reads), 64), -7, dtype=np.int64)
    width = np.zeros((len(reads), 64), dtype=np.uint8)
    assert backend.score(task, batch, blocks, out=(scores, width)) is None
    np.testing.assert_array_equal(scores, np.hstack([w.scores for w in want]))
    np.testing.assert_array_equal(width, np.hstack([w.width for w in want]))
    assert (scores[2] == 0).all()
    with pytest.raises(OptionError):
        backend.score(task, batch, blocks, out=(scores[:, :32], width))


def test_backend_with_no_blocks_or_no_reads(cl_device):
    backend = get_backend("opencl", device=cl_device)
    task = Task("papara", PaparaScoring())
    assert backend.score(task, query_batch([np.array([1], np.uint8)]), []) == []
    states, flags = _profiles(np.random.default_rng(9), 5, 3)
    blocks = reference_blocks(list(states.T), flags=list(flags.T))
    (result,) = backend.score(task, query_batch([]), blocks)
    assert result.scores.shape == (0, 32)


# --------------------------------------------------------------------------------------------
# Golden cases: byte-identical output with --backend opencl
# --------------------------------------------------------------------------------------------

MODES = [
    ("default.phy", [], "phylip"),
    ("cgap.phy", ["--gap-model", "cgap"], "phylip"),
    ("noref.phy", ["--no-ref-gaps"], "phylip"),
    ("fasta.fasta", [], "fasta"),
]


def _golden_params():
    for case in golden_cases():
        if not case.name.startswith(("tiny", "small", "protein", "medium")):
            continue
        for expected, argv, fmt in MODES:
            if not (case / expected).exists():
                continue
            # Traceback runs on the CPU with the reference until the Numba kernels land:
            # keep the default run to the tiny cases and one mode of two small ones.
            fast = case.name.startswith("tiny") or (
                expected == "default.phy" and case.name in ("small_01_trifurc", "protein_small")
            )
            marks = [] if fast else [pytest.mark.slow]
            yield pytest.param(case, expected, argv, fmt, marks=marks, id=f"{case.name}-{expected}")


@pytest.mark.parametrize(("case", "expected", "argv", "fmt"), list(_golden_params()))
def test_golden_cases_byte_identical(case, expected, argv, fmt, capsys):
    args = [
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
        "opencl",
        *argv,
    ]
    if (case / "PROTEIN").exists():
        args.append("--protein")
    assert main(args) == 0
    assert capsys.readouterr().out == (case / expected).read_text()


def test_golden_case_with_the_blocked_design(monkeypatch, capsys):
    if not any(kind == "cpu" for _, kind in opencl_devices()):
        pytest.skip("no OpenCL CPU device")
    monkeypatch.setattr("dpalign.config.OPENCL_DESIGN", "blocked")
    case = next(c for c in golden_cases() if c.name == "tiny_02")
    args = ["papara", "--ref", str(case / "tree.nwk"), "--msa", str(case / "ref.phy")]
    args += ["--reads", str(case / "queries.fa"), "--backend", "opencl", "--device", "cpu"]
    assert main(args) == 0
    assert capsys.readouterr().out == (case / "default.phy").read_text()


# --------------------------------------------------------------------------------------------
# The GPU (skipped without one): the PTX paths at the benchmark's geometry
# --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("design", ["strip", "blocked"])
@pytest.mark.parametrize("spec", ["papara2", "bmc2012", "-2:-1:-1:1"])
@pytest.mark.parametrize("protein", [False, True], ids=["dna", "protein"])
def test_gpu_kernels_at_full_geometry(design, spec, protein):
    gpu = next(ident for ident, kind in opencl_devices() if kind == "gpu")
    rng = np.random.default_rng(10)
    states, flags = _profiles(rng, 700, 320, protein)
    reads = _reads(rng, 12, 120, protein, m_min=60)
    scoring = papara_scoring(spec)
    want = _expected(states, flags, reads, scoring)
    for width in (None, 32):
        for carry, unroll in (("global", 1), ("local", 2)) if design == "strip" else ((None, 1),):
            got = _score(
                gpu,
                states,
                flags,
                reads,
                scoring,
                protein,
                width=width,
                design=design,
                carry=carry,
                row_unroll=unroll,
            )
            np.testing.assert_array_equal(got.scores, want)
