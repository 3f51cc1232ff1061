// Collectives whose gang spans processes, without a network: several
// CollectiveHubs in one process, one per emulated host, connected by
// CollectivePeers that deliver contributions straight into the peer hub
// (on the sending thread, so a contribution can reach a hub before any of
// its local members arrive). One thread per device; threads synchronise
// only through the hubs and joins.
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/worker/collective_hub.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

// Hosts 0..H-1, each with `per_host` devices: device d is on host d / per_host.
class Fabric {
 public:
  Fabric(int hosts, int per_host, absl::Duration timeout = absl::Seconds(30))
      : per_host_(per_host) {
    for (int h = 0; h < hosts; ++h) {
      peers_.push_back(std::make_unique<Peers>(this, HostId(h)));
      hubs_.push_back(std::make_unique<CollectiveHub>(timeout, peers_.back().get()));
    }
  }
  CollectiveHub& hub(int host) { return *hubs_[host]; }
  CollectiveHub& hub_of(DeviceId d) { return *hubs_[d.value() / per_host_]; }
  int contributions_sent() const { return sent_.load(); }

 private:
  class Peers final : public CollectivePeers {
   public:
    Peers(Fabric* fabric, HostId self) : fabric_(fabric), self_(self) {}
    HostId self() const override { return self_; }
    HostId HostOf(DeviceId d) const override { return HostId(d.value() / fabric_->per_host_); }
    void SendContribution(HostId to, const CollectiveKey& key, int rank, const void* data,
                          int64_t bytes) override {
      ++fabric_->sent_;
      fabric_->hubs_[to.value()]->DeliverContribution(
          key, rank, std::string(static_cast<const char*>(data), static_cast<size_t>(bytes)));
    }
    void BroadcastAbort(RunId run, int node, const absl::Status& status) override {
      for (size_t h = 0; h < fabric_->hubs_.size(); ++h) {
        if (static_cast<int64_t>(h) != self_.value()) {
          fabric_->hubs_[h]->AbortGangFromPeer(run, node, status);
        }
      }
    }

   private:
    Fabric* const fabric_;
    const HostId self_;
  };

  const int per_host_;
  std::vector<std::unique_ptr<Peers>> peers_;
  std::vector<std::unique_ptr<CollectiveHub>> hubs_;
  std::atomic<int> sent_{0};
};

std::vector<DeviceId> Devices(int n) {
  std::vector<DeviceId> out;
  for (int i = 0; i < n; ++i) out.push_back(DeviceId(i));
  return out;
}

const ir::Shape kVec(ir::DType::kF32, {3});

TEST(CollectiveHubPeersTest, AllReduceAcrossThreeHostsGivesEveryMemberTheSum) {
  Fabric fabric(3, 2);
  const std::vector<DeviceId> members = Devices(6);
  std::vector<std::vector<float>> data(6);
  std::vector<absl::Status> status(6);
  std::vector<std::thread> threads;
  for (int r = 0; r < 6; ++r) {
    data[r] = {float(r), float(10 * r), 1.0f};
    threads.emplace_back([&, r] {
      status[r] = fabric.hub_of(members[r]).AllReduce(
          CollectiveKey{RunId(1), 0, 0, 0}, members[r], r, members, kVec, ir::ReduceKind::kSum,
          data[r].data(), "all_reduce");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 6; ++r) {
    EXPECT_OK(status[r]);
    EXPECT_EQ(data[r], (std::vector<float>{15.0f, 150.0f, 6.0f})) << "rank " << r;
  }
  // Each member's operand went to each of the two other hosts.
  EXPECT_EQ(fabric.contributions_sent(), 12);
}

TEST(CollectiveHubPeersTest, ManyCollectivesInARowStayInStepAcrossHosts) {
  Fabric fabric(2, 2);
  const std::vector<DeviceId> members = Devices(4);
  std::vector<absl::Status> status(4);
  std::vector<float> last(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      float x = 1.0f;
      for (int i = 0; i < 200 && status[r].ok(); ++i) {
        status[r] = fabric.hub_of(members[r]).AllReduce(
            CollectiveKey{RunId(i), 0, 0, 0}, members[r], r, members,
            ir::Shape(ir::DType::kF32, {1}), ir::ReduceKind::kMax, &x, "step");
        x += 1.0f;
      }
      last[r] = x;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    EXPECT_OK(status[r]);
    EXPECT_EQ(last[r], 201.0f);
  }
}

TEST(CollectiveHubPeersTest, AllGatherAndPermuteAcrossHosts) {
  Fabric fabric(2, 1);
  const std::vector<DeviceId> members = Devices(2);
  std::vector<std::vector<float>> in = {{1, 2, 3}, {4, 5, 6}};
  std::vector<std::vector<float>> gathered(2, std::vector<float>(6));
  std::vector<std::vector<float>> permuted(2, std::vector<float>(3));
  std::vector<absl::Status> s1(2), s2(2);
  std::vector<std::thread> threads;
  const std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 1}, {1, 0}};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      s1[r] = fabric.hub_of(members[r]).AllGather(
          CollectiveKey{RunId(7), 0, 0, 0}, members[r], r, members, kVec,
          ir::Shape(ir::DType::kF32, {6}), 0, in[r].data(), gathered[r].data(), "all_gather");
      s2[r] = fabric.hub_of(members[r]).CollectivePermute(
          CollectiveKey{RunId(7), 0, 1, 0}, members[r], r, members, kVec, pairs, in[r].data(),
          permuted[r].data(), "permute");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_OK(s1[r]);
    EXPECT_OK(s2[r]);
    EXPECT_EQ(gathered[r], (std::vector<float>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(permuted[r], in[1 - r]);
  }
}

TEST(CollectiveHubPeersTest, LostHostFailsWaitingMembersAndLaterCollectivesAtOnce) {
  Fabric fabric(2, 1);
  const std::vector<DeviceId> members = Devices(2);
  float x = 1.0f;
  absl::Status waiting;
  // Only host 0's member arrives; host 1 is then lost.
  std::thread t([&] {
    waiting = fabric.hub(0).AllReduce(CollectiveKey{RunId(3), 0, 0, 0}, members[0], 0, members,
                                      ir::Shape(ir::DType::kF32, {1}), ir::ReduceKind::kSum, &x,
                                      "all_reduce in node 0");
  });
  // The waiter's contribution reaching host 1 shows it has arrived.
  while (fabric.contributions_sent() == 0) std::this_thread::yield();
  fabric.hub(0).HostLost(HostId(1), absl::UnavailableError("host 1 (10.0.0.2:7071) lost: killed"));
  t.join();
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("host 1")));
  absl::Status later = fabric.hub(0).AllReduce(
      CollectiveKey{RunId(4), 0, 0, 0}, members[0], 0, members, ir::Shape(ir::DType::kF32, {1}),
      ir::ReduceKind::kSum, &x, "all_reduce in node 0");
  EXPECT_THAT(later, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("killed")));
}

