// Gang scheduling: the island scheduler puts every gang into one order on
// all of its devices, so collectives of many clients on overlapping meshes
// never deadlock. Without it (the bypass) they can, and the collective
// watchdog reports the deadlock instead of hanging.
#include <thread>

#include "causeway/worker/collective_hub.h"
#include "gmock/gmock.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

LocalClusterOptions OneIslandTwoHosts(int devices_per_host) {
  LocalClusterOptions o;
  o.islands = 1;
  o.hosts_per_island = 2;
  o.devices_per_host = devices_per_host;
  return o;
}

Mesh MeshOf(Client& client, std::vector<int> devices) {
  MeshRequest request;
  request.axes = {{"x", static_cast<int64_t>(devices.size())}};
  for (int d : devices) request.devices.push_back(DeviceId(d));
  return *client.AllocateMesh(request);
}

TEST(GangSchedulingTest, FourClientsRunningAllReducesOnOverlappingMeshesNeverDeadlock) {
  auto cluster = MakeCluster(OneIslandTwoHosts(4));
  // Overlapping meshes spanning both hosts, with devices in different orders.
  const std::vector<std::vector<int>> meshes = {
      {0, 1, 2, 3, 4, 5, 6, 7}, {2, 3, 4, 5}, {7, 6, 5, 4, 3, 2, 1, 0}, {6, 7, 0, 1}};
  constexpr int kRuns = 500;
  constexpr int kWindow = 50;
  std::vector<std::thread> threads;
  std::vector<int> completed(meshes.size(), 0);
  for (size_t c = 0; c < meshes.size(); ++c) {
    threads.emplace_back([&, c] {
      auto client = Connect(cluster.get());
      const Mesh mesh = MeshOf(*client, meshes[c]);
      const int64_t n = static_cast<int64_t>(meshes[c].size());
      auto f = client->Compile(AllReduceSum(2, {"x"}), mesh,
                               {{Sharding({{"x"}})}, {Sharding::Replicated(1)}});
      ASSERT_OK(f.status());
      // Shard k holds {k + c, 1}: the sum is {n(n-1)/2 + n c, n}.
      std::vector<float> values;
      for (int64_t k = 0; k < n; ++k) {
        values.push_back(static_cast<float>(k + c));
        values.push_back(1.0f);
      }
      auto in = client->Put(ir::Literal::F32({2 * n}, values), mesh, Sharding({{"x"}}));
      ASSERT_OK(in.status());
      const float want0 = static_cast<float>(n * (n - 1) / 2 + n * static_cast<int64_t>(c));
      for (int done = 0; done < kRuns; done += kWindow) {
        std::vector<Array> outs;
        for (int i = 0; i < kWindow; ++i) {
          auto out = client->Call(*f, {*in});
          ASSERT_OK(out.status());
          outs.push_back((*out)[0]);
        }
        for (const Array& a : outs) {
          auto v = AwaitOrHang(a.Fetch());
          ASSERT_OK(v.status());
          ASSERT_EQ(v->values<float>()[0], want0);
          ASSERT_EQ(v->values<float>()[1], static_cast<float>(n));
          ++completed[c];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t c = 0; c < meshes.size(); ++c) EXPECT_EQ(completed[c], kRuns) << "client " << c;
  EXPECT_EQ(cluster->collective_hub().deadlocks_detected(), 0);
}

// Two clients each run one all-reduce over devices 0 (host 0) and 1 (host 1).
// With the scheduler bypassed, client A reaches host 0 first and client B
// reaches host 1 first, so the devices meet the two collectives in opposite
// orders: a deadlock, which the watchdog must detect and report.
TEST(GangSchedulingTest, BypassingTheSchedulerDeadlocksAndTheWatchdogReportsIt) {
  auto cluster = MakeCluster(OneIslandTwoHosts(1));
  Notification a_first, b_first;
  ClientOptions a_options, b_options;
  a_options.scheduling = b_options.scheduling = SchedulerPath::kBypassForTesting;
  b_options.bypass_reverse_host_order = true;
  a_options.bypass_hook = [&](int i) {
    if (i == 0) {
      a_first.Notify();
      b_first.WaitForNotification();
    }
  };
  b_options.bypass_hook = [&](int i) {
    if (i == 0) {
      b_first.Notify();
      a_first.WaitForNotification();
    }
  };
  auto a = Connect(cluster.get(), a_options);
  auto b = Connect(cluster.get(), b_options);
  const Mesh mesh_a = MeshOf(*a, {0, 1});
  const Mesh mesh_b = MeshOf(*b, {0, 1});
  auto fa = *a->Compile(AllReduceSum(1, {"x"}, "reduce_a"), mesh_a, {});
  auto fb = *b->Compile(AllReduceSum(1, {"x"}, "reduce_b"), mesh_b, {});
  Array in_a = *a->Put(ir::Literal::F32({1}, {1.0f}), mesh_a, Sharding::Replicated(1));
  Array in_b = *b->Put(ir::Literal::F32({1}, {1.0f}), mesh_b, Sharding::Replicated(1));
  std::vector<Array> out_a, out_b;
  std::thread ta([&] { out_a = *a->Call(fa, {in_a}); });
  std::thread tb([&] { out_b = *b->Call(fb, {in_b}); });
  ta.join();
  tb.join();
  for (const Array& out : {out_a[0], out_b[0]}) {
    EXPECT_THAT(AwaitOrHang(out.Fetch()),
                StatusIs(absl::StatusCode::kAborted,
                         AllOf(HasSubstr("deadlock"), HasSubstr("device 0"),
                               HasSubstr("device 1"))));
  }
  EXPECT_GE(cluster->collective_hub().deadlocks_detected(), 1);
}

TEST(GangSchedulingTest, TheSameInterleavingThroughTheSchedulerCompletes) {
  auto cluster = MakeCluster(OneIslandTwoHosts(1));
  auto a = Connect(cluster.get());
  auto b = Connect(cluster.get());
  const Mesh mesh_a = MeshOf(*a, {0, 1});
  const Mesh mesh_b = MeshOf(*b, {1, 0});
  auto fa = *a->Compile(AllReduceSum(1, {"x"}, "reduce_a"), mesh_a, {});
  auto fb = *b->Compile(AllReduceSum(1, {"x"}, "reduce_b"), mesh_b, {});
  Array in_a = *a->Put(ir::Literal::F32({1}, {1.0f}), mesh_a, Sharding::Replicated(1));
  Array in_b = *b->Put(ir::Literal::F32({1}, {2.0f}), mesh_b, Sharding::Replicated(1));
  std::vector<Array> outs;
  std::thread tb([&] {
    for (int i = 0; i < 100; ++i) {
      auto o = b->Call(fb, {in_b});
      ASSERT_OK(o.status());
    }
  });
  for (int i = 0; i < 100; ++i) outs.push_back((*a->Call(fa, {in_a}))[0]);
  tb.join();
  for (const Array& o : outs) {
    ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(o.Fetch()));
    EXPECT_EQ(v.values<float>()[0], 2.0f);
  }
  EXPECT_EQ(cluster->collective_hub().deadlocks_detected(), 0);
}

}  // namespace
}  // namespace causeway::testing
