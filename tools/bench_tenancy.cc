// `causeway bench tenancy`: several clients share one island (the paper's
// Fig. 8). Each client is its own Client with its own weight, keeping the
// island saturated with gang computations over every device (`delay` of
// --compute-us, then a scalar all-reduce). Reports, per client, its achieved
// share of device time in every 10 ms, 100 ms and 1 s window against its
// target (weight over the sum of weights), the aggregate compute fraction
// for 1, 2, 4 and 8 clients, and what the scheduler's choices cost per run.
//
// Device time is what the hosts report for each finished run (the time its
// launches held their devices, collectives included), spread evenly over
// the run's last wall interval (device time over launches, ending when the
// run finished). The compute fraction counts only the requested work:
// runs finished x compute-us x devices / (devices x wall time).
//
// With --cluster grpc://HOST:PORT every client is a process of its own
// (`causeway bench tenancy-client`, started here) with its own connection.
// There the hosts' reports stay in the coordinator: each client records when
// each of its results arrived, on the machine's monotonic clock, which all
// processes share; as every run is the same gang, a run counts compute-us on
// every device, spread over the compute-us before it arrived. The
// scheduler's decision cost is not reported (it is the coordinator's).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "causeway/scheduler/island_scheduler.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/ir/builder.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace causeway::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct TenancyFlags {
  int clients = 4;
  std::string weights = "1,2,4,8";
  int64_t compute_us = 330;
  double seconds = 10;
  int devices = 8;
  int hosts = 1;
  std::string aggregate = "1,2,4,8";
  double aggregate_seconds = 2;
  int outstanding = 64;
  std::string trace_path;
  std::string cluster = "local";
  double timeout_s = 30;
  bool json = false;
};

// `causeway bench tenancy-client`: one client of a distributed run.
struct TenantFlags {
  std::string cluster;
  double weight = 1;
  int64_t compute_us = 330;
  int devices = 8;
  int outstanding = 64;
  int64_t start_at_ns = 0;  // CLOCK_MONOTONIC
  double seconds = 10;
  double timeout_s = 30;
  std::string name = "tenant";
};

int64_t MonotonicNanos() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// One finished run, as the scheduler accounted it.
struct Sample {
  double end_s = 0;  // since the start
  int64_t client = 0;
  double device_us = 0;
  double wall_us = 0;
};

struct TenancyRun {
  std::vector<Sample> samples;
  std::map<int64_t, int> client_index;  // client id -> position in weights
  std::vector<int64_t> finished;        // runs finished per client (by position)
  double start_s = 0, end_s = 0;        // the interval every client was busy
  DecisionStats decisions;
  // Where the samples come from.
  std::string source = "hosts' reports";
};

