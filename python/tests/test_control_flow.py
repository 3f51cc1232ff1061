"""cond, switch, while_loop, fori_loop and scan against numpy, on the cpu and vulkan kinds."""
import numpy as np
import pytest

import causeway as cw


@pytest.fixture(scope="module", params=["cpu", "vulkan"])
def mesh(request):
    """Every case on both kinds: one island of two hosts with two devices each."""
    try:
        c = cw.local_cluster(islands=1, hosts_per_island=2, devices_per_host=2,
                             device_kind=request.param)
    except cw.NotFoundError:
        pytest.skip(f"this build has no {request.param} kind")
    yield cw.make_mesh({"data": 4}, client=c)
    c.disconnect()


def rep(mesh):
    return cw.NamedSharding(mesh, cw.P())


def run(mesh, fn, *args):
    out = cw.compile(fn, in_shardings=rep(mesh), out_shardings=rep(mesh))(*args)
    return cw.tree.map(np.asarray, out)


def test_cond_takes_the_branch_the_data_picks(mesh, rng):
    x = rng.standard_normal(5).astype(np.float32)

    def f(x, k):
        return cw.cond(k > 0, lambda v: (v * 2.0, v.sum()), lambda v: (-v, v.max()), x)

    for k, expect in ((1, (x * 2, x.sum())), (0, (-x, x.max()))):
        got = run(mesh, f, x, np.int32(k))
        np.testing.assert_allclose(got[0], expect[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], expect[1], rtol=1e-5)


def test_cond_with_a_closure_and_a_python_bool(mesh):
    x = np.arange(4, dtype=np.float32)

    def f(x, flag):
        scale = x.sum()  # a value of the enclosing function, used in a branch
        a = cw.cond(flag, lambda: x * scale, lambda: x + 1.0)
        b = cw.cond(True, lambda: x - 1.0, lambda: x)  # decided while tracing
        return a, b

    a, b = run(mesh, f, x, np.bool_(True))
    np.testing.assert_array_equal(a, x * 6.0)
    np.testing.assert_array_equal(b, x - 1.0)
    a, _ = run(mesh, f, x, np.bool_(False))
    np.testing.assert_array_equal(a, x + 1.0)


def test_equality_of_traced_values_is_traced_not_an_identity_test(mesh):
    # `x.sum() == 6.0` is a traced comparison: the branch is decided on the device.
    f = cw.compile(lambda x: cw.cond(x.sum() == 6.0, lambda: x * 2.0, lambda: x),
                   in_shardings=rep(mesh), out_shardings=rep(mesh))
    ones = np.ones(3, np.float32)
    np.testing.assert_array_equal(np.asarray(f(ones * 2.0)), ones * 4.0)
    np.testing.assert_array_equal(np.asarray(f(ones)), ones)
    g = cw.compile(lambda a, b: (a == b, a != b), in_shardings=rep(mesh), out_shardings=rep(mesh))
    eq, ne = g(np.array([1, 2, 3], np.int32), np.array([1, 0, 3], np.int32))
    np.testing.assert_array_equal(np.asarray(eq), [True, False, True])
    np.testing.assert_array_equal(np.asarray(ne), [False, True, False])


def test_switch_clamps_its_index(mesh):
    x = np.arange(3, dtype=np.float32)
    branches = [lambda v: v, lambda v: v * 10.0, lambda v: v - 5.0]
    f = cw.compile(lambda i, v: cw.switch(i, branches, v), in_shardings=rep(mesh),
                   out_shardings=rep(mesh))
    for i, expect in ((-3, x), (0, x), (1, x * 10), (2, x - 5), (9, x - 5)):
        np.testing.assert_array_equal(np.asarray(f(np.int32(i), x)), expect)


def test_while_loop_runs_a_data_dependent_number_of_times(mesh):
    def collatz_steps(n):
        def body(c):
            k, steps = c
            half = cw.astype(cw.floor(cw.astype(k, "float32") / 2.0), "int32")
            is_even = cw.equal(half * 2, k)
            return cw.where(is_even, half, 3 * k + 1), steps + 1

        return cw.while_loop(lambda c: c[0] != 1, body, (n, np.int32(0)))[1]

    def numpy_steps(n):
        steps = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            steps += 1
        return steps

    f = cw.compile(collatz_steps, in_shardings=rep(mesh), out_shardings=rep(mesh))
    for n in (1, 6, 7, 27):
        assert int(np.asarray(f(np.int32(n)))) == numpy_steps(n)


def test_while_loop_over_a_pytree_with_captured_values(mesh, rng):
    a = (rng.standard_normal((4, 4)) * 0.3).astype(np.float32)
    v = rng.standard_normal((4, 1)).astype(np.float32)

    def power(a, v):
        def body(c):
            return {"v": a @ c["v"], "i": c["i"] + 1}

        out = cw.while_loop(lambda c: c["i"] < 5, body, {"v": v, "i": np.int32(0)})
        return out["v"], out["i"]

    got_v, got_i = run(mesh, power, a, v)
    expect = v
    for _ in range(5):
        expect = a @ expect
    np.testing.assert_allclose(got_v, expect, rtol=1e-5, atol=1e-6)
    assert int(got_i) == 5


