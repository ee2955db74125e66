"""The same pairwise workloads through the tools users compare dpalign with.

Each peer scores ``queries x targets`` with the scoring translated to its own convention and
returns a ``[Q, T]`` array, so a benchmark can check every peer's scores equal dpalign's (the
comparison is honest only then). Gap conventions: dpalign / scikit-bio charge ``o + e*k`` for
a gap of length k; parasail and pyopal charge "open" for the first position (``open = o + e,
extend = e``); Biopython's ``open_gap_score = -(o + e)``, ``extend_gap_score = -e``. Modes
(found by score equality on random inputs): local = parasail ``sw`` / pyopal ``sw``; global =
``nw`` / ``nw``; semiglobal (the query end to end, target ends free) = parasail ``sg_dx`` /
pyopal ``hw`` / Biopython with free end gaps in its first ("target") sequence, the query.

Known peer limitations worked around here (each caught by ``tests/test_bench.py``):
parasail's striped functions score wrongly when ``open == extend`` (dpalign's linear gaps,
``o = 0``; jeffdaily/parasail#64, "wontfix"), so linear gaps go to its scan functions; and
Biopython's ``end_insertion_score`` getter raises ValueError (not AttributeError) once the
end gap scores differ, so the attribute is looked up on the class, never read.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

PAIRWISE_PEERS = ("parasail", "pyopal", "biopython", "scikit-bio")


@dataclass(frozen=True)
class PairwiseJob:
    """Queries against targets: mode, ``sub_score`` ((match, mismatch) or a matrix name) and
    the affine gap ``(o, e)`` in dpalign's convention."""

    queries: list[str]
    targets: list[str]
    mode: str
    sub_score: object
    gap: tuple[int, int]

    @property
    def cells(self) -> int:
        return sum(map(len, self.queries)) * sum(map(len, self.targets))


def available(peer: str) -> bool:
    """True when the peer's package is installed (``pip install dpalign[bench]``)."""
    module = {"biopython": "Bio", "scikit-bio": "skbio"}.get(peer, peer)
    return importlib.util.find_spec(module) is not None


def prepare(peer: str, job: PairwiseJob, threads: int = 1) -> Callable[[], np.ndarray]:
    """Set the peer up (outside any timing) and return a function computing the scores."""
    return {
        "parasail": _parasail,
        "pyopal": _pyopal,
        "biopython": _biopython,
        "scikit-bio": _skbio,
    }[peer](job, threads)


def _letters(job: PairwiseJob) -> str:
    return "".join(sorted(set("".join(job.queries)) | set("".join(job.targets))))


def _parasail(job, threads):
    import parasail

    o, e = job.gap[0] + job.gap[1], job.gap[1]
    if isinstance(job.sub_score, str):
        matrix = getattr(parasail, job.sub_score.lower().replace(".", ""))
    else:
        matrix = parasail.matrix_create(_letters(job), *job.sub_score)
    family = {"local": "sw", "global": "nw", "semiglobal": "sg_dx"}[job.mode]
    # striped is parasail's fastest, but wrong when open == extend (parasail#64): use scan
    kind = "scan" if o == e else "striped"
    function = getattr(parasail, f"{family}_{kind}_profile_sat")

    def row(query):
        profile = parasail.profile_create_sat(query, matrix)
        return [function(profile, t, o, e).score for t in job.targets]

    def run():
        with ThreadPoolExecutor(threads) as pool:  # ctypes releases the GIL
            return np.array(list(pool.map(row, job.queries)), dtype=np.int64)

    return run


def _pyopal(job, threads):
    import pyopal
    import scoring_matrices

    if isinstance(job.sub_score, str):
        matrix = scoring_matrices.ScoringMatrix.from_name(job.sub_score)
    else:
        letters = _letters(job)
        match, mismatch = job.sub_score
        matrix = scoring_matrices.ScoringMatrix(
            [[match if a == b else mismatch for b in letters] for a in letters], alphabet=letters
        )
    db = pyopal.Database(job.targets, alphabet=matrix.alphabet)
    algorithm = {"local": "sw", "global": "nw", "semiglobal": "hw"}[job.mode]

    def run():
        out = np.empty((len(job.queries), len(job.targets)), dtype=np.int64)
        for q, query in enumerate(job.queries):
            for r in pyopal.align(
                query,
                db,
                matrix,
                gap_open=job.gap[0] + job.gap[1],
                gap_extend=job.gap[1],
                algorithm=algorithm,
                mode="score",
                overflow="simple",
                threads=threads,
            ):
                out[q, r.target_index] = r.score
        return out

    return run


def _biopython(job, threads):
    from Bio import Align
    from Bio.Align import substitution_matrices

    aligner = Align.PairwiseAligner(mode="local" if job.mode == "local" else "global")
    if isinstance(job.sub_score, str):
        aligner.substitution_matrix = substitution_matrices.load(job.sub_score)
    else:
        aligner.match_score, aligner.mismatch_score = job.sub_score
    aligner.open_gap_score = -(job.gap[0] + job.gap[1])
    aligner.extend_gap_score = -job.gap[1]
    if job.mode == "semiglobal":  # free end gaps in the first ("target") sequence: the query
        # ask the class: reading the attribute raises ValueError when its parts differ
        renamed = hasattr(type(aligner), "end_insertion_score")  # newer Biopython
        setattr(aligner, "end_insertion_score" if renamed else "target_end_gap_score", 0)

    def run():
        return np.array(
            [[aligner.score(q, t) for t in job.targets] for q in job.queries], dtype=np.int64
        )

    return run


def _skbio(job, threads):
    from skbio.alignment import pair_align

    mode = "local" if job.mode == "local" else "global"
    ends = {"local": True, "global": False, "semiglobal": (True, False)}[job.mode]

    def run():
        return np.array(
            [
                [
                    pair_align(
                        q,
                        t,
                        mode=mode,
                        sub_score=job.sub_score,
                        gap_cost=job.gap,
                        free_ends=ends,
                        max_paths=0,
                    ).score
                    for t in job.targets
                ]
                for q in job.queries
            ],
            dtype=np.int64,
        )

    return run
