#include "causeway/scheduler/island_scheduler.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"

namespace causeway {

IslandScheduler::IslandScheduler(IslandSchedulerOptions options) : options_(std::move(options)) {
  if (options_.policy == SchedulingPolicy::kProportionalShare && options_.deliver_on_own_thread) {
    deliverer_ = std::thread([this] { DeliverLoop(); });
  }
}

void IslandScheduler::DeliverLoop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      // Woken when the outbox gains its first item (or on stopping), not by
      // every release of mu_ as Mutex::Await would be: a device thread
      // takes mu_ for every finished run it reports.
      while (!stopping_ && (outbox_.empty() || pumping_)) {
        deliver_cv_.WaitWithDeadline(&mu_,
                                     std::chrono::steady_clock::now() + std::chrono::seconds(1));
      }
      if (stopping_) return;
    }
    Pump();
  }
}

IslandScheduler::~IslandScheduler() {
  if (deliverer_.joinable()) {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      deliver_cv_.SignalAll();
    }
    deliverer_.join();
  }
  // Whatever is still queued, or chosen but not delivered, is dropped; its
  // clients are told.
  std::vector<Pending> dropped;
  std::vector<Outgoing> undelivered;
  {
    MutexLock lock(&mu_);
    std::vector<ClientId> clients;
    for (const auto& [c, s] : stats_) clients.push_back(c);
    for (ClientId c : clients) {
      for (Pending& p : queue_.Drop(c)) dropped.push_back(std::move(p));
    }
    undelivered.swap(outbox_);
  }
  const absl::Status gone = absl::CancelledError("the island scheduler shut down");
  for (Pending& p : dropped) {
    if (p.forwarded) p.forwarded(gone);
  }
  for (Outgoing& o : undelivered) {
    if (o.forwarded) o.forwarded(o.status.ok() ? gone : o.status);
  }
}

absl::Status IslandScheduler::RegisterProgram(std::shared_ptr<const ProgramPlan> plan) {
  if (plan->hosts_by_island.size() != plan->islands.size()) {
    return absl::InvalidArgumentError(absl::StrCat(plan->id.ToString(), " lists ",
                                                   plan->hosts_by_island.size(),
                                                   " host lists for ", plan->islands.size(),
                                                   " islands"));
  }
  for (size_t i = 0; i < plan->islands.size(); ++i) {
    if (plan->islands[i] != options_.island) continue;
    for (HostId h : plan->hosts_by_island[i]) {
      if (options_.host_lookup(h) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            plan->id.ToString(), " names ", h.ToString(), ", which is not a host of ",
            options_.island.ToString()));
      }
    }
    // Worked out before taking the lock: a plan may span thousands of devices.
    auto index = std::make_shared<HostIndex>();
    for (HostId h : plan->hosts_by_island[i]) {
      index->try_emplace(h, static_cast<int>(index->size()));
    }
    // The devices of this island that run a call: every shard of a call's
    // outputs lies on the device that computed it.
    absl::flat_hash_set<std::pair<HostId, int>> devices;
    for (const PlanNode& node : plan->nodes) {
      if (node.kind != PlanNodeKind::kCall) continue;
      for (int v : node.outputs) {
        if (v < 0 || static_cast<size_t>(v) >= plan->values.size()) continue;
        const PlanValue& value = plan->values[static_cast<size_t>(v)];
        for (size_t s = 0; s < value.shard_hosts.size() && s < value.shard_local_device.size();
             ++s) {
          if (index->contains(value.shard_hosts[s])) {
            devices.emplace(value.shard_hosts[s], value.shard_local_device[s]);
          }
        }
      }
    }
    const int hosts = static_cast<int>(index->size());
    if (options_.report_fanout > 0 && hosts > 1) {
      // The root of the report tree reports for every host.
      auto root = std::make_shared<HostIndex>();
      root->try_emplace(plan->hosts_by_island[i].front(), 0);
      index = std::move(root);
    }
    MutexLock lock(&mu_);
    Program& p = programs_[plan->id];
    p.hosts = plan->hosts_by_island[i];
    // No call here (only moves of data): a device per host.
    p.devices = std::max<int>(1, devices.empty() ? hosts : static_cast<int>(devices.size()));
    p.host_index = std::move(index);
    p.arguments = plan->parameters.size();
    p.outputs = plan->outputs.size();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(plan->id.ToString(), " has no work on ",
                                                 options_.island.ToString()));
}

