// The multi-tenancy experiment (the paper's Fig. 8) on the simulator:
// clients with weights keep one island saturated with gang computations
// over every device; the real island scheduler divides the devices' time.
#ifndef CAUSEWAY_SIM_TENANCY_H_
#define CAUSEWAY_SIM_TENANCY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/sim/sim_cluster.h"

namespace causeway::sim {

struct SimTenancyOptions {
  std::vector<double> weights = {1, 2, 4, 8};  // one client each
  int64_t compute_us = 330;  // each run: delay, then a scalar all-reduce
  double seconds = 2.0;      // virtual, after `warmup_seconds`
  double warmup_seconds = 0.2;
  int outstanding = 16;      // runs each client keeps submitted
  SimClusterOptions cluster;  // the mesh takes every device of island 0
};

struct SimTenancyResult {
  std::vector<double> target;    // weight ÷ sum of weights
  std::vector<double> achieved;  // share of device time over the whole run
  // Largest |achieved - target| of any client in any whole window of
  // 10 ms, 100 ms and 1 s (a share is a fraction: 0.02 is 2 points).
  double max_error_10ms = 0;
  double max_error_100ms = 0;
  double max_error_1s = 0;
  // Requested work done ÷ (devices × time): runs finished × compute_us ÷ time.
  double compute_fraction = 0;
  int64_t runs = 0;
  // The real scheduler's time choosing, per run (this machine's ns).
  double decision_ns_per_run = 0;
  double wall_seconds = 0;
};

absl::StatusOr<SimTenancyResult> SimulateTenancy(const SimTenancyOptions& options);

}  // namespace causeway::sim

#endif  // CAUSEWAY_SIM_TENANCY_H_
