// The dispatch experiment (the paper's Figs. 5 and 6): chains of
// gang-scheduled computations, each output feeding the next, dispatched op
// by op, chained in one program, or fused into one function; by the single
// controller (client -> island scheduler -> hosts) or, as the baseline, by
// one loop per host straight onto its own devices (multi-controller SPMD).
//
// BuildDispatchProgram makes the programs; `causeway bench dispatch` runs
// them on a real cluster, SimulateDispatch on a SimCluster.
#ifndef CAUSEWAY_SIM_DISPATCH_H_
#define CAUSEWAY_SIM_DISPATCH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "causeway/client/client.h"
#include "causeway/sim/sim_cluster.h"

namespace causeway {

enum class DispatchGranularity { kOpByOp, kChained, kFused };
enum class Controller { kSingle, kMulti };
enum class Computation { kAdd, kAllReduceAdd };

const char* Name(DispatchGranularity mode);
const char* Name(Controller controller);
const char* Name(Computation computation);

struct DispatchProgramOptions {
  DispatchGranularity mode = DispatchGranularity::kChained;
  Computation computation = Computation::kAllReduceAdd;
  int devices = 8;  // of the mesh (axis "x")
  int chain = 128;  // computations per program (chained, fused)
  // Each computation also keeps its device busy this long (0: trivial).
  int64_t compute_us = 0;
};

// One computation: [delay], then all_reduce(x) / devices + 1 (or x + 1),
// on every device of a mesh of `devices`.
struct DispatchProgram {
  CompiledFunction step;      // one computation (op by op)
  Program program;            // what one dispatch runs
  int computations_per_unit = 1;
  Array input;
};
absl::StatusOr<DispatchProgram> BuildDispatchProgram(Client& client,
                                                     const DispatchProgramOptions& options);

}  // namespace causeway

namespace causeway::sim {

struct SimDispatchOptions {
  DispatchProgramOptions program;
  Controller controller = Controller::kSingle;
  SimClusterOptions cluster;  // the mesh takes every device of island 0
  // Dispatches (program runs, or calls op by op) after `warmup` more.
  int64_t units = 16;
  int64_t warmup = 2;
};

struct SimDispatchResult {
  int64_t computations = 0;
  double seconds = 0;  // virtual
  double computations_per_second = 0;
  // Requested computation time done ÷ (devices × virtual time).
  double compute_fraction = 0;
  int hosts = 0;
  int devices = 0;
  // Over the measured dispatches, from the first to when their output was
  // read (`counters_seconds`, the final reads included).
  SimCounters counters;
  double counters_seconds = 0;
  // Warm-up included; empty unless cluster.profile_cpu.
  CpuProfile profile;
  double wall_seconds = 0;  // real time the simulation took
};

// Runs the experiment on a fresh SimCluster of options.cluster's shape
// (its devices must equal program.devices).
absl::StatusOr<SimDispatchResult> SimulateDispatch(const SimDispatchOptions& options);

}  // namespace causeway::sim

#endif  // CAUSEWAY_SIM_DISPATCH_H_
