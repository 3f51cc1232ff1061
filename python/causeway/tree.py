"""Pytrees: nested lists, tuples (named tuples too) and dicts of leaves, as
JAX has them. ``None`` is an empty subtree; dict keys are visited in sorted
order. Compiled functions take and return pytrees of arrays, and
:func:`causeway.grad` and the optimizers in :mod:`causeway.optim` work over
them::

    leaves, treedef = causeway.tree.flatten({"w": w, "b": b})
    same = causeway.tree.unflatten(treedef, leaves)
    doubled = causeway.tree.map(lambda x: 2 * x, params)
"""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

__all__ = ["TreeDef", "flatten", "unflatten", "leaves", "map", "structure"]

_LEAF, _NONE, _TUPLE, _LIST, _DICT, _NAMEDTUPLE = range(6)


class TreeDef:
    """The structure of a pytree without its leaves: hashable, comparable,
    and able to rebuild the tree from a sequence of new leaves."""

    __slots__ = ("kind", "children", "keys", "num_leaves", "_hash")

    def __init__(self, kind: int, children: Tuple["TreeDef", ...] = (), keys: Any = None):
        self.kind = kind
        self.children = children
        self.keys = keys
        self.num_leaves = 1 if kind == _LEAF else sum(c.num_leaves for c in children)
        self._hash = hash((kind, children, keys))

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind and
                self.keys == other.keys and self.children == other.children)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        if self.kind == _LEAF:
            return "*"
        if self.kind == _NONE:
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == _DICT:
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.keys, self.children)) + "}"
        if self.kind == _LIST:
            return f"[{inner}]"
        if self.kind == _NAMEDTUPLE:
            return f"{self.keys.__name__}({inner})"
        return f"({inner}{',' if len(self.children) == 1 else ''})"

    def unflatten(self, leaves: Any) -> Any:
        it = iter(leaves)
        out = self._build(it)
        if next(it, _END) is not _END:
            raise ValueError(f"too many leaves for the tree {self!r} of {self.num_leaves}")
        return out

    def _build(self, it):
        if self.kind == _LEAF:
            x = next(it, _END)
            if x is _END:
                raise ValueError(f"too few leaves for the tree {self!r} of {self.num_leaves}")
            return x
        if self.kind == _NONE:
            return None
        kids = [c._build(it) for c in self.children]
        if self.kind == _TUPLE:
            return tuple(kids)
        if self.kind == _LIST:
            return kids
        if self.kind == _NAMEDTUPLE:
            return self.keys(*kids)
        return dict(zip(self.keys, kids))


_END = object()


def _sorted_keys(d: dict) -> tuple:
    try:
        return tuple(sorted(d))
    except TypeError:  # keys of mixed types: insertion order
        return tuple(d)


def _flatten(tree: Any, out: List[Any], is_leaf) -> TreeDef:
    if is_leaf is not None and is_leaf(tree):
        out.append(tree)
        return TreeDef(_LEAF)
    if tree is None:
        return TreeDef(_NONE)
    if isinstance(tree, tuple):
        kids = tuple(_flatten(t, out, is_leaf) for t in tree)
        if hasattr(type(tree), "_fields"):
            return TreeDef(_NAMEDTUPLE, kids, type(tree))
        return TreeDef(_TUPLE, kids)
    if isinstance(tree, list):
        return TreeDef(_LIST, tuple(_flatten(t, out, is_leaf) for t in tree))
    if isinstance(tree, dict):
        keys = _sorted_keys(tree)
        return TreeDef(_DICT, tuple(_flatten(tree[k], out, is_leaf) for k in keys), keys)
    out.append(tree)
    return TreeDef(_LEAF)


def flatten(tree: Any, is_leaf: Callable[[Any], bool] = None) -> Tuple[List[Any], TreeDef]:
    """The leaves of ``tree`` in order and its structure."""
    out: List[Any] = []
    return out, _flatten(tree, out, is_leaf)


def unflatten(treedef: TreeDef, leaves: Any) -> Any:
    """The tree of structure ``treedef`` with ``leaves`` in order."""
    return treedef.unflatten(leaves)


def leaves(tree: Any) -> List[Any]:
    return flatten(tree)[0]


def structure(tree: Any) -> TreeDef:
    return flatten(tree)[1]


def map(fn: Callable, tree: Any, *rest: Any) -> Any:  # noqa: A001 (as jax.tree.map)
    """``fn`` applied leaf by leaf to ``tree`` and the trees in ``rest``,
    which have the same structure."""
    xs, treedef = flatten(tree)
    others = []
    for r in rest:
        ys, d = flatten(r)
        if d != treedef:
            raise ValueError(f"tree.map: structures differ: {treedef!r} and {d!r}")
        others.append(ys)
    return treedef.unflatten(fn(*args) for args in zip(xs, *others))


def broadcast_prefix(prefix: Any, treedef: TreeDef, is_leaf: Callable[[Any], bool], what: str
                     ) -> List[Any]:
    """One value per leaf of ``treedef``: ``prefix`` is a tree whose leaves
    (as ``is_leaf`` says, or ``None``) each stand for a whole subtree."""
    out: List[Any] = []

    def walk(p, d: TreeDef, path: str):
        if p is None or is_leaf(p):
            out.extend([p] * d.num_leaves)
            return
        if d.kind in (_TUPLE, _LIST, _NAMEDTUPLE) and isinstance(p, (tuple, list)):
            if len(p) != len(d.children):
                raise ValueError(f"{what}{path}: {len(p)} entries for a sequence of "
                                 f"{len(d.children)}")
            for i, (q, c) in enumerate(zip(p, d.children)):
                walk(q, c, f"{path}[{i}]")
            return
        if d.kind == _DICT and isinstance(p, dict):
            if set(p) != set(d.keys):
                raise ValueError(f"{what}{path}: keys {sorted(_strs(p))} do not match the "
                                 f"argument's {sorted(_strs(d.keys))}")
            for k, c in zip(d.keys, d.children):
                walk(p[k], c, f"{path}[{k!r}]")
            return
        raise ValueError(f"{what}{path}: {type(p).__name__} does not match the structure "
                         f"{d!r}")

    walk(prefix, treedef, "")
    return out


def _strs(xs) -> List[str]:
    return [str(x) for x in xs]
