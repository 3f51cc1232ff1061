// Element-wise ops: unary math and activations, binary arithmetic with
// numpy broadcasting, comparisons and logic, Where, Clip, Cast.
#include <cmath>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using ir::DType;
using ir::Value;

DType DT(Converter& c, Value v) { return c.ShapeOf(v).dtype; }

absl::Status RequireFloat(Converter& c, Value v) {
  if (DT(c, v) != DType::kF32) {
    return absl::UnimplementedError(
        absl::StrCat("operand ", c.ShapeOf(v).ToString(), ": this op is converted for float"));
  }
  return absl::OkStatus();
}

// Integer inputs all known: the op folded on the host (shape arithmetic).
bool AllKnownInts(Converter& c, const Node& n) {
  for (int i = 0; i < n.input_size(); ++i) {
    if (!c.Has(n, i)) continue;
    absl::StatusOr<const Entry*> e = c.Get(n, i);
    if (!e.ok() || !(*e)->known.has_value() || IsFloatType((*e)->onnx_type)) return false;
  }
  return n.input_size() > 0;
}

absl::Status FoldInts(Converter& c, const Node& n,
                      const std::function<int64_t(int64_t, int64_t)>& f, int32_t out_type = 0) {
  CW_ASSIGN_OR_RETURN(const Entry* a, c.Get(n, 0));
  CW_ASSIGN_OR_RETURN(const Entry* b, c.Get(n, 1));
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                      Converter::BroadcastDims({a->shape.dims, b->shape.dims}));
  const int64_t total = ir::Shape(DType::kI32, dims).num_elements();
  // Element i of the broadcast result, read from e's values.
  const auto at = [&](const Entry* e, int64_t i) {
    const std::vector<int64_t>& ed = e->shape.dims;
    const size_t shift = dims.size() - ed.size();
    int64_t off = 0, stride = 1;
    for (size_t k = dims.size(); k-- > shift;) {
      const int64_t coord = i % dims[k];
      i /= dims[k];
      if (ed[k - shift] != 1) off += coord * stride;
      stride *= ed[k - shift];
    }
    return e->known->ints[static_cast<size_t>(off)];
  };
  std::vector<int64_t> out(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) out[static_cast<size_t>(i)] = f(at(a, i), at(b, i));
  c.SetKnown(n, 0, MakeInts(std::move(out), dims, out_type == 0 ? a->onnx_type : out_type));
  return absl::OkStatus();
}

// --- Unary ---

using UnaryFn = Value (*)(Converter& c, Value x, const Node& n);

template <UnaryFn F, bool kFloatOnly>
absl::Status Unary(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  if (kFloatOnly) CW_RETURN_IF_ERROR(RequireFloat(c, x));
  c.Set(n, 0, F(c, x, n), c.TypeOf(n, 0));
  return absl::OkStatus();
}

Value Zero(Converter& c, Value x) { return c.Full(0, DT(c, x), c.ShapeOf(x).dims); }
Value Const(Converter& c, Value x, double v) { return c.Full(v, DT(c, x), c.ShapeOf(x).dims); }
Value Positive(Converter& c, Value x) {
  return c.b.Compare(x, Zero(c, x), ir::Comparison::kGt);
}