void IslandScheduler::UnregisterProgram(ProgramId program) {
  MutexLock lock(&mu_);
  programs_.erase(program);
}

absl::StatusOr<IslandScheduler::Hosts> IslandScheduler::Route(const RunRequest& run) const {
  auto it = programs_.find(run.program);
  if (it == programs_.end()) {
    return absl::NotFoundError(absl::StrCat(run.program.ToString(), " is not registered with ",
                                            options_.island.ToString(), "'s scheduler"));
  }
  const Program& program = it->second;
  if (run.arguments.size() != program.arguments || run.outputs.size() != program.outputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        run.run.ToString(), " of ", run.program.ToString(), " has ", run.arguments.size(),
        " arguments and ", run.outputs.size(), " outputs; the program takes ", program.arguments,
        " and returns ", program.outputs));
  }
  Hosts hosts;
  for (HostId h : program.hosts) {
    HostService* host = options_.host_lookup(h);
    if (host == nullptr) {
      return absl::UnavailableError(absl::StrCat(h.ToString(), " of ", run.program.ToString(),
                                                 " is gone"));
    }
    hosts.push_back(host);
  }
  return hosts;
}

absl::Status IslandScheduler::CheckRun(const RunRequest& run) const {
  MutexLock lock(&mu_);
  CW_RETURN_IF_ERROR(Route(run).status());
  if (options_.policy != SchedulingPolicy::kProportionalShare) return absl::OkStatus();
  return CheckQueueRoomLocked(run.client);
}

absl::Status IslandScheduler::CheckQueueRoomLocked(ClientId client) const {
  if (queue_.queued(client) < options_.max_queued_per_client) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      client.ToString(), " has ", queue_.queued(client), " runs queued on ",
      options_.island.ToString(), " (at most ", options_.max_queued_per_client, ")"));
}

void IslandScheduler::SpanningDoneLocked(int64_t position) {
  if (position != spanning_forwarded_) {
    spanning_dropped_.insert(position);
    return;
  }
  ++spanning_forwarded_;
  while (spanning_dropped_.erase(spanning_forwarded_) > 0) ++spanning_forwarded_;
}

double IslandScheduler::EstimateDeviceUs(const Program& p) const {
  if (p.samples > 0) return p.device_us;
  return static_cast<double>(options_.default_estimate_us) *
         static_cast<double>(std::max<size_t>(1, p.hosts.size()));
}

double IslandScheduler::EstimateWallUs(const Program& p) const {
  if (p.samples > 0) return p.wall_us;
  return static_cast<double>(options_.default_estimate_us);
}

absl::Status IslandScheduler::Enqueue(RunRequest run,
                                      std::function<void(const absl::Status&)> forwarded,
                                      bool spanning) {
  CW_RETURN_IF_ERROR(Route(run).status());
  if (options_.policy == SchedulingPolicy::kFifo) {
    Pending p;
    p.run = std::move(run);
    p.forwarded = std::move(forwarded);
    ForwardLocked(std::move(p));
    return absl::OkStatus();
  }
  if (!spanning) CW_RETURN_IF_ERROR(CheckQueueRoomLocked(run.client));
  Pending p;
  p.run = std::move(run);
  p.forwarded = std::move(forwarded);
  if (tracing()) p.arrived_us = options_.clock->NowMicros();
  if (spanning) p.spanning = spanning_submitted_++;
  const ClientId client = p.run.client;
  stats_.try_emplace(client);
  CountReads(p.run, +1);
  queue_.Push(client, std::move(p));
  return absl::OkStatus();
}

absl::Status IslandScheduler::SubmitRun(RunRequest run) {
  std::vector<RunRequest> runs;
  runs.push_back(std::move(run));
  return SubmitRuns(std::move(runs), nullptr)[0];
}

std::vector<absl::Status> IslandScheduler::SubmitRuns(std::vector<RunRequest> runs,
                                                      RunsForwarded forwarded) {
  std::vector<absl::Status> statuses;
  statuses.reserve(runs.size());
  // One callback for the batch, shared by its runs: each run's copy of
  // `forwarded` would copy what it captures (often the batch's ids), which
  // made a batch of n runs cost n^2 memory.
  std::shared_ptr<const RunsForwarded> shared;
  if (forwarded) shared = std::make_shared<const RunsForwarded>(std::move(forwarded));
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < runs.size(); ++i) {
      std::function<void(const absl::Status&)> told;
      if (shared) told = [shared, i](const absl::Status& s) { (*shared)(i, s); };
      statuses.push_back(Enqueue(std::move(runs[i]), std::move(told), /*spanning=*/false));
    }
    PickLocked();
  }
  // With a delivery thread, it delivers: the submitting thread (a client's
  // outbox) goes back to its queue while hosts prepare what was forwarded.
  if (!deliverer_.joinable()) Pump();
  return statuses;
}

