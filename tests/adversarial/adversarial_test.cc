// A hostile peer holding a valid token, against a real multi-process cluster
// on loopback. Each probe speaks the wire protocol directly (what a
// malicious or broken client can send, not what our client would), and
// asserts a clear refusal. After every probe: no process died, memory on
// every device is back where it started, and an honest client is served.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"
#include "causeway/cluster/coordinator_server.h"
#include "causeway/cluster/data_plane.h"
#include "causeway/cluster/worker_server.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/cluster_codec.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "causeway/transport/grpc/wire_codec.h"
#include "gmock/gmock.h"
#include "tests/integration/cluster_kinds.h"

namespace causeway::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDeviceMemory = int64_t{8} << 20;
constexpr absl::Duration kReplyTimeout = absl::Seconds(30);

// A raw connection to the coordinator: one Connect stream, replies matched
// to calls by id.
class Peer {
 public:
  Peer(const std::string& url, const std::string& token) {
    auto channel = grpc_transport::MakeChannel(url.substr(7), grpc::InsecureChannelCredentials());
    stub_ = cluster::Coordinator::NewStub(channel);
    grpc_transport::AddCallMetadata(context_, token);
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    stream_ = stub_->Connect(&context_);
    reader_ = std::thread([this] {
      cluster::ToClient batch;
      while (true) {
        {
          MutexLock lock(&mu_);
          mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !paused_; });
        }
        if (!stream_->Read(&batch)) break;
        MutexLock lock(&mu_);
        for (const cluster::ClientEvent& e : batch.messages()) {
          if (e.has_reply()) replies_[e.reply().id()].push_back(e.reply());
        }
      }
      MutexLock lock(&mu_);
      closed_ = true;
    });
  }
  ~Peer() {
    stream_->WritesDone();
    context_.TryCancel();
    Pause(false);
    reader_.join();
  }

  // Stops (or resumes) reading what the coordinator sends.
  void Pause(bool paused) {
    MutexLock lock(&mu_);
    paused_ = paused;
  }

  // Sends `m` and waits for its (first) reply.
  absl::StatusOr<cluster::Reply> Call(cluster::ClientMessage m) {
    const uint64_t id = next_id_++;
    m.set_id(id);
    Send(std::move(m));
    MutexLock lock(&mu_);
    auto answered = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || replies_.contains(id);
    };
    if (!mu_.AwaitWithTimeout(answered, kReplyTimeout) || !replies_.contains(id)) {
      return absl::DeadlineExceededError(absl::StrCat("no reply to call ", id));
    }
    cluster::Reply r = replies_[id].front();
    replies_.erase(id);
    return r;
  }
  // Status of the reply to `m`.
  absl::Status CallStatus(cluster::ClientMessage m) {
    absl::StatusOr<cluster::Reply> r = Call(std::move(m));
    return r.ok() ? wire::DecodeStatus(r->status()) : r.status();
  }
  void Send(cluster::ClientMessage m) { ASSERT_TRUE(TrySend(std::move(m))); }
  // False once the stream is closed.
  bool TrySend(cluster::ClientMessage m) {
    cluster::ClientBatch batch;
    *batch.add_messages() = std::move(m);
    return stream_->Write(batch);
  }

  ClientId RegisterClient() {
    cluster::ClientMessage m;
    m.set_register_client(true);
    absl::StatusOr<cluster::Reply> r = Call(m);
    CW_CHECK_OK(r.status());
    CW_CHECK_OK(wire::DecodeStatus(r->status()));
    return ClientId(r->client());
  }

 private:
  std::unique_ptr<cluster::Coordinator::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<cluster::ClientBatch, cluster::ToClient>> stream_;
  std::thread reader_;
  uint64_t next_id_ = 1;
  Mutex mu_;
  absl::flat_hash_map<uint64_t, std::deque<cluster::Reply>> replies_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
};

// Serves an honest client: an all-reduce over both workers.
void AllReduceWorks(RemoteCluster* conn) {
  auto client = Connect(conn);
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 2}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f,
                       client->Compile(AllReduceSum(2, {"x"}), mesh,
                                       {{Sharding({{"x"}})}, {Sharding({{"x"}})}}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({4}, {1, 2, 3, 4}), mesh,
                                             Sharding({{"x"}})));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {in}));
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(out[0].Fetch()));
  EXPECT_EQ(v.values<float>(), (std::vector<float>{4, 6, 4, 6}));
}

class AdversarialTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ProcessClusterOptions o = ProcessShape(1, 2, 1);
    o.memory_bytes = kDeviceMemory;
    o.memory_stall_timeout = absl::Seconds(2);
    o.binary = CausewayBinary();
    auto cluster = ProcessCluster::Start(o);
    CW_CHECK_OK(cluster.status());
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    conn_ = ConnectRemote(*cluster_);
    topology_ = conn_->resources()->GetTopology();
    ASSERT_EQ(topology_.num_devices(), 2);
    baseline_ = MemoryInUse();
    peer_ = std::make_unique<Peer>(cluster_->url(), cluster_->token());
    client_ = peer_->RegisterClient();
  }

  // After every probe: nobody died, memory is back, an honest client works.
  void TearDown() override {
    peer_.reset();  // disconnecting reclaims what the probe left
    EXPECT_EQ(cluster_->ReapExited(), "");
    for (int i = 0; i < cluster_->num_workers(); ++i) EXPECT_TRUE(cluster_->WorkerRunning(i));
    // Reclamation after a disconnect is asynchronous: poll within a bound.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::vector<int64_t> now = MemoryInUse();
    while (now != baseline_ && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      now = MemoryInUse();
    }
    EXPECT_EQ(now, baseline_) << "device memory did not return to its level before the probe";
    ServesAnHonestClient();
  }

  std::vector<int64_t> MemoryInUse() {
    std::vector<int64_t> out;
    for (HostId h : Island().hosts) {
      absl::StatusOr<std::vector<DeviceCounters>> c = AwaitOrHang(conn_->host(h)->GetCounters(false));
      CW_CHECK_OK(c.status());
      for (const DeviceCounters& d : *c) out.push_back(d.memory_in_use);
    }
    return out;
  }

  void ServesAnHonestClient() { AllReduceWorks(conn_.get()); }

  HostId HostOf(DeviceId d) { return topology_.device(d)->host; }
  IslandInfo Island() { return *topology_.island(topology_.islands()[0]); }

  // A one-device mesh allocated by the probe's client.
  Mesh OneDeviceMesh(int position) {
    cluster::ClientMessage m;
    m.set_client(client_.value());
    MeshRequest request;
    request.axes = {{"x", 1}};
    request.devices = {Island().devices[position]};
    wire::EncodeMeshRequest(request, m.mutable_allocate_mesh());
    absl::StatusOr<cluster::Reply> r = peer_->Call(m);
    CW_CHECK_OK(r.status());
    CW_CHECK_OK(wire::DecodeStatus(r->status()));
    return *wire::DecodeMesh(r->mesh());
  }

  // A valid plan of this client: y = f(x) on `mesh`, f32[n] -> f32[n].
  ProgramPlan NegPlan(const Mesh& mesh, int64_t n, int64_t id_offset = 1) {
    ir::FunctionBuilder b("neg");
    ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {n}));
    ir::Function f = *b.Build({b.Neg(x)});
    ProgramPlan plan;
    plan.id = ProgramId(ClientIdBase(client_) + id_offset);
    plan.client = client_;
    plan.name = "neg";
    const HostId h = HostOf(mesh.devices()[0]);
    PlanValue v;
    v.shape = v.shard_shape = ir::Shape(ir::DType::kF32, {n});
    v.mesh = mesh;
    v.sharding = Sharding::Replicated(1);
    v.shard_hosts = {h};
    v.shard_local_device = {0};
    plan.values = {v, v};
    PlanNode node;
    node.name = "neg";
    node.inputs = {0};
    node.outputs = {1};
    node.function = std::make_shared<const ir::Function>(f);
    node.device_kind = "cpu";
    plan.nodes = {node};
    plan.parameters = {0};
    plan.outputs = {1};
    plan.islands = {mesh.island()};
    plan.hosts = {h};
    plan.hosts_by_island = {{h}};
    return plan;
  }

  cluster::ClientMessage SchedulerRegister(const ProgramPlan& plan, IslandId island) {
    cluster::ClientMessage m;
    m.mutable_scheduler()->set_island(island.value());
    wire::EncodePlan(plan, m.mutable_scheduler()->mutable_register_program());
    return m;
  }
  cluster::ClientMessage HostRegister(const ProgramPlan& plan, HostId h) {
    cluster::ClientMessage m;
    m.mutable_host()->set_host(h.value());
    wire::EncodePlan(plan, m.mutable_host()->mutable_register_program());
    return m;
  }
  RunRequest Run(const ProgramPlan& plan, int64_t k, std::vector<ArrayId> args,
                 std::vector<ArrayId> outs) {
    return RunRequest{plan.id, RunId(ClientIdBase(client_) + 1000 + k), client_, std::move(args),
                      std::move(outs), 0};
  }
  ArrayId Id(int64_t k) { return ArrayId(ClientIdBase(client_) + 5000 + k); }

  static ProcessCluster* cluster_;
  std::unique_ptr<RemoteCluster> conn_;
  Topology topology_;
  std::vector<int64_t> baseline_;
  std::unique_ptr<Peer> peer_;
  ClientId client_;
};

ProcessCluster* AdversarialTest::cluster_ = nullptr;

TEST_F(AdversarialTest, APlanNamingAnUnknownHostIsRefusedAndItsRunsGoNowhere) {
  const Mesh mesh = OneDeviceMesh(0);
  ProgramPlan plan = NegPlan(mesh, 2);
  // The island's host list names host 999, which the plan does not list...
  plan.hosts_by_island = {{HostId(999)}};
  EXPECT_THAT(peer_->CallStatus(SchedulerRegister(plan, mesh.island())),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("999")));
  // ... or lists too: no such host.
  plan.hosts = {HostId(999)};
  EXPECT_FALSE(peer_->CallStatus(SchedulerRegister(plan, mesh.island())).ok());
  // Work placed on a host that the island's list does not name: refused.
  plan = NegPlan(mesh, 2);
  plan.hosts = plan.hosts_by_island[0] = {HostOf(Island().devices[1])};
  EXPECT_FALSE(peer_->CallStatus(SchedulerRegister(plan, mesh.island())).ok());
  // Runs of the refused program are refused too.
  cluster::ClientMessage m;
  m.mutable_scheduler()->set_island(mesh.island().value());
  wire::EncodeRun(Run(plan, 0, {Id(0)}, {Id(1)}), m.mutable_scheduler()->mutable_submit_runs()->add_runs());
  absl::StatusOr<cluster::Reply> r = peer_->Call(m);
  ASSERT_OK(r.status());
  ASSERT_EQ(r->statuses().statuses_size(), 1);
  EXPECT_EQ(wire::DecodeStatus(r->statuses().statuses(0)).code(), absl::StatusCode::kNotFound);
}

