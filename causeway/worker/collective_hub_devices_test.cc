// A kind's own collectives through the hub (CollectiveHub::MeetOnDevices,
// HubCollectives::GroupOf and MeetOnDevices): the hub meets the group and
// the last member to arrive performs the collective over every member's
// operand, with the rendezvous, watchdog, timeout and errors of every other
// collective. The vulkan kind's use of it is tested end to end in
// tests/integration/collectives_test.cc. Threads synchronise only through
// joins and the hub itself.
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "causeway/backend/cpu/device.h"
#include "causeway/backend/device.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/topology/mesh.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/collective_hub_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::Devices;
using ::causeway::testing::RunOnThreads;

using ::causeway::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kLongTimeout = absl::Seconds(20);


// What a perform saw: how often it ran, and the operands (ints) it got.
struct Performed {
  std::atomic<int> runs{0};
  std::vector<int> operands;  // written by the one run, read after the joins
};

TEST(MeetOnDevicesTest, TheLastArrivalPerformsOnceOverEveryOperandInRankOrder) {
  CollectiveHub hub(kLongTimeout);
  const std::vector<DeviceId> members = Devices(3);
  const CollectiveKey key{RunId(1), 0, 0, 0};
  Performed performed;
  std::vector<absl::Status> statuses(3);
  RunOnThreads(3, [&](int rank) {
    const int operand = 10 * rank;
    statuses[rank] = hub.MeetOnDevices(
        key, members[rank], rank, members, ir::OpKind::kAllReduce, &operand, "all_reduce",
        [&](absl::Span<const void* const> all) {
          ++performed.runs;
          for (const void* p : all) performed.operands.push_back(*static_cast<const int*>(p));
          return absl::OkStatus();
        });
  });
  for (const absl::Status& s : statuses) EXPECT_OK(s);
  EXPECT_EQ(performed.runs.load(), 1);
  EXPECT_THAT(performed.operands, ElementsAre(0, 10, 20));
}

TEST(MeetOnDevicesTest, APerformsErrorIsEveryMembersNamingTheCollective) {
  CollectiveHub hub(kLongTimeout);
  const std::vector<DeviceId> members = Devices(3);
  std::vector<absl::Status> statuses(3);
  RunOnThreads(3, [&](int rank) {
    statuses[rank] = hub.MeetOnDevices(
        CollectiveKey{RunId(1), 0, 0, 0}, members[rank], rank, members, ir::OpKind::kAllGather,
        nullptr, "all_gather #0 of f",
        [](absl::Span<const void* const>) { return absl::InternalError("device lost"); });
  });
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("all_gather #0 of f")));
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("device lost")));
  }
}

// Device 0 meets on devices in collective #0 while device 1 waits in a
// host-staged #1: each waits for the other, and the watchdog breaks it.
TEST(MeetOnDevicesTest, TakesPartInTheDeadlockWatchdog) {
  CollectiveHub hub(kLongTimeout);
  const std::vector<DeviceId> members = Devices(2);
  absl::Status s0, s1;
  std::thread t0([&] {
    s0 = hub.MeetOnDevices(CollectiveKey{RunId(1), 0, 0, 0}, members[0], 0, members,
                           ir::OpKind::kAllReduce, nullptr, "on devices",
                           [](absl::Span<const void* const>) { return absl::OkStatus(); });
  });
  std::thread t1([&] {
    float data[1] = {1.0f};
    s1 = hub.AllReduce(CollectiveKey{RunId(1), 0, 1, 0}, members[1], 1, members,
                       ir::Shape(ir::DType::kF32, {1}), ir::ReduceKind::kSum, data, "staged");
  });
  t0.join();
  t1.join();
  EXPECT_THAT(s0, StatusIs(absl::StatusCode::kAborted, HasSubstr("deadlock")));
  EXPECT_THAT(s1, StatusIs(absl::StatusCode::kAborted, HasSubstr("deadlock")));
  EXPECT_EQ(hub.deadlocks_detected(), 1);
}

// One member through the host, the other on devices, for one collective: a
// defect of the kind; whoever comes second is refused, the first times out.
TEST(MeetOnDevicesTest, MembersThatDisagreeOnMeetingOnDevicesFail) {
  CollectiveHub hub(absl::Milliseconds(500));
  const std::vector<DeviceId> members = Devices(2);
  const CollectiveKey key{RunId(1), 0, 0, 0};
  absl::Status s0, s1;
  std::thread t0([&] {
    s0 = hub.MeetOnDevices(key, members[0], 0, members, ir::OpKind::kAllReduce, nullptr,
                           "all_reduce",
                           [](absl::Span<const void* const>) { return absl::OkStatus(); });
  });
  std::thread t1([&] {
    float data[1] = {1.0f};
    s1 = hub.AllReduce(key, members[1], 1, members, ir::Shape(ir::DType::kF32, {1}),
                       ir::ReduceKind::kSum, data, "all_reduce");
  });
  t0.join();
  t1.join();
  EXPECT_FALSE(s0.ok());
  EXPECT_FALSE(s1.ok());
  const bool refused =
      (s0.code() == absl::StatusCode::kInvalidArgument &&
       absl::StrContains(s0.message(), "on their devices or through the host")) ||
      (s1.code() == absl::StatusCode::kInvalidArgument &&
       absl::StrContains(s1.message(), "on their devices or through the host"));
  EXPECT_TRUE(refused) << s0 << " / " << s1;
}

