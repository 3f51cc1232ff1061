#include "causeway/models/lm_elastic.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"

namespace causeway::models {

absl::StatusOr<GptLayout> ElasticLayout(GptLayout requested, int64_t batch, int64_t devices) {
  const int64_t model = std::max<int64_t>(requested.model, 1);
  for (int64_t data = std::min(requested.data, devices / model); data >= 1; --data) {
    if (batch % data == 0) return GptLayout{data, model};
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the cluster has ", devices, " devices: too few for the model axis of ", model));
}

absl::Status TrainLmElastic(const ElasticOptions& elastic, const TextDataset* data,
                            const LmTrainOptions& options, const LmCheckpoint* resume,
                            const LmElasticHooks& hooks) {
  if (options.checkpoint_dir.empty() || options.checkpoint_every <= 0) {
    return absl::InvalidArgumentError(
        "elastic training resumes from its checkpoints: it needs a checkpoint directory and a "
        "checkpoint interval");
  }
  if (options.pipeline.stages > 1 || options.islands.islands > 1) {
    return absl::InvalidArgumentError(
        "elastic training runs on one mesh: not with a pipeline or across islands");
  }
  CW_RETURN_IF_ERROR(options.Validate());
  ElasticOptions e = elastic;
  e.min_devices = std::max<int64_t>(e.min_devices, options.layout.model);
  // What the folder held before this run (an earlier run's, or the one
  // resumed) is not this run's to go back to, unless resumed from.
  int64_t before = -1;
  if (absl::StatusOr<LmCheckpoint> c = ReadLmCheckpoint(options.checkpoint_dir); c.ok()) {
    before = c->iteration;
  }
  bool committed = false;  // this run committed a checkpoint
  return RunElastic(
      e,
      [&](ElasticAttempt& attempt) -> absl::Status {
        std::optional<LmCheckpoint> saved;
        const LmCheckpoint* from = resume;
        if (attempt.number() > 0) {
          absl::StatusOr<LmCheckpoint> c = ReadLmCheckpoint(options.checkpoint_dir);
          if (c.ok() && (committed || c->iteration > before)) {
            saved = *std::move(c);
            from = &*saved;
          } else if (committed) {
            return c.status();  // what this run saved is unreadable now
          }
        }
        LmTrainOptions o = options;
        CW_ASSIGN_OR_RETURN(o.layout, ElasticLayout(options.layout, options.batch,
                                                    attempt.devices()));
        CW_ASSIGN_OR_RETURN(std::unique_ptr<LmTrainer> trainer,
                            LmTrainer::Create(attempt.client(), data, o, from));
        saved.reset();  // the trainer holds the state now
        attempt.Restored(trainer->iteration());
        if (hooks.on_attempt) hooks.on_attempt(attempt, *trainer);
        LmTrainer::Hooks h = hooks.train;
        h.on_checkpoint = [&](int64_t iteration, const std::string& path) {
          committed = true;
          if (hooks.train.on_checkpoint) hooks.train.on_checkpoint(iteration, path);
        };
        h.on_step = [&](const StepReport& r) {
          if (hooks.train.on_step) hooks.train.on_step(r);
          attempt.Progress(r.iteration + 1);
        };
        return trainer->Train(h);
      },
      hooks.on_recovery);
}

}  // namespace causeway::models
