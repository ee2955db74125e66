"""Whole-command time of ``dpalign papara --accurate`` against the default mode (issue 15: at
most 1.5x), on the placement-accuracy cases, any backend.

    python bench/accurate_time.py [--backend opencl] [--cases a,b] [--runs 5] [--threads N]
                                  [--out DIR]

Each case is simulated as ``bench/placement_accuracy.py`` does (same seeds, same data), then the
two commands (``python -c 'dpalign.cli.main()'``, what the ``dpalign`` script runs, so that it
works where only ``PYTHONPATH`` points at the project) run in turn (default, accurate, default,
...; one untimed warm-up pair first) so that drift in the machine's speed falls on both alike.
The median of the per-pair ratios is the figure (wall; CPU, user + system, beside it). Writes
``DIR/accurate_time.json`` (every run's seconds) and prints a table. With ``--baseline TREE``
(another checkout of the project, e.g. ``git archive main | tar -x -C TREE``) the accurate
mode of that tree runs too, between the two (default, baseline, accurate, ...), so that a
change's cost is measured against its baseline under the same load.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement_accuracy import CASES  # noqa: E402

from dpalign.benchmarks.simulate import simulate  # noqa: E402

_DPALIGN = [sys.executable, "-c", "import sys; from dpalign.cli import main; sys.exit(main())"]


def _seconds(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="accurate_time_out")
    parser.add_argument("--baseline", help="another checkout whose accurate mode runs too")
    args = parser.parse_args(argv)
    env = None
    if args.baseline:
        import os

        env = dict(os.environ, PYTHONPATH=str(Path(args.baseline).resolve()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for case in args.cases.split(","):
        spec = CASES[case]
        data = simulate(**spec)
        case_dir = out / case
        case_dir.mkdir(parents=True, exist_ok=True)
        data.write(case_dir / "tree.nwk", case_dir / "ref.fasta", case_dir / "reads.fasta")
        base = [
            *_DPALIGN, "papara", "--ref", str(case_dir / "tree.nwk"), "--msa",
            str(case_dir / "ref.fasta"), "--reads", str(case_dir / "reads.fasta"), "--format",
            "fasta", "--backend", args.backend,
        ]  # fmt: skip
        if args.threads:
            base += ["--threads", str(args.threads)]
        if spec.get("protein"):
            base.append("--protein")
        default = [*base, "--out", str(case_dir / "default.fasta")]
        accurate = [*base, "--out", str(case_dir / "accurate.fasta"), "--accurate"]
        baseline = [*base, "--out", str(case_dir / "baseline.fasta"), "--accurate"]
        _seconds(default), _seconds(accurate)  # warm-up: caches, kernels
        if env is not None:
            _seconds(baseline, env)
        timed, then = [], []
        for _ in range(args.runs):
            d = _seconds(default)
            if env is not None:
                then.append(_seconds(baseline, env))
            timed.append((d, _seconds(accurate)))
        pairs = [(d[0], a[0]) for d, a in timed]
        ratio = statistics.median(a / d for d, a in pairs)
        cpu_ratio = statistics.median(a[1] / d[1] for d, a in timed)
        row = {
            "case": case,
            "backend": args.backend,
            "default_s": [d for d, _ in pairs],
            "accurate_s": [a for _, a in pairs],
            "median_default_s": statistics.median(d for d, _ in pairs),
            "median_accurate_s": statistics.median(a for _, a in pairs),
            "median_ratio": ratio,
            "default_cpu_s": [d[1] for d, _ in timed],
            "accurate_cpu_s": [a[1] for _, a in timed],
            "median_cpu_ratio": cpu_ratio,
        }
        if then:
            row["baseline_s"] = [b[0] for b in then]
            row["median_baseline_ratio"] = statistics.median(
                b[0] / d for b, (d, _) in zip(then, pairs, strict=True)
            )
        results.append(row)
        print(
            f"{case:<24} default {row['median_default_s']:6.2f} s  accurate "
            f"{row['median_accurate_s']:6.2f} s  ratio {ratio:.2f}  CPU ratio {cpu_ratio:.2f}"
            + (f"  baseline ratio {row['median_baseline_ratio']:.2f}" if then else ""),
            file=sys.stderr,
            flush=True,
        )
    (out / "accurate_time.json").write_text(json.dumps(results, indent=1) + "\n")
    extra = bool(args.baseline)
    print(
        "| case | default s | accurate s | accurate / default, wall (median of pairs) | "
        "CPU (user + system) |" + (" baseline's accurate / default, wall |" if extra else "")
    )
    print("|---|---|---|---|---|" + ("---|" if extra else ""))
    for r in results:
        print(
            f"| {r['case']} | {r['median_default_s']:.2f} | {r['median_accurate_s']:.2f} | "
            f"{r['median_ratio']:.2f} | {r['median_cpu_ratio']:.2f} |"
            + (f" {r['median_baseline_ratio']:.2f} |" if extra else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
