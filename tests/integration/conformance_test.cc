// The client conformance suite: the same behaviour, asserted the same way,
// on the embedded cluster and on a distributed cluster of real processes
// (a coordinator and four workers on 127.0.0.1, over gRPC). Both have two
// islands of two hosts with two devices each and 8 MiB per device.
#include <algorithm>
#include <numeric>

#include "absl/strings/str_join.h"
#include "causeway/backend/device.h"
#include "causeway/worker/host_executor.h"
#include "gmock/gmock.h"
#include "causeway/cluster/counters.h"
#include "tests/integration/cluster_kinds.h"
#include "tests/integration/wrapped_kind.h"
#include "causeway/testing/two_mesh_plan.h"

namespace causeway::testing {
namespace {

using ir::DType;
using ir::FunctionBuilder;
using ir::Literal;
using ir::Shape;
using ir::Value;
using ::testing::ElementsAreArray;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kDeviceMemory = int64_t{8} << 20;

class ConformanceTest : public ::testing::TestWithParam<ClusterKind> {
 protected:
  static void SetUpTestSuite() {
    LocalClusterOptions lo;
    lo.islands = 2;
    lo.hosts_per_island = 2;
    lo.devices_per_host = 2;
    lo.device_memory_bytes = kDeviceMemory;
    lo.collective_timeout = absl::Seconds(30);
    local_ = MakeCluster(lo).release();
    lo.device_threads = 1;
    fibers_ = MakeCluster(lo).release();
    lo.device_threads = 0;
    lo.device_kind = std::string(RegisterWrappedArenaKind());
    other_kind_ = MakeCluster(lo).release();
#if CAUSEWAY_HAVE_VULKAN
    lo.device_kind = "vulkan";
    vulkan_ = MakeCluster(lo).release();
#endif
    ProcessClusterOptions po = ProcessShape(2, 2, 2);
    po.memory_bytes = kDeviceMemory;
    po.collectives = "grpc";
    processes_ = StartProcesses(po).release();
    if (HaveGloo()) {
      po.collectives = "gloo";
      po.gloo_from_bytes = 0;
      gloo_processes_ = StartProcesses(po).release();
    }
  }
  static void TearDownTestSuite() {
    delete local_;
    delete fibers_;
    delete other_kind_;
    delete vulkan_;
    vulkan_ = nullptr;
    delete processes_;
    delete gloo_processes_;
    gloo_processes_ = nullptr;
    local_ = nullptr;
    fibers_ = nullptr;
    other_kind_ = nullptr;
    processes_ = nullptr;
  }

  void SetUp() override {
    if (GetParam() == ClusterKind::kEmbedded) {
      connection_ = local_;
    } else if (GetParam() == ClusterKind::kEmbeddedFibers) {
      connection_ = fibers_;
    } else if (GetParam() == ClusterKind::kEmbeddedOtherDevice) {
      connection_ = other_kind_;
    } else if (GetParam() == ClusterKind::kEmbeddedVulkan) {
      if (vulkan_ == nullptr) GTEST_SKIP() << "this build has no vulkan kind";
      connection_ = vulkan_;
    } else {
      ProcessCluster* processes =
          GetParam() == ClusterKind::kProcessesGloo ? gloo_processes_ : processes_;
      if (processes == nullptr) GTEST_SKIP() << "this build has no Gloo";
      remote_ = ConnectRemote(*processes);
      connection_ = remote_.get();
    }
    client_ = Connect(connection_);
  }
  void TearDown() override {
    client_.reset();
    remote_.reset();
    if (LocalCluster* local = embedded()) {
      // Nothing left behind by a disconnected client (launches drop their
      // last buffer references just after their outputs are ready).
      for (const auto& host : local->executors()) {
        for (int d = 0; d < host->num_devices(); ++d) {
          host->store().memory(d)->AwaitEmpty(absl::Seconds(10));
        }
      }
      EXPECT_EQ(local->MemoryInUse(), 0);
    }
  }
  LocalCluster* embedded() const {
    switch (GetParam()) {
      case ClusterKind::kEmbedded: return local_;
      case ClusterKind::kEmbeddedFibers: return fibers_;
      case ClusterKind::kEmbeddedOtherDevice: return other_kind_;
      case ClusterKind::kEmbeddedVulkan: return vulkan_;
      case ClusterKind::kProcesses:
      case ClusterKind::kProcessesGloo: return nullptr;
    }
    return nullptr;
  }

