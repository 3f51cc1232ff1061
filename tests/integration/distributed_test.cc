// What only a distributed cluster of real processes can show: tokens and
// TLS on every connection, a client naming only its own arrays, a worker
// killed (or hung) in the middle of a run — its dependents fail with
// UNAVAILABLE naming it, the others keep going, and a restarted worker
// rejoins — and no process or port outliving the cluster.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "gmock/gmock.h"
#include "tests/integration/cluster_kinds.h"
#include "causeway/base/status_macros.h"
#include "causeway/cluster/worker_server.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/grpc_common.h"

namespace causeway::testing {
namespace {

using ir::DType;
using ir::FunctionBuilder;
using ir::Literal;
using ir::Shape;
using ir::Value;
using ::testing::HasSubstr;

const Sharding kSplit(std::vector<std::vector<std::string>>{{"x", "y"}});

std::string TestData(const std::string& name) {
  return std::string(CAUSEWAY_SOURCE_DIR) + "/tests/testdata/tls/" + name;
}

// The devices of `hosts`, in host order.
std::vector<DeviceId> DevicesOf(const Topology& t, std::vector<HostId> hosts) {
  std::vector<DeviceId> out;
  for (HostId h : hosts) {
    absl::StatusOr<HostInfo> info = t.host(h);
    CW_CHECK_OK(info.status());
    out.insert(out.end(), info->devices.begin(), info->devices.end());
  }
  return out;
}

absl::StatusOr<Mesh> MeshOn(Client& client, const Topology& t, std::vector<HostId> hosts) {
  MeshRequest r;
  r.devices = DevicesOf(t, hosts);
  r.axes = {{"x", static_cast<int64_t>(hosts.size())},
            {"y", static_cast<int64_t>(r.devices.size() / hosts.size())}};
  r.island = t.host(hosts[0])->island;
  return client.AllocateMesh(r);
}

// Nothing listens on port 1: the client fails at once, naming the address,
// rather than retrying for its whole timeout (30 s here). "At once" is a
// bound well under that timeout, not a latency figure: a channel's first
// connection attempt alone took 1.15 s under ThreadSanitizer on a loaded
// 2-core machine.
TEST(DistributedTest, ARefusedConnectionFailsAtOnceNamingTheAddress) {
  RemoteClusterOptions ro;
  ro.address = "grpc://127.0.0.1:1";
  ro.token = "t";
  ro.timeout = absl::Seconds(30);
  const absl::Time start = absl::Now();
  auto refused = RemoteCluster::Connect(ro);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("127.0.0.1:1"));
  EXPECT_LT(took, absl::Seconds(5)) << refused.status();
}

TEST(DistributedTest, ConnectionsWithoutTheTokenAreRefused) {
  ProcessClusterOptions o = ProcessShape(1, 1, 1);
  auto cluster = StartProcesses(o);
  RemoteClusterOptions ro;
  ro.address = cluster->url();
  ro.token = "not-the-token";
  ro.timeout = absl::Seconds(5);
  auto bad = RemoteCluster::Connect(ro);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnauthenticated) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("token"));
  // A worker with the wrong token cannot join either.
  WorkerServerOptions wo;
  wo.coordinator = cluster->url().substr(7);
  wo.token = "not-the-token";
  wo.devices = 1;
  wo.listen = "127.0.0.1:0";
  auto worker = WorkerServer::Start(wo);
  EXPECT_EQ(worker.status().code(), absl::StatusCode::kUnauthenticated) << worker.status();
  // Nor with the clients' token: workers have a credential of their own.
  wo.token = cluster->token();
  worker = WorkerServer::Start(wo);
  EXPECT_EQ(worker.status().code(), absl::StatusCode::kUnauthenticated) << worker.status();
  // With it, a client gets in and sees one device.
  ro.token = cluster->token();
  ASSERT_OK_AND_ASSIGN(auto good, RemoteCluster::Connect(ro));
  EXPECT_EQ(good->resources()->GetTopology().num_devices(), 1);
  // With the workers' token one joins; its data plane refuses a push that
  // carries the clients' token.
  wo.token = cluster->worker_token();
  ASSERT_OK_AND_ASSIGN(auto joined, WorkerServer::Start(wo));
  {
    auto stub = cluster::Data::NewStub(grpc_transport::MakeChannel(
        absl::StrCat("127.0.0.1:", joined->data_port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    grpc_transport::AddCallMetadata(context, cluster->token());
    cluster::DataAck ack;
    auto push = stub->Push(&context, &ack);
    cluster::DataBatch batch;
    batch.add_messages()->mutable_abort()->set_run(1);
    push->Write(batch);
    push->WritesDone();
    EXPECT_EQ(push->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  joined->Shutdown();
}

TEST(DistributedTest, AClientNamesOnlyItsOwnArrays) {
  ProcessClusterOptions o = ProcessShape(1, 2, 1);
  auto cluster = StartProcesses(o);
  auto a_conn = ConnectRemote(*cluster);
  auto b_conn = ConnectRemote(*cluster);
  auto a = Connect(a_conn.get());
  auto b = Connect(b_conn.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, a->AllocateMesh({{"x", 2}}));
  ASSERT_OK_AND_ASSIGN(Array x, a->Put(Literal::F32({2}, {1, 2}), mesh, Sharding({{"x"}})));
  ASSERT_OK(AwaitOrHang(x.Ready()).status());
  // B's connection asks the host for A's shard, and to release it.
  const HostId h = a_conn->resources()->GetTopology().device(mesh.devices()[0])->host;
  HostService* host = b_conn->host(h);
  ASSERT_NE(host, nullptr);
  absl::StatusOr<Literal> stolen = AwaitOrHang(host->FetchShard(x.id(), 0));
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied) << stolen.status();
  EXPECT_THAT(stolen.status().message(), HasSubstr(a->id().ToString()));
  host->ReleaseArrays({x.id()});
  host->ReleaseOwner(a->id());
  // Nor through A's island scheduler: a release of A's array, dropping A's
  // queued runs, or setting A's share.
  b_conn->ReleaseArrays(a->id(), {h}, {x.id()});
  b_conn->DropClient(a->id());
  EXPECT_THAT(b_conn->SetClientShare(a->id(), ClientShare{100, 7}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("not a client")));
  // A's array is untouched, and A's runs still go.
  ASSERT_OK_AND_ASSIGN(Literal mine, AwaitOrHang(x.Fetch()));
  EXPECT_EQ(mine.values<float>(), (std::vector<float>{1, 2}));
  FunctionBuilder fb("double");
  Value p = fb.Parameter(Shape(DType::kF32, {1}));
  ASSERT_OK_AND_ASSIGN(ir::Function twice, fb.Build({fb.Add(p, p)}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f,
                       a->Compile(twice, mesh, {{Sharding({{"x"}})}, {Sharding({{"x"}})}}));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> y, a->Call(f, {x}));
  ASSERT_OK_AND_ASSIGN(Literal doubled, AwaitOrHang(y[0].Fetch()));
  EXPECT_EQ(doubled.values<float>(), (std::vector<float>{2, 4}));
}

TEST(DistributedTest, TlsClusterServesClientsThatTrustItsCertificateOnly) {
  ProcessClusterOptions o = ProcessShape(1, 2, 1);
  o.tls_cert = TestData("server.pem");
  o.tls_key = TestData("server.key");
  o.tls_ca = TestData("ca.pem");
  auto cluster = StartProcesses(o);
  RemoteClusterOptions ro;
  ro.address = cluster->url();
  ro.token = cluster->token();
  ro.timeout = absl::Seconds(3);
  // Plaintext to a TLS server, and TLS trusting another CA: both refused.
  EXPECT_FALSE(RemoteCluster::Connect(ro).ok());
  ro.tls.ca = TestData("other_ca.pem");
  EXPECT_FALSE(RemoteCluster::Connect(ro).ok());
  ro.tls.ca = TestData("ca.pem");
  ro.timeout = absl::Seconds(30);
  ASSERT_OK_AND_ASSIGN(auto conn, RemoteCluster::Connect(ro));
  auto client = Connect(conn.get());
  // Data crosses the two workers (TLS data plane) in an all-reduce.
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 2}}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(AllReduceSum(2, {"x"}), mesh,
                                                           {{Sharding({{"x"}})},
                                                            {Sharding({{"x"}})}}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(Literal::F32({4}, {1, 2, 3, 4}), mesh,
                                             Sharding({{"x"}})));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {in}));
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(out[0].Fetch()));
  EXPECT_EQ(v.values<float>(), (std::vector<float>{4, 6, 4, 6}));
}

class WorkerFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessClusterOptions o = ProcessShape(1, 3, 2);
    o.heartbeat_timeout = TestHeartbeatTimeout();
    cluster_ = StartProcesses(o);
    conn_ = ConnectRemote(*cluster_);
    client_ = Connect(conn_.get());
    other_ = cluster_->worker_host(0);
    victim_ = cluster_->worker_host(1);
    survivor_ = cluster_->worker_host(2);
  }

  // f(x) = delay(all_reduce(x) over every device, micros).
  absl::StatusOr<CompiledFunction> Slow(const Mesh& mesh, int64_t micros) {
    FunctionBuilder b("slow_all_reduce");
    Value x = b.Parameter(Shape(DType::kF32, {2}));
    CW_ASSIGN_OR_RETURN(ir::Function f, b.Build({b.Delay(b.AllReduce(x, {"x", "y"}), micros)}));
    return client_->Compile(f, mesh, {{kSplit}, {kSplit}});
  }

  // Every result of a run on `mesh` from ones: all_reduce over its devices.
  void ExpectWorks(const Mesh& mesh) {
    ASSERT_OK_AND_ASSIGN(CompiledFunction f, Slow(mesh, 0));
    const int64_t n = 2 * mesh.size();
    ASSERT_OK_AND_ASSIGN(Array in, client_->Put(Literal::F32({n}, std::vector<float>(n, 1.0f)),
                                                mesh, kSplit));
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client_->Call(f, {in}));
    ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(out[0].Fetch()));
    EXPECT_EQ(v.values<float>(), std::vector<float>(n, static_cast<float>(mesh.size())));
  }

  std::unique_ptr<ProcessCluster> cluster_;
  std::unique_ptr<RemoteCluster> conn_;
  std::unique_ptr<Client> client_;
  HostId other_, victim_, survivor_;
};

