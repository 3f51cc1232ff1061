"""Random numbers from explicit keys, in the manner of ``jax.random``::

    key = cw.random.key(0)
    key, sub = cw.random.split(key)
    w = cw.random.normal(sub, (784, 128)) * 0.01

A key is an int32 array of shape (2,). The same key gives the same numbers
inside a traced function and outside one (there the work runs as a small
compiled computation on the key's devices, or on :func:`causeway.default_mesh`
for a numpy key). Each word of a key holds 24 bits; the generator is seeded
with 30 bits derived from both.

Inside a function traced per shard, every shard draws the same numbers from
the same key: fold in a shard's position (an argument) to vary them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import _causeway as _C
from ._causeway import Array, Value

__all__ = ["key", "PRNGKey", "split", "fold_in", "uniform", "normal"]

_WORD = 1 << 24


def _mix(x: int) -> int:
    """splitmix64's finaliser."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def key(seed: int) -> np.ndarray:
    """The key of an integer seed (a host value; put it or pass it to a
    compiled function like any array)."""
    h = _mix(int(seed) & 0xFFFFFFFFFFFFFFFF)
    return np.array([h % _WORD, (h >> 24) % _WORD], np.int32)


PRNGKey = key


def _seed(k: Value) -> Value:
    return k[0] + k[1] * 64  # < 2**30 + 2**24: no int32 overflow


def _words(u: Value) -> Value:
    """Uniform floats in [0, 1) as key words in [0, 2**24)."""
    return _C.ops.floor(u * float(_WORD)).astype("int32")


def _on_devices(name: str, fn, k: Any, static: tuple) -> Array:
    from . import NamedSharding, default_mesh, device_put
    from ._array_ops import apply
    if type(k) is not Array:
        k = np.asarray(k)
        if k.shape != (2,) or k.dtype.kind not in "iu":
            raise TypeError(f"a random key is an int32 array of shape (2,), not {k.dtype}"
                            f"{list(k.shape)}")
        k = device_put(k.astype(np.int32), NamedSharding(default_mesh()))
    return apply("random_" + name, fn, [k], static)


def split(k: Any, num: int = 2):
    """``num`` new keys, independent of ``k`` and of each other: an array of
    shape (num, 2)."""
    num = int(num)
    if num < 1:
        raise ValueError(f"split: num must be at least 1, not {num}")
    if isinstance(k, Value):
        return _words(_C.ops.rng_uniform(_seed(k), [num, 2]))
    return _on_devices("split", lambda x: split(x, num), k, (num,))


def fold_in(k: Any, data: Any):
    """A new key from ``k`` and an integer: a number (taken modulo 2**24), or
    a traced int32 scalar in [0, 2**24) such as a step or a shard's index."""
    if isinstance(k, Value):
        d = int(data) % _WORD if not isinstance(data, Value) else data
        return _words(_C.ops.rng_uniform(_seed(k) + d, [2]))
    if isinstance(data, Value):
        raise TypeError("fold_in: a traced value folds only into a traced key")
    d = int(data) % _WORD
    return _on_devices("fold_in", lambda x: fold_in(x, d), k, (d,))


def _shape(shape: Sequence[int]) -> list:
    return [int(d) for d in ((shape,) if isinstance(shape, int) else shape)]


def uniform(k: Any, shape: Sequence[int] = (), minval: float = 0.0, maxval: float = 1.0):
    """f32 numbers uniform in [minval, maxval)."""
    dims = _shape(shape)
    lo, hi = float(minval), float(maxval)
    if isinstance(k, Value):
        u = _C.ops.rng_uniform(_seed(k), dims)
        return u if (lo, hi) == (0.0, 1.0) else u * (hi - lo) + lo
    return _on_devices("uniform", lambda x: uniform(x, dims, lo, hi), k, (tuple(dims), lo, hi))


def normal(k: Any, shape: Sequence[int] = ()):
    """f32 numbers from the standard normal distribution."""
    dims = _shape(shape)
    if isinstance(k, Value):
        return _C.ops.rng_normal(_seed(k), dims)
    return _on_devices("normal", lambda x: normal(x, dims), k, (tuple(dims),))
