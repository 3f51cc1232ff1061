// Collectives whose gang spans processes, without a network: several
// CollectiveHubs in one process, one per emulated host, connected by
// CollectivePeers that deliver contributions straight into the peer hub
// (on the sending thread, so a contribution can reach a hub before any of
// its local members arrive). One thread per device; threads synchronise
// only through the hubs and joins.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/collective_hub_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::Devices;

using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

// Hosts 0..H-1, each with `per_host` devices: device d is on host d / per_host.
// With `library`, the hosts it lists meet across processes in a collective
// library (CollectivePeers::process_collectives): an in-memory one here,
// which combines the processes' operands in host order.
class Fabric {
 public:
  Fabric(int hosts, int per_host, absl::Duration timeout = absl::Seconds(30),
         std::vector<int> library = {})
      : per_host_(per_host) {
    for (int h = 0; h < hosts; ++h) {
      const bool with = std::find(library.begin(), library.end(), h) != library.end();
      libraries_.push_back(with ? std::make_unique<Library>(this, HostId(h)) : nullptr);
      peers_.push_back(std::make_unique<Peers>(this, HostId(h), libraries_.back().get()));
      hubs_.push_back(std::make_unique<CollectiveHub>(timeout, peers_.back().get()));
    }
  }
  CollectiveHub& hub(int host) { return *hubs_[host]; }
  CollectiveHub& hub_of(DeviceId d) { return *hubs_[d.value() / per_host_]; }
  int contributions_sent() const { return sent_.load(); }
  int readies_sent() const { return readies_.load(); }
  // Host `h`'s generation of the library's connections.
  void set_generation(int h, int64_t g) {
    MutexLock lock(&mu_);
    libraries_[h]->generation = g;
  }
  // The generations host `h`'s library calls were made with.
  std::vector<int64_t> library_calls(int h) {
    MutexLock lock(&mu_);
    return libraries_[h]->calls;
  }

 private:
  class Library final : public ProcessCollectives {
   public:
    Library(Fabric* fabric, HostId self) : fabric_(fabric), self_(self) {}
    absl::string_view name() const override { return "the test's library"; }
    int64_t from_bytes() const override { return 0; }
    int64_t Generation(absl::Span<const HostId>) override {
      MutexLock lock(&fabric_->mu_);
      return generation;
    }
    absl::Status AllReduce(const CollectiveKey& key, absl::Span<const HostId> hosts,
                           int64_t g, ir::DType dtype, ir::ReduceKind kind, void* data,
                           int64_t elements, absl::Time deadline) override {
      CW_CHECK(dtype == ir::DType::kF32);
      const size_t bytes = static_cast<size_t>(elements) * sizeof(float);
      CW_ASSIGN_OR_RETURN(std::vector<std::string> all,
                          Meet(key, hosts, g, std::string(static_cast<char*>(data), bytes),
                               deadline));
      auto* out = static_cast<float*>(data);
      for (int64_t i = 0; i < elements; ++i) {
        float acc = reinterpret_cast<const float*>(all[0].data())[i];
        for (size_t h = 1; h < all.size(); ++h) {
          const float v = reinterpret_cast<const float*>(all[h].data())[i];
          acc = kind == ir::ReduceKind::kSum ? acc + v : std::max(acc, v);
        }
        out[i] = acc;
      }
      return absl::OkStatus();
    }
    absl::Status AllGather(const CollectiveKey& key, absl::Span<const HostId> hosts,
                           int64_t g, const void* in, absl::Span<const int64_t> bytes,
                           void* out, absl::Time deadline) override {
      const size_t me = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), self_) -
                                            hosts.begin());
      CW_ASSIGN_OR_RETURN(
          std::vector<std::string> all,
          Meet(key, hosts, g,
               std::string(static_cast<const char*>(in), static_cast<size_t>(bytes[me])),
               deadline));
      char* p = static_cast<char*>(out);
      for (const std::string& a : all) p = std::copy(a.begin(), a.end(), p);
      return absl::OkStatus();
    }
    absl::Status AllToAll(const CollectiveKey& key, absl::Span<const HostId> hosts, int64_t g,
                          const void* in, absl::Span<const int64_t> send_bytes, void* out,
                          absl::Span<const int64_t> recv_bytes, absl::Time deadline) override {
      // Deposits its parts, each behind its length; takes its own part of
      // every process's deposit.
      std::string mine;
      const char* p = static_cast<const char*>(in);
      for (int64_t b : send_bytes) {
        mine.append(reinterpret_cast<const char*>(&b), sizeof(b));
        mine.append(p, static_cast<size_t>(b));
        p += b;
      }
      const size_t me = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), self_) -
                                            hosts.begin());
      CW_ASSIGN_OR_RETURN(std::vector<std::string> all, Meet(key, hosts, g, mine, deadline));
      char* o = static_cast<char*>(out);
      for (size_t h = 0; h < all.size(); ++h) {
        size_t at = 0;
        int64_t b = 0;
        for (size_t k = 0; k <= me; ++k) {
          std::memcpy(&b, all[h].data() + at, sizeof(b));
          if (k < me) at += sizeof(b) + static_cast<size_t>(b);
        }
        CW_CHECK(b == recv_bytes[h]);
        o = std::copy_n(all[h].data() + at + sizeof(b), b, o);
      }
      return absl::OkStatus();
    }
    void DeliverRendezvous(HostId, std::string, std::string) override {}
    void HostLost(HostId, const absl::Status&) override {}

    int64_t generation = 0;       // guarded by the fabric's mu_
    std::vector<int64_t> calls;   // guarded by the fabric's mu_

   private:
    // Every process's operand, in host order, once all have come.
    absl::StatusOr<std::vector<std::string>> Meet(const CollectiveKey& key,
                                                  absl::Span<const HostId> hosts, int64_t g,
                                                  std::string operand, absl::Time deadline) {
      MutexLock lock(&fabric_->mu_);
      calls.push_back(g);
      auto& meeting = fabric_->meetings_[key];
      meeting[self_] = std::move(operand);
      fabric_->met_.SignalAll();
      const auto until = std::chrono::steady_clock::now() +
                         absl::ToChronoNanoseconds(deadline - absl::Now());
      while (fabric_->meetings_[key].size() < hosts.size()) {
        if (!fabric_->met_.WaitWithDeadline(&fabric_->mu_, until)) {
          return absl::DeadlineExceededError("the library's meeting");
        }
      }
      std::vector<std::string> all;
      for (HostId h : hosts) all.push_back(fabric_->meetings_[key][h]);
      return all;
    }

    Fabric* const fabric_;
    const HostId self_;
  };

  class Peers final : public CollectivePeers {
   public:
    Peers(Fabric* fabric, HostId self, Library* library)
        : fabric_(fabric), self_(self), library_(library) {}
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
    ProcessCollectives* process_collectives() override { return library_; }
    void SendReady(HostId to, const CollectiveKey& key, int64_t generation) override {
      ++fabric_->readies_;
      fabric_->hubs_[to.value()]->DeliverReady(key, self_, generation);
    }

   private:
    Fabric* const fabric_;
    const HostId self_;
    Library* const library_;
  };

  const int per_host_;
  std::vector<std::unique_ptr<Library>> libraries_;
  std::vector<std::unique_ptr<Peers>> peers_;
  std::vector<std::unique_ptr<CollectiveHub>> hubs_;
  std::atomic<int> sent_{0};
  std::atomic<int> readies_{0};
  Mutex mu_;
  CondVar met_;
  absl::flat_hash_map<CollectiveKey, std::map<HostId, std::string>> meetings_ ABSL_GUARDED_BY(mu_);
};

