"""Where the group search's batches wait: a timeline of ``dpalign search`` on the GPU (issue 13).

The whole ``dpalign search`` command (1,000 UniProt-like proteins against
``workloads.protein_database(200_000)``, BLOSUM62 11 + k, ``--backend opencl``, as
``bench/search_batch_gpu.py`` runs it) in a child process per run, with every
:class:`~dpalign.kernels_cl.search_group.GroupSearch` tracing its batches: host timestamps of
each step of :meth:`~dpalign.kernels_cl.search_group.GroupSearch.submit` (tables, host
memory, inputs, buffers, then per launch: layout wait, kernel object, set_args, enqueue,
copy, flush), the launcher's wait for the results, the gather, and each launch's OpenCL
profiling times (queued, submit, start, end), put on the host's clock through the
launches' queued times. The bucket layouts' packing and upload times are traced too.

Per run (a line on stdout, every batch in ``$OUT/search_submit_probe.json``, the ``-v``
logs in ``$OUT/search_submit_probe.log``):

* ``first``: the first batch's submit (seconds), how long after its start its first kernel
  started, and whether it returned before its kernels ended (``ahead``: seconds, negative =
  it waited for them);
* ``submit``: the submits' seconds (sum, median) and the step that took them (``steps``);
* ``device``: the span from the first kernel's start to the last one's end, the time some
  kernel ran (``busy``), the idle rest (``idle``) and the longest gaps, each with what the
  launching thread was doing then;
* ``ahead``: batches whose submit returned before their kernels ended (if submit blocks on
  its own batch, only one batch is ever in flight).

Runs are ``mode[:submit][:upload][:flags]`` (``submit``: ``search_group.SUBMIT_MODES``,
here v0 unless given (main's of 2026-11-26; the command's default is rect); ``upload``:
``create`` unless given (the command's default: copy); flags joined by ``+``: ``eager``,
the child runs with ``CUDA_MODULE_LOADING=EAGER``; ``cold``, with empty kernel caches of its
own). Hits of runs of one mode are compared byte for byte.

    python bench/search_submit_probe.py --out $OUT                     # the GPU host, ~2 min
    python bench/search_submit_probe.py --runs global global:rect:copy local:rect:copy
    python bench/search_submit_probe.py --quick --group --runs global global:rect  # PoCL
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
RUNS = [
    "global",
    "global:rect:copy",
    "semiglobal",
    "semiglobal:rect:copy",
    "local",
    "local:rect:copy",
    "global:rect:copy:cold",
    "global",
    "global:rect:copy",
]
SCORING = ["--matrix", "BLOSUM62", "--gap-open", "11", "--gap-extend", "1"]


def parse_run(spec: str) -> dict:
    parts = (spec.split(":") + ["", "", "", ""])[:4]
    mode, submit, upload, flags = parts
    flags = set(flags.split("+")) - {""}
    unknown = flags - {"eager", "cold"}
    if unknown:
        raise SystemExit(f"unknown flags {unknown} in {spec!r}")
    return {
        "mode": mode,
        "submit": submit or "v0",
        "upload": upload or "create",
        "eager": "eager" in flags,
        "cold": "cold" in flags,
    }


# ---------------------------------------------------------------------------------------
# The child: one traced command
# ---------------------------------------------------------------------------------------


def child(argv: list[str], dump: Path) -> int:
    """Run ``dpalign search argv`` in this process with every GroupSearch tracing; write the
    traces to ``dump``; end as the command does (``os._exit``, no interpreter teardown)."""
    entered = time.perf_counter()  # the clock is system-wide: the parent compares
    from dpalign.kernels_cl import search_group

    made = []
    init = search_group.GroupSearch.__init__

    def traced(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.trace = []
        made.append(self)

    search_group.GroupSearch.__init__ = traced
    import threading

    from dpalign.kernels_cl.search import SearchRunner

    spans = []  # (what, began, ended, thread) of the pipeline's other host steps

    def timed(what, method):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spans.append((what, t, time.perf_counter(), threading.current_thread().name))

        return wrapper

    for what in ("_open_chunk", "_close_chunk", "_finish"):
        setattr(SearchRunner, what, timed(what, getattr(SearchRunner, what)))
    if os.environ.get("DPALIGN_PROBE_GROUP") == "1":  # --group: the group kernel on any device
        from dpalign.kernels_cl import search

        search.takes_group_kernel = lambda task, local_kernel, ptx: task.packable()
    from dpalign import cli

    began = time.perf_counter()
    rc = cli.main(["search", *argv])
    ended = time.perf_counter()
    dump.write_text(
        json.dumps(
            {
                "rc": rc,
                "entered": entered,
                "spans": spans,
                "began": began,
                "ended": ended,
                "groups": [
                    {
                        "submit_mode": g.submit_mode,
                        "upload_mode": g.upload_mode,
                        "batches": g.trace,
                        "layouts": g.layout_trace,
                    }
                    for g in made
                ],
            }
        )
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


# ---------------------------------------------------------------------------------------
# Analysis
# ---------------------------------------------------------------------------------------


def analyse(data: dict) -> dict:
    """The figures of one traced run (see the module docstring)."""
    batches = [b for g in data["groups"] for b in (g["batches"] or [])]
    if not batches:
        return {"batches": 0}
    batches.sort(key=lambda b: b["marks"][0][1])
    # Device nanoseconds -> host seconds: each launch's queued time lies inside its enqueue
    # call, which ended at its "enqueue" mark; the smallest difference is the offset.
    diffs = []
    for b in batches:
        enq = [t for label, t in b["marks"] if label == "enqueue"]
        for t, ev in zip(enq, b["events"], strict=False):
            diffs.append(t - ev[0] * 1e-9)
    offset = min(diffs)
    t0 = batches[0]["marks"][0][1]

    def host(ns: float) -> float:
        return ns * 1e-9 + offset - t0

    rows = []
    steps_total: dict[str, float] = {}
    intervals = []
    for k, b in enumerate(batches):
        marks = b["marks"]
        steps: dict[str, float] = {}
        for (_, a), (label, t) in zip(marks, marks[1:], strict=False):
            steps[label] = steps.get(label, 0.0) + t - a
            steps_total[label] = steps_total.get(label, 0.0) + t - a
        start, end = marks[0][1] - t0, marks[-1][1] - t0
        kstart = min(host(ev[2]) for ev in b["events"])
        kend = max(host(ev[3]) for ev in b["events"])
        intervals += [(host(ev[2]), host(ev[3])) for ev in b["events"]]
        copies = [c for c in b.get("copies", []) if c]
        rows.append(
            {
                "batch": k,
                "slot": b["slot"],
                "launches": len(b["events"]),
                "submit": [round(start, 4), round(end, 4)],
                "kernels": [round(kstart, 4), round(kend, 4)],
                "copy_end": round(max(host(c[3]) for c in copies), 4) if copies else None,
                "wait": [round(w - t0, 4) for w in b["wait"]] if b.get("wait") else None,
                "gather": [round(w - t0, 4) for w in b["gather"]] if b.get("gather") else None,
                "ahead": round(kend - end, 4),
                "steps": {k2: round(v, 4) for k2, v in steps.items()},
                "longest_step": max(steps.items(), key=lambda kv: kv[1])[0] if steps else None,
                "buckets": b["buckets"],
            }
        )
    intervals.sort()
    busy, gaps = 0.0, []
    cur_s, cur_e = intervals[0]
    for s, e in intervals[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append((cur_e, s - cur_e))
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    span = cur_e - intervals[0][0]

    def doing(t: float) -> str:
        for r in rows:
            if r["submit"][0] <= t <= r["submit"][1]:
                # the step in progress at t
                marks = batches[r["batch"]]["marks"]
                for (_, a), (label, b2) in zip(marks, marks[1:], strict=False):
                    if a - t0 <= t <= b2 - t0:
                        return f"submit {r['batch']} ({label})"
                return f"submit {r['batch']}"
            if r["wait"] and r["wait"][0] <= t <= r["wait"][1]:
                return f"wait {r['batch']}"
        for what, a, b2, _ in data.get("spans", []):
            if what != "_finish" and a - t0 <= t <= b2 - t0:
                return what
        return "other"

    gaps.sort(key=lambda g: -g[1])
    first = rows[0]
    layouts = [x for g in data["groups"] for x in g["layouts"]]
    return {
        "batches": len(rows),
        "main_s": round(data["ended"] - data["began"], 3),
        "imports_s": round(data["began"] - data["entered"], 3),
        "first_submit_s": round(first["submit"][1] - first["submit"][0], 4),
        "first_kernel_after_submit_start_s": round(first["kernels"][0] - first["submit"][0], 4),
        "first_ahead_s": first["ahead"],
        "first_steps": first["steps"],
        "submit_sum_s": round(sum(r["submit"][1] - r["submit"][0] for r in rows), 4),
        "submit_median_s": round(
            statistics.median(r["submit"][1] - r["submit"][0] for r in rows), 4
        ),
        "steps_total_s": {k: round(v, 4) for k, v in sorted(steps_total.items())},
        "batches_ahead": sum(1 for r in rows if r["ahead"] > 0.002),
        "wait_sum_s": round(sum(r["wait"][1] - r["wait"][0] for r in rows if r["wait"]), 4),
        "device_span_s": round(span, 4),
        "device_busy_s": round(busy, 4),
        "device_idle_s": round(span - busy, 4),
        "first_kernel_at_s": round(intervals[0][0], 4),
        "gaps_over_2ms": sum(1 for g in gaps if g[1] > 0.002),
        "longest_gaps": [
            {"at": round(at, 4), "s": round(length, 4), "host": doing(at)}
            for at, length in gaps[:8]
        ],
        "finish_s": round(
            sum(b2 - a for w, a, b2, _ in data.get("spans", []) if w == "_finish"), 4
        ),
        "open_close_s": round(
            sum(b2 - a for w, a, b2, _ in data.get("spans", []) if w != "_finish"), 4
        ),
        "layouts": len(layouts),
        "layout_upload_s": round(sum(x[2] - x[1] for x in layouts), 4),
        "layout_upload_max_s": round(max((x[2] - x[1] for x in layouts), default=0.0), 4),
        "layout_pack_s": round(sum(x[1] - x[0] for x in layouts), 4),
        "rows": rows,
    }


# ---------------------------------------------------------------------------------------
# The parent
# ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="results folder")
    parser.add_argument("--runs", nargs="*", default=None, help=f"default: {' '.join(RUNS)}")
    parser.add_argument("--quick", action="store_true", help="3 queries x 1,000 (PoCL)")
    parser.add_argument(
        "--group", action="store_true", help="the group kernel on any device (PoCL checks)"
    )
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--targets", type=int, default=None)
    parser.add_argument("--time-limit", type=float, default=170.0, help="seconds in all")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        dump, *argv = args.child
        sys.exit(child(argv, Path(dump)))

    from search_e2e import query_set, write_fasta

    from dpalign.benchmarks import workloads

    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_q = args.queries or (3 if args.quick else 1000)
    n_t = args.targets or (1000 if args.quick else 200_000)
    work = Path(tempfile.mkdtemp(prefix="dpalign-probe-"))
    db = workloads.protein_database(n_t)
    db_res = write_fasta(work / "db.fa", db)
    queries = query_set(n_q)
    q_res = write_fasta(work / "q.fa", queries)
    write_fasta(work / "q3.fa", queries[:3])  # the warm-up searches
    write_fasta(work / "db300.fa", db[:300])
    cells = db_res * q_res
    print(f"workload: {n_q} x {n_t} ({cells:.3e} cells) in {time.perf_counter() - t_start:.1f} s")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for var, name in (("DPALIGN_CACHE_DIR", "dpalign"), ("CUDA_CACHE_PATH", "cuda"),
                      ("POCL_CACHE_DIR", "pocl"), ("NUMBA_CACHE_DIR", "numba")):  # fmt: skip
        env.setdefault(var, str(work / name))
    base = ["--query", str(work / "q.fa"), "--db", str(work / "db.fa"), *SCORING]
    base += ["--backend", "opencl", "--top", "5", "--no-progress", "-v"]
    # Programs built before the traced runs: a small search per kernel family (its warm-up
    # builds every program of the mode).
    warmed = set()
    results = []
    for index, spec in enumerate(args.runs or RUNS):
        run = parse_run(spec)
        family = "local" if run["mode"] == "local" else "global"
        if family not in warmed:
            mark = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "dpalign.cli", "search", "--query", str(work / "q3.fa"),
                 "--db", str(work / "db300.fa"), *SCORING, "--backend", "opencl", "--mode",
                 run["mode"], "--no-progress", "--out", str(work / "warm.tsv")],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            warmed.add(family)
            print(f"programs of {family} mode built in {time.perf_counter() - mark:.1f} s")
        if time.perf_counter() - t_start > args.time_limit:
            print(f"{spec}: skipped (time limit)")
            continue
        name = f"{index:02d}-" + spec.replace(":", "-").replace("+", "-")
        child_env = dict(env)
        child_env["DPALIGN_OPENCL_SEARCH_SUBMIT"] = run["submit"]
        child_env["DPALIGN_OPENCL_SEARCH_UPLOAD"] = run["upload"]
        if args.group:
            child_env["DPALIGN_PROBE_GROUP"] = "1"
        if run["eager"]:
            child_env["CUDA_MODULE_LOADING"] = "EAGER"
        if run["cold"]:  # empty kernel caches of its own
            for var in (
                "DPALIGN_CACHE_DIR",
                "CUDA_CACHE_PATH",
                "POCL_CACHE_DIR",
                "NUMBA_CACHE_DIR",
            ):
                child_env[var] = tempfile.mkdtemp(prefix="cold-", dir=work)
        dump = work / f"{name}.trace.json"
        hits = work / f"{name}.tsv"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(dump), *base]
        cmd += ["--mode", run["mode"], "--out", str(hits)]
        mark = time.perf_counter()
        proc = subprocess.run(cmd, env=child_env, cwd=ROOT, capture_output=True, text=True)
        ended = time.perf_counter()
        wall = ended - mark
        lines = [x for x in proc.stderr.splitlines() if "RuntimeWarning" not in x]
        with open(out / "search_submit_probe.log", "a") as fh:
            fh.write(f"===== {spec}\n" + "\n".join(lines[-60:]) + "\n")
        row = {"run": spec, "name": name, **run, "rc": proc.returncode, "wall_s": round(wall, 3)}
        row["gcups_wall"] = round(cells / wall / 1e9, 1)
        if proc.returncode == 0 and dump.exists():
            data = json.loads(dump.read_text())
            row["start_s"] = round(data["entered"] - mark, 3)  # interpreter start-up
            row["exit_s"] = round(ended - data["ended"], 3)  # the dump and the exit
            row.update(analyse(data))
        results.append(row)
        print(summary(row), flush=True)
    # hits of one mode, byte for byte
    by_mode: dict[str, list] = {}
    for row in results:
        path = work / f"{row['name']}.tsv"
        if path.exists():
            by_mode.setdefault(row["mode"], []).append(path)
    same = {
        mode: all(p.read_bytes() == paths[0].read_bytes() for p in paths[1:])
        for mode, paths in by_mode.items()
    }
    print("hits identical within each mode:", same)
    with open(out / "search_submit_probe.json", "w") as fh:
        json.dump({"cells": cells, "runs": results, "same_hits": same}, fh)
    print(f"all done in {time.perf_counter() - t_start:.1f} s")


def summary(row: dict) -> str:
    if row.get("rc") != 0 or "first_submit_s" not in row:
        return f"{row['run']:28s} rc {row.get('rc')} wall {row.get('wall_s')}"
    gaps = ", ".join(f"{g['s']:.3f}@{g['at']:.2f} {g['host']}" for g in row["longest_gaps"][:3])
    return (
        f"{row['run']:28s} wall {row['wall_s']:6.2f} s ({row['gcups_wall']:7.1f}) = start "
        f"{row['start_s']:.2f} + imports {row['imports_s']:.2f} + main {row['main_s']:.2f} + "
        f"exit {row['exit_s']:.2f} | first "
        f"submit {row['first_submit_s']:.3f} s, kernel "
        f"+{row['first_kernel_after_submit_start_s']:.3f}, "
        f"ahead {row['first_ahead_s']:+.3f} | submits {row['submit_sum_s']:.3f} s "
        f"({row['batches_ahead']}/{row['batches']} ahead), waits {row['wait_sum_s']:.3f} | "
        f"device {row['device_span_s']:.3f} busy {row['device_busy_s']:.3f} idle "
        f"{row['device_idle_s']:.3f} | steps {row['steps_total_s']} | gaps {gaps}"
    )


if __name__ == "__main__":
    main()
