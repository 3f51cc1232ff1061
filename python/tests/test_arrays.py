"""Clusters, meshes, shardings and numpy round trips."""
import gc

import numpy as np
import pytest

import causeway as cw


def test_devices_and_meshes(client):
    devs = client.devices()
    assert len(devs) == 4
    assert len({d.id for d in devs}) == 4
    assert len({d.host for d in devs}) == 2  # two hosts of two devices
    assert all(d.island == 0 and d.platform == "cpu" for d in devs)
    assert [d.id for d in cw.devices(client)] == [d.id for d in devs]
    m = cw.make_mesh({"data": 2, "model": 2}, island=0, client=client)
    assert m.shape == {"data": 2, "model": 2}
    assert m.axis_names == ["data", "model"]
    assert m.size == 4 and m.island == 0 and len(m.device_ids) == 4


def test_a_mesh_larger_than_the_island_is_refused(client):
    with pytest.raises(cw.CausewayError) as e:
        cw.make_mesh({"data": 64}, client=client)
    assert "64" in str(e.value)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("spec", [cw.P(), cw.P("data"), cw.P(None, "data"),
                                  cw.P(("data", "model")), cw.P("data", "model")])
def test_round_trip_of_every_dtype_and_sharding(client, dtype, spec):
    mesh = cw.make_mesh({"data": 2, "model": 2}, client=client)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((8, 12)) * 10).astype(dtype)
    a = cw.device_put(x, cw.NamedSharding(mesh, spec))
    assert a.shape == (8, 12)
    assert a.dtype == np.dtype(dtype).name
    assert a.sharding == cw.NamedSharding(mesh, spec)
    assert a.block_until_ready() is a
    back = np.asarray(a)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, x)


def test_host_values_are_narrowed_like_jax(mesh):
    a = cw.device_put(np.arange(8, dtype=np.float64), cw.NamedSharding(mesh, cw.P("data")))
    assert a.dtype == "float32"
    b = cw.device_put(np.arange(8), cw.NamedSharding(mesh, cw.P("data")))
    assert b.dtype == "int32"
    np.testing.assert_array_equal(b.fetch(), np.arange(8))
    s = cw.device_put(3.5, cw.NamedSharding(mesh, cw.P()))
    assert s.shape == () and float(np.asarray(s)) == 3.5
    with pytest.raises(cw.InvalidArgumentError):
        cw.device_put(np.array([2**40]), cw.NamedSharding(mesh, cw.P()))
    with pytest.raises(cw.InvalidArgumentError, match="unsupported dtype"):
        cw.device_put(np.array(["a"]), cw.NamedSharding(mesh, cw.P()))


def test_shardings_that_do_not_fit_name_the_problem(mesh):
    with pytest.raises(cw.InvalidArgumentError, match="divide|split|evenly"):
        cw.device_put(np.zeros((6, 2), np.float32), cw.NamedSharding(mesh, cw.P("data")))
    with pytest.raises(cw.InvalidArgumentError, match="nope"):
        cw.device_put(np.zeros((8,), np.float32), cw.NamedSharding(mesh, cw.P("nope")))
    with pytest.raises(cw.InvalidArgumentError, match="rank"):
        cw.device_put(np.zeros((8,), np.float32), cw.NamedSharding(mesh, cw.P("data", None)))
    with pytest.raises(TypeError):
        cw.P(3)


def test_device_put_reshards_an_array(client, mesh):
    other = cw.make_mesh({"x": 2}, client=client)
    a = cw.device_put(np.arange(8, dtype=np.float32), cw.NamedSharding(mesh, cw.P("data")))
    b = cw.device_put(a, cw.NamedSharding(other, cw.P()))
    assert b.sharding.mesh == other
    np.testing.assert_array_equal(np.asarray(b), np.arange(8))
    assert cw.device_put(a, a.sharding) is a


def test_arrays_free_device_memory_when_the_last_reference_goes():
    c = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=2)
    m = cw.make_mesh({"data": 2}, client=c)
    assert c.device_memory_in_use() == 0
    arrays = [cw.device_put(np.ones((256, 256), np.float32), cw.NamedSharding(m, cw.P("data")))
              for _ in range(8)]
    for a in arrays:
        a.block_until_ready()
    assert c.device_memory_in_use() >= 8 * 256 * 256 * 4
    f = cw.compile(lambda x: x * 2.0, in_shardings=cw.NamedSharding(m, cw.P("data")),
                   out_shardings=cw.NamedSharding(m, cw.P("data")))
    outs = [f(a) for a in arrays]
    np.testing.assert_array_equal(np.asarray(outs[-1]), np.full((256, 256), 2.0, np.float32))
    del arrays, outs, a
    gc.collect()
    assert c.await_device_memory_empty(timeout=30)
    assert c.device_memory_in_use() == 0
    c.disconnect()


def test_an_array_deleted_by_hand_cannot_be_used(mesh):
    a = cw.device_put(np.ones(8, np.float32), cw.NamedSharding(mesh, cw.P("data")))
    a.delete()
    assert a.released
    f = cw.compile(lambda x: x + 1.0, in_shardings=cw.NamedSharding(mesh, cw.P("data")),
                   out_shardings=cw.NamedSharding(mesh, cw.P("data")))
    with pytest.raises(cw.InvalidArgumentError, match="released"):
        f(a)


def test_arrays_of_another_client_are_refused(client, mesh):
    other = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)
    om = cw.make_mesh({"data": 1}, client=other)
    theirs = cw.device_put(np.ones(4, np.float32), cw.NamedSharding(om, cw.P()))
    f = cw.compile(lambda x: x + 1.0, in_shardings=cw.NamedSharding(mesh, cw.P()))
    with pytest.raises(cw.InvalidArgumentError, match="client|mesh"):
        f(theirs)
    other.disconnect()


def test_a_put_that_cannot_fit_is_refused_before_any_copy(mesh):
    # 2^34 elements broadcast from one (64 GiB): refused from its shape, with
    # no copy made (numpy's own contiguous copy would be a MemoryError, and
    # once was a segfault).
    huge = np.broadcast_to(np.float32(0), (2**34,))
    with pytest.raises(cw.CausewayError) as e:
        cw.device_put(huge, cw.NamedSharding(mesh, cw.P()))
    assert "exceeds the whole memory" in str(e.value)
    with pytest.raises(cw.CausewayError) as e:
        cw.device_put(huge, cw.NamedSharding(mesh, cw.P("data")))
    assert "exceeds the whole memory" in str(e.value)
    # A shape of more than 2^62 bytes (numpy allows up to 2^63).
    with pytest.raises(cw.CausewayError) as e:
        cw.device_put(np.broadcast_to(np.float32(0), (3, 2**59)),
                      cw.NamedSharding(mesh, cw.P()))
    assert "too large" in str(e.value)


def test_strided_and_broadcast_arrays_are_put_as_their_values(mesh):
    wide = np.arange(64, dtype=np.float32).reshape(8, 8)
    cases = [np.broadcast_to(np.arange(4, dtype=np.int32), (8, 4)),
             wide[:, ::2], wide.T, wide[::-1, 1:5], np.asfortranarray(wide > 20)]
    for x in cases:
        assert not x.flags.c_contiguous
        a = cw.device_put(x, cw.NamedSharding(mesh, cw.P("data")))
        np.testing.assert_array_equal(np.asarray(a), x)
