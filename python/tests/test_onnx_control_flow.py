"""ONNX's If, Loop and Scan as Causeway's structured control flow: models
built here with onnx.helper (python3-onnx, installed by
scripts/install-deps.sh), run on the cpu and vulkan kinds, against the same
computation in numpy; and what cannot be static as a clear error."""
import numpy as np
import pytest

import causeway as cw

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not cw.onnx.available(), reason="this build has no ONNX importer")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _save(tmp_path, graph, opset=13):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    path = str(tmp_path / f"{graph.name}.onnx")
    onnx.save(model, path)
    return path


def _if_model(tmp_path):
    """y = x * 2 if sum(x) > 0 else x - w (w an initializer): the condition
    is computed at run time, and both branches read the outer x."""
    then_g = helper.make_graph(
        [helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(
            np.array(2, np.float32))),
         helper.make_node("Mul", ["x", "two"], ["t"])],
        "then", [], [helper.make_tensor_value_info("t", F, [2, 3])])
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["x", "w"], ["e"])],
        "else", [], [helper.make_tensor_value_info("e", F, [2, 3])])
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(
             np.array(0, np.float32))),
         helper.make_node("Greater", ["s", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        "if_model", [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        initializer=[numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")])
    return _save(tmp_path, graph)


def test_if_takes_the_branch_its_runtime_condition_picks(tmp_path, kind):
    model = cw.onnx.load(_if_model(tmp_path))
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    for x in (np.ones((2, 3), np.float32), -np.ones((2, 3), np.float32)):
        (y,) = model(x)
        want = x * 2 if x.sum() > 0 else x - w
        np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6)


def _loop_model(tmp_path, scan=False, early_exit=True):
    """for i < M while cond: y = y * 2 + i (cond_out: sum(y) < limit when
    early_exit); a scan output stacks each iteration's y when scan."""
    nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(
            np.array(2, np.float32))),
        helper.make_node("Mul", ["y_in", "two"], ["y2"]),
        helper.make_node("Add", ["y2", "fi"], ["y_out"]),
    ]
    if early_exit:
        nodes += [helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
                  helper.make_node("Less", ["s", "limit"], ["cond_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    outs = [helper.make_tensor_value_info("cond_out", B, []),
            helper.make_tensor_value_info("y_out", F, [3])]
    if scan:
        nodes.append(helper.make_node("Identity", ["y_out"], ["row"]))
        outs.append(helper.make_tensor_value_info("row", F, [3]))
    body = helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("y_in", F, [3])], outs)
    loop_outs = ["y_final"] + (["rows"] if scan else [])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
         helper.make_node("Loop", ["M", "yes", "y0"], loop_outs, body=body)],
        "loop_model",
        [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("y0", F, [3]),
         helper.make_tensor_value_info("limit", F, [])],
        [helper.make_tensor_value_info("y_final", F, [3])] +
        ([helper.make_tensor_value_info("rows", F, ["iterations", 3])] if scan else []))
    return _save(tmp_path, graph)


def _loop_numpy(m, y, limit, early_exit=True):
    rows = []
    for i in range(m):
        y = y * 2 + i
        rows.append(y)
        if early_exit and not y.sum() < limit:
            break
    return y, np.stack(rows) if rows else None


def test_a_loop_with_a_runtime_trip_count_and_an_early_exit(tmp_path, kind):
    model = cw.onnx.load(_loop_model(tmp_path))
    assert model.input_names == ["M", "y0", "limit"]
    y0 = np.array([1, 2, 3], np.float32)
    for m, limit in ((0, 1e9), (3, 1e9), (10, 100.0), (50, 1e4)):
        (y,) = model(np.array(m, np.int32), y0, np.array(limit, np.float32))
        want, _ = _loop_numpy(m, y0, limit)
        np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6)


def test_a_loop_with_a_known_trip_count_stacks_its_scan_output(tmp_path, kind):
    model = cw.onnx.load(_loop_model(tmp_path, scan=True, early_exit=False), constants={"M": 5})
    assert model.input_names == ["y0", "limit"]
    y0 = np.array([1, -2, 0.5], np.float32)
    y, rows = model(y0, np.array(0, np.float32))
    want_y, want_rows = _loop_numpy(5, y0, 0, early_exit=False)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(rows), want_rows, rtol=1e-6)


def test_scan_outputs_that_would_need_a_runtime_row_count_are_refused(tmp_path):
    cw.local_cluster(1, 1, 1)
    model = cw.onnx.load(_loop_model(tmp_path, scan=True, early_exit=True), constants={"M": 5})
    with pytest.raises(cw.UnimplementedError, match="Loop.*number of iterations"):
        model(np.zeros(3, np.float32), np.array(0, np.float32))


