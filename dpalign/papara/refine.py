"""The accurate mode's second pass: each read re-aligned against a probabilistic profile of the
edge the first pass chose for it.

The first pass (PaPaRa's recurrence with the accurate scores) picks the edge; its profile is
one Fitch state set and one gap flag per column, which says nothing about *how likely* a
residue or a gap is there. Most of the reads it leaves imperfect have characters one to five
columns off in gappy variable regions, where the question is which columns the read's lineage
has. This pass builds, for the chosen edge only, the reference rows' residue and gap
frequencies per column and how often a gap follows a gap (a lineage's deletions span
columns), each row weighted by ``exp(-d / tau)`` with d its tree distance from the middle of
the edge (close relatives share their gaps), and aligns the read to it by
posterior decoding (:mod:`dpalign.simd.papara_refine`, through the engine; the model is spelt
out in :func:`dpalign.reference.papara_refine_posteriors`). With ``RefineModel.rows`` the
profile is a row mixture (:func:`dpalign.reference.papara_refine_rows_posteriors`): the read
follows the nearest reference rows one at a time, each row's gaps and residues mixed with the
edge's, and may switch rows between columns, so that a stretch can take the gaps of the one
relative whose lineage it shares. For DNA the residue frequencies are not the weighted rows'
but a tree model's (:class:`TreeFrequencies`: what a read at the edge's middle is expected to
carry given every row, the branch lengths and each column's rate). The alignment kept is
the one with the most characters expected in their right place, a character left as an
insertion counting with its posterior of being in no column (``RefineModel.insert``). A
read that fits its edge poorly is first moved to the likeliest of its edge and the edges
touching it under the same model (:meth:`Refiner.reselect`). It runs on the CPU after any
backend's scoring, so the output is the same whichever backend scored.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from .. import engine
from ..engine import Backend

_TABLE_BYTES = 64 << 20  # edge tables held at once by the second pass


@dataclass(frozen=True)
class RefineModel:
    """The second pass's constants (tuned on simulations with seeds apart from the
    benchmark's; see BENCHMARKS.md, issue 15).

    Attributes
    ----------
    tau_rel : float
        Distance scale of the row weights for residues, in mean branch lengths of the tree.
    tau_gap_rel : float
        The same for gaps.
    column_mix : float
        Share of the column's unweighted residue frequencies mixed into the weighted ones
        (flatter odds in columns that vary across the tree).
    pseudo : float
        Share of the background frequencies mixed into each column's residue frequencies.
    gap_prior : float
        Share of the reference's overall gap fraction mixed into each column's.
    open_ins, extend_ins : float
        Weight of a character inserted between columns (first, then each further one).
    overhang : float
        Weight per character before the reference's first column or after its last.
    theta : float
        A character goes into a column only if its posterior there exceeds ``theta``...
    theta_divergent : float
        ...or this, for a read whose first-pass alignment mismatches its edge's Fitch states
        in more than ``divergent`` of its aligned characters: far from every reference, its
        posteriors are less sure than they say (on the divergent case's tuning simulations:
        precision +0.7 and +1.8 points, recall -0.2 and -0.3).
    divergent : float
        The mismatch share above which a read counts as divergent (0.08: the divergent case's
        reads have a median of 0.08-0.10, the others 0.02-0.05).
    band : int
        Columns a character may move either way from where the first pass put it.
    markov : bool
        Whether skipping a column depends on whether the column before was skipped (from the
        same weighted rows), or each column is skipped independently.
    rows : int
        The row-mixture model (0: off): the read follows one of the ``rows`` reference rows
        nearest the edge's middle at a time, taking its gaps and (``row_residue``) its
        residues, and may switch rows on entering a column; what one weighted profile per
        column cannot say is which columns the read's own lineage has, and a row can.
    row_tau_rel : float
        Distance scale of those rows' weights (start and switch), in mean branch lengths.
    jump : float
        Chance of switching rows on entering a column.
    row_mix : float
        Share of the edge's chain (``occupied``, ``keep``...) in a row's: a row's own gaps
        are not the read's everywhere (its lineage's deletions are its own).
    profile_weight : float
        Weight of the edge's chain as one more component beside the rows (0: none).
    row_residue : float
        Share of a row's own residue in its residue frequencies (the rest the edge's).
    blend : float
        With ``rows``: the share of the edge chain's posteriors in those decoded (the rest
        the rows').
    insert : float
        With ``rows``: a character goes into a column only where its posterior there beats
        its threshold plus ``insert`` times its posterior of being in no column (1: the
        alignment with the most characters expected right, inserted ones counted too).
    tree_residues : str
        Which alphabets take the edge's residue frequencies from the tree model
        (:class:`TreeFrequencies`: what a read placed at the middle of the edge is expected to
        carry, given every reference row, the branch lengths and each column's rate) instead
        of the distance-weighted rows: ``"dna"``, ``"all"`` or ``"none"``. Near relatives'
        residues mislead in fast columns and say too little in slow ones; the tree model
        weighs them by the column's rate. On proteins it measured worse (BENCHMARKS.md, helper
        acc5), so the default is DNA only.
    rates : tuple of float
        The tree model's rate categories (substitutions per unit branch length); their shares
        are estimated from the reference (EM over the columns).
    transition_share : float
        DNA: the share of substitutions that are transitions (A<->G, C<->T).
    pendant_rel : float
        The read's own branch (from the edge's middle to the read), in mean branch lengths.
    gap_pseudo : float
        With ``markov``: weight of the reference's own gap-run chances (a gap after a gap,
        a gap after a residue; :func:`_gap_runs`) as pseudo-rows in each column's chance of
        a gap given the column before, ``(both + k * extend) / (before + k)``. Without it a
        chance conditioned on a column that almost no weighted row skips comes from that
        sliver of weight alone: one far row skipping columns c - 1 and c made skipping c,
        once c - 1 was skipped, all but certain, and a read's private deletion moved onto
        that row's gap, across a conserved residue (BENCHMARKS.md, helper acc6).
    reselect : bool
        With ``rows``: align each read against whichever of its edge and the edges that
        touch it gives it the highest likelihood under the row mixture (the sum over the
        paths of a band ``reselect_band`` columns either side of the first pass's alignment;
        the edge's own kept on ties). Neighbouring edges differ in their nearest rows and
        their weights; the first pass's score, a sum over one alignment with PaPaRa's
        scores, does not say which of them holds the read's lineage's gaps.
    reselect_band : int
        Band of that likelihood (see ``band``).
    reselect_above : float
        Only reads whose first-pass alignment mismatches its edge's Fitch states in more than
        this share of their aligned characters are reselected (reads that fit their edge
        gain nothing and cost the time: over 3%, +11.3 summed points on the tuning seeds
        against +5.7 for every read; BENCHMARKS.md, helper acc6).
    band_sure : int
        The ``band`` of the other reads, those at or under ``reselect_above`` (a read that
        fits its edge needs less room; 14 against 20 costs -1.9 summed points on the tuning
        seeds and pays for the reselection's time).
    """

    tau_rel: float = 0.8
    tau_gap_rel: float = 0.8
    column_mix: float = 0.0
    pseudo: float = 0.05
    gap_prior: float = 0.02
    open_ins: float = math.exp(-10.0)
    extend_ins: float = math.exp(-1.0)
    overhang: float = 1.0
    theta: float = 0.0
    theta_divergent: float = 0.5
    divergent: float = 0.08
    band: int = 20
    markov: bool = True
    rows: int = 2
    row_tau_rel: float = 0.8
    jump: float = 0.01
    row_mix: float = 0.6
    profile_weight: float = 0.0
    row_residue: float = 0.45
    blend: float = 0.3
    insert: float = 1.0
    tree_residues: str = "dna"
    rates: tuple = (0.02, 0.1, 0.4, 1.5, 6.0)
    transition_share: float = 2 / 3
    pendant_rel: float = 1.0
    gap_pseudo: float = 0.02
    reselect: bool = True
    reselect_band: int = 7
    reselect_above: float = 0.03
    band_sure: int = 14


class EdgeFrequencies:
    """Distance-weighted residue and gap frequencies at the middle of any edge.

    ``exp(-d / tau)`` multiplies along a path, so the weighted sum over the tips of a directed
    subtree is its children's sums, each times ``exp(-branch / tau)``: every directed subtree
    is computed once (as normalised channels and the log of its total weight) and shared by
    the edges that need it, as :mod:`dpalign.papara.profiles` does for the Fitch states.
    """

    def __init__(self, data, tau_rel: float) -> None:
        self._data = data
        self._tree = data.tree
        self._k = 4 if data.alphabet.name == "dna" else 20
        lengths = [e.length for e in data.tree.edges]
        self.mean_length = float(np.mean(lengths)) if lengths else 1.0
        self._tau = max(tau_rel * self.mean_length, 1e-9)
        self._memo: dict[tuple[int, int], tuple[np.ndarray, float]] = {}
        self._tips = {}
        total = np.zeros(self._k + 2)
        for node, row in data.tip_rows.items():
            channels = self._channels(data.ref_states[row])
            self._tips[node] = channels
            total += channels.sum(axis=0)
        residues = total[: self._k]
        self.background = (
            residues / residues.sum() if residues.sum() > 0 else np.full(self._k, 1 / self._k)
        )
        column = sum(self._tips.values())[:, : self._k]
        column_total = column.sum(axis=1, keepdims=True)
        #: Each column's unweighted residue frequencies (the background where all are gaps).
        self.column = np.where(
            column_total > 0, column / np.maximum(column_total, 1e-300), self.background
        )
        self.gap_fraction = float(total[self._k] / max(total[: self._k + 1].sum(), 1.0))
        self.gap_open, self.gap_extend = _gap_runs(data.ref_states, data.alphabet.gap)

    @property
    def n_bits(self) -> int:
        """Residue bits of a state (4 DNA, 20 protein)."""
        return self._k

    def _channels(self, states: np.ndarray) -> np.ndarray:
        """Per column: the residue bits (an ambiguity code shares its weight), then gap."""
        k = self._k
        gap = states == self._data.alphabet.gap
        bits = ((states[:, None].astype(np.int64) >> np.arange(k)) & 1).astype(np.float64)
        bits /= np.maximum(bits.sum(axis=1), 1.0)[:, None]
        bits[gap] = 0.0
        both = gap & np.concatenate([[False], gap[:-1]])  # gap here and in the column before
        return np.concatenate(
            [bits, gap[:, None].astype(np.float64), both[:, None].astype(np.float64)], axis=1
        )

    def _mix(self, parts) -> tuple[np.ndarray, float]:
        logs = [log_w - z / self._tau for (_, log_w), z in parts]
        top = max(logs)
        weights = [math.exp(v - top) for v in logs]
        total = sum(weights)
        value = sum(
            w / total * channels for w, ((channels, _), _) in zip(weights, parts, strict=True)
        )
        return value, top + math.log(total)

    def _directed(self, parent: int, node: int) -> tuple[np.ndarray, float]:
        return self._tree.directed(
            parent,
            node,
            self._memo,
            lambda q: (self._tips[q], 0.0),
            lambda q, kids: self._mix([(value, z) for _, z, value in kids]),
        )

    def at_edge(self, edge: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(residues (n, K), gap (n,), gap_pair (n,))``: the residue frequencies among the
        weighted rows that have a residue (the background where none has), the weighted share
        of rows with a gap, and of rows with a gap in this column and the one before."""
        e = self._tree.edges[edge]
        half = e.length / 2
        value, _ = self._mix([(self._directed(e.v, e.u), half), (self._directed(e.u, e.v), half)])
        k = self._k
        residues = value[:, :k]
        total = residues.sum(axis=1, keepdims=True)
        freqs = np.where(total > 0, residues / np.maximum(total, 1e-300), self.background)
        weight = np.maximum(value[:, : k + 1].sum(axis=1), 1e-300)
        return freqs, value[:, k] / weight, value[:, k + 1] / weight


class TreeFrequencies:
    """Residue frequencies a read placed at the middle of an edge is expected to carry, given
    the reference rows, the tree's branch lengths and each column's rate.

    A continuous-time substitution model along the tree (DNA: a share ``transition_share``
    of the substitutions are transitions, the rest one of the two transversions alike, so that
    every base is as likely in the long run; protein: a substitution draws a residue from the
    background frequencies), at one of ``rates`` per column. Felsenstein's pruning gives each
    directed subtree's partial likelihoods (gaps as missing data, an ambiguity code as its
    state set); at an edge's middle the two sides' give, per column and rate, the distribution
    of the residue there (the background frequencies as its prior), which the read's own branch
    (``pendant_rel`` mean branch lengths) carries to the read; the rates are then weighed by the
    column's likelihood under each, with shares estimated from the whole reference by EM. In a
    fast column this is near the background whatever the nearest row says; in a slow one, the
    nearest rows' residue. The oracle, by summing over every assignment of states to the inner
    nodes, is :func:`dpalign.reference.papara_refine_tree_frequencies`.
    """

    def __init__(
        self,
        data,
        rates=RefineModel.rates,
        transition_share: float = RefineModel.transition_share,
        pendant_rel: float = RefineModel.pendant_rel,
        em_rounds: int = 20,
    ) -> None:
        self._tree = data.tree
        k = 4 if data.alphabet.name == "dna" else 20
        self._k = k
        self.rates = np.asarray(rates, dtype=np.float64)
        lengths = [e.length for e in data.tree.edges]
        self.mean_length = float(np.mean(lengths)) if lengths else 1.0
        self.pendant = pendant_rel * self.mean_length
        self._tips = {}
        counts = np.zeros(k)
        for node, row in data.tip_rows.items():
            states = data.ref_states[row]
            gap = states == data.alphabet.gap
            bits = ((states[:, None].astype(np.int64) >> np.arange(k)) & 1).astype(np.float64)
            counts += (bits / np.maximum(bits.sum(axis=1, keepdims=True), 1.0))[~gap].sum(axis=0)
            bits[gap] = 1.0  # missing data
            self._tips[node] = bits  # (n, K): the same for every rate (matmul broadcasts)
        self.background = counts / counts.sum() if counts.sum() > 0 else np.full(k, 1.0 / k)
        self._dna = k == 4
        self._share = transition_share
        self._ones = np.ones(k)
        self._memo: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.prior = np.full(len(self.rates), 1.0 / len(self.rates))
        if data.tree.edges:
            _, loglik = self._at_point(0)
            rel = np.exp(loglik - loglik.max(axis=0, keepdims=True))
            for _ in range(em_rounds):
                post = rel * self.prior[:, None]
                post /= post.sum(axis=0, keepdims=True)
                self.prior = np.maximum(post.mean(axis=1), 1e-9)
                self.prior /= self.prior.sum()

    def transition(self, t: float) -> np.ndarray:
        """``P[c, a, b]``: residue a becomes b along length t at rate category c (closed forms,
        with ``expm1`` so that the small chances of short branches keep their precision)."""
        rt = self.rates * t
        if self._dna:
            # Kimura's two-parameter model: transitions at rate alpha, each of the two
            # transversions at beta (alpha + 2 beta = 1).
            alpha, beta = self._share, (1.0 - self._share) / 2
            tv = -np.expm1(-4.0 * beta * rt) / 4
            ts = np.expm1(-4.0 * beta * rt) / 4 - np.expm1(-2.0 * (alpha + beta) * rt) / 2
            same = 1.0 - ts - 2.0 * tv
            p = np.empty((len(rt), 4, 4))
            p[:] = tv[:, None, None]
            for x, y in ((0, 2), (2, 0), (1, 3), (3, 1)):
                p[:, x, y] = ts
            idx = np.arange(4)
            p[:, idx, idx] = same[:, None]
            return p
        changed = -np.expm1(-rt)[:, None, None]
        return (1.0 - changed) * np.eye(self._k)[None] + changed * self.background[None, None, :]

    def _message(self, partial: np.ndarray, t: float) -> np.ndarray:
        """A subtree's partials carried up a branch of length t: ``sum_b P[a, b] L[b]``."""
        return np.matmul(partial, self.transition(t).transpose(0, 2, 1))

    def _combine(self, q, kids):
        out, log_scale = None, 0.0
        for _, z, (partial, scale) in kids:
            m = self._message(partial, z)
            out = m if out is None else out * m
            log_scale = log_scale + scale
        top = np.maximum(out @ self._ones, 1e-300)  # any positive scale; a sum is fast
        return out / top[..., None], log_scale + np.log(top)

    def _directed(self, parent: int, node: int):
        return self._tree.directed(
            parent,
            node,
            self._memo,
            lambda q: (self._tips[q], np.zeros((len(self.rates), len(self._tips[q])))),
            self._combine,
        )

    def _at_point(self, edge: int):
        """``(root (C, n, K), loglik (C, n))``: at the middle of ``edge``, each state's joint
        weight with the data (scaled per column and rate), and the data's log likelihood."""
        e = self._tree.edges[edge]
        a, la = self._directed(e.v, e.u)
        b, lb = self._directed(e.u, e.v)
        root = self._message(a, e.length / 2) * self._message(b, e.length / 2) * self.background
        lik = root @ self._ones
        return root / np.maximum(lik, 1e-300)[..., None], np.log(np.maximum(lik, 1e-300)) + la + lb

    def at_edge(self, edge: int) -> np.ndarray:
        """``(n, K)``: the frequencies of the residue of a read placed at the edge's middle."""
        cond, loglik = self._at_point(edge)
        loglik = loglik + np.log(self.prior)[:, None]
        w = np.exp(loglik - loglik.max(axis=0, keepdims=True))
        w /= w.sum(axis=0, keepdims=True)
        pred = np.matmul(cond, self.transition(self.pendant))  # (C, n, K)
        out = np.maximum(np.einsum("cn,cnk->nk", w, pred), 0.0)
        total = (out @ self._ones)[:, None]
        # A column the model cannot explain at all (zero likelihood: only transitions allowed,
        # and rows that differ by a transversion) says nothing: the background.
        return np.where(total > 0, out / np.maximum(total, 1e-300), self.background)


class Refiner:
    """Re-aligns reads against their edges' frequency profiles (see the module's text)."""

    def __init__(self, data, backend: Backend, model: RefineModel | None = None) -> None:
        self.model = model or RefineModel()
        self._data = data
        self._backend = backend
        self._freqs = EdgeFrequencies(data, self.model.tau_rel)
        self._edge_memo: dict[int, tuple] = {}
        self._memo_bytes = 0
        self._last = None
        self._table_memo: dict[int, tuple] = {}
        self._table_bytes = 0
        self._gap_freqs = (
            self._freqs
            if self.model.tau_gap_rel == self.model.tau_rel
            else EdgeFrequencies(data, self.model.tau_gap_rel)
        )
        which = self.model.tree_residues
        if which not in ("dna", "all", "none"):
            raise ValueError(f"tree_residues must be 'dna', 'all' or 'none', not {which!r}")
        self._tree_freqs = (
            TreeFrequencies(
                data, self.model.rates, self.model.transition_share, self.model.pendant_rel
            )
            if which == "all" or (which == "dna" and data.alphabet.name == "dna")
            else None
        )

    def _at_edge(self, edge: int):
        """:meth:`EdgeFrequencies.at_edge` of the residue scale (the tree model's for DNA),
        kept for the edge's row table and, while they take under ``_TABLE_BYTES``, for the
        rest of the batch (the choice among neighbouring edges, then the pass, build many
        of the same edges)."""
        if edge in self._edge_memo:
            return self._edge_memo[edge]
        if self._last is not None and self._last[0] == edge:
            return self._last[1]
        residues, gap, pair = self._freqs.at_edge(edge)
        if self._tree_freqs is not None:
            residues = self._tree_freqs.at_edge(edge)
        value = (residues, gap, pair)
        size = residues.nbytes + gap.nbytes + pair.nbytes
        if self._memo_bytes + size <= _TABLE_BYTES:
            self._edge_memo[edge] = value
            self._memo_bytes += size
        else:
            self._last = (edge, value)
        return value

    def _tables(self, edge: int, codes: np.ndarray):
        """``(odds (len(codes), n), occupied, keep, leave, enter, stay)`` of one edge (see
        :func:`dpalign.simd.papara_refine.posteriors`)."""
        model, freqs = self.model, self._freqs
        residues, gap, pair = self._at_edge(edge)
        if self._gap_freqs is not freqs:
            _, gap, pair = self._gap_freqs.at_edge(edge)
        bg = freqs.background
        q = (
            (1 - model.pseudo - model.column_mix) * residues
            + model.column_mix * freqs.column
            + model.pseudo * bg
        )
        member = ((codes[:, None].astype(np.int64) >> np.arange(freqs.n_bits)) & 1).astype(
            np.float64
        )
        odds = (member @ q.T) / np.maximum(member @ bg, 1e-300)[:, None]
        g = (1 - model.gap_prior) * gap + model.gap_prior * freqs.gap_fraction
        g = np.clip(g, 1e-3, 1 - 1e-3)
        occupied = 1.0 - g
        if not model.markov:
            return np.ascontiguousarray(odds), occupied, occupied, g, occupied, g
        # Gap given gap in the column before, from the same weighted rows (a lineage's deletion
        # spans columns); the first column has no column before it.
        both = (1 - model.gap_prior) * pair + model.gap_prior * freqs.gap_fraction**2
        before = np.concatenate([[0.5], g[:-1]])
        both = np.clip(both, np.maximum(0.0, before + g - 1), np.minimum(before, g))
        k = model.gap_pseudo
        stay = np.clip((both + k * freqs.gap_extend) / (before + k), 1e-3, 1 - 1e-3)
        leave = np.clip((g - both + k * freqs.gap_open) / (1 - before + k), 1e-3, 1 - 1e-3)
        stay[0], leave[0] = g[0], g[0]
        return np.ascontiguousarray(odds), occupied, 1 - leave, leave, 1 - stay, stay

    def _edge_table(self, edge: int, codes: np.ndarray):
        """The edge's table for the kernels (:meth:`_tables`, with ``model.rows`` its row
        table), kept for the rest of the batch while the kept ones take under
        ``_TABLE_BYTES`` (the choice among neighbouring edges builds most of those the pass
        then needs; ``codes`` must be the batch's)."""
        if edge in self._table_memo:
            return self._table_memo[edge]
        table = self._tables(edge, codes)
        if self.model.rows:
            table = self._row_table(edge, table, codes)
        size = sum(part.nbytes for part in table if isinstance(part, np.ndarray))
        if self._table_bytes + size <= _TABLE_BYTES:
            self._table_memo[edge] = table
            self._table_bytes += size
        return table

    def _row_table(self, edge: int, table, codes: np.ndarray):
        """``(*table, rows, row_odds, weights)``: the ``model.rows`` reference rows nearest the
        middle of the edge (True where they have a residue), their emissions (None unless
        ``model.row_residue``) and their weights."""
        model, data = self.model, self._data
        tips = nearest_tips(data.tree, edge, model.rows)
        tau = max(model.row_tau_rel * self._freqs.mean_length, 1e-9)
        d = np.array([dist for dist, _ in tips])
        w = np.exp(-(d - d.min()) / tau)
        w /= w.sum()
        states = np.stack([data.ref_states[data.tip_rows[node]] for _, node in tips])
        rows = states != data.alphabet.gap
        row_odds = None
        if model.row_residue > 0:
            k, freqs = self._freqs.n_bits, self._freqs
            bits = ((states[..., None].astype(np.int64) >> np.arange(k)) & 1).astype(np.float64)
            bits /= np.maximum(bits.sum(axis=2, keepdims=True), 1.0)
            residues, _, _ = self._at_edge(edge)
            q = (1 - model.pseudo) * residues + model.pseudo * freqs.background  # (n, K)
            s = model.row_residue
            q_rows = np.where(rows[..., None], s * bits + (1 - s) * q[None], q[None])
            member = ((codes[:, None].astype(np.int64) >> np.arange(k)) & 1).astype(np.float64)
            bg = np.maximum(member @ freqs.background, 1e-300)
            row_odds = np.ascontiguousarray(
                np.einsum("ck,rnk->rcn", member, q_rows) / bg[None, :, None]
            )
        return (*table, rows, row_odds, w)

    def refine(
        self, reads: list[np.ndarray], edges: np.ndarray, ops: list[str], states: np.ndarray
    ) -> list[str]:
        """The second-pass op strings of a batch of reads (first-pass ``ops`` where the edge
        is -1); ``states`` are the edges' Fitch states (E, n) the first pass aligned to."""
        model = self.model
        live = [k for k in range(len(reads)) if edges[k] >= 0 and len(reads[k])]
        if not live:
            return list(ops)
        bands, mismatch = _bands(
            [ops[k] for k in live], [reads[k] for k in live], edges[live], states, model.band
        )
        thetas = np.where(mismatch > model.divergent, model.theta_divergent, model.theta)
        sure = np.flatnonzero(mismatch <= model.reselect_above)
        if model.band_sure < model.band and len(sure):
            some = [live[t] for t in sure]
            narrow, _ = _bands(
                [ops[k] for k in some], [reads[k] for k in some], edges[some], states,
                model.band_sure,
            )  # fmt: skip
            for t, band in zip(sure, narrow, strict=True):
                bands[t] = band
        try:
            return self._refine(model, reads, edges, ops, states, live, bands, thetas, mismatch)
        finally:
            self._edge_memo, self._memo_bytes, self._last = {}, 0, None
            self._table_memo, self._table_bytes = {}, 0

    def _refine(self, model, reads, edges, ops, states, live, bands, thetas, mismatch):
        """:meth:`refine` once the bands are known: the edges of the reads in doubt
        reselected, then the pass."""
        codes = np.unique(np.concatenate([reads[k] for k in live]))
        doubt = [t for t in range(len(live)) if mismatch[t] > model.reselect_above]
        if model.reselect and model.rows and doubt:
            some = [live[t] for t in doubt]
            wide = [bands[t] for t in doubt]
            if model.reselect_band != model.band:
                wide, _ = _bands(
                    [ops[k] for k in some], [reads[k] for k in some], edges[some], states,
                    model.reselect_band,
                )  # fmt: skip
            edges = self.reselect(reads, edges, some, wide, codes)
        return self._pass(model, reads, edges, ops, live, thetas, bands)

    def reselect(self, reads, edges: np.ndarray, live: list[int], bands, codes=None):
        """Each ``live`` read's edge replaced by the one of highest row-mixture likelihood
        over its band among the edge and the edges that share a node with it (the edge's own
        on ties, then the lowest edge number). ``codes``: the read codes of the tables (a
        superset of the reads'; by default theirs)."""
        model, tree = self.model, self._data.tree
        touching: dict[int, list[int]] = {}
        for e, edge in enumerate(tree.edges):
            touching.setdefault(edge.u, []).append(e)
            touching.setdefault(edge.v, []).append(e)
        mine = np.concatenate([reads[k] for k in live])
        if codes is None:
            codes = np.unique(mine)
        index = np.searchsorted(codes, mine)
        starts = np.cumsum([0] + [len(reads[k]) for k in live])
        pairs: list[tuple[int, int]] = []  # (position in live, candidate edge)
        for t, k in enumerate(live):
            e0 = int(edges[k])
            near = {e0, *touching[tree.edges[e0].u], *touching[tree.edges[e0].v]}
            pairs += [(t, e) for e in sorted(near)]
        who = np.array([t for t, _ in pairs], dtype=np.int64)
        chosen, table_of = np.unique([e for _, e in pairs], return_inverse=True)
        n = self._data.n_columns
        per_edge = 16 * (len(codes) + 5) * max(n, 1) * (1 + model.rows)
        per_chunk = max(1, _TABLE_BYTES // per_edge)
        value = np.empty(len(pairs))
        for first in range(0, len(chosen), per_chunk):
            last = min(first + per_chunk, len(chosen))
            pick = np.flatnonzero((table_of >= first) & (table_of < last))
            tables = [self._edge_table(int(e), codes) for e in chosen[first:last]]
            value[pick] = engine.refine_papara_log_z(
                self._backend,
                tables,
                table_of[pick] - first,
                [index[starts[who[p]] : starts[who[p] + 1]].astype(np.int64) for p in pick],
                [bands[who[p]] for p in pick],
                model,
            )
        out = np.array(edges, dtype=np.int64)
        best = {t: -math.inf for t in range(len(live))}
        for p, (t, e) in enumerate(pairs):
            if e == int(edges[live[t]]):
                best[t] = value[p]
        for p, (t, e) in enumerate(pairs):  # by edge number within a read
            if value[p] > best[t]:
                best[t] = value[p]
                out[live[t]] = e
        return out

    def _pass(self, model, reads, edges, ops, live, thetas, bands) -> list[str]:
        """One model's op strings of the ``live`` reads, each in its band."""
        out = list(ops)
        n = self._data.n_columns
        codes, index = np.unique(np.concatenate([reads[k] for k in live]), return_inverse=True)
        starts = np.cumsum([0] + [len(reads[k]) for k in live])
        coded = {k: index[starts[t] : starts[t + 1]].astype(np.int64) for t, k in enumerate(live)}
        chosen, table_of = np.unique([int(edges[k]) for k in live], return_inverse=True)
        # Edges a chunk at a time, so that the tables stay small on big trees.
        per_edge = 16 * (len(codes) + 5) * max(n, 1) * (1 + model.rows)  # and their copy
        per_chunk = max(1, _TABLE_BYTES // per_edge)
        for first in range(0, len(chosen), per_chunk):
            last = min(first + per_chunk, len(chosen))
            pick = np.flatnonzero((table_of >= first) & (table_of < last))
            tables = [self._edge_table(int(e), codes) for e in chosen[first:last]]
            refined = engine.refine_papara(
                self._backend,
                tables,
                table_of[pick] - first,
                [coded[live[t]] for t in pick],
                [bands[t] for t in pick],
                thetas[pick],
                model,
            )
            for t, text in zip(pick, refined, strict=True):
                out[live[t]] = text
        return out


def _gap_runs(states: np.ndarray, gap: int) -> tuple[float, float]:
    """``(open, extend)``: over the reference's rows, the share of residues followed by a gap
    and of gaps followed by a gap, end gaps (before a row's first residue, after its last)
    left out: a fragment's missing ends are no deletions."""
    is_gap = states == gap
    has = ~is_gap
    n = states.shape[1]
    first = np.where(has.any(axis=1), has.argmax(axis=1), n)
    last = n - 1 - has[:, ::-1].argmax(axis=1)
    col = np.arange(n)
    inner = (col[None, :] >= first[:, None]) & (col[None, :] <= last[:, None])
    pair = inner[:, :-1] & inner[:, 1:]  # columns c - 1 and c both inside the row's span
    after_res, after_gap = has[:, :-1] & pair, is_gap[:, :-1] & pair
    opened = float((after_res & is_gap[:, 1:]).sum()) / max(float(after_res.sum()), 1.0)
    extended = float((after_gap & is_gap[:, 1:]).sum()) / max(float(after_gap.sum()), 1.0)
    return opened, extended


def nearest_tips(tree, edge: int, count: int) -> list[tuple[float, int]]:
    """The ``count`` tips nearest the middle of ``edge`` as ``(distance, node)``, nearest
    first (ties by node number)."""
    e = tree.edges[edge]
    heap = [(e.length / 2, e.u), (e.length / 2, e.v)]
    seen: set[int] = set()
    found: list[tuple[float, int]] = []
    while heap and len(found) < count:
        dist, node = heapq.heappop(heap)
        if node in seen:
            continue
        seen.add(node)
        if tree.is_tip(node):
            found.append((dist, node))
        for nxt, length in tree.neighbors[node]:
            if nxt not in seen and {node, nxt} != {e.u, e.v}:
                heapq.heappush(heap, (dist + length, nxt))
    return found


def _bands(ops: list[str], reads: list[np.ndarray], edges: np.ndarray, states, width: int):
    """Every read's band and first-pass mismatch share, all reads at once.

    Returns ``(bands, mismatch)``: ``bands[k] = (lo, hi, first, last)``, the cells the second
    pass may visit, ``width`` columns either side of where the first pass put each character
    (see :func:`dpalign.reference.papara_refine_posteriors`), and ``mismatch[k]`` the share of
    read k's aligned characters whose state set misses its column's in ``states[edges[k]]``.
    """
    n = states.shape[1]
    codes = np.frombuffer("".join(ops).encode("ascii"), dtype=np.uint8)
    lengths = np.array([len(o) for o in ops], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    used = np.cumsum(codes != ord("I"))  # columns used so far, counted over all reads
    base = np.where(starts > 0, used[starts - 1], 0)
    owner = np.repeat(np.arange(len(ops)), lengths)
    is_char = codes != ord("R")
    consumed = (used - base[owner])[is_char]  # per character, columns its read used with it
    m = np.array([len(r) for r in reads], dtype=np.int64)
    char_at = np.concatenate([[0], np.cumsum(m)])
    lo = np.maximum(0, consumed[char_at[:-1]] - width)
    hi = np.minimum(n, consumed[char_at[1:] - 1] + width)
    centre = np.insert(consumed, char_at[:-1], consumed[char_at[:-1]])  # row 0: the first's
    rows_of = np.repeat(np.arange(len(ops)), m + 1)
    centre = centre - lo[rows_of]
    span = (hi - lo)[rows_of]
    first = np.clip(centre - width, 0, span).astype(np.int64)
    last = np.clip(centre + width, 0, span).astype(np.int64)
    cuts = np.cumsum(m + 1)[:-1]
    bands = [
        (int(a), int(b), f, g)
        for a, b, f, g in zip(lo, hi, np.split(first, cuts), np.split(last, cuts), strict=True)
    ]
    aligned = codes[is_char] == ord("M")
    who = owner[is_char][aligned]
    site = consumed[aligned] - 1
    chars = np.concatenate(reads)[aligned]
    missed = (states[np.asarray(edges)[who], site] & chars) == 0
    count = np.bincount(who, minlength=len(ops))
    mismatch = np.bincount(who, weights=missed, minlength=len(ops)) / np.maximum(count, 1)
    return bands, mismatch