  std::unique_ptr<Client> NewClient() { return Connect(connection_); }

  // A 2x2 mesh on island `island`: "x" crosses its two hosts, "y" stays on one.
  Mesh TwoByTwo(int island = 0) {
    const Topology t = connection_->resources()->GetTopology();
    const IslandId id = t.islands()[island];
    MeshRequest r;
    r.axes = {{"x", 2}, {"y", 2}};
    r.island = id;
    r.devices = t.island(id)->devices;  // host order: x = host, y = device
    auto mesh = client_->AllocateMesh(r);
    CW_CHECK_OK(mesh.status());
    return *mesh;
  }

  HostId HostOf(const Mesh& mesh, int position) {
    return connection_->resources()->GetTopology().device(mesh.devices()[position])->host;
  }

  static ClusterConnection* connection_;
  static LocalCluster* local_;
  static LocalCluster* fibers_;
  static LocalCluster* other_kind_;
  static LocalCluster* vulkan_;  // null in a build without the vulkan kind
  static ProcessCluster* processes_;
  static ProcessCluster* gloo_processes_;  // null without Gloo
  std::unique_ptr<RemoteCluster> remote_;
  std::unique_ptr<Client> client_;
};

ClusterConnection* ConformanceTest::connection_ = nullptr;
LocalCluster* ConformanceTest::local_ = nullptr;
LocalCluster* ConformanceTest::fibers_ = nullptr;
LocalCluster* ConformanceTest::other_kind_ = nullptr;
LocalCluster* ConformanceTest::vulkan_ = nullptr;
ProcessCluster* ConformanceTest::processes_ = nullptr;
ProcessCluster* ConformanceTest::gloo_processes_ = nullptr;

TEST_P(ConformanceTest, TopologyHasTwoIslandsOfTwoHostsWithTwoDevices) {
  const Topology t = connection_->resources()->GetTopology();
  ASSERT_EQ(t.islands().size(), 2u);
  for (IslandId i : t.islands()) {
    EXPECT_EQ(t.island(i)->hosts.size(), 2u);
    EXPECT_EQ(t.island(i)->devices.size(), 4u);
  }
  EXPECT_EQ(t.num_devices(), 8);
}

TEST_P(ConformanceTest, PutThenFetchRoundTripsEveryShardingAcrossHosts) {
  const Mesh mesh = TwoByTwo();
  ASSERT_NE(HostOf(mesh, 0), HostOf(mesh, 2));
  const Literal lit = Literal::F32({8, 6}, Iota(48));
  for (const Sharding& s : {Sharding({{"x"}, {"y"}}), Sharding({{"y"}, {}}),
                            Sharding({{"x", "y"}, {}}), Sharding({{}, {"x"}}),
                            Sharding::Replicated(2)}) {
    ASSERT_OK_AND_ASSIGN(Array a, client_->Put(lit, mesh, s));
    ASSERT_OK_AND_ASSIGN(Literal back, AwaitOrHang(a.Fetch()));
    EXPECT_EQ(back, lit) << s.ToString();
  }
}

TEST_P(ConformanceTest, CallComputesAShardedResultWithAnAllReduceAcrossHosts) {
  const Mesh mesh = TwoByTwo();
  FunctionBuilder b("rowsum");
  Value x = b.Parameter(Shape(DType::kF32, {2, 3}));
  Value s = b.AllReduce(b.ReduceSum(x, {0}), {"x", "y"});
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({s}));
  const Sharding rows({{"x", "y"}, {}});
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf,
                       client_->Compile(f, mesh, {{rows}, {Sharding::Replicated(1)}}));
  ASSERT_OK_AND_ASSIGN(Array in, client_->Put(Literal::F32({8, 3}, Iota(24)), mesh, rows));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client_->Call(cf, {in}));
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(out[0].Fetch()));
  EXPECT_THAT(v.values<float>(), ElementsAreArray({84.0f, 92.0f, 100.0f}));
  // It crossed the processes the way the cluster was started with: both
  // workers of the mesh connected in Gloo, or none did.
  if (GetParam() == ClusterKind::kProcessesGloo) {
    EXPECT_EQ(WorkerLogsWith(*gloo_processes_, "gloo: connected to hosts"), 2);
  } else if (GetParam() == ClusterKind::kProcesses) {
    EXPECT_EQ(WorkerLogsWith(*processes_, "gloo: connected"), 0);
  }
}

