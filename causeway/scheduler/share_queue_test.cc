// Tests for causeway/scheduler/share_queue.h: stride scheduling by weight,
// priority classes, no banked credit for idle clients, corrections,
// eligibility and dropping.
#include "causeway/scheduler/share_queue.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace causeway {
namespace {

auto Any = [](int) { return true; };

// Pops `n` items, charging each `cost`; returns how many each client got.
std::map<int64_t, int> Serve(ShareQueue<int>& q, int n, double cost = 100) {
  std::map<int64_t, int> got;
  for (int i = 0; i < n; ++i) {
    const ClientId c = q.Next(Any);
    if (!c.valid()) break;
    q.Pop(c);
    q.Charge(c, cost);
    ++got[c.value()];
  }
  return got;
}

TEST(ShareQueueTest, DeviceTimeIsSharedInProportionToWeights) {
  ShareQueue<int> q;
  const std::vector<double> weights = {1, 2, 4, 8};
  for (int c = 0; c < 4; ++c) {
    q.SetShare(ClientId(c), ClientShare{weights[c], 0});
    for (int i = 0; i < 1000; ++i) q.Push(ClientId(c), i);
  }
  // 15 rounds of 1+2+4+8 items: every client exactly its weight per round.
  std::map<int64_t, int> got = Serve(q, 15 * 15);
  EXPECT_EQ(got[0], 15);
  EXPECT_EQ(got[1], 30);
  EXPECT_EQ(got[2], 60);
  EXPECT_EQ(got[3], 120);
}

TEST(ShareQueueTest, SharesAreOfDeviceTimeNotOfItemCounts) {
  ShareQueue<int> q;
  for (int i = 0; i < 1000; ++i) {
    q.Push(ClientId(0), i);
    q.Push(ClientId(1), i);
  }
  // Equal weights; client 0's items cost 4x client 1's: 1 item of 0 per 4 of 1.
  int cheap = 0, dear = 0;
  for (int i = 0; i < 500; ++i) {
    const ClientId c = q.Next(Any);
    q.Pop(c);
    q.Charge(c, c.value() == 0 ? 400 : 100);
    (c.value() == 0 ? dear : cheap) += 1;
  }
  EXPECT_NEAR(cheap, 4 * dear, 4);
}

TEST(ShareQueueTest, ItemsOfOneClientKeepTheirOrder) {
  ShareQueue<int> q;
  for (int i = 0; i < 10; ++i) q.Push(ClientId(7), i);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(q.Next(Any), ClientId(7));
    EXPECT_EQ(q.Pop(ClientId(7)), i);
  }
  EXPECT_FALSE(q.Next(Any).valid());
  EXPECT_EQ(q.size(), 0u);
}

TEST(ShareQueueTest, AHigherClassAlwaysGoesFirst) {
  ShareQueue<int> q;
  q.SetShare(ClientId(0), ClientShare{1000, 0});
  q.SetShare(ClientId(1), ClientShare{1, 1});
  for (int i = 0; i < 5; ++i) {
    q.Push(ClientId(0), i);
    q.Push(ClientId(1), i);
  }
  std::vector<int64_t> order;
  for (int i = 0; i < 10; ++i) {
    const ClientId c = q.Next(Any);
    q.Pop(c);
    q.Charge(c, 100);
    order.push_back(c.value());
  }
  EXPECT_EQ(order, (std::vector<int64_t>{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}));
}

TEST(ShareQueueTest, AnIdleClientBanksNoCredit) {
  ShareQueue<int> q;
  for (int i = 0; i < 2000; ++i) q.Push(ClientId(0), i);
  Serve(q, 1000);  // client 0 alone for 1000 items
  for (int i = 0; i < 100; ++i) q.Push(ClientId(1), i);
  // Client 1 joins at the current virtual time: the two alternate, rather
  // than client 1 taking 1000 items in a row to catch up.
  std::map<int64_t, int> got = Serve(q, 100);
  EXPECT_NEAR(got[0], 50, 1);
  EXPECT_NEAR(got[1], 50, 1);
}

TEST(ShareQueueTest, ACorrectionMovesTheChargeToWhatWasMeasured) {
  ShareQueue<int> q;
  for (int i = 0; i < 1000; ++i) {
    q.Push(ClientId(0), i);
    q.Push(ClientId(1), i);
  }
  // Both are estimated at 100, but client 0's items measure 300.
  int zero = 0, one = 0;
  for (int i = 0; i < 400; ++i) {
    const ClientId c = q.Next(Any);
    q.Pop(c);
    q.Charge(c, 100);
    if (c.value() == 0) {
      q.Charge(c, 300 - 100);
      ++zero;
    } else {
      ++one;
    }
  }
  EXPECT_NEAR(one, 3 * zero, 3);
  EXPECT_DOUBLE_EQ(q.charged_us(ClientId(0)), 300.0 * zero);
}

TEST(ShareQueueTest, IneligibleHeadsAreSkipped) {
  ShareQueue<int> q;
  q.Push(ClientId(0), -1);  // ineligible head: its client waits
  q.Push(ClientId(0), 5);
  q.Push(ClientId(1), 6);
  auto positive = [](int v) { return v >= 0; };
  EXPECT_EQ(q.Next(positive), ClientId(1));
  q.Pop(ClientId(1));
  EXPECT_FALSE(q.Next(positive).valid());
  EXPECT_EQ(q.Next(Any), ClientId(0));
}

TEST(ShareQueueTest, DropReturnsTheClientsItemsInOrder) {
  ShareQueue<int> q;
  for (int i = 0; i < 3; ++i) q.Push(ClientId(0), i);
  q.Push(ClientId(1), 9);
  EXPECT_EQ(q.Drop(ClientId(0)), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.Next(Any), ClientId(1));
  EXPECT_TRUE(q.Drop(ClientId(5)).empty());
}

}  // namespace
}  // namespace causeway
