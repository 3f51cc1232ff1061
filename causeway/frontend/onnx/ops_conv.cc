// Convolution as the IR's convolution ops (Conv as kConvolution,
// ConvTranspose as kConvInputGrad), and pooling as a composition of IR
// ops: the input padded once, one strided slice of it per kernel offset (a
// patch), and the patches' maximum or mean. Each has a gradient.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using ir::DType;
using ir::Value;

// The geometry of a window over the spatial dims (2.. of [N, C, S...]).
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end, out;
  // Padding past pad_end that ceil_mode adds (never counted by an average).
  std::vector<int64_t> extra_end;
};

absl::StatusOr<Window> MakeWindow(Converter& c, const Node& n, const std::vector<int64_t>& spatial,
                                  std::vector<int64_t> kernel, bool pool) {
  const size_t k = spatial.size();
  Window w;
  w.kernel = std::move(kernel);
  w.strides = c.AttrInts(n, "strides").value_or(std::vector<int64_t>(k, 1));
  w.dilations = c.AttrInts(n, "dilations").value_or(std::vector<int64_t>(k, 1));
  std::vector<int64_t> pads = c.AttrInts(n, "pads").value_or(std::vector<int64_t>(2 * k, 0));
  if (w.kernel.size() != k || w.strides.size() != k || w.dilations.size() != k || pads.size() != 2 * k) {
    return absl::InvalidArgumentError("kernel_shape, strides, dilations or pads do not match the rank");
  }
  const std::string auto_pad = c.AttrString(n, "auto_pad", "NOTSET");
  const bool ceil_mode = pool && c.AttrInt(n, "ceil_mode", 0) != 0;
  w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(k));
  w.pad_end.assign(pads.begin() + static_cast<int64_t>(k), pads.end());
  w.extra_end.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    if (w.strides[i] < 1 || w.dilations[i] < 1 || w.kernel[i] < 1) {
      return absl::InvalidArgumentError("kernel, strides and dilations must be positive");
    }
    const int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t o = (spatial[i] + w.strides[i] - 1) / w.strides[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * w.strides[i] + span - spatial[i]);
      const int64_t small = total / 2;
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.pad_end[i] = total - w.pad_begin[i];
    } else if (auto_pad == "VALID") {
      w.pad_begin[i] = w.pad_end[i] = 0;
    } else if (auto_pad != "NOTSET") {
      return absl::InvalidArgumentError(absl::StrCat("auto_pad ", auto_pad));
    }
    const int64_t room = spatial[i] + w.pad_begin[i] + w.pad_end[i] - span;
    if (room < 0) return absl::InvalidArgumentError("the kernel is larger than the padded input");
    int64_t o = room / w.strides[i] + 1;
    if (ceil_mode && room % w.strides[i] != 0) {
      ++o;
      // The last window must start inside the input or its begin padding.
      if ((o - 1) * w.strides[i] >= spatial[i] + w.pad_begin[i]) --o;
    }
    w.out.push_back(o);
    w.extra_end[i] =
        std::max<int64_t>(0, (o - 1) * w.strides[i] + span - (spatial[i] + w.pad_begin[i] + w.pad_end[i]));
  }
  return w;
}

// x [N, C, S...] convolved with wt [M, C/group, K...] over window `w`
// (kernel = K), plus bias [M] if given: [N, M, out...], by the IR's
// convolution.
absl::StatusOr<Value> ConvCore(Converter& c, Value x, Value wt, std::optional<Value> bias,
                               const Window& w, int64_t group) {
  const std::vector<int64_t> xd = c.ShapeOf(x).dims, wd = c.ShapeOf(wt).dims;
  const int64_t C = xd[1], M = wd[0];
  if (group < 1 || C % group != 0 || M % group != 0 || wd[1] != C / group) {
    return absl::InvalidArgumentError("channels do not fit the groups");
  }
  Value y = c.b.Convolution(x, wt, ir::ConvSpec{w.strides, w.dilations, w.pad_begin, w.pad_end,
                                                group});
  if (bias.has_value()) {
    const std::vector<int64_t> yd = c.ShapeOf(y).dims;
    y = c.b.Add(y, c.b.Broadcast(*bias, yd, {1}));
  }
  return y;
}