// Every collective kind over every subset of axes of the 2x2 mesh: within a
// host ("y"), across hosts ("x"), and both.
TEST_P(ConformanceTest, EveryCollectiveWorksWithinAndAcrossHosts) {
  const Mesh mesh = TwoByTwo();
  constexpr int64_t kRows = 4, kCols = 2;
  const Sharding split({{"x", "y"}, {}});
  std::vector<float> global;
  for (int p = 0; p < 4; ++p) {
    for (int64_t i = 0; i < kRows * kCols; ++i) global.push_back(100.0f * p + i);
  }
  auto in_of = [&](int p) {
    return std::vector<float>(global.begin() + p * kRows * kCols,
                              global.begin() + (p + 1) * kRows * kCols);
  };
  ASSERT_OK_AND_ASSIGN(Array x, client_->Put(Literal::F32({4 * kRows, kCols}, global), mesh, split));
  using Body = std::function<Value(FunctionBuilder&, Value, const std::vector<std::string>&, int64_t)>;
  using Ref = std::function<std::vector<float>(const std::vector<int>&, int)>;
  auto sum_of = [&](const std::vector<int>& group) {
    std::vector<float> acc(kRows * kCols, 0.0f);
    for (int q : group) {
      const auto v = in_of(q);
      for (size_t i = 0; i < acc.size(); ++i) acc[i] += v[i];
    }
    return acc;
  };
  struct Case {
    std::string name;
    Body body;
    Ref ref;
  };
  const std::vector<Case> cases = {
      {"all_reduce", [](FunctionBuilder& b, Value v, const auto& axes, int64_t) {
         return b.AllReduce(v, axes);
       },
       [&](const std::vector<int>& group, int) { return sum_of(group); }},
      {"all_gather", [](FunctionBuilder& b, Value v, const auto& axes, int64_t g) {
         return b.AllGather(v, axes, 0, g);
       },
       [&](const std::vector<int>& group, int) {
         std::vector<float> out;
         for (int q : group) {
           const auto v = in_of(q);
           out.insert(out.end(), v.begin(), v.end());
         }
         return out;
       }},
      {"reduce_scatter", [](FunctionBuilder& b, Value v, const auto& axes, int64_t g) {
         return b.ReduceScatter(v, axes, 0, g, ir::ReduceKind::kSum);
       },
       [&](const std::vector<int>& group, int rank) {
         const auto acc = sum_of(group);
         const int64_t n = kRows / static_cast<int64_t>(group.size()) * kCols;
         return std::vector<float>(acc.begin() + rank * n, acc.begin() + (rank + 1) * n);
       }},
      {"all_to_all", [](FunctionBuilder& b, Value v, const auto& axes, int64_t g) {
         return b.AllToAll(v, axes, 0, 0, g);
       },
       [&](const std::vector<int>& group, int rank) {
         // Chunk `rank` of every member, in member order.
         const int64_t n = kRows / static_cast<int64_t>(group.size()) * kCols;
         std::vector<float> out;
         for (int q : group) {
           const auto v = in_of(q);
           out.insert(out.end(), v.begin() + rank * n, v.begin() + (rank + 1) * n);
         }
         return out;
       }},
      {"collective_permute", [](FunctionBuilder& b, Value v, const auto& axes, int64_t g) {
         std::vector<std::pair<int64_t, int64_t>> pairs;
         for (int64_t r = 0; r < g; ++r) pairs.push_back({r, (r + 1) % g});
         return b.CollectivePermute(v, axes, pairs);
       },
       [&](const std::vector<int>& group, int rank) {
         const int g = static_cast<int>(group.size());
         return in_of(group[(rank + g - 1) % g]);
       }},
  };
  for (const std::vector<std::string>& axes :
       std::vector<std::vector<std::string>>{{"y"}, {"x"}, {"x", "y"}}) {
    const int64_t g = axes.size() == 2 ? 4 : 2;
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat(c.name, " over {", absl::StrJoin(axes, ","), "}"));
      FunctionBuilder b(c.name);
      Value v = b.Parameter(Shape(DType::kF32, {kRows, kCols}));
      ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({c.body(b, v, axes, g)}));
      ASSERT_OK_AND_ASSIGN(CompiledFunction cf, client_->Compile(f, mesh, {{split}, {split}}));
      ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client_->Call(cf, {x}));
      ASSERT_OK_AND_ASSIGN(Literal all, AwaitOrHang(out[0].Fetch()));
      const auto values = all.values<float>();
      const size_t per = values.size() / 4;
      for (int p = 0; p < 4; ++p) {
        ASSERT_OK_AND_ASSIGN(std::vector<int> group, mesh.Group(p, axes));
        const int rank = static_cast<int>(std::find(group.begin(), group.end(), p) - group.begin());
        EXPECT_EQ(std::vector<float>(values.begin() + p * per, values.begin() + (p + 1) * per),
                  c.ref(group, rank))
            << "mesh position " << p;
      }
    }
  }
}