def test_fori_loop_with_traced_bounds(mesh):
    def f(n, x):
        return cw.fori_loop(0, n, lambda i, acc: acc + cw.astype(i, "float32") * x, x * 0.0)

    x = np.array([1.0, 2.0], np.float32)
    got = run(mesh, f, np.int32(5), x)
    np.testing.assert_array_equal(got, x * sum(range(5)))
    got = run(mesh, f, np.int32(0), x)
    np.testing.assert_array_equal(got, np.zeros(2, np.float32))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_is_a_cumulative_sum_with_stacked_outputs(mesh, rng, reverse):
    xs = rng.standard_normal((6, 3)).astype(np.float32)

    def f(xs):
        def step(carry, x):
            total = carry + x
            return total, {"total": total, "positive": x > 0.0}

        return cw.scan(step, xs[0] * 0.0, xs, reverse=reverse)

    carry, ys = run(mesh, f, xs)
    order = xs[::-1] if reverse else xs
    totals = np.cumsum(order, axis=0)
    if reverse:
        totals = totals[::-1]
    np.testing.assert_allclose(carry, xs.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys["total"], totals, rtol=1e-5, atol=1e-6)
    assert ys["positive"].dtype == np.bool_
    np.testing.assert_array_equal(ys["positive"], xs > 0)


def test_scan_with_length_only_and_a_nested_loop(mesh):
    def f(x):
        def step(c, _):
            # A while loop inside the scan body: doubles c until it passes 100.
            c = cw.while_loop(lambda v: v < 100.0, lambda v: v * 2.0, c)
            return c - 90.0, c

        return cw.scan(step, x, None, length=4)

    carry, ys = run(mesh, f, np.float32(3.0))
    c, expect = 3.0, []
    for _ in range(4):
        while c < 100.0:
            c *= 2.0
        expect.append(c)
        c -= 90.0
    np.testing.assert_array_equal(ys, np.array(expect, np.float32))
    assert float(carry) == c


def test_grad_flows_through_cond_and_switch(mesh, rng):
    x = rng.standard_normal(4).astype(np.float32)
    w = rng.standard_normal(4).astype(np.float32)

    def loss(params, k):
        x, w = params["x"], params["w"]
        y = cw.switch(k, [lambda: x * x * w, lambda: cw.tanh(x) + w, lambda: w * 0.0 + 1.0])
        return cw.cond(y.sum() > 0.0, lambda: y.sum(), lambda: -(y * y).sum())

    def expect(k):
        y = [x * x * w, np.tanh(x) + w, np.ones(4, np.float32)][k]
        dy = np.ones(4) if y.sum() > 0 else -2 * y
        dydx = [2 * x * w, 1 - np.tanh(x) ** 2, np.zeros(4)][k]
        dydw = [x * x, np.ones(4), np.zeros(4)][k]
        return dy * dydx, dy * dydw

    g = cw.compile(lambda p, k: cw.grad(loss)(p, k), in_shardings=rep(mesh),
                   out_shardings=rep(mesh))
    for k in range(3):
        got = cw.tree.map(np.asarray, g({"x": x, "w": w}, np.int32(k)))
        ex, ew = expect(k)
        np.testing.assert_allclose(got["x"], ex, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["w"], ew, rtol=1e-5, atol=1e-6)


def test_control_flow_errors_are_clear(mesh):
    x = np.ones(3, np.float32)

    def mismatched(x):
        return cw.cond(x.sum() > 0, lambda: x, lambda: x.sum())

    with pytest.raises(cw.InvalidArgumentError, match="same structure, shapes and dtypes"):
        run(mesh, mismatched, x)

    def changes_carry(x):
        return cw.while_loop(lambda c: c.sum() < 10.0, lambda c: c.sum(), x)

    with pytest.raises(cw.InvalidArgumentError, match="carry"):
        run(mesh, changes_carry, x)

    def constant_condition(x):
        return cw.while_loop(lambda c: True, lambda c: c + 1.0, x)

    with pytest.raises(cw.InvalidArgumentError, match="not a traced value"):
        run(mesh, constant_condition, x)

    def collective_inside(x):
        return cw.cond(x.sum() > 0, lambda: cw.all_reduce(x * 2.0, "data"), lambda: x)

    with pytest.raises(cw.InvalidArgumentError, match="collectives inside control flow"):
        run(mesh, collective_inside, x)

    def grad_through_loop(x):
        return cw.grad(lambda v: cw.while_loop(lambda c: c.sum() < 100.0, lambda c: c * 2.0,
                                               v).sum())(x)

    with pytest.raises(cw.UnimplementedError, match="while loop"):
        run(mesh, grad_through_loop, x)

    # The gradient of a function whose control flow does not depend on the
    # parameters being differentiated still works.
    def grad_beside(x):
        n = cw.while_loop(lambda i: i < 3, lambda i: i + 1, np.int32(0))
        return cw.grad(lambda v: (v * v).sum() * cw.astype(n, "float32"))(x)

    np.testing.assert_array_equal(run(mesh, grad_beside, x), 6.0 * x)

    # Outside a traced function: a clear error saying where it runs.
    with pytest.raises(cw.FailedPreconditionError, match="cw.jit"):
        cw.while_loop(lambda c: c < 3, lambda c: c + 1, np.int32(0))
