"""Time dpalign's FASTA reader against scikit-bio's and Biopython's on one database.

Writes ``n`` protein records (``workloads.protein_database``, UniProt-like lengths, wrapped at
60 columns, a description on each header) as plain and gzip FASTA, then reads each file with
every reader in turn, alternating, and prints the best and median seconds per reader::

    python bench/fasta_reader.py --records 200000 --repeat 5 [--old path/to/old_io.py]

``--old`` times a previous ``dpalign/io.py`` (e.g. ``git show REV:dpalign/io.py``) too, on the
plain file (it could not read gzip). Every reader must return the same names and sequences.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _write(folder: Path, n: int) -> tuple[Path, Path]:
    from dpalign.benchmarks.workloads import protein_database

    plain = folder / f"db{n}.fa"
    with open(plain, "w") as handle:
        for name, seq in protein_database(n):
            handle.write(f">{name} some description OS=Homo sapiens\n")
            handle.writelines(seq[k : k + 60] + "\n" for k in range(0, len(seq), 60))
    packed = folder / f"db{n}.fa.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes(), 6))
    return plain, packed


def _readers(old: str | None) -> dict:
    import dpalign.io

    def dp(path):
        return [(r.name, r.seq) for r in dpalign.io.read_fasta(path)]

    def dp_block(path):
        block = dpalign.io.read_fasta_block(path)
        return block.names, block.offsets

    def skbio_reader(path):
        import skbio.io

        return [(s.metadata["id"], str(s)) for s in skbio.io.read(str(path), format="fasta")]

    def biopython(path):
        from Bio import SeqIO

        if str(path).endswith(".gz"):
            with gzip.open(path, "rt") as handle:
                return [(r.id, str(r.seq)) for r in SeqIO.parse(handle, "fasta")]
        return [(r.id, str(r.seq)) for r in SeqIO.parse(str(path), "fasta")]

    readers = {
        "dpalign read_fasta": dp,
        "dpalign read_fasta_block": dp_block,
        "scikit-bio": skbio_reader,
        "Biopython": biopython,
    }
    if old:
        spec = importlib.util.spec_from_file_location("dpalign._old_io", old)
        module = importlib.util.module_from_spec(spec)
        module.__package__ = "dpalign"
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)

        def previous(path):
            if str(path).endswith(".gz"):
                return None
            return [(r.name, r.seq) for r in module.read_fasta(path)]

        readers["dpalign before (skbio inside)"] = previous
    return readers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--old", help="a previous dpalign/io.py to time as well")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fasta_reader."))
    files = _write(folder, args.records)
    readers = _readers(args.old)
    times: dict[str, list[float]] = {}
    want = {}
    for _ in range(args.repeat):
        for path in files:
            for label, read in readers.items():
                start = time.perf_counter()
                got = read(path)
                seconds = time.perf_counter() - start
                if got is None:
                    continue
                times.setdefault(f"{label} [{path.name}]", []).append(seconds)
                if "block" not in label:
                    want.setdefault(path.name, got)
                    if got != want[path.name]:
                        sys.exit(f"{label} read {path.name} differently")
    sizes = {p.name: p.stat().st_size for p in files}
    print(
        f"{args.records} records; " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sizes.items())
    )
    for label, values in times.items():
        print(f"{label:<50} best {min(values):7.3f} s  median {statistics.median(values):7.3f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"records": args.records, "seconds": times}, indent=1)
        )


if __name__ == "__main__":
    main()
