// `causeway sim dispatch` and `causeway sim calibrate`: the dispatch
// experiment on the simulator (docs/SIM.md), and the measurements of this
// machine the simulator's costs come from.
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/builder.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/process_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/sim/dispatch.h"
#include "causeway/sim/pipeline.h"
#include "causeway/sim/tenancy.h"
#include "causeway/worker/collective_hub.h"
#include "nlohmann/json.hpp"
#include "tools/bench_harness.h"
#include "tools/commands.h"

namespace causeway::tools {
namespace {

using nlohmann::json;

const std::map<std::string, DispatchGranularity> kModes = {
    {"opbyop", DispatchGranularity::kOpByOp},
    {"chained", DispatchGranularity::kChained},
    {"fused", DispatchGranularity::kFused}};

json CostsToJson(const sim::SimCosts& c) {
  const sim::HostCosts& h = c.host;
  return {{"host",
           {{"client_run_us", h.client_run_us},
            {"client_send_us", h.client_send_us},
            {"scheduler_run_us", h.scheduler_run_us},
            {"scheduler_report_us", h.scheduler_report_us},
            {"host_run_us", h.host_run_us},
            {"host_launch_us", h.host_launch_us},
            {"device_launch_us", h.device_launch_us},
            {"collective_member_us", h.collective_member_us},
            {"collective_member_slope_us", h.collective_member_slope_us},
            {"collective_after_us", h.collective_after_us},
            {"handoff_us", h.handoff_us},
            {"message_us", h.message_us},
            {"transfer_us", h.transfer_us},
            {"collective_member_points", h.collective_member_points},
            {"collective_member_after_delay_points", h.collective_member_after_delay_points}}},
          {"ici", {{"latency_us", c.ici.latency_us}, {"gbytes_per_s", c.ici.gbytes_per_s}}},
          {"dcn", {{"latency_us", c.dcn.latency_us}, {"gbytes_per_s", c.dcn.gbytes_per_s}}},
          {"device",
           {{"gflops", c.device.gflops},
            {"gbytes_per_s", c.device.gbytes_per_s},
            {"delay_overshoot_us", c.device.delay_overshoot_us}}}};
}

// Reads what CostsToJson writes; a missing field keeps `c`'s value, a field
// that is not a finite number >= 0 is refused.
absl::Status CostsFromJson(const json& j, sim::SimCosts* c) {
  auto read = [&](const char* group, const char* name, double* out) -> absl::Status {
    if (!j.contains(group) || !j[group].is_object() || !j[group].contains(name)) {
      return absl::OkStatus();
    }
    const json& v = j[group][name];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(group, ".", name, " must be a finite number >= 0"));
    }
    *out = v.get<double>();
    return absl::OkStatus();
  };
  sim::HostCosts& h = c->host;
  for (auto [name, field] : std::initializer_list<std::pair<const char*, double*>>{
           {"client_run_us", &h.client_run_us},
           {"client_send_us", &h.client_send_us},
           {"scheduler_run_us", &h.scheduler_run_us},
           {"scheduler_report_us", &h.scheduler_report_us},
           {"host_run_us", &h.host_run_us},
           {"host_launch_us", &h.host_launch_us},
           {"device_launch_us", &h.device_launch_us},
           {"collective_member_us", &h.collective_member_us},
           {"collective_member_slope_us", &h.collective_member_slope_us},
           {"collective_after_us", &h.collective_after_us},
           {"handoff_us", &h.handoff_us},
           {"message_us", &h.message_us},
           {"transfer_us", &h.transfer_us}}) {
    CW_RETURN_IF_ERROR(read("host", name, field));
  }
  // Points: [[device threads per core, us], ...], the first ascending.
  auto read_points = [&](const char* name,
                         std::vector<std::pair<double, double>>* out) -> absl::Status {
    if (!j.contains("host") || !j["host"].is_object() || !j["host"].contains(name)) {
      return absl::OkStatus();
    }
    const json& v = j["host"][name];
    const std::string what = absl::StrCat("host.", name);
    constexpr size_t kMaxPoints = 64;
    if (!v.is_array() || v.size() > kMaxPoints) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must be an array of at most ", kMaxPoints, " points"));
    }
    std::vector<std::pair<double, double>> points;
    for (const json& p : v) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": each point must be [threads per core, us]"));
      }
      const double x = p[0].get<double>();
      const double y = p[1].get<double>();
      if (!std::isfinite(x) || !std::isfinite(y) || x < 0 || y < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": a point's values must be finite numbers >= 0"));
      }
      if (!points.empty() && x <= points.back().first) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": points must be in ascending order of threads per core"));
      }
      points.emplace_back(x, y);
    }
    *out = std::move(points);
    return absl::OkStatus();
  };
  CW_RETURN_IF_ERROR(read_points("collective_member_points", &h.collective_member_points));
  CW_RETURN_IF_ERROR(read_points("collective_member_after_delay_points",
                                 &h.collective_member_after_delay_points));
  CW_RETURN_IF_ERROR(read("ici", "latency_us", &c->ici.latency_us));
  CW_RETURN_IF_ERROR(read("ici", "gbytes_per_s", &c->ici.gbytes_per_s));
  CW_RETURN_IF_ERROR(read("dcn", "latency_us", &c->dcn.latency_us));
  CW_RETURN_IF_ERROR(read("dcn", "gbytes_per_s", &c->dcn.gbytes_per_s));
  CW_RETURN_IF_ERROR(read("device", "gflops", &c->device.gflops));
  CW_RETURN_IF_ERROR(read("device", "gbytes_per_s", &c->device.gbytes_per_s));
  CW_RETURN_IF_ERROR(read("device", "delay_overshoot_us", &c->device.delay_overshoot_us));
  if (c->ici.gbytes_per_s <= 0 || c->dcn.gbytes_per_s <= 0 || c->device.gflops <= 0 ||
      c->device.gbytes_per_s <= 0) {
    return absl::InvalidArgumentError("bandwidths and rates must be > 0");
  }
  return absl::OkStatus();
}

// Prints `causeway sim COMMAND: message` and returns `code`.
int SimFail(const char* command, const absl::Status& status, int code) {
  std::fprintf(stderr, "causeway sim %s: %s\n", command, std::string(status.message()).c_str());
  return code;
}

// Costs from a file `causeway sim calibrate --json` wrote (its "costs"
// object, or the object itself); an empty path keeps `costs`.
absl::Status LoadCosts(const std::string& path, sim::SimCosts* costs) {
  if (path.empty()) return absl::OkStatus();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  return Annotate(CostsFromJson(j.contains("costs") ? j["costs"] : j, costs), path);
}

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& text, const char* flag,
                                               int64_t min, int64_t max) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v < min || v > max) {
      return absl::InvalidArgumentError(absl::StrCat("bad ", flag, " entry '", part,
                                                     "' (integers from ", min, " to ", max, ")"));
    }
    out.push_back(v);
  }
  return out;
}

struct SimDispatchFlags {
  std::string hosts = "1,2,4,8";
  int devices_per_host = 4;
  std::string mode = "opbyop,chained,fused";
  std::string controller = "both";
  std::string compute_us = "0";
  int chain = 16;
  int64_t units = 16;
  int64_t warmup = 2;
  bool one_machine = false;
  int cores = 8;
  int coordinator_cores = 32;
  double target = 0.95;
  std::string calibration;
  double dcn_latency_us = -1;
  double ici_latency_us = -1;
  bool profile_cpu = false;
  std::string cpu = "calibrated";
  std::string report_fanout = "0";
  bool json = false;
};

