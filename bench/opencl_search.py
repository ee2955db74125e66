"""OpenCL search and long-pair benchmarks, plus GPU checks of every kernel variant.

Kernel GCUPS come from OpenCL profiling events (kernel time only); end-to-end seconds are
wall-clock times of the library call (profile upload, launches, downloads, host work).
Cells = query length x total target length (search), m x n (long pairs).

    python bench/opencl_search.py check    [--out DIR]  # GPU kernels vs the oracle
    python bench/opencl_search.py protein  [--out DIR] [--sweep] [--targets N]
    python bench/opencl_search.py dna      [--out DIR] [--targets N]
    python bench/opencl_search.py longpair [--out DIR] [--sweep] [--length N]
    python bench/opencl_search.py all      [--out DIR] [--sweep]  # all four, well under 4 min
    python bench/opencl_search.py probe --variant NAME          # one kernel family (child)
    python bench/opencl_search.py summary DIR/*.jsonl

(a) protein: a 375-residue query against 200,000 UniProt-like sequences, BLOSUM62, gaps
11 + k, local (and global/semiglobal); (b) DNA: a 250 nt read against 100,000 targets of
300-1,500 nt, NUC.4.4, gaps 10 + k; (c) one 100 kb x 100 kb pair, score only and with
traceback, against the CPU path on every core. Results go to DIR/*.jsonl (one JSON object
per measurement) and a short table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dpalign import reference
from dpalign.benchmarks import workloads
from dpalign.gcups import RunStats
from dpalign.kernels_cl.context import device_context
from dpalign.kernels_cl.search import SearchRunner
from dpalign.longpair import Tiling, align_long
from dpalign.scoring import Scoring, free_ends_tuple

CUDASW4_H100 = 5710  # GCUPS, CUDASW++ 4.0 on an H100 with DPX (its paper), not measured here

#: Search kernel variants checked against the oracle: name -> (runner options, width).
VARIANTS = {
    "default": ({}, None),
    # Packed variants ask for 16 bits: the default takes int32 for local protein on GPUs.
    "portable-i16": ({"ptx": False}, 16),
    "gframe": ({"shifted": False, "best3": False}, 16),
    "int32": ({}, 32),
    # Local mode: the strip kernel in 16 bits (the default takes the group kernel on GPUs).
    "strip-i16": ({"local_kernel": "strip"}, 16),
    # The group kernel in every mode on any device (on GPUs with packed PTX "auto" takes it).
    "group": ({"local_kernel": "group"}, None),
}
#: The protein (local mode) sweep: strip width, work-group size, the running best, PTX.
SWEEP = {
    **{f"s{s}": ({"strip": s}, 16) for s in (16, 24, 40, 48, 64)},
    "s32-g128": ({"strip": 32, "group": 128}, 16),
    "s32-g512": ({"strip": 32, "group": 512}, 16),
    "s32-best2": ({"strip": 32, "best3": False}, 16),
    "s16-int32": ({"strip": 16}, 32),
    "s32": ({"strip": 32}, 16),
    "s64-g128": ({"strip": 64, "group": 128}, 16),
    "s96": ({"strip": 96}, 16),
    "s128": ({"strip": 128}, 16),
    "s64-int32": ({"strip": 64}, 32),
}


#: Kernel families probed one by one, each in its own process, before anything else runs: a
#: kernel that faults on a device loses the process's OpenCL context, so the measurements
#: use only the families that ran. Safest first (int32, profile read from global memory).
PROBES = {
    "int32-globalprofile": ({"profile": "global"}, 32),
    "int32": ({}, 32),
    "portable-i16": ({"ptx": False}, None),
    "globalprofile": ({"profile": "global"}, None),
    "default": ({}, None),
}
#: The base kernel of the benchmarks: the first of these that the probes passed.
BASE_ORDER = ["default", "globalprofile", "portable-i16", "int32", "int32-globalprofile"]


def family(options, width):
    """The probe family a kernel variant belongs to."""
    on_global = options.get("profile") == "global"
    if width == 32:
        return "int32-globalprofile" if on_global else "int32"
    if options.get("ptx") is False:
        return "portable-i16"
    return "globalprofile" if on_global else "default"


def probe(args):
    """One kernel family on small cases against the oracle (run in a child process)."""
    options, width = PROBES[args.variant]
    dctx = device_context(args.device)
    rng = np.random.default_rng(5)
    ok, error = True, None
    try:
        for scoring, letters, mode in (
            (Scoring("BLOSUM62", (11, 1)), 20, "local"),
            (Scoring("NUC.4.4", (10, 1)), 4, "global"),
            (Scoring("BLOSUM62", 4), 24, "semiglobal"),
        ):
            ends = free_ends_tuple(mode)
            targets = [
                rng.integers(0, letters, int(rng.integers(0, 60))).astype(np.uint8)
                for _ in range(100)
            ]
            query = rng.integers(0, letters, 45).astype(np.uint8)
            runner = SearchRunner(dctx, targets, **options)
            got = runner.score(query, scoring, mode, ends, width=width)
            ok &= bool(
                np.array_equal(got.scores, oracle_scores(query, targets, scoring, mode, ends))
            )
    except Exception as exc:
        ok, error = False, f"{type(exc).__name__}: {str(exc)[:400]}"
    print(json.dumps({"probe": args.variant, "ok": ok, "error": error}), flush=True)
    return 0 if ok else 1


def probe_all(args) -> dict:
    """Every family in its own process, all at once (a kernel fault loses only its own
    context); results to DIR/probe.jsonl; returns name -> ok."""
    children = {}
    for name in PROBES:
        command = [sys.executable, __file__, "probe", "--variant", name]
        if args.device:
            command += ["--device", args.device]
        children[name] = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    results = {}
    for name, child in children.items():
        try:
            stdout, stderr = child.communicate(timeout=120)
            lines = [x for x in stdout.splitlines() if x.startswith('{"probe"')]
            if lines:
                record = json.loads(lines[-1])
            else:
                record = {"probe": name, "ok": False, "error": (stderr or stdout)[-400:]}
        except subprocess.TimeoutExpired:
            child.kill()
            record = {"probe": name, "ok": False, "error": "timed out"}
        results[name] = bool(record["ok"])
        emit(args.out, "probe", record)
    return results


def usable(args) -> dict:
    """Probe results of this output folder (probing now when there are none)."""
    if args.out and (Path(args.out) / "probe.jsonl").exists():
        found = {}
        for line in (Path(args.out) / "probe.jsonl").read_text().splitlines():
            record = json.loads(line)
            found[record["probe"]] = bool(record["ok"])
        if set(found) >= set(PROBES):
            return found
    return probe_all(args)


def base_options(ok: dict):
    """Options and width of the first usable base kernel (None: no family ran)."""
    for name in BASE_ORDER:
        if ok.get(name):
            return name, PROBES[name]
    return None, None


def emit(out, name, record):
    print(json.dumps(record), flush=True)
    if out:
        with open(Path(out) / f"{name}.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")


def encode_all(scoring, sequences):
    lut = scoring.alphabet.lut
    return [lut[np.frombuffer(s.encode(), np.uint8)] for s in sequences]


def oracle_scores(query, targets, scoring, mode, ends):
    """The oracle's scores; pairs of more than 5,000 cells through the CPU long-pair path
    (Numba, tested identical to the oracle), which is much faster than plain Python."""
    sc = scoring
    out = []
    for t in targets:
        if len(query) * len(t) <= 5_000 or not len(t):
            args = (query, t, sc.matrix, sc.gap_open, sc.gap_extend, mode, ends)
            out.append(reference.pairwise_score(*args).score)
        else:
            free = ends if mode == "global" else None
            out.append(align_long(query, t, sc, mode, free, traceback=False).score)
    return np.array(out)


# --------------------------------------------------------------------------------------------
# check: every variant against the oracle on the device
# --------------------------------------------------------------------------------------------


def check(args):
    families = usable(args)
    failures = sum(not v for v in families.values())
    base_name, base = base_options(families)
    if base_name is None:
        print("check: no search kernel family ran on this device", flush=True)
        return failures
    base_opts = base[0]
    dctx = device_context(args.device)
    print(dctx.describe(), flush=True)
    rng = np.random.default_rng(11)
    cases = [
        (Scoring("BLOSUM62", (11, 1)), 24, "local", None),
        (Scoring("BLOSUM62", (11, 1)), 20, "global", None),
        (Scoring("BLOSUM62", 4), 24, "semiglobal", None),
        (Scoring("NUC.4.4", (10, 1)), 4, "local", None),
        (Scoring("NUC.4.4", (10, 1)), 15, "global", (True, False, False, True)),
        (Scoring((2, -3), (5, 2)), 4, "global", (False, True, True, False)),
        (Scoring((1, -1), 2), 27, "global", True),
        (Scoring((5, -4), (0, 3)), 4, "semiglobal", None),
    ]
    for scoring, letters, mode, free in cases:
        ends = free_ends_tuple(mode, free)
        targets = [
            rng.integers(0, letters, int(rng.integers(0, 70))).astype(np.uint8) for _ in range(150)
        ]
        query = rng.integers(0, letters, int(rng.integers(1, 60))).astype(np.uint8)
        want = oracle_scores(query, targets, scoring, mode, ends)
        base_runner = SearchRunner(dctx, targets)
        for name, (options, width) in VARIANTS.items():
            if not families.get(family(options, width)):
                print(f"check search {name}: skipped (its probe failed)", flush=True)
                continue
            runner = base_runner.with_options(**options)
            try:
                got = runner.score(query, scoring, mode, ends, width=width)
                ok = bool(np.array_equal(got.scores, want))
                widths = sorted(set(got.width.tolist()))
            except Exception as exc:  # a variant that does not build must not stop the run
                ok, widths = False, str(exc)[:300]
            failures += not ok
            print(
                f"check search {scoring} {mode} {ends} {name}: {'ok' if ok else 'FAIL'} {widths}",
                flush=True,
            )
    # pairs past 16 bits: recomputed exactly
    scoring = Scoring((100, -50), (20, 5))
    base_seq = rng.integers(0, 4, 600).astype(np.uint8)
    targets = []
    for size in (300, 330, 360, 400, 500, 600):
        t = base_seq[:size].copy()
        mutate = rng.random(size) < 0.02
        t[mutate] = rng.integers(0, 4, int(mutate.sum()))
        targets.append(t)
    targets += [rng.integers(0, 4, int(rng.integers(1, 80))).astype(np.uint8) for _ in range(100)]
    query = base_seq[:550].copy()
    for mode in ("local", "global", "semiglobal"):
        ends = free_ends_tuple(mode)
        want = oracle_scores(query, targets, scoring, mode, ends)
        for name, options in (
            (base_name, base_opts),
            ("gframe", {**base_opts, **VARIANTS["gframe"][0]}),
            ("s64", {**base_opts, "strip": 64}),
            ("group", {**base_opts, "local_kernel": "group"}),
        ):
            got = SearchRunner(dctx, targets, **options).score(query, scoring, mode, ends)
            ok = bool(np.array_equal(got.scores, want)) and 32 in got.width and 16 in got.width
            failures += not ok
            print(
                f"check saturation {mode} {name}: {'ok' if ok else 'FAIL'} "
                f"recomputed={got.recomputed}",
                flush=True,
            )
    # long pairs: the device's tiles against the oracle (small) and the CPU path (5 kb)
    for m, n, mode in ((300, 280, "local"), (290, 310, "global"), (260, 300, "semiglobal")):
        scoring = Scoring("NUC.4.4", (10, 1))
        a = rng.integers(0, 4, m).astype(np.uint8)
        b = np.resize(a, n)
        b[rng.random(n) < 0.15] = 1
        ends = free_ends_tuple(mode)
        want = reference.pairwise_align(a, b, scoring.matrix, 10, 1, mode, ends)
        tiling = Tiling(device_cells=1, leaf_rows=32, leaf_cols=32, blocks=4)
        got = align_long(a, b, scoring, mode, tiling=tiling, backend="opencl", device=args.device)
        ok = got == want
        failures += not ok
        print(f"check longpair oracle {m}x{n} {mode}: {'ok' if ok else 'FAIL'}", flush=True)
    a, b = workloads.long_pair(5_000)
    scoring = Scoring("NUC.4.4", (10, 1))
    for mode in ("local", "global", "semiglobal"):
        tiling = Tiling(device_cells=1 << 16)
        want = align_long(a, b, scoring, mode, tiling=tiling)
        for shuffle in (True, False):
            got = _align_with(a, b, scoring, mode, tiling, args.device, shuffle=shuffle)
            ok = got == want
            failures += not ok
            print(
                f"check longpair 5kb {mode} shuffle={shuffle}: {'ok' if ok else 'FAIL'}", flush=True
            )
    print(f"checks done: {failures} failures", flush=True)
    emit(args.out, "check", {"failures": failures, "device": dctx.caps.name})
    return failures


def _align_with(a, b, scoring, mode, tiling, device, traceback=True, stats=None, **pair_options):
    """align_long on the device with PairOnDevice options (shuffle, shape)."""
    from dpalign.kernels_cl import antidiagonal
    from dpalign.kernels_cl.backend import DeviceRegions
    from dpalign.longpair import STATE_H, _Aligner, _validate, plan_lanes

    if not pair_options:
        return align_long(
            a,
            b,
            scoring,
            mode,
            traceback=traceback,
            tiling=tiling,
            backend="opencl",
            device=device,
            stats=stats,
        )
    a, b, ends = _validate(a, b, scoring, mode, None)
    lanes = plan_lanes(scoring, len(a), len(b), mode, tiling)
    pair = antidiagonal.PairOnDevice(
        device_context(device),
        a,
        b,
        scoring.matrix,
        scoring.gap_open,
        scoring.gap_extend,
        mode == "local",
        **pair_options,
    )
    pair = DeviceRegions(pair, lanes.neg_store)  # the engine's region contract
    from dpalign import config
    from dpalign.reference import PairwiseResult

    job = _Aligner(a, b, scoring, mode, ends, tiling, config.cpu_threads(), lanes, pair)
    region = job.global_region()
    points = job.fill(region, keep=traceback, final_col=not job.local)
    score, a_end, b_end = job.end_cell(points)
    if stats is not None:
        stats.record("device", pair.cells, pair.kernel_seconds)
    if not traceback:
        return PairwiseResult(score, a_end, a_end, b_end, b_end)
    return job.finish(score, a_end, b_end, job.walk(region, points, a_end, b_end, STATE_H))


# --------------------------------------------------------------------------------------------
# (a) protein search, (b) DNA search
# --------------------------------------------------------------------------------------------


def measure_search(runner, query, scoring, mode, ends, width=None, repeats=3):
    """Best kernel time and wall time over ``repeats`` warm runs (the first run builds)."""
    runner.score(query, scoring, mode, ends, width=width)
    best = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = runner.score(query, scoring, mode, ends, width=width)
        wall = time.perf_counter() - start
        if best is None or result.kernel_seconds < best[0].kernel_seconds:
            best = (result, wall)
    return best


def search_record(label, runner, result, wall, scoring, mode, query, name, width):
    kernel = result.kernel_seconds
    return {
        "bench": label,
        "variant": name,
        "mode": mode,
        "scoring": str(scoring),
        "query": len(query),
        "targets": len(runner.codes),
        "residues": int(runner.lengths.sum()),
        "cells": result.cells,
        "kernel_s": kernel,
        "wall_s": wall,
        "gcups": result.cells / kernel / 1e9 if kernel else 0.0,
        "gcups_wall": result.cells / wall / 1e9,
        "launches": result.launches,
        "recomputed": result.recomputed,
        "widths": sorted(set(result.width.tolist())),
        "strip": runner.strip,
        "group": runner.group,
        "defines": runner.defines(width or 16, mode == "local"),
    }


#: Group-kernel settings compared: (name, command queues, multi-pass shapes or None: default).
GROUP_SWEEP = [
    *[(f"group-q{q}", q, None) for q in (1, 2, 4, 8)],
    ("group-q8-multi32", 8, ((32, 32),)),
    ("group-q8-multi16+32", 8, ((16, 32), (32, 32))),
]


def group_sweep(args, label, base, query, scoring, reference_scores) -> int:
    """The local-mode group kernel under each :data:`GROUP_SWEEP` setting: kernel GCUPS from
    the best and the median of five warm runs (kernel time = first start to last end);
    returns the number of settings whose scores differ from ``reference_scores``."""
    from dpalign.kernels_cl import search_group

    saved = search_group.QUEUES, search_group.MULTI_SHAPES
    mismatches = 0
    ends = free_ends_tuple("local")
    try:
        for name, queues, multi in GROUP_SWEEP:
            search_group.QUEUES = queues
            search_group.MULTI_SHAPES = saved[1] if multi is None else multi
            runner = base.with_options(local_kernel="group")
            runner._groups = {}  # a GroupSearch with these settings
            runner.score(query, scoring, "local", ends)
            spans, walls, result = [], [], None
            for _ in range(5):
                start = time.perf_counter()
                result = runner.score(query, scoring, "local", ends)
                walls.append(time.perf_counter() - start)
                spans.append(result.kernel_seconds)
            record = search_record(
                label, runner, result, min(walls), scoring, "local", query, name, None
            )
            record["gcups"] = result.cells / min(spans) / 1e9
            record["gcups_median"] = result.cells / float(np.median(spans)) / 1e9
            record["kernel_s_all"] = spans
            record["multi_shapes"] = search_group.MULTI_SHAPES
            record["same_scores"] = bool(np.array_equal(result.scores, reference_scores))
            mismatches += not record["same_scores"]
            emit(args.out, label, record)
    finally:
        search_group.QUEUES, search_group.MULTI_SHAPES = saved
    return mismatches


def protein(args):
    ok = usable(args)
    base_name, base_kernel = base_options(ok)
    if base_name is None:
        emit(args.out, "protein", {"bench": "protein", "error": "no search kernel ran"})
        return 1
    base_opts, base_width = base_kernel
    dctx = device_context(args.device)
    print(dctx.describe(), flush=True)
    scoring = Scoring("BLOSUM62", (11, 1))
    start = time.perf_counter()
    db = workloads.protein_database(args.targets)
    targets = encode_all(scoring, [s for _, s in db])
    query = encode_all(scoring, [workloads.protein_query(375)])[0]
    prepared = time.perf_counter() - start
    start = time.perf_counter()
    base = SearchRunner(dctx, targets, **base_opts)
    first = base.score(query, scoring, "local", free_ends_tuple("local"), width=base_width)
    cold = time.perf_counter() - start
    emit(
        args.out,
        "protein",
        {
            "bench": "protein-cold",
            "targets": len(targets),
            "residues": int(base.lengths.sum()),
            "generate_s": prepared,
            "first_search_s": cold,
            "kernel_s": first.kernel_seconds,
            "note": "first search: packing, upload, kernel build, one query",
            "base_kernel": base_name,
        },
    )
    reference_scores = first.scores
    variants = dict(VARIANTS)
    del variants["gframe"]  # the same kernel as the default in local mode
    if args.sweep:
        variants.update(SWEEP)
    mismatches = 0
    for name, (options, width) in variants.items():
        options = {**base_opts, **options}
        if not ok.get(family(options, width)):
            emit(args.out, "protein", {"bench": "protein", "variant": name, "skipped": True})
            continue
        try:
            runner = base.with_options(**options)
            result, wall = measure_search(
                runner, query, scoring, "local", free_ends_tuple("local"), width
            )
        except Exception as exc:
            emit(
                args.out, "protein", {"bench": "protein", "variant": name, "error": str(exc)[:500]}
            )
            continue
        same = bool(np.array_equal(result.scores, reference_scores))
        mismatches += not same
        record = search_record(
            "protein", runner, result, wall, scoring, "local", query, name, width
        )
        record["same_scores"] = same
        emit(args.out, "protein", record)
    # the group kernel: its launches over 1-8 command queues, and the multi-pass shape sets
    mismatches += group_sweep(args, "protein", base, query, scoring, reference_scores)
    # the other modes: the shifted frame (default) and the G frame
    for mode in ("global", "semiglobal"):
        ends = free_ends_tuple(mode)
        check32 = base.score(query, scoring, mode, ends, width=32)
        names = ("default", "gframe") if mode == "global" or args.sweep else ("default",)
        for name in (*names, "group"):  # the group kernel's global modes, measured
            runner = base.with_options(**{**base_opts, **VARIANTS[name][0]})
            result, wall = measure_search(runner, query, scoring, mode, ends, base_width)
            record = search_record(
                "protein", runner, result, wall, scoring, mode, query, name, None
            )
            record["same_scores"] = bool(np.array_equal(result.scores, check32.scores))
            mismatches += not record["same_scores"]
            emit(args.out, "protein", record)
    # a sample against the CPU long-pair path (exact, fast; identical to the oracle)
    rng = np.random.default_rng(0)
    sample = rng.choice(len(targets), 100, replace=False)
    for mode in ("local", "global"):
        scores = base.score(query, scoring, mode, free_ends_tuple(mode), width=base_width).scores
        want = [align_long(query, targets[k], scoring, mode, traceback=False).score for k in sample]
        same = bool(np.array_equal(scores[sample], want))
        mismatches += not same
        emit(args.out, "protein", {"bench": "protein-oracle-sample", "mode": mode, "same": same})
    # through the engine contract (blocks of 32 lanes, as dpalign.search hands them over)
    from dpalign.engine import Task, get_backend, query_batch, reference_blocks

    if not ok.get("default"):  # the backend runs the default kernel
        print(f"protein: {mismatches} mismatches", flush=True)
        return mismatches

    order = np.argsort(-base.lengths, kind="stable")
    start = time.perf_counter()
    blocks = reference_blocks(targets, order=order)
    backend = get_backend("opencl", device=args.device)
    task = Task("pairwise", scoring, "local", free_ends_tuple("local"))
    backend.score(task, query_batch([query]), blocks)
    engine_cold = time.perf_counter() - start
    start = time.perf_counter()
    results = backend.score(task, query_batch([query]), blocks)
    engine_warm = time.perf_counter() - start
    got = np.zeros(len(targets), np.int64)
    for block, res in zip(blocks, results, strict=True):
        lanes = block.ids >= 0
        got[block.ids[lanes]] = res.scores[0, lanes]
    same = bool(np.array_equal(got, reference_scores))
    mismatches += not same
    emit(
        args.out,
        "protein",
        {
            "bench": "protein-engine",
            "blocks": len(blocks),
            "cold_s": engine_cold,
            "warm_s": engine_warm,
            "same_scores": same,
            "gcups_wall": first.cells / engine_warm / 1e9,
        },
    )
    print(f"protein: {mismatches} mismatches", flush=True)
    return mismatches


def dna_targets(n, seed=300):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(300, 1_501, n)
    flat = rng.integers(0, 4, int(lengths.sum())).astype(np.uint8)
    return np.split(flat, np.cumsum(lengths)[:-1])


def dna(args):
    ok = usable(args)
    base_name, base_kernel = base_options(ok)
    if base_name is None:
        emit(args.out, "dna", {"bench": "dna", "error": "no search kernel ran"})
        return 1
    base_opts, base_width = base_kernel
    dctx = device_context(args.device)
    scoring = Scoring("NUC.4.4", (10, 1))
    targets = dna_targets(args.dna_targets)
    rng = np.random.default_rng(1)
    query = targets[7][100:350].copy()
    query[rng.random(len(query)) < 0.1] = rng.integers(0, 4, 1)
    base = SearchRunner(dctx, targets, **base_opts)
    mismatches = 0
    for mode in ("local", "semiglobal", "global"):
        ends = free_ends_tuple(mode)
        local_names = ("default", "strip-i16", "int32")
        for name in local_names if mode == "local" else ("default", "gframe", "int32", "group"):
            options, width = VARIANTS[name]
            options, width = {**base_opts, **options}, width or base_width
            if not ok.get(family(options, width)):
                continue
            runner = base.with_options(**options)
            result, wall = measure_search(runner, query, scoring, mode, ends, width)
            record = search_record("dna", runner, result, wall, scoring, mode, query, name, width)
            if name == "default":
                check32 = base.score(query, scoring, mode, ends, width=32)
            if name in ("default", "group"):
                record["same_scores"] = bool(np.array_equal(result.scores, check32.scores))
                mismatches += not record["same_scores"]
            emit(args.out, "dna", record)
        if mode == "local":
            mismatches += group_sweep(args, "dna", base, query, scoring, check32.scores)
    return mismatches


# --------------------------------------------------------------------------------------------
# (c) one long pair
# --------------------------------------------------------------------------------------------


def longpair(args):
    from dpalign.kernels_cl.antidiagonal import TileShape

    scoring = Scoring("NUC.4.4", (10, 1))
    a_text, b_text = workloads.long_pair(args.length)
    a, b = scoring.encode(a_text), scoring.encode(b_text)
    cells = len(a) * len(b)
    mismatches = 0
    align_long(a[:2000], b[:2000], scoring, "local")  # Numba builds outside the timings
    align_long(a[:2000], b[:2000], scoring, "global")
    sweep = [{}]  # PairOnDevice options: the default first
    try:
        _align_with(a[:3000], b[:3000], scoring, "global", Tiling(device_cells=1), args.device)
    except Exception as exc:  # e.g. PTX shuffles refused: measure the local-memory path instead
        emit(args.out, "longpair", {"bench": "longpair", "error": str(exc)})
        sweep = [{"shuffle": False}]
    if args.sweep:
        base = dict(sweep[0])
        sweep += [{**base, "shape": TileShape(r, 32, 8)} for r in (64, 256, 512)]
        sweep += [{**base, "shape": TileShape(128, 32, c)} for c in (4, 16)]
        sweep += [
            {**base, "prefetch": False},
            {**base, "prefetch": False, "shape": TileShape(256, 32, 8)},
        ]
        sweep += [{"shuffle": False}]
    for mode in ("global", "local"):
        for traceback in (False, True):
            start = time.perf_counter()
            want = align_long(a, b, scoring, mode, traceback=traceback)
            cpu = time.perf_counter() - start
            emit(
                args.out,
                "longpair",
                {
                    "bench": "longpair",
                    "engine": f"cpu {os.cpu_count()} threads",
                    "mode": mode,
                    "traceback": traceback,
                    "m": len(a),
                    "n": len(b),
                    "cells": cells,
                    "wall_s": cpu,
                    "gcups_wall": cells / cpu / 1e9,
                    "score": want.score,
                },
            )
            for options in sweep if not traceback else sweep[:1]:
                shape = options.get("shape")
                for _ in range(2):  # the first run builds the kernel
                    stats = RunStats()
                    start = time.perf_counter()
                    got = _align_with(
                        a,
                        b,
                        scoring,
                        mode,
                        Tiling(),
                        args.device,
                        traceback=traceback,
                        stats=stats,
                        **options,
                    )
                    wall = time.perf_counter() - start
                (worker,) = stats.workers.values()
                same = got == want
                mismatches += not same
                emit(
                    args.out,
                    "longpair",
                    {
                        "bench": "longpair",
                        "engine": "opencl",
                        "mode": mode,
                        "traceback": traceback,
                        "m": len(a),
                        "n": len(b),
                        "cells": cells,
                        "tile": None
                        if shape is None
                        else [shape.rows, shape.items, shape.per_item],
                        "shuffle": options.get("shuffle", True),
                        "prefetch": options.get("prefetch", True),
                        "device_cells": worker.cells,
                        "kernel_s": worker.seconds,
                        "gcups": worker.cells / worker.seconds / 1e9 if worker.seconds else 0.0,
                        "wall_s": wall,
                        "gcups_wall": cells / wall / 1e9,
                        "same_as_cpu": same,
                        "score": got.score,
                    },
                )
    print(f"longpair: {mismatches} mismatches", flush=True)
    return mismatches


# --------------------------------------------------------------------------------------------
# PTX / SASS of the built programs (NVIDIA), summary
# --------------------------------------------------------------------------------------------


def dump_sass(args):
    """ptxas resource use and SASS opcode counts of the main built programs (NVIDIA only),
    to ``DIR/sass_<command>.json``."""
    dctx = device_context(args.device)
    if not dctx.caps.nvidia or not args.out or not shutil.which("ptxas"):
        return
    folder = Path(args.out) / "sass_work"
    folder.mkdir(exist_ok=True)
    summary = {}
    for (name, options), (program, _) in list(dctx.programs.items()):
        if name == "search.cl" and ("-DS=32" not in options or "-DBITS=5" not in options):
            continue  # the protein defaults (and the int32 kernel) only
        tag = Path(name).stem + "_" + "_".join(o[2:] for o in options)
        ptx = folder / f"{tag}.ptx"
        ptx.write_bytes(program.binaries[0].rstrip(b"\0"))
        cubin = folder / f"{tag}.cubin"
        info = subprocess.run(
            ["ptxas", "-arch=sm_90", "-v", "-o", str(cubin), str(ptx)],
            capture_output=True,
            text=True,
        )
        entry = {"ptxas": info.stderr.strip()[-600:]}
        if shutil.which("cuobjdump") and cubin.exists():
            sass = subprocess.run(
                ["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True
            )
            ops = {}
            for line in sass.stdout.splitlines():
                parts = line.split("*/")
                if len(parts) > 1 and parts[1].strip():
                    words = parts[1].split()
                    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
                    ops[op.rstrip(";")] = ops.get(op.rstrip(";"), 0) + 1
            entry["sass_ops"] = dict(sorted(ops.items(), key=lambda kv: -kv[1])[:40])
        summary[tag] = entry
    (Path(args.out) / f"sass_{args.command}.json").write_text(json.dumps(summary, indent=1))
    shutil.rmtree(folder)


def summary(args):
    rows = []
    for path in args.files:
        for line in Path(path).read_text().splitlines():
            rows.append(json.loads(line))
    for r in rows:
        if r.get("bench") in ("protein", "dna") and "gcups" in r:
            print(
                f"{r['bench']:8} {r['mode']:10} {r['variant']:14} S={r['strip']:<3} "
                f"g={r['group']:<4} kernel {r['gcups']:8.1f} GCUPS  wall {r['wall_s']:.4f} s "
                f"({r['gcups_wall']:.0f})  widths {r['widths']} same={r.get('same_scores')}"
            )
        elif r.get("bench") == "longpair":
            kernel = f"kernel {r['gcups']:8.1f} GCUPS" if "gcups" in r else " " * 21
            print(
                f"longpair {r['engine']:14} {r['mode']:7} tb={r['traceback']!s:5} "
                f"tile={r.get('tile')} shfl={r.get('shuffle')} pf={r.get('prefetch')} "
                f"{kernel} wall {r['wall_s']:.3f} s "
                f"({r['gcups_wall']:.1f} GCUPS) same={r.get('same_as_cpu')}"
            )
        elif "probe" in r or r.get("bench") in (
            "protein-cold",
            "protein-engine",
            "protein-oracle-sample",
        ):
            print(json.dumps(r))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["check", "protein", "dna", "longpair", "all", "summary", "probe"]
    )
    parser.add_argument("--variant", choices=list(PROBES), help="probe: the kernel family")
    parser.add_argument("files", nargs="*")
    parser.add_argument("--out", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--sweep", action="store_true", help="also sweep kernel shapes")
    parser.add_argument("--targets", type=int, default=200_000, help="protein database size")
    parser.add_argument("--dna-targets", type=int, default=100_000)
    parser.add_argument("--length", type=int, default=100_000, help="long pair length")
    parser.add_argument("--sass", action="store_true", help="ptxas/SASS summary (NVIDIA)")
    parser.add_argument("--quiet", action="store_true", help="no summary table at the end")
    args = parser.parse_args(argv)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.command == "summary":
        summary(args)
        return 0
    if args.command == "probe":
        return probe(args)
    failures = 0
    started = time.perf_counter()
    if args.command == "all":  # each step in its own process: a faulting kernel stops only it
        probe_all(args)
        flags = [
            f"--{k.replace('_', '-')}={v}"
            for k, v in vars(args).items()
            if k in ("out", "device", "targets", "dna_targets", "length") and v is not None
        ]
        flags += [f"--{k}" for k in ("sweep", "sass") if getattr(args, k)]
        for step in ("check", "protein", "dna", "longpair"):
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, step, "--quiet", *flags])
            failures += done.returncode != 0
            print(
                f"== {step} took {time.perf_counter() - t0:.1f} s (exit {done.returncode})",
                flush=True,
            )
    else:
        step = {"check": check, "protein": protein, "dna": dna, "longpair": longpair}
        t0 = time.perf_counter()
        failures += step[args.command](args)
        print(f"== {args.command} took {time.perf_counter() - t0:.1f} s", flush=True)
    if args.sass:
        try:
            dump_sass(args)
        except Exception as exc:  # diagnostics only
            print(f"sass dump failed: {exc}", flush=True)
    if args.out and not args.quiet:
        files = sorted(str(p) for p in Path(args.out).glob("*.jsonl") if p.stem != "check")
        summary(argparse.Namespace(files=files))
    print(f"total {time.perf_counter() - started:.1f} s, {failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
