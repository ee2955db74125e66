"""One long pair on one device against column bands on every device: ``--help``.

Fills a related ``L x L`` pair (score and end cell, the forward pass that dominates a long
alignment) with :func:`dpalign.longpair.align_long` on the first OpenCL GPU alone, the same
device cut into row chunks (what a progress bar costs), and column bands on every GPU of the
host (:mod:`dpalign.bands`, one band per GPU, for each ``--chunk-tiles``), checks that every
case gives the same score and end cell, and writes wall time, GCUPS and the speed-up over one
device as JSON. With a single GPU the bands run on two queues of it (a check that the pipeline
works there, not a speed-up). The issue's goal: two H100s >= 1.8x one on a 3 Mb pair.

    python bench/longpair_bands.py --length 3e6 --mode global --out $OUT/bands.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_long_pair import related  # noqa: E402

from dpalign.bands import Bands  # noqa: E402
from dpalign.longpair import Tiling, align_long  # noqa: E402
from dpalign.scoring import Scoring  # noqa: E402


def _gpus(any_device: bool) -> list[str]:
    from dpalign.devices import opencl_devices

    found, why = opencl_devices()
    gpus = [d["id"] for d in found if d["type"] == "GPU" or any_device]
    if not gpus:
        raise SystemExit(f"no OpenCL GPU: {why or [d['id'] for d in found]}")
    return gpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=float, default=3e6)
    parser.add_argument("--mode", default="global", choices=["global", "local", "semiglobal"])
    parser.add_argument(
        "--chunk-tiles", default="2048,4096", help="tile rows per chunk to try (comma list)"
    )
    parser.add_argument("--budget", type=float, default=170, help="seconds; later cases skipped")
    parser.add_argument("--out", default="bands.json")
    parser.add_argument(
        "--any-device", action="store_true", help="not only GPUs (a dry run on PoCL)"
    )
    args = parser.parse_args()
    from dpalign.kernels_cl.backend import OpenCLBackend

    start = time.perf_counter()
    gpus = _gpus(args.any_device)[:1] if args.any_device else _gpus(False)
    if len(gpus) > 1:
        devices = [OpenCLBackend(device=g) for g in gpus]
        kind = f"{len(gpus)} GPUs"
    else:
        devices = [OpenCLBackend(device=gpus[0]), OpenCLBackend(device=gpus[0], stream=1)]
        kind = "2 queues of 1 GPU"
    scoring = Scoring((2, -3), (5, 2))
    a_text, b_text = related(int(args.length), 0.05, 0.002, 0)
    a, b = scoring.encode(a_text), scoring.encode(b_text)
    cells = len(a) * len(b)
    tile_rows = 128
    # compile the kernels on every device before timing (a small pair, forced onto them)
    warm = Tiling(device_cells=1)
    for device in devices:
        align_long(a[:20000], b[:20000], scoring, args.mode, traceback=False, backend=device,
                   tiling=warm)  # fmt: skip
    rows = []

    def case(name, **options):
        if time.perf_counter() - start > args.budget:
            rows.append({"case": name, "skipped": "over the time budget"})
            print(f"{name}: skipped (budget)", flush=True)
            return
        t0 = time.perf_counter()
        r = align_long(a, b, scoring, args.mode, traceback=False, **options)
        seconds = time.perf_counter() - t0
        row = {
            "case": name,
            "seconds": seconds,
            "gcups": cells / seconds / 1e9,
            "score": r.score,
            "end": [r.a_end, r.b_end],
        }
        rows.append(row)
        print(f"{name}: {seconds:.2f} s, {row['gcups']:.0f} GCUPS, score {r.score}", flush=True)

    case("1 device", backend=devices[0])
    tiles = [int(t) for t in args.chunk_tiles.split(",")]
    case(
        f"1 device, chunks of {tiles[0]} tile rows (progress bar)",
        backend=devices[0],
        progress=lambda _cells: None,
        bands=Bands(chunk_rows=tiles[0] * tile_rows),
    )
    case(
        f"{kind}, threads, chunks of {tiles[0]} tile rows",
        bands=Bands(devices=devices, chunk_rows=tiles[0] * tile_rows, processes=False),
    )
    for t in tiles:
        case(
            f"{kind}, processes, chunks of {t} tile rows",
            bands=Bands(devices=devices, chunk_rows=t * tile_rows),
        )
    # two bands per device on two queues of it (threads of this process: one context per
    # device), so that one band's fill and drain overlaps the other's full diagonals
    doubled = devices + [OpenCLBackend(device=d.device, stream=d.stream + 2) for d in devices]
    case(
        f"{kind} x 2 queues ({len(doubled)} bands), threads, chunks of 1024 tile rows",
        bands=Bands(devices=doubled, chunk_rows=1024 * tile_rows, processes=False),
    )
    done = [r for r in rows if "seconds" in r]
    same = len({(r["score"], tuple(r["end"])) for r in done}) == 1
    base = done[0]["seconds"] if done else None
    for r in done:
        r["speedup"] = base / r["seconds"]
    summary = {
        "length": [len(a), len(b)],
        "mode": args.mode,
        "bands_on": kind,
        "identical": same,
        "cases": rows,
        "devices": [d.describe() for d in devices],
    }
    with open(args.out, "w") as out:
        json.dump(summary, out, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "cases"}))
    if not same:
        raise SystemExit("the cases disagree")


if __name__ == "__main__":
    main()