TEST_P(ConformanceTest, ProgramSpanningIslandsReshardsBetweenThem) {
  const Mesh m0 = TwoByTwo(0);
  const Mesh m1 = TwoByTwo(1);
  ASSERT_NE(m0.island(), m1.island());
  FunctionBuilder b1("double");
  Value x = b1.Parameter(Shape(DType::kF32, {2, 4}));
  ASSERT_OK_AND_ASSIGN(ir::Function f1, b1.Build({b1.Add(x, x)}));
  FunctionBuilder b2("total");
  Value y = b2.Parameter(Shape(DType::kF32, {8, 2}));
  ASSERT_OK_AND_ASSIGN(ir::Function f2,
                       b2.Build({b2.AllReduce(b2.ReduceSum(y, {0, 1}), {"x", "y"})}));
  const Sharding rows({{"x", "y"}, {}});
  const Sharding cols({{}, {"x"}});
  ASSERT_OK_AND_ASSIGN(CompiledFunction c1, client_->Compile(f1, m0, {{rows}, {rows}}));
  // Stage 2 sees the columns split over its hosts: a reshard across islands.
  ASSERT_OK_AND_ASSIGN(CompiledFunction c2,
                       client_->Compile(f2, m1, {{cols}, {Sharding::Replicated(0)}}));
  ProgramBuilder pb = client_->NewProgram("two_islands");
  ASSERT_OK_AND_ASSIGN(auto p, pb.Parameter(Shape(DType::kF32, {8, 4}), m0, rows));
  ASSERT_OK_AND_ASSIGN(auto s1, pb.Call(c1, {p}));
  ASSERT_OK_AND_ASSIGN(auto s2, pb.Call(c2, {s1[0]}));
  ASSERT_OK_AND_ASSIGN(Program program, pb.Build({s2[0]}));
  ASSERT_OK_AND_ASSIGN(Array in, client_->Put(Literal::F32({8, 4}, Iota(32)), m0, rows));
  for (int run = 0; run < 3; ++run) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, program.Run({in}));
    ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(out[0].Fetch()));
    // Stage 1 doubles: the total is 2 * sum(0..31). Each [8, 2] column
    // block is held by the two devices along "y", so the all-reduce over
    // all four devices counts it twice.
    EXPECT_FLOAT_EQ(v.values<float>()[0], 2.0f * 2.0f * 496.0f);
  }
}

