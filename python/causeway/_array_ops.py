"""Operators and methods of :class:`causeway.Array`, each a small compiled
computation on the array's devices, as ``jax.Array``'s are.

An operation whose operands are arrays of one shape and one sharding (and
Python numbers) and that works element by element runs on each shard where it
is and keeps the sharding. Every other one (reductions, indexing, reshapes,
matrix products, operands of different shardings) gathers its operands along
their split dimensions on the devices (``all_gather``) and returns a result
replicated over the first operand's mesh. Numpy operands are put replicated
on that mesh; arrays on another mesh are moved there through the host.
Conversions to Python numbers fetch, since that is what they mean.

Each distinct operation (name, static arguments, operand shapes, dtypes and
shardings) is traced and compiled once and kept in a bounded cache.
"""

from __future__ import annotations

import collections
import numbers
import threading
from typing import Any, Callable, List, Sequence

import numpy as np

from . import _causeway as _C
from ._causeway import Array


_CACHE_SIZE = 256
_lock = threading.Lock()
_cache: "collections.OrderedDict[tuple, Any]" = collections.OrderedDict()


def clear_cache() -> None:
    """Forgets the compiled operations (they hold their clients)."""
    with _lock:
        _cache.clear()


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, np.ndarray)


def _static(x: Any) -> Any:
    """A Python number as a constant of the traced function (bool first: it
    is an int)."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (numbers.Integral, np.integer)):
        return int(x)
    return float(x)


def _gathered(x, spec: Sequence[Sequence[str]], mesh_shape: dict):
    """The whole of a traced shard ``x`` split as ``spec``, on every device."""
    for dim, axes in enumerate(spec):
        if axes:
            size = 1
            for a in axes:
                size *= mesh_shape[a]
            x = _C.ops.all_gather(x, list(axes), dim, size)
    return x


def apply(name: str, fn: Callable, operands: Sequence[Any], static: tuple = (),
          elementwise: bool = False) -> Any:
    """``fn`` (over traced values) applied to ``operands``: arrays, numpy
    values and Python numbers; ``static`` are further hashable arguments
    that ``fn`` closes over and that key the compiled function."""
    from . import NamedSharding, compile as cw_compile, device_put

    first = next(x for x in operands if type(x) is Array)
    mesh = first.mesh
    arrays: List[Array] = []
    slots: List[Any] = []  # per operand: the index of its array, or ("s", number)
    for x in operands:
        if type(x) is not Array:
            if _is_scalar(x):
                slots.append(("s", _static(x)))
                continue
            x = device_put(x, NamedSharding(mesh))
        elif x.mesh != mesh or x.client is not first.client:
            x = device_put(x.fetch(), NamedSharding(mesh))
        slots.append(len(arrays))
        arrays.append(x)
    specs = [tuple(tuple(d) for d in a.spec) for a in arrays]
    local = elementwise and all(a.shape == arrays[0].shape for a in arrays) and \
        all(s == specs[0] for s in specs)
    key = (name, static, id(first.client), mesh, local,
           tuple((tuple(a.shape), a.dtype, s) for a, s in zip(arrays, specs)),
           tuple(slots))
    with _lock:
        compiled = _cache.get(key)
        if compiled is not None:
            _cache.move_to_end(key)
    if compiled is None:
        mesh_shape = mesh.shape

        def body(*xs):
            if not local:
                xs = [_gathered(x, s, mesh_shape) for x, s in zip(xs, specs)]
            args = [s[1] if type(s) is tuple else xs[s] for s in slots]
            return fn(*args)

        body.__name__ = "array_" + name
        ins = [a.sharding for a in arrays]
        out = arrays[0].sharding if local else NamedSharding(mesh)
        compiled = cw_compile(body, in_shardings=ins, out_shardings=out)
        with _lock:
            _cache[key] = compiled
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return compiled(*arrays)


def _index_key(index: Any) -> tuple:
    """A hashable form of a basic index (ints, slices, Ellipsis)."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for it in items:
        if it is Ellipsis:
            out.append(("...",))
        elif isinstance(it, slice):
            for v in (it.start, it.stop, it.step):
                if v is not None and not isinstance(v, (numbers.Integral, np.integer)):
                    raise TypeError(f"slice bounds must be integers, not {type(v).__name__}")
            out.append(("slice", it.start, it.stop, it.step))
        elif isinstance(it, (numbers.Integral, np.integer)) and not isinstance(it, bool):
            out.append(("int", int(it)))
        else:
            raise TypeError(f"an Array is indexed by integers, slices of step 1 and ..., not "
                            f"{type(it).__name__} (fetch it with numpy.asarray for more)")
    return tuple(out)


def _index_of(key: tuple) -> tuple:
    out = []
    for it in key:
        if it[0] == "...":
            out.append(Ellipsis)
        elif it[0] == "slice":
            out.append(slice(it[1], it[2], it[3]))
        else:
            out.append(it[1])
    return tuple(out)


