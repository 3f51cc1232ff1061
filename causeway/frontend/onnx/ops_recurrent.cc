// The recurrent ops RNN, GRU and LSTM (forward, reverse, bidirectional;
// both layouts; sequence_lens; LSTM's peepholes and input_forget; clip;
// the activations ONNX names). The input's product with W is one matrix
// product over every step; the steps are then unrolled (the sequence
// length is static), each one product with R and the gate arithmetic, so
// the result is differentiable like any IR and a model with recurrent ops
// can be fine-tuned. Steps past a sequence's length keep its state and
// give zeros, as ONNX says.
#include <optional>
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

enum class Cell { kRnn, kGru, kLstm };

// One of ONNX's activation functions, with its alpha and beta.
struct Activation {
  std::string name;
  float alpha = 0, beta = 0;
};

absl::StatusOr<Value> Apply(Converter& c, const Activation& f, Value x) {
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  const auto k = [&](double v) { return c.Full(v, DType::kF32, d); };
  if (f.name == "Tanh") return c.b.Tanh(x);
  if (f.name == "Sigmoid") return c.b.Logistic(x);
  if (f.name == "Relu") return c.b.Max(x, k(0));
  if (f.name == "Affine") return c.b.Add(c.b.Mul(x, k(f.alpha)), k(f.beta));
  if (f.name == "LeakyRelu") {
    return c.b.Select(c.b.Compare(x, k(0), ir::Comparison::kGe), x, c.b.Mul(x, k(f.alpha)));
  }
  if (f.name == "ThresholdedRelu") {
    return c.b.Select(c.b.Compare(x, k(f.alpha), ir::Comparison::kGt), x, k(0));
  }
  if (f.name == "ScaledTanh") return c.b.Mul(k(f.alpha), c.b.Tanh(c.b.Mul(x, k(f.beta))));
  if (f.name == "HardSigmoid") {
    return c.b.Min(k(1), c.b.Max(k(0), c.b.Add(c.b.Mul(x, k(f.alpha)), k(f.beta))));
  }
  if (f.name == "Elu") {
    return c.b.Select(c.b.Compare(x, k(0), ir::Comparison::kGe), x,
                      c.b.Mul(k(f.alpha), c.b.Sub(c.b.Exp(x), k(1))));
  }
  if (f.name == "Softsign") return c.b.Div(x, c.b.Add(k(1), c.b.Abs(x)));
  if (f.name == "Softplus") return c.b.Log(c.b.Add(k(1), c.b.Exp(x)));
  return absl::UnimplementedError(absl::StrCat("activation ", f.name));
}

// `x` [..., n * parts] split along its last dim: part `i`.
Value Part(Converter& c, Value x, int64_t i, int64_t size) {
  const std::vector<int64_t> d = c.ShapeOf(x).dims;
  std::vector<int64_t> lo(d.size(), 0), hi = d;
  lo.back() = i * size;
  hi.back() = (i + 1) * size;
  return c.b.Slice(x, lo, hi);
}

// `x` [dirs, ...]: direction `d`'s [...].
Value Dir(Converter& c, Value x, int64_t d) {
  std::vector<int64_t> dims = c.ShapeOf(x).dims;
  std::vector<int64_t> lo(dims.size(), 0), hi = dims;
  lo[0] = d;
  hi[0] = d + 1;
  dims.erase(dims.begin());
  return c.b.Reshape(c.b.Slice(x, lo, hi), dims);
}

// a [B, K] x w [N, K]^T -> [B, N].
Value TimesTransposed(Converter& c, Value a, Value w) {
  return c.b.DotGeneral(a, w, {}, {}, {1}, {1});
}

