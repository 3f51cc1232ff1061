// `causeway coordinator`, `causeway worker` and `causeway cluster up`:
// flag parsing and wiring of the distributed cluster's processes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/base/limits.h"
#include "causeway/cluster/coordinator_server.h"
#include "causeway/cluster/cluster_file.h"
#include "causeway/cluster/counters.h"
#include "causeway/cluster/process_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/cluster/worker_server.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "nlohmann/json.hpp"
#include "causeway/base/settings.h"
#include "tools/commands.h"

namespace causeway::tools {
namespace {

// Stop signals reach a pipe: the handler writes the signal's number, a
// thread reads it. A handler (not sigwait on blocked signals) because
// threads that libraries start before main (OpenBLAS's pool) do not block
// them, and the kernel may deliver a process signal to any thread.
int g_signal_pipe[2] = {-1, -1};

extern "C" void WriteSignalToPipe(int sig) {
  const int saved = errno;
  const char c = static_cast<char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &c, 1);
  errno = saved;
}

// Routes SIGINT, SIGTERM (and SIGCHLD if `with_children`) to the pipe.
void CatchStopSignals(bool with_children) {
  if (g_signal_pipe[0] < 0) {
    if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) std::perror("pipe2");
    fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK);
  }
  struct sigaction action {};
  action.sa_handler = WriteSignalToPipe;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  if (with_children) sigaction(SIGCHLD, &action, nullptr);
}

// Blocks until a caught signal (or a Wake) arrives; returns its number.
// Polls with a timeout rather than blocking in read(): a runtime that
// defers signal handlers to its next intercepted call (ThreadSanitizer)
// would otherwise never run the handler while every thread sleeps.
int WaitForSignal() {
  char c = 0;
  while (true) {
    pollfd fd{g_signal_pipe[0], POLLIN, 0};
    const int ready = poll(&fd, 1, 250);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    const ssize_t n = read(g_signal_pipe[0], &c, 1);
    if (n == 1) return static_cast<unsigned char>(c);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return 0;
  }
}

// Releases WaitForSignal as if by signal 0.
void Wake() { WriteSignalToPipe(0); }

// Runs `stop` on the first stop signal or Wake, from a thread of its own.
std::thread StopOnSignal(std::function<void()> stop) {
  return std::thread([stop = std::move(stop)] {
    WaitForSignal();
    stop();
  });
}

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "causeway %s: %s\n", command, status.ToString().c_str());
  return kExitRuntime;
}

// A listening address, HOST:PORT with a port in 0..65535 (0: any free
// one); a malformed one is a usage error when the command line is parsed.
CLI::Validator ListenAddress() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        // SplitHostPort takes ports from 1; port 0 is checked as port 1.
        std::string probe = text;
        if (absl::EndsWith(probe, ":0")) probe.back() = '1';
        absl::StatusOr<std::pair<std::string, int>> split = grpc_transport::SplitHostPort(probe);
        if (split.ok()) return std::string();
        return absl::StrCat("'", text, "' is not HOST:PORT with a port in 0..65535");
      },
      "", "HOST:PORT");
}

}  // namespace

void AddCoordinatorCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<CoordinatorOptions>();
  auto ready_fd = std::make_shared<int>(-1);
  auto heartbeat_ms = std::make_shared<int64_t>(3000);
  CLI::App* cmd = app.add_subcommand(
      "coordinator",
      "Serve the resource manager and island schedulers of a distributed cluster; workers join "
      "it and clients connect to it (grpc://HOST:PORT)");
  cmd->add_option("--listen", o->listen, "Address to serve on, HOST:PORT (port 0: any free one)")
      ->check(ListenAddress())
      ->required();
  cmd->add_option("--token", o->token,
                  "Token clients must present (default: $CAUSEWAY_TOKEN); required");
  cmd->add_option("--worker-token", o->worker_token,
                  "Token workers must present to join, distinct from the clients' (default: "
                  "$CAUSEWAY_WORKER_TOKEN; unset: workers use the clients' token, with a warning)");
  cmd->add_option("--tls-cert", o->tls.cert, "PEM certificate: serve over TLS");
  cmd->add_option("--tls-key", o->tls.key, "PEM private key of --tls-cert");
  cmd->add_option("--heartbeat-timeout-ms", *heartbeat_ms,
                  "Drop a worker after this long without a heartbeat")
      ->check(CLI::Range(int64_t{100}, int64_t{600000}));
  cmd->add_option("--metrics", o->metrics_listen,
                  "Serve Prometheus metrics (GET /metrics, plain HTTP, no token) on HOST:PORT "
                  "(port 0: any free one); bind it where only operators reach it")
      ->check(ListenAddress());
  cmd->add_option("--max-connections-per-peer", o->limits.connections.max_connections_per_peer,
                  "TCP connections one peer address may hold open at once (clients and workers "
                  "on one machine share its address; plaintext only)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--max-connections", o->limits.connections.max_connections,
                  "TCP connections open at once in all (plaintext only)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--report-fanout", o->report_fanout,
                  "Workers report finished runs up a tree of this fanout, its root to the "
                  "coordinator (0: every worker to the coordinator)")
      ->check(CLI::Range(0, limits::kMaxReportFanout))
      ->capture_default_str();
  cmd->add_option("--ready-fd", *ready_fd,
                  "Write the bound address (then the metrics address, if any) to this "
                  "descriptor once serving");
  cmd->callback([o, ready_fd, heartbeat_ms, exit_code] {
    CatchStopSignals(false);
    grpc_transport::RaiseOpenFileLimit();
    o->heartbeat_timeout = absl::Milliseconds(*heartbeat_ms);
    auto server = CoordinatorServer::Start(*o);
    if (!server.ok()) {
      // A bad value (an address not of this machine) exits 2; one in use, 1.
      const int failed = Fail("coordinator", server.status());
      *exit_code = absl::IsInvalidArgument(server.status()) ? kExitUsage : failed;
      return;
    }
    std::printf("coordinator listening on %s\n", (*server)->address().c_str());
    if (!(*server)->metrics_address().empty()) {
      std::printf("metrics on http://%s/metrics\n", (*server)->metrics_address().c_str());
    }
    std::fflush(stdout);
    if (*ready_fd >= 0) {
      std::string line = (*server)->address();
      if (!(*server)->metrics_address().empty()) line += " " + (*server)->metrics_address();
      line += "\n";
      if (write(*ready_fd, line.data(), line.size()) < 0) std::perror("--ready-fd");
      close(*ready_fd);
    }
    CoordinatorServer* raw = server->get();
    std::thread stopper = StopOnSignal([raw] {
      CW_LOG(kInfo) << "coordinator: stop signal; shutting down";
      raw->Shutdown();
    });
    raw->Wait();
    stopper.join();
    *exit_code = 0;
  });
}

void AddWorkerCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<WorkerServerOptions>();
  auto ready_fd = std::make_shared<int>(-1);
  CLI::App* cmd = app.add_subcommand(
      "worker",
      "Run one host of a distributed cluster: its devices, object store, host executor and "
      "data-plane server; joins the coordinator");
  cmd->add_option("--coordinator", o->coordinator,
                  "Coordinator address HOST:PORT (default: $CAUSEWAY_COORDINATOR)");
  cmd->add_option("--island", o->island, "Island this host belongs to")
      ->check(CLI::Range(int64_t{0}, limits::kMaxIsland));
  cmd->add_option("--devices", o->devices, "Devices on this host")->check(CLI::Range(1, 4096));
  cmd->add_option("--device-kind", o->device_kind,
                  DeviceKindHelp("The kind of this host's devices"))
      ->default_val("cpu");
  cmd->add_option("--memory", o->memory_bytes, "Memory per device, bytes")
      ->check(CLI::Range(int64_t{1}, limits::kMaxDeviceMemoryBytes));
  cmd->add_option("--listen", o->listen, "Data-plane address HOST:PORT (port 0: any free one)");
  cmd->add_option("--advertise", o->advertise,
                  "Host name peers use to reach the data plane (default: as the coordinator "
                  "sees this worker)");
  cmd->add_option("--token", o->token,
                  "The cluster's worker token (default: $CAUSEWAY_WORKER_TOKEN, then "
                  "$CAUSEWAY_TOKEN)");
  cmd->add_option("--tls-cert", o->tls.cert, "PEM certificate: serve the data plane over TLS");
  cmd->add_option("--tls-key", o->tls.key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-ca", o->tls.ca, "PEM CA to trust: connect over TLS");
  auto stall_ms = std::make_shared<int64_t>(60000);
  cmd->add_option("--memory-stall-timeout-ms", *stall_ms,
                  "Fail allocations waiting on a full device after this long with nothing freed")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}))
      ->capture_default_str();
  auto grace_s = std::make_shared<double>(10);
  cmd->add_option("--shutdown-grace", *grace_s,
                  "Seconds a stop signal (SIGTERM, Ctrl-C) may take: queued launches fail at "
                  "once and the running one may finish within this; past it the worker exits "
                  "at once (under Kubernetes' 30 s)")
      ->check(CLI::Range(0.0, 3600.0))
      ->check(Finite())
      ->capture_default_str();
  auto input_ms = std::make_shared<int64_t>(300000);
  cmd->add_option("--input-timeout-ms", *input_ms,
                  "Fail a launch whose inputs are not ready after it has waited this long at the "
                  "head of its device's queue (a run another host never got, a piece never sent)")
      ->check(CLI::Range(int64_t{100}, int64_t{86400000}))
      ->capture_default_str();
  cmd->add_option("--collectives", o->collectives,
                  "How collectives between processes travel: gloo (Gloo's ring and "
                  "halving-doubling algorithms over TCP) or grpc (every contribution to every "
                  "process over the data plane). Default: gloo when built with it and not on "
                  "TLS, else grpc")
      ->check(CLI::IsMember({"gloo", "grpc"}));
  cmd->add_option("--gloo-from-bytes", o->gloo_from_bytes,
                  "With gloo: collectives moving fewer bytes (a member's operand; all-gather "
                  "and all-to-all: every member's) take the data plane. Must be the same on "
                  "every worker")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--checkpoint-root", o->checkpoint_root,
                  "Write and read clients' checkpoints only in folders under this absolute "
                  "path, which clients see at the same path (default: none; checkpoint calls "
                  "are refused)");
  cmd->add_option("--ready-fd", *ready_fd,
                  "Write the host id this worker joined as to this descriptor");
  cmd->callback([o, ready_fd, stall_ms, input_ms, grace_s, exit_code] {
    o->memory_stall_timeout = absl::Milliseconds(*stall_ms);
    o->input_timeout = absl::Milliseconds(*input_ms);
    CatchStopSignals(false);
    grpc_transport::RaiseOpenFileLimit();
    if (o->coordinator.empty()) {
      if (absl::StatusOr<std::string> env = SettingValue("CAUSEWAY_COORDINATOR"); env.ok()) {
        o->coordinator = *env;
      }
    }
    auto server = WorkerServer::Start(*o);
    if (!server.ok()) {
      *exit_code = Fail("worker", server.status());
      return;
    }
    std::printf("worker %s joined the coordinator at %s (island %lld, %d devices)\n",
                (*server)->host().ToString().c_str(), o->coordinator.c_str(),
                static_cast<long long>(o->island), o->devices);
    std::fflush(stdout);
    if (*ready_fd >= 0) {
      const std::string line = absl::StrCat((*server)->host().value(), "\n");
      if (write(*ready_fd, line.data(), line.size()) < 0) std::perror("--ready-fd");
      close(*ready_fd);
    }
    WorkerServer* raw = server->get();
    // A signal ends the worker; so does losing the coordinator, in which
    // case the stopper thread is woken by hand.
    const absl::Duration grace = absl::Seconds(*grace_s);
    std::thread stopper = StopOnSignal([raw, grace] {
      // A launch that runs past the grace (a long kernel) does not hold
      // the stop: the process exits without it. A stop within the grace
      // ends the process first, and this thread with it.
      std::thread([grace] {
        absl::SleepFor(grace);
        std::fprintf(stderr,
                     "causeway worker: still stopping after the shutdown grace of %s (a launch "
                     "is running); exiting now\n",
                     absl::FormatDuration(grace).c_str());
        std::_Exit(kExitRuntime);
      }).detach();
      raw->Shutdown();
    });
    const absl::Status why = raw->Wait();
    Wake();
    stopper.join();
    raw->Shutdown();
    if (!why.ok() && !absl::IsCancelled(why)) {
      std::fprintf(stderr, "causeway worker: %s\n", why.ToString().c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = 0;
  });
}

// A connection to `cluster` with the operators' credential (the workers'
// token, $CAUSEWAY_WORKER_TOKEN), for `command`'s call; null, with the
// exit code set and the reason printed, when there is none (exit 2) or it
// cannot be made (exit 1).
static std::unique_ptr<RemoteCluster> ConnectAsOperator(const char* command,
                                                        const std::string& cluster,
                                                        double timeout_s, int* exit_code) {
  absl::StatusOr<std::string> token = grpc_transport::WorkerTokenFromEnvironment("");
  if (!token.ok() || token->empty()) {
    std::fprintf(stderr, "causeway %s: %s\n", command,
                 token.ok() ? "set CAUSEWAY_WORKER_TOKEN to the cluster's workers' token (an "
                              "operator's credential)"
                            : std::string(token.status().message()).c_str());
    *exit_code = kExitUsage;
    return nullptr;
  }
  RemoteClusterOptions ro;
  ro.address = cluster;
  ro.token = *std::move(token);
  ro.timeout = absl::Seconds(timeout_s);
  absl::StatusOr<std::unique_ptr<RemoteCluster>> remote = RemoteCluster::Connect(ro);
  if (!remote.ok()) {
    *exit_code = Fail(command, remote.status());
    return nullptr;
  }
  return *std::move(remote);
}

void AddClusterCommand(CLI::App& app, int* exit_code) {
  CLI::App* group = app.add_subcommand("cluster", "Run a distributed cluster on this machine");
  group->require_subcommand(1);
  auto o = std::make_shared<ProcessClusterOptions>();
  auto json = std::make_shared<bool>(false);
  auto restart = std::make_shared<bool>(false);
  CLI::App* up = group->add_subcommand(
      "up",
      "Start a coordinator and one worker process per host on 127.0.0.1, print the cluster's "
      "address and token, and stop them all on Ctrl-C");
  up->add_option("--islands", o->islands, "Islands")->check(CLI::Range(1, 64));
  up->add_option("--hosts-per-island", o->hosts_per_island, "Worker processes per island")
      ->check(CLI::Range(1, 64));
  up->add_option("--devices-per-host", o->devices_per_host, "Devices per worker")
      ->check(CLI::Range(1, 4096));
  up->add_option("--device-kind", o->device_kind,
                 DeviceKindHelp("The kind of every worker's devices"))
      ->capture_default_str();
  up->add_option("--memory", o->memory_bytes, "Memory per device, bytes")
      ->check(CLI::PositiveNumber)->check(Finite());
  up->add_option("--port", o->port, "Coordinator port (0: any free one)")
      ->check(CLI::Range(0, 65535));
  up->add_option("--metrics-port", o->metrics_port,
                 "Serve the coordinator's Prometheus metrics on 127.0.0.1:PORT (0: any free "
                 "one; -1: none)")
      ->check(CLI::Range(-1, 65535));
  up->add_option("--token", o->token,
                 "Clients' token (default: $CAUSEWAY_TOKEN, else random); workers get a random "
                 "one of their own");
  up->add_option("--checkpoint-root", o->checkpoint_root,
                 "The workers' --checkpoint-root: clients' checkpoints go in folders under it "
                 "(default: none)");
  up->add_flag("--json", *json, "Print the address and token as JSON");
  up->add_flag("--restart-workers", *restart,
               "Start a worker that exits again (it joins as a new host), as a supervisor "
               "would; without it the cluster goes on with the workers left. The "
               "coordinator's exit stops the cluster either way");

  struct StatusFlags {
    std::string cluster;
    int64_t wait_devices = 0;
    double timeout_s = 60;
    double interval_s = 1;
    bool json = false;
  };
  auto sf = std::make_shared<StatusFlags>();
  CLI::App* status = group->add_subcommand(
      "status",
      "Print a running cluster's islands, hosts and devices; optionally wait until it has a "
      "number of devices (for scripts that start workers)");
  status->add_option("--cluster", sf->cluster,
                     "grpc://HOST:PORT (token from $CAUSEWAY_TOKEN; default: the one cluster "
                     "that `cluster up` runs for this user)")
      ->check(ClusterAddress(false));
  status->add_option("--wait-devices", sf->wait_devices,
                     "Wait until the cluster has at least this many devices")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  status->add_option("--timeout", sf->timeout_s, "Seconds to wait (connecting and for devices)")
      ->check(CLI::PositiveNumber)->check(Finite());
  status->add_option("--interval", sf->interval_s,
                     "Seconds between the two readings of every device's counters that its "
                     "busy fraction is computed over (0: no busy fraction)")
      ->check(CLI::Range(0.0, 3600.0))->check(Finite());
  status->add_flag("--json", sf->json, "Print one JSON object");
  status->callback([sf, status, exit_code] {
    if (status->count("--cluster") == 0) {
      sf->cluster = DefaultCluster("cluster status", "");
      if (sf->cluster.empty()) {
        *exit_code = kExitUsage;
        return;
      }
    }
    RemoteClusterOptions ro;
    ro.address = sf->cluster;
    ro.timeout = absl::Seconds(sf->timeout_s);
    auto remote = RemoteCluster::Connect(ro);
    if (!remote.ok()) {
      *exit_code = Fail("cluster status", remote.status());
      return;
    }
    if (sf->wait_devices > 0) {
      absl::Status s = (*remote)->WaitForDevices(sf->wait_devices, absl::Seconds(sf->timeout_s));
      if (!s.ok()) {
        *exit_code = Fail("cluster status", s);
        return;
      }
    }
    const Topology t = (*remote)->resources()->GetTopology();
    // Every device's counters, read twice `interval` apart: the busy
    // fraction is over that window (busy time includes collective waits).
    const absl::Duration timeout = absl::Seconds(sf->timeout_s);
    absl::StatusOr<std::vector<DeviceCounters>> first = ClusterCounters(**remote, false, timeout);
    if (!first.ok()) {
      *exit_code = Fail("cluster status", first.status());
      return;
    }
    const absl::Time first_at = absl::Now();
    std::vector<DeviceCounters> second = *first;
    double window_s = 0;
    if (sf->interval_s > 0) {
      absl::SleepFor(absl::Seconds(sf->interval_s));
      absl::StatusOr<std::vector<DeviceCounters>> c = ClusterCounters(**remote, false, timeout);
      if (!c.ok()) {
        *exit_code = Fail("cluster status", c.status());
        return;
      }
      second = *std::move(c);
      window_s = absl::ToDoubleSeconds(absl::Now() - first_at);
    }
    absl::flat_hash_map<int64_t, const DeviceCounters*> before, after;
    for (const DeviceCounters& c : *first) before[c.device.value()] = &c;
    for (const DeviceCounters& c : second) after[c.device.value()] = &c;
    nlohmann::json islands = nlohmann::json::array();
    for (IslandId i : t.islands()) {
      const IslandInfo island = *t.island(i);
      nlohmann::json hosts = nlohmann::json::array();
      for (HostId h : island.hosts) {
        nlohmann::json devices = nlohmann::json::array();
        const HostInfo info = *t.host(h);
        for (DeviceId d : info.devices) {
          nlohmann::json dj = {{"device", d.value()}};
          if (absl::StatusOr<DeviceInfo> di = t.device(d); di.ok()) {
            dj["memory_capacity"] = di->memory_bytes;
            dj["kind"] = di->kind;
            dj["description"] = di->description;
          }
          auto a = after.find(d.value());
          if (a != after.end()) {
            const DeviceCounters& c = *a->second;
            dj["launches"] = c.launches;
            dj["failed"] = c.failed;
            dj["busy_s"] = static_cast<double>(c.busy_us) / 1e6;
            dj["collective_s"] = static_cast<double>(c.busy_us - c.compute_us()) / 1e6;
            dj["queued"] = c.queued;
            dj["memory_in_use"] = c.memory_in_use;
            dj["memory_peak"] = c.memory_peak;
            auto b = before.find(d.value());
            if (window_s > 0 && b != before.end()) {
              dj["busy_fraction"] =
                  std::clamp(static_cast<double>(c.busy_us - b->second->busy_us) / 1e6 / window_s,
                             0.0, 1.0);
              // Busy time outside collectives: the device's own work.
              const int64_t own = c.compute_us() - b->second->compute_us();
              dj["compute_fraction"] =
                  std::clamp(static_cast<double>(own) / 1e6 / window_s, 0.0, 1.0);
            }
          }
          devices.push_back(std::move(dj));
        }
        hosts.push_back({{"host", h.value()}, {"devices", devices}});
      }
      islands.push_back({{"island", i.value()}, {"hosts", hosts}});
    }
    if (sf->json) {
      std::printf("%s\n", nlohmann::json({{"cluster", sf->cluster},
                                          {"devices", t.num_devices()},
                                          {"window_s", window_s},
                                          {"islands", islands}})
                                .dump()
                                .c_str());
    } else {
      std::printf("%s: %d device(s) in %zu island(s)", sf->cluster.c_str(), t.num_devices(),
                  t.islands().size());
      if (window_s > 0) {
        std::printf("; over the last %.1f s: compute = kernels outside collectives, busy = "
                    "kernels and collective waits",
                    window_s);
      }
      std::printf("\n");
      for (const auto& i : islands) {
        std::printf("  island %lld\n", static_cast<long long>(i["island"].get<int64_t>()));
        for (const auto& h : i["hosts"]) {
          std::printf("    host %lld\n", static_cast<long long>(h["host"].get<int64_t>()));
          for (const auto& d : h["devices"]) {
            std::printf("      device %lld", static_cast<long long>(d["device"].get<int64_t>()));
            if (d.contains("kind")) {
              const std::string what = d["description"].get<std::string>();
              std::printf(" (%s%s%s)", d["kind"].get<std::string>().c_str(),
                          what.empty() ? "" : ": ", what.c_str());
            }
            std::printf(":");
            if (d.contains("compute_fraction")) {
              std::printf(" compute %5.1f %%", 100 * d["compute_fraction"].get<double>());
            }
            if (d.contains("busy_fraction")) {
              std::printf(" busy %5.1f %%", 100 * d["busy_fraction"].get<double>());
            }
            if (d.contains("memory_in_use") && d.contains("memory_capacity")) {
              std::printf("  memory %.1f / %.1f MiB (peak %.1f)",
                          d["memory_in_use"].get<int64_t>() / 1048576.0,
                          d["memory_capacity"].get<int64_t>() / 1048576.0,
                          d["memory_peak"].get<int64_t>() / 1048576.0);
            }
            if (d.contains("launches")) {
              std::printf("  %lld launches (%lld failed)",
                          static_cast<long long>(d["launches"].get<int64_t>()),
                          static_cast<long long>(d["failed"].get<int64_t>()));
            }
            std::printf("\n");
          }
        }
      }
    }
    *exit_code = 0;
  });
  struct WeightFlags {
    std::string cluster;
    int64_t client = -1;
    double weight = 1;
    int priority = 0;
    int64_t memory_quota = 0;
    double timeout_s = 30;
  };
  auto wf = std::make_shared<WeightFlags>();
  CLI::App* weight = group->add_subcommand(
      "set-weight",
      "Set a connected client's share of every island: its weight, priority class and memory "
      "quota per device (an operator's call: the token is the workers' one, "
      "$CAUSEWAY_WORKER_TOKEN)");
  weight->add_option("--cluster", wf->cluster, "grpc://HOST:PORT")
      ->check(ClusterAddress(false))
      ->required();
  weight->add_option("--client", wf->client, "The client's number (as in `client N`)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  weight->add_option("--weight", wf->weight, "Relative share of device time, in (0, 1e6]")
      ->check(CLI::Range(0.0, 1e6))
      ->check(AboveZero())
      ->check(Finite())
      ->capture_default_str();
  weight->add_option("--priority", wf->priority, "Priority class, 0 to 7 (higher goes first)")
      ->check(CLI::Range(0, 7))
      ->capture_default_str();
  weight->add_option("--memory-quota", wf->memory_quota,
                     "Bytes the client may hold on each device (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  weight->add_option("--timeout", wf->timeout_s, "Seconds to wait for the coordinator")
      ->check(CLI::PositiveNumber)
      ->check(Finite())
      ->capture_default_str();
  weight->callback([wf, exit_code] {
    std::unique_ptr<RemoteCluster> remote =
        ConnectAsOperator("cluster set-weight", wf->cluster, wf->timeout_s, exit_code);
    if (remote == nullptr) return;
    const ClientShare share{wf->weight, wf->priority, wf->memory_quota};
    const absl::Status s = remote->AdminSetClientShare(ClientId(wf->client), share);
    if (!s.ok()) {
      *exit_code = Fail("cluster set-weight", s);
      return;
    }
    std::printf("%s: weight %g, priority %d, memory quota %lld bytes per device\n",
                ClientId(wf->client).ToString().c_str(), wf->weight, wf->priority,
                static_cast<long long>(wf->memory_quota));
    *exit_code = 0;
  });
  // cluster cancel: an operator's end to a client's work.
  struct CancelFlags {
    std::string cluster;
    int64_t client = -1;
    double timeout_s = 30;
  };
  auto cf = std::make_shared<CancelFlags>();
  CLI::App* cancel = group->add_subcommand(
      "cancel",
      "Cancel all the work of a connected client: its runs waiting in the schedulers are "
      "dropped, every worker cancels its queued and running launches (a loop ends at its next "
      "iteration) and frees its memory, and its later runs are refused (an operator's call: "
      "the token is the workers' one, $CAUSEWAY_WORKER_TOKEN)");
  cancel->add_option("--cluster", cf->cluster, "grpc://HOST:PORT")
      ->check(ClusterAddress(false))
      ->required();
  cancel->add_option("--client", cf->client, "The client's number (as in `client N`)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  cancel->add_option("--timeout", cf->timeout_s, "Seconds to wait for the coordinator")
      ->check(CLI::PositiveNumber)
      ->check(Finite())
      ->capture_default_str();
  cancel->callback([cf, exit_code] {
    std::unique_ptr<RemoteCluster> remote =
        ConnectAsOperator("cluster cancel", cf->cluster, cf->timeout_s, exit_code);
    if (remote == nullptr) return;
    if (absl::Status s = remote->AdminCancelClient(ClientId(cf->client)); !s.ok()) {
      *exit_code = Fail("cluster cancel", s);
      return;
    }
    std::printf("%s: its work is cancelled and its later runs are refused\n",
                ClientId(cf->client).ToString().c_str());
    *exit_code = 0;
  });
  up->callback([o, json, restart, exit_code] {
    CatchStopSignals(true);
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
      *exit_code = Fail("cluster up", absl::InternalError("cannot find the causeway binary"));
      return;
    }
    o->binary.assign(self, static_cast<size_t>(n));
    if (o->token.empty()) {
      if (absl::StatusOr<std::string> env = SettingValue("CAUSEWAY_TOKEN"); env.ok()) {
        o->token = *env;
      }
    }
    auto cluster = ProcessCluster::Start(*o);
    if (!cluster.ok()) {
      *exit_code = Fail("cluster up", cluster.status());
      return;
    }
    // A client on this machine finds the token here (cluster_file.h).
    absl::StatusOr<std::string> record = WriteClusterFile((*cluster)->url(), (*cluster)->token());
    if (!record.ok()) {
      std::fprintf(stderr, "causeway cluster up: the token is not recorded for local clients: %s\n",
                   std::string(record.status().message()).c_str());
    }
    if (*json) {
      nlohmann::json j;
      j["address"] = (*cluster)->url();
      j["token"] = (*cluster)->token();
      if (record.ok()) j["token_file"] = *record;
      j["log_dir"] = (*cluster)->log_dir();
      if (!(*cluster)->metrics_address().empty()) {
        j["metrics"] = absl::StrCat("http://", (*cluster)->metrics_address(), "/metrics");
      }
      // The operator's credential (docs/DEPLOYMENT.md, "Tokens"): for whoever
      // started the cluster, never for its clients.
      j["worker_token"] = (*cluster)->worker_token();
      j["islands"] = o->islands;
      j["hosts"] = (*cluster)->num_workers();
      j["devices"] = (*cluster)->num_devices();
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("cluster up: %s (%d island(s), %d worker process(es), %lld devices)\n"
                  "token: %s%s%s\n"
                  "operator (workers') token: %s\n"
                  "logs: %s (kept if a process fails)\n%s"
                  "try: causeway demo --cluster %s%s\n"
                  "Ctrl-C stops every process.\n",
                  (*cluster)->url().c_str(), o->islands, (*cluster)->num_workers(),
                  static_cast<long long>((*cluster)->num_devices()), (*cluster)->token().c_str(),
                  record.ok() ? " (recorded for this user's clients in " : "",
                  record.ok() ? (*record + ")").c_str() : "",
                  (*cluster)->worker_token().c_str(), (*cluster)->log_dir().c_str(),
                  (*cluster)->metrics_address().empty()
                      ? ""
                      : absl::StrCat("metrics: http://", (*cluster)->metrics_address(),
                                     "/metrics\n")
                            .c_str(),
                  (*cluster)->url().c_str(),
                  record.ok() ? "" : "  (with CAUSEWAY_TOKEN set to the token above)");
    }
    std::fflush(stdout);
    int code = 0;
    while (true) {
      const int sig = WaitForSignal();
      if (sig != SIGCHLD) break;
      const std::string exited = (*cluster)->ReapExited();
      if (exited.empty()) continue;
      if (!(*cluster)->CoordinatorRunning()) {
        std::fprintf(stderr, "causeway cluster up: %s; stopping the cluster\n", exited.c_str());
        code = 1;
        break;
      }
      // A lost worker is what an elastic run recovers from: the cluster
      // goes on, with a replacement if asked for.
      std::fprintf(stderr, "causeway cluster up: %s\n", exited.c_str());
      for (int i = 0; *restart && i < (*cluster)->num_workers(); ++i) {
        if ((*cluster)->WorkerRunning(i)) continue;
        if (absl::Status s = (*cluster)->RestartWorker(i); !s.ok()) {
          std::fprintf(stderr, "causeway cluster up: worker %d did not start again: %s\n", i,
                       std::string(s.message()).c_str());
        } else {
          std::fprintf(stderr, "causeway cluster up: worker %d started again as %s\n", i,
                       (*cluster)->worker_host(i).ToString().c_str());
        }
      }
    }
    RemoveClusterFile((*cluster)->url());
    // A process that failed leaves its logs for a post-mortem.
    (*cluster)->Stop(/*keep_logs=*/code != 0);
    std::printf("cluster stopped\n");
    *exit_code = code;
  });
}

std::string DefaultCluster(const std::string& command, const std::string& fallback) {
  absl::StatusOr<std::string> recorded = RecordedCluster();
  if (recorded.ok()) {
    std::fprintf(stderr, "causeway %s: on the cluster at %s that `cluster up` runs%s\n",
                 command.c_str(), recorded->c_str(),
                 fallback == "local" ? " (--cluster local for the embedded one)" : "");
    return *recorded;
  }
  if (!absl::IsNotFound(recorded.status()) || fallback.empty()) {
    std::fprintf(stderr, "causeway %s: no --cluster given, and %s%s\n", command.c_str(),
                 std::string(recorded.status().message()).c_str(),
                 fallback == "local" ? "; running on the embedded cluster" : "");
  }
  return fallback;
}

CLI::Validator ClusterAddress(bool local_allowed) {
  return CLI::Validator(
      [local_allowed](std::string& text) -> std::string {
        if (local_allowed && text == "local") return std::string();
        absl::StatusOr<std::string> address = ParseGrpcAddress(text);
        if (address.ok()) return std::string();
        return absl::StrCat(address.status().message(),
                            local_allowed ? ", or local for the embedded cluster" : "");
      },
      "", "CLUSTER");
}

}  // namespace causeway::tools