int RunSimDispatch(const SimDispatchFlags& f) {
  auto fail = [](const absl::Status& s, int code) { return SimFail("dispatch", s, code); };
  absl::StatusOr<std::vector<int64_t>> hosts = ParseList(f.hosts, "--hosts", 1, 4096);
  if (!hosts.ok()) return fail(hosts.status(), kExitUsage);
  absl::StatusOr<std::vector<int64_t>> lengths =
      ParseList(f.compute_us, "--compute-us", 0, 10'000'000);
  if (!lengths.ok()) return fail(lengths.status(), kExitUsage);
  std::vector<std::string> modes;
  for (absl::string_view m : absl::StrSplit(f.mode, ',')) {
    if (!kModes.contains(std::string(m))) {
      return fail(absl::InvalidArgumentError(
                      absl::StrCat("bad --mode entry '", m, "' (opbyop, chained, fused)")),
                  kExitUsage);
    }
    modes.emplace_back(m);
  }
  absl::StatusOr<std::vector<int64_t>> fanouts =
      ParseList(f.report_fanout, "--report-fanout", 0, limits::kMaxReportFanout);
  if (!fanouts.ok()) return fail(fanouts.status(), kExitUsage);
  std::vector<Controller> controllers;
  if (f.controller != "multi") controllers.push_back(Controller::kSingle);
  if (f.controller != "single") controllers.push_back(Controller::kMulti);
  sim::SimCosts costs = sim::CalibratedCosts();
  if (absl::Status s = LoadCosts(f.calibration, &costs); !s.ok()) return fail(s, kExitUsage);
  if (f.dcn_latency_us >= 0) costs.dcn.latency_us = f.dcn_latency_us;
  if (f.ici_latency_us >= 0) costs.ici.latency_us = f.ici_latency_us;

  // Fig. 6: per hosts and mode, the smallest computation at which the
  // single controller reaches `target` of the multi-controller's throughput.
  // Keyed by (report fanout, hosts, mode).
  std::map<std::tuple<int64_t, int64_t, std::string>, std::map<int64_t, std::pair<double, double>>>
      pairs;
  for (int64_t fanout : *fanouts) {
    for (int64_t h : *hosts) {
      for (const std::string& mode : modes) {
        for (int64_t us : *lengths) {
          for (Controller controller : controllers) {
            sim::SimDispatchOptions o;
            o.cluster.report_fanout = static_cast<int>(fanout);
            o.program.mode = kModes.at(mode);
            o.program.devices = static_cast<int>(h) * f.devices_per_host;
            o.program.chain = f.chain;
            o.program.compute_us = us;
            o.controller = controller;
            o.cluster.hosts_per_island = static_cast<int>(h);
            o.cluster.devices_per_host = f.devices_per_host;
            o.cluster.one_machine = f.one_machine;
            o.cluster.cores = f.cores;
            o.cluster.coordinator_cores = f.coordinator_cores;
            o.cluster.costs = costs;
            o.cluster.profile_cpu = f.profile_cpu;
            o.cluster.cpu =
                f.cpu == "measured" ? sim::CpuCosts::kMeasured : sim::CpuCosts::kCalibrated;
            o.units = f.units;
            o.warmup = f.warmup;
            absl::StatusOr<sim::SimDispatchResult> r = sim::SimulateDispatch(o);
            if (!r.ok()) return fail(r.status(), kExitRuntime);
            auto busy = [&r](int64_t ns) {
              return r->counters_seconds > 0 ? ns / (1e9 * r->counters_seconds) : 0.0;
            };
            auto& pair = pairs[{fanout, h, mode}][us];
            (controller == Controller::kSingle ? pair.first : pair.second) =
                r->computations_per_second;
            json row = {{"sim", "dispatch"},
                              {"mode", mode},
                              {"controller", Name(controller)},
                              {"cpu", f.cpu},
                              {"coordinator_cores", f.coordinator_cores},
                              {"hosts", h},
                              {"report_fanout", fanout},
                              {"devices", r->devices},
                              {"compute_us", us},
                              {"chain",
                               o.program.mode == DispatchGranularity::kOpByOp ? 1 : f.chain},
                              {"computations", r->computations},
                              {"virtual_seconds", r->seconds},
                              {"computations_per_second", r->computations_per_second},
                              {"compute_fraction", r->compute_fraction},
                              {"messages", r->counters.messages},
                              // CPU charged over the measured window (from the first
                              // dispatch to the final read of its output), per second.
                              {"busy_fraction",
                               {{"client", busy(r->counters.client_busy_ns)},
                                {"scheduler", busy(r->counters.scheduler_busy_ns)},
                                {"busiest_host", busy(r->counters.host_busy_ns)},
                                {"coordinator_connections_cores",
                                 busy(r->counters.coordinator_connections_busy_ns)},
                                {"busiest_coordinator_connection",
                                 busy(r->counters.coordinator_connection_max_busy_ns)}}},
                              {"events", r->counters.events},
                              {"wall_seconds", r->wall_seconds}};
            if (f.profile_cpu) {
              // The real code's CPU per call, warm-up included.
              const sim::CpuProfile& p = r->profile;
              int64_t host_ns = 0, host_runs = 0, host_launches = 0;
              for (const auto& b : p.host_batches) {
                host_ns += b.ns;
                host_runs += b.runs;
                host_launches += b.launches;
              }
              // Per kind of work: the real code's CPU, and (left out of it,
              // SIM.md "--cpu measured") the simulator's own bookkeeping.
              const std::pair<const char*, const sim::CpuProfile::Kind*> kinds[] = {
                  {"client_call", &p.client_call},
                  {"client_send_batch", &p.client_send},
                  {"scheduler_submit_batch", &p.scheduler},
                  {"scheduler_report", &p.scheduler_report},
                  {"host_child_report", &p.host_report},
                  {"device_launch", &p.device}};
              json real = {
                  {"host_per_run", host_runs > 0 ? host_ns / 1000.0 / host_runs : 0.0},
                  {"host_per_launch", host_launches > 0 ? host_ns / 1000.0 / host_launches : 0.0},
                  {"scheduler_reports_per_run",
                   static_cast<double>(p.scheduler_report.count) / (f.units + f.warmup)},
                  {"child_reports_per_run",
                   static_cast<double>(p.host_report.count) / (f.units + f.warmup)}};
              json bookkeeping = json::object();
              for (const auto& [name, kind] : kinds) {
                real[name] = kind->us_each();
                bookkeeping[name] = kind->bookkeeping_us_each();
              }
              row["real_cpu_us"] = std::move(real);
              row["sim_bookkeeping_us"] = std::move(bookkeeping);
            }
            if (f.json) {
              std::printf("%s\n", row.dump().c_str());
            } else {
              std::printf("%-8s %-6s %5lld hosts %6d devices %7lld us%s: %12.0f computations/s"
                          "  compute fraction %.3f  (%.2f s to simulate)\n",
                          mode.c_str(), Name(controller), static_cast<long long>(h), r->devices,
                          static_cast<long long>(us),
                          fanout > 0 ? absl::StrCat(", report tree of ", fanout).c_str() : "",
                          r->computations_per_second,
                          r->compute_fraction, r->wall_seconds);
            }
            std::fflush(stdout);
          }
        }
      }
    }
  }
  if (controllers.size() == 2) {
    for (const auto& [key, by_length] : pairs) {
      const auto& [fanout, hosts_here, mode] = key;
      json smallest = nullptr;
      json ratios = json::array();
      for (const auto& [us, p] : by_length) {
        const double ratio = p.second > 0 ? p.first / p.second : 0;
        ratios.push_back({{"compute_us", us}, {"single_over_multi", ratio}});
        if (smallest.is_null() && ratio >= f.target) smallest = us;
      }
      const json row = {{"sim", "dispatch_parity"},
                        {"hosts", hosts_here},
                        {"devices", hosts_here * f.devices_per_host},
                        {"mode", mode},
                        {"report_fanout", fanout},
                        {"target", f.target},
                        {"smallest_compute_us_at_target", smallest},
                        {"ratios", ratios}};
      if (f.json) {
        std::printf("%s\n", row.dump().c_str());
      } else {
        std::printf("%-8s %5lld hosts%s: single reaches %.0f%% of multi at %s\n",
                    mode.c_str(), static_cast<long long>(hosts_here),
                    fanout > 0 ? absl::StrCat(", report tree of ", fanout).c_str() : "",
                    100 * f.target,
                    smallest.is_null() ? "none of the sizes tried"
                                       : absl::StrCat(smallest.get<int64_t>(), " us").c_str());
      }
    }
  }
  return 0;
}

