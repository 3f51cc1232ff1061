#include <chrono>
#include <memory>

#include "causeway/base/status_macros.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/ir/builder.h"
#include "causeway/sim/dispatch.h"
#include "causeway/sim/event_loop.h"
#include "causeway/sim/sim_cluster.h"
#include "causeway/sim/pipeline.h"
#include "causeway/sim/tenancy.h"
#include "causeway/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace causeway::sim {
namespace {

TEST(EventLoopTest, RunsEventsInTimeOrderAndEqualTimesInSchedulingOrder) {
  EventLoop loop;
  std::vector<int> order;
  loop.At(30, [&] { order.push_back(3); });
  loop.At(10, [&] { order.push_back(1); });
  loop.At(10, [&] {
    order.push_back(2);
    loop.After(5, [&] { order.push_back(25); });
  });
  loop.RunFor(100);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 25, 3}));
  EXPECT_EQ(loop.now(), 30);
  EXPECT_EQ(loop.clock()->NowNanos(), 30);
  EXPECT_EQ(loop.events_run(), 4);
}

TEST(EventLoopTest, RunUntilStopsAtTheConditionOrTheLimit) {
  EventLoop loop;
  int n = 0;
  for (int i = 1; i <= 10; ++i) loop.At(i * 100, [&] { ++n; });
  EXPECT_TRUE(loop.RunUntil([&] { return n == 3; }, 10000));
  EXPECT_EQ(loop.now(), 300);
  EXPECT_FALSE(loop.RunUntil([&] { return n == 100; }, 550));
  EXPECT_EQ(n, 5);
  EXPECT_EQ(loop.pending(), 5u);
}

TEST(FunctionCostTest, DelaysAreExactAndCollectivesCountedWithTheirGang) {
  SimCosts costs;
  costs.ici = LinkCosts{2.0, 1.0};
  ir::FunctionBuilder b("f");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {256}));
  x = b.Delay(x, 700);
  x = b.AllReduce(x, {"x"});
  ir::Function f = *b.Build({x});
  const SimCluster::NodeCost c = FunctionCost(f, 8, costs);
  EXPECT_EQ(c.compute_ns, 700'000);
  EXPECT_EQ(c.collectives, 1);
  EXPECT_EQ(c.gang, 8);
  // 3 steps of 2 us, and 2 * 7/8 * 1024 bytes at 1 GB/s (1.792 us).
  EXPECT_EQ(c.network_ns, 6000 + 1792);
  ASSERT_EQ(c.segments.size(), 1u);
  EXPECT_EQ(c.segments[0].compute_ns, 700'000);
  EXPECT_EQ(c.segments[0].network_ns, 6000 + 1792);
  EXPECT_EQ(c.tail_compute_ns, 0);
}

TEST(FunctionCostTest, EachCollectiveIsAMeetingAfterTheComputeBeforeIt) {
  SimCosts costs;
  costs.ici = LinkCosts{2.0, 1.0};
  ir::FunctionBuilder b("f");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {256}));
  x = b.Delay(x, 300);
  x = b.AllReduce(x, {"x"});
  x = b.Delay(x, 100);
  x = b.Delay(x, 50);
  x = b.AllReduce(x, {"x"});
  x = b.Delay(x, 20);
  ir::Function f = *b.Build({x});
  const SimCluster::NodeCost c = FunctionCost(f, 4, costs);
  EXPECT_EQ(c.collectives, 2);
  EXPECT_EQ(c.compute_ns, 470'000);
  ASSERT_EQ(c.segments.size(), 2u);
  EXPECT_EQ(c.segments[0].compute_ns, 300'000);
  EXPECT_EQ(c.segments[1].compute_ns, 150'000);
  EXPECT_EQ(c.tail_compute_ns, 20'000);
  // 2 steps of 2 us, and 2 * 3/4 * 1024 bytes at 1 GB/s (1.536 us), each.
  EXPECT_EQ(c.segments[0].network_ns, 4000 + 1536);
  EXPECT_EQ(c.network_ns, 2 * (4000 + 1536));
}

TEST(FunctionCostTest, ASegmentSaysWhetherItsComputeSleptInADelay) {
  ir::FunctionBuilder b("f");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {256}));
  x = b.Delay(x, 300);
  x = b.AllReduce(x, {"x"});
  x = b.Add(x, x);
  x = b.AllReduce(x, {"x"});
  x = b.Delay(x, 10);
  x = b.AllReduce(x, {"x"});
  ir::Function f = *b.Build({x});
  const SimCluster::NodeCost c = FunctionCost(f, 4, SimCosts{});
  ASSERT_EQ(c.segments.size(), 3u);
  EXPECT_TRUE(c.segments[0].after_delay);
  EXPECT_FALSE(c.segments[1].after_delay);  // an add since the last collective
  EXPECT_TRUE(c.segments[2].after_delay);
}

TEST(CollectiveMemberCostTest, PointsAreInterpolatedAndFlatBeyondTheirEnds) {
  HostCosts h;
  h.collective_member_us = 8;
  h.collective_member_slope_us = 2;
  // No points: the line, flat up to one device thread per core.
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 0, false), 8);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 4, false), 14);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 4, true), 14);
  h.collective_member_points = {{4, 14}, {8, 24}, {16, 28}};
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 1, false), 14);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 4, false), 14);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 6, false), 19);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 8, false), 24);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 12, false), 26);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 64, false), 28);
  // After a delay: the same points until it has its own.
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 6, true), 19);
  h.collective_member_after_delay_points = {{4, 13}, {16, 9}};
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 10, true), 11);
  EXPECT_DOUBLE_EQ(CollectiveMemberUs(h, 10, false), 25);
}

