// Microbenchmarks of the gRPC wire codec (causeway/transport/grpc/wire_codec.h):
// converting runs, literals and plans to and from their protobuf form, work
// done on every message of the distributed cluster's control and data paths.

#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "causeway/base/check.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/literal.h"
#include "causeway/transport/grpc/wire_codec.h"

namespace causeway::wire {
namespace {

// A run of a one-parameter, one-output program, as the scheduler forwards it.
RunRequest SmallRun() {
  const int64_t base = ClientIdBase(ClientId(3));
  return RunRequest{ProgramId(base + 7), RunId(base + 1234), ClientId(3),
                    {ArrayId(base + 100)}, {ArrayId(base + 101)}, 42};
}

// Encoding one run into a fresh message: paid per run by the client and the
// scheduler (for each host) on every step.
void BM_EncodeRun(benchmark::State& state) {
  const RunRequest run = SmallRun();
  for (auto _ : state) {
    Run wire;
    EncodeRun(run, &wire);
    benchmark::DoNotOptimize(wire);
  }
}
BENCHMARK(BM_EncodeRun);

// Decoding (and validating) one run: paid per run by the coordinator and each host.
void BM_DecodeRun(benchmark::State& state) {
  Run wire;
  EncodeRun(SmallRun(), &wire);
  for (auto _ : state) {
    absl::StatusOr<RunRequest> run = DecodeRun(wire);
    benchmark::DoNotOptimize(run);
  }
}
BENCHMARK(BM_DecodeRun);

// Encoding then decoding an f32 literal of state.range(0) bytes: what a Put
// or Fetch costs in copies on each side of the wire.
void BM_LiteralRoundTrip(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  ir::Literal literal(ir::Shape(ir::DType::kF32, {bytes / 4}));
  for (auto _ : state) {
    Literal wire;
    EncodeLiteral(literal, &wire);
    absl::StatusOr<ir::Literal> decoded = DecodeLiteral(wire);
    benchmark::DoNotOptimize(decoded);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_LiteralRoundTrip)->Arg(1 << 10)->Arg(1 << 20);

// The hand-built plan of wire_codec_test.cc, and its helpers.
std::shared_ptr<const backend::cpu::Executable> Compile(absl::StatusOr<ir::Function> f) {
  CW_CHECK_OK(f.status());
  auto exe = backend::cpu::Executable::Compile(*f);
  CW_CHECK_OK(exe.status());
  return *exe;
}

causeway::PlanValue Value(const causeway::Mesh& mesh, causeway::Sharding sharding, int64_t host) {
  causeway::PlanValue v;
  v.shape = ir::Shape(ir::DType::kF32, {4, 4});
  v.mesh = mesh;
  v.sharding = std::move(sharding);
  v.shard_shape = v.sharding.ShardShape(v.shape, mesh);
  v.shard_hosts = {HostId(host), HostId(host)};
  v.shard_local_device = {0, 1};
  return v;
}

// f32[4,4] row-sharded on host 0's two devices, scaled twice (one shared
// executable), resharded by columns onto host 1's two devices, negated.
ProgramPlan TwoMeshPlan() {
  const causeway::Mesh a(MeshId(1), IslandId(0), {{"data", 2}}, {DeviceId(0), DeviceId(1)});
  const causeway::Mesh b(MeshId(2), IslandId(0), {{"x", 2}}, {DeviceId(2), DeviceId(3)});
  const causeway::Sharding rows({{"data"}, {}});
  const causeway::Sharding cols({{}, {"x"}});
  ProgramPlan plan;
  plan.id = ProgramId(7);
  plan.client = ClientId(3);
  plan.name = "two_meshes";
  plan.values = {Value(a, rows, 0), Value(a, rows, 0), Value(a, rows, 0), Value(b, cols, 1),
                 Value(b, cols, 1)};
  plan.parameters = {0};
  plan.outputs = {4};
  ir::FunctionBuilder sb("scale");
  ir::Value x = sb.Parameter(ir::Shape(ir::DType::kF32, {2, 4}));
  auto scale = Compile(sb.Build({sb.Mul(x, sb.Full(2, {2, 4}))}));
  causeway::PlanNode call{PlanNodeKind::kCall, "scale", {0}, {1}, scale, false, {}};
  plan.nodes.push_back(call);
  call.inputs = {1};
  call.outputs = {2};
  plan.nodes.push_back(call);
  causeway::PlanNode reshard{PlanNodeKind::kReshard, "reshard", {2}, {3}, nullptr, false, {}};
  for (int d = 0; d < 2; ++d) {
    reshard.pieces.emplace_back();
    for (int s = 0; s < 2; ++s) {
      reshard.pieces.back().push_back(causeway::ReshardPiece{s, {0, 2 * d}, {2 * s, 0}, {2, 2}});
    }
  }
  plan.nodes.push_back(reshard);
  ir::FunctionBuilder nb("negate");
  auto negate = Compile(nb.Build({nb.Neg(nb.Parameter(ir::Shape(ir::DType::kF32, {4, 2})))}));
  plan.nodes.push_back(
      causeway::PlanNode{PlanNodeKind::kCall, "negate", {3}, {4}, negate, false, {}});
  plan.islands = {IslandId(0)};
  plan.hosts = {HostId(0), HostId(1)};
  plan.hosts_by_island = {{HostId(0), HostId(1)}};
  return plan;
}

// Encoding a small plan (functions serialised once each): paid once per
// program and per scheduler and host it is registered with.
void BM_EncodePlan(benchmark::State& state) {
  const ProgramPlan plan = TwoMeshPlan();
  for (auto _ : state) {
    Plan wire;
    EncodePlan(plan, &wire);
    benchmark::DoNotOptimize(wire);
  }
}
BENCHMARK(BM_EncodePlan);

// Decoding and validating that plan: kSkip as a scheduler does, kCompile
// (deserialise and compile each function) as a host does.
void BM_DecodePlan(benchmark::State& state) {
  const CompileMode mode = state.range(0) == 0 ? CompileMode::kSkip : CompileMode::kCompile;
  state.SetLabel(mode == CompileMode::kSkip ? "kSkip" : "kCompile");
  Plan wire;
  EncodePlan(TwoMeshPlan(), &wire);
  for (auto _ : state) {
    auto plan = DecodePlan(wire, mode);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_DecodePlan)->ArgName("compile")->Arg(0)->Arg(1);

}  // namespace
}  // namespace causeway::wire
