"""A Newick reader for PaPaRa's trees that does not import scikit-bio.

Importing scikit-bio costs about a second (it pulls in scipy.stats, pandas, and, where they
are installed, torch and jax through its array-backend probe), which dwarfed the rest of
``dpalign papara`` on small inputs. This reader follows scikit-bio's Newick grammar with
``convert_underscores=False`` token for token (quoted labels with ``''`` escapes, nested
``[comments]``, no whitespace inside an unquoted label), so a tree reads the same either way;
``tests/test_papara_newick.py`` checks it against scikit-bio on random trees.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import InputError

_STRUCTURE = frozenset("(),;:")


class NewickNode:
    """A tree node with the part of ``skbio.TreeNode``'s interface that PaPaRa uses."""

    __slots__ = ("name", "length", "children", "parent")

    def __init__(self) -> None:
        self.name: str | None = None
        self.length: float | None = None
        self.children: list[NewickNode] = []
        self.parent: NewickNode | None = None

    def is_tip(self) -> bool:
        return not self.children

    def preorder(self, include_self: bool = True) -> Iterator[NewickNode]:
        stack = [self] if include_self else list(reversed(self.children))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def postorder(self, include_self: bool = True) -> Iterator[NewickNode]:
        # reversed preorder with children reversed is a postorder with children in order
        stack = [self] if include_self else list(self.children)
        out = []
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children)
        return reversed(out)

    def tips(self) -> Iterator[NewickNode]:
        return (node for node in self.preorder(include_self=False) if node.is_tip())


def _tokens(text: str, path) -> Iterator[tuple[bool, str]]:
    """scikit-bio's ``_tokenize_newick`` with ``convert_underscores=False``, each token tagged
    ``(is_structure, text)``, so that a quoted label such as ``')'`` stays a label (scikit-bio
    mistakes it for structure)."""
    not_escaped = True
    label_start = False
    last_non_ws = ""
    last_char = ""
    comment_depth = 0
    buffer: list[str] = []
    for character in text:
        if character == "[" and not_escaped:
            if last_non_ws != "'" or comment_depth == 0:
                comment_depth += 1
        if comment_depth > 0:
            if character == "]" and last_non_ws != "'":
                comment_depth -= 1
            last_non_ws = character
            continue
        if not_escaped and character in _STRUCTURE:
            label_start = False
            yield False, "".join(buffer)
            buffer = []
            yield True, character
        elif character == "'":
            not_escaped = not not_escaped
            label_start = True
            if last_non_ws == "'":
                buffer.append(character)
                last_non_ws = ""
                last_char = ""
                continue
        elif not character.isspace() or not not_escaped:
            if label_start and last_char.isspace() and not_escaped:
                raise InputError(
                    "malformed Newick tree: a label holds whitespace (quote it: 'a b')",
                    path=str(path) if path else None,
                )
            buffer.append(character)
            label_start = True
        else:
            last_char = character
            continue
        last_char = character
        last_non_ws = character


def parse_newick(text: str, path=None) -> NewickNode:
    """Parse one Newick tree (scikit-bio's reading, names verbatim).

    Raises
    ------
    InputError
        For unbalanced parentheses, a branch length that is not a number, or no ``;``.
    """

    def fail(message: str):
        raise InputError(f"malformed Newick tree: {message}", path=str(path) if path else None)

    stack: list[tuple[NewickNode, int]] = []
    depth = 0
    last, last_structure = "", False
    distance_next = False
    root = NewickNode()
    stack.append((root, depth))
    for structure, token in _tokens(text, path):
        if last and not last_structure:  # a label before this token: a name or a length
            if not distance_next:
                stack[-1][0].name = last
            else:
                distance_next = False
        if structure and token == ":":
            distance_next = True
        elif last_structure and last == ":":
            try:
                if structure:
                    raise ValueError
                stack[-1][0].length = float(token)
            except ValueError:
                fail(f"could not read length as numeric type: {token}")
        elif not structure:
            pass
        elif token == "(":
            depth += 1
            stack.append((NewickNode(), depth))
        elif token == ",":
            stack.append((NewickNode(), depth))
        elif token == ")":
            if len(stack) < 2:
                fail("parentheses are unbalanced")
            children = []
            while stack and depth == stack[-1][1]:
                children.append(stack.pop()[0])
            if not stack:
                fail("parentheses are unbalanced")
            children.reverse()
            parent = stack[-1][0]
            if parent.children:
                fail("contains unnested children")
            for child in children:
                child.parent = parent
            parent.children = children
            depth -= 1
        elif token == ";":
            if len(stack) == 1:
                return root
            break
        last, last_structure = token, structure
    fail("parentheses, quotes or comments may be unbalanced, or the ';' is missing")
    raise AssertionError  # unreachable: fail raises
