"""Pytrees through compiled functions, Array methods, jit without shardings,
cw.random, cw.optim and the data-parallel MLP example."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import causeway as cw

SOURCE = pathlib.Path(os.environ.get("CAUSEWAY_SOURCE_DIR",
                                     pathlib.Path(__file__).resolve().parents[2]))


def shard(mesh, *spec):
    return cw.NamedSharding(mesh, cw.P(*spec))


# ---------------------------------------------------------------- pytrees


def test_tree_flatten_and_unflatten_round_trip():
    t = {"b": [1, (2, 3)], "a": None, "c": {"x": 4}}
    leaves, d = cw.tree.flatten(t)
    assert leaves == [1, 2, 3, 4]  # dict keys sorted, None an empty subtree
    assert d.unflatten(leaves) == t
    assert cw.tree.map(lambda a, b: a + b, t, t) == {"b": [2, (4, 6)], "a": None, "c": {"x": 8}}
    assert cw.tree.structure(t) == cw.tree.structure(cw.tree.map(str, t))
    with pytest.raises(ValueError):
        d.unflatten([1, 2, 3])


def test_a_compiled_function_takes_and_returns_pytrees(mesh, rng):
    w = rng.standard_normal((6, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((8, 6)).astype(np.float32)

    @cw.compile(in_shardings=(shard(mesh), shard(mesh, "data")),
                out_shardings={"y": shard(mesh, "data"), "norms": (shard(mesh), shard(mesh))})
    def layer(p, xs):
        y = xs[0] @ p["w"] + p["b"]
        return {"y": y, "norms": (cw.all_reduce((y * y).sum(), "data"), (p["w"] * p["w"]).sum())}

    out = layer({"w": w, "b": b}, [x])
    assert set(out) == {"y", "norms"} and isinstance(out["norms"], tuple)
    np.testing.assert_allclose(np.asarray(out["y"]), x @ w + b, rtol=1e-5)
    assert out["y"].sharding == shard(mesh, "data")
    np.testing.assert_allclose(float(out["norms"][0]), ((x @ w + b) ** 2).sum(), rtol=1e-4)
    np.testing.assert_allclose(float(out["norms"][1]), (w * w).sum(), rtol=1e-5)
    # A flat list of shardings, one per leaf, still works; a prefix that does
    # not match the arguments is a clear error.
    flat = cw.compile(lambda p, v: p["w"].sum() + cw.all_reduce(v.sum(), "data"),
                      in_shardings=[shard(mesh), shard(mesh), shard(mesh, "data")])
    np.testing.assert_allclose(float(flat({"w": w, "b": b}, x)), w.sum() + x.sum(), rtol=1e-4)
    bad = cw.compile(lambda p: p["w"], in_shardings=({"w": shard(mesh), "z": shard(mesh)},))
    with pytest.raises(cw.InvalidArgumentError, match="keys"):
        bad({"w": w, "b": b})


def test_device_put_of_a_pytree(mesh):
    t = cw.device_put({"a": np.ones(4), "b": (np.zeros(8), 3.0)},
                      {"a": shard(mesh), "b": (shard(mesh, "data"), shard(mesh))})
    assert t["a"].sharding == shard(mesh) and t["b"][0].sharding == shard(mesh, "data")
    assert float(t["b"][1]) == 3.0


# ---------------------------------------------------------------- Array methods


def test_array_reductions_are_global_values_not_a_shards(mesh):
    x = cw.device_put(np.arange(4, dtype=np.float32), shard(mesh, "data"))
    assert float(x.sum()) == 6.0  # not device 0's partial 0.0
    assert float(x.mean()) == 1.5 and float(x.max()) == 3.0 and float(x.min()) == 0.0
    m = np.arange(24, dtype=np.float32).reshape(8, 3)
    a = cw.device_put(m, shard(mesh, "data"))
    np.testing.assert_array_equal(np.asarray(a.sum(axis=0)), m.sum(axis=0))
    np.testing.assert_array_equal(np.asarray(a.max(axis=1, keepdims=True)),
                                  m.max(axis=1, keepdims=True))


def test_array_arithmetic_matches_numpy_and_keeps_shardings(mesh, rng):
    m = rng.standard_normal((8, 3)).astype(np.float32)
    n = rng.standard_normal((8, 3)).astype(np.float32)
    a, b = cw.device_put(m, shard(mesh, "data")), cw.device_put(n, shard(mesh, "data"))
    cases = [(a + b, m + n), (a - 1, m - 1), (2 * a, 2 * m), (a / b, m / n), (1 - a, 1 - m),
             (a ** 2, m ** 2), (-a, -m), (abs(a), np.abs(m)), (m + a, m + m)]
    for got, want in cases:
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
    assert (a + b).sharding == shard(mesh, "data")  # element-wise: stays split
    r = cw.device_put(n[0], shard(mesh))  # other sharding and shape: broadcast
    np.testing.assert_allclose(np.asarray(a * r), m * n[0], rtol=1e-5)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(a @ w), m @ w, rtol=1e-4)
    np.testing.assert_array_equal(np.asarray(a > 0), m > 0)
    np.testing.assert_array_equal(np.asarray(a.astype(np.int32)), m.astype(np.int32))


def test_array_indexing_shapes_and_conversions(mesh):
    m = np.arange(24, dtype=np.float32).reshape(8, 3)
    a = cw.device_put(m, shard(mesh, "data"))
    np.testing.assert_array_equal(np.asarray(a[5]), m[5])
    np.testing.assert_array_equal(np.asarray(a[2:7]), m[2:7])
    np.testing.assert_array_equal(np.asarray(a[..., 1]), m[..., 1])
    assert float(a[3, 2]) == 11.0 and int(a[3, 2]) == 11 and a[3, 2].item() == 11.0
    assert len(a) == 8
    np.testing.assert_array_equal(np.stack([np.asarray(r) for r in a]), m)
    np.testing.assert_array_equal(np.asarray(a.reshape(4, 6)), m.reshape(4, 6))
    np.testing.assert_array_equal(np.asarray(a.T), m.T)
    assert a.tolist() == m.tolist()
    with pytest.raises(TypeError, match="one element"):
        float(a)
    with pytest.raises(TypeError):
        len(a.sum())
    assert bool(a.sum() > 0)


# ---------------------------------------------------------------- jit without shardings


def test_jit_without_shardings_runs_whole_values(mesh, rng):
    cw._set_default(mesh.client)
    m = rng.standard_normal((4, 5)).astype(np.float32)
    w = rng.standard_normal((5, 2)).astype(np.float32)
    f = cw.jit(lambda a, b: (a @ b).sum())
    y = f(m, w)
    assert y.mesh == cw.default_mesh() and y.mesh.size == 1
    np.testing.assert_allclose(float(y), (m @ w).sum(), rtol=1e-4)
    # A sharded array: the function sees the whole of it, on its mesh.
    x = cw.device_put(np.arange(8, dtype=np.float32), shard(mesh, "data"))
    total = cw.jit(lambda v: v.sum())(x)
    assert float(total) == 28.0 and total.mesh == mesh


# ---------------------------------------------------------------- random


def test_random_keys_are_deterministic_and_the_same_in_and_out_of_jit(mesh):
    cw._set_default(mesh.client)
    k = cw.random.key(42)
    np.testing.assert_array_equal(k, cw.random.key(42))
    assert not np.array_equal(k, cw.random.key(43))
    k1, k2 = cw.random.split(k)
    a = np.asarray(cw.random.normal(k1, (1000,)))
    b = np.asarray(cw.random.normal(k2, (1000,)))
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, np.asarray(cw.random.normal(k1, (1000,))))
    assert abs(a.mean()) < 0.15 and 0.85 < a.std() < 1.15
    u = np.asarray(cw.random.uniform(k2, (1000,), 2.0, 3.0))
    assert u.min() >= 2.0 and u.max() < 3.0
    # Traced: the same key gives the same numbers and the same splits.
    f = cw.jit(lambda key: (cw.random.normal(cw.random.split(key)[0], (1000,)),
                            cw.random.fold_in(key, 7)))
    traced, folded = f(np.asarray(k))
    np.testing.assert_array_equal(np.asarray(traced), a)
    np.testing.assert_array_equal(np.asarray(folded), np.asarray(cw.random.fold_in(k, 7)))
    assert not np.array_equal(np.asarray(folded), np.asarray(cw.random.fold_in(k, 8)))


# ---------------------------------------------------------------- optimizers


def _adam_reference(p, g_fn, steps, lr=0.1, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t in range(1, steps + 1):
        g = g_fn(p)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * ((m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * p)
    return p


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_in_a_compiled_step_matches_a_numpy_reference(mesh, wd):
    target = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    opt = cw.optim.adamw(0.1, weight_decay=wd)
    params = {"x": np.zeros(4, np.float32)}
    state = opt.init(params)

    @cw.jit(in_shardings=shard(mesh))
    def step(p, s):
        g = cw.grad(lambda q: ((q["x"] - target) ** 2).sum())(p)
        u, s = opt.update(g, s, p)
        return cw.optim.apply_updates(p, u), s

    for _ in range(20):
        params, state = step(params, state)
    want = _adam_reference(np.zeros(4, np.float32), lambda p: 2 * (p - target), 20, wd=wd)
    np.testing.assert_allclose(np.asarray(params["x"]), want, rtol=1e-4, atol=1e-5)
    assert float(state["count"]) == 20.0


def test_sgd_with_momentum_on_numpy_values():
    opt = cw.optim.sgd(0.1, momentum=0.9)
    p = {"w": np.array([1.0, 2.0], np.float32)}
    s = opt.init(p)
    u, s = opt.update({"w": np.array([1.0, 1.0], np.float32)}, s)
    u, s = opt.update({"w": np.array([1.0, 1.0], np.float32)}, s)
    np.testing.assert_allclose(u["w"], [-0.19, -0.19], rtol=1e-6)
    np.testing.assert_allclose(cw.optim.apply_updates(p, u)["w"], [0.81, 1.81], rtol=1e-6)


# ---------------------------------------------------------------- errors and the example


def test_an_array_of_a_replaced_client_is_named_as_such():
    old = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)
    try:
        x = cw.device_put(np.ones(2, np.float32), cw.NamedSharding(cw.make_mesh({"d": 1}), cw.P()))
        new = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)
        try:
            f = cw.compile(lambda v: v * 2, in_shardings=cw.NamedSharding(cw.make_mesh({"d": 1}),
                                                                          cw.P()))
            compiled = f.specialize([((2,), "float32")])
            with pytest.raises(cw.InvalidArgumentError, match="earlier client"):
                new.call(compiled, [x])
        finally:
            new.disconnect()
    finally:
        old.disconnect()


def test_the_data_parallel_mlp_example_trains():
    out = subprocess.run([sys.executable, str(SOURCE / "examples/python/mlp.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, last = (float(v) for v in out.stdout.split()[1::2])
    assert last < first / 4, out.stdout
