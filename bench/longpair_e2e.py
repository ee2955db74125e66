"""``dpalign align`` end to end on a long related pair: wall time and peak RSS: ``--help``.

Writes ``A.fa.gz`` (the query, gzip) and ``B.fa`` of ``--length`` (make_long_pair.py), runs
``dpalign align A B --mode MODE --format sam --no-progress`` once per case in a fresh process
(after a small warm-up run of each case, so that Numba's and OpenCL's compiled kernels are
cached: the figures are warm), and records each run's wall time and peak RSS (``wait4``). All
cases must write the same SAM records. ``--check-length`` first runs ``--check-cases`` on a
smaller pair of the same kind (e.g. the device against the CPU path).

Cases: ``numba`` (every core), ``opencl`` (the first GPU), ``opencl-all`` (column bands on
every GPU), ``opencl-prune`` / ``opencl-all-prune`` (the same with ``--prune``, local mode),
``bands-N`` (N single-threaded CPU bands), ``dask-N`` (one band per worker of a local Dask
cluster of N processes). ``-v`` shows the runs' logs.

    python bench/longpair_e2e.py --length 1e7 --cases opencl-all \\
        --check-length 1e6 --check-cases numba,opencl --out $OUT/e2e.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_long_pair import related, write  # noqa: E402

CASES = {
    "auto": [],  # the default backend
    "numba": ["--backend", "numba"],
    "opencl": ["--backend", "opencl"],
    "opencl-all": ["--backend", "opencl", "--device", "all"],
    "opencl-prune": ["--backend", "opencl", "--prune"],
    "opencl-all-prune": ["--backend", "opencl", "--device", "all", "--prune"],
}
RUN = "import sys; from dpalign.cli import main; sys.exit(main(sys.argv[1:]))"


def _options(case: str) -> list[str]:
    if case.startswith("bands-"):
        return ["--backend", "numba", "--bands", case.split("-", 1)[1]]
    if case.startswith("dask-"):
        return ["--dask-workers", case.split("-", 1)[1]]
    return CASES[case]


def _run(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit code) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", RUN, *argv])
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss / 1024, proc.returncode


def _records(path: str) -> list[str]:
    with open(path) as f:
        return [line for line in f if not line.startswith("@PG")]


def run_pair(
    length: int, cases: list[str], mode: str, folder: str, tag: str, verbose: bool = False
) -> dict:
    os.makedirs(folder, exist_ok=True)
    a_path, b_path = os.path.join(folder, f"{tag}_A.fa.gz"), os.path.join(folder, f"{tag}_B.fa")
    a, b = related(length, 0.05, 0.002, 1)
    write(a_path, "query", a)
    write(b_path, "target", b)
    warm_a, warm_b = os.path.join(folder, "warm_A.fa"), os.path.join(folder, "warm_B.fa")
    wa, wb = related(60_000, 0.05, 0.002, 2)
    write(warm_a, "query", wa)
    write(warm_b, "target", wb)
    rows, outputs = [], {}
    for case in cases:
        base = ["align", "--mode", mode, "--format", "sam", "--no-progress", *_options(case)]
        base += ["-v"] if verbose else []
        warm_s, _, _ = _run([*base, warm_a, warm_b, "--out", os.path.join(folder, "warm.sam")])
        out = os.path.join(folder, f"{tag}_{case}.sam")
        seconds, rss, code = _run([*base, a_path, b_path, "--out", out])
        cells = len(a) * len(b)
        row = {
            "case": case,
            "length": [len(a), len(b)],
            "seconds": seconds,
            "gcups_end_to_end": cells / seconds / 1e9,
            "peak_rss_mb": rss,
            "exit": code,
            "warm_up_seconds": warm_s,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
        if code == 0:
            outputs[case] = _records(out)
    same = len({tuple(v) for v in outputs.values()}) == 1 and len(outputs) == len(set(cases))
    return {"mode": mode, "cases": rows, "identical": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=float, default=1e7)
    parser.add_argument("--cases", default="opencl")
    parser.add_argument("--check-length", type=float, default=0)
    parser.add_argument("--check-cases", default="numba,opencl")
    parser.add_argument("--mode", default="local")
    parser.add_argument("--folder", default=os.environ.get("TMPDIR", "/tmp"))
    parser.add_argument("--out", default="e2e.json")
    parser.add_argument("-v", "--verbose", action="store_true", help="the runs' -v logs")
    args = parser.parse_args()
    result = {}
    if args.check_length:
        result["check"] = run_pair(
            int(args.check_length),
            args.check_cases.split(","),
            args.mode,
            args.folder,
            "check",
            args.verbose,
        )
        print("check identical:", result["check"]["identical"], flush=True)
    cases = args.cases.split(",")
    result["run"] = run_pair(int(args.length), cases, args.mode, args.folder, "run", args.verbose)
    with open(args.out, "w") as out:
        json.dump(result, out, indent=1)
    ok = all(part["identical"] for part in result.values())
    print("identical:", ok)
    if not ok:
        raise SystemExit("the cases disagree (or one failed)")


if __name__ == "__main__":
    main()
