"""A million reads through `dpalign papara --no-ref-gaps` on the PRANK tree: wall time and peak RSS.

The 1604.PRANK reference (802 taxa x 3,060 columns, its tree) with ``--reads`` reads of
90-110 bp simulated from the held-out taxa (the same tree and alignment as
``prank_like(1.0)``: reads are drawn last from the same seed). The whole command runs once in
a fresh process (after a small warm-up run that fills the kernel caches); its wall time is
measured outside it and its peak resident memory is the largest of the process and its
children (``getrusage``)::

    OUT=/tmp/out python bench/papara_million.py                      # H100: 1,000,000 reads
    OUT=/tmp/out python bench/papara_million.py --reads 20000        # here

Results: ``$OUT/papara_million.json``.
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

ROOT = Path(__file__).resolve().parents[1]


def _write(n_reads: int, folder: Path, taxa: int = 802) -> dict:
    from dpalign.benchmarks.simulate import simulate

    paths = {"tree": folder / "tree.nwk", "msa": folder / "ref.fasta"}
    paths["reads"] = folder / f"reads_{n_reads}.fasta"
    if not all(p.exists() for p in paths.values()):
        # prank_like(1.0)'s tree and reference (802 taxa, 3,060 root columns, 200 held out);
        # the reads are cut from the held-out taxa here, all at once: simulate()'s read loop
        # (a few NumPy calls per read) took 36 s for a million on the H100 host
        held = 200 if taxa == 802 else max(4, taxa // 4)
        data = simulate(taxa, 3_060, 1, (90, 110), held_out=held, seed=1604, prefix="taxon")
        data.write(paths["tree"], paths["msa"], folder / "unused_read.fasta")
        _write_reads(paths["reads"], data.held_rows, n_reads, seed=1604)
    return paths


def _write_reads(path: Path, held_rows: dict[str, str], n_reads: int, seed: int) -> None:
    """``n_reads`` reads of 90-110 bp cut from the held-out taxa (round robin), 0.5% base
    errors and 0.1% N, as ``simulate`` makes them; a million in a few seconds."""
    import numpy as np

    rng = np.random.default_rng(seed)
    names = list(held_rows)
    seqs = [np.frombuffer(row.replace("-", "").encode(), np.uint8) for row in held_rows.values()]
    source = np.arange(n_reads) % len(seqs)
    src_len = np.array([len(x) for x in seqs])[source]
    size = np.minimum(rng.integers(90, 111, n_reads), src_len)
    start = (rng.random(n_reads) * (src_len - size + 1)).astype(np.int64)
    flat = np.concatenate(seqs)
    offset = np.concatenate(([0], np.cumsum([len(x) for x in seqs])[:-1]))[source] + start
    ends = np.cumsum(size)
    index = np.repeat(offset - (ends - size), size) + np.arange(int(ends[-1]))
    reads = flat[index]
    errors = rng.random(reads.size) < 0.005
    reads[errors] = np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, int(errors.sum()))]
    reads[rng.random(reads.size) < 0.001] = ord("N")
    text = reads.tobytes().decode()
    width = len(str(n_reads))
    bounds = np.concatenate(([0], ends)).tolist()
    source_names = [names[k] for k in source.tolist()]
    first, last = (start + 1).tolist(), (start + size).tolist()
    with open(path, "w") as handle:
        step = 100_000
        for lo in range(0, n_reads, step):
            handle.write(
                "".join(
                    f">read{k + 1:0{width}d} {source_names[k]} {first[k]}-{last[k]}\n"
                    f"{text[bounds[k] : bounds[k + 1]]}\n"
                    for k in range(lo, min(lo + step, n_reads))
                )
            )


def _command(paths: dict, reads: Path, out: Path, report: Path, args) -> list[str]:
    argv = [sys.executable, "-m", "dpalign.cli", "papara", "--ref", str(paths["tree"])]
    argv += ["--msa", str(paths["msa"]), "--reads", str(reads), "--out", str(out)]
    argv += ["--no-ref-gaps", "--backend", args.backend, "--report", str(report)]
    argv += ["--no-progress"]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    return argv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=1_000_000)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--taxa", type=int, default=802, help="reference taxa (fewer: a memory check here)"
    )
    parser.add_argument("--data", default=None, help="folder for the inputs (default: temp)")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="papara_million.") as tmp:
        folder = Path(args.data) if args.data else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        paths = _write(args.reads, folder, args.taxa)
        written = time.perf_counter() - t0
        print(f"{args.reads} reads written in {written:.1f} s", flush=True)
        # warm-up: 50 of the reads, so the timed run finds the kernel caches filled
        warm_reads = Path(tmp) / "warm.fasta"
        with open(paths["reads"]) as src, open(warm_reads, "w") as dst:
            for k, line in enumerate(src):
                if k >= 100:
                    break
                dst.write(line)
        warm = subprocess.run(
            _command(paths, warm_reads, Path(tmp) / "warm.phy", Path(tmp) / "warm.json", args),
            capture_output=True,
            text=True,
            env=env,
        )
        if warm.returncode:
            print(warm.stderr, file=sys.stderr)
            return 1
        report = Path(tmp) / "run.json"
        aligned = Path(tmp) / "aligned.phy"
        log = Path(tmp) / "run.log"
        with open(log, "w") as sink:
            start = time.perf_counter()
            proc = subprocess.Popen(
                _command(paths, paths["reads"], aligned, report, args),
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
            )
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
        text = log.read_text()
        if os.waitstatus_to_exitcode(status):
            print(text, file=sys.stderr)
            return 1
        data = json.loads(report.read_text())
        result = {
            "reads": args.reads,
            "backend": args.backend,
            "threads": args.threads,
            "wall_s": round(wall, 2),
            # the command's own process (its device processes, if any, are counted apart)
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "output_bytes": aligned.stat().st_size,
            "phases_s": {k: round(v["seconds"], 2) for k, v in data["phases"].items()},
            "scoring_gcups": round(data["phases"]["scoring"]["gcups"], 1),
            "settings": data["settings"],
            "summary": text.strip().splitlines()[-1],
        }
    (out / "papara_million.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
