// Index arithmetic: GatherElements, ScatterElements, GatherND, ScatterND,
// TopK, OneHot, DepthToSpace, SpaceToDepth, and
// the losses that pick a class per element (NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss).
#include <numeric>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using ir::DType;
using ir::Value;

}  // namespace

namespace {

// For each element of idx (i32, in range, of data's rank): the offset in
// data (dims `dd`) of the element it names, its index along `axis` and its
// own coordinate along the others.
Value ElementOffsets(Converter& c, const std::vector<int64_t>& dd, Value idx, int64_t axis) {
  const std::vector<int64_t> id = c.ShapeOf(idx).dims;
  const std::vector<int64_t> strides = ir::RowMajorStrides(dd);
  Value offset = c.Full(0, DType::kI32, id);
  for (int64_t k = 0; k < static_cast<int64_t>(dd.size()); ++k) {
    const Value coord = k == axis ? idx : c.b.Iota(ir::Shape(DType::kI32, id), k);
    offset = c.b.Add(offset, c.b.Mul(coord, c.Full(static_cast<double>(strides[static_cast<size_t>(k)]),
                                                   DType::kI32, id)));
  }
  return offset;
}

}  // namespace

Value GatherAlong(Converter& c, Value data, Value idx, int64_t axis) {
  const std::vector<int64_t> dd = c.ShapeOf(data).dims;
  const int64_t total = ir::Shape(DType::kI32, dd).num_elements();
  return c.b.Gather(c.b.Reshape(data, {total}), ElementOffsets(c, dd, idx, axis), 0);
}

namespace {

absl::Status GatherElements(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value data, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value idx, c.In(n, 1));
  const std::vector<int64_t> dd = c.ShapeOf(data).dims, id = c.ShapeOf(idx).dims;
  if (dd.size() != id.size()) return absl::InvalidArgumentError("ranks of data and indices differ");
  const auto rank = static_cast<int64_t>(dd.size());
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", 0), rank));
  if (c.ShapeOf(idx).dtype != DType::kI32) return absl::InvalidArgumentError("indices must be integers");
  idx = c.WrapNegative(idx, dd[static_cast<size_t>(axis)]);
  c.Set(n, 0, GatherAlong(c, data, idx, axis), c.TypeOf(n, 0));
  return absl::OkStatus();
}

// `out` = `data` with the places `hit` (pred, data's dims) taken from
// `sums` (a scatter_add into zeros): ONNX's reduction "none".
Value Replace(Converter& c, Value data, Value hits, Value sums) {
  const ir::Shape s = c.ShapeOf(hits);
  const Value hit = c.b.Compare(hits, c.Full(0, s.dtype, s.dims), ir::Comparison::kGt);
  return c.b.Select(hit, sums, data);
}

// A scatter of `updates` [M, inner] into rows `rows` (i32 [M]) of `table`
// [R, inner] with ONNX's reduction ("none": replaced, "add": added).
absl::StatusOr<Value> ScatterRows(Converter& c, Value table, Value rows, Value updates,
                                  const std::string& reduction) {
  const std::vector<int64_t> td = c.ShapeOf(table).dims;
  if (reduction == "add") return c.b.ScatterAdd(table, rows, updates, 0);
  if (reduction != "none") return absl::UnimplementedError(absl::StrCat("reduction ", reduction));
  const ir::DType dt = c.ShapeOf(table).dtype;
  const Value sums = c.b.ScatterAdd(c.Full(0, dt, td), rows, updates, 0);
  const int64_t m = c.ShapeOf(rows).dims[0];
  const Value hits = c.b.ScatterAdd(c.Full(0, ir::DType::kI32, {td[0]}), rows,
                                    c.Full(1, ir::DType::kI32, {m}), 0);
  return Replace(c, table, c.b.Broadcast(hits, td, {0}), sums);
}

