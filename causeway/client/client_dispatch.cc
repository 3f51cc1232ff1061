// ClientCore's asynchronous side: sequential dispatch, reads, batched
// releases, and disconnection.
#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/base/trace.h"
#include "causeway/client/client_core.h"

namespace causeway::internal {
namespace {

// An idle outbox or control thread re-checks its queue this often, besides
// being woken when the queue gains an item.
constexpr std::chrono::seconds kIdleRecheck{1};

// Settles a group of "submitted" promises once: with the refusal of the
// submitting call, or when the scheduler forwarded the run (or dropped it),
// whichever speaks first. A run's settler (with a `window`) gives its place
// in the client's RunWindow back then, or when it is destroyed unsettled (a
// callback dropped unrun).
class OnceSettler {
 public:
  OnceSettler(std::vector<Promise<Unit>> promises,
              std::shared_ptr<RunWindow> window)
      : promises_(std::move(promises)), window_(std::move(window)) {}
  ~OnceSettler() {
    if (!done_.load() && window_ != nullptr) window_->Done();
  }
  OnceSettler(const OnceSettler&) = delete;
  OnceSettler& operator=(const OnceSettler&) = delete;
  void Set(const absl::Status& status) {
    if (done_.exchange(true)) return;
    if (window_ != nullptr) window_->Done();
    for (const Promise<Unit>& p : promises_) {
      if (status.ok()) {
        p.Set(Unit{});
      } else {
        p.Set(status);
      }
    }
  }

 private:
  std::atomic<bool> done_{false};
  const std::vector<Promise<Unit>> promises_;
  const std::shared_ptr<RunWindow> window_;
};

}  // namespace

struct ClientCore::SequentialRun {
  std::shared_ptr<const ProgramState> program;
  // Array of each plan value once it exists (arguments, then each step's
  // outputs). Holding them keeps intermediates alive until the run ends.
  std::vector<Array> values;
  // Program outputs, by plan output index, and their "submitted" promises.
  std::vector<Array> outputs;
  std::vector<Promise<Unit>> submitted;
  // Promises handed to a step's settler, which sets them when the step is
  // forwarded (possibly after this run is gone).
  std::vector<bool> handed_over;
  size_t next = 0;