SimCosts TestCosts() {
  SimCosts c;
  c.host.client_run_us = 3;
  c.host.client_send_us = 3;
  c.host.scheduler_run_us = 2;
  c.host.scheduler_report_us = 1;
  c.host.host_run_us = 1;
  c.host.host_launch_us = 1;
  c.host.device_launch_us = 2;
  c.host.collective_member_us = 8;
  c.host.collective_member_slope_us = 2;
  c.host.handoff_us = 5;
  c.host.message_us = 30;
  c.dcn = LinkCosts{10, 3};
  c.ici = LinkCosts{1, 30};
  return c;
}

SimDispatchOptions Small(DispatchGranularity mode, Controller controller, int hosts,
                         int per_host, int64_t compute_us) {
  SimDispatchOptions o;
  o.program.mode = mode;
  o.program.devices = hosts * per_host;
  o.program.chain = 8;
  o.program.compute_us = compute_us;
  o.controller = controller;
  o.cluster.hosts_per_island = hosts;
  o.cluster.devices_per_host = per_host;
  // Fixed costs, so that the expectations do not move with the calibration.
  o.cluster.costs = TestCosts();
  o.units = 6;
  return o;
}

// `o` with every thread on one machine of 2 cores, as on this machine's
// embedded cluster.
SimDispatchOptions OnTwoCores(SimDispatchOptions o) {
  o.cluster.one_machine = true;
  o.cluster.cores = 2;
  return o;
}

TEST(SimulateDispatchTest, IsDeterministic) {
  for (Controller controller : {Controller::kSingle, Controller::kMulti}) {
    const SimDispatchOptions o = Small(DispatchGranularity::kChained, controller, 4, 2, 100);
    ASSERT_OK_AND_ASSIGN(SimDispatchResult a, SimulateDispatch(o));
    ASSERT_OK_AND_ASSIGN(SimDispatchResult b, SimulateDispatch(o));
    EXPECT_EQ(a.seconds, b.seconds) << Name(controller);
    EXPECT_EQ(a.counters.events, b.counters.events);
    EXPECT_EQ(a.counters.messages, b.counters.messages);
    EXPECT_EQ(a.counters.launches, 6 * 8 * 8);
    EXPECT_EQ(a.computations, 48);
  }
}

// A report tree: a run costs the scheduler one report (the root's, for
// every host) instead of one per host, the hosts pass the rest up to their
// parents, and every run is still accounted with all its launches.
TEST(SimulateDispatchTest, AReportTreeCostsTheSchedulerOneReportPerRun) {
  for (int fanout : {0, 2}) {
    SimDispatchOptions o = Small(DispatchGranularity::kChained, Controller::kSingle, 7, 2, 100);
    o.cluster.report_fanout = fanout;
    o.cluster.profile_cpu = true;
    int64_t accounted = 0, launches = 0;
    o.cluster.on_run_accounted = [&](ClientId, int64_t device_us, int n) {
      ++accounted;
      launches += n;
      EXPECT_GT(device_us, 8 * 14 * 100) << "every host's device time, 100 us a launch";
    };
    ASSERT_OK_AND_ASSIGN(SimDispatchResult r, SimulateDispatch(o));
    // The simulation stops once the last run's output is read, which may
    // be before that run's reports are in.
    const int64_t runs = o.units + o.warmup;
    EXPECT_GE(accounted, runs - 1) << "fanout " << fanout;
    EXPECT_EQ(launches, accounted * 8 * 14);
    EXPECT_EQ(r.profile.scheduler_report.count, fanout == 0 ? 7 * accounted : accounted);
    EXPECT_EQ(r.profile.host_report.count, fanout == 0 ? 0 : 6 * accounted);
    o.cluster.on_run_accounted = nullptr;
    ASSERT_OK_AND_ASSIGN(SimDispatchResult again, SimulateDispatch(o));
    EXPECT_EQ(r.seconds, again.seconds);
    EXPECT_EQ(r.counters.events, again.counters.events);
  }
}

