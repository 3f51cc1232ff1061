// GlooCollectives between "processes" of one test: each is a
// GlooCollectives of its own, with Gloo's own TCP connections over
// loopback; their rendezvous entries are handed over directly.
#include "causeway/cluster/gloo_collectives.h"

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "causeway/testing/status_matchers.h"

namespace causeway {
namespace {

using ::testing::HasSubstr;

// Processes 0..n-1, as hosts 0..n-1.
class Processes {
 public:
  explicit Processes(int n) : members_(static_cast<size_t>(n)) {
    for (int i = 0; i < n; ++i) Start(i);
  }

  GlooCollectives& operator[](int i) { return *members_[static_cast<size_t>(i)]; }
  // Destroys process `i`: its connections close, as when it dies.
  void Kill(int i) {
    std::unique_ptr<GlooCollectives> dead;
    {
      MutexLock lock(&mu_);
      dead = std::move(members_[static_cast<size_t>(i)]);
    }
  }

 private:
  void Start(int i) {
    GlooCollectives::Plane plane;
    plane.self = [i] { return HostId(i); };
    plane.hostname = [] { return std::string("127.0.0.1"); };
    plane.send = [this, i](HostId to, const std::string& key, const std::string& value) {
      MutexLock lock(&mu_);
      GlooCollectives* target = members_[static_cast<size_t>(to.value())].get();
      if (target != nullptr) target->DeliverRendezvous(HostId(i), key, value);
    };
    members_[static_cast<size_t>(i)] = std::make_unique<GlooCollectives>(std::move(plane), 0);
  }

  Mutex mu_;
  std::vector<std::unique_ptr<GlooCollectives>> members_;
};

std::vector<HostId> Hosts(std::initializer_list<int> ids) {
  std::vector<HostId> out;
  for (int i : ids) out.push_back(HostId(i));
  return out;
}

CollectiveKey Key(int64_t run, int index = 0) { return CollectiveKey{RunId(run), 0, index, 0}; }

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// Runs `body(i)` on a thread per process and joins them.
template <typename Body>
void OnEach(int n, Body body) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&body, i] { body(i); });
  for (auto& t : threads) t.join();
}

TEST(GlooCollectivesTest, AllReduceAndAllGatherAgreeOnEveryProcess) {
  Processes p(3);
  const std::vector<HostId> all = Hosts({0, 1, 2});
  // 3 processes: the ring (halving-doubling needs a power of two), in
  // segments (300 000 floats).
  constexpr int kBig = 300'000;
  std::vector<std::vector<float>> sums(3, std::vector<float>(kBig));
  std::vector<std::vector<int32_t>> maxima(3, std::vector<int32_t>(5));
  std::vector<std::vector<char>> gathered(3, std::vector<char>(1 + 2 + 3));
  OnEach(3, [&](int i) {
    std::iota(sums[i].begin(), sums[i].end(), static_cast<float>(i));
    for (int k = 0; k < 5; ++k) maxima[i][k] = (i * 7 + k * 3) % 10;
    const std::vector<char> mine(static_cast<size_t>(i + 1), static_cast<char>('a' + i));
    const std::vector<int64_t> bytes = {1, 2, 3};
    for (int round = 0; round < 2; ++round) {
      EXPECT_OK(p[i].AllReduce(Key(1, round), all, 0, ir::DType::kF32, ir::ReduceKind::kSum,
                               sums[i].data(), kBig, In(absl::Seconds(30))));
    }
    EXPECT_OK(p[i].AllReduce(Key(2), all, 0, ir::DType::kI32, ir::ReduceKind::kMax,
                             maxima[i].data(), 5, In(absl::Seconds(30))));
    EXPECT_OK(p[i].AllGather(Key(3), all, 0, mine.data(), bytes, gathered[i].data(),
                             In(absl::Seconds(30))));
  });
  for (int i = 0; i < 3; ++i) {
    // Two rounds: the first sums the three, the second sums three copies.
    for (int k : {0, 1, kBig - 1}) EXPECT_EQ(sums[i][k], 3.0f * (3.0f * k + 3.0f)) << i << " " << k;
    EXPECT_EQ(sums[i], sums[0]);  // the same bits everywhere
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(maxima[i][k], std::max({k * 3 % 10, (7 + k * 3) % 10, (14 + k * 3) % 10}));
    }
    EXPECT_EQ(std::string(gathered[i].begin(), gathered[i].end()), "abbccc");
    EXPECT_EQ(p[i].connects(), 1);  // one group, connected once
  }
}

TEST(GlooCollectivesTest, AllToAllDeliversEachPartToItsProcess) {
  // Process i sends i+1+j bytes of ('a'+i) to process j.
  Processes p(3);
  const std::vector<HostId> all = Hosts({0, 1, 2});
  std::vector<std::string> received(3);
  OnEach(3, [&](int i) {
    std::vector<int64_t> send(3), recv(3);
    std::string in;
    for (int j = 0; j < 3; ++j) {
      send[j] = i + 1 + j;
      recv[j] = j + 1 + i;
      in.append(static_cast<size_t>(send[j]), static_cast<char>('a' + i));
    }
    std::string out(static_cast<size_t>(recv[0] + recv[1] + recv[2]), '?');
    EXPECT_OK(p[i].AllToAll(Key(5), all, 0, in.data(), send, out.data(), recv,
                            In(absl::Seconds(30))));
    received[i] = out;
  });
  EXPECT_EQ(received[0], "a" "bb" "ccc");
  EXPECT_EQ(received[1], "aa" "bbb" "cccc");
  EXPECT_EQ(received[2], "aaa" "bbbb" "ccccc");
}

