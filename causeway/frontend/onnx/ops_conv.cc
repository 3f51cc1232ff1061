// Convolution and pooling as compositions of the IR's ops: the input padded,
// one strided slice of it per kernel offset (a patch), and then, for Conv,
// the patches stacked and contracted with the weights in one dot_general
// per group (im2col); for MaxPool and AveragePool, the patches' maximum or
// mean. Every step is an IR op with a gradient, so the composition has one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
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

// `count` elements of `x` along `axis` from `start`, `stride` apart.
Value StridedSlice(Converter& c, Value x, int64_t axis, int64_t start, int64_t count,
                   int64_t stride) {
  std::vector<int64_t> d = c.ShapeOf(x).dims;
  std::vector<int64_t> lo(d.size(), 0), hi = d;
  lo[static_cast<size_t>(axis)] = start;
  hi[static_cast<size_t>(axis)] = std::min(d[static_cast<size_t>(axis)], start + count * stride);
  x = c.b.Slice(x, lo, hi);
  if (stride == 1) return x;
  d = c.ShapeOf(x).dims;
  const int64_t have = d[static_cast<size_t>(axis)];
  if (have < count * stride) {  // pad to whole strides (never read)
    std::vector<int64_t> plo(d.size(), 0), phi(d.size(), 0);
    phi[static_cast<size_t>(axis)] = count * stride - have;
    x = c.b.Pad(x, c.Scalar(0, c.ShapeOf(x).dtype), plo, phi);
    d = c.ShapeOf(x).dims;
  }
  std::vector<int64_t> split = d;
  split[static_cast<size_t>(axis)] = count;
  split.insert(split.begin() + axis + 1, stride);
  x = c.b.Reshape(x, split);
  std::vector<int64_t> slo(split.size(), 0), shi = split;
  shi[static_cast<size_t>(axis) + 1] = 1;
  x = c.b.Slice(x, slo, shi);
  split.erase(split.begin() + axis + 1);
  return c.b.Reshape(x, split);
}

// x [N, C, S...] padded (`pad_value`) as `w` says; every patch, one per
// kernel offset in row-major order, each [N, C, out...].
std::vector<Value> Patches(Converter& c, Value x, const Window& w, double pad_value) {
  const size_t k = w.kernel.size();
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  std::vector<int64_t> lo(d.size(), 0), hi(d.size(), 0);
  bool padded = false;
  for (size_t i = 0; i < k; ++i) {
    lo[i + 2] = w.pad_begin[i];
    hi[i + 2] = w.pad_end[i] + w.extra_end[i];
    padded = padded || lo[i + 2] > 0 || hi[i + 2] > 0;
  }
  if (padded) x = c.b.Pad(x, c.Scalar(pad_value, c.ShapeOf(x).dtype), lo, hi);
  std::vector<Value> patches;
  std::vector<int64_t> at(k, 0);
  while (true) {
    Value p = x;
    for (size_t i = 0; i < k; ++i) {
      p = StridedSlice(c, p, static_cast<int64_t>(i + 2), at[i] * w.dilations[i], w.out[i],
                       w.strides[i]);
    }
    patches.push_back(p);
    size_t i = k;
    while (i > 0 && ++at[i - 1] == w.kernel[i - 1]) at[--i] = 0;
    if (i == 0) break;
  }
  return patches;
}