Value AbsF(Converter& c, Value x, const Node&) { return c.b.Abs(x); }
Value NegF(Converter& c, Value x, const Node&) { return c.b.Neg(x); }
Value ExpF(Converter& c, Value x, const Node&) { return c.b.Exp(x); }
Value LogF(Converter& c, Value x, const Node&) { return c.b.Log(x); }
Value TanhF(Converter& c, Value x, const Node&) { return c.b.Tanh(x); }
Value SigmoidF(Converter& c, Value x, const Node&) { return c.b.Logistic(x); }
// The trigonometric and hyperbolic functions: the IR's sin, cos and atan,
// and forms of them, exp, log and sqrt that keep their precision where the
// plain ones cancel (acos near 1, asinh of negatives).
Value SinF(Converter& c, Value x, const Node&) { return c.b.Sin(x); }
Value CosF(Converter& c, Value x, const Node&) { return c.b.Cos(x); }
Value TanF(Converter& c, Value x, const Node&) { return c.b.Div(c.b.Sin(x), c.b.Cos(x)); }
Value AtanF(Converter& c, Value x, const Node&) { return c.b.Atan(x); }
Value AsinF(Converter& c, Value x, const Node&) {  // atan(x / sqrt(1 - x^2))
  return c.b.Atan(c.b.Div(x, c.b.Sqrt(c.b.Sub(Const(c, x, 1), c.b.Mul(x, x)))));
}
Value AcosF(Converter& c, Value x, const Node&) {  // 2 atan(sqrt((1 - x) / (1 + x)))
  const Value q = c.b.Div(c.b.Sub(Const(c, x, 1), x), c.b.Add(Const(c, x, 1), x));
  return c.b.Mul(Const(c, x, 2), c.b.Atan(c.b.Sqrt(q)));
}
Value SinhF(Converter& c, Value x, const Node&) {
  return c.b.Mul(Const(c, x, 0.5), c.b.Sub(c.b.Exp(x), c.b.Exp(c.b.Neg(x))));
}
Value CoshF(Converter& c, Value x, const Node&) {
  return c.b.Mul(Const(c, x, 0.5), c.b.Add(c.b.Exp(x), c.b.Exp(c.b.Neg(x))));
}
Value AsinhF(Converter& c, Value x, const Node&) {  // sign(x) log(|x| + sqrt(x^2 + 1))
  const Value a = c.b.Abs(x);
  const Value r = c.b.Sqrt(c.b.Add(c.b.Mul(x, x), Const(c, x, 1)));
  return c.b.Mul(c.b.Sign(x), c.b.Log(c.b.Add(a, r)));
}
Value AcoshF(Converter& c, Value x, const Node&) {  // log(x + sqrt(x^2 - 1))
  return c.b.Log(c.b.Add(x, c.b.Sqrt(c.b.Sub(c.b.Mul(x, x), Const(c, x, 1)))));
}
Value AtanhF(Converter& c, Value x, const Node&) {  // log((1 + x) / (1 - x)) / 2
  const Value q = c.b.Div(c.b.Add(Const(c, x, 1), x), c.b.Sub(Const(c, x, 1), x));
  return c.b.Mul(Const(c, x, 0.5), c.b.Log(q));
}
Value SqrtF(Converter& c, Value x, const Node&) { return c.b.Sqrt(x); }
Value FloorF(Converter& c, Value x, const Node&) { return c.b.Floor(x); }
Value CeilF(Converter& c, Value x, const Node&) { return c.b.Neg(c.b.Floor(c.b.Neg(x))); }
Value SignF(Converter& c, Value x, const Node&) { return c.b.Sign(x); }
Value ReciprocalF(Converter& c, Value x, const Node&) { return c.b.Div(Const(c, x, 1), x); }
Value ReluF(Converter& c, Value x, const Node&) { return c.b.Max(x, Zero(c, x)); }
Value LeakyReluF(Converter& c, Value x, const Node& n) {
  const Value scaled = c.b.Mul(x, Const(c, x, c.AttrFloat(n, "alpha", 0.01f)));
  return c.b.Select(Positive(c, x), x, scaled);
}
Value ThresholdedReluF(Converter& c, Value x, const Node& n) {
  const Value above = c.b.Compare(x, Const(c, x, c.AttrFloat(n, "alpha", 1.0f)), ir::Comparison::kGt);
  return c.b.Select(above, x, Zero(c, x));
}
// alpha * (exp(x) - 1) for x <= 0.
Value ExpM1Scaled(Converter& c, Value x, float alpha) {
  return c.b.Mul(Const(c, x, alpha), c.b.Sub(c.b.Exp(x), Const(c, x, 1)));
}
Value EluF(Converter& c, Value x, const Node& n) {
  return c.b.Select(Positive(c, x), x, ExpM1Scaled(c, x, c.AttrFloat(n, "alpha", 1.0f)));
}
Value CeluF(Converter& c, Value x, const Node& n) {
  const float alpha = c.AttrFloat(n, "alpha", 1.0f);
  const Value neg = c.b.Mul(Const(c, x, alpha),
                            c.b.Sub(c.b.Exp(c.b.Div(x, Const(c, x, alpha))), Const(c, x, 1)));
  return c.b.Add(c.b.Max(x, Zero(c, x)), c.b.Min(Zero(c, x), neg));
}
Value SeluF(Converter& c, Value x, const Node& n) {
  const float alpha = c.AttrFloat(n, "alpha", 1.67326319217681884765625f);
  const float gamma = c.AttrFloat(n, "gamma", 1.05070102214813232421875f);
  const Value v = c.b.Select(Positive(c, x), x, ExpM1Scaled(c, x, alpha));
  return c.b.Mul(Const(c, x, gamma), v);
}
// log(1 + exp(x)), stable: max(x, 0) + log(1 + exp(-|x|)).
Value SoftplusOf(Converter& c, Value x) {
  const Value e = c.b.Exp(c.b.Neg(c.b.Abs(x)));
  return c.b.Add(c.b.Max(x, Zero(c, x)), c.b.Log(c.b.Add(Const(c, x, 1), e)));
}
Value SoftplusF(Converter& c, Value x, const Node&) { return SoftplusOf(c, x); }
Value SoftsignF(Converter& c, Value x, const Node&) {
  return c.b.Div(x, c.b.Add(Const(c, x, 1), c.b.Abs(x)));
}
Value MishF(Converter& c, Value x, const Node&) { return c.b.Mul(x, c.b.Tanh(SoftplusOf(c, x))); }
Value HardSigmoidOf(Converter& c, Value x, float alpha, float beta) {
  const Value y = c.b.Add(c.b.Mul(Const(c, x, alpha), x), Const(c, x, beta));
  return c.b.Max(Zero(c, x), c.b.Min(Const(c, x, 1), y));
}
Value HardSigmoidF(Converter& c, Value x, const Node& n) {
  return HardSigmoidOf(c, x, c.AttrFloat(n, "alpha", 0.2f), c.AttrFloat(n, "beta", 0.5f));
}
Value HardSwishF(Converter& c, Value x, const Node&) {
  return c.b.Mul(x, HardSigmoidOf(c, x, 1.0f / 6, 0.5f));
}
Value NotF(Converter& c, Value x, const Node&) {
  return c.b.Select(x, c.Full(0, DType::kPred, c.ShapeOf(x).dims),
                    c.Full(1, DType::kPred, c.ShapeOf(x).dims));
}