// --- Calibration. ---

double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// CPU per member of a scalar all-reduce among `n` threads of the real
// collective hub, in microseconds.
double MeasureCollectiveMemberMicros(int n, int rounds) {
  CollectiveHub hub(absl::Seconds(60));
  std::vector<DeviceId> members;
  for (int i = 0; i < n; ++i) members.push_back(DeviceId(i));
  const ir::Shape shape(ir::DType::kF32, {});
  const double cpu0 = ProcessCpuSeconds();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      for (int i = 0; i < rounds; ++i) {
        float data = 1.0f;
        const absl::Status s =
            hub.AllReduce(CollectiveKey{RunId((int64_t{1} << 40) + i), 0, 0, 0}, DeviceId(rank),
                          rank, members, shape, ir::ReduceKind::kSum, &data, "calibrate");
        if (!s.ok()) return;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return (ProcessCpuSeconds() - cpu0) * 1e6 / (static_cast<double>(n) * rounds);
}

// Least squares of ns = a * runs + b * launches over the hosts' batches.
std::pair<double, double> FitHostCosts(const std::vector<sim::CpuProfile::HostBatch>& batches) {
  double rr = 0, rl = 0, ll = 0, ry = 0, ly = 0;
  for (const auto& b : batches) {
    rr += double{1} * b.runs * b.runs;
    rl += double{1} * b.runs * b.launches;
    ll += double{1} * b.launches * b.launches;
    ry += double{1} * b.runs * b.ns;
    ly += double{1} * b.launches * b.ns;
  }
  const double det = rr * ll - rl * rl;
  if (det <= 0) return {0, 0};
  const double a = (ry * ll - ly * rl) / det;
  const double b = (rr * ly - rl * ry) / det;
  return {std::max(0.0, a) / 1000, std::max(0.0, b) / 1000};
}

// `rounds` runs of the real dispatch benchmark in each configuration of
// `benches`: their computations/s, ascending, per configuration. The real
// runs move by tens of per cent on a shared machine, so callers take the
// median and report the spread, and the runs are taken in rounds of one of
// each configuration: a slow spell of the machine then touches one run of
// many configurations, which their medians leave out, rather than every
// run of a few.
absl::StatusOr<std::vector<std::vector<double>>> RealDispatchRuns(
    const std::vector<DispatchBenchOptions>& benches, int rounds) {
  std::vector<std::vector<double>> runs(benches.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < benches.size(); ++i) {
      CW_ASSIGN_OR_RETURN(DispatchBenchResult r, RunDispatchBench(benches[i]));
      runs[i].push_back(r.computations_per_second);
    }
  }
  for (std::vector<double>& r : runs) std::sort(r.begin(), r.end());
  return runs;
}

// The dispatch benchmark's program on the simulator emulating this
// machine's embedded cluster: every thread on one machine of `cores` cores,
// in-process messages. Callers set the units.
sim::SimDispatchOptions EmbeddedSimulation(DispatchGranularity mode, int devices, int hosts,
                                           int chain, int64_t compute_us, int cores,
                                           const sim::SimCosts& costs) {
  sim::SimDispatchOptions o;
  o.program.mode = mode;
  o.program.devices = devices;
  o.program.chain = chain;
  o.program.compute_us = compute_us;
  o.cluster.hosts_per_island = hosts;
  o.cluster.devices_per_host = devices / hosts;
  o.cluster.one_machine = true;
  o.cluster.cores = cores;
  o.cluster.costs = costs;
  return o;
}

// REQUIRES: `sorted` is ascending and not empty.
double Median(const std::vector<double>& sorted) {
  const size_t k = sorted.size() / 2;
  return sorted.size() % 2 == 1 ? sorted[k] : 0.5 * (sorted[k - 1] + sorted[k]);
}

// The least-squares line through the points: its slope, and the points'
// mean, which it passes through. REQUIRES: at least two distinct xs.
struct Line {
  double slope = 0;
  double mean_x = 0;
  double mean_y = 0;
};
Line FitLine(const std::vector<double>& xs, const std::vector<double>& ys) {
  const double n = static_cast<double>(xs.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    sx += xs[i];
    sy += ys[i];
    sxx += xs[i] * xs[i];
    sxy += xs[i] * ys[i];
  }
  return {(n * sxy - sx * sy) / (n * sxx - sx * sx), sx / n, sy / n};
}

// One trivial op-by-op run on one device, waited for before the next is
// made: the median wall time, and this process's CPU per run.
struct WaitedRun {
  double wall_us = 0;
  double cpu_us = 0;
};
absl::StatusOr<WaitedRun> MeasureWaitedRun(ClusterConnection* cluster) {
  CW_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(cluster));
  DispatchProgramOptions po;
  po.mode = DispatchGranularity::kOpByOp;
  po.computation = Computation::kAdd;
  po.devices = 1;
  CW_ASSIGN_OR_RETURN(DispatchProgram p, BuildDispatchProgram(*client, po));
  Array x = p.input;
  constexpr int kRuns = 400;
  std::vector<double> samples;
  const double cpu0 = ProcessCpuSeconds();
  for (int i = 0; i < kRuns; ++i) {
    const auto start = std::chrono::steady_clock::now();
    CW_ASSIGN_OR_RETURN(std::vector<Array> out, client->Call(p.step, {x}));
    x = out[0];
    CW_RETURN_IF_ERROR(x.Ready().Await().status());
    samples.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  WaitedRun r;
  r.cpu_us = (ProcessCpuSeconds() - cpu0) * 1e6 / kRuns;
  std::sort(samples.begin(), samples.end());
  r.wall_us = samples[samples.size() / 2];
  x = Array();
  p = DispatchProgram{};
  client->Disconnect();
  return r;
}

// Seconds per run of `f` on the CPU backend (a device of this machine):
// the fastest of a few timed batches.
absl::StatusOr<double> SecondsPerRun(const ir::Function& f) {
  CW_ASSIGN_OR_RETURN(std::shared_ptr<const backend::cpu::HostExecutable> e,
                      backend::cpu::Compile(f));
  std::vector<std::vector<float>> in;
  std::vector<const void*> in_ptrs;
  for (int i = 0; i < f.num_parameters(); ++i) {
    in.emplace_back(f.parameter_shape(i).num_elements(), 1.0f);
    in_ptrs.push_back(in.back().data());
  }
  std::vector<float> out(f.output_shape(0).num_elements());
  std::vector<void*> out_ptrs = {out.data()};
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    constexpr int kRuns = 8;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRuns; ++i) CW_RETURN_IF_ERROR(e->Run(in_ptrs, out_ptrs, {}));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                                  .count() / kRuns);
  }
  return best;
}

