// A decoder-only Transformer language model with the GPT-2 layout, written
// in the Causeway IR: token and learned position embeddings, pre-LayerNorm
// blocks of causal multi-head self-attention and a 4x GELU MLP, a final
// LayerNorm and an LM head tied to the token embedding.
//
// The functions here are per-device (SPMD) code for a mesh with two axes,
// "data" (the batch is split over it) and "model" (Megatron-style tensor
// parallelism: attention heads and the MLP hidden units are split over it;
// the attention and MLP output projections are row-parallel and followed by
// an all-reduce over "model"). Either axis may have size 1.
//
// Gradient convention (see ir/autodiff.h): each device's output 0 is its
// share of the global mean loss, mean-over-its-rows / (data x model), so the
// sum over all devices is the loss. The gradient a device then computes for
// a parameter it holds whole is a partial sum over the devices holding
// copies; all-reducing it over those axes gives the true gradient. For a
// parameter split over "model" the device's gradient of its shard is exact
// up to the all-reduce over "data".
#ifndef CAUSEWAY_MODELS_GPT_H_
#define CAUSEWAY_MODELS_GPT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/ir/function.h"
#include "causeway/ir/literal.h"
#include "causeway/topology/mesh.h"

namespace causeway::models {

inline constexpr char kDataAxis[] = "data";
inline constexpr char kModelAxis[] = "model";

struct GptConfig {
  int64_t vocab = 65;
  int64_t context = 64;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t embed = 128;
  bool bias = true;

  // INVALID_ARGUMENT if a size is not positive or embed % heads != 0.
  absl::Status Validate() const;
  friend bool operator==(const GptConfig&, const GptConfig&) = default;
};

// How the blocks' GELU, softmax and layer norms are built: as the fused ops
// of the IR (one pass over the data each), or op by op from elementwise,
// broadcast and reduce ops (the same function, to measure what fusion buys).
enum class GptKernels { kFused, kOpByOp };

// How one step's work is split: `data` x `model` devices.
struct GptLayout {
  int64_t data = 1;
  int64_t model = 1;
  int64_t devices() const { return data * model; }
};

// INVALID_ARGUMENT naming the problem if `batch` does not split over the
// data axis, or the heads or the MLP hidden size (4 x embed) do not split
// over the model axis.
absl::Status ValidateLayout(const GptConfig& config, const GptLayout& layout, int64_t batch);

// How a parameter is initialised (GPT-2): normal(0, 0.02); the residual
// output projections normal(0, 0.02 / sqrt(2 layers)); ones; zeros.
enum class Init { kNormal, kResidualNormal, kOnes, kZeros };

struct ParamSpec {
  std::string name;           // "h.0.attn.qkv.w"
  std::vector<int64_t> dims;  // global shape
  // The dimension split over the "model" axis, or -1 if every device of a
  // model group holds the whole parameter.
  int model_dim = -1;
  bool decay = false;  // AdamW weight decay applies (the weight matrices)
  Init init = Init::kZeros;
};

// The model's parameters in their fixed order.
std::vector<ParamSpec> GptParams(const GptConfig& config);

// The sharding of a parameter on a {data, model} mesh.
Sharding ParamSharding(const ParamSpec& spec);

// The initial parameters (global, host-side), a pure function of the seed.
std::vector<ir::Literal> InitGptParams(const GptConfig& config, uint64_t seed);

// Per-device loss: (params..., tokens i32[b, t], targets i32[b, t]) ->
// (this device's share of the mean cross-entropy, f32[]), with b = the
// local batch, t <= context. Parameters are the local shards.
absl::StatusOr<ir::Function> GptLossFunction(const GptConfig& config, const GptLayout& layout,
                                             int64_t local_batch,
                                             GptKernels kernels = GptKernels::kFused);

// Per-device logits: (params..., tokens i32[b, context]) -> f32[b, context,
// vocab], the next-token logits at every position. Model axis of size 1 or
// more; the data axis splits b.
absl::StatusOr<ir::Function> GptLogitsFunction(const GptConfig& config,
                                               const GptLayout& layout, int64_t local_batch,
                                               GptKernels kernels = GptKernels::kFused);

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
  // Global gradient-norm clipping; <= 0 turns it off.
  float grad_clip = 1.0f;
};

// One training step, per device:
//   (params..., adam_m..., adam_v..., tokens i32[b, t], targets i32[b, t],
//    hyper f32[2] = (step, learning rate))
//   -> (params'..., adam_m'..., adam_v'..., loss f32[], grad_norm f32[])
// `step` is the 1-based AdamW step. The loss and gradient norm are global
// (the same on every device) and measured before the update. The
// gradients are all-reduced in one flat vector per group of parameters.
absl::StatusOr<ir::Function> GptTrainStepFunction(const GptConfig& config,
                                                  const GptLayout& layout,
                                                  int64_t local_batch,
                                                  const AdamWConfig& adamw,
                                                  GptKernels kernels = GptKernels::kFused);

// Where each parameter lies in the flat vector a sharded optimiser keeps:
// GptParams order, padded with zeros to `data` shards of `shard` elements.
struct ShardedOptimizerLayout {
  ShardedOptimizerLayout(const GptConfig& config, int64_t data);
  std::vector<int64_t> offsets;  // of each parameter
  int64_t total = 0;             // elements of all parameters
  int64_t shard = 0;             // per device
  int64_t padded = 0;            // shard x data
};

// One training step with the optimiser state sharded over the `data` axis
// (ZeRO stage 1), for layouts whose model axis is 1. Per device:
//   (params..., master f32[shard], adam_m f32[shard], adam_v f32[shard],
//    decay_mask f32[shard], tokens, targets, hyper)
//   -> (params'..., master', adam_m', adam_v', loss f32[], grad_norm f32[])
// The flat gradient is reduce-scattered instead of all-reduced; each device
// updates only its shard of the parameters (`master`, the flat vector of
// ShardedOptimizerLayout, split over `data` along dimension 0) and its
// moments, and the updated shards are all-gathered into the parameters.
// `decay_mask` is 1 on the elements of weight-decayed matrices, else 0.
// The same update, element for element, as GptTrainStepFunction's.
absl::StatusOr<ir::Function> GptShardedTrainStepFunction(const GptConfig& config,
                                                         const GptLayout& layout,
                                                         int64_t local_batch,
                                                         const AdamWConfig& adamw,
                                                         GptKernels kernels = GptKernels::kFused);

// Evaluation: (params..., tokens, targets) -> global mean loss f32[].
absl::StatusOr<ir::Function> GptEvalFunction(const GptConfig& config, const GptLayout& layout,
                                             int64_t local_batch,
                                             GptKernels kernels = GptKernels::kFused);

// FLOPs of one training step of `batch` sequences (forward and backward:
// 6 per parameter and token for the matrices, plus attention), for
// throughput figures.
double GptTrainFlopsPerStep(const GptConfig& config, int64_t batch);

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_GPT_H_