absl::Status Neg(Converter& c, const Node& n) {
  if (AllKnownInts(c, n)) {
    CW_ASSIGN_OR_RETURN(const Entry* a, c.Get(n, 0));
    std::vector<int64_t> v = a->known->ints;
    for (int64_t& x : v) x = -x;
    c.SetKnown(n, 0, MakeInts(std::move(v), a->shape.dims, a->onnx_type));
    return absl::OkStatus();
  }
  return Unary<NegF, false>(c, n);
}

absl::Status Identity(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(const Entry* a, c.Get(n, 0));
  const Entry copy = *a;
  c.values[n.output(0)] = copy;
  return absl::OkStatus();
}

// Dropout in inference: the input, and a mask of ones.
absl::Status Dropout(Converter& c, const Node& n) {
  if (c.Has(n, 2)) {
    CW_ASSIGN_OR_RETURN(std::vector<int64_t> training, c.Ints(n, 2));
    if (!training.empty() && training[0] != 0) {
      return absl::UnimplementedError("Dropout in training mode (random masks differ from ONNX's)");
    }
  }
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  c.Set(n, 0, x, c.TypeOf(n, 0));
  c.Set(n, 1, c.Full(1, DType::kPred, c.ShapeOf(x).dims), kBool);
  return absl::OkStatus();
}