// 2 MiB pieces between islands: more than one data-plane chunk each.
TEST_P(ConformanceTest, LargeReshardBetweenIslandsArrivesWhole) {
  const Mesh m0 = TwoByTwo(0);
  const Mesh m1 = TwoByTwo(1);
  constexpr int64_t kRows = 2048, kCols = 1024;
  FunctionBuilder b1("double");
  Value x = b1.Parameter(Shape(DType::kF32, {kRows / 4, kCols}));
  ASSERT_OK_AND_ASSIGN(ir::Function f1, b1.Build({b1.Add(x, x)}));
  FunctionBuilder b2("total");
  Value y = b2.Parameter(Shape(DType::kF32, {kRows / 2, kCols}));
  ASSERT_OK_AND_ASSIGN(ir::Function f2,
                       b2.Build({b2.AllReduce(b2.ReduceSum(y, {0, 1}), {"x"})}));
  const Sharding by_4(std::vector<std::vector<std::string>>{{"x", "y"}, {}});
  const Sharding by_x(std::vector<std::vector<std::string>>{{"x"}, {}});
  ASSERT_OK_AND_ASSIGN(CompiledFunction c1, client_->Compile(f1, m0, {{by_4}, {by_4}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction c2,
                       client_->Compile(f2, m1, {{by_x}, {Sharding::Replicated(0)}}));
  ProgramBuilder pb = client_->NewProgram("large_reshard");
  ASSERT_OK_AND_ASSIGN(auto p, pb.Parameter(Shape(DType::kF32, {kRows, kCols}), m0, by_4));
  ASSERT_OK_AND_ASSIGN(auto s1, pb.Call(c1, {p}));
  ASSERT_OK_AND_ASSIGN(auto s2, pb.Call(c2, {s1[0]}));
  ASSERT_OK_AND_ASSIGN(Program program, pb.Build({s2[0]}));
  ASSERT_OK_AND_ASSIGN(
      Array in, client_->Put(Literal::F32({kRows, kCols},
                                          std::vector<float>(static_cast<size_t>(kRows * kCols), 1.0f)),
                             m0, by_4));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, program.Run({in}));
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(out[0].Fetch()));
  EXPECT_EQ(v.values<float>()[0], 2.0f * kRows * kCols);
}

TEST_P(ConformanceTest, ChainedCallsWithoutWaitingComputeInOrder) {
  const Mesh mesh = TwoByTwo();
  FunctionBuilder b("step");
  Value x = b.Parameter(Shape(DType::kF32, {4}));
  // Each step adds the sum over all four devices of their first element.
  Value s = b.AllReduce(b.Slice(x, {0}, {1}), {"x", "y"});
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.Add(x, b.Broadcast(b.Reshape(s, {}), {4}, {}))}));
  const Sharding split(std::vector<std::vector<std::string>>{{"x", "y"}});
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf, client_->Compile(f, mesh, {{split}, {split}}));
  ASSERT_OK_AND_ASSIGN(Array one, client_->Put(Literal::F32({16}, std::vector<float>(16, 1.0f)),
                                               mesh, split));
  // First element of every shard is 1 after the first step, then the sum
  // of four first elements is added each step: 1, 5, 25, ...
  ASSERT_OK_AND_ASSIGN(std::vector<Array> cur, client_->Call(cf, {one}));
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(cur, client_->Call(cf, {cur[0]}));
  }
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(cur[0].Fetch()));
  // v_0 = 1, v_{k+1} = v_k + 4 v_k = 5 v_k (first element); 6 calls: 5^6.
  EXPECT_FLOAT_EQ(v.values<float>()[0], 15625.0f);
}