TEST_F(WorkerFaultTest, KilledWorkerFailsItsDependentsFastSparesOthersAndRejoins) {
  const Topology t = conn_->resources()->GetTopology();
  ASSERT_EQ(t.num_devices(), 6);
  ASSERT_OK_AND_ASSIGN(Mesh shared, MeshOn(*client_, t, {other_, victim_}));
  ASSERT_OK_AND_ASSIGN(Mesh alone, MeshOn(*client_, t, {survivor_}));
  ExpectWorks(shared);

  // Two chained runs across the victim's and another host: the first is
  // running (a 1 s delay after its all-reduce) when the victim dies.
  ASSERT_OK_AND_ASSIGN(CompiledFunction slow, Slow(shared, 1'000'000));
  ASSERT_OK_AND_ASSIGN(Array in, client_->Put(Literal::F32({8}, std::vector<float>(8, 1.0f)),
                                              shared, kSplit));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> first, client_->Call(slow, {in}));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> second, client_->Call(slow, {first[0]}));
  ASSERT_OK(AwaitOrHang(client_->Flush()).status());
  const auto killed_at = std::chrono::steady_clock::now();
  cluster_->KillWorker(1);

  // The dependent result fails with UNAVAILABLE naming the victim, in time.
  absl::StatusOr<Literal> lost = AwaitOrHang(second[0].Fetch());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable) << lost.status();
  EXPECT_THAT(lost.status().message(), HasSubstr(victim_.ToString()));
  EXPECT_LT(seconds, 5.0) << lost.status();
  RecordProperty("seconds_from_kill_to_failure", std::to_string(seconds));
  absl::StatusOr<Literal> first_lost = AwaitOrHang(first[0].Fetch());
  EXPECT_EQ(first_lost.status().code(), absl::StatusCode::kUnavailable) << first_lost.status();

  // The coordinator dropped the host; the survivor keeps computing.
  ASSERT_OK(conn_->WaitForTopology(
      [&](const Topology& now) { return !now.host(victim_).ok(); }, absl::Seconds(5)));
  EXPECT_EQ(conn_->resources()->GetTopology().num_devices(), 4);
  ExpectWorks(alone);
  // A mesh allocated now avoids the lost host.
  ASSERT_OK_AND_ASSIGN(Mesh fresh, client_->AllocateMesh({{"x", 4}}));
  for (DeviceId d : fresh.devices()) {
    EXPECT_NE(conn_->resources()->GetTopology().device(d)->host, victim_);
  }
  ExpectWorks(*client_->AllocateMesh(MeshRequest{{{"x", 2}, {"y", 2}}, IslandId(),
                                                  fresh.devices()}));

  // The restarted worker rejoins as a new host and works with the others.
  ASSERT_OK(cluster_->RestartWorker(1));
  const HostId rejoined = cluster_->worker_host(1);
  EXPECT_NE(rejoined, victim_);
  ASSERT_OK(conn_->WaitForDevices(6, absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(Mesh again,
                       MeshOn(*client_, conn_->resources()->GetTopology(), {other_, rejoined}));
  ExpectWorks(again);
}

TEST(DistributedTest, AWorkerRefusesACollectivePathItCannotServeBeforeConnecting) {
  WorkerServerOptions wo;
  wo.coordinator = "127.0.0.1:1";  // never reached
  wo.devices = 1;
  wo.collectives = "carrier-pigeon";
  auto bad = WorkerServer::Start(wo);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("carrier-pigeon"));
  // Gloo's TCP carries neither TLS nor the token.
  wo.collectives = "gloo";
  wo.tls.ca = TestData("ca.pem");
  bad = WorkerServer::Start(wo);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr(HaveGloo() ? "TLS" : "no Gloo"));
}

