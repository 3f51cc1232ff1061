// Matrix products, softmax, reductions, arg-max/min and normalisations.
#include <algorithm>
#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using ir::DType;
using ir::Value;

std::vector<int64_t> Range0(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

int64_t Product(const std::vector<int64_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

// `v` reduced over `axes` (sorted) put back at rank: those dims become 1.
Value KeepDims(Converter& c, Value reduced, const std::vector<int64_t>& dims,
               const std::vector<int64_t>& axes) {
  std::vector<int64_t> kept = dims;
  for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
  return c.b.Reshape(reduced, kept);
}

absl::Status MatMul(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value a, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value b, c.In(n, 1));
  std::vector<int64_t> ad = c.ShapeOf(a).dims, bd = c.ShapeOf(b).dims;
  if (ad.empty() || bd.empty()) return absl::InvalidArgumentError("MatMul of a scalar");
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  a = c.b.Reshape(a, ad);
  b = c.b.Reshape(b, bd);
  const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> batch, Converter::BroadcastDims({a_batch, b_batch}));
  std::vector<int64_t> at = batch, bt = batch;
  at.insert(at.end(), ad.end() - 2, ad.end());
  bt.insert(bt.end(), bd.end() - 2, bd.end());
  const auto nb = static_cast<int64_t>(batch.size());
  CW_ASSIGN_OR_RETURN(a, c.BroadcastTo(a, at));
  Value y;
  if (Product(b_batch) == 1) {
    // Activations times a weight matrix: the weight is shared by every
    // batch, so the batch dims are rows of one matrix product. Broadcasting
    // the weight instead would copy it once per batch and run one product
    // per batch.
    y = c.b.DotGeneral(a, c.b.Reshape(b, {bd.end() - 2, bd.end()}), {}, {}, {nb + 1}, {0});
  } else {
    CW_ASSIGN_OR_RETURN(b, c.BroadcastTo(b, bt));
    y = c.b.DotGeneral(a, b, Range0(nb), Range0(nb), {nb + 1}, {nb});
  }
  std::vector<int64_t> out = batch;
  if (!a_vec) out.push_back(ad[ad.size() - 2]);
  if (!b_vec) out.push_back(bd.back());
  c.Set(n, 0, c.b.Reshape(y, out), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Gemm(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value a, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value b, c.In(n, 1));
  const bool ta = c.AttrInt(n, "transA", 0) != 0, tb = c.AttrInt(n, "transB", 0) != 0;
  Value y = c.b.DotGeneral(a, b, {}, {}, {ta ? 0 : 1}, {tb ? 1 : 0});
  const std::vector<int64_t> dims = c.ShapeOf(y).dims;
  const DType dt = c.ShapeOf(y).dtype;
  const float alpha = c.AttrFloat(n, "alpha", 1.0f), beta = c.AttrFloat(n, "beta", 1.0f);
  if (alpha != 1.0f) y = c.b.Mul(y, c.Full(alpha, dt, dims));
  if (c.Has(n, 2)) {
    CW_ASSIGN_OR_RETURN(Value bias, c.In(n, 2));
    CW_ASSIGN_OR_RETURN(bias, c.BroadcastTo(bias, dims));
    if (beta != 1.0f) bias = c.b.Mul(bias, c.Full(beta, dt, dims));
    y = c.b.Add(y, bias);
  }
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

// --- Reductions ---

enum class Red { kSum, kMean, kMax, kMin, kL1, kL2, kSumSquare, kLogSum, kLogSumExp, kProd };

template <Red kRed>
absl::Status Reduce(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  const auto rank = static_cast<int64_t>(dims.size());
  const bool axes_input = (kRed == Red::kSum && c.opset >= 13);
  std::vector<int64_t> axes;
  if (axes_input && c.Has(n, 1)) {
    CW_ASSIGN_OR_RETURN(axes, c.Ints(n, 1));
  } else if (auto a = c.AttrInts(n, "axes")) {
    axes = *a;
  }
  if (axes.empty()) {
    if (c.AttrInt(n, "noop_with_empty_axes", 0) != 0) {
      c.Set(n, 0, x, c.TypeOf(n, 0));
      return absl::OkStatus();
    }
    axes = Range0(rank);
  }
  for (int64_t& a : axes) {
    CW_ASSIGN_OR_RETURN(a, Axis(a, rank));
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  const DType dt = c.ShapeOf(x).dtype;
  int64_t count = 1;
  for (int64_t a : axes) count *= dims[static_cast<size_t>(a)];
  Value y;
  switch (kRed) {
    case Red::kSum: y = c.b.ReduceSum(x, axes); break;
    case Red::kMean: {
      y = c.b.ReduceSum(x, axes);
      y = c.b.Div(y, c.Full(static_cast<double>(count), dt, c.ShapeOf(y).dims));
      break;
    }
    case Red::kMax: y = c.b.ReduceMax(x, axes); break;
    case Red::kMin: y = c.b.ReduceMin(x, axes); break;
    case Red::kL1: y = c.b.ReduceSum(c.b.Abs(x), axes); break;
    case Red::kL2: y = c.b.Sqrt(c.b.ReduceSum(c.b.Mul(x, x), axes)); break;
    case Red::kSumSquare: y = c.b.ReduceSum(c.b.Mul(x, x), axes); break;
    case Red::kLogSum: y = c.b.Log(c.b.ReduceSum(x, axes)); break;
    case Red::kProd: {
      // exp(sum(log|x|)) with the sign of the negatives' count, 0 if any is.
      if (dt != DType::kF32) return absl::UnimplementedError("ReduceProd of integers");
      const Value zero = c.Full(0, DType::kF32, dims), one = c.Full(1, DType::kF32, dims);
      const Value is_zero = c.b.Compare(x, zero, ir::Comparison::kEq);
      const Value mag = c.b.Exp(c.b.ReduceSum(c.b.Log(c.b.Abs(c.b.Select(is_zero, one, x))), axes));
      const Value negs = c.b.ReduceSum(
          c.b.Select(c.b.Compare(x, zero, ir::Comparison::kLt), one, zero), axes);
      const Value zeros = c.b.ReduceMax(c.b.Select(is_zero, one, zero), axes);
      const std::vector<int64_t> rd = c.ShapeOf(negs).dims;
      const Value two = c.Full(2, DType::kF32, rd);
      const Value odd = c.b.Sub(negs, c.b.Mul(two, c.b.Floor(c.b.Div(negs, two))));
      const Value sign = c.b.Sub(c.Full(1, DType::kF32, rd), c.b.Mul(two, odd));
      y = c.b.Mul(c.b.Mul(mag, sign), c.b.Sub(c.Full(1, DType::kF32, rd), zeros));
      break;
    }
    case Red::kLogSumExp: {
      const Value m = c.b.ReduceMax(x, axes);
      const Value s = c.b.ReduceSum(c.b.Exp(c.b.Sub(x, c.BroadcastBack(m, dims, axes))), axes);
      y = c.b.Add(m, c.b.Log(s));
      break;
    }
  }
  if (c.AttrInt(n, "keepdims", 1) != 0) y = KeepDims(c, y, dims, axes);
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

template <bool kMax>
absl::Status ArgExtreme(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  CW_ASSIGN_OR_RETURN(int64_t axis,
                      Axis(c.AttrInt(n, "axis", 0), static_cast<int64_t>(dims.size())));
  const bool last = c.AttrInt(n, "select_last_index", 0) != 0;
  const Value m = kMax ? c.b.ReduceMax(x, {axis}) : c.b.ReduceMin(x, {axis});
  const Value hit = c.b.Compare(x, c.BroadcastBack(m, dims, {axis}), ir::Comparison::kEq);
  const Value index = c.b.Iota(ir::Shape(DType::kI32, dims), axis);
  const Value other = c.Full(last ? -1 : static_cast<double>(dims[static_cast<size_t>(axis)]),
                             DType::kI32, dims);
  const Value cand = c.b.Select(hit, index, other);
  Value y = last ? c.b.ReduceMax(cand, {axis}) : c.b.ReduceMin(cand, {axis});
  if (c.AttrInt(n, "keepdims", 1) != 0) y = KeepDims(c, y, dims, {axis});
  c.Set(n, 0, y, kInt64);
  return absl::OkStatus();
}

// --- Softmax family ---

// Softmax-like ops normalise over `axes`: from opset 13 the one axis
// given (default -1); before, every dimension from `axis` (default 1) on.
absl::StatusOr<std::vector<int64_t>> SoftmaxAxes(Converter& c, const Node& n, int64_t rank) {
  const bool coerced = c.opset < 13;
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", coerced ? 1 : -1), rank));
  std::vector<int64_t> axes = {axis};
  if (coerced) {
    for (int64_t a = axis + 1; a < rank; ++a) axes.push_back(a);
  }
  return axes;
}

template <int kWhich>  // 0 softmax, 1 log-softmax, 2 hardmax
absl::Status SoftmaxOp(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  const auto rank = static_cast<int64_t>(dims.size());
  if (rank == 0) return absl::InvalidArgumentError("a scalar");
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> axes, SoftmaxAxes(c, n, rank));
  if (kWhich == 0 && axes.back() == rank - 1 &&
      static_cast<int64_t>(axes.size()) == rank - axes.front()) {
    // Over the trailing dimensions: the fused kernel on them as one row.
    int64_t rows = 1, cols = 1;
    for (int64_t i = 0; i < rank; ++i) (i < axes.front() ? rows : cols) *= dims[static_cast<size_t>(i)];
    Value y = c.b.Softmax(c.b.Reshape(x, {rows, cols}));
    c.Set(n, 0, c.b.Reshape(y, dims), c.TypeOf(n, 0));
    return absl::OkStatus();
  }
  if (kWhich == 1) {
    c.Set(n, 0, c.LogSoftmax(x, axes), c.TypeOf(n, 0));
    return absl::OkStatus();
  }
  const Value m = c.BroadcastBack(c.b.ReduceMax(x, axes), dims, axes);
  if (kWhich == 2) {
    // One-hot of the first maximum over `axes`, in row-major order.
    const Value hit = c.b.Compare(x, m, ir::Comparison::kEq);
    int64_t count = 1;
    for (int64_t a : axes) count *= dims[static_cast<size_t>(a)];
    // Flat index within the normalised dims.
    Value flat = c.Full(0, DType::kI32, dims);
    for (int64_t a : axes) {
      flat = c.b.Add(c.b.Mul(flat, c.Full(static_cast<double>(dims[static_cast<size_t>(a)]), DType::kI32, dims)),
                     c.b.Iota(ir::Shape(DType::kI32, dims), a));
    }
    const Value cand = c.b.Select(hit, flat, c.Full(static_cast<double>(count), DType::kI32, dims));
    const Value first = c.BroadcastBack(c.b.ReduceMin(cand, axes), dims, axes);
    const Value one = c.b.Compare(flat, first, ir::Comparison::kEq);
    c.Set(n, 0, c.b.Convert(one, c.ShapeOf(x).dtype), c.TypeOf(n, 0));
    return absl::OkStatus();
  }
  const Value e = c.b.Exp(c.b.Sub(x, m));
  c.Set(n, 0, c.b.Div(e, c.BroadcastBack(c.b.ReduceSum(e, axes), dims, axes)), c.TypeOf(n, 0));
  return absl::OkStatus();
}

// Running sums along an axis as one product with a triangular matrix of
// ones: y[..., i] = sum over j of x[..., j] T[j, i], T[j, i] = 1 where j
// comes before i (or equals it, unless exclusive; after it, if reverse).
absl::Status CumSum(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> axis_v, c.Ints(n, 1));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  const auto rank = static_cast<int64_t>(dims.size());
  if (axis_v.size() != 1) return absl::InvalidArgumentError("axis must hold one value");
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(axis_v[0], rank));
  const int64_t len = dims[static_cast<size_t>(axis)];
  const bool exclusive = c.AttrInt(n, "exclusive", 0) != 0, reverse = c.AttrInt(n, "reverse", 0) != 0;
  const DType dt = c.ShapeOf(x).dtype;
  const ir::Shape square(DType::kI32, {len, len});
  const Value j = c.b.Iota(square, 0), i = c.b.Iota(square, 1);
  const ir::Comparison cmp = reverse ? (exclusive ? ir::Comparison::kGt : ir::Comparison::kGe)
                                     : (exclusive ? ir::Comparison::kLt : ir::Comparison::kLe);
  const Value tri = c.b.Select(c.b.Compare(j, i, cmp), c.Full(1, dt, {len, len}), c.Full(0, dt, {len, len}));
  // Contract the axis with T's rows; the result's last dim is i: move it back.
  Value y = c.b.DotGeneral(x, tri, {}, {}, {axis}, {0});
  std::vector<int64_t> perm;
  for (int64_t k = 0; k < rank - 1; ++k) {
    if (k == axis) perm.push_back(rank - 1);
    perm.push_back(k);
  }
  if (axis == rank - 1) perm.push_back(rank - 1);
  c.Set(n, 0, c.b.Transpose(y, perm), c.TypeOf(n, 0));
  return absl::OkStatus();
}

// --- Normalisations ---

absl::Status LayerNorm(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  const auto rank = static_cast<int64_t>(dims.size());
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", -1), rank));
  const float eps = c.AttrFloat(n, "epsilon", 1e-5f);
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? rows : cols) *= dims[static_cast<size_t>(i)];
  const Value x2 = c.b.Reshape(x, {rows, cols});
  Value y = c.b.Reshape(c.b.Normalize(x2, c.Scalar(eps, DType::kF32)), dims);
  CW_ASSIGN_OR_RETURN(Value scale, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(scale, c.BroadcastTo(scale, dims));
  y = c.b.Mul(y, scale);
  if (c.Has(n, 2)) {
    CW_ASSIGN_OR_RETURN(Value bias, c.In(n, 2));
    CW_ASSIGN_OR_RETURN(bias, c.BroadcastTo(bias, dims));
    y = c.b.Add(y, bias);
  }
  c.Set(n, 0, y, c.TypeOf(n, 0));
  if (n.output_size() > 1) {
    // Mean and 1 / sqrt(var + eps), with the normalised dims kept as 1.
    std::vector<int64_t> kept = dims;
    for (int64_t i = axis; i < rank; ++i) kept[static_cast<size_t>(i)] = 1;
    const Value colsv = c.Full(static_cast<double>(cols), DType::kF32, {rows});
    const Value mean = c.b.Div(c.b.ReduceSum(x2, {1}), colsv);
    const Value centred = c.b.Sub(x2, c.b.Broadcast(mean, {rows, cols}, {0}));
    const Value var = c.b.Div(c.b.ReduceSum(c.b.Mul(centred, centred), {1}), colsv);
    const Value inv = c.b.Rsqrt(c.b.Add(var, c.Full(eps, DType::kF32, {rows})));
    c.Set(n, 1, c.b.Reshape(mean, kept), kFloat);
    c.Set(n, 2, c.b.Reshape(inv, kept), kFloat);
  }
  return absl::OkStatus();
}

absl::Status BatchNorm(Converter& c, const Node& n) {
  if (c.AttrInt(n, "training_mode", 0) != 0) {
    return absl::UnimplementedError("BatchNormalization in training mode");
  }
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  if (dims.size() < 2) return absl::InvalidArgumentError("rank below 2");
  std::vector<Value> p;
  for (int i = 1; i <= 4; ++i) {
    CW_ASSIGN_OR_RETURN(Value v, c.In(n, i));
    p.push_back(c.b.Broadcast(v, dims, {1}));  // per channel
  }
  const float eps = c.AttrFloat(n, "epsilon", 1e-5f);
  const Value inv = c.b.Rsqrt(c.b.Add(p[3], c.Full(eps, DType::kF32, dims)));
  const Value y = c.b.Add(c.b.Mul(c.b.Mul(c.b.Sub(x, p[2]), inv), p[0]), p[1]);
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

// Each (sample, channel) normalised over its spatial dims, then scaled and
// shifted per channel.
absl::Status InstanceNorm(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  if (dims.size() < 3) return absl::InvalidArgumentError("input [N, C, S...] expected");
  int64_t spatial = 1;
  for (size_t i = 2; i < dims.size(); ++i) spatial *= dims[i];
  const float eps = c.AttrFloat(n, "epsilon", 1e-5f);
  Value y = c.b.Normalize(c.b.Reshape(x, {dims[0] * dims[1], spatial}), c.Scalar(eps, DType::kF32));
  y = c.b.Reshape(y, dims);
  CW_ASSIGN_OR_RETURN(Value scale, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(Value bias, c.In(n, 2));
  y = c.b.Add(c.b.Mul(y, c.b.Broadcast(scale, dims, {1})), c.b.Broadcast(bias, dims, {1}));
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

template <bool kMax>
absl::Status GlobalPool(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  std::vector<int64_t> axes;
  int64_t count = 1;
  for (int64_t i = 2; i < static_cast<int64_t>(dims.size()); ++i) {
    axes.push_back(i);
    count *= dims[static_cast<size_t>(i)];
  }
  Value y = kMax ? c.b.ReduceMax(x, axes) : c.b.ReduceSum(x, axes);
  if (!kMax) y = c.b.Div(y, c.Full(static_cast<double>(count), DType::kF32, c.ShapeOf(y).dims));
  c.Set(n, 0, KeepDims(c, y, dims, axes), c.TypeOf(n, 0));
  return absl::OkStatus();
}

}  // namespace

void AddNnOps(OpTable& t) {
  t["MatMul"] = MatMul;
  t["Gemm"] = Gemm;
  t["ReduceSum"] = Reduce<Red::kSum>;
  t["ReduceMean"] = Reduce<Red::kMean>;
  t["ReduceMax"] = Reduce<Red::kMax>;
  t["ReduceMin"] = Reduce<Red::kMin>;
  t["ReduceL1"] = Reduce<Red::kL1>;
  t["ReduceL2"] = Reduce<Red::kL2>;
  t["ReduceSumSquare"] = Reduce<Red::kSumSquare>;
  t["ReduceLogSum"] = Reduce<Red::kLogSum>;
  t["ReduceLogSumExp"] = Reduce<Red::kLogSumExp>;
  t["ReduceProd"] = Reduce<Red::kProd>;
  t["ArgMax"] = ArgExtreme<true>;
  t["ArgMin"] = ArgExtreme<false>;
  t["CumSum"] = CumSum;
  t["Softmax"] = SoftmaxOp<0>;
  t["LogSoftmax"] = SoftmaxOp<1>;
  t["Hardmax"] = SoftmaxOp<2>;
  t["LayerNormalization"] = LayerNorm;
  t["BatchNormalization"] = BatchNorm;
  t["InstanceNormalization"] = InstanceNorm;
  t["GlobalAveragePool"] = GlobalPool<false>;
  t["GlobalMaxPool"] = GlobalPool<true>;
}

}  // namespace causeway::onnx_import