absl::StatusOr<TenancyRun> RunTenancy(const TenancyFlags& f, const std::vector<double>& weights,
                                      double seconds, bool trace) {
  const SteadyClock::time_point t0 = SteadyClock::now();
  auto since = [t0] {
    return std::chrono::duration<double>(SteadyClock::now() - t0).count();
  };
  auto mu = std::make_shared<Mutex>();
  auto samples = std::make_shared<std::vector<Sample>>();
  LocalClusterOptions co;
  co.islands = 1;
  co.hosts_per_island = f.hosts;
  co.devices_per_host = f.devices / f.hosts;
  co.trace = trace;
  co.on_run_accounted = [mu, samples, since](ClientId client, int64_t device_us, int launches) {
    Sample s;
    s.end_s = since();
    s.client = client.value();
    s.device_us = static_cast<double>(device_us);
    s.wall_us = launches > 0 ? s.device_us / launches : 0;
    MutexLock lock(mu.get());
    samples->push_back(s);
  };
  CW_ASSIGN_OR_RETURN(auto cluster, LocalCluster::Create(co));

  const int n = static_cast<int>(weights.size());
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<CompiledFunction> functions;
  std::vector<Array> inputs;
  TenancyRun out;
  for (int c = 0; c < n; ++c) {
    ClientOptions options;
    options.share.weight = weights[c];
    CW_ASSIGN_OR_RETURN(auto client, Client::Connect(cluster.get(), options));
    CW_ASSIGN_OR_RETURN(Mesh mesh, client->AllocateMesh({{"x", f.devices}}));
    ir::FunctionBuilder b(absl::StrCat("client", c, "_w", weights[c]));
    ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {}));
    CW_ASSIGN_OR_RETURN(ir::Function fn,
                        b.Build({b.AllReduce(b.Delay(x, f.compute_us), {"x"})}));
    CW_ASSIGN_OR_RETURN(CompiledFunction cf, client->Compile(fn, mesh, {}));
    CW_ASSIGN_OR_RETURN(Array in, client->Put(ir::Literal::ScalarF32(1.0f), mesh,
                                              Sharding::Replicated(0)));
    out.client_index[client->id().value()] = c;
    clients.push_back(std::move(client));
    functions.push_back(cf);
    inputs.push_back(in);
  }

  // Every client keeps `outstanding` runs in flight until the end.
  std::atomic<bool> stop{false};
  std::vector<absl::Status> errors(n);
  std::vector<std::thread> threads;
  const double start = since();
  for (int c = 0; c < n; ++c) {
    threads.emplace_back([&, c] {
      std::deque<Array> pending;
      while (!stop.load()) {
        absl::StatusOr<std::vector<Array>> r = clients[c]->Call(functions[c], {inputs[c]});
        if (!r.ok()) {
          errors[c] = r.status();
          return;
        }
        pending.push_back((*r)[0]);
        if (static_cast<int>(pending.size()) >= f.outstanding) {
          const absl::StatusOr<Unit>& ready = pending.front().Ready().Await();
          if (!ready.ok()) {
            errors[c] = ready.status();
            return;
          }
          pending.pop_front();
        }
      }
      for (const Array& a : pending) a.Ready().Await().IgnoreError();
    });
  }
  while (since() < start + seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double stop_s = since();
  stop.store(true);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& e : errors) CW_RETURN_IF_ERROR(e);
  out.decisions = cluster->island_scheduler(IslandId(0))->decision_stats();
  if (trace) CW_RETURN_IF_ERROR(cluster->trace().WriteChromeJson(f.trace_path));
  for (auto& c : clients) c->Disconnect();
  {
    MutexLock lock(mu.get());
    out.samples = *samples;
  }
  // Skip the first 10 % (estimates settling, threads starting).
  out.start_s = start + 0.1 * seconds;
  out.end_s = stop_s;
  out.finished.assign(n, 0);
  for (const Sample& s : out.samples) {
    auto it = out.client_index.find(s.client);
    if (it != out.client_index.end() && s.end_s >= out.start_s && s.end_s <= out.end_s) {
      ++out.finished[it->second];
    }
  }
  return out;
}

