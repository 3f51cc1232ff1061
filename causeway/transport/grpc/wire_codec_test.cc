#include "causeway/transport/grpc/wire_codec.h"

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/base/check.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/serialization.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/transport/grpc/cluster_codec.h"
#include "causeway/testing/two_mesh_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::wire {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

using ::causeway::testing::TwoMeshPlan;

Plan Encoded() {
  Plan p;
  EncodePlan(TwoMeshPlan(), &p);
  return p;
}

std::vector<float> RunFunction(const ir::Function& f, const ir::Literal& in) {
  auto exe = backend::cpu::Compile(f);
  CW_CHECK_OK(exe.status());
  ir::Literal out(f.output_shape(0));
  const void* inputs[] = {in.data()};
  void* outputs[] = {out.data()};
  CW_CHECK_OK((*exe)->Run(inputs, outputs, {}));
  auto v = out.values<float>();
  return {v.begin(), v.end()};
}

TEST(WireCodecTest, PlanRoundTripsWithSharedFunctions) {
  const ProgramPlan original = TwoMeshPlan();
  Plan wire;
  EncodePlan(original, &wire);
  EXPECT_EQ(wire.functions_size(), 2);  // scale once, negate once
  ASSERT_OK_AND_ASSIGN(auto decoded, DecodePlan(wire, FunctionMode::kParse));

  EXPECT_EQ(decoded->id, original.id);
  EXPECT_EQ(decoded->client, original.client);
  EXPECT_EQ(decoded->name, "two_meshes");
  EXPECT_EQ(decoded->parameters, original.parameters);
  EXPECT_EQ(decoded->outputs, original.outputs);
  EXPECT_EQ(decoded->islands, original.islands);
  EXPECT_EQ(decoded->hosts, original.hosts);
  EXPECT_EQ(decoded->hosts_by_island, original.hosts_by_island);
  ASSERT_EQ(decoded->values.size(), original.values.size());
  for (size_t v = 0; v < original.values.size(); ++v) {
    const causeway::PlanValue& a = original.values[v];
    const causeway::PlanValue& b = decoded->values[v];
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.mesh, b.mesh);
    EXPECT_EQ(a.sharding, b.sharding);
    EXPECT_EQ(a.shard_shape, b.shard_shape);
    EXPECT_EQ(a.shard_hosts, b.shard_hosts);
    EXPECT_EQ(a.shard_local_device, b.shard_local_device);
  }
  ASSERT_EQ(decoded->nodes.size(), 4u);
  for (size_t n = 0; n < 4; ++n) {
    EXPECT_EQ(decoded->nodes[n].kind, original.nodes[n].kind);
    EXPECT_EQ(decoded->nodes[n].name, original.nodes[n].name);
    EXPECT_EQ(decoded->nodes[n].inputs, original.nodes[n].inputs);
    EXPECT_EQ(decoded->nodes[n].outputs, original.nodes[n].outputs);
  }
  const causeway::ReshardPiece& piece = decoded->nodes[2].pieces[1][1];
  EXPECT_EQ(piece.src_shard, 1);
  EXPECT_EQ(piece.src_offset, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(piece.dst_offset, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(piece.extent, (std::vector<int64_t>{2, 2}));
  // Nodes calling one function share one parsed function, and each call
  // node keeps its device kind.
  ASSERT_NE(decoded->nodes[0].function, nullptr);
  EXPECT_EQ(decoded->nodes[0].function, decoded->nodes[1].function);
  EXPECT_EQ(decoded->nodes[2].function, nullptr);
  EXPECT_EQ(ir::Serialize(*decoded->nodes[3].function), ir::Serialize(*original.nodes[3].function));
  EXPECT_EQ(decoded->nodes[0].device_kind, "cpu");
  // Everything else: encoding the decoded plan gives the same bytes.
  Plan again;
  EncodePlan(*decoded, &again);
  EXPECT_EQ(again.SerializeAsString(), wire.SerializeAsString());
}

TEST(WireCodecTest, DecodedFunctionsComputeWhatTheOriginalsDo) {
  const ProgramPlan original = TwoMeshPlan();
  ASSERT_OK_AND_ASSIGN(auto decoded, DecodePlan(Encoded(), FunctionMode::kParse));
  const ir::Literal rows = ir::Literal::F32({2, 4}, {1, -2, 3, 4.5f, 0, 6, -7, 8});
  const ir::Literal cols = ir::Literal::F32({4, 2}, {1, -2, 3, 4.5f, 0, 6, -7, 8});
  EXPECT_EQ(RunFunction(*decoded->nodes[0].function, rows),
            (std::vector<float>{2, -4, 6, 9, 0, 12, -14, 16}));
  EXPECT_EQ(RunFunction(*decoded->nodes[0].function, rows),
            RunFunction(*original.nodes[0].function, rows));
  EXPECT_EQ(RunFunction(*decoded->nodes[3].function, cols),
            RunFunction(*original.nodes[3].function, cols));
}

TEST(WireCodecTest, EachCallNodeCarriesItsDeviceKind) {
  ProgramPlan plan = TwoMeshPlan();
  plan.nodes[3].device_kind = "vulkan";
  Plan wire;
  EncodePlan(plan, &wire);
  ASSERT_OK_AND_ASSIGN(auto decoded, DecodePlan(wire, FunctionMode::kSkip));
  EXPECT_EQ(decoded->nodes[0].device_kind, "cpu");
  EXPECT_EQ(decoded->nodes[1].device_kind, "cpu");
  EXPECT_EQ(decoded->nodes[3].device_kind, "vulkan");
  wire.mutable_nodes(3)->set_device_kind("no such kind!");
  EXPECT_THAT(DecodePlan(wire, FunctionMode::kSkip),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("node 3 (negate)")));
}

