// The pipeline experiment: a training step of S stages and M micro-batches,
// each stage on a host of its own (over one island or several), a forward
// and a backward pass per micro-batch of known length (`delay`),
// activations of a stated size moved between stages and the gradient sent
// back; one traced program in GPipe or 1F1B order. BuildPipelineProgram
// makes it (for `causeway bench pipeline` on a real cluster too);
// SimulatePipeline runs it on a SimCluster.
#ifndef CAUSEWAY_SIM_PIPELINE_H_
#define CAUSEWAY_SIM_PIPELINE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/client/client.h"
#include "causeway/sim/sim_cluster.h"

namespace causeway {

struct PipelineProgramOptions {
  int stages = 4;
  int microbatches = 16;
  int64_t forward_us = 1000;
  int64_t backward_us = 2000;
  int64_t activation_kb = 64;
  bool one_f_one_b = false;  // else GPipe order
};

// Stage s runs on device s (a mesh of one): forward x -> delay(x + 1);
// backward (x, g) -> delay(g + 1 + 0 x). The program's outputs are the
// first stage's gradients, one per micro-batch (each 2 x stages once run).
struct PipelineProgram {
  Program program;
  Array input;
};
absl::StatusOr<PipelineProgram> BuildPipelineProgram(Client& client,
                                                     const PipelineProgramOptions& options);

}  // namespace causeway

namespace causeway::sim {

struct SimPipelineOptions {
  PipelineProgramOptions program;
  int islands = 1;  // the stages split evenly over them, a host each
  int steps = 4;    // measured, back to back, after one warm-up step
  SimClusterOptions cluster;  // its shape is set from the stages and islands
};

struct SimPipelineResult {
  double step_seconds = 0;   // virtual
  double bound_seconds = 0;  // (M + S - 1) x (forward + backward)
  double wall_seconds = 0;
  int64_t messages = 0;
};

absl::StatusOr<SimPipelineResult> SimulatePipeline(const SimPipelineOptions& options);

}  // namespace causeway::sim

#endif  // CAUSEWAY_SIM_PIPELINE_H_