  ~SequentialRun() {
    for (size_t k = 0; k < submitted.size(); ++k) {
      if (!handed_over[k] && !submitted[k].IsSet()) {
        submitted[k].Set(absl::CancelledError(absl::StrCat(
            "client disconnected before node ", next, " of program ", program->plan->name,
            " was dispatched")));
      }
    }
  }
};

void ClientCore::RunSequential(std::shared_ptr<const ProgramState> program,
                               std::vector<Array> args, std::vector<Array> outputs,
                               std::vector<Promise<Unit>> submitted) {
  auto run = std::make_shared<SequentialRun>();
  const ProgramPlan& plan = *program->plan;
  run->values.resize(plan.values.size());
  for (size_t i = 0; i < args.size(); ++i) run->values[plan.parameters[i]] = args[i];
  run->outputs = std::move(outputs);
  run->submitted = std::move(submitted);
  run->handed_over.assign(run->submitted.size(), false);
  run->program = std::move(program);
  PostControl([this, run] { StepSequential(run); });
}

void ClientCore::StepSequential(std::shared_ptr<SequentialRun> run) {
  if (run->next == run->program->steps.size()) return;
  const ProgramState::Step& step = run->program->steps[run->next];
  std::vector<Future<Unit>> inputs;
  for (int v : step.inputs) inputs.push_back(run->values[v].Ready());
  std::weak_ptr<ClientCore> weak = shared_from_this();
  // Input errors do not stop dispatch: the hosts pass the poison on.
  WhenAll(inputs).OnReady([weak, run](const absl::StatusOr<Unit>&) {
    if (auto core = weak.lock()) {
      ClientCore* c = core.get();
      c->PostControl([c, run] { c->SubmitStep(run); });
    }
  });
}

void ClientCore::SubmitStep(std::shared_ptr<SequentialRun> run) {
  const ProgramPlan& plan = *run->program->plan;
  const ProgramState::Step& step = run->program->steps[run->next];
  RunRequest request;
  request.program = step.plan->id;
  request.run = RunId(NextId(next_run_));
  request.client = id_;
  request.time_limit_us = RunTimeLimitUs();
  for (int v : step.inputs) request.arguments.push_back(run->values[v].id());
  // The step's outputs may be read (and the next step may wait on them)
  // once the step reached its hosts.
  Promise<Unit> step_forwarded;
  std::vector<Promise<Unit>> told = {step_forwarded};
  std::vector<bool> finished(run->submitted.size(), false);
  for (int v : step.outputs) {
    auto out = std::find(plan.outputs.begin(), plan.outputs.end(), v);
    if (out != plan.outputs.end()) {
      const int k = static_cast<int>(out - plan.outputs.begin());
      run->values[v] = run->outputs[k];
      if (!finished[k]) told.push_back(run->submitted[k]);
      finished[k] = true;
      run->handed_over[k] = true;
    } else {
      run->values[v] =
          MakeArray(ArrayId(NextId(next_array_)), plan.values[v],
                    run->program->value_hosts[v], step_forwarded.future());
    }
    request.outputs.push_back(run->values[v].id());
  }
  auto settler = std::make_shared<OnceSettler>(std::move(told), nullptr);
  const absl::Status status =
      Submit(request, *step.plan, [settler](const absl::Status& s) { settler->Set(s); });
  if (!status.ok()) {
    settler->Set(status);
    for (size_t k = 0; k < run->submitted.size(); ++k) {
      if (!run->handed_over[k] && !run->submitted[k].IsSet()) {
        run->submitted[k].Set(status);
        run->handed_over[k] = true;
      }
    }
    return;
  }
  ++run->next;
  StepSequential(std::move(run));
}

void ClientCore::PostControl(std::function<void()> task) {
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      if (control_.empty()) control_cv_.SignalAll();
      control_.push_back(std::move(task));
      return;
    }
  }
  // Dropped outside the lock: destroying the task may release arrays.
}

void ClientCore::ControlLoop() {
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && control_.empty()) {
        control_cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + kIdleRecheck);
      }
      if (stopping_) break;
      task = std::move(control_.front());
      control_.pop_front();
    }
    task();
  }
  std::deque<std::function<void()>> dropped;
  MutexLock lock(&mu_);
  dropped.swap(control_);
  // `dropped` is destroyed after the lock is released (declared first).
}

std::vector<int> DistinctShards(const ArrayState& a) {
  std::map<std::vector<int64_t>, int> first;
  for (int s = 0; s < a.mesh.size(); ++s) {
    std::vector<int64_t> key;
    for (const Range& r : a.sharding.ShardRanges(a.shape, a.mesh, s)) key.push_back(r.begin);
    first.emplace(key, s);
  }
  std::vector<int> out;
  for (const auto& [key, s] : first) out.push_back(s);
  return out;
}