// The real code's CPU, as a profile and --cpu measured count it, leaves out
// the simulator's own bookkeeping of the messages that code sends: a batch
// submitted to the scheduler sends its runs on to the hosts; a client's call
// sends nothing. On a clock that ticks once per reading, a piece of work is
// one tick, each bookkeeping scope inside it one more (entry to exit), and
// the scope's own tick is what is left out: ns = count + scopes ticks, where
// counting the bookkeeping in would give count + 2 * scopes.
TEST(SimulateDispatchTest, MeasuredCpuLeavesOutTheSimulatorsBookkeeping) {
  constexpr int64_t kTick = 1000;
  SimDispatchOptions o = Small(DispatchGranularity::kChained, Controller::kSingle, 8, 2, 0);
  o.cluster.profile_cpu = true;
  o.cluster.cpu = CpuCosts::kMeasured;
  auto now = std::make_shared<int64_t>(0);
  o.cluster.cpu_clock = [now] { return *now += kTick; };
  ASSERT_OK_AND_ASSIGN(SimDispatchResult r, SimulateDispatch(o));
  const CpuProfile::Kind& scheduler = r.profile.scheduler;
  ASSERT_GT(scheduler.count, 0);
  EXPECT_GT(scheduler.bookkeeping_ns, 0);
  EXPECT_EQ(scheduler.ns, scheduler.count * kTick + scheduler.bookkeeping_ns);
  const CpuProfile::Kind& call = r.profile.client_call;
  ASSERT_GT(call.count, 0);
  EXPECT_EQ(call.bookkeeping_ns, 0);
  EXPECT_EQ(call.ns, call.count * kTick);
}

TEST(SimulateDispatchTest, LongComputationsKeepDevicesBusy) {
  // 2 ms computations dwarf a few microseconds of control plane: nearly
  // every device-second is work, with either controller.
  for (Controller controller : {Controller::kSingle, Controller::kMulti}) {
    ASSERT_OK_AND_ASSIGN(SimDispatchResult r,
                         SimulateDispatch(Small(DispatchGranularity::kChained, controller, 4, 2, 2000)));
    EXPECT_GT(r.compute_fraction, 0.95) << Name(controller);
    EXPECT_LE(r.compute_fraction, 1.0) << Name(controller);
    EXPECT_EQ(r.hosts, 4);
  }
}

TEST(SimulateDispatchTest, OpByOpPaysTheControlPlaneOnEveryComputation) {
  ASSERT_OK_AND_ASSIGN(SimDispatchResult op, SimulateDispatch(Small(
                           DispatchGranularity::kOpByOp, Controller::kSingle, 4, 2, 0)));
  ASSERT_OK_AND_ASSIGN(SimDispatchResult fused, SimulateDispatch(Small(
                           DispatchGranularity::kFused, Controller::kSingle, 4, 2, 0)));
  // Fused: 8 computations a run, each still a meeting of the gang.
  EXPECT_GT(fused.computations_per_second, 2 * op.computations_per_second);
}

TEST(SimulateDispatchTest, SharedCoresSlowManyDevicesDown) {
  SimDispatchOptions wide = Small(DispatchGranularity::kChained, Controller::kSingle, 4, 8, 0);
  const SimDispatchOptions two = OnTwoCores(wide);
  ASSERT_OK_AND_ASSIGN(SimDispatchResult a, SimulateDispatch(wide));
  ASSERT_OK_AND_ASSIGN(SimDispatchResult b, SimulateDispatch(two));
  EXPECT_GT(a.computations_per_second, 2 * b.computations_per_second);
}

