// Training and sampling of the GPT model (gpt.h) on a text corpus
// (text_data.h) through the Causeway client: the parameters and AdamW state
// live on a {data, model} mesh as sharded arrays, every step is one call of
// a compiled training step, and the loop runs ahead of the devices.
//
// Run-ahead: Train() dispatches step i+1 as soon as step i has been handed
// to the client (calls return at once) and fetches losses behind the
// dispatch front, at most `max_in_flight` steps behind, so the control
// plane never waits for a step's loss before preparing the next one. Every
// loss is checked (a non-finite loss stops training, naming its iteration).
//
// Checkpoints hold the parameters ("param/NAME"), the AdamW moments
// ("adam_m/NAME", "adam_v/NAME"), and metadata: "format" ("causeway-lm/1"),
// "config" and "tokenizer" (JSON), "iteration" (the next iteration to run),
// "schedule". Batches are a function of the seed and the iteration, so that
// is the whole data-order state. Two layouts hold them
// (LmCheckpointFormat): a tensor file (tensor_file.h) named
// `model.safetensors` in the checkpoint directory, gathered to the client
// and written by it; or sharded checkpoints (causeway/client/checkpoint.h)
// in step folders under it, written by the hosts while training goes on.
// A sharded optimiser's moments are saved there as they lie, flat
// ("adam_m.flat", "adam_v.flat", with "flat_data", the data-axis size
// that fixes their layout), and cut into parameters when read.
#ifndef CAUSEWAY_MODELS_LM_TRAINER_H_
#define CAUSEWAY_MODELS_LM_TRAINER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/client/checkpoint.h"
#include "causeway/client/client.h"
#include "causeway/ir/literal.h"
#include "causeway/models/gpt.h"
#include "causeway/models/gpt_islands.h"
#include "causeway/models/gpt_pipeline.h"
#include "causeway/models/text_data.h"

namespace causeway::models {

// How a trainer writes checkpoints: one tensor file, gathered to the client
// and written by it, training waiting (kFile); or sharded and asynchronous,
// each host writing its own shards while training goes on (kSharded; the
// client and every host must see the folder at the same path).
enum class LmCheckpointFormat { kFile, kSharded };

struct LmTrainOptions {
  GptConfig model;  // model.vocab is taken from the dataset
  GptLayout layout;
  // stages > 1: pipeline-parallel (gpt_pipeline.h) instead of `layout`,
  // which must then be 1 x 1 (data parallelism is pipeline.data per stage).
  GptPipelineOptions pipeline;
  // islands > 1 (without a pipeline): data-parallel across islands
  // (gpt_islands.h) instead of `layout`, which must then be 1 x 1.
  GptIslandsOptions islands;
  AdamWConfig adamw;
  // With a data axis of more than one device and a model axis of one: the
  // optimiser state is sharded over `data` (ZeRO stage 1,
  // GptShardedTrainStepFunction): each device updates its share of the
  // parameters, and the moments take 1/data of the memory. False: every
  // device updates all of them (GptTrainStepFunction). The same updates;
  // sharding costs two more collectives a step, cheap within a process and
  // not between worker processes (docs/LM.md).
  bool shard_optimizer = true;
  GptKernels kernels = GptKernels::kFused;
  int64_t batch = 12;  // global: sequences per step
  int64_t iters = 2000;
  float learning_rate = 1e-3f;
  float min_learning_rate = 1e-4f;
  int64_t warmup_iters = 100;
  int64_t decay_iters = 2000;  // cosine decay ends here
  int64_t eval_every = 250;    // 0: no evaluation
  int64_t eval_batches = 20;
  uint64_t seed = 1;
  // Steps dispatched but whose loss is not yet fetched.
  int64_t max_in_flight = 4;
  // Bound on waiting for any one result (a step's loss, an evaluation, a
  // checkpoint's arrays).
  absl::Duration result_timeout = absl::Minutes(5);
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // 0: only at the end (and at a stop)
  LmCheckpointFormat checkpoint_format = LmCheckpointFormat::kFile;
  // kSharded: the committed steps kept.
  int checkpoint_keep = 3;

  // INVALID_ARGUMENT naming the first bad value (layout, sizes, rates).
  absl::Status Validate() const;
};

// Linear warm-up to learning_rate over warmup_iters, cosine decay to
// min_learning_rate at decay_iters, constant after.
float LearningRate(const LmTrainOptions& options, int64_t iteration);

struct StepReport {
  int64_t iteration = 0;
  float loss = 0;       // before this step's update
  float grad_norm = 0;  // before clipping
  float learning_rate = 0;
};

struct EvalReport {
  int64_t iteration = 0;  // steps done when evaluated
  float train_loss = 0;
  float val_loss = 0;
  double seconds = 0;  // wall time of the evaluation
};

// The learning-rate schedule a run trained with (LmTrainOptions).
struct LrSchedule {
  float learning_rate = 0;
  float min_learning_rate = 0;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;
};

struct LmCheckpoint {
  GptConfig config;
  Tokenizer tokenizer;
  int64_t iteration = 0;
  // Absent in checkpoints written before it was recorded.
  std::optional<LrSchedule> schedule;
  std::vector<ir::Literal> params;  // GptParams order, global
  std::vector<ir::Literal> adam_m;  // empty if the file holds none
  std::vector<ir::Literal> adam_v;
};

// Reads a checkpoint: the newest committed step of sharded checkpoints in
// `dir`, or `dir` itself when it is a step folder; else `dir`/model.safetensors,
// or `dir` itself when it is a file (the checkpoint's file named directly).
// NOT_FOUND if absent; DATA_LOSS or INVALID_ARGUMENT naming what is wrong if
// it is not a well-formed LM checkpoint (missing tensors, shapes that do not
// fit its config, a corrupt file).
absl::StatusOr<LmCheckpoint> ReadLmCheckpoint(const std::string& dir);

// Not thread-safe.
class LmTrainer {
 public:
  struct Hooks {
    std::function<void(const StepReport&)> on_step;  // every step, in order
    std::function<void(const EvalReport&)> on_eval;
    std::function<void(int64_t iteration, const std::string& path)> on_checkpoint;
    // Asked before each step; true stops the run there as `stop_at` would
    // (the steps queued finish, a checkpoint is written if a directory is
    // set). What an interrupted command line answers.
    std::function<bool()> should_stop;
  };

