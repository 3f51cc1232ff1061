// Writes the seed corpus of the fuzz targets: valid messages of every kind
// each target accepts, so that fuzzing starts from inputs that go deep.
// Usage: fuzz_seeds DIR (writes DIR/<target>/<name>); its output is
// committed under fuzz/corpus/.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "causeway/base/check.h"
#include "causeway/base/ids.h"
#include "causeway/checkpoint/format.h"
#include "causeway/testing/checkpoint_sample.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/serialization.h"
#include "causeway/transport/grpc/cluster.pb.h"
#include "causeway/transport/grpc/wire_codec.h"

namespace causeway {
namespace {

std::filesystem::path root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary) << bytes;
}

ir::Function Mlp() {
  ir::FunctionBuilder b("mlp");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {4, 8}));
  ir::Value w = b.Parameter(ir::Shape(ir::DType::kF32, {8, 3}));
  ir::Value h = b.DotGeneral(x, w, {}, {}, {1}, {0});
  ir::Value y = b.Softmax(b.Gelu(h));
  return *b.Build({y, b.ReduceSum(y, {0, 1})});
}

ir::Function Neg(int64_t n, bool all_reduce) {
  ir::FunctionBuilder b("neg");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {n}));
  ir::Value y = b.Neg(x);
  if (all_reduce) y = b.AllReduce(y, {"x"});
  return *b.Build({y});
}

// f32[4] on `devices` (host 0, local devices 0..), split over axis x, then
// negated (and all-reduced), then resharded to replicated on device 0.
ProgramPlan Plan(ClientId client, int devices) {
  ProgramPlan plan;
  plan.id = ProgramId(ClientIdBase(client) + 1);
  plan.client = client;
  plan.name = "seed";
  std::vector<DeviceId> ids;
  for (int d = 0; d < devices; ++d) ids.push_back(DeviceId(d));
  const Mesh mesh(MeshId(0), IslandId(0), {{"x", devices}}, ids);
  PlanValue split;
  split.shape = ir::Shape(ir::DType::kF32, {4});
  split.mesh = mesh;
  split.sharding = Sharding({{"x"}});
  split.shard_shape = ir::Shape(ir::DType::kF32, {4 / devices});
  for (int d = 0; d < devices; ++d) {
    split.shard_hosts.push_back(HostId(0));
    split.shard_local_device.push_back(d);
  }
  PlanValue whole;
  whole.shape = whole.shard_shape = ir::Shape(ir::DType::kF32, {4});
  whole.mesh = Mesh(MeshId(1), IslandId(0), {{"y", 1}}, {DeviceId(0)});
  whole.sharding = Sharding::Replicated(1);
  whole.shard_hosts = {HostId(0)};
  whole.shard_local_device = {0};
  plan.values = {split, split, whole};
  PlanNode call;
  call.name = "neg";
  call.inputs = {0};
  call.outputs = {1};
  call.has_collectives = true;
  call.function = std::make_shared<const ir::Function>(Neg(4 / devices, true));
  call.device_kind = "cpu";
  PlanNode reshard;
  reshard.kind = PlanNodeKind::kReshard;
  reshard.name = "reshard";
  reshard.inputs = {1};
  reshard.outputs = {2};
  reshard.pieces.resize(1);
  for (int d = 0; d < devices; ++d) {
    const int64_t n = 4 / devices;
    reshard.pieces[0].push_back(ReshardPiece{d, {0}, {d * n}, {n}});
  }
  plan.nodes = {call, reshard};
  plan.parameters = {0};
  plan.outputs = {2};
  plan.islands = {IslandId(0)};
  plan.hosts = {HostId(0)};
  plan.hosts_by_island = {{HostId(0)}};
  return plan;
}

cluster::HostCall Put(ClientId client, int64_t array, int shard, int local) {
  cluster::HostCall c;
  c.set_host(0);
  cluster::PutShard& p = *c.mutable_put_shard();
  p.set_array(array);
  p.set_shard(shard);
  p.set_local_device(local);
  p.set_owner(client.value());
  wire::EncodeLiteral(ir::Literal::F32({2}, {1, 2}), p.mutable_value());
  return c;
}

// The sample checkpoint's manifest: what fuzz_checkpoint's folder holds.
std::string CheckpointManifest() {
  const std::filesystem::path scratch =
      std::filesystem::temp_directory_path() / "fuzz_seeds_checkpoint";
  std::filesystem::remove_all(scratch);
  std::filesystem::create_directories(scratch);
  const checkpoint::Manifest m = testing::WriteSampleCheckpoint(scratch.string());
  std::filesystem::remove_all(scratch);
  return checkpoint::ToJson(m);
}

