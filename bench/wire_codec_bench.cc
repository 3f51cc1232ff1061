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
#include "causeway/testing/two_mesh_plan.h"
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

using ::causeway::testing::TwoMeshPlan;

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

// Decoding and validating that plan: kSkip as a scheduler does, kParse
// (deserialise and verify each function) as a host does before compiling.
void BM_DecodePlan(benchmark::State& state) {
  const FunctionMode mode = state.range(0) == 0 ? FunctionMode::kSkip : FunctionMode::kParse;
  state.SetLabel(mode == FunctionMode::kSkip ? "kSkip" : "kParse");
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
BENCHMARK(BM_DecodePlan)->ArgName("parse")->Arg(0)->Arg(1);

}  // namespace
}  // namespace causeway::wire
