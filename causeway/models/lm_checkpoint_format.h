// Internal to causeway/models: writing LM checkpoints and checking that one
// fits a model (the reading side is ReadLmCheckpoint in lm_trainer.h).
#ifndef CAUSEWAY_MODELS_LM_CHECKPOINT_FORMAT_H_
#define CAUSEWAY_MODELS_LM_CHECKPOINT_FORMAT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "causeway/models/lm_trainer.h"

namespace causeway::models {

inline constexpr char kCheckpointFile[] = "model.safetensors";
inline constexpr char kCheckpointFormat[] = "causeway-lm/1";

// The metadata of `checkpoint` (its tensors aside), as both layouts hold it.
std::map<std::string, std::string> LmMetadata(const LmCheckpoint& checkpoint);

// Writes `checkpoint` to `dir`/model.safetensors atomically, creating `dir`
// if needed. Returns the path written. INVALID_ARGUMENT naming the group and
// parameter if the tensors do not fit the config (a count, a shape, moments
// given for one of m and v only), so nothing unreadable is written.
absl::StatusOr<std::string> WriteLmCheckpoint(const std::string& dir,
                                              const LmCheckpoint& checkpoint);

// INVALID_ARGUMENT naming the first difference if `checkpoint` is of
// another model shape or vocabulary than `config` / `tokenizer`.
absl::Status CheckCheckpointFits(const LmCheckpoint& checkpoint, const GptConfig& config,
                                 const Tokenizer& tokenizer);

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_LM_CHECKPOINT_FORMAT_H_
