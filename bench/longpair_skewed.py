"""One long pair on one GPU against every GPU of the host in skewed row bands: ``--help``.

Aligns a related ``L x L`` pair (score and end cell by default; ``--traceback`` adds whole
alignments) with :func:`dpalign.longpair.align_long`: on the first GPU alone, on every GPU
in main's column bands of row chunks (``Bands(devices=...)``), as two independent halves
joined on the middle row (``Bands(halves=True)``: global scores), and in skewed row bands
(``Bands(skewed=True)``, :mod:`dpalign.kernels_cl.skewed`) with the GPUs in one OpenCL
context (their copies and uploads wait on each other's events on the devices) or in one
context each (the host polls each copy, then uploads). Checks that every case gives the
same result and writes wall time, GCUPS, the speed-up over one GPU and each device's kernel
seconds as JSON. The issue's goal: two GPUs >= 1.8x one on a 3 Mb pair.

    python bench/longpair_skewed.py --length 3e6 --out $OUT/skewed.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_long_pair import related  # noqa: E402

from dpalign import bands as bands_module  # noqa: E402
from dpalign.bands import Bands  # noqa: E402
from dpalign.gcups import RunStats  # noqa: E402
from dpalign.longpair import Tiling, align_long  # noqa: E402
from dpalign.scoring import Scoring  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=float, default=3e6)
    parser.add_argument("--mode", default="global", choices=["global", "local", "semiglobal"])
    parser.add_argument("--cases", default="one,chunks,shared,separate,one,shared",
                        help="comma list of one, chunks, halves, shared, separate, shared-host, "
                        "shared-H[-L[-B[-W]]] (band_tiles, lag, batch, window; 0: default), "
                        "shared-inorder, separate-inorder (no copy queues), "
                        "one-tb, shared-tb; a suffix @tN: tile rows up to N times the "
                        "pair's (skewed, halves, one), @b: balanced bands (skewed), "
                        "@B: unbalanced")  # fmt: skip
    parser.add_argument("--budget", type=float, default=200, help="seconds; later cases skipped")
    parser.add_argument("--any-device", action="store_true", help="PoCL: two queues of it")
    parser.add_argument("--out", default="skewed.json")
    args = parser.parse_args()
    from dpalign.devices import opencl_devices
    from dpalign.kernels_cl.backend import OpenCLBackend

    start = time.perf_counter()
    found, why = opencl_devices()
    gpus = [d["id"] for d in found if d["type"] == "GPU" or args.any_device]
    if not gpus:
        raise SystemExit(f"no OpenCL GPU: {why or [d['id'] for d in found]}")
    if len(gpus) < 2:
        gpus = [gpus[0], gpus[0]]  # two queues of one device: a dry run, not a speed-up
    streams = [gpus[:k].count(g) for k, g in enumerate(gpus)]
    share = ",".join(gpus)
    single = [OpenCLBackend(device=g, stream=s) for g, s in zip(gpus, streams, strict=True)]
    shared = [OpenCLBackend(device=g, stream=s, share=share)
              for g, s in zip(gpus, streams, strict=True)]  # fmt: skip
    scoring = Scoring((2, -3), (5, 2))
    a_text, b_text = related(int(args.length), 0.05, 0.002, 0)
    a, b = scoring.encode(a_text), scoring.encode(b_text)
    cells = len(a) * len(b)
    # compile every kernel on every device before timing (a small pair, forced onto them)
    warm = Tiling(device_cells=1)
    small = (a[:40000], b[:40000], scoring, args.mode)
    for device in single:
        align_long(*small, traceback=False, backend=device, tiling=warm)
    for group, waits in ((single, False), (shared, True)):
        for tb in (False, True):
            align_long(*small, traceback=tb, tiling=warm, bands=Bands(
                devices=group, skewed=True, min_cells=1,
                skew_options={"device_waits": waits, "band_tiles": 16}))  # fmt: skip
    print(f"warm-up done in {time.perf_counter() - start:.1f} s", flush=True)
    rows = []

    held = {}
    hold_devices = bands_module.hold_devices

    def timed_hold(*pos, **kw):  # the pair's set-up on every device, before the fill
        t0 = time.perf_counter()
        try:
            return hold_devices(*pos, **kw)
        finally:
            held["hold_s"] = round(time.perf_counter() - t0, 4)

    bands_module.hold_devices = timed_hold

    def case(name, traceback=False, **options):
        if time.perf_counter() - start > args.budget:
            rows.append({"case": name, "skipped": "over the time budget"})
            print(f"{name}: skipped (budget)", flush=True)
            return
        stats = RunStats()
        held.clear()
        t0 = time.perf_counter()
        r = align_long(a, b, scoring, args.mode, traceback=traceback, stats=stats, **options)
        seconds = time.perf_counter() - t0
        row = {
            "case": name,
            "traceback": traceback,
            "seconds": seconds,
            "gcups": cells / seconds / 1e9,
            "score": r.score,
            "end": [r.a_end, r.b_end],
            "start": [r.a_start, r.b_start],
            "cigar_chars": len(r.cigar) if traceback else 0,
            "devices": {k: [w.cells, round(w.seconds, 3)] for k, w in stats.workers.items()},
        }
        if "skewed" in name and skewed.last_stats:
            row["skewed"] = {k: _rounded(v) for k, v in skewed.last_stats.items()}
            skewed.last_stats.clear()
        if "halves" in name and bands_module.last_halves:
            row["skewed"] = {k: round(v, 3) for k, v in bands_module.last_halves.items()}
            bands_module.last_halves.clear()
        if held:
            row.setdefault("skewed", {}).update(held)
        rows.append(row)
        print(f"{name}: {seconds:.2f} s, {row['gcups']:.0f} GCUPS, score {r.score}, "
              f"kernel s per device {row['devices']}", flush=True)  # fmt: skip
        if "skewed" in row:
            print(f"    {json.dumps(row['skewed'], default=str)}", flush=True)

    from dpalign.kernels_cl import skewed

    halves_tall = bands_module.HALVES_TALL
    for name in args.cases.split(","):
        name, *marks = name.split("@")
        tall = next((int(m[1:]) for m in marks if m.startswith("t")), None)
        balance = True if "b" in marks else False if "B" in marks else None
        note = f", tile rows x{tall}" if tall else ""
        note += {True: ", balanced", False: ", unbalanced", None: ""}[balance]
        tb = name.endswith("-tb")
        kind = name.removesuffix("-tb")
        bands_module.HALVES_TALL = tall or halves_tall
        if kind == "one":
            more = {}
            if tall:  # the GPUs' packed tiles (GPU_TILE_PACKED), taller
                more["tiling"] = Tiling(device_tile=(256 * tall, 32, 8, True))
            case(f"1 GPU{' traceback' if tb else ''}{note}", tb, backend=single[0], **more)
        elif kind == "halves":
            case(f"{len(gpus)} GPUs, halves (top forward, bottom reversed, joined){note}", tb,
                 bands=Bands(devices=single, halves=True))  # fmt: skip
        elif kind == "chunks":
            case(f"{len(gpus)} GPUs, column bands of row chunks (main)", tb,
                 bands=Bands(devices=single))  # fmt: skip
        elif kind.startswith(("shared", "separate")):
            group = single if kind.startswith("separate") else shared
            waits = kind.startswith("shared") and "host" not in kind
            extra = {"device_waits": waits}
            if "inorder" in kind:  # copies and uploads on the devices' in-order queues
                extra["copy_queues"] = False
            # shared-H[-L[-B[-W]]]: band tile rows, lag, batch, window (0: the default)
            numbers = [int(x) for x in kind.split("-") if x.isdigit()]
            for key, value in zip(("band_tiles", "lag", "batch", "window"), numbers, strict=False):
                if value:
                    extra[key] = value
            if tall:
                extra["tall"] = tall
            if balance is not None:
                extra["balance"] = balance
            how = "one context, devices wait" if waits else "host waits"
            if kind.startswith("separate"):
                how = "a context each, host waits"
            if len(extra) > 1:
                how += ", " + ", ".join(f"{k} {v}" for k, v in extra.items() if k != "device_waits")
            label = f"{len(gpus)} GPUs, skewed bands ({how}){' traceback' if tb else ''}"
            case(label, tb, bands=Bands(devices=group, skewed=True, skew_options=extra))
        else:
            raise SystemExit(f"unknown case {name!r}")
    done = [r for r in rows if "seconds" in r]
    for tb in (False, True):
        same = [r for r in done if r["traceback"] == tb]
        base = [r["seconds"] for r in same if r["case"].startswith("1 GPU")]
        for r in same:
            if base:
                r["speedup"] = round(min(base) / r["seconds"], 3)
    results = {(r["score"], tuple(r["end"]), tuple(r["start"]) if r["traceback"] else None,
                r["cigar_chars"]) for r in done}  # fmt: skip
    identical = (
        len({(s, e) for s, e, _, _ in results}) <= 1
        and len({(s, e, st, c) for s, e, st, c in results if st is not None}) <= 1
    )
    summary = {
        "length": [len(a), len(b)],
        "mode": args.mode,
        "identical": identical,
        "cases": rows,
        "devices": [d.describe() for d in single],
    }
    with open(args.out, "w") as out:
        json.dump(summary, out, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "cases"}))
    for r in done:
        print(f"  {r['case']}: {r['seconds']:.2f} s  x{r.get('speedup', 0):.2f}")
    if not identical:
        raise SystemExit("the cases disagree")


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


if __name__ == "__main__":
    main()
