#!/usr/bin/env bash
# `causeway run MODEL.onnx` end to end on a model of ONNX's test data
# (libonnx-testdata: a 2-D convolution converted from PyTorch): inputs as
# .npy, the outputs written as .npy and compared with ONNX's expected ones,
# on 1 device and with the batch split over 2; and its bad input (a missing
# input, a malformed --input, a wrong shape, a corrupt model, too little
# device memory) as clear errors.
set -euo pipefail
bin="$1"
model_dir=/usr/include/onnx/backend/test/data/pytorch-converted/test_Conv2d
[[ -d "$model_dir" ]] || { echo "missing $model_dir: scripts/install-deps.sh installs libonnx-testdata"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
"$py" - "$model_dir" "$work" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
d, w = sys.argv[1], sys.argv[2]
t = onnx.TensorProto(); t.ParseFromString(open(f"{d}/test_data_set_0/input_0.pb", "rb").read())
np.save(f"{w}/in0.npy", numpy_helper.to_array(t))
t = onnx.TensorProto(); t.ParseFromString(open(f"{d}/test_data_set_0/output_0.pb", "rb").read())
np.save(f"{w}/want.npy", numpy_helper.to_array(t))
np.save(f"{w}/wrong.npy", np.zeros((3, 3, 7, 5), np.float32))
PY
inputs=(--input 0="$work/in0.npy")  # the weights are the model's initializers
check() {  # the output written in $1 against ONNX's, with ONNX's tolerances
  "$py" -c "
import sys, glob, numpy as np
got = np.load(glob.glob('$1/*.npy')[0]); want = np.load('$work/want.npy')
assert got.shape == want.shape, (got.shape, want.shape)
np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)
print('matches ONNX:', got.shape)"
}
mkdir -p "$work/one" "$work/two"
"$bin" run "$model_dir/model.onnx" "${inputs[@]}" --out "$work/one" --iters 3
check "$work/one"
# Two devices: the batch of 2 split, one sample each.
"$bin" run "$model_dir/model.onnx" "${inputs[@]}" --devices 2 --out "$work/two" --json \
  | tee "$work/two.json"
grep -q '"devices":2' "$work/two.json"
check "$work/two"

