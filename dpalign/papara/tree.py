"""The reference tree as PaPaRa sees it: an unrooted binary tree and its edges in PaPaRa order.

Edge order matters (ties between edges go to the lower index), so it reproduces PaPaRa 2.5's
walk (spec §3):

* root with three children (A, B, C): the subtree of C, then of A, then of B;
* rooted binary root (X, Y): the merged edge X–Y (lengths summed), then the subtrees of Y's
  first and second child, then of X's first and second child;
* the subtree of S: the edge above S, then the subtree of S's first child, then of its second
  (preorder, children in Newick order). A tip contributes only the edge above it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

DEFAULT_LENGTH = 1.0  # a missing branch length


@dataclass(frozen=True)
class Edge:
    """An edge between nodes ``u`` and ``v`` (``v`` is the lower end in the walk)."""

    u: int
    v: int
    length: float


@dataclass
class PaparaTree:
    """An unrooted binary tree with nodes numbered 0..N-1.

    Attributes
    ----------
    names : list of str
        Node names (tips are named; inner nodes have ``""``).
    neighbors : list of list of (node, length)
        Adjacency, with branch lengths.
    edges : list of Edge
        In PaPaRa's order.
    """

    names: list[str]
    neighbors: list[list[tuple[int, float]]]
    edges: list[Edge]

    def is_tip(self, node: int) -> bool:
        return len(self.neighbors[node]) == 1

    @property
    def tips(self) -> list[int]:
        """Tip nodes, in Newick order."""
        return [k for k in range(len(self.names)) if self.is_tip(k)]

    @property
    def tip_names(self) -> list[str]:
        return [self.names[k] for k in self.tips]

    def directed(self, parent: int, node: int, memo: dict, tip, combine):
        """The value of the subtree at ``node`` seen from ``parent``, bottom-up, no recursion.

        ``tip(q)`` gives a tip's value and ``combine(q, kids)`` an inner node's, ``kids`` its
        ``(child, branch length, child's value)`` away from the parent. Every directed subtree
        met is kept in ``memo`` under ``(parent, node)``, so that the edges share them.
        """
        stack = [(parent, node)]
        while stack:
            p, q = stack[-1]
            if (p, q) in memo:
                stack.pop()
                continue
            if self.is_tip(q):
                memo[(p, q)] = tip(q)
                stack.pop()
                continue
            kids = [(c, z) for c, z in self.neighbors[q] if c != p]
            missing = [(q, c) for c, _ in kids if (q, c) not in memo]
            if missing:
                stack.extend(missing)
                continue
            memo[(p, q)] = combine(q, [(c, z, memo[(q, c)]) for c, z in kids])
            stack.pop()
        return memo[(parent, node)]

    def side(self, edge: Edge, toward: int) -> list[str]:
        """Names of the tips on the ``toward`` end of ``edge`` (``edge.u`` or ``edge.v``)."""
        away = edge.v if toward == edge.u else edge.u
        stack, seen, tips = [toward], {away, toward}, []
        while stack:
            node = stack.pop()
            if self.is_tip(node):
                tips.append(self.names[node])
            for other, _ in self.neighbors[node]:
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
        return tips

    def smaller_side(self, edge: Edge) -> list[str]:
        """Tip names of the smaller side of an edge (ties: the ``v`` side), sorted."""
        lower, upper = self.side(edge, edge.v), self.side(edge, edge.u)
        return sorted(lower if len(lower) <= len(upper) else upper)

    def clades(self, edge_ids) -> dict[int, tuple[str, ...]]:
        """:meth:`smaller_side` of many edges (by index into ``edges``) from one traversal.

        The tree is rooted at node 0 and walked once, so that each node's subtree is a
        contiguous run of tips; each edge then costs only its smaller side (walking the whole
        tree per read was most of a 16,000-read placement run).
        """
        n = len(self.names)
        parent = [-1] * n
        lo, hi = [0] * n, [0] * n
        tip_order: list[int] = []
        stack = [(0, False)]
        seen = [False] * n
        seen[0] = True
        while stack:
            node, done = stack.pop()
            if done:
                hi[node] = len(tip_order)
                continue
            lo[node] = len(tip_order)
            if self.is_tip(node):
                tip_order.append(node)
            stack.append((node, True))
            for other, _ in reversed(self.neighbors[node]):
                if not seen[other]:
                    seen[other] = True
                    parent[other] = node
                    stack.append((other, False))
        out: dict[int, tuple[str, ...]] = {}
        for k in edge_ids:
            edge = self.edges[k]
            child = edge.v if parent[edge.v] == edge.u else edge.u
            inside = tip_order[lo[child] : hi[child]]
            outside = tip_order[: lo[child]] + tip_order[hi[child] :]
            v_side, u_side = (inside, outside) if child == edge.v else (outside, inside)
            side = v_side if len(v_side) <= len(u_side) else u_side
            out[k] = tuple(sorted(self.names[t] for t in side))
        return out


def build_tree(root, path=None) -> PaparaTree:
    """Turn a scikit-bio ``TreeNode`` into a :class:`PaparaTree` with PaPaRa's edge order.

    Raises
    ------
    InputError
        For a root with other than 2 or 3 children, an inner node with other than 2 children,
        unnamed or duplicate tips.
    """
    names: list[str] = []
    neighbors: list[list[tuple[int, float]]] = []
    ids: dict[int, int] = {}

    def node_id(node) -> int:
        key = id(node)
        if key not in ids:
            ids[key] = len(names)
            names.append((node.name or "") if node.is_tip() else "")
            neighbors.append([])
        return ids[key]

    def length(node) -> float:
        return DEFAULT_LENGTH if node.length is None else float(node.length)

    def link(a, b, z: float) -> None:
        neighbors[a].append((b, z))
        neighbors[b].append((a, z))

    children = list(root.children)
    if len(children) not in (2, 3):
        raise InputError(
            f"the tree root has {len(children)} "
            f"{'child' if len(children) == 1 else 'children'}; PaPaRa needs 3 (unrooted) or 2 "
            "(rooted binary)",
            path=str(path) if path else None,
        )
    for node in root.postorder(include_self=False):
        if not node.is_tip() and len(node.children) != 2:
            tips = ", ".join(t.name or "?" for t in list(node.tips())[:4])
            raise InputError(
                f"an inner node has {len(node.children)} children (PaPaRa needs binary trees); "
                f"it holds tips {tips}...",
                path=str(path) if path else None,
            )
    # Number nodes in preorder so tips come in Newick order.
    for node in root.preorder(include_self=len(children) == 3):
        node_id(node)
    for node in root.preorder(include_self=False):
        if node.parent is not root:
            link(node_id(node.parent), node_id(node), length(node))
    edges: list[Edge] = []

    def subtree(node) -> None:
        # iterative preorder: the edge above `node`, then its children's subtrees
        stack = [node]
        while stack:
            current = stack.pop()
            edges.append(Edge(ids[id(current.parent)], node_id(current), length(current)))
            stack.extend(reversed(current.children))

    if len(children) == 3:
        a, b, c = children
        r = node_id(root)
        for child in children:
            link(r, node_id(child), length(child))
        for s in (c, a, b):
            subtree(s)
    else:
        x, y = children
        merged = length(x) + length(y)
        link(node_id(x), node_id(y), merged)
        edges.append(Edge(node_id(x), node_id(y), merged))
        for s in list(y.children) + list(x.children):
            subtree(s)
    tree = PaparaTree(names, neighbors, edges)
    _check_tips(tree, path)
    return tree


def _check_tips(tree: PaparaTree, path) -> None:
    seen = set()
    for name in tree.tip_names:
        if not name:
            raise InputError("a tip of the tree has no name", path=str(path) if path else None)
        if name in seen:
            raise InputError(
                f"tip name {name!r} appears twice in the tree", path=str(path) if path else None
            )
        seen.add(name)
