// How LmTrainer runs a step when the model is spread over several meshes:
// a pipeline (gpt_pipeline.h) or data parallelism across islands
// (gpt_islands.h). Each engine keeps the model's state as sharded arrays on
// its meshes and runs a step as one traced program.
#ifndef CAUSEWAY_MODELS_LM_ENGINE_H_
#define CAUSEWAY_MODELS_LM_ENGINE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "causeway/client/client.h"
#include "causeway/ir/literal.h"
#include "causeway/models/gpt.h"
#include "causeway/models/text_data.h"

namespace causeway::models {

class LmStepEngine {
 public:
  virtual ~LmStepEngine() = default;

  // Puts the model's state (GptParams order, global shapes).
  virtual absl::Status Init(const std::vector<ir::Literal>& params,
                            const std::vector<ir::Literal>& m,
                            const std::vector<ir::Literal>& v) = 0;

  struct StepOutputs {
    Array loss;       // f32[]: mean over the batch, before the update
    Array grad_norm;  // f32[]: global, before clipping
  };
  // Dispatches one step on `batch` (i32[batch, context] inputs and
  // targets); returns at once. (step: 1-based; learning rate.)
  virtual absl::StatusOr<StepOutputs> Step(const TokenBatch& batch, float step,
                                           float learning_rate) = 0;
  // Dispatches the mean loss of `batch`, forward only.
  virtual absl::StatusOr<Array> Evaluate(const TokenBatch& batch) = 0;

  // The current state in GptParams order (one copy of each parameter).
  virtual std::vector<Array> params() const = 0;
  virtual std::vector<Array> adam_m() const = 0;
  virtual std::vector<Array> adam_v() const = 0;

  virtual const std::vector<Mesh>& meshes() const = 0;
};

// Helpers the engines share.

// Token batches are split over the "data" axis by rows.
Sharding BatchSharding();

// Rows [part * rows, (part + 1) * rows) of a literal whose first dimension
// is at least that long.
ir::Literal LiteralRows(const ir::Literal& literal, int64_t part, int64_t rows);

// INVALID_ARGUMENT unless params, m and v each hold one literal per
// parameter of a model of `num_params`.
absl::Status CheckModelState(size_t num_params, const std::vector<ir::Literal>& params,
                             const std::vector<ir::Literal>& m,
                             const std::vector<ir::Literal>& v);

// values[id] for each of `ids`, put on `mesh` with its parameter's
// sharding (ParamSharding of specs[id]).
absl::StatusOr<std::vector<Array>> PutParams(Client* client, const Mesh& mesh,
                                             const std::vector<ParamSpec>& specs,
                                             const std::vector<int>& ids,
                                             const std::vector<ir::Literal>& values);

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_LM_ENGINE_H_