TEST_P(ConformanceTest, BadInputIsAClearErrorAndNothingCrashes) {
  const Mesh mesh = TwoByTwo();
  FunctionBuilder b("add");
  Value x = b.Parameter(Shape(DType::kF32, {4}));
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.Add(x, x)}));
  // A sharding that names an axis the mesh does not have.
  absl::StatusOr<CompiledFunction> bad =
      client_->Compile(f, mesh, {{Sharding({{"z"}})}, {Sharding({{"z"}})}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  // Mismatched shapes at the call.
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf,
                       client_->Compile(f, mesh, {{Sharding({{"x"}})}, {Sharding({{"x"}})}}));
  ASSERT_OK_AND_ASSIGN(Array wrong, client_->Put(Literal::F32({6}, Iota(6)), mesh,
                                                 Sharding({{"x"}})));
  absl::StatusOr<std::vector<Array>> call = client_->Call(cf, {wrong});
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument) << call.status();
  // A mesh larger than any island; an unknown island.
  EXPECT_EQ(client_->AllocateMesh({{"d", 64}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->AllocateMesh({{"d", 2}}, IslandId(99)).status().code(),
            absl::StatusCode::kNotFound);
  // An array of another client.
  auto other = NewClient();
  ASSERT_OK_AND_ASSIGN(Array theirs, other->Put(Literal::F32({8}, Iota(8)), mesh,
                                                Sharding({{"x"}})));
  call = client_->Call(cf, {theirs});
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument) << call.status();
  EXPECT_THAT(call.status().message(), HasSubstr("client"));
  // More than a device's memory.
  absl::StatusOr<Array> huge =
      client_->Put(Literal::F32({int64_t{4} << 20}, std::vector<float>(int64_t{4} << 20)), mesh,
                   Sharding::Replicated(1));
  absl::Status huge_status = huge.ok() ? AwaitOrHang(huge->Ready()).status() : huge.status();
  EXPECT_EQ(huge_status.code(), absl::StatusCode::kResourceExhausted) << huge_status;
}

TEST_P(ConformanceTest, ReleasedAndDisconnectedArraysFreeTheirMemoryOnEveryHost) {
  // 6 MiB on each of the 8 devices (of 8 MiB): a second such array can only
  // become ready once the first is gone.
  const Mesh m0 = TwoByTwo(0);
  const Mesh m1 = TwoByTwo(1);
  const int64_t n = int64_t{6} << 18;  // floats: 6 MiB
  const Literal big = Literal::F32({n}, std::vector<float>(static_cast<size_t>(n), 2.0f));
  {
    auto first = NewClient();
    ASSERT_OK_AND_ASSIGN(Array a0, first->Put(big, m0, Sharding::Replicated(1)));
    ASSERT_OK_AND_ASSIGN(Array a1, first->Put(big, m1, Sharding::Replicated(1)));
    ASSERT_OK(AwaitOrHang(a0.Ready()).status());
    ASSERT_OK(AwaitOrHang(a1.Ready()).status());
    // `first` disconnects holding both arrays.
  }
  for (int round = 0; round < 2; ++round) {
    // Released by going out of scope at the end of each round.
    ASSERT_OK_AND_ASSIGN(Array b0, client_->Put(big, m0, Sharding::Replicated(1)));
    ASSERT_OK_AND_ASSIGN(Array b1, client_->Put(big, m1, Sharding::Replicated(1)));
    ASSERT_OK(AwaitOrHang(b0.Ready()).status());
    ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(b1.Fetch()));
    EXPECT_EQ(v.values<float>()[n - 1], 2.0f);
  }
}

