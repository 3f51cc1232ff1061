// Tracing and lowering: ProgramBuilder records calls; ClientCore::Lower
// turns them into a ProgramPlan on physical devices, inserting a reshard node
// wherever a value must move to another mesh or change sharding, and
// registers the plan with every scheduler and host it touches.
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client_core.h"

namespace causeway {

ProgramBuilder::ProgramBuilder(std::unique_ptr<internal::TraceState> state)
    : state_(std::move(state)) {}
ProgramBuilder::ProgramBuilder(ProgramBuilder&&) noexcept = default;
ProgramBuilder& ProgramBuilder::operator=(ProgramBuilder&&) noexcept = default;
ProgramBuilder::~ProgramBuilder() = default;

absl::StatusOr<TracedArray> ProgramBuilder::Parameter(const ir::Shape& shape, const Mesh& mesh,
                                                      const Sharding& sharding) {
  CW_RETURN_IF_ERROR(ir::ValidateShape(shape));
  CW_RETURN_IF_ERROR(sharding.Validate(shape, mesh));
  const int v = static_cast<int>(state_->values.size());
  state_->values.push_back(internal::TracedValue{shape, mesh, sharding});
  state_->parameters.push_back(v);
  return TracedArray{v, shape, mesh, sharding};
}

absl::StatusOr<std::vector<TracedArray>> ProgramBuilder::Call(
    const CompiledFunction& function, absl::Span<const TracedArray> args) {
  const internal::CompiledState& f = *function.state_;
  if (f.client != state_->core->id()) {
    return absl::InvalidArgumentError(absl::StrCat("function ", f.function->name(),
                                                   " was compiled by ", f.client.ToString()));
  }
  if (args.size() != f.in_shapes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("function ", f.function->name(), " takes ",
                                                   f.in_shapes.size(), " arguments, given ",
                                                   args.size()));
  }
  internal::TracedNode node;
  node.function = function.state_;
  for (size_t i = 0; i < args.size(); ++i) {
    const TracedArray& a = args[i];
    if (a.value < 0 || a.value >= static_cast<int>(state_->values.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", i, " of ", f.function->name(), " is not a traced value"));
    }
    const ir::Shape& have = state_->values[a.value].shape;
    if (have != f.in_shapes[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", i, " of ", f.function->name(), ": expected ", f.in_shapes[i].ToString(),
          " (global), given ", have.ToString()));
    }
    node.inputs.push_back(a.value);
  }
  std::vector<TracedArray> outs;
  for (size_t o = 0; o < f.out_shapes.size(); ++o) {
    const int v = static_cast<int>(state_->values.size());
    state_->values.push_back(internal::TracedValue{f.out_shapes[o], f.mesh, f.out_shardings[o]});
    node.outputs.push_back(v);
    outs.push_back(TracedArray{v, f.out_shapes[o], f.mesh, f.out_shardings[o]});
  }
  state_->nodes.push_back(std::move(node));
  return outs;
}

absl::StatusOr<Program> ProgramBuilder::Build(absl::Span<const TracedArray> outputs) {
  std::vector<int> ids;
  for (const TracedArray& o : outputs) {
    if (o.value < 0 || o.value >= static_cast<int>(state_->values.size())) {
      return absl::InvalidArgumentError("program output is not a traced value");
    }
    ids.push_back(o.value);
  }
  return state_->core->Lower(*state_, ids);
}

