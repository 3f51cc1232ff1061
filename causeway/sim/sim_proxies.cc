#include "causeway/sim/sim_internal.h"

namespace causeway::sim {

// What the scheduler of an island sees as a host: every call reaches the
// real executor; runs arrive as a message on the host's thread.
class SimCluster::HostProxy final : public HostService {
 public:
  // `from_scheduler`: the proxy the island's scheduler calls (its messages
  // leave from the scheduler's thread); otherwise the client's.
  HostProxy(SimCluster* c, HostId id, bool from_scheduler)
      : c_(c), id_(id), from_scheduler_(from_scheduler) {}
  HostId id() const override { return id_; }
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
    c_->NotePlan(*plan);
    return exec()->RegisterProgram(std::move(plan));
  }
  void UnregisterProgram(ProgramId program) override { exec()->UnregisterProgram(program); }
  void EnqueueRun(const RunRequest& run) override { EnqueueRuns({run}); }
  void EnqueueRuns(const std::vector<RunRequest>& runs) override {
    Bookkeeping bookkeeping(c_);
    c_->NoteRuns(runs);
    const HostCosts& h = c_->costs().host;
    int launches = 0;
    for (const RunRequest& r : runs) launches += c_->LaunchesOn(r, id_);
    const double us = h.host_run_us * static_cast<double>(runs.size()) + h.host_launch_us * launches;
    c_->Message(sender(), c_->host_threads_[id_.value()], Ns(us), [this, runs, launches] {
      if (!c_->options_.profile_cpu) {
        exec()->EnqueueRuns(runs);
        return;
      }
      CpuProfile::Kind k;
      c_->Profiled(&k, [&] { exec()->EnqueueRuns(runs); });
      c_->profile_.host_batches.push_back(
          CpuProfile::HostBatch{static_cast<int>(runs.size()), launches, k.ns});
    });
  }
  absl::Status PutShard(ArrayId array, int shard, int local_device, ClientId owner,
                        ir::Literal value) override {
    return exec()->PutShard(array, shard, local_device, owner, std::move(value));
  }
  // A client's reads and releases travel as messages behind the runs sent
  // to the host before them, as on a worker's control stream.
  Future<ir::Literal> FetchShard(ArrayId array, int shard) override {
    return Later<ir::Literal>([=, this] { return exec()->FetchShard(array, shard); });
  }
  Future<Unit> AwaitShard(ArrayId array, int shard) override {
    return Later<Unit>([=, this] { return exec()->AwaitShard(array, shard); });
  }
  Future<Unit> AwaitShards(ArrayId array, const std::vector<int>& shards) override {
    return Later<Unit>([=, this] { return exec()->AwaitShards(array, shards); });
  }
  void ReleaseArrays(absl::Span<const ArrayId> arrays) override {
    FromClient([this, ids = std::vector<ArrayId>(arrays.begin(), arrays.end())] {
      exec()->ReleaseArrays(ids);
    });
  }
  void ReleaseOwner(ClientId owner) override {
    FromClient([this, owner] { exec()->ReleaseOwner(owner); });
  }
  void SetMemoryQuota(ClientId owner, int64_t bytes) override {
    exec()->SetMemoryQuota(owner, bytes);
  }
  void DeliverPiece(ShardPieceMessage piece) override { exec()->DeliverPiece(std::move(piece)); }
  Future<std::vector<DeviceCounters>> GetCounters(bool reset) override {
    return exec()->GetCounters(reset);
  }

