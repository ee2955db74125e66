"""The anti-diagonal tile kernel alone, every tile variant on the same long pair: issue 16 item 2.

    python bench/longpair_kernel.py [--lengths 300000,1000000] [--out DIR] [--budget 150]
                                    [--variants NAME,...] [--e2e] [--e2e-variants NAME,...]

One process, one OpenCL device. For each length, ``workloads.long_pair(L)`` (NUC.4.4, gaps
10/1) is put on the device once per variant (:class:`PairOnDevice`) and its whole matrix is
filled (``fill_region``, no checkpoints), global and local mode. Timing: the OpenCL profiling
events of the fill's launches (kernel) and the call (wall); every variant's last row and end
cell are compared with the first variant's (the kernel before this work), and any difference
is printed as MISMATCH. ``--e2e`` then runs ``align_long`` (score only and traceback, both
modes) with the default tiles and with each ``--e2e-variants`` tile, warm, checking identical
results.
Writes ``longpair_kernel.json`` under ``--out`` (default ``$OUT``).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

#: name -> (TileShape fields (rows, items, per_item, packed), more -D settings: of the packed
#: kernel, of the 32-bit kernel). The first is the kernel before this work (default tiles,
#: profile values loaded one by one).
VARIANTS = {
    "i32 128x(32x8) before": ((128, 32, 8, False), {}, {"VECLOAD": 0, "LDS_EDGES": 0}),
    "s16 256x(2x32x8)": ((256, 32, 8, True), {}, {}),
    "s16 512x(2x32x8)": ((512, 32, 8, True), {}, {}),
    "s16 256x(2x32x16)": ((256, 32, 16, True), {}, {}),
    "i32 128x(32x8)": ((128, 32, 8, False), {}, {}),
    "i32 128x(32x8) edges in local memory": ((128, 32, 8, False), {}, {"LDS_EDGES": 1}),
    "i32 256x(32x8)": ((256, 32, 8, False), {}, {}),
    "s16 256x(2x32x8) edges in global": ((256, 32, 8, True), {"LDS_EDGES": 0}, {}),
    "s16 256x(2x32x8) no-unroll": ((256, 32, 8, True), {"UNROLL2": 0}, {}),
    "s16 256x(2x32x8) chain2": ((256, 32, 8, True), {"CHAIN": 2}, {}),
    "s16 256x(2x32x8) track-store": ((256, 32, 8, True), {"TRACK_STORE": 1}, {}),
    "s16 128x(2x32x8)": ((128, 32, 8, True), {}, {}),
    "s16 256x(2x32x4)": ((256, 32, 4, True), {}, {}),
    "s16 128x(2x32x4)": ((128, 32, 4, True), {}, {}),
    # end to end only: the traceback's recomputations in packed 128 x (2 x 32 x 4) tiles
    "s16 256x(2x32x8) packed retile": ((256, 32, 8, True), {}, {}),
}
#: The traceback's recomputation tiles of a variant (``--e2e``), if not ``--e2e-retile``.
RETILES = {"s16 256x(2x32x8) packed retile": (128, 32, 4, True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="300000,1000000")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--budget", type=float, default=150.0)
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v not in RETILES))
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeat", type=int, default=1, help="timed fills per variant")
    parser.add_argument("--e2e", action="store_true", help="align_long too, default vs packed")
    parser.add_argument(
        "--e2e-variants", default="i32 128x(32x8) before", help="variants for --e2e"
    )
    parser.add_argument(
        "--e2e-retile", default="", help="rows,items,per_item of the traceback's recomputation"
    )
    args = parser.parse_args()

    from dpalign.benchmarks import workloads
    from dpalign.kernels_cl import antidiagonal as AD
    from dpalign.kernels_cl.antidiagonal import PairOnDevice, TileShape
    from dpalign.kernels_cl.context import device_context
    from dpalign.longpair import Tiling, _Aligner, plan_lanes
    from dpalign.scoring import Scoring, free_ends_tuple

    began = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    dctx = device_context(args.device)
    print(dctx.describe(), flush=True)
    records: list[dict] = [{"device": dctx.describe()}]
    scoring = Scoring("NUC.4.4", (10, 1))
    names = [v for v in args.variants.split(",") if v]
    for length in (int(float(x)) for x in args.lengths.split(",")):
        a_text, b_text = workloads.long_pair(length)
        a, b = scoring.encode(a_text), scoring.encode(b_text)
        cells = len(a) * len(b)
        firsts = {}
        for name, mode in ((name, mode) for name in names for mode in ("global", "local")):
            lanes = plan_lanes(scoring, len(a), len(b), mode, Tiling(lane_bits=32))
            job = _Aligner(a, b, scoring, mode, free_ends_tuple(mode), Tiling(), 1, lanes)
            whole = job.global_region()
            first = firsts.get(mode)
            if time.perf_counter() - began > args.budget:
                print(f"over budget: skipped {name} {mode} {length}", flush=True)
                continue
            fields, defines, wide_defines = VARIANTS[name]
            shape = TileShape(*fields)
            _set(AD, defines, wide_defines)
            t0 = time.perf_counter()
            try:
                pair = PairOnDevice(
                    dctx,
                    a,
                    b,
                    scoring.matrix,
                    scoring.gap_open,
                    scoring.gap_extend,
                    mode == "local",
                    shape,
                )
            except Exception as exc:  # noqa: BLE001 - a variant that does not build
                print(f"FAILED {name} {mode}: {str(exc)[-2000:]}", flush=True)
                records.append({"variant": name, "mode": mode, "error": str(exc)[-2000:]})
                continue
            setup = time.perf_counter() - t0
            n_tr = -(-len(a) // shape.rows)
            n_tc = -(-len(b) // pair.shape.cols)
            none_r, none_c = np.full(n_tr, -1), np.full(n_tc, -1)
            runs = []
            # warm-up: the top-left corner (program, first launches), then the whole
            k = min(len(a), len(b), 20 * pair.shape.cols)
            kr, kc = -(-k // shape.rows), -(-k // pair.shape.cols)
            t0 = time.perf_counter()
            pair.fill_region(
                0,
                0,
                np.ascontiguousarray(whole.top[:, : k + 1]),
                np.ascontiguousarray(whole.left[:, : k + 1]),
                none_r[:kr],
                none_c[:kc],
                shape.rows,
                lanes.neg_store,
            )
            runs.append((time.perf_counter() - t0, None))
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fill = pair.fill_region(
                    0, 0, whole.top, whole.left, none_r, none_c, shape.rows, lanes.neg_store
                )
                runs.append((time.perf_counter() - t0, fill))
            wall, fill = runs[-1]
            got = (fill.last_row.copy(), fill.best)
            same = None
            if first is None:
                firsts[mode] = got
            else:
                same = bool(np.array_equal(got[0], first[0]) and got[1] == first[1])
                if not same:
                    print(f"MISMATCH {name} {mode} {length}", flush=True)
            record = {
                "length": length,
                "m": len(a),
                "n": len(b),
                "mode": mode,
                "variant": name,
                "packed_used": pair.packed is not None,
                "defines": {**defines, **wide_defines},
                "ptx": bool(dctx.caps.ptx_s16x2),
                "widened": bool(fill.widened),
                "setup_s": round(setup, 3),
                "wall_s": round(wall, 4),
                "warmup_wall_s": round(runs[0][0], 4),
                "walls_s": [round(x[0], 4) for x in runs[1:]],
                "kernel_s": round(fill.kernel_seconds, 4),
                "launches": fill.launches,
                "gcups_kernel": round(cells / fill.kernel_seconds / 1e9, 1),
                "gcups_wall": round(cells / wall / 1e9, 1),
                "us_per_launch": round(fill.kernel_seconds / fill.launches * 1e6, 2),
                "score_end": [int(fill.last_row[0, -1])] if mode == "global" else fill.best,
                "same_as_first": same,
            }
            records.append(record)
            print(json.dumps(record), flush=True)
            del pair
    if args.e2e:
        records += _e2e(args, began, args.e2e_variants.split(","), VARIANTS)
    with open(os.path.join(args.out, "longpair_kernel.json"), "w") as f:
        json.dump(records, f, indent=1)
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


def _set(module, packed: dict, wide: dict) -> None:
    """The kernels' extra -D settings for the next pair put on the device."""
    module.PACKED_DEFINES.clear()
    module.PACKED_DEFINES.update(packed)
    module.WIDE_DEFINES.clear()
    module.WIDE_DEFINES.update(wide)