struct CalibrateFlags {
  int64_t units = 3000;
  int gang_runs = 3;
  // Shorter real runs and a coarser search, for tests (sanitizer builds).
  bool quick = false;
  bool json = false;
  bool skip_grpc = false;
};

absl::StatusOr<json> Calibrate(const CalibrateFlags& f) {
  sim::SimCosts c = sim::CalibratedCosts();
  json measured;
  // 0. The latency of a hand-off between two threads, first, on a machine
  // not yet busy with the rest.
  c.host.handoff_us = MeasureHandoffMicros();
  // 1. The control plane's CPU per call, run, launch and report: the real
  // client, scheduler and executors timed on one thread (the simulator's),
  // op by op (4 launches a run) and chained (64 launches a run).
  std::vector<sim::CpuProfile::HostBatch> batches;
  double device_us = 0;
  for (DispatchGranularity mode : {DispatchGranularity::kOpByOp, DispatchGranularity::kChained}) {
    sim::SimDispatchOptions o;
    o.program.mode = mode;
    o.program.devices = 4;
    o.program.chain = 16;
    o.cluster.hosts_per_island = 1;
    o.cluster.devices_per_host = 4;
    o.cluster.profile_cpu = true;
    o.units = mode == DispatchGranularity::kOpByOp ? f.units : std::max<int64_t>(1, f.units / 16);
    CW_ASSIGN_OR_RETURN(sim::SimDispatchResult r, sim::SimulateDispatch(o));
    const sim::CpuProfile& p = r.profile;
    const int64_t runs = o.units + o.warmup;
    const char* name = Name(mode);
    measured[name] = {{"runs", runs},
                      {"client_call_us", p.client_call.us_each()},
                      {"client_send_us_per_batch", p.client_send.us_each()},
                      {"client_batches", p.client_send.count},
                      {"scheduler_us_per_run", p.scheduler.us_per(runs)},
                      {"scheduler_report_us", p.scheduler_report.us_each()},
                      {"device_us_per_launch", p.device.us_each()},
                      {"host_batches", p.host_batches.size()}};
    batches.insert(batches.end(), p.host_batches.begin(), p.host_batches.end());
    if (mode == DispatchGranularity::kChained) {
      c.host.client_run_us = p.client_call.us_each();
      c.host.client_send_us = p.client_send.us_each();
      c.host.scheduler_run_us = p.scheduler.us_per(runs);
      c.host.scheduler_report_us = p.scheduler_report.us_each();
      device_us = p.device.us_each();
    }
  }
  const auto [run_us, launch_us] = FitHostCosts(batches);
  c.host.host_run_us = run_us;
  c.host.host_launch_us = launch_us;
  c.host.device_launch_us = device_us;
  // 2. The real hub's CPU per member of a scalar all-reduce among 4
  // threads.
  for (int n : {2, 4, 8, 16, 32}) {
    measured["hub_cpu_us_per_member"][std::to_string(n)] =
        MeasureCollectiveMemberMicros(n, 32000 / n);
  }
  // The hub alone is not all a member pays on oversubscribed cores: the
  // device threads also park and wake around each collective and launch.
  // What a gang step costs is taken from the real embedded cluster: trivial
  // all-reduces over 8 devices (1 host), 16 (2 hosts) and 32 (4 hosts), each
  // the median of --gang-runs runs of 1 s (single runs on a shared machine
  // move by up to 30 %).
  // - Fused (16 all-reduces a launch): a collective's CPU per member, the
  //   step (per all-reduce) less a hand-off, x cores / devices, at each
  //   oversubscription; the least-squares line through them gives the base
  //   and the slope per device thread per core.
  // - Chained (one a launch): what a launch adds to each device's CPU,
  //   (chained - fused step) x cores / devices, the mean over the sizes.
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  constexpr int kGangSizes[3][2] = {{8, 1}, {16, 2}, {32, 4}};  // devices, hosts
  // The real runs of 1 s at each size: fused and chained with no
  // computation, and chained computing 500 us (the three, in this order,
  // per size); then the median time per all-reduce of each.
  constexpr std::pair<DispatchGranularity, int64_t> kGangRuns[3] = {
      {DispatchGranularity::kFused, 0},
      {DispatchGranularity::kChained, 0},
      {DispatchGranularity::kChained, 500}};
  std::vector<DispatchBenchOptions> gang_benches;
  for (const auto& size : kGangSizes) {
    for (const auto& [mode, compute_us] : kGangRuns) {
      DispatchBenchOptions b;
      b.mode = mode;
      b.chain = 16;
      b.devices = size[0];
      b.hosts = size[1];
      b.compute_us = compute_us;
      b.seconds = f.quick ? 0.25 : 1.0;
      gang_benches.push_back(b);
    }
  }
  CW_ASSIGN_OR_RETURN(const std::vector<std::vector<double>> gang_runs,
                      RealDispatchRuns(gang_benches, f.gang_runs));
  struct GangSteps {
    double fused_us;
    double chained_us;
    double chained_500_us;
  };
  std::vector<GangSteps> steps;
  for (size_t i = 0; i < std::size(kGangSizes); ++i) {
    steps.push_back({1e6 / Median(gang_runs[3 * i]), 1e6 / Median(gang_runs[3 * i + 1]),
                     1e6 / Median(gang_runs[3 * i + 2])});
  }
  {
    std::vector<double> xs;
    std::vector<double> ys;
    double launch_sum = 0;
    for (size_t i = 0; i < std::size(kGangSizes); ++i) {
      const int devices = kGangSizes[i][0];
      xs.push_back(devices / cores);
      ys.push_back(std::max(0.0, (steps[i].fused_us - c.host.handoff_us) * cores / devices));
      launch_sum += (steps[i].chained_us - steps[i].fused_us) * cores / devices;
      measured[absl::StrCat("embedded_fused_step_us_", devices, "_devices")] = steps[i].fused_us;
      measured[absl::StrCat("embedded_chained_step_us_", devices, "_devices")] =
          steps[i].chained_us;
      measured[absl::StrCat("collective_member_us_line_point_", devices, "_devices")] = ys.back();
    }
    // The fitted line, made flat if it falls (the cost cannot drop with
    // more threads per core), through the points' mean; the base is its
    // cost at one device thread per core. It is kept for machines of other
    // sizes; the simulator takes the points below instead, the cost not
    // being a line in threads per core (docs/SIM.md, "Calibration").
    const Line fit = FitLine(xs, ys);
    const double slope = std::max(0.0, fit.slope);
    c.host.collective_member_slope_us = slope;
    c.host.collective_member_us = std::max(0.0, fit.mean_y + slope * (1 - fit.mean_x));
    measured["device_launch_us_profiled"] = c.host.device_launch_us;
    c.host.device_launch_us = std::max(0.0, launch_sum / 3);
  }
  // All of a member's CPU is spent once the gang has met; the points give
  // how much at each size.
  c.host.collective_after_us = 0;
  // The member's CPU at which the simulator's step (of `mode` over
  // `devices` devices on `hosts` hosts, each computing `compute_us`) is the
  // real one, `step_us`, with every other cost as calibrated so far: by
  // bisection, the simulated step growing with it.
  auto fit_member = [&](DispatchGranularity mode, int devices, int hosts, int64_t compute_us,
                        double step_us, bool after_delay) -> absl::StatusOr<double> {
    auto simulated_step_us = [&](double member_us) -> absl::StatusOr<double> {
      sim::SimCosts trial = c;
      std::vector<std::pair<double, double>>* points =
          after_delay ? &trial.host.collective_member_after_delay_points
                      : &trial.host.collective_member_points;
      *points = {{0.0, member_us}};
      sim::SimDispatchOptions o = EmbeddedSimulation(mode, devices, hosts, 16, compute_us,
                                                     static_cast<int>(cores), trial);
      o.units = f.quick ? 8 : 32;
      CW_ASSIGN_OR_RETURN(sim::SimDispatchResult r, sim::SimulateDispatch(o));
      return 1e6 / r.computations_per_second;
    };
    double lo = 0;
    double hi = 64;
    for (;;) {  // widen until the simulated step is the longer
      CW_ASSIGN_OR_RETURN(const double simulated, simulated_step_us(hi));
      if (simulated >= step_us || hi >= 65536) break;
      lo = hi;
      hi *= 2;
    }
    for (int i = 0; i < (f.quick ? 6 : 16); ++i) {
      const double mid = 0.5 * (lo + hi);
      CW_ASSIGN_OR_RETURN(const double simulated, simulated_step_us(mid));
      (simulated < step_us ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  };
  for (size_t i = 0; i < std::size(kGangSizes); ++i) {
    CW_ASSIGN_OR_RETURN(const double member_us,
                        fit_member(DispatchGranularity::kFused, kGangSizes[i][0], kGangSizes[i][1],
                                   0, steps[i].fused_us, /*after_delay=*/false));
    c.host.collective_member_points.emplace_back(kGangSizes[i][0] / cores, member_us);
  }
  measured["handoff_us"] = c.host.handoff_us;
  // 3. A control message over gRPC: single trivial runs waited for one at
  // a time (no batching) on an embedded cluster and on a distributed one on
  // this machine (a coordinator and a worker process, over loopback).
  if (!f.skip_grpc) {
    ProcessClusterOptions po;
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return absl::InternalError("cannot find the causeway binary");
    po.binary.assign(self, static_cast<size_t>(n));
    po.islands = 1;
    po.hosts_per_island = 1;
    po.devices_per_host = 1;
    CW_ASSIGN_OR_RETURN(std::unique_ptr<ProcessCluster> processes, ProcessCluster::Start(po));
    LocalClusterOptions lo;
    lo.devices_per_host = 1;
    CW_ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> embedded, LocalCluster::Create(lo));
    CW_ASSIGN_OR_RETURN(const WaitedRun local, MeasureWaitedRun(embedded.get()));
    RemoteClusterOptions ro;
    ro.address = processes->url();
    ro.token = processes->token();
    CW_ASSIGN_OR_RETURN(std::unique_ptr<RemoteCluster> remote_cluster, RemoteCluster::Connect(ro));
    CW_ASSIGN_OR_RETURN(const WaitedRun remote, MeasureWaitedRun(remote_cluster.get()));
    // A waited run crosses 7 one-way messages (the call to the coordinator
    // and on to the worker, its forwarding back to the client, the read to
    // the coordinator and the worker, and its answer back), which add
    // `hop` each to the embedded cluster's time. The client process
    // handles 4 of their ends (besides its two calls): its CPU per end is a
    // message's CPU, capped at half a hop, and what is left of the hop is
    // the latency.
    const double hop = std::max(0.0, (remote.wall_us - local.wall_us) / 7);
    const double end_cpu = std::max(0.0, (remote.cpu_us - 2 * c.host.client_run_us) / 4);
    c.host.message_us = std::min(end_cpu, hop / 2);
    c.dcn.latency_us = hop - 2 * c.host.message_us;
    measured["grpc_hop_us"] = hop;
    measured["grpc_client_cpu_us_per_message_end"] = end_cpu;
    measured["waited_run_us_embedded"] = local.wall_us;
    measured["waited_run_us_grpc"] = remote.wall_us;
    measured["waited_run_client_cpu_us_embedded"] = local.cpu_us;
    measured["waited_run_client_cpu_us_grpc"] = remote.cpu_us;
    remote_cluster.reset();
    embedded.reset();
    processes.reset();
  }
  // 4. The simulated device's rates: a device of this machine (the CPU
  // backend on one thread) running a 512^3 matmul, and adding two vectors
  // of 4 Mi floats (48 MiB read and written).
  {
    ir::FunctionBuilder mm("calibrate_matmul");
    ir::Value a = mm.Parameter(ir::Shape(ir::DType::kF32, {512, 512}));
    ir::Value b = mm.Parameter(ir::Shape(ir::DType::kF32, {512, 512}));
    CW_ASSIGN_OR_RETURN(ir::Function matmul, mm.Build({mm.Matmul(a, b)}));
    CW_ASSIGN_OR_RETURN(const double matmul_s, SecondsPerRun(matmul));
    c.device.gflops = 2.0 * 512 * 512 * 512 / matmul_s / 1e9;
    constexpr int64_t kFloats = int64_t{4} << 20;
    ir::FunctionBuilder add("calibrate_add");
    ir::Value x = add.Parameter(ir::Shape(ir::DType::kF32, {kFloats}));
    ir::Value y = add.Parameter(ir::Shape(ir::DType::kF32, {kFloats}));
    CW_ASSIGN_OR_RETURN(ir::Function sum, add.Build({add.Add(x, y)}));
    CW_ASSIGN_OR_RETURN(const double add_s, SecondsPerRun(sum));
    c.device.gbytes_per_s = 3.0 * kFloats * 4 / add_s / 1e9;
    measured["matmul_512_us"] = matmul_s * 1e6;
    ir::FunctionBuilder sleep("calibrate_delay");
    ir::Value z = sleep.Parameter(ir::Shape(ir::DType::kF32, {1}));
    CW_ASSIGN_OR_RETURN(ir::Function delay, sleep.Build({sleep.Delay(z, 500)}));
    // As on a device's thread, which asks for the tightest timer slack
    // (DeviceStream, FiberPool); this thread's default slack adds up to 50 us.
    const int slack = prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    const absl::StatusOr<double> delay_s = SecondsPerRun(delay);
    if (slack > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0UL, 0UL, 0UL);
    CW_RETURN_IF_ERROR(delay_s.status());
    c.device.delay_overshoot_us = std::max(0.0, *delay_s * 1e6 - 500);
    measured["delay_500_us"] = *delay_s * 1e6;
    measured["add_4Mi_us"] = add_s * 1e6;
  }
  // 4b. A member's CPU in a collective after its launch slept in a `delay`:
  // chained runs again, each device also computing 500 us, the member's CPU
  // found per size as for the fused runs above. It is smaller than with
  // no computation, and does not grow with the size as that one does:
  // threads that wake from a timer one after another find the cores
  // quieter than threads that are all runnable at once.
  for (size_t i = 0; i < std::size(kGangSizes); ++i) {
    const int devices = kGangSizes[i][0];
    const double step_us = steps[i].chained_500_us;
    measured[absl::StrCat("embedded_chained_500us_step_us_", devices, "_devices")] = step_us;
    CW_ASSIGN_OR_RETURN(const double member_us,
                        fit_member(DispatchGranularity::kChained, devices, kGangSizes[i][1],
                                   kGangRuns[2].second, step_us, /*after_delay=*/true));
    c.host.collective_member_after_delay_points.emplace_back(devices / cores, member_us);
  }
  // 5. Links on this machine: within an island, memcpy (the hub and the
  // in-process transport copy); between machines, a TCP stream over
  // loopback, both of 16 MiB pieces. A reshard piece costs each end what a
  // control message does.
  c.ici.gbytes_per_s = MemcpyFloor(int64_t{16} << 20) / 1e9;
  CW_ASSIGN_OR_RETURN(const double tcp_bps, TcpFloor(int64_t{16} << 20));
  c.dcn.gbytes_per_s = tcp_bps / 1e9;
  c.host.transfer_us = c.host.message_us;
  // Devices of an island meet in the process's hub: what that costs is in
  // the members' CPU and the parked members' wake-up, not on a link.
  c.ici.latency_us = 0;
  measured["note"] =
      "host_run_us and host_launch_us are a least-squares fit of the executors' CPU per batch "
      "over the runs and launches in it";
  return json{{"costs", CostsToJson(c)}, {"measured", measured}};
}

struct SimTenancyFlags {
  std::string weights = "1,2,4,8";
  int64_t compute_us = 330;
  double seconds = 2;
  int hosts = 1;
  int devices_per_host = 8;
  int outstanding = 16;
  bool one_machine = false;
  int cores = 8;
  std::string calibration;
  bool json = false;
};

int RunSimTenancy(const SimTenancyFlags& f) {
  auto fail = [](const absl::Status& s, int code) { return SimFail("tenancy", s, code); };
  sim::SimTenancyOptions o;
  o.weights.clear();
  for (absl::string_view part : absl::StrSplit(f.weights, ',')) {
    double w;
    if (!absl::SimpleAtod(part, &w) || !std::isfinite(w) || w <= 0 || w > 1e6) {
      return fail(absl::InvalidArgumentError(
                      absl::StrCat("bad --weights entry '", part, "' (a number in (0, 1e6])")),
                  kExitUsage);
    }
    o.weights.push_back(w);
  }
  if (o.weights.size() > 64) {
    return fail(absl::InvalidArgumentError("at most 64 clients"), kExitUsage);
  }
  o.compute_us = f.compute_us;
  o.seconds = f.seconds;
  o.outstanding = f.outstanding;
  o.cluster.hosts_per_island = f.hosts;
  o.cluster.devices_per_host = f.devices_per_host;
  o.cluster.one_machine = f.one_machine;
  o.cluster.cores = f.cores;
  if (absl::Status s = LoadCosts(f.calibration, &o.cluster.costs); !s.ok()) {
    return fail(s, kExitUsage);
  }
  absl::StatusOr<sim::SimTenancyResult> r = sim::SimulateTenancy(o);
  if (!r.ok()) return fail(r.status(), kExitRuntime);
  json clients = json::array();
  for (size_t i = 0; i < o.weights.size(); ++i) {
    clients.push_back({{"weight", o.weights[i]},
                       {"target_share", r->target[i]},
                       {"achieved_share", r->achieved[i]}});
  }
  const json j = {{"sim", "tenancy"},
                  {"hosts", f.hosts},
                  {"devices", f.hosts * f.devices_per_host},
                  {"compute_us", f.compute_us},
                  {"virtual_seconds", f.seconds},
                  {"clients", clients},
                  {"max_share_error_10ms", r->max_error_10ms},
                  {"max_share_error_100ms", r->max_error_100ms},
                  {"max_share_error_1s", r->max_error_1s},
                  {"compute_fraction", r->compute_fraction},
                  {"runs", r->runs},
                  {"decision_ns_per_run", r->decision_ns_per_run},
                  {"wall_seconds", r->wall_seconds}};
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  for (size_t i = 0; i < o.weights.size(); ++i) {
    std::printf("client %zu: weight %g, share %.3f (target %.3f)\n", i, o.weights[i],
                r->achieved[i], r->target[i]);
  }
  std::printf("largest share error: %.1f points per 10 ms, %.1f per 100 ms, %.1f per 1 s; "
              "compute fraction %.3f over %lld runs; the scheduler's choice %.0f ns a run "
              "(%.2f s to simulate)\n",
              100 * r->max_error_10ms, 100 * r->max_error_100ms, 100 * r->max_error_1s,
              r->compute_fraction, static_cast<long long>(r->runs), r->decision_ns_per_run,
              r->wall_seconds);
  return 0;
}

struct SimPipelineFlags {
  int stages = 4;
  int microbatches = 0;  // 0: 4 x stages
  int64_t forward_us = 1000;
  int64_t backward_us = -1;  // -1: 2 x forward
  int64_t activation_kb = 64;
  std::string schedule = "gpipe";
  int islands = 1;
  int steps = 4;
  double dcn_latency_us = -1;
  std::string calibration;
  bool json = false;
};

int RunSimPipeline(const SimPipelineFlags& f) {
  auto fail = [](const absl::Status& s, int code) { return SimFail("pipeline", s, code); };
  sim::SimPipelineOptions o;
  o.program.stages = f.stages;
  o.program.microbatches = f.microbatches > 0 ? f.microbatches : 4 * f.stages;
  o.program.forward_us = f.forward_us;
  o.program.backward_us = f.backward_us >= 0 ? f.backward_us : 2 * f.forward_us;
  o.program.activation_kb = f.activation_kb;
  o.program.one_f_one_b = f.schedule == "1f1b";
  o.islands = f.islands;
  o.steps = f.steps;
  if (absl::Status s = LoadCosts(f.calibration, &o.cluster.costs); !s.ok()) {
    return fail(s, kExitUsage);
  }
  if (f.dcn_latency_us >= 0) o.cluster.costs.dcn.latency_us = f.dcn_latency_us;
  if (f.stages % f.islands != 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
                    f.stages, " stages do not split evenly over ", f.islands, " islands")),
                kExitUsage);
  }
  absl::StatusOr<sim::SimPipelineResult> r = sim::SimulatePipeline(o);
  if (!r.ok()) return fail(r.status(), kExitRuntime);
  const json j = {{"sim", "pipeline"},
                  {"stages", f.stages},
                  {"microbatches", o.program.microbatches},
                  {"schedule", f.schedule},
                  {"islands", f.islands},
                  {"forward_us", o.program.forward_us},
                  {"backward_us", o.program.backward_us},
                  {"activation_kb", f.activation_kb},
                  {"step_seconds", r->step_seconds},
                  {"bound_seconds", r->bound_seconds},
                  {"bound_over_step", r->bound_seconds / r->step_seconds},
                  {"messages_per_step", static_cast<double>(r->messages) / f.steps},
                  {"wall_seconds", r->wall_seconds}};
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%d stages x %d micro-batches (%s, %d islands): step %.3f ms, GPipe bound "
                "%.3f ms (%.2f of the bound; %.2f s to simulate)\n",
                f.stages, o.program.microbatches, f.schedule.c_str(), f.islands,
                1e3 * r->step_seconds, 1e3 * r->bound_seconds,
                r->bound_seconds / r->step_seconds, r->wall_seconds);
  }
  return 0;
}

