"""Structured control flow inside traced functions: ``cond``, ``switch``,
``while_loop``, ``fori_loop`` and ``scan``, as in ``jax.lax``.

Each becomes one IR conditional or loop (``ir::OpKind::kConditional``,
``kWhile``) whose branches or body are traced once into sub-functions and
run inside the executable, on the device: a data-dependent trip count or
branch costs no round trip to the client. Values of the enclosing function
that a branch or body uses are passed in as further operands (closures work
as in JAX). Operands and results are pytrees of traced values.

Limits, each a clear error: sub-functions hold no collectives (run those
before or after the loop), and gradients flow through ``cond`` and
``switch`` but not through loops (``causeway.grad`` says so rather than
returning zeros).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from . import tree
from ._causeway import FunctionBuilder, Value
from ._causeway import ops as _ops
from ._errors import InvalidArgumentError

__all__ = ["cond", "switch", "while_loop", "fori_loop", "scan"]


def _error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message, "INVALID_ARGUMENT")


def _outer_builder(what: str) -> FunctionBuilder:
    from . import _tracing  # the package's trace stack
    stack = getattr(_tracing, "stack", None)
    if not stack:
        from ._errors import FailedPreconditionError
        raise FailedPreconditionError(
            f"cw.{what} runs inside a traced function: call it from a function given to "
            f"cw.jit or cw.compile, e.g. cw.jit(lambda x: cw.{what}(...))(x)",
            "FAILED_PRECONDITION")
    return stack[-1]


def _as_values(b: FunctionBuilder, leaves: Sequence[Any], what: str) -> List[Value]:
    from . import _lift
    out = []
    for x in leaves:
        if isinstance(x, Value):
            out.append(x)
        elif x is None:
            raise _error(f"{what}: None is not a value")
        else:
            out.append(_lift(b, x))
    return out


def _aval(v: Value) -> Tuple[Tuple[int, ...], str]:
    return tuple(v.shape), v.dtype


def _describe(avals: Sequence[Tuple[Tuple[int, ...], str]]) -> str:
    return "(" + ", ".join(f"{d}{list(s)}" for s, d in avals) + ")"


class _Traced:
    """Sub-functions traced over the same parameters: given avals first,
    then every value of enclosing functions any of them uses."""

    def __init__(self, functions, captured: List[Value], out_trees: list, out_avals: list):
        self.functions = functions
        self.captured = captured
        self.out_trees = out_trees
        self.out_avals = out_avals


def _trace_subs(fns: Sequence[Callable[[List[Value]], Any]], avals, names: Sequence[str],
                passthrough: Optional[Sequence[bool]] = None) -> _Traced:
    """Traces each ``fn(params) -> pytree`` into a Function over ``avals``
    plus the captured values. A function whose ``passthrough`` entry is true
    also returns the captured parameters unchanged (a loop body carries
    them).

    Each function is traced once, capturing in its own order; then each is
    wrapped in a function over ``avals`` and every capture of any of them,
    which inlines it with its own captures picked out."""
    from . import _capturing
    passthrough = list(passthrough or [False] * len(fns))
    captured: List[Value] = []  # of all the functions, in first-use order
    index = {}
    traced = []  # (function, positions of its captures in `captured`)
    trees, outs_avals = [], []
    for fn, name in zip(fns, names):
        b = FunctionBuilder(name)
        params = [b.parameter(list(s), d) for s, d in avals]
        with _capturing(b) as own_captures:
            leaves, treedef = tree.flatten(fn(params))
            leaves = _as_values(b, leaves, name)
            function = b.build(leaves)  # captures values returned as they are
        own = []
        for v in own_captures:
            if v.key not in index:
                index[v.key] = len(captured)
                captured.append(v)
            own.append(index[v.key])
        traced.append((function, own))
        trees.append(treedef)
        outs_avals.append([_aval(v) for v in leaves])

    built = []
    for (f, own), name, through in zip(traced, names, passthrough):
        if not captured:
            built.append(f)
            continue
        w = FunctionBuilder(name)
        params = [w.parameter(list(s), d) for s, d in avals]
        extra = [w.parameter(list(v.shape), v.dtype) for v in captured]
        results = w.call(f, params + [extra[k] for k in own])
        built.append(w.build(results + (extra if through else [])))
    return _Traced(built, captured, trees, outs_avals)


def _scalar_selector(b: FunctionBuilder, x: Any, dtype: str, what: str) -> Value:
    v = _as_values(b, [x], what)[0]
    if tuple(v.shape) != ():
        raise _error(f"{what} must be a scalar, got shape {tuple(v.shape)}")
    if dtype == "bool" and v.dtype != "bool":
        v = _ops.not_equal(v, 0)
    if dtype == "int32" and v.dtype != "int32":
        if v.dtype == "bool":
            v = _ops.astype(v, "int32")
        else:
            raise _error(f"{what} must be int32, got {v.dtype}")
    return v


def _check_branch_outputs(traced: _Traced, names: Sequence[str], what: str) -> None:
    for k in range(1, len(names)):
        if traced.out_trees[k] != traced.out_trees[0] or traced.out_avals[k] != traced.out_avals[0]:
            raise _error(f"{what}: {names[k]} returns {traced.out_trees[k]} "
                         f"{_describe(traced.out_avals[k])}, {names[0]} returns "
                         f"{traced.out_trees[0]} {_describe(traced.out_avals[0])}; every "
                         "branch must return the same structure, shapes and dtypes")


def _run_branches(b: FunctionBuilder, selector: Value, branches: Sequence[Callable],
                  operands: tuple, names: List[str], what: str):
    leaves, treedef = tree.flatten(operands)
    leaves = _as_values(b, leaves, what)
    avals = [_aval(v) for v in leaves]
    fns = [lambda params, f=f: f(*tree.unflatten(treedef, params)) for f in branches]
    traced = _trace_subs(fns, avals, names)
    _check_branch_outputs(traced, names, what)
    results = b.conditional(selector, traced.functions, leaves + traced.captured)
    return tree.unflatten(traced.out_trees[0], results)


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``,
    deciding on the device. ``pred`` is a scalar (any dtype: non-zero is
    true); a Python bool picks the branch while tracing. Both branches must
    return the same structure of shapes and dtypes. Only the branch taken
    runs."""
    if isinstance(pred, (bool, np.bool_)):
        return true_fun(*operands) if pred else false_fun(*operands)
    b = _outer_builder("cond")
    sel = _scalar_selector(b, pred, "bool", "cond: pred")
    return _run_branches(b, sel, [true_fun, false_fun], operands,
                         [getattr(true_fun, "__name__", "true_fun"),
                          getattr(false_fun, "__name__", "false_fun")], "cond")


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """``branches[index](*operands)``, with ``index`` (an int32 scalar)
    clamped into range as in ``jax.lax.switch``."""
    branches = list(branches)
    if not branches:
        raise _error("switch: no branches")
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        return branches[min(max(int(index), 0), len(branches) - 1)](*operands)
    b = _outer_builder("switch")
    sel = _scalar_selector(b, index, "int32", "switch: index")
    names = [f"branch{k}_{getattr(f, '__name__', 'fn')}" for k, f in enumerate(branches)]
    return _run_branches(b, sel, branches, operands, names, "switch")


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """Repeats ``val = body_fun(val)`` while ``cond_fun(val)`` holds, from
    ``init_val`` (a pytree), on the device; returns the final ``val``.
    ``body_fun`` must return the structure, shapes and dtypes it is given;
    ``cond_fun`` a scalar (non-zero: go on)."""
    b = _outer_builder("while_loop")
    leaves, treedef = tree.flatten(init_val)
    leaves = _as_values(b, leaves, "while_loop: init_val")
    if not leaves:
        raise _error("while_loop: init_val holds no values")
    avals = [_aval(v) for v in leaves]

    def cond_fn(params):
        p = cond_fun(tree.unflatten(treedef, params))
        if not isinstance(p, Value):
            # A constant condition: the loop would never end, or never start.
            raise _error(f"while_loop: cond_fun returned {p!r}, not a traced value; return a "
                         "comparison of the carry's values (a constant condition would "
                         "never end the loop or never start it)")
        if tuple(p.shape) != ():
            raise _error(f"while_loop: cond_fun must return a scalar, got shape "
                         f"{tuple(p.shape)}")
        return p if p.dtype == "bool" else _ops.not_equal(p, 0)

    def body_fn(params):
        return body_fun(tree.unflatten(treedef, params))

    traced = _trace_subs([cond_fn, body_fn], avals,
                         [getattr(cond_fun, "__name__", "cond_fun"),
                          getattr(body_fun, "__name__", "body_fun")], passthrough=[False, True])
    if traced.out_trees[1] != treedef or traced.out_avals[1] != avals:
        raise _error(f"while_loop: body_fun returns {traced.out_trees[1]} "
                     f"{_describe(traced.out_avals[1])} for a carry of {treedef} "
                     f"{_describe(avals)}; it must return the carry's structure, shapes and "
                     "dtypes")
    n = len(leaves)
    results = b.while_loop(traced.functions[0], traced.functions[1], leaves + traced.captured)
    return tree.unflatten(treedef, results[:n])


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """``val = body_fun(i, val)`` for ``i`` in ``[lower, upper)``, on the
    device; the bounds may be traced int32 scalars."""
    def cond_fun(c):
        return c[0] < c[1]

    def body(c):
        i, hi, val = c
        return (i + 1, hi, body_fun(i, val))

    b = _outer_builder("fori_loop")
    lo = _scalar_selector(b, lower, "int32", "fori_loop: lower")
    hi = _scalar_selector(b, upper, "int32", "fori_loop: upper")
    return while_loop(cond_fun, body, (lo, hi, init_val))[2]


