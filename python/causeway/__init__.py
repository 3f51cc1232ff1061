"""Causeway: a single-controller runtime for ML accelerators, from Python.

The API follows JAX's sharding API over Causeway's C++ client (the logic is
in C++; this layer names things the way a JAX user expects)::

    import numpy as np, causeway as cw

    client = cw.local_cluster(islands=1, hosts_per_island=2, devices_per_host=4)
    mesh = cw.make_mesh({"data": 8})
    x = cw.device_put(np.ones((32, 16), np.float32), cw.NamedSharding(mesh, cw.P("data")))

    @cw.compile(in_shardings=cw.NamedSharding(mesh, cw.P("data")),
                out_shardings=cw.NamedSharding(mesh, cw.P()))
    def total(x):                       # traced per shard: x is f32[4, 16] here
        return cw.all_reduce(x.sum(axis=0), "data")

    y = total(x)                        # returns at once; the devices run behind
    print(np.asarray(y))                # 16 values, each 32

Functions are traced once per argument shape into Causeway IR and compiled for
a mesh; like ``shard_map`` in JAX they see one shard, and collectives
(``all_reduce``...) name mesh axes. Calls dispatch asynchronously and return
:class:`Array` handles at once; an error in a computation is raised, with its
root cause (node, device, host), at the first read of an array that depends
on it. Arrays free their device memory when their last reference goes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _causeway as _C
from ._causeway import Array, Client, CompiledFunction, Device, Function, FunctionBuilder, Mesh
from ._causeway import Value
from . import tree
from ._errors import (CausewayError, DeadlineExceededError, FailedPreconditionError,
                      InternalError, InvalidArgumentError, NotFoundError, PermissionDeniedError,
                      ResourceExhaustedError, UnavailableError, UnimplementedError)

__version__ = "0.9.0"

# --------------------------------------------------------------------------
# Clusters and clients

_default_lock = threading.Lock()
_default_client: Optional[Client] = None


def _set_default(client: Client) -> Client:
    global _default_client
    with _default_lock:
        _default_client = client
        # The caches of default meshes and array operations hold the clients
        # they were made for.
        _default_meshes.clear()
    _array_ops.clear_cache()
    return client


def default_client() -> Client:
    """The client made last by :func:`local_cluster` or :func:`connect`."""
    with _default_lock:
        if _default_client is None:
            raise FailedPreconditionError(
                "no client yet: call causeway.local_cluster() or causeway.connect() first",
                "FAILED_PRECONDITION")
        return _default_client


def local_cluster(islands: int = 1, hosts_per_island: int = 2, devices_per_host: int = 4, *,
                  device_memory_bytes: int = 1 << 30, dcn_latency_us: float = 0.0,
                  dcn_gbps: float = 0.0, weight: float = 1.0, priority: int = 0,
                  fail_launches_of: str = "", device_kind: str = "cpu") -> Client:
    """An embedded cluster in this process (emulated hosts and CPU devices) and
    a client of it, which becomes the default client.

    ``device_kind`` names the kind of its devices (``Device.kind``); a kind
    this build lacks raises ``NotFoundError`` naming the kinds it has.
    ``dcn_latency_us`` / ``dcn_gbps`` emulate the network between islands.
    ``fail_launches_of`` makes every launch of the function of that name fail
    (a fault drill: the error reaches the reads of everything downstream)."""
    return _set_default(_C.local_cluster(islands, hosts_per_island, devices_per_host,
                                         device_memory_bytes, dcn_latency_us, dcn_gbps,
                                         fail_launches_of, weight, priority, device_kind))


def connect(address: Optional[str] = None, token: Optional[str] = None, *,
            timeout: float = 30.0, tls_ca: str = "", weight: float = 1.0,
            priority: int = 0) -> Client:
    """A client of a distributed cluster: ``connect("grpc://HOST:PORT", token=...)``.
    Without an address, the one cluster that ``causeway cluster up`` runs for
    this user on this machine (an error names them if there are several).
    The token defaults to ``$CAUSEWAY_TOKEN``, else to the record that
    ``cluster up`` keeps for a cluster on this machine (private to this
    user). Becomes the default client."""
    if address is None:
        address = _C.recorded_cluster()
    if token is None:
        token = ""  # the C++ client reads and checks $CAUSEWAY_TOKEN, naming it
    return _set_default(_C.connect(address, token, timeout, tls_ca, weight, priority))


def devices(client: Optional[Client] = None) -> List[Device]:
    """Every device of the cluster, island by island."""
    return (client or default_client()).devices()


def make_mesh(axes: Union[Dict[str, int], Sequence[Tuple[str, int]]], island: Optional[int] = None,
              client: Optional[Client] = None) -> Mesh:
    """A mesh of devices of one island (the first that fits, or ``island``),
    e.g. ``make_mesh({"data": 4, "model": 2})``."""
    items = list(axes.items()) if isinstance(axes, dict) else [tuple(a) for a in axes]
    return (client or default_client()).make_mesh(items, -1 if island is None else island)


# --------------------------------------------------------------------------
# Shardings


class PartitionSpec(tuple):
    """How each dimension of an array is split over mesh axes, as in JAX:
    ``P("data", None)`` splits dimension 0 over "data" and keeps dimension 1
    whole; ``P(("data", "model"))`` splits over both; missing trailing
    entries are ``None``."""

    def __new__(cls, *parts):
        for p in parts:
            if not (p is None or isinstance(p, str) or
                    (isinstance(p, tuple) and all(isinstance(a, str) for a in p))):
                raise TypeError(f"a PartitionSpec entry is None, an axis name or a tuple of them, "
                                f"not {p!r}")
        return super().__new__(cls, parts)

    def __repr__(self):
        return "P(" + ", ".join(repr(p) for p in self) + ")"

    def dims(self, ndim: int) -> List[List[str]]:
        if len(self) > ndim:
            raise InvalidArgumentError(
                f"{self!r} has {len(self)} entries for an array of rank {ndim}",
                "INVALID_ARGUMENT")
        out = []
        for i in range(ndim):
            p = self[i] if i < len(self) else None
            out.append([] if p is None else [p] if isinstance(p, str) else list(p))
        return out


P = PartitionSpec


def _spec_of(dims: Sequence[Sequence[str]]) -> PartitionSpec:
    return P(*[None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims])


class NamedSharding:
    """An array's placement: a mesh and a :class:`PartitionSpec`."""

    __slots__ = ("mesh", "spec")

    def __init__(self, mesh: Mesh, spec: PartitionSpec = PartitionSpec()):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"NamedSharding needs a causeway.Mesh, not {type(mesh).__name__}")
        self.mesh = mesh
        self.spec = spec if isinstance(spec, PartitionSpec) else P(*spec)

    def dims(self, ndim: int) -> List[List[str]]:
        return self.spec.dims(ndim)

    def shard_shape(self, global_shape: Sequence[int]) -> Tuple[int, ...]:
        """The shape of each shard of an array of ``global_shape``."""
        return self.mesh.shard_shape(list(global_shape), self.dims(len(global_shape)))

    def __eq__(self, other):
        return (isinstance(other, NamedSharding) and self.mesh == other.mesh and
                _norm(self.spec) == _norm(other.spec))

    def __hash__(self):
        return hash((self.mesh, _norm(self.spec)))

    def __repr__(self):
        return f"NamedSharding({self.mesh!r}, {self.spec!r})"