expect_error() {  # exit status $1 and a message matching $2 from the rest
  local want="$1" pattern="$2"; shift 2
  set +e; out="$("$@" 2>&1)"; code=$?; set -e
  if [[ "$code" != "$want" ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "expected exit $want and '$pattern' from: $*"; echo "got exit $code: $out"; exit 1
  fi
}
expect_error 1 "input '0'.*is missing" "$bin" run "$model_dir/model.onnx"
expect_error 2 "NAME=FILE.npy" "$bin" run "$model_dir/model.onnx" --input "$work/in0.npy"
expect_error 1 "input '0' is f32\[3,3,7,5\]" "$bin" run "$model_dir/model.onnx" \
  --input 0="$work/wrong.npy"
printf 'garbage' > "$work/bad.onnx"
expect_error 1 "not an ONNX model" "$bin" run "$work/bad.onnx"
expect_error 1 "cannot be split over 4 devices" "$bin" run "$model_dir/model.onnx" "${inputs[@]}" --devices 4
expect_error 1 "cannot read" "$bin" run "$work/missing.onnx"
# A folder or a device given as a file: refused by name, never read
# without bound or aborted on (/dev/zero once read 1.5 GB).
expect_error 1 "is a directory" "$bin" run "$work"
expect_error 1 "not a regular file" timeout 20 "$bin" run /dev/zero
expect_error 1 "is a directory" "$bin" run "$model_dir/model.onnx" --input 0="$work"
expect_error 1 "not a regular file" timeout 20 "$bin" run "$model_dir/model.onnx" --input 0=/dev/zero
# A Loop whose trip count is past int32 is refused, not clamped to 2^31-1.
"$py" - "$work" <<'PY'
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
w = sys.argv[1]
vi = helper.make_tensor_value_info
body = helper.make_graph(
    [helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Identity", ["y"], ["y2"])],
    "body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("y", T.FLOAT, [3])],
    [vi("c2", T.BOOL, []), vi("y2", T.FLOAT, [3])])
g = helper.make_graph(
    [helper.make_node("Constant", [], ["M"], value=numpy_helper.from_array(np.array(2**62, np.int64))),
     helper.make_node("Loop", ["M", "", "y0"], ["out"], body=body)],
    "g", [vi("y0", T.FLOAT, [3])], [vi("out", T.FLOAT, [3])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), f"{w}/bigloop.onnx")
np.save(f"{w}/y0.npy", np.zeros(3, np.float32))
PY
# A stride of 0 (a SIGFPE inside ONNX's shape inference) is refused first,
# naming the node.
"$py" - "$work" <<'PY'
import sys, onnx
from onnx import helper, TensorProto as T
vi = helper.make_tensor_value_info
for op in ("Conv", "MaxPool"):
    ins = ["x", "w"] if op == "Conv" else ["x"]
    node = helper.make_node(op, ins, ["y"], kernel_shape=[2, 2], strides=[0, 0])
    inputs = [vi("x", T.FLOAT, [1, 1, 4, 4])] + ([vi("w", T.FLOAT, [1, 1, 2, 2])] if op == "Conv" else [])
    g = helper.make_graph([node], "g", inputs, [vi("y", T.FLOAT, [1, 1, 3, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              f"{sys.argv[1]}/stride0_{op}.onnx")
PY
for op in Conv MaxPool; do
  expect_error 1 "attribute strides holds 0" timeout 20 "$bin" run "$work/stride0_$op.onnx"
done
expect_error 1 "trip count 4611686018427387904 is past" timeout 20 "$bin" run "$work/bigloop.onnx" \
  --input y0="$work/y0.npy"
# --out names a folder that is made when missing.
"$bin" run "$model_dir/model.onnx" "${inputs[@]}" --out "$work/new/deeper" >/dev/null
check "$work/new/deeper"
expect_error 1 "cannot be a folder" "$bin" run "$model_dir/model.onnx" "${inputs[@]}" \
  --out "$work/bad.onnx"
# --memory sets each device's memory: too little for the model is named.
expect_error 1 "exceeds the whole memory of device 0 (64 bytes)" "$bin" run "$model_dir/model.onnx" \
  "${inputs[@]}" --memory 64
expect_error 2 "memory" "$bin" run "$model_dir/model.onnx" "${inputs[@]}" --memory 0

# Narrow types stored as such: uint8, int8 and float16 inputs and outputs,
# int64 indices, read and written as .npy of those dtypes and equal to
# ONNX's (dtype included), on the cpu kind and (conversions on the device)
# the vulkan kind.
node=/usr/include/onnx/backend/test/data/node
for t in test_add_uint8 test_max_int8 test_cast_FLOAT_to_FLOAT16 test_cast_FLOAT16_to_FLOAT \
         test_gather_0 test_argmax_default_axis_example; do
  mkdir -p "$work/$t"
  "$py" - "$node/$t" "$work/$t" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
d, w = sys.argv[1], sys.argv[2]
m = onnx.load(f"{d}/model.onnx")
inits = {i.name for i in m.graph.initializer}
names = [i.name for i in m.graph.input if i.name not in inits]
args = []
for k, name in enumerate(names):
    t = onnx.TensorProto(); t.ParseFromString(open(f"{d}/test_data_set_0/input_{k}.pb", "rb").read())
    np.save(f"{w}/in{k}.npy", numpy_helper.to_array(t))
    args += ["--input", f"{name}={w}/in{k}.npy"]
t = onnx.TensorProto(); t.ParseFromString(open(f"{d}/test_data_set_0/output_0.pb", "rb").read())
np.save(f"{w}/want.npy", numpy_helper.to_array(t))
open(f"{w}/args", "w").write("\n".join(args))
PY
  mapfile -t args < "$work/$t/args"
  for kind in cpu vulkan; do
    mkdir -p "$work/$t/$kind"
    "$bin" run "$node/$t/model.onnx" "${args[@]}" --device-kind "$kind" --out "$work/$t/$kind" >/dev/null
    "$py" -c "
import glob, numpy as np
got = np.load(sorted(glob.glob('$work/$t/$kind/*.npy'))[0]); want = np.load('$work/$t/want.npy')
assert got.dtype == want.dtype and got.shape == want.shape, ('$t', got.dtype, want.dtype, got.shape)
np.testing.assert_array_equal(got, want)
print('$t on $kind:', got.dtype, got.shape, 'equal to ONNX')"
  done
done
# An int64 input the model would compute past int32 is refused by name.
"$py" -c "import numpy as np; np.save('$work/big.npy', np.array([[0, 1 << 40]], np.int64))"
mapfile -t args < "$work/test_gather_0/args"
expect_error 1 "holds 1099511627776, outside int32" "$bin" run "$node/test_gather_0/model.onnx" \
  "${args[0]}" "${args[1]}" --input indices="$work/big.npy"
echo "run_onnx_test: ok"
