// Multi-tenancy on the embedded cluster: clients share an island's device
// time in proportion to their weights, a greedy client cannot hold another
// behind its queue, weights change while running, and a client that leaves
// with runs still held by the scheduler leaves nothing behind.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/host_executor.h"
#include "causeway/scheduler/island_scheduler.h"
#include "gmock/gmock.h"
#include "tests/integration/cluster_kinds.h"
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

  Tenant(ClusterConnection* cluster, ClientShare share, int64_t compute_us = kComputeUs) {
    ClientOptions options;
    options.share = share;
    client = Connect(cluster, options);
    const Mesh mesh = *client->AllocateMesh({{"x", 2}});
    ir::FunctionBuilder b("gang");
    ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {2}));
    ir::Value y = b.AllReduce(b.Delay(x, compute_us), {"x"});
    auto compiled = client->Compile(*b.Build({y}), mesh,
                                    {{Sharding({{"x"}})}, {Sharding({{"x"}})}});
    CW_CHECK_OK(compiled.status());
    f = *compiled;
    input = *client->Put(ir::Literal::F32({4}, {1, 2, 3, 4}), mesh, Sharding({{"x"}}));
  }
  // Runs `n` alone and waits for them: the program's device time is then
  // measured (the scheduler clips outliers against it), and a slow first run
  // has been charged while this client had the island to itself.
  absl::Status Warm(int n) {
    for (const Array& x : Submit(n)) CW_RETURN_IF_ERROR(AwaitOrHang(x.Ready()).status());
    return absl::OkStatus();
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

// Runs `measure` (one trial on a fresh cluster, writing a ratio of device
// times) up to three times, until a trial lands within [lo, hi]; fails with
// every trial's ratio if none does. On a machine loaded by other work the
// device time a host measures per run moves, and a single trial can land
// outside (one measured 0.45 for a bound of 0.4); a scheduler that ignores
// the weights lands outside in every trial.
template <typename Measure>
void ExpectATrialWithin(Measure measure, double lo, double hi) {
  std::vector<double> ratios;
  for (int trial = 0; trial < 3; ++trial) {
    double ratio = 0;
    ASSERT_NO_FATAL_FAILURE(measure(&ratio));
    ratios.push_back(ratio);
    if (ratio >= lo && ratio <= hi) return;
  }
  ADD_FAILURE() << "no trial within [" << lo << ", " << hi
                << "]; per trial: " << absl::StrJoin(ratios, ", ");
}

// One trial: a client of weight 1 and one of weight 3; `ratio` is the
// light one's device time over the heavy one's.
void MeasureSharesByWeight(double* ratio) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  Tenant light(cluster.get(), ClientShare{1, 0});
  Tenant heavy(cluster.get(), ClientShare{3, 0});
  ASSERT_OK(light.Warm(4));
  ASSERT_OK(heavy.Warm(4));
  std::vector<Array> a = light.Submit(150);
  std::vector<Array> b = heavy.Submit(150);
  // From when both clients' runs are queued at the scheduler (the light one
  // may have had the island alone before) until the heavy one is done, the
  // light one had a third of the island's device time.
  ASSERT_OK(AwaitOrHang(light.client->Flush()).status());
  ASSERT_OK(AwaitOrHang(heavy.client->Flush()).status());
  const ClientScheduleStats l0 = Stats(*cluster, light);
  const ClientScheduleStats h0 = Stats(*cluster, heavy);
  ASSERT_OK(AwaitOrHang(b.back().Ready()).status());
  const ClientScheduleStats l1 = Stats(*cluster, light);
  const ClientScheduleStats h1 = Stats(*cluster, heavy);
  ASSERT_GT(h1.charged_us - h0.charged_us, 0);
  // Shares are of device time (as the hosts measured it, outliers clipped),
  // not of run counts.
  *ratio = static_cast<double>(l1.charged_us - l0.charged_us) /
           static_cast<double>(h1.charged_us - h0.charged_us);
  for (const Array& x : a) ASSERT_OK(AwaitOrHang(x.Fetch()).status());
  EXPECT_EQ(cluster->collective_hub().deadlocks_detected(), 0);
}

// The light client gets a third of the heavy one's device time.
TEST(TenancyTest, DeviceTimeIsSharedByWeight) {
  ExpectATrialWithin(MeasureSharesByWeight, 0.2, 0.5);
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
  // And once the other leaves too, every byte of device memory comes back.
  polite.input = Array();
  polite.client->Disconnect();
  for (const auto& host : cluster->executors()) {
    for (int d = 0; d < host->num_devices(); ++d) {
      EXPECT_TRUE(host->store().memory(d)->AwaitEmpty(kHangTimeout)) << "device " << d;
    }
  }
}

