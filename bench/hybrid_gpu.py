"""The hybrid CPU+GPU queue on a GPU machine: one run each of CPU-only, GPU-only and hybrid.

Usage (on the device, after DEVICE.md's prelude)::

    python3 bench/hybrid_gpu.py all --out $OUT [--scale 1.0] [--cpu 16]

Steps (each appends JSON lines to ``$OUT/hybrid.jsonl``):

* ``golden``: every golden case and mode through ``dpalign papara --backend opencl`` on the
  first GPU (and ``--backend hybrid`` on two cases), compared byte for byte;
* ``hybrid``: the 1604.PRANK-shaped scoring phase (802 taxa, 1,601 edges x 3,060 columns,
  16,040 reads of ~100 bp) on ``--cpu`` Numba threads alone, on one GPU alone, and on both
  through the hybrid queue; the criterion is hybrid >= 0.95 x (CPU-only + GPU-only), first
  full runs against each other (GPU profiles laid out: "cold") and second runs ("warm"); also the
  CPU time of the GPU worker's thread while it waits (< 5 % of a core);
* ``gpus``: one GPU against every GPU through the hybrid queue (no CPU workers), and all GPUs
  plus the CPU workers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def emit(out: Path, record: dict) -> None:
    record["time"] = time.strftime("%H:%M:%S")
    print(json.dumps(record), flush=True)
    with open(out / "hybrid.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")


def golden(out: Path, device: str, only: str | None = None, jobs: int = 8) -> None:
    """Every golden case and mode through the CLI on the device, compared byte for byte."""
    from concurrent.futures import ThreadPoolExecutor

    for cases in (
        ROOT / ".golden",
        ROOT.parent / "shared" / "golden" / "papara",
        ROOT / "tests" / "data" / "golden",
    ):
        if cases.is_dir():
            break
    modes = [
        ("default.phy", []),
        ("cgap.phy", ["--gap-model", "cgap"]),
        ("noref.phy", ["--no-ref-gaps"]),
        ("fasta.fasta", ["--format", "fasta"]),
    ]
    runs = []
    for case in sorted(p for p in cases.iterdir() if (p / "tree.nwk").exists()):
        if only and only not in case.name:
            continue
        for expected, extra in modes:
            if not (case / expected).exists():
                continue
            hybrid = ["hybrid"] if case.name in ("tiny_01", "medium_01", "bench_papara") else []
            for backend in ["opencl", *hybrid]:
                argv = [
                    sys.executable,
                    "-m",
                    "dpalign.cli",
                    "papara",
                    "--ref",
                    str(case / "tree.nwk"),
                    "--msa",
                    str(case / "ref.phy"),
                    "--reads",
                    str(case / "queries.fa"),
                    "--backend",
                    backend,
                    "--device",
                    device,
                    "--no-progress",
                    *extra,
                ]
                if (case / "PROTEIN").exists():
                    argv.append("--protein")
                runs.append((case, expected, backend, argv))

    def check(run) -> bool:
        case, expected, backend, argv = run
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        same = done.returncode == 0 and done.stdout == (case / expected).read_text()
        emit(
            out,
            {
                "step": "golden",
                "case": case.name,
                "mode": expected,
                "backend": backend,
                "identical": same,
                "seconds": round(time.perf_counter() - t0, 2),
                "stderr": "" if same else done.stderr[-300:],
            },
        )
        return same

    results = [check(runs[0])] if runs else []  # first alone: compiles the Numba kernels
    with ThreadPoolExecutor(jobs) as pool:
        results += list(pool.map(check, runs[1:]))
    emit(
        out,
        {
            "step": "golden-summary",
            "cases_from": str(cases),
            "identical": sum(results),
            "total": len(results),
        },
    )


def _workload(scale: float):
    import logging

    from dpalign.benchmarks.workloads import prank_like
    from dpalign.engine import Task, query_batch
    from dpalign.papara import dataset, profiles
    from dpalign.papara.placement import profile_blocks
    from dpalign.scoring import PaparaScoring

    logging.disable(logging.WARNING)
    sim = prank_like(scale)
    data = dataset.load(sim.newick, sim.msa, sim.reads)
    states, flags = profiles.dataset_profiles(data)
    reads = [r for r in data.reads if len(r)]
    queries = query_batch(reads, dtype=states.dtype)
    blocks = profile_blocks(states, flags)
    cells = queries.residues * states.shape[0] * states.shape[1]
    return Task("papara", PaparaScoring()), queries, blocks, cells, states.shape


def _timed(backend, task, queries, blocks):
    t0 = time.perf_counter()
    results = backend.score(task, queries, blocks)
    seconds = time.perf_counter() - t0
    return np.concatenate([r.scores for r in results], axis=1), seconds


def _warm(backend, task, queries, blocks) -> None:
    backend.score(task, queries.subset(slice(0, 64)), blocks[:4])  # compile, upload


def hybrid(out: Path, scale: float, cpu: int, gpus: list[str], shares=(0.95,)) -> None:
    from dpalign.engine import get_backend

    task, queries, blocks, cells, shape = _workload(scale)
    emit(
        out,
        {
            "step": "workload",
            "edges": shape[0],
            "columns": shape[1],
            "reads": len(queries),
            "cells": cells,
            "gpus": gpus,
            "cpu_workers": cpu,
            "cores": os.cpu_count(),
        },
    )
    numba = get_backend("numba", threads=cpu)
    gpu = get_backend("opencl", device=gpus[0])
    _warm(numba, task, queries, blocks)
    _warm(gpu, task, queries, blocks)
    cpu_scores, cpu_s = _timed(numba, task, queries, blocks)
    emit(out, {"step": "cpu-only", "seconds": cpu_s, "gcups": cells / cpu_s / 1e9})
    # Twice, like the hybrid below: the first full run lays out and uploads every profile
    # ("cold"); the second finds them on the device, as a library session's later calls do.
    gpu_scores, gpu_cold_s = _timed(gpu, task, queries, blocks)
    kernel_before = sum(w.seconds for w in gpu.stats.workers.values())
    _, gpu_s = _timed(gpu, task, queries, blocks)
    gpu_kernel_s = sum(w.seconds for w in gpu.stats.workers.values()) - kernel_before
    emit(
        out,
        {
            "step": "gpu-only",
            "seconds": gpu_s,
            "gcups": cells / gpu_s / 1e9,
            "cold_seconds": gpu_cold_s,
            "cold_gcups": cells / gpu_cold_s / 1e9,
            "kernel_seconds": gpu_kernel_s,
            "identical_to_cpu": bool((gpu_scores == cpu_scores).all()),
        },
    )
    expected = cells / cpu_s / 1e9 + cells / gpu_s / 1e9
    expected_cold = cells / cpu_s / 1e9 + cells / gpu_cold_s / 1e9
    from dpalign import config

    for workers, share in [(w, sh) for w in (cpu, cpu - 1) for sh in shares]:
        config.HYBRID_DEVICE_SHARE = share
        hyb = get_backend("hybrid", devices=[gpus[0]], cpu_workers=workers)
        _warm(hyb, task, queries, blocks)
        hyb._rates.clear()  # the first full run starts cold: no throughput known
        hyb.stats.workers.clear()
        _, cold_s = _timed(hyb, task, queries, blocks)
        cold_takes = [t for t in hyb.last_queue.log if t[2] == "front"]
        cold_timings = [c.timings[:] for c in hyb._children.values()]
        for child in hyb._children.values():
            child.timings.clear()
        hyb.stats.workers.clear()  # the second run opens with the rates the first measured
        scores, hyb_s = _timed(hyb, task, queries, blocks)
        report = hyb.stats.as_dict()
        fields = (
            "share",
            "thread_cpu_seconds",
            "kernel_seconds",
            "wait_seconds",
            "wait_cpu_seconds",
        )
        gpu_threads = [w for w in report["workers"] if w["name"].startswith("gpu-0")]
        gpu_worker = {f: sum(w[f] for w in gpu_threads) for f in fields}
        emit(
            out,
            {
                "step": "hybrid",
                "cpu_workers": workers,
                "device_share": share,
                "seconds": hyb_s,
                "cold_seconds": cold_s,
                "cold_ratio_to_sum": cells / cold_s / 1e9 / expected_cold,
                "gcups": cells / hyb_s / 1e9,
                "ratio_to_sum": cells / hyb_s / 1e9 / expected,
                "identical_to_cpu": bool((scores == cpu_scores).all()),
                "gpu_share": gpu_worker["share"],
                "gpu_thread_cpu_fraction": gpu_worker["thread_cpu_seconds"]
                / max(gpu_worker["kernel_seconds"], 1e-9),
                "gpu_wait_seconds": gpu_worker["wait_seconds"],
                "gpu_wait_cpu_fraction": gpu_worker["wait_cpu_seconds"]
                / max(gpu_worker["wait_seconds"], 1e-9),
                "workers": report["workers"] if workers == cpu else None,
                "takes_front": [t for t in hyb.last_queue.log if t[2] == "front"][:12],
                "device_timings": [c.timings for c in hyb._children.values()],
                "cold_takes_front": cold_takes[:12],
                "cold_device_timings": cold_timings,
                "takes_back": len([t for t in hyb.last_queue.log if t[2] == "back"]),
                "first_back": [t for t in hyb.last_queue.log if t[2] == "back"][:3],
                "last_back": [t for t in hyb.last_queue.log if t[2] == "back"][-3:],
            },
        )


def all_gpus(out: Path, scale: float, cpu: int, found: list[str]) -> None:
    from dpalign.engine import get_backend

    task, queries, blocks, cells, _ = _workload(scale)
    one = get_backend("opencl", device=found[0])
    _warm(one, task, queries, blocks)
    base, one_cold_s = _timed(one, task, queries, blocks)
    _, one_s = _timed(one, task, queries, blocks)  # warm: the profiles already on the GPU
    emit(
        out,
        {
            "step": "one-gpu",
            "seconds": one_s,
            "gcups": cells / one_s / 1e9,
            "cold_seconds": one_cold_s,
        },
    )
    for workers in (0, cpu):
        hyb = get_backend("hybrid", devices=list(found), cpu_workers=workers)
        _warm(hyb, task, queries, blocks)
        hyb._rates.clear()
        hyb.stats.workers.clear()
        _, cold_s = _timed(hyb, task, queries, blocks)
        hyb.stats.workers.clear()
        scores, secs = _timed(hyb, task, queries, blocks)
        emit(
            out,
            {
                "step": "all-gpus",
                "gpus": len(found),
                "cpu_workers": workers,
                "seconds": secs,
                "gcups": cells / secs / 1e9,
                "speedup_over_one_gpu": one_s / secs,
                "cold_seconds": cold_s,
                "cold_speedup_over_one_gpu": one_cold_s / cold_s,
                "identical": bool((scores == base).all()),
                "shares": {w["name"]: round(w["share"], 3) for w in hyb.stats.as_dict()["workers"]},
                "takes_front": [t for t in hyb.last_queue.log if t[2] == "front"],
                "device_timings": [c.timings for c in hyb._children.values()],
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["golden", "hybrid", "gpus", "all"])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--cpu", type=int, default=16)
    parser.add_argument(
        "--shares",
        default="",
        help="hybrid: HYBRID_DEVICE_SHARE values to compare, comma-separated (default: config)",
    )
    parser.add_argument("--cases", help="golden: only cases whose name contains this")
    parser.add_argument(
        "--devices", nargs="*", help="OpenCL device ids to use as 'GPUs' (default: every GPU)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from dpalign.hybrid.backend import gpu_selectors

    devices = args.devices or gpu_selectors()
    if args.step in ("golden", "all"):
        golden(args.out, devices[0], args.cases)
    if args.step in ("hybrid", "all"):
        from dpalign import config

        shares = [float(x) for x in args.shares.split(",") if x] or [config.HYBRID_DEVICE_SHARE]
        hybrid(args.out, args.scale, args.cpu, devices, shares)
    if args.step in ("gpus", "all"):
        all_gpus(args.out, args.scale, args.cpu, devices)


if __name__ == "__main__":
    main()
