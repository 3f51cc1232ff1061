// A small ProgramPlan built by hand, for tests and benchmarks of code that
// handles plans without a client to lower them: f32[4,4] row-sharded on
// host 0's two devices, scaled twice (one shared function), resharded by
// columns onto host 1's two devices, negated. Needs causeway::transport and
// causeway::ir linked.
#ifndef CAUSEWAY_TESTING_TWO_MESH_PLAN_H_
#define CAUSEWAY_TESTING_TWO_MESH_PLAN_H_

#include <memory>
#include <utility>

#include "causeway/base/check.h"
#include "causeway/ir/builder.h"
#include "causeway/plan/plan.h"

namespace causeway::testing {

inline std::shared_ptr<const ir::Function> FunctionOrDie(absl::StatusOr<ir::Function> f) {
  CW_CHECK_OK(f.status());
  return std::make_shared<const ir::Function>(*std::move(f));
}

// x * 2 over f32[2,4] shards.
inline std::shared_ptr<const ir::Function> ScaleFunction() {
  ir::FunctionBuilder b("scale");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {2, 4}));
  return FunctionOrDie(b.Build({b.Mul(x, b.Full(2, {2, 4}))}));
}

// -x over f32[4,2] shards.
inline std::shared_ptr<const ir::Function> NegateFunction() {
  ir::FunctionBuilder b("negate");
  return FunctionOrDie(b.Build({b.Neg(b.Parameter(ir::Shape(ir::DType::kF32, {4, 2})))}));
}

// An f32[4,4] value on `mesh` with `sharding`, both shards on `host`.
inline PlanValue TwoShardValue(const Mesh& mesh, Sharding sharding, int64_t host) {
  PlanValue v;
  v.shape = ir::Shape(ir::DType::kF32, {4, 4});
  v.mesh = mesh;
  v.sharding = std::move(sharding);
  v.shard_shape = v.sharding.ShardShape(v.shape, mesh);
  v.shard_hosts = {HostId(host), HostId(host)};
  v.shard_local_device = {0, 1};
  return v;
}

inline ProgramPlan TwoMeshPlan() {
  const Mesh a(MeshId(1), IslandId(0), {{"data", 2}}, {DeviceId(0), DeviceId(1)});
  const Mesh b(MeshId(2), IslandId(0), {{"x", 2}}, {DeviceId(2), DeviceId(3)});
  const Sharding rows({{"data"}, {}});
  const Sharding cols({{}, {"x"}});
  ProgramPlan plan;
  plan.id = ProgramId(7);
  plan.client = ClientId(3);
  plan.name = "two_meshes";
  plan.values = {TwoShardValue(a, rows, 0), TwoShardValue(a, rows, 0), TwoShardValue(a, rows, 0),
                 TwoShardValue(b, cols, 1), TwoShardValue(b, cols, 1)};
  plan.parameters = {0};
  plan.outputs = {4};
  PlanNode call{PlanNodeKind::kCall, "scale", {0}, {1}, ScaleFunction(), "cpu", false, {}};
  plan.nodes.push_back(call);
  call.inputs = {1};
  call.outputs = {2};
  plan.nodes.push_back(call);
  PlanNode reshard{PlanNodeKind::kReshard, "reshard", {2}, {3}, nullptr, "", false, {}};
  for (int d = 0; d < 2; ++d) {
    reshard.pieces.emplace_back();
    for (int s = 0; s < 2; ++s) {
      reshard.pieces.back().push_back(ReshardPiece{s, {0, 2 * d}, {2 * s, 0}, {2, 2}});
    }
  }
  plan.nodes.push_back(reshard);
  plan.nodes.push_back(
      PlanNode{PlanNodeKind::kCall, "negate", {3}, {4}, NegateFunction(), "cpu", false, {}});
  plan.islands = {IslandId(0)};
  plan.hosts = {HostId(0), HostId(1)};
  plan.hosts_by_island = {{HostId(0), HostId(1)}};
  return plan;
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTING_TWO_MESH_PLAN_H_
