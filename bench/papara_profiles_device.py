"""PaPaRa's edge profiles on the OpenCL device against the CPU kernel: the same bytes, and how
long each takes (the device's first call builds or loads its program).

Runs the 1604.PRANK shape (``workloads.prank_like(1.0)``'s tree and reference) and the golden
cases bundled in ``tests/data/golden``, both gap models, on ``--device`` (default: the first
GPU, else the first device)::

    python bench/papara_profiles_device.py            # prints a line per case; exit 1 on a mismatch
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _inputs(folder: Path):
    from dpalign.benchmarks.workloads import prank_like

    paths = (folder / "tree.nwk", folder / "ref.fasta", folder / "reads.fasta")
    prank_like(1.0).write(*paths)
    yield "prank_like(1)", paths[0], paths[1], False
    for case in sorted((ROOT / "tests" / "data" / "golden").iterdir()):
        if (case / "ref.phy").exists():
            yield case.name, case / "tree.nwk", case / "ref.phy", (case / "PROTEIN").exists()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default=None, help="OpenCL device spec (default: the first GPU)"
    )
    args = parser.parse_args()
    from dpalign.kernels_cl.context import device_context
    from dpalign.kernels_cl.papara import edge_profiles
    from dpalign.papara import dataset, profiles

    dctx = device_context(args.device)
    print(dctx.describe(), "fp64:", "cl_khr_fp64" in dctx.device.extensions, flush=True)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, tree, msa, protein in _inputs(Path(tmp)):
            data = dataset.load(tree, msa, protein=protein)
            tips = {node: data.ref_states[row] for node, row in data.tip_rows.items()}
            nodes, ops, trans = profiles.combine_schedule(data.tree, data.gap_fraction)
            rows = np.stack([tips[node] for node in nodes])
            for gap_model in ("likelihood", "cgap"):
                cgap = gap_model == "cgap"
                times = []
                for _ in range(2):  # the first call builds (or loads) the program
                    t0 = time.perf_counter()
                    got = edge_profiles(
                        dctx, rows, data.alphabet.gap, ops, trans, len(data.tree.edges), cgap
                    )
                    times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                want = profiles.edge_profiles(
                    data.tree, tips, data.alphabet.gap, data.gap_fraction, gap_model
                )
                cpu = time.perf_counter() - t0
                same = got is not None and all(
                    np.array_equal(a, b) for a, b in zip(got, want, strict=True)
                )
                bad += not same
                print(
                    f"{name:22s} {gap_model:10s} {len(data.tree.edges):5d} edges x "
                    f"{rows.shape[1]:5d} columns: same {same}; device {times[0]:.4f} s first, "
                    f"{times[1]:.4f} s again; CPU kernel {cpu:.4f} s",
                    flush=True,
                )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
