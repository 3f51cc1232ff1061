#include "causeway/client/client_core.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/base/trace.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/replication.h"
#include "causeway/ir/verifier.h"

namespace causeway::internal {
namespace {

// The replication check in mesh terms: a parameter varies along the axes of
// size > 1 its sharding splits it over; a result must be replicated over the
// mesh's other axes of size > 1.
absl::Status CheckReplication(const ir::Function& function, const Mesh& mesh,
                              const std::vector<Sharding>& in, const std::vector<Sharding>& out) {
  auto split = [&](const Sharding& s) {
    std::vector<std::string> axes;
    for (const auto& dim : s.dims()) {
      for (const std::string& a : dim) {
        const int i = mesh.AxisIndex(a);
        if (i >= 0 && mesh.axes()[i].size > 1) axes.push_back(a);
      }
    }
    return axes;
  };
  std::vector<std::vector<std::string>> varying;
  for (const Sharding& s : in) varying.push_back(split(s));
  std::vector<std::vector<std::string>> replicated;
  for (const Sharding& s : out) {
    const std::vector<std::string> used = split(s);
    std::vector<std::string> rest;
    for (const MeshAxis& a : mesh.axes()) {
      if (a.size > 1 && std::find(used.begin(), used.end(), a.name) == used.end()) {
        rest.push_back(a.name);
      }
    }
    replicated.push_back(std::move(rest));
  }
  return ir::CheckReplication(function, varying, replicated);
}

}  // namespace

ShardHosts::ShardHosts(std::vector<HostId> shard_hosts) : by_shard(std::move(shard_hosts)) {
  // Shards lie on hosts in mesh order, so equal hosts mostly stand
  // together: drop runs first, then sort what is left (a tree node per shard
  // cost ~40 us per release of a 2048-device array).
  for (HostId h : by_shard) {
    if (distinct.empty() || distinct.back() != h) distinct.push_back(h);
  }
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  shards_on.resize(distinct.size());
  for (size_t s = 0; s < by_shard.size(); ++s) {
    const auto h = std::lower_bound(distinct.begin(), distinct.end(), by_shard[s]);
    shards_on[h - distinct.begin()].push_back(static_cast<int>(s));
  }
}

ArrayState::~ArrayState() {
  if (released.load()) return;
  // Never release before the producing run reached the hosts.
  std::weak_ptr<ClientCore> weak = core;
  const ArrayId array = id;
  submitted.OnReady([weak, array, hosts = hosts](const absl::StatusOr<Unit>&) {
    if (auto c = weak.lock()) c->QueueRelease(array, *hosts);
  });
}

ClientCore::ClientCore(ClusterConnection* cluster, ClientOptions options, ClientId id)
    : cluster_(cluster), options_(std::move(options)), id_(id) {
  // Set before any thread sees the window.
  run_window_->resume_at = options_.max_unforwarded_runs - options_.max_unforwarded_runs / 4;
}

ClientCore::~ClientCore() { Disconnect(); }

void ClientCore::Start() {
  if (!options_.send_executor) outbox_thread_ = std::thread([this] { OutboxLoop(); });
  control_thread_ = std::thread([this] { ControlLoop(); });
}

absl::Status ClientCore::CheckConnected() const {
  MutexLock lock(&mu_);
  if (!connected_) {
    return absl::FailedPreconditionError(absl::StrCat(id_.ToString(), " is disconnected"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Mesh> ClientCore::AllocateMesh(const MeshRequest& request) {
  CW_RETURN_IF_ERROR(CheckConnected());
  return cluster_->resources()->AllocateMesh(id_, request);
}

Array ClientCore::MakeArray(ArrayId id, const ir::Shape& shape, const Mesh& mesh,
                            const Sharding& sharding, std::shared_ptr<const ShardHosts> hosts,
                            Future<Unit> submitted) {
  auto state = std::make_shared<ArrayState>();
  state->core = shared_from_this();
  state->id = id;
  state->shape = shape;
  state->mesh = mesh;
  state->sharding = sharding;
  state->hosts = std::move(hosts);
  state->submitted = std::move(submitted);
  return Array(std::move(state));
}

Array ClientCore::MakeArray(ArrayId id, const PlanValue& value,
                            std::shared_ptr<const ShardHosts> hosts, Future<Unit> submitted) {
  return MakeArray(id, value.shape, value.mesh, value.sharding, std::move(hosts),
                   std::move(submitted));
}

absl::Status ClientCore::CheckArgument(const Array& array, absl::string_view what) const {
  if (!array.valid()) return absl::InvalidArgumentError(absl::StrCat(what, ": null array"));
  const ArrayState& s = *array.state_;
  if (s.core.get() != this) {
    if (s.core->id() == id_) {
      // Ids count from 0 on each cluster: the same id is a client of another
      // cluster or connection, typically one that this client replaced.
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", s.id.ToString(), " belongs to an earlier ", s.core->id().ToString(),
          " (of another cluster or connection, since replaced), not to this one: put its "
          "value again with this client"));
    }
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.id.ToString(), " belongs to ",
                                                   s.core->id().ToString(), ", not ",
                                                   id_.ToString()));
  }
  if (s.released.load()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", s.id.ToString(), " was released"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DeviceInfo>> ClientCore::CheckPut(const ir::Shape& shape,
                                                             const Mesh& mesh,
                                                             const Sharding& sharding) {
  CW_RETURN_IF_ERROR(CheckConnected());
  CW_RETURN_IF_ERROR(sharding.Validate(shape, mesh));
  const Topology topology = cluster_->resources()->GetTopology();
  const ir::Shape shard_shape = sharding.ShardShape(shape, mesh);
  std::vector<DeviceInfo> devices;
  for (DeviceId d : mesh.devices()) {
    CW_ASSIGN_OR_RETURN(DeviceInfo info, topology.device(d));
    if (shard_shape.byte_size() > info.memory_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "Put: a shard of ", shard_shape.ToString(), " (", shard_shape.byte_size(),
          " bytes) exceeds the whole memory of ", d.ToString(), " (", info.memory_bytes,
          " bytes)"));
    }
    devices.push_back(info);
  }
  return devices;
}