const ir::Shape kVec(ir::DType::kF32, {3});

// Six members on three hosts of `fabric` all-reduce; each gets the sum.
void AllReduceSixMembers(Fabric& fabric) {
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
}

TEST(CollectiveHubPeersTest, AllReduceAcrossThreeHostsGivesEveryMemberTheSum) {
  Fabric fabric(3, 2);
  AllReduceSixMembers(fabric);
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

// Host 0's member of a gang fails before its collective; host 1's member
// then arrives: it fails with the root cause instead of waiting.
void ExpectAbortOnHostZeroFailsHostOne(Fabric& fabric) {
  const std::vector<DeviceId> members = Devices(2);
  float x = 1.0f;
  fabric.hub(0).AbortGang(RunId(5), 2, absl::InternalError("node 2 (matmul) on device 0: boom"));
  absl::Status s = fabric.hub(1).AllReduce(CollectiveKey{RunId(5), 2, 0, 0}, members[1], 1,
                                           members, ir::Shape(ir::DType::kF32, {1}),
                                           ir::ReduceKind::kSum, &x, "all_reduce");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("boom")));
}

TEST(CollectiveHubPeersTest, AGangAbortedOnOneHostFailsItsMembersOnTheOthers) {
  Fabric fabric(2, 1);
  ExpectAbortOnHostZeroFailsHostOne(fabric);
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

// Through a collective library: each process combines its own members
// (rank order), tells the others it is ready, and meets them once in the
// library; no member's operand crosses the data plane.
TEST(CollectiveHubLibraryTest, AllReduceAcrossThreeHostsMeetsOncePerProcess) {
  Fabric fabric(3, 2, absl::Seconds(30), {0, 1, 2});
  AllReduceSixMembers(fabric);
  EXPECT_EQ(fabric.contributions_sent(), 0);
  EXPECT_EQ(fabric.readies_sent(), 6);  // each process to each other
  for (int h = 0; h < 3; ++h) EXPECT_EQ(fabric.library_calls(h).size(), 1u);
}

// Every kind through the library gives what the data plane gives.
TEST(CollectiveHubLibraryTest, EveryKindMatchesTheDataPlane) {
  const std::vector<DeviceId> members = Devices(4);  // 2 hosts x 2
  auto run = [&](Fabric& fabric) {
    std::vector<std::vector<float>> out(4);
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        CollectiveHub& hub = fabric.hub_of(members[r]);
        std::vector<float> in(8);
        for (int i = 0; i < 8; ++i) in[i] = float(100 * r + i);
        std::vector<float> scattered(2), gathered(32), exchanged(8);
        EXPECT_OK(hub.ReduceScatter(CollectiveKey{RunId(2), 0, 0, 0}, members[r], r, members,
                                    ir::ReduceKind::kMax, ir::Shape(ir::DType::kF32, {8}),
                                    ir::Shape(ir::DType::kF32, {2}), 0, in.data(),
                                    scattered.data(), "reduce_scatter"));
        EXPECT_OK(hub.AllGather(CollectiveKey{RunId(2), 0, 1, 0}, members[r], r, members,
                                ir::Shape(ir::DType::kF32, {8}), ir::Shape(ir::DType::kF32, {32}),
                                0, in.data(), gathered.data(), "all_gather"));
        EXPECT_OK(hub.AllToAll(CollectiveKey{RunId(2), 0, 2, 0}, members[r], r, members,
                               ir::Shape(ir::DType::kF32, {8}), ir::Shape(ir::DType::kF32, {8}),
                               0, 0, in.data(), exchanged.data(), "all_to_all"));
        // Split along one dimension, concatenated along the other.
        std::vector<float> crossed(8);
        EXPECT_OK(hub.AllToAll(CollectiveKey{RunId(2), 0, 3, 0}, members[r], r, members,
                               ir::Shape(ir::DType::kF32, {4, 2}),
                               ir::Shape(ir::DType::kF32, {1, 8}), 0, 1, in.data(),
                               crossed.data(), "all_to_all"));
        out[r] = scattered;
        out[r].insert(out[r].end(), gathered.begin(), gathered.end());
        out[r].insert(out[r].end(), exchanged.begin(), exchanged.end());
        out[r].insert(out[r].end(), crossed.begin(), crossed.end());
      });
    }
    for (auto& t : threads) t.join();
    return out;
  };
  Fabric plane(2, 2);
  Fabric library(2, 2, absl::Seconds(30), {0, 1});
  const auto expected = run(plane);
  EXPECT_EQ(run(library), expected);
  EXPECT_EQ(library.contributions_sent(), 0);
  EXPECT_EQ(expected[3][0], 306.0f);  // max over ranks of element 6
}