void Seeds() {
  Write("fuzz_checkpoint", "sample", CheckpointManifest());
  Write("fuzz_ir", "mlp", ir::Serialize(Mlp()));
  Write("fuzz_ir", "all_reduce", ir::Serialize(Neg(4, true)));

  const ClientId client(0);
  const int64_t base = ClientIdBase(client);
  const ProgramPlan plan = Plan(client, 2);
  wire::Plan encoded;
  wire::EncodePlan(plan, &encoded);
  Write("fuzz_plan", "two_devices", encoded.SerializeAsString());

  // The worker: register, put both shards, run, fetch, loop, release.
  cluster::ToWorkerBatch w;
  uint64_t id = 1;
  auto call = [&](const cluster::HostCall& c) {
    cluster::ToWorker& m = *w.add_messages();
    m.set_id(id++);
    *m.mutable_call() = c;
  };
  cluster::HostCall c;
  c.set_host(0);
  *c.mutable_register_program() = encoded;
  call(c);
  call(Put(client, base + 10, 0, 0));
  call(Put(client, base + 10, 1, 1));
  c.Clear();
  wire::EncodeRun(RunRequest{plan.id, RunId(base + 100), client, {ArrayId(base + 10)},
                             {ArrayId(base + 11)}, 0},
                  c.mutable_enqueue_runs()->add_runs());
  call(c);
  c.Clear();
  c.mutable_fetch_shard()->set_array(base + 11);
  call(c);
  c.Clear();
  c.mutable_await_shard()->set_array(base + 11);
  call(c);
  c.Clear();
  c.mutable_release_arrays()->add_arrays(base + 11);
  call(c);
  c.Clear();
  c.set_release_owner(client.value());
  call(c);
  Write("fuzz_worker", "register_put_run_fetch", w.SerializeAsString());
  cluster::ToWorkerBatch peers;
  cluster::Peer& p = *peers.add_messages()->mutable_peers()->add_peers();
  p.set_host(1);
  p.set_island(0);
  p.set_data_address("127.0.0.1:1");
  p.add_devices(2);
  Write("fuzz_worker", "peers", peers.SerializeAsString());

  // The data plane: a whole piece, a piece in two chunks, a contribution,
  // an abort.
  cluster::DataBatch d;
  cluster::PieceChunk& whole = *d.add_messages()->mutable_piece();
  whole.set_run(base + 100);
  whole.set_node(1);
  whole.set_piece(0);
  whole.set_total_bytes(8);
  whole.set_data(std::string(8, '\1'));
  for (int half = 0; half < 2; ++half) {
    cluster::PieceChunk& part = *d.add_messages()->mutable_piece();
    part.set_run(base + 101);
    part.set_node(1);
    part.set_piece(1);
    part.set_total_bytes(8);
    part.set_offset(4 * half);
    part.set_data(std::string(4, '\2'));
  }
  cluster::ContributionChunk& k = *d.add_messages()->mutable_contribution();
  k.set_run(base + 100);
  k.set_rank(1);
  k.set_total_bytes(8);
  k.set_data(std::string(8, '\3'));
  d.add_messages()->mutable_abort()->set_run(base + 100);
  Write("fuzz_data_plane", "pieces_contribution_abort", d.SerializeAsString());

  // Collectives between processes through a library: a readiness (twice,
  // the second a duplicate) and a rendezvous entry.
  cluster::DataBatch g;
  for (int i = 0; i < 2; ++i) {
    cluster::CollectiveReady& ready = *g.add_messages()->mutable_ready();
    ready.set_run(base + 102);
    ready.set_host(1);
    ready.set_generation(1);
  }
  cluster::RendezvousEntry& entry = *g.add_messages()->mutable_rendezvous();
  entry.set_host(1);
  entry.set_key("causeway/host 0,host 1/0/1");
  entry.set_value(std::string(64, '\4'));
  Write("fuzz_data_plane", "ready_rendezvous", g.SerializeAsString());

  // Reports of a subtree's part of a run (report trees): one, its repeat,
  // and one with counts past every bound.
  cluster::DataBatch r;
  for (int i = 0; i < 3; ++i) {
    cluster::SubtreeReport& report = *r.add_messages()->mutable_report();
    report.set_child(1);
    report.set_program(base + 1);
    report.set_run(base + 103);
    report.set_device_us(i < 2 ? 100 : int64_t{1} << 62);
    report.set_launches(i < 2 ? 1 : 1 << 30);
  }
  Write("fuzz_data_plane", "subtree_reports", r.SerializeAsString());

  // The coordinator: what a client says first, in one connection.
  cluster::ClientBatch b;
  uint64_t cid = 1;
  auto message = [&]() -> cluster::ClientMessage& {
    cluster::ClientMessage& m = *b.add_messages();
    m.set_id(cid++);
    m.set_client(client.value());
    return m;
  };
  message().set_register_client(true);
  MeshRequest request;
  request.axes = {{"x", 2}};
  wire::EncodeMeshRequest(request, message().mutable_allocate_mesh());
  cluster::ClientMessage& reg = message();
  reg.mutable_scheduler()->set_island(0);
  *reg.mutable_scheduler()->mutable_register_program() = encoded;
  cluster::ClientMessage& host = message();
  host.mutable_host()->set_host(0);
  *host.mutable_host()->mutable_register_program() = encoded;
  cluster::ClientMessage& put = message();
  *put.mutable_host() = Put(client, base + 10, 0, 0);
  cluster::ClientMessage& runs = message();
  runs.mutable_scheduler()->set_island(0);
  wire::EncodeRun(RunRequest{plan.id, RunId(base + 100), client, {ArrayId(base + 10)},
                             {ArrayId(base + 11)}, 0},
                  runs.mutable_scheduler()->mutable_submit_runs()->add_runs());
  cluster::ClientMessage& multi = message();
  wire::EncodeRun(RunRequest{plan.id, RunId(base + 101), client, {ArrayId(base + 10)},
                             {ArrayId(base + 12)}, 0},
                  multi.mutable_submit_run()->mutable_run());
  multi.mutable_submit_run()->add_islands(0);
  cluster::ClientMessage& fetch = message();
  fetch.mutable_host()->set_host(0);
  fetch.mutable_host()->mutable_fetch_shard()->set_array(base + 11);
  Write("fuzz_coordinator", "session", b.SerializeAsString());
}

}  // namespace
}  // namespace causeway

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  causeway::root = argv[1];
  causeway::Seeds();
  return 0;
}