struct ValidateFlags {
  std::string sizes = "8x1,16x2,32x4";
  std::string modes = "chained,fused";
  std::string compute_us = "0,500";
  std::string controller = "both";
  int chain = 16;
  double seconds = 1.0;
  int repeat = 3;
  std::string calibration;
  bool json = false;
};

// The same dispatch benchmark on the real embedded cluster of this machine
// and on the simulator emulating it (one machine of this machine's cores,
// in-process messages), side by side.
int RunValidate(const ValidateFlags& f) {
  auto fail = [](const absl::Status& s, int code) { return SimFail("validate", s, code); };
  std::vector<std::pair<int, int>> sizes;
  for (absl::string_view part : absl::StrSplit(f.sizes, ',')) {
    std::vector<absl::string_view> dh = absl::StrSplit(part, 'x');
    int d = 0, h = 0;
    if (dh.size() != 2 || !absl::SimpleAtoi(dh[0], &d) || !absl::SimpleAtoi(dh[1], &h) || h < 1 ||
        d < h || d % h != 0 || d > 256) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
                      "bad --sizes entry '", part, "' (DEVICESxHOSTS, hosts dividing devices)")),
                  kExitUsage);
    }
    sizes.emplace_back(d, h);
  }
  absl::StatusOr<std::vector<int64_t>> lengths =
      ParseList(f.compute_us, "--compute-us", 0, 100'000);
  if (!lengths.ok()) return fail(lengths.status(), kExitUsage);
  sim::SimCosts costs = sim::CalibratedCosts();
  if (absl::Status s = LoadCosts(f.calibration, &costs); !s.ok()) return fail(s, kExitUsage);
  std::vector<Controller> controllers;
  if (f.controller != "multi") controllers.push_back(Controller::kSingle);
  if (f.controller != "single") controllers.push_back(Controller::kMulti);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Every configuration, in the order of its rows.
  std::vector<DispatchBenchOptions> benches;
  for (auto [devices, hosts] : sizes) {
    for (absl::string_view mode : absl::StrSplit(f.modes, ',')) {
      auto m = kModes.find(std::string(mode));
      if (m == kModes.end()) {
        return fail(absl::InvalidArgumentError(absl::StrCat("bad --modes entry '", mode, "'")),
                    kExitUsage);
      }
      for (int64_t us : *lengths) {
        for (Controller controller : controllers) {
          DispatchBenchOptions b;
          b.mode = m->second;
          b.controller = controller;
          b.devices = devices;
          b.hosts = hosts;
          b.chain = f.chain;
          b.compute_us = us;
          b.seconds = f.seconds;
          benches.push_back(b);
        }
      }
    }
  }
  // The rows come once every real run is in: say how long that takes.
  std::fprintf(stderr, "causeway sim validate: %d real runs of %.2g s (%zu configurations, %d "
               "rounds), then their simulations\n",
               static_cast<int>(benches.size()) * f.repeat, f.seconds, benches.size(), f.repeat);
  absl::StatusOr<std::vector<std::vector<double>>> real_runs = RealDispatchRuns(benches, f.repeat);
  if (!real_runs.ok()) return fail(real_runs.status(), kExitRuntime);
  int within = 0;  // of 10 %
  for (size_t i = 0; i < benches.size(); ++i) {
    const DispatchBenchOptions& b = benches[i];
    const std::vector<double>& runs = (*real_runs)[i];
    const double real = Median(runs);
    sim::SimDispatchOptions o =
        EmbeddedSimulation(b.mode, b.devices, b.hosts, f.chain, b.compute_us, cores, costs);
    o.controller = b.controller;
    o.units = b.mode == DispatchGranularity::kOpByOp ? 512 : 32;
    absl::StatusOr<sim::SimDispatchResult> simulated = sim::SimulateDispatch(o);
    if (!simulated.ok()) return fail(simulated.status(), kExitRuntime);
    const double ratio = simulated->computations_per_second / real;
    if (std::abs(ratio - 1.0) <= 0.10) ++within;
    const json row = {{"sim", "validate"},
                      {"devices", b.devices},
                      {"hosts", b.hosts},
                      {"mode", Name(b.mode)},
                      {"controller", Name(b.controller)},
                      {"compute_us", b.compute_us},
                      {"real_computations_per_second", real},
                      {"real_runs", runs},
                      {"sim_computations_per_second", simulated->computations_per_second},
                      {"sim_over_real", ratio}};
    if (f.json) {
      std::printf("%s\n", row.dump().c_str());
    } else {
      std::printf("%3d devices / %d hosts  %-7s %-6s %5lld us: real %9.0f (%.0f..%.0f) "
                  " sim %9.0f computations/s  sim/real %.3f\n",
                  b.devices, b.hosts, Name(b.mode), Name(b.controller),
                  static_cast<long long>(b.compute_us), real, runs.front(), runs.back(),
                  simulated->computations_per_second, ratio);
    }
  }
  std::fflush(stdout);
  const int count = static_cast<int>(benches.size());
  if (f.json) {
    std::printf("%s\n", json{{"sim", "validate"},
                             {"configurations", count},
                             {"within_10_percent", within}}
                             .dump()
                             .c_str());
  } else {
    std::printf("within 10 %% of the real median: %d of %d configurations\n", within, count);
  }
  return 0;
}

}  // namespace

