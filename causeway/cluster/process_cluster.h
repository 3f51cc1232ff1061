// ProcessCluster: a distributed cluster on this machine — one coordinator
// process and one worker process per host, all on 127.0.0.1 — started from
// the `causeway` binary. What `causeway cluster up` runs, and what the
// multi-process integration tests use. Children get the token through the
// environment (never on the command line) and die with this process
// (PR_SET_PDEATHSIG), so none outlive it even if it is killed.
#ifndef CAUSEWAY_CLUSTER_PROCESS_CLUSTER_H_
#define CAUSEWAY_CLUSTER_PROCESS_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/base/ids.h"

namespace causeway {

struct ProcessClusterOptions {
  std::string binary;  // the `causeway` executable
  int islands = 2;
  int hosts_per_island = 2;
  int devices_per_host = 4;
  int64_t memory_bytes = int64_t{1} << 30;
  std::string device_kind = "cpu";  // every worker's --device-kind
  int port = 0;         // the coordinator's; 0 picks a free one
  int metrics_port = -1;  // the coordinator's metrics endpoint; 0: any free; -1: none
  std::string token;    // clients'; empty: a random one
  std::string worker_token;  // workers'; empty: a random one
  absl::Duration heartbeat_timeout = absl::Seconds(3);
  // Workers' --memory-stall-timeout-ms.
  absl::Duration memory_stall_timeout = absl::Seconds(60);
  // Workers' --input-timeout-ms.
  absl::Duration input_timeout = absl::Minutes(5);
  // TLS: the coordinator and workers serve with cert/key; workers trust ca.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  absl::Duration start_timeout = absl::Seconds(30);
  // Every process's open-file limit (soft and hard); 0: this process's.
  int max_open_files = 0;
  // Workers' --collectives (gloo, grpc); empty: their default.
  std::string collectives;
  // Workers' --gloo-from-bytes; -1: their default.
  int64_t gloo_from_bytes = -1;
  // Workers' --checkpoint-root; empty: none.
  std::string checkpoint_root;
  // The coordinator's --report-fanout.
  int report_fanout = 0;
};

// Thread-compatible (one owner).
class ProcessCluster {
 public:
  // Starts the coordinator, then every worker, and waits until every worker
  // has joined. UNAVAILABLE (with the child's output) if a process exits
  // early or the cluster is not up within `start_timeout`.
  static absl::StatusOr<std::unique_ptr<ProcessCluster>> Start(
      const ProcessClusterOptions& options);
  // Stop().
  ~ProcessCluster();

  // grpc://127.0.0.1:PORT
  std::string url() const { return url_; }
  const std::string& token() const { return token_; }
  const std::string& worker_token() const { return worker_token_; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  int64_t num_devices() const;

  // Kills worker `index` with SIGKILL and reaps it.
  void KillWorker(int index);
  // Starts worker `index` again (it joins as a new host).
  absl::Status RestartWorker(int index);
  bool WorkerRunning(int index) const { return workers_[index].pid > 0; }
  bool CoordinatorRunning() const { return coordinator_.pid > 0; }
  // The host id worker `index` joined as (its latest start).
  HostId worker_host(int index) const { return workers_[index].host; }
  pid_t worker_pid(int index) const { return workers_[index].pid; }
  // Every child process currently running.
  std::vector<pid_t> pids() const;

  // SIGTERM to every child, SIGKILL to any still running after 5 s; reaps
  // them all and removes their logs (kept, and their directory printed, if
  // `keep_logs` or CAUSEWAY_KEEP_CLUSTER_LOGS is set). Idempotent.
  void Stop(bool keep_logs = false);
  // HOST:PORT of the coordinator's metrics endpoint; empty if none.
  const std::string& metrics_address() const { return metrics_address_; }
  // The directory of the processes' logs (coordinator.log, workerN.log).
  const std::string& log_dir() const { return log_dir_; }
  // Reaps children that exited on their own; describes them ("worker 2
  // (pid 123) exited with status 1"), or returns an empty string.
  std::string ReapExited();

 private:
  struct Child {
    pid_t pid = -1;
    std::vector<std::string> argv;
    std::string log_path;
    HostId host;  // workers
  };
  // Spawns a worker and waits for it to report the host id it joined as.
  absl::Status SpawnWorker(Child& worker);
  // Reads one line from `fd` (closing it) within the start timeout.
  absl::StatusOr<std::string> ReadReadyLine(int fd, const Child& child);
  explicit ProcessCluster(const ProcessClusterOptions& options) : options_(options) {}
  // `ready_fd`, if >= 0, becomes the child's fd 3.
  absl::Status Spawn(Child& child, int ready_fd);
  std::string Tail(const Child& child) const;

  const ProcessClusterOptions options_;
  std::string token_;
  std::string worker_token_;
  std::string url_;
  std::string log_dir_;
  std::string metrics_address_;
  Child coordinator_;
  std::vector<Child> workers_;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_PROCESS_CLUSTER_H_