def scan(f: Callable, init: Any, xs: Any = None, length: Optional[int] = None,
         reverse: bool = False) -> Tuple[Any, Any]:
    """``jax.lax.scan``: ``carry, y = f(carry, x)`` for each ``x`` along the
    leading axis of ``xs`` (a pytree; None with ``length``), returning the
    final carry and the ``y`` values stacked along a new leading axis. One
    loop on the device; ``xs`` is read and ``ys`` written in place by index.
    ``reverse`` runs from the last element to the first (``ys`` keep the
    order of ``xs``)."""
    b = _outer_builder("scan")
    x_leaves, x_def = tree.flatten(xs)
    x_leaves = _as_values(b, x_leaves, "scan: xs")
    lengths = {v.shape[0] if v.shape else None for v in x_leaves}
    if None in lengths:
        raise _error("scan: every leaf of xs needs a leading axis")
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise _error(f"scan: leading axes of xs and length disagree: {sorted(lengths)}"
                     if lengths else "scan: give xs or length")
    n = lengths.pop()
    c_leaves, c_def = tree.flatten(init)
    c_leaves = _as_values(b, c_leaves, "scan: init")
    c_avals = [_aval(v) for v in c_leaves]
    x_avals = [(tuple(v.shape[1:]), v.dtype) for v in x_leaves]

    # Learn what f returns: the structure and shapes of its carry and y.
    def probe(params):
        carry = tree.unflatten(c_def, params[:len(c_leaves)])
        x = tree.unflatten(x_def, params[len(c_leaves):])
        return f(carry, x)
    traced = _trace_subs([probe], c_avals + x_avals, [getattr(f, "__name__", "f")])
    out_def = traced.out_trees[0]
    out_avals = traced.out_avals[0]
    if out_def.kind not in (tree._TUPLE, tree._LIST) or len(out_def.children) != 2:
        raise _error(f"scan: f must return a pair (carry, y), returns {out_def}")
    new_c_def, y_def = out_def.children
    n_c = new_c_def.num_leaves
    if new_c_def != c_def or out_avals[:n_c] != c_avals:
        raise _error(f"scan: f returns a carry {new_c_def} {_describe(out_avals[:n_c])} for "
                     f"{c_def} {_describe(c_avals)}; it must keep the carry's structure, "
                     "shapes and dtypes")
    y_avals = out_avals[n_c:]

    def stack_of(shape, dtype):
        acc = "int32" if dtype == "bool" else dtype
        return b.full([n] + list(shape), 0, acc)

    ys0 = [stack_of(s, d) for s, d in y_avals]

    def loop_cond(c):
        return c[0] < n

    def loop_body(c):
        i, carry, ys = c
        at = (n - 1 - i) if reverse else i
        x = tree.unflatten(x_def, [_ops.take(v, at, 0) for v in x_leaves])
        new_carry, y = f(carry, x)
        new_ys = []
        for acc, v in zip(ys, tree.leaves(y)):
            if not isinstance(v, Value):
                v = _as_values(acc.builder, [v], "scan: y")[0]
            if v.dtype == "bool":
                v = _ops.astype(v, "int32")
            new_ys.append(_ops.scatter_add(acc, at, v, 0))
        return (i + 1, new_carry, new_ys)

    i0 = b.full([], 0, "int32")
    _, carry, ys = while_loop(loop_cond, loop_body, (i0, init, ys0))
    ys = [_ops.astype(v, "bool") if d == "bool" else v for v, (_, d) in zip(ys, y_avals)]
    return carry, tree.unflatten(y_def, ys)