absl::Status IslandScheduler::SubmitSpanning(RunRequest run,
                                             std::function<void(const absl::Status&)> forwarded) {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    status = Enqueue(std::move(run), std::move(forwarded), /*spanning=*/true);
    PickLocked();
  }
  Pump();
  return status;
}

void IslandScheduler::CountReads(const RunRequest& run, int delta) {
  for (ArrayId a : run.arguments) {
    auto [it, inserted] = held_reads_.try_emplace(a, 0);
    it->second += delta;
    if (it->second <= 0) held_reads_.erase(it);
  }
}

void IslandScheduler::ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                                    std::vector<ArrayId> arrays) {
  if (arrays.empty() || hosts.empty()) return;
  {
    MutexLock lock(&mu_);
    Pending now, later;
    now.run.client = later.run.client = client;
    now.release_hosts = later.release_hosts = hosts;
    for (ArrayId a : arrays) {
      const bool read = queue_.HasWork(client) && held_reads_.contains(a);
      (read ? later : now).release.push_back(a);
    }
    // Behind the client's queued runs: one of them reads these.
    if (!later.release.empty()) queue_.Push(client, std::move(later));
    if (now.release.empty()) return;
    ForwardLocked(std::move(now));
  }
  Pump();
}

void IslandScheduler::SetShare(ClientId client, const ClientShare& share) {
  MutexLock lock(&mu_);
  queue_.SetShare(client, share);
}

void IslandScheduler::DropClient(ClientId client) {
  std::vector<Pending> dropped;
  {
    MutexLock lock(&mu_);
    dropped = queue_.Drop(client);
    for (const Pending& p : dropped) {
      if (p.release.empty()) CountReads(p.run, -1);
      // Its place in the spanning order is given up, or every later
      // spanning run here would wait for it forever.
      if (p.spanning >= 0) SpanningDoneLocked(p.spanning);
    }
    stats_.erase(client);
    // Its runs in flight no longer hold the island's window: their reports
    // may never come (a report tree stops gathering them once the client's
    // programs are unregistered), and nobody waits for them.
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      auto next = std::next(it);
      if (it->second.client == client) {
        in_flight_wall_us_ = std::max(0.0, in_flight_wall_us_ - it->second.estimate_wall_us);
        in_flight_.erase(it);
      }
      it = next;
    }
    // Runs of the client already taken for delivery reach their hosts
    // before this returns, so that the caller's release of everything the
    // client owns comes after them.
    const int64_t target = batches_taken_ + (outbox_.empty() ? 0 : 1);
    mu_.Await([this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return batches_delivered_ >= target;
    });
    // Room its runs held goes to the others.
    PickLocked();
  }
  Pump();
  for (Pending& p : dropped) {
    if (p.forwarded) {
      p.forwarded(absl::CancelledError(absl::StrCat(client.ToString(), " left before ",
                                                    p.run.run.ToString(), " was scheduled")));
    }
  }
}

void IslandScheduler::PushOutgoingLocked(Outgoing out) {
  if (outbox_.empty()) deliver_cv_.SignalAll();
  outbox_.push_back(std::move(out));
}