template <Cell kCell>
absl::Status Recurrent(Converter& c, const Node& n) {
  constexpr int64_t kGates = kCell == Cell::kRnn ? 1 : kCell == Cell::kGru ? 3 : 4;
  constexpr size_t kActivations = kCell == Cell::kRnn ? 1 : kCell == Cell::kGru ? 2 : 3;
  CW_ASSIGN_OR_RETURN(Value x, c.In(n, 0));
  CW_ASSIGN_OR_RETURN(Value w, c.In(n, 1));
  CW_ASSIGN_OR_RETURN(Value r, c.In(n, 2));
  if (c.ShapeOf(x).dtype != DType::kF32) return absl::UnimplementedError("integer inputs");
  const int64_t layout = c.AttrInt(n, "layout", 0);
  if (c.ShapeOf(x).rank() != 3) return absl::InvalidArgumentError("X must be of rank 3");
  if (layout == 1) x = c.b.Transpose(x, {1, 0, 2});  // to [T, B, I]
  const std::vector<int64_t> xd = c.ShapeOf(x).dims;
  const int64_t steps = xd[0], batch = xd[1], in = xd[2];
  const std::string direction = c.AttrString(n, "direction", "forward");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (direction != "forward" && direction != "reverse" && dirs != 2) {
    return absl::InvalidArgumentError(absl::StrCat("direction ", direction));
  }
  const int64_t hidden = c.AttrInt(n, "hidden_size", c.ShapeOf(r).dims.back());
  const std::vector<int64_t> wd = c.ShapeOf(w).dims, rd = c.ShapeOf(r).dims;
  if (wd != std::vector<int64_t>{dirs, kGates * hidden, in} ||
      rd != std::vector<int64_t>{dirs, kGates * hidden, hidden}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "W and R must be [", dirs, ", ", kGates * hidden, ", ", in, "] and [", dirs, ", ",
        kGates * hidden, ", ", hidden, "]"));
  }
  CW_ASSIGN_OR_RETURN(std::optional<Value> bias, c.InIfGiven(n, 3));
  CW_ASSIGN_OR_RETURN(std::optional<Value> lens, c.InIfGiven(n, 4));
  CW_ASSIGN_OR_RETURN(std::optional<Value> h0, c.InIfGiven(n, 5));
  std::optional<Value> c0, peep;
  if constexpr (kCell == Cell::kLstm) {
    CW_ASSIGN_OR_RETURN(c0, c.InIfGiven(n, 6));
    CW_ASSIGN_OR_RETURN(peep, c.InIfGiven(n, 7));
  }
  if (layout == 1) {
    if (h0.has_value()) h0 = c.b.Transpose(*h0, {1, 0, 2});
    if (c0.has_value()) c0 = c.b.Transpose(*c0, {1, 0, 2});
  }
  // Activations: given per direction, or the defaults.
  std::vector<Activation> acts;
  {
    const auto* names = c.Attr(n, "activations");
    const auto* alphas = c.Attr(n, "activation_alpha");
    const auto* betas = c.Attr(n, "activation_beta");
    const std::vector<std::string> defaults =
        kCell == Cell::kRnn ? std::vector<std::string>{"Tanh"}
        : kCell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                              : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    const size_t count = names != nullptr ? static_cast<size_t>(names->strings_size())
                                          : kActivations * static_cast<size_t>(dirs);
    if (count != kActivations * static_cast<size_t>(dirs)) {
      return absl::InvalidArgumentError(
          absl::StrCat(count, " activations; ", kActivations * dirs, " expected"));
    }
    for (size_t i = 0; i < count; ++i) {
      Activation a;
      a.name = names != nullptr ? names->strings(static_cast<int>(i)) : defaults[i % kActivations];
      // ONNX's defaults for the ones with parameters.
      if (a.name == "LeakyRelu") a.alpha = 0.01f;
      if (a.name == "ThresholdedRelu" || a.name == "Elu") a.alpha = 1.0f;
      if (a.name == "HardSigmoid") a.alpha = 0.2f, a.beta = 0.5f;
      if (alphas != nullptr && static_cast<int>(i) < alphas->floats_size()) {
        a.alpha = alphas->floats(static_cast<int>(i));
      }
      if (betas != nullptr && static_cast<int>(i) < betas->floats_size()) {
        a.beta = betas->floats(static_cast<int>(i));
      }
      acts.push_back(a);
    }
  }
  const float clip = c.AttrFloat(n, "clip", 0);
  const bool input_forget = c.AttrInt(n, "input_forget", 0) != 0;
  const bool linear_before_reset = c.AttrInt(n, "linear_before_reset", 0) != 0;
  const std::vector<int64_t> bh = {batch, hidden};
  const auto clipped = [&](Value v) {
    if (clip <= 0) return v;
    const std::vector<int64_t> d = c.ShapeOf(v).dims;
    return c.b.Min(c.Full(clip, DType::kF32, d), c.b.Max(c.Full(-clip, DType::kF32, d), v));
  };
  // [B, 1] of "step t is inside the sequence", broadcast to [B, H].
  const auto active = [&](int64_t t) -> std::optional<Value> {
    if (!lens.has_value()) return std::nullopt;
    const Value l = c.b.Broadcast(*lens, bh, {0});
    return c.b.Compare(c.Full(static_cast<double>(t), DType::kI32, bh), l, ir::Comparison::kLt);
  };
  std::vector<Value> ys, hs, cs;  // per direction: [T, B, H], [B, H], [B, H]
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Value wdir = Dir(c, w, d), rdir = Dir(c, r, d);
    // X W^T for all steps. The biases are added per step after the R
    // product, in the order ONNX's reference adds them.
    const Value xw = c.b.Reshape(TimesTransposed(c, c.b.Reshape(x, {steps * batch, in}), wdir),
                                 {steps, batch, kGates * hidden});
    std::optional<Value> wb, rb;  // [B, G*H]
    if (bias.has_value()) {
      const Value bd = Dir(c, *bias, d);
      const std::vector<int64_t> bg = {batch, kGates * hidden};
      wb = c.b.Broadcast(Part(c, bd, 0, kGates * hidden), bg, {1});
      rb = c.b.Broadcast(Part(c, bd, 1, kGates * hidden), bg, {1});
    }
    // (pre + Wb) + Rb over gates [first, first + count).
    const auto biased = [&](Value pre, int64_t first, int64_t count) {
      if (!wb.has_value()) return pre;
      const std::vector<int64_t> lo = {0, first * hidden}, hi = {batch, (first + count) * hidden};
      return c.b.Add(c.b.Add(pre, c.b.Slice(*wb, lo, hi)), c.b.Slice(*rb, lo, hi));
    };
    Value h = h0.has_value() ? Dir(c, *h0, d) : c.Full(0, DType::kF32, bh);
    Value cell = c0.has_value() ? Dir(c, *c0, d) : c.Full(0, DType::kF32, bh);
    std::optional<Value> pi, po, pf;
    if (peep.has_value()) {
      const Value pd = Dir(c, *peep, d);
      pi = c.b.Broadcast(Part(c, pd, 0, hidden), bh, {1});
      po = c.b.Broadcast(Part(c, pd, 1, hidden), bh, {1});
      pf = c.b.Broadcast(Part(c, pd, 2, hidden), bh, {1});
    }
    const Activation* f = &acts[static_cast<size_t>(d) * kActivations];
    std::vector<Value> y(static_cast<size_t>(steps));
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      const Value xt = c.b.Reshape(c.b.Slice(xw, {t, 0, 0}, {t + 1, batch, kGates * hidden}),
                                   {batch, kGates * hidden});
      Value h_new, c_new = cell;
      if constexpr (kCell == Cell::kRnn) {
        CW_ASSIGN_OR_RETURN(
            h_new, Apply(c, f[0], clipped(biased(c.b.Add(xt, TimesTransposed(c, h, rdir)), 0, 1))));
      } else if constexpr (kCell == Cell::kGru) {
        // R's rows: z and r, then h.
        const Value r_zr = c.b.Slice(rdir, {0, 0}, {2 * hidden, hidden});
        const Value rh = c.b.Slice(rdir, {2 * hidden, 0}, {3 * hidden, hidden});
        const Value zr =
            biased(c.b.Add(Part(c, xt, 0, 2 * hidden), TimesTransposed(c, h, r_zr)), 0, 2);
        const Value pre_z = clipped(Part(c, zr, 0, hidden));
        CW_ASSIGN_OR_RETURN(const Value z, Apply(c, f[0], pre_z));
        CW_ASSIGN_OR_RETURN(const Value rg, Apply(c, f[0], clipped(Part(c, zr, 1, hidden))));
        const Value xh = Part(c, xt, 2, hidden);
        Value pre;
        if (linear_before_reset) {  // (x Wh + r (h Rh + Rbh)) + Wbh
          Value hr = TimesTransposed(c, h, rh);
          if (rb.has_value()) hr = c.b.Add(hr, Part(c, *rb, 2, hidden));
          pre = c.b.Add(xh, c.b.Mul(rg, hr));
          if (wb.has_value()) pre = c.b.Add(pre, Part(c, *wb, 2, hidden));
        } else {  // ((x Wh + (r h) Rh) + Wbh) + Rbh
          pre = biased(c.b.Add(xh, TimesTransposed(c, c.b.Mul(rg, h), rh)), 2, 1);
        }
        CW_ASSIGN_OR_RETURN(const Value hh, Apply(c, f[1], clipped(pre)));
        // (1 - z) h~ + z h. With a sigmoid, 1 - z is sigmoid(-pre): it keeps
        // its precision where z rounds to 1.
        const Value one_minus_z =
            f[0].name == "Sigmoid"
                ? c.b.Logistic(c.b.Neg(pre_z))
                : c.b.Sub(c.Full(1, DType::kF32, bh), z);
        h_new = c.b.Add(c.b.Mul(one_minus_z, hh), c.b.Mul(z, h));
      } else {
        const Value g = biased(c.b.Add(xt, TimesTransposed(c, h, rdir)), 0, 4);  // i, o, f, c
        Value gi = Part(c, g, 0, hidden), gf = Part(c, g, 2, hidden);
        if (pi.has_value()) {
          gi = c.b.Add(gi, c.b.Mul(*pi, cell));
          gf = c.b.Add(gf, c.b.Mul(*pf, cell));
        }
        CW_ASSIGN_OR_RETURN(const Value i_gate, Apply(c, f[0], clipped(gi)));
        Value f_gate;
        if (input_forget) {
          f_gate = c.b.Sub(c.Full(1, DType::kF32, bh), i_gate);
        } else {
          CW_ASSIGN_OR_RETURN(f_gate, Apply(c, f[0], clipped(gf)));
        }
        CW_ASSIGN_OR_RETURN(const Value c_gate, Apply(c, f[1], clipped(Part(c, g, 3, hidden))));
        c_new = c.b.Add(c.b.Mul(f_gate, cell), c.b.Mul(i_gate, c_gate));
        Value go = Part(c, g, 1, hidden);
        if (po.has_value()) go = c.b.Add(go, c.b.Mul(*po, c_new));
        CW_ASSIGN_OR_RETURN(const Value o_gate, Apply(c, f[0], clipped(go)));
        CW_ASSIGN_OR_RETURN(const Value hc, Apply(c, f[2], c_new));
        h_new = c.b.Mul(o_gate, hc);
      }
      const std::optional<Value> on = active(t);
      if (on.has_value()) {
        y[static_cast<size_t>(t)] = c.b.Select(*on, h_new, c.Full(0, DType::kF32, bh));
        h = c.b.Select(*on, h_new, h);
        cell = c.b.Select(*on, c_new, cell);
      } else {
        y[static_cast<size_t>(t)] = h_new;
        h = h_new;
        cell = c_new;
      }
    }
    for (Value& v : y) v = c.b.Reshape(v, {1, batch, hidden});
    ys.push_back(steps == 1 ? y[0] : c.b.Concatenate(y, 0));
    hs.push_back(c.b.Reshape(h, {1, batch, hidden}));
    cs.push_back(c.b.Reshape(cell, {1, batch, hidden}));
  }
  // Y [T, dirs, B, H]; Y_h, Y_c [dirs, B, H] (layout 1: [B, T, dirs, H],
  // [B, dirs, H]).
  for (Value& v : ys) v = c.b.Reshape(v, {steps, 1, batch, hidden});
  Value y_all = dirs == 1 ? ys[0] : c.b.Concatenate(ys, 1);
  Value h_all = dirs == 1 ? hs[0] : c.b.Concatenate(hs, 0);
  Value c_all = dirs == 1 ? cs[0] : c.b.Concatenate(cs, 0);
  if (layout == 1) {
    y_all = c.b.Transpose(y_all, {2, 0, 1, 3});
    h_all = c.b.Transpose(h_all, {1, 0, 2});
    c_all = c.b.Transpose(c_all, {1, 0, 2});
  }
  const int32_t type = c.TypeOf(n, 0);
  c.Set(n, 0, y_all, type);
  c.Set(n, 1, h_all, type);
  if constexpr (kCell == Cell::kLstm) c.Set(n, 2, c_all, type);
  return absl::OkStatus();
}

}  // namespace

void AddRecurrentOps(OpTable& t) {
  t["RNN"] = Recurrent<Cell::kRnn>;
  t["GRU"] = Recurrent<Cell::kGru>;
  t["LSTM"] = Recurrent<Cell::kLstm>;
}

}  // namespace causeway::onnx_import