TEST(WireCodecTest, SkipModeLeavesFunctionsNullAndSkipsTheirBytes) {
  Plan wire = Encoded();
  wire.set_functions(1, "not a function");
  ASSERT_OK_AND_ASSIGN(auto decoded, DecodePlan(wire, FunctionMode::kSkip));
  ASSERT_EQ(decoded->nodes.size(), 4u);
  for (const causeway::PlanNode& n : decoded->nodes) EXPECT_EQ(n.function, nullptr);
  EXPECT_EQ(decoded->nodes[3].name, "negate");
  EXPECT_EQ(decoded->nodes[2].pieces.size(), 2u);
  // Such a plan cannot be sent on to a host: its functions are gone.
  Plan forwarded;
  EncodePlan(*decoded, &forwarded);
  EXPECT_THAT(DecodePlan(forwarded, FunctionMode::kParse),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 0 function -1 out of range (0 functions)")));
}

// Decodes `wire` with kCompile and expects INVALID_ARGUMENT containing `message`.
void ExpectInvalid(const Plan& wire, const std::string& message) {
  EXPECT_THAT(DecodePlan(wire, FunctionMode::kParse),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)));
}

TEST(WireCodecTest, CorruptPlansAreRejectedWithTheirFault) {
  Plan p = Encoded();
  p.mutable_nodes(1)->set_inputs(0, 7);
  ExpectInvalid(p, "plan 'two_meshes': node 1 input 7 out of range (5 values)");

  p = Encoded();
  p.mutable_outputs()->Set(0, -1);
  ExpectInvalid(p, "plan 'two_meshes': output -1 out of range (5 values)");

  p = Encoded();
  p.mutable_nodes(0)->set_inputs(0, 2);
  ExpectInvalid(p, "node 0 (scale): input 2 is used before it is defined");

  p = Encoded();
  p.mutable_nodes(3)->set_outputs(0, 1);
  ExpectInvalid(p, "node 3 (negate): output 1 defined twice");

  p = Encoded();
  p.mutable_nodes(1)->set_kind(5);
  ExpectInvalid(p, "node 1 (scale): invalid kind 5");

  p = Encoded();
  p.mutable_nodes(0)->set_function(2);
  ExpectInvalid(p, "node 0 function 2 out of range (2 functions)");

  p = Encoded();
  p.set_functions(1, "garbage bytes");
  ExpectInvalid(p, "node 3 (negate): function 1: ");

  p = Encoded();
  p.mutable_nodes(3)->set_function(0);  // scale's f32[2,4] on f32[4,2] shards
  ExpectInvalid(p,
                "node 3 (negate): input 0 (value 3) has shards of f32[4,2]; function scale "
                "expects f32[2,4]");

  p = Encoded();
  p.mutable_nodes(2)->mutable_pieces(0)->mutable_pieces(1)->set_src_shard(2);
  ExpectInvalid(p,
                "node 2 (reshard): shard 0 piece 1 source shard 2 out of range (2 source "
                "shards)");

  p = Encoded();
  p.mutable_nodes(2)->mutable_pieces()->RemoveLast();
  ExpectInvalid(p, "node 2 (reshard): 1 piece lists for 2 destination shards");

  p = Encoded();
  p.mutable_nodes(2)->mutable_pieces(1)->mutable_pieces(0)->add_dst_offset(0);
  ExpectInvalid(p,
                "shard 1 piece 0: destination offset of rank 3 and extent of rank 2 for "
                "shards of rank 2");

  p = Encoded();
  p.mutable_nodes(2)->mutable_pieces(1)->mutable_pieces(0)->set_src_offset(1, 3);
  ExpectInvalid(p,
                "shard 1 piece 0: box at source offset [0,3] of extent [2,2] exceeds the "
                "source shard f32[2,4]");

  p = Encoded();
  p.mutable_values(3)->mutable_shard_hosts()->RemoveLast();
  ExpectInvalid(p,
                "plan 'two_meshes': value 3: 1 shard hosts and 2 local devices for a mesh "
                "of 2 devices");

  p = Encoded();
  p.mutable_values(0)->mutable_shard_shape()->set_dtype(9);
  ExpectInvalid(p, "value 0: invalid dtype 9");

  p = Encoded();
  p.mutable_values(2)->mutable_shard_shape()->set_dims(0, 4);
  ExpectInvalid(p, "value 2: shard shape f32[4,4], but f32[4,4] sharded");

  p = Encoded();
  p.mutable_values(1)->mutable_shape()->set_dims(1, -4);
  ExpectInvalid(p, "value 1: negative dimension in f32[4,-4]");

  p = Encoded();
  p.mutable_values(1)->mutable_mesh()->mutable_axes(0)->set_size(0);
  ExpectInvalid(p, "value 1: mesh axis 'data' has size 0");

  p = Encoded();
  p.mutable_values(1)->mutable_sharding()->mutable_dims(0)->set_axes(0, "model");
  ExpectInvalid(p, "value 1: sharding");

  p = Encoded();
  p.mutable_values(4)->set_shard_local_device(1, 0);  // not where negate runs
  ExpectInvalid(p, "node 3 (negate): value 4 is not on the node's devices");

  p = Encoded();
  p.add_islands(1);
  ExpectInvalid(p, "1 host lists for 2 islands");
}

