"""The PRANK shape x 2 through `dpalign papara` on one GPU and on two: whole command and scoring.

The 1604.PRANK reference (``prank_like(1.0)``: 802 taxa x 3,060 columns) with its 16,040 reads
written twice (32,080 reads, the second copy renamed), so that two GPUs have the one-GPU run's
work each. Each configuration runs once to fill the caches, then ``--repeat`` times in turn
with the others (fresh processes, wall time measured outside)::

    OUT=/tmp/out python bench/papara_two_gpus.py            # a host with two GPUs

Configurations: ``opencl`` (the first GPU alone), ``auto-1gpu`` (``auto --device gpu``: the
work queue with the first GPU and the cores), ``auto`` (the work queue with every GPU and the
cores), and on request ``auto-threads`` (``auto`` with its device workers on threads).
Results: ``$OUT/papara_two_gpus.json`` (every run, with its timeline) and, on standard
output, the last run's timeline of each configuration (device takes with the child's set-up,
score and kernel seconds), the median wall and scoring seconds of each and the speed-ups of
``auto`` over the one-GPU runs. ``--vs FOLDER`` runs ``--vs-configs`` of a second source tree
(main's) in turn with this one's; the ``-notaper`` and ``auto-halving`` configurations turn this
tree's tapering batches and whole-share device takes off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from papara_e2e import ROOT, _run, _write_shape, timeline_text  # noqa: E402

CONFIGS = {
    "opencl": ("opencl", ("-v",)),
    "auto-1gpu": ("auto", ("--device", "gpu", "-v")),
    "auto": ("auto", ("-v",)),
}
# ``auto`` with its device workers on threads of the command's process instead of processes
# of their own (config.HYBRID_DEVICE_PROCESSES): opt in with --configs
EXTRA_CONFIGS = {
    "auto-threads": ("auto", ("-v",), {"DPALIGN_HYBRID_DEVICE_PROCESSES": "0"}),
    # the batches of before: two equal halves, no taper (config.PAPARA_TAPER)
    "auto-notaper": ("auto", ("-v",), {"DPALIGN_PAPARA_TAPER": "0"}),
    "opencl-notaper": ("opencl", ("-v",), {"DPALIGN_PAPARA_TAPER": "0"}),
    # takes sized by a share of what remains, as before (config.HYBRID_WHOLE_SHARE)
    "auto-halving": ("auto", ("-v",), {"DPALIGN_HYBRID_WHOLE_SHARE": "0"}),
}


def _config(name: str) -> tuple[str, tuple[str, ...], dict]:
    """(backend, extra arguments, extra environment) of a configuration."""
    if name in CONFIGS:
        return (*CONFIGS[name], {})
    return EXTRA_CONFIGS[name]


def _double(paths: dict, folder: Path) -> dict:
    """The shape's reads twice (the copy's names end in ``_b``)."""
    doubled = folder / "reads_x2.fasta"
    if not doubled.exists():
        text = paths["reads"].read_text()
        copy = "\n".join(
            line.split(" ")[0] + "_b" if line.startswith(">") else line
            for line in text.splitlines()
        )
        doubled.write_text(text + copy + "\n")
    return {**paths, "reads": doubled}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--scale", type=float, default=1.0, help="prank_like scale")
    parser.add_argument(
        "--vs",
        default=None,
        help="a second source tree (e.g. main's) whose runs of every configuration go in "
        "turn with this tree's (its configurations are named NAME@B)",
    )
    parser.add_argument(
        "--vs-configs",
        default="opencl,auto",
        help="the configurations run on the --vs tree too (the -notaper ones exist only here)",
    )
    args = parser.parse_args()
    out = Path(os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    names = args.configs.split(",")
    trees = {"": ROOT}
    if args.vs:
        trees["@B"] = Path(args.vs).resolve()
    vs_names = set(args.vs_configs.split(","))
    runs_of = [
        (name + label, name, tree)
        for name in names
        for label, tree in trees.items()
        if not label or name in vs_names
    ]
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="papara_two_gpus.") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        paths = _double(_write_shape(args.scale, folder / "shape"), folder / "shape")
        print(f"inputs written in {time.perf_counter() - t0:.1f} s", flush=True)
        warmed = set()  # one warm-up per backend and tree fills the caches of its variants
        for tag, name, tree in runs_of:
            backend, extra, env = _config(name)
            if (backend, tree) in warmed:
                continue
            warmed.add((backend, tree))
            warm = _run(paths, backend, None, folder, tag, tree, extra=extra, env_extra=env)
            print(f"{tag}: warm-up {warm.get('wall_s', 0):.2f} s {warm.get('error', '')}")
        for k in range(args.repeat):
            for tag, name, tree in runs_of:
                backend, extra, env = _config(name)
                run = {
                    "config": tag,
                    "repeat": k,
                    **_run(paths, backend, None, folder, tag, tree, extra=extra, env_extra=env),
                }
                results.append(run)
                if "error" in run:
                    print(f"{tag} run {k}: failed: {run['error'][-300:]}", flush=True)
                    continue
                print(
                    f"{tag} run {k}: wall {run['wall_s']:.2f} s, scoring "
                    f"{run['phases_s'].get('scoring', 0):.2f} s ({run['scoring_gcups']:.0f} "
                    f"GCUPS); {run['summary'][-160:]}",
                    flush=True,
                )
                if k == args.repeat - 1:
                    print(timeline_text(run), flush=True)
                (out / "papara_two_gpus.json").write_text(json.dumps(results, indent=2) + "\n")
    medians = {}
    for name, _, _ in runs_of:
        ok = [r for r in results if r["config"] == name and "error" not in r]
        if ok:
            medians[name] = (
                statistics.median(r["wall_s"] for r in ok),
                statistics.median(r["phases_s"].get("scoring", 0.0) for r in ok),
            )
            print(f"{name}: median wall {medians[name][0]:.2f} s, scoring {medians[name][1]:.2f} s")
    hashes = {r["output_sha1"] for r in results if "output_sha1" in r}
    print(f"outputs identical: {len(hashes) == 1}")
    for label in trees:
        every = "auto" + label
        if every not in medians:
            continue
        for one in ("opencl" + label, "auto-1gpu" + label):
            if one in medians:
                wall = medians[one][0] / medians[every][0]
                scoring = medians[one][1] / medians[every][1]
                print(
                    f"{every} (every GPU) over {one}: whole command {wall:.2f}x, "
                    f"scoring {scoring:.2f}x"
                )
    (out / "papara_two_gpus.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
