"""PaPaRa OpenCL kernel benchmarks after the seed paper's Tables 1 and 2, plus GPU checks.

Kernel GCUPS come from OpenCL profiling events (kernel time only, as the seed reports).
Cells = sum of read lengths x reference columns x profiles.

    python bench/opencl_papara.py check  [--out DIR]   # GPU kernels vs the oracle, golden cases
    python bench/opencl_papara.py sweep  [--out DIR]   # strip width, carry, group size, block width
    python bench/opencl_papara.py tables [--out DIR] [--quick]
    python bench/opencl_papara.py summary DIR/sweep.jsonl ...

Results go to DIR/*.jsonl (one JSON object per measurement) and a table on stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

from dpalign import reference
from dpalign.kernels_cl.context import device_context
from dpalign.kernels_cl.papara import PaparaRunner
from dpalign.scoring import papara_scoring

HERE = Path(__file__).resolve().parent
SEED_TABLE1 = "GTX 560 (seed paper): peak 22.1 GCUPS, average 18.4 GCUPS over its runs"


def profiles(rng, n, lanes):
    """Fitch-like profile states: mostly single bases, some IUPAC pairs and gaps; 10% flags."""
    states = (1 << rng.integers(0, 4, (n, lanes))).astype(np.uint8)
    pairs = rng.random((n, lanes))
    states[pairs < 0.15] |= (1 << rng.integers(0, 4, (n, lanes))).astype(np.uint8)[pairs < 0.15]
    states[pairs > 0.95] = 15
    flags = (rng.random((n, lanes)) < 0.1).astype(np.uint8)
    return states, flags


def reads(rng, count, mean=100, spread=10):
    lengths = rng.integers(mean - spread, mean + spread + 1, count)
    codes = np.zeros((count, lengths.max()), np.uint8)
    for k, m in enumerate(lengths):
        codes[k, :m] = 1 << rng.integers(0, 4, m)
    return codes, lengths


def digest(scores):
    return hashlib.sha1(np.ascontiguousarray(scores).tobytes()).hexdigest()[:12]


def measure(dctx, states, flags, codes, lengths, design, width, repeats=2, **geometry):
    """Run one configuration; return the best kernel time over ``repeats`` runs."""
    runner = PaparaRunner(dctx, papara_scoring("papara2"), states, flags, False, design, **geometry)
    best, wall, result = None, None, None
    for _ in range(repeats):
        start = time.perf_counter()
        result = runner.score(codes, lengths, width=width)
        elapsed = time.perf_counter() - start
        if best is None or result.kernel_seconds < best:
            best, wall = result.kernel_seconds, elapsed
    variant = next(iter(runner._variants.values()))
    return {
        "design": design,
        "width": int(result.width.max()),
        "reads": len(lengths),
        "profiles": states.shape[1],
        "columns": states.shape[0],
        "mean_read": float(lengths.mean()),
        "cells": result.cells,
        "kernel_s": best,
        "wall_s": wall,
        "gcups": result.cells / best / 1e9,
        "launches": result.launches,
        "group": variant.group,
        "groups_per_read": variant.groups,
        "carry_local": variant.carry_local,
        "defines": runner.defines(int(result.width.max()), variant.carry_local),
        "geometry": {k: v for k, v in geometry.items() if v is not None},
        "scores": digest(result.scores),
    }


def emit(out, name, record):
    print(json.dumps(record), flush=True)
    if out:
        with open(Path(out) / f"{name}.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")


# --------------------------------------------------------------------------------------------


def check(args):
    """Every design/width/carry on the device against the oracle, then the golden cases."""
    dctx = device_context(args.device)
    print(dctx.describe(), flush=True)
    rng = np.random.default_rng(11)
    failures = 0
    for protein in (False, True):
        n, lanes = 160, 320
        if protein:
            states = (1 << rng.integers(0, 20, (n, lanes))).astype(np.uint32)
            states[rng.random((n, lanes)) < 0.1] |= np.uint32(3 << 7)
            codes = np.zeros((6, 90), np.uint32)
        else:
            states, _ = profiles(rng, n, lanes)
            codes = np.zeros((6, 90), np.uint8)
        flags = (rng.random((n, lanes)) < 0.2).astype(np.uint8)
        lengths = np.array([90, 77, 64, 1, 45, 89])
        for k, m in enumerate(lengths):
            codes[k, :m] = 1 << rng.integers(0, 20 if protein else 4, m)
        for spec in ("papara2", "bmc2012", "-2:-1:-1:1", "-1:-1:400:-1"):
            scoring = papara_scoring(spec)
            want = np.array(
                [
                    reference.papara_fill(states, flags, codes[k, :m], scoring).scores
                    for k, m in enumerate(lengths)
                ]
            )
            variants = (
                ("strip", "global", 1, False),
                ("strip", "local", 1, False),
                ("strip", "local", 2, False),
                ("strip", "local", 2, True),
                ("strip", "global", 1, True),
                ("blocked", None, 1, False),
            )
            for design, carry, unroll, split in variants:
                for width in (None, 32):
                    runner = PaparaRunner(
                        dctx,
                        scoring,
                        states,
                        flags,
                        protein,
                        design,
                        carry=carry,
                        row_unroll=unroll,
                        split=split,
                    )
                    got = runner.score(codes, lengths, width=width)
                    ok = np.array_equal(got.scores, want)
                    failures += not ok
                    print(
                        f"check protein={protein} {spec} {design} carry={carry} x{unroll} "
                        f"split={split} "
                        f"width={sorted(set(got.width.tolist()))}: {'ok' if ok else 'MISMATCH'}",
                        flush=True,
                    )
    golden = Path(args.golden) if args.golden else None
    if golden and golden.is_dir():
        from dpalign.cli import main

        for case in sorted(golden.iterdir()):
            if not (case / "tree.nwk").exists() or case.name not in args.golden_cases.split(","):
                continue
            for expected, extra, fmt in (
                ("default.phy", [], "phylip"),
                ("cgap.phy", ["--gap-model", "cgap"], "phylip"),
                ("noref.phy", ["--no-ref-gaps"], "phylip"),
                ("fasta.fasta", [], "fasta"),
            ):
                if not (case / expected).exists():
                    continue
                if not case.name.startswith("tiny") and expected != "default.phy":
                    continue  # CPU traceback (the reference) is slow: default mode only
                target = Path(args.out or "/tmp") / f"golden-{case.name}-{expected}"
                argv = [
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
                    "--out",
                    str(target),
                    *extra,
                ]
                if (case / "PROTEIN").exists():
                    argv.append("--protein")
                code = main(argv)
                same = code == 0 and target.read_text() == (case / expected).read_text()
                failures += not same
                target.unlink(missing_ok=True)
                print(
                    f"golden {case.name} {expected}: {'identical' if same else 'DIFFERENT'}",
                    flush=True,
                )
    print(f"check: {failures} failure(s)", flush=True)
    return failures


def sweep(args):
    """Tuning sweep at one shape; every configuration must give the same scores.

    ``--plan wide`` (the first H100 run): strip width x carry place x group size, the blocked
    block width, packed arithmetic without PTX. ``--plan strip`` (after the shifted frame):
    strip width x row unrolling with the local-memory carry. ``--plan split`` (default):
    strip width x SPLIT, rows unrolled twice. The best strip geometry per width goes to
    DIR/best.json for ``tables --tuned``.
    """
    dctx = device_context(args.device)
    print(dctx.describe(), flush=True)
    rng = np.random.default_rng(12)
    states, flags = profiles(rng, args.columns, args.profiles)
    codes, lengths = reads(rng, args.reads)
    configs = []
    for width in (None, 32):
        if args.plan == "wide":
            for strip in (8, 16, 24, 32):
                for carry in ("global", "local"):
                    configs.append(("strip", width, {"strip": strip, "carry": carry}))
            for block in (12, 24):
                configs.append(("blocked", width, {"block": block}))
        elif args.plan == "strip":
            for strip in (16, 24, 32):
                for unroll in (1, 2):
                    geometry = {"strip": strip, "carry": "local", "row_unroll": unroll}
                    configs.append(("strip", width, geometry))
        else:  # split
            for strip in (16, 24, 32):
                for split in (False, True):
                    geometry = {"strip": strip, "carry": "local", "row_unroll": 2, "split": split}
                    configs.append(("strip", width, geometry))
    if args.plan == "wide":
        for carry in ("global", "local"):  # packed arithmetic in portable OpenCL C, no PTX
            configs.append(("strip", None, {"strip": 16, "carry": carry, "ptx": False}))
    digests = set()
    results = []
    for design, width, geometry in configs:
        try:
            record = measure(dctx, states, flags, codes, lengths, design, width, 1, **geometry)
        except Exception as exc:  # noqa: BLE001 - a failed configuration is a result too
            emit(
                args.out,
                "sweep",
                {"design": design, "width": width, **geometry, "error": str(exc)[:500]},
            )
            continue
        digests.add(record["scores"])
        results.append(record)
        emit(args.out, "sweep", record)
    best = {}
    for w in (16, 32):
        strips = [r for r in results if r["design"] == "strip" and r["width"] == w]
        if strips:
            best[w] = max(strips, key=lambda r: r["gcups"])["geometry"]
    if args.plan == "wide":  # group sizes for the best strip configuration of each width
        for w, geometry in best.items():
            for group_max in (64, 128, 512):
                record = measure(
                    dctx,
                    states,
                    flags,
                    codes,
                    lengths,
                    "strip",
                    None if w == 16 else 32,
                    1,
                    **dict(geometry, group_max=group_max),
                )
                digests.add(record["scores"])
                emit(args.out, "sweep", record)
    if args.out:
        (Path(args.out) / "best.json").write_text(json.dumps(best))
    print(f"sweep: best {best}", flush=True)
    print(f"sweep: {len(digests)} distinct score digest(s) (must be 1)", flush=True)
    dump_programs(dctx, args.out)


def tables(args):
    """The seed's Table 1 (reference length) and Table 2 (number of reads)."""
    dctx = device_context(args.device)
    print(dctx.describe(), flush=True)
    tuned = json.loads(Path(args.tuned).read_text()) if args.tuned else {}
    configs = [
        (design, width, tuned.get(str(width or 16), {}) if design == "strip" else {})
        for design in args.designs.split(",")
        for width in (None, 32)
    ]
    lengths1 = [500, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000]
    counts2 = [100, 500, 1_000, 2_500, 5_000, 10_000]
    if args.quick:
        lengths1, counts2 = [500, 5_000], [max(1, args.reads // 10), args.reads]
    rng = np.random.default_rng(13)
    codes, lens = reads(rng, args.reads)
    for n in lengths1:
        states, flags = profiles(rng, n, args.profiles)
        for design, width, geometry in configs:
            repeats = 1 if n >= 50_000 else 2
            record = measure(dctx, states, flags, codes, lens, design, width, repeats, **geometry)
            emit(args.out, "table1", record)
    states, flags = profiles(rng, 5_000, args.profiles)
    for count in counts2:
        codes2, lens2 = reads(rng, count)
        for design, width, geometry in configs:
            record = measure(dctx, states, flags, codes2, lens2, design, width, 2, **geometry)
            emit(args.out, "table2", record)


def dump_programs(dctx, out):
    """Save each built program's device binary (PTX on NVIDIA) with ptxas/SASS summaries."""
    if not out or not dctx.caps.nvidia:
        return
    folder = Path(out) / "ptx"
    folder.mkdir(exist_ok=True)
    summary = {}
    for (_, options), (program, _) in dctx.programs.items():
        tag = "_".join(o[2:].replace("=", "") for o in options)
        ptx = folder / f"{tag}.ptx"
        ptx.write_bytes(program.binaries[0])
        cubin = folder / f"{tag}.cubin"
        info = subprocess.run(
            ["ptxas", "-arch=sm_90", "-v", "-o", str(cubin), str(ptx)],
            capture_output=True,
            text=True,
        )
        entry = {"ptxas": info.stderr.strip()[-1500:]}
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True)
        if sass.returncode == 0:
            (folder / f"{tag}.sass").write_text(sass.stdout)
            ops = {}
            for line in sass.stdout.splitlines():
                parts = line.split("*/")
                if len(parts) > 1 and line.strip().startswith("/*"):
                    op = parts[1].strip().split(" ")[0].rstrip(";")
                    if op.startswith("@"):
                        op = parts[1].strip().split(" ")[1]
                    ops[op] = ops.get(op, 0) + 1
            entry["sass_ops"] = dict(sorted(ops.items(), key=lambda kv: -kv[1])[:40])
        summary[tag] = entry
        cubin.unlink(missing_ok=True)
    (Path(out) / "ptx_summary.json").write_text(json.dumps(summary, indent=1))
    with tarfile.open(Path(out) / "ptx.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="ptx")
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


def summary(args):
    """Print the JSON lines of earlier runs as a table."""
    for path in args.files:
        print(f"== {path}")
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if "error" in r:
                print(f"{r['design']:8} error: {r['error'][:150]}")
                continue
            geometry = " ".join(f"{k}={v}" for k, v in r["geometry"].items())
            print(
                f"{r['design']:8} i{r['width']} n={r['columns']:>7} Q={r['reads']:>6} "
                f"group={r['group']:>4}x{r['groups_per_read']} {geometry:38} "
                f"{r['kernel_s']:9.4f} s {r['gcups']:8.1f} GCUPS {r['scores']}"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["check", "sweep", "tables", "summary"])
    parser.add_argument("files", nargs="*", help="summary: JSON-lines files")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--columns", type=int, default=10_000)
    parser.add_argument("--golden", default=str(HERE.parent / "tests" / "data" / "golden"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plan", choices=["split", "strip", "wide"], default="split")
    parser.add_argument("--designs", default="strip,blocked", help="tables: designs to run")
    parser.add_argument("--tuned", help="tables: best.json written by sweep")
    parser.add_argument("--golden-cases", default="tiny_01,small_01_trifurc,protein_small")
    parser.add_argument("--reads", type=int, default=1250, help="reads (Table 1, sweep)")
    parser.add_argument("--profiles", type=int, default=320)
    args = parser.parse_args(argv)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    steps = {"check": check, "sweep": sweep, "tables": tables, "summary": summary}
    result = steps[args.what](args)
    return 1 if result else 0


if __name__ == "__main__":
    sys.exit(main())
