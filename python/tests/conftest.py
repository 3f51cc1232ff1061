import numpy as np
import pytest

import causeway as cw


@pytest.fixture(scope="module")
def client():
    """One island of two hosts with two devices each."""
    c = cw.local_cluster(islands=1, hosts_per_island=2, devices_per_host=2)
    yield c
    c.disconnect()


@pytest.fixture(scope="module")
def mesh(client):
    return cw.make_mesh({"data": 4}, client=client)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(params=["cpu", "vulkan"])
def kind(request):
    """A one-device embedded cluster of each kind this build has."""
    try:
        cw.local_cluster(1, 1, 1, device_kind=request.param)
    except cw.NotFoundError:
        pytest.skip(f"this build has no {request.param} kind")
    return request.param
