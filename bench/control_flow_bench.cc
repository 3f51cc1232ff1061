// Microbenchmark of structured control flow on each device kind this build
// has: one launch of a `while` loop that counts to N (an i32 carry, the
// condition `i < N`, the body `i + 1`), through Device::Launch, waited for.
// Reported per iteration: the cpu kind runs the loop inside one call of its
// executable; the vulkan kind launches the condition and the body from the
// host and reads the condition back every iteration (docs/VULKAN.md,
// "Control flow"), so this is what a loop costs on each.
//   control_flow_bench --benchmark_filter=vulkan   (lavapipe without a GPU)

#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "causeway/backend/builtin_kinds.h"
#include "causeway/backend/device.h"
#include "causeway/backend/executable.h"
#include "causeway/base/check.h"
#include "causeway/ir/builder.h"

namespace causeway {
namespace {

ir::Function CountTo(int32_t n) {
  const ir::Shape i32(ir::DType::kI32, {});
  ir::FunctionBuilder cb("below");
  ir::Value ci = cb.Parameter(i32);
  absl::StatusOr<ir::Function> cond =
      cb.Build({cb.Compare(ci, cb.ConstantI32(n), ir::Comparison::kLt)});
  CW_CHECK_OK(cond.status());
  ir::FunctionBuilder bb("inc");
  ir::Value bi = bb.Parameter(i32);
  absl::StatusOr<ir::Function> body = bb.Build({bb.Add(bi, bb.ConstantI32(1))});
  CW_CHECK_OK(body.status());
  ir::FunctionBuilder b("count");
  ir::Value x = b.Parameter(i32);
  absl::StatusOr<ir::Function> f = b.Build({b.While(*cond, *body, {x})[0]});
  CW_CHECK_OK(f.status());
  return *std::move(f);
}

void BM_WhileLoop(benchmark::State& state, const std::string& kind_name) {
  backend::RegisterBuiltinKinds();
  absl::StatusOr<const backend::DeviceKind*> kind = backend::FindDeviceKind(kind_name);
  if (!kind.ok()) {
    state.SkipWithError(kind.status().ToString().c_str());
    return;
  }
  absl::StatusOr<std::unique_ptr<backend::Device>> device =
      (*kind)->CreateDevice(backend::DeviceSpec{DeviceId(0), 0, 0});
  if (!device.ok()) {
    state.SkipWithError(device.status().ToString().c_str());
    return;
  }
  const int32_t n = static_cast<int32_t>(state.range(0));
  absl::StatusOr<std::shared_ptr<const backend::Executable>> exe = (*kind)->Compile(CountTo(n));
  CW_CHECK_OK(exe.status());
  backend::Device& d = **device;
  auto in = d.Allocate(4);
  auto out = d.Allocate(4);
  CW_CHECK_OK(in.status());
  CW_CHECK_OK(out.status());
  const int32_t zero = 0;
  const backend::BoxCopy box = backend::BoxCopy::Flat(0, 4, 0, 4, 4);
  CW_CHECK_OK(backend::Await(
      [&](backend::Completion c) { d.CopyIn(&zero, **in, box, std::move(c)); }));
  const backend::DeviceAllocation* ins[] = {in->get()};
  backend::DeviceAllocation* outs[] = {out->get()};
  for (auto _ : state) {
    const absl::Status s = backend::Await([&](backend::Completion c) {
      d.Launch(**exe, ins, outs, backend::RunContext{}, std::move(c));
    });
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  int32_t got = -1;
  CW_CHECK_OK(backend::Await(
      [&](backend::Completion c) { d.CopyOut(**out, &got, box, std::move(c)); }));
  CW_CHECK(got == n) << "the loop counted to " << got << ", not " << n;
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["per_iteration"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * n,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
      benchmark::Counter::OneK::kIs1000);
}

BENCHMARK_CAPTURE(BM_WhileLoop, cpu, std::string("cpu"))
    ->Arg(1)->Arg(100)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_WhileLoop, vulkan, std::string("vulkan"))
    ->Arg(1)->Arg(100)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace causeway
