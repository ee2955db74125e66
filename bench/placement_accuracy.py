"""Read placement accuracy (issue 15): dpalign's default (= PaPaRa 2.5) and accurate modes,
hmmalign and MAFFT on simulated cases with a known true alignment.

    python bench/placement_accuracy.py [--cases a,b] [--tools t1,t2] [--threads N]
                                       [--seed-offset K] [--out DIR]

Each case is simulated (``dpalign.benchmarks.simulate``), written to DIR/CASE/, and every tool
runs on it as a whole command (timed). The output is mapped back to reference columns and
scored (``dpalign.benchmarks.accuracy``): recall, precision, share of perfect reads. Results go
to DIR/results.jsonl (one JSON object per case and tool) and a table on stdout. Tools:

* ``default``: ``dpalign papara`` (byte-identical to PaPaRa 2.5);
* ``accurate``: ``dpalign papara --accurate``;
* ``hmmalign``: ``hmmbuild --hand`` on the reference (every column a match state), then
  ``hmmalign --mapali``;
* ``mafft``: ``mafft --addfragments --keeplength --mapout``.

``--seed-offset`` draws other data of the same cases (tune on those, report the default).

The peers' results (hmmalign, MAFFT: deterministic, and MAFFT takes minutes on the big cases)
are cached in ``--peer-cache`` (default ``~/.cache/dpalign/placement_accuracy``), keyed by a
hash of the tool, its thread count and the case's input files: a rerun on the same data reads
the predicted columns and the seconds of the run that made them. ``--no-peer-cache`` reruns.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dpalign.benchmarks.accuracy import (
    columns_from_alignment,
    columns_from_mafft_map,
    columns_from_stockholm,
    score,
)
from dpalign.benchmarks.simulate import simulate

#: name -> simulate() arguments. Sizes keep the whole run to minutes on 2 cores.
CASES: dict[str, dict] = {
    "small-20x50": dict(n_taxa=20, n_columns=900, n_reads=50, seed=101),
    "dna-80x500": dict(n_taxa=80, n_columns=1200, n_reads=500, seed=102),
    "dna-150x1000": dict(n_taxa=150, n_columns=900, n_reads=1000, seed=103),
    "overhang-50x200": dict(
        n_taxa=50, n_columns=1500, n_reads=200, read_length=(100, 250), window=(0.25, 0.75),
        min_overlap=30, seed=104,
    ),
    "divergent-60x300": dict(
        n_taxa=60, n_columns=1000, n_reads=300, divergence=2.5, read_branch=0.3, seed=105
    ),
    "indel-60x300": dict(n_taxa=60, n_columns=1000, n_reads=300, indel_rate=0.01, seed=106),
    "ambiguity-40x300": dict(n_taxa=40, n_columns=1000, n_reads=300, ambiguity=0.03, seed=107),
    "protein-40x200": dict(
        n_taxa=40, n_columns=400, n_reads=200, read_length=(40, 100), protein=True, seed=108
    ),
    "protein-overhang-30x150": dict(
        n_taxa=30, n_columns=500, n_reads=150, read_length=(50, 120), protein=True,
        window=(0.2, 0.8), min_overlap=15, divergence=1.5, seed=109,
    ),
}  # fmt: skip
TOOLS = ["default", "accurate", "hmmalign", "mafft"]
PEERS = ("hmmalign", "mafft")
DEFAULT_CACHE = Path.home() / ".cache" / "dpalign" / "placement_accuracy"


def peer_key(tool: str, case_dir: Path, protein: bool, threads: int) -> str:
    """Cache key of a peer's run: the tool, its settings and the bytes of the case's inputs."""
    digest = hashlib.sha256(f"{tool} protein={protein} threads={threads}".encode())
    for name in ("tree.nwk", "ref.fasta", "reads.fasta"):
        digest.update((case_dir / name).read_bytes())
    return digest.hexdigest()[:24]


def cached_run(tool, case_dir: Path, data, protein: bool, threads: int, cache: Path | None):
    """:func:`run_tool`, through the peer cache for hmmalign and MAFFT."""
    if cache is None or tool not in PEERS:
        return run_tool(tool, case_dir, data, protein, threads)
    path = cache / f"{tool}-{peer_key(tool, case_dir, protein, threads)}.npz"
    if path.exists():
        stored = np.load(path)
        n = len(data.read_names)
        return [stored[f"r{k}"] for k in range(n)], float(stored["seconds"]), {"cached": True}
    pred, seconds, extra = run_tool(tool, case_dir, data, protein, threads)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, seconds=seconds, **{f"r{k}": p for k, p in enumerate(pred)})
    tmp.replace(path)
    return pred, seconds, extra


def _run(cmd: list[str], out_path: Path | None = None, cwd: Path | None = None) -> float:
    start = time.perf_counter()
    with open(out_path, "w") if out_path else open(os.devnull, "w") as stdout:
        proc = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def _stockholm(msa: list[tuple[str, str]]) -> str:
    width = max(len(n) for n, _ in msa) + 8
    lines = ["# STOCKHOLM 1.0", ""]
    lines += [f"{name:<{width}}{row}" for name, row in msa]
    lines += [f"{'#=GC RF':<{width}}{'x' * len(msa[0][1])}", "//", ""]
    return "\n".join(lines)


def run_tool(tool, case_dir: Path, data, protein: bool, threads: int):
    """Run one tool on a written case; return (predicted columns per read, seconds, extra)."""
    reads = {name: seq for name, (_, seq) in zip(data.read_names, data.reads, strict=True)}
    ref_names = [n for n, _ in data.msa]
    tree, msa_path = case_dir / "tree.nwk", case_dir / "ref.fasta"
    reads_path = case_dir / "reads.fasta"
    extra: dict = {}
    if tool in ("default", "accurate"):
        out, tsv = case_dir / f"{tool}.fasta", case_dir / f"{tool}.placements.tsv"
        cmd = [
            "dpalign", "papara", "--ref", str(tree), "--msa", str(msa_path), "--reads",
            str(reads_path), "--format", "fasta", "--out", str(out), "--placements", str(tsv),
            "--threads", str(threads),
        ]  # fmt: skip
        if protein:
            cmd.append("--protein")
        if tool == "accurate":
            cmd.append("--accurate")
        seconds = _run(cmd)
        from dpalign.io import read_fasta

        rows = [(r.name, r.seq) for r in read_fasta(out)]
        pred = columns_from_alignment(rows, ref_names, reads)
        extra["placements"] = tsv
    elif tool == "hmmalign":
        sto = case_dir / "ref.sto"
        sto.write_text(_stockholm(data.msa))
        kind = "--amino" if protein else "--dna"
        hmm, out = case_dir / "ref.hmm", case_dir / "hmmalign.sto"
        seconds = _run(["hmmbuild", "--hand", kind, "--cpu", str(threads), str(hmm), str(sto)])
        seconds += _run(
            ["hmmalign", "--mapali", str(sto), kind, "--outformat", "Stockholm", str(hmm),
             str(reads_path)],
            out,
        )  # fmt: skip
        pred = columns_from_stockholm(out.read_text(), reads)
    elif tool == "mafft":
        out = case_dir / "mafft.fasta"
        map_path = Path(str(reads_path) + ".map")
        if map_path.exists():
            map_path.unlink()
        seconds = _run(
            ["mafft", "--addfragments", str(reads_path), "--keeplength", "--mapout", "--thread",
             str(threads), "--quiet", str(msa_path)],
            out,
        )  # fmt: skip
        pred = columns_from_mafft_map(map_path.read_text(), reads)
    else:
        raise ValueError(f"unknown tool {tool!r}")
    missing = [n for n in data.read_names if n not in pred]
    if missing:
        raise RuntimeError(f"{tool}: no output row for {len(missing)} reads (e.g. {missing[0]})")
    return [pred[n] for n in data.read_names], seconds, extra


def support_check(tsv: Path, names: list[str], predicted, truth) -> dict:
    """Share of misplaced reads (under 90% of their characters right) among the 10% of reads
    with the lowest support (and the lowest fit), against their share among all reads."""
    lines = tsv.read_text().splitlines()
    header = lines[0].split("\t")
    wrong = np.array(
        [np.mean(p == t) < 0.9 for p, t in zip(predicted, truth, strict=True)], dtype=bool
    )
    out = {"misplaced_all": float(wrong.mean())}
    for column, key in (("support", "misplaced_low10"), ("fit", "misplaced_lowfit10")):
        if column not in header:
            continue
        col = header.index(column)
        value = {}
        for line in lines[1:]:
            parts = line.split("\t")
            value[parts[0]] = -np.inf if parts[col] == "NA" else float(parts[col])
        values = np.array([value.get(n, -np.inf) for n in names])
        low = np.argsort(values, kind="stable")[: max(1, len(names) // 10)]
        out[key] = float(wrong[low].mean())
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--out", default="placement_accuracy_out")
    parser.add_argument("--peer-cache", default=str(DEFAULT_CACHE), help="hmmalign/MAFFT cache")
    parser.add_argument("--no-peer-cache", action="store_true", help="rerun the peers")
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="JSONL",
        help="only print the table of earlier results (later files win per case and tool)",
    )
    args = parser.parse_args(argv)
    if args.table:
        merged = {}
        for path in args.table:
            for line in Path(path).read_text().splitlines():
                row = json.loads(line)
                merged[row["case"], row["tool"]] = row
        order = {case: k for k, case in enumerate(CASES)}
        rows = sorted(merged.values(), key=lambda r: (order.get(r["case"], 99), r["case"]))
        print(table(rows))
        return 0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    tools = args.tools.split(",")
    cache = None if args.no_peer_cache else Path(args.peer_cache)
    for case in args.cases.split(","):
        spec = dict(CASES[case])
        spec["seed"] += args.seed_offset
        data = simulate(**spec)
        case_dir = out_dir / case
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        data.write(case_dir / "tree.nwk", case_dir / "ref.fasta", case_dir / "reads.fasta")
        data.write_truth(case_dir / "truth.jsonl")
        for tool in tools:
            pred, seconds, extra = cached_run(
                tool, case_dir, data, spec.get("protein", False), args.threads, cache
            )
            acc = score(pred, data.truth)
            row = {
                "case": case, "tool": tool, "seconds": seconds, "threads": args.threads,
                "taxa": spec["n_taxa"], "reads": spec["n_reads"],
                "columns": len(data.msa[0][1]), "seed": spec["seed"], **acc.as_dict(),
            }  # fmt: skip
            if extra.get("cached"):
                row["cached"] = True
            if "placements" in extra:
                row.update(support_check(extra["placements"], data.read_names, pred, data.truth))
            results.append(row)
            with open(out_dir / "results.jsonl", "a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(
                f"{case:<24} {tool:<9} recall {100 * acc.recall:6.2f}  precision "
                f"{100 * acc.precision:6.2f}  perfect {100 * acc.perfect:5.1f}%  "
                f"{seconds:7.2f} s{' (cached)' if extra.get('cached') else ''}",
                file=sys.stderr,
                flush=True,
            )
    print(table(results))
    return 0


def table(results: list[dict]) -> str:
    """Markdown: one row per case, recall / precision / perfect% (seconds) per tool."""
    tools = list(dict.fromkeys(r["tool"] for r in results))
    lines = [
        "| case (taxa x reads, columns) | " + " | ".join(tools) + " |",
        "|---" * (len(tools) + 1) + "|",
    ]
    for case in dict.fromkeys(r["case"] for r in results):
        rows = {r["tool"]: r for r in results if r["case"] == case}
        first = next(iter(rows.values()))
        cells = []
        for tool in tools:
            r = rows.get(tool)
            cells.append(
                "-"
                if r is None
                else f"{100 * r['recall']:.1f} / {100 * r['precision']:.1f} / "
                f"{100 * r['perfect']:.0f}% ({r['seconds']:.1f} s)"
            )
        lines.append(
            f"| {case} ({first['taxa']}x{first['reads']}, {first['columns']}) | "
            + " | ".join(cells)
            + " |"
        )
    support = [r for r in results if "misplaced_low10" in r]
    if support:
        tools_ = list(dict.fromkeys(r["tool"] for r in support))
        lines += [
            "",
            "Misplaced reads (under 90% of their characters right): share among the 10% of reads "
            "with the lowest support / the lowest fit / among all reads",
            "",
            "| case | " + " | ".join(tools_) + " |",
            "|---" * (len(tools_) + 1) + "|",
        ]
        for case in dict.fromkeys(r["case"] for r in support):
            rows = {r["tool"]: r for r in support if r["case"] == case}
            cells = [
                f"{100 * rows[t]['misplaced_low10']:.0f}% / "
                f"{100 * rows[t].get('misplaced_lowfit10', float('nan')):.0f}% / "
                f"{100 * rows[t]['misplaced_all']:.1f}%"
                if t in rows
                else "-"
                for t in tools_
            ]
            lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
