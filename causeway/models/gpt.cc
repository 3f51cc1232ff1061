#include "causeway/models/gpt.h"

#include <cmath>
#include <map>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/autodiff.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/composites.h"
#include "causeway/models/gpt_blocks.h"

namespace causeway::models {
namespace {

using ir::DType;
using ir::FunctionBuilder;
using ir::Shape;
using ir::Value;

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Adds one parameter per spec, with its local shape.
std::vector<Value> AddParams(FunctionBuilder& b, const GptConfig& c, const GptLayout& l) {
  std::vector<Value> params;
  for (const ParamSpec& spec : GptParams(c)) {
    params.push_back(b.Parameter(Shape(DType::kF32, internal::LocalDims(spec, l))));
  }
  return params;
}

Value AddBias(FunctionBuilder& b, Value x, Value bias) {
  if (bias.id < 0) return x;
  return b.Add(x, b.Broadcast(bias, b.shape(x).dims, {b.shape(x).rank() - 1}));
}

Value Norm(FunctionBuilder& b, Value x, Value gamma, Value beta, GptKernels k) {
  if (beta.id < 0) beta = b.Full(0.0f, b.shape(gamma).dims);
  return k == GptKernels::kFused ? ir::LayerNorm(b, x, gamma, beta)
                                 : ir::LayerNormOpByOp(b, x, gamma, beta);
}

// x [n, c_out] summed over the model axis (row-parallel output).
Value ModelSum(FunctionBuilder& b, Value x, const GptLayout& l) {
  return l.model > 1 ? b.AllReduce(x, {kModelAxis}) : x;
}

// The transformer up to the final LayerNorm: returns h [batch * t, embed]
// and the token embedding (for the tied head).
std::pair<Value, Value> Trunk(FunctionBuilder& b, const GptConfig& c, const GptLayout& l,
                              const std::vector<Value>& params, Value tokens, int64_t batch,
                              int64_t t, GptKernels k) {
  internal::ParamCursor p(params, c.bias);
  Value wte = p.Next();
  Value wpe = p.Next();
  Value x = internal::Embed(b, c, wte, wpe, tokens, batch, t);
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    x = internal::Block(b, c, l, p, x, batch, t, k);
  }
  return {internal::FinalNorm(b, p, x, k), wte};
}

// Appends the per-device loss share (see gpt.h).
Value LossShare(FunctionBuilder& b, const GptConfig& c, const GptLayout& l,
                const std::vector<Value>& params, Value tokens, Value targets, int64_t batch,
                int64_t t, GptKernels k) {
  auto [h, wte] = Trunk(b, c, l, params, tokens, batch, t, k);
  Value ce = ir::CrossEntropy(b, internal::Head(b, h, wte), b.Reshape(targets, {batch * t}));
  return b.Mul(ce, b.ConstantF32(1.0f / static_cast<float>(l.devices())));
}

std::vector<std::string> Axes(const GptLayout& l, bool over_model) {
  std::vector<std::string> axes;
  if (l.data > 1) axes.push_back(kDataAxis);
  if (over_model && l.model > 1) axes.push_back(kModelAxis);
  return axes;
}

Value Scalar(FunctionBuilder& b, Value v, int64_t i) {
  return b.Reshape(b.Slice(v, {i}, {i + 1}), {});
}

Value ScalarTo(FunctionBuilder& b, Value s, const std::vector<int64_t>& dims) {
  return b.Broadcast(s, dims, {});
}

absl::Status CheckBatch(const GptConfig& c, int64_t local_batch, int64_t t) {
  CW_RETURN_IF_ERROR(c.Validate());
  if (local_batch < 1) return absl::InvalidArgumentError("batch must be >= 1");
  if (t < 1 || t > c.context) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence length ", t, " outside [1, context ", c.context, "]"));
  }
  return absl::OkStatus();
}

// Declares a training step's last parameters (tokens, targets, and the
// (step, lr) pair in *hyper) and calls `grad`, the gradient of `loss`, on
// `params` and the batch.
std::vector<Value> CallGradients(FunctionBuilder& b, const ir::Function& loss,
                                 const ir::Function& grad, const std::vector<Value>& params,
                                 Value* hyper) {
  const int np = static_cast<int>(params.size());
  std::vector<Value> args = params;
  args.push_back(b.Parameter(loss.parameter_shape(np)));      // tokens
  args.push_back(b.Parameter(loss.parameter_shape(np + 1)));  // targets
  *hyper = b.Parameter(Shape(DType::kF32, {2}));
  return b.Call(grad, args);
}

}  // namespace

