// The client API end to end on an embedded cluster: placement, resharding
// across meshes and islands, program caching, sequential vs parallel
// dispatch, tracing.
#include <algorithm>
#include <set>
#include <string>

#include "causeway/transport/inproc/inproc_transport.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

LocalClusterOptions TwoByTwoByTwo() {
  LocalClusterOptions o;
  o.islands = 2;
  o.hosts_per_island = 2;
  o.devices_per_host = 2;
  return o;
}

TEST(ClientTest, PutThenFetchRoundTripsEveryShardingOfATwoDimensionalArray) {
  auto cluster = MakeCluster(TwoByTwoByTwo());
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"a", 2}, {"b", 2}}));
  const std::vector<float> values = Iota(8 * 6);
  const ir::Literal lit = ir::Literal::F32({8, 6}, values);
  for (const Sharding& s :
       {Sharding({{"a"}, {"b"}}), Sharding({{"b"}, {}}), Sharding({{"a", "b"}, {}}),
        Sharding({{}, {"a"}}), Sharding::Replicated(2)}) {
    ASSERT_OK_AND_ASSIGN(Array a, client->Put(lit, mesh, s));
    ASSERT_OK_AND_ASSIGN(ir::Literal back, AwaitOrHang(a.Fetch()));
    EXPECT_EQ(back, lit) << s.ToString();
  }
}

TEST(ClientTest, CallReturnsBeforeDataIsReadyAndComputesTheShardedResult) {
  auto cluster = MakeCluster(TwoByTwoByTwo());
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 4}}));
  // Each device sums its shard of rows, then the sums are all-reduced.
  ir::FunctionBuilder b("rowsum");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {2, 3}));
  ir::Value s = b.AllReduce(b.ReduceSum(x, {0}), {"x"});
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({s}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf,
                       client->Compile(f, mesh, {{Sharding({{"x"}, {}})}, {Sharding::Replicated(1)}}));
  EXPECT_EQ(cf.in_shapes()[0], ir::Shape(ir::DType::kF32, {8, 3}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({8, 3}, Iota(24)), mesh,
                                             Sharding({{"x"}, {}})));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(cf, {in}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), ir::Shape(ir::DType::kF32, {3}));
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(out[0].Fetch()));
  // Column sums of 0..23 laid out 8x3.
  EXPECT_THAT(v.values<float>(), ElementsAreArray({84.0f, 92.0f, 100.0f}));
}

// The function is built from global shapes: the builder sees the shard
// shapes the shardings give, and a shape that does not fit is named.
TEST(ClientTest, CompileFromGlobalShapesHandsTheBuilderItsShardShapes) {
  auto cluster = MakeCluster(TwoByTwoByTwo());
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 4}}));
  const Sharding rows({{"x"}, {}});
  const CompileOptions options{{rows, Sharding::Replicated(1)}, {Sharding::Replicated(1)}};
  std::vector<ir::Shape> seen;
  auto build = [&](absl::Span<const ir::Shape> shards) -> absl::StatusOr<ir::Function> {
    seen.assign(shards.begin(), shards.end());
    ir::FunctionBuilder b("scaled_rowsum");
    ir::Value x = b.Parameter(shards[0]);
    ir::Value w = b.Parameter(shards[1]);
    ir::Value s = b.AllReduce(b.ReduceSum(x, {0}), {"x"});
    return b.Build({b.Mul(s, w)});
  };
  const ir::Shape global(ir::DType::kF32, {8, 3});
  const ir::Shape weights(ir::DType::kF32, {3});
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf,
                       client->Compile({global, weights}, mesh, options, build));
  EXPECT_THAT(seen, ElementsAreArray({ir::Shape(ir::DType::kF32, {2, 3}), weights}));
  EXPECT_EQ(cf.in_shapes()[0], global);
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({8, 3}, Iota(24)), mesh, rows));
  ASSERT_OK_AND_ASSIGN(Array w, client->Put(ir::Literal::F32({3}, {1, 2, 3}), mesh,
                                            Sharding::Replicated(1)));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(cf, {in, w}));
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(out[0].Fetch()));
  EXPECT_THAT(v.values<float>(), ElementsAreArray({84.0f, 184.0f, 300.0f}));

  // 10 rows do not split over 4 devices: named before `build` runs.
  seen.clear();
  const auto uneven =
      client->Compile({ir::Shape(ir::DType::kF32, {10, 3}), weights}, mesh, options, build);
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(uneven.status().message(),
              AllOf(HasSubstr("parameter 0 (global f32[10,3])"), HasSubstr("[{x}, {}]")));
  EXPECT_TRUE(seen.empty());
  // A builder that ignores the shard shapes is caught.
  const auto ignored = client->Compile(
      {global, weights}, mesh, options, [](absl::Span<const ir::Shape>) {
        ir::FunctionBuilder b("global_by_mistake");
        ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {8, 3}));
        b.Parameter(ir::Shape(ir::DType::kF32, {3}));
        return b.Build({b.ReduceSum(x, {0})});
      });
  EXPECT_THAT(ignored.status().message(),
              HasSubstr("parameter 0 is f32[8,3], but its shard of f32[8,3] under [{x}, {}] is "
                        "f32[2,3]"));
  // Counts must agree.
  EXPECT_EQ(client->Compile({global}, mesh, options, build).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A per-shard sum declared replicated would return one device's partial sum:
// Compile refuses it, naming the result and the op; the all-reduced sum
// compiles and is right; kOff lets the per-shard function through.
TEST(ClientTest, CompileRefusesAReplicatedResultThatDiffersAcrossShards) {
  auto cluster = MakeCluster(TwoByTwoByTwo());
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"data", 2}}));
  const Sharding split({{"data"}});
  auto sum = [](bool all_reduce) {
    ir::FunctionBuilder b("sum");
    ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {2}));
    ir::Value s = b.ReduceSum(x, {0});
    return b.Build({all_reduce ? b.AllReduce(s, {"data"}) : s}).value();
  };
  const CompileOptions options{{split}, {Sharding::Replicated(0)}};
  const auto refused = client->Compile(sum(false), mesh, options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("compiling sum"), HasSubstr("result 0"), HasSubstr("'data'"),
                    HasSubstr("reduce_sum")));

  ASSERT_OK_AND_ASSIGN(CompiledFunction right, client->Compile(sum(true), mesh, options));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({4}, {0, 1, 2, 3}), mesh, split));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(right, {in}));
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(out[0].Fetch()));
  EXPECT_THAT(v.values<float>(), ElementsAreArray({6.0f}));

  CompileOptions off = options;
  off.replication_check = ReplicationCheck::kOff;
  EXPECT_OK(client->Compile(sum(false), mesh, off).status());
}