// A worker's devices are of a kind this process has; any other is refused
// before it connects, naming the kinds there are.
TEST(DistributedTest, AWorkerRefusesADeviceKindItDoesNotHave) {
  WorkerServerOptions wo;
  wo.coordinator = "127.0.0.1:1";  // never reached
  wo.devices = 1;
  wo.device_kind = "abacus";
  auto bad = WorkerServer::Start(wo);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("\"abacus\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("cpu"));
  wo.device_kind = "";
  bad = WorkerServer::Start(wo);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
}

// Collectives between the processes on Gloo: a worker killed while its
// peers run a chain of large all-reduces with it (most of the chain's time
// inside Gloo's ring) fails the gang on the others with the lost worker as
// the cause, promptly; the survivors then meet in Gloo without it.
TEST(GlooFaultTest, AWorkerKilledDuringGlooAllReducesFailsItsGangNamingIt) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no Gloo";
  ProcessClusterOptions o = ProcessShape(1, 3, 1);
  o.heartbeat_timeout = TestHeartbeatTimeout();
  o.collectives = "gloo";
  o.gloo_from_bytes = 0;
  auto cluster = StartProcesses(o);
  auto conn = ConnectRemote(*cluster);
  auto client = Connect(conn.get());
  const Topology t = conn->resources()->GetTopology();
  const HostId victim = cluster->worker_host(1);
  ASSERT_OK_AND_ASSIGN(Mesh all, MeshOn(*client, t, {cluster->worker_host(0), victim,
                                                    cluster->worker_host(2)}));
  // 4 MiB per device, summed over the 3 processes, 16 times in a row.
  constexpr int64_t kPerDevice = int64_t{1} << 20;
  FunctionBuilder b("sum_again");
  Value x = b.Parameter(Shape(DType::kF32, {kPerDevice}));
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.AllReduce(x, {"x", "y"})}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction sum, client->Compile(f, all, {{kSplit}, {kSplit}}));
  ASSERT_OK_AND_ASSIGN(Array in, client->Put(Literal::F32({3 * kPerDevice},
                                                          std::vector<float>(3 * kPerDevice, 1)),
                                             all, kSplit));
  std::vector<Array> chain = {in};
  for (int i = 0; i < 16; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(sum, {chain.back()}));
    chain.push_back(out[0]);
  }
  ASSERT_OK(AwaitOrHang(chain[2].Ready()));
  // The sums met in Gloo: every worker connected the group of three.
  EXPECT_EQ(WorkerLogsWith(*cluster, "gloo: connected to hosts"), 3);
  const auto killed_at = std::chrono::steady_clock::now();
  cluster->KillWorker(1);
  absl::StatusOr<Literal> lost = AwaitOrHang(chain.back().Fetch());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable) << lost.status();
  EXPECT_THAT(lost.status().message(), HasSubstr(victim.ToString()));
  EXPECT_LT(seconds, 10.0) << lost.status();
  RecordProperty("seconds_from_kill_to_failure", std::to_string(seconds));
  RecordProperty("failure", lost.status().ToString());

  ASSERT_OK(conn->WaitForTopology([&](const Topology& now) { return !now.host(victim).ok(); },
                                  absl::Seconds(5)));
  ASSERT_OK_AND_ASSIGN(
      Mesh two, MeshOn(*client, conn->resources()->GetTopology(),
                       {cluster->worker_host(0), cluster->worker_host(2)}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction sum2, client->Compile(f, two, {{kSplit}, {kSplit}}));
  ASSERT_OK_AND_ASSIGN(Array in2, client->Put(Literal::F32({2 * kPerDevice},
                                                           std::vector<float>(2 * kPerDevice, 1)),
                                              two, kSplit));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out2, client->Call(sum2, {in2}));
  ASSERT_OK_AND_ASSIGN(Literal v, AwaitOrHang(out2[0].Fetch()));
  EXPECT_EQ(v.values<float>(), std::vector<float>(2 * kPerDevice, 2.0f));
}

