// The GPT model's building blocks, shared by the whole-model functions of
// gpt.cc and the pipeline stages of gpt_pipeline.cc (so that a stage runs
// exactly the ops of its part of the whole model). Internal: not installed.
#ifndef CAUSEWAY_MODELS_GPT_BLOCKS_H_
#define CAUSEWAY_MODELS_GPT_BLOCKS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "causeway/ir/builder.h"
#include "causeway/models/gpt.h"

namespace causeway::models::internal {

// Walks parameters in GptParams order.
class ParamCursor {
 public:
  ParamCursor(const std::vector<ir::Value>& params, bool bias) : params_(params), bias_(bias) {}
  ir::Value Next() { return params_[next_++]; }
  // The next parameter if the model has biases, else an invalid Value.
  ir::Value NextBias() { return bias_ ? Next() : ir::Value(); }

 private:
  const std::vector<ir::Value>& params_;
  const bool bias_;
  size_t next_ = 0;
};

// Parameters of one transformer block (GptParams order).
int ParamsPerBlock(const GptConfig& c);

// The local shape of a parameter on a {data, model} mesh.
std::vector<int64_t> LocalDims(const ParamSpec& spec, const GptLayout& layout);

// Token plus position embedding of `tokens` i32[batch, t]: f32[batch * t, embed].
ir::Value Embed(ir::FunctionBuilder& b, const GptConfig& c, ir::Value wte, ir::Value wpe,
                ir::Value tokens, int64_t batch, int64_t t);
// One pre-LayerNorm block on x f32[batch * t, embed], its parameters taken
// from `p`.
ir::Value Block(ir::FunctionBuilder& b, const GptConfig& c, const GptLayout& l, ParamCursor& p,
                ir::Value x, int64_t batch, int64_t t, GptKernels k);
// The final LayerNorm, its parameters taken from `p`.
ir::Value FinalNorm(ir::FunctionBuilder& b, ParamCursor& p, ir::Value x, GptKernels k);
// Logits [n, vocab] of the tied head.
ir::Value Head(ir::FunctionBuilder& b, ir::Value h, ir::Value wte);

// min(1, clip / (norm + 1e-6)), or 1 when clipping is off.
ir::Value ClipFactor(ir::FunctionBuilder& b, const AdamWConfig& o, ir::Value norm);

// One AdamW step of every parameter (see GptTrainStepFunction): `hyper` is
// f32[2] = (1-based step, learning rate); gradients are scaled by `clip`.
struct AdamWValues {
  std::vector<ir::Value> p, m, v;
};
// With `decay_mask` (one parameter: a flat shard of several), weight decay
// applies where the mask is 1 and not where it is 0, instead of by `decay`.
AdamWValues AppendAdamW(ir::FunctionBuilder& b, const AdamWConfig& o, const AdamWValues& state,
                        const std::vector<ir::Value>& grads, const std::vector<bool>& decay,
                        ir::Value hyper, ir::Value clip,
                        std::optional<ir::Value> decay_mask = std::nullopt);

}  // namespace causeway::models::internal

#endif  // CAUSEWAY_MODELS_GPT_BLOCKS_H_