Future<ir::Literal> ClientCore::Fetch(const ArrayState& array) {
  Promise<ir::Literal> promise;
  std::weak_ptr<ClientCore> weak = shared_from_this();
  const ArrayId id = array.id;
  const ir::Shape shape = array.shape;
  const Mesh mesh = array.mesh;
  const Sharding sharding = array.sharding;
  const std::vector<int> shards = DistinctShards(array);
  const std::shared_ptr<const ShardHosts> placement = array.hosts;
  array.submitted.OnReady([=](const absl::StatusOr<Unit>& submitted) {
    const std::vector<HostId>& hosts = placement->by_shard;
    if (!submitted.ok()) {
      promise.Set(submitted.status());
      return;
    }
    auto core = weak.lock();
    if (core == nullptr) {
      promise.Set(absl::FailedPreconditionError("client is gone"));
      return;
    }
    std::vector<Future<ir::Literal>> parts;
    for (int s : shards) {
      HostService* host = core->cluster_->host(hosts[s]);
      parts.push_back(host ? host->FetchShard(id, s)
                           : Future<ir::Literal>::Ready(absl::UnavailableError(
                                 absl::StrCat(hosts[s].ToString(), " is gone"))));
    }
    WhenAll(parts).OnReady([=](const absl::StatusOr<Unit>& all) {
      if (!all.ok()) {
        promise.Set(all.status());
        return;
      }
      if (shards.size() == 1 && parts[0].Await()->shape() == shape) {
        // One shard holding the whole array (replicated, or one device):
        // handed on as it is. This callback is its part's only reader.
        promise.Set(parts[0].Take());
        return;
      }
      ir::Literal out(shape);
      const std::vector<int64_t> zero(shape.dims.size(), 0);
      for (size_t i = 0; i < shards.size(); ++i) {
        const ir::Literal& part = *parts[i].Await();
        std::vector<int64_t> offset;
        for (const Range& r : sharding.ShardRanges(shape, mesh, shards[i])) {
          offset.push_back(r.begin);
        }
        CopyBox(part.data(), part.shape().dims, zero, out.data(), shape.dims, offset,
                part.shape().dims, ir::ByteSize(shape.dtype));
      }
      promise.Set(std::move(out));
    });
  });
  return promise.future();
}

Future<Unit> ClientCore::Ready(const ArrayState& array) {
  std::weak_ptr<ClientCore> weak = shared_from_this();
  const ArrayId id = array.id;
  const std::shared_ptr<const ShardHosts> placement = array.hosts;
  Promise<Unit> promise;
  array.submitted.OnReady([=](const absl::StatusOr<Unit>& submitted) {
    if (!submitted.ok()) {
      promise.Set(submitted.status());
      return;
    }
    auto core = weak.lock();
    if (core == nullptr) {
      promise.Set(absl::FailedPreconditionError("client is gone"));
      return;
    }
    // One request per host, naming every shard it holds: a 2048-device
    // array on 512 hosts is 512 messages, not 2048.
    std::vector<Future<Unit>> waits;
    waits.reserve(placement->distinct.size());
    for (size_t i = 0; i < placement->distinct.size(); ++i) {
      const HostId h = placement->distinct[i];
      HostService* host = core->cluster_->host(h);
      waits.push_back(host ? host->AwaitShards(id, placement->shards_on[i])
                           : Future<Unit>::Ready(
                                 absl::UnavailableError(absl::StrCat(h.ToString(), " is gone"))));
    }
    WhenAll(waits).OnReady([promise](const absl::StatusOr<Unit>& all) { promise.Set(all); });
  });
  return promise.future();
}

void ClientCore::QueueRelease(ArrayId array, const ShardHosts& hosts) {
  OutboxItem item;
  item.release = array;
  item.hosts = hosts.distinct;
  Post(std::move(item));
}

void RunWindow::Add() {
  const int64_t now = unforwarded.fetch_add(1) + 1;
  int64_t peak_so_far = peak.load();
  while (now > peak_so_far && !peak.compare_exchange_weak(peak_so_far, now)) {
  }
}

void RunWindow::Done() {
  const int64_t left = unforwarded.fetch_sub(1) - 1;
  if (left <= resume_at && waiters.load() > 0) {
    MutexLock lock(&mu);
    cv.SignalAll();
  }
}

void RunWindow::Stop() {
  stopped.store(true);
  MutexLock lock(&mu);
  cv.SignalAll();
}

