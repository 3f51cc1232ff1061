#include "causeway/sim/tenancy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client.h"
#include "causeway/ir/builder.h"
#include "causeway/scheduler/island_scheduler.h"

namespace causeway::sim {
namespace {

// Per client, the device time accounted in each window of `width_ns`.
struct Windows {
  int64_t width_ns;
  std::map<int64_t, std::vector<double>> by_window;
};

double MaxError(const Windows& w, const std::vector<double>& target, int64_t from_ns,
                int64_t to_ns) {
  double worst = 0;
  for (const auto& [index, device] : w.by_window) {
    // Whole windows inside the measured interval only.
    if (index * w.width_ns < from_ns || (index + 1) * w.width_ns > to_ns) continue;
    double total = 0;
    for (double d : device) total += d;
    if (total <= 0) continue;
    for (size_t c = 0; c < target.size(); ++c) {
      worst = std::max(worst, std::abs(device[c] / total - target[c]));
    }
  }
  return worst;
}

}  // namespace

absl::StatusOr<SimTenancyResult> SimulateTenancy(const SimTenancyOptions& o) {
  if (o.weights.empty()) return absl::InvalidArgumentError("at least one client");
  if (o.compute_us < 1 || o.seconds <= 0 || o.warmup_seconds < 0 || o.outstanding < 1) {
    return absl::InvalidArgumentError(
        "the computation time, the seconds and the outstanding runs must be positive");
  }
  const auto wall_start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(o.weights.size());
  const int devices = o.cluster.hosts_per_island * o.cluster.devices_per_host;
  // Accounting, by client index, in windows of 10 ms, 100 ms and 1 s.
  std::vector<Windows> windows = {{10'000'000, {}}, {100'000'000, {}}, {1'000'000'000, {}}};
  std::map<ClientId, int> index;
  std::vector<double> total(n, 0);
  int64_t measured_runs = 0;
  const int64_t from_ns = static_cast<int64_t>(o.warmup_seconds * 1e9);
  const int64_t to_ns = from_ns + static_cast<int64_t>(o.seconds * 1e9);
  SimCluster* cluster = nullptr;
  // Completion of a run is what lets its client submit the next: the
  // scheduler's accounting, told when every host reported it.
  std::vector<std::function<void()>> next(n);
  SimClusterOptions co = o.cluster;
  co.on_run_accounted = [&](ClientId client, int64_t device_us, int) {
    auto it = index.find(client);
    if (it == index.end()) return;
    const int64_t now = cluster->loop().now();
    if (now >= from_ns && now < to_ns) {
      total[it->second] += static_cast<double>(device_us);
      ++measured_runs;
    }
    for (Windows& w : windows) {
      std::vector<double>& slot = w.by_window[now / w.width_ns];
      slot.resize(n, 0);
      slot[it->second] += static_cast<double>(device_us);
    }
    if (now < to_ns && next[it->second]) next[it->second]();
  };
  CW_ASSIGN_OR_RETURN(std::unique_ptr<SimCluster> owned, SimCluster::Create(co));
  cluster = owned.get();

  ir::FunctionBuilder b("tenant_step");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {1}));
  ir::Value y = b.AllReduce(b.Delay(x, o.compute_us), {"x"});
  CW_ASSIGN_OR_RETURN(ir::Function step, b.Build({y}));

  struct Tenant {
    std::unique_ptr<Client> client;
    CompiledFunction f;
    Array input;
    int slot = 0;
  };
  std::vector<Tenant> tenants(n);
  double weight_sum = 0;
  for (double w : o.weights) weight_sum += w;
  SimTenancyResult r;
  for (int i = 0; i < n; ++i) {
    Tenant& t = tenants[i];
    t.slot = i == 0 ? 0 : cluster->AddClient();
    ClientOptions opts;
    opts.share.weight = o.weights[i];
    const int slot = t.slot;
    opts.send_executor = [cluster, slot](std::function<void()> send) {
      cluster->PostClientSend(std::move(send), slot);
    };
    CW_ASSIGN_OR_RETURN(t.client, Client::Connect(cluster, opts));
    cluster->BindClient(t.client->id(), t.slot);
    index[t.client->id()] = i;
    CW_ASSIGN_OR_RETURN(Mesh mesh, t.client->AllocateMesh({{"x", devices}}));
    CW_ASSIGN_OR_RETURN(t.f, t.client->Compile(step, mesh, {}));
    CW_ASSIGN_OR_RETURN(t.input, t.client->Put(ir::Literal::F32({1}, {0.0f}), mesh,
                                               Sharding::Replicated(1)));
    r.target.push_back(o.weights[i] / weight_sum);
  }
  absl::Status failure;
  for (int i = 0; i < n; ++i) {
    Tenant* t = &tenants[i];
    // Each call's output is dropped at once (released behind the run).
    auto issue = [t, &failure] {
      absl::StatusOr<std::vector<Array>> out = t->client->Call(t->f, {t->input});
      if (!out.ok() && failure.ok()) failure = out.status();
    };
    next[i] = [cluster, t, issue] { cluster->ClientCall(issue, t->slot); };
    for (int k = 0; k < o.outstanding; ++k) next[i]();
  }
  cluster->loop().RunFor(to_ns);
  // No more submissions; what is in flight finishes before the clients go.
  for (auto& f : next) f = nullptr;
  cluster->loop().RunFor(std::numeric_limits<int64_t>::max());
  CW_RETURN_IF_ERROR(failure);

  double all = 0;
  for (double d : total) all += d;
  for (int i = 0; i < n; ++i) r.achieved.push_back(all > 0 ? total[i] / all : 0);
  r.max_error_10ms = MaxError(windows[0], r.target, from_ns, to_ns);
  r.max_error_100ms = MaxError(windows[1], r.target, from_ns, to_ns);
  r.max_error_1s = MaxError(windows[2], r.target, from_ns, to_ns);
  r.runs = measured_runs;
  r.compute_fraction = static_cast<double>(measured_runs) * static_cast<double>(o.compute_us) /
                       (o.seconds * 1e6);
  const DecisionStats d = cluster->decision_stats(IslandId(0));
  r.decision_ns_per_run = d.decisions > 0 ? static_cast<double>(d.nanos) / d.decisions : 0;
  for (Tenant& t : tenants) {
    t.input = Array();
    t.f = CompiledFunction();
    t.client->Disconnect();
  }
  tenants.clear();
  owned.reset();
  r.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return r;
}

}  // namespace causeway::sim
