// Microbenchmark of DeviceStream (causeway/worker/device_stream.h): the
// latency from enqueueing a trivial launch (negate of one f32, input ready)
// to its output being ready, one launch in flight at a time. It is the fixed
// cost of a launch on an idle device — a wake-up of the device thread, the
// dependency checks, the kernel, and a wake-up of the waiter — that short
// computations pay in full.

#include <memory>

#include "benchmark/benchmark.h"
#include "causeway/backend/cpu/device.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/ir/builder.h"
#include "causeway/store/buffer.h"
#include "causeway/store/device_memory.h"
#include "causeway/worker/device_stream.h"
#include "causeway/base/trace.h"

namespace causeway {
namespace {

void BM_EnqueueToCompletion(benchmark::State& state) {
  const ir::Shape scalar(ir::DType::kF32, {});
  ir::FunctionBuilder b("negate");
  absl::StatusOr<ir::Function> f = b.Build({b.Neg(b.Parameter(scalar))});
  CW_CHECK_OK(f.status());
  absl::StatusOr<std::shared_ptr<const backend::cpu::Executable>> exe =
      backend::cpu::Compile(*f);
  CW_CHECK_OK(exe.status());

  const DeviceInfo device{DeviceId(0), HostId(0), IslandId(0), 0, 1 << 20};
  absl::StatusOr<std::unique_ptr<backend::Device>> cpu =
      backend::cpu::CreateDevice({device.id, 0, 0});
  CW_CHECK_OK(cpu.status());
  DeviceMemory memory(device.id, device.memory_bytes, cpu->get());
  TraceRecorder trace(/*enabled=*/false);
  DeviceStream stream(device, cpu->get(), Clock::Real(), &trace, nullptr);
  const ClientId owner(0);
  BufferRef input = DeviceBuffer::Allocate(&memory, scalar, owner);
  CW_CHECK_OK(input->allocated().Await().status());
  *reinterpret_cast<float*>(input->data()) = 1.f;
  input->SetReady(absl::OkStatus());

  int64_t run = 0;
  for (auto _ : state) {
    BufferRef output = DeviceBuffer::Allocate(&memory, scalar, owner);
    Launch launch;
    launch.info = LaunchInfo{RunId(++run), 0, "negate", device.id, device.host};
    launch.executable = exe->get();
    launch.keep_alive = *exe;
    launch.inputs = {input};
    launch.outputs = {output};
    stream.Enqueue(std::move(launch));
    if (const absl::StatusOr<Unit>& r = output->ready().Await(); !r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
  }
  stream.Shutdown();
}
BENCHMARK(BM_EnqueueToCompletion)->UseRealTime();

}  // namespace
}  // namespace causeway