// One trial: two clients of equal weight, the first's raised to 4 before
// either submits; `ratio` is the second's device time over the first's
// while both have work.
void MeasureWeightChange(double* ratio) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  Tenant one(cluster.get(), ClientShare{});
  Tenant two(cluster.get(), ClientShare{});
  ASSERT_OK(one.client->SetShare(ClientShare{4, 0}));
  ASSERT_OK(one.Warm(4));
  ASSERT_OK(two.Warm(4));
  std::vector<Array> a = one.Submit(200);
  std::vector<Array> b = two.Submit(200);
  ASSERT_OK(AwaitOrHang(one.client->Flush()).status());
  ASSERT_OK(AwaitOrHang(two.client->Flush()).status());
  const ClientScheduleStats one0 = Stats(*cluster, one), two0 = Stats(*cluster, two);
  ASSERT_OK(AwaitOrHang(a.back().Ready()).status());
  const ClientScheduleStats one1 = Stats(*cluster, one), two1 = Stats(*cluster, two);
  ASSERT_GT(one1.charged_us - one0.charged_us, 0);
  *ratio = static_cast<double>(two1.charged_us - two0.charged_us) /
           static_cast<double>(one1.charged_us - one0.charged_us);
  for (const Array& x : b) ASSERT_OK(AwaitOrHang(x.Ready()).status());
}

