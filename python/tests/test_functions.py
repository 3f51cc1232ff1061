"""Tracing, operators, composites, grad, compiled calls and programs."""
import numpy as np
import pytest

import causeway as cw


def shard(mesh, *spec):
    return cw.NamedSharding(mesh, cw.P(*spec))


def test_readme_sum(mesh):
    @cw.compile(in_shardings=shard(mesh, "data"), out_shardings=shard(mesh))
    def total(x):
        assert x.shape == (8, 16)  # one shard of 32 rows over 4 devices
        return cw.all_reduce(x.sum(axis=0), "data")

    x = cw.device_put(np.ones((32, 16), np.float32), shard(mesh, "data"))
    y = total(x)
    np.testing.assert_array_equal(np.asarray(y), np.full(16, 32.0, np.float32))


def test_a_per_shard_sum_declared_replicated_is_refused_and_the_right_one_runs(mesh):
    x = cw.device_put(np.arange(8, dtype=np.float32), shard(mesh, "data"))
    wrong = cw.compile(lambda v: v.sum(), in_shardings=shard(mesh, "data"))
    with pytest.raises(cw.InvalidArgumentError) as e:
        wrong(x)
    assert "result 0" in str(e.value) and "'data'" in str(e.value)
    assert "reduce_sum" in str(e.value)

    right = cw.compile(lambda v: cw.all_reduce(v.sum(), "data"), in_shardings=shard(mesh, "data"))
    assert float(np.asarray(right(x))) == 28.0
    # Declared split, each device's partial sum is its own shard of the result.
    partial = cw.compile(lambda v: v.sum(keepdims=True), in_shardings=shard(mesh, "data"),
                         out_shardings=shard(mesh, "data"))
    np.testing.assert_array_equal(np.asarray(partial(x)), [1.0, 5.0, 9.0, 13.0])
    # The opt-out compiles the per-shard function as written.
    unchecked = cw.compile(lambda v: v.sum(), in_shardings=shard(mesh, "data"),
                           check_replication=False)
    assert np.asarray(unchecked(x)).shape == ()


def test_operators_broadcasting_and_indexing_match_numpy(mesh, rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6,)).astype(np.float32)

    def f(x, y):
        z = (x + y) * 2.0 - 1.0 / (abs(y) + 1.0)
        z = -z + x ** 2
        w = cw.where(x > 0.0, x, 0.0)
        return z, w[1:3, 2:], x[:, 0], x.T @ x, x.sum(), x.mean(axis=1, keepdims=True), \
            cw.maximum(x, y).max(axis=0), x.reshape(2, 12), cw.exp(cw.tanh(x))

    g = cw.compile(f, in_shardings=shard(mesh), out_shardings=shard(mesh))
    outs = [np.asarray(o) for o in g(a, b)]
    z = (a + b) * 2.0 - 1.0 / (np.abs(b) + 1.0)
    z = -z + a ** 2
    expect = [z, np.where(a > 0, a, 0)[1:3, 2:], a[:, 0], a.T @ a, a.sum(),
              a.mean(axis=1, keepdims=True), np.maximum(a, b).max(axis=0), a.reshape(2, 12),
              np.exp(np.tanh(a))]
    for got, want in zip(outs, expect):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batched_matmul_and_integer_ops(mesh, rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 2)).astype(np.float32)
    w = rng.standard_normal((5, 7)).astype(np.float32)
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    g = cw.compile(lambda x, y, v, n: (x @ y, x @ v, n * 2 + 1, cw.take(v, n[0], axis=0)),
                   in_shardings=shard(mesh))
    ab, av, ii, taken = g(a, b, w, i)
    np.testing.assert_allclose(np.asarray(ab), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(av), a @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(ii), i * 2 + 1)
    np.testing.assert_array_equal(np.asarray(taken), w[i[0]])


def test_composites_match_numpy(mesh, rng):
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    gamma = rng.standard_normal(8).astype(np.float32)
    beta = rng.standard_normal(8).astype(np.float32)
    labels = np.array([1, 0, 7, 3, 2], np.int32)

    def f(x, gamma, beta, labels):
        return (cw.softmax(x), cw.layer_norm(x, gamma, beta), cw.gelu(x),
                cw.causal_attention(x, x, x), cw.cross_entropy(x[0], labels))

    sm, ln, ge, att, ce = [np.asarray(o) for o in
                           cw.compile(f, in_shardings=shard(mesh))(x, gamma, beta, labels)]
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ln, (x - mu) / np.sqrt(var + 1e-5) * gamma + beta, rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(
        ge, 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), rtol=1e-4,
        atol=1e-5)
    s = x @ x.transpose(0, 2, 1) / np.sqrt(8)
    s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(att, (p / p.sum(-1, keepdims=True)) @ x, rtol=1e-4, atol=1e-5)
    logp = x[0] - x[0].max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    np.testing.assert_allclose(ce, -logp[np.arange(5), labels].mean(), rtol=1e-5)


def test_grad_matches_finite_differences(mesh, rng):
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    x0 = rng.standard_normal((5, 3)).astype(np.float32)

    def loss(params, x):
        h = cw.tanh(x @ params["w"]) + params["b"]
        return (h * h).mean()

    @cw.compile(in_shardings=shard(mesh))
    def step(w, b, x):
        value, g = cw.value_and_grad(loss)({"w": w, "b": b}, x)
        return value, g["w"], g["b"], cw.grad(lambda b: loss({"w": w, "b": b}, x))(b)

    b0 = np.zeros(4, np.float32)
    value, gw, gb, gb2 = [np.asarray(o) for o in step(w0, b0, x0)]

    def np_loss(w, b):
        h = np.tanh(x0.astype(np.float64) @ w) + b
        return (h * h).mean()

    assert value == pytest.approx(np_loss(w0, b0), rel=1e-5)
    eps = 1e-3
    for idx in [(0, 0), (1, 2), (2, 3)]:
        d = np.zeros_like(w0, dtype=np.float64)
        d[idx] = eps
        num = (np_loss(w0 + d, b0) - np_loss(w0 - d, b0)) / (2 * eps)
        assert gw[idx] == pytest.approx(num, rel=1e-2, abs=1e-4)
    np.testing.assert_allclose(gb, gb2, rtol=1e-6)


