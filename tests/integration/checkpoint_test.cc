// Sharded asynchronous checkpoints (causeway/client/checkpoint.h) on every
// kind of cluster: each host writes its own shards and reads back only the
// pieces its new shards overlap, on devices whose memory is the host's
// (cpu), on devices reached only through copies (the arena kind, vulkan),
// and on worker processes.
#include <filesystem>
#include <fstream>

#include "causeway/client/checkpoint.h"
#include "causeway/worker/host_executor.h"
#include "gmock/gmock.h"
#include "tests/integration/cluster_kinds.h"
#include "tests/integration/wrapped_kind.h"

namespace causeway::testing {
namespace {

namespace fs = std::filesystem;
using ir::DType;
using ir::Literal;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kDeviceMemory = int64_t{8} << 20;

// Dimension 0 of a 1-D array split over `axes`.
Sharding Rows(std::vector<std::string> axes) {
  return Sharding(std::vector<std::vector<std::string>>{std::move(axes)});
}

// This test process's folder: the workers' --checkpoint-root.
std::string ScratchBase() {
  return (fs::absolute(::testing::TempDir()) / absl::StrCat("checkpoint_test_", getpid()))
      .lexically_normal()
      .string();
}

// A fresh folder under it.
std::string Scratch(const std::string& name) {
  const fs::path root = fs::path(ScratchBase()) / name;
  fs::remove_all(root);
  fs::create_directories(root.parent_path());
  return root.string();
}

class CheckpointTest : public ::testing::TestWithParam<ClusterKind> {
 protected:
  static void SetUpTestSuite() {
    LocalClusterOptions lo;
    lo.islands = 1;
    lo.hosts_per_island = 2;
    lo.devices_per_host = 2;
    lo.device_memory_bytes = kDeviceMemory;
    local_ = MakeCluster(lo).release();
    lo.device_kind = std::string(RegisterWrappedArenaKind());
    other_kind_ = MakeCluster(lo).release();
#if CAUSEWAY_HAVE_VULKAN
    lo.device_kind = "vulkan";
    vulkan_ = MakeCluster(lo).release();
#endif
    ProcessClusterOptions po = ProcessShape(1, 2, 2);
    po.memory_bytes = kDeviceMemory;
    fs::create_directories(ScratchBase());
    po.checkpoint_root = ScratchBase();
    processes_ = StartProcesses(po).release();
  }
  static void TearDownTestSuite() {
    delete local_;
    delete other_kind_;
    delete vulkan_;
    delete processes_;
    local_ = other_kind_ = vulkan_ = nullptr;
    processes_ = nullptr;
    fs::remove_all(ScratchBase());
  }

  void SetUp() override {
    switch (GetParam()) {
      case ClusterKind::kEmbedded: cluster_ = local_; break;
      case ClusterKind::kEmbeddedOtherDevice: cluster_ = other_kind_; break;
      case ClusterKind::kEmbeddedVulkan:
        if (vulkan_ == nullptr) GTEST_SKIP() << "this build has no vulkan kind";
        cluster_ = vulkan_;
        break;
      case ClusterKind::kProcesses:
        remote_ = ConnectRemote(*processes_);
        break;
      default: FAIL() << "not a kind of this suite";
    }
    ClusterConnection* connection = this->connection();
    client_ = Connect(connection);
    const Topology t = connection->resources()->GetTopology();
    MeshRequest r;
    r.axes = {{"x", 2}, {"y", 2}};
    r.devices = t.island(t.islands()[0])->devices;  // x: the host, y: its device
    mesh_ = *client_->AllocateMesh(r);
    MeshRequest line;
    line.axes = {{"data", 2}};
    line.devices = {r.devices[1], r.devices[2]};  // one device of each host
    line_ = *client_->AllocateMesh(line);
  }
  void TearDown() override {
    client_.reset();
    remote_.reset();
    if (cluster_ == nullptr) return;
    // Nothing is left behind: no shard a save held, no restored shard.
    for (const auto& host : cluster_->executors()) {
      for (int d = 0; d < host->num_devices(); ++d) {
        host->store().memory(d)->AwaitEmpty(absl::Seconds(10));
      }
    }
    EXPECT_EQ(cluster_->MemoryInUse(), 0);
  }

