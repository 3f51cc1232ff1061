#include "causeway/sim/pipeline.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/builder.h"
#include "causeway/models/gpt_pipeline.h"

namespace causeway {

absl::StatusOr<PipelineProgram> BuildPipelineProgram(Client& client,
                                                     const PipelineProgramOptions& f) {
  const int S = f.stages;
  const int M = f.microbatches;
  if (S < 1 || M < 1 || f.forward_us < 0 || f.backward_us < 0 || f.activation_kb < 0) {
    return absl::InvalidArgumentError(
        "a pipeline needs stages and micro-batches, and no negative times or sizes");
  }
  const int64_t n = std::max<int64_t>(1, f.activation_kb * 1024 / 4);
  const ir::Shape act(ir::DType::kF32, {n});
  const Sharding replicated = Sharding::Replicated(1);
  std::vector<Mesh> meshes;
  std::vector<CompiledFunction> forward, backward;
  for (int s = 0; s < S; ++s) {
    MeshRequest request;
    request.axes = {{"x", 1}};
    request.devices = {DeviceId(s)};
    CW_ASSIGN_OR_RETURN(Mesh mesh, client.AllocateMesh(request));
    ir::FunctionBuilder fb(absl::StrCat("stage", s, "_forward"));
    ir::Value x = fb.Parameter(act);
    CW_ASSIGN_OR_RETURN(ir::Function fwd,
                        fb.Build({fb.Delay(fb.Add(x, fb.Full(1.0f, {n})), f.forward_us)}));
    ir::FunctionBuilder bb(absl::StrCat("stage", s, "_backward"));
    ir::Value saved = bb.Parameter(act);
    ir::Value g = bb.Parameter(act);
    ir::Value dx = bb.Add(bb.Add(g, bb.Full(1.0f, {n})), bb.Mul(saved, bb.Full(0.0f, {n})));
    CW_ASSIGN_OR_RETURN(ir::Function bwd, bb.Build({bb.Delay(dx, f.backward_us)}));
    CW_ASSIGN_OR_RETURN(CompiledFunction cf,
                        client.Compile(fwd, mesh, {{replicated}, {replicated}}));
    CW_ASSIGN_OR_RETURN(CompiledFunction cb,
                        client.Compile(bwd, mesh, {{replicated, replicated}, {replicated}}));
    meshes.push_back(mesh);
    forward.push_back(cf);
    backward.push_back(cb);
  }
  ProgramBuilder pb = client.NewProgram("pipeline_step");
  CW_ASSIGN_OR_RETURN(TracedArray in, pb.Parameter(act, meshes[0], replicated));
  // inputs[s][m]: stage s's input of micro-batch m; outputs of the last
  // stage's forward are its backward's incoming gradient.
  std::vector<std::vector<TracedArray>> inputs(S + 1, std::vector<TracedArray>(M));
  std::vector<std::vector<TracedArray>> grads(S + 1, std::vector<TracedArray>(M));
  for (int m = 0; m < M; ++m) inputs[0][m] = in;
  const auto schedule =
      f.one_f_one_b ? models::PipelineSchedule::k1F1B : models::PipelineSchedule::kGPipe;
  for (const models::PipelineOp& op : models::PipelineTraceOrder(S, M, schedule)) {
    const int64_t s = op.stage;
    const int64_t m = op.microbatch;
    if (op.forward) {
      CW_ASSIGN_OR_RETURN(auto out, pb.Call(forward[s], {inputs[s][m]}));
      inputs[s + 1][m] = out[0];
      if (s == S - 1) grads[S][m] = out[0];
    } else {
      CW_ASSIGN_OR_RETURN(auto out, pb.Call(backward[s], {inputs[s][m], grads[s + 1][m]}));
      grads[s][m] = out[0];
    }
  }
  PipelineProgram p;
  CW_ASSIGN_OR_RETURN(p.program, pb.Build(grads[0]));
  CW_ASSIGN_OR_RETURN(p.input, client.Put(ir::Literal(act), meshes[0], replicated));
  return p;
}

}  // namespace causeway

namespace causeway::sim {

absl::StatusOr<SimPipelineResult> SimulatePipeline(const SimPipelineOptions& o) {
  const int S = o.program.stages;
  if (o.islands < 1 || S % o.islands != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(S, " stages do not split evenly over ", o.islands, " islands"));
  }
  if (o.steps < 1) return absl::InvalidArgumentError("at least one step");
  const auto wall_start = std::chrono::steady_clock::now();
  SimClusterOptions co = o.cluster;
  co.islands = o.islands;
  co.hosts_per_island = S / o.islands;
  co.devices_per_host = 1;
  CW_ASSIGN_OR_RETURN(std::unique_ptr<SimCluster> cluster, SimCluster::Create(co));
  SimCluster* c = cluster.get();
  ClientOptions options;
  options.send_executor = [c](std::function<void()> send) { c->PostClientSend(std::move(send)); };
  CW_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(c, options));
  CW_ASSIGN_OR_RETURN(PipelineProgram p, BuildPipelineProgram(*client, o.program));
  // Runs `steps` steps back to back (each call on the client's thread) and
  // waits for every output of the last.
  auto run = [&](int steps) -> absl::Status {
    std::vector<Array> last;
    CW_RETURN_IF_ERROR(c->CallRepeatedly(steps, [&]() -> absl::Status {
      CW_ASSIGN_OR_RETURN(last, p.program.Run({p.input}));
      return absl::OkStatus();
    }));
    std::vector<Future<Unit>> ready;
    for (const Array& a : last) ready.push_back(a.Ready());
    return c->Await(WhenAll(ready), "the simulated pipeline");
  };
  CW_RETURN_IF_ERROR(run(1));
  const int64_t messages = c->counters().messages;
  const int64_t start = c->loop().now();
  CW_RETURN_IF_ERROR(run(o.steps));
  SimPipelineResult r;
  r.step_seconds = static_cast<double>(c->loop().now() - start) / 1e9 / o.steps;
  r.bound_seconds = static_cast<double>(o.program.microbatches + S - 1) *
                    static_cast<double>(o.program.forward_us + o.program.backward_us) / 1e6;
  r.messages = c->counters().messages - messages;
  p = PipelineProgram{};
  client->Disconnect();
  client.reset();
  cluster.reset();
  r.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return r;
}

}  // namespace causeway::sim