void IslandScheduler::ForwardLocked(Pending p) {
  Outgoing out;
  if (!p.release.empty()) {
    for (HostId h : p.release_hosts) {
      if (HostService* host = options_.host_lookup(h)) out.hosts.push_back(host);
    }
    out.release = std::move(p.release);
    PushOutgoingLocked(std::move(out));
    return;
  }
  absl::StatusOr<Hosts> hosts = Route(p.run);
  out.forwarded = std::move(p.forwarded);
  if (!hosts.ok()) {
    out.status = hosts.status();
    PushOutgoingLocked(std::move(out));
    return;
  }
  out.hosts = std::move(*hosts);
  p.run.sequence = next_sequence_++;
  ClientScheduleStats& stats = stats_[p.run.client];
  ++stats.forwarded;
  const int64_t now_us = tracing() ? options_.clock->NowMicros() : 0;
  if (now_us != 0) {
    TraceEvent e{TraceKind::kForward, HostId(), DeviceId(), p.run.run, -1,
                 absl::StrCat(p.run.run.ToString(), " of ", p.run.client.ToString()), now_us,
                 p.arrived_us > 0 ? now_us - p.arrived_us : 0};
    e.island = options_.island;
    options_.trace->Record(std::move(e));
  }
  if (options_.policy == SchedulingPolicy::kProportionalShare) {
    const Program& program = programs_.find(p.run.program)->second;
    InFlight f;
    f.client = p.run.client;
    f.program = p.run.program;
    f.host_index = program.host_index;
    f.hosts_left = static_cast<int>(f.host_index->size());
    f.reported.assign(static_cast<size_t>((f.hosts_left + 63) / 64), 0);
    f.estimate_device_us = EstimateDeviceUs(program);
    f.estimate_wall_us = EstimateWallUs(program);
    f.forwarded_us = now_us;
    queue_.Charge(f.client, f.estimate_device_us);
    in_flight_wall_us_ += f.estimate_wall_us;
    in_flight_.insert_or_assign(p.run.run, f);
  }
  out.run = std::move(p.run);
  PushOutgoingLocked(std::move(out));
}

void IslandScheduler::PickLocked() {
  if (options_.policy != SchedulingPolicy::kProportionalShare) return;
  const double run_ahead_us = absl::ToDoubleMicroseconds(options_.run_ahead);
  auto eligible = [this](const Pending& p) {
    return p.spanning < 0 || p.spanning == spanning_forwarded_;
  };
  while (queue_.size() > 0) {
    const auto start = std::chrono::steady_clock::now();
    const ClientId client = queue_.Next(eligible);
    if (!client.valid()) return;
    Pending& head = queue_.Front(client);
    if (head.release.empty()) {
      auto it = programs_.find(head.run.program);
      const double wall = it == programs_.end() ? 0 : EstimateWallUs(it->second);
      const bool room = static_cast<int>(in_flight_.size()) < options_.min_in_flight ||
                        in_flight_wall_us_ + wall <= run_ahead_us;
      if (!room) return;
      if (head.spanning >= 0) SpanningDoneLocked(head.spanning);
    }
    Pending next = queue_.Pop(client);
    if (next.release.empty()) CountReads(next.run, -1);
    ++decision_stats_.decisions;
    decision_stats_.nanos += std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
    ForwardLocked(std::move(next));
    // Releases behind the run go with it: they wait for nothing else.
    while (queue_.HasWork(client) && !queue_.Front(client).release.empty()) {
      ForwardLocked(queue_.Pop(client));
    }
  }
}

bool IslandScheduler::FinishLocked(HostId host, RunId run, int64_t device_us, int launches,
                                   ClientId* client, int64_t* total_us, int* total_launches) {
  auto it = in_flight_.find(run);
  if (it == in_flight_.end()) return false;
  InFlight& f = it->second;
  if (!f.Owes(host)) return false;
  const int position = f.host_index->find(host)->second;
  f.reported[static_cast<size_t>(position / 64)] |= uint64_t{1} << (position % 64);
  --f.hosts_left;
  f.device_us += std::clamp<int64_t>(device_us, 0, int64_t{1} << 40);
  f.launches += std::clamp(launches, 0, 1 << 20);
  if (f.hosts_left > 0) return false;
  *client = f.client;
  *total_us = f.device_us;
  *total_launches = f.launches;
  if (f.forwarded_us != 0 && tracing()) {
    TraceEvent e{TraceKind::kInFlight, HostId(), DeviceId(), run, -1,
                 absl::StrCat(run.ToString(), " of ", f.client.ToString()), f.forwarded_us,
                 options_.clock->NowMicros() - f.forwarded_us};
    e.island = options_.island;
    options_.trace->Record(std::move(e));
  }
  in_flight_wall_us_ = std::max(0.0, in_flight_wall_us_ - f.estimate_wall_us);
  double measured = static_cast<double>(f.device_us);
  auto program = programs_.find(f.program);
  // Compiled programs have static shapes, so a program's device time barely
  // varies: a measurement far above its settled average is interference (an
  // emulated device's thread preempted on a loaded host), and charging it
  // whole would hold its client off the island for as long. It counts as at
  // most kOutlierFactor times the average, in the charge and the average,
  // from the program's second measurement on: a preemption in a program's
  // first few runs, charged whole, would hold its client off the island for
  // tens of its runs. The average still grows by up to 1.75x a run, so a
  // program slower than its first run suggested is charged its full cost
  // within a few runs.
  constexpr double kOutlierFactor = 4.0;
  if (program != programs_.end() && program->second.samples >= 1) {
    measured = std::min(measured, kOutlierFactor * program->second.device_us);
  }
  // The charge becomes the measured time.
  queue_.Charge(f.client, measured - f.estimate_device_us);
  auto stats = stats_.find(f.client);
  if (stats != stats_.end()) {
    ++stats->second.finished;
    stats->second.device_us += f.device_us;
    stats->second.charged_us += static_cast<int64_t>(measured);
  }
  if (program != programs_.end() && f.launches > 0) {
    // Wall time of a run: its device time over its devices (what each has
    // queued, on average). Over its launches instead, a chain of L calls
    // per device counted 1/L of its time, and the island ran L times
    // further ahead than run_ahead (a chained benchmark's hosts held over a
    // gigabyte of prepared launches).
    Program& p = program->second;
    const double wall = measured / p.devices;
    constexpr double kWeight = 0.25;  // of a new measurement in the average
    p.device_us = p.samples == 0 ? measured : p.device_us + kWeight * (measured - p.device_us);
    p.wall_us = p.samples == 0 ? wall : p.wall_us + kWeight * (wall - p.wall_us);
    ++p.samples;
  }
  in_flight_.erase(it);
  return true;
}

