// A client's work dies with the client. A client starts a loop that never
// ends on a worker's only device and then goes: its connection closed, or
// its process killed. The coordinator ends its session, every host cancels
// its queued and running launches, and another client is served within
// 10 s of the first one's exit (before, the device spun for good and every
// later client timed out).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "causeway/base/status_macros.h"
#include "causeway/client/client.h"
#include "causeway/ir/builder.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "tests/integration/cluster_kinds.h"

namespace causeway::testing {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;
using ir::DType;
using ir::Shape;

constexpr absl::Duration kServedWithin = absl::Seconds(10);

// spin(x: f32[]) = while (x == x) x = x + 1: a loop whose condition never
// fails.
absl::StatusOr<ir::Function> Spin() {
  const Shape f32(DType::kF32, {});
  ir::FunctionBuilder cb("forever");
  ir::Value cx = cb.Parameter(f32);
  CW_ASSIGN_OR_RETURN(ir::Function cond, cb.Build({cb.Compare(cx, cx, ir::Comparison::kEq)}));
  ir::FunctionBuilder bb("count");
  ir::Value bx = bb.Parameter(f32);
  CW_ASSIGN_OR_RETURN(ir::Function body, bb.Build({bb.Add(bx, bb.ConstantF32(1))}));
  ir::FunctionBuilder b("spin");
  ir::Value p = b.Parameter(f32);
  return b.Build({b.While(cond, body, {p})[0]});
}

// Starts the loop on the cluster's only device through `client`, and
// returns once the run has been handed to the island scheduler.
absl::Status StartSpinning(Client& client) {
  CW_ASSIGN_OR_RETURN(Mesh mesh, client.AllocateMesh({{"x", 1}}));
  CW_ASSIGN_OR_RETURN(ir::Function spin, Spin());
  const Sharding scalar = Sharding::Replicated(0);
  CW_ASSIGN_OR_RETURN(CompiledFunction f, client.Compile(spin, mesh, {{scalar}, {scalar}}));
  CW_ASSIGN_OR_RETURN(Array x, client.Put(ir::Literal::F32({}, {0}), mesh, scalar));
  CW_ASSIGN_OR_RETURN(std::vector<Array> out, client.Call(f, {x}));
  const Future<Unit> flush = client.Flush();
  const absl::StatusOr<Unit>* flushed = flush.AwaitWithTimeout(absl::Seconds(60));
  if (flushed == nullptr) return absl::DeadlineExceededError("the call was never sent");
  return flushed->status();
}

// A second client's small computation on the same device, awaited at most
// kServedWithin.
void ExpectServed(const ProcessCluster& cluster) {
  auto conn = ConnectRemote(cluster);
  auto client = Connect(conn.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  ir::FunctionBuilder fb("negate");
  ir::Value p = fb.Parameter(Shape(DType::kF32, {2}));
  ASSERT_OK_AND_ASSIGN(ir::Function negate, fb.Build({fb.Neg(p)}));
  const Sharding whole = Sharding::Replicated(1);
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(negate, mesh, {{whole}, {whole}}));
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(Array x, client->Put(ir::Literal::F32({2}, {1, 2}), mesh, whole));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> y, client->Call(f, {x}));
  const Future<ir::Literal> fetch = y[0].Fetch();
  const absl::StatusOr<ir::Literal>* got = fetch.AwaitWithTimeout(kServedWithin);
  ASSERT_NE(got, nullptr) << "a second client was not served within "
                          << absl::FormatDuration(kServedWithin)
                          << " of the first one's exit: its loop still holds the device";
  ASSERT_OK(got->status());
  EXPECT_EQ(got->value().values<float>(), (std::vector<float>{-1, -2}));
  EXPECT_LT(absl::Now() - start, kServedWithin);
}

TEST(ClientLeavesTest, ALoopDiesWhenItsClientDisconnects) {
  auto cluster = StartProcesses(ProcessShape(1, 1, 1));
  {
    auto conn = ConnectRemote(*cluster);
    auto client = Connect(conn.get());
    ASSERT_OK(StartSpinning(*client));
  }  // the client and its connection go
  ExpectServed(*cluster);
  // The worker said what it cancelled, or the loop ended at its check.
  EXPECT_TRUE(cluster->WorkerRunning(0));
}