  ClusterConnection* connection() const {
    if (cluster_ != nullptr) return cluster_;
    return remote_.get();
  }
  Array Put(const Literal& value, const Mesh& mesh, const Sharding& sharding) {
    absl::StatusOr<Array> a = client_->Put(value, mesh, sharding);
    CW_CHECK_OK(a.status());
    return *std::move(a);
  }
  std::unique_ptr<Checkpointer> Open(const std::string& root, CheckpointOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Checkpointer>> c =
        Checkpointer::Open(client_.get(), root, options);
    CW_CHECK_OK(c.status());
    return *std::move(c);
  }

  static LocalCluster* local_;
  static LocalCluster* other_kind_;
  static LocalCluster* vulkan_;
  static ProcessCluster* processes_;
  LocalCluster* cluster_ = nullptr;  // null: processes_, through remote_
  std::unique_ptr<RemoteCluster> remote_;
  std::unique_ptr<Client> client_;
  Mesh mesh_;  // x: 2 hosts, y: 2 devices each
  Mesh line_;  // data: one device of each host
};

LocalCluster* CheckpointTest::local_ = nullptr;
LocalCluster* CheckpointTest::other_kind_ = nullptr;
LocalCluster* CheckpointTest::vulkan_ = nullptr;
ProcessCluster* CheckpointTest::processes_ = nullptr;

TEST_P(CheckpointTest, EachHostWritesItsShardsAndAnyMeshReadsThemBack) {
  const Literal w = Literal::F32({8, 6}, Iota(48));
  const Literal b = Literal::F32({6}, Iota(6, 100));
  const Literal n = Literal::I32({4}, {7, -8, 9, -10});
  auto ckpt = Open(Scratch("roundtrip"));
  ASSERT_OK(AwaitOrHang(ckpt->Save(
      10, {{"w", Put(w, mesh_, Sharding({{"x"}, {"y"}}))},
           {"b", Put(b, mesh_, Sharding::Replicated(1))},
           {"n", Put(n, mesh_, Rows({"x"}))}})));
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> steps, ckpt->Steps());
  EXPECT_THAT(steps, ElementsAre(10));
  ASSERT_OK_AND_ASSIGN(checkpoint::Manifest m, ckpt->ReadManifest(10));
  ASSERT_EQ(m.arrays.size(), 3u);
  EXPECT_EQ(m.Find("w")->pieces.size(), 4u);  // a shard per device
  EXPECT_EQ(m.Find("b")->pieces.size(), 1u);  // replicated: written once
  EXPECT_EQ(m.Find("n")->pieces.size(), 2u);  // one per host, not per device
  EXPECT_THAT(m.Find("w")->sharding, HasSubstr("{x}, {y}"));

  // Onto another mesh and sharding: columns over two devices; the rows of
  // "n" on one axis of the 2x2 mesh; "b" split.
  const RestoreTarget targets[] = {{"w", line_, Sharding({{}, {"data"}})},
                                   {"n", mesh_, Rows({"y"})},
                                   {"b", line_, Rows({"data"})}};
  ASSERT_OK_AND_ASSIGN(std::vector<Array> back, ckpt->Restore(10, targets));
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].sharding(), Sharding({{}, {"data"}}));
  ASSERT_OK_AND_ASSIGN(Literal w2, AwaitOrHang(back[0].Fetch()));
  ASSERT_OK_AND_ASSIGN(Literal n2, AwaitOrHang(back[1].Fetch()));
  ASSERT_OK_AND_ASSIGN(Literal b2, AwaitOrHang(back[2].Fetch()));
  EXPECT_EQ(w2, w);
  EXPECT_EQ(n2, n);
  EXPECT_EQ(b2, b);
}