// ScatterElements (and Scatter, its old name): updates placed at indices
// along an axis, element by element, as flat rows of one element.
absl::Status ScatterElements(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value data, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value idx, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(Value updates, c.In(n, 2));
  const std::vector<int64_t> dd = c.ShapeOf(data).dims, id = c.ShapeOf(idx).dims;
  if (dd.size() != id.size() || c.ShapeOf(updates).dims != id) {
    return absl::InvalidArgumentError("data, indices and updates must have one rank, "
                                      "indices and updates one shape");
  }
  if (c.ShapeOf(idx).dtype != DType::kI32) return absl::InvalidArgumentError("indices must be integers");
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", 0), static_cast<int64_t>(dd.size())));
  idx = c.WrapNegative(idx, dd[static_cast<size_t>(axis)]);
  const Value offset = ElementOffsets(c, dd, idx, axis);
  const int64_t total = ir::Shape(DType::kI32, dd).num_elements();
  const int64_t m = ir::Shape(DType::kI32, id).num_elements();
  CW_ASSIGN_OR_RETURN(Value out, ScatterRows(c, c.b.Reshape(data, {total, 1}), c.b.Reshape(offset, {m}),
                                             c.b.Reshape(updates, {m, 1}),
                                             c.AttrString(n, "reduction", "none")));
  c.Set(n, 0, c.b.Reshape(out, dd), c.TypeOf(n, 0));
  return absl::OkStatus();
}

// GatherND and ScatterND (batch_dims 0): indices [..., k] name slices of
// data's first k dims, as rows of data viewed [prod(first k), rest].
struct NdRows {
  Value table, rows;
  std::vector<int64_t> slice;  // data's dims past k
  int64_t m = 0;               // index tuples
};
absl::StatusOr<NdRows> RowsOf(Converter& c, Value data, Value idx) {
  const std::vector<int64_t> dd = c.ShapeOf(data).dims, id = c.ShapeOf(idx).dims;
  if (id.empty() || c.ShapeOf(idx).dtype != DType::kI32) {
    return absl::InvalidArgumentError("indices must be integers of rank at least 1");
  }
  const int64_t k = id.back();
  if (k < 1 || k > static_cast<int64_t>(dd.size())) {
    return absl::InvalidArgumentError(absl::StrCat("index tuples of ", k, " for data of rank ", dd.size()));
  }
  NdRows r;
  r.m = ir::Shape(DType::kI32, std::vector<int64_t>(id.begin(), id.end() - 1)).num_elements();
  const Value tuples = c.b.Reshape(idx, {r.m, k});
  int64_t rows = 1;
  for (int64_t j = 0; j < k; ++j) rows *= dd[static_cast<size_t>(j)];
  Value flat = c.Full(0, DType::kI32, {r.m});
  int64_t stride = rows;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t dim = dd[static_cast<size_t>(j)];
    stride /= dim;
    const Value col = c.WrapNegative(c.b.Reshape(c.b.Slice(tuples, {0, j}, {r.m, j + 1}), {r.m}), dim);
    flat = c.b.Add(flat, c.b.Mul(col, c.Full(static_cast<double>(stride), DType::kI32, {r.m})));
  }
  r.slice.assign(dd.begin() + k, dd.end());
  const int64_t inner = ir::Shape(DType::kI32, r.slice).num_elements();
  r.table = c.b.Reshape(data, {rows, inner});
  r.rows = flat;
  return r;
}