// Doubles an 8x4 iota on a mesh of island 0 (`axes0`, split by `s0`, each
// shard `shard0`) and negates it on a mesh of island 1: the program reshards
// between the islands, and -2 * iota must arrive.
void DoubleThenNegateAcrossIslands(const LocalClusterOptions& o, std::vector<MeshAxis> axes0,
                                   const Sharding& s0, std::vector<int64_t> shard0,
                                   std::vector<MeshAxis> axes1, const Sharding& s1,
                                   std::vector<int64_t> shard1) {
  auto cluster = MakeCluster(o);
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh m0, client->AllocateMesh(std::move(axes0), IslandId(0)));
  ASSERT_OK_AND_ASSIGN(Mesh m1, client->AllocateMesh(std::move(axes1), IslandId(1)));
  ir::FunctionBuilder b0("double");
  ir::Value x0 = b0.Parameter(ir::Shape(ir::DType::kF32, std::move(shard0)));
  ASSERT_OK_AND_ASSIGN(ir::Function f0, b0.Build({b0.Add(x0, x0)}));
  ir::FunctionBuilder b1("negate");
  ir::Value x1 = b1.Parameter(ir::Shape(ir::DType::kF32, std::move(shard1)));
  ASSERT_OK_AND_ASSIGN(ir::Function f1, b1.Build({b1.Neg(x1)}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction c0, client->Compile(f0, m0, {{s0}, {s0}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction c1, client->Compile(f1, m1, {{s1}, {s1}}));
  ProgramBuilder pb = client->NewProgram("two_islands");
  ASSERT_OK_AND_ASSIGN(TracedArray p, pb.Parameter(ir::Shape(ir::DType::kF32, {8, 4}), m0, s0));
  ASSERT_OK_AND_ASSIGN(auto a, pb.Call(c0, {p}));
  ASSERT_OK_AND_ASSIGN(auto r, pb.Call(c1, {a[0]}));
  ASSERT_OK_AND_ASSIGN(Program program, pb.Build({r[0]}));
  EXPECT_EQ(program.num_nodes(), 3);  // double, reshard, negate
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({8, 4}, Iota(32)), m0, s0));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, program.Run({in}));
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(out[0].Fetch()));
  std::vector<float> want = Iota(32);
  for (float& w : want) w = -2 * w;
  EXPECT_THAT(v.values<float>(), ElementsAreArray(want));
  EXPECT_GT(cluster->transport().bytes_sent_between_islands(), 0);
}

TEST(ClientTest, ValuesMoveBetweenMeshesOnDifferentIslandsWithResharding) {
  LocalClusterOptions o = TwoByTwoByTwo();
  o.dcn.latency = absl::Microseconds(200);
  // On island 1 the array is split by columns over z and replicated over y:
  // each piece is a box of part of some rows.
  DoubleThenNegateAcrossIslands(o, {{"x", 4}}, Sharding({{"x"}, {}}), {2, 4},
                                {{"y", 2}, {"z", 2}}, Sharding({{}, {"z"}}), {8, 2});
}

TEST(ClientTest, RowBlocksMoveBetweenIslandsAsContiguousPieces) {
  // Rows split 2 ways on island 0 and 4 ways on island 1: each piece sent
  // is a run of whole rows starting inside its source shard (a contiguous
  // box at a non-zero offset), the other case of a remote piece's copy.
  DoubleThenNegateAcrossIslands(TwoByTwoByTwo(), {{"x", 2}}, Sharding({{"x"}, {}}), {4, 4},
                                {{"y", 4}}, Sharding({{"y"}, {}}), {2, 4});
}

