// The Device conformance suite (causeway/backend/device.h), run on the cpu
// kind, on the arena test kind, whose memory the host cannot address and
// whose operations complete later on the device's own thread, and on the
// vulkan and cuda kinds where this build has them (their GPU's queue
// completes them; skipped where the machine has no such GPU).
#include "causeway/backend/device.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "causeway/backend/cpu/device.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/backend/builtin_kinds.h"
#if CAUSEWAY_HAVE_VULKAN
#include "causeway/backend/compile_cache.h"
#include "causeway/backend/vulkan/device.h"
#endif
#if CAUSEWAY_HAVE_CUDA
#include "causeway/backend/cuda/device.h"
#endif
#include "causeway/base/mutex.h"
#include "causeway/ir/builder.h"
#include "causeway/testing/arena_kind.h"
#include "causeway/topology/mesh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::backend {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kMemory = 1 << 20;

struct KindCase {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<Device>>(const DeviceSpec&)> create;
  bool host_addressable;
};

class DeviceTest : public ::testing::TestWithParam<KindCase> {
 protected:
  void SetUp() override {
    if (GetParam().name == "vulkan" || GetParam().name == "cuda") {
      if (absl::StatusOr<std::vector<std::string>> gpus = ListDevices(GetParam().name);
          !gpus.ok()) {
        GTEST_SKIP() << gpus.status();
      }
    }
  }
  std::unique_ptr<Device> Make(int id = 0) {
    DeviceSpec spec;
    spec.id = DeviceId(id);
    spec.memory_bytes = kMemory;
    auto d = GetParam().create(spec);
    EXPECT_TRUE(d.ok()) << d.status();
    return *std::move(d);
  }
  static std::unique_ptr<DeviceAllocation> Alloc(Device& d, int64_t bytes) {
    auto a = d.Allocate(bytes);
    EXPECT_TRUE(a.ok()) << a.status();
    return *std::move(a);
  }
  static absl::Status In(Device& d, const std::vector<float>& v, DeviceAllocation& a) {
    const int64_t n = static_cast<int64_t>(v.size() * sizeof(float));
    return Await([&](Completion done) {
      d.CopyIn(v.data(), a, BoxCopy::Flat(0, n, 0, a.bytes(), n), std::move(done));
    });
  }
  static std::vector<float> Out(Device& d, const DeviceAllocation& a, size_t count) {
    std::vector<float> v(count, -1.0f);
    const int64_t n = static_cast<int64_t>(count * sizeof(float));
    EXPECT_TRUE(Await([&](Completion done) {
                  d.CopyOut(a, v.data(), BoxCopy::Flat(0, a.bytes(), 0, n, n), std::move(done));
                }).ok());
    return v;
  }
};

