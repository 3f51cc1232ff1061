#include "causeway/worker/host_executor.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/compile_cache.h"
#include "causeway/backend/device.h"
#include "causeway/base/check.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"
#include "causeway/worker/checkpoint_io.h"

namespace causeway {

absl::StatusOr<std::unique_ptr<HostExecutor>> HostExecutor::Create(
    HostExecutorOptions options) {
  std::vector<std::unique_ptr<backend::Device>> devices;
  for (DeviceInfo& d : options.devices) {
    const std::string where =
        absl::StrCat(d.id.ToString(), " of ", options.host.id.ToString());
    absl::StatusOr<const backend::DeviceKind*> kind = backend::FindDeviceKind(d.kind);
    if (!kind.ok()) return Annotate(kind.status(), where);
    backend::DeviceSpec spec;
    spec.id = d.id;
    spec.local_index = d.local_index;
    spec.memory_bytes = options.device_memory_bytes;
    absl::StatusOr<std::unique_ptr<backend::Device>> device = (*kind)->CreateDevice(spec);
    if (!device.ok()) return Annotate(device.status(), absl::StrCat("making ", where));
    // What the device says it is, for the topology, status and traces.
    d.description = backend::FormatDescription((*device)->description())
                        .substr(0, kMaxDeviceDescription);
    devices.push_back(*std::move(device));
  }
  return std::unique_ptr<HostExecutor>(new HostExecutor(std::move(options), std::move(devices)));
}

HostExecutor::HostExecutor(HostExecutorOptions options,
                           std::vector<std::unique_ptr<backend::Device>> devices)
    : options_(std::move(options)),
      store_(options_.host.id, options_.host.devices, options_.device_memory_bytes,
             std::move(devices)),
      checkpoint_io_(std::make_shared<CheckpointIo>(options_.host.id.ToString(),
                                                    limits::kMaxQueuedCheckpointTasks)) {
  CW_CHECK(options_.trace != nullptr && options_.collectives != nullptr &&
           options_.transport != nullptr);
  CW_CHECK(options_.report_fanout >= 0 && options_.report_fanout <= limits::kMaxReportFanout);
  CW_CHECK(options_.report_fanout == 0 || options_.report_to_parent);
  for (size_t i = 0; i < options_.devices.size(); ++i) {
    const DeviceInfo& d = options_.devices[i];
    if (options_.make_queue) {
      streams_.push_back(options_.make_queue(d));
    } else {
      streams_.push_back(std::make_unique<DeviceStream>(
          d, store_.backend(static_cast<int>(i)), options_.clock, options_.trace,
          options_.fault_injector, options_.input_timeout, options_.device_pool));
    }
    // For kinds that move a collective's bytes between devices themselves.
    if (backend::Device* device = store_.backend(static_cast<int>(i)); device != nullptr) {
      options_.collectives->AttachDevice(d.id, device);
    }
  }
  if (options_.housekeeping_period > absl::ZeroDuration()) {
    housekeeper_ = std::thread([this] {
      while (!stop_housekeeping_.WaitForNotificationWithTimeout(options_.housekeeping_period)) {
        Housekeep(absl::Now());
      }
    });
  }
}

void HostExecutor::Housekeep(absl::Time now) {
  for (int i = 0; i < store_.num_devices(); ++i) {
    const int failed = store_.memory(i)->FailStalledWaiters(now, options_.memory_stall_timeout);
    if (failed > 0) {
      CW_LOG(kWarning) << options_.host.id << ": failed " << failed
                       << " allocations waiting on a full device " << i;
    }
  }
  {
    MutexLock lock(&mu_);
    std::vector<SlotKey> expired;
    for (const auto& [key, early] : early_) {
      if (now - early.arrived > options_.early_piece_ttl) expired.push_back(key);
    }
    for (const SlotKey& key : expired) {
      DropEarlyLocked(key, absl::DeadlineExceededError(absl::StrCat(
                               "pieces for ", key.run.ToString(), " node ", key.node,
                               " arrived but the run did not within ",
                               absl::FormatDuration(options_.early_piece_ttl))));
    }
  }
  options_.collectives->Housekeep(now);
}

int64_t HostExecutor::early_piece_bytes() const {
  MutexLock lock(&mu_);
  return early_bytes_;
}

void HostExecutor::DropEarlyLocked(const SlotKey& key, const absl::Status& why) {
  auto it = early_.find(key);
  if (it != early_.end()) {
    for (const ShardPieceMessage& p : it->second.pieces) {
      early_bytes_ -= p.payload_bytes();
      --early_count_;
    }
    early_.erase(it);
  }
  CW_LOG(kWarning) << options_.host.id << ": dropped early pieces: " << why.message();
  if (dropped_.insert_or_assign(key, why).second) dropped_order_.push_back(key);
  while (dropped_order_.size() > kMaxDropped) {
    dropped_.erase(dropped_order_.front());
    dropped_order_.pop_front();
  }
}

HostExecutor::~HostExecutor() { Shutdown(); }

void HostExecutor::Shutdown() {
  stop_housekeeping_.Notify();
  if (housekeeper_.joinable()) housekeeper_.join();
  {
    MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  // Before the streams stop: a task running may wait on a device's copy.
  checkpoint_io_->Stop();
  store_.Shutdown();
  // Slots never filled (their source is gone or shutting down too) fail
  // before the streams drain, so that no launch waits on them forever.
  std::vector<BufferRef> orphans;
  {
    MutexLock lock(&mu_);
    for (auto& [key, slot] : slots_) orphans.push_back(slot.buffer);
    slots_.clear();
    early_.clear();
    early_bytes_ = 0;
    early_count_ = 0;
  }
  for (const BufferRef& b : orphans) {
    b->SetReady(absl::UnavailableError(
        absl::StrCat(options_.host.id.ToString(), " shut down before a transfer arrived")));
  }
  for (auto& s : streams_) s->Shutdown();
  // No launch runs now: nothing meets on these devices any more.
  for (const DeviceInfo& d : options_.devices) options_.collectives->DetachDevice(d.id);
}

absl::Status HostExecutor::CompileNodes(const ProgramPlan& plan, Registered& reg) {
  reg.executables.resize(plan.nodes.size());
  const int64_t capacity = store_.memory(0)->capacity();
  for (int n : reg.nodes) {
    const PlanNode& node = plan.nodes[n];
    if (node.kind != PlanNodeKind::kCall || (node.inputs.empty() && node.outputs.empty())) {
      continue;
    }
    if (node.function == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan '", plan.name, "': call node ", node.name, " has no function"));
    }
    // Its code must be for the kind of the devices it runs on here.
    const int first = node.outputs.empty() ? node.inputs[0] : node.outputs[0];
    const PlanValue& value = plan.values[first];
    for (int s : reg.local[first]) {
      const DeviceInfo& d = options_.devices[value.shard_local_device[s]];
      if (d.kind != node.device_kind) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan '", plan.name, "': node ", node.name, " is for device kind ",
            node.device_kind.substr(0, 64), ", but ", d.id.ToString(), " of ", id().ToString(),
            " is of kind ", d.kind));
      }
    }
    // Nodes calling one function share its executable, as do the hosts of
    // this process (backend::CompileShared).
    CW_ASSIGN_OR_RETURN(const backend::DeviceKind* kind, backend::FindDeviceKind(node.device_kind));
    absl::StatusOr<std::shared_ptr<const backend::Executable>> exe =
        backend::CompileShared(*kind, node.function);
    if (!exe.ok()) {
      return Annotate(exe.status(), absl::StrCat("plan '", plan.name, "': compiling ", node.name,
                                                 " for ", node.device_kind, " on ",
                                                 id().ToString()));
    }
    // A call that cannot fit on a device even alone would wait for memory
    // forever: refuse it now, naming it.
    int64_t bytes = (*exe)->temporary_bytes();
    for (int v : node.outputs) bytes += plan.values[v].shard_shape.byte_size();
    if (bytes > capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "plan '", plan.name, "': node ", node.name, " needs ", bytes,
          " bytes of device memory for its outputs and temporaries; a device of ",
          id().ToString(), " has ", capacity));
    }
    // Each device it runs on here loads it now (constants uploaded,
    // pipelines made), not inside its first launch.
    for (int s : reg.local[first]) {
      const int local = value.shard_local_device[s];
      backend::Device* device = store_.backend(local);
      if (device == nullptr) continue;
      if (absl::Status loaded = device->Load(**exe); !loaded.ok()) {
        return Annotate(loaded, absl::StrCat("plan '", plan.name, "': loading ", node.name,
                                             " on ", options_.devices[local].id.ToString(),
                                             " of ", id().ToString()));
      }
    }
    reg.executables[n] = *std::move(exe);
  }
  return absl::OkStatus();
}

