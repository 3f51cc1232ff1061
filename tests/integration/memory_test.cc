// Device memory: back-pressure instead of failure, and reclamation of every
// buffer a client owned when it disconnects.
#include "causeway/worker/host_executor.h"
#include "gmock/gmock.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kQuarter = kMiB / 4 / 4;  // f32 elements in 256 KiB

// With FIFO every run reaches the host at once and waits there for memory;
// with proportional share (the default) part of them wait in the scheduler,
// and releasing the earlier outputs must still let every run through.
class MemoryBackPressureTest : public ::testing::TestWithParam<SchedulingPolicy> {};

INSTANTIATE_TEST_SUITE_P(Policies, MemoryBackPressureTest,
                         ::testing::Values(SchedulingPolicy::kFifo,
                                           SchedulingPolicy::kProportionalShare));

TEST_P(MemoryBackPressureTest, RunsWhoseOutputsExceedMemoryWaitAndCompleteAsArraysAreReleased) {
  LocalClusterOptions o;
  o.islands = o.hosts_per_island = o.devices_per_host = 1;
  o.device_memory_bytes = kMiB;
  o.scheduling = GetParam();
  auto cluster = MakeCluster(o);
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(DelayAddOne(kQuarter, 0), mesh, {}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal(ir::Shape(ir::DType::kF32, {kQuarter})),
                                             mesh, Sharding::Replicated(1)));
  ASSERT_OK(AwaitOrHang(in.Ready()));
  // 20 outputs of 256 KiB against 1 MiB holding a 256 KiB input: at most
  // three fit at once (fewer, as each launch's temporaries are counted
  // too). Every call still returns at once.
  constexpr int kRuns = 20;
  std::vector<Array> outs;
  for (int i = 0; i < kRuns; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {in}));
    outs.push_back(out[0]);
  }
  ASSERT_OK(AwaitOrHang(client->Flush()));
  DeviceMemory* memory = cluster->executor(HostId(0))->store().memory(0);
  if (GetParam() == SchedulingPolicy::kFifo) {
    EXPECT_GE(memory->num_waiting(), kRuns - 3);
  }
  for (int i = 0; i < kRuns; ++i) {
    ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(outs[i].Fetch()));
    EXPECT_EQ(v.values<float>()[0], 1.0f);
    outs[i] = Array();  // release: lets the next waiting output be allocated
  }
  EXPECT_LE(memory->peak(), kMiB);
  EXPECT_EQ(memory->num_waiting(), 0);
}

TEST(MemoryTest, AnArrayLargerThanTheWholeDeviceMemoryFailsAtOnce) {
  LocalClusterOptions o;
  o.islands = o.hosts_per_island = o.devices_per_host = 1;
  o.device_memory_bytes = kMiB;
  auto cluster = MakeCluster(o);
  auto client = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  const int64_t too_big = 2 * kMiB / 4;
  EXPECT_THAT(client->Put(ir::Literal(ir::Shape(ir::DType::kF32, {too_big})), mesh,
                          Sharding::Replicated(1)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("whole memory")));
  EXPECT_THAT(client->Compile(DelayAddOne(too_big, 0), mesh, {}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("whole memory")));
  // The device-level check, for any path that reaches it.
  Notification done;
  absl::Status status;
  cluster->executor(HostId(0))->store().memory(0)->Reserve(2 * kMiB, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("capacity")));
}

TEST(MemoryTest, DisconnectingAClientFreesEveryBufferItOwnedOnEveryHost) {
  LocalClusterOptions o;
  o.islands = 2;
  o.hosts_per_island = 2;
  o.devices_per_host = 2;
  auto cluster = MakeCluster(o);
  auto other = Connect(cluster.get());
  ASSERT_OK_AND_ASSIGN(Mesh other_mesh, other->AllocateMesh({{"x", 2}}));
  ASSERT_OK_AND_ASSIGN(Array kept, other->Put(ir::Literal::F32({2}, {1, 2}), other_mesh,
                                              Sharding({{"x"}})));
  ASSERT_OK(AwaitOrHang(kept.Ready()));
  const int64_t other_bytes = cluster->MemoryInUse();

  auto client = Connect(cluster.get());
  std::vector<Array> held;
  for (int island = 0; island < 2; ++island) {
    ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 4}}, IslandId(island)));
    ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(DelayAddOne(64, 2000), mesh, {}));
    ASSERT_OK_AND_ASSIGN(Array a, client->Put(ir::Literal::F32({64}, Iota(64)), mesh,
                                              Sharding::Replicated(1)));
    held.push_back(a);
    for (int i = 0; i < 5; ++i) {
      ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {held.back()}));
      held.push_back(out[0]);
    }
  }
  EXPECT_GT(cluster->MemoryInUse(), other_bytes);
  // Completion of the last run on each mesh, observed before disconnecting.
  std::vector<Future<Unit>> finished;
  for (const Array& a : held) finished.push_back(a.Ready());
  // Disconnect while runs may still be in flight, with every handle held.
  client->Disconnect();
  for (const Future<Unit>& f : finished) AwaitOrHang(f).IgnoreError();
  // Only the other client's array remains.
  EXPECT_EQ(cluster->MemoryInUse(), other_bytes);
  EXPECT_THAT(client->Compile(DelayAddOne(1, 0), other_mesh, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("disconnected")));
  held.clear();
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(kept.Fetch()));
  EXPECT_EQ(v.values<float>()[1], 2.0f);
}

// Pieces of reshards that arrive for runs this host has not seen are held
// for the run, but not without bound: beyond the budget they are dropped,
// and past their time to live housekeeping drops them.
TEST(MemoryTest, PiecesForRunsThatNeverArriveAreBoundedAndExpire) {
  LocalClusterOptions o;
  o.islands = o.hosts_per_island = o.devices_per_host = 1;
  o.early_piece_budget_bytes = 4 * kMiB;
  auto cluster = MakeCluster(o);
  HostExecutor* host = cluster->executor(HostId(0));
  for (int i = 0; i < 100; ++i) {
    host->DeliverPiece(ShardPieceMessage{RunId(1000 + i), 0, 0, 0, absl::OkStatus(),
                                         std::string(kMiB, 'x')});
  }
  EXPECT_EQ(host->early_piece_bytes(), 4 * kMiB);
  host->Housekeep(absl::Now());  // too young to expire
  EXPECT_EQ(host->early_piece_bytes(), 4 * kMiB);
  host->Housekeep(absl::Now() + absl::Minutes(2));
  EXPECT_EQ(host->early_piece_bytes(), 0);
}

}  // namespace
}  // namespace causeway::testing
