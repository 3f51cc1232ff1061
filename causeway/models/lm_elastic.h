// Elastic GPT training (`causeway train lm --elastic`): LmTrainer run by
// RunElastic (causeway/cluster/elastic.h) on a distributed cluster. Each
// attempt resumes from the newest checkpoint in the checkpoint directory on
// the devices the cluster has then: with fewer, the data axis shrinks and
// the global batch stays the same, so the run goes on along the curve an
// uninterrupted run has from that checkpoint (docs/ELASTIC.md).
#ifndef CAUSEWAY_MODELS_LM_ELASTIC_H_
#define CAUSEWAY_MODELS_LM_ELASTIC_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "causeway/cluster/elastic.h"
#include "causeway/models/lm_trainer.h"

namespace causeway::models {

// The layout an attempt trains on with `devices` devices: the model axis
// requested, and the largest data axis up to the one requested that fits
// on the devices and divides the batch. FAILED_PRECONDITION when not even
// one model-axis group fits.
absl::StatusOr<GptLayout> ElasticLayout(GptLayout requested, int64_t batch, int64_t devices);

struct LmElasticHooks {
  // Every step of every attempt: after a recovery, the steps since the
  // checkpoint it resumed from are reported again.
  LmTrainer::Hooks train;
  // Each attempt's trainer, made and restored (its mesh, its iteration).
  std::function<void(const ElasticAttempt&, const LmTrainer&)> on_attempt;
  std::function<void(const RecoveryEvent&)> on_recovery;
};

// Trains as LmTrainer::Train does, from `resume` (may be null) or from
// scratch, recovering from lost hosts. Needs options.checkpoint_dir, a
// positive checkpoint_every, and one mesh (no pipeline, no islands):
// INVALID_ARGUMENT otherwise. Errors: RunElastic's, and the trainer's.
absl::Status TrainLmElastic(const ElasticOptions& elastic, const TextDataset* data,
                            const LmTrainOptions& options, const LmCheckpoint* resume,
                            const LmElasticHooks& hooks);

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_LM_ELASTIC_H_