absl::Status RunTenant(const TenantFlags& f) {
  RemoteClusterOptions ro;
  ro.address = f.cluster;
  ro.timeout = absl::Seconds(f.timeout_s);
  CW_ASSIGN_OR_RETURN(auto remote, RemoteCluster::Connect(ro));
  ClientOptions options;
  options.share.weight = f.weight;
  CW_ASSIGN_OR_RETURN(auto client, Client::Connect(remote.get(), options));
  CW_ASSIGN_OR_RETURN(Mesh mesh, client->AllocateMesh({{"x", f.devices}}));
  ir::FunctionBuilder b(f.name);
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {}));
  CW_ASSIGN_OR_RETURN(ir::Function fn, b.Build({b.AllReduce(b.Delay(x, f.compute_us), {"x"})}));
  CW_ASSIGN_OR_RETURN(CompiledFunction cf, client->Compile(fn, mesh, {}));
  CW_ASSIGN_OR_RETURN(Array in,
                      client->Put(ir::Literal::ScalarF32(1.0f), mesh, Sharding::Replicated(0)));
  {
    CW_ASSIGN_OR_RETURN(std::vector<Array> warm, client->Call(cf, {in}));
    CW_RETURN_IF_ERROR(warm[0].Fetch().Await().status());
  }
  timespec start;
  start.tv_sec = static_cast<time_t>(f.start_at_ns / 1'000'000'000);
  start.tv_nsec = static_cast<long>(f.start_at_ns % 1'000'000'000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &start, nullptr) == EINTR) {
  }
  const int64_t began = MonotonicNanos();
  const int64_t stop_at = began + static_cast<int64_t>(f.seconds * 1e9);
  // Arrival of each result (one small fetch per run).
  auto mu = std::make_shared<Mutex>();
  auto ends = std::make_shared<std::vector<int64_t>>();
  std::deque<Future<ir::Literal>> pending;
  while (MonotonicNanos() < stop_at) {
    CW_ASSIGN_OR_RETURN(std::vector<Array> out, client->Call(cf, {in}));
    Future<ir::Literal> result = out[0].Fetch();
    result.OnReady([mu, ends](const absl::StatusOr<ir::Literal>& r) {
      if (!r.ok()) return;
      const int64_t now = MonotonicNanos();
      MutexLock lock(mu.get());
      ends->push_back(now);
    });
    pending.push_back(result);
    if (static_cast<int>(pending.size()) >= f.outstanding) {
      CW_RETURN_IF_ERROR(pending.front().Await().status());
      pending.pop_front();
    }
  }
  const int64_t stopped = MonotonicNanos();
  for (const auto& p : pending) CW_RETURN_IF_ERROR(p.Await().status());
  nlohmann::json j = {{"name", f.name},
                      {"client", client->id().value()},
                      {"start_ns", began},
                      {"stop_ns", stopped}};
  {
    MutexLock lock(mu.get());
    j["ends_ns"] = *ends;
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  client->Disconnect();
  return absl::OkStatus();
}

// Runs one client process per weight against `f.cluster`, all starting at
// the same moment, and gathers what each saw.
absl::StatusOr<TenancyRun> RunTenancyProcesses(const TenancyFlags& f,
                                               const std::vector<double>& weights,
                                               double seconds) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return absl::InternalError("cannot find the causeway binary");
  self[len] = '\0';
  const int64_t t0 = MonotonicNanos();
  // Time for every process to connect, compile and warm up first.
  const int64_t start_at = t0 + int64_t{3'000'000'000} + int64_t{250'000'000} * static_cast<int64_t>(weights.size());
  std::vector<FILE*> children;
  for (size_t c = 0; c < weights.size(); ++c) {
    const std::string command = absl::StrCat(
        "'", self, "' bench tenancy-client --cluster '", f.cluster, "' --weight ", weights[c],
        " --compute-us ", f.compute_us, " --devices ", f.devices, " --timeout ", f.timeout_s,
        " --outstanding ",
        f.outstanding, " --start-at-ns ", start_at, " --seconds ", seconds, " --name client", c,
        "_w", weights[c]);
    FILE* p = popen(command.c_str(), "r");
    if (p == nullptr) return absl::InternalError(absl::StrCat("cannot start: ", command));
    children.push_back(p);
  }
  TenancyRun out;
  out.finished.assign(weights.size(), 0);
  double start_s = 0, end_s = 1e300;
  absl::Status failed;
  std::vector<Sample> arrivals;
  for (size_t c = 0; c < children.size(); ++c) {
    std::string text;
    char buffer[1 << 16];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), children[c])) > 0) text.append(buffer, n);
    const int rc = pclose(children[c]);
    if (rc != 0 || text.empty()) {
      if (failed.ok()) {
        failed = absl::InternalError(absl::StrCat("client process ", c, " failed (status ", rc,
                                                  "); its error is above"));
      }
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("ends_ns")) {
      if (failed.ok()) failed = absl::InternalError(absl::StrCat("client process ", c, ": ", text));
      continue;
    }
    const int64_t id = j["client"].get<int64_t>();
    out.client_index[id] = static_cast<int>(c);
    start_s = std::max(start_s, static_cast<double>(j["start_ns"].get<int64_t>() - t0) * 1e-9);
    end_s = std::min(end_s, static_cast<double>(j["stop_ns"].get<int64_t>() - t0) * 1e-9);
    for (int64_t e : j["ends_ns"]) {
      Sample s;
      s.end_s = static_cast<double>(e - t0) * 1e-9;
      s.client = id;
      s.device_us = static_cast<double>(f.compute_us) * f.devices;
      s.wall_us = static_cast<double>(f.compute_us);
      arrivals.push_back(s);
    }
  }
  CW_RETURN_IF_ERROR(failed);
  // With the operators' credential, the coordinator's own account of every
  // run (device time as the hosts reported it, when it was accounted);
  // otherwise the clients' arrival times.
  out.samples = std::move(arrivals);
  out.source = "client arrivals";
  CW_ASSIGN_OR_RETURN(const std::string operator_token,
                      grpc_transport::WorkerTokenFromEnvironment(""));
  if (!operator_token.empty()) {
    RemoteClusterOptions ro;
    ro.address = f.cluster;
    ro.token = operator_token;
    ro.timeout = absl::Seconds(f.timeout_s);
    CW_ASSIGN_OR_RETURN(auto op, RemoteCluster::Connect(ro));
    std::vector<Sample> accounted;
    int64_t since = t0;
    bool more = true;
    while (more) {
      CW_ASSIGN_OR_RETURN(std::vector<RemoteCluster::AccountedRun> runs,
                          op->AdminShareLog(since, &more));
      if (runs.empty()) break;
      for (const RemoteCluster::AccountedRun& a : runs) {
        if (!out.client_index.contains(a.client.value())) continue;
        Sample s;
        s.end_s = static_cast<double>(a.time_ns - t0) * 1e-9;
        s.client = a.client.value();
        s.device_us = static_cast<double>(a.device_us);
        s.wall_us = a.launches > 0 ? s.device_us / a.launches : 0;
        accounted.push_back(s);
      }
      since = runs.back().time_ns;
    }
    out.samples = std::move(accounted);
    out.source = "coordinator";
  }
  out.start_s = start_s + 0.1 * seconds;
  out.end_s = end_s;
  for (const Sample& s : out.samples) {
    auto it = out.client_index.find(s.client);
    if (it != out.client_index.end() && s.end_s >= out.start_s && s.end_s <= out.end_s) {
      ++out.finished[it->second];
    }
  }
  return out;
}

