#include "causeway/ir/composites.h"

#include <cmath>
#include <vector>

namespace causeway::ir {
namespace {

std::vector<int64_t> AllBut(int rank, int skip) {
  std::vector<int64_t> dims;
  for (int d = 0; d < rank; ++d) {
    if (d != skip) dims.push_back(d);
  }
  return dims;
}

// Reduces `x` over its last dimension and broadcasts the result back.
Value ReduceLastKeep(FunctionBuilder& b, Value x, OpKind op) {
  const Shape s = b.shape(x);
  const int last = s.rank() - 1;
  Value r = op == OpKind::kReduceMax ? b.ReduceMax(x, {last}) : b.ReduceSum(x, {last});
  return b.Broadcast(r, s.dims, AllBut(s.rank(), last));
}

Value Full(FunctionBuilder& b, float v, Value like) { return b.Full(v, b.shape(like).dims); }

}  // namespace

Value Softmax(FunctionBuilder& b, Value x) { return b.Softmax(x); }

Value SoftmaxOpByOp(FunctionBuilder& b, Value x) {
  Value e = b.Exp(b.Sub(x, ReduceLastKeep(b, x, OpKind::kReduceMax)));
  return b.Div(e, ReduceLastKeep(b, e, OpKind::kReduceSum));
}

Value LogSoftmax(FunctionBuilder& b, Value x) {
  Value shifted = b.Sub(x, ReduceLastKeep(b, x, OpKind::kReduceMax));
  return b.Sub(shifted, b.Log(ReduceLastKeep(b, b.Exp(shifted), OpKind::kReduceSum)));
}

Value LayerNorm(FunctionBuilder& b, Value x, Value gamma, Value beta, float epsilon) {
  const Shape s = b.shape(x);
  const std::vector<int64_t> last_only = {s.rank() - 1};
  Value normed = b.Normalize(x, b.ConstantF32(epsilon));
  return b.Add(b.Mul(normed, b.Broadcast(gamma, s.dims, last_only)),
               b.Broadcast(beta, s.dims, last_only));
}

Value LayerNormOpByOp(FunctionBuilder& b, Value x, Value gamma, Value beta, float epsilon) {
  const Shape s = b.shape(x);
  const int last = s.rank() - 1;
  const float inv_n = s.rank() > 0 && s.dims[last] > 0 ? 1.0f / s.dims[last] : 0.0f;
  Value mean = b.Mul(ReduceLastKeep(b, x, OpKind::kReduceSum), Full(b, inv_n, x));
  Value centered = b.Sub(x, mean);
  Value var = b.Mul(ReduceLastKeep(b, b.Mul(centered, centered), OpKind::kReduceSum),
                    Full(b, inv_n, x));
  Value normed = b.Mul(centered, b.Rsqrt(b.Add(var, Full(b, epsilon, x))));
  const std::vector<int64_t> last_only = {last};
  return b.Add(b.Mul(normed, b.Broadcast(gamma, s.dims, last_only)),
               b.Broadcast(beta, s.dims, last_only));
}

Value Gelu(FunctionBuilder& b, Value x) { return b.Gelu(x); }

Value GeluOpByOp(FunctionBuilder& b, Value x) {
  const float k = std::sqrt(2.0f / 3.14159265358979f);
  Value cube = b.Mul(x, b.Mul(x, x));
  Value inner = b.Mul(Full(b, k, x), b.Add(x, b.Mul(Full(b, 0.044715f, x), cube)));
  return b.Mul(b.Mul(Full(b, 0.5f, x), x), b.Add(Full(b, 1.0f, x), b.Tanh(inner)));
}

Value CrossEntropy(FunctionBuilder& b, Value logits, Value labels) {
  const Shape s = b.shape(logits);
  if (s.rank() != 2) return b.Reshape(logits, {-1});  // records an error
  const int64_t n = s.dims[0], c = s.dims[1];
  Value classes = b.Iota(Shape(DType::kI32, {n, c}), 1);
  Value onehot = b.Convert(
      b.Compare(classes, b.Broadcast(labels, {n, c}, {0}), Comparison::kEq), DType::kF32);
  Value picked = b.ReduceSum(b.Mul(LogSoftmax(b, logits), onehot), {0, 1});
  return b.Mul(picked, b.ConstantF32(n > 0 ? -1.0f / n : 0.0f));
}

Value CausalAttention(FunctionBuilder& b, Value q, Value k, Value v, bool fused) {
  const Shape s = b.shape(q);
  if (s.rank() != 3) return b.Reshape(q, {-1});  // records an error
  const int64_t batch = s.dims[0], t = s.dims[1], d = s.dims[2];
  // The 1/sqrt(d) scale on q ([batch, t, d]) rather than on the scores
  // ([batch, t, t]).
  q = b.Mul(q, b.Full(d > 0 ? 1.0f / std::sqrt(static_cast<float>(d)) : 1.0f, {batch, t, d}));
  Value scores = b.DotGeneral(q, k, {0}, {0}, {2}, {2});  // [batch, t, t]
  // The causal mask as an additive [t, t] bias (0 where j <= i, -1e30
  // above the diagonal), built once per call and broadcast over the batch;
  // the backend folds that broadcast into the add.
  Value row = b.Iota(Shape(DType::kI32, {t, t}), 0);
  Value col = b.Iota(Shape(DType::kI32, {t, t}), 1);
  Value mask = b.Select(b.Compare(col, row, Comparison::kLe), b.Full(0.0f, {t, t}),
                        b.Full(-1e30f, {t, t}));
  scores = b.Add(scores, b.Broadcast(mask, {batch, t, t}, {1, 2}));
  Value p = fused ? Softmax(b, scores) : SoftmaxOpByOp(b, scores);
  return b.DotGeneral(p, v, {0}, {0}, {2}, {1});  // [batch, t, d]
}

AdamWResult AdamWUpdate(FunctionBuilder& b, Value param, Value grad, Value m, Value v,
                        Value step, const AdamWOptions& o) {
  const std::vector<int64_t> dims = b.shape(param).dims;
  auto full = [&](float x) { return b.Full(x, dims); };
  auto scalar_to = [&](Value s) { return b.Broadcast(s, dims, {}); };
  Value m2 = b.Add(b.Mul(full(o.beta1), m), b.Mul(full(1 - o.beta1), grad));
  Value v2 = b.Add(b.Mul(full(o.beta2), v), b.Mul(full(1 - o.beta2), b.Mul(grad, grad)));
  // Bias corrections 1 - beta^step, computed as scalars.
  Value c1 = b.Sub(b.ConstantF32(1), b.Pow(b.ConstantF32(o.beta1), step));
  Value c2 = b.Sub(b.ConstantF32(1), b.Pow(b.ConstantF32(o.beta2), step));
  Value m_hat = b.Div(m2, scalar_to(c1));
  Value v_hat = b.Div(v2, scalar_to(c2));
  Value update = b.Div(m_hat, b.Add(b.Sqrt(v_hat), full(o.epsilon)));
  update = b.Add(update, b.Mul(full(o.weight_decay), param));
  return {b.Sub(param, b.Mul(full(o.learning_rate), update)), m2, v2};
}

}  // namespace causeway::ir