// A gang that failed on one host before its collective never takes the
// others into the library: they fail with its cause, waiting for nothing.
TEST(CollectiveHubLibraryTest, AGangAbortedOnOneHostNeverReachesTheLibrary) {
  Fabric fabric(2, 1, absl::Seconds(30), {0, 1});
  ExpectAbortOnHostZeroFailsHostOne(fabric);
  EXPECT_TRUE(fabric.library_calls(1).empty());
}

// A process that saw its connections fail (a higher generation) takes the
// others to its generation: all call the library with the highest.
TEST(CollectiveHubLibraryTest, ProcessesMeetAtTheHighestGeneration) {
  Fabric fabric(3, 1, absl::Seconds(30), {0, 1, 2});
  fabric.set_generation(1, 3);
  const std::vector<DeviceId> members = Devices(3);
  std::vector<float> x(3, 1.0f);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_OK(fabric.hub(r).AllReduce(CollectiveKey{RunId(8), 0, 0, 0}, members[r], r, members,
                                        ir::Shape(ir::DType::kF32, {1}), ir::ReduceKind::kSum,
                                        &x[r], "all_reduce"));
    });
  }
  for (auto& t : threads) t.join();
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(fabric.library_calls(h), std::vector<int64_t>{3}) << "host " << h;
    EXPECT_EQ(x[h], 3.0f);
  }
}

// Workers configured differently (one meets in the library, the other
// sends contributions) fail the collective at once, saying so.
TEST(CollectiveHubLibraryTest, WorkersThatDisagreeOnThePathFailAtOnceSayingSo) {
  Fabric fabric(2, 1, absl::Seconds(60), {0});
  const std::vector<DeviceId> members = Devices(2);
  std::vector<float> x(2, 1.0f);
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      status[r] = fabric.hub(r).AllReduce(CollectiveKey{RunId(9), 0, 0, 0}, members[r], r,
                                          members, ir::Shape(ir::DType::kF32, {1}),
                                          ir::ReduceKind::kSum, &x[r], "all_reduce");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(status[r], StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("disagree")))
        << "host " << r;
  }
}

}  // namespace
}  // namespace causeway