TEST_F(AdversarialTest, RunsWithTheWrongNumberOfArgumentsAreRefusedNotCrashed) {
  const Mesh mesh = OneDeviceMesh(0);
  const ProgramPlan plan = NegPlan(mesh, 2);
  const HostId h = HostOf(mesh.devices()[0]);
  ASSERT_OK(peer_->CallStatus(HostRegister(plan, h)));
  ASSERT_OK(peer_->CallStatus(SchedulerRegister(plan, mesh.island())));
  // Through the scheduler: refused, naming the counts.
  cluster::ClientMessage m;
  m.mutable_scheduler()->set_island(mesh.island().value());
  wire::EncodeRun(Run(plan, 0, {}, {Id(1)}), m.mutable_scheduler()->mutable_submit_runs()->add_runs());
  absl::StatusOr<cluster::Reply> r = peer_->Call(m);
  ASSERT_OK(r.status());
  EXPECT_THAT(wire::DecodeStatus(r->statuses().statuses(0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 arguments")));
  // Straight to the host: the worker survives, and the output it was told
  // to write carries the refusal.
  cluster::ClientMessage direct;
  direct.mutable_host()->set_host(h.value());
  wire::EncodeRun(Run(plan, 1, {}, {Id(2)}), direct.mutable_host()->mutable_enqueue_runs()->add_runs());
  peer_->Send(direct);
  cluster::ClientMessage fetch;
  fetch.mutable_host()->set_host(h.value());
  fetch.mutable_host()->mutable_fetch_shard()->set_array(Id(2).value());
  EXPECT_THAT(peer_->CallStatus(fetch),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 arguments")));
  // A run with no outputs named at all: dropped, the worker lives on.
  direct.mutable_host()->mutable_enqueue_runs()->clear_runs();
  wire::EncodeRun(Run(plan, 2, {}, {}), direct.mutable_host()->mutable_enqueue_runs()->add_runs());
  peer_->Send(direct);
  cluster::ClientMessage counters;
  counters.mutable_host()->set_host(h.value());
  counters.mutable_host()->set_get_counters(false);
  EXPECT_OK(peer_->CallStatus(counters));
}

TEST_F(AdversarialTest, ARunNamingAnArrayOfAnotherShapeFailsInsteadOfReadingPastIt) {
  const Mesh mesh = OneDeviceMesh(0);
  const ProgramPlan plan = NegPlan(mesh, 1024);
  const HostId h = HostOf(mesh.devices()[0]);
  ASSERT_OK(peer_->CallStatus(HostRegister(plan, h)));
  // An array of 2 floats where the program takes 1024.
  cluster::ClientMessage put;
  put.mutable_host()->set_host(h.value());
  cluster::PutShard& p = *put.mutable_host()->mutable_put_shard();
  p.set_array(Id(1).value());
  p.set_owner(client_.value());
  wire::EncodeLiteral(ir::Literal::F32({2}, {1, 2}), p.mutable_value());
  ASSERT_OK(peer_->CallStatus(put));
  cluster::ClientMessage direct;
  direct.mutable_host()->set_host(h.value());
  wire::EncodeRun(Run(plan, 0, {Id(1)}, {Id(2)}),
                  direct.mutable_host()->mutable_enqueue_runs()->add_runs());
  peer_->Send(direct);
  cluster::ClientMessage fetch;
  fetch.mutable_host()->set_host(h.value());
  fetch.mutable_host()->mutable_fetch_shard()->set_array(Id(2).value());
  EXPECT_THAT(peer_->CallStatus(fetch),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the program takes")));
}

// Field 10 of a host call was a multi-controller loop run by the worker; the
// loop now belongs to the benchmarks (tools/spmd_loop.h) and the field is
// reserved. (A client of an older build is refused at connection by the
// protocol version.) A peer that sends it anyway gets a clear refusal, not
// silence.
TEST_F(AdversarialTest, ARetiredSpmdLoopCallIsRefused) {
  const Mesh mesh = OneDeviceMesh(0);
  const HostId h = HostOf(mesh.devices()[0]);
  cluster::HostCall call;
  call.set_host(h.value());
  // Field 10, length-delimited, empty: tag (10 << 3) | 2.
  const std::string bytes = call.SerializeAsString() + std::string("\x52\x00", 2);
  cluster::ClientMessage m;
  ASSERT_TRUE(m.mutable_host()->ParseFromString(bytes));
  EXPECT_THAT(peer_->CallStatus(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty host call")));
}

// Checkpoint calls name folders, arrays and boxes: each is checked before a
// worker touches a file (docs/DISTRIBUTED.md, "Untrusted peers").
TEST_F(AdversarialTest, MalformedOrForeignCheckpointCallsAreRefused) {
  const Mesh mesh = OneDeviceMesh(0);
  const HostId h = HostOf(mesh.devices()[0]);
  auto save = [&](ArrayId array, int shard) {
    cluster::ClientMessage m;
    m.mutable_host()->set_host(h.value());
    SavePieceRequest p;
    p.array = array;
    p.shard = shard;
    p.file = "a0.s0";
    grpc_transport::EncodeSaveShards("/tmp/anywhere", {p}, m.mutable_host()->mutable_save_shards());
    return peer_->CallStatus(m);
  };
  // Another client's array.
  EXPECT_FALSE(save(ArrayId(ClientIdBase(ClientId(client_.value() + 7)) + 1), 0).ok());
  EXPECT_THAT(save(Id(1), -1), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("piece")));
  // This cluster's workers have no --checkpoint-root: they write nowhere.
  EXPECT_THAT(save(Id(1), 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--checkpoint-root")));

  auto restore = [&](ClientId owner, int dtype) {
    cluster::ClientMessage m;
    m.mutable_host()->set_host(h.value());
    RestoreShardRequest r;
    r.name = "w";
    r.array = Id(2);
    r.offset = {0};
    r.extent = {4};
    grpc_transport::EncodeRestoreShards("/tmp/anywhere", owner, {r},
                                        m.mutable_host()->mutable_restore_shards());
    m.mutable_host()->mutable_restore_shards()->mutable_shards(0)->set_dtype(dtype);
    return peer_->CallStatus(m);
  };
  EXPECT_THAT(restore(ClientId(client_.value() + 1000), 0),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("another client")));
  EXPECT_THAT(restore(client_, 99),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed shard")));
  EXPECT_THAT(restore(client_, 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--checkpoint-root")));
}

TEST_F(AdversarialTest, MalformedMeshRequestsAreRefused) {
  cluster::ClientMessage m;
  m.set_client(client_.value());
  MeshRequest request;
  request.axes = {{"a", int64_t{1} << 32}, {"b", int64_t{1} << 32}};
  wire::EncodeMeshRequest(request, m.mutable_allocate_mesh());
  EXPECT_THAT(peer_->CallStatus(m), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  // On behalf of a client of another connection.
  m.set_client(client_.value() + 1000);
  EXPECT_THAT(peer_->CallStatus(m), StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

TEST_F(AdversarialTest, ACallThatCannotFitOnADeviceIsRefusedAtRegistration) {
  const Mesh mesh = OneDeviceMesh(0);
  // 16 MiB of output on an 8 MiB device.
  const ProgramPlan plan = NegPlan(mesh, (16 << 20) / 4);
  EXPECT_THAT(peer_->CallStatus(HostRegister(plan, HostOf(mesh.devices()[0]))),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("neg")));
}

TEST_F(AdversarialTest, PutsPastTheDeviceBudgetFailInsteadOfWaitingForever) {
  const Mesh mesh = OneDeviceMesh(0);
  const HostId h = HostOf(mesh.devices()[0]);
  const int64_t n = (1 << 20) / 4;  // 1 MiB of f32
  // 12 MiB of puts on an 8 MiB device: the ones that fit succeed, the rest
  // wait, and fail once nothing has been freed for the stall timeout.
  for (int i = 0; i < 12; ++i) {
    cluster::ClientMessage put;
    put.mutable_host()->set_host(h.value());
    cluster::PutShard& p = *put.mutable_host()->mutable_put_shard();
    p.set_array(Id(i).value());
    p.set_owner(client_.value());
    wire::EncodeLiteral(ir::Literal(ir::Shape(ir::DType::kF32, {n})), p.mutable_value());
    ASSERT_OK(peer_->CallStatus(put));
  }
  cluster::ClientMessage await;
  await.mutable_host()->set_host(h.value());
  await.mutable_host()->mutable_await_shard()->set_array(Id(11).value());
  EXPECT_THAT(peer_->CallStatus(await),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of memory")));
  await.mutable_host()->mutable_await_shard()->set_array(Id(0).value());
  EXPECT_OK(peer_->CallStatus(await));
}

// A raw put of one shard larger than the whole device (by 4 bytes) is
// refused by the put itself, not by the first read of an array that never
// becomes ready.
TEST_F(AdversarialTest, APutLargerThanTheWholeDeviceIsRefusedAtThePut) {
  const Mesh mesh = OneDeviceMesh(0);
  const HostId h = HostOf(mesh.devices()[0]);
  cluster::ClientMessage put;
  put.mutable_host()->set_host(h.value());
  cluster::PutShard& p = *put.mutable_host()->mutable_put_shard();
  p.set_array(Id(1).value());
  p.set_owner(client_.value());
  wire::EncodeLiteral(ir::Literal(ir::Shape(ir::DType::kF32, {kDeviceMemory / 4 + 1})),
                      p.mutable_value());
  EXPECT_THAT(peer_->CallStatus(put),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("exceeds the whole memory of local device 0")));
  // Nothing of it stays: the same id is free, and a put that fits works.
  cluster::ClientMessage await;
  await.mutable_host()->set_host(h.value());
  await.mutable_host()->mutable_await_shard()->set_array(Id(1).value());
  EXPECT_THAT(peer_->CallStatus(await), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  p.clear_value();
  wire::EncodeLiteral(ir::Literal(ir::Shape(ir::DType::kF32, {kDeviceMemory / 4})),
                      p.mutable_value());
  EXPECT_OK(peer_->CallStatus(put));
  EXPECT_OK(peer_->CallStatus(await));
}

TEST_F(AdversarialTest, ShardListsAreBoundedAndChecked) {
  const Mesh mesh = OneDeviceMesh(0);
  const HostId h = HostOf(mesh.devices()[0]);
  cluster::ClientMessage put;
  put.mutable_host()->set_host(h.value());
  cluster::PutShard& p = *put.mutable_host()->mutable_put_shard();
  p.set_array(Id(3).value());
  p.set_owner(client_.value());
  wire::EncodeLiteral(ir::Literal::F32({2}, {1, 2}), p.mutable_value());
  ASSERT_OK(peer_->CallStatus(put));

  cluster::ClientMessage await;
  await.mutable_host()->set_host(h.value());
  cluster::ShardList& list = *await.mutable_host()->mutable_await_shards();
  list.set_array(Id(3).value());
  EXPECT_THAT(peer_->CallStatus(await),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 shards")));
  list.add_shards(-1);
  EXPECT_THAT(peer_->CallStatus(await),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard -1")));
  list.clear_shards();
  for (int i = 0; i <= grpc_transport::kMaxShardsPerList; ++i) list.add_shards(0);
  EXPECT_THAT(peer_->CallStatus(await),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("allowed")));
  // A shard the host does not hold fails the list; the one it holds answers.
  list.clear_shards();
  list.add_shards(0);
  list.add_shards(5);
  EXPECT_THAT(peer_->CallStatus(await), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  list.clear_shards();
  list.add_shards(0);
  EXPECT_OK(peer_->CallStatus(await));
  // Another client's array is refused before any host sees the list.
  list.set_array(Id(3).value() + (int64_t{1} << 40));
  EXPECT_THAT(peer_->CallStatus(await),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

TEST_F(AdversarialTest, ARunSpanningIslandsIsCheckedEverywhereBeforeAnyIslandGetsIt) {
  const Mesh mesh = OneDeviceMesh(0);
  const ProgramPlan plan = NegPlan(mesh, 2);
  ASSERT_OK(peer_->CallStatus(SchedulerRegister(plan, mesh.island())));
  cluster::ClientMessage m;
  wire::EncodeRun(Run(plan, 0, {Id(0)}, {Id(1)}), m.mutable_submit_run()->mutable_run());
  m.mutable_submit_run()->add_islands(mesh.island().value());
  m.mutable_submit_run()->add_islands(77);
  EXPECT_THAT(peer_->CallStatus(m), StatusIs(absl::StatusCode::kNotFound, HasSubstr("77")));
  m.mutable_submit_run()->set_islands(1, mesh.island().value());
  EXPECT_THAT(peer_->CallStatus(m), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
}

// A worker's hello (with the workers' token) is checked before it joins.
TEST_F(AdversarialTest, BadWorkerHellosAreRefused) {
  auto channel =
      grpc_transport::MakeChannel(cluster_->url().substr(7), grpc::InsecureChannelCredentials());
  auto stub = cluster::Coordinator::NewStub(channel);
  auto hello = [&](int64_t island, int64_t memory, const std::string& address) {
    grpc::ClientContext context;
    grpc_transport::AddCallMetadata(context, cluster_->worker_token());
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub->Join(&context);
    cluster::WorkerBatch batch;
    cluster::WorkerHello& h = *batch.add_messages()->mutable_hello();
    h.set_island(island);
    h.set_devices(1);
    h.set_memory_bytes(memory);
    h.set_data_address(address);
    stream->Write(batch);
    stream->WritesDone();
    cluster::ToWorkerBatch reply;
    while (stream->Read(&reply)) {
    }
    return grpc_transport::FromGrpc(stream->Finish());
  };
  EXPECT_THAT(hello(0, 1 << 20, "127.0.0.1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port")));
  EXPECT_THAT(hello(0, 1 << 20, "127.0.0.1:99999"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(hello(int64_t{1} << 62, 1 << 20, "127.0.0.1:5000"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("island")));
  EXPECT_THAT(hello(0, int64_t{1} << 62, "127.0.0.1:5000"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes")));
  EXPECT_EQ(conn_->resources()->GetTopology().num_devices(), 2);
}

// Reaps what exits within `timeout`; the descriptions, joined.
std::string ReapWithin(ProcessCluster& cluster, int expected, absl::Duration timeout) {
  std::string all;
  int seen = 0;
  const absl::Time deadline = absl::Now() + timeout;
  while (seen < expected && absl::Now() < deadline) {
    const std::string exited = cluster.ReapExited();
    if (exited.empty()) {
      absl::SleepFor(absl::Milliseconds(20));
      continue;
    }
    absl::StrAppend(&all, all.empty() ? "" : "; ", exited);
    seen = static_cast<int>(std::count(all.begin(), all.end(), '(')) ;
  }
  return all;
}

// SIGTERM on a worker with launches queued: the one running finishes, the
// queued ones fail at once instead of running first, and the worker exits
// long before the queue would have run (four runs of 3 s: 12 s).
TEST(SignalTest, SigtermOnAWorkerWithQueuedWorkFailsTheQueueAndExitsPromptly) {
  ProcessClusterOptions o = ProcessShape(1, 1, 1);
  o.binary = CausewayBinary();
  ASSERT_OK_AND_ASSIGN(auto cluster, ProcessCluster::Start(o));
  auto conn = ConnectRemote(*cluster);
  auto client = Connect(conn.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  ir::FunctionBuilder b("slow");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {2}));
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.Delay(x, 3'000'000)}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction slow, client->Compile(f, mesh, {}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({2}, {1, 2}), mesh,
                                             Sharding::Replicated(1)));
  std::vector<Array> outs;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(slow, {in}));
    outs.push_back(out[0]);
  }
  ASSERT_OK(AwaitOrHang(client->Flush()).status());
  const pid_t worker = cluster->worker_pid(0);
  const absl::Time signalled = absl::Now();
  ASSERT_EQ(kill(worker, SIGTERM), 0);
  EXPECT_THAT(ReapWithin(*cluster, 1, absl::Seconds(30)),
              HasSubstr("worker 0 (pid " + std::to_string(worker) + ") exited with status 0"));
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(8));
  EXPECT_FALSE(AwaitOrHang(outs.back().Fetch()).ok());
}

// SIGTERM shuts a worker or the coordinator down cleanly (exit 0, not
// death by the signal, whichever thread the kernel hands it to); a worker
// whose coordinator is gone says so and exits 1.
TEST(SignalTest, SigtermExitsCleanlyAndAWorkerThatLosesItsCoordinatorExitsOne) {
  ProcessClusterOptions o = ProcessShape(1, 2, 1);
  o.binary = CausewayBinary();
  ASSERT_OK_AND_ASSIGN(auto cluster, ProcessCluster::Start(o));
  const pid_t worker = cluster->worker_pid(0);
  ASSERT_EQ(kill(worker, SIGTERM), 0);
  EXPECT_THAT(ReapWithin(*cluster, 1, absl::Seconds(20)),
              HasSubstr("worker 0 (pid " + std::to_string(worker) + ") exited with status 0"));
  const pid_t coordinator = cluster->pids()[0];
  ASSERT_EQ(kill(coordinator, SIGTERM), 0);
  const std::string exited = ReapWithin(*cluster, 2, absl::Seconds(20));
  EXPECT_THAT(exited, HasSubstr("coordinator (pid " + std::to_string(coordinator) +
                                ") exited with status 0"));
  EXPECT_THAT(exited, ::testing::ContainsRegex("worker 1 \\(pid [0-9]+\\) exited with status 1"));
}

// Connections that never authenticate (no call, or not even a handshake)
// are closed by the server: one that sends nothing after the handshake
// timeout (well before the idle timeout, set long here to tell the two
// apart), one that never makes a call after the idle timeout.
TEST(ConnectionTest, ConnectionsThatNeverAuthenticateAreClosed) {
  CoordinatorOptions o;
  o.token = "client-token";
  o.worker_token = "worker-token";
  o.limits.handshake_timeout = absl::Milliseconds(300);
  o.limits.idle_timeout = absl::Minutes(10);
  ASSERT_OK_AND_ASSIGN(auto server, CoordinatorServer::Start(o));
  ASSERT_OK_AND_ASSIGN(auto address, grpc_transport::SplitHostPort(server->address()));
  // TCP connections that send nothing.
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(address.second));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    timeval wait{30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    silent.push_back(fd);
  }
  // Meanwhile a client that speaks is served.
  auto talker = grpc_transport::MakeChannel(server->address(), grpc::InsecureChannelCredentials());
  EXPECT_TRUE(talker->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  const absl::Time start = absl::Now();
  for (const int fd : silent) {
    char buffer[256];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    }
    EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "recv: " << n << " errno " << errno;
    close(fd);
  }
  // By the handshake timeout (300 ms), not the idle one (10 min).
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(talker->GetState(false), GRPC_CHANNEL_READY);
}

TEST(ConnectionTest, AConnectionThatNeverCallsIsClosedAfterTheIdleTimeout) {
  CoordinatorOptions o;
  o.token = "client-token";
  o.worker_token = "worker-token";
  o.limits.idle_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(auto server, CoordinatorServer::Start(o));
  auto channel = grpc_transport::MakeChannel(server->address(), grpc::InsecureChannelCredentials());
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  EXPECT_TRUE(channel->WaitForStateChange(GRPC_CHANNEL_READY,
                                          std::chrono::system_clock::now() + std::chrono::seconds(20)));
  EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY);
}

// A TCP connection to 127.0.0.1:`port` from the loopback address `from`
// (any 127.x.y.z is this machine); -1 if it cannot be made.
int ConnectFrom(const char* from, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, from, &local.sin_addr);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The coordinator's metrics (Prometheus text) over plain HTTP; empty if it
// does not answer within 10 s.
std::string Scrape(const std::string& address) {
  absl::StatusOr<std::pair<std::string, int>> hp = grpc_transport::SplitHostPort(address);
  if (!hp.ok()) return "";
  const int fd = ConnectFrom("127.0.0.1", hp->second);
  if (fd < 0) return "";
  timeval wait{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) text.append(buffer, static_cast<size_t>(n));
  close(fd);
  return text;
}

// The value of metric sample `name` (with its labels, as printed); -1 if absent.
double Metric(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + key.size(), nullptr);
}

// Connections the coordinator closed on arrival, by reason ("peer_limit",
// "no_file_descriptors"), waiting until `accepted + refused` reaches
// `arrived` or 20 s pass.
double RefusedOnceSettled(const std::string& metrics, const std::string& reason, double arrived) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (;;) {
    const std::string text = Scrape(metrics);
    const double accepted = Metric(text, "causeway_tcp_connections_accepted_total");
    const double refused =
        Metric(text, "causeway_tcp_connections_refused_total{reason=\"" + reason + "\"}");
    if ((accepted >= 0 && refused >= 0 && accepted + refused >= arrived) ||
        absl::Now() > deadline) {
      return refused;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// A coordinator (with `o`'s limits and these tokens) and one worker of one
// device, in this process.
struct InProcessCluster {
  std::unique_ptr<CoordinatorServer> coordinator;
  std::unique_ptr<WorkerServer> worker;
};
InProcessCluster StartInProcess(CoordinatorOptions o) {
  o.token = "client-token";
  o.worker_token = "worker-token";
  InProcessCluster c;
  auto coordinator = CoordinatorServer::Start(o);
  CW_CHECK_OK(coordinator.status());
  c.coordinator = std::move(*coordinator);
  WorkerServerOptions w;
  w.coordinator = c.coordinator->address();
  w.token = o.worker_token;
  w.devices = 1;
  w.memory_bytes = int64_t{16} << 20;
  w.listen = "127.0.0.1:0";
  w.advertise = "127.0.0.1";
  auto worker = WorkerServer::Start(w);
  CW_CHECK_OK(worker.status());
  c.worker = std::move(*worker);
  return c;
}

// A client that stops reading its replies while asking for more is cut off
// once they pass the coordinator's bound on unread bytes (rather than held
// in the coordinator's memory without end); other clients are served.
TEST(BacklogTest, AClientThatStopsReadingIsCutOffAtItsBound) {
  CoordinatorOptions o;
  o.max_unread_client_bytes = size_t{8} << 20;
  o.metrics_listen = "127.0.0.1:0";
  InProcessCluster cluster = StartInProcess(o);
  CoordinatorServer* coordinator = cluster.coordinator.get();
  WorkerServer* worker = cluster.worker.get();
  const std::string url = "grpc://" + coordinator->address();
  Peer peer(url, "client-token");
  const ClientId client = peer.RegisterClient();
  const ArrayId array(ClientIdBase(client) + 1);
  cluster::ClientMessage put;
  put.mutable_host()->set_host(worker->host().value());
  cluster::PutShard& p = *put.mutable_host()->mutable_put_shard();
  p.set_array(array.value());
  p.set_owner(client.value());
  wire::EncodeLiteral(ir::Literal(ir::Shape(ir::DType::kF32, {(1 << 20) / 4})), p.mutable_value());
  ASSERT_OK(peer.CallStatus(put));
  // 64 MiB of replies asked for, none read: the coordinator ends the
  // connection (its metrics count it gone).
  peer.Pause(true);
  cluster::ClientMessage fetch;
  fetch.mutable_host()->set_host(worker->host().value());
  fetch.mutable_host()->mutable_fetch_shard()->set_array(array.value());
  for (uint64_t id = 1000; id < 1064; ++id) {
    fetch.set_id(id);
    if (!peer.TrySend(fetch)) break;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  double connections = -1;
  while (absl::Now() < deadline) {
    connections = Metric(Scrape(coordinator->metrics_address()), "causeway_client_connections");
    if (connections == 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(connections, 0) << "a client not reading its replies was never cut off";
  peer.Pause(false);
  // Another client is served.
  RemoteClusterOptions ro;
  ro.address = url;
  ro.token = "client-token";
  ASSERT_OK_AND_ASSIGN(auto remote, RemoteCluster::Connect(ro));
  auto honest = Connect(remote.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, honest->AllocateMesh({{"x", 1}}));
  ASSERT_OK_AND_ASSIGN(Array in, honest->Put(ir::Literal::F32({2}, {1, 2}), mesh, Sharding::Replicated(1)));
  ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(in.Fetch()));
  EXPECT_EQ(v.values<float>(), (std::vector<float>{1, 2}));
}

// Sum of every sample of metric `name` whose labels include `label`.
double SumOf(const std::string& text, const std::string& name, const std::string& label) {
  double total = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name + "{") || !absl::StrContains(line, label)) continue;
    const size_t space = line.rfind(' ');
    total += std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
  }
  return total;
}

// The metrics name each client's device memory and arrays; a client cannot
// read that view of other clients through a host call of its own.
// Whether the other end closes `fd` within 10 s (reads EOF or a reset).
bool ClosedByPeer(int fd) {
  timeval wait{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  char byte;
  const ssize_t n = recv(fd, &byte, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Peers that send their requests a little at a time hold only their own
// connections: scrapes are served meanwhile, each peer holds at most its
// share of connections, and slow requests are closed at the deadline.
TEST(MetricsTest, SlowRequestsDoNotStarveScrapes) {
  CoordinatorOptions o;
  o.metrics_listen = "127.0.0.1:0";
  InProcessCluster cluster = StartInProcess(o);
  const std::string address = cluster.coordinator->metrics_address();
  ASSERT_OK_AND_ASSIGN(auto hp, grpc_transport::SplitHostPort(address));
  // Eight peers, each with the 4 connections it may hold, each with part of
  // a request sent.
  std::vector<int> slow;
  for (int p = 2; p < 10; ++p) {
    const std::string from = absl::StrCat("127.0.0.", p);
    for (int k = 0; k < 4; ++k) {
      const int fd = ConnectFrom(from.c_str(), hp.second);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(write(fd, "GET /met", 8), 8);
      slow.push_back(fd);
    }
  }
  const absl::Time start = absl::Now();
  EXPECT_THAT(Scrape(address), HasSubstr("causeway_devices"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // A fifth connection of one peer is closed on arrival.
  const int extra = ConnectFrom("127.0.0.2", hp.second);
  ASSERT_GE(extra, 0);
  EXPECT_TRUE(ClosedByPeer(extra));
  close(extra);
  // The slow requests end at their deadline (2 s), unanswered.
  for (int fd : slow) {
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  EXPECT_GE(absl::Now() - start, absl::Seconds(1));
  // Other paths and methods are answered, not served the metrics.
  const int fd = ConnectFrom("127.0.0.1", hp.second);
  ASSERT_GE(fd, 0);
  const std::string request = "POST /metrics HTTP/1.1\r\n\r\n";
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  char reply[64] = {};
  ASSERT_GT(recv(fd, reply, sizeof(reply) - 1, MSG_WAITALL), 0);
  EXPECT_THAT(std::string(reply), HasSubstr("405"));
  close(fd);
}

TEST(MetricsTest, EachClientsMemoryAndArraysAreMeteredAndOnlyTheCoordinatorReadsThem) {
  CoordinatorOptions o;
  o.metrics_listen = "127.0.0.1:0";
  InProcessCluster cluster = StartInProcess(o);
  const std::string url = "grpc://" + cluster.coordinator->address();
  RemoteClusterOptions ro;
  ro.address = url;
  ro.token = "client-token";
  ASSERT_OK_AND_ASSIGN(auto remote, RemoteCluster::Connect(ro));
  auto client = Connect(remote.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  std::vector<Array> held;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(Array a, client->Put(ir::Literal(ir::Shape(ir::DType::kF32, {1 << 18})),
                                              mesh, Sharding::Replicated(1)));
    ASSERT_OK(AwaitOrHang(a.Fetch()).status());
    held.push_back(std::move(a));
  }
  const std::string who = absl::StrCat("client=\"", client->id().value(), "\"");
  std::string text = Scrape(cluster.coordinator->metrics_address());
  EXPECT_EQ(SumOf(text, "causeway_client_arrays", who), 3) << text;
  EXPECT_EQ(SumOf(text, "causeway_client_memory_bytes", who), 3 << 20) << text;
  EXPECT_EQ(SumOf(text, "causeway_client_memory_waiting_bytes", who), 0) << text;

  // Released, they leave the metrics (the release reaches the host
  // asynchronously: read until it has, for at most 20 s).
  held.clear();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (SumOf(text, "causeway_client_arrays", who) != 0 && absl::Now() < deadline) {
    text = Scrape(cluster.coordinator->metrics_address());
  }
  EXPECT_EQ(SumOf(text, "causeway_client_arrays", who), 0) << text;
  EXPECT_EQ(SumOf(text, "causeway_client_memory_bytes", who), 0) << text;

  Peer peer(url, "client-token");
  peer.RegisterClient();
  cluster::ClientMessage ask;
  ask.mutable_host()->set_host(cluster.worker->host().value());
  ask.mutable_host()->set_get_counters(false);
  ASSERT_OK(peer.CallStatus(ask));
  ask.mutable_host()->set_by_client(true);
  EXPECT_THAT(peer.CallStatus(ask),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("per-client")));
}

// `runs` all-reduces of one device, each awaited.
void RunAllReduces(Client& client, int runs) {
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client.AllocateMesh({{"x", 1}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client.Compile(AllReduceSum(2, {"x"}), mesh,
                                                          {{Sharding({{"x"}})}, {Sharding({{"x"}})}}));
  ASSERT_OK_AND_ASSIGN(Array in, client.Put(ir::Literal::F32({2}, {1, 2}), mesh,
                                            Sharding({{"x"}})));
  for (int i = 0; i < runs; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client.Call(f, {in}));
    ASSERT_OK(AwaitOrHang(out[0].Fetch()).status());
  }
}

// Each connection collects its own runs' events only, from the hosts and
// the scheduler; hosts' traces cannot be read by a client's own host call.
TEST(TraceTest, AConnectionCollectsItsOwnRunsEventsOnly) {
  InProcessCluster cluster = StartInProcess(CoordinatorOptions{});
  const std::string url = "grpc://" + cluster.coordinator->address();
  RemoteClusterOptions ro;
  ro.address = url;
  ro.token = "client-token";
  std::vector<std::unique_ptr<RemoteCluster>> remotes;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(auto remote, RemoteCluster::Connect(ro));
    ASSERT_OK(remote->StartTrace());
    clients.push_back(Connect(remote.get()));
    remotes.push_back(std::move(remote));
  }
  for (auto& client : clients) RunAllReduces(*client, 3);
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(remotes[i]->CollectTrace());
    std::map<TraceKind, int> kinds;
    for (const TraceEvent& e : remotes[i]->trace().Events()) {
      EXPECT_EQ(OwnerOfId(e.run.value()), clients[i]->id()) << TraceKindName(e.kind);
      ++kinds[e.kind];
    }
    EXPECT_GE(kinds[TraceKind::kSubmit], 3) << "connection " << i;
    EXPECT_GE(kinds[TraceKind::kForward], 3) << "connection " << i;
    EXPECT_GE(kinds[TraceKind::kRun], 3) << "connection " << i;
  }
  ASSERT_OK(remotes[0]->StopTrace());
  Peer peer(url, "client-token");
  peer.RegisterClient();
  cluster::ClientMessage ask;
  ask.mutable_host()->set_host(cluster.worker->host().value());
  ask.mutable_host()->mutable_trace()->set_collect(true);
  EXPECT_THAT(peer.CallStatus(ask),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("through the coordinator")));
}

// Hosts record only the runs of the connections tracing: another tenant's
// runs neither fill their buffers nor reach a connection that starts
// tracing later.
TEST(TraceTest, OnlyTheTracingConnectionsRunsAreRecorded) {
  InProcessCluster cluster = StartInProcess(CoordinatorOptions{});
  RemoteClusterOptions ro;
  ro.address = "grpc://" + cluster.coordinator->address();
  ro.token = "client-token";
  ASSERT_OK_AND_ASSIGN(auto tracing, RemoteCluster::Connect(ro));
  ASSERT_OK_AND_ASSIGN(auto other, RemoteCluster::Connect(ro));
  ASSERT_OK(tracing->StartTrace());
  auto traced_client = Connect(tracing.get());  // registered after the start: recorded too
  auto other_client = Connect(other.get());
  RunAllReduces(*other_client, 3);
  RunAllReduces(*traced_client, 2);
  // The other connection starts tracing only now: nothing of its earlier
  // runs was kept for it.
  ASSERT_OK(other->StartTrace());
  ASSERT_OK(other->CollectTrace());
  EXPECT_TRUE(other->trace().Events().empty()) << other->trace().Events().size();
  RunAllReduces(*other_client, 1);
  ASSERT_OK(other->CollectTrace());
  int other_runs = 0;
  for (const TraceEvent& e : other->trace().Events()) {
    EXPECT_EQ(OwnerOfId(e.run.value()), other_client->id());
    other_runs += e.kind == TraceKind::kRun;
  }
  EXPECT_EQ(other_runs, 1);
  ASSERT_OK(tracing->CollectTrace());
  int traced_runs = 0;
  for (const TraceEvent& e : tracing->trace().Events()) {
    EXPECT_EQ(OwnerOfId(e.run.value()), traced_client->id());
    traced_runs += e.kind == TraceKind::kRun;
  }
  EXPECT_EQ(traced_runs, 2);
}

// A connection registers at most its bound of programs with hosts (and,
// likewise, with schedulers); past it registration is refused, naming the
// bound, and nothing more is forwarded.
TEST(BacklogTest, AConnectionRegistersAtMostItsBoundOfPrograms) {
  CoordinatorOptions o;
  o.max_programs_per_connection = 2;
  InProcessCluster cluster = StartInProcess(o);
  WorkerServer* worker = cluster.worker.get();
  Peer peer("grpc://" + cluster.coordinator->address(), "client-token");
  const ClientId client = peer.RegisterClient();
  // The plans need not be valid: the coordinator counts before the worker
  // decodes (and refuses) them.
  for (int k = 1; k <= 3; ++k) {
    ProgramPlan plan;
    plan.id = ProgramId(ClientIdBase(client) + k);
    plan.client = client;
    plan.name = "p";
    cluster::ClientMessage m;
    m.mutable_host()->set_host(worker->host().value());
    wire::EncodePlan(plan, m.mutable_host()->mutable_register_program());
    const absl::Status status = peer.CallStatus(m);
    if (k <= 2) {
      EXPECT_NE(status.code(), absl::StatusCode::kResourceExhausted) << status;
    } else {
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted,
                                   HasSubstr("2 programs registered with hosts (at most 2)")));
    }
  }
}

// One peer address holds at most 256 connections at once: the rest are
// closed on arrival, and the cluster still serves other peers.
TEST(ConnectionTest, OnePeerCannotHoldMoreThanItsShareOfConnections) {
  ProcessClusterOptions o = ProcessShape(1, 2, 1);
  o.metrics_port = 0;
  auto cluster = StartProcesses(o);
  ASSERT_OK_AND_ASSIGN(auto address, grpc_transport::SplitHostPort(cluster->url().substr(7)));
  const double before =
      Metric(Scrape(cluster->metrics_address()), "causeway_tcp_connections_accepted_total");
  ASSERT_GE(before, 0);
  std::vector<int> held;
  for (int i = 0; i < 300; ++i) {
    const int fd = ConnectFrom("127.0.0.9", address.second);
    ASSERT_GE(fd, 0) << "connect " << i << ": errno " << errno;
    held.push_back(fd);
  }
  // 300 arrived from 127.0.0.9 (+ the scrapes from 127.0.0.1, accepted).
  EXPECT_EQ(RefusedOnceSettled(cluster->metrics_address(), "peer_limit", before + 300), 44);
  AllReduceWorks(ConnectRemote(*cluster).get());
  for (int fd : held) close(fd);
  EXPECT_EQ(cluster->ReapExited(), "");
}

// Out of file descriptors, the coordinator sheds new connections instead of
// closing its listener for good (gRPC's own listener stops accepting after
// its first EMFILE): once the flood's connections close, it serves again.
TEST(ConnectionTest, RunningOutOfFileDescriptorsDoesNotStopTheListener) {
  ProcessClusterOptions o = ProcessShape(1, 2, 1);
  o.metrics_port = 0;
  o.max_open_files = 256;
  auto cluster = StartProcesses(o);
  ASSERT_OK_AND_ASSIGN(auto address, grpc_transport::SplitHostPort(cluster->url().substr(7)));
  // 600 connections from 20 addresses (30 each, within the per-peer bound):
  // more than the coordinator has descriptors for.
  std::vector<int> held;
  for (int i = 0; i < 600; ++i) {
    const std::string from = absl::StrCat("127.0.1.", 1 + i % 20);
    const int fd = ConnectFrom(from.c_str(), address.second);
    if (fd >= 0) held.push_back(fd);
  }
  // The shed ones see their connection closed; wait until some did.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  int closed = 0;
  while (closed == 0 && absl::Now() < deadline) {
    std::vector<pollfd> fds;
    for (int fd : held) fds.push_back({fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 100);
    for (const pollfd& p : fds) {
      char byte;
      if ((p.revents & (POLLIN | POLLHUP)) != 0 && recv(p.fd, &byte, 1, MSG_PEEK) == 0) ++closed;
    }
  }
  EXPECT_GT(closed, 0) << "no connection was shed";
  // A peer that reconnects at once, for 1 s, while the coordinator is out of
  // descriptors: the listener sheds with a back-off, not at the peer's rate
  // (it once spun a core, shedding millions).
  int64_t attempts = 0;
  const absl::Time flood_end = absl::Now() + absl::Seconds(1);
  while (absl::Now() < flood_end) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(address.second));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    close(fd);
    ++attempts;
  }
  for (int fd : held) close(fd);
  // The idle connections it did take close with their sockets; new clients
  // are served.
  AllReduceWorks(ConnectRemote(*cluster).get());
  const std::string text = Scrape(cluster->metrics_address());
  const double shed =
      Metric(text, "causeway_tcp_connections_refused_total{reason=\"no_file_descriptors\"}");
  EXPECT_GT(shed, 0) << text;
  // At most the 600 held and what the back-off lets through in the flood.
  EXPECT_LT(shed, 1000) << attempts << " connection attempts in the flood";
  RecordProperty("flood_attempts", std::to_string(attempts));
  RecordProperty("shed", std::to_string(shed));
  EXPECT_EQ(cluster->ReapExited(), "");
}

// A peer that sends chunks of payloads it never finishes holds at most the
// data plane's reassembly bounds of the worker's memory (here a device of
// 16 MiB: payloads of at most 16 MiB, 64 MiB held in all): a payload
// declared larger than a device is dropped at its first chunk, and
// partial payloads past the bound, from one stream or several, are dropped
// rather than held. What a stream held is released when it ends, and a
// whole payload in several chunks still arrives.
TEST(DataPlaneTest, PartialPayloadsAreBoundedPerPeerAndPerHost) {
  InProcessCluster cluster = StartInProcess(CoordinatorOptions{});
  auto channel = grpc_transport::MakeChannel(
      absl::StrCat("127.0.0.1:", cluster.worker->data_port()), grpc::InsecureChannelCredentials());
  auto stub = cluster::Data::NewStub(channel);
  const std::string chunk(size_t{1} << 20, 'x');
  auto piece = [&](int id, int64_t total, int64_t offset) {
    cluster::DataBatch batch;
    cluster::PieceChunk& c = *batch.add_messages()->mutable_piece();
    c.set_run(1 << 30);  // a run this worker never gets
    c.set_piece(id);
    c.set_total_bytes(total);
    c.set_offset(offset);
    c.set_data(chunk);
    return batch;
  };
  struct Stream {
    grpc::ClientContext context;
    cluster::DataAck ack;
    std::unique_ptr<grpc::ClientWriter<cluster::DataBatch>> writer;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 2; ++i) {
    auto st = std::make_unique<Stream>();
    grpc_transport::AddCallMetadata(st->context, "worker-token");
    st->writer = stub->Push(&st->context, &st->ack);
    streams.push_back(std::move(st));
  }
  // 700 MiB of a never-finished 4 GiB payload: dropped chunk by chunk.
  for (int i = 0; i < 700; ++i) {
    ASSERT_TRUE(streams[0]->writer->Write(piece(0, int64_t{4} << 30, int64_t{i} << 20)));
  }
  // 2 x 100 payloads of 16 MiB, each sent its first 1 MiB.
  for (int id = 1; id <= 100; ++id) {
    for (auto& st : streams) ASSERT_TRUE(st->writer->Write(piece(id, int64_t{16} << 20, 0)));
  }
  // Every chunk is either held or dropped once the server has read it.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ReassemblyStats during = cluster.worker->reassembly_stats();
  while ((during.held_bytes >> 20) + during.dropped_chunks < 900 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    during = cluster.worker->reassembly_stats();
  }
  EXPECT_EQ(during.held_bytes, int64_t{64} << 20);
  EXPECT_EQ(during.dropped_chunks, 700 + 200 - 64);
  for (auto& st : streams) {
    ASSERT_TRUE(st->writer->WritesDone());
    EXPECT_TRUE(st->writer->Finish().ok());
  }
  const ReassemblyStats after = cluster.worker->reassembly_stats();
  EXPECT_EQ(after.held_bytes, 0);  // released as the streams ended
  EXPECT_EQ(after.peak_bytes, int64_t{64} << 20);
  EXPECT_EQ(after.dropped_chunks, during.dropped_chunks);
  // A whole payload of three chunks, with the bound free again: held while
  // it arrives, then delivered (as an early piece), dropping nothing.
  Stream last;
  grpc_transport::AddCallMetadata(last.context, "worker-token");
  last.writer = stub->Push(&last.context, &last.ack);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(last.writer->Write(piece(7, int64_t{3} << 20, int64_t{i} << 20)));
  }
  ASSERT_TRUE(last.writer->WritesDone());
  EXPECT_TRUE(last.writer->Finish().ok());
  const ReassemblyStats whole = cluster.worker->reassembly_stats();
  EXPECT_EQ(whole.held_bytes, 0);
  EXPECT_EQ(whole.dropped_chunks, after.dropped_chunks);
}

}  // namespace
}  // namespace causeway::testing