namespace internal {

int ParamsPerBlock(const GptConfig& c) { return c.bias ? 12 : 6; }

std::vector<int64_t> LocalDims(const ParamSpec& spec, const GptLayout& layout) {
  std::vector<int64_t> dims = spec.dims;
  if (spec.model_dim >= 0) dims[spec.model_dim] /= layout.model;
  return dims;
}

Value Embed(FunctionBuilder& b, const GptConfig& c, Value wte, Value wpe, Value tokens,
            int64_t batch, int64_t t) {
  const int64_t n = batch * t;
  Value x = b.Gather(wte, b.Reshape(tokens, {n}), 0);  // [n, C]
  Value pos = b.Slice(wpe, {0, 0}, {t, c.embed});
  return b.Add(x, b.Reshape(b.Broadcast(pos, {batch, t, c.embed}, {1, 2}), {n, c.embed}));
}

Value Block(FunctionBuilder& b, const GptConfig& c, const GptLayout& l, ParamCursor& p, Value x,
            int64_t batch, int64_t t, GptKernels k) {
  const bool fused = k == GptKernels::kFused;
  const int64_t n = batch * t;
  const int64_t cl = c.embed / l.model;   // local attention width
  const int64_t hl = c.heads / l.model;   // local heads
  const int64_t hd = c.embed / c.heads;   // head size
  Value ln1_w = p.Next();
  Value ln1_b = p.NextBias();
  Value qkv_w = p.Next();
  Value qkv_b = p.NextBias();
  Value proj_w = p.Next();
  Value proj_b = p.NextBias();
  Value ln2_w = p.Next();
  Value ln2_b = p.NextBias();
  Value fc_w = p.Next();
  Value fc_b = p.NextBias();
  Value mproj_w = p.Next();
  Value mproj_b = p.NextBias();

  // Attention over this device's heads.
  Value h = Norm(b, x, ln1_w, ln1_b, k);
  // q, k and v each from its slice of the weight: slicing (and, in the
  // backward pass, padding) the small weight instead of the activations.
  auto part = [&](int64_t i) {
    Value w = b.Reshape(b.Slice(qkv_w, {0, i, 0}, {c.embed, i + 1, cl}), {c.embed, cl});
    Value y = b.Matmul(h, w);
    if (qkv_b.id >= 0) y = AddBias(b, y, b.Reshape(b.Slice(qkv_b, {i, 0}, {i + 1, cl}), {cl}));
    y = b.Transpose(b.Reshape(y, {batch, t, hl, hd}), {0, 2, 1, 3});
    return b.Reshape(y, {batch * hl, t, hd});
  };
  Value att = ir::CausalAttention(b, part(0), part(1), part(2), fused);  // [b*hl, t, hd]
  att = b.Transpose(b.Reshape(att, {batch, hl, t, hd}), {0, 2, 1, 3});
  att = b.Reshape(att, {n, cl});
  x = b.Add(x, AddBias(b, ModelSum(b, b.Matmul(att, proj_w), l), proj_b));

  // MLP over this device's hidden units.
  Value h2 = Norm(b, x, ln2_w, ln2_b, k);
  Value f = AddBias(b, b.Matmul(h2, fc_w), fc_b);  // [n, fl]
  f = fused ? ir::Gelu(b, f) : ir::GeluOpByOp(b, f);
  x = b.Add(x, AddBias(b, ModelSum(b, b.Matmul(f, mproj_w), l), mproj_b));
  return x;
}

Value FinalNorm(FunctionBuilder& b, ParamCursor& p, Value x, GptKernels k) {
  Value lnf_w = p.Next();
  Value lnf_b = p.NextBias();
  return Norm(b, x, lnf_w, lnf_b, k);
}

Value Head(FunctionBuilder& b, Value h, Value wte) {
  return b.DotGeneral(h, wte, {}, {}, {1}, {1});
}

Value ClipFactor(FunctionBuilder& b, const AdamWConfig& o, Value norm) {
  Value clip = b.ConstantF32(1.0f);
  if (o.grad_clip > 0) {
    clip = b.Min(clip, b.Div(b.ConstantF32(o.grad_clip), b.Add(norm, b.ConstantF32(1e-6f))));
  }
  return clip;
}

AdamWValues AppendAdamW(FunctionBuilder& b, const AdamWConfig& o, const AdamWValues& state,
                        const std::vector<Value>& grads, const std::vector<bool>& decay_of,
                        Value hyper, Value clip, std::optional<Value> decay_mask) {
  const std::vector<Value>& p = state.p;
  const std::vector<Value>& m = state.m;
  const std::vector<Value>& v = state.v;
  // AdamW, as torch.optim.AdamW: p *= 1 - lr wd; p -= lr/c1 * m / (sqrt(v/c2) + eps),
  // with the clip folded into the moments' scalar factors and the bias
  // corrections into the step size and epsilon,
  //   lr/c1 * m / (sqrt(v)/sqrt(c2) + eps) = (lr sqrt(c2)/c1) * m / (sqrt(v) + eps sqrt(c2)),
  // so that each parameter takes 13 elementwise passes instead of 16.
  Value step = Scalar(b, hyper, 0);
  Value lr = Scalar(b, hyper, 1);
  Value c1 = b.Sub(b.ConstantF32(1), b.Pow(b.ConstantF32(o.beta1), step));
  Value sqrt_c2 = b.Sqrt(b.Sub(b.ConstantF32(1), b.Pow(b.ConstantF32(o.beta2), step)));
  Value step_size = b.Div(b.Mul(lr, sqrt_c2), c1);
  Value epsilon = b.Mul(b.ConstantF32(o.epsilon), sqrt_c2);
  Value m_scale = b.Mul(b.ConstantF32(1 - o.beta1), clip);
  Value v_scale = b.Mul(b.ConstantF32(1 - o.beta2), b.Mul(clip, clip));
  Value lr_wd = b.Mul(lr, b.ConstantF32(o.weight_decay));
  Value decay = b.Sub(b.ConstantF32(1), lr_wd);
  AdamWValues next;
  for (size_t i = 0; i < p.size(); ++i) {
    const std::vector<int64_t> dims = b.shape(p[i]).dims;
    const Value g = grads[i];
    Value mi = b.Add(b.Mul(m[i], b.Full(o.beta1, dims)), b.Mul(g, ScalarTo(b, m_scale, dims)));
    Value vi = b.Add(b.Mul(v[i], b.Full(o.beta2, dims)),
                     b.Mul(b.Mul(g, g), ScalarTo(b, v_scale, dims)));
    Value denom = b.Add(b.Sqrt(vi), ScalarTo(b, epsilon, dims));
    Value pi = p[i];
    if (decay_mask.has_value()) {
      // 1 - mask * lr wd: exactly `decay` where the mask is 1, and 1 where
      // it is 0, so each element is updated as its own parameter would be.
      pi = b.Mul(p[i], b.Sub(b.Full(1.0f, dims), b.Mul(*decay_mask, ScalarTo(b, lr_wd, dims))));
    } else if (decay_of[i]) {
      pi = b.Mul(p[i], ScalarTo(b, decay, dims));
    }
    pi = b.Sub(pi, b.Mul(b.Div(mi, denom), ScalarTo(b, step_size, dims)));
    next.p.push_back(pi);
    next.m.push_back(mi);
    next.v.push_back(vi);
  }
  return next;
}

}  // namespace internal

