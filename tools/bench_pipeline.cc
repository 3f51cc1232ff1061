// `causeway bench pipeline`: a K-stage pipeline, each stage on its own host
// with a transfer between stages, fed M micro-batches per run. Shows the
// control plane running ahead of the data plane: with parallel dispatch
// every launch of a run is prepared before the first stage finishes, so the
// stages overlap; sequential dispatch prepares each node only after its
// predecessors are done.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/ir/builder.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace causeway::tools {
namespace {

struct PipelineFlags {
  int stages = 16;
  int microbatches = 64;
  int64_t compute_us = 100;
  int runs = 4;
  std::string dispatch = "parallel";
  bool json = false;
};

struct PipelineResult {
  double seconds = 0;
  double microbatches_per_second = 0;
};

absl::StatusOr<PipelineResult> RunPipeline(const PipelineFlags& f) {
  LocalClusterOptions co;
  co.islands = 1;
  co.hosts_per_island = f.stages;
  co.devices_per_host = 1;
  CW_ASSIGN_OR_RETURN(auto cluster, LocalCluster::Create(co));
  ClientOptions options;
  options.dispatch = f.dispatch == "parallel" ? DispatchMode::kParallel : DispatchMode::kSequential;
  CW_ASSIGN_OR_RETURN(auto client, Client::Connect(cluster.get(), options));
  std::vector<Mesh> meshes;
  std::vector<CompiledFunction> stage;
  const Sharding replicated = Sharding::Replicated(1);
  for (int s = 0; s < f.stages; ++s) {
    MeshRequest request;
    request.axes = {{"x", 1}};
    request.devices = {DeviceId(s)};
    CW_ASSIGN_OR_RETURN(Mesh mesh, client->AllocateMesh(request));
    ir::FunctionBuilder b(absl::StrCat("stage", s));
    ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {1}));
    ir::Value one = b.Broadcast(b.ConstantF32(1.0f), {1}, {});
    CW_ASSIGN_OR_RETURN(ir::Function fn, b.Build({b.Delay(b.Add(x, one), f.compute_us)}));
    CW_ASSIGN_OR_RETURN(CompiledFunction cf, client->Compile(fn, mesh, {}));
    meshes.push_back(mesh);
    stage.push_back(cf);
  }
  ProgramBuilder pb = client->NewProgram("pipeline");
  CW_ASSIGN_OR_RETURN(TracedArray in,
                      pb.Parameter(ir::Shape(ir::DType::kF32, {1}), meshes[0], replicated));
  std::vector<TracedArray> outs;
  for (int m = 0; m < f.microbatches; ++m) {
    TracedArray v = in;
    for (int s = 0; s < f.stages; ++s) {
      CW_ASSIGN_OR_RETURN(auto o, pb.Call(stage[s], {v}));
      v = o[0];
    }
    outs.push_back(v);
  }
  CW_ASSIGN_OR_RETURN(Program program, pb.Build(outs));
  CW_ASSIGN_OR_RETURN(Array x, client->Put(ir::Literal::F32({1}, {0.0f}), meshes[0], replicated));
  // Warm-up run.
  CW_ASSIGN_OR_RETURN(auto warm, program.Run({x}));
  for (const Array& a : warm) CW_RETURN_IF_ERROR(a.Ready().Await().status());

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<Array>> results;
  for (int r = 0; r < f.runs; ++r) {
    CW_ASSIGN_OR_RETURN(auto out, program.Run({x}));
    results.push_back(std::move(out));
  }
  for (const auto& run : results) {
    for (const Array& a : run) CW_RETURN_IF_ERROR(a.Ready().Await().status());
  }
  PipelineResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.microbatches_per_second = f.runs * f.microbatches / result.seconds;
  auto last = results.back().back().Fetch().Await();
  CW_RETURN_IF_ERROR(last.status());
  if (last->values<float>()[0] != static_cast<float>(f.stages)) {
    return absl::InternalError("pipeline computed a wrong value");
  }
  client->Disconnect();
  return result;
}

}  // namespace

void AddBenchPipelineCommand(CLI::App* bench, int* exit_code) {
  auto f = std::make_shared<PipelineFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "pipeline", "A K-stage pipeline, one stage per host, with parallel or sequential dispatch");
  cmd->add_option("--stages", f->stages, "Stages (one host each)")->check(CLI::Range(1, 256));
  cmd->add_option("--microbatches", f->microbatches, "Micro-batches per run")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--compute-us", f->compute_us, "Computation per stage and micro-batch, us")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  cmd->add_option("--runs", f->runs, "Runs dispatched back to back")->check(CLI::Range(1, 10000));
  cmd->add_option("--dispatch", f->dispatch, "parallel | sequential")
      ->check(CLI::IsMember({"parallel", "sequential"}));
  cmd->add_flag("--json", f->json, "One JSON object");
  cmd->callback([f, exit_code] {
    absl::StatusOr<PipelineResult> r = RunPipeline(*f);
    if (!r.ok()) {
      std::fprintf(stderr, "causeway bench pipeline: %s\n", r.status().ToString().c_str());
      *exit_code = kExitRuntime;
      return;
    }
    const double ideal = f->compute_us > 0 ? 1e6 / f->compute_us : 0;
    nlohmann::json j = {{"bench", "pipeline"},
                        {"stages", f->stages},
                        {"microbatches", f->microbatches},
                        {"compute_us", f->compute_us},
                        {"runs", f->runs},
                        {"dispatch", f->dispatch},
                        {"seconds", r->seconds},
                        {"microbatches_per_second", r->microbatches_per_second},
                        {"ideal_microbatches_per_second", ideal},
                        {"ratio_to_ideal", ideal > 0 ? r->microbatches_per_second / ideal : 0}};
    if (f->json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("pipeline %d stages x %d micro-batches x %lld us, %s dispatch: %.0f "
                  "micro-batches/s = %.1f%% of the ideal 1/D\n",
                  f->stages, f->microbatches, (long long)f->compute_us, f->dispatch.c_str(),
                  r->microbatches_per_second,
                  ideal > 0 ? 100 * r->microbatches_per_second / ideal : 0.0);
    }
  });
}

}  // namespace causeway::tools