def _getitem(self: Array, index: Any) -> Array:
    key = _index_key(index)
    return apply("getitem", lambda x: x[_index_of(key)], [self], key)


def _binary(name: str, op: Callable, reverse: bool = False, elementwise: bool = True):
    def method(self: Array, other: Any):
        if not (type(other) is Array or _is_scalar(other) or isinstance(other, (np.ndarray, list))):
            return NotImplemented
        operands = [other, self] if reverse else [self, other]
        return apply(name, op, operands, (), elementwise)

    method.__name__ = f"__{'r' if reverse else ''}{name}__"
    return method


def _reduction(name: str, op: Callable):
    def method(self: Array, axis: Any = None, keepdims: bool = False) -> Array:
        ax = tuple(axis) if isinstance(axis, (list, tuple)) else axis
        return apply(name, lambda x: op(x, axis=ax, keepdims=keepdims), [self], (ax, keepdims))

    method.__name__ = name
    method.__doc__ = f"The {name} over ``axis`` (all axes by default), on the array's devices."
    return method


def _scalar(self: Array, convert: Callable, what: str):
    a = self.fetch()
    if a.size != 1:
        raise TypeError(f"only an array of one element converts to {what}; this one has shape "
                        f"{tuple(a.shape)}")
    return convert(a.reshape(()))


def _len(self: Array) -> int:
    if self.ndim == 0:
        raise TypeError("len() of a 0-d array")
    return self.shape[0]


def _iter(self: Array):
    """Rows of the array as arrays replicated on its mesh (fetched once)."""
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    from . import NamedSharding, device_put
    sharding = NamedSharding(self.mesh)
    for row in self.fetch():
        yield device_put(row, sharding)


def _reshape(self: Array, *shape) -> Array:
    dims = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
    dims = tuple(int(d) for d in dims)
    return apply("reshape", lambda x: x.reshape(dims), [self], dims)


def _transpose(self: Array, *axes) -> Array:
    perm = tuple(axes[0]) if len(axes) == 1 and not isinstance(axes[0], int) else axes
    perm = tuple(int(p) for p in perm) or None
    return apply("transpose", lambda x: x.transpose(perm) if perm else x.T, [self], (perm,))


def _astype(self: Array, dtype: Any) -> Array:
    name = np.dtype(dtype).name
    name = {"float64": "float32", "int64": "int32", "bool": "bool"}.get(name, name)
    if name == self.dtype:
        return self
    return apply("astype", lambda x: x.astype(name), [self], (name,), elementwise=True)


def install() -> None:
    def matmul(a, b):
        return a @ b

    binaries = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "truediv": lambda a, b: a / b,
        "pow": lambda a, b: a ** b,
    }
    for name, op in binaries.items():
        setattr(Array, f"__{name}__", _binary(name, op))
        setattr(Array, f"__r{name}__", _binary(name, op, reverse=True))
    for name, op in {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
                     "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}.items():
        setattr(Array, f"__{name}__", _binary(name, op))
    Array.__matmul__ = _binary("matmul", matmul, elementwise=False)
    Array.__rmatmul__ = _binary("matmul", matmul, reverse=True, elementwise=False)
    Array.__neg__ = lambda self: apply("neg", lambda x: -x, [self], (), True)
    Array.__abs__ = lambda self: apply("abs", lambda x: abs(x), [self], (), True)
    Array.__pos__ = lambda self: self
    Array.sum = _reduction("sum", lambda x, axis, keepdims: x.sum(axis, keepdims))
    Array.mean = _reduction("mean", lambda x, axis, keepdims: x.mean(axis, keepdims))
    Array.max = _reduction("max", lambda x, axis, keepdims: x.max(axis, keepdims))
    Array.min = _reduction("min", lambda x, axis, keepdims: x.min(axis, keepdims))
    Array.__getitem__ = _getitem
    Array.__len__ = _len
    Array.__iter__ = _iter
    Array.reshape = _reshape
    Array.transpose = _transpose
    Array.T = property(lambda self: _transpose(self))
    Array.astype = _astype
    Array.__float__ = lambda self: _scalar(self, float, "float")
    Array.__int__ = lambda self: _scalar(self, int, "int")
    Array.__index__ = lambda self: _scalar(
        self, lambda a: int(a) if a.dtype.kind in "iu" else _not_index(a), "an index")
    Array.__bool__ = lambda self: _scalar(self, bool, "bool")
    Array.item = lambda self: _scalar(self, lambda a: a.item(), "a Python number")
    Array.tolist = lambda self: self.fetch().tolist()
    # numpy defers to the Array's reflected operators (x_np + array).
    Array.__array_priority__ = 100


def _not_index(a: np.ndarray):
    raise TypeError(f"an array of {a.dtype} is not an index")


