// Pipeline-parallel training of the GPT model (gpt.h): its layers split into
// S stages, each on a mesh of its own (its own devices, hosts or island), a
// step being M micro-batches through the stages and back.
//
// A whole step is one traced Causeway program, lowered once and run every
// step: every stage's forward and backward call for every micro-batch, the
// moves of activations and gradients between the stages' meshes (inserted
// by the program's lowering; across islands, over the data-center network),
// the global gradient norm and each stage's AdamW update. Dispatch prepares
// every node of a step before its inputs exist, so no stage waits for the
// controller.
//
// Schedules (the order of each stage's calls within the program):
//   GPipe: every micro-batch's forward, then every backward.
//   1F1B:  S - s - 1 warm-up forwards on stage s, then one forward and one
//          backward alternately: the same result, fewer micro-batch inputs
//          held at once.
// A stage keeps its micro-batches' inputs and recomputes its forward pass in
// the backward call (rematerialisation at stage boundaries, as GPipe does).
//
// Same numbers as one device: the loss of a step is the mean over the whole
// batch (each micro-batch's share is divided by M), gradients are summed over
// micro-batches (and all-reduced over a stage's "data" axis), the gradient
// norm is global over every stage, and the tied token embedding, held by the
// first stage (embedding) and the last (head), gets the sum of both stages'
// gradients on both, so the two copies stay equal.
#ifndef CAUSEWAY_MODELS_GPT_PIPELINE_H_
#define CAUSEWAY_MODELS_GPT_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/client/client.h"
#include "causeway/ir/literal.h"
#include "causeway/models/gpt.h"
#include "causeway/models/lm_engine.h"
#include "causeway/models/text_data.h"

namespace causeway::models {

enum class PipelineSchedule { kGPipe, k1F1B };

struct GptPipelineOptions {
  int64_t stages = 1;  // 1: no pipeline
  int64_t microbatches = 4;
  PipelineSchedule schedule = PipelineSchedule::kGPipe;
  // Data-parallel devices per stage.
  int64_t data = 1;
  // The stages are spread over this many islands, in consecutive groups
  // (2: the first half of the stages on island 0, the rest on island 1).
  int64_t islands = 1;
};

// One call of a pipeline step: stage `stage`'s forward or backward pass of
// micro-batch `microbatch`.
struct PipelineOp {
  int64_t stage = 0;
  bool forward = true;
  int64_t microbatch = 0;
};
// The calls of one step in the order to trace them: each stage's calls in
// its schedule's order (GPipe: all forwards, then all backwards; 1F1B:
// S - s - 1 warm-up forwards, then alternating), merged so that a forward
// comes after the previous stage's forward of its micro-batch and a
// backward after its own forward and the next stage's backward.
std::vector<PipelineOp> PipelineTraceOrder(int64_t stages, int64_t microbatches,
                                           PipelineSchedule schedule);

// INVALID_ARGUMENT naming the problem: fewer layers than stages, a batch
// that does not split into micro-batches of whole data shards, ...
absl::Status ValidatePipeline(const GptConfig& config, const GptPipelineOptions& options,
                              int64_t batch);

// The GptParams indices each stage holds, in GptParams order. The token
// embedding (index 0) is held by the first stage and the last.
std::vector<std::vector<int>> PipelineStageParams(const GptConfig& config, int64_t stages);

// Not thread-safe.
class GptPipeline final : public LmStepEngine {
 public:
  // Allocates a mesh {data, model=1} per stage on explicit devices (stage s
  // on the next free devices of its island), compiles every stage function
  // and lowers the step and evaluation programs. `batch` is the global
  // number of sequences per step.
  static absl::StatusOr<std::unique_ptr<GptPipeline>> Create(
      Client* client, const GptConfig& config, const GptPipelineOptions& options,
      const AdamWConfig& adamw, GptKernels kernels, int64_t batch);

  absl::Status Init(const std::vector<ir::Literal>& params, const std::vector<ir::Literal>& m,
                    const std::vector<ir::Literal>& v) override;
  absl::StatusOr<StepOutputs> Step(const TokenBatch& batch, float step,
                                   float learning_rate) override;
  absl::StatusOr<Array> Evaluate(const TokenBatch& batch) override;
  // The token embedding: the first stage's copy.
  std::vector<Array> params() const override { return Gather(params_); }
  std::vector<Array> adam_m() const override { return Gather(m_); }
  std::vector<Array> adam_v() const override { return Gather(v_); }
  const std::vector<Mesh>& meshes() const override { return meshes_; }

 private:
  GptPipeline(Client* client, GptConfig config, GptPipelineOptions options, AdamWConfig adamw,
              GptKernels kernels, int64_t batch);
  absl::Status Build();
  absl::Status CompileStages();
  absl::Status TraceStep();
  absl::Status TraceEval();
  // Program parameters both programs take, in this order where used: one
  // per parameter of every stage, on the stage's mesh (`group[s]`); then,
  // after the caller's scalars, every micro-batch's tokens (first stage)
  // and targets (last stage).
  absl::Status TraceStageParams(ProgramBuilder& pb,
                                std::vector<std::vector<TracedArray>>& group) const;
  absl::Status TraceBatches(ProgramBuilder& pb, std::vector<TracedArray>& tokens,
                            std::vector<TracedArray>& targets) const;
  // Appends each micro-batch's inputs (on the first stage) and targets (on
  // the last) to `args`.
  absl::Status PutMicrobatches(const TokenBatch& batch, std::vector<Array>& args);
  std::vector<Array> Gather(const std::vector<std::vector<Array>>& by_stage) const;

  Client* const client_;
  const GptConfig config_;
  const GptPipelineOptions options_;
  const AdamWConfig adamw_;
  const GptKernels kernels_;
  const int64_t batch_;
  const int64_t micro_rows_;  // sequences per micro-batch (global)

  std::vector<std::vector<int>> stage_params_;
  std::vector<Mesh> meshes_;
  // Per stage: forward (not the last), backward (the last: loss and
  // backward), gradient reduction, update; the last also its evaluation.
  std::vector<CompiledFunction> forward_, backward_, reduce_, update_;
  CompiledFunction eval_last_, eval_reduce_, tie_, norm_;
  Program step_program_;
  Program eval_program_;

  std::vector<std::vector<Array>> params_, m_, v_;
  std::vector<std::vector<Array>> zeros_;  // gradient accumulators' start, per stage
  Array zero_loss_;                        // on the last stage
};

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_GPT_PIPELINE_H_