// x [N, C, S...] convolved with wt [M, C/group, K...] over window `w`
// (kernel = K), plus bias [M] if given: [N, M, out...].
absl::StatusOr<Value> ConvCore(Converter& c, Value x, Value wt, std::optional<Value> bias,
                               const Window& w, int64_t group) {
  const std::vector<int64_t> xd = c.ShapeOf(x).dims, wd = c.ShapeOf(wt).dims;
  const int64_t N = xd[0], C = xd[1], M = wd[0];
  if (group < 1 || C % group != 0 || M % group != 0 || wd[1] != C / group) {
    return absl::InvalidArgumentError("channels do not fit the groups");
  }
  int64_t K = 1, P = 1;
  for (int64_t v : w.kernel) K *= v;
  for (int64_t v : w.out) P *= v;
  // [N, C, K, out...]: the patches side by side, then per group one
  // product of the weights [Mg, Cg K] with them [N, Cg K, P].
  std::vector<Value> patches = Patches(c, x, w, 0.0);
  std::vector<int64_t> one = c.ShapeOf(patches[0]).dims;
  one.insert(one.begin() + 2, 1);
  for (Value& p : patches) p = c.b.Reshape(p, one);
  const Value cols = patches.size() == 1 ? patches[0] : c.b.Concatenate(patches, 2);
  const int64_t cg = C / group, mg = M / group;
  std::vector<Value> outs;
  for (int64_t g = 0; g < group; ++g) {
    std::vector<int64_t> lo(one.size(), 0), hi = c.ShapeOf(cols).dims;
    lo[1] = g * cg;
    hi[1] = (g + 1) * cg;
    const Value cols_g = c.b.Reshape(c.b.Slice(cols, lo, hi), {N, cg * K, P});
    std::vector<int64_t> wlo(wd.size(), 0), whi = wd;
    wlo[0] = g * mg;
    whi[0] = (g + 1) * mg;
    const Value w_g = c.b.Reshape(c.b.Slice(wt, wlo, whi), {mg, cg * K});
    // [Mg, N, P] -> [N, Mg, P]
    outs.push_back(c.b.Transpose(c.b.DotGeneral(w_g, cols_g, {}, {}, {1}, {1}), {1, 0, 2}));
  }
  Value y = outs.size() == 1 ? outs[0] : c.b.Concatenate(outs, 1);
  std::vector<int64_t> yd = {N, M};
  yd.insert(yd.end(), w.out.begin(), w.out.end());
  y = c.b.Reshape(y, yd);
  if (bias.has_value()) y = c.b.Add(y, c.b.Broadcast(*bias, yd, {1}));
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

// The transposed convolution as a convolution: the input with stride - 1
// zeros between its elements, padded by the kernel's span less the pads,
// convolved (stride 1) with the kernel flipped and its channels swapped.
absl::Status ConvTranspose(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(ConvOperands o, ReadConvOperands(c, n, "[C, M/group, K...]"));
  Value x = o.x, wt = o.wt;
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
  // Zeros between the input's elements.
  for (size_t i = 0; i < k; ++i) {
    if (strides[i] == 1) continue;
    const auto axis = static_cast<int64_t>(i + 2);
    std::vector<int64_t> d = c.ShapeOf(x).dims, spread = d;
    spread.insert(spread.begin() + axis + 1, 1);
    x = c.b.Reshape(x, spread);
    std::vector<int64_t> lo(spread.size(), 0), hi(spread.size(), 0);
    hi[static_cast<size_t>(axis) + 1] = strides[i] - 1;
    x = c.b.Pad(x, c.Scalar(0, DType::kF32), lo, hi);
    d[static_cast<size_t>(axis)] *= strides[i];
    x = c.b.Reshape(x, d);
    std::vector<int64_t> slo(d.size(), 0), shi = d;
    shi[static_cast<size_t>(axis)] = (xd[i + 2] - 1) * strides[i] + 1;
    x = c.b.Slice(x, slo, shi);
  }
  // The flipped kernel, its channels swapped within each group:
  // [C, Mg, K...] -> [M, Cg, K...].
  for (size_t i = 0; i < k; ++i) {
    std::vector<int32_t> rev(static_cast<size_t>(kernel[i]));
    for (int64_t j = 0; j < kernel[i]; ++j) rev[static_cast<size_t>(j)] = static_cast<int32_t>(kernel[i] - 1 - j);
    wt = c.b.Gather(wt, c.b.Constant(ir::Literal::I32({kernel[i]}, rev)), static_cast<int64_t>(i + 2));
  }
  const int64_t cg = C / group;
  std::vector<int64_t> perm(wd.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[0], perm[1]);
  std::vector<Value> parts;
  for (int64_t g = 0; g < group; ++g) {
    std::vector<int64_t> lo(wd.size(), 0), hi = wd;
    lo[0] = g * cg;
    hi[0] = (g + 1) * cg;
    parts.push_back(c.b.Transpose(c.b.Slice(wt, lo, hi), perm));  // [Mg, Cg, K...]
  }
  wt = parts.size() == 1 ? parts[0] : c.b.Concatenate(parts, 0);
  // Padding of the spread input: the span less the pads (negative: cut).
  Window w;
  w.kernel = kernel;
  w.strides.assign(k, 1);
  w.dilations = dil;
  w.extra_end.assign(k, 0);
  std::vector<int64_t> spread = c.ShapeOf(x).dims;
  std::vector<int64_t> cut_lo(spread.size(), 0), cut_hi = spread;
  bool cut = false;
  for (size_t i = 0; i < k; ++i) {
    const int64_t span = (kernel[i] - 1) * dil[i] + 1;
    const int64_t before = span - 1 - pads[i], after = span - 1 - pads[i + k] + out_pad[i];
    w.pad_begin.push_back(std::max<int64_t>(before, 0));
    w.pad_end.push_back(std::max<int64_t>(after, 0));
    if (before < 0 || after < 0) cut = true;
    cut_lo[i + 2] = std::max<int64_t>(-before, 0);
    cut_hi[i + 2] = spread[i + 2] - std::max<int64_t>(-after, 0);
    const int64_t size = cut_hi[i + 2] - cut_lo[i + 2] + w.pad_begin[i] + w.pad_end[i];
    if (size < span) return absl::InvalidArgumentError("the output would be empty");
    w.out.push_back(size - span + 1);
  }
  if (cut) x = c.b.Slice(x, cut_lo, cut_hi);
  CW_ASSIGN_OR_RETURN(std::optional<Value> bias, c.InIfGiven(n, 2));
  CW_ASSIGN_OR_RETURN(Value y, ConvCore(c, x, wt, bias, w, group));
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
  if (c.ShapeOf(x).dtype != DType::kF32) return absl::UnimplementedError("pooling of integers");
  const std::vector<int64_t> spatial(xd.begin() + 2, xd.end());
  std::optional<std::vector<int64_t>> kernel = c.AttrInts(n, "kernel_shape");
  if (!kernel.has_value()) return absl::InvalidArgumentError("kernel_shape is required");
  CW_ASSIGN_OR_RETURN(Window w, MakeWindow(c, n, spatial, *kernel, true));
  const double lowest = -std::numeric_limits<float>::infinity();
  std::vector<Value> patches = Patches(c, x, w, kMax ? lowest : 0.0);
  Value y = patches[0];
  for (size_t i = 1; i < patches.size(); ++i) {
    y = kMax ? c.b.Max(y, patches[i]) : c.b.Add(y, patches[i]);
  }
  if (!kMax) {
    // Divided by the elements each window covers: the input's, and the
    // explicit padding's when count_include_pad (never ceil_mode's).
    const bool include_pad = c.AttrInt(n, "count_include_pad", 0) != 0;
    std::vector<int64_t> ones_dims = {1, 1};
    ones_dims.insert(ones_dims.end(), spatial.begin(), spatial.end());
    Value ones = c.Full(1, DType::kF32, ones_dims);
    Window inner = w;
    if (include_pad) {
      std::vector<int64_t> lo(ones_dims.size(), 0), hi(ones_dims.size(), 0);
      for (size_t i = 0; i < spatial.size(); ++i) {
        lo[i + 2] = w.pad_begin[i];
        hi[i + 2] = w.pad_end[i];
        inner.pad_begin[i] = inner.pad_end[i] = 0;
      }
      ones = c.b.Pad(ones, c.Scalar(1, DType::kF32), lo, hi);
    }
    std::vector<Value> counts = Patches(c, ones, inner, 0.0);
    Value count = counts[0];
    for (size_t i = 1; i < counts.size(); ++i) count = c.b.Add(count, counts[i]);
    CW_ASSIGN_OR_RETURN(count, c.BroadcastTo(count, c.ShapeOf(y).dims));
    y = c.b.Div(y, count);
  }
  c.Set(n, 0, y, c.TypeOf(n, 0));
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
