// `causeway bench dispatch` and `causeway bench utilization`.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tools/bench_harness.h"
#include "tools/commands.h"

namespace causeway::tools {
namespace {

struct DispatchFlags {
  std::vector<std::string> modes = {"chained"};
  std::string controller = "single";
  std::string computation = "allreduce-add";
  std::string cluster = "local";
  int devices = 8;
  int hosts = 1;
  int chain = 128;
  double seconds = 2.0;
  int repeat = 1;
  std::string scheduling = "share";
  int device_threads = 0;
  std::string device_kind = "cpu";
  double timeout_s = 30;
  bool json = false;
};

const std::map<std::string, DispatchGranularity> kModes = {
    {"opbyop", DispatchGranularity::kOpByOp},
    {"chained", DispatchGranularity::kChained},
    {"fused", DispatchGranularity::kFused}};
const std::map<std::string, Controller> kControllers = {{"single", Controller::kSingle},
                                                        {"multi", Controller::kMulti}};
// The multi-controller baseline's loops run beside their hosts
// (tools/spmd_loop.h); driving a worker process through the coordinator
// would measure the coordinator's hop, not a multi-controller system.
constexpr char kMultiIsLocal[] =
    "--controller multi runs on the embedded cluster only: its loop per host must run in the "
    "host's own process, and a distributed cluster's hosts are worker processes";
const std::map<std::string, Computation> kComputations = {
    {"add", Computation::kAdd}, {"allreduce-add", Computation::kAllReduceAdd}};

// One mode's report: the median of its runs.
void ReportDispatch(const DispatchFlags& f, const std::string& mode,
                    std::vector<DispatchBenchResult> runs, double handoff);

int RunDispatch(const DispatchFlags& f) {
  DispatchBenchOptions o;
  o.cluster = f.cluster;
  o.controller = kControllers.at(f.controller);
  o.computation = kComputations.at(f.computation);
  o.devices = f.devices;
  o.hosts = f.hosts;
  o.chain = f.chain;
  o.seconds = f.seconds;
  o.fifo = f.scheduling == "fifo";
  o.device_threads = f.device_threads;
  o.device_kind = f.device_kind;
  o.timeout_s = f.timeout_s;
  const double handoff = MeasureHandoffMicros();
  // Repeats on fresh clusters, the modes interleaved within each round; the
  // median run of each mode is reported (machines here are shared and noisy).
  std::vector<std::vector<DispatchBenchResult>> runs(f.modes.size());
  for (int i = 0; i < f.repeat; ++i) {
    for (size_t m = 0; m < f.modes.size(); ++m) {
      o.mode = kModes.at(f.modes[m]);
      absl::StatusOr<DispatchBenchResult> one = RunDispatchBench(o);
      if (!one.ok()) {
        std::fprintf(stderr, "causeway bench dispatch: %s: %s\n", f.modes[m].c_str(),
                     one.status().ToString().c_str());
        return kExitRuntime;
      }
      runs[m].push_back(*one);
    }
  }
  for (size_t m = 0; m < f.modes.size(); ++m) ReportDispatch(f, f.modes[m], runs[m], handoff);
  return 0;
}

void ReportDispatch(const DispatchFlags& f, const std::string& mode,
                    std::vector<DispatchBenchResult> runs, double handoff) {
  const bool opbyop = kModes.at(mode) == DispatchGranularity::kOpByOp;
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
    return a.computations_per_second < b.computations_per_second;
  });
  const DispatchBenchResult* r = &runs[runs.size() / 2];
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& x : runs) samples.push_back(x.computations_per_second);
  nlohmann::json j = {{"bench", "dispatch"},
                      {"mode", mode},
                      {"controller", f.controller},
                      {"computation", f.computation},
                      {"cluster", f.cluster},
                      {"scheduling", f.scheduling},
                      {"device_threads", f.device_threads},
                      {"device_kind", f.device_kind},
                      {"devices", f.devices},
                      {"hosts", r->hosts},
                      {"chain", opbyop ? 1 : f.chain},
                      {"computations", r->computations},
                      {"seconds", r->seconds},
                      {"computations_per_second", r->computations_per_second},
                      {"us_per_computation", 1e6 / r->computations_per_second},
                      {"handoff_us", handoff},
                      {"compute_fraction", r->compute_fraction},
                      {"busy_fraction_including_collective_waits", r->busy_fraction},
                      {"repeat", f.repeat},
                      {"computations_per_second_samples", samples}};
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("dispatch %s, %s controller, %s, %d devices / %d hosts: %.0f computations/s "
                "(%.2f us each; thread hand-off %.2f us)\n",
                mode.c_str(), f.controller.c_str(), f.computation.c_str(), f.devices, r->hosts,
                r->computations_per_second, 1e6 / r->computations_per_second, handoff);
  }
}

