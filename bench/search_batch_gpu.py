"""Issue 13 on the GPU: the whole ``dpalign search`` command, this tree against an older one.

1,000 UniProt-like proteins (50-1,000 aa) against ``workloads.protein_database(200_000)``,
BLOSUM62, a gap of k costing 11 + k, ``--backend opencl``, each run a fresh
``python -m dpalign.cli search`` process timed from outside, with ``--report`` for its phases
(read, pack, jit, search, traceback). Runs, in this order (a run that would pass
``--time-limit`` is skipped, so the first ones are the ones that matter):

* ``new-local-cold``: this tree, empty kernel caches (dpalign's OpenCL binaries, NVIDIA's
  and PoCL's caches, Numba's cache); the programs it built and Numba's cache files are
  counted afterwards;
* ``new-local-warm``, ``new-global`` (its first global run: global programs built in it),
  ``old-local-cold`` and ``old-local-warm`` (the tree given by ``--old-tree``, with caches of
  its own), ``new-semiglobal``, ``new-global-warm``.

``--alternate`` runs the two trees turn about instead, each run of the new tree followed by
the same run of the old one (cold local, warm local, first global, warm global, semiglobal,
then warm global with 250-query chunks, a second warm local and global, and warm global with
4 layout threads, and a first global run with empty OpenCL caches building all its programs
itself, on threads, then warm global and semiglobal runs with the results in page-locked
memory, each followed by a plain one; the setting runs by the new tree alone): the pairs are
compared under the same conditions, and every pair's hit files are compared byte for byte
(``same_hits_as_old``).

Figures per run: ``wall_s`` and ``gcups_wall`` (cells / wall), ``phases``, ``gcups_search``
(cells / the search phase). One JSON object per run in ``$OUT/search_batch_gpu.jsonl``,
a table on stdout.

    git archive main | (mkdir -p old_main && tar -x -C old_main)   # here, before the run
    python bench/search_batch_gpu.py --old-tree old_main            # the GPU host, < 4 min
    python bench/search_batch_gpu.py --old-tree old_main --alternate
    python bench/search_batch_gpu.py --quick                        # PoCL: 3 x 1,000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_e2e import SCORING, query_set, write_fasta  # noqa: E402
from search_e2e import run_one as search_e2e_run  # noqa: E402

from dpalign.benchmarks import workloads  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHES = {
    "dpalign": "DPALIGN_CACHE_DIR",
    "cuda": "CUDA_CACHE_PATH",
    "pocl": "POCL_CACHE_DIR",
    "numba": "NUMBA_CACHE_DIR",
}


#: ``--alternate``: (run, extra arguments), each run by the new tree, then the old one.
ALTERNATE = [
    ("local-cold", []),
    ("local-warm", []),
    ("global", ["--mode", "global"]),
    ("global-warm", ["--mode", "global"]),
    ("semiglobal", ["--mode", "semiglobal"]),
    ("global-warm-c250", ["--mode", "global"]),
    ("local-warm2", []),
    ("global-warm2", ["--mode", "global"]),
    ("global-warm-lt4", ["--mode", "global"]),
    ("global-threads", ["--mode", "global"]),
    ("global-warm-pinned", ["--mode", "global"]),
    ("global-warm3", ["--mode", "global"]),
    ("semiglobal-pinned", ["--mode", "semiglobal"]),
    ("semiglobal2", ["--mode", "semiglobal"]),
]
#: Runs of the new tree alone (a setting the old tree does not have).
NEW_ONLY = {
    "global-warm-c250", "global-warm-lt4", "global-threads", "global-warm-pinned",
    "semiglobal-pinned",
}  # fmt: skip
#: Environment of some runs: 250-query chunks (the old tree's size); 4 layout threads; a
#: first global run (empty OpenCL caches of its own: FRESH) building every program in its
#: own process, on threads (no child processes).
FRESH = "<fresh folder>"
RUN_ENV = {
    "global-warm-c250": {"DPALIGN_OPENCL_SEARCH_CHUNK_SCORES": "50000000"},
    "global-warm-lt4": {"DPALIGN_OPENCL_SEARCH_LAYOUT_THREADS": "4"},
    "global-warm-pinned": {"DPALIGN_OPENCL_SEARCH_PINNED": "1"},
    "semiglobal-pinned": {"DPALIGN_OPENCL_SEARCH_PINNED": "1"},
    "global-threads": {
        "DPALIGN_OPENCL_BUILD_PROCESSES": "0",
        "DPALIGN_CACHE_DIR": FRESH,
        "CUDA_CACHE_PATH": FRESH,
        "POCL_CACHE_DIR": FRESH,
    },
}


def tree_env(tree: Path, work: Path, label: str) -> dict:
    """The environment of one tree's runs: its code first on the path, caches of its own
    (empty until its first run)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    for name, var in CACHES.items():
        folder = work / f"{label}-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        env[var] = str(folder)
    return env


def run_one(name, tree: Path, argv, env, cells, out_dir: Path, timeout: float) -> dict:
    """:func:`search_e2e.run_one` from ``tree``, with ``-v``, the hit file kept (the runs'
    hits are compared) and the report's workers and traceback path."""

    def more(report: dict) -> dict:
        return {"workers": report.get("workers"), "traceback": report["settings"].get("traceback")}

    row = search_e2e_run(
        name, argv, env, cells, out_dir, timeout, cwd=tree, verbose=True, keep_hits=True,
        tail=4000, more=more,
    )  # fmt: skip
    return {"name": name, "tree": str(tree), **row}


