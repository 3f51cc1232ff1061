"""Fine-tuning an imported ONNX model: with trainable=True its weights are
arguments, gradients flow to them through every op the model uses (the
convolutions, batch normalisation, pooling, the classifier), agree with
finite differences, and a few steps of gradient descent fit a batch. The
model is the shipped tiny ResNet (tests/onnx_models/, exported from
PyTorch); no PyTorch is needed."""
import os

import numpy as np
import pytest

import causeway as cw
from weight_gradients import check_against_finite_differences

pytestmark = pytest.mark.skipif(not cw.onnx.available(), reason="this build has no ONNX importer")

SHIPPED = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "onnx_models")
PATH = os.path.join(SHIPPED, "tiny_resnet.onnx")


@pytest.fixture(scope="module")
def data():
    x = np.load(os.path.join(SHIPPED, "tiny_resnet_input.npy"))
    want = np.load(os.path.join(SHIPPED, "tiny_resnet_output.npy"))
    return x, want


def test_a_trainable_model_computes_what_the_fixed_one_does(data):
    x, want = data
    cw.local_cluster(1, 1, 1)
    model = cw.onnx.load(PATH, trainable=True)
    assert model.weights and all(w.dtype == np.float32 for w in model.weights.values())
    (y,) = model(x)
    assert np.max(np.abs(np.asarray(y) - want)) <= 1e-4 * np.max(np.abs(want))


def _mse(model, weights, x, target):
    (y,) = model.apply(weights, x)
    d = y - target
    return (d * d).mean()


def test_gradients_against_the_weights_agree_with_finite_differences(data):
    x, want = data
    cw.local_cluster(1, 1, 1)
    model = cw.onnx.load(PATH, trainable=True)
    weights = dict(model.weights)
    target = np.random.default_rng(0).normal(size=want.shape).astype(np.float32)
    @cw.compile
    def step(weights, x, target):
        return cw.value_and_grad(lambda w: _mse(model, w, x, target))(weights)

    value, grads = step(weights, x, target)
    grads = {k: np.asarray(v) for k, v in grads.items()}
    assert set(grads) == set(weights)

    @cw.compile
    def loss_only(weights, x, target):
        return _mse(model, weights, x, target)

    # The first convolution's kernel, a later one's, and the classifier's
    # weight: three elements each, the largest gradients.
    names = list(weights)
    convs = [n for n in names if weights[n].ndim == 4]
    checked = [convs[0], convs[-1], max(names, key=lambda n: weights[n].size if weights[n].ndim == 2 else 0)]
    check_against_finite_differences(lambda w: loss_only(w, x, target), weights, grads, checked,
                                     rel=5e-2, abs_=1e-4)
    assert float(np.asarray(value)) == pytest.approx(
        float(np.mean((want - target) ** 2)), rel=1e-4)


def test_a_few_steps_of_gradient_descent_fit_a_batch(data):
    x, want = data
    cw.local_cluster(1, 1, 1)
    model = cw.onnx.load(PATH, trainable=True)
    # A target the model can reach: its own output scaled and shifted (what
    # its classifier's weight and bias scaled and shifted give).
    target = (1.5 * want + 0.5).astype(np.float32)

    @cw.compile
    def sgd(weights, x, target):
        value, g = cw.value_and_grad(lambda w: _mse(model, w, x, target))(weights)
        return value, {k: weights[k] - 0.3 * g[k] for k in weights}

    weights = dict(model.weights)
    losses = []
    for _ in range(8):
        value, weights = sgd(weights, x, target)
        losses.append(float(np.asarray(value)))
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.2 * losses[0], losses
    # The fine-tuned weights are the model's when called.
    model.weights = {k: np.asarray(v) for k, v in weights.items()}
    (y,) = model(x)
    assert float(np.mean((np.asarray(y) - target) ** 2)) < losses[-1]


def test_apply_needs_a_trainable_model_and_every_weight(data):
    x, _ = data
    cw.local_cluster(1, 1, 1)
    fixed = cw.onnx.load(PATH)
    model = cw.onnx.load(PATH, trainable=True)

    @cw.compile
    def fixed_apply(x):
        return fixed.apply({}, x)[0]

    with pytest.raises(cw.InvalidArgumentError, match="trainable=True"):
        fixed_apply(x)
    some = dict(list(model.weights.items())[1:])

    @cw.compile
    def partial(weights, x):
        return model.apply(weights, x)[0]

    with pytest.raises(cw.InvalidArgumentError, match="weights lack"):
        partial(some, x)