// Byte flips anywhere in an encoded plan: each mutant that still parses
// decodes to a plan or to INVALID_ARGUMENT, never a crash (run under ASan too).
TEST(WireCodecTest, MutatedPlansDecodeOrFailCleanly) {
  const std::string bytes = Encoded().SerializeAsString();
  std::mt19937 rng(42);
  int parsed = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string mutant = bytes;
    for (int f = 0, n = 1 + static_cast<int>(rng() % 4); f < n; ++f) {
      mutant[rng() % mutant.size()] ^= static_cast<char>(1 << (rng() % 8));
    }
    Plan p;
    if (!p.ParseFromString(mutant)) continue;
    ++parsed;
    for (FunctionMode mode : {FunctionMode::kParse, FunctionMode::kSkip}) {
      auto decoded = DecodePlan(p, mode);
      if (decoded.ok()) continue;
      ++rejected;
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
    }
  }
  EXPECT_GT(parsed, 1000);
  EXPECT_GT(rejected, 500);
}

TEST(WireCodecTest, RunRoundTrips) {
  const RunRequest run{ProgramId(4),  RunId(9), ClientId(2), {ArrayId(10), ArrayId(11)},
                       {ArrayId(12)}, 17};
  wire::Run wire;  // qualified: TEST bodies see testing::Test::Run
  EncodeRun(run, &wire);
  ASSERT_OK_AND_ASSIGN(RunRequest back, DecodeRun(wire));
  EXPECT_EQ(back.program, run.program);
  EXPECT_EQ(back.run, run.run);
  EXPECT_EQ(back.client, run.client);
  EXPECT_EQ(back.arguments, run.arguments);
  EXPECT_EQ(back.outputs, run.outputs);
  EXPECT_EQ(back.sequence, 17);
  wire.set_program(-1);
  EXPECT_THAT(DecodeRun(wire),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid id")));
}

TEST(WireCodecTest, TopologyRoundTripsKeepingDeviceOrder) {
  causeway::Topology t;
  t.AddIsland(IslandId(1));
  t.AddIsland(IslandId(0));
  t.AddHost(HostId(5), IslandId(1));
  t.AddHost(HostId(6), IslandId(1));
  t.AddHost(HostId(7), IslandId(0));
  // Interleaved, so the island's device order is not host-major.
  t.AddDevice(DeviceId(0), HostId(6), 100);
  t.AddDevice(DeviceId(1), HostId(5), 200);
  t.AddDevice(DeviceId(2), HostId(6), 300);
  t.AddDevice(DeviceId(3), HostId(7), 400);
  t.AddHost(HostId(8), IslandId(0));  // no devices
  Topology wire;
  EncodeTopology(t, &wire);
  ASSERT_OK_AND_ASSIGN(causeway::Topology back, DecodeTopology(wire));
  EXPECT_EQ(back.islands(), t.islands());
  EXPECT_EQ(back.num_devices(), 4);
  for (IslandId i : t.islands()) {
    EXPECT_EQ(back.island(i)->hosts, t.island(i)->hosts);
    EXPECT_EQ(back.island(i)->devices, t.island(i)->devices);
  }
  for (int64_t h : {5, 6, 7, 8}) {
    EXPECT_EQ(back.host(HostId(h))->devices, t.host(HostId(h))->devices);
    EXPECT_EQ(back.host(HostId(h))->island, t.host(HostId(h))->island);
  }
  for (int64_t d = 0; d < 4; ++d) {
    const DeviceInfo a = *t.device(DeviceId(d));
    const DeviceInfo b = *back.device(DeviceId(d));
    EXPECT_EQ(a.host, b.host);
    EXPECT_EQ(a.island, b.island);
    EXPECT_EQ(a.local_index, b.local_index);
    EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  }

  // Devices that left travel with their reason.
  causeway::Topology left = t;
  ASSERT_OK(left.RemoveHost(HostId(7), "host 7 lost: connection closed"));
  Topology left_wire;
  EncodeTopology(left, &left_wire);
  ASSERT_OK_AND_ASSIGN(causeway::Topology left_back, DecodeTopology(left_wire));
  EXPECT_THAT(left_back.device(DeviceId(3)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("host 7 lost: connection closed")));
  left_wire.mutable_gone(0)->set_device(0);  // present
  EXPECT_THAT(DecodeTopology(left_wire), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("departed device 0")));

  Topology bad = wire;
  bad.mutable_islands(1)->mutable_devices(0)->set_host(5);  // a host of island 1
  EXPECT_THAT(DecodeTopology(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("device 3 is on host 5, which island 0")));
  bad = wire;
  bad.mutable_islands(1)->add_hosts(5);
  EXPECT_THAT(DecodeTopology(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("host 5 is invalid or listed twice")));
  bad = wire;
  bad.mutable_islands(0)->mutable_devices(1)->set_id(0);
  EXPECT_THAT(DecodeTopology(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("device 0 is invalid or listed twice")));
}