def test_a_function_built_by_hand_compiles(mesh):
    b = cw.FunctionBuilder("scale")
    x = b.parameter((2, 3), "float32")
    f = b.build([x * 3.0 + 1.0])
    assert f.parameter_shapes == [((2, 3), "float32")]
    assert cw.Function.deserialize(f.serialize()).num_parameters == 1
    g = cw.compile(f, in_shardings=shard(mesh, "data"), out_shardings=shard(mesh, "data"))
    out = g(np.ones((8, 3), np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.full((8, 3), 4.0))


def test_a_compiled_function_traces_once_per_shape(mesh):
    traces = []

    @cw.compile(in_shardings=shard(mesh))
    def f(x):
        traces.append(x.shape)
        return x + 1.0

    for _ in range(3):
        f(np.zeros(4, np.float32))
    f(np.zeros(5, np.float32))
    assert traces == [(4,), (5,)]


def test_calls_chain_asynchronously(mesh):
    inc = cw.compile(lambda x: cw.delay(x + 1.0, 20_000), in_shardings=shard(mesh, "data"),
                     out_shardings=shard(mesh, "data"))
    x = cw.device_put(np.zeros(8, np.float32), shard(mesh, "data"))
    for _ in range(10):
        x = inc(x)
    assert not x.is_ready()  # the calls returned; 10 x 20 ms of work are still queued
    np.testing.assert_array_equal(np.asarray(x), np.full(8, 10.0))


def test_a_program_over_two_meshes(client):
    a = cw.make_mesh({"data": 2}, client=client)
    b = cw.make_mesh({"data": 2}, client=client)
    stage1 = cw.compile(lambda x: cw.all_reduce(x * 2.0, "data"), in_shardings=shard(a, "data"),
                        out_shardings=shard(a))
    stage2 = cw.compile(lambda y: y + 1.0, in_shardings=shard(b), out_shardings=shard(b))
    t = cw.program("two_stage", client=client)
    x = t.parameter((4, 3), "float32", shard(a, "data"))
    y = t.call(stage1, x)
    z = t.call(stage2, y)
    prog = t.build(z)
    assert prog.num_nodes >= 2
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    for k in range(3):
        out = prog(cw.device_put(v + k, shard(a, "data")))
        s = (v + k)[:2] + (v + k)[2:]
        np.testing.assert_allclose(np.asarray(out), 2 * s + 1)
        assert out.sharding.mesh == b


def test_tracing_errors_are_raised_at_the_op(mesh):
    with pytest.raises(cw.InvalidArgumentError, match="broadcast"):
        cw.compile(lambda x, y: x + y, in_shardings=shard(mesh))(
            np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(cw.InvalidArgumentError, match="matmul"):
        cw.compile(lambda x: x @ x, in_shardings=shard(mesh))(np.zeros(3, np.float32))
    with pytest.raises(cw.InvalidArgumentError, match="nope"):
        cw.compile(lambda x: cw.all_reduce(x, "nope"), in_shardings=shard(mesh))(
            np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="truth value"):
        cw.compile(lambda x: x if x > 0.0 else -x, in_shardings=shard(mesh))(
            np.zeros(3, np.float32))
    with pytest.raises(cw.FailedPreconditionError, match="traced"):
        cw.zeros((3,))


def test_a_call_with_wrong_arguments_is_refused(mesh):
    b = cw.FunctionBuilder("f")
    f = cw.compile(b.build([b.parameter((2,), "float32") + 1.0]),
                   in_shardings=shard(mesh, "data"), out_shardings=shard(mesh, "data"))
    with pytest.raises(cw.InvalidArgumentError, match="shape|argument"):
        f(cw.device_put(np.zeros(4, np.int32), shard(mesh, "data")))
    with pytest.raises(cw.InvalidArgumentError):
        f()


def test_a_failed_computation_raises_its_root_cause_at_the_first_read():
    c = cw.local_cluster(islands=1, hosts_per_island=2, devices_per_host=1,
                         fail_launches_of="boom")
    m = cw.make_mesh({"data": 2}, client=c)
    s = cw.NamedSharding(m, cw.P("data"))
    boom = cw.compile(lambda x: x * 2.0, in_shardings=s, out_shardings=s, name="boom")
    after = cw.compile(lambda x: x + 1.0, in_shardings=s, out_shardings=s)
    y = after(boom(np.ones(4, np.float32)))  # no error yet: nothing has been read
    with pytest.raises(cw.InternalError) as e:
        np.asarray(y)
    msg = str(e.value)
    assert "injected failure of boom" in msg
    assert "node 0 (boom)" in msg and "device" in msg and "host" in msg
    assert e.value.code == "INTERNAL"
    c.disconnect()


def test_a_full_device_memory_is_a_clear_error():
    c = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1,
                         device_memory_bytes=1 << 20)
    m = cw.make_mesh({"data": 1}, client=c)
    with pytest.raises(cw.ResourceExhaustedError, match="memory"):
        cw.device_put(np.zeros(1 << 19, np.float32), cw.NamedSharding(m, cw.P()))
    c.disconnect()