void AddSimCommands(CLI::App& app, int* exit_code) {
  CLI::App* group = app.add_subcommand(
      "sim",
      "The real control plane (client, island schedulers, host executors) on simulated devices "
      "and links, on a virtual clock (docs/SIM.md)");
  group->require_subcommand(1);

  auto d = std::make_shared<SimDispatchFlags>();
  CLI::App* cmd = group->add_subcommand(
      "dispatch",
      "The dispatch experiment (paper Figs. 5 and 6) on simulated hosts: throughput of chains "
      "of gang-scheduled computations (a scalar all-reduce over every device, then an add), op "
      "by op, chained or fused, by the single controller or one loop per host");
  cmd->add_option("--hosts", d->hosts, "Comma-separated host counts (one island)")
      ->capture_default_str();
  cmd->add_option("--devices-per-host", d->devices_per_host, "Devices on each host")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--mode", d->mode, "Comma-separated: opbyop, chained, fused")
      ->capture_default_str();
  cmd->add_option("--controller", d->controller, "single | multi | both")
      ->check(CLI::IsMember({"single", "multi", "both"}))->capture_default_str();
  cmd->add_option("--compute-us", d->compute_us,
                  "Comma-separated device time of each computation, us")
      ->capture_default_str();
  cmd->add_option("--chain", d->chain, "Computations per chained program or fused function")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--units", d->units, "Dispatches measured (program runs, or calls op by op)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--warmup", d->warmup, "Dispatches before the measured ones")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  cmd->add_flag("--one-machine", d->one_machine,
                "Every thread on one machine of --cores cores, messages in-process (this "
                "machine's embedded cluster); otherwise each host is a machine of --cores cores "
                "and control messages cross the network");
  cmd->add_option("--cores", d->cores, "Cores of each machine (0: one per thread)")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_option("--coordinator-cores", d->coordinator_cores,
                  "Cores of the coordinator's machine: its schedulers and a writer and a reader "
                  "thread per host connection (0: one per thread)")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_option("--target", d->target,
                  "Single ÷ multi throughput to reach (the smallest computation reaching it is "
                  "reported per host count, with --controller both)")
      ->check(CLI::Range(0.0, 1.0))->check(Finite())->capture_default_str();
  cmd->add_option("--calibration", d->calibration,
                  "Costs from `causeway sim calibrate --json` (default: this machine's, built in)");
  cmd->add_option("--dcn-latency-us", d->dcn_latency_us,
                  "Network latency between machines, us (default: the calibration's)")
      ->check(CLI::Range(0.0, 1e6))->check(Finite());
  cmd->add_option("--ici-latency-us", d->ici_latency_us,
                  "Latency between an island's devices, us (default: the calibration's)")
      ->check(CLI::Range(0.0, 1e6))->check(Finite());
  cmd->add_option("--cpu", d->cpu,
                  "What the control plane's threads are charged: calibrated (the calibration's "
                  "constants; deterministic) | measured (the CPU the real client, scheduler and "
                  "executor code takes for each piece of work as the simulation runs it)")
      ->check(CLI::IsMember({"calibrated", "measured"}))->capture_default_str();
  cmd->add_option("--report-fanout", d->report_fanout,
                  "Comma-separated: hosts report runs up a tree of this fanout, its root to "
                  "the scheduler (0: every host to the scheduler)")
      ->capture_default_str();
  cmd->add_flag("--profile-cpu", d->profile_cpu,
                "Also time the real control-plane code's CPU per call, batch, report and launch "
                "(real_cpu_us in --json)");
  cmd->add_flag("--json", d->json, "One JSON object per configuration, then the parity rows");
  cmd->callback([d, exit_code] { *exit_code = RunSimDispatch(*d); });

  auto t = std::make_shared<SimTenancyFlags>();
  CLI::App* ten = group->add_subcommand(
      "tenancy",
      "The multi-tenancy experiment (paper Fig. 8) on simulated hosts: clients with weights keep "
      "an island saturated with gang computations; each client's share of device time per 10 "
      "ms, 100 ms and 1 s window against its weight, the compute fraction, and the real "
      "scheduler's cost per choice");
  ten->add_option("--weights", t->weights, "Comma-separated weights, one client each")
      ->capture_default_str();
  ten->add_option("--compute-us", t->compute_us, "Device time of each run (a delay, then a "
                  "scalar all-reduce over every device), us")
      ->check(CLI::Range(int64_t{1}, int64_t{10'000'000}))->capture_default_str();
  ten->add_option("--seconds", t->seconds, "Virtual seconds measured (after 0.2 s of warm-up)")
      ->check(CLI::Range(0.01, 3600.0))->check(Finite())->capture_default_str();
  ten->add_option("--hosts", t->hosts, "Hosts of the island")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  ten->add_option("--devices-per-host", t->devices_per_host, "Devices on each host")
      ->check(CLI::Range(1, 64))->capture_default_str();
  ten->add_option("--outstanding", t->outstanding, "Runs each client keeps submitted")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  ten->add_flag("--one-machine", t->one_machine,
                "Every thread on one machine of --cores cores (this machine's embedded cluster)");
  ten->add_option("--cores", t->cores, "Cores of each machine (0: one per thread)")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  ten->add_option("--calibration", t->calibration, "Costs from `causeway sim calibrate --json`");
  ten->add_flag("--json", t->json, "One JSON object");
  ten->callback([t, exit_code] { *exit_code = RunSimTenancy(*t); });

  auto pl = std::make_shared<SimPipelineFlags>();
  CLI::App* pipe = group->add_subcommand(
      "pipeline",
      "The pipeline experiment on simulated hosts: a training step of S stages (a host each) "
      "and M micro-batches, forward and backward of known length, activations moved between "
      "stages; the step time against the GPipe bound (M + S - 1) x (forward + backward)");
  pipe->add_option("--stages", pl->stages, "Stages, a host each")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  pipe->add_option("--microbatches", pl->microbatches, "Micro-batches (0: 4 x stages)")
      ->check(CLI::Range(0, 100000))->capture_default_str();
  pipe->add_option("--forward-us", pl->forward_us, "Forward pass of a micro-batch, us")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}))->capture_default_str();
  pipe->add_option("--backward-us", pl->backward_us, "Backward pass, us (-1: 2 x forward)")
      ->check(CLI::Range(int64_t{-1}, int64_t{10'000'000}))->capture_default_str();
  pipe->add_option("--activation-kb", pl->activation_kb, "Activation moved between stages, KiB")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  pipe->add_option("--schedule", pl->schedule, "gpipe | 1f1b")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))->capture_default_str();
  pipe->add_option("--islands", pl->islands, "Islands the stages split over")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  pipe->add_option("--steps", pl->steps, "Steps measured, back to back")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  pipe->add_option("--dcn-latency-us", pl->dcn_latency_us,
                   "Network latency between machines, us (default: the calibration's)")
      ->check(CLI::Range(0.0, 1e6))->check(Finite());
  pipe->add_option("--calibration", pl->calibration, "Costs from `causeway sim calibrate --json`");
  pipe->add_flag("--json", pl->json, "One JSON object");
  pipe->callback([pl, exit_code] { *exit_code = RunSimPipeline(*pl); });

  auto v = std::make_shared<ValidateFlags>();
  CLI::App* val = group->add_subcommand(
      "validate",
      "Runs the dispatch benchmark on the real embedded cluster of this machine and on the "
      "simulator emulating it (one machine of this machine's cores), and prints both");
  val->add_option("--sizes", v->sizes, "Comma-separated DEVICESxHOSTS")->capture_default_str();
  val->add_option("--modes", v->modes, "Comma-separated: opbyop, chained, fused")
      ->capture_default_str();
  val->add_option("--compute-us", v->compute_us, "Comma-separated computation lengths, us")
      ->capture_default_str();
  val->add_option("--controller", v->controller, "single | multi | both")
      ->check(CLI::IsMember({"single", "multi", "both"}))->capture_default_str();
  val->add_option("--chain", v->chain, "Computations per program or fused function")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  val->add_option("--seconds", v->seconds, "Measured time of each real run")
      ->check(CLI::Range(0.05, 600.0))->check(Finite())->capture_default_str();
  val->add_option("--repeat", v->repeat,
                  "Real runs per configuration, in rounds of one run of each (their median is "
                  "compared)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  val->add_option("--calibration", v->calibration, "Costs from `causeway sim calibrate --json`");
  val->add_flag("--json", v->json, "One JSON object per configuration");
  val->callback([v, exit_code] { *exit_code = RunValidate(*v); });

  auto c = std::make_shared<CalibrateFlags>();
  CLI::App* cal = group->add_subcommand(
      "calibrate",
      "Measures this machine's costs for the simulator by running the real code: control-plane "
      "CPU per call, run, launch and report; a thread hand-off; the collective hub's CPU per "
      "member; a gRPC message and its latency on loopback. Prints them in the form "
      "--calibration reads");
  cal->add_option("--units", c->units, "Op-by-op runs timed (chained: a sixteenth)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20))->capture_default_str();
  cal->add_flag("--skip-grpc", c->skip_grpc, "Leave the gRPC message cost and latency as built in");
  cal->add_option("--gang-runs", c->gang_runs,
                  "Real runs of 1 s per gang measurement (fused, chained and chained with "
                  "500 us computations at 8, 16 and 32 devices); the median is taken")
      ->check(CLI::Range(1, 15))
      ->capture_default_str();
  cal->add_flag("--quick", c->quick,
                "Gang measurements of 0.25 s and a coarse search (steps of 8 us): a quick "
                "check that calibration runs, not a calibration");
  cal->add_flag("--json", c->json, "One JSON object");
  cal->callback([c, exit_code] {
    absl::StatusOr<json> j = Calibrate(*c);
    if (!j.ok()) {
      std::fprintf(stderr, "causeway sim calibrate: %s\n", j.status().ToString().c_str());
      *exit_code = kExitRuntime;
      return;
    }
    std::printf("%s\n", c->json ? j->dump().c_str() : j->dump(2).c_str());
    *exit_code = 0;
  });
}

}  // namespace causeway::tools
