"""A command's whole wall time against its main phase, alone and through ``dpalign serve``.

Issue 13 asks, on a 2-core machine, for the whole command of 3 proteins against 20,000
(``workloads.protein_database(20_000)``, BLOSUM62, gaps 11 + k, local, one thread) to take at
most 1.5x its search phase. Each round runs the command in a fresh process twice, in turn:
handed to a running server of this installation, and alone (``DPALIGN_SERVER=off``); the
wall time is the parent's, around the whole process (interpreter start included), and the
phase is the command's own (``--report``). Outputs must be identical.

    python bench/serve_startup.py --rounds 7 [--targets 20000] [--queries 3] [--json out.json]
    python bench/serve_startup.py --workload papara --scale 1 --backend opencl --threads 16

``--workload papara`` runs ``dpalign papara`` on ``prank_like(scale)`` (the phase: scoring).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import _dpalign_entry  # noqa: E402
from dpalign.benchmarks.workloads import protein_database  # noqa: E402


def _fasta(path: Path, records) -> None:
    path.write_text("".join(f">{n}\n{s}\n" for n, s in records))


def _gpu_mib() -> list[int] | None:
    """Memory in use on each NVIDIA GPU (MiB), where nvidia-smi exists: a server's should
    not grow from command to command."""
    import shutil

    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True, text=True,
    )  # fmt: skip
    return [int(x) for x in done.stdout.split()] if done.returncode == 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--targets", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workload", choices=["search", "papara"], default="search")
    parser.add_argument("--scale", type=float, default=0.1, help="papara: prank_like(scale)")
    parser.add_argument("--backend", default="numba")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="dps"))
    env = {k: v for k, v in os.environ.items() if k != _dpalign_entry.SWITCH}
    env["XDG_RUNTIME_DIR"] = str(work)  # a server of its own
    # the installed command itself (``python -m`` would add runpy's imports), else a copy
    # of what pip writes for it (a tree on PYTHONPATH, not installed)
    dpalign = str(Path(sys.executable).parent / "dpalign")
    if not os.access(dpalign, os.X_OK):
        dpalign = str(work / "dpalign")
        Path(dpalign).write_text(
            f"#!{sys.executable}\nimport sys\nfrom _dpalign_entry import run\nsys.exit(run())\n"
        )
        os.chmod(dpalign, 0o755)
    if args.workload == "search":
        db = protein_database(args.targets)
        _fasta(work / "db.fa", db)
        _fasta(work / "q.fa", db[: args.queries])
        command = [
            dpalign, "search", "--query", "q.fa", "--db", "db.fa", "--matrix", "BLOSUM62",
            "--gap-open", "11", "--gap-extend", "1",
        ]  # fmt: skip
        phase = "search"
    else:
        from dpalign.benchmarks.workloads import prank_like

        prank_like(args.scale).write(work / "tree.nwk", work / "ref.fasta", work / "reads.fa")
        command = [
            dpalign, "papara", "--ref", "tree.nwk", "--msa", "ref.fasta", "--reads", "reads.fa",
        ]  # fmt: skip
        phase = "scoring"
    command += ["--threads", str(args.threads), "--backend", args.backend]
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "dpalign.cli", "serve", "--detach", "--idle", "600"],
        env=env, cwd=work, check=True, capture_output=True,
    )  # fmt: skip
    server_start = time.perf_counter() - started

    def once(served: bool, name: str) -> dict:
        run_env = env if served else {**env, _dpalign_entry.SWITCH: "off"}
        mark = time.perf_counter()
        done = subprocess.run(
            [*command, "--out", f"{name}.out", "--report", f"{name}.json"],
            env=run_env, cwd=work, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - mark
        if done.returncode:
            raise SystemExit(done.stderr)
        report = json.loads((work / f"{name}.json").read_text())
        phases = {k: v["seconds"] for k, v in report["phases"].items()}
        return {"wall": wall, "phase": phases[phase], "phases": phases, "gpu_mib": _gpu_mib()}

    once(True, "warm")  # the server reads and lays out the database once
    rows = {"served": [], "alone": []}
    try:
        for _ in range(args.rounds):
            rows["served"].append(once(True, "served"))
            rows["alone"].append(once(False, "alone"))
            same = (work / "served.out").read_bytes() == (work / "alone.out").read_bytes()
            if not same:
                raise SystemExit("served and alone outputs differ")
    finally:
        subprocess.run(
            [sys.executable, "-m", "dpalign.cli", "serve", "--stop"], env=env, cwd=work,
            capture_output=True,
        )  # fmt: skip
    summary = {"server_start_s": server_start, "rounds": args.rounds, "argv": command[1:]}
    for how, runs in rows.items():
        ratios = [r["wall"] / r["phase"] for r in runs]
        summary[how] = {
            "wall_median_s": statistics.median(r["wall"] for r in runs),
            "phase_median_s": statistics.median(r["phase"] for r in runs),
            "ratio_median": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
            "runs": runs,
        }
        got = summary[how]
        print(
            f"{how:6s}: whole {got['wall_median_s']:.3f} s, {phase} phase "
            f"{got['phase_median_s']:.3f} s, whole/{phase} {got['ratio_median']:.2f}"
            f" ({min(ratios):.2f}-{max(ratios):.2f}) over {args.rounds} runs"
        )
    if rows["served"][0]["gpu_mib"] is not None:
        print("GPU memory after each served run (MiB):", [r["gpu_mib"] for r in rows["served"]])
    ratio = summary["alone"]["wall_median_s"] / summary["served"]["wall_median_s"]
    print(
        f"server start (detached, ready): {server_start:.2f} s; outputs identical; "
        f"alone / served: {ratio:.2f}x"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
