"""The edge profiles' CPU kernel against their NumPy form: the same states and gap flags."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import golden_cases
from hypothesis import given, settings
from hypothesis import strategies as st

from dpalign.benchmarks.simulate import simulate
from dpalign.papara import dataset, profiles

_CASES = [c for c in golden_cases() if (c / "ref.phy").exists()]


def _both(data, gap_model):
    tips = {node: data.ref_states[row] for node, row in data.tip_rows.items()}
    args = (data.tree, tips, data.alphabet.gap, data.gap_fraction, gap_model)
    return profiles.edge_profiles(*args, threads=3), profiles.edge_profiles(*args, kernel=False)


@pytest.mark.parametrize("gap_model", ["likelihood", "cgap"])
@pytest.mark.parametrize("case", _CASES, ids=lambda c: c.name)
def test_kernel_profiles_equal_numpy_on_the_golden_cases(case, gap_model):
    protein = "protein" in case.name
    data = dataset.load(case / "tree.nwk", case / "ref.phy", protein=protein)
    (states, flags), (want_states, want_flags) = _both(data, gap_model)
    assert states.dtype == want_states.dtype and flags.dtype == want_flags.dtype == np.uint8
    assert np.array_equal(states, want_states) and np.array_equal(flags, want_flags)


@settings(max_examples=15, deadline=None)
@given(
    taxa=st.integers(3, 40),
    columns=st.integers(60, 200),
    seed=st.integers(0, 10_000),
    gap_model=st.sampled_from(["likelihood", "cgap"]),
)
def test_kernel_profiles_equal_numpy_on_simulated_trees(
    tmp_path_factory, taxa, columns, seed, gap_model
):
    sim = simulate(taxa + 2, columns, 2, (20, 30), held_out=2, seed=seed, prefix="t")
    folder = tmp_path_factory.mktemp("sim")
    sim.write(folder / "t.nwk", folder / "r.fasta", folder / "q.fasta")
    data = dataset.load(folder / "t.nwk", folder / "r.fasta")
    (states, flags), (want_states, want_flags) = _both(data, gap_model)
    assert np.array_equal(states, want_states) and np.array_equal(flags, want_flags)


def test_tiny_likelihoods_are_rescaled_alike(monkeypatch):
    """A deep caterpillar with long branches and many gaps drives both likelihoods below
    2**-256, where both forms rescale them."""
    n = 2500
    newick = "(" * (n - 1) + "t0:9,t1:9):9" + "".join(f",t{k}:9):9" for k in range(2, n - 1))
    newick += f",t{n - 1}:9);"
    rng = np.random.default_rng(3)
    rows = [(f"t{k}", "".join(rng.choice(list("ACGT----"), 40))) for k in range(n)]
    data = dataset.load(newick, rows)
    for gap_model in ("likelihood", "cgap"):
        (states, flags), (want_states, want_flags) = _both(data, gap_model)
        assert np.array_equal(states, want_states) and np.array_equal(flags, want_flags)
    with monkeypatch.context() as m:  # the case needs the rescaling: without it, flags change
        m.setattr(profiles, "_TINY", 0.0)
        _, (_, unscaled) = _both(data, "likelihood")
    (_, flags), _ = _both(data, "likelihood")
    assert not np.array_equal(flags, unscaled)


def _device_and_cpu(cl_device, data, gap_model):
    """The profiles on ``cl_device`` (``kernels_cl.papara.edge_profiles``) and the CPU
    kernel's."""
    from dpalign.kernels_cl.context import device_context
    from dpalign.kernels_cl.papara import edge_profiles

    tips = {node: data.ref_states[row] for node, row in data.tip_rows.items()}
    nodes, ops, trans = profiles.combine_schedule(data.tree, data.gap_fraction)
    rows = np.stack([tips[node] for node in nodes])
    got = edge_profiles(
        device_context(cl_device),
        rows,
        data.alphabet.gap,
        ops,
        trans,
        len(data.tree.edges),
        gap_model == "cgap",
    )
    args = (data.tree, tips, data.alphabet.gap, data.gap_fraction, gap_model)
    return got, profiles.edge_profiles(*args, threads=2)


@pytest.mark.parametrize("gap_model", ["likelihood", "cgap"])
@pytest.mark.parametrize("case", _CASES, ids=lambda c: c.name)
def test_device_profiles_equal_the_cpu_kernel_on_the_golden_cases(cl_device, case, gap_model):
    protein = "protein" in case.name
    data = dataset.load(case / "tree.nwk", case / "ref.phy", protein=protein)
    (states, flags), (want_states, want_flags) = _device_and_cpu(cl_device, data, gap_model)
    assert states.dtype == want_states.dtype and flags.dtype == np.uint8
    assert np.array_equal(states, want_states) and np.array_equal(flags, want_flags)


@settings(max_examples=8, deadline=None)
@given(
    taxa=st.integers(3, 40),
    columns=st.integers(60, 150),
    seed=st.integers(0, 10_000),
    gap_model=st.sampled_from(["likelihood", "cgap"]),
)
def test_device_profiles_equal_the_cpu_kernel_on_simulated_trees(
    cl_device, tmp_path_factory, taxa, columns, seed, gap_model
):
    sim = simulate(taxa + 2, columns, 2, (20, 30), held_out=2, seed=seed, prefix="t")
    folder = tmp_path_factory.mktemp("sim")
    sim.write(folder / "t.nwk", folder / "r.fasta", folder / "q.fasta")
    data = dataset.load(folder / "t.nwk", folder / "r.fasta")
    (states, flags), (want_states, want_flags) = _device_and_cpu(cl_device, data, gap_model)
    assert np.array_equal(states, want_states) and np.array_equal(flags, want_flags)


def test_device_profiles_rescale_tiny_likelihoods_alike(cl_device):
    """The deep caterpillar of :func:`test_tiny_likelihoods_are_rescaled_alike` on the
    device: the rescaled likelihoods give the CPU kernel's flags."""
    n = 600
    newick = "(" * (n - 1) + "t0:9,t1:9):9" + "".join(f",t{k}:9):9" for k in range(2, n - 1))
    newick += f",t{n - 1}:9);"
    rng = np.random.default_rng(3)
    rows = [(f"t{k}", "".join(rng.choice(list("ACGT----"), 40))) for k in range(n)]
    data = dataset.load(newick, rows)
    for gap_model in ("likelihood", "cgap"):
        (states, flags), (want_states, want_flags) = _device_and_cpu(cl_device, data, gap_model)
        assert np.array_equal(states, want_states) and np.array_equal(flags, want_flags)


def test_a_gpu_computes_the_profiles_a_cpu_device_leaves_them_to_numba(cl_device):
    from dpalign.engine import get_backend
    from dpalign.kernels_cl.capabilities import capabilities
    from dpalign.kernels_cl.context import choose_device

    backend = get_backend("opencl", device=cl_device)
    is_cpu = capabilities(choose_device(cl_device)[1]).is_cpu
    assert (backend.profile_device() is None) == is_cpu
    assert is_cpu or backend.profile_device() is backend