absl::Status GptConfig::Validate() const {
  if (vocab < 1 || context < 1 || layers < 1 || heads < 1 || embed < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model sizes must be positive (vocab ", vocab, ", context ", context,
                     ", layers ", layers, ", heads ", heads, ", embed ", embed, ")"));
  }
  if (embed % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding ", embed, " does not divide into ", heads, " heads"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLayout(const GptConfig& c, const GptLayout& l, int64_t batch) {
  CW_RETURN_IF_ERROR(c.Validate());
  if (l.data < 1 || l.model < 1) {
    return absl::InvalidArgumentError(absl::StrCat("mesh axes must be >= 1 (data ", l.data,
                                                   ", model ", l.model, ")"));
  }
  if (batch % l.data != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch, " is not divisible by the data axis (", l.data, " devices)"));
  }
  if (c.heads % l.model != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.heads, " heads are not divisible by the model axis (", l.model, " devices)"));
  }
  if ((4 * c.embed) % l.model != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MLP hidden size ", 4 * c.embed,
                                                   " is not divisible by the model axis (",
                                                   l.model, " devices)"));
  }
  return absl::OkStatus();
}

std::vector<ParamSpec> GptParams(const GptConfig& c) {
  const int64_t e = c.embed;
  std::vector<ParamSpec> specs;
  specs.push_back({"wte", {c.vocab, e}, -1, true, Init::kNormal});
  specs.push_back({"wpe", {c.context, e}, -1, true, Init::kNormal});
  auto bias = [&](std::string name, std::vector<int64_t> dims, int model_dim) {
    if (c.bias) specs.push_back({std::move(name), std::move(dims), model_dim, false, Init::kZeros});
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string h = absl::StrCat("h.", i, ".");
    specs.push_back({h + "ln_1.w", {e}, -1, false, Init::kOnes});
    bias(h + "ln_1.b", {e}, -1);
    // [in, q|k|v, out]: the heads of q, k and v split together over "model".
    specs.push_back({h + "attn.qkv.w", {e, 3, e}, 2, true, Init::kNormal});
    bias(h + "attn.qkv.b", {3, e}, 1);
    specs.push_back({h + "attn.proj.w", {e, e}, 0, true, Init::kResidualNormal});
    bias(h + "attn.proj.b", {e}, -1);
    specs.push_back({h + "ln_2.w", {e}, -1, false, Init::kOnes});
    bias(h + "ln_2.b", {e}, -1);
    specs.push_back({h + "mlp.fc.w", {e, 4 * e}, 1, true, Init::kNormal});
    bias(h + "mlp.fc.b", {4 * e}, 0);
    specs.push_back({h + "mlp.proj.w", {4 * e, e}, 0, true, Init::kResidualNormal});
    bias(h + "mlp.proj.b", {e}, -1);
  }
  specs.push_back({"ln_f.w", {e}, -1, false, Init::kOnes});
  bias("ln_f.b", {e}, -1);
  return specs;
}

