// Composites: common ML building blocks written in the IR with
// FunctionBuilder, so they compile, serialise and differentiate (Grad) like
// any other code. Each appends instructions to `b` and returns the result;
// errors are recorded in the builder like any other op's.
#ifndef CAUSEWAY_IR_COMPOSITES_H_
#define CAUSEWAY_IR_COMPOSITES_H_

#include "causeway/ir/builder.h"

namespace causeway::ir {

// Softmax, LayerNorm and Gelu emit one fused op each (kSoftmax, kNormalize,
// kGelu: one pass over the data, and one for the gradient). The *OpByOp
// forms build the same function from elementwise, broadcast and reduce ops;
// they are the reference the fused kernels are tested against, and what
// the fused kernels are measured against.

// Over the last dimension, shifted by the maximum for stability.
Value Softmax(FunctionBuilder& b, Value x);
Value SoftmaxOpByOp(FunctionBuilder& b, Value x);
Value LogSoftmax(FunctionBuilder& b, Value x);

// Normalises over the last dimension, then scales by `gamma` and shifts by
// `beta` (both f32[last]).
Value LayerNorm(FunctionBuilder& b, Value x, Value gamma, Value beta, float epsilon = 1e-5f);
Value LayerNormOpByOp(FunctionBuilder& b, Value x, Value gamma, Value beta,
                      float epsilon = 1e-5f);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Value Gelu(FunctionBuilder& b, Value x);
Value GeluOpByOp(FunctionBuilder& b, Value x);

// Mean cross-entropy of `logits` f32[n, c] against class ids `labels`
// i32[n]: -mean_i log_softmax(logits)[i, labels[i]]. Returns f32[].
Value CrossEntropy(FunctionBuilder& b, Value logits, Value labels);

// Causal self-attention of q, k, v: f32[batch, t, d] ->
// softmax(q k^T / sqrt(d) with position j > i masked) v, f32[batch, t, d].
// `fused` picks Softmax or SoftmaxOpByOp.
Value CausalAttention(FunctionBuilder& b, Value q, Value k, Value v, bool fused = true);

struct AdamWOptions {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
};

struct AdamWResult {
  Value param;
  Value m;
  Value v;
};

// One AdamW step (decoupled weight decay, bias-corrected moments). `step` is
// f32[], the 1-based step number.
AdamWResult AdamWUpdate(FunctionBuilder& b, Value param, Value grad, Value m, Value v,
                        Value step, const AdamWOptions& options = {});

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_COMPOSITES_H_
