#include "tools/demo.h"

#include "tools/commands.h"
#include "tools/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "causeway/transport/inproc/inproc_transport.h"
#include "causeway/client/client.h"
#include "causeway/cluster/counters.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/ir/builder.h"
#include "nlohmann/json.hpp"

namespace causeway::tools {
namespace {

using ir::DType;
using ir::Shape;

std::vector<float> RandomValues(int64_t n, uint64_t seed, float scale) {
  std::vector<float> out(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& v : out) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v = scale * (static_cast<float>((s >> 40) & 0xFFFFFF) / float(1 << 23) - 1.0f);
  }
  return out;
}

// Stage 1 (per shard): h = x @ w1; colsum = all_reduce(sum over rows of h).
absl::StatusOr<ir::Function> Stage1(int64_t rows, int64_t features, int64_t hidden) {
  ir::FunctionBuilder b("stage1_matmul_allreduce");
  ir::Value x = b.Parameter(Shape(DType::kF32, {rows, features}));
  ir::Value w1 = b.Parameter(Shape(DType::kF32, {features, hidden}));
  ir::Value h = b.Matmul(x, w1);
  ir::Value colsum = b.AllReduce(b.ReduceSum(h, {0}), {"data"});
  return b.Build({h, colsum});
}

// Stage 2 (per shard): centre h by the global column mean, square, project;
// total = all_reduce(sum of y).
absl::StatusOr<ir::Function> Stage2(int64_t rows, int64_t hidden, int64_t outputs,
                                    int64_t batch) {
  ir::FunctionBuilder b("stage2_center_project");
  ir::Value h = b.Parameter(Shape(DType::kF32, {rows, hidden}));
  ir::Value colsum = b.Parameter(Shape(DType::kF32, {hidden}));
  ir::Value w2 = b.Parameter(Shape(DType::kF32, {hidden, outputs}));
  ir::Value inv = b.Broadcast(b.ConstantF32(1.0f / static_cast<float>(batch)), {hidden}, {});
  ir::Value mean = b.Broadcast(b.Mul(colsum, inv), {rows, hidden}, {1});
  ir::Value c = b.Sub(h, mean);
  ir::Value y = b.Matmul(b.Mul(c, c), w2);
  ir::Value total = b.AllReduce(b.ReduceSum(y, {0, 1}), {"data"});
  return b.Build({y, total});
}

struct Reference {
  std::vector<double> y;
  double total = 0;
};

Reference HostReference(const std::vector<float>& x, const std::vector<float>& w1,
                        const std::vector<float>& w2, int64_t batch, int64_t features,
                        int64_t hidden, int64_t outputs) {
  std::vector<double> h(static_cast<size_t>(batch * hidden), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t k = 0; k < features; ++k)
      for (int64_t j = 0; j < hidden; ++j)
        h[i * hidden + j] += double(x[i * features + k]) * w1[k * hidden + j];
  std::vector<double> mean(static_cast<size_t>(hidden), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < hidden; ++j) mean[j] += h[i * hidden + j];
  for (auto& m : mean) m /= double(batch);
  Reference r;
  r.y.assign(static_cast<size_t>(batch * outputs), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < hidden; ++j) {
      const double c = h[i * hidden + j] - mean[j];
      for (int64_t o = 0; o < outputs; ++o) r.y[i * outputs + o] += c * c * w2[j * outputs + o];
    }
  for (double v : r.y) r.total += v;
  return r;
}

std::string Placement(const Mesh& mesh, const Topology& topology) {
  std::set<int64_t> hosts;
  std::vector<std::string> devices;
  for (DeviceId d : mesh.devices()) {
    hosts.insert(topology.device(d)->host.value());
    devices.push_back(absl::StrCat(d.value()));
  }
  return absl::StrCat(mesh.ToString(), ", devices [", absl::StrJoin(devices, ","), "], hosts [",
                      absl::StrJoin(hosts, ","), "]");
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "causeway demo: %s\n", status.ToString().c_str());
  return kExitRuntime;
}

// The command line asks for something that cannot be.
int Usage(const std::string& message) {
  std::fprintf(stderr, "causeway demo: %s\n", message.c_str());
  return kExitUsage;
}

}  // namespace