 private:
  HostExecutor* exec() { return c_->hosts_[id_.value()].get(); }
  SimThread* sender() {
    return from_scheduler_ ? c_->scheduler_threads_[c_->host_island_[id_.value()].value()]
                           : c_->client_sender_;
  }
  // From the scheduler: one message. From the client: through the
  // coordinator (the island's scheduler thread), as a client of a
  // distributed cluster reaches a worker only through the coordinator; so
  // it arrives after every run the scheduler forwarded to the host before.
  void FromClient(std::function<void()> then) {
    Bookkeeping bookkeeping(c_);
    SimThread* host = c_->host_threads_[id_.value()];
    if (from_scheduler_) {
      c_->Message(sender(), host, 0, std::move(then));
      return;
    }
    SimThread* relay = c_->scheduler_threads_[c_->host_island_[id_.value()].value()];
    c_->Message(sender(), relay, 0, [this, relay, host, then = std::move(then)]() mutable {
      c_->Message(relay, host, 0, std::move(then));
    });
  }
  template <typename T>
  Future<T> Later(std::function<Future<T>()> call) {
    Bookkeeping bookkeeping(c_);
    Promise<T> result;
    FromClient([result, call = std::move(call)] {
      call().OnReady([result](const absl::StatusOr<T>& v) mutable { result.Set(v); });
    });
    return result.future();
  }
  SimCluster* const c_;
  const HostId id_;
  const bool from_scheduler_;
};

// What the client sees as an island's scheduler: runs are checked at once
// (as the real one refuses them at once) and arrive as a message on the
// scheduler's thread.
class SimCluster::SchedulerProxy final : public SchedulerService {
 public:
  SchedulerProxy(SimCluster* c, IslandId island) : c_(c), island_(island) {}
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
    c_->NotePlan(*plan);
    return real()->RegisterProgram(std::move(plan));
  }
  void UnregisterProgram(ProgramId program) override { real()->UnregisterProgram(program); }
  absl::Status SubmitRun(RunRequest run) override {
    std::vector<RunRequest> runs;
    runs.push_back(std::move(run));
    return SubmitRuns(std::move(runs), nullptr).front();
  }
  std::vector<absl::Status> SubmitRuns(std::vector<RunRequest> runs,
                                       RunsForwarded forwarded) override {
    std::vector<absl::Status> statuses;
    std::vector<RunRequest> accepted;
    std::vector<size_t> index;
    for (size_t i = 0; i < runs.size(); ++i) {
      statuses.push_back(real()->CheckRun(runs[i]));
      if (statuses.back().ok()) {
        accepted.push_back(std::move(runs[i]));
        index.push_back(i);
      }
    }
    if (accepted.empty()) return statuses;
    Bookkeeping bookkeeping(c_);
    const double us = c_->costs().host.scheduler_run_us * static_cast<double>(accepted.size());
    SimThread* sender = c_->SenderOf(accepted.front().client);
    c_->Message(sender, c_->scheduler_threads_[island_.value()], Ns(us),
                [this, accepted = std::move(accepted), index = std::move(index),
                 forwarded = std::move(forwarded)]() mutable {
                  RunsForwarded told;
                  if (forwarded) {
                    told = [index, forwarded](size_t i, const absl::Status& s) {
                      forwarded(index[i], s);
                    };
                  }
                  std::vector<absl::Status> late;
                  c_->Profiled(&c_->profile_.scheduler, [&] {
                    late = real()->SubmitRuns(std::move(accepted), told);
                  });
                  for (size_t i = 0; i < late.size(); ++i) {
                    if (!late[i].ok() && forwarded) forwarded(index[i], late[i]);
                  }
                });
    return statuses;
  }

 private:
  IslandScheduler* real() { return c_->schedulers_[island_.value()]; }
  SimCluster* const c_;
  const IslandId island_;
};

// Reshard pieces between hosts: CPU at each end, the link's latency and
// bandwidth (ICI within an island, DCN between islands).
class SimCluster::Transport final : public DataTransport {
 public:
  explicit Transport(SimCluster* c) : c_(c) {}
  void SendPiece(HostId from, HostId to, ShardPieceMessage piece) override {
    Bookkeeping bookkeeping(c_);
    const SimCosts& costs = c_->costs();
    const bool same_island = c_->host_island_[from.value()] == c_->host_island_[to.value()];
    const LinkCosts& link = same_island ? costs.ici : costs.dcn;
    const int64_t cpu = Ns(costs.host.transfer_us);
    SimThread* sender = c_->host_threads_[from.value()];
    const int64_t sent = sender->Run(c_->loop_.now(), cpu);
    const int64_t wire = from == to ? 0
                                    : Ns(link.latency_us + static_cast<double>(piece.payload_bytes()) /
                                                               (link.gbytes_per_s * 1e3));
    ++c_->counters_.messages;
    auto shared = std::make_shared<ShardPieceMessage>(std::move(piece));
    c_->loop_.At(sent + wire, [this, to, cpu, shared] {
      const int64_t end = c_->host_threads_[to.value()]->Run(c_->loop_.now(), cpu);
      c_->loop_.At(end, [this, to, shared] {
        c_->hosts_[to.value()]->DeliverPiece(std::move(*shared));
      });
    });
  }