// --- Binary and variadic ---

absl::Status Arith(Converter& c, const Node& n, Value (ir::FunctionBuilder::*op)(Value, Value),
                   const std::function<int64_t(int64_t, int64_t)>& fold) {
  if (fold && AllKnownInts(c, n)) return FoldInts(c, n, fold);
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  if (in.size() != 2) return absl::InvalidArgumentError("needs two inputs");
  if (DT(c, in[0]) != DT(c, in[1])) return absl::InvalidArgumentError("operand types differ");
  c.Set(n, 0, (c.b.*op)(in[0], in[1]), c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status Add(Converter& c, const Node& n) {
  return Arith(c, n, &ir::FunctionBuilder::Add, [](int64_t a, int64_t b) { return a + b; });
}
absl::Status Sub(Converter& c, const Node& n) {
  return Arith(c, n, &ir::FunctionBuilder::Sub, [](int64_t a, int64_t b) { return a - b; });
}
absl::Status Mul(Converter& c, const Node& n) {
  return Arith(c, n, &ir::FunctionBuilder::Mul, [](int64_t a, int64_t b) { return a * b; });
}
absl::Status Div(Converter& c, const Node& n) {
  return Arith(c, n, &ir::FunctionBuilder::Div,
               [](int64_t a, int64_t b) { return b == 0 ? 0 : a / b; });
}
absl::Status Pow(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  const bool integer = DT(c, in[0]) == DType::kI32;
  Value base = integer ? c.b.Convert(in[0], DType::kF32) : in[0];
  Value e = in[1];
  if (DT(c, e) != DType::kF32) e = c.b.Convert(e, DType::kF32);
  Value y = c.b.Pow(base, e);
  if (integer) {
    // Rounded to the nearest integer: an exact power may come out a hair
    // below it in f32.
    y = c.b.Convert(c.b.Floor(c.b.Add(y, Const(c, y, 0.5))), DType::kI32);
  }
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

// The IR's erf (Eigen's vectorised approximation on the cpu kind).
Value ErfF(Converter& c, Value x, const Node&) { return c.b.Erf(x); }

// a - floor(a / b) b (the divisor's sign; integers), or with fmod a -
// trunc(a / b) b (the dividend's), computed in f32: integers exactly below
// 2^24.
absl::Status Mod(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  const DType dt = DT(c, in[0]);
  const bool fmod = c.AttrInt(n, "fmod", 0) != 0;
  if (dt == DType::kF32 && !fmod) {
    return absl::InvalidArgumentError("Mod of floats needs fmod=1");
  }
  const Value a = dt == DType::kF32 ? in[0] : c.b.Convert(in[0], DType::kF32);
  const Value b = dt == DType::kF32 ? in[1] : c.b.Convert(in[1], DType::kF32);
  const Value q = c.b.Div(a, b);
  // trunc(q) = sign(q) floor(|q|)
  const Value whole = fmod ? c.b.Mul(c.b.Sign(q), c.b.Floor(c.b.Abs(q))) : c.b.Floor(q);
  Value r = c.b.Sub(a, c.b.Mul(whole, b));
  if (dt != DType::kF32) r = c.b.Convert(c.b.Floor(c.b.Add(r, Const(c, r, 0.5))), dt);
  c.Set(n, 0, r, c.TypeOf(n, 0));
  return absl::OkStatus();
}

// Half to even: floor(x), one more above .5, and at .5 when floor is odd.
Value RoundF(Converter& c, Value x, const Node&) {
  const Value f = c.b.Floor(x);
  const Value frac = c.b.Sub(x, f);
  const Value half = Const(c, x, 0.5), one = Const(c, x, 1), two = Const(c, x, 2);
  const Value odd = c.b.Compare(c.b.Sub(f, c.b.Mul(two, c.b.Floor(c.b.Div(f, two)))), Zero(c, x),
                                ir::Comparison::kNe);
  const Value up = c.b.Select(c.b.Compare(frac, half, ir::Comparison::kGt),
                              c.Full(1, DType::kPred, c.ShapeOf(x).dims),
                              c.b.Select(c.b.Compare(frac, half, ir::Comparison::kEq), odd,
                                         c.Full(0, DType::kPred, c.ShapeOf(x).dims)));
  return c.b.Select(up, c.b.Add(f, one), f);
}

absl::Status IsNaN(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_RETURN_IF_ERROR(RequireFloat(c, x));
  c.Set(n, 0, c.b.Compare(x, x, ir::Comparison::kNe), kBool);
  return absl::OkStatus();
}

absl::Status IsInf(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_RETURN_IF_ERROR(RequireFloat(c, x));
  const double inf = std::numeric_limits<float>::infinity();
  const bool pos = c.AttrInt(n, "detect_positive", 1) != 0;
  const bool neg = c.AttrInt(n, "detect_negative", 1) != 0;
  const Value is_pos = c.b.Compare(x, Const(c, x, inf), ir::Comparison::kEq);
  const Value is_neg = c.b.Compare(x, Const(c, x, -inf), ir::Comparison::kEq);
  const Value none = c.Full(0, DType::kPred, c.ShapeOf(x).dims);
  Value y = pos ? (neg ? c.b.Select(is_pos, is_pos, is_neg) : is_pos) : (neg ? is_neg : none);
  c.Set(n, 0, y, kBool);
  return absl::OkStatus();
}

absl::Status Shrink(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const float bias = c.AttrFloat(n, "bias", 0), lambd = c.AttrFloat(n, "lambd", 0.5f);
  Value xf = DT(c, x) == DType::kF32 ? x : c.b.Convert(x, DType::kF32);
  const Value below = c.b.Compare(xf, Const(c, xf, -lambd), ir::Comparison::kLt);
  const Value above = c.b.Compare(xf, Const(c, xf, lambd), ir::Comparison::kGt);
  Value y = c.b.Select(below, c.b.Add(xf, Const(c, xf, bias)),
                       c.b.Select(above, c.b.Sub(xf, Const(c, xf, bias)), Zero(c, xf)));
  if (DT(c, x) != DType::kF32) y = c.b.Convert(y, DT(c, x));
  c.Set(n, 0, y, c.TypeOf(n, 0));
  return absl::OkStatus();
}

absl::Status PRelu(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x0, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value s0, c.In(n, 1));
  const std::vector<int64_t> xd = c.ShapeOf(x0).dims, sd = c.ShapeOf(s0).dims;
  if (sd.size() == 1 && xd.size() >= 2 && sd[0] == xd[1] && sd[0] != xd.back() && sd[0] != 1) {
    // A slope per channel (dimension 1), as models from before opset 7 give it.
    const Value slope = c.b.Broadcast(s0, xd, {1});
    c.Set(n, 0, c.b.Select(Positive(c, x0), x0, c.b.Mul(x0, slope)), c.TypeOf(n, 0));
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  const Value x = in[0];
  c.Set(n, 0, c.b.Select(Positive(c, x), x, c.b.Mul(x, in[1])), c.TypeOf(n, 0));
  return absl::OkStatus();
}

// Max, Min, Sum, Mean over any number of broadcast inputs.
template <int kWhich>  // 0 max, 1 min, 2 sum, 3 mean
absl::Status Variadic(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  if (in.empty()) return absl::InvalidArgumentError("needs an input");
  Value acc = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    switch (kWhich) {
      case 0: acc = c.b.Max(acc, in[i]); break;
      case 1: acc = c.b.Min(acc, in[i]); break;
      default: acc = c.b.Add(acc, in[i]); break;
    }
  }
  if (kWhich == 3) acc = c.b.Div(acc, Const(c, acc, static_cast<double>(in.size())));
  c.Set(n, 0, acc, c.TypeOf(n, 0));
  return absl::OkStatus();
}

template <ir::Comparison kCmp>
absl::Status Compare(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  Value a = in[0], b = in[1];
  if (DT(c, a) == DType::kPred) {  // Equal on bools: as i32
    a = c.b.Convert(a, DType::kI32);
    b = c.b.Convert(b, DType::kI32);
  }
  c.Set(n, 0, c.b.Compare(a, b, kCmp), kBool);
  return absl::OkStatus();
}

template <int kWhich>  // 0 and, 1 or, 2 xor
absl::Status Logic(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  const std::vector<int64_t> dims = c.ShapeOf(in[0]).dims;
  const Value f = c.Full(0, DType::kPred, dims), t = c.Full(1, DType::kPred, dims);
  Value r;
  switch (kWhich) {
    case 0: r = c.b.Select(in[0], in[1], f); break;
    case 1: r = c.b.Select(in[0], t, in[1]); break;
    default: r = c.b.Select(in[0], c.b.Select(in[1], f, t), in[1]); break;
  }
  c.Set(n, 0, r, kBool);
  return absl::OkStatus();
}

absl::Status Where(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(std::vector<Value> in, c.Broadcasted(n));
  if (in.size() != 3) return absl::InvalidArgumentError("needs three inputs");
  c.Set(n, 0, c.b.Select(in[0], in[1], in[2]), c.TypeOf(n, 1));
  return absl::OkStatus();
}

absl::Status Clip(Converter& c, const Node& n) {
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  const std::vector<int64_t> dims = c.ShapeOf(x).dims;
  const auto bound = [&](int input, const char* attr) -> absl::StatusOr<std::optional<Value>> {
    if (c.opset < 11) {
      if (c.Attr(n, attr) == nullptr) return std::optional<Value>();
      return std::optional<Value>(Const(c, x, c.AttrFloat(n, attr, 0)));
    }
    if (!c.Has(n, input)) return std::optional<Value>();
    CW_ASSIGN_OR_RETURN(Value v, c.In(n, input));
    return std::optional<Value>(c.Splat(v, dims));
  };
  CW_ASSIGN_OR_RETURN(std::optional<Value> lo, bound(1, "min"));
  CW_ASSIGN_OR_RETURN(std::optional<Value> hi, bound(2, "max"));
  if (lo.has_value()) x = c.b.Max(x, *lo);
  if (hi.has_value()) x = c.b.Min(x, *hi);
  c.Set(n, 0, x, c.TypeOf(n, 0));
  return absl::OkStatus();
}

// An integer as ONNX type `to` holds it: narrower integers wrap.
int64_t WrapTo(int64_t v, int32_t to) {
  switch (to) {
    case 2: return static_cast<uint8_t>(v);
    case 3: return static_cast<int8_t>(v);
    case 4: return static_cast<uint16_t>(v);
    case 5: return static_cast<int16_t>(v);
    case kInt32: return static_cast<int32_t>(v);
    case 12: return static_cast<uint32_t>(v);
    case kBool: return v != 0;
    default: return v;
  }
}

absl::Status CastTo(Converter& c, const Node& n, int32_t to) {
  CW_ASSIGN_OR_RETURN(DType dtype, DTypeOf(to));
  CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 0));
  if (e->known.has_value() && !IsFloatType(e->onnx_type) && !IsFloatType(to)) {
    std::vector<int64_t> ints = e->known->ints;
    for (int64_t& v : ints) v = WrapTo(v, to);
    c.SetKnown(n, 0, MakeInts(std::move(ints), e->shape.dims, to));
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  if (DT(c, x) != dtype) x = c.b.Convert(x, dtype);
  if (IsFloatType(to)) x = RoundTrip(c.b, x, to);  // float16's precision (Set wraps uint8)
  c.Set(n, 0, x, to);
  return absl::OkStatus();
}

absl::Status Cast(Converter& c, const Node& n) {
  return CastTo(c, n, static_cast<int32_t>(c.AttrInt(n, "to", 0)));
}
absl::Status CastLike(Converter& c, const Node& n) { return CastTo(c, n, c.TypeOf(n, 1)); }

}  // namespace