absl::Status HostExecutor::RegisterProgram(std::shared_ptr<const ProgramPlan> plan) {
  // A plan may come from another process: every shard placed here must name
  // one of this host's devices.
  for (const PlanValue& v : plan->values) {
    for (size_t s = 0; s < v.shard_hosts.size(); ++s) {
      if (v.shard_hosts[s] == id() &&
          (v.shard_local_device[s] < 0 || v.shard_local_device[s] >= num_devices())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan '", plan->name, "' places a shard on local device ", v.shard_local_device[s],
            " of ", id().ToString(), ", which has ", num_devices()));
      }
    }
  }
  auto reg = std::make_shared<Registered>();
  reg->local.resize(plan->values.size());
  for (size_t v = 0; v < plan->values.size(); ++v) {
    const PlanValue& value = plan->values[v];
    for (size_t s = 0; s < value.shard_hosts.size(); ++s) {
      if (value.shard_hosts[s] == id()) reg->local[v].push_back(static_cast<int>(s));
    }
  }
  // A call's launches take shard i of each of its values on this host: its
  // values must all be on its mesh, which lowering guarantees and a plan
  // from elsewhere might not.
  for (const PlanNode& node : plan->nodes) {
    if (node.kind != PlanNodeKind::kCall || (node.inputs.empty() && node.outputs.empty())) {
      continue;
    }
    const int first = node.outputs.empty() ? node.inputs[0] : node.outputs[0];
    for (const std::vector<int>* vs : {&node.inputs, &node.outputs}) {
      for (int v : *vs) {
        if (reg->local[v] != reg->local[first] ||
            plan->values[v].shard_local_device != plan->values[first].shard_local_device) {
          return absl::InvalidArgumentError(absl::StrCat(
              "plan '", plan->name, "': node ", node.name,
              " has values on different meshes; a call's values share its mesh"));
        }
      }
    }
  }
  for (size_t n = 0; n < plan->nodes.size(); ++n) {
    const PlanNode& node = plan->nodes[n];
    bool here = false;
    if (node.kind == PlanNodeKind::kCall) {
      here = !(node.inputs.empty() && node.outputs.empty()) &&
             !reg->local[node.outputs.empty() ? node.inputs[0] : node.outputs[0]].empty();
    } else {
      here = !reg->local[node.outputs[0]].empty();
      const PlanValue& src = plan->values[node.inputs[0]];
      for (size_t d = 0; d < node.pieces.size() && !here; ++d) {
        for (const ReshardPiece& piece : node.pieces[d]) {
          if (src.shard_hosts[piece.src_shard] == id()) {
            here = true;
            break;
          }
        }
      }
    }
    if (here) reg->nodes.push_back(static_cast<int>(n));
  }
  CW_RETURN_IF_ERROR(CompileNodes(*plan, *reg));
  if (options_.report_fanout > 0) {
    for (const std::vector<HostId>& island : plan->hosts_by_island) {
      ReportTreeNode node = ReportTreeOf(island, id(), options_.report_fanout);
      if (!node.member) continue;
      reg->tree = std::move(node);
      break;
    }
  }
  reg->plan = std::move(plan);
  MutexLock lock(&mu_);
  programs_[reg->plan->id] = std::move(reg);
  return absl::OkStatus();
}

