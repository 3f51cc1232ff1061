// ProgramPlan: a program lowered onto physical devices. Made once by the
// client, registered once with every scheduler and host it touches; a run
// then only names the plan, its run id and its argument and output arrays.
// A plan carries IR, not code: each host compiles the call nodes it runs for
// its own devices' kind when the plan is registered (HostExecutor), so the
// client and the transports link no device backend.
//
// A plan is a DAG of nodes in topological order. Values are logical arrays
// (global shape, mesh, sharding). A call node runs one compiled function on
// every device of its mesh (one gang); its inputs are always values on its
// own mesh with the sharding it was compiled for, because lowering inserts
// reshard nodes wherever a value must move between meshes (and so between
// hosts or islands) or change sharding.
#ifndef CAUSEWAY_PLAN_PLAN_H_
#define CAUSEWAY_PLAN_PLAN_H_

#include <memory>
#include <string>
#include <vector>

#include "causeway/base/ids.h"
#include "causeway/ir/function.h"
#include "causeway/ir/shape.h"
#include "causeway/topology/mesh.h"
#include "causeway/topology/topology.h"

namespace causeway {

struct PlanValue {
  ir::Shape shape;        // global
  Mesh mesh;
  Sharding sharding;
  ir::Shape shard_shape;  // of every shard
  // Host and device of each shard, by mesh position.
  std::vector<HostId> shard_hosts;
  std::vector<int> shard_local_device;
};

// One piece of a reshard: a box copied from a source shard into a
// destination shard. Offsets are relative to each shard's own origin.
struct ReshardPiece {
  int src_shard = 0;
  std::vector<int64_t> src_offset;
  std::vector<int64_t> dst_offset;
  std::vector<int64_t> extent;
};

enum class PlanNodeKind { kCall, kReshard };

struct PlanNode {
  PlanNodeKind kind = PlanNodeKind::kCall;
  std::string name;  // function name, or "reshard"
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids
  // kCall: the function every device of the node's mesh runs (per shard),
  // and the kind of those devices, which every host of the mesh compiles it
  // for. Nodes of one plan may be of different kinds (meshes on islands of
  // different devices); one node's mesh is of one kind.
  std::shared_ptr<const ir::Function> function;
  std::string device_kind;
  // Whether the function contains collectives (its launches then meet their
  // gang in the hub). Fixed at lowering, so runs need not rescan it.
  bool has_collectives = false;
  // kReshard: pieces[d] fill destination shard d.
  std::vector<std::vector<ReshardPiece>> pieces;
};

struct ProgramPlan {
  ProgramId id;
  ClientId client;
  std::string name;
  std::vector<PlanValue> values;
  std::vector<int> parameters;  // value ids, in argument order
  std::vector<int> outputs;     // value ids, in result order
  std::vector<PlanNode> nodes;  // topological order
  // Islands and hosts with any work in the plan, in id order.
  std::vector<IslandId> islands;
  std::vector<HostId> hosts;
  std::vector<std::vector<HostId>> hosts_by_island;  // parallel to islands
};

// One run of a registered plan, as sent to a scheduler and then to hosts.
struct RunRequest {
  ProgramId program;
  RunId run;
  ClientId client;
  std::vector<ArrayId> arguments;  // one per plan parameter
  std::vector<ArrayId> outputs;    // one per plan output, named by the client
  // Position of this run in its island's order, set by the scheduler.
  int64_t sequence = -1;
  // How long each launch of the run may run on its device, in
  // microseconds (ClientOptions::run_time_limit); 0: no limit.
  int64_t time_limit_us = 0;
};

}  // namespace causeway

#endif  // CAUSEWAY_PLAN_PLAN_H_
