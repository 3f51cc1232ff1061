// `causeway bench pipeline`: a pipelined training step of S stages and M
// micro-batches, each stage on a host of its own (over one island or
// several), with a forward and a backward pass per micro-batch of known
// length (`delay`), activations of a stated size moved between stages, and
// the gradient sent back. The step is one traced program (GPipe or 1F1B
// order, as GptPipeline traces the model's), run `--steps` times back to
// back per repeat; the median step time is compared with the GPipe bound
// (M + S - 1) x (forward + backward). Parallel dispatch prepares every
// launch of a step when it is dispatched; sequential dispatch prepares a
// node only once its inputs exist (the paper's Fig. 4).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/sim/pipeline.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace causeway::tools {
namespace {

struct PipelineFlags {
  int stages = 4;
  int microbatches = 0;  // 0: 4 x stages
  int64_t forward_us = 1000;
  int64_t backward_us = -1;  // -1: 2 x forward
  int64_t activation_kb = 64;
  std::string schedule = "gpipe";
  int islands = 1;
  double dcn_latency_us = 0;
  double dcn_gbps = 0;
  std::string dispatch = "parallel";
  int device_threads = 0;
  int steps = 4;
  int repeats = 5;
  std::string trace_path;
  bool json = false;
};

struct PipelineResult {
  std::vector<double> step_seconds;  // per repeat
  double median_step_s = 0;
};

absl::StatusOr<PipelineResult> RunPipeline(const PipelineFlags& f) {
  const int S = f.stages;
  const int M = f.microbatches;
  if (S % f.islands != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(S, " stages do not split evenly over ", f.islands, " islands"));
  }
  LocalClusterOptions co;
  co.islands = f.islands;
  co.hosts_per_island = S / f.islands;
  co.devices_per_host = 1;
  co.dcn.latency = absl::Microseconds(f.dcn_latency_us);
  co.dcn.bytes_per_second = f.dcn_gbps * 1e9 / 8;
  co.device_threads = f.device_threads;
  co.trace = !f.trace_path.empty();
  CW_ASSIGN_OR_RETURN(auto cluster, LocalCluster::Create(co));
  // Only the last repeat is traced.
  cluster->trace().SetEnabled(false);
  ClientOptions options;
  options.dispatch = f.dispatch == "parallel" ? DispatchMode::kParallel : DispatchMode::kSequential;
  CW_ASSIGN_OR_RETURN(auto client, Client::Connect(cluster.get(), options));

  PipelineProgramOptions po;
  po.stages = S;
  po.microbatches = M;
  po.forward_us = f.forward_us;
  po.backward_us = f.backward_us;
  po.activation_kb = f.activation_kb;
  po.one_f_one_b = f.schedule == "1f1b";
  CW_ASSIGN_OR_RETURN(PipelineProgram built, BuildPipelineProgram(*client, po));
  Program program = built.program;
  Array x = built.input;
  // Warm-up step.
  CW_ASSIGN_OR_RETURN(auto warm, program.Run({x}));
  for (const Array& a : warm) CW_RETURN_IF_ERROR(a.Ready().Await().status());

  PipelineResult result;
  std::vector<Array> last;
  for (int r = 0; r < f.repeats; ++r) {
    if (r == f.repeats - 1 && co.trace) cluster->trace().SetEnabled(true);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::vector<Array>> runs;
    for (int k = 0; k < f.steps; ++k) {
      CW_ASSIGN_OR_RETURN(auto out, program.Run({x}));
      runs.push_back(std::move(out));
    }
    for (const auto& run : runs) {
      for (const Array& a : run) CW_RETURN_IF_ERROR(a.Ready().Await().status());
    }
    result.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        f.steps);
    last = runs.back();
  }
  if (co.trace) {
    cluster->trace().SetEnabled(false);
    CW_RETURN_IF_ERROR(cluster->trace().WriteChromeJson(f.trace_path));
  }
  // Forward adds 1 per stage, backward 1 per stage: 2 S.
  auto value = last.back().Fetch().Await();
  built = PipelineProgram{};
  CW_RETURN_IF_ERROR(value.status());
  if (value->values<float>()[0] != static_cast<float>(2 * S)) {
    return absl::InternalError("the pipeline computed a wrong value");
  }
  std::vector<double> sorted = result.step_seconds;
  std::sort(sorted.begin(), sorted.end());
  result.median_step_s = sorted[sorted.size() / 2];
  client->Disconnect();
  return result;
}

}  // namespace