absl::StatusOr<Array> ClientCore::Put(const ir::Literal& value, const Mesh& mesh,
                                      const Sharding& sharding) {
  CW_ASSIGN_OR_RETURN(const std::vector<DeviceInfo> devices,
                      CheckPut(value.shape(), mesh, sharding));
  const ir::Shape shard_shape = sharding.ShardShape(value.shape(), mesh);
  const ArrayId id(NextId(next_array_));
  const std::vector<int64_t> zero(shard_shape.dims.size(), 0);
  for (int s = 0; s < mesh.size(); ++s) {
    std::vector<Range> ranges = sharding.ShardRanges(value.shape(), mesh, s);
    std::vector<int64_t> offset;
    for (const Range& r : ranges) offset.push_back(r.begin);
    ir::Literal shard(shard_shape);
    CopyBox(value.data(), value.shape().dims, offset, shard.data(), shard_shape.dims, zero,
            shard_shape.dims, ir::ByteSize(shard_shape.dtype));
    HostService* host = cluster_->host(devices[s].host);
    if (host == nullptr) {
      return absl::UnavailableError(absl::StrCat(devices[s].host.ToString(), " is gone"));
    }
    CW_RETURN_IF_ERROR(host->PutShard(id, s, devices[s].local_index, id_, std::move(shard)));
  }
  std::vector<HostId> hosts;
  for (const DeviceInfo& d : devices) hosts.push_back(d.host);
  return MakeArray(id, value.shape(), mesh, sharding,
                   std::make_shared<const ShardHosts>(std::move(hosts)),
                   Future<Unit>::Ready(Unit{}));
}