TEST(ClientLeavesTest, ALoopDiesWhenItsClientsProcessIsKilled) {
  // The client is a process of its own, forked before this one has any
  // thread; it reads the cluster's address and token from a pipe, starts
  // the loop, says so, and waits to be killed.
  // Close-on-exec: the cluster's processes, started after the fork, must
  // not hold the pipes open.
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe2(to_child, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(from_child, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_child[1]);
    close(from_child[0]);
    std::string lines;
    char buf[512];
    ssize_t n;
    while ((n = read(to_child[0], buf, sizeof(buf))) > 0) lines.append(buf, static_cast<size_t>(n));
    const size_t nl = lines.find('\n');
    RemoteClusterOptions o;
    o.address = lines.substr(0, nl);
    o.token = lines.substr(nl + 1);
    auto conn = RemoteCluster::Connect(o);
    if (!conn.ok()) _exit(3);
    auto client = Client::Connect(conn->get());
    if (!client.ok() || !StartSpinning(**client).ok()) _exit(4);
    const char ok = 'y';
    if (write(from_child[1], &ok, 1) != 1) _exit(5);
    for (;;) pause();
  }
  close(to_child[0]);
  close(from_child[1]);
  auto cluster = StartProcesses(ProcessShape(1, 1, 1));
  const std::string lines = cluster->url() + "\n" + cluster->token();
  ASSERT_EQ(write(to_child[1], lines.data(), lines.size()), static_cast<ssize_t>(lines.size()));
  close(to_child[1]);
  char said = 0;
  ASSERT_EQ(read(from_child[0], &said, 1), 1) << "the client process failed to start its loop";
  close(from_child[0]);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ExpectServed(*cluster);
}

// `causeway cluster cancel`: an operator ends a connected client's runaway
// loop. The client's result fails with CANCELLED, its later runs are
// refused naming the cancel, another client is served, and a client's own
// credential cannot cancel anyone.
TEST(ClientLeavesTest, AnOperatorCancelsAClientsWork) {
  auto cluster = StartProcesses(ProcessShape(1, 1, 1));
  auto conn = ConnectRemote(*cluster);
  auto client = Connect(conn.get());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  ASSERT_OK_AND_ASSIGN(ir::Function spin, Spin());
  const Sharding scalar = Sharding::Replicated(0);
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(spin, mesh, {{scalar}, {scalar}}));
  ASSERT_OK_AND_ASSIGN(Array x, client->Put(ir::Literal::F32({}, {0}), mesh, scalar));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {x}));
  const Future<Unit> flush = client->Flush();
  ASSERT_NE(flush.AwaitWithTimeout(absl::Seconds(60)), nullptr);

  // A client's token is not an operator's.
  auto other = ConnectRemote(*cluster);
  EXPECT_THAT(other->AdminCancelClient(client->id()),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("operators' credential")));
  RemoteClusterOptions ro;
  ro.address = cluster->url();
  ro.token = cluster->worker_token();
  ASSERT_OK_AND_ASSIGN(auto op, RemoteCluster::Connect(ro));
  EXPECT_THAT(op->AdminCancelClient(ClientId(123456)), StatusIs(absl::StatusCode::kNotFound, HasSubstr("not connected")));
  ASSERT_OK(op->AdminCancelClient(client->id()));

  const Future<ir::Literal> fetch = out[0].Fetch();
  const absl::StatusOr<ir::Literal>* spun = fetch.AwaitWithTimeout(kServedWithin);
  ASSERT_NE(spun, nullptr) << "the cancelled loop's result never came";
  // Cancelled, or already released with the rest of its memory: an
  // error either way, and no hang.
  EXPECT_TRUE(absl::IsCancelled(spun->status()) || absl::IsNotFound(spun->status()))
      << spun->status();
  ExpectServed(*cluster);
  // Its later runs are refused, naming the cancel.
  absl::StatusOr<std::vector<Array>> again = client->Call(f, {x});
  absl::Status later = again.status();
  if (later.ok()) {
    const Future<ir::Literal> next = (*again)[0].Fetch();
    const absl::StatusOr<ir::Literal>* r = next.AwaitWithTimeout(kServedWithin);
    ASSERT_NE(r, nullptr);
    later = r->status();
  }
  EXPECT_THAT(later, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("cancelled the work of")));
}

// A client's run time limit (ClientOptions::run_time_limit) ends its own
// runaway loop on a worker: the result fails with DEADLINE_EXCEEDED, and
// the device is free for the next run.
TEST(ClientLeavesTest, ARunPastItsClientsTimeLimitStops) {
  auto cluster = StartProcesses(ProcessShape(1, 1, 1));
  auto conn = ConnectRemote(*cluster);
  ClientOptions options;
  options.run_time_limit = absl::Milliseconds(300);
  auto client = Connect(conn.get(), options);
  ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 1}}));
  ASSERT_OK_AND_ASSIGN(ir::Function spin, Spin());
  const Sharding scalar = Sharding::Replicated(0);
  ASSERT_OK_AND_ASSIGN(CompiledFunction f, client->Compile(spin, mesh, {{scalar}, {scalar}}));
  ASSERT_OK_AND_ASSIGN(Array x, client->Put(ir::Literal::F32({}, {0}), mesh, scalar));
  ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {x}));
  const Future<ir::Literal> fetch = out[0].Fetch();
  const absl::StatusOr<ir::Literal>* spun = fetch.AwaitWithTimeout(kServedWithin);
  ASSERT_NE(spun, nullptr) << "the loop ran past its time limit";
  EXPECT_THAT(spun->status(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                       HasSubstr("run time limit")));
  ExpectServed(*cluster);
}

}  // namespace
}  // namespace causeway::testing
