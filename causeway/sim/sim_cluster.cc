#include "causeway/sim/sim_internal.h"

#include <time.h>

namespace causeway::sim {

namespace {
int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

bool SimCluster::measuring() const {
  return options_.cpu == CpuCosts::kMeasured || options_.profile_cpu;
}

int64_t SimCluster::CpuNow() const {
  return options_.cpu_clock ? options_.cpu_clock() : ThreadCpuNanos();
}

ResourceService* SimCluster::resources() { return &control_->resources(); }

HostExecutor* SimCluster::executor(HostId host) {
  if (host.value() < 0 || host.value() >= static_cast<int64_t>(hosts_.size())) return nullptr;
  return hosts_[host.value()].get();
}

IslandScheduler* SimCluster::island_scheduler(IslandId island) {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(schedulers_.size())) {
    return nullptr;
  }
  return schedulers_[island.value()];
}

absl::Status SimCluster::SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                                   std::function<void(const absl::Status&)> forwarded) {
  for (IslandId island : islands) {
    IslandScheduler* s = island_scheduler(island);
    if (s == nullptr) return absl::NotFoundError(absl::StrCat("no ", island.ToString()));
    CW_RETURN_IF_ERROR(s->CheckRun(run));
  }
  if (islands.empty()) return absl::InvalidArgumentError("a run on no island");
  Message(SenderOf(run.client), scheduler_threads_[islands[0].value()],
          Ns(costs().host.scheduler_run_us * static_cast<double>(islands.size())),
          [this, run, islands, forwarded = std::move(forwarded)]() mutable {
            const absl::Status s = control_->SubmitRun(run, islands, forwarded);
            if (!s.ok() && forwarded) forwarded(s);
          });
  return absl::OkStatus();
}

void SimCluster::ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                               std::vector<ArrayId> arrays) {
  for (auto& [island, mine] : control_->GroupByIsland(hosts)) {
    Message(SenderOf(client), scheduler_threads_[island.value()], 0,
            [this, client, island = island, mine = std::move(mine), arrays] {
              schedulers_[island.value()]->ReleaseArrays(client, mine, arrays);
            });
  }
}

absl::Status SimCluster::SetClientShare(ClientId client, const ClientShare& share) {
  return control_->SetShare(client, share);
}

void SimCluster::DropClient(ClientId client) {
  control_->DropClient(client);
}

int SimCluster::AddClient() {
  threads_.push_back(std::make_unique<SimThread>(client_machine_));
  SimThread* calls = threads_.back().get();
  threads_.push_back(std::make_unique<SimThread>(client_machine_));
  client_slots_.emplace_back(calls, threads_.back().get());
  return static_cast<int>(client_slots_.size()) - 1;
}

void SimCluster::BindClient(ClientId client, int slot) {
  CW_CHECK(slot >= 0 && slot < static_cast<int>(client_slots_.size())) << "no client slot " << slot;
  client_slot_[client] = slot;
}

SimThread* SimCluster::SenderOf(ClientId client) const {
  auto it = client_slot_.find(client);
  return it == client_slot_.end() ? client_sender_ : client_slots_[it->second].second;
}

void SimCluster::PostClientSend(std::function<void()> send, int slot) {
  CW_CHECK(slot >= 0 && slot < static_cast<int>(client_slots_.size())) << "no client slot " << slot;
  OnThread(client_slots_[slot].second, Ns(costs().host.client_send_us),
           [this, send = std::move(send)] { Profiled(&profile_.client_send, send); });
}

void SimCluster::ClientCall(std::function<void()> then, int slot) {
  CW_CHECK(slot >= 0 && slot < static_cast<int>(client_slots_.size())) << "no client slot " << slot;
  OnThread(client_slots_[slot].first, Ns(costs().host.client_run_us),
           [this, then = std::move(then)] { Profiled(&profile_.client_call, then); });
}

// Long enough for any experiment; a loop still waiting past it in virtual
// time is stuck in an endless chain of events, not slow.
constexpr int64_t kVirtualLimitNs = int64_t{3600} * 1'000'000'000;

absl::Status SimCluster::CallRepeatedly(int64_t n, const std::function<absl::Status()>& call,
                                        int slot) {
  int64_t left = n;
  absl::Status status;
  std::function<void()> next = [&] {
    status = call();
    left = status.ok() ? left - 1 : 0;
    if (left > 0) ClientCall(next, slot);
  };
  if (left > 0) ClientCall(next, slot);
  if (!loop_.RunUntil([&] { return left == 0; }, kVirtualLimitNs)) {
    return absl::InternalError("the simulated client stopped making calls");
  }
  return status;
}

absl::Status SimCluster::Await(const Future<Unit>& done, absl::string_view what) {
  if (!loop_.RunUntil([&] { return done.IsReady(); }, kVirtualLimitNs)) {
    return absl::InternalError(
        absl::StrCat(what, " never finished (", loop_.pending(), " events pending)"));
  }
  return done.Await().status();
}