int HostExecutor::LocalIndex(const Registered& r, int v, int shard) {
  const std::vector<int>& local = r.local[v];
  auto it = std::lower_bound(local.begin(), local.end(), shard);
  return it != local.end() && *it == shard ? static_cast<int>(it - local.begin()) : -1;
}

void HostExecutor::UnregisterProgram(ProgramId program) {
  {
    MutexLock lock(&mu_);
    programs_.erase(program);
  }
  MutexLock lock(&report_mu_);
  absl::erase_if(gathering_, [program](const auto& entry) {
    return entry.second.program->plan->id == program;
  });
}

Future<std::vector<DeviceCounters>> HostExecutor::GetCounters(bool reset) {
  std::vector<DeviceCounters> out;
  for (int i = 0; i < num_devices(); ++i) {
    DeviceCounters c = streams_[i]->stats();
    if (reset) streams_[i]->ResetStats();
    c.device = options_.devices[i].id;
    c.memory_in_use = store_.memory(i)->in_use();
    c.memory_peak = store_.memory(i)->peak();
    out.push_back(std::move(c));
  }
  return Future<std::vector<DeviceCounters>>::Ready(std::move(out));
}

std::vector<std::vector<ClientUsage>> HostExecutor::ClientUsageByDevice() {
  const std::vector<absl::flat_hash_map<ClientId, int64_t>> shards = store_.ShardsByOwner();
  std::vector<std::vector<ClientUsage>> out(static_cast<size_t>(num_devices()));
  for (int i = 0; i < num_devices(); ++i) {
    absl::flat_hash_map<ClientId, ClientUsage> by_client;
    for (const DeviceMemory::OwnerUsage& u : store_.memory(i)->Usage()) {
      ClientUsage& cu = by_client[u.owner];
      cu.memory_bytes = u.in_use;
      cu.waiting_bytes = u.waiting;
    }
    for (const auto& [client, n] : shards[i]) by_client[client].arrays = n;
    for (auto& [client, cu] : by_client) {
      cu.client = client;
      out[i].push_back(cu);
    }
    std::sort(out[i].begin(), out[i].end(),
              [](const ClientUsage& a, const ClientUsage& b) { return a.client < b.client; });
  }
  return out;
}