struct WindowStats {
  double window_ms = 0;
  int windows = 0;
  double max_error = 0;   // worst |share - target| over windows and clients
  double mean_error = 0;  // mean over windows and clients
  std::vector<double> max_error_by_client;
};

// Per-client device time in each window, each run's time spread over its
// last wall interval.
WindowStats Windows(const TenancyRun& r, const std::vector<double>& targets, double window_s) {
  const int n = static_cast<int>(targets.size());
  const int count = static_cast<int>(std::floor((r.end_s - r.start_s) / window_s));
  WindowStats w;
  w.window_ms = window_s * 1e3;
  w.windows = count;
  w.max_error_by_client.assign(n, 0);
  if (count <= 0) return w;
  std::vector<std::vector<double>> time(count, std::vector<double>(n, 0));
  for (const Sample& s : r.samples) {
    auto it = r.client_index.find(s.client);
    if (it == r.client_index.end()) continue;
    const double end = s.end_s, begin = end - std::max(s.wall_us, 1.0) * 1e-6;
    const double density = s.device_us / (end - begin);
    const int first = std::max(0, static_cast<int>(std::floor((begin - r.start_s) / window_s)));
    const int last = std::min(count - 1, static_cast<int>(std::floor((end - r.start_s) / window_s)));
    for (int k = first; k <= last; ++k) {
      const double lo = std::max(begin, r.start_s + k * window_s);
      const double hi = std::min(end, r.start_s + (k + 1) * window_s);
      if (hi > lo) time[k][it->second] += density * (hi - lo);
    }
  }
  double sum_error = 0;
  for (int k = 0; k < count; ++k) {
    double total = 0;
    for (double t : time[k]) total += t;
    if (total <= 0) continue;
    for (int c = 0; c < n; ++c) {
      const double e = std::fabs(time[k][c] / total - targets[c]);
      w.max_error = std::max(w.max_error, e);
      w.max_error_by_client[c] = std::max(w.max_error_by_client[c], e);
      sum_error += e;
    }
  }
  w.mean_error = sum_error / (count * n);
  return w;
}

