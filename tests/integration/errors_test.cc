// Errors are values: a failed computation poisons its outputs and every
// output that depends on them with the same root cause, and nothing hangs.
// Bad input gets a clear error at the call.
#include "gmock/gmock.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

LocalClusterOptions WithFault(FaultInjector injector) {
  LocalClusterOptions o;
  o.islands = 2;
  o.hosts_per_island = 2;
  o.devices_per_host = 2;
  o.fault_injector = std::move(injector);
  return o;
}

// Fails every launch of a function named "faulty" on device 2 (host 1).
absl::Status FaultOnDeviceTwo(const LaunchInfo& info) {
  if (info.name == "faulty" && info.device == DeviceId(2)) {
    return absl::InternalError("injected fault");
  }
  return absl::OkStatus();
}

TEST(ErrorsTest, AFailedComputationPoisonsEveryDependentOutputWithItsRootCause) {
  auto cluster = MakeCluster(WithFault(FaultOnDeviceTwo));
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh m0, client->AllocateMesh({{"x", 4}}, IslandId(0)));
  ASSERT_OK_AND_ASSIGN(Mesh m1, client->AllocateMesh({{"x", 4}}, IslandId(1)));
  ASSERT_OK_AND_ASSIGN(CompiledFunction faulty, client->Compile(DelayAddOne(4, 0, "faulty"), m0,
                                                                {{Sharding({{"x"}})},
                                                                 {Sharding({{"x"}})}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction reduce, client->Compile(AllReduceSum(4, {"x"}), m1,
                                                                {{Sharding({{"x"}})},
                                                                 {Sharding::Replicated(1)}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction after, client->Compile(DelayAddOne(4, 0, "after"), m1, {}));
  ProgramBuilder pb = client->NewProgram("poisoned");
  ASSERT_OK_AND_ASSIGN(TracedArray p, pb.Parameter(ir::Shape(ir::DType::kF32, {16}), m0,
                                                   Sharding({{"x"}})));
  ASSERT_OK_AND_ASSIGN(auto a, pb.Call(faulty, {p}));
  ASSERT_OK_AND_ASSIGN(auto b, pb.Call(reduce, {a[0]}));  // moves to island 1
  ASSERT_OK_AND_ASSIGN(auto c, pb.Call(after, {b[0]}));
  ASSERT_OK_AND_ASSIGN(Program program, pb.Build({a[0], b[0], c[0]}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({16}, Iota(16)), m0,
                                             Sharding({{"x"}})));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, program.Run({in}));
  const auto root_cause = AllOf(HasSubstr("node 0 (faulty)"), HasSubstr("device 2"),
                                HasSubstr("host 1"), HasSubstr("injected fault"));
  for (const Array& o : out) {
    EXPECT_THAT(AwaitOrHang(o.Fetch()), StatusIs(absl::StatusCode::kInternal, root_cause));
    EXPECT_THAT(AwaitOrHang(o.Ready()), StatusIs(absl::StatusCode::kInternal, root_cause));
  }
  // The cluster keeps working for runs that do not hit the fault.
  ASSERT_OK_AND_ASSIGN(Array one, client->Put(ir::Literal::F32({4}, Iota(4)), m1,
                                              Sharding::Replicated(1)));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> ok, client->Call(after, {one}));
  EXPECT_OK(AwaitOrHang(ok[0].Fetch()));
}

TEST(ErrorsTest, AGangMemberFailingBeforeItsCollectiveDoesNotLeaveItsPeersWaiting) {
  LocalClusterOptions o = WithFault([](const LaunchInfo& info) {
    return info.name == "all_reduce" && info.device == DeviceId(1)
               ? absl::UnavailableError("device lost")
               : absl::OkStatus();
  });
  // Peers must learn of the failure, not time out.
  o.collective_timeout = absl::Seconds(600);
  auto cluster = MakeCluster(o);
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 4}}, IslandId(0)));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(AllReduceSum(2, {"x"}), mesh, {}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({2}, {1, 2}), mesh,
                                             Sharding::Replicated(1)));
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {in}));
    EXPECT_THAT(AwaitOrHang(out[0].Fetch()),
                StatusIs(absl::StatusCode::kUnavailable,
                         AllOf(HasSubstr("device lost"), HasSubstr("device 1"))));
  }
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalClusterOptions o;
    o.islands = 1;
    o.hosts_per_island = 2;
    o.devices_per_host = 2;
    cluster_ = MakeCluster(o);
    client_ = Connect(cluster_.get());
    mesh_ = *client_->AllocateMesh({{"x", 4}});
  }
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
  Mesh mesh_;
};