def same_hits(a: Path, b: Path) -> bool | None:
    if not (a.exists() and b.exists()):
        return None
    return a.read_bytes() == b.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-tree", default=None, help="the tree to compare against")
    parser.add_argument("--quick", action="store_true", help="3 queries x 1,000 (PoCL)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="results folder")
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--targets", type=int, default=None)
    parser.add_argument("--time-limit", type=float, default=230.0, help="seconds in all")
    parser.add_argument("--only", nargs="*", default=None, help="run only these names")
    parser.add_argument(
        "--alternate", action="store_true", help="new and old tree turn about (see above)"
    )
    args = parser.parse_args()
    t0 = time.perf_counter()
    n_q = args.queries or (3 if args.quick else 1000)
    n_t = args.targets or (1000 if args.quick else 200_000)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="search_batch_"))
    db_res = write_fasta(work / "db.fa", workloads.protein_database(n_t))
    q_res = write_fasta(work / "queries.fa", query_set(n_q))
    cells = q_res * db_res
    print(f"workload: {n_q} x {n_t} ({cells:.3e} cells) in {time.perf_counter() - t0:.1f} s")
    files = ["--query", str(work / "queries.fa"), "--db", str(work / "db.fa"), *SCORING]
    files += ["--backend", "opencl"]
    new, old = ROOT, Path(args.old_tree).resolve() if args.old_tree else None
    envs = {"new": tree_env(new, work, "new")}
    if old is not None:
        envs["old"] = tree_env(old, work, "old")
    runs = [
        ("new-local-cold", "new", []),
        ("new-local-warm", "new", []),
        ("new-global", "new", ["--mode", "global"]),
        ("old-local-cold", "old", []),
        ("old-local-warm", "old", []),
        ("new-semiglobal", "new", ["--mode", "semiglobal"]),
        ("new-global-warm", "new", ["--mode", "global"]),
    ]
    if args.alternate:
        runs = [
            (f"{tree}-{name}", tree, extra)
            for name, extra in ALTERNATE
            for tree in ("new", "old")
            if name not in NEW_ONLY or tree == "new"
        ]
    results = out_dir / "search_batch_gpu.jsonl"
    with open(results, "a") as fh:
        fh.write(json.dumps({"name": "workload", "queries": n_q, "targets": n_t,
                             "query_residues": q_res, "db_residues": db_res}) + "\n")  # fmt: skip
    print(
        f"{'run':18} {'rc':>7} {'wall s':>8} {'GCUPS':>8} {'search s':>9} {'GCUPS':>8} "
        f"{'read':>6} {'pack':>6} {'jit':>6} {'trace':>6} {'kernels':>7}",
        flush=True,
    )
    for name, tree_label, extra in runs:
        if tree_label not in envs or (args.only is not None and name not in args.only):
            continue
        left = args.time_limit - (time.perf_counter() - t0)
        if left < 10:
            print(f"{name}: skipped, the time limit is spent", flush=True)
            continue
        tree = new if tree_label == "new" else old
        env = {**envs[tree_label], **RUN_ENV.get(name.split("-", 1)[1], {})}
        env = {k: tempfile.mkdtemp(prefix=f"{k}_", dir=work) if v == FRESH else v
               for k, v in env.items()}  # fmt: skip
        row = run_one(name, tree, [*files, *extra], env, cells, out_dir, left)
        if name == "new-local-cold":  # what an empty cache cost: programs built, Numba files
            env = envs["new"]
            row["opencl_binaries"] = len(list(Path(env["DPALIGN_CACHE_DIR"]).rglob("*.bin")))
            row["numba_index_files"] = len(list(Path(env["NUMBA_CACHE_DIR"]).rglob("*.nbi")))
        if name == "old-local-warm":
            row["same_hits_as_new"] = same_hits(
                out_dir / "new-local-warm.tsv", out_dir / "old-local-warm.tsv"
            )
        if args.alternate and tree_label == "old":
            row["same_hits_as_new"] = same_hits(
                out_dir / f"new-{name[4:]}.tsv", out_dir / f"{name}.tsv"
            )
        with open(results, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        p = row.get("phases", {})
        kernels = sum(w.get("kernel_seconds", 0) for w in row.get("workers") or [])
        same = {True: "same", False: "DIFF", None: ""}[row.get("same_hits_as_new")]
        print(
            f"{name:18} {row['rc']!s:>7} {row['wall_s']:>8.2f} {row.get('gcups_wall', 0):>8.1f} "
            f"{p.get('search', 0):>9.2f} {row.get('gcups_search', 0):>8.1f} "
            f"{p.get('read', 0):>6.2f} {p.get('pack', 0):>6.2f} {p.get('jit', 0):>6.2f} "
            f"{p.get('traceback', 0):>6.2f} {kernels:>7.2f} {same}",
            flush=True,
        )
        if row["rc"] != 0:
            print(row.get("stderr_tail", ""), file=sys.stderr, flush=True)
    for tsv in out_dir.glob("*.tsv"):
        if tsv.stat().st_size > 2_000_000:
            tsv.unlink()  # keep what comes back small
    print(f"all done in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