void HostExecutor::EnqueueRun(const RunRequest& run) {
  std::vector<std::vector<Launch>> launches(streams_.size());
  PrepareAndTrack(run, launches);
  Dispatch(launches);
}

void HostExecutor::EnqueueRuns(const std::vector<RunRequest>& runs) {
  std::vector<std::vector<Launch>> launches(streams_.size());
  for (const RunRequest& run : runs) PrepareAndTrack(run, launches);
  Dispatch(launches);
}

void HostExecutor::PrepareAndTrack(const RunRequest& run,
                                   std::vector<std::vector<Launch>>& launches) {
  if (!options_.on_run_done) {
    PrepareRun(run, launches);
    return;
  }
  std::vector<size_t> before(launches.size());
  for (size_t d = 0; d < launches.size(); ++d) before[d] = launches[d].size();
  std::shared_ptr<const Registered> program = PrepareRun(run, launches);
  int added = 0;
  for (size_t d = 0; d < launches.size(); ++d) added += static_cast<int>(launches[d].size() - before[d]);
  const HostId self = options_.host.id;
  // In a report tree, this host's part is gathered with its children's.
  std::shared_ptr<const Registered> tree =
      program != nullptr && program->in_tree() ? std::move(program) : nullptr;
  const RunId id = run.run;
  if (added == 0) {
    if (tree != nullptr) {
      Gather(tree, id, 0, 0, 0);
    } else {
      options_.on_run_done(self, id, 0, 0);
    }
    return;
  }
  // The last launch to finish reports the run's total.
  auto tally = std::make_shared<RunTally>(
      added, [this, self, id, tree = std::move(tree)](int64_t busy_us, int launches) {
        if (tree != nullptr) {
          Gather(tree, id, 0, busy_us, launches);
        } else {
          options_.on_run_done(self, id, busy_us, launches);
        }
      });
  for (size_t d = 0; d < launches.size(); ++d) {
    for (size_t i = before[d]; i < launches[d].size(); ++i) {
      Launch& launch = launches[d][i];
      launch.tally = tally;
      // The tally keeps the plan alive for every launch of the run.
      if (tally->keep_alive == nullptr) tally->keep_alive = std::move(launch.keep_alive);
      launch.keep_alive.reset();
    }
  }
}

