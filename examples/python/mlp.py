"""A data-parallel MLP: pytrees of parameters, cw.grad, cw.random and cw.optim."""
import numpy as np
import causeway as cw

cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=2)
mesh = cw.make_mesh({"data": 2})
rep, data = cw.NamedSharding(mesh, cw.P()), cw.NamedSharding(mesh, cw.P("data"))
k1, k2 = cw.random.split(cw.random.key(0))
params = cw.device_put({"w1": cw.random.normal(k1, (8, 32)) * 0.3, "b1": np.zeros(32),
                        "w2": cw.random.normal(k2, (32, 1)) * 0.3, "b2": np.zeros(1)}, rep)
opt = cw.optim.adam(0.01)


def loss(p, x, y):
    return (((cw.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]) - y) ** 2).mean()


@cw.jit(in_shardings=(rep, rep, data, data))
def step(p, state, x, y):  # each device sees its half of the batch
    value, g = cw.value_and_grad(loss)(p, x, y)
    g = cw.tree.map(lambda t: cw.all_reduce(t, "data") / 2, g)
    updates, state = opt.update(g, state)
    return cw.optim.apply_updates(p, updates), state, cw.all_reduce(value, "data") / 2


x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
x, y = cw.device_put((x, np.sin(x.sum(1, keepdims=True))), data)
state, losses = opt.init(params), []
for _ in range(300):
    params, state, value = step(params, state, x, y)
    losses.append(value)
print(f"loss {float(losses[0]):.4g} -> {float(losses[-1]):.4g}")
