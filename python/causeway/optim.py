"""Optimizers over pytrees of parameters, in the manner of optax::

    opt = cw.optim.adamw(1e-3, weight_decay=0.01)
    state = opt.init(params)                       # outside or inside a traced function
    ...
    updates, state = opt.update(grads, state, params)
    params = cw.optim.apply_updates(params, updates)

They are arithmetic on the leaves, so they work on traced values (inside a
compiled step, the usual place), on :class:`causeway.Array` (each operation a
small computation on the devices) and on numpy arrays. A state is a pytree of
arrays, passed into and returned from a compiled step like the parameters.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from . import tree
from ._causeway import Array, Value

__all__ = ["Optimizer", "sgd", "adam", "adamw", "apply_updates"]


class Optimizer(NamedTuple):
    init: Callable[[Any], Any]
    update: Callable[..., Any]


def _zeros_like(x: Any) -> Any:
    if isinstance(x, Value):
        from . import zeros
        return zeros(list(x.shape), x.dtype)
    shape, dtype = (x.shape, x.dtype) if isinstance(x, (Array, np.ndarray)) else \
        (np.shape(x), np.asarray(x).dtype)
    return np.zeros(shape, np.float32 if np.dtype(dtype).kind == "f" else dtype)


def _scalar(like: Any, value: float) -> Any:
    if isinstance(like, Value):
        from . import full
        return full([], value, "float32")
    return np.float32(value)


def apply_updates(params: Any, updates: Any) -> Any:
    """``params + updates``, leaf by leaf."""
    return tree.map(lambda p, u: p + u, params, updates)


def sgd(learning_rate: float, momentum: float = 0.0) -> Optimizer:
    """Stochastic gradient descent, with heavy-ball momentum if given."""
    lr, mu = float(learning_rate), float(momentum)

    def init(params):
        return {"momentum": tree.map(_zeros_like, params)} if mu else {}

    def update(grads, state, params=None):
        if not mu:
            return tree.map(lambda g: g * -lr, grads), state
        m = tree.map(lambda m, g: m * mu + g, state["momentum"], grads)
        return tree.map(lambda m: m * -lr, m), {"momentum": m}

    return Optimizer(init, update)


def adamw(learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 1e-4) -> Optimizer:
    """Adam with decoupled weight decay (Loshchilov and Hutter): each update
    is ``-lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param)``."""
    lr, b1, b2, eps, wd = (float(v) for v in (learning_rate, b1, b2, eps, weight_decay))

    def init(params):
        leaves = tree.leaves(params)
        return {"count": _scalar(leaves[0] if leaves else None, 0.0),
                "m": tree.map(_zeros_like, params), "v": tree.map(_zeros_like, params)}

    def update(grads, state, params=None):
        if wd and params is None:
            raise ValueError("adamw.update needs the params for the weight decay")
        t = state["count"] + 1.0
        m = tree.map(lambda m, g: m * b1 + g * (1.0 - b1), state["m"], grads)
        v = tree.map(lambda v, g: v * b2 + g * g * (1.0 - b2), state["v"], grads)
        c1 = 1.0 - b1 ** t  # bias corrections
        c2 = 1.0 - b2 ** t

        def step(m, v, p):
            u = (m / c1) / ((v / c2) ** 0.5 + eps)
            return (u + p * wd) * -lr if wd else u * -lr

        updates = tree.map(step, m, v, params if wd else m)
        return updates, {"count": t, "m": m, "v": v}

    return Optimizer(init, update)


def adam(learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
         ) -> Optimizer:
    """Adam (Kingma and Ba)."""
    return adamw(learning_rate, b1, b2, eps, weight_decay=0.0)