TEST(GlooCollectivesTest, OverlappingCollectivesOfOneGroupDoNotMix) {
  // Two gangs' all-reduces in flight at once on the same two processes,
  // started in opposite orders: their tags keep them apart.
  Processes p(2);
  const std::vector<HostId> both = Hosts({0, 1});
  std::vector<std::vector<float>> a(2, std::vector<float>(1000)), b(2, std::vector<float>(1000));
  OnEach(4, [&](int t) {
    const int i = t % 2;
    const bool first = (t / 2 == 0) == (i == 0);
    std::vector<float>& mine = first ? a[i] : b[i];
    std::fill(mine.begin(), mine.end(), first ? 1.0f + i : 10.0f * (1 + i));
    EXPECT_OK(p[i].AllReduce(Key(first ? 10 : 11), both, 0, ir::DType::kF32, ir::ReduceKind::kSum,
                             mine.data(), 1000, In(absl::Seconds(30))));
  });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i], std::vector<float>(1000, 3.0f));
    EXPECT_EQ(b[i], std::vector<float>(1000, 30.0f));
  }
}

TEST(GlooCollectivesTest, APeerThatDiesFailsTheOthersNamingItWithoutWaitingForTheDeadline) {
  Processes p(3);
  const std::vector<HostId> all = Hosts({0, 1, 2});
  OnEach(3, [&](int i) {
    float x = 1;
    EXPECT_OK(p[i].AllReduce(Key(1), all, 0, ir::DType::kF32, ir::ReduceKind::kSum, &x, 1,
                             In(absl::Seconds(30))));
  });
  // Processes 0 and 1 enter the next all-reduce; process 2 dies instead,
  // and the coordinator's notice of it follows.
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> status(2);
  OnEach(3, [&](int i) {
    if (i == 2) {
      std::this_thread::yield();
      p.Kill(2);
      for (int k = 0; k < 2; ++k) {
        p[k].HostLost(HostId(2), absl::UnavailableError("worker 2 was killed"));
      }
      return;
    }
    std::vector<float> x(1 << 16, 1.0f);
    status[i] = p[i].AllReduce(Key(2), all, 0, ir::DType::kF32, ir::ReduceKind::kSum, x.data(),
                               static_cast<int64_t>(x.size()), In(absl::Seconds(60)));
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(status[i].code(), absl::StatusCode::kUnavailable) << status[i];
    EXPECT_THAT(status[i].message(), HasSubstr("host 2"));
    EXPECT_THAT(status[i].message(), HasSubstr("killed"));
  }
  EXPECT_LT(seconds, 20.0);
  // The lost host's groups are gone: a later call with it fails at once.
  float y = 1;
  const absl::Status later = p[0].AllReduce(Key(3), all, 0, ir::DType::kF32, ir::ReduceKind::kSum,
                                            &y, 1, In(absl::Seconds(30)));
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable) << later;
  EXPECT_THAT(later.message(), HasSubstr("was lost"));
  // The survivors still work together.
  OnEach(2, [&](int i) {
    float z = 2;
    EXPECT_OK(p[i].AllReduce(Key(4), Hosts({0, 1}), 0, ir::DType::kF32, ir::ReduceKind::kSum, &z,
                             1, In(absl::Seconds(30))));
    EXPECT_EQ(z, 4.0f);
  });
}

TEST(GlooCollectivesTest, APeerThatNeverComesEndsTheCallAtItsDeadline) {
  Processes p(2);
  float x = 1;
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = p[0].AllReduce(Key(1), Hosts({0, 1}), 0, ir::DType::kF32,
                                             ir::ReduceKind::kSum, &x, 1,
                                             In(absl::Milliseconds(300)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("host 0,host 1"));
  EXPECT_LT(seconds, 10.0);
  // Process 0 moved to the next generation, process 1 never began: they
  // agree on the higher (as the hub does, from their readiness) and
  // connect afresh.
  const int64_t generation =
      std::max(p[0].Generation(Hosts({0, 1})), p[1].Generation(Hosts({0, 1})));
  EXPECT_EQ(generation, 1);
  OnEach(2, [&](int i) {
    float z = 1;
    EXPECT_OK(p[i].AllReduce(Key(2), Hosts({0, 1}), generation, ir::DType::kF32,
                             ir::ReduceKind::kSum, &z, 1, In(absl::Seconds(30))));
    EXPECT_EQ(z, 2.0f);
  });
}

TEST(GlooCollectivesTest, RendezvousEntriesFromPeersAreCheckedAndBounded) {
  Processes p(1);
  p[0].DeliverRendezvous(HostId(5), "not-ours/0", "x");
  p[0].DeliverRendezvous(HostId(5), "causeway/x", std::string(GlooCollectives::kMaxEntryBytes + 1, 'x'));
  EXPECT_EQ(p[0].entries_held(), 0u);
  for (size_t i = 0; i < GlooCollectives::kMaxEntries + 10; ++i) {
    p[0].DeliverRendezvous(HostId(5), absl::StrCat("causeway/k", i), "v");
  }
  EXPECT_EQ(p[0].entries_held(), GlooCollectives::kMaxEntries);
  // A lost host's entries are refused.
  p[0].HostLost(HostId(6), absl::UnavailableError("gone"));
  p[0].DeliverRendezvous(HostId(6), "causeway/late", "v");
  EXPECT_EQ(p[0].entries_held(), GlooCollectives::kMaxEntries);
}

}  // namespace
}  // namespace causeway