TEST_F(WorkerFaultTest, HungWorkerIsDroppedAfterMissedHeartbeats) {
  const pid_t pid = cluster_->worker_pid(1);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  // Its connection stays open; only the heartbeats stop.
  ASSERT_OK(conn_->WaitForTopology([&](const Topology& now) { return !now.host(victim_).ok(); },
                                   5 * TestHeartbeatTimeout()));
  cluster_->KillWorker(1);  // SIGKILL ends a stopped process too
  ASSERT_OK_AND_ASSIGN(Mesh alone,
                       MeshOn(*client_, conn_->resources()->GetTopology(), {survivor_}));
  ExpectWorks(alone);
}

// Whether a server could listen on `port` again: nothing listens there
// (connections closed by the stop may linger in TIME_WAIT, which servers,
// gRPC's included, bind over with SO_REUSEADDR).
bool PortIsFree(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  listen(fd, 1) == 0;
  close(fd);
  return ok;
}

// Workers reporting runs up a tree (the coordinator's --report-fanout 2):
// the first host of the mesh reports each run to the coordinator for all
// three, after the others' reports reach it over the data plane. Every run
// is accounted once, with all three hosts' launches (the root's own part
// alone would be 1; a coordinator waiting for every host would account
// none).
TEST(DistributedTest, WorkersReportRunsUpATreeAndEachRunIsAccountedOnceForAll) {
  ProcessClusterOptions o = ProcessShape(1, 3, 1);
  o.report_fanout = 2;
  auto cluster = StartProcesses(o);
  auto conn = ConnectRemote(*cluster);
  auto client = Connect(conn.get());
  const Topology t = conn->resources()->GetTopology();
  ASSERT_OK_AND_ASSIGN(Mesh mesh, MeshOn(*client, t,
                                         {cluster->worker_host(0), cluster->worker_host(1),
                                          cluster->worker_host(2)}));
  FunctionBuilder b("all_reduce");
  Value x = b.Parameter(Shape(DType::kF32, {2}));
  ASSERT_OK_AND_ASSIGN(ir::Function fn, b.Build({b.AllReduce(x, {"x", "y"})}));
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(fn, mesh, {{kSplit}, {kSplit}}));
  ASSERT_OK_AND_ASSIGN(Array v, client->Put(Literal::F32({6}, std::vector<float>(6, 1.0f)),
                                            mesh, kSplit));
  constexpr int kRuns = 6;
  for (int i = 0; i < kRuns; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {v}));
    v = out[0];
  }
  ASSERT_OK_AND_ASSIGN(Literal result, AwaitOrHang(v.Fetch()));
  EXPECT_EQ(result.values<float>(), std::vector<float>(6, 729.0f));  // 3^6

  RemoteClusterOptions ro;
  ro.address = cluster->url();
  ro.token = cluster->worker_token();
  ASSERT_OK_AND_ASSIGN(auto op, RemoteCluster::Connect(ro));
  // The last reports may trail the result: read the log until they are in.
  std::vector<RemoteCluster::AccountedRun> mine;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (static_cast<int>(mine.size()) < kRuns && std::chrono::steady_clock::now() < deadline) {
    bool more = false;
    ASSERT_OK_AND_ASSIGN(std::vector<RemoteCluster::AccountedRun> log, op->AdminShareLog(0, &more));
    mine.clear();
    for (const RemoteCluster::AccountedRun& a : log) {
      if (a.client == client->id()) mine.push_back(a);
    }
  }
  ASSERT_EQ(static_cast<int>(mine.size()), kRuns);
  for (const RemoteCluster::AccountedRun& a : mine) EXPECT_EQ(a.launches, 3);
}