void IslandScheduler::RunFinished(HostId host, RunId run, int64_t device_us, int launches) {
  // FIFO keeps no account; a host may report from inside EnqueueRuns, which
  // FIFO calls under the lock.
  if (options_.policy == SchedulingPolicy::kFifo) return;
  ClientId client;
  int64_t total_us = 0;
  int total_launches = 0;
  {
    MutexLock lock(&mu_);
    if (!FinishLocked(host, run, device_us, launches, &client, &total_us, &total_launches)) {
      return;
    }
    // Refill in batches: once half the run-ahead drained, forward up to all
    // of it, so that hosts get many runs per message rather than one per
    // finished run.
    if (in_flight_wall_us_ <= 0.5 * absl::ToDoubleMicroseconds(options_.run_ahead) ||
        static_cast<int>(in_flight_.size()) < options_.min_in_flight) {
      PickLocked();
    }
  }
  if (options_.on_run_accounted) options_.on_run_accounted(client, total_us, total_launches);
  // Reports come from device threads: delivering a batch (each host
  // preparing every launch of it) there would hold that device, and its
  // whole gang, while it ran. The delivery thread does it instead.
  if (!deliverer_.joinable()) Pump();
}

void IslandScheduler::HostLost(HostId host) {
  if (options_.policy == SchedulingPolicy::kFifo) return;
  {
    MutexLock lock(&mu_);
    std::vector<RunId> runs;
    for (const auto& [run, f] : in_flight_) {
      if (f.Owes(host)) runs.push_back(run);
    }
    ClientId client;
    int64_t us = 0;
    int launches = 0;
    for (RunId r : runs) FinishLocked(host, r, 0, 0, &client, &us, &launches);
    PickLocked();
  }
  Pump();
}

void IslandScheduler::Pump() {
  if (options_.policy == SchedulingPolicy::kFifo) {
    // Hosts are told under the lock, as each run is accepted: a caller that
    // returns from SubmitRuns knows its runs reached their hosts' queues
    // ahead of anything it sends them next. Callbacks run outside it.
    std::vector<Outgoing> batch;
    {
      MutexLock lock(&mu_);
      batch.swap(outbox_);
      SendToHosts(batch);
    }
    Tell(batch);
    return;
  }
  {
    MutexLock lock(&mu_);
    // The thread pumping delivers what this caller added, in order.
    if (pumping_ || outbox_.empty()) return;
    pumping_ = true;
  }
  std::vector<Outgoing> batch;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (!batch.empty()) ++batches_delivered_;
      batch.clear();
      if (outbox_.empty()) {
        pumping_ = false;
        // The outbox keeps the larger buffer: refilled with thousands of
        // runs at a time, it would otherwise grow from nothing (and fault
        // in fresh pages) on every refill.
        if (batch.capacity() > outbox_.capacity()) outbox_.swap(batch);
        return;
      }
      batch.swap(outbox_);
      ++batches_taken_;
    }
    SendToHosts(batch);
    Tell(batch);
  }
}