TEST(WireCodecTest, MeshAndMeshRequestRoundTrip) {
  const causeway::Mesh mesh(
      MeshId(3), IslandId(1), {{"data", 2}, {"model", 3}},
      {DeviceId(5), DeviceId(4), DeviceId(3), DeviceId(2), DeviceId(1), DeviceId(0)});
  Mesh wire;
  EncodeMesh(mesh, &wire);
  ASSERT_OK_AND_ASSIGN(causeway::Mesh back, DecodeMesh(wire));
  EXPECT_EQ(back, mesh);

  Mesh bad = wire;
  bad.mutable_devices()->RemoveLast();
  EXPECT_THAT(DecodeMesh(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than the 5 devices")));
  bad = wire;
  bad.set_devices(1, 5);
  EXPECT_THAT(DecodeMesh(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device 5 listed twice")));
  bad = wire;
  bad.mutable_axes(1)->set_name("data");
  EXPECT_THAT(DecodeMesh(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'data' named twice")));
  bad = wire;
  bad.mutable_axes(0)->set_size(int64_t{1} << 62);
  EXPECT_THAT(DecodeMesh(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than the 6 devices")));

  const causeway::MeshRequest request{{{"x", 4}}, IslandId(2), {DeviceId(1), DeviceId(9)}};
  MeshRequest wire_request;
  EncodeMeshRequest(request, &wire_request);
  ASSERT_OK_AND_ASSIGN(causeway::MeshRequest r, DecodeMeshRequest(wire_request));
  EXPECT_EQ(r.axes, request.axes);
  EXPECT_EQ(r.island, request.island);
  EXPECT_EQ(r.devices, request.devices);
  EncodeMeshRequest(causeway::MeshRequest{{{"y", 1}}, IslandId(), {}}, &wire_request);
  EXPECT_FALSE(DecodeMeshRequest(wire_request)->island.valid());
}

TEST(WireCodecTest, LiteralsRoundTripAndSizesAreChecked) {
  ir::Literal pred(ir::Shape(ir::DType::kPred, {3}));
  pred.mutable_values<uint8_t>()[1] = 1;
  for (const ir::Literal& l :
       {ir::Literal::F32({2, 2}, {1.5f, -2, 0, 3}), ir::Literal::I32({3}, {7, -8, 9}),
        ir::Literal::ScalarF32(4), ir::Literal(ir::Shape(ir::DType::kF32, {0, 5})), pred}) {
    Literal wire;
    EncodeLiteral(l, &wire);
    ASSERT_OK_AND_ASSIGN(ir::Literal back, DecodeLiteral(wire));
    EXPECT_EQ(back, l) << l.ToString();
  }
  Literal wire;
  EncodeLiteral(ir::Literal::F32({2, 2}, {1, 2, 3, 4}), &wire);
  Literal bad = wire;
  bad.mutable_data()->pop_back();
  EXPECT_THAT(DecodeLiteral(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("literal of f32[2,2] carries 15 bytes; "
                                                     "expected 16")));
  bad = wire;
  bad.mutable_shape()->set_dtype(-1);
  EXPECT_THAT(DecodeLiteral(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid dtype -1")));
  bad = wire;
  bad.mutable_shape()->set_dims(0, -2);
  EXPECT_THAT(DecodeLiteral(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("negative dimension in f32[-2,2]")));
  bad = wire;
  bad.mutable_shape()->set_dims(0, int64_t{1} << 40);  // would be a huge allocation
  EXPECT_THAT(DecodeLiteral(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has more than")));
}

TEST(WireCodecTest, StatusesRoundTripAndUnknownCodesBecomeUnknown) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status s(static_cast<absl::StatusCode>(code), "host 3: out of luck");
    Status wire;
    EncodeStatus(s, &wire);
    EXPECT_EQ(DecodeStatus(wire), s);
  }
  Status wire;
  EncodeStatus(absl::OkStatus(), &wire);
  EXPECT_TRUE(DecodeStatus(wire).ok());
  wire.set_message("ignored");
  EXPECT_TRUE(DecodeStatus(wire).ok());
  wire.set_code(99);
  wire.set_message("from the future");
  EXPECT_EQ(DecodeStatus(wire), absl::UnknownError("from the future"));
  wire.set_code(-3);
  EXPECT_EQ(DecodeStatus(wire).code(), absl::StatusCode::kUnknown);
}

TEST(ClusterCodecTest, TraceEventsRoundTripOntoTheReceiversClock) {
  TraceEvent e{TraceKind::kTransfer, HostId(2), DeviceId(5), RunId(77), 3, "reshard", 1000, 20,
               TraceFlowId(RunId(77), 3, 1, 0)};
  e.island = IslandId(1);
  cluster::TraceEvents wire;
  grpc_transport::EncodeTraceEvent(e, wire.add_events());
  int64_t skipped = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<TraceEvent> back,
                       grpc_transport::DecodeTraceEvents(wire, 500, &skipped));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(skipped, 0);
  EXPECT_EQ(back[0].kind, e.kind);
  EXPECT_EQ(back[0].host, e.host);
  EXPECT_EQ(back[0].device, e.device);
  EXPECT_EQ(back[0].run, e.run);
  EXPECT_EQ(back[0].node, 3);
  EXPECT_EQ(back[0].name, "reshard");
  EXPECT_EQ(back[0].start_us, 1500);
  EXPECT_EQ(back[0].duration_us, 20);
  EXPECT_EQ(back[0].flow, e.flow);
  EXPECT_EQ(back[0].island, IslandId(1));
}

TEST(ClusterCodecTest, AMalformedTraceEventIsLeftOutNotTheBatch) {
  cluster::TraceEvents wire;
  for (int i = 0; i < 5; ++i) {
    TraceEvent e{TraceKind::kRun, HostId(0), DeviceId(0), RunId(1), 0, "f", 100 * i, 10};
    grpc_transport::EncodeTraceEvent(e, wire.add_events());
  }
  wire.mutable_events(0)->set_kind(99);           // unknown kind
  wire.mutable_events(1)->set_duration_us(-1);    // negative duration
  wire.mutable_events(2)->set_start_us(std::numeric_limits<int64_t>::max());  // overflows
  // In range on the sender's clock, out of it once moved onto the receiver's.
  wire.mutable_events(3)->set_start_us(grpc_transport::kMaxTraceMicros);
  int64_t skipped = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<TraceEvent> back,
                       grpc_transport::DecodeTraceEvents(wire, 1000, &skipped));
  EXPECT_EQ(skipped, 4);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].start_us, 1400);
  // A clock reading that would overflow the shift fails the batch.
  EXPECT_FALSE(grpc_transport::DecodeTraceEvents(
                   wire, grpc_transport::ClockShift(0, 10, std::numeric_limits<int64_t>::min()),
                   &skipped)
                   .ok());
}

TEST(ClusterCodecTest, ClocksThatAgreeWithinTheRoundTripAreNotShifted) {
  // The peer read its clock between asking and answering: consistent with
  // one clock (one machine), left as it is.
  EXPECT_EQ(grpc_transport::ClockShift(1000, 3000, 1100), 0);
  EXPECT_EQ(grpc_transport::ClockShift(1000, 3000, 3000), 0);
  // Outside it: moved to the midpoint of the round trip.
  EXPECT_EQ(grpc_transport::ClockShift(1000, 3000, 10'000), 2000 - 10'000);
  EXPECT_EQ(grpc_transport::ClockShift(1000, 3000, 500), 1500);
}


}  // namespace
}  // namespace causeway::wire