TEST_F(BadInputTest, MismatchedShapesAreRejectedWhenBuildingTheFunction) {
  ir::FunctionBuilder b("bad");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {2, 3}));
  ir::Value y = b.Parameter(ir::Shape(ir::DType::kF32, {3, 2}));
  b.Add(x, y);
  EXPECT_THAT(b.Build({x}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("add")));
}

TEST_F(BadInputTest, AnArgumentOfTheWrongShapeIsRejectedAtTheCall) {
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client_->Compile(DelayAddOne(4, 0), mesh_, {}));
  ASSERT_OK_AND_ASSIGN(Array a, client_->Put(ir::Literal::F32({3}, {1, 2, 3}), mesh_,
                                             Sharding::Replicated(1)));
  EXPECT_THAT(client_->Call(f, {a}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("expected f32[4]"), HasSubstr("f32[3]"))));
  EXPECT_THAT(client_->Call(f, {}), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("takes 1 arguments, given 0")));
}

TEST_F(BadInputTest, AnUnknownDeviceIsNotFound) {
  MeshRequest request;
  request.axes = {{"x", 2}};
  request.devices = {DeviceId(0), DeviceId(99)};
  EXPECT_THAT(client_->AllocateMesh(request),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("device 99")));
  EXPECT_THAT(client_->AllocateMesh({{"x", 2}}, IslandId(7)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("island 7")));
}

TEST_F(BadInputTest, AMeshLargerThanTheIslandIsRejected) {
  EXPECT_THAT(client_->AllocateMesh({{"x", 4}, {"y", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("8 devices"), HasSubstr("larger"))));
  EXPECT_THAT(client_->AllocateMesh({{"x", 0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size 0")));
}

TEST_F(BadInputTest, AnArrayOfAnotherClientIsRejected) {
  auto other = Connect(cluster_.get());
  ASSERT_OK_AND_ASSIGN(Array theirs, other->Put(ir::Literal::F32({4}, Iota(4)), mesh_,
                                                Sharding::Replicated(1)));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client_->Compile(DelayAddOne(4, 0), mesh_, {}));
  EXPECT_THAT(client_->Call(f, {theirs}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("belongs to client")));
}

TEST_F(BadInputTest, UsingAnArrayAfterReleaseIsAnError) {
  ASSERT_OK_AND_ASSIGN(Array a, client_->Put(ir::Literal::F32({4}, Iota(4)), mesh_,
                                             Sharding::Replicated(1)));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client_->Compile(DelayAddOne(4, 0), mesh_, {}));
  Array copy = a;
  a.Release();
  EXPECT_TRUE(copy.released());
  EXPECT_THAT(client_->Call(f, {copy}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("was released")));
  EXPECT_THAT(AwaitOrHang(copy.Fetch()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("released")));
}

TEST_F(BadInputTest, ShardingsThatDoNotFitAreRejected) {
  EXPECT_THAT(client_->Put(ir::Literal::F32({10}, Iota(10)), mesh_, Sharding({{"x"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("uneven split")));
  EXPECT_THAT(client_->Put(ir::Literal::F32({8}, Iota(8)), mesh_, Sharding({{"y"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'y'")));
  EXPECT_THAT(client_->Compile(AllReduceSum(4, {"model"}), mesh_, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'model'")));
}

}  // namespace
}  // namespace causeway::testing