Sharding ParamSharding(const ParamSpec& spec) {
  std::vector<std::vector<std::string>> dims(spec.dims.size());
  if (spec.model_dim >= 0) dims[spec.model_dim] = {kModelAxis};
  return Sharding(std::move(dims));
}

std::vector<ir::Literal> InitGptParams(const GptConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::Literal> out;
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.layers));
  for (const ParamSpec& spec : GptParams(c)) {
    ir::Literal lit(Shape(DType::kF32, spec.dims));
    absl::Span<float> v = lit.mutable_values<float>();
    switch (spec.init) {
      case Init::kNormal:
      case Init::kResidualNormal: {
        std::normal_distribution<float> dist(
            0.0f, spec.init == Init::kNormal ? 0.02f : residual_std);
        for (float& x : v) x = dist(rng);
        break;
      }
      case Init::kOnes:
        for (float& x : v) x = 1.0f;
        break;
      case Init::kZeros:
        break;
    }
    out.push_back(std::move(lit));
  }
  return out;
}

absl::StatusOr<ir::Function> GptLossFunction(const GptConfig& c, const GptLayout& l,
                                             int64_t local_batch, GptKernels k) {
  CW_RETURN_IF_ERROR(CheckBatch(c, local_batch, c.context));
  CW_RETURN_IF_ERROR(ValidateLayout(c, l, local_batch * l.data));
  FunctionBuilder b("gpt_loss");
  std::vector<Value> params = AddParams(b, c, l);
  Value tokens = b.Parameter(Shape(DType::kI32, {local_batch, c.context}));
  Value targets = b.Parameter(Shape(DType::kI32, {local_batch, c.context}));
  return b.Build({LossShare(b, c, l, params, tokens, targets, local_batch, c.context, k)});
}

absl::StatusOr<ir::Function> GptLogitsFunction(const GptConfig& c, const GptLayout& l,
                                               int64_t local_batch, GptKernels k) {
  CW_RETURN_IF_ERROR(CheckBatch(c, local_batch, c.context));
  CW_RETURN_IF_ERROR(ValidateLayout(c, l, local_batch * l.data));
  FunctionBuilder b("gpt_logits");
  std::vector<Value> params = AddParams(b, c, l);
  Value tokens = b.Parameter(Shape(DType::kI32, {local_batch, c.context}));
  auto [h, wte] = Trunk(b, c, l, params, tokens, local_batch, c.context, k);
  return b.Build({b.Reshape(internal::Head(b, h, wte), {local_batch, c.context, c.vocab})});
}

absl::StatusOr<ir::Function> GptEvalFunction(const GptConfig& c, const GptLayout& l,
                                             int64_t local_batch, GptKernels k) {
  CW_ASSIGN_OR_RETURN(ir::Function loss, GptLossFunction(c, l, local_batch, k));
  FunctionBuilder b("gpt_eval");
  std::vector<Value> args;
  for (int i = 0; i < loss.num_parameters(); ++i) args.push_back(b.Parameter(loss.parameter_shape(i)));
  Value share = b.Call(loss, args)[0];
  const std::vector<std::string> all = Axes(l, /*over_model=*/true);
  return b.Build({all.empty() ? share : b.AllReduce(share, all)});
}

