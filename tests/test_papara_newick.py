"""dpalign's own Newick reader against scikit-bio's on random trees."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpalign.errors import InputError
from dpalign.papara.newick import parse_newick

skbio = pytest.importorskip("skbio")

_PLAIN = st.text("abcXYZ019_.|-", min_size=1, max_size=6)
# scikit-bio mistakes a quoted structure character for structure; those have their own test
_QUOTED = st.text("ab _[]'x", min_size=1, max_size=6).map(
    lambda s: "'" + s.replace("'", "''") + "'"
)
_LENGTH = st.one_of(
    st.none(),
    st.sampled_from(["0", "1", "0.5", "1e-3", "2.5E+1", "-0.1", ".25"]),
)
_SPACE = st.sampled_from(["", "", " ", "\n", "\t", " [a comment] "])


@st.composite
def _newick(draw, depth=0):
    """A Newick subtree string; deeper levels are more likely tips."""
    if depth > 3 or draw(st.integers(0, 3)) == 0:
        label = draw(st.one_of(_PLAIN, _QUOTED))
    else:
        kids = draw(st.lists(_newick(depth + 1), min_size=1, max_size=3))
        sep = draw(_SPACE)
        label = (
            "(" + ("," + sep).join(kids) + ")" + draw(st.sampled_from(["", "inner", "'in ner'"]))
        )
    length = draw(_LENGTH)
    return label + ("" if length is None else draw(_SPACE) + ":" + length)


def _shape(node):
    name = node.name if node.name else None
    return (name, node.length, [_shape(c) for c in node.children])


@settings(max_examples=200, deadline=None)
@given(_newick(), _SPACE)
def test_reads_like_scikit_bio(body, tail):
    text = "(" + body + ",x:1)" + tail + ";\n"
    want = skbio.TreeNode.read(io.StringIO(text), format="newick", convert_underscores=False)
    assert _shape(parse_newick(text)) == _shape(want)


def test_traversals_match_scikit_bio():
    text = "((a:1,(b,c)d)e,f,(g,h));"
    mine = parse_newick(text)
    theirs = skbio.TreeNode.read(io.StringIO(text), convert_underscores=False)
    for order in ("preorder", "postorder"):
        for include in (True, False):
            assert [n.name for n in getattr(mine, order)(include_self=include)] == [
                n.name for n in getattr(theirs, order)(include_self=include)
            ]
    assert [t.name for t in mine.tips()] == [t.name for t in theirs.tips()]
    assert mine.children[0].parent is mine


def test_quoted_structure_characters_are_names():
    tree = parse_newick("(')':1,'a,b',';'' x');")
    assert [(c.name, c.length) for c in tree.children] == [
        (")", 1.0),
        ("a,b", None),
        (";' x", None),
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("(a,b c);", "whitespace"),
        ("(a,b:x);", "numeric"),
        ("(a,b));", "unbalanced"),
        ("(a,b)", "';' is missing"),
        ("a,b);", "unbalanced"),
        ("(a,:);", "numeric"),
    ],
)
def test_malformed_trees_are_input_errors(text, message):
    with pytest.raises(InputError, match=message):
        parse_newick(text, "t.nwk")