absl::StatusOr<CompiledFunction> ClientCore::Compile(const ir::Function& function,
                                                     const Mesh& mesh,
                                                     const CompileOptions& options) {
  CW_RETURN_IF_ERROR(CheckConnected());
  CW_RETURN_IF_ERROR(ir::Verify(function));
  const std::string where = absl::StrCat("compiling ", function.name(), " for mesh ",
                                         mesh.ToString());
  if (mesh.size() == 0) return absl::InvalidArgumentError(absl::StrCat(where, ": empty mesh"));
  for (const std::string& axis : function.CollectiveAxes()) {
    if (mesh.AxisIndex(axis) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": a collective names mesh axis '", axis, "', which the mesh lacks"));
    }
  }
  auto state = std::make_shared<CompiledState>();
  state->id = next_compiled_++;
  state->client = id_;
  state->function = std::make_shared<const ir::Function>(function);
  state->mesh = mesh;
  state->in_shardings = options.in_shardings;
  state->out_shardings = options.out_shardings;
  if (state->in_shardings.empty()) {
    for (int i = 0; i < function.num_parameters(); ++i) {
      state->in_shardings.push_back(Sharding::Replicated(function.parameter_shape(i).rank()));
    }
  }
  if (state->out_shardings.empty()) {
    for (int i = 0; i < function.num_outputs(); ++i) {
      state->out_shardings.push_back(Sharding::Replicated(function.output_shape(i).rank()));
    }
  }
  if (static_cast<int>(state->in_shardings.size()) != function.num_parameters() ||
      static_cast<int>(state->out_shardings.size()) != function.num_outputs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", state->in_shardings.size(), " input and ", state->out_shardings.size(),
        " output shardings given for ", function.num_parameters(), " parameters and ",
        function.num_outputs(), " results"));
  }
  // Function shapes are per shard; global shapes multiply split dimensions.
  auto global = [&](const ir::Shape& shard, const Sharding& sharding,
                    const std::string& what) -> absl::StatusOr<ir::Shape> {
    if (sharding.rank() != shard.rank()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " has shape ",
                                                     shard.ToString(), " but sharding ",
                                                     sharding.ToString()));
    }
    ir::Shape g = shard;
    for (int d = 0; d < shard.rank(); ++d) {
      for (const std::string& axis : sharding.dims()[d]) {
        const int a = mesh.AxisIndex(axis);
        if (a < 0) break;  // Validate below reports it
        g.dims[d] *= mesh.axes()[a].size;
      }
    }
    CW_RETURN_IF_ERROR(Annotate(sharding.Validate(g, mesh), absl::StrCat(where, ": ", what)));
    return g;
  };
  for (int i = 0; i < function.num_parameters(); ++i) {
    CW_ASSIGN_OR_RETURN(ir::Shape g, global(function.parameter_shape(i), state->in_shardings[i],
                                            absl::StrCat("parameter ", i)));
    state->in_shapes.push_back(std::move(g));
  }
  for (int i = 0; i < function.num_outputs(); ++i) {
    CW_ASSIGN_OR_RETURN(ir::Shape g, global(function.output_shape(i), state->out_shardings[i],
                                            absl::StrCat("result ", i)));
    state->out_shapes.push_back(std::move(g));
  }
  if (options.replication_check == ReplicationCheck::kEnforce) {
    CW_RETURN_IF_ERROR(
        Annotate(CheckReplication(function, mesh, state->in_shardings, state->out_shardings),
                 where));
  }
  // A shard larger than a device's whole memory could never be allocated.
  const Topology topology = cluster_->resources()->GetTopology();
  for (DeviceId d : mesh.devices()) {
    CW_ASSIGN_OR_RETURN(DeviceInfo info, topology.device(d));
    if (state->device_kind.empty()) state->device_kind = info.kind;
    if (info.kind != state->device_kind) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the mesh mixes device kinds (", state->device_kind, " and ", info.kind,
          " on ", d.ToString(), "); a function is compiled for one kind"));
    }
    for (int i = 0; i < function.num_outputs(); ++i) {
      if (function.output_shape(i).byte_size() > info.memory_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            where, ": result ", i, " (", function.output_shape(i).ToString(), ", ",
            function.output_shape(i).byte_size(), " bytes per shard) exceeds the whole memory of ",
            d.ToString(), " (", info.memory_bytes, " bytes)"));
      }
    }
  }
  // No code is made here: the hosts of the mesh compile the function for
  // their devices when a program calling it is registered with them.
  return CompiledFunction(std::move(state));
}

ProgramBuilder ClientCore::NewProgram(std::string name) {
  auto trace = std::make_unique<TraceState>();
  trace->core = shared_from_this();
  trace->name = std::move(name);
  return ProgramBuilder(std::move(trace));
}

absl::StatusOr<std::vector<Array>> ClientCore::Call(const CompiledFunction& function,
                                                    absl::Span<const Array> args) {
  CW_RETURN_IF_ERROR(CheckConnected());
  const CompiledState& f = *function.state_;
  if (args.size() != f.in_shapes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("function ", f.function->name(), " takes ",
                                                   f.in_shapes.size(), " arguments, given ",
                                                   args.size()));
  }
  // The cache key: the function and where each argument lives.
  std::string key = absl::StrCat(f.id);
  for (size_t i = 0; i < args.size(); ++i) {
    CW_RETURN_IF_ERROR(
        CheckArgument(args[i], absl::StrCat("argument ", i, " of ", f.function->name())));
    absl::StrAppend(&key, "|", args[i].mesh().id().value(), args[i].sharding().ToString(),
                    args[i].shape().ToString());
  }
  Program program;
  {
    MutexLock lock(&mu_);
    auto it = call_cache_.find(key);
    if (it != call_cache_.end()) program = it->second;
  }
  if (!program.state_) {
    ProgramBuilder builder = NewProgram(f.function->name());
    std::vector<TracedArray> params;
    for (const Array& a : args) {
      CW_ASSIGN_OR_RETURN(TracedArray p, builder.Parameter(a.shape(), a.mesh(), a.sharding()));
      params.push_back(std::move(p));
    }
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> outs, builder.Call(function, params));
    CW_ASSIGN_OR_RETURN(program, builder.Build(outs));
    MutexLock lock(&mu_);
    call_cache_.emplace(key, program);
  }
  return Run(program.state_, args);
}

