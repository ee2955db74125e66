"""``dpalign search`` end to end: the whole command, in fresh processes, as a user runs it.

Issue 13's workloads: 1,000 protein queries of 50-1,000 aa (UniProt-like lengths) against
``workloads.protein_database(200_000)``, BLOSUM62, a gap of k costing 11 + k; local with an
empty and then a warm kernel cache, then global and semiglobal (warm); and ``--backend numba``
on the same kind of data scaled down (``--numba-queries`` against ``--numba-targets``), with
an empty and a warm Numba cache. Each run is one ``python -m dpalign.cli search`` process
timed from outside (start-up, reading, packing, kernel loading, searching, traceback and
writing all included) with ``--report`` for its phase times. One JSON object per run goes to
``$OUT/search_e2e.jsonl`` (``--out`` overrides), and a table to stdout.

Figures per run: ``wall_s`` (the process, from outside), ``gcups_wall`` (cells / wall_s),
``phases`` (read, pack, jit, search, traceback: seconds from the report), ``gcups_search``
(cells / the search phase).

    python bench/search_e2e.py                    # the H100 runs (OpenCL), a few minutes
    python bench/search_e2e.py --quick            # small sizes, any OpenCL device (PoCL)
    python bench/search_e2e.py --only numba-warm  # some runs by name (see --list)

An "empty kernel cache" run points ``DPALIGN_CACHE_DIR`` (dpalign's OpenCL binaries),
``CUDA_CACHE_PATH`` (NVIDIA's PTX-to-SASS cache) and ``POCL_CACHE_DIR`` at new empty folders;
the warm runs reuse them. Numba's cold run uses an empty ``NUMBA_CACHE_DIR`` likewise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpalign.benchmarks import workloads

ROOT = Path(__file__).resolve().parent.parent
SCORING = ["--matrix", "BLOSUM62", "--gap-open", "11", "--gap-extend", "1"]
FULL = {"queries": 1000, "targets": 200_000, "numba_queries": 100, "numba_targets": 50_000}
QUICK = {"queries": 3, "targets": 1_000, "numba_queries": 3, "numba_targets": 2_000}


def query_set(n: int, seed: int = 1000) -> list[tuple[str, str]]:
    """``n`` proteins of 50-1,000 aa with UniProt-like lengths (the database generator's
    lognormal lengths, kept where they fall in range), named ``q0``, ``q1``..."""
    out: list[tuple[str, str]] = []
    size = 2 * n
    while len(out) < n:
        pool = workloads.protein_database(size, seed=seed)
        out = [(f"q{k}", s) for k, (_, s) in enumerate(p for p in pool if 50 <= len(p[1]) <= 1000)]
        size *= 2
    return [(f"q{k}", s) for k, (_, s) in enumerate(out[:n])]


def write_fasta(path: Path, records) -> int:
    """Write records; return their residues."""
    with open(path, "w") as fh:
        for name, seq in records:
            fh.write(f">{name}\n{seq}\n")
    return sum(len(s) for _, s in records)


def run_one(
    name: str,
    argv: list[str],
    env: dict,
    cells: int,
    out_dir: Path,
    timeout: float,
    cwd: Path = ROOT,
    verbose: bool = False,
    keep_hits: bool = False,
    tail: int = 2000,
    more=None,
) -> dict:
    """One ``dpalign search`` process run from ``cwd``, timed from outside; its row.

    ``verbose`` adds ``-v`` (the search's own timings in ``stderr_tail``, the last ``tail``
    characters of standard error), ``keep_hits`` keeps the hit file, and ``more(report)``
    gives fields of the run's report to add to the row.
    """
    report = out_dir / f"{name}.report.json"
    hits = out_dir / f"{name}.tsv"
    cmd = [sys.executable, "-m", "dpalign.cli", "search", *argv]
    cmd += ["--out", str(hits), "--report", str(report), "--no-progress"]
    cmd += ["-v"] if verbose else []
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, cwd=cwd, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        wall = time.perf_counter() - start
        err = (exc.stderr or b"")[-2000:]
        err = err.decode(errors="replace") if isinstance(err, bytes) else err
        return {"name": name, "argv": argv, "rc": "timeout", "wall_s": wall, "cells": cells,
                "gcups_wall": 0.0, "stderr_tail": err}  # fmt: skip
    wall = time.perf_counter() - start
    row: dict = {"name": name, "argv": argv, "rc": proc.returncode, "wall_s": wall}
    row["cells"] = cells
    row["gcups_wall"] = cells / wall / 1e9
    if proc.returncode == 0 and report.exists():
        data = json.loads(report.read_text())
        phases = {k: v["seconds"] for k, v in data["phases"].items()}
        row["phases"] = phases
        row["in_process_s"] = data["seconds"]
        row["gcups_search"] = cells / phases["search"] / 1e9 if phases.get("search") else 0.0
        row["backend"] = data["settings"]["backend"]
        row["hit_rows"] = sum(1 for _ in open(hits))
        row.update(more(data) if more is not None else {})
        report.unlink()
        if not keep_hits:
            hits.unlink()
    row["stderr_tail"] = proc.stderr[-tail:]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a check on PoCL)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for results")
    parser.add_argument("--device", default=None, help="OpenCL device (default: the first GPU)")
    parser.add_argument("--threads", type=int, default=None, help="numba threads (all cores)")
    parser.add_argument("--only", nargs="*", default=None, help="run only these names")
    parser.add_argument("--list", action="store_true", help="list the run names")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=560.0,
        help="seconds for everything (the device tool's 600 s a command, less a margin); "
        "a run still going when it is spent is stopped and recorded as a timeout",
    )
    for key, value in FULL.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, help=f"{value}")
    args = parser.parse_args()
    sizes = dict(QUICK if args.quick else FULL)
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="search_e2e_"))
    caches = {k: work / k for k in ("dpalign", "cuda", "pocl", "numba")}
    for folder in caches.values():
        folder.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(
        DPALIGN_CACHE_DIR=str(caches["dpalign"]),
        CUDA_CACHE_PATH=str(caches["cuda"]),
        POCL_CACHE_DIR=str(caches["pocl"]),
    )
    if args.device:
        env["DPALIGN_OPENCL_DEVICE"] = args.device

    t0 = time.perf_counter()
    db = workloads.protein_database(sizes["targets"])
    queries = query_set(sizes["queries"])
    db_res = write_fasta(work / "db.fa", db)
    q_res = write_fasta(work / "queries.fa", queries)
    small_db = db[: sizes["numba_targets"]]
    small_q = queries[: sizes["numba_queries"]]
    small_db_res = write_fasta(work / "db_small.fa", small_db)
    small_q_res = write_fasta(work / "queries_small.fa", small_q)
    print(f"workloads written in {time.perf_counter() - t0:.1f} s ({work})", file=sys.stderr)

    files = ["--query", str(work / "queries.fa"), "--db", str(work / "db.fa")]
    small = ["--query", str(work / "queries_small.fa"), "--db", str(work / "db_small.fa")]
    threads = ["--threads", str(args.threads)] if args.threads else []
    cells, small_cells = q_res * db_res, small_q_res * small_db_res
    numba_env = {**env, "NUMBA_CACHE_DIR": str(caches["numba"])}
    runs = [
        ("opencl-local-cold", [*files, *SCORING, "--backend", "opencl"], env, cells),
        ("opencl-local-warm", [*files, *SCORING, "--backend", "opencl"], env, cells),
        (
            "opencl-global-warm",
            [*files, *SCORING, "--backend", "opencl", "--mode", "global"],
            env,
            cells,
        ),
        (
            "opencl-semiglobal-warm",
            [*files, *SCORING, "--backend", "opencl", "--mode", "semiglobal"],
            env,
            cells,
        ),
        (
            "opencl-local-warm-outfmt6",
            [*files, *SCORING, "--backend", "opencl", "--outfmt", "6"],
            env,
            cells,
        ),
        ("numba-cold", [*small, *SCORING, "--backend", "numba", *threads], numba_env, small_cells),
        ("numba-warm", [*small, *SCORING, "--backend", "numba", *threads], numba_env, small_cells),
        ("numba-warm2", [*small, *SCORING, "--backend", "numba", *threads], numba_env, small_cells),
    ]
    if args.list:
        print("\n".join(name for name, *_ in runs))
        return
    results = out_dir / "search_e2e.jsonl"
    meta = {"name": "workload", **sizes, "query_residues": q_res, "db_residues": db_res}
    meta["quick"] = args.quick
    with open(results, "a") as fh:
        fh.write(json.dumps(meta) + "\n")
    print(
        f"{'run':28} {'rc':>7} {'wall s':>8} {'GCUPS':>9} {'search s':>9} {'GCUPS':>9} "
        f"{'read':>6} {'jit':>6} {'trace':>6}"
    )
    for name, argv, run_env, run_cells in runs:
        if args.only is not None and name not in args.only:
            continue
        left = args.time_limit - (time.perf_counter() - t0)
        if left < 5:
            print(f"{name}: skipped, the time limit is spent", file=sys.stderr)
            continue
        row = run_one(name, argv, run_env, run_cells, out_dir, left)
        with open(results, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        p = row.get("phases", {})
        print(
            f"{name:28} {row['rc']!s:>7} {row['wall_s']:>8.2f} {row['gcups_wall']:>9.1f} "
            f"{p.get('search', 0):>9.2f} {row.get('gcups_search', 0):>9.1f} "
            f"{p.get('read', 0):>6.2f} {p.get('jit', 0):>6.2f} {p.get('traceback', 0):>6.2f}",
            flush=True,
        )
        if row["rc"]:
            print(row["stderr_tail"], file=sys.stderr)


if __name__ == "__main__":
    main()
