"""Write two related long DNA sequences as FASTA: ``python bench/make_long_pair.py --help``.

``A`` is a random genome with substitutions (``--subst``) and short indels (``--indel`` per
position, lengths 1-10) applied to a copy of ``B``'s middle, so a local alignment finds a long
path with gaps, like two chromosomes of related strains. Everything is vectorised: 100 Mb takes
a few seconds. A name ending in ``.gz`` is written gzip-compressed.
"""

from __future__ import annotations

import argparse
import gzip

import numpy as np

LETTERS = np.frombuffer(b"ACGT", np.uint8)


def related(length: int, subst: float, indel: float, seed: int) -> tuple[bytes, bytes]:
    """``(a, b)``: ``b`` random of ``length``; ``a`` a mutated copy of ``b[length/20 :]``."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 4, length).astype(np.uint8)
    a = b[length // 20 :].copy()
    changed = rng.random(a.size) < subst
    a[changed] = (a[changed] + rng.integers(1, 4, int(changed.sum()))) % 4
    sites = np.flatnonzero(rng.random(a.size) < indel)
    sizes = rng.integers(1, 11, sites.size)
    deletion = rng.random(sites.size) < 0.5
    keep = np.ones(a.size, bool)
    for s, k in zip(sites[deletion].tolist(), sizes[deletion].tolist(), strict=True):
        keep[s : s + k] = False
    inserted = rng.integers(0, 4, int(sizes[~deletion].sum())).astype(np.uint8)
    where = np.repeat(sites[~deletion], sizes[~deletion])
    a = np.insert(a, where, inserted)[np.insert(keep, where, True)]
    return LETTERS[a].tobytes(), LETTERS[b].tobytes()


def fasta(name: str, seq: bytes, width: int = 60) -> bytes:
    lines = [seq[k : k + width] for k in range(0, len(seq), width)]
    return b">" + name.encode() + b"\n" + b"\n".join(lines) + b"\n"


def write(path: str, name: str, seq: bytes) -> None:
    data = fasta(name, seq)
    if path.endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=1) as out:
            out.write(data)
    else:
        with open(path, "wb") as out:
            out.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="output FASTA of the query (.gz: compressed)")
    parser.add_argument("b", help="output FASTA of the target")
    parser.add_argument("--length", type=float, default=300_000, help="length of B (3e5)")
    parser.add_argument("--subst", type=float, default=0.05)
    parser.add_argument("--indel", type=float, default=0.002)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    a, b = related(int(args.length), args.subst, args.indel, args.seed)
    write(args.a, "query", a)
    write(args.b, "target", b)


if __name__ == "__main__":
    main()