void AddBenchPipelineCommand(CLI::App* bench, int* exit_code) {
  auto f = std::make_shared<PipelineFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "pipeline",
      "A pipelined training step: S stages on hosts (or islands), M micro-batches, forward and "
      "backward of known length, against the GPipe bound");
  cmd->add_option("--stages", f->stages, "Stages (one host each)")->check(CLI::Range(1, 256));
  cmd->add_option("--microbatches", f->microbatches, "Micro-batches per step (0: 4 x stages)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--forward-us", f->forward_us, "Forward pass per stage and micro-batch, us")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  cmd->add_option("--backward-us", f->backward_us,
                  "Backward pass per stage and micro-batch, us (-1: 2 x forward)")
      ->check(CLI::Range(int64_t{-1}, int64_t{10'000'000}));
  cmd->add_option("--activation-kb", f->activation_kb,
                  "Activation (and gradient) moved between stages per micro-batch, KiB")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--schedule", f->schedule, "gpipe | 1f1b")
      ->check(CLI::IsMember({"gpipe", "1f1b"}));
  cmd->add_option("--islands", f->islands, "Islands the stages are spread over")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--dcn-latency-us", f->dcn_latency_us, "One-way latency between islands, us")
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_option("--dcn-gbps", f->dcn_gbps, "Bandwidth between islands, Gb/s (0: unlimited)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--dispatch", f->dispatch, "parallel | sequential")
      ->check(CLI::IsMember({"parallel", "sequential"}));
  cmd->add_option("--steps", f->steps, "Steps dispatched back to back per repeat")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--repeats", f->repeats, "Repeats; the median step time is reported")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--device-threads", f->device_threads,
                  "0 (default) runs each stage's device on a thread of its own; N runs every "
                  "device as a fiber of one pool of N threads")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--trace", f->trace_path,
                  "Write a Chrome trace (Perfetto) of the last repeat's steps");
  cmd->add_flag("--json", f->json, "One JSON object");
  cmd->callback([f, exit_code] {
    if (f->microbatches == 0) f->microbatches = 4 * f->stages;
    if (f->backward_us < 0) f->backward_us = 2 * f->forward_us;
    absl::StatusOr<PipelineResult> r = RunPipeline(*f);
    if (!r.ok()) {
      std::fprintf(stderr, "causeway bench pipeline: %s\n", r.status().ToString().c_str());
      *exit_code = r.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                            : kExitRuntime;
      return;
    }
    const double bound_s = static_cast<double>(f->microbatches + f->stages - 1) *
                           static_cast<double>(f->forward_us + f->backward_us) / 1e6;
    const double mb_per_s = f->microbatches / r->median_step_s;
    nlohmann::json j = {{"bench", "pipeline"},
                        {"stages", f->stages},
                        {"microbatches", f->microbatches},
                        {"forward_us", f->forward_us},
                        {"backward_us", f->backward_us},
                        {"activation_kb", f->activation_kb},
                        {"schedule", f->schedule},
                        {"islands", f->islands},
                        {"dcn_latency_us", f->dcn_latency_us},
                        {"dcn_gbps", f->dcn_gbps},
                        {"dispatch", f->dispatch},
                        {"device_threads", f->device_threads},
                        {"steps", f->steps},
                        {"repeats", f->repeats},
                        {"step_seconds", r->step_seconds},
                        {"median_step_s", r->median_step_s},
                        {"gpipe_bound_s", bound_s},
                        {"bound_over_measured", bound_s / r->median_step_s},
                        {"microbatches_per_second", mb_per_s}};
    if (f->json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("pipeline %d stages x %d micro-batches (%s, %lld + %lld us, %lld KiB, %d "
                  "island%s), %s dispatch: step %.2f ms (median of %d), GPipe bound %.2f ms: "
                  "%.1f%% of the bound's throughput; %.0f micro-batches/s\n",
                  f->stages, f->microbatches, f->schedule.c_str(), (long long)f->forward_us,
                  (long long)f->backward_us, (long long)f->activation_kb, f->islands,
                  f->islands > 1 ? "s" : "", f->dispatch.c_str(), r->median_step_s * 1e3,
                  f->repeats, bound_s * 1e3, 100 * bound_s / r->median_step_s, mb_per_s);
    }
  });
}

}  // namespace causeway::tools