TEST(CollectiveHubPeersTest, AGangAbortedOnOneHostFailsItsMembersOnTheOthers) {
  Fabric fabric(2, 1);
  const std::vector<DeviceId> members = Devices(2);
  float x = 1.0f;
  // Host 0's member failed before its collective: its peers on host 1 fail
  // with the root cause instead of waiting.
  fabric.hub(0).AbortGang(RunId(5), 2, absl::InternalError("node 2 (matmul) on device 0: boom"));
  absl::Status s = fabric.hub(1).AllReduce(CollectiveKey{RunId(5), 2, 0, 0}, members[1], 1,
                                           members, ir::Shape(ir::DType::kF32, {1}),
                                           ir::ReduceKind::kSum, &x, "all_reduce");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("boom")));
}

TEST(CollectiveHubPeersTest, AContributionOfTheWrongSizeFailsTheCollective) {
  Fabric fabric(2, 1);
  const std::vector<DeviceId> members = Devices(2);
  // A malformed contribution from "host 1" for rank 1, before rank 0 arrives.
  fabric.hub(0).DeliverContribution(CollectiveKey{RunId(6), 0, 0, 0}, 1, std::string(3, 'x'));
  std::vector<float> x = {1, 2, 3};
  absl::Status s = fabric.hub(0).AllReduce(CollectiveKey{RunId(6), 0, 0, 0}, members[0], 0,
                                           members, kVec, ir::ReduceKind::kSum, x.data(),
                                           "all_reduce");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 bytes")));
}

// Contributions for a collective whose run never comes to this host are
// not kept forever: past their time to live they are dropped, and a member
// that arrives after that fails at once, naming why.
TEST(CollectiveHubPeersTest, ContributionsForACollectiveThatNeverStartsHereExpire) {
  Fabric fabric(2, 1);
  const std::vector<DeviceId> members = Devices(2);
  const CollectiveKey key{RunId(9), 0, 0, 0};
  std::vector<float> theirs = {1, 2, 3};
  fabric.hub(0).DeliverContribution(
      key, 1, std::string(reinterpret_cast<const char*>(theirs.data()), 12));
  EXPECT_EQ(fabric.hub(0).early_remote_bytes(), 12);
  fabric.hub(0).Housekeep(absl::Now());  // young: kept
  EXPECT_EQ(fabric.hub(0).early_remote_bytes(), 12);
  fabric.hub(0).Housekeep(absl::Now() + absl::Minutes(2));
  EXPECT_EQ(fabric.hub(0).early_remote_bytes(), 0);
  std::vector<float> mine = {1, 1, 1};
  EXPECT_THAT(fabric.hub(0).AllReduce(key, members[0], 0, members, kVec, ir::ReduceKind::kSum,
                                      mine.data(), "all_reduce"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("did not come here")));
}

// A contribution that came before its collective's local member is counted
// while it waits and no longer once that member took it: the bound on early
// contributions counts only those still waiting (it once kept counting the
// taken ones, and a long-lived worker refused every cross-host collective
// after 65,536 of them).
TEST(CollectiveHubPeersTest, AnEarlyContributionStopsCountingOnceItsCollectiveTakesIt) {
  Fabric fabric(2, 1);
  const std::vector<DeviceId> members = Devices(2);
  for (int run = 1; run <= 3; ++run) {
    const CollectiveKey key{RunId(run), 0, 0, 0};
    std::vector<float> theirs = {1, 2, 3};
    fabric.hub(0).DeliverContribution(
        key, 1, std::string(reinterpret_cast<const char*>(theirs.data()), 12));
    EXPECT_EQ(fabric.hub(0).early_remote_bytes(), 12);
    std::vector<float> mine = {1, 1, 1};
    ASSERT_OK(fabric.hub(0).AllReduce(key, members[0], 0, members, kVec, ir::ReduceKind::kSum,
                                      mine.data(), "all_reduce"));
    EXPECT_EQ(mine, (std::vector<float>{2, 3, 4}));
    EXPECT_EQ(fabric.hub(0).early_remote_bytes(), 0);
  }
}

}  // namespace
}  // namespace causeway
