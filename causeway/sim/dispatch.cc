#include "causeway/sim/dispatch.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/builder.h"
#include "causeway/worker/host_executor.h"

namespace causeway {
namespace {

ir::Value Step(ir::FunctionBuilder& b, ir::Value x, const DispatchProgramOptions& o) {
  if (o.compute_us > 0) x = b.Delay(x, o.compute_us);
  ir::Value one = b.Broadcast(b.ConstantF32(1.0f), {1}, {});
  if (o.computation == Computation::kAdd) return b.Add(x, one);
  ir::Value inv = b.Broadcast(b.ConstantF32(1.0f / static_cast<float>(o.devices)), {1}, {});
  return b.Add(b.Mul(b.AllReduce(x, {"x"}), inv), one);
}

absl::StatusOr<ir::Function> StepFunction(const DispatchProgramOptions& o, int steps) {
  ir::FunctionBuilder b(steps == 1 ? "step" : absl::StrCat("fused_", steps));
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {1}));
  for (int i = 0; i < steps; ++i) x = Step(b, x, o);
  return b.Build({x});
}

}  // namespace

const char* Name(DispatchGranularity mode) {
  switch (mode) {
    case DispatchGranularity::kOpByOp: return "opbyop";
    case DispatchGranularity::kChained: return "chained";
    case DispatchGranularity::kFused: return "fused";
  }
  return "?";
}

const char* Name(Controller controller) {
  return controller == Controller::kSingle ? "single" : "multi";
}

const char* Name(Computation computation) {
  return computation == Computation::kAdd ? "add" : "allreduce-add";
}

absl::StatusOr<DispatchProgram> BuildDispatchProgram(Client& client,
                                                     const DispatchProgramOptions& o) {
  if (o.chain < 1) return absl::InvalidArgumentError("--chain must be >= 1");
  if (o.compute_us < 0) return absl::InvalidArgumentError("the computation time must be >= 0");
  DispatchProgram d;
  CW_ASSIGN_OR_RETURN(Mesh mesh, client.AllocateMesh({{"x", o.devices}}));
  CW_ASSIGN_OR_RETURN(ir::Function step, StepFunction(o, 1));
  CW_ASSIGN_OR_RETURN(d.step, client.Compile(step, mesh, {}));
  const Sharding replicated = Sharding::Replicated(1);
  ProgramBuilder pb = client.NewProgram(Name(o.mode));
  CW_ASSIGN_OR_RETURN(TracedArray v, pb.Parameter(ir::Shape(ir::DType::kF32, {1}), mesh, replicated));
  switch (o.mode) {
    case DispatchGranularity::kOpByOp: {
      CW_ASSIGN_OR_RETURN(auto out, pb.Call(d.step, {v}));
      v = out[0];
      d.computations_per_unit = 1;
      break;
    }
    case DispatchGranularity::kChained:
      for (int i = 0; i < o.chain; ++i) {
        CW_ASSIGN_OR_RETURN(auto out, pb.Call(d.step, {v}));
        v = out[0];
      }
      d.computations_per_unit = o.chain;
      break;
    case DispatchGranularity::kFused: {
      CW_ASSIGN_OR_RETURN(ir::Function fused, StepFunction(o, o.chain));
      CW_ASSIGN_OR_RETURN(CompiledFunction f, client.Compile(fused, mesh, {}));
      CW_ASSIGN_OR_RETURN(auto out, pb.Call(f, {v}));
      v = out[0];
      d.computations_per_unit = o.chain;
      break;
    }
  }
  CW_ASSIGN_OR_RETURN(d.program, pb.Build({v}));
  CW_ASSIGN_OR_RETURN(d.input, client.Put(ir::Literal::F32({1}, {0.0f}), mesh, replicated));
  return d;
}

}  // namespace causeway

