"""Karlin-Altschul statistics for search hits: bit scores, E-values, BLAST's number formats.

A local alignment score S of a query of length m against a database of N sequences and n
residues in all has the expected number of chance hits (E-value)

    E = K * m' * n' * exp(-lambda * S),   m' = m - l,   n' = n - N * l

where ``l`` is BLAST's *length adjustment* (the expected length of a chance alignment of that
score, a fixed point of ``l = beta + (alpha / lambda) * ln(K * m' * n')``,
:func:`length_adjustment`). The bit score is ``(lambda * S - ln K) / ln 2``.

Gapped lambda and K cannot be computed from a scoring scheme; they were estimated by
simulation and are tabulated for a few matrices and gap costs. This module holds BLAST's own
tables (NCBI BLAST+ ``src/algo/blast/core/blast_stat.c``: ``blosum45_values`` ...
``pam70_values`` for proteins, ``blastn_values_<reward>_<penalty>`` for nucleotides; gap costs
there are BLAST's "existence" and "extension", a gap of length k costing
``existence + extension * k``, which is dpalign's ``o + e*k``). A scoring scheme with no table
entry raises :class:`~dpalign.errors.OptionError` naming the supported gap costs.

E-values here are the classical Karlin-Altschul formula above, which is what BLAST+ computes
for blastn. blastp (since BLAST+ 2.2.26) replaces it with Spouge's finite-size correction, so
protein E-values differ from blastp's by a small factor; bit scores are the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import OptionError

LN2 = math.log(2.0)

# (gap existence o, gap extension e) -> (lambda, K, H, alpha, beta); from blast_stat.c, the
# gapped rows of each matrix's ``<name>_values`` table (the INT2_MAX rows are ungapped).
_PROTEIN = {
    "BLOSUM45": {
        (13, 3): (0.207, 0.049, 0.14, 1.5, -22),
        (12, 3): (0.199, 0.039, 0.11, 1.8, -34),
        (11, 3): (0.190, 0.031, 0.095, 2.0, -38),
        (10, 3): (0.179, 0.023, 0.075, 2.4, -51),
        (16, 2): (0.210, 0.051, 0.14, 1.5, -24),
        (15, 2): (0.203, 0.041, 0.12, 1.7, -31),
        (14, 2): (0.195, 0.032, 0.10, 1.9, -36),
        (13, 2): (0.185, 0.024, 0.084, 2.2, -45),
        (12, 2): (0.171, 0.016, 0.061, 2.8, -65),
        (19, 1): (0.205, 0.040, 0.11, 1.9, -43),
        (18, 1): (0.198, 0.032, 0.10, 2.0, -43),
        (17, 1): (0.189, 0.024, 0.079, 2.4, -57),
        (16, 1): (0.176, 0.016, 0.063, 2.8, -67),
    },
    "BLOSUM50": {
        (13, 3): (0.212, 0.063, 0.19, 1.1, -16),
        (12, 3): (0.206, 0.055, 0.17, 1.2, -18),
        (11, 3): (0.197, 0.042, 0.14, 1.4, -25),
        (10, 3): (0.186, 0.031, 0.11, 1.7, -34),
        (9, 3): (0.172, 0.022, 0.082, 2.1, -48),
        (16, 2): (0.215, 0.066, 0.20, 1.05, -15),
        (15, 2): (0.210, 0.058, 0.17, 1.2, -20),
        (14, 2): (0.202, 0.045, 0.14, 1.4, -27),
        (13, 2): (0.193, 0.035, 0.12, 1.6, -32),
        (12, 2): (0.181, 0.025, 0.095, 1.9, -41),
        (19, 1): (0.212, 0.057, 0.18, 1.2, -21),
        (18, 1): (0.207, 0.050, 0.15, 1.4, -28),
        (17, 1): (0.198, 0.037, 0.12, 1.6, -33),
        (16, 1): (0.186, 0.025, 0.10, 1.9, -42),
        (15, 1): (0.171, 0.015, 0.063, 2.7, -76),
    },
    "BLOSUM62": {
        (11, 2): (0.297, 0.082, 0.27, 1.1, -10),
        (10, 2): (0.291, 0.075, 0.23, 1.3, -15),
        (9, 2): (0.279, 0.058, 0.19, 1.5, -19),
        (8, 2): (0.264, 0.045, 0.15, 1.8, -26),
        (7, 2): (0.239, 0.027, 0.10, 2.5, -46),
        (6, 2): (0.201, 0.012, 0.061, 3.3, -58),
        (13, 1): (0.292, 0.071, 0.23, 1.2, -11),
        (12, 1): (0.283, 0.059, 0.19, 1.5, -19),
        (11, 1): (0.267, 0.041, 0.14, 1.9, -30),
        (10, 1): (0.243, 0.024, 0.10, 2.5, -44),
        (9, 1): (0.206, 0.010, 0.052, 4.0, -87),
    },
    "BLOSUM80": {
        (25, 2): (0.342, 0.17, 0.66, 0.52, -1.6),
        (13, 2): (0.336, 0.15, 0.57, 0.59, -3),
        (9, 2): (0.319, 0.11, 0.42, 0.76, -6),
        (8, 2): (0.308, 0.090, 0.35, 0.89, -9),
        (7, 2): (0.293, 0.070, 0.27, 1.1, -14),
        (6, 2): (0.268, 0.045, 0.19, 1.4, -19),
        (11, 1): (0.314, 0.095, 0.35, 0.90, -9),
        (10, 1): (0.299, 0.071, 0.27, 1.1, -14),
        (9, 1): (0.279, 0.048, 0.20, 1.4, -19),
    },
    "BLOSUM90": {
        (9, 2): (0.310, 0.12, 0.46, 0.67, -6),
        (8, 2): (0.300, 0.099, 0.39, 0.76, -7),
        (7, 2): (0.283, 0.072, 0.30, 0.93, -11),
        (6, 2): (0.259, 0.048, 0.22, 1.2, -16),
        (11, 1): (0.302, 0.093, 0.39, 0.78, -8),
        (10, 1): (0.290, 0.075, 0.28, 1.04, -15),
        (9, 1): (0.265, 0.044, 0.20, 1.3, -19),
    },
    "PAM30": {
        (7, 2): (0.305, 0.15, 0.87, 0.35, -3),
        (6, 2): (0.287, 0.11, 0.68, 0.42, -4),
        (5, 2): (0.264, 0.079, 0.45, 0.59, -7),
        (10, 1): (0.309, 0.15, 0.88, 0.35, -3),
        (9, 1): (0.294, 0.11, 0.61, 0.48, -6),
        (8, 1): (0.270, 0.072, 0.40, 0.68, -10),
    },
    "PAM70": {
        (8, 2): (0.301, 0.12, 0.54, 0.56, -5),
        (7, 2): (0.286, 0.093, 0.43, 0.67, -7),
        (6, 2): (0.264, 0.064, 0.29, 0.90, -12),
        (11, 1): (0.305, 0.12, 0.52, 0.59, -6),
        (10, 1): (0.291, 0.091, 0.41, 0.71, -9),
        (9, 1): (0.270, 0.060, 0.28, 0.97, -14),
    },
    "PAM250": {
        (15, 3): (0.205, 0.049, 0.13, 1.6, -23),
        (14, 3): (0.200, 0.043, 0.12, 1.7, -26),
        (13, 3): (0.194, 0.036, 0.10, 1.9, -31),
        (12, 3): (0.186, 0.029, 0.085, 2.2, -41),
        (11, 3): (0.174, 0.020, 0.070, 2.5, -48),
        (17, 2): (0.204, 0.047, 0.12, 1.7, -28),
        (16, 2): (0.198, 0.038, 0.11, 1.8, -29),
        (15, 2): (0.191, 0.031, 0.087, 2.2, -44),
        (14, 2): (0.182, 0.024, 0.073, 2.5, -53),
        (13, 2): (0.171, 0.017, 0.059, 2.9, -64),
        (21, 1): (0.205, 0.045, 0.11, 1.8, -34),
        (20, 1): (0.199, 0.037, 0.10, 1.9, -35),
        (19, 1): (0.192, 0.029, 0.083, 2.3, -52),
        (18, 1): (0.183, 0.021, 0.070, 2.6, -60),
        (17, 1): (0.171, 0.014, 0.052, 3.3, -86),
    },
}

# (reward, penalty) -> {(o, e): (lambda, K, H, alpha, beta)}: blast_stat.c's
# ``blastn_values_<reward>_<penalty>`` (penalty as a positive number there; the (0, 0) rows,
# blastn's greedy-extension defaults, are left out: they are not a gap cost dpalign uses).
_NUCLEOTIDE = {
    (1, -5): {(3, 3): (1.39, 0.747, 1.38, 1.00, 0)},
    (1, -4): {
        (1, 2): (1.36, 0.67, 1.2, 1.1, 0),
        (0, 2): (1.26, 0.43, 0.90, 1.4, -1),
        (2, 1): (1.35, 0.61, 1.1, 1.2, -1),
        (1, 1): (1.22, 0.35, 0.72, 1.7, -3),
    },
    (2, -7): {
        (2, 4): (0.68, 0.67, 1.2, 0.55, 0),
        (0, 4): (0.63, 0.43, 0.90, 0.7, -1),
        (4, 2): (0.675, 0.62, 1.1, 0.6, -1),
        (2, 2): (0.61, 0.35, 0.72, 1.7, -3),
    },
    (1, -3): {
        (2, 2): (1.37, 0.70, 1.2, 1.1, 0),
        (1, 2): (1.35, 0.64, 1.1, 1.2, -1),
        (0, 2): (1.25, 0.42, 0.83, 1.5, -2),
        (2, 1): (1.34, 0.60, 1.1, 1.2, -1),
        (1, 1): (1.21, 0.34, 0.71, 1.7, -2),
    },
    (2, -5): {
        (2, 4): (0.67, 0.59, 1.1, 0.6, -1),
        (0, 4): (0.62, 0.39, 0.78, 0.8, -2),
        (4, 2): (0.67, 0.61, 1.0, 0.65, -2),
        (2, 2): (0.56, 0.32, 0.59, 0.95, -4),
    },
    (1, -2): {
        (2, 2): (1.33, 0.62, 1.1, 1.2, 0),
        (1, 2): (1.30, 0.52, 0.93, 1.4, -2),
        (0, 2): (1.19, 0.34, 0.66, 1.8, -3),
        (3, 1): (1.32, 0.57, 1.0, 1.3, -1),
        (2, 1): (1.29, 0.49, 0.92, 1.4, -1),
        (1, 1): (1.14, 0.26, 0.52, 2.2, -5),
    },
    (2, -3): {
        (4, 4): (0.63, 0.42, 0.84, 0.75, -2),
        (2, 4): (0.615, 0.37, 0.72, 0.85, -3),
        (0, 4): (0.55, 0.21, 0.46, 1.2, -5),
        (3, 3): (0.615, 0.37, 0.68, 0.9, -3),
        (6, 2): (0.63, 0.42, 0.84, 0.75, -2),
        (5, 2): (0.625, 0.41, 0.78, 0.8, -2),
        (4, 2): (0.61, 0.35, 0.68, 0.9, -3),
        (2, 2): (0.515, 0.14, 0.33, 1.55, -9),
    },
    (3, -4): {
        (6, 3): (0.389, 0.25, 0.56, 0.7, -5),
        (5, 3): (0.375, 0.21, 0.47, 0.8, -6),
        (4, 3): (0.351, 0.14, 0.35, 1.0, -9),
        (6, 2): (0.362, 0.16, 0.45, 0.8, -4),
        (5, 2): (0.330, 0.092, 0.28, 1.2, -13),
        (4, 2): (0.281, 0.046, 0.16, 1.8, -23),
    },
    (4, -5): {
        (6, 5): (0.28, 0.21, 0.47, 0.6, -7),
        (5, 5): (0.27, 0.17, 0.39, 0.7, -9),
        (4, 5): (0.25, 0.10, 0.31, 0.8, -10),
        (3, 5): (0.23, 0.065, 0.25, 0.9, -11),
    },
    (1, -1): {
        (3, 2): (1.09, 0.31, 0.55, 2.0, -2),
        (2, 2): (1.07, 0.27, 0.49, 2.2, -3),
        (1, 2): (1.02, 0.21, 0.36, 2.8, -6),
        (0, 2): (0.80, 0.064, 0.17, 4.8, -16),
        (4, 1): (1.08, 0.28, 0.54, 2.0, -2),
        (3, 1): (1.06, 0.25, 0.46, 2.3, -4),
        (2, 1): (0.99, 0.17, 0.30, 3.3, -10),
    },
    (3, -2): {(5, 5): (0.208, 0.030, 0.072, 2.9, -47)},
    (5, -4): {(10, 6): (0.163, 0.068, 0.16, 1.0, -19), (8, 6): (0.146, 0.039, 0.11, 1.3, -29)},
}
# blast_stat.c: "These parameters can only be applied to even scores. Any odd score must be
# rounded down to the nearest even number before calculating the e-value."
_ROUND_DOWN = {(2, -7), (2, -5), (2, -3)}
#: Named nucleotide matrices that are a plain reward/penalty on A, C, G, T.
_NAMED_NUCLEOTIDE = {"NUC.4.4": (5, -4)}


@dataclass(frozen=True)
class KarlinAltschul:
    """Gapped Karlin-Altschul parameters of one scoring scheme.

    Attributes
    ----------
    lam, K, H, alpha, beta : float
        BLAST's lambda, K, relative entropy H and the length-correction slope and intercept.
    round_down : bool
        Odd scores are rounded down to even before use (the 2/-3, 2/-5, 2/-7 tables).
    source : str
        Which table row this is (``"BLOSUM62 11/1"``...).
    """

    lam: float
    K: float
    H: float
    alpha: float
    beta: float
    round_down: bool = False
    source: str = ""

    def _scores(self, score) -> np.ndarray:
        s = np.asarray(score, dtype=np.int64)
        return (s & ~1) if self.round_down else s

    def bit_score(self, score):
        """``(lambda * S - ln K) / ln 2`` (an ndarray for array input)."""
        return (self.lam * self._scores(score) - math.log(self.K)) / LN2

    def length_adjustment(self, query_length: int, db_residues: int, db_count: int) -> int:
        """BLAST's length adjustment l (see :func:`length_adjustment`)."""
        return length_adjustment(
            self.K, self.alpha / self.lam, self.beta, query_length, db_residues, db_count
        )

    def search_space(self, query_length: int, db_residues: int, db_count: int) -> float:
        """The effective search space ``(m - l) * max(n - N*l, 1)``."""
        ell = self.length_adjustment(query_length, db_residues, db_count)
        return float(max(db_residues - db_count * ell, 1)) * (query_length - ell)

    def evalue(self, score, query_length: int, db_residues: int, db_count: int):
        """Expected chance hits of at least ``score`` (an ndarray for array input)."""
        space = self.search_space(query_length, db_residues, db_count)
        return space * self.K * np.exp(-self.lam * self._scores(score))


