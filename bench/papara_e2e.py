"""`dpalign papara` end to end at the 1604.PRANK shape: the whole command, a fresh process each run.

Writes ``prank_like(1.0)`` (802 taxa x 3,060 columns, 16,040 reads) and ``prank_like(4)``
(3,208 taxa, 64,160 reads; ``--taxa-scale 1`` keeps the 802 taxa) to files, then runs the CLI
as a user would, once per backend to warm the disk and kernel caches and then ``--repeat`` times
in cold processes, and records each run's wall time (measured outside the process) and its phase
split (from ``--report``)::

    OUT=/tmp/out python bench/papara_e2e.py                 # H100: opencl, auto, numba (16 threads)
    OUT=/tmp/out python bench/papara_e2e.py --quick         # here: a small shape on numba and PoCL

``--vs FOLDER`` runs a second source tree (another commit's ``dpalign``, e.g. ``git archive
main | tar -x -C FOLDER``) in turn with this one, run for run (A B A B ...), and checks that both
write the same bytes::

    OUT=/tmp/out python bench/papara_e2e.py --scales 1 --vs /tmp/main --repeat 4

``--env-a NAME=VALUE`` sets a variable for this tree's runs only (A), so that a setting can be
tried against the same tree (``--vs .``).

Results: ``$OUT/papara_e2e_<scales>_<backends>.json`` (one entry per run, with the run's
``--report`` timeline) and a line per run on standard output, then the last run's timeline of
each backend and tree (seconds since the process started: phases, batches, warm-up steps).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _write_shape(scale: float, folder: Path, taxa_scale: float | None = None) -> dict:
    from dpalign.benchmarks.workloads import prank_like

    folder.mkdir(parents=True, exist_ok=True)
    paths = {k: folder / name for k, name in (("tree", "tree.nwk"), ("msa", "ref.fasta"))}
    paths["reads"] = folder / "reads.fasta"
    if not all(p.exists() for p in paths.values()):
        prank_like(scale, taxa_scale=taxa_scale).write(paths["tree"], paths["msa"], paths["reads"])
    return paths


def _run(
    paths: dict,
    backend: str,
    threads: int | None,
    folder: Path,
    tag: str,
    tree: Path = ROOT,
    extra: tuple[str, ...] = (),
    env_extra: dict | None = None,
) -> dict:
    report = folder / f"{tag}.json"
    out = folder / f"{tag}.phy"
    argv = [sys.executable, "-m", "dpalign.cli", "papara", "--ref", str(paths["tree"])]
    argv += ["--msa", str(paths["msa"]), "--reads", str(paths["reads"]), "--out", str(out)]
    argv += ["--backend", backend, "--report", str(report), "--no-progress"]
    if threads:
        argv += ["--threads", str(threads)]
    argv += list(extra)
    env = {**os.environ, **(env_extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    # run in the tree: ``python -m`` puts the working directory ahead of PYTHONPATH
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tree)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        return {"backend": backend, "error": done.stderr.strip()[-2000:], "wall_s": wall}
    data = json.loads(report.read_text())
    return {
        "backend": backend,
        "tree": str(tree),
        "output_sha1": hashlib.sha1(out.read_bytes()).hexdigest(),
        "threads": threads,
        "wall_s": round(wall, 3),
        "in_process_s": round(data["seconds"], 3),
        "phases_s": {k: round(v["seconds"], 3) for k, v in data["phases"].items()},
        "scoring_gcups": round(data["phases"].get("scoring", {}).get("gcups", 0.0), 1),
        "settings": data["settings"],
        "workers": data.get("workers", []),
        "timeline": data.get("timeline", []),
        "log_tail": done.stderr.strip()[-4000:],
        "summary": done.stderr.strip().splitlines()[-1],
    }


def timeline_text(run: dict, width: int = 100) -> str:
    """A run's timeline (``--report``'s, seconds since the process started), a line each,
    with the wall time measured outside the process last."""
    lines = []
    for e in run.get("timeline", []):
        end = f"-{e['end_s']:6.3f}" if "end_s" in e else " " * 7
        lines.append(f"    {e['start_s']:6.3f}{end}  {e['event']}"[:width])
    lines.append(f"    {run.get('wall_s', 0):6.3f}         process ended (wall, outside)")
    return "\n".join(lines)


def _summary(results: list[dict], scale: float, backend: str) -> None:
    """Median wall time per tree, and whether every run wrote the same bytes."""
    import statistics

    runs = [
        r
        for r in results
        if r.get("scale") == scale and r.get("backend") == backend and "wall_s" in r
        if not r.get("warmup") and "error" not in r
    ]
    labels = sorted({r["label"] for r in runs})
    medians = {
        label: statistics.median(r["wall_s"] for r in runs if r["label"] == label)
        for label in labels
    }
    same = len({r["output_sha1"] for r in runs}) == 1
    text = ", ".join(f"{label} median wall {m:.2f} s" for label, m in medians.items())
    print(f"prank_like({scale:g}) {backend}: {text}; outputs identical: {same}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small shape, numba and PoCL")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per backend and shape")
    parser.add_argument("--threads", type=int, default=16, help="threads for --backend numba")
    parser.add_argument("--scales", default=None, help="comma-separated prank_like scales")
    parser.add_argument(
        "--taxa-scale",
        type=float,
        default=None,
        help="scale the taxa by this instead of by each scale (1: reads x scale on the PRANK tree)",
    )
    parser.add_argument("--backends", default=None, help="comma-separated (default by mode)")
    parser.add_argument("--data", default=None, help="folder for the inputs (default: temp)")
    parser.add_argument(
        "--vs", default=None, help="a second source tree to run in turn with this one (A/B)"
    )
    parser.add_argument(
        "--env-a",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for this tree's runs only (A), e.g. a setting tried "
        "against the same tree as B (--vs .)",
    )
    args = parser.parse_args()
    env_a = dict(item.split("=", 1) for item in args.env_a)
    out = Path(os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    scales = [float(s) for s in (args.scales or ("0.05" if args.quick else "1,4")).split(",")]
    backends = (args.backends or ("numba,opencl" if args.quick else "opencl,auto,numba")).split(",")
    repeat = 1 if args.quick and args.repeat == 3 else args.repeat
    # one file per (scales, backends) selection, so that split calls do not overwrite each other
    taxa = "" if args.taxa_scale is None else f"_taxa{args.taxa_scale:g}"
    name = f"{'-'.join(f'{s:g}' for s in scales)}{taxa}_{'-'.join(backends)}"
    target = out / f"papara_e2e_{name}.json"
    results: list[dict] = []
    trees = [("A", ROOT)] + ([("B", Path(args.vs).resolve())] if args.vs else [])
    with tempfile.TemporaryDirectory(prefix="papara_e2e.") as tmp:
        data_root = Path(args.data).resolve() if args.data else Path(tmp)
        for scale in scales:
            t0 = time.perf_counter()
            paths = _write_shape(scale, data_root / f"prank_{scale:g}{taxa}", args.taxa_scale)
            took = time.perf_counter() - t0
            print(f"prank_like({scale:g}{taxa}) written in {took:.1f} s", flush=True)
            for backend in backends:
                threads = args.threads if backend == "numba" else None
                for label, tree in trees:
                    tag = f"prank{scale:g}_{backend}_{label}"
                    env = env_a if label == "A" else None
                    warm = _run(paths, backend, threads, Path(tmp), tag, tree, env_extra=env)
                    if "error" in warm:
                        print(f"  {label} {backend}: failed: {warm['error'][-300:]}", flush=True)
                        results.append({"scale": scale, "warmup": True, "label": label, **warm})
                for k in range(repeat):
                    for label, tree in trees:
                        tag = f"prank{scale:g}_{backend}_{label}"
                        run = {
                            "scale": scale,
                            "repeat": k,
                            "label": label,
                            **_run(
                                paths,
                                backend,
                                threads,
                                Path(tmp),
                                tag,
                                tree,
                                env_extra=env_a if label == "A" else None,
                            ),
                        }
                        results.append(run)
                        if "error" in run:
                            print(f"  {label} {backend}: failed: {run['error'][-300:]}")
                            continue
                        phases = " ".join(
                            f"{p} {s:.2f}" for p, s in run.get("phases_s", {}).items()
                        )
                        print(
                            f"  {label} {backend:7s} run {k}: wall {run['wall_s']:.2f} s, in "
                            f"process {run['in_process_s']:.2f} s (scoring "
                            f"{run.get('scoring_gcups', 0):.0f} GCUPS; {phases})",
                            flush=True,
                        )
                        if k == repeat - 1 and run.get("timeline"):
                            print(timeline_text(run), flush=True)
                        target.write_text(json.dumps(results, indent=2) + "\n")
                _summary(results, scale, backend)
    target.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