TEST(SimulateDispatchTest, ArrivalCostsOverlapComputeButNotEachOther) {
  // 32 devices on 2 cores: a member's 38 us in a collective (8 + 2 per
  // device thread per core beyond one), all of it once the gang has met or
  // 20 us then and 18 us on arrival. With 500 us computations the arrivals
  // overlap the other members' compute and a step is shorter (about 840 us
  // against 1100); with none the cores are busy throughout and the same CPU
  // gives the same rate.
  for (int64_t compute_us : {int64_t{500}, int64_t{0}}) {
    SimDispatchOptions whole = OnTwoCores(
        Small(DispatchGranularity::kChained, Controller::kSingle, 4, 8, compute_us));
    whole.units = 24;
    SimDispatchOptions split = whole;
    split.cluster.costs.host.collective_after_us = 20;
    ASSERT_OK_AND_ASSIGN(SimDispatchResult a, SimulateDispatch(whole));
    ASSERT_OK_AND_ASSIGN(SimDispatchResult b, SimulateDispatch(split));
    const double ratio = b.computations_per_second / a.computations_per_second;
    if (compute_us > 0) {
      EXPECT_GT(ratio, 1.15) << compute_us;
    } else {
      EXPECT_GT(ratio, 0.95) << compute_us;
      EXPECT_LT(ratio, 1.05) << compute_us;
    }
  }
}

// A member's cost from points: points that give the line's value at the
// machine's device threads per core simulate exactly what the line does, and
// points for members after a delay change only runs that compute in one.
TEST(SimulateDispatchTest, AMembersCostComesFromItsPointsWhereItHasThem) {
  for (int64_t compute_us : {int64_t{0}, int64_t{300}}) {
    // 16 devices on 2 cores: 8 device threads per core.
    const SimDispatchOptions line = OnTwoCores(
        Small(DispatchGranularity::kChained, Controller::kSingle, 2, 8, compute_us));
    SimDispatchOptions points = line;
    points.cluster.costs.host.collective_member_points = {{4, 1}, {8, 8 + 7 * 2}, {16, 500}};
    SimDispatchOptions after_delay = points;
    after_delay.cluster.costs.host.collective_member_after_delay_points = {{8, 60}};
    ASSERT_OK_AND_ASSIGN(SimDispatchResult a, SimulateDispatch(line));
    ASSERT_OK_AND_ASSIGN(SimDispatchResult b, SimulateDispatch(points));
    ASSERT_OK_AND_ASSIGN(SimDispatchResult c, SimulateDispatch(after_delay));
    EXPECT_EQ(a.seconds, b.seconds) << compute_us;
    if (compute_us == 0) {
      EXPECT_EQ(c.seconds, b.seconds);
    } else {
      // 8 members a core at 60 us instead of 22 after each 300 us delay.
      EXPECT_GT(c.seconds, 1.3 * b.seconds) << compute_us;
    }
  }
}