absl::StatusOr<std::vector<double>> ParseList(const std::string& text, const char* flag) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double v;
    if (!absl::SimpleAtod(part, &v) || !std::isfinite(v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", part, "' is not a positive number"));
    }
    out.push_back(v);
  }
  return out;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "causeway bench tenancy: %s\n", s.ToString().c_str());
  return kExitRuntime;
}

int Usage(const absl::Status& s) {
  std::fprintf(stderr, "causeway bench tenancy: %s\n", std::string(s.message()).c_str());
  return kExitUsage;
}

int RunTenancyBench(const TenancyFlags& f) {
  if (f.devices % f.hosts != 0) {
    std::fprintf(stderr, "causeway bench tenancy: --devices (%d) must be a multiple of --hosts "
                         "(%d)\n", f.devices, f.hosts);
    return kExitUsage;
  }
  absl::StatusOr<std::vector<double>> weights = ParseList(f.weights, "--weights");
  if (!weights.ok()) return Usage(weights.status());
  if (static_cast<int>(weights->size()) != f.clients) {
    return Usage(absl::InvalidArgumentError(absl::StrCat(
        "--weights lists ", weights->size(), " weights for ", f.clients, " clients")));
  }
  double sum = 0;
  for (double w : *weights) sum += w;
  std::vector<double> targets;
  for (double w : *weights) targets.push_back(w / sum);

  const bool local = f.cluster == "local";
  if (!local && !f.trace_path.empty()) {
    return Usage(absl::InvalidArgumentError("--trace needs the embedded cluster"));
  }
  absl::StatusOr<std::vector<double>> counts =
      f.aggregate.empty() ? std::vector<double>{} : ParseList(f.aggregate, "--aggregate");
  if (!counts.ok()) return Usage(counts.status());
  // Say what runs beyond --seconds, on stderr (stdout may be JSON).
  if (!counts->empty()) {
    std::fprintf(stderr,
                 "bench tenancy: measuring %g s of sharing, then %zu aggregate run%s of %g s "
                 "(--aggregate %s; --aggregate '' skips them): about %g s in all\n",
                 f.seconds, counts->size(), counts->size() == 1 ? "" : "s", f.aggregate_seconds, f.aggregate.c_str(),
                 f.seconds + static_cast<double>(counts->size()) * f.aggregate_seconds);
  }
  absl::StatusOr<TenancyRun> run = local
                                       ? RunTenancy(f, *weights, f.seconds, !f.trace_path.empty())
                                       : RunTenancyProcesses(f, *weights, f.seconds);
  if (!run.ok()) return Fail(run.status());
  const double wall = run->end_s - run->start_s;
  std::vector<WindowStats> windows;
  for (double w : {0.01, 0.1, 1.0}) windows.push_back(Windows(*run, targets, w));
  std::vector<double> overall(f.clients, 0);
  double total = 0;
  for (const Sample& s : run->samples) {
    auto it = run->client_index.find(s.client);
    if (it == run->client_index.end() || s.end_s < run->start_s || s.end_s > run->end_s) continue;
    overall[it->second] += s.device_us;
    total += s.device_us;
  }
  int64_t finished = 0;
  for (int64_t x : run->finished) finished += x;
  const double compute_fraction =
      static_cast<double>(finished) * static_cast<double>(f.compute_us) * 1e-6 / wall;
  const double decision_us =
      run->decisions.decisions > 0
          ? static_cast<double>(run->decisions.nanos) / 1e3 / run->decisions.decisions
          : 0;

  // The aggregate compute fraction as clients are added (equal work each,
  // weights 1, 2, 4, ... in turn).
  nlohmann::json aggregate = nlohmann::json::array();
  for (double count : *counts) {
    std::vector<double> w;
    for (int c = 0; c < static_cast<int>(count); ++c) w.push_back(static_cast<double>(1 << (c % 4)));
    absl::StatusOr<TenancyRun> a = local ? RunTenancy(f, w, f.aggregate_seconds, false)
                                         : RunTenancyProcesses(f, w, f.aggregate_seconds);
    if (!a.ok()) return Fail(a.status());
    int64_t done = 0;
    for (int64_t x : a->finished) done += x;
    const double fraction = static_cast<double>(done) * static_cast<double>(f.compute_us) *
                            1e-6 / (a->end_s - a->start_s);
    aggregate.push_back({{"clients", static_cast<int>(count)}, {"compute_fraction", fraction}});
  }

  nlohmann::json clients = nlohmann::json::array();
  for (int c = 0; c < f.clients; ++c) {
    clients.push_back({{"weight", (*weights)[c]},
                       {"target", targets[c]},
                       {"achieved", total > 0 ? overall[c] / total : 0},
                       {"runs", run->finished[c]},
                       {"max_error_10ms", windows[0].max_error_by_client[c]},
                       {"max_error_100ms", windows[1].max_error_by_client[c]},
                       {"max_error_1s", windows[2].max_error_by_client[c]}});
  }
  nlohmann::json wj = nlohmann::json::array();
  for (const WindowStats& w : windows) {
    wj.push_back({{"window_ms", w.window_ms},
                  {"windows", w.windows},
                  {"max_error", w.max_error},
                  {"mean_error", w.mean_error}});
  }
  nlohmann::json j = {{"bench", "tenancy"},
                      {"cluster", f.cluster},
                      {"measured_from", run->source},
                      {"clients", f.clients},
                      {"devices", f.devices},
                      {"hosts", f.hosts},
                      {"compute_us", f.compute_us},
                      {"seconds", wall},
                      {"per_client", clients},
                      {"windows", wj},
                      {"compute_fraction", compute_fraction},
                      {"aggregate", aggregate},
                      {"decision_us_per_run",
                       local ? nlohmann::json(decision_us) : nlohmann::json(nullptr)},
                      {"decisions", run->decisions.decisions}};
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%d clients on %d devices / %d hosts, %lld us gangs, %.1f s measured\n", f.clients,
              f.devices, f.hosts, static_cast<long long>(f.compute_us), wall);
  std::printf("%-8s %-8s %-8s %-8s %-12s %-12s %-12s\n", "weight", "target", "achieved", "runs",
              "max err 10ms", "100ms", "1s");
  for (int c = 0; c < f.clients; ++c) {
    std::printf("%-8g %-8.3f %-8.3f %-8lld %-12.3f %-12.3f %-12.3f\n", (*weights)[c], targets[c],
                total > 0 ? overall[c] / total : 0, static_cast<long long>(run->finished[c]),
                windows[0].max_error_by_client[c], windows[1].max_error_by_client[c],
                windows[2].max_error_by_client[c]);
  }
  for (const WindowStats& w : windows) {
    std::printf("%g ms windows (%d): share error max %.2f pp, mean %.2f pp\n", w.window_ms,
                w.windows, 100 * w.max_error, 100 * w.mean_error);
  }
  if (local) {
    std::printf("compute fraction %.3f; scheduler decision %.2f us per run\n", compute_fraction,
                decision_us);
  } else {
    std::printf("compute fraction %.3f; shares measured from the %s\n", compute_fraction,
                run->source.c_str());
  }
  for (const auto& a : aggregate) {
    std::printf("aggregate compute fraction, %d clients: %.3f\n", a["clients"].get<int>(),
                a["compute_fraction"].get<double>());
  }
  if (!f.trace_path.empty()) {
    std::printf("trace written to %s (open in Perfetto)\n", f.trace_path.c_str());
  }
  return 0;
}

}  // namespace

