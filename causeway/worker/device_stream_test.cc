#include "causeway/backend/cpu/device.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/testing/arena_kind.h"
#include "causeway/worker/device_stream.h"

#include <atomic>
#include <map>
#include <memory>

#include "causeway/base/clock.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"
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

// A loop whose condition never fails, over one f32.
absl::StatusOr<std::shared_ptr<const backend::cpu::HostExecutable>> CompileSpin() {
  const ir::Shape f32{ir::DType::kF32, {}};
  ir::FunctionBuilder cb("forever");
  ir::Value cx = cb.Parameter(f32);
  CW_ASSIGN_OR_RETURN(ir::Function cond, cb.Build({cb.Compare(cx, cx, ir::Comparison::kEq)}));
  ir::FunctionBuilder bb("count");
  ir::Value bx = bb.Parameter(f32);
  CW_ASSIGN_OR_RETURN(ir::Function body, bb.Build({bb.Add(bx, bb.ConstantF32(1))}));
  ir::FunctionBuilder b("spin");
  ir::Value p = b.Parameter(f32);
  CW_ASSIGN_OR_RETURN(ir::Function spin, b.Build({b.While(cond, body, {p})[0]}));
  return backend::cpu::Compile(spin);
}

// A client that leaves takes its work with it: its running loop ends at its
// next iteration once its flag is set, its queued launches fail without
// running, and another client's launch behind them runs.
TEST_F(DeviceStreamTest, ACancelledClientsLoopEndsAndItsQueuedLaunchesFail) {
  ASSERT_OK_AND_ASSIGN(auto spin, CompileSpin());
  Notification started;
  // The fault injector runs on the device's thread just before a launch
  // starts: it tells the test when the loop is about to run.
  DeviceStream stream(device_, cpu_.get(), Clock::Real(), &trace_,
                      [&](const LaunchInfo& info) {
                        if (info.run == RunId(1)) started.Notify();
                        return absl::OkStatus();
                      });
  auto flag = std::make_shared<std::atomic<bool>>(false);
  const ClientId leaving(7), staying(8);
  BufferRef spun = DeviceBuffer::Allocate(&memory_, scalar_, leaving);
  BufferRef queued = DeviceBuffer::Allocate(&memory_, scalar_, leaving);
  BufferRef other = DeviceBuffer::Allocate(&memory_, scalar_, staying);
  Launch loop = Negate(1, Ready(1.f), spun);
  loop.executable = spin.get();
  loop.keep_alive = spin;
  loop.owner = leaving;
  loop.cancel = flag;
  Launch second = Negate(2, Ready(2.f), queued);
  second.owner = leaving;
  second.cancel = flag;
  Launch third = Negate(3, Ready(3.f), other);
  third.owner = staying;
  stream.Enqueue(std::move(loop));
  stream.Enqueue(std::move(second));
  stream.Enqueue(std::move(third));
  started.WaitForNotification();
  // The loop holds the device, so the second launch is still queued.
  EXPECT_EQ(stream.CancelOwner(leaving), 1);
  flag->store(true);
  EXPECT_THAT(queued->ready().Await().status(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("did not run")));
  EXPECT_THAT(spun->ready().Await().status(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("while: stopped at iteration")));
  ASSERT_OK(other->ready().Await().status());
  EXPECT_EQ(*reinterpret_cast<const float*>(other->data()), -3.f);
  stream.Shutdown();
}

// A launch past its run's time limit ends at its loop's next check.
TEST_F(DeviceStreamTest, ALoopPastItsRunsTimeLimitEnds) {
  ASSERT_OK_AND_ASSIGN(auto spin, CompileSpin());
  DeviceStream stream(device_, cpu_.get(), Clock::Real(), &trace_, nullptr);
  BufferRef out = DeviceBuffer::Allocate(&memory_, scalar_, owner_);
  Launch l = Negate(1, Ready(1.f), out);
  l.executable = spin.get();
  l.keep_alive = spin;
  l.time_limit_us = 50'000;
  stream.Enqueue(std::move(l));
  EXPECT_THAT(out->ready().Await().status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("run time limit")));
  stream.Shutdown();
}

// A launch whose client was cancelled before it reached the device does
// not start.
TEST_F(DeviceStreamTest, ALaunchOfACancelledClientDoesNotStart) {
  DeviceStream stream(device_, cpu_.get(), Clock::Real(), &trace_, nullptr);
  auto flag = std::make_shared<std::atomic<bool>>(true);
  BufferRef out = DeviceBuffer::Allocate(&memory_, scalar_, owner_);
  Launch l = Negate(1, Ready(1.f), out);
  l.owner = owner_;
  l.cancel = flag;
  stream.Enqueue(std::move(l));
  EXPECT_THAT(out->ready().Await().status(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("before it ran")));
  EXPECT_EQ(stream.stats().busy_us, 0);
  stream.Shutdown();
}

// On a device that completes on a thread of its own, a launch that reads
// the output of one still running is started before that one completed
// (the device orders them), and the chain's result is right.
TEST_F(DeviceStreamTest, ALaunchReadingAnOutputInFlightStartsBeforeItsProducerEnds) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<backend::Device> arena,
                       testing::CreateArenaDevice({device_.id, 0, 1 << 20},
                                                  testing::ArenaOptions{absl::Milliseconds(100)}));
  ASSERT_GT(arena->max_launches_in_flight(), 1);
  DeviceMemory memory(device_.id, device_.memory_bytes, arena.get());
  TraceRecorder trace(/*enabled=*/true);
  DeviceStream stream(device_, arena.get(), Clock::Real(), &trace, nullptr);
  BufferRef in = DeviceBuffer::Allocate(&memory, scalar_, owner_);
  ASSERT_OK(in->allocated().Await().status());
  const float two = 2.f;
  ASSERT_OK(backend::Await([&](backend::Completion done) {
    arena->CopyIn(&two, **in->storage(), backend::BoxCopy::Flat(0, 4, 0, 4, 4), std::move(done));
  }));
  in->SetReady(absl::OkStatus());
  std::vector<BufferRef> chain = {in};
  for (int i = 0; i < 3; ++i) {
    chain.push_back(DeviceBuffer::Allocate(&memory, scalar_, owner_));
    stream.Enqueue(Negate(i + 1, chain[i], chain[i + 1]));
  }
  ASSERT_OK(chain.back()->ready().Await().status());
  float result = 0;
  ASSERT_OK(backend::Await([&](backend::Completion done) {
    arena->CopyOut(**chain.back()->storage(), &result, backend::BoxCopy::Flat(0, 4, 0, 4, 4),
                   std::move(done));
  }));
  EXPECT_EQ(result, -2.f);  // negated three times
  stream.Shutdown();
  std::map<int64_t, std::pair<int64_t, int64_t>> runs;  // run -> (start, end)
  for (const TraceEvent& e : trace.Events()) {
    if (e.kind == TraceKind::kRun) runs[e.run.value()] = {e.start_us, e.start_us + e.duration_us};
  }
  ASSERT_EQ(runs.size(), 3u);
  // Each launch took the device's 100 ms; the next was started before it.
  EXPECT_LT(runs[2].first, runs[1].second);
  EXPECT_LT(runs[3].first, runs[2].second);
  // Busy time counts the device's time once, not the overlapping spans.
  EXPECT_LE(stream.stats().busy_us, runs[3].second - runs[1].first);
}

}  // namespace
}  // namespace causeway
