"""causeway.onnx: a model of ONNX's test data (libonnx-testdata, installed by
scripts/install-deps.sh) loaded, run on one device and with its batch split
over two, against ONNX's expected output; and bad input as clear errors."""
import os

import numpy as np
import pytest

import causeway as cw

MODEL_DIR = "/usr/include/onnx/backend/test/data/pytorch-converted/test_Conv2d"

pytestmark = pytest.mark.skipif(not cw.onnx.available(), reason="this build has no ONNX importer")


def _tensor(path):
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


@pytest.fixture(scope="module")
def data():
    if not os.path.isdir(MODEL_DIR):
        pytest.fail(f"{MODEL_DIR} is missing: scripts/install-deps.sh installs libonnx-testdata")
    return (_tensor(f"{MODEL_DIR}/test_data_set_0/input_0.pb"),
            _tensor(f"{MODEL_DIR}/test_data_set_0/output_0.pb"))


def test_a_conv_model_gives_onnxs_output_on_one_and_two_devices(data):
    x, want = data
    cw.local_cluster(1, 1, 2)
    model = cw.onnx.load(f"{MODEL_DIR}/model.onnx")
    assert model.input_names == ["0"]
    (y,) = model(x)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-3, atol=1e-7)
    mesh = cw.make_mesh({"data": 2})
    split = cw.NamedSharding(mesh, cw.P("data"))
    model2 = cw.onnx.load(f"{MODEL_DIR}/model.onnx", in_shardings=split, out_shardings=split)
    (y2,) = model2(cw.device_put(x, split))
    np.testing.assert_allclose(np.asarray(y2), want, rtol=1e-3, atol=1e-7)


def test_bad_input_is_a_clear_error(data, tmp_path):
    x, _ = data
    cw.local_cluster(1, 1, 1)
    model = cw.onnx.load(f"{MODEL_DIR}/model.onnx")
    with pytest.raises(cw.InvalidArgumentError, match="inputs"):
        model(x, x)
    with pytest.raises(cw.InvalidArgumentError, match="input '0' is f32\\[1,3,7,5\\]"):
        model(x[:1])
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    with pytest.raises(cw.InvalidArgumentError, match="not an ONNX model"):
        cw.onnx.load(str(bad))
    with pytest.raises(cw.CausewayError, match="cannot read"):
        cw.onnx.load(str(tmp_path / "missing.onnx"))


SHIPPED = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "onnx_models")


@pytest.mark.parametrize("name", ["tiny_resnet", "tiny_decoder"])
def test_shipped_models_exported_from_pytorch_match_its_outputs(name):
    """Models python/bench/onnx_models.py exported from PyTorch (a ResNet at
    width 8; a GPT-2-shaped decoder of 2 layers) with PyTorch's outputs:
    Causeway's within 1e-4 of the largest output, on one device and with
    the batch split over two."""
    x = np.load(os.path.join(SHIPPED, f"{name}_input.npy"))
    want = np.load(os.path.join(SHIPPED, f"{name}_output.npy"))
    cw.local_cluster(1, 1, 2)
    path = os.path.join(SHIPPED, f"{name}.onnx")
    (y,) = cw.onnx.load(path)(x)
    scale = np.max(np.abs(want))
    assert np.max(np.abs(np.asarray(y) - want)) <= 1e-4 * scale
    split = cw.NamedSharding(cw.make_mesh({"data": 2}), cw.P("data"))
    (y2,) = cw.onnx.load(path, in_shardings=split, out_shardings=split)(cw.device_put(x, split))
    assert np.max(np.abs(np.asarray(y2) - want)) <= 1e-4 * scale