void HostExecutor::Dispatch(std::vector<std::vector<Launch>>& launches) {
  for (size_t d = 0; d < launches.size(); ++d) {
    if (launches[d].size() == 1) {
      streams_[d]->Enqueue(std::move(launches[d][0]));
    } else if (!launches[d].empty()) {
      streams_[d]->EnqueueBatch(std::move(launches[d]));
    }
  }
}

std::shared_ptr<const HostExecutor::Registered> HostExecutor::PrepareRun(
    const RunRequest& run, std::vector<std::vector<Launch>>& launches) {
  std::shared_ptr<const Registered> reg;
  std::shared_ptr<const ProgramPlan> plan;
  {
    MutexLock lock(&mu_);
    auto it = programs_.find(run.program);
    if (it != programs_.end()) {
      reg = it->second;
      plan = reg->plan;
    }
    if (shut_down_) plan = nullptr;
  }
  if (plan == nullptr) {
    CW_LOG(kError) << options_.host.id << ": run " << run.run << " of unregistered "
                   << run.program << " or after shutdown; dropped";
    return nullptr;
  }
  const HostId self = options_.host.id;
  if (run.arguments.size() != plan->parameters.size() ||
      run.outputs.size() != plan->outputs.size()) {
    const absl::Status refused = absl::InvalidArgumentError(absl::StrCat(
        run.run.ToString(), " of ", plan->name, " has ", run.arguments.size(), " arguments and ",
        run.outputs.size(), " outputs; the program takes ", plan->parameters.size(),
        " and returns ", plan->outputs.size()));
    CW_LOG(kError) << self << ": refused " << refused;
    // Where the outputs can be named, they carry the error to whoever
    // fetches them.
    if (run.outputs.size() == plan->outputs.size()) {
      for (size_t k = 0; k < plan->outputs.size(); ++k) {
        const PlanValue& value = plan->values[plan->outputs[k]];
        for (int s = 0; s < value.mesh.size(); ++s) {
          if (value.shard_hosts[s] != self) continue;
          store_.Put(ShardKey{run.outputs[k], s},
                     DeviceBuffer::Failed(value.shard_shape, run.client, refused))
              .IgnoreError();
        }
      }
    }
    // Hosts waiting for this host's pieces of the run learn why none come.
    for (size_t n = 0; n < plan->nodes.size(); ++n) {
      const PlanNode& node = plan->nodes[n];
      if (node.kind != PlanNodeKind::kReshard) continue;
      const PlanValue& src = plan->values[node.inputs[0]];
      const PlanValue& dst = plan->values[node.outputs[0]];
      for (int d = 0; d < dst.mesh.size(); ++d) {
        if (dst.shard_hosts[d] == self) continue;
        for (size_t i = 0; i < node.pieces[d].size(); ++i) {
          if (src.shard_hosts[node.pieces[d][i].src_shard] != self) continue;
          options_.transport->SendPiece(
              self, dst.shard_hosts[d],
              ShardPieceMessage{run.run, static_cast<int>(n), d, static_cast<int>(i), refused, {}});
        }
      }
    }
    return reg;
  }
  // values[v][i]: this host's shard reg->local[v][i] of value v.
  RunValues values(plan->values.size());
  for (size_t v = 0; v < plan->values.size(); ++v) values[v].resize(reg->local[v].size());
  for (size_t k = 0; k < plan->parameters.size(); ++k) {
    const int v = plan->parameters[k];
    const PlanValue& value = plan->values[v];
    for (size_t i = 0; i < reg->local[v].size(); ++i) {
      const int s = reg->local[v][i];
      absl::StatusOr<BufferRef> buffer = store_.Get(ShardKey{run.arguments[k], s});
      // A shard of another shape (a run naming the wrong array) would be
      // read past its end by the kernels: the argument fails instead.
      if (buffer.ok() && (*buffer)->shape() != value.shard_shape) {
        buffer = absl::InvalidArgumentError(absl::StrCat(
            run.arguments[k].ToString(), " shard ", s, " is ", (*buffer)->shape().ToString(),
            "; the program takes ", value.shard_shape.ToString()));
      }
      values[v][i] = buffer.ok()
                         ? *buffer
                         : DeviceBuffer::Failed(value.shard_shape, run.client,
                                                Annotate(buffer.status(),
                                                         absl::StrCat("argument ", k, " of ",
                                                                      run.run.ToString())));
    }
  }
  const std::shared_ptr<const std::atomic<bool>> cancel = cancellations_.FlagOf(run.client);
  for (const int n : reg->nodes) {
    if (plan->nodes[n].kind == PlanNodeKind::kCall) {
      EnqueueCall(run, reg, n, values, launches, cancel);
    } else {
      EnqueueReshard(run, *reg, n, values);
    }
  }
  for (size_t k = 0; k < plan->outputs.size(); ++k) {
    const int v = plan->outputs[k];
    for (size_t i = 0; i < values[v].size(); ++i) {
      if (values[v][i] == nullptr) continue;
      absl::Status put = store_.Put(ShardKey{run.outputs[k], reg->local[v][i]}, values[v][i]);
      if (!put.ok()) CW_LOG(kError) << put;
    }
  }
  return reg;
}