TEST(SimulateDispatchTest, RefusesAMeshOtherThanTheIsland) {
  SimDispatchOptions o = Small(DispatchGranularity::kChained, Controller::kSingle, 2, 2, 0);
  o.program.devices = 3;
  EXPECT_EQ(SimulateDispatch(o).status().code(), absl::StatusCode::kInvalidArgument);
  SimClusterOptions bad;
  bad.devices_per_host = 0;
  EXPECT_EQ(SimCluster::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// Four clients of weights 1:2:4:8 on the real scheduler: every 100 ms their
// shares of device time are within 2 points of the weights'.
TEST(SimulateTenancyTest, SharesFollowTheWeights) {
  SimTenancyOptions o;
  o.weights = {1, 2, 4, 8};
  o.compute_us = 330;
  o.seconds = 0.5;
  o.cluster.hosts_per_island = 2;
  o.cluster.devices_per_host = 2;
  o.cluster.costs = TestCosts();
  ASSERT_OK_AND_ASSIGN(SimTenancyResult r, SimulateTenancy(o));
  ASSERT_EQ(r.achieved.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(r.target[i], (1 << i) / 15.0, 1e-9);
    EXPECT_NEAR(r.achieved[i], r.target[i], 0.01) << "client " << i;
  }
  EXPECT_LE(r.max_error_100ms, 0.02);
  EXPECT_GT(r.compute_fraction, 0.5);
  EXPECT_GT(r.runs, 500);
  // One client alone gets every device-second there is.
  o.weights = {3};
  ASSERT_OK_AND_ASSIGN(SimTenancyResult one, SimulateTenancy(o));
  EXPECT_NEAR(one.achieved[0], 1.0, 1e-9);
  EXPECT_NEAR(one.compute_fraction, r.compute_fraction, 0.05);
}

// The simulated cluster runs the real scheduler and executors: the real
// client's runs reach them, are ordered and accounted by them, and the
// outputs are the executors' own buffers.
// A simulated cluster of one island and a client of it that sends from
// the event loop.
struct SimAndClient {
  std::unique_ptr<SimCluster> cluster;
  std::unique_ptr<Client> client;
};

absl::StatusOr<SimAndClient> ConnectSim(int hosts, int devices_per_host) {
  SimClusterOptions o;
  o.hosts_per_island = hosts;
  o.devices_per_host = devices_per_host;
  SimAndClient s;
  CW_ASSIGN_OR_RETURN(s.cluster, SimCluster::Create(o));
  ClientOptions co;
  SimCluster* raw = s.cluster.get();
  co.send_executor = [raw](std::function<void()> send) { raw->PostClientSend(std::move(send)); };
  CW_ASSIGN_OR_RETURN(s.client, Client::Connect(raw, co));
  return s;
}

TEST(SimClusterTest, TheRealSchedulerAndExecutorsDoTheWork) {
  ASSERT_OK_AND_ASSIGN(SimAndClient sim, ConnectSim(2, 2));
  SimCluster* raw = sim.cluster.get();
  Client* client = sim.client.get();
  DispatchProgramOptions po;
  po.devices = 4;
  po.chain = 3;
  po.compute_us = 50;
  ASSERT_OK_AND_ASSIGN(DispatchProgram p, BuildDispatchProgram(*client, po));
  Array x = p.input;
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, p.program.Run({x}));
    x = out[0];
  }
  Future<Unit> ready = x.Ready();
  ASSERT_TRUE(raw->loop().RunUntil([&] { return ready.IsReady(); }, int64_t{1} << 40));
  ASSERT_OK(ready.Await().status());
  // The hosts' last reports reach the scheduler.
  raw->loop().RunFor(raw->loop().now() + 1'000'000);
  // 5 runs x 3 gangs of 50 us: at least 750 us of virtual time.
  EXPECT_GE(raw->loop().now(), 750'000);
  const ClientScheduleStats s = raw->scheduler_stats(IslandId(0), client->id());
  EXPECT_EQ(s.forwarded, 5);
  EXPECT_EQ(s.finished, 5);
  // The executors counted 15 launches per device and 50 us each.
  int64_t launches = 0;
  for (int h = 0; h < 2; ++h) {
    ASSERT_OK_AND_ASSIGN(std::vector<DeviceCounters> counters,
                         raw->host(HostId(h))->GetCounters(false).Await());
    for (const DeviceCounters& d : counters) {
      launches += d.launches;
      EXPECT_GE(d.busy_us, 15 * 50);
    }
  }
  EXPECT_EQ(launches, 4 * 15);
  client->Disconnect();
}

// Ready() of an array asks each host once for all the shards it holds: on
// 3 hosts of 4 devices, a replicated array's 12 shards cost 3 requests,
// each relayed through the coordinator (2 hops), not 12.
TEST(SimClusterTest, ReadyAsksEachHostOnceForAllItsShards) {
  ASSERT_OK_AND_ASSIGN(SimAndClient sim, ConnectSim(3, 4));
  SimCluster* raw = sim.cluster.get();
  Client* client = sim.client.get();
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 12}}));
  ASSERT_OK_AND_ASSIGN(Array x, client->Put(ir::Literal::F32({2}, {1, 2}), mesh,
                                            Sharding::Replicated(1)));
  raw->loop().RunFor(raw->loop().now() + 1'000'000);
  const int64_t before = raw->counters().requests;
  Future<Unit> ready = x.Ready();
  ASSERT_TRUE(raw->loop().RunUntil([&] { return ready.IsReady(); }, int64_t{1} << 40));
  ASSERT_OK(ready.Await().status());
  EXPECT_EQ(raw->counters().requests - before, 3 * 2);
  client->Disconnect();
}

}  // namespace
}  // namespace causeway::sim