TEST(DistributedTest, StoppingTheClusterLeavesNoProcessOrPortBehind) {
  ProcessClusterOptions o = ProcessShape(2, 1, 1);
  auto cluster = StartProcesses(o);
  const std::vector<pid_t> pids = cluster->pids();
  ASSERT_EQ(pids.size(), 3u);
  const int port = std::stoi(cluster->url().substr(cluster->url().rfind(':') + 1));
  EXPECT_FALSE(PortIsFree(port));
  {
    auto conn = ConnectRemote(*cluster);
    auto client = Connect(conn.get());
    ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
    ASSERT_OK_AND_ASSIGN(Array a, client->Put(Literal::F32({1}, {7}), mesh, Sharding::Replicated(1)));
    ASSERT_OK(AwaitOrHang(a.Ready()).status());
    // The client is still connected when the cluster stops below.
    cluster->Stop();
    // The client sees its connection end instead of hanging.
    EXPECT_EQ(AwaitOrHang(a.Fetch()).status().code(), absl::StatusCode::kUnavailable);
  }
  for (pid_t p : pids) {
    EXPECT_EQ(kill(p, 0), -1) << "process " << p << " still exists";
    EXPECT_EQ(errno, ESRCH);
  }
  EXPECT_TRUE(PortIsFree(port));
}

}  // namespace
}  // namespace causeway::testing