// The second client gets a quarter of the first's device time.
TEST(TenancyTest, AWeightChangeTakesEffectWhileRunning) {
  ExpectATrialWithin(MeasureWeightChange, 0.15, 0.4);
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

// The same on both cluster kinds, each client with a connection of its own,
// observed from the clients: the order in which their outputs became ready.
class TenancyKindsTest : public ::testing::TestWithParam<ClusterKind> {
 protected:
  // One island of `hosts` hosts with `devices` devices each.
  void Start(int hosts, int devices) {
    if (GetParam() == ClusterKind::kEmbedded) {
      LocalClusterOptions o = OneHostTwoDevices();
      o.hosts_per_island = hosts;
      o.devices_per_host = devices;
      local_ = MakeCluster(o);
      return;
    }
    processes_ = StartProcesses(ProcessShape(1, hosts, devices));
  }
  ClusterConnection* NewConnection() {
    if (local_ != nullptr) return local_.get();
    remotes_.push_back(ConnectRemote(*processes_));
    return remotes_.back().get();
  }
  // Records in `order` the position of each output in the order outputs
  // became ready; the returned futures are ready once it is recorded.
  // Callbacks hold only shared state: they may run after the test body.
  std::vector<Future<Unit>> Watch(const std::vector<Array>& outs,
                                  const std::shared_ptr<std::vector<int64_t>>& order) {
    order->assign(outs.size(), -1);
    std::vector<Future<Unit>> recorded;
    for (size_t i = 0; i < outs.size(); ++i) {
      Promise<Unit> done;
      recorded.push_back(done.future());
      outs[i].Ready().OnReady([next = next_, order, i, done](const absl::StatusOr<Unit>&) {
        (*order)[i] = next->fetch_add(1);
        done.Set(Unit{});
      });
    }
    return recorded;
  }

  std::unique_ptr<LocalCluster> local_;
  std::unique_ptr<ProcessCluster> processes_;
  std::vector<std::unique_ptr<RemoteCluster>> remotes_;
  std::shared_ptr<std::atomic<int64_t>> next_ = std::make_shared<std::atomic<int64_t>>(0);
};

INSTANTIATE_TEST_SUITE_P(Kinds, TenancyKindsTest,
                         ::testing::Values(ClusterKind::kEmbedded, ClusterKind::kProcesses),
                         KindName);

TEST_P(TenancyKindsTest, SharesFollowWeightsAndAGreedyClientCannotStarveAnother) {
  Start(1, 2);
  // One trial with gangs of `compute_us`: the light client's results per
  // heavy result while both have runs queued. `light_left` is how many of the
  // light one's runs were not yet done once the heavy one's were queued.
  auto trial = [&](int64_t compute_us, int* light_left) -> double {
    Tenant light(NewConnection(), ClientShare{1, 0}, compute_us);
    Tenant heavy(NewConnection(), ClientShare{1, 0}, compute_us);
    // A change of weight after connecting takes effect.
    EXPECT_OK(heavy.client->SetShare(ClientShare{3, 0}));
    // Equal gangs: while both have runs queued, the light one gets a third
    // of the heavy one's. It has more than it can finish meanwhile, unless
    // its runs were submitted no faster than they ran (checked below).
    std::vector<Array> a = light.Submit(600);
    auto light_done = std::make_shared<std::atomic<int>>(0);
    for (const Array& x : a) {
      x.Ready().OnReady([light_done](const absl::StatusOr<Unit>&) { light_done->fetch_add(1); });
    }
    std::vector<Array> b = heavy.Submit(150);
    EXPECT_OK(AwaitOrHang(heavy.client->Flush()).status());
    *light_left = static_cast<int>(a.size()) - light_done->load();
    auto a_order = std::make_shared<std::vector<int64_t>>();
    auto b_order = std::make_shared<std::vector<int64_t>>();
    const std::vector<Future<Unit>> a_seen = Watch(a, a_order);
    const std::vector<Future<Unit>> b_seen = Watch(b, b_order);
    for (const Future<Unit>& f : a_seen) EXPECT_OK(AwaitOrHang(f).status());
    for (const Future<Unit>& f : b_seen) EXPECT_OK(AwaitOrHang(f).status());
    // Between the heavy client's 20th and 130th results: before, the light
    // one may have had the island alone; at either end, a result seen late
    // by its client (a loaded machine, a batched notification) would count
    // the light one's runs of that moment, and at the end it has the island
    // alone. Inside the window both have runs queued.
    std::vector<int64_t> heavy_seen = *b_order;
    std::sort(heavy_seen.begin(), heavy_seen.end());
    const int64_t first = heavy_seen[20];
    const int64_t last = heavy_seen[129];
    int light_between = 0;
    for (int64_t o : *a_order) light_between += o > first && o < last;
    const int heavy_between = 129 - 20 - 1;
    return static_cast<double>(light_between) / heavy_between;
  };
  // A third, within what a loaded machine's noise in measured device time
  // moves it (FIFO gives 0 here, equal shares 1). Under ThreadSanitizer with
  // worker processes on 2 cores one trial in about seven lands outside
  // (measured: 0.11 to 0.87), so up to three trials are run and one must
  // land inside: a scheduler that does not divide by weight misses in all.
  //
  // The window needs the light client to have runs queued throughout: about
  // 45 (a third of the heavy one's 130). Where its 600 were submitted no
  // faster than 200 us gangs ran (ThreadSanitizer, worker processes, a loaded
  // machine: trials of 0, 0 and 0.12 were seen), the island was the light
  // one's alone while it submitted, and little was left to share. Such a
  // trial measures nothing; it is run again with gangs twice as long, so that
  // submitting outpaces running. FIFO leaves the light one's runs queued too
  // (all ahead of the heavy one's), so it still gives 0.
  int64_t compute_us = kComputeUs;
  ExpectATrialWithin(
      [&](double* ratio) {
        for (int attempt = 0;; ++attempt) {
          int light_left = 0;
          *ratio = trial(compute_us, &light_left);
          if (light_left >= 200) return;
          if (attempt == 4) {
            ADD_FAILURE() << "the light client had only " << light_left
                          << " of its 600 runs left once the heavy one's were queued, with "
                          << compute_us << " us gangs";
            return;
          }
          compute_us *= 2;
        }
      },
      0.15, 0.65);
  Tenant greedy(NewConnection(), ClientShare{});
  Tenant polite(NewConnection(), ClientShare{});
  std::vector<Array> flood = greedy.Submit(2000);
  ASSERT_OK(AwaitOrHang(greedy.client->Flush()).status());
  // How many of the flood were ready when the polite client's result was.
  auto flood_done = std::make_shared<std::atomic<int>>(0);
  for (const Array& x : flood) {
    x.Ready().OnReady([flood_done](const absl::StatusOr<Unit>& r) {
      if (r.ok()) flood_done->fetch_add(1);
    });
  }
  auto v = AwaitOrHang(polite.Submit(1)[0].Fetch());
  ASSERT_OK(v.status());
  EXPECT_EQ(v->values<float>()[0], 4.0f);
  // FIFO would have run all 2000 first.
  EXPECT_LT(flood_done->load(), 1000);
  // Leaving with runs held: they never run, and nothing hangs.
  greedy.client->Disconnect();
  flood.clear();
  ASSERT_OK(AwaitOrHang(polite.Submit(1)[0].Ready()).status());
}

TEST_P(TenancyKindsTest, ManyWeightedClientsOnOverlappingMeshesKeepOneGangOrder) {
  // Four clients of weights 1, 2, 4 and 8 (one of them in a higher class)
  // run all-reduces on overlapping meshes across both hosts, in different
  // device orders. The scheduler reorders their runs by share; each
  // island still gives its gangs one order, so none deadlocks and every
  // result is right.
  struct Plan {
    std::vector<int> devices;
    ClientShare share;
  };
  const std::vector<Plan> plans = {{{0, 1, 2, 3}, {1, 0}},
                                   {{2, 3}, {2, 0}},
                                   {{3, 2, 1, 0}, {4, 0}},
                                   {{1, 2}, {8, 1}}};
  Start(2, 2);
  constexpr int kRuns = 120;
  std::vector<std::thread> threads;
  std::vector<ClusterConnection*> connections;
  for (size_t c = 0; c < plans.size(); ++c) connections.push_back(NewConnection());
  std::vector<int> correct(plans.size(), 0);
  for (size_t c = 0; c < plans.size(); ++c) {
    threads.emplace_back([&, c] {
      ClientOptions options;
      options.share = plans[c].share;
      auto client = Connect(connections[c], options);
      const Topology t = connections[c]->resources()->GetTopology();
      MeshRequest r;
      r.axes = {{"x", static_cast<int64_t>(plans[c].devices.size())}};
      const std::vector<DeviceId> all = t.island(IslandId(0))->devices;
      for (int d : plans[c].devices) r.devices.push_back(all[d]);
      ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh(r));
      const int64_t n = static_cast<int64_t>(plans[c].devices.size());
      ASSERT_OK_AND_ASSIGN(CompiledFunction f,
                           client->Compile(AllReduceSum(1, {"x"}), mesh,
                                           {{Sharding({{"x"}})}, {Sharding({{"x"}})}}));
      std::vector<float> ones(static_cast<size_t>(n), 1.0f);
      ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({n}, ones), mesh,
                                                 Sharding({{"x"}})));
      std::vector<Array> outs;
      for (int i = 0; i < kRuns; ++i) {
        ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {in}));
        outs.push_back(out[0]);
      }
      for (const Array& a : outs) {
        ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(a.Fetch()));
        if (v.values<float>()[0] == static_cast<float>(n)) ++correct[c];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t c = 0; c < plans.size(); ++c) EXPECT_EQ(correct[c], kRuns) << "client " << c;
  if (local_ != nullptr) {
    EXPECT_EQ(local_->collective_hub().deadlocks_detected(), 0);
  }
}