def _e2e(args, began, names, variants) -> list[dict]:
    """``align_long`` with the default tiles and each packed variant: wall, kernel, same?"""
    from dpalign.benchmarks import workloads
    from dpalign.gcups import RunStats
    from dpalign.longpair import Tiling, align_long
    from dpalign.scoring import Scoring

    scoring = Scoring("NUC.4.4", (10, 1))
    length = max(int(float(x)) for x in args.lengths.split(","))
    a_text, b_text = workloads.long_pair(length)
    a, b = scoring.encode(a_text), scoring.encode(b_text)
    cells = len(a) * len(b)
    records = []
    from dpalign.kernels_cl import antidiagonal as AD

    tiles = [(None, {}, {}, None)] + [(*variants[n], n) for n in names if n]
    given = tuple(int(x) for x in args.e2e_retile.split(",")) if args.e2e_retile else None
    for mode in ("global", "local"):
        for traceback in (False, True):
            first = None
            for tile, defines, wide_defines, name in tiles:
                retile = RETILES.get(name, given)
                if time.perf_counter() - began > args.budget:
                    continue
                _set(AD, defines, wide_defines)
                tiling = Tiling(device_tile=tile, device_retile=retile if tile else None)
                for _ in range(2):
                    stats = RunStats()
                    t0 = time.perf_counter()
                    got = align_long(
                        a,
                        b,
                        scoring,
                        mode,
                        traceback=traceback,
                        tiling=tiling,
                        backend="opencl",
                        device=args.device,
                        stats=stats,
                    )
                    wall = time.perf_counter() - t0
                kernel = sum(w.seconds for w in stats.workers.values())
                first = got if first is None else first
                record = {
                    "e2e": True,
                    "mode": mode,
                    "traceback": traceback,
                    "variant": name or "default",
                    "tile": tile,
                    "retile": retile if tile else None,
                    "defines": {**defines, **wide_defines},
                    "wall_s": round(wall, 3),
                    "gcups_wall": round(cells / wall / 1e9, 1),
                    "kernel_s": round(kernel, 3),
                    "score": got.score,
                    "end": [got.a_end, got.b_end],
                    "same_as_default": got == first,
                }
                if got != first:
                    print(f"MISMATCH e2e {mode} traceback={traceback} {tile}", flush=True)
                records.append(record)
                print(json.dumps(record), flush=True)
    return records


if __name__ == "__main__":
    main()