def _norm(spec: PartitionSpec) -> tuple:
    parts = list(spec)
    while parts and parts[-1] is None:
        parts.pop()
    return tuple(parts)


# --------------------------------------------------------------------------
# Arrays

_HOST_DTYPES = {np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_)}


def _as_host_array(x: Any) -> np.ndarray:
    """x as a float32, int32 or bool numpy array (float64 and int64 narrowed,
    as JAX does without x64)."""
    a = np.asarray(x)
    # (The extension makes it C-contiguous; np.ascontiguousarray would turn
    # a scalar into shape (1,).)
    if a.dtype in _HOST_DTYPES:
        return a
    if a.dtype.kind == "f":
        return a.astype(np.float32)
    if a.dtype.kind in "iu":
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise InvalidArgumentError(f"integer values outside int32 (dtype {a.dtype})",
                                       "INVALID_ARGUMENT")
        return a.astype(np.int32)
    raise InvalidArgumentError(
        f"unsupported dtype {a.dtype}: causeway arrays are float32, int32 or bool",
        "INVALID_ARGUMENT")


def device_put(x: Any, sharding: NamedSharding) -> Array:
    """Copies a host value (numpy array or scalar) onto the devices of
    ``sharding.mesh``, split as ``sharding.spec`` says. Returns at once; the
    array is ready once every shard is stored. An :class:`Array` already with
    this sharding is returned as is; another is moved through the host. A
    pytree of values is put leaf by leaf (``sharding`` is then one sharding
    for all, or a tree of them matching the value)."""
    if isinstance(x, (list, tuple, dict)) or x is None:
        # A pytree: one sharding for every leaf, or a tree prefix of them.
        leaves, treedef = tree.flatten(x)
        try:
            shardings = tree.broadcast_prefix(sharding, treedef, _is_sharding, "device_put")
        except ValueError as e:
            raise InvalidArgumentError(str(e), "INVALID_ARGUMENT") from None
        return treedef.unflatten(device_put(a, s) for a, s in zip(leaves, shardings))
    if not isinstance(sharding, NamedSharding):
        raise TypeError("device_put needs a causeway.NamedSharding")
    if isinstance(x, Array):
        if x.sharding == sharding:
            return x
        x = x.fetch()
    a = _as_host_array(x)
    return sharding.mesh.client.put(a, sharding.mesh, sharding.dims(a.ndim))