void HostExecutor::EnqueueCall(const RunRequest& run, const std::shared_ptr<const Registered>& code,
                               int node_index, RunValues& values,
                               std::vector<std::vector<Launch>>& launches,
                               const std::shared_ptr<const std::atomic<bool>>& cancel) {
  const Registered& reg = *code;
  const std::shared_ptr<const ProgramPlan>& plan = reg.plan;
  const PlanNode& node = plan->nodes[node_index];
  const int first = node.outputs.empty() ? node.inputs[0] : node.outputs[0];
  const PlanValue& first_in = plan->values[first];
  const Mesh& mesh = first_in.mesh;
  // Every value of the call has the same shards here (RegisterProgram).
  const std::vector<int>& here = reg.local[first];
  for (size_t i = 0; i < here.size(); ++i) {
    const int s = here[i];
    const int local = first_in.shard_local_device[s];
    Launch launch;
    launch.info = LaunchInfo{run.run, node_index, node.name, options_.devices[local].id,
                             options_.host.id};
    launch.owner = run.client;
    launch.cancel = cancel;
    launch.time_limit_us = run.time_limit_us;
    // `node.name` and `mesh` live in the plan, and the executable with it.
    launch.keep_alive = code;
    launch.executable = reg.executables[node_index].get();
    launch.inputs.reserve(node.inputs.size());
    launch.outputs.reserve(node.outputs.size());
    for (int v : node.inputs) launch.inputs.push_back(values[v][i]);
    for (int v : node.outputs) {
      BufferRef out = store_.Allocate(local, plan->values[v].shard_shape, run.client);
      values[v][i] = out;
      launch.outputs.push_back(std::move(out));
    }
    if (const int64_t temporaries = launch.executable->temporary_bytes(); temporaries > 0) {
      DeviceMemory* memory = store_.memory(local);
      if (memory->TryReserve(temporaries, run.client)) {
        launch.scratch_hold = MemoryHold(memory, temporaries, run.client);
      } else {
        launch.scratch = DeviceBuffer::Reservation(memory, temporaries, run.client);
      }
    }
    if (node.has_collectives) {
      auto hub = std::make_unique<HubCollectives>(options_.collectives, run.run, node_index,
                                                  &mesh, s, node.name);
      HubCollectives* raw = hub.get();
      launch.on_failure = [raw](const absl::Status& status) { raw->AbortGang(status); };
      launch.collectives = std::move(hub);
    }
    launches[local].push_back(std::move(launch));
  }
}


