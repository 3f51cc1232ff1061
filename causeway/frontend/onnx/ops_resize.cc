// Resize (and the older Upsample): nearest and linear, one axis after the
// other, with the source positions of every output element computed when the
// model is compiled (shapes are static): a gather of constant indices per
// axis, and for linear a second gather and constant weights, as ONNX's
// reference interpolates (neighbours past the edge are the edge).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using ir::DType;
using ir::Value;

// The source coordinate of output element x along an axis of `in` elements
// resized with `scale` (out / in when sizes were given). As ONNX's reference,
// the resized length in the formulas is scale * in, not rounded.
absl::StatusOr<double> SourceOf(const std::string& mode, double x, int64_t in, double scale) {
  const double resized = scale * static_cast<double>(in);
  if (mode == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (mode == "pytorch_half_pixel") return resized > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners") {
    return resized == 1 ? 0.0 : x * static_cast<double>(in - 1) / (resized - 1);
  }
  if (mode == "asymmetric") return x / scale;
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  return absl::UnimplementedError(absl::StrCat("coordinate_transformation_mode ", mode));
}

absl::StatusOr<int64_t> Nearest(const std::string& mode, double x) {
  if (mode == "round_prefer_floor") return static_cast<int64_t>(std::ceil(x - 0.5));
  if (mode == "round_prefer_ceil") return static_cast<int64_t>(std::floor(x + 0.5));
  if (mode == "floor") return static_cast<int64_t>(std::floor(x));
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(x));
  return absl::UnimplementedError(absl::StrCat("nearest_mode ", mode));
}

absl::Status Resize(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> in = c.ShapeOf(x).dims;
  const size_t rank = in.size();
  const bool upsample = n.op_type() == "Upsample";
  const bool old = upsample || c.opset < 11;
  const std::string mode = c.AttrString(n, "mode", "nearest");
  if (mode != "nearest" && mode != "linear") return absl::UnimplementedError(absl::StrCat("mode ", mode));
  const std::string coords =
      old ? "asymmetric" : c.AttrString(n, "coordinate_transformation_mode", "half_pixel");
  const std::string rounding = old ? "floor" : c.AttrString(n, "nearest_mode", "round_prefer_floor");
  // Scales (input 1 before opset 11, else 2) or sizes (input 3).
  std::vector<float> scales;
  std::vector<int64_t> out;
  const int scales_input = old ? 1 : 2;
  if (upsample && c.opset < 9) {
    const auto* a = c.Attr(n, "scales");
    if (a == nullptr) return absl::InvalidArgumentError("scales is required");
    scales.assign(a->floats().begin(), a->floats().end());
  } else if (c.Has(n, scales_input)) {
    CW_ASSIGN_OR_RETURN(scales, c.Floats(n, scales_input));
  }
  if (!old && c.Has(n, 3)) {
    CW_ASSIGN_OR_RETURN(out, c.Ints(n, 3));
    scales.clear();
    for (size_t i = 0; i < out.size() && i < rank; ++i) {
      scales.push_back(static_cast<float>(static_cast<double>(out[i]) / static_cast<double>(in[i])));
    }
  } else {
    for (size_t i = 0; i < scales.size() && i < rank; ++i) {
      out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in[i]) * scales[i])));
    }
  }
  if (out.size() != rank || scales.size() != rank) {
    return absl::InvalidArgumentError("scales or sizes do not match the rank");
  }
  const DType dt = c.ShapeOf(x).dtype;
  for (size_t axis = 0; axis < rank; ++axis) {
    const int64_t from = in[axis], to = out[axis];
    const double scale = !old && c.Has(n, 3) ? static_cast<double>(to) / static_cast<double>(from)
                                               : static_cast<double>(scales[axis]);
    if (to == from && scale == 1.0) continue;
    if (to < 1 || from < 1) return absl::InvalidArgumentError("an empty axis");
    std::vector<int32_t> i0(static_cast<size_t>(to)), i1(static_cast<size_t>(to));
    std::vector<float> w(static_cast<size_t>(to));
    const auto clamp = [from](int64_t v) {
      return static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(v, 0), from - 1));
    };
    for (int64_t o = 0; o < to; ++o) {
      CW_ASSIGN_OR_RETURN(double src, SourceOf(coords, static_cast<double>(o), from, scale));
      const auto k = static_cast<size_t>(o);
      if (mode == "nearest") {
        CW_ASSIGN_OR_RETURN(int64_t near, Nearest(rounding, src));
        i0[k] = clamp(near);
      } else {
        const double fl = std::floor(src);
        i0[k] = clamp(static_cast<int64_t>(fl));
        i1[k] = clamp(static_cast<int64_t>(fl) + 1);
        w[k] = static_cast<float>(src - fl);
      }
    }
    const auto ax = static_cast<int64_t>(axis);
    const Value a = c.b.Gather(x, c.b.Constant(ir::Literal::I32({to}, i0)), ax);
    if (mode == "nearest") {
      x = a;
      continue;
    }
    if (dt != DType::kF32) return absl::UnimplementedError("linear Resize of integers");
    const Value b = c.b.Gather(x, c.b.Constant(ir::Literal::I32({to}, i1)), ax);
    const std::vector<int64_t> dims = c.ShapeOf(a).dims;
    const Value wb = c.b.Broadcast(c.b.Constant(ir::Literal::F32({to}, w)), dims, {ax});
    const Value one = c.Full(1, DType::kF32, dims);
    x = c.b.Add(c.b.Mul(c.b.Sub(one, wb), a), c.b.Mul(wb, b));
  }
  c.Set(n, 0, x, c.TypeOf(n, 0));
  return absl::OkStatus();
}

}  // namespace

void AddResizeOps(OpTable& t) {
  t["Resize"] = Resize;
  t["Upsample"] = Resize;
}

}  // namespace causeway::onnx_import