absl::StatusOr<ir::Function> GptTrainStepFunction(const GptConfig& c, const GptLayout& l,
                                                  int64_t local_batch, const AdamWConfig& o,
                                                  GptKernels k) {
  CW_ASSIGN_OR_RETURN(ir::Function loss, GptLossFunction(c, l, local_batch, k));
  const std::vector<ParamSpec> specs = GptParams(c);
  const int np = static_cast<int>(specs.size());
  std::vector<int> wrt(static_cast<size_t>(np));
  for (int i = 0; i < np; ++i) wrt[i] = i;
  CW_ASSIGN_OR_RETURN(ir::Function grad, ir::Grad(loss, wrt));

  FunctionBuilder b("gpt_train_step");
  std::vector<Value> p, m, v;
  for (int i = 0; i < np; ++i) p.push_back(b.Parameter(loss.parameter_shape(i)));
  for (int i = 0; i < np; ++i) m.push_back(b.Parameter(loss.parameter_shape(i)));
  for (int i = 0; i < np; ++i) v.push_back(b.Parameter(loss.parameter_shape(i)));
  Value hyper;
  std::vector<Value> out = CallGradients(b, loss, grad, p, &hyper);  // (loss share, grads...)

  // Gradients are reduced in one flat vector per set of axes: parameters
  // held whole by a model group are summed over data and model, split ones
  // over data only. The loss share rides along with the first group.
  std::map<std::vector<std::string>, std::vector<int>> groups;
  for (int i = 0; i < np; ++i) groups[Axes(l, specs[i].model_dim < 0)].push_back(i);
  const std::vector<std::string> loss_axes = Axes(l, /*over_model=*/true);
  std::vector<Value> grads(static_cast<size_t>(np));
  Value loss_value;
  Value sumsq = b.ConstantF32(0.0f);
  for (const auto& [axes, members] : groups) {
    // A split group holds 1/model of each gradient per device.
    bool split = false;
    for (int i : members) split = split || specs[i].model_dim >= 0;
    const bool with_loss = axes == loss_axes;
    if (axes.empty()) {
      // Nothing to reduce: no flat copy, the squared norm per gradient.
      Value sq = b.ConstantF32(0.0f);
      for (int i : members) {
        grads[i] = out[1 + i];
        std::vector<int64_t> all(b.shape(p[i]).dims.size());
        for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int64_t>(d);
        sq = b.Add(sq, b.ReduceSum(b.Mul(grads[i], grads[i]), all));
      }
      if (with_loss) loss_value = out[0];
      if (split && l.model > 1) sq = b.AllReduce(sq, {kModelAxis});
      sumsq = b.Add(sumsq, sq);
      continue;
    }
    std::vector<Value> parts;
    int64_t total = 0;
    for (int i : members) {
      const int64_t n = NumElements(b.shape(p[i]).dims);
      parts.push_back(b.Reshape(out[1 + i], {n}));
      total += n;
    }
    if (with_loss) parts.push_back(b.Reshape(out[0], {1}));
    Value flat = b.Concatenate(parts, 0);
    if (!axes.empty()) flat = b.AllReduce(flat, axes);
    if (with_loss) loss_value = Scalar(b, flat, total);
    Value g = b.Slice(flat, {0}, {total});
    Value sq = b.ReduceSum(b.Mul(g, g), {0});
    if (split && l.model > 1) sq = b.AllReduce(sq, {kModelAxis});
    sumsq = b.Add(sumsq, sq);
    int64_t offset = 0;
    for (int i : members) {
      const std::vector<int64_t> dims = b.shape(p[i]).dims;
      const int64_t n = NumElements(dims);
      grads[i] = b.Reshape(b.Slice(g, {offset}, {offset + n}), dims);
      offset += n;
    }
  }
  Value norm = b.Sqrt(sumsq);
  Value clip = internal::ClipFactor(b, o, norm);
  std::vector<bool> decay;
  for (const ParamSpec& spec : specs) decay.push_back(spec.decay);
  const internal::AdamWValues next = internal::AppendAdamW(b, o, {p, m, v}, grads, decay, hyper, clip);
  const std::vector<Value>& new_p = next.p;
  const std::vector<Value>& new_m = next.m;
  const std::vector<Value>& new_v = next.v;
  std::vector<Value> results = new_p;
  results.insert(results.end(), new_m.begin(), new_m.end());
  results.insert(results.end(), new_v.begin(), new_v.end());
  results.push_back(loss_value);
  results.push_back(norm);
  return b.Build(results);
}