TEST_P(TenancyKindsTest, AMemoryQuotaHoldsItsClientAndNoOneElse) {
  Start(1, 2);
  ClientOptions limited;
  limited.share.memory_quota_bytes = int64_t{1} << 20;  // per device
  auto q = Connect(NewConnection(), limited);
  auto other = Connect(NewConnection());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, q->AllocateMesh({{"x", 1}}));
  MeshRequest same;
  same.axes = {{"x", 1}};
  same.devices = mesh.devices();
  ASSERT_OK_AND_ASSIGN(Mesh other_mesh, other->AllocateMesh(same));
  const int64_t half = (int64_t{1} << 19) / 4;  // 512 KiB of f32
  auto put = [&](Client& c, const Mesh& m, int64_t n) {
    return c.Put(ir::Literal(ir::Shape(ir::DType::kF32, {n})), m, Sharding::Replicated(1));
  };
  ASSERT_OK_AND_ASSIGN(Array a1, put(*q, mesh, half));
  ASSERT_OK_AND_ASSIGN(Array a2, put(*q, mesh, half));
  ASSERT_OK(AwaitOrHang(a1.Ready()).status());
  ASSERT_OK(AwaitOrHang(a2.Ready()).status());
  // The quota is full: a third waits for the client's own frees...
  ASSERT_OK_AND_ASSIGN(Array a3, put(*q, mesh, half));
  // ...while another client's allocations on the same device go ahead.
  ASSERT_OK_AND_ASSIGN(Array b, put(*other, other_mesh, 8 * half));
  ASSERT_OK(AwaitOrHang(b.Ready()).status());
  const Future<Unit> third = a3.Ready();
  EXPECT_EQ(third.AwaitWithTimeout(absl::Milliseconds(200)), nullptr) << "quota not enforced";
  // More than the whole quota fails at once, naming it.
  ASSERT_OK_AND_ASSIGN(Array huge, put(*q, mesh, 4 * half));
  EXPECT_THAT(AwaitOrHang(huge.Ready()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("memory quota")));
  // Freeing one lets the waiting one in.
  a1 = Array();
  ASSERT_OK(AwaitOrHang(third).status());
}

