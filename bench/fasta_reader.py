"""Time dpalign's FASTA reader against scikit-bio's and Biopython's on one database.

Writes ``n`` protein records (``workloads.protein_database``, UniProt-like lengths, wrapped at
60 columns, a description on each header) as plain and gzip FASTA, checks that every reader
returns the same names and sequences (on the first 20,000 records), then times each reader
reading each whole file, each run in a fresh process (timed inside it, imports excluded), the
readers alternating, and prints the best and median seconds::

    python bench/fasta_reader.py --records 200000 --repeat 5 [--old path/to/old_io.py]

``--old`` times a previous ``dpalign/io.py`` too (``git show REV:dpalign/io.py > old_io.py``),
on the plain file only if it cannot read gzip.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# Each reader: a statement that reads PATH into a list (the objects each library gives).
READERS = {
    "dpalign read_fasta": "from dpalign.io import read_fasta\nout = read_fasta(PATH)",
    "dpalign read_fasta_block": (
        "from dpalign.io import read_fasta_block\nout = read_fasta_block(PATH).names"
    ),
    "scikit-bio skbio.io.read": (
        "import skbio.io\nout = list(skbio.io.read(PATH, format='fasta'))"
    ),
    "Biopython SeqIO.parse": (
        "import gzip\nfrom Bio import SeqIO\n"
        "handle = gzip.open(PATH, 'rt') if PATH.endswith('.gz') else open(PATH)\n"
        "out = list(SeqIO.parse(handle, 'fasta'))"
    ),
    "dpalign before": (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('dpalign._old_io', OLD)\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "module.__package__ = 'dpalign'\nsys.modules[spec.name] = module\n"
        "spec.loader.exec_module(module)\nout = module.read_fasta(PATH)"
    ),
}

_TIMER = """
import time, sys
PATH, OLD = sys.argv[1], sys.argv[2]
{imports}
start = time.perf_counter()
{read}
print(time.perf_counter() - start, len(out))
"""


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


def _timed(label: str, path: Path, old: str) -> float | None:
    lines = READERS[label].splitlines()
    imports = "\n".join(ln for ln in lines if ln.startswith(("import", "from")))
    read = "\n".join(ln for ln in lines if not ln.startswith(("import", "from")))
    code = _TIMER.format(imports=imports, read=read)
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), old], capture_output=True, text=True
    )
    if done.returncode:
        return None  # e.g. the old reader on gzip
    return float(done.stdout.split()[0])


def _same_everywhere(path: Path, old: str | None) -> None:
    import importlib.util

    import skbio.io
    from Bio import SeqIO

    from dpalign.io import read_fasta, read_fasta_block

    ours = [(r.name, r.seq) for r in read_fasta(path)]
    block = read_fasta_block(path)
    assert block.names == [n for n, _ in ours] and block.sequences() == [s for _, s in ours]
    assert ours == [(s.metadata["id"], str(s)) for s in skbio.io.read(str(path), format="fasta")]
    assert ours == [(r.id, str(r.seq)) for r in SeqIO.parse(str(path), "fasta")]
    if old:
        spec = importlib.util.spec_from_file_location("dpalign._old_io", old)
        module = importlib.util.module_from_spec(spec)
        module.__package__ = "dpalign"
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        assert ours == [(r.name, r.seq) for r in module.read_fasta(path)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--old", help="a previous dpalign/io.py to time as well")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fasta_reader."))
    (folder / "check").mkdir()
    small, _ = _write(folder / "check", 20_000)
    _same_everywhere(small, args.old)
    files = _write(folder, args.records)
    labels = [k for k in READERS if args.old or k != "dpalign before"]
    times: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for path in files:
            for label in labels:
                seconds = _timed(label, path, args.old or "")
                if seconds is not None:
                    times.setdefault(f"{label} [{path.name}]", []).append(seconds)
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in files)
    print(f"{args.records} records; {sizes}; same names and sequences from every reader")
    for label, values in times.items():
        best, median = min(values), statistics.median(values)
        print(f"{label:<45} best {best:7.3f} s  median {median:7.3f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"records": args.records, "seconds": times}))


if __name__ == "__main__":
    main()
