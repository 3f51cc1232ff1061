// A two-layer MLP classifier trained data-parallel: the model, the step
// function (forward, Grad, gradients all-reduced over the "data" mesh axis,
// SGD update — all inside one IR function) and a generated classification
// task. Shared by `causeway train mlp` and the training tests.
#ifndef CAUSEWAY_MODELS_MLP_H_
#define CAUSEWAY_MODELS_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/client/client.h"
#include "causeway/ir/function.h"
#include "causeway/ir/literal.h"

namespace causeway::models {

struct MlpOptions {
  int64_t features = 16;
  int64_t hidden = 64;
  int64_t classes = 4;
  // Examples per step over all devices; must divide by the device count.
  int64_t global_batch = 256;
  float learning_rate = 0.5f;
  // Seeds the initial weights and the task (class centres and samples).
  uint32_t seed = 1;
};

// The generated task: `classes` Gaussian clusters in `features` dimensions
// (centres drawn once from the seed, noise of standard deviation 1.5).
// Batch `step` is a deterministic function of (seed, step).
struct Batch {
  ir::Literal x;       // f32[global_batch, features]
  ir::Literal labels;  // i32[global_batch]
};
Batch MakeBatch(const MlpOptions& options, int64_t step);

// Per-device step function for `devices` data-parallel devices:
// (w1, b1, w2, b2, x, labels) -> (w1', b1', w2', b2', loss), where x and
// labels are this device's shard and loss is the global mean loss.
absl::StatusOr<ir::Function> MlpStepFunction(const MlpOptions& options, int devices);

// Drives training on a client. Not thread-safe.
class MlpTrainer {
 public:
  // Allocates a {"data": devices} mesh, compiles the step and puts the
  // initial weights. INVALID_ARGUMENT if global_batch % devices != 0.
  static absl::StatusOr<std::unique_ptr<MlpTrainer>> Create(Client* client, int devices,
                                                            const MlpOptions& options);

  // Runs one step on MakeBatch(options, step) and returns its loss (the
  // loss of the weights before the update), waiting for it.
  absl::StatusOr<float> Step(int64_t step);

  // The current weights (w1, b1, w2, b2), fetched.
  absl::StatusOr<std::vector<ir::Literal>> Weights() const;

 private:
  MlpTrainer(Client* client, MlpOptions options, Mesh mesh, CompiledFunction step,
             std::vector<Array> weights)
      : client_(client), options_(options), mesh_(std::move(mesh)),
        step_(std::move(step)), weights_(std::move(weights)) {}

  Client* const client_;
  const MlpOptions options_;
  const Mesh mesh_;
  const CompiledFunction step_;
  std::vector<Array> weights_;
};

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_MLP_H_