def test_a_trip_count_past_int32_is_refused_not_wrapped(tmp_path):
    cw.local_cluster(1, 1, 1)
    with pytest.raises(cw.InvalidArgumentError, match="'M' holds 4611686018427387904, outside int32"):
        cw.onnx.load(_loop_model(tmp_path, scan=True, early_exit=False), constants={"M": 2**62})


def test_scan_runs_forwards_and_backwards_along_any_axis(tmp_path, kind):
    """A running sum over axis 1 of x, forwards into one output stacked
    along axis 0, and backwards (reversed input and output) into another."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "col"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["fwd"]),
         helper.make_node("Mul", ["col", "col"], ["sq"])],
        "scan_body",
        [helper.make_tensor_value_info("acc", F, [2]), helper.make_tensor_value_info("col", F, [2])],
        [helper.make_tensor_value_info("acc_out", F, [2]), helper.make_tensor_value_info("fwd", F, [2]),
         helper.make_tensor_value_info("sq", F, [2])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["init", "x"], ["total", "running", "squares"], body=body,
                          num_scan_inputs=1, scan_input_axes=[1], scan_output_axes=[0, 1],
                          scan_output_directions=[0, 1])],
        "scan_model",
        [helper.make_tensor_value_info("init", F, [2]), helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("total", F, [2]),
         helper.make_tensor_value_info("running", F, [4, 2]),
         helper.make_tensor_value_info("squares", F, [2, 4])])
    model = cw.onnx.load(_save(tmp_path, graph, opset=16))
    init = np.array([10, 20], np.float32)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    total, running, squares = (np.asarray(v) for v in model(init, x))
    np.testing.assert_allclose(total, init + x.sum(axis=1))
    np.testing.assert_allclose(running, (init[:, None] + np.cumsum(x, axis=1)).T)
    np.testing.assert_allclose(squares, (x * x)[:, ::-1])


def test_a_loop_nesting_an_if_reads_values_from_both_enclosing_graphs(tmp_path, kind):
    """for i < 4: acc += x if i is even else acc -= scale * x (x, scale
    read from the main graph inside the If inside the Loop's body)."""
    then_g = helper.make_graph([helper.make_node("Add", ["acc_in", "x"], ["a"])], "even", [],
                               [helper.make_tensor_value_info("a", F, [2])])
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["sx"]),
         helper.make_node("Sub", ["acc_in", "sx"], ["b"])], "odd", [],
        [helper.make_tensor_value_info("b", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2, np.int64))),
         helper.make_node("Mod", ["i", "two"], ["r"]),
         helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
         helper.make_node("Equal", ["r", "zero"], ["even"]),
         helper.make_node("If", ["even"], ["acc_out"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", B, []),
         helper.make_tensor_value_info("acc_in", F, [2])],
        [helper.make_tensor_value_info("c_out", B, []), helper.make_tensor_value_info("acc_out", F, [2])])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["four"], value=numpy_helper.from_array(np.array(4, np.int64))),
         helper.make_node("Loop", ["four", "", "acc0"], ["acc"], body=body)],
        "nested",
        [helper.make_tensor_value_info("acc0", F, [2]), helper.make_tensor_value_info("x", F, [2]),
         helper.make_tensor_value_info("scale", F, [])],
        [helper.make_tensor_value_info("acc", F, [2])])
    model = cw.onnx.load(_save(tmp_path, graph))
    acc0, x, scale = np.array([1, 2], np.float32), np.array([3, -1], np.float32), np.float32(0.5)
    (acc,) = model(acc0, x, np.array(scale))
    want = acc0.copy()
    for i in range(4):
        want = want + x if i % 2 == 0 else want - scale * x
    np.testing.assert_allclose(np.asarray(acc), want, rtol=1e-6)


def test_if_branches_of_different_shapes_are_named(tmp_path):
    cw.local_cluster(1, 1, 1)
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, ["a", "b"])])
    else_g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["e"], keepdims=1)], "else", [],
        [helper.make_tensor_value_info("e", F, ["c", "d"])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "mixed",
        [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, ["e", "f"])])
    model = cw.onnx.load(_save(tmp_path, graph))
    with pytest.raises(cw.UnimplementedError, match=r"output 0 is f32\[2,3\] in then_branch"):
        model(np.array(True), np.zeros((2, 3), np.float32))