namespace causeway::sim {
namespace {

struct Experiment {
  std::unique_ptr<SimCluster> cluster;
  std::unique_ptr<Client> client;
  DispatchProgram program;
  Array last;              // single controller: the newest output
  int64_t next_step = 0;   // multi controller: the next SPMD step
};

// The single controller: user code calls Run (or Call) `units` times, each
// on the previous output, never waiting; each call costs the client thread.
absl::Status RunSingle(Experiment& e, DispatchGranularity mode, int64_t units) {
  CW_RETURN_IF_ERROR(e.cluster->CallRepeatedly(units, [&]() -> absl::Status {
    CW_ASSIGN_OR_RETURN(std::vector<Array> out,
                        mode == DispatchGranularity::kOpByOp
                            ? e.client->Call(e.program.step, {e.last})
                            : e.program.program.Run({e.last}));
    e.last = out[0];
    return absl::OkStatus();
  }));
  return e.cluster->Await(e.last.Ready(), "the simulated run");
}

// The multi-controller baseline: each host's own loop enqueues every step
// onto its own executor (ids from the step number, as SPMD programs agree
// without talking) and waits for its shard of the last output.
absl::Status RunMulti(Experiment& e, int64_t units) {
  SimCluster& c = *e.cluster;
  const std::shared_ptr<const ProgramPlan> plan = e.program.program.plan();
  const int64_t id_base = ClientIdBase(e.client->id()) | (int64_t{1} << 38);
  const int64_t first = e.next_step;
  e.next_step += units;
  const PlanValue& out = plan->values[plan->outputs[0]];
  std::vector<Future<Unit>> done;
  for (HostId h : plan->hosts) {
    int shard = -1;
    for (size_t s = 0; s < out.shard_hosts.size() && shard < 0; ++s) {
      if (out.shard_hosts[s] == h) shard = static_cast<int>(s);
    }
    if (shard < 0) return absl::InternalError(absl::StrCat(h.ToString(), " holds no shard"));
    auto step = std::make_shared<std::function<void(int64_t)>>();
    auto finished = std::make_shared<Promise<Unit>>();
    done.push_back(finished->future());
    *step = [&c, h, shard, first, units, id_base, step, finished, input = e.program.input.id(),
             program = plan->id, client = e.client->id()](int64_t k) {
      if (k == first + units) {
        c.executor(h)->AwaitShard(ArrayId(id_base + k - 1), shard).OnReady(
            [finished](const absl::StatusOr<Unit>& r) { finished->Set(r); });
        *step = nullptr;  // breaks the cycle
        return;
      }
      RunRequest run;
      run.program = program;
      run.run = RunId(id_base + k);
      run.client = client;
      const ArrayId prev = k == 0 ? input : ArrayId(id_base + k - 1);
      run.arguments = {prev};
      run.outputs = {ArrayId(id_base + k)};
      std::vector<ArrayId> release;
      if (k > 0) release.push_back(prev);
      c.HostEnqueue(h, std::move(run), std::move(release), [step, k] {
        if (*step) (*step)(k + 1);
      });
    };
    (*step)(first);
  }
  return c.Await(WhenAll(done), "the simulated SPMD loops");
}

}  // namespace

absl::StatusOr<SimDispatchResult> SimulateDispatch(const SimDispatchOptions& o) {
  const SimClusterOptions& co = o.cluster;
  const int devices = co.hosts_per_island * co.devices_per_host;
  if (devices != o.program.devices) {
    return absl::InvalidArgumentError(absl::StrCat("the mesh takes every device of island 0 (",
                                                   devices, "); asked for ", o.program.devices));
  }
  if (o.units < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("at least one dispatch, and no negative warm-up");
  }
  const auto wall_start = std::chrono::steady_clock::now();
  Experiment e;
  CW_ASSIGN_OR_RETURN(e.cluster, SimCluster::Create(co));
  SimCluster* c = e.cluster.get();
  ClientOptions client_options;
  client_options.send_executor = [c](std::function<void()> send) {
    c->PostClientSend(std::move(send));
  };
  CW_ASSIGN_OR_RETURN(e.client, Client::Connect(c, client_options));
  CW_ASSIGN_OR_RETURN(e.program, BuildDispatchProgram(*e.client, o.program));
  e.last = e.program.input;
  auto run = [&](int64_t units) {
    return o.controller == Controller::kSingle ? RunSingle(e, o.program.mode, units)
                                               : RunMulti(e, units);
  };
  if (o.warmup > 0) CW_RETURN_IF_ERROR(run(o.warmup));
  // From the first measured dispatch to the last launch it caused: the
  // client's waits for its output after the warm-up and at the end (a read
  // of every shard) are not part of the throughput.
  c->ResetCounters();
  const int64_t start = c->loop().now();
  CW_RETURN_IF_ERROR(run(o.units));
  const int64_t end = c->last_device_end();
  SimDispatchResult r;
  r.computations = o.units * e.program.computations_per_unit;
  r.seconds = static_cast<double>(end - start) / 1e9;
  r.computations_per_second = r.seconds > 0 ? r.computations / r.seconds : 0;
  r.compute_fraction = r.seconds > 0 ? static_cast<double>(r.computations) *
                                           static_cast<double>(o.program.compute_us) /
                                           (1e6 * r.seconds)
                                     : 0;
  r.hosts = static_cast<int>(e.program.program.plan()->hosts.size());
  r.devices = devices;
  r.counters = c->counters();
  r.counters_seconds = static_cast<double>(c->loop().now() - start) / 1e9;
  e.last = Array();
  e.program = DispatchProgram{};
  e.client->Disconnect();
  e.client.reset();
  r.profile = c->profile();
  e.cluster.reset();
  r.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return r;
}

}  // namespace causeway::sim