// Peers where device 1 lives in another process.
class TwoProcesses final : public CollectivePeers {
 public:
  HostId self() const override { return HostId(0); }
  HostId HostOf(DeviceId device) const override {
    return device == DeviceId(1) ? HostId(1) : HostId(0);
  }
  void SendContribution(HostId, const CollectiveKey&, int, const void*, int64_t) override {}
  void BroadcastAbort(RunId, int, const absl::Status&) override {}
};

TEST(MeetOnDevicesTest, AGroupWithAMemberInAnotherProcessIsRefusedAtOnce) {
  TwoProcesses peers;
  CollectiveHub hub(kLongTimeout, &peers);
  const std::vector<DeviceId> members = Devices(2);
  EXPECT_THAT(hub.MeetOnDevices(CollectiveKey{RunId(1), 0, 0, 0}, members[0], 0, members,
                                ir::OpKind::kAllReduce, nullptr, "all_reduce",
                                [](absl::Span<const void* const>) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another process")));
}

// {x: 2, y: 2}: position p = 2 * x + y holds device 10 + p.
Mesh Mesh2x2() {
  return Mesh(MeshId(1), IslandId(0), {{"x", 2}, {"y", 2}},
              {DeviceId(10), DeviceId(11), DeviceId(12), DeviceId(13)});
}

std::unique_ptr<backend::Device> CpuDevice(int id) {
  backend::DeviceSpec spec;
  spec.id = DeviceId(id);
  auto device = backend::cpu::CreateDevice(spec);
  CW_CHECK_OK(device.status());
  return std::move(*device);
}

TEST(HubCollectivesGroupTest, TheGroupHasTheAttachedDevicesInRankOrderAndNullForOthers) {
  CollectiveHub hub(kLongTimeout);
  const Mesh mesh = Mesh2x2();
  std::vector<std::unique_ptr<backend::Device>> devices;
  for (int id : {10, 11, 12}) {  // 13 is not in this process
    devices.push_back(CpuDevice(id));
    hub.AttachDevice(DeviceId(id), devices.back().get());
  }
  const HubCollectives at0(&hub, RunId(1), 0, &mesh, 0, "f");
  ASSERT_OK_AND_ASSIGN(backend::CollectiveGroup over_x, at0.GroupOf({"x"}));
  EXPECT_EQ(over_x.rank, 0);
  EXPECT_THAT(over_x.devices, ElementsAre(devices[0].get(), devices[2].get()));
  EXPECT_TRUE(over_x.local());
  const HubCollectives at3(&hub, RunId(1), 0, &mesh, 3, "f");
  ASSERT_OK_AND_ASSIGN(backend::CollectiveGroup over_y, at3.GroupOf({"y"}));
  EXPECT_EQ(over_y.rank, 1);
  EXPECT_THAT(over_y.devices, ElementsAre(devices[2].get(), nullptr));
  EXPECT_FALSE(over_y.local());
  hub.DetachDevice(DeviceId(10));
  ASSERT_OK_AND_ASSIGN(over_x, at0.GroupOf({"x"}));
  EXPECT_FALSE(over_x.local());
  EXPECT_THAT(at0.GroupOf({"nope"}).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nope")));
}

TEST(HubCollectivesGroupTest, MeetOnDevicesMeetsTheGroupOverTheGivenAxes) {
  CollectiveHub hub(kLongTimeout);
  const Mesh mesh = Mesh2x2();
  std::vector<absl::Status> statuses(4);
  std::vector<std::vector<int>> seen(4);  // by the performing member's position
  RunOnThreads(4, [&](int p) {
    HubCollectives ops(&hub, RunId(3), 1, &mesh, p, "step_fn");
    statuses[p] = ops.MeetOnDevices(
        0, std::vector<std::string>{"x"}, ir::OpKind::kAllReduce, &p,
        [&](absl::Span<const void* const> all) {
          for (const void* o : all) seen[p].push_back(*static_cast<const int*>(o));
          return absl::OkStatus();
        });
  });
  for (const absl::Status& s : statuses) EXPECT_OK(s);
  // Over x: positions {0, 2} and {1, 3}, one perform each, in rank order.
  std::vector<std::vector<int>> performed;
  for (const auto& s : seen) {
    if (!s.empty()) performed.push_back(s);
  }
  std::sort(performed.begin(), performed.end());
  EXPECT_THAT(performed, ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3)));
}

}  // namespace
}  // namespace causeway
