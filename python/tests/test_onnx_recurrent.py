"""ONNX's LSTM, GRU and RNN where its node tests do not reach: both
directions at once, sequences shorter than the input (sequence_lens),
initial states, clip, both layouts; against a numpy reference of ONNX's
equations. And a gradient through an LSTM, as fine-tuning takes it."""
import numpy as np
import pytest

import causeway as cw
from weight_gradients import check_against_finite_differences

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not cw.onnx.available(), reason="this build has no ONNX importer")

T, B, I, H = 5, 3, 4, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _reference(op, x, w, r, b, lens, h0, c0, clip, reverse):
    """One direction of ONNX's equations in float64: Y [T, B, H], Y_h, Y_c."""
    g = GATES[op]
    wb, rb = b[:g * H], b[g * H:]
    h, c = h0.astype(np.float64), c0.astype(np.float64)
    y = np.zeros((T, B, H))
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    for s in range(T):
        t = T - 1 - s if reverse else s
        xt = x[t]
        if op == "RNN":
            hn, cn = np.tanh(cl(xt @ w.T + h @ r.T + wb + rb)), c
        elif op == "GRU":
            zr = cl(xt @ w[:2 * H].T + h @ r[:2 * H].T + wb[:2 * H] + rb[:2 * H])
            z, rg = _sigmoid(zr[:, :H]), _sigmoid(zr[:, H:])
            hh = np.tanh(cl(xt @ w[2 * H:].T + (rg * h) @ r[2 * H:].T + wb[2 * H:] + rb[2 * H:]))
            hn, cn = (1 - z) * hh + z * h, c
        else:
            a = cl(xt @ w.T + h @ r.T + wb + rb)
            i, o, f, cc = (a[:, k * H:(k + 1) * H] for k in range(4))
            cn = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cc)
            hn = _sigmoid(o) * np.tanh(cn)
        on = (t < lens)[:, None]
        y[t] = np.where(on, hn, 0)
        h, c = np.where(on, hn, h), np.where(on, cn, c)
    return y, h, c


def _model(tmp_path, op, arrays, layout, clip):
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c"] if op == "LSTM" else [])
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    attrs = dict(hidden_size=H, direction="bidirectional", layout=layout)
    if clip:
        attrs["clip"] = clip
    y_shape = [T, 2, B, H] if layout == 0 else [B, T, 2, H]
    s_shape = [2, B, H] if layout == 0 else [B, 2, H]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)], op.lower(),
        [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT,
                                       list(a.shape)) for n, a in zip(names, arrays)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)] +
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s_shape) for n in outs[1:]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    path = str(tmp_path / f"{op}.onnx")
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("layout,clip", [(0, 0.0), (1, 1.5)])
def test_bidirectional_with_sequence_lengths_matches_onnxs_equations(tmp_path, op, layout, clip):
    cw.local_cluster(1, 1, 1)
    rng = np.random.default_rng(GATES[op] + layout)
    g = GATES[op]
    x = rng.normal(size=(T, B, I)).astype(np.float32)
    w = (0.5 * rng.normal(size=(2, g * H, I))).astype(np.float32)
    r = (0.5 * rng.normal(size=(2, g * H, H))).astype(np.float32)
    b = (0.5 * rng.normal(size=(2, 2 * g * H))).astype(np.float32)
    lens = np.array([5, 2, 4], np.int32)
    h0 = rng.normal(size=(2, B, H)).astype(np.float32)
    c0 = rng.normal(size=(2, B, H)).astype(np.float32)
    want = [_reference(op, x.astype(np.float64), w[d], r[d], b[d], lens, h0[d], c0[d], clip, d == 1)
            for d in range(2)]
    y_want = np.stack([want[0][0], want[1][0]], axis=1)      # [T, 2, B, H]
    h_want = np.stack([want[0][1], want[1][1]])               # [2, B, H]
    c_want = np.stack([want[0][2], want[1][2]])
    arrays = [x, w, r, b, lens, h0] + ([c0] if op == "LSTM" else [])
    if layout == 1:
        arrays[0] = x.transpose(1, 0, 2)
        arrays[5] = h0.transpose(1, 0, 2)
        if op == "LSTM":
            arrays[6] = c0.transpose(1, 0, 2)
    model = cw.onnx.load(_model(tmp_path, op, arrays, layout, clip))
    outs = [np.asarray(v) for v in model(*arrays)]
    if layout == 1:
        outs = [outs[0].transpose(1, 2, 0, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
    np.testing.assert_allclose(outs[0], y_want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[1], h_want, rtol=1e-4, atol=1e-5)
    if op == "LSTM":
        np.testing.assert_allclose(outs[2], c_want, rtol=1e-4, atol=1e-5)


def test_an_lstms_weights_get_gradients_that_agree_with_finite_differences(tmp_path):
    cw.local_cluster(1, 1, 1)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(T, B, I)).astype(np.float32)
    w = numpy_helper.from_array((0.5 * rng.normal(size=(1, 4 * H, I))).astype(np.float32), "W")
    r = numpy_helper.from_array((0.5 * rng.normal(size=(1, 4 * H, H))).astype(np.float32), "R")
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["X", "W", "R"], ["", "Y_h"], hidden_size=H)], "lstm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I])],
        [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, B, H])], initializer=[w, r])
    path = str(tmp_path / "lstm.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    model = cw.onnx.load(path, trainable=True)

    @cw.compile
    def loss_and_grad(weights, x):
        return cw.value_and_grad(lambda ws: (model.apply(ws, x)[0] ** 2).sum())(weights)

    @cw.compile
    def loss(weights, x):
        return (model.apply(weights, x)[0] ** 2).sum()

    weights = dict(model.weights)
    _, grads = loss_and_grad(weights, x)
    check_against_finite_differences(lambda w: loss(w, x), weights, grads, ("W", "R"),
                                     rel=3e-2, abs_=1e-3)
