// Tests for causeway/control/control_plane.h: a scheduler per island (of the
// first topology and of hosts added later), shares recorded for islands and
// hosts that come later and forgotten with their client, runs and releases
// routed to their islands, and bad input refused.
#include "causeway/control/control_plane.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "causeway/base/mutex.h"
#include "causeway/testing/recording_host.h"
#include "causeway/testing/two_mesh_plan.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Island i has host i with one device.
Topology Islands(int n) {
  Topology t;
  for (int i = 0; i < n; ++i) {
    t.AddIsland(IslandId(i));
    t.AddHost(HostId(i), IslandId(i));
    t.AddDevice(DeviceId(i), HostId(i), int64_t{1} << 20);
  }
  return t;
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  std::unique_ptr<ControlPlane> Make(Topology topology) {
    ControlPlaneOptions o;
    o.scheduler.deliver_on_own_thread = false;
    // Host h is on island h unless island_of_ says otherwise.
    o.host_lookup = [this](IslandId island, HostId h) -> HostService* {
      auto it = hosts_.find(h.value());
      auto home = island_of_.find(h.value());
      const int64_t own = home == island_of_.end() ? h.value() : home->second;
      return it != hosts_.end() && own == island.value() ? it->second.get() : nullptr;
    };
    o.for_each_host = [this](const std::function<void(HostService&)>& apply) {
      for (auto& [id, h] : hosts_) apply(*h);
    };
    return std::make_unique<ControlPlane>(std::move(topology), std::move(o));
  }
  testing::RecordingHost* AddFake(int id) {
    hosts_[id] = std::make_unique<testing::RecordingHost>(HostId(id));
    return hosts_[id].get();
  }

  std::map<int64_t, std::unique_ptr<testing::RecordingHost>> hosts_;
  std::map<int64_t, int64_t> island_of_;
};

TEST_F(ControlPlaneTest, MakesASchedulerForEveryIslandOfTheTopologyInIslandOrder) {
  auto control = Make(Islands(3));
  const auto schedulers = control->schedulers();
  ASSERT_EQ(schedulers.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(schedulers[i].first, IslandId(i));
    EXPECT_EQ(schedulers[i].second, control->scheduler(IslandId(i)));
    EXPECT_EQ(schedulers[i].second->island(), IslandId(i));
    const auto group = control->GroupByIsland({HostId(i)});
    ASSERT_EQ(group.size(), 1u);
    EXPECT_EQ(group[0].first, IslandId(i));
  }
  EXPECT_EQ(control->scheduler(IslandId(3)), nullptr);
  EXPECT_TRUE(control->GroupByIsland({HostId(7)}).empty());
  EXPECT_EQ(control->resources().GetTopology().islands().size(), 3u);
}

TEST_F(ControlPlaneTest, AnIslandOrHostAddedLaterGetsTheSharesSetBefore) {
  auto control = Make(Topology());
  AddFake(0);
  const ClientShare share{4.0, 1, 1 << 20};
  ASSERT_OK(control->SetShare(ClientId(5), share));
  EXPECT_THAT(hosts_[0]->quotas(), ElementsAre(Pair(5, 1 << 20)));  // through for_each_host

  testing::RecordingHost* late = AddFake(1);
  control->AddHost(HostId(1), IslandId(1), {DeviceId(0), DeviceId(1)}, 1 << 20, "cpu", {}, late);
  IslandScheduler* s = control->scheduler(IslandId(1));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->client_stats(ClientId(5)).share, share);
  EXPECT_THAT(late->quotas(), ElementsAre(Pair(5, 1 << 20)));
  EXPECT_THAT(control->GroupByIsland({HostId(1)}),
              ElementsAre(Pair(IslandId(1), ElementsAre(HostId(1)))));
  EXPECT_EQ(control->resources().GetTopology().island(IslandId(1))->hosts.size(), 1u);

  // A second host of the same island reuses its scheduler.
  control->AddHost(HostId(2), IslandId(1), {DeviceId(2)}, 1 << 20, "cpu", {}, nullptr);
  EXPECT_EQ(control->scheduler(IslandId(1)), s);
  EXPECT_EQ(control->schedulers().size(), 1u);
}

TEST_F(ControlPlaneTest, AShareReachesEverySchedulerAndIsForgottenWithItsClient) {
  auto control = Make(Islands(2));
  const ClientShare share{2.5, 0, 0};
  ASSERT_OK(control->SetShare(ClientId(1), share));
  for (const auto& [island, s] : control->schedulers()) {
    EXPECT_EQ(s->client_stats(ClientId(1)).share, share) << island.ToString();
  }
  control->DropClient(ClientId(1));
  control->AddHost(HostId(9), IslandId(9), {DeviceId(9)}, 1 << 20, "cpu", {}, nullptr);
  EXPECT_EQ(control->scheduler(IslandId(9))->client_stats(ClientId(1)).share, ClientShare{});
}