TEST_P(CheckpointTest, SaveReturnsAtOnceAndHoldsItsArraysUntilWritten) {
  // The value saved is still being computed when Save returns, and the
  // caller drops its last handle at once, as a training loop replacing
  // its parameters does.
  const int64_t n = 4096;
  ir::FunctionBuilder fb("slow_add_one");
  ir::Value x = fb.Parameter(ir::Shape(DType::kF32, {n / 4}));
  ir::Value one = fb.Broadcast(fb.ConstantF32(1.0f), {n / 4}, {});
  ASSERT_OK_AND_ASSIGN(ir::Function f, fb.Build({fb.Delay(fb.Add(x, one), 50'000)}));
  const Sharding split = Rows({"x", "y"});
  ASSERT_OK_AND_ASSIGN(CompiledFunction cf, client_->Compile(f, mesh_, {{split}, {split}}));
  auto ckpt = Open(Scratch("holds"));
  Future<Unit> saved;
  {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> y,
                         client_->Call(cf, {Put(Literal::F32({n}, Iota(n)), mesh_, split)}));
    saved = ckpt->Save(1, {{"y", y[0]}});
  }
  EXPECT_EQ(saved.TryGet(), nullptr) << "the save waited for the value";
  ASSERT_OK(AwaitOrHang(saved));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> back,
                       ckpt->Restore(1, std::vector<RestoreTarget>{{"y", mesh_, split}}));
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(back[0].Fetch()));
  EXPECT_EQ(v, Literal::F32({n}, Iota(n, 1)));
}

TEST_P(CheckpointTest, SavesInFlightCommitInStepOrderAndKeepTheNewest) {
  auto ckpt = Open(Scratch("keep"), {.keep = 2, .max_in_flight = 2});
  std::vector<Future<Unit>> saves;
  for (int step = 1; step <= 5; ++step) {
    saves.push_back(ckpt->Save(
        step * 10, {{"v", Put(Literal::F32({4}, Iota(4, step)), mesh_, Rows({"x"}))}}));
  }
  for (const Future<Unit>& s : saves) ASSERT_OK(AwaitOrHang(s));
  ASSERT_OK(ckpt->Wait());
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> steps, ckpt->Steps());
  EXPECT_THAT(steps, ElementsAre(40, 50));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> back,
                       ckpt->Restore(40, std::vector<RestoreTarget>{{"v", line_, Sharding::Replicated(1)}}));
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(back[0].Fetch()));
  EXPECT_EQ(v, Literal::F32({4}, Iota(4, 4)));
  // A step not after the last one saved is refused, in the future.
  Future<Unit> again =
      ckpt->Save(50, {{"v", Put(Literal::F32({4}, Iota(4)), mesh_, Rows({"x"}))}});
  EXPECT_THAT(AwaitOrHang(again).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    HasSubstr("steps must increase")));
}

TEST_P(CheckpointTest, ACorruptOrMissingPieceIsAnErrorNamingItNeverNumbers) {
  const std::string root = Scratch("corrupt");
  auto ckpt = Open(root);
  ASSERT_OK(AwaitOrHang(
      ckpt->Save(3, {{"w", Put(Literal::F32({8, 6}, Iota(48)), mesh_, Sharding({{"x"}, {}}))}})));
  ASSERT_OK_AND_ASSIGN(checkpoint::Manifest m, ckpt->ReadManifest(3));
  const std::string folder = checkpoint::StepFolder(root, 3);
  const std::string first = folder + "/" + m.Find("w")->pieces[0].file;
  {
    std::fstream f(first, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5);
    f.put('\x7f');
  }
  const std::vector<RestoreTarget> whole = {{"w", line_, Sharding({{}, {}})}};
  ASSERT_OK_AND_ASSIGN(std::vector<Array> back, ckpt->Restore(3, whole));
  EXPECT_THAT(AwaitOrHang(back[0].Ready()).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(first)));
  // A shard whose box misses the corrupt piece reads only the piece it
  // overlaps: rows 4 to 7, on the second host, are whole.
  ASSERT_OK_AND_ASSIGN(
      back, ckpt->Restore(3, std::vector<RestoreTarget>{{"w", line_, Sharding({{"data"}, {}})}}));
  EXPECT_THAT(AwaitOrHang(back[0].Ready()).status(), StatusIs(absl::StatusCode::kDataLoss, ::testing::_));
  if (cluster_ != nullptr) {
    EXPECT_OK(AwaitOrHang(cluster_->executors()[1]->AwaitShard(back[0].id(), 1)));
  }
  fs::remove(first);
  ASSERT_OK_AND_ASSIGN(back, ckpt->Restore(3, whole));
  EXPECT_THAT(AwaitOrHang(back[0].Fetch()).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(first)));
}