namespace internal {
namespace {

bool SamePlacement(const PlanValue& v, const Mesh& mesh, const Sharding& sharding) {
  return v.mesh.SameDevices(mesh) && v.mesh.axes() == mesh.axes() &&
         v.sharding == sharding;
}

absl::StatusOr<PlanValue> MakeValue(const Topology& topology, const ir::Shape& shape,
                                    const Mesh& mesh, const Sharding& sharding) {
  PlanValue v;
  v.shape = shape;
  v.mesh = mesh;
  v.sharding = sharding;
  v.shard_shape = sharding.ShardShape(shape, mesh);
  for (DeviceId d : mesh.devices()) {
    CW_ASSIGN_OR_RETURN(DeviceInfo info, topology.device(d));
    v.shard_hosts.push_back(info.host);
    v.shard_local_device.push_back(info.local_index);
  }
  return v;
}

// Pieces that fill every shard of `dst` from `src`. Each distinct source
// shard range is used once per destination; among replicas, one on the
// destination's host is preferred, else they are spread round-robin.
std::vector<std::vector<ReshardPiece>> PlanPieces(const PlanValue& src, const PlanValue& dst) {
  std::map<std::vector<std::pair<int64_t, int64_t>>, std::vector<int>> replicas;
  std::vector<std::vector<Range>> src_ranges(src.mesh.size());
  for (int s = 0; s < src.mesh.size(); ++s) {
    src_ranges[s] = src.sharding.ShardRanges(src.shape, src.mesh, s);
    std::vector<std::pair<int64_t, int64_t>> k;
    for (const Range& r : src_ranges[s]) k.emplace_back(r.begin, r.end);
    replicas[k].push_back(s);
  }
  std::vector<std::vector<ReshardPiece>> pieces(dst.mesh.size());
  for (int d = 0; d < dst.mesh.size(); ++d) {
    const std::vector<Range> want = dst.sharding.ShardRanges(dst.shape, dst.mesh, d);
    for (const auto& [key, holders] : replicas) {
      const std::vector<Range>& have = src_ranges[holders[0]];
      const std::vector<Range> box = Intersect(want, have);
      if (IsEmpty(box) && !box.empty()) continue;
      int chosen = holders[d % holders.size()];
      for (int h : holders) {
        if (src.shard_hosts[h] == dst.shard_hosts[d]) {
          chosen = h;
          break;
        }
      }
      ReshardPiece p;
      p.src_shard = chosen;
      for (size_t i = 0; i < box.size(); ++i) {
        p.src_offset.push_back(box[i].begin - have[i].begin);
        p.dst_offset.push_back(box[i].begin - want[i].begin);
        p.extent.push_back(box[i].size());
      }
      pieces[d].push_back(std::move(p));
      if (box.empty()) break;  // rank 0: one piece suffices
    }
  }
  return pieces;
}

// Fills the island and host lists of `plan` from its values.
void IndexHosts(const Topology& topology, ProgramPlan& plan) {
  std::set<HostId> hosts;
  for (const PlanNode& n : plan.nodes) {
    for (int v : n.inputs) hosts.insert(plan.values[v].shard_hosts.begin(), plan.values[v].shard_hosts.end());
    for (int v : n.outputs) hosts.insert(plan.values[v].shard_hosts.begin(), plan.values[v].shard_hosts.end());
  }
  std::map<IslandId, std::vector<HostId>> by_island;
  for (HostId h : hosts) by_island[topology.host(h)->island].push_back(h);
  plan.hosts.assign(hosts.begin(), hosts.end());
  for (auto& [island, list] : by_island) {
    plan.islands.push_back(island);
    plan.hosts_by_island.push_back(list);
  }
}

// A plan containing only `node` of `full`, with its inputs as parameters
// and its outputs as outputs.
std::shared_ptr<ProgramPlan> SingleNodePlan(const Topology& topology, const ProgramPlan& full,
                                            int node, ProgramId id) {
  auto plan = std::make_shared<ProgramPlan>();
  plan->id = id;
  plan->client = full.client;
  plan->name = absl::StrCat(full.name, "/", node);
  PlanNode n = full.nodes[node];
  std::vector<int> remap;
  for (int& v : n.inputs) {
    plan->values.push_back(full.values[v]);
    plan->parameters.push_back(static_cast<int>(plan->values.size()) - 1);
    v = plan->parameters.back();
  }
  for (int& v : n.outputs) {
    plan->values.push_back(full.values[v]);
    plan->outputs.push_back(static_cast<int>(plan->values.size()) - 1);
    v = plan->outputs.back();
  }
  plan->nodes.push_back(std::move(n));
  IndexHosts(topology, *plan);
  return plan;
}

}  // namespace

absl::StatusOr<Program> ClientCore::Lower(const TraceState& trace, absl::Span<const int> outputs) {
  CW_RETURN_IF_ERROR(CheckConnected());
  const Topology topology = cluster_->resources()->GetTopology();
  auto plan = std::make_shared<ProgramPlan>();
  plan->id = ProgramId(NextId(next_program_));
  plan->client = id_;
  plan->name = trace.name;
  // Traced value i becomes plan value i; reshards append more.
  for (const TracedValue& tv : trace.values) {
    CW_ASSIGN_OR_RETURN(PlanValue v, MakeValue(topology, tv.shape, tv.mesh, tv.sharding));
    plan->values.push_back(std::move(v));
  }
  plan->parameters = trace.parameters;
  // (value, mesh id, sharding) -> resharded value, so a value moved to the
  // same place twice is moved once.
  std::map<std::tuple<int, int64_t, std::string>, int> moved;
  for (const TracedNode& tn : trace.nodes) {
    PlanNode node;
    node.kind = PlanNodeKind::kCall;
    node.name = tn.function->function->name();
    node.function = tn.function->function;
    node.device_kind = tn.function->device_kind;
    for (const ir::Instruction& inst : tn.function->function->instructions()) {
      node.has_collectives = node.has_collectives || ir::IsCollective(inst.op);
    }
    node.outputs = tn.outputs;
    for (size_t i = 0; i < tn.inputs.size(); ++i) {
      const int v = tn.inputs[i];
      const Sharding& want = tn.function->in_shardings[i];
      if (SamePlacement(plan->values[v], tn.function->mesh, want)) {
        node.inputs.push_back(v);
        continue;
      }
      const auto key = std::make_tuple(v, tn.function->mesh.id().value(), want.ToString());
      auto it = moved.find(key);
      if (it == moved.end()) {
        CW_ASSIGN_OR_RETURN(PlanValue dst, MakeValue(topology, plan->values[v].shape,
                                                     tn.function->mesh, want));
        PlanNode reshard;
        reshard.kind = PlanNodeKind::kReshard;
        reshard.name = "reshard";
        reshard.inputs = {v};
        reshard.pieces = PlanPieces(plan->values[v], dst);
        plan->values.push_back(std::move(dst));
        reshard.outputs = {static_cast<int>(plan->values.size()) - 1};
        plan->nodes.push_back(std::move(reshard));
        it = moved.emplace(key, plan->nodes.back().outputs[0]).first;
      }
      node.inputs.push_back(it->second);
    }
    plan->nodes.push_back(std::move(node));
  }
  if (plan->nodes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("program ", trace.name, " has no calls"));
  }
  auto state = std::make_shared<ProgramState>();
  state->core = shared_from_this();
  for (const PlanValue& v : plan->values) {
    state->value_hosts.push_back(std::make_shared<const ShardHosts>(v.shard_hosts));
  }
  const std::set<int> params(trace.parameters.begin(), trace.parameters.end());
  for (int v : outputs) {
    auto p = std::find(trace.parameters.begin(), trace.parameters.end(), v);
    if (p != trace.parameters.end()) {
      state->outputs.push_back(OutputSource{true, static_cast<int>(p - trace.parameters.begin())});
    } else {
      // The same value named twice is one array, returned as one handle.
      auto seen = std::find(plan->outputs.begin(), plan->outputs.end(), v);
      state->outputs.push_back(
          OutputSource{false, static_cast<int>(seen - plan->outputs.begin())});
      if (seen == plan->outputs.end()) plan->outputs.push_back(v);
    }
  }
  IndexHosts(topology, *plan);
  if (options_.dispatch == DispatchMode::kSequential) {
    for (size_t n = 0; n < plan->nodes.size(); ++n) {
      ProgramState::Step step;
      auto sub = SingleNodePlan(topology, *plan, static_cast<int>(n), ProgramId(NextId(next_program_)));
      step.inputs = plan->nodes[n].inputs;
      step.outputs = plan->nodes[n].outputs;
      CW_RETURN_IF_ERROR(Register(sub));
      step.plan = std::move(sub);
      state->steps.push_back(std::move(step));
    }
  } else {
    CW_RETURN_IF_ERROR(Register(plan));
  }
  state->plan = std::move(plan);
  ++programs_lowered_;
  return Program(std::move(state));
}

absl::Status ClientCore::Register(const std::shared_ptr<const ProgramPlan>& plan) {
  for (IslandId island : plan->islands) {
    SchedulerService* scheduler = cluster_->scheduler(island);
    if (scheduler == nullptr) {
      return absl::NotFoundError(absl::StrCat("no scheduler for ", island.ToString()));
    }
    CW_RETURN_IF_ERROR(scheduler->RegisterProgram(plan));
  }
  for (HostId h : plan->hosts) {
    HostService* host = cluster_->host(h);
    if (host == nullptr) return absl::UnavailableError(absl::StrCat(h.ToString(), " is gone"));
    CW_RETURN_IF_ERROR(host->RegisterProgram(plan));
  }
  MutexLock lock(&mu_);
  registered_.push_back(plan);
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace causeway