absl::Status GatherND(Converter& c, const Node& n) {
  if (c.AttrInt(n, "batch_dims", 0) != 0) return absl::UnimplementedError("batch_dims other than 0");
  CW_ASSIGN_OR_RETURN(Value data, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value idx, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(NdRows r, RowsOf(c, data, idx));
  std::vector<int64_t> out = c.ShapeOf(idx).dims;
  out.pop_back();
  out.insert(out.end(), r.slice.begin(), r.slice.end());
  c.Set(n, 0, c.b.Reshape(c.b.Gather(r.table, r.rows, 0), out), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status ScatterND(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value data, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value idx, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(Value updates, c.In(n, 2));
  CW_ASSIGN_OR_RETURN(NdRows r, RowsOf(c, data, idx));
  const int64_t inner = c.ShapeOf(r.table).dims[1];
  if (c.ShapeOf(updates).num_elements() != r.m * inner) {
    return absl::InvalidArgumentError("updates do not match the indices' slices");
  }
  CW_ASSIGN_OR_RETURN(Value out, ScatterRows(c, r.table, r.rows, c.b.Reshape(updates, {r.m, inner}),
                                             c.AttrString(n, "reduction", "none")));
  c.Set(n, 0, c.b.Reshape(out, c.ShapeOf(data).dims), c.TypeOf(n, 0));
  return absl::OkStatus();
}

// The k largest (or smallest) along an axis, sorted, ties in index order:
// the IR's argsort, its first k, and the values there.
absl::Status TopK(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  const auto rank = static_cast<int64_t>(d.size());
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", -1), rank));
  int64_t k = c.AttrInt(n, "k", -1);
  if (c.opset >= 10) {
    CW_ASSIGN_OR_RETURN(std::vector<int64_t> kv, c.Ints(n, 1));
    if (kv.size() != 1) return absl::InvalidArgumentError("K must hold one value");
    k = kv[0];
  }
  const int64_t dim = d[static_cast<size_t>(axis)];
  if (k < 0 || k > dim) {
    return absl::InvalidArgumentError(absl::StrCat("k = ", k, " for an axis of ", dim));
  }
  const bool largest = c.AttrInt(n, "largest", 1) != 0;
  std::vector<int64_t> lo(d.size(), 0), hi = d;
  hi[static_cast<size_t>(axis)] = k;
  const Value idx = c.b.Slice(c.b.ArgSort(x, axis, largest), lo, hi);
  c.Set(n, 0, GatherAlong(c, x, idx, axis), c.TypeOf(n, 0));
  c.Set(n, 1, idx, kInt64);
  return absl::OkStatus();
}

absl::Status OneHot(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value idx, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(std::vector<float> depth_v, c.Floats(n, 1));
  CW_ASSIGN_OR_RETURN(Value values, c.In(n, 2));
  if (depth_v.size() != 1) return absl::InvalidArgumentError("depth must hold one value");
  const auto depth = static_cast<int64_t>(depth_v[0]);
  if (c.ShapeOf(idx).dtype != DType::kI32) idx = c.b.Convert(idx, DType::kI32);
  idx = c.WrapNegative(idx, depth);
  const std::vector<int64_t> id = c.ShapeOf(idx).dims;
  CW_ASSIGN_OR_RETURN(int64_t axis,
                      Axis(c.AttrInt(n, "axis", -1), static_cast<int64_t>(id.size()) + 1));
  std::vector<int64_t> out = id;
  out.insert(out.begin() + axis, depth);
  const Value hit = c.b.Compare(c.b.Iota(ir::Shape(DType::kI32, out), axis),
                                c.BroadcastBack(idx, out, {axis}), ir::Comparison::kEq);
  const Value off = c.b.Reshape(c.b.Slice(values, {0}, {1}), {});
  const Value on = c.b.Reshape(c.b.Slice(values, {1}, {2}), {});
  c.Set(n, 0, c.b.Select(hit, c.Splat(on, out), c.Splat(off, out)), c.TypeOf(n, 2));
  return absl::OkStatus();
}

template <bool kToSpace>
absl::Status DepthSpace(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  if (d.size() != 4) return absl::InvalidArgumentError("input must be [N, C, H, W]");
  const int64_t b = c.AttrInt(n, "blocksize", 0);
  if (b < 1) return absl::InvalidArgumentError("blocksize must be positive");
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  Value y;
  if (kToSpace) {
    if (C % (b * b) != 0) return absl::InvalidArgumentError("channels not divisible by blocksize^2");
    const bool crd = c.AttrString(n, "mode", "DCR") == "CRD";
    const int64_t co = C / (b * b);
    y = crd ? c.b.Transpose(c.b.Reshape(x, {N, co, b, b, H, W}), {0, 1, 4, 2, 5, 3})
            : c.b.Transpose(c.b.Reshape(x, {N, b, b, co, H, W}), {0, 3, 4, 1, 5, 2});
    y = c.b.Reshape(y, {N, co, H * b, W * b});
  } else {
    if (H % b != 0 || W % b != 0) return absl::InvalidArgumentError("H or W not divisible by blocksize");
    y = c.b.Transpose(c.b.Reshape(x, {N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
    y = c.b.Reshape(y, {N, C * b * b, H / b, W / b});
  }
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

// The negative log-likelihood of `x` ([N, C, d...], f32) at `target`
// ([N, d...], i32), with optional per-class `weight`, reduced as
// `reduction` says.
absl::StatusOr<Value> Nll(Converter& c, const Node& n, Value x, Value target,
                          std::optional<Value> weight) {
  const std::vector<int64_t> xd = c.ShapeOf(x).dims;
  if (xd.size() < 2) return absl::InvalidArgumentError("input must be [N, C, ...]");
  if (c.ShapeOf(target).dtype != DType::kI32) return absl::InvalidArgumentError("target must be integers");
  const std::vector<int64_t> td = c.ShapeOf(target).dims;
  if (td.size() + 1 != xd.size()) return absl::InvalidArgumentError("target's rank must be input's - 1");
  const Value hit = c.b.Compare(c.b.Iota(ir::Shape(DType::kI32, xd), 1),
                                c.BroadcastBack(target, xd, {1}), ir::Comparison::kEq);
  const Value zeros = c.Full(0, DType::kF32, xd);
  const Value picked = c.b.ReduceSum(c.b.Select(hit, x, zeros), {1});
  Value w = weight.has_value()
                ? c.b.ReduceSum(c.b.Select(hit, c.b.Broadcast(*weight, xd, {1}), zeros), {1})
                : c.Full(1, DType::kF32, td);
  if (const auto* ignore = c.Attr(n, "ignore_index")) {
    const Value keep = c.b.Compare(target, c.Full(static_cast<double>(ignore->i()), DType::kI32, td),
                                   ir::Comparison::kNe);
    w = c.b.Select(keep, w, c.Full(0, DType::kF32, td));
  }
  const Value loss = c.b.Neg(c.b.Mul(picked, w));
  const std::string reduction = c.AttrString(n, "reduction", "mean");
  std::vector<int64_t> all(td.size());
  std::iota(all.begin(), all.end(), 0);
  if (reduction == "none") return loss;
  const Value sum = c.b.ReduceSum(loss, all);
  if (reduction == "sum") return sum;
  if (reduction == "mean") return c.b.Div(sum, c.b.ReduceSum(w, all));
  return absl::InvalidArgumentError(absl::StrCat("reduction ", reduction));
}

absl::Status NegativeLogLikelihoodLoss(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value target, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(std::optional<Value> weight, c.InIfGiven(n, 2));
  CW_ASSIGN_OR_RETURN(Value loss, Nll(c, n, x, target, weight));
  c.Set(n, 0, loss, c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status SoftmaxCrossEntropyLoss(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value labels, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(std::optional<Value> weight, c.InIfGiven(n, 2));
  const std::vector<int64_t> xd = c.ShapeOf(x).dims;
  if (xd.size() < 2) return absl::InvalidArgumentError("scores must be [N, C, ...]");
  const Value log_prob = c.LogSoftmax(x, {1});  // over the classes
  CW_ASSIGN_OR_RETURN(Value loss, Nll(c, n, log_prob, labels, weight));
  c.Set(n, 0, loss, c.TypeOf(n, 0));
  c.Set(n, 1, log_prob, c.TypeOf(n, 0));
  return absl::OkStatus();
}

}  // namespace

void AddIndexOps(OpTable& t) {
  t["GatherElements"] = GatherElements;
  t["TopK"] = TopK;
  t["ScatterElements"] = ScatterElements;
  t["Scatter"] = ScatterElements;
  t["GatherND"] = GatherND;
  t["ScatterND"] = ScatterND;
  t["OneHot"] = OneHot;
  t["DepthToSpace"] = DepthSpace<true>;
  t["SpaceToDepth"] = DepthSpace<false>;
  t["NegativeLogLikelihoodLoss"] = NegativeLogLikelihoodLoss;
  t["SoftmaxCrossEntropyLoss"] = SoftmaxCrossEntropyLoss;
}

}  // namespace causeway::onnx_import
