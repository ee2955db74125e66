"""Tuning of the accurate mode's second pass in-process (issue 15): the first pass runs once per
case and seed and is kept, then each second-pass model is scored on it.

    python bench/accurate_tune.py [--cases a,b] [--seed-offsets 1000,2000] [--models NAME,...]
                                  [--cache DIR]

The cases are ``bench/placement_accuracy.py``'s (the same simulations; ``--seed-offsets`` draws
other data of them: tune there, report on offset 0). A first pass is cached in ``--cache`` as a
pickle of what :meth:`dpalign.papara.refine.Refiner.refine` receives. ``--models`` names entries
of :data:`MODELS` (keyword overrides of :class:`~dpalign.papara.refine.RefineModel`); each
prints recall / precision / perfect per case-seed and the summed recall + precision + perfect.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement_accuracy import CASES  # noqa: E402

import dpalign  # noqa: E402
from dpalign.benchmarks.accuracy import score  # noqa: E402
from dpalign.benchmarks.simulate import INSERTED, simulate  # noqa: E402
from dpalign.engine import get_backend  # noqa: E402
from dpalign.papara import refine  # noqa: E402

#: name -> RefineModel overrides.
MODELS: dict[str, dict] = {
    "first": {"first_only": True},
    "current": {},
    "nochain": {"markov": False},
    "notree": {"tree_residues": "none"},
}


def parse_model(name: str) -> dict:
    """A :data:`MODELS` entry, or ``key=value:key=value`` RefineModel overrides."""
    if name in MODELS:
        return MODELS[name]
    out = {}
    for part in name.split(":"):
        key, value = part.split("=")
        if key in ("rows", "band", "band_sure", "reselect_band"):
            out[key] = int(value)
        elif key == "tree_residues":
            out[key] = value
        else:
            out[key] = float(value)
    return out


def first_pass(case: str, offset: int, cache: Path):
    """``(data, truth, names, reads, edges, ops, states)`` of one case-seed's first pass."""
    path = cache / f"{case}-{offset}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    spec = dict(CASES[case])
    spec["seed"] += offset
    sim = simulate(**spec)
    captured = {}
    original = refine.Refiner.refine

    def capture(self, reads, edges, ops, states):
        captured.setdefault("calls", []).append((list(reads), np.array(edges), list(ops)))
        captured["states"] = states
        captured["data"] = self._data
        return list(ops)

    refine.Refiner.refine = capture
    try:
        dpalign.papara(
            sim.newick, sim.msa, sim.reads, protein=spec.get("protein", False), accurate=True,
            backend="numba", threads=2,
        )  # fmt: skip
    finally:
        refine.Refiner.refine = original
    reads, edges, ops = [], [], []
    for r, e, o in captured["calls"]:
        reads += r
        edges.append(e)
        ops += o
    data = captured["data"]
    truth = {name: t for (name, _), t in zip(sim.reads, sim.truth, strict=True)}
    result = (data, [truth[n] for n in data.read_names], data.read_names, reads,
              np.concatenate(edges), ops, captured["states"])  # fmt: skip
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(result))
    return result


def columns(ops: str) -> np.ndarray:
    """Reference column per read character of an op string (INSERTED for ``I``)."""
    codes = np.frombuffer(ops.encode("ascii"), dtype=np.uint8)
    site = np.cumsum(codes != ord("I")) - 1
    keep = codes != ord("R")
    return np.where(codes[keep] == ord("M"), site[keep], INSERTED)


def evaluate(first, overrides: dict, backend):
    data, truth, _, reads, edges, ops, states = first
    overrides = dict(overrides)
    if overrides.pop("first_only", False):
        out = ops
    else:
        model = refine.RefineModel(**overrides)
        out = refine.Refiner(data, backend, model).refine(reads, edges, ops, states)
    return score([columns(o) for o in out], truth)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--seed-offsets", default="1000,2000")
    parser.add_argument("--models", default="current")
    parser.add_argument("--cache", default="/tmp/accurate_tune")
    args = parser.parse_args(argv)
    backend = get_backend("numba", threads=2)
    offsets = [int(v) for v in args.seed_offsets.split(",")]
    firsts = {
        (case, off): first_pass(case, off, Path(args.cache))
        for case in args.cases.split(",")
        for off in offsets
    }
    for name in args.models.split(","):
        total = 0.0
        for (case, off), first in firsts.items():
            acc = evaluate(first, parse_model(name), backend)
            total += acc.recall + acc.precision + acc.perfect
            print(
                f"{name:<14} {case:<24} {off:>5}  {100 * acc.recall:6.2f} / "
                f"{100 * acc.precision:6.2f} / {100 * acc.perfect:5.1f}",
                flush=True,
            )
        print(f"{name:<14} sum {total:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