def length_adjustment(
    K: float,
    alpha_d_lambda: float,
    beta: float,
    query_length: int,
    db_residues: int,
    db_count: int,
) -> int:
    """BLAST's length adjustment: an integer just below the fixed point of
    ``f(l) = beta + alpha_d_lambda * (ln K + ln((m - l) * (n - N*l)))``.

    The iteration of ``BLAST_ComputeLengthAdjustment`` (blast_stat.c): at most 20
    fixed-point steps, each kept inside a bracket that halves when a step leaves it, the
    bracket's top being the largest l with ``K * (m - l) * (n - N*l) > max(m, n)``.
    """
    m, n, N = float(query_length), float(db_residues), float(db_count)
    log_k = math.log(K)
    a, mb, c = N, m * N + n, n * m - max(m, n) / K
    if c < 0:
        return 0
    ell_max = 2 * c / (mb + math.sqrt(mb * mb - 4 * a * c))
    ell_min, ell_next, converged = 0.0, 0.0, False
    for i in range(1, 21):
        ell = ell_next
        ell_bar = alpha_d_lambda * (log_k + math.log((m - ell) * (n - N * ell))) + beta
        if ell_bar >= ell:
            ell_min = ell
            if ell_bar - ell_min <= 1.0:
                converged = True
                break
            if ell_min == ell_max:
                break
        else:
            ell_max = ell
        if ell_min <= ell_bar <= ell_max:
            ell_next = ell_bar
        else:
            ell_next = ell_max if i == 1 else (ell_min + ell_max) / 2
    result = int(ell_min)
    if converged:
        ell = math.ceil(ell_min)
        if ell <= ell_max:
            ss = (m - ell) * (n - N * ell)
            if ss > 0 and alpha_d_lambda * (log_k + math.log(ss)) + beta >= ell:
                result = int(ell)
    return result