TEST_P(ConformanceTest, DeviceCountersCountLaunchesAndMemoryOnEveryHost) {
  ASSERT_OK_AND_ASSIGN(std::vector<DeviceCounters> before,
                       ClusterCounters(*connection_, /*reset=*/true));
  EXPECT_EQ(before.size(), 8u);
  const Mesh mesh = TwoByTwo(1);
  FunctionBuilder b("twice");
  Value x = b.Parameter(Shape(DType::kF32, {4}));
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.Add(x, x)}));
  const Sharding split(std::vector<std::vector<std::string>>{{"x", "y"}});
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf, client_->Compile(f, mesh, {{split}, {split}}));
  ASSERT_OK_AND_ASSIGN(Array in, client_->Put(Literal::F32({16}, Iota(16)), mesh, split));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client_->Call(cf, {in}));
  ASSERT_OK(AwaitOrHang(out[0].Ready()).status());
  ASSERT_OK_AND_ASSIGN(std::vector<DeviceCounters> after,
                       ClusterCounters(*connection_, /*reset=*/false));
  ASSERT_EQ(after.size(), 8u);
  for (const DeviceCounters& c : after) {
    const bool on_mesh = mesh.IndexOf(c.device) >= 0;
    EXPECT_EQ(c.launches, on_mesh ? 1 : 0) << c.device.ToString();
    // The input and the output shard, f32[4] each.
    if (on_mesh) {
      EXPECT_GE(c.memory_in_use, 32) << c.device.ToString();
    }
  }
}

// A device of another kind runs the code its kind compiled: the client
// compiles for the mesh's kind, the plan carries it, the hosts run it.
TEST_P(ConformanceTest, EachDeviceRunsCodeOfItsOwnKind) {
  const Topology t = connection_->resources()->GetTopology();
  const std::string kind = t.device(t.island(t.islands()[0])->devices[0])->kind;
  const bool vulkan = GetParam() == ClusterKind::kEmbeddedVulkan;
  EXPECT_EQ(kind, GetParam() == ClusterKind::kEmbeddedOtherDevice ? "wrapped-arena"
                  : vulkan                                       ? "vulkan"
                                                                 : "cpu");
  const int64_t before = WrappedKindRuns().load();
  Mesh mesh = TwoByTwo();
  const Sharding split(std::vector<std::vector<std::string>>{{"x", "y"}});
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client_->Compile(AllReduceSum(1, {"x", "y"}), mesh,
                                                            {{split}, {split}}));
  ASSERT_OK_AND_ASSIGN(Array in, client_->Put(Literal::F32({4}, {1, 2, 3, 4}), mesh, split));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client_->Call(f, {in}));
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(out[0].Fetch()));
  EXPECT_THAT(v.values<float>(), ElementsAreArray({10.f, 10.f, 10.f, 10.f}));
  const int64_t ran = WrappedKindRuns().load() - before;
  if (GetParam() == ClusterKind::kEmbeddedOtherDevice) {
    EXPECT_EQ(ran, 4);  // one launch per device of the mesh
  } else {
    EXPECT_EQ(ran, 0);
  }
  // The hosts' devices are the kind's: for the second kind, memory the host
  // cannot address, which every put, reshard, launch and fetch above
  // reached only through the device.
  if (LocalCluster* local = embedded()) {
    const bool other = GetParam() == ClusterKind::kEmbeddedOtherDevice;
    for (const auto& host : local->executors()) {
      for (int d = 0; d < host->num_devices(); ++d) {
        const backend::Device* device = host->store().backend(d);
        ASSERT_NE(device, nullptr);
        EXPECT_EQ(device->description().kind, other ? "arena" : vulkan ? "vulkan" : "cpu");
      }
    }
    const auto& host = local->executors()[0];
    ASSERT_OK_AND_ASSIGN(auto allocation, host->store().backend(0)->Allocate(16));
    EXPECT_EQ(host->store().backend(0)->HostAddress(*allocation) == nullptr, other || vulkan);
  }
}

INSTANTIATE_TEST_SUITE_P(Clusters, ConformanceTest,
                         ::testing::Values(ClusterKind::kEmbedded, ClusterKind::kProcesses,
                                           ClusterKind::kEmbeddedOtherDevice,
                                           ClusterKind::kProcessesGloo,
                                           ClusterKind::kEmbeddedFibers,
                                           ClusterKind::kEmbeddedVulkan),
                         KindName);