std::vector<float> Iota(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

// A 4x6 box copy of 2x3 elements at (1, 2) into (0, 1) of a 3x5 array.
BoxCopy Box() {
  BoxCopy b;
  b.src_dims = {4, 6};
  b.src_offset = {1, 2};
  b.dst_dims = {3, 5};
  b.dst_offset = {0, 1};
  b.extent = {2, 3};
  b.element_bytes = sizeof(float);
  return b;
}

std::vector<float> ExpectedBox(const std::vector<float>& src, std::vector<float> dst) {
  const BoxCopy b = Box();
  CopyBox(src.data(), b.src_dims, b.src_offset, dst.data(), b.dst_dims, b.dst_offset, b.extent,
          b.element_bytes);
  return dst;
}

TEST_P(DeviceTest, CopiesInAndOutRoundTrip) {
  auto d = Make();
  auto a = Alloc(*d, 64 * sizeof(float));
  ASSERT_TRUE(In(*d, Iota(64), *a).ok());
  EXPECT_THAT(Out(*d, *a, 64), ElementsAreArray(Iota(64)));
  EXPECT_EQ(d->HostAddress(*a) != nullptr, GetParam().host_addressable);
  EXPECT_EQ(d->description().kind, GetParam().name);
}

TEST_P(DeviceTest, BoxCopiesMoveExactlyTheBoxInEveryDirection) {
  auto d = Make();
  const std::vector<float> src = Iota(24);
  const std::vector<float> zeros(15, 0.0f);
  const std::vector<float> want = ExpectedBox(src, zeros);
  auto a = Alloc(*d, 24 * sizeof(float));
  auto b = Alloc(*d, 15 * sizeof(float));
  ASSERT_TRUE(In(*d, src, *a).ok());
  // device -> device
  ASSERT_TRUE(In(*d, zeros, *b).ok());
  ASSERT_TRUE(Await([&](Completion done) { d->CopyWithin(*a, *b, Box(), std::move(done)); }).ok());
  EXPECT_THAT(Out(*d, *b, 15), ElementsAreArray(want));
  // device -> host
  std::vector<float> host(15, 0.0f);
  ASSERT_TRUE(Await([&](Completion done) { d->CopyOut(*a, host.data(), Box(), std::move(done)); })
                  .ok());
  EXPECT_THAT(host, ElementsAreArray(want));
  // host -> device
  ASSERT_TRUE(In(*d, zeros, *b).ok());
  ASSERT_TRUE(
      Await([&](Completion done) { d->CopyIn(src.data(), *b, Box(), std::move(done)); }).ok());
  EXPECT_THAT(Out(*d, *b, 15), ElementsAreArray(want));
}

TEST_P(DeviceTest, CopyToPeerMovesABoxToAnotherDevice) {
  auto d0 = Make(0);
  auto d1 = Make(1);
  const std::vector<float> src = Iota(24);
  const std::vector<float> zeros(15, 0.0f);
  auto a = Alloc(*d0, 24 * sizeof(float));
  auto b = Alloc(*d1, 15 * sizeof(float));
  ASSERT_TRUE(In(*d0, src, *a).ok());
  ASSERT_TRUE(In(*d1, zeros, *b).ok());
  ASSERT_TRUE(
      Await([&](Completion done) { d0->CopyToPeer(*a, *d1, *b, Box(), std::move(done)); }).ok());
  EXPECT_THAT(Out(*d1, *b, 15), ElementsAreArray(ExpectedBox(src, zeros)));
}

TEST_P(DeviceTest, ABoxOutsideItsArrayIsRefusedNamingIt) {
  auto d = Make();
  auto a = Alloc(*d, 24 * sizeof(float));
  auto b = Alloc(*d, 8 * sizeof(float));  // smaller than the 3x5 destination
  absl::Status s = Await([&](Completion done) { d->CopyWithin(*a, *b, Box(), std::move(done)); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("destination array [3,5]"));
  BoxCopy past = Box();
  past.src_offset = {3, 2};  // rows 3..4 of a 4-row array
  s = Await([&](Completion done) { d->CopyWithin(*a, *a, past, std::move(done)); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("does not lie inside the source array [4,6]"));
  EXPECT_EQ(d->Allocate(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(DeviceTest, LaunchRunsTheExecutableOverDeviceMemory) {
  auto d = Make();
  ir::FunctionBuilder b("axpy");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {8}));
  ir::Value y = b.Parameter(ir::Shape(ir::DType::kF32, {8}));
  auto f = b.Build({b.Add(b.Mul(x, y), b.Full(1.0f, {8})), b.ReduceSum(x, {0})});
  ASSERT_TRUE(f.ok()) << f.status();
  auto kind = FindDeviceKind(GetParam().name);
  ASSERT_TRUE(kind.ok()) << kind.status();
  auto exe = (*kind)->Compile(*f);
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto ax = Alloc(*d, 32), ay = Alloc(*d, 32), out = Alloc(*d, 32), sum = Alloc(*d, 4);
  ASSERT_TRUE(In(*d, Iota(8), *ax).ok());
  ASSERT_TRUE(In(*d, std::vector<float>(8, 2.0f), *ay).ok());
  const DeviceAllocation* in[] = {ax.get(), ay.get()};
  DeviceAllocation* outs[] = {out.get(), sum.get()};
  ASSERT_TRUE(Await([&](Completion done) {
                d->Launch(**exe, in, outs, RunContext{}, std::move(done));
              }).ok());
  EXPECT_THAT(Out(*d, *out, 8), ElementsAreArray({1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_THAT(Out(*d, *sum, 1), ElementsAreArray({28.0f}));

  // A launch with too few or too small allocations is refused.
  const DeviceAllocation* one[] = {ax.get()};
  absl::Status s = Await(
      [&](Completion done) { d->Launch(**exe, one, outs, RunContext{}, std::move(done)); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  DeviceAllocation* small[] = {sum.get(), sum.get()};
  s = Await([&](Completion done) { d->Launch(**exe, in, small, RunContext{}, std::move(done)); });
  EXPECT_THAT(s.message(), HasSubstr("result 0 has 4 bytes, needs 32"));
}

TEST_P(DeviceTest, ConcurrentCopiesFromManyThreadsEachReadBackWhatTheyWrote) {
  auto d = Make();
  constexpr int kThreads = 4, kEach = 50;
  std::atomic<int> completed{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto a = Alloc(*d, 16 * sizeof(float));
      std::vector<float> v(16, static_cast<float>(t));
      for (int i = 0; i < kEach; ++i) {
        if (!In(*d, v, *a).ok()) failed.fetch_add(1);
        if (Out(*d, *a, 16) != v) failed.fetch_add(1);
        completed.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(completed.load(), kThreads * kEach);
  EXPECT_EQ(failed.load(), 0);
}

// The arena's memory is finite and comes back when an allocation goes.
// One executable per function object and kind while someone holds it; an
// equal copy of the function is another object, and the cache itself keeps
// nothing alive.
TEST(CompileSharedTest, SharesWhileHeldAndKeepsNothingAlive) {
  ir::FunctionBuilder b("neg");
  auto f = std::make_shared<const ir::Function>(
      *b.Build({b.Neg(b.Parameter(ir::Shape(ir::DType::kF32, {4})))}));
  const DeviceKind& kind = cpu::Kind();
  absl::StatusOr<std::shared_ptr<const Executable>> first = CompileShared(kind, f);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::shared_ptr<const Executable>> again = CompileShared(kind, f);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->get(), again->get());
  auto copy = std::make_shared<const ir::Function>(*f);
  absl::StatusOr<std::shared_ptr<const Executable>> other = CompileShared(kind, copy);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(first->get(), other->get());
  std::weak_ptr<const Executable> watched = *first;
  first->reset();
  again->reset();
  EXPECT_TRUE(watched.expired());
  // Compiled again once nobody held the first: a live executable again.
  absl::StatusOr<std::shared_ptr<const Executable>> later = CompileShared(kind, f);
  ASSERT_TRUE(later.ok());
  ASSERT_NE(*later, nullptr);
  EXPECT_EQ((*later)->function().name(), "neg");
}

TEST(ArenaDeviceTest, MemoryIsFiniteAndReturnedOnFree) {
  DeviceSpec spec;
  spec.id = DeviceId(3);
  spec.memory_bytes = 4096;
  auto d = ::causeway::testing::CreateArenaDevice(spec);
  ASSERT_TRUE(d.ok());
  auto a = (*d)->Allocate(2048);
  auto b = (*d)->Allocate(2048);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = (*d)->Allocate(64);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("device 3"));
  a->reset();
  b->reset();
  EXPECT_TRUE((*d)->Allocate(4096).ok());
}

TEST(ArenaDeviceTest, AnotherDevicesAllocationIsRefused) {
  DeviceSpec spec;
  spec.id = DeviceId(0);
  spec.memory_bytes = 4096;
  auto d0 = ::causeway::testing::CreateArenaDevice(spec);
  spec.id = DeviceId(1);
  auto d1 = ::causeway::testing::CreateArenaDevice(spec);
  ASSERT_TRUE(d0.ok() && d1.ok());
  auto a = (*d1)->Allocate(64);
  ASSERT_TRUE(a.ok());
  std::vector<float> v(16);
  absl::Status s = Await([&](Completion done) {
    (*d0)->CopyOut(**a, v.data(), BoxCopy::Flat(0, 64, 0, 64, 64), std::move(done));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not one of device 0's"));
}

TEST(CpuDeviceTest, LargeBuffersReuseFreedBlocksButNeverShareOne) {
  DeviceSpec spec;
  spec.id = DeviceId(5);
  (void)cpu::Kind();
  auto d = cpu::CreateDevice(spec);
  ASSERT_TRUE(d.ok());
  const int64_t big = int64_t{8} << 20;
  auto a = (*d)->Allocate(big);
  ASSERT_TRUE(a.ok());
  std::byte* const first = (*d)->HostAddress(**a);
  a->reset();
  auto b = (*d)->Allocate(big);  // the freed block again: no fresh pages
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*d)->HostAddress(**b), first);
  // Many live at once, then all freed and taken again: never one block for
  // two live buffers, whatever the cache holds.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<DeviceAllocation>> live;
    std::set<std::byte*> seen = {(*d)->HostAddress(**b)};
    for (int i = 0; i < 40; ++i) {
      auto c = (*d)->Allocate((int64_t{2} << 20) + (i % 3) * 4096);
      ASSERT_TRUE(c.ok());
      EXPECT_TRUE(seen.insert((*d)->HostAddress(**c)).second) << "round " << round << ", " << i;
      live.push_back(*std::move(c));
    }
  }
  // The device may go first: its buffers stay valid until freed.
  d->reset();
  std::memset(first, 1, static_cast<size_t>(big));
  b->reset();
}

TEST(CpuDeviceTest, LargeBuffersFromManyThreadsEachKeepTheirOwnBytes) {
  DeviceSpec spec;
  spec.id = DeviceId(6);
  (void)cpu::Kind();
  auto d = cpu::CreateDevice(spec);
  ASSERT_TRUE(d.ok());
  Device& device = **d;
  const int64_t bytes = int64_t{2} << 20;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int32_t> in(static_cast<size_t>(bytes / 4)), out(in.size());
      for (int i = 0; i < 20; ++i) {
        auto a = device.Allocate(bytes);
        if (!a.ok()) {
          ++mismatches;
          return;
        }
        std::fill(in.begin(), in.end(), t * 1000 + i);
        const BoxCopy box = BoxCopy::Flat(0, bytes, 0, bytes, bytes);
        if (!Await([&](Completion done) { device.CopyIn(in.data(), **a, box, std::move(done)); }).ok() ||
            !Await([&](Completion done) { device.CopyOut(**a, out.data(), box, std::move(done)); }).ok() ||
            out != in) {
          ++mismatches;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, DeviceTest,
    ::testing::Values(
        KindCase{"cpu",
                 [](const DeviceSpec& s) {
                   (void)cpu::Kind();
                   return cpu::CreateDevice(s);
                 },
                 true},
        KindCase{"arena",
                 [](const DeviceSpec& s) {
                   ::causeway::testing::RegisterArenaKind();
                   return ::causeway::testing::CreateArenaDevice(s);
                 },
                 false},
        KindCase{"arena",
                 [](const DeviceSpec& s) {
                   ::causeway::testing::RegisterArenaKind();
                   ::causeway::testing::ArenaOptions o;
                   o.delay = absl::Microseconds(200);
                   return ::causeway::testing::CreateArenaDevice(s, o);
                 },
                 false}
#if CAUSEWAY_HAVE_VULKAN
        ,
        // Several devices of one GPU; vulkan_staging_device_test runs the
        // same with staged copies (the path of a discrete GPU).
        KindCase{"vulkan", [](const DeviceSpec& s) { return vulkan::Kind().CreateDevice(s); },
                 false}
#endif
#if CAUSEWAY_HAVE_CUDA
        ,
        // Skipped where the machine has no CUDA GPU.
        KindCase{"cuda", [](const DeviceSpec& s) { return cuda::Kind().CreateDevice(s); },
                 false}
#endif
        ),
    [](const ::testing::TestParamInfo<KindCase>& info) {
      return info.param.name + (info.index == 2 ? "Delayed" : "");
    });

}  // namespace
}  // namespace causeway::backend