struct UtilizationFlags {
  std::string mode = "chained";
  std::string controller = "single";
  std::string compute_us = "100,250,500,1000,2500";
  int devices = 8;
  int hosts = 1;
  int chain = 16;
  double seconds = 1.0;
  double target = 0.90;
  std::string cluster = "local";
  int device_threads = 0;
  std::string device_kind = "cpu";
  double timeout_s = 30;
  bool json = false;
};

int RunUtilization(const UtilizationFlags& f) {
  std::vector<int64_t> lengths;
  for (absl::string_view part : absl::StrSplit(f.compute_us, ',')) {
    int64_t us;
    if (!absl::SimpleAtoi(part, &us) || us < 0) {
      std::fprintf(stderr, "causeway bench utilization: bad --compute-us entry '%.*s'\n",
                   static_cast<int>(part.size()), part.data());
      return kExitUsage;
    }
    lengths.push_back(us);
  }
  std::vector<std::string> controllers =
      f.controller == "both" ? std::vector<std::string>{"single", "multi"}
                             : std::vector<std::string>{f.controller};
  for (const std::string& controller : controllers) {
    nlohmann::json rows = nlohmann::json::array();
    int64_t smallest = -1;
    int hosts = f.hosts;
    for (int64_t us : lengths) {
      DispatchBenchOptions o;
      o.mode = kModes.at(f.mode);
      o.controller = kControllers.at(controller);
      o.computation = Computation::kAllReduceAdd;
      o.devices = f.devices;
      o.hosts = f.hosts;
      o.cluster = f.cluster;
      o.chain = f.chain;
      o.compute_us = us;
      o.seconds = f.seconds;
      o.device_threads = f.device_threads;
      o.device_kind = f.device_kind;
  o.device_kind = f.device_kind;
      o.timeout_s = f.timeout_s;
      absl::StatusOr<DispatchBenchResult> r = RunDispatchBench(o);
      if (!r.ok()) {
        std::fprintf(stderr, "causeway bench utilization: %s\n", r.status().ToString().c_str());
        return kExitRuntime;
      }
      // The headline is the compute fraction: the requested computation
      // time done per device-second (each computation occupies every
      // device). Busy time also counts time parked in collectives.
      if (smallest < 0 && r->compute_fraction >= f.target) smallest = us;
      hosts = r->hosts;
      rows.push_back({{"compute_us", us},
                      {"compute_fraction", r->compute_fraction},
                      {"busy_fraction_including_collective_waits", r->busy_fraction},
                      {"computations_per_second", r->computations_per_second}});
      if (!f.json) {
        std::printf("%s controller, %s, %d devices / %d hosts, %lld us computations: "
                    "compute fraction %.1f%% (busy, including collective waits: %.1f%%)\n",
                    controller.c_str(), f.mode.c_str(), f.devices, r->hosts, (long long)us,
                    100 * r->compute_fraction, 100 * r->busy_fraction);
      }
    }
    nlohmann::json j = {{"bench", "utilization"}, {"mode", f.mode},
                        {"controller", controller}, {"devices", f.devices},
                        {"hosts", hosts},          {"target", f.target},
                        {"device_threads", f.device_threads},
                      {"device_kind", f.device_kind},
                        {"cluster", f.cluster},
                        {"rows", rows},
                        {"smallest_compute_us_reaching_target",
                         smallest < 0 ? nlohmann::json(nullptr) : nlohmann::json(smallest)}};
    if (f.json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s controller: smallest computation reaching a compute fraction of %.0f%%: %s\n",
                  controller.c_str(), 100 * f.target,
                  smallest < 0 ? "none of those tried" : (std::to_string(smallest) + " us").c_str());
    }
  }
  return 0;
}

template <typename Map>
std::vector<std::string> Keys(const Map& m) {
  std::vector<std::string> k;
  for (const auto& [key, value] : m) k.push_back(key);
  return k;
}

}  // namespace

