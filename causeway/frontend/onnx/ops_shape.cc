// Ops that move or make data: reshapes, transposes, slices, concatenation,
// gathers, padding, tiling, and the constants and shapes a model computes
// when it is compiled.
#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using ir::DType;
using ir::Value;

int64_t Product(const std::vector<int64_t>& d, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < std::min(to, d.size()); ++i) p *= d[i];
  return p;
}

// Output 0 is input 0 with `dims` (same elements, row-major): a known
// input stays known.
absl::Status ReshapeTo(Converter& c, const Node& n, std::vector<int64_t> dims) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  if (Product(dims) != e->shape.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", e->shape.ToString(), " to [",
                                                   absl::StrJoin(dims, ","), "]"));
  }
  if (e->known.has_value() && !e->trainable) {
    HostTensor t = *e->known;
    ir::Literal l(ir::Shape(t.literal.shape().dtype, dims));
    std::copy(t.literal.data(), t.literal.data() + t.literal.byte_size(), l.data());
    t.literal = std::move(l);
    c.SetKnown(n, 0, std::move(t));
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  c.Set(n, 0, c.b.Reshape(x, std::move(dims)), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Reshape(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  std::vector<int64_t> shape;
  if (c.opset < 5) {
    shape = c.AttrInts(n, "shape").value_or(std::vector<int64_t>());
  } else {
    CW_ASSIGN_OR_RETURN(shape, c.Ints(n, 1));
  }
  const bool allowzero = c.AttrInt(n, "allowzero", 0) != 0;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= e->shape.dims.size()) return absl::InvalidArgumentError("0 past the input's rank");
      shape[i] = e->shape.dims[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) return absl::InvalidArgumentError("two -1 in the shape");
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[static_cast<size_t>(infer)] = known == 0 ? 0 : e->shape.num_elements() / known;
  return ReshapeTo(c, n, std::move(shape));
}

absl::Status Flatten(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  const auto& d = e->shape.dims;
  const auto rank = static_cast<int64_t>(d.size());
  int64_t axis = c.AttrInt(n, "axis", 1);
  if (axis < 0) axis += rank;  // in [-rank, rank]
  if (axis < 0 || axis > rank) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", axis, " outside rank ", rank));
  }
  return ReshapeTo(c, n, {Product(d, 0, static_cast<size_t>(axis)), Product(d, static_cast<size_t>(axis))});
}

absl::StatusOr<std::vector<int64_t>> AxesOf(Converter& c, const Node& n, int input, int64_t rank) {
  std::vector<int64_t> axes;
  if (c.opset >= 13 && c.Has(n, input)) {
    CW_ASSIGN_OR_RETURN(axes, c.Ints(n, input));
  } else if (auto a = c.AttrInts(n, "axes")) {
    axes = *a;
  }
  for (int64_t& a : axes) {
    CW_ASSIGN_OR_RETURN(a, Axis(a, rank));
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

absl::Status Squeeze(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  const auto& d = e->shape.dims;
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(c, n, 1, static_cast<int64_t>(d.size())));
  std::vector<int64_t> out;
  for (size_t i = 0; i < d.size(); ++i) {
    const bool listed = std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
    if (axes.empty() ? d[i] == 1 : listed) {
      if (d[i] != 1) return absl::InvalidArgumentError(absl::StrCat("axis ", i, " is not 1"));
      continue;
    }
    out.push_back(d[i]);
  }
  return ReshapeTo(c, n, std::move(out));
}

absl::Status Unsqueeze(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  const auto& d = e->shape.dims;
  std::vector<int64_t> raw;
  if (c.opset >= 13) {
    CW_ASSIGN_OR_RETURN(raw, c.Ints(n, 1));
  } else {
    raw = c.AttrInts(n, "axes").value_or(std::vector<int64_t>());
  }
  const auto rank = static_cast<int64_t>(d.size() + raw.size());
  std::vector<int64_t> axes;
  for (int64_t a : raw) {
    CW_ASSIGN_OR_RETURN(int64_t ax, Axis(a, rank));
    axes.push_back(ax);
  }
  std::vector<int64_t> out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
      out.push_back(1);
    } else {
      if (next >= d.size()) return absl::InvalidArgumentError("repeated axes");
      out.push_back(d[next++]);
    }
  }
  return ReshapeTo(c, n, std::move(out));
}

