"""ONNX's TopK (the IR's argsort) against numpy's stable sort: ties in
index order, largest and smallest, any axis, floats and integers, on the cpu
and vulkan kinds; and a k past the axis as a clear error."""
import numpy as np
import pytest

import causeway as cw

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not cw.onnx.available(), reason="this build has no ONNX importer")


def _model(tmp_path, x, k, axis, largest):
    t = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.INT32
    out = list(x.shape)
    out[axis] = k
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)],
        "topk", [helper.make_tensor_value_info("x", t, list(x.shape))],
        [helper.make_tensor_value_info("values", t, out),
         helper.make_tensor_value_info("indices", TensorProto.INT64, out)],
        initializer=[numpy_helper.from_array(np.array([k], np.int64), "k")])
    path = str(tmp_path / "topk.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return cw.onnx.load(path)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("axis,largest", [(-1, 1), (0, 0), (1, 1)])
def test_topk_matches_a_stable_sort(tmp_path, kind, dtype, axis, largest):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 6, size=(7, 9, 4)).astype(dtype)  # many ties
    k = 3
    values, indices = (np.asarray(v) for v in _model(tmp_path, x, k, axis, largest)(x))
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    want_idx = np.take(order, np.arange(k), axis=axis)
    np.testing.assert_array_equal(indices, want_idx)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want_idx, axis=axis))


def test_a_k_past_the_axis_is_named(tmp_path):
    cw.local_cluster(1, 1, 1)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(cw.InvalidArgumentError, match="k = 4 for an axis of 3"):
        _model(tmp_path, x, 4, -1, 1)(x)