void AddBenchTenancyCommand(CLI::App* bench, int* exit_code) {
  auto f = std::make_shared<TenancyFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "tenancy",
      "Several clients with weights share one island of the embedded cluster: achieved share "
      "of device time per window against the weights, aggregate compute fraction, scheduler "
      "decision cost");
  cmd->add_option("--clients", f->clients, "Clients, each with its own connection")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--weights", f->weights, "Comma-separated weight of each client")
      ->capture_default_str();
  cmd->add_option("--compute-us", f->compute_us, "Length of each gang computation, us")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  cmd->add_option("--seconds", f->seconds,
                  "Measured time of the shares; the aggregate runs (--aggregate) take "
                  "--aggregate-seconds more each, as the command says when it starts")
      ->check(CLI::Range(0.1, 3600.0))
      ->check(Finite())
      ->capture_default_str();
  cmd->add_option("--devices", f->devices, "Devices of the island (every gang uses all)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--hosts", f->hosts, "Hosts the devices are spread over")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--aggregate", f->aggregate,
                  "Client counts for the aggregate compute fraction (empty: skip)")
      ->capture_default_str();
  cmd->add_option("--aggregate-seconds", f->aggregate_seconds, "Measured time per client count")
      ->check(CLI::Range(0.1, 3600.0))
      ->check(Finite())
      ->capture_default_str();
  cmd->add_option("--outstanding", f->outstanding, "Runs each client keeps in flight")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--trace", f->trace_path, "Write a Chrome trace (Perfetto) of the main run");
  cmd->add_option("--cluster", f->cluster,
                  "local (an embedded cluster), or grpc://HOST:PORT: each client a process of "
                  "its own (token from $CAUSEWAY_TOKEN; --devices of island 0 per gang)")
      ->check(ClusterAddress(true))
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout_s, "Seconds to wait for a distributed cluster")
      ->check(CLI::PositiveNumber)->check(Finite());
  cmd->add_flag("--json", f->json, "One JSON object");
  cmd->callback([f, cmd, exit_code] {
    if (f->cluster != "local" && cmd->count("--hosts") > 0) {
      std::fprintf(stderr, "causeway bench tenancy: --hosts applies to the embedded cluster only\n");
      *exit_code = kExitUsage;
      return;
    }
    *exit_code = RunTenancyBench(*f);
  });

  // One client of a distributed run, started by the command above.
  auto t = std::make_shared<TenantFlags>();
  CLI::App* tenant = bench->add_subcommand(
      "tenancy-client", "One client of `bench tenancy --cluster` (started by it)");
  tenant->group("");  // not listed in --help
  tenant->add_option("--cluster", t->cluster, "grpc://HOST:PORT")
      ->check(ClusterAddress(false))
      ->required();
  tenant->add_option("--weight", t->weight, "Weight")
      ->check(CLI::Range(0.0, 1e6))
      ->check(AboveZero())
      ->check(Finite());
  tenant->add_option("--compute-us", t->compute_us, "Gang length, us")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  tenant->add_option("--devices", t->devices, "Devices per gang")->check(CLI::Range(1, 4096));
  tenant->add_option("--outstanding", t->outstanding, "Runs in flight")
      ->check(CLI::Range(1, 100000));
  tenant->add_option("--start-at-ns", t->start_at_ns, "CLOCK_MONOTONIC time to start at")
      ->required();
  tenant->add_option("--seconds", t->seconds, "Measured time")
      ->check(CLI::Range(0.1, 3600.0))
      ->check(Finite());
  tenant->add_option("--name", t->name, "Name of its function (in traces)");
  tenant->add_option("--timeout", t->timeout_s, "Seconds to wait for the cluster")
      ->check(CLI::PositiveNumber)->check(Finite());
  tenant->callback([t, exit_code] {
    const absl::Status s = RunTenant(*t);
    if (!s.ok()) {
      std::fprintf(stderr, "causeway bench tenancy-client: %s\n", s.ToString().c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = 0;
  });
}

}  // namespace causeway::tools