ShardedOptimizerLayout::ShardedOptimizerLayout(const GptConfig& c, int64_t data) {
  for (const ParamSpec& spec : GptParams(c)) {
    offsets.push_back(total);
    total += NumElements(spec.dims);
  }
  shard = (total + data - 1) / data;
  padded = shard * data;
}

absl::StatusOr<ir::Function> GptShardedTrainStepFunction(const GptConfig& c, const GptLayout& l,
                                                         int64_t local_batch,
                                                         const AdamWConfig& o,
                                                         GptKernels k) {
  if (l.model != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sharded optimiser needs a model axis of 1, not ", l.model));
  }
  CW_ASSIGN_OR_RETURN(ir::Function loss, GptLossFunction(c, l, local_batch, k));
  const std::vector<ParamSpec> specs = GptParams(c);
  const int np = static_cast<int>(specs.size());
  const ShardedOptimizerLayout flat(c, l.data);
  std::vector<int> wrt(static_cast<size_t>(np));
  for (int i = 0; i < np; ++i) wrt[i] = i;
  CW_ASSIGN_OR_RETURN(ir::Function grad, ir::Grad(loss, wrt));

  FunctionBuilder b("gpt_train_step_sharded");
  std::vector<Value> p;
  for (int i = 0; i < np; ++i) p.push_back(b.Parameter(loss.parameter_shape(i)));
  const Shape shard(DType::kF32, {flat.shard});
  Value master = b.Parameter(shard);
  Value m = b.Parameter(shard);
  Value v = b.Parameter(shard);
  Value mask = b.Parameter(shard);
  Value hyper;
  std::vector<Value> out = CallGradients(b, loss, grad, p, &hyper);  // (loss share, grads...)

  // Every gradient in one flat vector, padded to whole shards, summed over
  // `data` with each device keeping its shard.
  std::vector<Value> parts;
  for (int i = 0; i < np; ++i) parts.push_back(b.Reshape(out[1 + i], {NumElements(specs[i].dims)}));
  if (flat.padded > flat.total) parts.push_back(b.Full(0.0f, {flat.padded - flat.total}));
  Value g = l.data > 1 ? b.ReduceScatter(b.Concatenate(parts, 0), {kDataAxis}, 0, l.data)
                       : b.Concatenate(parts, 0);
  // The loss share and the shard's squared norm, summed in one all-reduce.
  Value sums = b.Concatenate({b.Reshape(out[0], {1}), b.Reshape(b.ReduceSum(b.Mul(g, g), {0}), {1})}, 0);
  if (l.data > 1) sums = b.AllReduce(sums, {kDataAxis});
  Value loss_value = Scalar(b, sums, 0);
  Value norm = b.Sqrt(Scalar(b, sums, 1));
  Value clip = internal::ClipFactor(b, o, norm);
  const internal::AdamWValues next =
      internal::AppendAdamW(b, o, {{master}, {m}, {v}}, {g}, {true}, hyper, clip, mask);
  // Each device's updated shard, gathered, is every parameter again.
  Value whole = l.data > 1 ? b.AllGather(next.p[0], {kDataAxis}, 0, l.data) : next.p[0];
  std::vector<Value> results;
  for (int i = 0; i < np; ++i) {
    const int64_t n = NumElements(specs[i].dims);
    results.push_back(
        b.Reshape(b.Slice(whole, {flat.offsets[i]}, {flat.offsets[i] + n}), specs[i].dims));
  }
  results.push_back(next.p[0]);
  results.push_back(next.m[0]);
  results.push_back(next.v[0]);
  results.push_back(loss_value);
  results.push_back(norm);
  return b.Build(results);
}

double GptTrainFlopsPerStep(const GptConfig& c, int64_t batch) {
  const double e = static_cast<double>(c.embed);
  const double matrix_params = 12.0 * static_cast<double>(c.layers) * e * e +
                               static_cast<double>(c.vocab) * e;
  const double attention = 12.0 * static_cast<double>(c.layers) *
                           static_cast<double>(c.context) * e;
  return static_cast<double>(batch * c.context) * (6.0 * matrix_params + attention);
}

}  // namespace causeway::models