absl::Status ClientCore::Submit(const RunRequest& run, const ProgramPlan& plan,
                                std::function<void(const absl::Status&)> forwarded) {
  if (TraceRecorder* trace = cluster_->client_trace(); trace != nullptr && trace->enabled()) {
    trace->Record(TraceEvent{TraceKind::kSubmit, HostId(), DeviceId(), run.run, -1, plan.name,
                             Clock::Real()->NowMicros()});
  }
  return cluster_->SubmitRun(run, plan.islands, std::move(forwarded));
}

absl::Status ClientCore::SetShare(const ClientShare& share) {
  CW_RETURN_IF_ERROR(CheckConnected());
  CW_RETURN_IF_ERROR(CheckClientShare(share));
  return cluster_->SetClientShare(id_, share);
}

absl::StatusOr<std::vector<Array>> ClientCore::Run(
    const std::shared_ptr<const ProgramState>& state, absl::Span<const Array> args) {
  CW_RETURN_IF_ERROR(CheckConnected());
  const ProgramState& program = *state;
  const ProgramPlan& plan = *program.plan;
  if (args.size() != plan.parameters.size()) {
    return absl::InvalidArgumentError(absl::StrCat("program ", plan.name, " takes ",
                                                   plan.parameters.size(),
                                                   " arguments, given ", args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string what = absl::StrCat("argument ", i, " of program ", plan.name);
    CW_RETURN_IF_ERROR(CheckArgument(args[i], what));
    const PlanValue& want = plan.values[plan.parameters[i]];
    if (args[i].shape() != want.shape) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": expected ", want.shape.ToString(),
                                                     ", given ", args[i].shape().ToString()));
    }
    if (!args[i].mesh().SameDevices(want.mesh) ||
        args[i].sharding() != want.sharding) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": expected an array on mesh ", want.mesh.ToString(), " with sharding ",
          want.sharding.ToString(), ", given one on ", args[i].mesh().ToString(), " with ",
          args[i].sharding().ToString()));
    }
  }
  std::vector<ArrayId> output_ids;
  for (size_t k = 0; k < plan.outputs.size(); ++k) output_ids.push_back(ArrayId(NextId(next_array_)));

  std::vector<Array> results;
  if (options_.dispatch == DispatchMode::kParallel) {
    WaitForRunRoom();
    OutboxItem item;
    item.run.program = plan.id;
    item.run.run = RunId(NextId(next_run_));
    item.run.client = id_;
    item.run.time_limit_us = RunTimeLimitUs();
    for (const Array& a : args) item.run.arguments.push_back(a.id());
    item.run.outputs = output_ids;
    item.plan = program.plan;
    item.submitted.resize(plan.outputs.size());
    std::vector<Array> arrays;
    for (size_t k = 0; k < plan.outputs.size(); ++k) {
      arrays.push_back(MakeArray(output_ids[k], plan.values[plan.outputs[k]],
                                 program.value_hosts[plan.outputs[k]],
                                 item.submitted[k].future()));
    }
    for (const OutputSource& o : program.outputs) {
      results.push_back(o.is_parameter ? args[o.index] : arrays[o.index]);
    }
    Post(std::move(item));
    return results;
  }
  std::vector<Promise<Unit>> submitted(plan.outputs.size());
  std::vector<Array> arrays;
  for (size_t k = 0; k < plan.outputs.size(); ++k) {
    arrays.push_back(
        MakeArray(output_ids[k], plan.values[plan.outputs[k]],
                  program.value_hosts[plan.outputs[k]], submitted[k].future()));
  }
  for (const OutputSource& o : program.outputs) {
    results.push_back(o.is_parameter ? args[o.index] : arrays[o.index]);
  }
  RunSequential(state, std::vector<Array>(args.begin(), args.end()), std::move(arrays),
                std::move(submitted));
  return results;
}

}  // namespace causeway::internal