void AddElementwiseOps(OpTable& t) {
  t["Abs"] = Unary<AbsF, false>;
  t["Neg"] = Neg;
  t["Exp"] = Unary<ExpF, true>;
  t["Log"] = Unary<LogF, true>;
  t["Tanh"] = Unary<TanhF, true>;
  t["Sin"] = Unary<SinF, true>;
  t["Cos"] = Unary<CosF, true>;
  t["Tan"] = Unary<TanF, true>;
  t["Asin"] = Unary<AsinF, true>;
  t["Acos"] = Unary<AcosF, true>;
  t["Atan"] = Unary<AtanF, true>;
  t["Sinh"] = Unary<SinhF, true>;
  t["Cosh"] = Unary<CoshF, true>;
  t["Asinh"] = Unary<AsinhF, true>;
  t["Acosh"] = Unary<AcoshF, true>;
  t["Atanh"] = Unary<AtanhF, true>;
  t["Sigmoid"] = Unary<SigmoidF, true>;
  t["Sqrt"] = Unary<SqrtF, true>;
  t["Floor"] = Unary<FloorF, true>;
  t["Ceil"] = Unary<CeilF, true>;
  t["Sign"] = Unary<SignF, false>;
  t["Reciprocal"] = Unary<ReciprocalF, true>;
  t["Relu"] = Unary<ReluF, false>;
  t["LeakyRelu"] = Unary<LeakyReluF, true>;
  t["ThresholdedRelu"] = Unary<ThresholdedReluF, true>;
  t["Elu"] = Unary<EluF, true>;
  t["Celu"] = Unary<CeluF, true>;
  t["Selu"] = Unary<SeluF, true>;
  t["Softplus"] = Unary<SoftplusF, true>;
  t["Softsign"] = Unary<SoftsignF, true>;
  t["Mish"] = Unary<MishF, true>;
  t["HardSigmoid"] = Unary<HardSigmoidF, true>;
  t["HardSwish"] = Unary<HardSwishF, true>;
  t["Not"] = Unary<NotF, false>;
  t["Identity"] = Identity;
  t["Dropout"] = Dropout;
  t["Add"] = Add;
  t["Sub"] = Sub;
  t["Mul"] = Mul;
  t["Div"] = Div;
  t["Pow"] = Pow;
  t["IsNaN"] = IsNaN;
  t["Erf"] = Unary<ErfF, true>;
  t["Round"] = Unary<RoundF, true>;
  t["Mod"] = Mod;
  t["IsInf"] = IsInf;
  t["Shrink"] = Shrink;
  t["PRelu"] = PRelu;
  t["Max"] = Variadic<0>;
  t["Min"] = Variadic<1>;
  t["Sum"] = Variadic<2>;
  t["Mean"] = Variadic<3>;
  t["Equal"] = Compare<ir::Comparison::kEq>;
  t["Less"] = Compare<ir::Comparison::kLt>;
  t["LessOrEqual"] = Compare<ir::Comparison::kLe>;
  t["Greater"] = Compare<ir::Comparison::kGt>;
  t["GreaterOrEqual"] = Compare<ir::Comparison::kGe>;
  t["And"] = Logic<0>;
  t["Or"] = Logic<1>;
  t["Xor"] = Logic<2>;
  t["Where"] = Where;
  t["Clip"] = Clip;
  t["Cast"] = Cast;
  t["CastLike"] = CastLike;
}

}  // namespace causeway::onnx_import