 private:
  SimCluster* const c_;
};

absl::StatusOr<std::unique_ptr<SimCluster>> SimCluster::Create(const SimClusterOptions& o) {
  if (o.islands < 1 || o.hosts_per_island < 1 || o.devices_per_host < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a simulated cluster needs at least one island, host and device; given ", o.islands,
        " islands x ", o.hosts_per_island, " hosts x ", o.devices_per_host, " devices"));
  }
  const int64_t devices = int64_t{o.islands} * o.hosts_per_island * o.devices_per_host;
  if (devices > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most 65536 simulated devices; asked for ", devices));
  }
  if (o.cores < 0 || o.client_cores < 0 || o.coordinator_cores < 0) {
    return absl::InvalidArgumentError("core counts must be >= 0");
  }
  CW_RETURN_IF_ERROR(CheckReportFanout(o.report_fanout));
  // The hosts compile their plans for the devices' kind.
  backend::RegisterBuiltinKinds();
  CW_RETURN_IF_ERROR(backend::FindDeviceKind(o.device_kind).status());
  auto c = std::unique_ptr<SimCluster>(new SimCluster(o));
  c->Build();
  return c;
}

SimCluster::SimCluster(const SimClusterOptions& options) : options_(options) {}

void SimCluster::Build() {
  const SimClusterOptions& o = options_;
  auto machine = [this](int cores) {
    machines_.push_back(std::make_unique<SimMachine>(cores, &loop_));
    return machines_.back().get();
  };
  auto thread = [this](SimMachine* m) {
    threads_.push_back(std::make_unique<SimThread>(m));
    return threads_.back().get();
  };
  SimMachine* shared = o.one_machine ? machine(o.cores) : nullptr;
  // Apart from the embedded case, the client and the coordinator (the
  // schedulers) have machines of their own, with a core per thread.
  SimMachine* client_machine = shared != nullptr ? shared : machine(o.client_cores);
  client_machine_ = client_machine;
  client_thread_ = thread(client_machine);
  client_sender_ = thread(client_machine);
  client_slots_.emplace_back(client_thread_, client_sender_);
  SimMachine* coordinator = shared != nullptr ? shared : machine(o.coordinator_cores);
  trace_ = std::make_unique<TraceRecorder>(false);
  hub_ = std::make_unique<CollectiveHub>(absl::Minutes(5));
  transport_ = std::make_unique<Transport>(this);
  const std::string& kind = o.device_kind;
  Topology topology;
  int64_t next_device = 0;
  int64_t next_host = 0;
  for (int i = 0; i < o.islands; ++i) {
    topology.AddIsland(IslandId(i));
    for (int h = 0; h < o.hosts_per_island; ++h) {
      const HostId host(next_host++);
      topology.AddHost(host, IslandId(i));
      for (int d = 0; d < o.devices_per_host; ++d) {
        topology.AddDevice(DeviceId(next_device++), host, o.device_memory_bytes, kind);
      }
    }
  }
  for (IslandId island : topology.islands()) {
    scheduler_threads_.push_back(thread(coordinator));
    const IslandInfo info = *topology.island(island);
    for (HostId host : info.hosts) {
      SimMachine* m = shared != nullptr ? shared : machine(o.cores);
      host_threads_.push_back(thread(m));
      host_island_.push_back(island);
      HostExecutorOptions ho;
      ho.host = *topology.host(host);
      for (DeviceId d : ho.host.devices) ho.devices.push_back(*topology.device(d));
      ho.device_memory_bytes = o.device_memory_bytes;
      ho.clock = loop_.clock();
      ho.trace = trace_.get();
      ho.collectives = hub_.get();
      ho.transport = transport_.get();
      ho.housekeeping_period = absl::ZeroDuration();
      ho.on_run_done = [this, host, island](HostId, RunId run, int64_t device_us, int launches) {
        // A report to the island's scheduler.
        Bookkeeping bookkeeping(this);
        Message(host_threads_[host.value()], scheduler_threads_[island.value()],
                Ns(costs().host.scheduler_report_us),
                [this, host, island, run, device_us, launches] {
                  Profiled(&profile_.scheduler_report, [&] {
                    schedulers_[island.value()]->RunFinished(host, run, device_us, launches);
                  });
                });
        NoteReported(run);
      };
      ho.report_fanout = o.report_fanout;
      ho.report_to_parent = [this, host](HostId parent, const SubtreeReport& report) {
        // A report to the parent host, which gathers it with its own
        // (the same work for it as a report is for the scheduler).
        Bookkeeping bookkeeping(this);
        Message(host_threads_[host.value()], host_threads_[parent.value()],
                Ns(costs().host.scheduler_report_us), [this, parent, report] {
                  Profiled(&profile_.host_report,
                           [&] { hosts_[parent.value()]->ChildReported(report); });
                });
        NoteReported(report.run);
      };
      ho.make_queue = [this, m, thread](const DeviceInfo& d) -> std::unique_ptr<LaunchQueue> {
        m->AddDeviceThread();
        auto device = std::make_unique<SimDevice>(d, this, thread(m));
        devices_.push_back(device.get());
        return device;
      };
      absl::StatusOr<std::unique_ptr<HostExecutor>> executor =
          HostExecutor::Create(std::move(ho));
      CW_CHECK_OK(executor.status());  // the cpu kind, registered above, makes every device
      hosts_.push_back(*std::move(executor));
      host_proxies_.push_back(std::make_unique<HostProxy>(this, host, false));
      scheduler_host_proxies_.push_back(std::make_unique<HostProxy>(this, host, true));
    }
    scheduler_proxies_.push_back(std::make_unique<SchedulerProxy>(this, island));
  }
  ControlPlaneOptions co;
  co.scheduler.policy = o.scheduling;
  co.scheduler.run_ahead = o.run_ahead;
  co.scheduler.deliver_on_own_thread = false;
  co.scheduler.on_run_accounted = o.on_run_accounted;
  co.scheduler.report_fanout = o.report_fanout;
  co.scheduler.clock = loop_.clock();
  // The island's own hosts, as a scheduler's messages reach them.
  co.host_lookup = [this](IslandId island, HostId h) -> HostService* {
    if (h.value() < 0 || h.value() >= static_cast<int64_t>(scheduler_host_proxies_.size()) ||
        host_island_[h.value()] != island) {
      return nullptr;
    }
    return scheduler_host_proxies_[h.value()].get();
  };
  co.for_each_host = [this](const std::function<void(HostService&)>& apply) {
    for (auto& h : hosts_) apply(*h);
  };
  control_ = std::make_unique<ControlPlane>(std::move(topology), std::move(co));
  for (const auto& [island, scheduler] : control_->schedulers()) schedulers_.push_back(scheduler);
}

// The client reaches schedulers and hosts through their proxies.
SchedulerService* SimCluster::scheduler(IslandId island) {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(scheduler_proxies_.size())) {
    return nullptr;
  }
  return scheduler_proxies_[island.value()].get();
}

HostService* SimCluster::host(HostId host) {
  if (host.value() < 0 || host.value() >= static_cast<int64_t>(host_proxies_.size())) {
    return nullptr;
  }
  return host_proxies_[host.value()].get();
}

SimCluster::~SimCluster() {
  // What is still in flight finishes first (a launch a device holds keeps
  // buffers of the hosts' stores).
  loop_.RunFor(std::numeric_limits<int64_t>::max());
  hub_->Shutdown();
  for (auto& h : hosts_) h->store().Shutdown();
  for (auto& h : hosts_) h->Shutdown();
  schedulers_.clear();
  control_.reset();
  hosts_.clear();
}

}  // namespace causeway::sim
