// Multi-tenancy on the embedded cluster: clients share an island's device
// time in proportion to their weights, a greedy client cannot hold another
// behind its queue, weights change while running, and a client that leaves
// with runs still held by the scheduler leaves nothing behind.
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kComputeUs = 200;

LocalClusterOptions OneHostTwoDevices() {
  LocalClusterOptions o;
  o.islands = 1;
  o.hosts_per_island = 1;
  o.devices_per_host = 2;
  o.run_ahead = absl::Milliseconds(1);
  return o;
}

// A gang on both devices: delay, then an all-reduce.
struct Tenant {
  std::unique_ptr<Client> client;
  CompiledFunction f;
  Array input;

  Tenant(LocalCluster* cluster, ClientShare share) {
    ClientOptions options;
    options.share = share;
    client = Connect(cluster, options);
    const Mesh mesh = *client->AllocateMesh({{"x", 2}});
    ir::FunctionBuilder b("gang");
    ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {2}));
    ir::Value y = b.AllReduce(b.Delay(x, kComputeUs), {"x"});
    auto compiled = client->Compile(*b.Build({y}), mesh,
                                    {{Sharding({{"x"}})}, {Sharding({{"x"}})}});
    CW_CHECK_OK(compiled.status());
    f = *compiled;
    input = *client->Put(ir::Literal::F32({4}, {1, 2, 3, 4}), mesh, Sharding({{"x"}}));
  }
  std::vector<Array> Submit(int n) {
    std::vector<Array> out;
    for (int i = 0; i < n; ++i) out.push_back((*client->Call(f, {input}))[0]);
    return out;
  }
};

ClientScheduleStats Stats(LocalCluster& cluster, const Tenant& t) {
  return cluster.island_scheduler(IslandId(0))->client_stats(t.client->id());
}

TEST(TenancyTest, DeviceTimeIsSharedByWeight) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  Tenant light(cluster.get(), ClientShare{1, 0});
  Tenant heavy(cluster.get(), ClientShare{3, 0});
  std::vector<Array> a = light.Submit(150);
  std::vector<Array> b = heavy.Submit(150);
  // When the heavy client is done, the light one had a third of its time.
  ASSERT_OK(AwaitOrHang(b.back().Ready()).status());
  const ClientScheduleStats l = Stats(*cluster, light);
  const ClientScheduleStats h = Stats(*cluster, heavy);
  EXPECT_EQ(h.finished, 150);
  EXPECT_GE(l.forwarded, 35) << "light client starved";
  EXPECT_LE(l.forwarded, 75) << "light client took more than its share";
  for (const Array& x : a) ASSERT_OK(AwaitOrHang(x.Fetch()).status());
  EXPECT_EQ(cluster->collective_hub().deadlocks_detected(), 0);
}

TEST(TenancyTest, AGreedyClientCannotHoldAnotherBehindItsQueue) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  Tenant greedy(cluster.get(), ClientShare{});
  Tenant polite(cluster.get(), ClientShare{});
  std::vector<Array> flood = greedy.Submit(3000);
  ASSERT_OK(AwaitOrHang(greedy.client->Flush()).status());
  auto v = AwaitOrHang(polite.Submit(1)[0].Fetch());
  ASSERT_OK(v.status());
  EXPECT_EQ(v->values<float>()[0], 4.0f);  // 1 + 3 (shards {1, 2} and {3, 4} summed)
  // FIFO would have run all 3000 first.
  EXPECT_LT(Stats(*cluster, greedy).finished, 1000);
  // Leaving with thousands of runs held: they never run, nothing hangs.
  flood.clear();
  greedy.client->Disconnect();
  EXPECT_EQ(Stats(*cluster, greedy).queued, 0u);
  ASSERT_OK(AwaitOrHang(polite.Submit(1)[0].Ready()).status());
}

TEST(TenancyTest, AWeightChangeTakesEffectWhileRunning) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  Tenant one(cluster.get(), ClientShare{});
  Tenant two(cluster.get(), ClientShare{});
  ASSERT_OK(one.client->SetShare(ClientShare{4, 0}));
  std::vector<Array> a = one.Submit(200);
  std::vector<Array> b = two.Submit(200);
  ASSERT_OK(AwaitOrHang(a.back().Ready()).status());
  const ClientScheduleStats s = Stats(*cluster, two);
  EXPECT_GE(s.forwarded, 30);
  EXPECT_LE(s.forwarded, 80);
  for (const Array& x : b) ASSERT_OK(AwaitOrHang(x.Ready()).status());
}

TEST(TenancyTest, OutputsAreReadableAndReleasableWhileTheirRunsAreHeld) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  Tenant t(cluster.get(), ClientShare{});
  // Each call reads the previous output; most are held when made, and the
  // intermediate handles go at once.
  Array x = t.input;
  for (int i = 0; i < 200; ++i) x = (*t.client->Call(t.f, {x}))[0];
  auto v = AwaitOrHang(x.Fetch());
  ASSERT_OK(v.status());
  EXPECT_GT(v->values<float>()[0], 0.0f);
  x = Array();
  t.input = Array();
  ASSERT_OK(AwaitOrHang(t.client->Flush()).status());
}

TEST(TenancyTest, BadSharesAreRefused) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  ClientOptions o;
  o.share.weight = 0;
  EXPECT_THAT(Client::Connect(cluster.get(), o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight")));
  o.share = ClientShare{1, 9};
  EXPECT_THAT(Client::Connect(cluster.get(), o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("priority")));
  auto client = Connect(cluster.get());
  EXPECT_THAT(client->SetShare(ClientShare{std::nan(""), 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight")));
}

}  // namespace
}  // namespace causeway::testing