TEST(ClientTest, RepeatedCallsLowerOnceAndReuseTheCachedProgram) {
  auto cluster = MakeCluster(TwoByTwoByTwo());
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 2}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf, client->Compile(DelayAddOne(4, 0), mesh, {}));
  ASSERT_OK_AND_ASSIGN(Array a, client->Put(ir::Literal::F32({4}, Iota(4)), mesh,
                                            Sharding::Replicated(1)));
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(cf, {a}));
    a = out[0];
  }
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(a.Fetch()));
  EXPECT_THAT(v.values<float>(), ElementsAreArray({20.0f, 21.0f, 22.0f, 23.0f}));
  EXPECT_EQ(client->programs_lowered(), 1);
}

TEST(ClientTest, SequentialDispatchComputesTheSameResultsAsParallel) {
  auto cluster = MakeCluster(TwoByTwoByTwo());
  ClientOptions seq;
  seq.dispatch = DispatchMode::kSequential;
  for (ClientOptions options : {ClientOptions{}, seq}) {
    auto client = Connect(cluster.get(), options);
    ASSERT_OK_AND_ASSIGN(Mesh m0, client->AllocateMesh({{"x", 2}}, IslandId(0)));
    ASSERT_OK_AND_ASSIGN(Mesh m1, client->AllocateMesh({{"x", 2}}, IslandId(1)));
    ASSERT_OK_AND_ASSIGN(CompiledFunction c0, client->Compile(DelayAddOne(4, 100), m0, {}));
    ASSERT_OK_AND_ASSIGN(CompiledFunction c1, client->Compile(AllReduceSum(4, {"x"}), m1, {}));
    ProgramBuilder pb = client->NewProgram("chain");
    ASSERT_OK_AND_ASSIGN(TracedArray p, pb.Parameter(ir::Shape(ir::DType::kF32, {4}), m0,
                                                     Sharding::Replicated(1)));
    ASSERT_OK_AND_ASSIGN(auto a, pb.Call(c0, {p}));
    ASSERT_OK_AND_ASSIGN(auto b, pb.Call(c1, {a[0]}));
    ASSERT_OK_AND_ASSIGN(auto c, pb.Call(c0, {b[0]}));
    ASSERT_OK_AND_ASSIGN(Program program, pb.Build({c[0], a[0], p}));
    ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({4}, Iota(4)), m0,
                                               Sharding::Replicated(1)));
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, program.Run({in}));
    ASSERT_EQ(out.size(), 3u);
    ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(out[0].Fetch()));
    // ((x + 1) summed over 2 devices) + 1.
    EXPECT_THAT(v.values<float>(), ElementsAreArray({3.0f, 5.0f, 7.0f, 9.0f}));
    ASSERT_OK_AND_ASSIGN(ir::Literal mid, AwaitOrHang(out[1].Fetch()));
    EXPECT_THAT(mid.values<float>(), ElementsAreArray({1.0f, 2.0f, 3.0f, 4.0f}));
    EXPECT_EQ(out[2].id(), in.id());  // an argument passed straight through
  }
}

TEST(ClientTest, TraceExportsChromeJsonWithOneTimelinePerDevice) {
  LocalClusterOptions o = TwoByTwoByTwo();
  o.trace = true;
  auto cluster = MakeCluster(o);
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 4}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf, client->Compile(AllReduceSum(2, {"x"}), mesh, {}));
  ASSERT_OK_AND_ASSIGN(Array a, client->Put(ir::Literal::F32({2}, Iota(2)), mesh,
                                            Sharding::Replicated(1)));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(cf, {a}));
  ASSERT_OK(AwaitOrHang(out[0].Ready()));
  const nlohmann::json trace = nlohmann::json::parse(cluster->trace().ToChromeJson());
  std::set<int64_t> run_tids;
  std::set<std::string> process_names, thread_names;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("cat") && e.contains("ph") && e.contains("pid")) << e.dump();
    if (e["cat"] == "run") {
      EXPECT_EQ(e["ph"], "X");
      EXPECT_EQ(e["name"], "all_reduce");
      run_tids.insert(e["tid"].get<int64_t>());
    }
    if (e["ph"] == "M" && e["name"] == "process_name") {
      process_names.insert(e["args"]["name"].get<std::string>());
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      thread_names.insert(e["args"]["name"].get<std::string>());
    }
  }
  EXPECT_EQ(run_tids.size(), 4u);
  // Tracks are named by island, host and device (with its kind and what
  // the device says it is); the scheduler's by island, the client's by what
  // it records.
  EXPECT_TRUE(process_names.count("island 0 / host 0")) << process_names.size();
  EXPECT_TRUE(process_names.count("scheduler"));
  EXPECT_EQ(thread_names,
            (std::set<std::string>{"device 0 (cpu: host CPU)", "device 1 (cpu: host CPU)",
                                   "device 2 (cpu: host CPU)", "device 3 (cpu: host CPU)",
                                   "island 0", "runs submitted"}));
}

}  // namespace
}  // namespace causeway::testing