TEST(TenancyOperatorTest, AnOperatorSetsAnyClientsShareAndAClientCannot) {
  auto cluster = StartProcesses(ProcessShape(1, 1, 2));
  auto conn = ConnectRemote(*cluster);
  auto client = Connect(conn.get());
  // A client's connection may not set another's share as an operator.
  EXPECT_THAT(conn->AdminSetClientShare(client->id(), ClientShare{4, 0}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("workers' token")));
  // The operator's connection (the workers' token) may, for any client
  // that is connected.
  RemoteClusterOptions ro;
  ro.address = cluster->url();
  ro.token = cluster->worker_token();
  ASSERT_OK_AND_ASSIGN(auto op, RemoteCluster::Connect(ro));
  EXPECT_OK(op->AdminSetClientShare(client->id(), ClientShare{4, 1, int64_t{1} << 20}));
  EXPECT_THAT(op->AdminSetClientShare(ClientId(client->id().value() + 100), ClientShare{}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not connected")));
  EXPECT_THAT(op->AdminSetClientShare(client->id(), ClientShare{-1, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight")));
  // The quota it set holds: more than 1 MiB on a device fails naming it.
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  ASSERT_OK_AND_ASSIGN(Array big, client->Put(ir::Literal(ir::Shape(ir::DType::kF32, {1 << 19})),
                                              mesh, Sharding::Replicated(1)));
  EXPECT_THAT(AwaitOrHang(big.Ready()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("memory quota")));
  // The operator reads what the schedulers accounted: the client's run, with
  // the device time its hosts reported. A client may not.
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(DelayAddOne(4, 100), mesh, {}));
  ASSERT_OK_AND_ASSIGN(Array x, client->Put(ir::Literal::F32({4}, {1, 2, 3, 4}), mesh,
                                            Sharding::Replicated(1)));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> y, client->Call(f, {x}));
  ASSERT_OK(AwaitOrHang(y[0].Fetch()).status());
  bool found = false;
  // The report may trail the result by a moment: read until it is there.
  for (int attempt = 0; attempt < 1000 && !found; ++attempt) {
    bool more = false;
    ASSERT_OK_AND_ASSIGN(std::vector<RemoteCluster::AccountedRun> log, op->AdminShareLog(0, &more));
    for (const RemoteCluster::AccountedRun& a : log) {
      if (a.client == client->id() && a.launches == 1 && a.device_us >= 100) found = true;
    }
  }
  EXPECT_TRUE(found) << "the client's run is not in the share log";
  bool more = false;
  EXPECT_THAT(conn->AdminShareLog(0, &more).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("workers' token")));
  // The command-line tool does the same with the token in the environment.
  const std::string command = absl::StrCat(
      "CAUSEWAY_WORKER_TOKEN=", cluster->worker_token(), " ", CausewayBinary(),
      " cluster set-weight --cluster ", cluster->url(), " --client ", client->id().value(),
      " --weight 2 >/dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  const std::string refused = absl::StrCat(
      "CAUSEWAY_WORKER_TOKEN=", cluster->token(), " ", CausewayBinary(),
      " cluster set-weight --cluster ", cluster->url(), " --client ", client->id().value(),
      " --weight 2 >/dev/null 2>&1");
  EXPECT_NE(std::system(refused.c_str()), 0) << "a client's token must not pass";
}

TEST(TenancyTest, BadSharesAreRefused) {
  auto cluster = MakeCluster(OneHostTwoDevices());
  ClientOptions o;
  o.share.weight = 0;
  EXPECT_THAT(Client::Connect(cluster.get(), o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight")));
  o.share = ClientShare{1, 0, -1};
  EXPECT_THAT(Client::Connect(cluster.get(), o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("quota")));
  o.share = ClientShare{1, 9};
  EXPECT_THAT(Client::Connect(cluster.get(), o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("priority")));
  auto client = Connect(cluster.get());
  EXPECT_THAT(client->SetShare(ClientShare{std::nan(""), 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight")));
}

}  // namespace
}  // namespace causeway::testing