// One program over two kinds: x * 2 on island 0's cpu devices, then + 1 on
// island 1's devices of the arena test kind, with the value moved between
// them. Each host compiles only its own nodes, for its own kind.
TEST(MixedKindsTest, AProgramSpansMeshesOfDifferentKinds) {
  LocalClusterOptions lo;
  lo.islands = 2;
  lo.hosts_per_island = 1;
  lo.devices_per_host = 2;
  lo.device_memory_bytes = kDeviceMemory;
  lo.island_device_kinds = {"cpu", std::string(RegisterWrappedArenaKind())};
  auto cluster = MakeCluster(lo);
  auto client = Connect(cluster.get());
  const Topology topology = cluster->resources()->GetTopology();
  EXPECT_EQ(topology.device(DeviceId(0))->kind, "cpu");
  EXPECT_EQ(topology.device(DeviceId(0))->description, "host CPU");
  EXPECT_EQ(topology.device(DeviceId(2))->kind, lo.island_device_kinds[1]);
  EXPECT_FALSE(topology.device(DeviceId(2))->description.empty());
  auto mesh_of = [&](int island) {
    MeshRequest request;
    request.axes = {{"x", 2}};
    request.island = IslandId(island);
    return *client->AllocateMesh(request);
  };
  const Mesh cpu = mesh_of(0);
  const Mesh other = mesh_of(1);
  const Sharding split({{"x"}});
  FunctionBuilder twice("twice");
  Value a = twice.Parameter(Shape(DType::kF32, {2}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f,
                       client->Compile(*twice.Build({twice.Mul(a, twice.Full(2, {2}))}), cpu,
                                       {{split}, {split}}));
  FunctionBuilder plus("plus_one");
  Value b = plus.Parameter(Shape(DType::kF32, {2}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction g,
                       client->Compile(*plus.Build({plus.Add(b, plus.Full(1, {2}))}), other,
                                       {{split}, {split}}));
  ProgramBuilder builder = client->NewProgram("two_kinds");
  ASSERT_OK_AND_ASSIGN(TracedArray x, builder.Parameter(Shape(DType::kF32, {4}), cpu, split));
  ASSERT_OK_AND_ASSIGN(std::vector<TracedArray> y, builder.Call(f, {x}));
  ASSERT_OK_AND_ASSIGN(std::vector<TracedArray> z, builder.Call(g, y));
  ASSERT_OK_AND_ASSIGN(Program program, builder.Build(z));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(Literal::F32({4}, {1, 2, 3, 4}), cpu, split));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, program.Run({in}));
  ASSERT_OK_AND_ASSIGN(Literal result, AwaitOrHang(out[0].Fetch()));
  EXPECT_THAT(result.values<float>(), ElementsAreArray({3.0f, 5.0f, 7.0f, 9.0f}));
}

// A host refuses a call node of another kind than its devices', naming it.
TEST(MixedKindsTest, AHostRefusesANodeForAnotherKind) {
  LocalClusterOptions lo;
  lo.islands = 1;
  lo.hosts_per_island = 2;
  lo.devices_per_host = 2;
  auto cluster = MakeCluster(lo);
  ProgramPlan plan = TwoMeshPlan();
  ASSERT_OK(cluster->executor(HostId(0))->RegisterProgram(std::make_shared<ProgramPlan>(plan)));
  plan.id = ProgramId(8);
  plan.nodes[0].device_kind = "vulkan";
  EXPECT_THAT(cluster->executor(HostId(0))->RegisterProgram(std::make_shared<ProgramPlan>(plan)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("node scale is for device kind vulkan"),
                             HasSubstr("is of kind cpu"))));
  // Host 1 runs only the node of its own kind.
  EXPECT_OK(cluster->executor(HostId(1))->RegisterProgram(std::make_shared<ProgramPlan>(plan)));
}

}  // namespace
}  // namespace causeway::testing