void HostExecutor::Gather(const std::shared_ptr<const Registered>& program, RunId run, int part,
                          int64_t device_us, int launches) {
  const uint64_t bit = uint64_t{1} << part;
  SubtreeReport up;
  {
    MutexLock lock(&report_mu_);
    auto it = gathering_.find(run);
    if (it == gathering_.end()) {
      // Only this host's own part may open a run beyond the bound: a
      // child's report past it is dropped, and its run is accounted without
      // it when the child is lost or the client leaves.
      if (part != 0 && gathering_.size() >= limits::kMaxPendingReports) return;
      Gathering g;
      g.program = program;
      {
        // A program's runs are gathered while it is registered: once it is
        // not, nobody waits for them (its client left, and the island
        // schedulers dropped its runs in flight). Children lost before the
        // run count as in from the start (read under report_mu_, which
        // PeerLost holds while it marks a peer lost and counts it in every
        // run gathering here).
        MutexLock programs_lock(&mu_);
        auto p = programs_.find(program->plan->id);
        if (p == programs_.end() || p->second != program) return;
        const std::vector<HostId>& children = program->tree.children;
        for (size_t i = 0; i < children.size() && !lost_peers_.empty(); ++i) {
          if (lost_peers_.contains(children[i])) g.in |= uint64_t{1} << (i + 1);
        }
      }
      it = gathering_.emplace(run, std::move(g)).first;
    }
    Gathering& g = it->second;
    // Another program's run of the same id, a part already in, or a lost
    // child's late report.
    if (g.program != program || (g.in & bit) != 0) return;
    g.in |= bit;
    g.device_us += std::clamp<int64_t>(device_us, 0, int64_t{1} << 40);
    g.launches += std::clamp(launches, 0, 1 << 20);
    if (!g.complete()) return;
    up = SubtreeReport{id(), program->plan->id, run, g.device_us, g.launches};
    gathering_.erase(it);
  }
  ReportUp(*program, up);
}

void HostExecutor::ReportUp(const Registered& program, const SubtreeReport& report) {
  if (!program.tree.parent.valid()) {
    options_.on_run_done(id(), report.run, report.device_us, report.launches);
  } else {
    options_.report_to_parent(program.tree.parent, report);
  }
}

void HostExecutor::ChildReported(const SubtreeReport& report) {
  std::shared_ptr<const Registered> program;
  {
    MutexLock lock(&mu_);
    auto it = programs_.find(report.program);
    if (it == programs_.end()) return;
    program = it->second;
  }
  const std::vector<HostId>& children = program->tree.children;
  const auto child = std::find(children.begin(), children.end(), report.child);
  if (child == children.end()) return;
  Gather(program, report.run, 1 + static_cast<int>(child - children.begin()), report.device_us,
         report.launches);
}

size_t HostExecutor::pending_reports() const {
  MutexLock lock(&report_mu_);
  return gathering_.size();
}

