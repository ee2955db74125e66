"""How a first run's thread-group search programs build: threads of one process against child
processes (issue 13: an empty kernel cache adds 4.9-7.5 s to ``dpalign search`` on the H100
host, most of it the global mode's 17 programs built by ``build_every_shape``).

For each mode (local, global with ``NO_BEST``, as BLOSUM62 queries of up to 1,000 take it),
from source, every variant in fresh processes with empty caches of its own (dpalign's
binaries, NVIDIA's ``CUDA_CACHE_PATH``, PoCL's ``POCL_CACHE_DIR``):

* ``one``: the widest program alone (a build's own time);
* ``threads``: every program of the mode with ``build_all`` on ``build_threads()`` threads
  (what the command's warm-up does);
* ``threads1``: the same on one thread (are the driver's builds serialised?);
* ``processes``: one child process per program, side by side, each with a context of its
  own, then one process loading every binary they left in the disk cache (``load``).

(At 8b498d2 a ``global-nomid`` mode also built the global programs without their
branch-free middle loop, ``MID_LOOP=0``: 0.39 s a build against 0.54, BENCHMARKS.md.)

Each row: seconds from the process start to the end of its builds (``wall``) and of the
builds alone (``build``). JSON lines in ``$OUT/opencl_build_probe.jsonl``, a table on stdout.

    python bench/opencl_build_probe.py                 # the GPU host, ~1 min
    python bench/opencl_build_probe.py --modes local   # PoCL: minutes (its compiler is slow)
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

ROOT = Path(__file__).resolve().parent.parent


def _defines(mode: str) -> list[dict]:
    """The warm-up's programs of ``mode``."""
    from dpalign.kernels_cl.context import device_context
    from dpalign.kernels_cl.search_group import every_shape_defines

    glob = mode != "local"
    return every_shape_defines(glob, device_context().caps.ptx_s16x2, glob)


def child(mode: str, which: list[int], threads: int) -> None:
    """Build programs ``which`` of ``mode`` (indices into its list) and print the timings."""
    began = time.perf_counter()
    from dpalign.kernels_cl.context import device_context
    from dpalign.kernels_cl.programs import build_all

    dctx = device_context()
    defines = _defines(mode)
    ready = time.perf_counter()
    infos = build_all(dctx, "search_group.cl", [defines[k] for k in which], threads)
    end = time.perf_counter()
    print(json.dumps({
        "context_s": ready - began, "build_s": end - ready, "count": len(which),
        "origins": sorted({i.origin for i in infos}), "device": dctx.caps.name,
    }))  # fmt: skip


def _env(folder: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for var, sub in (("DPALIGN_CACHE_DIR", "dpalign"), ("CUDA_CACHE_PATH", "cuda"),
                     ("POCL_CACHE_DIR", "pocl")):  # fmt: skip
        (folder / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(folder / sub)
    return env


def _start(mode: str, which: list[int], threads: int, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(threads)]
    cmd += [",".join(map(str, which))]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    line = out.strip().splitlines()[-1] if out.strip() else "{}"
    return json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="*", default=["global", "local"])
    parser.add_argument(
        "--variants", nargs="*", default=["one", "threads", "threads1", "processes"]
    )
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--child", nargs=3, metavar=("MODE", "THREADS", "WHICH"))
    args = parser.parse_args()
    if args.child:
        mode, threads, which = args.child
        child(mode, [int(k) for k in which.split(",")], int(threads))
        return
    from dpalign.kernels_cl.search_group import MULTI_SHAPES, SHAPES, build_threads

    n = len(SHAPES) + len(MULTI_SHAPES)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build_probe_"))
    rows = []
    print(f"{'mode':8} {'variant':10} {'wall s':>8} {'build s':>8} {'context s':>9}", flush=True)
    for mode in args.modes:
        for variant in args.variants:
            env = _env(work / f"{mode}-{variant}")
            start = time.perf_counter()
            if variant == "processes":
                procs = [_start(mode, [k], 1, env) for k in range(n)]
                got = [_result(p) for p in procs]
                children = time.perf_counter() - start
                load = _result(_start(mode, list(range(n)), build_threads(), env))
                row = {"wall_s": time.perf_counter() - start, "children_s": children,
                       "child_build_s": [g.get("build_s") for g in got],
                       "child_context_s": [g.get("context_s") for g in got],
                       "load": load, "build_s": load.get("build_s"),
                       "context_s": load.get("context_s")}  # fmt: skip
            else:
                which = [n - 1] if variant == "one" else list(range(n))
                threads = 1 if variant != "threads" else build_threads()
                got = _result(_start(mode, which, threads, env))
                row = {"wall_s": time.perf_counter() - start, **got}
            row.update(mode=mode, variant=variant, programs=n)
            rows.append(row)
            with open(out / "opencl_build_probe.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(
                f"{mode:8} {variant:10} {row['wall_s']:>8.2f} {row.get('build_s') or 0:>8.2f} "
                f"{row.get('context_s') or 0:>9.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
