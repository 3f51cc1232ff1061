// The collectives added in issue 3 (all_gather, reduce_scatter, all_to_all,
// collective_permute) take part in the hub's watchdog exactly like
// all_reduce: deadlock detection across kinds, timeouts, AbortGang and
// Shutdown. (Their results are tested end to end in
// tests/integration/collectives_test.cc.) Threads synchronise only through
// joins and the hub itself.
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/worker/collective_hub.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kLongTimeout = absl::Seconds(20);
const ir::Shape kShape(ir::DType::kF32, {2});
const ir::Shape kGathered(ir::DType::kF32, {4});
const std::vector<DeviceId> kPair = {DeviceId(0), DeviceId(1)};

CollectiveKey Key(int node, int index) { return CollectiveKey{RunId(1), node, index, 0}; }

// Member `rank` enters collective kind `kind` (0..3) as collective `index`.
absl::Status Enter(CollectiveHub& hub, int kind, int index, int rank, int node = 0) {
  static thread_local std::vector<float> in(4, 1.0f), out(4, 0.0f);
  const CollectiveKey key = Key(node, index);
  switch (kind) {
    case 0:
      return hub.AllGather(key, DeviceId(rank), rank, kPair, kShape, kGathered, 0, in.data(),
                           out.data(), "all_gather");
    case 1:
      return hub.ReduceScatter(key, DeviceId(rank), rank, kPair, ir::ReduceKind::kSum,
                               kGathered, kShape, 0, in.data(), out.data(), "reduce_scatter");
    case 2:
      return hub.AllToAll(key, DeviceId(rank), rank, kPair, kGathered, kGathered, 0, 0,
                          in.data(), out.data(), "all_to_all");
    default: {
      const std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 1}, {1, 0}};
      return hub.CollectivePermute(key, DeviceId(rank), rank, kPair, kShape, pairs, in.data(),
                                   out.data(), "collective_permute");
    }
  }
}

TEST(CollectiveHubOpsTest, CrossedCollectivesOfDifferentKindsAreReportedAsADeadlock) {
  for (int a = 0; a < 4; ++a) {
    const int b = (a + 1) % 4;
    CollectiveHub hub(kLongTimeout);
    absl::Status s0, s1;
    // Device 0 enters collective #0 (kind a), device 1 enters #1 (kind b):
    // each waits for the other, whichever blocks second closes the cycle.
    std::thread t0([&] { s0 = Enter(hub, a, 0, 0); });
    std::thread t1([&] { s1 = Enter(hub, b, 1, 1); });
    t0.join();
    t1.join();
    EXPECT_EQ(s0.code(), absl::StatusCode::kAborted) << s0;
    EXPECT_EQ(s1.code(), absl::StatusCode::kAborted) << s1;
    EXPECT_THAT(std::string(s0.message()), HasSubstr("deadlock"));
    EXPECT_EQ(hub.deadlocks_detected(), 1);
  }
}

TEST(CollectiveHubOpsTest, MatchingCollectivesOfEveryKindComplete) {
  for (int kind = 0; kind < 4; ++kind) {
    CollectiveHub hub(kLongTimeout);
    absl::Status s0, s1;
    std::thread t0([&] { s0 = Enter(hub, kind, 0, 0); });
    std::thread t1([&] { s1 = Enter(hub, kind, 0, 1); });
    t0.join();
    t1.join();
    EXPECT_OK(s0);
    EXPECT_OK(s1);
  }
}

TEST(CollectiveHubOpsTest, EveryKindTimesOutWhenAPeerNeverComes) {
  for (int kind = 0; kind < 4; ++kind) {
    CollectiveHub hub(absl::Milliseconds(50));
    const absl::Status s = Enter(hub, kind, 0, 0);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  }
}

TEST(CollectiveHubOpsTest, AbortGangAndShutdownFailEveryKind) {
  for (int kind = 0; kind < 4; ++kind) {
    CollectiveHub hub(kLongTimeout);
    hub.AbortGang(RunId(1), 0, absl::InternalError("peer kernel failed"));
    EXPECT_EQ(Enter(hub, kind, 0, 0).code(), absl::StatusCode::kInternal);
    hub.Shutdown();
    EXPECT_EQ(Enter(hub, kind, 0, 0, /*node=*/1).code(), absl::StatusCode::kAborted);
  }
}

TEST(CollectiveHubOpsTest, MembersInDifferentKindsOfTheSameCollectiveDisagree) {
  CollectiveHub hub(absl::Milliseconds(200));
  absl::Status s0, s1;
  std::thread t0([&] { s0 = Enter(hub, 0, 0, 0); });
  std::thread t1([&] { s1 = Enter(hub, 3, 0, 1); });
  t0.join();
  t1.join();
  // One of them finds the other's collective of another kind; the first
  // then waits out its timeout.
  EXPECT_TRUE(s0.code() == absl::StatusCode::kInvalidArgument ||
              s1.code() == absl::StatusCode::kInvalidArgument)
      << s0 << " / " << s1;
  EXPECT_FALSE(s0.ok());
  EXPECT_FALSE(s1.ok());
}

TEST(CollectiveHubOpsTest, ShapesThatDoNotFitTheGroupAreRejectedWithoutWaiting) {
  CollectiveHub hub(kLongTimeout);
  std::vector<float> in(4), out(4);
  EXPECT_EQ(hub.AllGather(Key(0, 0), DeviceId(0), 0, kPair, kShape, kShape, 0, in.data(),
                          out.data(), "bad")
                .code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 5}};
  EXPECT_EQ(hub.CollectivePermute(Key(0, 0), DeviceId(0), 0, kPair, kShape, pairs, in.data(),
                                  out.data(), "bad")
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace causeway