def _array_sharding(self: Array) -> NamedSharding:
    return NamedSharding(self.mesh, _spec_of(self.spec))


def _block_until_ready(self: Array, timeout: Optional[float] = None) -> Array:
    """Waits until every shard is ready; raises the computation's error."""
    self.wait(-1.0 if timeout is None else timeout)
    return self


def _array_array(self: Array, dtype=None, copy=None):
    a = self.fetch()
    return a if dtype is None else a.astype(dtype)


def _array_repr(self: Array) -> str:
    return f"Array({self.dtype}{list(self.shape)}, {self.sharding!r})"


Array.sharding = property(_array_sharding, doc="The array's NamedSharding")
Array.block_until_ready = _block_until_ready
Array.__array__ = _array_array
Array.__repr__ = _array_repr
Array.size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))


# --------------------------------------------------------------------------
# Tracing: functions are Python code run on traced values.

_tracing = threading.local()


@contextlib.contextmanager
def _building(builder: FunctionBuilder):
    stack = getattr(_tracing, "stack", None)
    if stack is None:
        stack = _tracing.stack = []
    stack.append(builder)
    _C.set_tracing(builder)
    try:
        yield builder
    finally:
        stack.pop()
        _C.set_tracing(stack[-1] if stack else None)


@contextlib.contextmanager
def _capturing(b: FunctionBuilder):
    """Traces into ``b``: a value of an enclosing function used there (or
    returned, at ``b.build``) becomes a further parameter of ``b``. Yields the
    list of those values, in the order of their parameters."""
    captured: List[Value] = []
    stand_ins: Dict[tuple, Value] = {}

    def capture(v: Value) -> Value:
        if v.key not in stand_ins:
            captured.append(v)
            stand_ins[v.key] = b.parameter(list(v.shape), v.dtype)
        return stand_ins[v.key]

    b.capture = capture
    try:
        with _building(b):
            yield captured
    finally:
        b.capture = None


def _current_builder() -> FunctionBuilder:
    stack = getattr(_tracing, "stack", None)
    if not stack:
        raise FailedPreconditionError(
            "this op makes a value from nothing and is only valid inside a function being "
            "traced (causeway.compile, causeway.grad)", "FAILED_PRECONDITION")
    return stack[-1]


def trace(fn: Callable, shapes: Sequence[Tuple[Sequence[int], str]], name: Optional[str] = None
          ) -> Tuple[Function, bool]:
    """Traces ``fn`` on parameters of the given (shape, dtype) into a Function.
    Returns it and whether ``fn`` returned a tuple/list of results."""
    b = FunctionBuilder(name or getattr(fn, "__name__", "fn"))
    params = [b.parameter(list(s), d) for s, d in shapes]
    with _building(b):
        out = fn(*params)
    multi = isinstance(out, (tuple, list))
    outs = list(out) if multi else [out]
    outs = [o if isinstance(o, Value) else _lift(b, o) for o in outs]
    return b.build(outs), multi


def _lift(b: FunctionBuilder, x: Any) -> Value:
    return b.constant(_as_host_array(x))