TEST_F(ControlPlaneTest, RefusesAMalformedShare) {
  auto control = Make(Islands(1));
  EXPECT_THAT(control->SetShare(ClientId(1), ClientShare{0.0, 0, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight")));
  EXPECT_THAT(control->SetShare(ClientId(1), ClientShare{1.0, 99, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("class")));
  EXPECT_EQ(control->scheduler(IslandId(0))->client_stats(ClientId(1)).share, ClientShare{});
}

TEST_F(ControlPlaneTest, ARunOnNoIslandOrAnUnknownOneIsRefusedNamingIt) {
  auto control = Make(Islands(2));
  RunRequest run;
  run.run = RunId(1);
  run.client = ClientId(1);
  EXPECT_THAT(control->SubmitRun(run, {}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no island")));
  EXPECT_THAT(control->SubmitRun(run, {IslandId(4), IslandId(0)}, nullptr),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("island 4")));
  EXPECT_THAT(control->SubmitRun(run, {IslandId(7)}, nullptr),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("island 7")));
  // A known island whose scheduler does not know the program.
  EXPECT_THAT(control->SubmitRun(run, {IslandId(0), IslandId(1)}, nullptr),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not registered with island 0")));
}

// Islands 0 and 1, and host h on island island_of[h] (no devices).
Topology HostsOnIslands(const std::vector<int>& island_of) {
  Topology t;
  t.AddIsland(IslandId(0));
  t.AddIsland(IslandId(1));
  for (size_t h = 0; h < island_of.size(); ++h) {
    t.AddHost(HostId(static_cast<int64_t>(h)), IslandId(island_of[h]));
  }
  return t;
}

// Island 0 has hosts 0 and 1, island 1 has host 2.
TEST_F(ControlPlaneTest, EachSchedulerReachesOnlyItsIslandsHostsAndARunReachesThem) {
  for (int h = 0; h < 3; ++h) AddFake(h);
  island_of_ = {{0, 0}, {1, 0}, {2, 1}};
  auto control = Make(HostsOnIslands({0, 0, 1}));

  const ProgramPlan two = testing::TwoMeshPlan();  // hosts 0 and 1, on island 0
  ASSERT_OK(control->scheduler(IslandId(0))->RegisterProgram(std::make_shared<ProgramPlan>(two)));
  // Island 0's hosts named for island 1, or island 1's host for island 0,
  // are refused: each scheduler sees only its own island's hosts.
  ProgramPlan moved = two;
  moved.id = ProgramId(9);
  moved.islands = {IslandId(1)};
  EXPECT_THAT(
      control->scheduler(IslandId(1))->RegisterProgram(std::make_shared<ProgramPlan>(moved)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a host of island 1")));
  ProgramPlan stray = two;
  stray.id = ProgramId(8);
  stray.hosts_by_island = {{HostId(0), HostId(2)}};
  EXPECT_THAT(control->scheduler(IslandId(0))->RegisterProgram(std::make_shared<ProgramPlan>(stray)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host 2")));

  RunRequest run;
  run.program = two.id;
  run.run = RunId(21);
  run.client = two.client;
  run.arguments = {ArrayId(100)};
  run.outputs = {ArrayId(101)};
  ASSERT_OK(control->SubmitRun(run, {IslandId(0)}, nullptr));
  EXPECT_THAT(hosts_[0]->run_ids(), ElementsAre(21));
  EXPECT_THAT(hosts_[1]->run_ids(), ElementsAre(21));
  EXPECT_TRUE(hosts_[2]->run_ids().empty());
}

TEST_F(ControlPlaneTest, GroupsHostsByIslandInOrderOfFirstAppearanceAndSkipsUnknownOnes) {
  auto control = Make(HostsOnIslands({0, 1, 0}));
  const auto groups = control->GroupByIsland({HostId(1), HostId(0), HostId(5), HostId(2)});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].first, IslandId(1));
  EXPECT_THAT(groups[0].second, ElementsAre(HostId(1)));
  EXPECT_EQ(groups[1].first, IslandId(0));
  EXPECT_THAT(groups[1].second, ElementsAre(HostId(0), HostId(2)));
}

TEST_F(ControlPlaneTest, ARemovedHostLeavesTheTopologyAndItsIsland) {
  auto control = Make(Islands(2));
  control->RemoveHost(HostId(1), IslandId(1), "gone");
  EXPECT_TRUE(control->GroupByIsland({HostId(1)}).empty());
  // Its island had no other host, so it left the topology too.
  EXPECT_THAT(control->resources().GetTopology().islands(), ElementsAre(IslandId(0)));
}

}  // namespace
}  // namespace causeway
