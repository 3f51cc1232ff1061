// Elastic runs: a client program on a distributed cluster that outlives the
// loss of hosts (docs/ELASTIC.md).
//
// The program is a body, run once per attempt on a client of its own. An
// attempt builds the program's state on the devices the cluster has (from
// its last checkpoint, if any) and runs until done. When a host is lost,
// the attempt's calls fail (UNAVAILABLE, naming the host) within the
// cluster's heartbeat timeout; the runner confirms the loss in the
// topology, waits up to `replace_timeout` for replacement workers to bring
// the devices back to what the attempt had, and starts the next attempt on
// whatever the cluster has then: the same number of devices, or fewer (the
// body shrinks its mesh). Each recovery is reported, with its timings,
// once the new attempt has restored its state.
//
// Any other error ends the run, as does a lost coordinator (its sessions
// and the cluster's bookkeeping are gone with it): RunElastic returns
// UNAVAILABLE naming it, and a new run resumes from the last checkpoint.
//
//   ElasticOptions o;
//   o.cluster.address = "grpc://coordinator:7000";
//   absl::Status done = RunElastic(o, [&](ElasticAttempt& a) -> absl::Status {
//     int64_t step = LastCheckpointedStep();      // 0: none
//     State s = Restore(a.client(), a.topology(), step);
//     a.Restored(step);
//     for (; step < kSteps; ++step) {
//       CW_RETURN_IF_ERROR(Step(s));
//       a.Progress(step + 1);
//     }
//     return absl::OkStatus();
//   }, [](const RecoveryEvent& e) { LOG(INFO) << e.ToString(); });
#ifndef CAUSEWAY_CLUSTER_ELASTIC_H_
#define CAUSEWAY_CLUSTER_ELASTIC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "causeway/client/client.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/topology/topology.h"

namespace causeway {

struct ElasticOptions {
  RemoteClusterOptions cluster;
  // Each attempt's client.
  ClientOptions client;
  // After a loss: how long to wait for replacements to bring the cluster
  // back to the devices the failed attempt had. Zero: go on with the
  // survivors at once.
  absl::Duration replace_timeout = absl::Seconds(60);
  // An attempt's error that is not yet a lost host in the topology: how
  // long to wait for the coordinator to drop one (a mute host is dropped
  // after missed heartbeats) before treating the error as the program's.
  absl::Duration confirm_timeout = absl::Seconds(30);
  // Fewer devices than this after waiting: the run fails.
  int64_t min_devices = 1;
  // Losses (each recovery, and each loss that interrupts one) before the
  // run gives up with the last loss's error.
  int max_recoveries = 16;
  // Told of each loss once the topology confirms it, before the wait for
  // replacements: where a deployment asks for new workers. Optional.
  std::function<void(const std::vector<HostId>& lost)> on_loss;

  // INVALID_ARGUMENT naming the first bad value.
  absl::Status Validate() const;
};

// One recovery: what was lost and how long each part of coming back took.
struct RecoveryEvent {
  int number = 0;  // 1 for the first
  // The error that ended the failed attempt.
  absl::Status cause;
  // Hosts of the failed attempt's topology that left the cluster.
  std::vector<HostId> lost_hosts;
  int64_t devices_before = 0;
  int64_t devices_after = 0;
  // Replacements brought the devices back (else the next attempt shrank).
  bool replaced = false;
  // When the failed attempt's error reached the runner.
  absl::Time failed_at;
  // From the failed attempt's last progress (or its start) to its error
  // reaching the runner: a bound on the time from the loss to its
  // detection.
  absl::Duration detection;
  // From the error to the next attempt's start: confirming the loss and
  // waiting for replacements (up to replace_timeout).
  absl::Duration wait;
  // From the next attempt's start to its Restored(): a new client, the
  // program's set-up and its checkpoint read back onto the new mesh.
  absl::Duration restore;
  // The failed attempt's progress, and the step the next one restored.
  int64_t progress_before = 0;
  int64_t resumed_at = 0;
  int64_t steps_repeated() const {
    return progress_before > resumed_at ? progress_before - resumed_at : 0;
  }

  // One line: "recovery 1: lost host 3 (...); 2 -> 1 devices, shrunk;
  // detection 0.41 s, wait 2.00 s, restore 0.87 s; resumed at 50, 12 steps
  // repeated".
  std::string ToString() const;
};

class ElasticRunState;

// What an attempt's body is given. Use it from the body's thread.
class ElasticAttempt {
 public:
  // 0 for the first attempt.
  int number() const { return number_; }
  Client* client() const { return client_; }
  RemoteCluster* cluster() const { return cluster_; }
  // The cluster's topology when the attempt began.
  const Topology& topology() const { return topology_; }
  // Devices in that topology.
  int64_t devices() const { return topology_.num_devices(); }

  // The program's state is in place, restored from step `step` (0 for a
  // fresh start). After a recovery, this reports it (on_recovery).
  void Restored(int64_t step);
  // The program has done `steps` steps (for the steps a failure repeats).
  void Progress(int64_t steps);

 private:
  friend class ElasticRunState;
  ElasticAttempt(ElasticRunState* run, int number, Client* client, RemoteCluster* cluster,
                 Topology topology)
      : run_(run),
        number_(number),
        client_(client),
        cluster_(cluster),
        topology_(std::move(topology)) {}
  ElasticRunState* const run_;
  const int number_;
  Client* const client_;
  RemoteCluster* const cluster_;
  const Topology topology_;
};

using ElasticBody = std::function<absl::Status(ElasticAttempt& attempt)>;

// Runs `body` until an attempt returns OK (then OK), recovering from lost
// hosts as above; `on_recovery` (optional) is told of each recovery, from
// the body's thread, when the new attempt calls Restored(). Errors:
// INVALID_ARGUMENT for bad options; the body's own error when no host was
// lost; UNAVAILABLE when the coordinator is lost or cannot be reached;
// FAILED_PRECONDITION when fewer than min_devices remain; the last error
// after max_recoveries.
absl::Status RunElastic(const ElasticOptions& options, const ElasticBody& body,
                        const std::function<void(const RecoveryEvent&)>& on_recovery = {});

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_ELASTIC_H_
