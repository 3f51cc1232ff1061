#include "causeway/backend/cpu/device.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/worker/device_stream.h"

#include <memory>

#include "causeway/base/clock.h"
#include "causeway/ir/builder.h"
#include "causeway/store/buffer.h"
#include "causeway/store/device_memory.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/base/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

class DeviceStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ir::FunctionBuilder b("negate");
    ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.Neg(b.Parameter(scalar_))}));
    ASSERT_OK_AND_ASSIGN(negate_, backend::cpu::Compile(f));
  }

  BufferRef Ready(float value) {
    BufferRef b = DeviceBuffer::Allocate(&memory_, scalar_, owner_);
    EXPECT_OK(b->allocated().Await().status());
    *reinterpret_cast<float*>(b->data()) = value;
    b->SetReady(absl::OkStatus());
    return b;
  }

  Launch Negate(int64_t run, BufferRef in, BufferRef out) {
    Launch launch;
    launch.info = LaunchInfo{RunId(run), 0, "negate", device_.id, device_.host};
    launch.executable = negate_.get();
    launch.keep_alive = negate_;
    launch.inputs = {std::move(in)};
    launch.outputs = {std::move(out)};
    return launch;
  }

  const ir::Shape scalar_{ir::DType::kF32, {}};
  const DeviceInfo device_{DeviceId(0), HostId(0), IslandId(0), 0, 1 << 20};
  const ClientId owner_{0};
  std::unique_ptr<backend::Device> cpu_ = *backend::cpu::CreateDevice({device_.id, 0, 0});
  DeviceMemory memory_{device_.id, device_.memory_bytes, cpu_.get()};
  TraceRecorder trace_{/*enabled=*/false};
  std::shared_ptr<const backend::cpu::Executable> negate_;
};

// A launch whose input never becomes ready (a piece no host sends) fails
// once it has waited its input timeout at the head of the queue, naming
// why, and the device goes on with the launches behind it.
TEST_F(DeviceStreamTest, AnInputThatNeverComesFailsItsLaunchAndFreesTheDevice) {
  DeviceStream stream(device_, cpu_.get(), Clock::Real(), &trace_, nullptr,
                      absl::Milliseconds(200));
  BufferRef never = DeviceBuffer::Allocate(&memory_, scalar_, owner_);  // never set ready
  BufferRef stuck = DeviceBuffer::Allocate(&memory_, scalar_, owner_);
  BufferRef after = DeviceBuffer::Allocate(&memory_, scalar_, owner_);
  stream.Enqueue(Negate(1, never, stuck));
  stream.Enqueue(Negate(2, Ready(3.f), after));
  EXPECT_THAT(stuck->ready().Await().status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("input 0 was not ready after 200ms")));
  ASSERT_OK(after->ready().Await().status());
  EXPECT_EQ(*reinterpret_cast<const float*>(after->data()), -3.f);
  EXPECT_EQ(stream.stats().failed, 1);
  stream.Shutdown();
}

// The timeout counts from the head of the queue: an input produced by a
// launch ahead of it that runs longer than the timeout is still waited for.
TEST_F(DeviceStreamTest, TheInputTimeoutCountsFromTheHeadOfTheQueue) {
  ir::FunctionBuilder b("slow");
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.Delay(b.Parameter(scalar_), 400000)}));
  ASSERT_OK_AND_ASSIGN(auto slow, backend::cpu::Compile(f));
  DeviceStream stream(device_, cpu_.get(), Clock::Real(), &trace_, nullptr,
                      absl::Milliseconds(200));
  BufferRef middle = DeviceBuffer::Allocate(&memory_, scalar_, owner_);
  BufferRef out = DeviceBuffer::Allocate(&memory_, scalar_, owner_);
  Launch first = Negate(1, Ready(5.f), middle);
  first.executable = slow.get();  // 400 ms, twice the timeout
  first.keep_alive = slow;
  stream.Enqueue(std::move(first));
  stream.Enqueue(Negate(2, middle, out));
  ASSERT_OK(out->ready().Await().status());
  EXPECT_EQ(*reinterpret_cast<const float*>(out->data()), -5.f);
  stream.Shutdown();
}

}  // namespace
}  // namespace causeway