void SimCluster::OnThread(SimThread* thread, int64_t cost_ns, std::function<void()> work) {
  if (options_.cpu == CpuCosts::kCalibrated) {
    loop_.At(thread->Run(loop_.now(), cost_ns), std::move(work));
    return;
  }
  // Measured: the work runs once the thread is free, and the thread is
  // charged the CPU it took (what it sends leaves when it starts).
  const int64_t start = thread->Run(loop_.now(), 0);
  loop_.At(start, [this, thread, work = std::move(work)]() mutable {
    const int64_t free = thread->Run(loop_.now(), 0);
    if (free > loop_.now()) {  // something else took the thread meanwhile
      OnThread(thread, 0, std::move(work));
      return;
    }
    const int64_t cpu0 = CpuNow();
    const int64_t bookkeeping0 = bookkeeping_ns_;
    work();
    const int64_t cpu = CpuNow() - cpu0 - (bookkeeping_ns_ - bookkeeping0);
    thread->Run(loop_.now(), std::max<int64_t>(1, cpu));
  });
}


void SimCluster::Profiled(CpuProfile::Kind* kind, const std::function<void()>& work,
                          bool counts) {
  if (!options_.profile_cpu) {
    work();
    return;
  }
  const int64_t start = CpuNow();
  const int64_t bookkeeping0 = bookkeeping_ns_;
  work();
  kind->ns += CpuNow() - start - (bookkeeping_ns_ - bookkeeping0);
  kind->bookkeeping_ns += bookkeeping_ns_ - bookkeeping0;
  if (counts) ++kind->count;
}

void SimCluster::HostEnqueue(HostId host, RunRequest run, std::vector<ArrayId> release,
                             std::function<void()> then) {
  Bookkeeping bookkeeping(this);
  NoteRuns({run});
  const HostCosts& h = costs().host;
  const int64_t cost = Ns(h.host_run_us + LaunchesOn(run, host) * h.host_launch_us);
  OnThread(host_threads_[host.value()], cost,
           [this, host, run = std::move(run), release = std::move(release),
            then = std::move(then)] {
             hosts_[host.value()]->EnqueueRun(run);
             if (!release.empty()) hosts_[host.value()]->ReleaseArrays(release);
             if (then) then();
           });
}

DecisionStats SimCluster::decision_stats(IslandId island) const {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(schedulers_.size())) return {};
  return schedulers_[island.value()]->decision_stats();
}

ClientScheduleStats SimCluster::scheduler_stats(IslandId island, ClientId client) const {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(schedulers_.size())) return {};
  return schedulers_[island.value()]->client_stats(client);
}

void SimCluster::ResetCounters() {
  counters_ = SimCounters{};
  events_base_ = loop_.events_run();
  for (auto& t : threads_) t->ResetBusy();
  for (SimDevice* d : devices_) d->ResetStats();
}

SimCounters SimCluster::counters() const {
  SimCounters c = counters_;
  c.events = loop_.events_run() - events_base_;
  for (const auto& [calls, sends] : client_slots_) c.client_busy_ns += calls->busy() + sends->busy();
  for (SimThread* t : scheduler_threads_) c.scheduler_busy_ns = std::max(c.scheduler_busy_ns, t->busy());
  for (SimThread* t : host_threads_) c.host_busy_ns = std::max(c.host_busy_ns, t->busy());
  for (const auto& [key, t] : connections_) {
    if (std::get<0>(key) == scheduler_threads_[0]->machine()) {
      c.coordinator_connections_busy_ns += t->busy();
      c.coordinator_connection_max_busy_ns =
          std::max(c.coordinator_connection_max_busy_ns, t->busy());
    }
  }
  for (const SimDevice* d : devices_) c.launches += d->stats().launches;
  return c;
}

void SimCluster::NotePlan(const ProgramPlan& plan) {
  if (plans_.contains(plan.id)) return;
  PlanCost pc;
  for (const PlanNode& node : plan.nodes) {
    if (node.kind != PlanNodeKind::kCall || node.function == nullptr || node.outputs.empty()) {
      pc.nodes.push_back(NodeCost{});
      continue;
    }
    const PlanValue& out = plan.values[node.outputs[0]];
    const int gang = static_cast<int>(out.mesh.devices().size());
    pc.nodes.push_back(FunctionCost(*node.function, gang, costs()));
    for (const HostId h : out.shard_hosts) ++pc.launches[h];
  }
  plans_.emplace(plan.id, std::move(pc));
}

void SimCluster::NoteRuns(const std::vector<RunRequest>& runs) {
  for (const RunRequest& r : runs) {
    auto it = run_program_.find(r.run);
    if (it != run_program_.end()) {
      ++it->second.hosts_left;
    } else {
      run_program_.emplace(r.run, RunEntry{r.program, 1});
    }
  }
}

