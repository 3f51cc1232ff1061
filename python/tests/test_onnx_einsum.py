"""ONNX's Einsum against numpy.einsum on equations its node tests leave
out: three operands, ellipses that broadcast, implicit outputs, diagonals
inside a contraction, integers; and malformed equations as clear errors."""
import numpy as np
import pytest

import causeway as cw

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

pytestmark = pytest.mark.skipif(not cw.onnx.available(), reason="this build has no ONNX importer")


def _model(tmp_path, equation, arrays, out_rank):
    names = [f"x{i}" for i in range(len(arrays))]
    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    graph = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=equation)], "einsum",
        [helper.make_tensor_value_info(n, types[a.dtype], list(a.shape)) for n, a in zip(names, arrays)],
        [helper.make_tensor_value_info("y", types[arrays[0].dtype],
                                       [f"d{i}" for i in range(out_rank)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = str(tmp_path / "einsum.onnx")
    onnx.save(model, path)
    return cw.onnx.load(path)


CASES = [
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("abc->cab", [(2, 3, 4)]),
    ("ii", [(4, 4)]),
]


@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum_matches_numpy(tmp_path, equation, shapes):
    cw.local_cluster(1, 1, 1)
    rng = np.random.default_rng(len(equation))
    arrays = [rng.normal(size=s).astype(np.float32) for s in shapes]
    want = np.einsum(equation, *arrays)
    (y,) = _model(tmp_path, equation, arrays, want.ndim)(*arrays)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)


def test_integer_einsum_is_exact(tmp_path):
    cw.local_cluster(1, 1, 1)
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.arange(8, dtype=np.int32).reshape(4, 2) - 3
    (y,) = _model(tmp_path, "ij,jk->ki", [a, b], 2)(a, b)
    np.testing.assert_array_equal(np.asarray(y), np.einsum("ij,jk->ki", a, b))


@pytest.mark.parametrize("equation,message", [
    ("ij,jk->iz", "Einsum.*the output's 'z' is no operand's"),
    ("ijk,jk->ik", "Einsum.*'ijk' does not fit operand 0 of rank 2"),
    ("ij,kj->ii", "Einsum.*the output repeats 'i'"),
])
def test_malformed_equations_are_named(tmp_path, equation, message):
    cw.local_cluster(1, 1, 1)
    a = np.zeros((3, 4), np.float32)
    b = np.zeros((4, 4), np.float32)
    with pytest.raises(cw.InvalidArgumentError, match=message):
        _model(tmp_path, equation, [a, b], 2)(a, b)
