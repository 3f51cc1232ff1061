// Data-parallel training of the GPT model (gpt.h) across islands: the
// paper's two-island experiment. Each island holds a copy of the model on
// a {data: D, model: 1} mesh and takes 1/I of the batch; a step computes
// each island's gradients (all-reduced over its "data" axis, inside the
// island), exchanges them between the islands over the data-center
// network, and every island sums them in the same order and applies the
// same AdamW update, so the copies stay equal. One traced program per step.
//
// Same numbers as one device: each device's loss share is its mean
// cross-entropy / (I D), the gradient norm is computed from the summed
// gradients, and the update is the whole-model step's AdamW code.
#ifndef CAUSEWAY_MODELS_GPT_ISLANDS_H_
#define CAUSEWAY_MODELS_GPT_ISLANDS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/client/client.h"
#include "causeway/models/gpt.h"
#include "causeway/models/lm_engine.h"

namespace causeway::models {

struct GptIslandsOptions {
  int64_t islands = 1;  // 1: not used
  int64_t data = 1;     // data-parallel devices per island
};

// INVALID_ARGUMENT naming the problem (a batch that does not split into
// islands x data shards, fewer than 2 islands).
absl::Status ValidateIslands(const GptConfig& config, const GptIslandsOptions& options,
                             int64_t batch);

// Not thread-safe.
class GptIslandDataParallel final : public LmStepEngine {
 public:
  // Allocates a {data, model=1} mesh on each of the first `islands`
  // islands, compiles the functions and lowers the step and evaluation
  // programs. `batch` is the global number of sequences per step.
  static absl::StatusOr<std::unique_ptr<GptIslandDataParallel>> Create(
      Client* client, const GptConfig& config, const GptIslandsOptions& options,
      const AdamWConfig& adamw, GptKernels kernels, int64_t batch);

  absl::Status Init(const std::vector<ir::Literal>& params, const std::vector<ir::Literal>& m,
                    const std::vector<ir::Literal>& v) override;
  absl::StatusOr<StepOutputs> Step(const TokenBatch& batch, float step,
                                   float learning_rate) override;
  absl::StatusOr<Array> Evaluate(const TokenBatch& batch) override;
  std::vector<Array> params() const override { return params_[0]; }
  std::vector<Array> adam_m() const override { return m_[0]; }
  std::vector<Array> adam_v() const override { return v_[0]; }
  const std::vector<Mesh>& meshes() const override { return meshes_; }

 private:
  GptIslandDataParallel(Client* client, GptConfig config, GptIslandsOptions options,
                        AdamWConfig adamw, GptKernels kernels, int64_t batch);
  absl::Status Build();
  // Appends each island's share of the batch's inputs and targets.
  absl::Status PutShares(const TokenBatch& batch, std::vector<Array>& args);

  Client* const client_;
  const GptConfig config_;
  const GptIslandsOptions options_;
  const AdamWConfig adamw_;
  const GptKernels kernels_;
  const int64_t batch_;
  const int64_t island_rows_;  // sequences per island

  std::vector<Mesh> meshes_;
  std::vector<CompiledFunction> grads_, sum_, update_, eval_;
  CompiledFunction eval_mean_;
  Program step_program_;
  Program eval_program_;
  std::vector<std::vector<Array>> params_, m_, v_;  // per island
};

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_GPT_ISLANDS_H_