TEST_P(CheckpointTest, RefusesWhatCannotBeSavedOrRestored) {
  auto ckpt = Open(Scratch("refusals"));
  const Array v = Put(Literal::F32({4}, Iota(4)), mesh_, Rows({"x"}));
  auto code = [](const Future<Unit>& f) { return AwaitOrHang(f).status().code(); };
  EXPECT_EQ(code(ckpt->Save(1, {})), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ckpt->Save(1, {{"v", v}, {"v", v}})), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ckpt->Save(1, {{"", v}})), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ckpt->Save(1, {{"v", Array()}})), absl::StatusCode::kInvalidArgument);
  auto other = Connect(connection());
  ASSERT_OK_AND_ASSIGN(Mesh theirs, other->AllocateMesh({{"x", 2}}));
  ASSERT_OK_AND_ASSIGN(Array foreign,
                       other->Put(Literal::F32({4}, Iota(4)), theirs, Rows({"x"})));
  EXPECT_EQ(code(ckpt->Save(1, {{"v", foreign}})), absl::StatusCode::kInvalidArgument);
  ASSERT_OK(AwaitOrHang(ckpt->Save(1, {{"v", v}})));

  using Targets = std::vector<RestoreTarget>;
  EXPECT_THAT(ckpt->Restore(2, Targets{{"v", mesh_, Rows({"x"})}}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no committed step 2")));
  EXPECT_THAT(ckpt->Restore(1, Targets{{"u", mesh_, Rows({"x"})}}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no array named 'u'")));
  // A sharding of another rank does not fit.
  EXPECT_THAT(ckpt->Restore(1, Targets{{"v", mesh_, Sharding({{}, {}})}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("restoring 'v'")));
  EXPECT_THAT(Checkpointer::Open(client_.get(), Scratch("bad"), {.keep = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

// Workers write only under their --checkpoint-root.
TEST(CheckpointProcessesTest, WorkersRefuseFoldersOutsideTheirRoot) {
  const std::string root = Scratch("outside_root");
  ProcessClusterOptions po = ProcessShape(1, 1, 2);
  po.memory_bytes = kDeviceMemory;
  po.checkpoint_root = root + "/allowed";
  std::unique_ptr<ProcessCluster> processes = StartProcesses(po);
  std::unique_ptr<RemoteCluster> remote = ConnectRemote(*processes);
  auto client = Connect(remote.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 2}}));
  ASSERT_OK_AND_ASSIGN(Array v, client->Put(Literal::F32({4}, Iota(4)), mesh, Rows({"x"})));
  for (const std::string& where : {root + "/elsewhere", root + "/allowed/../elsewhere"}) {
    ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(client.get(), where));
    EXPECT_THAT(AwaitOrHang(ckpt->Save(1, {{"v", v}})).status(),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("--checkpoint-root")));
  }
  ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(client.get(), root + "/allowed/run"));
  EXPECT_OK(AwaitOrHang(ckpt->Save(1, {{"v", v}})));
}

INSTANTIATE_TEST_SUITE_P(Kinds, CheckpointTest,
                         ::testing::Values(ClusterKind::kEmbedded,
                                           ClusterKind::kEmbeddedOtherDevice,
                                           ClusterKind::kEmbeddedVulkan, ClusterKind::kProcesses),
                         KindName);

}  // namespace
}  // namespace causeway::testing