void AddBenchDispatchCommands(CLI::App* bench, int* exit_code) {
  auto d = std::make_shared<DispatchFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "dispatch",
      "Control-plane cost per computation: chains of trivial gang-scheduled computations "
      "(a scalar all-reduce over all devices, then an add), each output feeding the next");
  cmd->add_option("--mode", d->modes,
                  "Comma-separated: opbyop, chained, fused (several run interleaved, round by "
                  "round, and each is reported)")
      ->delimiter(',')
      ->check(CLI::IsMember(Keys(kModes)))
      ->capture_default_str();
  cmd->add_option("--controller", d->controller,
                  "single (client + island scheduler) | multi (one dispatch loop per host; embedded cluster only)")
      ->check(CLI::IsMember(Keys(kControllers)));
  cmd->add_option("--computation", d->computation, "allreduce-add | add")
      ->check(CLI::IsMember(Keys(kComputations)));
  cmd->add_option("--devices", d->devices, "Devices in the mesh")->check(CLI::Range(1, 1024));
  cmd->add_option("--hosts", d->hosts, "Hosts the devices are spread over")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--chain", d->chain, "Computations per chained program / fused function")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--cluster", d->cluster,
                  "local (a fresh embedded cluster) or grpc://HOST:PORT of a running distributed "
                  "cluster (token from $CAUSEWAY_TOKEN; --hosts is then the cluster's)")
      ->check(ClusterAddress(true));
  cmd->add_option("--seconds", d->seconds, "Measured time per configuration")
      ->check(CLI::Range(0.05, 600.0))->check(Finite());
  cmd->add_option("--repeat", d->repeat, "Runs of the configuration; the median is reported")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--scheduling", d->scheduling,
                  "Embedded cluster's island schedulers: share (proportional share, the "
                  "default) | fifo (forward every run at once)")
      ->check(CLI::IsMember({"share", "fifo"}))
      ->capture_default_str();
  cmd->add_option("--device-kind", d->device_kind,
                  DeviceKindHelp("Embedded cluster: the kind of its devices"))
      ->capture_default_str();
  cmd->add_option("--device-threads", d->device_threads,
                  "Embedded cluster: 0 (default) runs each device on a thread of its own; N runs every device as a fiber of one pool of N threads, so a device that waits (a delay, a collective) parks a fiber instead of switching threads")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", d->json, "One JSON object per configuration");
  cmd->add_option("--timeout", d->timeout_s, "Seconds to wait for a distributed cluster")
      ->check(CLI::PositiveNumber)->check(Finite());
  cmd->callback([d, cmd, exit_code] {
    if (d->cluster != "local") {
      for (const char* flag : {"--hosts", "--scheduling", "--device-threads", "--device-kind"}) {
        if (cmd->count(flag) > 0) {
          std::fprintf(stderr, "causeway bench dispatch: %s applies to the embedded cluster only\n",
                       flag);
          *exit_code = kExitUsage;
          return;
        }
      }
      if (d->controller == "multi") {
        std::fprintf(stderr, "causeway bench dispatch: %s\n", kMultiIsLocal);
        *exit_code = kExitUsage;
        return;
      }
    }
    *exit_code = RunDispatch(*d);
  });

  auto u = std::make_shared<UtilizationFlags>();
  CLI::App* ucmd = bench->add_subcommand(
      "utilization",
      "Compute fraction (the computations' requested device time / (devices x wall time)) of "
      "gang-scheduled computations that keep each device busy for a given time, with busy "
      "time (which includes collective waits) beside it");
  ucmd->add_option("--compute-us", u->compute_us, "Comma-separated computation lengths, us");
  ucmd->add_option("--mode", u->mode, "opbyop | chained | fused")
      ->check(CLI::IsMember(Keys(kModes)));
  ucmd->add_option("--controller", u->controller,
                   "single | multi | both (multi: embedded cluster only)")
      ->check(CLI::IsMember({"single", "multi", "both"}));
  ucmd->add_option("--devices", u->devices, "Devices in the mesh")->check(CLI::Range(1, 1024));
  ucmd->add_option("--hosts", u->hosts, "Hosts")->check(CLI::Range(1, 256));
  ucmd->add_option("--cluster", u->cluster,
                   "local (a fresh embedded cluster) or grpc://HOST:PORT of a running distributed "
                   "cluster (token from $CAUSEWAY_TOKEN)")
      ->check(ClusterAddress(true));
  ucmd->add_option("--chain", u->chain, "Computations per program (chained) or function (fused)")
      ->check(CLI::Range(1, 100000));
  ucmd->add_option("--seconds", u->seconds, "Measured time per length")
      ->check(CLI::Range(0.05, 600.0))->check(Finite());
  ucmd->add_option("--target", u->target,
                   "Compute fraction to reach (the smallest computation reaching it is reported)")->check(CLI::Range(0.0, 1.0))->check(Finite());
  ucmd->add_option("--device-kind", u->device_kind,
                   DeviceKindHelp("Embedded cluster: the kind of its devices"))
      ->capture_default_str();
  ucmd->add_option("--device-threads", u->device_threads,
                   "Embedded cluster: 0 (default) runs each device on a thread of its own; N runs every device as a fiber of one pool of N threads, so a device that waits (a delay, a collective) parks a fiber instead of switching threads")
      ->check(CLI::Range(0, 1024));
  ucmd->add_flag("--json", u->json, "One JSON object per controller");
  ucmd->add_option("--timeout", u->timeout_s, "Seconds to wait for a distributed cluster")
      ->check(CLI::PositiveNumber)->check(Finite());
  ucmd->callback([u, ucmd, exit_code] {
    for (const char* flag : {"--hosts", "--device-threads", "--device-kind"}) {
      if (u->cluster != "local" && ucmd->count(flag) > 0) {
        std::fprintf(stderr,
                     "causeway bench utilization: %s applies to the embedded cluster only\n",
                     flag);
        *exit_code = kExitUsage;
        return;
      }
    }
    if (u->cluster != "local" && u->controller != "single") {
      std::fprintf(stderr, "causeway bench utilization: %s\n", kMultiIsLocal);
      *exit_code = kExitUsage;
      return;
    }
    *exit_code = RunUtilization(*u);
  });
}

}  // namespace causeway::tools