void ClientCore::WaitForRunRoom() {
  const int64_t limit = options_.max_unforwarded_runs;
  RunWindow& w = *run_window_;
  if (limit <= 0 || options_.send_executor || w.unforwarded.load() < limit) return;
  MutexLock lock(&w.mu);
  w.waiters.fetch_add(1);
  // Woken by Done() once the count is down to resume_at (a wake-up between
  // the check and the wait is not lost: Done signals under the lock this
  // thread holds until it waits). The bound is a brake, not a barrier: a
  // caller whose window has not moved for kStalled goes on, so a call made
  // from a thread the window waits on (a callback on a device thread) is
  // slowed, never hung.
  constexpr auto kStalled = std::chrono::seconds(1);
  int64_t last = w.unforwarded.load();
  auto moved = std::chrono::steady_clock::now();
  while (!w.stopped.load() && last > w.resume_at) {
    w.cv.WaitWithDeadline(&w.mu, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
    const int64_t now = w.unforwarded.load();
    if (now < last) {
      last = now;
      moved = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - moved > kStalled) {
      break;
    }
  }
  w.waiters.fetch_sub(1);
}

void ClientCore::Post(OutboxItem item) {
  bool queued = false;
  bool kick = false;
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      kick = options_.send_executor && outbox_.empty();
      if (!options_.send_executor && outbox_.empty()) outbox_cv_.SignalAll();
      if (item.plan != nullptr) run_window_->Add();
      outbox_.push_back(std::move(item));
      queued = true;
    }
  }
  if (kick) {
    options_.send_executor([weak = weak_from_this()] {
      if (std::shared_ptr<ClientCore> self = weak.lock()) self->SendQueued();
    });
  }
  if (queued) return;
  // Disconnected: a run never reaches the cluster; releases are moot
  // (Disconnect reclaimed everything).
  for (Promise<Unit>& p : item.submitted) {
    p.Set(absl::FailedPreconditionError(absl::StrCat(id_.ToString(), " is disconnected")));
  }
}

void ClientCore::OutboxLoop() {
  while (true) {
    std::vector<OutboxItem> batch;
    bool stop;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && outbox_.empty()) {
        outbox_cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + kIdleRecheck);
      }
      batch.swap(outbox_);
      stop = stopping_;
    }
    if (stop) {
      CancelQueued(batch);
      return;
    }
    SendBatch(batch);
  }
}

void ClientCore::SendQueued() {
  std::vector<OutboxItem> batch;
  {
    MutexLock lock(&mu_);
    if (stopping_) return;  // Disconnect settled what was queued
    batch.swap(outbox_);
  }
  SendBatch(batch);
}

void ClientCore::CancelQueued(std::vector<OutboxItem>& batch) {
  // Disconnecting: what is still queued is not sent. A run submitted now
  // could only compute results nobody can read (the client's arrays are
  // reclaimed next), and after a failure each would cost a round trip
  // to a cluster that may be degraded; releases are moot.
  for (OutboxItem& item : batch) {
    if (item.plan != nullptr) run_window_->Done();
    const absl::Status status =
        item.plan != nullptr
            ? absl::CancelledError(absl::StrCat(id_.ToString(), " disconnected before ",
                                                item.run.run.ToString(), " was submitted"))
            : absl::OkStatus();
    for (Promise<Unit>& p : item.submitted) {
      if (status.ok()) {
        p.Set(Unit{});
      } else {
        p.Set(status);
      }
    }
  }
}