absl::Status Transpose(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const auto rank = static_cast<int64_t>(c.ShapeOf(x).rank());
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (auto p = c.AttrInts(n, "perm")) perm = *p;
  c.Set(n, 0, c.b.Transpose(x, perm), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Concat(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* first, c.Get(n, 0));
  const auto rank = static_cast<int64_t>(first->shape.rank());
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", 0), rank));
  bool known = rank == 1;
  for (int i = 0; i < n.input_size() && known; ++i) {
    absl::StatusOr<const Entry*> e = c.Get(n, i);
    known = e.ok() && (*e)->known.has_value() && !IsFloatType((*e)->onnx_type);
  }
  if (known) {  // shape arithmetic: 1-D integer vectors
    std::vector<int64_t> all;
    for (int i = 0; i < n.input_size(); ++i) {
      CW_ASSIGN_OR_RETURN(std::vector<int64_t> v, c.Ints(n, i));
      all.insert(all.end(), v.begin(), v.end());
    }
    const int64_t size = static_cast<int64_t>(all.size());
    c.SetKnown(n, 0, MakeInts(std::move(all), {size}, first->onnx_type));
    return absl::OkStatus();
  }
  std::vector<Value> in;
  for (int i = 0; i < n.input_size(); ++i) {
    CW_ASSIGN_OR_RETURN(Value v, c.In(n, i));
    if (c.ShapeOf(v).dims[static_cast<size_t>(axis)] > 0) in.push_back(v);
  }
  if (in.empty()) {
    CW_ASSIGN_OR_RETURN(Value v, c.In(n, 0));
    in.push_back(v);
  }
  c.Set(n, 0, in.size() == 1 ? in[0] : c.b.Concatenate(in, axis), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Slice(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  const auto& d = e->shape.dims;
  const auto rank = static_cast<int64_t>(d.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.AttrInts(n, "starts").value_or(std::vector<int64_t>());
    ends = c.AttrInts(n, "ends").value_or(std::vector<int64_t>());
    axes = c.AttrInts(n, "axes").value_or(std::vector<int64_t>());
  } else {
    CW_ASSIGN_OR_RETURN(starts, c.Ints(n, 1));
    CW_ASSIGN_OR_RETURN(ends, c.Ints(n, 2));
    if (c.Has(n, 3)) {
      CW_ASSIGN_OR_RETURN(axes, c.Ints(n, 3));
    }
    if (c.Has(n, 4)) {
      CW_ASSIGN_OR_RETURN(steps, c.Ints(n, 4));
    }
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (starts.size() != axes.size() || ends.size() != axes.size() ||
      (!steps.empty() && steps.size() != axes.size())) {
    return absl::InvalidArgumentError("starts, ends, axes and steps differ in length");
  }
  // Per dim: [lo, hi) with a positive step, read from the dim reversed when
  // the model's step is negative.
  std::vector<int64_t> lo(static_cast<size_t>(rank), 0), hi = d, step(static_cast<size_t>(rank), 1);
  std::vector<bool> reversed(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    CW_ASSIGN_OR_RETURN(int64_t a, Axis(axes[i], rank));
    const auto at = static_cast<size_t>(a);
    const int64_t s = steps.empty() ? 1 : steps[i];
    if (s == 0) return absl::InvalidArgumentError("a step of 0");
    const int64_t dim = d[at];
    const auto wrap = [dim](int64_t v) { return v < 0 ? v + dim : v; };
    if (s > 0) {
      lo[at] = std::clamp<int64_t>(wrap(starts[i]), 0, dim);
      hi[at] = std::max(lo[at], std::clamp<int64_t>(wrap(ends[i]), 0, dim));
    } else {
      // From start down to (excluding) end: in the reversed dim, from
      // dim - 1 - start up to dim - 1 - end.
      const int64_t first = std::clamp<int64_t>(wrap(starts[i]), 0, dim - 1);
      const int64_t last = std::clamp<int64_t>(wrap(ends[i]), -1, dim - 1);
      lo[at] = dim - 1 - first;
      hi[at] = std::max(lo[at], std::min(dim, dim - 1 - last));
      reversed[at] = true;
    }
    step[at] = s > 0 ? s : -s;
  }
  if (e->known.has_value() && !IsFloatType(e->onnx_type) && rank == 1) {
    std::vector<int64_t> v;
    for (int64_t j = lo[0]; j < hi[0]; j += step[0]) {
      v.push_back(e->known->ints[static_cast<size_t>(reversed[0] ? d[0] - 1 - j : j)]);
    }
    const auto size = static_cast<int64_t>(v.size());
    c.SetKnown(n, 0, MakeInts(std::move(v), {size}, e->onnx_type));
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  for (int64_t a = 0; a < rank; ++a) {
    const auto at = static_cast<size_t>(a);
    if (!reversed[at] || d[at] <= 1) continue;
    std::vector<int32_t> rev(static_cast<size_t>(d[at]));
    for (int64_t j = 0; j < d[at]; ++j) rev[static_cast<size_t>(j)] = static_cast<int32_t>(d[at] - 1 - j);
    x = c.b.Gather(x, c.b.Constant(ir::Literal::I32({d[at]}, rev)), a);
  }
  c.Set(n, 0, c.b.Slice(x, lo, hi, step), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Gather(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* data, c.Get(n, 0));
  CW_ASSIGN_OR_RETURN(const Entry* index, c.Get(n, 1));
  const auto rank = static_cast<int64_t>(data->shape.rank());
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", 0), rank));
  const int64_t dim = data->shape.dims[static_cast<size_t>(axis)];
  if (data->known.has_value() && !IsFloatType(data->onnx_type) && rank == 1 &&
      index->known.has_value()) {
    std::vector<int64_t> out;
    for (int64_t i : index->known->ints) {
      if (i < 0) i += dim;
      if (i < 0 || i >= dim) return absl::InvalidArgumentError(absl::StrCat("index ", i, " outside ", dim));
      out.push_back(data->known->ints[static_cast<size_t>(i)]);
    }
    c.SetKnown(n, 0, MakeInts(std::move(out), index->shape.dims, data->onnx_type));
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value idx, c.In(n, 1));
  c.Set(n, 0, c.b.Gather(x, c.WrapNegative(idx, dim), axis), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Expand(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.Ints(n, 1));
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                      Converter::BroadcastDims({c.ShapeOf(x).dims, shape}));
  CW_ASSIGN_OR_RETURN(Value y, c.BroadcastTo(x, dims));
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Tile(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, c.Ints(n, 1));
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  if (repeats.size() != d.size()) return absl::InvalidArgumentError("repeats do not match the rank");
  std::vector<int64_t> wide, map, out;
  for (size_t i = 0; i < d.size(); ++i) {
    wide.push_back(repeats[i]);
    wide.push_back(d[i]);
    map.push_back(static_cast<int64_t>(2 * i + 1));
    out.push_back(repeats[i] * d[i]);
  }
  c.Set(n, 0, c.b.Reshape(c.b.Broadcast(x, wide, map), out), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Pad(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  const std::string mode = c.AttrString(n, "mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect") {
    return absl::UnimplementedError(absl::StrCat("mode ", mode));
  }
  std::vector<int64_t> pads;
  Value value = c.Scalar(c.AttrFloat(n, "value", 0), c.ShapeOf(x).dtype);
  if (c.opset < 11) {
    pads = c.AttrInts(n, "pads").value_or(std::vector<int64_t>());
  } else {
    CW_ASSIGN_OR_RETURN(pads, c.Ints(n, 1));
    if (c.Has(n, 2)) {
      CW_ASSIGN_OR_RETURN(value, c.In(n, 2));
      if (c.ShapeOf(value).rank() > 0) value = c.b.Reshape(value, {});
    }
    if (c.Has(n, 3)) return absl::UnimplementedError("pads over given axes");
  }
  const size_t r = d.size();
  if (pads.size() != 2 * r) return absl::InvalidArgumentError("pads do not match the rank");
  std::vector<int64_t> lo(r), hi(r), cut_lo(r, 0), cut_hi(d);
  bool cut = false;
  for (size_t i = 0; i < r; ++i) {
    lo[i] = std::max<int64_t>(pads[i], 0);
    hi[i] = std::max<int64_t>(pads[i + r], 0);
    if (pads[i] < 0 || pads[i + r] < 0) cut = true;
    cut_lo[i] = std::max<int64_t>(-pads[i], 0);
    cut_hi[i] = d[i] - std::max<int64_t>(-pads[i + r], 0);
  }
  if (cut) x = c.b.Slice(x, cut_lo, cut_hi);
  if (mode == "constant") {
    c.Set(n, 0, c.b.Pad(x, value, lo, hi), c.TypeOf(n, 0));
    return absl::OkStatus();
  }
  // edge: the border element repeated; reflect: the elements next to the
  // border, mirrored. One dimension after the other.
  for (size_t i = 0; i < r; ++i) {
    if (lo[i] == 0 && hi[i] == 0) continue;
    const std::vector<int64_t> dims = c.ShapeOf(x).dims;
    const int64_t size = dims[i];
    const auto at = [&](int64_t k) {
      std::vector<int64_t> a(r, 0), b = dims;
      a[i] = k;
      b[i] = k + 1;
      return c.b.Slice(x, a, b);
    };
    if (mode == "reflect" && (lo[i] >= size || hi[i] >= size)) {
      return absl::InvalidArgumentError("reflect pads must be smaller than the dimension");
    }
    std::vector<Value> parts;
    for (int64_t k = lo[i]; k >= 1; --k) parts.push_back(mode == "edge" ? at(0) : at(k));
    parts.push_back(x);
    for (int64_t k = 1; k <= hi[i]; ++k) {
      parts.push_back(mode == "edge" ? at(size - 1) : at(size - 1 - k));
    }
    x = c.b.Concatenate(parts, static_cast<int64_t>(i));
  }
  c.Set(n, 0, x, c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Shape(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  const auto rank = static_cast<int64_t>(e->shape.rank());
  int64_t start = c.AttrInt(n, "start", 0), end = c.AttrInt(n, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> dims(e->shape.dims.begin() + start, e->shape.dims.begin() + end);
  const int64_t size = static_cast<int64_t>(dims.size());
  c.SetKnown(n, 0, MakeInts(std::move(dims), {size}));
  return absl::OkStatus();
}

absl::Status Size(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  c.SetKnown(n, 0, MakeInts({e->shape.num_elements()}, {}));
  return absl::OkStatus();
}

absl::Status Constant(Converter& c, const Node& n) {
  if (const auto* a = c.Attr(n, "value")) {
    CW_ASSIGN_OR_RETURN(HostTensor t, FromProto(a->t()));
    c.SetKnown(n, 0, std::move(t));
  } else if (const auto* a = c.Attr(n, "value_float")) {
    HostTensor t;
    t.onnx_type = kFloat;
    t.literal = ir::Literal::F32({}, {a->f()});
    c.SetKnown(n, 0, std::move(t));
  } else if (const auto* a = c.Attr(n, "value_floats")) {
    HostTensor t;
    t.onnx_type = kFloat;
    std::vector<float> v(a->floats().begin(), a->floats().end());
    t.literal = ir::Literal::F32({static_cast<int64_t>(v.size())}, v);
    c.SetKnown(n, 0, std::move(t));
  } else if (const auto* a = c.Attr(n, "value_int")) {
    c.SetKnown(n, 0, MakeInts({a->i()}, {}));
  } else if (const auto* a = c.Attr(n, "value_ints")) {
    std::vector<int64_t> v(a->ints().begin(), a->ints().end());
    const auto size = static_cast<int64_t>(v.size());
    c.SetKnown(n, 0, MakeInts(std::move(v), {size}));
  } else {
    return absl::UnimplementedError("a Constant of neither a tensor, floats nor ints");
  }
  return absl::OkStatus();
}

// Known when compiled (its shape is): shape arithmetic folds through it.
absl::Status ConstantOfShape(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.Ints(n, 0));
  HostTensor fill = MakeInts({0}, {1}, kFloat);
  if (const auto* a = c.Attr(n, "value")) {
    CW_ASSIGN_OR_RETURN(fill, FromProto(a->t()));
  }
  if (fill.literal.shape().num_elements() != 1) {
    return absl::InvalidArgumentError("value must hold one element");
  }
  const int64_t count = Product(dims);
  if (IsFloatType(fill.onnx_type)) {
    HostTensor t;
    t.onnx_type = fill.onnx_type;
    t.literal = ir::Literal::F32(dims, std::vector<float>(static_cast<size_t>(count),
                                                          fill.literal.values<float>()[0]));
    c.SetKnown(n, 0, std::move(t));
    return absl::OkStatus();
  }
  c.SetKnown(n, 0, MakeInts(std::vector<int64_t>(static_cast<size_t>(count), fill.ints[0]), dims,
                            fill.onnx_type));
  return absl::OkStatus();
}

absl::Status Range(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<float> start, c.Floats(n, 0));
  CW_ASSIGN_OR_RETURN(std::vector<float> limit, c.Floats(n, 1));
  CW_ASSIGN_OR_RETURN(std::vector<float> delta, c.Floats(n, 2));
  if (start.size() != 1 || limit.size() != 1 || delta.size() != 1 || delta[0] == 0) {
    return absl::InvalidArgumentError("start, limit and delta must be scalars, delta not 0");
  }
  const int32_t type = c.TypeOf(n, 0);
  const auto count = static_cast<int64_t>(
      std::max<double>(std::ceil((static_cast<double>(limit[0]) - start[0]) / delta[0]), 0));
  if (IsFloatType(type)) {
    std::vector<float> v;
    for (int64_t i = 0; i < count; ++i) v.push_back(start[0] + static_cast<float>(i) * delta[0]);
    HostTensor t;
    t.onnx_type = type;
    t.literal = ir::Literal::F32({count}, v);
    c.SetKnown(n, 0, std::move(t));
    return absl::OkStatus();
  }
  std::vector<int64_t> v;
  for (int64_t i = 0; i < count; ++i) {
    v.push_back(static_cast<int64_t>(start[0]) + i * static_cast<int64_t>(delta[0]));
  }
  c.SetKnown(n, 0, MakeInts(std::move(v), {count}, type));
  return absl::OkStatus();
}

absl::Status Split(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  CW_ASSIGN_OR_RETURN(int64_t axis, Axis(c.AttrInt(n, "axis", 0), static_cast<int64_t>(d.size())));
  std::vector<int64_t> sizes;
  if (c.opset >= 13 && c.Has(n, 1)) {
    CW_ASSIGN_OR_RETURN(sizes, c.Ints(n, 1));
  } else if (auto s = c.AttrInts(n, "split")) {
    sizes = *s;
  } else {
    const int64_t parts = n.output_size();
    const int64_t dim = d[static_cast<size_t>(axis)];
    const int64_t each = (dim + parts - 1) / parts;
    for (int64_t i = 0, left = dim; i < parts; ++i, left -= each) sizes.push_back(std::min(each, left));
  }
  std::vector<int64_t> lo(d.size(), 0), hi = d;
  int64_t at = 0;
  for (int i = 0; i < n.output_size() && i < static_cast<int>(sizes.size()); ++i) {
    lo[static_cast<size_t>(axis)] = at;
    hi[static_cast<size_t>(axis)] = at + sizes[static_cast<size_t>(i)];
    at += sizes[static_cast<size_t>(i)];
    c.Set(n, i, c.b.Slice(x, lo, hi), c.TypeOf(n, 0));
  }
  return absl::OkStatus();
}

absl::Status Trilu(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const ir::Shape s = c.ShapeOf(x);
  if (s.rank() < 2) return absl::InvalidArgumentError("rank below 2");
  int64_t k = 0;
  if (c.Has(n, 1)) {
    CW_ASSIGN_OR_RETURN(std::vector<int64_t> kv, c.Ints(n, 1));
    k = kv.empty() ? 0 : kv[0];
  }
  const ir::Shape index(DType::kI32, s.dims);
  const Value row = c.b.Iota(index, s.rank() - 2), col = c.b.Iota(index, s.rank() - 1);
  const Value diff = c.b.Sub(col, row);  // keep where col - row >= k (upper) or <= k
  const Value kk = c.Full(static_cast<double>(k), DType::kI32, s.dims);
  const bool upper = c.AttrInt(n, "upper", 1) != 0;
  const Value keep = c.b.Compare(diff, kk, upper ? ir::Comparison::kGe : ir::Comparison::kLe);
  c.Set(n, 0, c.b.Select(keep, x, c.Full(0, s.dtype, s.dims)), c.TypeOf(n, 0));
  return absl::OkStatus();
}

}  // namespace

void AddShapeOps(OpTable& t) {
  t["Reshape"] = Reshape;
  t["Flatten"] = Flatten;
  t["Squeeze"] = Squeeze;
  t["Unsqueeze"] = Unsqueeze;
  t["Transpose"] = Transpose;
  t["Concat"] = Concat;
  t["Slice"] = Slice;
  t["Gather"] = Gather;
  t["Expand"] = Expand;
  t["Tile"] = Tile;
  t["Pad"] = Pad;
  t["Shape"] = Shape;
  t["Size"] = Size;
  t["Constant"] = Constant;
  t["ConstantOfShape"] = ConstantOfShape;
  t["Range"] = Range;
  t["Split"] = Split;
  t["Trilu"] = Trilu;
}

}  // namespace causeway::onnx_import