  // Allocates the mesh, compiles the step and evaluation functions and
  // puts the initial parameters (from `resume` if given, which must be of
  // the same model shape and vocabulary: INVALID_ARGUMENT naming the
  // difference). `data` must outlive the trainer.
  static absl::StatusOr<std::unique_ptr<LmTrainer>> Create(Client* client,
                                                           const TextDataset* data,
                                                           LmTrainOptions options,
                                                           const LmCheckpoint* resume = nullptr);

  const LmTrainOptions& options() const { return options_; }
  // The next iteration to run.
  int64_t iteration() const { return iteration_; }
  // The {data, model} mesh the model lives on.
  const Mesh& mesh() const { return mesh_; }

  // Trains from iteration() up to options().iters, or up to `stop_at` if
  // smaller (as if interrupted there: a checkpoint is written if a
  // directory is set). Evaluates every eval_every iterations and at the
  // end. On error (a failed step, a non-finite loss) returns it; nothing
  // is left running.
  absl::Status Train(const Hooks& hooks, int64_t stop_at = -1);

  // Mean loss over eval_batches batches of each split, drawn for
  // iteration().
  absl::StatusOr<EvalReport> Evaluate();

  // Writes a checkpoint of the current state to `dir` (created if needed).
  // Returns the file written. (A tensor file, whatever checkpoint_format
  // says.)
  absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir);

  // The current parameters, fetched (global shapes, GptParams order).
  absl::StatusOr<std::vector<ir::Literal>> Params();

  // Where the training loop's own thread spent its time, for the control
  // plane's share of a step: `dispatch` is drawing batches and handing
  // steps to the client (Put and Call, which return before the devices
  // run), `waiting` is blocked on a loss, evaluation or checkpoint.
  struct LoopTimes {
    int64_t steps = 0;
    absl::Duration dispatch;
    absl::Duration waiting;
  };
  const LoopTimes& loop_times() const { return loop_times_; }

 private:
  LmTrainer(Client* client, const TextDataset* data, LmTrainOptions options);
  absl::Status Init(const LmCheckpoint* resume);
  // Puts the parameters and a sharded optimiser's flat state (moments from
  // `resume` if it has them, else zeros).
  absl::Status PutShardedState(const std::vector<ir::Literal>& params,
                               const LmCheckpoint* resume);
  absl::StatusOr<ir::Literal> Get(const Array& array, const std::string& what);
  // kSharded: begins saving the current state as step iteration_ of
  // options_.checkpoint_dir; training goes on while the hosts write it.
  absl::Status BeginShardedSave();
  // Tells hooks.on_checkpoint of each save committed, oldest first; with
  // `wait`, waits for every one (at most result_timeout each). The first
  // failed save's error.
  absl::Status ReapSaves(const Hooks& hooks, bool wait);

  Client* const client_;
  const TextDataset* const data_;
  const LmTrainOptions options_;
  int64_t iteration_ = 0;
  Mesh mesh_;
  CompiledFunction step_;
  CompiledFunction eval_;
  std::vector<ParamSpec> specs_;
  // Per parameter; adam_m_ and adam_v_ are empty with a sharded optimiser.
  std::vector<Array> params_, adam_m_, adam_v_;
  // A sharded optimiser's state: flat vectors (ShardedOptimizerLayout) split
  // over `data`. Invalid otherwise.
  bool sharded_ = false;
  Array master_, flat_m_, flat_v_, decay_mask_;
  // Set when the model spans several meshes (a pipeline, islands).
  std::unique_ptr<LmStepEngine> engine_;
  LoopTimes loop_times_;
  // kSharded: opened at the first save; the saves not yet reaped.
  std::unique_ptr<Checkpointer> checkpointer_;
  struct SaveInFlight {
    int64_t iteration = 0;
    std::string path;
    Future<Unit> committed;
  };
  std::deque<SaveInFlight> saves_;
};

// Generates text from a trained model on a one-device mesh of `client`.
struct SampleOptions {
  int64_t tokens = 500;
  float temperature = 0.8f;
  int64_t top_k = 0;  // 0: all tokens
  uint64_t seed = 1;
  std::string prompt;  // empty: a newline if the vocabulary has one
  absl::Duration result_timeout = absl::Minutes(1);
};

// Returns the prompt followed by the generated text; `on_text` (if set)
// gets each new piece as it is made. INVALID_ARGUMENT for a prompt
// outside the vocabulary or a non-positive temperature.
absl::StatusOr<std::string> SampleText(Client* client, const LmCheckpoint& checkpoint,
                                       const SampleOptions& options,
                                       const std::function<void(const std::string&)>& on_text = {});

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_LM_TRAINER_H_