def value_and_grad(fn: Callable, argnums: Union[int, Sequence[int]] = 0) -> Callable:
    """A function returning ``(fn(*args), d fn / d args[argnums])``, for use
    inside a traced function. ``fn`` returns an f32 scalar; arguments may be
    nested lists, tuples and dicts of traced values (gradients have the same
    structure). The gradient is reverse-mode autodiff of the traced IR."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    @functools.wraps(fn)
    def wrapped(*args):
        leaves: list = []
        rebuilders = []
        spans = []
        for a in args:
            start = len(leaves)
            arg_leaves, treedef = tree.flatten(a)
            leaves.extend(arg_leaves)
            rebuilders.append(treedef.unflatten)
            spans.append((start, len(leaves)))
        values = [x for x in leaves if isinstance(x, Value)]
        if not values:
            raise InvalidArgumentError("grad: no traced value among the arguments",
                                       "INVALID_ARGUMENT")
        outer = values[0].builder
        leaves = [x if isinstance(x, Value) else _lift(outer, x) for x in leaves]
        inner = FunctionBuilder(getattr(fn, "__name__", "fn") + "_grad")
        params = [inner.parameter(list(x.shape), x.dtype) for x in leaves]
        inner_args = [r(params[s:e]) for r, (s, e) in zip(rebuilders, spans)]
        # Values of enclosing functions that fn closes over become further
        # parameters of the inner function (constants of the gradient).
        with _capturing(inner) as captured:
            out = fn(*inner_args)
            if not isinstance(out, Value):
                out = _lift(inner, out)
            built = inner.build([out])
        wrt = [k for n in nums for k in range(*spans[n])]
        gf = _C.grad_function(built, wrt)
        res = outer.call(gf, leaves + captured)
        grads = res[1:]
        per_arg = []
        for n in nums:
            width = spans[n][1] - spans[n][0]
            per_arg.append(rebuilders[n](grads[:width]))
            grads = grads[width:]
        return res[0], (per_arg[0] if isinstance(argnums, int) else tuple(per_arg))

    return wrapped


def grad(fn: Callable, argnums: Union[int, Sequence[int]] = 0) -> Callable:
    """The gradient of ``fn`` (an f32 scalar function) with respect to
    ``args[argnums]``, for use inside a traced function."""
    vg = value_and_grad(fn, argnums)

    @functools.wraps(fn)
    def wrapped(*args):
        return vg(*args)[1]

    return wrapped


# --------------------------------------------------------------------------
# Compiling and calling


def _shardings(s: Any, n: int, what: str) -> List[NamedSharding]:
    if isinstance(s, NamedSharding):
        return [s] * n
    s = list(s)
    if len(s) != n:
        raise InvalidArgumentError(f"{len(s)} {what} for {n} values", "INVALID_ARGUMENT")
    for x in s:
        if not isinstance(x, NamedSharding):
            raise TypeError(f"{what}: expected NamedSharding, got {type(x).__name__}")
    return s


def _is_sharding(x: Any) -> bool:
    return isinstance(x, NamedSharding)


def _leaf_shardings(spec: Any, treedef: tree.TreeDef, whole: Optional[tree.TreeDef],
                    what: str) -> List[Optional[NamedSharding]]:
    """One sharding (or None: the default) per leaf of ``treedef``. ``spec``
    is a NamedSharding for every leaf, a tree prefix of the values (for the
    arguments: one entry per argument), or a flat sequence with one
    NamedSharding per leaf. ``whole`` is the structure the prefix is matched
    against when it differs from ``treedef`` (the arguments' tuple)."""
    n = treedef.num_leaves
    if spec is None or isinstance(spec, NamedSharding):
        return [spec] * n
    if (isinstance(spec, (list, tuple)) and len(spec) == n and n != len((whole or treedef).children)
            and all(isinstance(s, NamedSharding) for s in spec)):
        return list(spec)  # flat: one per leaf
    try:
        return tree.broadcast_prefix(spec, whole or treedef, _is_sharding, what)
    except ValueError as e:
        raise InvalidArgumentError(f"{e} (give a NamedSharding for every value, one per "
                                   f"argument, or a tree of them matching the values)",
                                   "INVALID_ARGUMENT") from None


_default_meshes: Dict[int, Tuple[Client, Mesh]] = {}


def default_mesh(client: Optional[Client] = None) -> Mesh:
    """A mesh of one device (the client's first) on which functions compiled
    without shardings run, replicated, and new arrays made from host values
    live."""
    c = client or default_client()
    with _default_lock:
        hit = _default_meshes.get(id(c))
        if hit is not None and hit[0] is c:
            return hit[1]
    m = c.make_mesh([("devices", 1)], -1)
    with _default_lock:
        _default_meshes[id(c)] = (c, m)
    return m


def _trace_tree(fn: Callable, shapes: Sequence[Tuple[Sequence[int], str]], treedef: tree.TreeDef,
                name: Optional[str]) -> Tuple[Function, tree.TreeDef]:
    """Traces ``fn`` called with the arguments ``treedef`` describes (a tuple
    of pytrees) on parameters of the given per-leaf (shape, dtype)."""
    b = FunctionBuilder(name or getattr(fn, "__name__", "fn"))
    params = [b.parameter(list(s), d) for s, d in shapes]
    with _building(b):
        out = fn(*treedef.unflatten(params))
    outs, out_def = tree.flatten(out)
    if not outs:
        raise InvalidArgumentError(f"{getattr(fn, '__name__', 'the function')} returned no "
                                   f"values ({out_def!r})", "INVALID_ARGUMENT")
    outs = [o if isinstance(o, Value) else _lift(b, o) for o in outs]
    return b.build(outs), out_def


class Compiled:
    """A function compiled for a mesh, called like a Python function: each
    call dispatches at once and returns :class:`Array` handles. A Python
    function is traced (per shard) once per argument structure, shapes and
    dtypes; its arguments and results may be pytrees (nested tuples, lists
    and dicts) of arrays."""

    def __init__(self, fn: Union[Callable, Function], in_shardings: Any, out_shardings: Any = None,
                 name: Optional[str] = None, check_replication: bool = True):
        self._fn = fn
        self._in = in_shardings
        self._out = out_shardings
        self._name = name
        self._check_replication = check_replication
        # (argument structure, per-leaf shapes and dtypes, default mesh) ->
        # (compiled, result structure, its call)
        self._cache: Dict[tuple, tuple] = {}
        self._fixed = None
        # Whether some argument has no sharding given (it then goes to the
        # mesh of the call, see _mesh_of).
        self._defaults = in_shardings is None or any(
            s is None for s in tree.flatten(in_shardings, lambda x: x is None)[0])
        if isinstance(fn, Function):
            self._fixed = self._compile_fixed(fn)
        elif not callable(fn):
            raise TypeError("compile needs a Python function or a causeway.Function")
        else:
            functools.update_wrapper(self, fn)

    def _compile_fixed(self, f: Function) -> tuple:
        flat = tree.structure(tuple(range(f.num_parameters)))
        ins = _leaf_shardings(self._in, flat, None, "in_shardings")
        mesh = _mesh_of(ins, self._out, ())
        ins = [s or NamedSharding(mesh) for s in ins]
        outs_def = tree.structure(tuple(range(f.num_outputs)))
        single = tree.structure(0) if f.num_outputs == 1 else outs_def
        return self._compile_function(f, ins, mesh, single, outs_def)

    def _compile_function(self, f: Function, ins: List[NamedSharding], mesh: Mesh,
                          out_def: tree.TreeDef, match_def: Optional[tree.TreeDef] = None) -> tuple:
        outs = _leaf_shardings(self._out, out_def, match_def, "out_shardings")
        outs = [s or NamedSharding(mesh) for s in outs]
        in_specs = [s.dims(len(shape)) for s, (shape, _) in zip(ins, f.parameter_shapes)]
        out_specs = [s.dims(len(shape)) for s, (shape, _) in zip(outs, f.output_shapes)]
        compiled = mesh.client.compile(f, mesh, in_specs, out_specs, self._check_replication)
        return compiled, out_def, functools.partial(mesh.client.call, compiled), ins

    def specialize(self, shapes: Sequence[Tuple[Sequence[int], str]]) -> CompiledFunction:
        """The compiled function for (flat) arguments of these global (shape, dtype)."""
        key = tuple((tuple(s), d) for s, d in shapes)
        return self._lookup(tree.structure(tuple(range(len(key)))), key, None)[0]

    def _lookup(self, treedef: tree.TreeDef, key: tuple, default: Optional[Mesh]) -> tuple:
        if self._fixed is not None:
            return self._fixed
        full = (treedef, key, default)
        hit = self._cache.get(full)
        if hit is None:
            ins = _leaf_shardings(self._in, treedef, None, "in_shardings")
            if default is not None:
                ins = [s or NamedSharding(default) for s in ins]
            elif any(s is None for s in ins):
                raise InvalidArgumentError("in_shardings: a value has no sharding",
                                           "INVALID_ARGUMENT")
            shard_shapes = [(s.shard_shape(shape), dtype) for s, (shape, dtype) in zip(ins, key)]
            f, out_def = _trace_tree(self._fn, shard_shapes, treedef, self._name)
            hit = self._cache[full] = self._compile_function(f, ins, ins[0].mesh if ins else
                                                             _mesh_of([], self._out, ()), out_def)
        return hit

    def __call__(self, *args):
        if self._fixed is not None:
            compiled, out_def, call, ins = self._fixed
            if len(args) != len(ins):
                raise InvalidArgumentError(f"{len(args)} arguments for a function of {len(ins)} "
                                           f"parameters", "INVALID_ARGUMENT")
            leaves = list(args)
        else:
            leaves, treedef = tree.flatten(args)
            default = None
            if self._defaults:
                default = _mesh_of(_leaf_shardings(self._in, treedef, None, "in_shardings"),
                                   self._out, leaves)
            key = tuple((tuple(a.shape), a.dtype) if type(a) is Array else _shape_key(a)
                        for a in leaves)
            compiled, out_def, call, ins = self._lookup(treedef, key, default)
        if self._defaults:  # arrays elsewhere move to the call's mesh
            leaves = [device_put(a, s) for a, s in zip(leaves, ins)]
        elif not all(type(a) is Array for a in leaves):
            leaves = [a if type(a) is Array else device_put(a, s) for a, s in zip(leaves, ins)]
        return out_def.unflatten(call(leaves))


def _shape_key(x: Any) -> tuple:
    a = _as_host_array(x)
    return tuple(a.shape), str(a.dtype)


def _mesh_of(ins: Sequence[Optional[NamedSharding]], out: Any, leaves: Sequence[Any]) -> Mesh:
    """The mesh of a call: the shardings' if any gives one, else that of the
    first device array among the arguments, else the default mesh."""
    for s in ins:
        if s is not None:
            return s.mesh
    for s in tree.leaves(out) if not isinstance(out, NamedSharding) else [out]:
        if isinstance(s, NamedSharding):
            return s.mesh
    for a in leaves:
        if type(a) is Array:
            return a.mesh
    return default_mesh()


def compile(fn: Optional[Union[Callable, Function]] = None, *, in_shardings: Any = None,
            out_shardings: Any = None, name: Optional[str] = None,
            check_replication: bool = True):
    """Compiles ``fn`` (a Python function, traced per shard, or a
    :class:`Function`) for the mesh of its shardings. Usable as a decorator.

    ``in_shardings`` is a NamedSharding for every argument, or one entry per
    argument, each a NamedSharding for the whole argument (a pytree) or a
    tree of them matching it; ``out_shardings`` likewise for the results.
    Results default to replicated. Without ``in_shardings``, arguments are
    replicated on the mesh of the first device array among them, or on
    :func:`default_mesh` (one device): the function then sees whole values.

    ``fn`` sees one shard of each argument. A result declared replicated over
    a mesh axis must be the same on every device along it: a per-shard
    reduction needs ``all_reduce`` (or ``all_gather``) over the axis, or the
    result must be declared split over it. Compiling fails otherwise, naming
    the result and the op, unless ``check_replication=False``."""
    if fn is None:
        return lambda f: Compiled(f, in_shardings, out_shardings, name, check_replication)
    return Compiled(fn, in_shardings, out_shardings, name, check_replication)


jit = compile


class ProgramTrace:
    """Traces calls of compiled functions, on one or several meshes, into one
    program: lowered once (moves between meshes inserted), then run many
    times with every step prepared before its inputs exist::

        t = causeway.program("two_stage")
        x = t.parameter((8, 4), "float32", NamedSharding(mesh_a, P("data")))
        y = t.call(stage1, x)
        z = t.call(stage2, y)          # on another mesh: the move is inserted
        prog = t.build(z)
        out = prog(x_array)
    """

    def __init__(self, name: str, client: Optional[Client] = None):
        self._client = client or default_client()
        self._b = self._client.new_program(name)

    def parameter(self, shape: Sequence[int], dtype: str, sharding: NamedSharding):
        return self._b.parameter(list(shape), dtype, sharding.mesh,
                                 sharding.dims(len(shape)))

    def call(self, fn: Union[Compiled, CompiledFunction], *args):
        if isinstance(fn, Compiled):
            leaves, treedef = tree.flatten(args)
            compiled, out_def, _, _ = fn._lookup(
                treedef, tuple((tuple(a.shape), a.dtype) for a in leaves), None)
            return out_def.unflatten(self._b.call(compiled, leaves))
        return tuple(self._b.call(fn, list(args)))

    def build(self, *outputs) -> "ProgramHandle":
        flat = []
        for o in outputs:
            flat.extend(o if isinstance(o, (list, tuple)) else [o])
        return ProgramHandle(self._b.build(flat), len(flat))


class ProgramHandle:
    """A lowered program; calling it runs it and returns its outputs at once."""

    def __init__(self, program, n_out: int):
        self._p = program
        self._n = n_out

    @property
    def num_nodes(self) -> int:
        return self._p.num_nodes

    def __call__(self, *args: Array):
        out = self._p.run(list(args))
        return out[0] if self._n == 1 else tuple(out)


def program(name: str, client: Optional[Client] = None) -> ProgramTrace:
    """Starts tracing a program (see :class:`ProgramTrace`)."""
    return ProgramTrace(name, client)


# --------------------------------------------------------------------------
# Ops on traced values (numpy-style names)

from ._causeway.ops import (abs, adamw_update, all_gather, all_reduce, all_to_all, astype,  # noqa: E402
                            causal_attention, concatenate, cross_entropy, delay, dot_general,
                            equal, exp, floor, gelu, layer_norm, log, log_softmax, matmul, max,
                            maximum, mean, min, minimum, not_equal, ppermute, reduce_scatter,
                            reshape, rng_normal, rng_uniform, rsqrt, scatter_add, sigmoid, sign,
                            softmax, sqrt, sum, take, tanh, transpose, where, broadcast_to)


def full(shape: Sequence[int], value: Any, dtype: str = "float32") -> Value:
    """A constant of ``shape`` in the function being traced."""
    return _current_builder().full(list(shape), value, dtype)


def zeros(shape: Sequence[int], dtype: str = "float32") -> Value:
    return full(shape, 0, dtype)


def ones(shape: Sequence[int], dtype: str = "float32") -> Value:
    return full(shape, 1, dtype)


def arange(n: int, dtype: str = "int32") -> Value:
    """0, 1, ..., n-1 in the function being traced."""
    return _current_builder().iota([n], 0, dtype)


def constant(value: Any) -> Value:
    """A numpy value as a constant of the function being traced."""
    return _current_builder().constant(_as_host_array(value))


from . import models, onnx, optim, random  # noqa: E402,F401
from .checkpoint import Checkpointer  # noqa: E402
from . import _array_ops  # noqa: E402
from ._control_flow import cond, fori_loop, scan, switch, while_loop  # noqa: E402

_array_ops.install()

__all__ = [
    "Array", "CausewayError", "Checkpointer", "Client", "Compiled", "CompiledFunction", "DeadlineExceededError",
    "Device", "FailedPreconditionError", "Function", "FunctionBuilder", "InternalError",
    "InvalidArgumentError", "Mesh", "NamedSharding", "NotFoundError", "P", "PartitionSpec",
    "PermissionDeniedError", "ProgramHandle", "ProgramTrace", "ResourceExhaustedError",
    "UnavailableError", "UnimplementedError", "Value", "compile", "connect", "constant",
    "default_client", "device_put", "devices", "full", "grad", "jit", "local_cluster",
    "make_mesh", "models", "ones", "program", "trace", "value_and_grad", "zeros", "arange",
    "default_mesh", "optim", "random", "tree",
    # structured control flow, run on the device
    "cond", "fori_loop", "scan", "switch", "while_loop",
    # ops on traced values (abs, max, min and sum too, left out here so that
    # a star import does not hide Python's own)
    "adamw_update", "all_gather", "all_reduce", "all_to_all", "astype",
    "causal_attention", "concatenate", "cross_entropy", "delay", "dot_general", "equal", "exp",
    "floor", "gelu", "layer_norm", "log", "log_softmax", "matmul", "maximum", "mean",
    "minimum", "not_equal", "ppermute", "reduce_scatter", "reshape", "rng_normal", "rng_uniform",
    "rsqrt", "scatter_add", "sigmoid", "sign", "softmax", "sqrt", "take", "tanh",
    "transpose", "where", "broadcast_to",
]