void ClientCore::SendBatch(std::vector<OutboxItem>& batch) {
  // Runs go first, in order; consecutive runs on one island share one
  // message to its scheduler. Releases follow: a release can only name an
  // array no later call uses, and must come after the earlier ones.
  // A run's promises are settled when the scheduler forwarded it to its
  // hosts (reads and releases of its outputs wait for that), or at once
  // with the reason it was refused.
  std::vector<OutboxItem*> group;
  auto settle = [](OutboxItem& item, const absl::Status& status) {
    for (Promise<Unit>& p : item.submitted) {
      if (status.ok()) {
        p.Set(Unit{});
      } else {
        p.Set(status);
      }
    }
  };
  auto flush = [&] {
    if (group.empty()) return;
    SchedulerService* scheduler = cluster_->scheduler(group[0]->plan->islands[0]);
    std::vector<RunRequest> runs;
    runs.reserve(group.size());
    auto settlers = std::make_shared<std::vector<std::unique_ptr<OnceSettler>>>();
    TraceRecorder* trace = cluster_->client_trace();
    const int64_t now_us = trace != nullptr && trace->enabled() ? Clock::Real()->NowMicros() : 0;
    for (OutboxItem* item : group) {
      runs.push_back(item->run);
      settlers->push_back(std::make_unique<OnceSettler>(std::move(item->submitted), run_window_));
      if (now_us != 0) {
        trace->Record(TraceEvent{TraceKind::kSubmit, HostId(), DeviceId(), item->run.run, -1,
                                 item->plan->name, now_us});
      }
    }
    const std::vector<absl::Status> statuses = scheduler->SubmitRuns(
        std::move(runs),
        [settlers](size_t i, const absl::Status& s) { (*settlers)[i]->Set(s); });
    for (size_t i = 0; i < group.size(); ++i) {
      if (!statuses[i].ok()) (*settlers)[i]->Set(statuses[i]);
    }
    group.clear();
  };
  // Releases, batched by the hosts they go to.
  std::map<std::vector<HostId>, std::vector<ArrayId>> releases;
  std::vector<OutboxItem*> barriers;
  for (OutboxItem& item : batch) {
    if (item.plan == nullptr) {
      if (item.release.valid()) {
        releases[item.hosts].push_back(item.release);
      } else {
        barriers.push_back(&item);
      }
      continue;
    }
    const bool groupable = item.plan->islands.size() == 1;
    if (groupable && (group.empty() || group[0]->plan->islands[0] == item.plan->islands[0])) {
      group.push_back(&item);
      continue;
    }
    flush();
    if (groupable) {
      group.push_back(&item);
    } else {
      auto settler = std::make_shared<OnceSettler>(std::move(item.submitted), run_window_);
      const absl::Status status = Submit(item.run, *item.plan,
                                         [settler](const absl::Status& s) { settler->Set(s); });
      if (!status.ok()) settler->Set(status);
    }
  }
  flush();
  for (auto& [hosts, ids] : releases) cluster_->ReleaseArrays(id_, hosts, std::move(ids));
  for (OutboxItem* b : barriers) settle(*b, absl::OkStatus());
}

Future<Unit> ClientCore::Flush() {
  OutboxItem barrier;
  barrier.submitted.resize(1);
  Future<Unit> done = barrier.submitted[0].future();
  Post(std::move(barrier));
  return done;
}

void ClientCore::Disconnect() {
  std::vector<std::shared_ptr<const ProgramPlan>> programs;
  absl::flat_hash_map<std::string, Program> cache;
  {
    MutexLock lock(&mu_);
    if (!connected_) return;
    connected_ = false;
    stopping_ = true;
    outbox_cv_.SignalAll();
    control_cv_.SignalAll();
    run_window_->Stop();
    programs.swap(registered_);
    cache.swap(call_cache_);
  }
  if (control_thread_.joinable()) control_thread_.join();
  if (outbox_thread_.joinable()) {
    outbox_thread_.join();
  } else {
    std::vector<OutboxItem> queued;
    {
      MutexLock lock(&mu_);
      queued.swap(outbox_);
    }
    CancelQueued(queued);
  }
  // Runs still held by the schedulers never reach a host; then everything
  // the client owns there goes.
  cluster_->DropClient(id_);
  const Topology topology = cluster_->resources()->GetTopology();
  for (IslandId island : topology.islands()) {
    const IslandInfo info = *topology.island(island);
    for (HostId h : info.hosts) {
      if (HostService* host = cluster_->host(h)) host->ReleaseOwner(id_);
    }
  }
  for (const auto& plan : programs) {
    for (IslandId island : plan->islands) {
      if (SchedulerService* s = cluster_->scheduler(island)) s->UnregisterProgram(plan->id);
    }
    for (HostId h : plan->hosts) {
      if (HostService* host = cluster_->host(h)) host->UnregisterProgram(plan->id);
    }
  }
  cluster_->resources()->UnregisterClient(id_);
}

}  // namespace causeway::internal