absl::Status HostExecutor::PutShard(ArrayId array, int shard, int local_device, ClientId owner,
                                    ir::Literal value) {
  if (local_device < 0 || local_device >= num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("no local device ", local_device, " on ",
                                                   options_.host.id.ToString()));
  }
  // A shard the device cannot hold even empty is refused here, at the put,
  // not by the first read of an array that never became ready.
  const int64_t capacity = store_.memory(local_device)->capacity();
  if (static_cast<int64_t>(value.byte_size()) > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "put refused: a shard of ", value.shape().ToString(), " (", value.byte_size(),
        " bytes) exceeds the whole memory of local device ", local_device, " on ",
        options_.host.id.ToString(), " (", capacity, " bytes)"));
  }
  BufferRef buffer = store_.Allocate(local_device, value.shape(), owner);
  CW_RETURN_IF_ERROR(store_.Put(ShardKey{array, shard}, buffer));
  auto literal = std::make_shared<ir::Literal>(std::move(value));
  // Weak: an array released before its memory is granted must be able to
  // die (withdrawing its reservation) rather than be kept by this callback.
  std::weak_ptr<DeviceBuffer> weak = buffer;
  buffer->allocated().OnReady([weak, literal](const absl::StatusOr<Unit>& alloc) {
    BufferRef b = weak.lock();
    if (b == nullptr) return;
    if (!alloc.ok()) {
      b->SetReady(alloc.status());
      return;
    }
    absl::StatusOr<backend::DeviceAllocation*> storage = b->storage();
    if (!storage.ok()) {
      b->SetReady(storage.status());
      return;
    }
    const int64_t n = literal->byte_size();
    // The copy holds the buffer and the value until it completed.
    b->backend()->CopyIn(literal->data(), **storage, backend::BoxCopy::Flat(0, n, 0, n, n),
                         [b, literal](absl::Status status) { b->SetReady(status); });
  });
  return absl::OkStatus();
}

Future<ir::Literal> HostExecutor::FetchShard(ArrayId array, int shard) {
  absl::StatusOr<BufferRef> buffer = store_.Get(ShardKey{array, shard});
  if (!buffer.ok()) return Future<ir::Literal>::Ready(buffer.status());
  BufferRef b = *buffer;
  Promise<ir::Literal> fetched;
  b->ready().OnReady([b, fetched](const absl::StatusOr<Unit>& ready) {
    if (!ready.ok()) {
      fetched.Set(ready.status());
      return;
    }
    absl::StatusOr<backend::DeviceAllocation*> storage = b->storage();
    if (!storage.ok()) {
      fetched.Set(storage.status());
      return;
    }
    auto out = std::make_shared<ir::Literal>(b->shape());
    const int64_t n = out->byte_size();
    b->backend()->CopyOut(**storage, out->data(), backend::BoxCopy::Flat(0, n, 0, n, n),
                          [b, out, fetched](absl::Status status) {
                            if (status.ok()) {
                              fetched.Set(std::move(*out));
                            } else {
                              fetched.Set(status);
                            }
                          });
  });
  return fetched.future();
}

Future<Unit> HostExecutor::AwaitShard(ArrayId array, int shard) {
  absl::StatusOr<BufferRef> buffer = store_.Get(ShardKey{array, shard});
  if (!buffer.ok()) return Future<Unit>::Ready(buffer.status());
  return (*buffer)->ready();
}

void HostExecutor::ReleaseArrays(absl::Span<const ArrayId> arrays) { store_.Release(arrays); }

void HostExecutor::ReleaseOwner(ClientId owner) {
  // Its work first: what runs ends at its next check, what is queued fails
  // (its gangs' peers with it), and then its memory goes.
  // (What is cancelled fails its runs' outputs, which say so; a client
  // leaving with work queued is ordinary, so nothing is logged.)
  if (cancellations_.Cancel(owner)) {
    for (auto& s : streams_) s->CancelOwner(owner);
  }
  store_.ReleaseOwner(owner);
  SetMemoryQuota(owner, 0);
}

void HostExecutor::SetMemoryQuota(ClientId owner, int64_t bytes) {
  for (int i = 0; i < store_.num_devices(); ++i) store_.memory(i)->SetQuota(owner, bytes);
}

}  // namespace causeway
