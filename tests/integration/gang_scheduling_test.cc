// Gang scheduling: the island scheduler puts every gang into one order on
// all of its devices, so collectives of many clients on overlapping meshes
// never deadlock. Without it (the bypass) they can, and the collective
// watchdog reports the deadlock instead of hanging.
#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/mutex.h"

#include "causeway/worker/collective_hub.h"
#include "gmock/gmock.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A system without gang scheduling: a connection that hands each run
// straight to its hosts, one after another, in an order of its own (hosts
// in descending id order when `reverse`), running `hook(i)` after the i-th
// host got it. Everything else goes to the embedded cluster.
class BypassingConnection final : public ClusterConnection {
 public:
  BypassingConnection(LocalCluster* cluster, bool reverse, std::function<void(int)> hook)
      : cluster_(cluster), scheduler_(this, reverse, std::move(hook)) {}

  ResourceService* resources() override { return cluster_->resources(); }
  SchedulerService* scheduler(IslandId island) override {
    return cluster_->scheduler(island) != nullptr ? &scheduler_ : nullptr;
  }
  HostService* host(HostId host) override { return cluster_->host(host); }
  using ClusterConnection::SubmitRun;
  absl::Status SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                         std::function<void(const absl::Status&)> forwarded) override {
    (void)islands;
    absl::Status status = scheduler_.SubmitRun(run);
    if (forwarded) forwarded(status);
    return status;
  }
  void ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                     std::vector<ArrayId> arrays) override {
    cluster_->ReleaseArrays(client, hosts, std::move(arrays));
  }
  void DropClient(ClientId client) override { cluster_->DropClient(client); }

 private:
  // Takes the plans (to learn their hosts) and sends each run to them.
  class Scheduler final : public SchedulerService {
   public:
    Scheduler(BypassingConnection* owner, bool reverse, std::function<void(int)> hook)
        : owner_(owner), reverse_(reverse), hook_(std::move(hook)) {}
    absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
      MutexLock lock(&mu_);
      hosts_[plan->id] = plan->hosts;
      return absl::OkStatus();
    }
    void UnregisterProgram(ProgramId program) override {
      MutexLock lock(&mu_);
      hosts_.erase(program);
    }
    absl::Status SubmitRun(RunRequest run) override {
      std::vector<HostId> hosts;
      {
        MutexLock lock(&mu_);
        auto it = hosts_.find(run.program);
        if (it == hosts_.end()) return absl::NotFoundError("unknown program");
        hosts = it->second;
      }
      if (reverse_) std::reverse(hosts.begin(), hosts.end());
      for (size_t i = 0; i < hosts.size(); ++i) {
        owner_->host(hosts[i])->EnqueueRun(run);
        if (hook_) hook_(static_cast<int>(i));
      }
      return absl::OkStatus();
    }

   private:
    BypassingConnection* const owner_;
    const bool reverse_;
    const std::function<void(int)> hook_;
    Mutex mu_;
    absl::flat_hash_map<ProgramId, std::vector<HostId>> hosts_ ABSL_GUARDED_BY(mu_);
  };

  LocalCluster* const cluster_;
  Scheduler scheduler_;
};

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
  BypassingConnection a_path(cluster.get(), /*reverse=*/false, [&](int i) {
    if (i == 0) {
      a_first.Notify();
      b_first.WaitForNotification();
    }
  });
  BypassingConnection b_path(cluster.get(), /*reverse=*/true, [&](int i) {
    if (i == 0) {
      b_first.Notify();
      a_first.WaitForNotification();
    }
  });
  auto a = Connect(&a_path);
  auto b = Connect(&b_path);
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