// A convolution's input [N, C, S...] and weights (`weights` says their
// layout), both float, of the same rank of at least 3.
struct ConvOperands {
  Value x, wt;
  std::vector<int64_t> xd, wd;
};
absl::StatusOr<ConvOperands> ReadConvOperands(Converter& c, const Node& n, const char* weights) {
  ConvOperands o;
  CW_ASSIGN_OR_RETURN(o.x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(o.wt, c.In(n, 1));
  o.xd = c.ShapeOf(o.x).dims;
  o.wd = c.ShapeOf(o.wt).dims;
  if (o.xd.size() < 3 || o.wd.size() != o.xd.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input [N, C, S...] and weights ", weights, " expected"));
  }
  if (c.ShapeOf(o.x).dtype != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat(n.op_type(), " of integers"));
  }
  return o;
}

absl::Status Conv(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(ConvOperands o, ReadConvOperands(c, n, "[M, C/group, K...]"));
  const Value x = o.x, wt = o.wt;
  const std::vector<int64_t>& xd = o.xd;
  const std::vector<int64_t>& wd = o.wd;
  const std::vector<int64_t> spatial(xd.begin() + 2, xd.end());
  const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  CW_ASSIGN_OR_RETURN(Window w, MakeWindow(c, n, spatial, kernel, false));
  CW_ASSIGN_OR_RETURN(std::optional<Value> bias, c.InIfGiven(n, 2));
  CW_ASSIGN_OR_RETURN(Value y, ConvCore(c, x, wt, bias, w, c.AttrInt(n, "group", 1)));
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

// The transposed convolution: the IR's gradient of a convolution against its
// input.
absl::Status ConvTranspose(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(ConvOperands o, ReadConvOperands(c, n, "[C, M/group, K...]"));
  const Value x = o.x, wt = o.wt;
  const std::vector<int64_t>& xd = o.xd;
  const std::vector<int64_t>& wd = o.wd;
  const size_t k = xd.size() - 2;
  const int64_t group = c.AttrInt(n, "group", 1);
  const int64_t C = xd[1];
  if (group < 1 || C % group != 0 || wd[0] != C) {
    return absl::InvalidArgumentError("channels do not fit the groups");
  }
  const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  const auto strides = c.AttrInts(n, "strides").value_or(std::vector<int64_t>(k, 1));
  const auto dil = c.AttrInts(n, "dilations").value_or(std::vector<int64_t>(k, 1));
  const auto out_pad = c.AttrInts(n, "output_padding").value_or(std::vector<int64_t>(k, 0));
  std::vector<int64_t> pads = c.AttrInts(n, "pads").value_or(std::vector<int64_t>(2 * k, 0));
  const auto out_shape = c.AttrInts(n, "output_shape");
  const std::string auto_pad = c.AttrString(n, "auto_pad", "NOTSET");
  if (strides.size() != k || dil.size() != k || out_pad.size() != k || pads.size() != 2 * k) {
    return absl::InvalidArgumentError("strides, dilations, output_padding or pads do not match");
  }
  for (size_t i = 0; i < k; ++i) {
    if (strides[i] < 1 || dil[i] < 1) return absl::InvalidArgumentError("strides and dilations must be positive");
    const int64_t span = (kernel[i] - 1) * dil[i] + 1;
    const int64_t full = strides[i] * (xd[i + 2] - 1) + out_pad[i] + span;
    // The padding an output shape implies (negative: more output at the end).
    std::optional<int64_t> total;
    if (out_shape.has_value()) {
      const auto& os = *out_shape;
      const int64_t want = os.size() == k ? os[i] : os.size() == k + 2 ? os[i + 2] : -1;
      if (want < 0) return absl::InvalidArgumentError("output_shape does not match the rank");
      total = full - want;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      total = full - xd[i + 2] * strides[i];
    }
    if (total.has_value()) {
      const int64_t t = *total;
      const int64_t half = t >= 0 ? t / 2 : -((-t + 1) / 2);  // floor(t / 2)
      pads[i] = auto_pad == "SAME_UPPER" ? half : t - half;
      pads[i + k] = t - pads[i];
    } else if (auto_pad == "VALID") {
      pads[i] = pads[i + k] = 0;
    }
  }
  // The gradient of a convolution whose input is this op's output and whose
  // output is this op's input (ir::OpKind::kConvInputGrad).
  std::vector<int64_t> yd = {xd[0], wd[1] * group};
  for (size_t i = 0; i < k; ++i) {
    const int64_t span = (kernel[i] - 1) * dil[i] + 1;
    const int64_t size = strides[i] * (xd[i + 2] - 1) + out_pad[i] + span - pads[i] - pads[i + k];
    if (size < 1) return absl::InvalidArgumentError("the output would be empty");
    yd.push_back(size);
  }
  const std::vector<int64_t> pad_low(pads.begin(), pads.begin() + static_cast<int64_t>(k));
  Value y = c.b.ConvInputGrad(x, wt, yd, ir::ConvSpec{strides, dil, pad_low, {}, group});
  CW_ASSIGN_OR_RETURN(std::optional<Value> bias, c.InIfGiven(n, 2));
  if (bias.has_value()) y = c.b.Add(y, c.b.Broadcast(*bias, yd, {1}));
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

template <bool kMax>
absl::Status Pool(Converter& c, const Node& n) {
  if (n.output_size() > 1 && !n.output(1).empty()) {
    return absl::UnimplementedError("MaxPool's Indices output");
  }
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> xd = c.ShapeOf(x).dims;
  if (xd.size() < 3) return absl::InvalidArgumentError("input [N, C, S...] expected");
  // int8 and uint8 (MaxPool's integer types, held as i32) are pooled in
  // f32, which holds every such value exactly.
  const int32_t type = c.TypeOf(n, 0);
  const bool narrow =
      kMax && (type == ::onnx::TensorProto::UINT8 || type == ::onnx::TensorProto::INT8);
  if (narrow && c.ShapeOf(x).dtype == DType::kI32) x = c.b.Convert(x, DType::kF32);
  if (c.ShapeOf(x).dtype != DType::kF32) {
    return absl::UnimplementedError(kMax ? "max pooling of integers other than int8 and uint8"
                                         : "average pooling of integers");
  }
  const std::vector<int64_t> spatial(xd.begin() + 2, xd.end());
  std::optional<std::vector<int64_t>> kernel = c.AttrInts(n, "kernel_shape");
  if (!kernel.has_value()) return absl::InvalidArgumentError("kernel_shape is required");
  CW_ASSIGN_OR_RETURN(Window w, MakeWindow(c, n, spatial, *kernel, true));
  // One pooling op, ceil_mode's extra windows as more padding at the end.
  const auto spec = [&](bool explicit_pads) {
    ir::ConvSpec s{w.strides, w.dilations, w.pad_begin, w.pad_end, 1};
    for (size_t i = 0; i < spatial.size(); ++i) {
      if (!explicit_pads) s.pad_low[i] = s.pad_high[i] = 0;
      s.pad_high[i] += w.extra_end[i];
    }
    return s;
  };
  const ir::ReduceKind kind = kMax ? ir::ReduceKind::kMax : ir::ReduceKind::kSum;
  Value y = c.b.Pool(x, kind, w.kernel, spec(true));
  if (!kMax) {
    // Divided by the elements each window covers: the input's, and the
    // explicit padding's when count_include_pad (never ceil_mode's).
    const bool include_pad = c.AttrInt(n, "count_include_pad", 0) != 0;
    std::vector<int64_t> ones_dims = {1, 1};
    ones_dims.insert(ones_dims.end(), spatial.begin(), spatial.end());
    Value ones = c.Full(1, DType::kF32, ones_dims);
    if (include_pad) {
      std::vector<int64_t> lo(ones_dims.size(), 0), hi(ones_dims.size(), 0);
      for (size_t i = 0; i < spatial.size(); ++i) {
        lo[i + 2] = w.pad_begin[i];
        hi[i + 2] = w.pad_end[i];
      }
      ones = c.b.Pad(ones, c.Scalar(1, DType::kF32), lo, hi);
    }
    Value count = c.b.Pool(ones, ir::ReduceKind::kSum, w.kernel, spec(!include_pad));
    CW_ASSIGN_OR_RETURN(count, c.BroadcastTo(count, c.ShapeOf(y).dims));
    y = c.b.Div(y, count);
  }
  if (narrow) y = c.b.Convert(y, DType::kI32);
  c.Set(n, 0, y, type);
  return absl::OkStatus();
}

}  // namespace

void AddConvOps(OpTable& t) {
  t["Conv"] = Conv;
  t["ConvTranspose"] = ConvTranspose;
  t["MaxPool"] = Pool<true>;
  t["AveragePool"] = Pool<false>;
}

}  // namespace causeway::onnx_import