def _gap_list(table) -> str:
    return ", ".join(f"{o}/{e}" for o, e in table)


def parameters(scoring) -> KarlinAltschul:
    """The Karlin-Altschul parameters of a :class:`~dpalign.scoring.Scoring`.

    Raises
    ------
    OptionError
        The matrix or the match/mismatch scores, or the gap costs with them, have no
        published parameters (the message lists the gap costs that do).
    """
    o, e = int(scoring.gap_open), int(scoring.gap_extend)
    label = scoring.sub_label
    if scoring.alphabet.name == "letters":
        reward, penalty = int(scoring.matrix[0, 0]), int(scoring.matrix[0, 1])
        return _nucleotide(reward, penalty, o, e, f"match {reward}, mismatch {penalty}")
    name = (label or "").upper()
    if name in _NAMED_NUCLEOTIDE:
        reward, penalty = _NAMED_NUCLEOTIDE[name]
        return _nucleotide(reward, penalty, o, e, name)
    if name not in _PROTEIN:
        raise OptionError(
            f"no E-values for the {label} matrix: BLAST's published parameters cover "
            f"{', '.join(_PROTEIN)} and match/mismatch scores (NUC.4.4 as 5/-4)"
        )
    table = _PROTEIN[name]
    if (o, e) not in table:
        raise OptionError(
            f"no E-values for {name} with gap costs {o}/{e} (open/extend); BLAST's published "
            f"parameters for {name} cover {_gap_list(table)}"
        )
    return KarlinAltschul(*table[(o, e)], source=f"{name} {o}/{e}")