void SimCluster::NoteReported(RunId run) {
  auto it = run_program_.find(run);
  if (it != run_program_.end() && --it->second.hosts_left <= 0) run_program_.erase(it);
}

int SimCluster::LaunchesOn(const RunRequest& run, HostId host) const {
  auto it = plans_.find(run.program);
  if (it == plans_.end()) return 0;
  auto h = it->second.launches.find(host);
  return h == it->second.launches.end() ? 0 : h->second;
}

const SimCluster::NodeCost* SimCluster::CostOf(RunId run, int node) const {
  auto it = run_program_.find(run);
  if (it == run_program_.end()) return nullptr;
  auto p = plans_.find(it->second.program);
  if (p == plans_.end() || node < 0 || node >= static_cast<int>(p->second.nodes.size())) {
    return nullptr;
  }
  return &p->second.nodes[node];
}

void SimCluster::Count(int64_t busy_ns, int64_t compute_ns) {
  counters_.device_busy_ns += busy_ns;
  counters_.device_compute_ns += compute_ns;
}

void SimCluster::Message(SimThread* from, SimThread* to, int64_t cost_ns,
                         std::function<void()> then) {
  Bookkeeping bookkeeping(this);
  const HostCosts& h = costs().host;
  const int64_t handoff = Ns(h.handoff_us);
  ++counters_.requests;
  if (from->machine() == to->machine()) {
    // In-process: the receiver is woken (a hand-off's latency).
    ++counters_.messages;
    const int64_t sent = from->Run(loop_.now(), 0);
    loop_.At(sent + handoff, [this, to, cost_ns, then = std::move(then)]() mutable {
      OnThread(to, cost_ns, std::move(then));
    });
    return;
  }
  // Between machines, as the real servers do it: the sender queues the
  // message for the connection's writer thread (a hand-off), which sends
  // whatever has queued by the time it gets to it as one batch (CPU once);
  // after the network's latency the connection's reader on the other
  // machine receives the batch (CPU once) and hands each message on.
  SimThread* writer = Connection(from->machine(), to, /*reader=*/false);
  Outbox& box = outboxes_[writer];
  box.items.emplace_back(cost_ns, std::move(then));
  if (box.open) return;  // joins the batch the writer sends next
  box.open = true;
  const int64_t queued = from->Run(loop_.now(), 0) + handoff;
  loop_.At(queued, [this, writer, to] { SendBatch(writer, to); });
}

void SimCluster::SendBatch(SimThread* writer, SimThread* to) {
  const int64_t free = writer->Run(loop_.now(), 0);
  if (free > loop_.now()) {  // still sending the last batch; this one grows
    loop_.At(free, [this, writer, to] { SendBatch(writer, to); });
    return;
  }
  Outbox& box = outboxes_[writer];
  std::vector<std::pair<int64_t, std::function<void()>>> items;
  items.swap(box.items);
  box.open = false;
  ++counters_.messages;
  const HostCosts& h = costs().host;
  const int64_t message = Ns(h.message_us);
  const int64_t on_wire = writer->Run(loop_.now(), message) + Ns(costs().dcn.latency_us);
  SimThread* reader = Connection(to->machine(), writer, /*reader=*/true);
  auto batch = std::make_shared<std::vector<std::pair<int64_t, std::function<void()>>>>(
      std::move(items));
  loop_.At(on_wire, [this, reader, to, message, batch] {
    const int64_t received = reader->Run(loop_.now(), message) + Ns(costs().host.handoff_us);
    loop_.At(received, [this, to, batch] {
      for (auto& [cost, then] : *batch) OnThread(to, cost, std::move(then));
    });
  });
}

SimThread* SimCluster::Connection(SimMachine* machine, SimThread* peer, bool reader) {
  SimThread*& t = connections_[{machine, peer, reader}];
  if (t == nullptr) {
    threads_.push_back(std::make_unique<SimThread>(machine));
    t = threads_.back().get();
  }
  return t;
}

void SimCluster::Rendezvous(RunId run, int node, int collective, int gang, int64_t network_ns,
                            int64_t arrival, const SimMachine* machine,
                            std::function<void(int64_t, int, bool)> done) {
  loop_.At(arrival, [this, run, node, collective, gang, network_ns, machine,
                     done = std::move(done)]() mutable {
    const std::tuple<RunId, int, int> key(run, node, collective);
    Gang& g = gangs_[key];
    g.waiting.emplace_back(machine, std::move(done));
    if (++g.arrived < gang) return;
    std::vector<std::pair<const SimMachine*, std::function<void(int64_t, int, bool)>>> members =
        std::move(g.waiting);
    gangs_.erase(key);
    const int64_t end = loop_.now() + network_ns;
    absl::flat_hash_map<const SimMachine*, int> ranks;
    for (size_t i = 0; i < members.size(); ++i) {
      members[i].second(end, ranks[members[i].first]++, i + 1 == members.size());
    }
  });
}

}  // namespace causeway::sim