int RunDemo(const DemoOptions& options) {
  using Clock = std::chrono::steady_clock;
  LocalClusterOptions co;
  co.islands = options.islands;
  co.hosts_per_island = options.hosts_per_island;
  co.devices_per_host = options.devices_per_host;
  co.device_memory_bytes = options.memory_bytes;
  co.device_kind = options.device_kind;
  co.dcn.latency = absl::Microseconds(options.dcn_latency_us);
  co.dcn.bytes_per_second = options.dcn_gbps * 1e9 / 8;
  co.trace = !options.trace_path.empty();
  // Per-device counters come from the embedded cluster directly, or from a
  // distributed cluster's workers (HostService::GetCounters).
  std::unique_ptr<LocalCluster> cluster;
  std::unique_ptr<RemoteCluster> remote;
  ClusterConnection* connection;
  int islands = options.islands;
  int64_t per_island = int64_t{options.hosts_per_island} * options.devices_per_host;
  if (options.cluster == "local") {
    auto cluster_or = LocalCluster::Create(co);
    if (!cluster_or.ok()) return Fail(cluster_or.status());
    cluster = std::move(*cluster_or);
    connection = cluster.get();
  } else {
    RemoteClusterOptions ro;
    ro.address = options.cluster;
    ro.timeout = absl::Seconds(options.timeout_s);
    auto remote_or = RemoteCluster::Connect(ro);
    if (!remote_or.ok()) return Fail(remote_or.status());
    remote = std::move(*remote_or);
    connection = remote.get();
    // Each stage uses every device of its island (the smallest island's
    // count, so that both meshes have the same shape).
    const Topology t = connection->resources()->GetTopology();
    islands = static_cast<int>(t.islands().size());
    if (islands == 0) return Fail(absl::UnavailableError("the cluster has no workers"));
    per_island = INT64_MAX;
    for (IslandId i : t.islands()) {
      per_island = std::min<int64_t>(per_island, t.island(i)->devices.size());
    }
    if (per_island == 0) return Fail(absl::UnavailableError("an island has no devices"));
  }
  ClientOptions client_options;
  client_options.share.weight = options.weight;
  client_options.share.priority = options.priority;
  auto client_or = Client::Connect(connection, client_options);
  if (!client_or.ok()) return Fail(client_or.status());
  std::unique_ptr<Client> client = std::move(*client_or);

  const int64_t rows = options.rows_per_device;
  const int64_t batch = rows * per_island;
  const int64_t F = options.features, H = options.hidden, O = options.outputs;

  auto mesh0 = client->AllocateMesh({{"data", per_island}},
                                    connection->resources()->GetTopology().islands()[0]);
  if (!mesh0.ok()) return Fail(mesh0.status());
  const Topology initial = connection->resources()->GetTopology();
  auto mesh1 = client->AllocateMesh({{"data", per_island}},
                                    islands > 1 ? initial.islands()[1] : initial.islands()[0]);
  if (!mesh1.ok()) return Fail(mesh1.status());

  auto f1 = Stage1(rows, F, H);
  auto f2 = Stage2(rows, H, O, batch);
  if (!f1.ok()) return Fail(f1.status());
  if (!f2.ok()) return Fail(f2.status());
  const Sharding by_rows({{"data"}, {}});
  const Sharding replicated2 = Sharding::Replicated(2);
  const Sharding replicated1 = Sharding::Replicated(1);
  auto c1 = client->Compile(*f1, *mesh0, {{by_rows, replicated2}, {by_rows, replicated1}});
  if (!c1.ok()) return Fail(c1.status());
  auto c2 = client->Compile(*f2, *mesh1,
                            {{by_rows, replicated1, replicated2},
                             {by_rows, Sharding::Replicated(0)}});
  if (!c2.ok()) return Fail(c2.status());

  ProgramBuilder pb = client->NewProgram("demo");
  auto px = pb.Parameter(Shape(DType::kF32, {batch, F}), *mesh0, by_rows);
  auto pw1 = pb.Parameter(Shape(DType::kF32, {F, H}), *mesh0, replicated2);
  auto pw2 = pb.Parameter(Shape(DType::kF32, {H, O}), *mesh1, replicated2);
  if (!px.ok() || !pw1.ok() || !pw2.ok()) return Fail(absl::InternalError("bad parameters"));
  auto s1 = pb.Call(*c1, {*px, *pw1});
  if (!s1.ok()) return Fail(s1.status());
  auto s2 = pb.Call(*c2, {(*s1)[0], (*s1)[1], *pw2});
  if (!s2.ok()) return Fail(s2.status());
  auto program = pb.Build({(*s2)[0], (*s2)[1]});
  if (!program.ok()) return Fail(program.status());

  // The inputs are made, and the result checked, on this host: refuse sizes
  // its memory cannot hold rather than die allocating them.
  const double host_bytes = 4.0 * (double(batch) * F * 2 + double(F) * H + double(H) * O +
                                   double(batch) * H + double(batch) * O);
  // Each array is held about four times at once: the host's values, the
  // put's literal, its shards, and the devices' copies on an embedded
  // cluster.
  if (absl::Status room = CheckHostMemory(
          static_cast<int64_t>(std::min(4 * host_bytes, 9e18)),
          "holding the demo's arrays (lower --rows-per-device, --features, --hidden or "
          "--outputs)");
      !room.ok()) {
    return Fail(room);
  }
  const std::vector<float> xs = RandomValues(batch * F, 1, 1.0f);
  const std::vector<float> w1s = RandomValues(F * H, 2, 0.1f);
  const std::vector<float> w2s = RandomValues(H * O, 3, 0.1f);
  auto x = client->Put(ir::Literal::F32({batch, F}, xs), *mesh0, by_rows);
  auto w1 = client->Put(ir::Literal::F32({F, H}, w1s), *mesh0, replicated2);
  auto w2 = client->Put(ir::Literal::F32({H, O}, w2s), *mesh1, replicated2);
  if (!x.ok()) return Fail(x.status());
  if (!w1.ok()) return Fail(w1.status());
  if (!w2.ok()) return Fail(w2.status());

  // Warm-up run, then `steps` runs dispatched back to back.
  auto warm = program->Run({*x, *w1, *w2});
  if (!warm.ok()) return Fail(warm.status());
  if (auto r = (*warm)[1].Ready().Await(); !r.ok()) return Fail(r.status());
  if (cluster != nullptr) {
    cluster->ResetStats();
    cluster->trace().Clear();
  } else if (auto reset = ClusterCounters(*connection, /*reset=*/true); !reset.ok()) {
    return Fail(reset.status());
  } else if (!options.trace_path.empty()) {
    if (absl::Status s = remote->StartTrace(); !s.ok()) return Fail(s);
  }

  const auto start = Clock::now();
  std::vector<std::vector<Array>> outs;
  for (int s = 0; s < options.steps; ++s) {
    auto r = program->Run({*x, *w1, *w2});
    if (!r.ok()) return Fail(r.status());
    outs.push_back(std::move(*r));
  }
  const auto dispatched = Clock::now();
  for (auto& o : outs) {
    if (auto r = o[1].Ready().Await(); !r.ok()) return Fail(r.status());
  }
  const auto end = Clock::now();
  const double seconds = std::chrono::duration<double>(end - start).count();
  const double dispatch_us =
      std::chrono::duration<double, std::micro>(dispatched - start).count() / options.steps;

  // Check the last step against the host.
  auto y = outs.back()[0].Fetch().Await();
  auto total = outs.back()[1].Fetch().Await();
  if (!y.ok()) return Fail(y.status());
  if (!total.ok()) return Fail(total.status());
  const Reference ref = HostReference(xs, w1s, w2s, batch, F, H, O);
  double max_err = 0;
  const auto yv = y->values<float>();
  for (size_t i = 0; i < ref.y.size(); ++i) {
    max_err = std::max(max_err, std::abs(yv[i] - ref.y[i]) / (1.0 + std::abs(ref.y[i])));
  }
  const double total_err =
      std::abs(total->values<float>()[0] - ref.total) / (1.0 + std::abs(ref.total));
  const bool ok = max_err < 1e-3 && total_err < 1e-3;

  const Topology topology = connection->resources()->GetTopology();
  // Every host reports its devices' counters, embedded or distributed.
  auto counters = ClusterCounters(*connection, /*reset=*/false);
  if (!counters.ok()) return Fail(counters.status());
  const std::vector<DeviceCounters>& report = *counters;
  auto info_of = [&](const DeviceCounters& c) {
    absl::StatusOr<DeviceInfo> info = topology.device(c.device);
    return info.ok() ? *info : DeviceInfo{};
  };
  const int64_t wall_us = static_cast<int64_t>(seconds * 1e6);
  nlohmann::json devices = nlohmann::json::array();
  double util_sum = 0;
  double compute_sum = 0;
  for (const DeviceCounters& r : report) {
    const DeviceInfo d = info_of(r);
    const double util = wall_us > 0 ? double(r.busy_us) / wall_us : 0;
    // The device's own work: busy time outside collectives.
    const double compute = wall_us > 0 ? double(r.compute_us()) / wall_us : 0;
    util_sum += util;
    compute_sum += compute;
    devices.push_back({{"device", r.device.value()},
                       {"host", d.host.value()},
                       {"island", d.island.value()},
                       {"kind", d.kind},
                       {"launches", r.launches},
                       {"busy_us", r.busy_us},
                       {"compute_fraction", compute},
                       {"busy_fraction_including_collective_waits", util},
                       {"memory_peak_bytes", r.memory_peak}});
  }
  if (!options.trace_path.empty()) {
    // A distributed cluster's events come from every worker and the
    // coordinator, collected through it (docs/DEPLOYMENT.md, "Traces").
    if (remote != nullptr) {
      if (absl::Status s = remote->CollectTrace(); !s.ok()) return Fail(s);
    }
    TraceRecorder& trace = remote != nullptr ? remote->trace() : cluster->trace();
    if (absl::Status s = trace.WriteChromeJson(options.trace_path); !s.ok()) return Fail(s);
  }
  if (options.json) {
    nlohmann::json j;
    j["ok"] = ok;
    j["cluster"] = options.cluster;
    j["islands"] = islands;
    j["devices_per_island"] = per_island;
    j["batch"] = batch;
    j["program_nodes"] = program->num_nodes();
    j["stage1_mesh"] = Placement(*mesh0, topology);
    j["stage2_mesh"] = Placement(*mesh1, topology);
    j["steps"] = options.steps;
    j["seconds"] = seconds;
    j["steps_per_second"] = options.steps / seconds;
    j["dispatch_us_per_step"] = dispatch_us;
    j["max_relative_error"] = std::max(max_err, total_err);
    if (cluster != nullptr) j["dcn_bytes"] = cluster->transport().bytes_sent_between_islands();
    // Busy time is what the devices spent in launches, time parked in
    // collectives waiting for peers included: an upper bound on device work.
    j["mean_busy_fraction_including_collective_waits"] =
        util_sum / std::max<size_t>(1, report.size());
    // Busy time outside collectives / wall time: the devices' own work.
    j["mean_compute_fraction"] = compute_sum / std::max<size_t>(1, report.size());
    j["devices"] = devices;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("Causeway demo on %s: %d island(s) x %lld device(s)\n",
                options.cluster == "local" ? "the embedded cluster" : options.cluster.c_str(),
                islands, static_cast<long long>(per_island));
    std::printf("program 'demo': %d nodes after lowering (calls + inserted transfers)\n",
                program->num_nodes());
    std::printf("  stage1_matmul_allreduce  x[%lld,%lld] @ w1[%lld,%lld], all-reduce over data\n"
                "    on %s\n",
                (long long)batch, (long long)F, (long long)F, (long long)H,
                Placement(*mesh0, topology).c_str());
    std::printf("  stage2_center_project    (h - mean)^2 @ w2[%lld,%lld], all-reduce over data\n"
                "    on %s\n",
                (long long)H, (long long)O, Placement(*mesh1, topology).c_str());
    std::printf("%d steps in %.3f s: %.1f steps/s; client dispatch %.1f us/step\n",
                options.steps, seconds, options.steps / seconds, dispatch_us);
    if (cluster != nullptr) {
      std::printf("%lld bytes crossed islands\n",
                  (long long)cluster->transport().bytes_sent_between_islands());
    }
    std::printf("%-8s %-6s %-7s %-9s %-10s %-14s %s\n", "device", "host", "island",
                "launches", "busy_ms", "compute (own)", "busy (incl. collective waits)");
    for (const DeviceCounters& r : report) {
      const DeviceInfo d = info_of(r);
      const int64_t own = r.compute_us();
      std::printf("%-8lld %-6lld %-7lld %-9lld %-10.2f %-14s %.1f%%\n",
                  (long long)r.device.value(), (long long)d.host.value(),
                  (long long)d.island.value(), (long long)r.launches, r.busy_us / 1000.0,
                  absl::StrFormat("%.1f%%", wall_us > 0 ? 100.0 * own / wall_us : 0.0).c_str(),
                  wall_us > 0 ? 100.0 * r.busy_us / wall_us : 0.0);
    }
    std::printf("check against host computation: max relative error %.2e -> %s\n",
                std::max(max_err, total_err), ok ? "OK" : "MISMATCH");
    if (!options.trace_path.empty()) {
      std::printf("trace written to %s (open in Perfetto)\n", options.trace_path.c_str());
    }
  }
  client.reset();
  if (cluster != nullptr) cluster->Shutdown();
  return ok ? 0 : 1;
}

void AddDemoCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<DemoOptions>();
  DemoOptions& demo = *options;
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run a two-stage program spanning islands on the embedded cluster, check it against a "
      "host computation, and report placement, timings and device busy time");
  cmd->add_option("--islands", demo.islands, "Islands")->check(CLI::Range(1, 64));
  cmd->add_option("--hosts-per-island", demo.hosts_per_island, "Hosts per island")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--devices-per-host", demo.devices_per_host, "Devices per host")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--device-kind", demo.device_kind,
                  DeviceKindHelp("Embedded cluster: the kind of its devices"))
      ->capture_default_str();
  cmd->add_option("--memory", demo.memory_bytes, "Memory per device, bytes")
      ->check(CLI::PositiveNumber)->check(Finite());
  cmd->add_option("--rows-per-device", demo.rows_per_device, "Batch rows per device")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--features", demo.features, "Input features")->check(CLI::Range(1, 1 << 14));
  cmd->add_option("--hidden", demo.hidden, "Hidden units")->check(CLI::Range(1, 1 << 14));
  cmd->add_option("--outputs", demo.outputs, "Output units")->check(CLI::Range(1, 1 << 14));
  cmd->add_option("--steps", demo.steps, "Runs of the program")->check(CLI::Range(1, 100000));
  cmd->add_option("--dcn-latency-us", demo.dcn_latency_us,
                  "Emulated latency between islands, microseconds")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  cmd->add_option("--dcn-gbps", demo.dcn_gbps,
                  "Emulated bandwidth between islands, Gbit/s (0: unlimited)")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  cmd->add_option("--trace", demo.trace_path,
                  "Write a Chrome trace (Perfetto) of the timed runs to FILE (with --cluster: "
                  "collected from every worker and the coordinator)");
  cmd->add_flag("--json", demo.json, "Print one JSON object instead of text");
  cmd->add_option("--cluster", demo.cluster,
                  "local (the embedded cluster) or grpc://HOST:PORT of a running cluster "
                  "(token from $CAUSEWAY_TOKEN; islands and devices come from its topology)")
      ->check(ClusterAddress(true));
  cmd->add_option("--timeout", demo.timeout_s,
                  "Seconds to wait for a running cluster (connecting, and every call)")
      ->check(CLI::PositiveNumber)->check(Finite());
  cmd->add_option("--weight", demo.weight,
                  "This client's share of each island's device time against other clients "
                  "(docs/SCHEDULING.md)")
      ->check(CLI::Range(0.0, 1e6))
      ->check(AboveZero())
      ->check(Finite());
  cmd->add_option("--priority", demo.priority, "Priority class, 0 to 7 (higher goes first)")
      ->check(CLI::Range(0, 7));
  cmd->callback([options, cmd, exit_code] {
    // The embedded cluster's shape does not apply to a running cluster:
    // refused rather than silently ignored; given it, the default is local.
    const auto embedded_only = {"--islands", "--hosts-per-island", "--devices-per-host",
                                "--memory",  "--dcn-latency-us",   "--dcn-gbps"};
    bool embedded_shape = false;
    for (const char* flag : embedded_only) embedded_shape |= cmd->count(flag) > 0;
    if (cmd->count("--cluster") == 0 && !embedded_shape) {
      options->cluster = DefaultCluster("demo", "local");
    }
    if (options->cluster != "local") {
      for (const char* flag : embedded_only) {
        if (cmd->count(flag) > 0) {
          *exit_code = Usage(absl::StrCat(flag, " applies to the embedded cluster only; with "
                                          "--cluster the running cluster decides"));
          return;
        }
      }
    }
    *exit_code = RunDemo(*options);
  });
}

}  // namespace causeway::tools
