"""PaparaTree's clade names per edge: one traversal, the same as walking each edge's sides."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpalign.papara.newick import parse_newick
from dpalign.papara.tree import build_tree

GOLDEN = Path("/work/shared/golden/papara")


@st.composite
def _binary_newick(draw):
    """A random binary tree with a 2- or 3-child root, in Newick."""
    n = draw(st.integers(3, 14))
    subtrees = [f"t{k}" for k in range(n)]
    root_kids = draw(st.sampled_from([2, 3]))
    while len(subtrees) > root_kids:
        i = draw(st.integers(0, len(subtrees) - 1))
        a = subtrees.pop(i)
        j = draw(st.integers(0, len(subtrees) - 1))
        b = subtrees.pop(j)
        subtrees.append(f"({a},{b}):0.1")
    return "(" + ",".join(subtrees) + ");"


def _check(tree):
    edges = range(len(tree.edges))
    clades = tree.clades(edges)
    assert set(clades) == set(edges)
    for k in edges:
        assert clades[k] == tuple(tree.smaller_side(tree.edges[k]))


@given(_binary_newick())
def test_clades_equal_smaller_side_on_random_trees(text):
    _check(build_tree(parse_newick(text)))


@pytest.mark.parametrize(
    "case", sorted(p.name for p in GOLDEN.iterdir() if (p / "tree.nwk").exists())
)
def test_clades_equal_smaller_side_on_golden_trees(case):
    _check(build_tree(parse_newick((GOLDEN / case / "tree.nwk").read_text())))