namespace causeway::sim {
namespace {

// Launches per device and the scheduler's counts, on any cluster.
struct Footprint {
  std::vector<int64_t> launches;  // by device
  int64_t forwarded = 0;
  int64_t finished = 0;
};

// Runs 3 chained programs of 4 all-reduce gangs (50 us each) over 4 devices
// on 2 hosts, waiting for the last output.
absl::StatusOr<Footprint> RunSmall(ClusterConnection* cluster, Client& client,
                                   const std::function<absl::Status(Future<Unit>)>& wait) {
  DispatchProgramOptions po;
  po.devices = 4;
  po.chain = 4;
  po.compute_us = 50;
  CW_ASSIGN_OR_RETURN(DispatchProgram p, BuildDispatchProgram(client, po));
  Array x = p.input;
  for (int i = 0; i < 3; ++i) {
    CW_ASSIGN_OR_RETURN(std::vector<Array> out, p.program.Run({x}));
    x = out[0];
  }
  CW_RETURN_IF_ERROR(wait(x.Ready()));
  Footprint f;
  for (int h = 0; h < 2; ++h) {
    CW_ASSIGN_OR_RETURN(std::vector<DeviceCounters> counters,
                        cluster->host(HostId(h))->GetCounters(false).Await());
    for (const DeviceCounters& d : counters) f.launches.push_back(d.launches);
  }
  return f;
}

// The same small program on the real embedded cluster and on the simulator
// does the same work: the same launches on every device, every run
// forwarded and accounted by the scheduler once.
TEST(SimClusterTest, ASmallRunDoesWhatTheRealClusterDoes) {
  LocalClusterOptions lo;
  lo.hosts_per_island = 2;
  lo.devices_per_host = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> real, LocalCluster::Create(lo));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> real_client, Client::Connect(real.get()));
  ASSERT_OK_AND_ASSIGN(
      Footprint want,
      RunSmall(real.get(), *real_client, [](Future<Unit> f) { return f.Await().status(); }));
  const ClientScheduleStats real_stats =
      real->island_scheduler(IslandId(0))->client_stats(real_client->id());
  real_client->Disconnect();

  SimClusterOptions so;
  so.hosts_per_island = 2;
  so.devices_per_host = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SimCluster> sim, SimCluster::Create(so));
  SimCluster* raw = sim.get();
  ClientOptions co;
  co.send_executor = [raw](std::function<void()> send) { raw->PostClientSend(std::move(send)); };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> sim_client, Client::Connect(raw, co));
  ASSERT_OK_AND_ASSIGN(Footprint got, RunSmall(raw, *sim_client, [raw](Future<Unit> f) {
                         if (!raw->loop().RunUntil([&] { return f.IsReady(); }, int64_t{1} << 40)) {
                           return absl::InternalError("never ready");
                         }
                         // The hosts' last reports reach the scheduler.
                         raw->loop().RunFor(raw->loop().now() + 1'000'000);
                         return f.Await().status();
                       }));
  EXPECT_EQ(got.launches, want.launches);
  EXPECT_EQ(got.launches, (std::vector<int64_t>{12, 12, 12, 12}));
  const ClientScheduleStats sim_stats = raw->scheduler_stats(IslandId(0), sim_client->id());
  EXPECT_EQ(sim_stats.forwarded, real_stats.forwarded);
  EXPECT_EQ(sim_stats.forwarded, 3);
  EXPECT_EQ(sim_stats.finished, 3);
  // 3 runs of 4 gangs of 50 us, one after another.
  EXPECT_GE(raw->loop().now(), 600'000);
  sim_client->Disconnect();
}

}  // namespace
}  // namespace causeway::sim

namespace causeway::sim {
namespace {

// A pipeline of long stages runs close to the GPipe bound, never under it;
// its activations cross hosts through the simulated transport.
TEST(SimulatePipelineTest, LongStagesRunCloseToTheBound) {
  SimPipelineOptions o;
  o.program.stages = 2;
  o.program.microbatches = 4;
  o.program.forward_us = 1000;
  o.program.backward_us = 2000;
  o.program.activation_kb = 16;
  o.steps = 2;
  o.cluster.costs = TestCosts();
  ASSERT_OK_AND_ASSIGN(SimPipelineResult r, SimulatePipeline(o));
  EXPECT_NEAR(r.bound_seconds, 0.015, 1e-12);
  EXPECT_GE(r.step_seconds, r.bound_seconds);
  EXPECT_LT(r.step_seconds, 1.2 * r.bound_seconds);
  EXPECT_GT(r.messages, 0);
  // Across two islands the same.
  o.islands = 2;
  ASSERT_OK_AND_ASSIGN(SimPipelineResult two, SimulatePipeline(o));
  EXPECT_GE(two.step_seconds, two.bound_seconds);
  o.islands = 3;
  EXPECT_EQ(SimulatePipeline(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace causeway::sim