def _nucleotide(reward: int, penalty: int, o: int, e: int, label: str) -> KarlinAltschul:
    # Scores scaled by a common factor d have lambda / d and alpha / d (alpha is length per
    # score unit); K, H (nats per aligned pair) and beta are unchanged: 2/-4 with gaps 4/2 is
    # 1/-2 with gaps 2/1.
    g = math.gcd(reward, penalty, o, e) if reward > 0 and penalty < 0 else 1
    for d in (k for k in range(g, 0, -1) if g % k == 0):
        key, gaps = (reward // d, penalty // d), (o // d, e // d)
        if gaps in _NUCLEOTIDE.get(key, {}):
            lam, K, H, alpha, beta = _NUCLEOTIDE[key][gaps]
            return KarlinAltschul(
                lam / d,
                K,
                H,
                alpha / d,
                beta,
                round_down=key in _ROUND_DOWN and d == 1,
                source=f"{label} {o}/{e}",
            )
    key = (reward // g, penalty // g)
    if key not in _NUCLEOTIDE:
        known = ", ".join(f"{r}/{p}" for r, p in _NUCLEOTIDE)
        raise OptionError(
            f"no E-values for {label}: BLAST's published parameters cover match/mismatch {known}"
        )
    scaled = ", ".join(f"{go * g}/{ge * g}" for go, ge in _NUCLEOTIDE[key])
    raise OptionError(
        f"no E-values for {label} with gap costs {o}/{e} (open/extend; linear gaps are 0/g); "
        f"BLAST's published parameters cover {scaled}"
    )


# --------------------------------------------------------------------------------------------
# BLAST's number formats (objtools/align_format: CAlignFormatUtil::GetScoreString, and
# CBlastTabularInfo::SetScores, which prints E-values in [1e-180, 0.0009) as "%.2e")
# --------------------------------------------------------------------------------------------


def format_evalue(evalue: float) -> str:
    """An E-value as BLAST's tabular output prints it (``0.0``, ``3.21e-45``, ``0.005``...)."""
    if evalue < 1.0e-180:
        return "0.0"
    if evalue < 0.0009:
        return f"{evalue:.2e}"
    if evalue < 0.1:
        return f"{evalue:.3f}"
    if evalue < 1.0:
        return f"{evalue:.2f}"
    if evalue < 10.0:
        return f"{evalue:.1f}"
    return f"{evalue:.0f}"


def format_bit_score(bits: float) -> str:
    """A bit score as BLAST prints it: ``%4.1f`` up to 99.9, then the truncated integer."""
    if bits > 99999:
        return f"{bits:.3e}"
    if bits > 99.9:
        return str(int(bits))  # "%3.0ld" of (long)bit_score: truncated, not rounded
    return f"{bits:4.1f}"


def format_percent(value: float) -> str:
    """Percent identity with three decimals (BLAST+ ``NStr::DoubleToString(pident, 3)``)."""
    return f"{value:.3f}"