void IslandScheduler::SendToHosts(std::vector<Outgoing>& batch) {
  // Consecutive runs go to each host as one message; a release first sends
  // what came before it, which keeps each host's order. A host sent the
  // same runs as the host before it gets the same list: an SPMD program's
  // batch goes to every host of the island, and a list per host copied each
  // run as many times.
  absl::flat_hash_map<HostService*, std::vector<uint32_t>> by_host;  // runs, as indices
  std::vector<HostService*> order;
  auto flush = [&] {
    const std::vector<uint32_t>* built_from = nullptr;
    std::vector<RunRequest> list;
    for (HostService* h : order) {
      const std::vector<uint32_t>& indices = by_host[h];
      if (built_from == nullptr || *built_from != indices) {
        list.clear();
        for (uint32_t i : indices) list.push_back(batch[i].run);
        built_from = &indices;
      }
      h->EnqueueRuns(list);
    }
    by_host.clear();
    order.clear();
  };
  for (size_t i = 0; i < batch.size(); ++i) {
    Outgoing& out = batch[i];
    if (!out.release.empty()) {
      flush();
      for (HostService* h : out.hosts) h->ReleaseArrays(out.release);
      continue;
    }
    if (!out.status.ok()) continue;
    for (HostService* h : out.hosts) {
      auto [entry, inserted] = by_host.try_emplace(h);
      if (inserted) order.push_back(h);
      entry->second.push_back(static_cast<uint32_t>(i));
    }
  }
  flush();
}

void IslandScheduler::Tell(std::vector<Outgoing>& batch) {
  for (Outgoing& out : batch) {
    if (out.forwarded) out.forwarded(out.status);
  }
}

ClientScheduleStats IslandScheduler::client_stats(ClientId client) const {
  MutexLock lock(&mu_);
  ClientScheduleStats s;
  auto it = stats_.find(client);
  if (it != stats_.end()) s = it->second;
  s.queued = queue_.queued(client);
  s.share = queue_.share(client);
  return s;
}

std::vector<std::pair<ClientId, ClientScheduleStats>> IslandScheduler::all_client_stats() const {
  MutexLock lock(&mu_);
  std::vector<std::pair<ClientId, ClientScheduleStats>> out;
  for (const auto& [client, stats] : stats_) {
    ClientScheduleStats s = stats;
    s.queued = queue_.queued(client);
    s.share = queue_.share(client);
    out.emplace_back(client, s);
  }
  return out;
}

DecisionStats IslandScheduler::decision_stats() const {
  MutexLock lock(&mu_);
  return decision_stats_;
}

int IslandScheduler::in_flight() const {
  MutexLock lock(&mu_);
  return static_cast<int>(in_flight_.size());
}

absl::Status SubmitToIslands(const RunRequest& run, const std::vector<IslandId>& islands,
                             const std::vector<IslandScheduler*>& schedulers,
                             std::function<void(const absl::Status&)> forwarded) {
  if (islands.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(run.run.ToString(), " names no island"));
  }
  for (size_t i = 0; i < islands.size(); ++i) {
    if (schedulers[i] == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown ", islands[i].ToString()));
    }
    for (size_t j = 0; j < i; ++j) {
      if (islands[j] == islands[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat(run.run.ToString(), " names ", islands[i].ToString(), " twice"));
      }
    }
    if (islands.size() > 1) CW_RETURN_IF_ERROR(schedulers[i]->CheckRun(run));
  }
  if (islands.size() == 1) {
    SchedulerService::RunsForwarded told;
    if (forwarded) told = [forwarded](size_t, const absl::Status& s) { forwarded(s); };
    return schedulers[0]->SubmitRuns({run}, std::move(told))[0];
  }
  // Told once: when the last island forwarded it, or at the first failure.
  struct Tally {
    Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    bool told ABSL_GUARDED_BY(mu) = false;
    std::function<void(const absl::Status&)> forwarded;
  };
  auto tally = std::make_shared<Tally>();
  {
    MutexLock lock(&tally->mu);
    tally->left = schedulers.size();
  }
  tally->forwarded = std::move(forwarded);
  auto on_island = [tally](const absl::Status& s) {
    bool tell = false;
    {
      MutexLock lock(&tally->mu);
      --tally->left;
      if (!tally->told && (!s.ok() || tally->left == 0)) tally->told = tell = true;
    }
    if (tell && tally->forwarded) tally->forwarded(s);
  };
  for (IslandScheduler* s : schedulers) CW_RETURN_IF_ERROR(s->SubmitSpanning(run, on_island));
  return absl::OkStatus();
}

}  // namespace causeway
