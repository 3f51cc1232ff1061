#include "causeway/worker/device_stream.h"

#include <sys/prctl.h>

#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/device.h"
#include "causeway/base/status_macros.h"

namespace causeway {

DeviceStream::DeviceStream(DeviceInfo device, backend::Device* backend, Clock* clock,
                           TraceRecorder* trace, FaultInjector fault_injector,
                           absl::Duration input_timeout, FiberPool* pool)
    : device_(device),
      backend_(backend),
      clock_(clock),
      trace_(trace),
      fault_injector_(std::move(fault_injector)),
      input_timeout_(input_timeout),
      depth_(static_cast<size_t>(std::max(1, backend->max_launches_in_flight()))) {
  if (pool != nullptr) {
    task_ = pool->Spawn([this] { Loop(); });
  } else {
    thread_ = std::thread([this] {
      // Linux lets timed sleeps of ordinary threads overshoot by up to 50 us
      // (the default timer slack). A device's `delay` must end on time, so
      // its thread asks for the tightest slack (a pool's threads do too).
      prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
      Loop();
    });
  }
}

DeviceStream::~DeviceStream() { Shutdown(); }

void DeviceStream::Prepared(const Launch& launch) {
  if (trace_->enabled()) {
    trace_->Record(TraceEvent{TraceKind::kPrepared, device_.host, device_.id, launch.info.run,
                              launch.info.node, std::string(launch.info.name),
                              clock_->NowMicros(), 0});
  }
}

void DeviceStream::Enqueue(Launch launch) {
  Prepared(launch);
  bool queued = false;
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(launch));
      queued = true;
    }
  }
  if (queued) {
    waker_->Wake();
    return;
  }
  Refuse(launch);
}

void DeviceStream::EnqueueBatch(std::vector<Launch> launches) {
  for (const Launch& l : launches) Prepared(l);
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      for (Launch& l : launches) queue_.push_back(std::move(l));
      launches.clear();
    }
  }
  waker_->Wake();
  for (Launch& l : launches) Refuse(l);
}

void DeviceStream::Refuse(Launch& launch) {
  const absl::Status status = absl::UnavailableError(
      absl::StrCat("node ", launch.info.node, " (", launch.info.name, ") of ",
                   launch.info.run.ToString(), " reached ", device_.id.ToString(), ", ",
                   device_.host.ToString(), " after it shut down"));
  RefuseLaunch(launch, status);
}

void CompleteLaunch(Launch& launch, const absl::Status& status, int64_t busy_us) {
  absl::InlinedVector<Promise<Unit>, 4> ready;
  ready.reserve(launch.outputs.size());
  for (const BufferRef& b : launch.outputs) ready.push_back(b->ready_promise());
  std::shared_ptr<RunTally> tally = std::move(launch.tally);
  launch = Launch{};
  for (const Promise<Unit>& p : ready) {
    if (status.ok()) {
      p.Set(Unit{});
    } else {
      p.Set(status);
    }
  }
  if (tally) tally->LaunchDone(busy_us);
}

void RefuseLaunch(Launch& launch, const absl::Status& status) {
  if (launch.on_failure) launch.on_failure(status);
  CompleteLaunch(launch, status, 0);
}

template <typename Progress>
void DeviceStream::WaitUnless(const Progress& progress) {
  const uint32_t seen = waker_->signal.load(std::memory_order_acquire);
  waker_->waiting.store(true);
  if (progress()) {
    waker_->waiting.store(false);
    return;
  }
  // Without a lock: on a fiber, a wait must not hold a mutex.
  fiber::WaitWhileEqual(waker_->signal, seen, fiber::kNever);
}

void DeviceStream::Loop() {
  while (true) {
    Reap();
    Launch launch;
    bool popped = false;
    bool stopping = false;
    {
      MutexLock lock(&mu_);
      if (in_flight_.size() < depth_ && !queue_.empty()) {
        launch = std::move(queue_.front());
        queue_.pop_front();
        popped = true;
      }
      stopping = stopping_;
    }
    if (popped) {
      Start(std::move(launch));
      continue;
    }
    if (stopping && in_flight_.empty()) {
      MutexLock lock(&mu_);
      if (queue_.empty()) return;  // stopping and drained
      continue;
    }
    // Nothing to start: wait for work, or for the oldest launch in flight.
    WaitUnless([this] {
      if (!in_flight_.empty() && in_flight_.front().outcome != nullptr &&
          in_flight_.front().outcome->done.load()) {
        return true;
      }
      MutexLock lock(&mu_);
      return (in_flight_.size() < depth_ && !queue_.empty()) ||
             (stopping_ && in_flight_.empty());
    });
  }
}

void DeviceStream::Reap() {
  while (!in_flight_.empty()) {
    InFlight& front = in_flight_.front();
    if (front.outcome != nullptr && !front.outcome->done.load(std::memory_order_acquire)) {
      return;
    }
    InFlight f = std::move(front);
    in_flight_.pop_front();
    Finish(f);
    if (in_flight_.empty()) running_since_us_.store(-1, std::memory_order_relaxed);
  }
}

void DeviceStream::Drain() {
  while (true) {
    Reap();
    if (in_flight_.empty()) return;
    WaitUnless([this] { return in_flight_.front().outcome->done.load(); });
  }
}

absl::Status DeviceStream::AwaitDependencies(const Launch& launch, bool* own_failure) {
  // Most inputs are ready by the time their launch reaches the head of the
  // queue, or are written by a launch in flight here: only the first that
  // is neither drains what is in flight and reads the clock.
  absl::Time deadline = absl::InfinitePast();
  for (size_t i = 0; i < launch.inputs.size(); ++i) {
    const absl::StatusOr<Unit>* r = launch.inputs[i]->ready_if_known();
    if (r == nullptr && written_in_flight_.contains(launch.inputs[i].get())) continue;
    if (r == nullptr) {
      Drain();
      r = launch.inputs[i]->ready_if_known();
    }
    if (r == nullptr) {
      if (deadline == absl::InfinitePast()) {
        deadline = input_timeout_ == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                              : absl::Now() + input_timeout_;
      }
      r = launch.inputs[i]->ready().AwaitWithTimeout(deadline - absl::Now());
    }
    if (r == nullptr) {
      *own_failure = true;
      return absl::DeadlineExceededError(absl::StrCat(
          "input ", i, " was not ready after ", absl::FormatDuration(input_timeout_),
          " at the head of the device's queue: its producer (a launch of this run, or a piece "
          "another host was to send) never ran or never came"));
    }
    if (!r->ok()) return r->status();
  }
  // Memory a launch in flight holds may be what an allocation waits for.
  for (const BufferRef& b : launch.outputs) {
    if (b->granted()) continue;
    const absl::StatusOr<Unit>* known = b->allocated_if_known();
    if (known == nullptr) Drain();
    if (const absl::StatusOr<Unit>& r = known != nullptr ? *known : b->allocated().Await();
        !r.ok()) {
      *own_failure = true;
      return r.status();
    }
  }
  if (launch.scratch != nullptr) {
    if (launch.scratch->allocated_if_known() == nullptr) Drain();
    if (const absl::StatusOr<Unit>& r = launch.scratch->allocated().Await(); !r.ok()) {
      *own_failure = true;
      return Annotate(r.status(), "temporaries");
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<DeviceStream::Outcome> DeviceStream::NewOutcome() {
  // An outcome whose completion has let go of it is ours alone again.
  for (std::shared_ptr<Outcome>& o : spare_outcomes_) {
    if (o.use_count() == 1) {
      o->done.store(false, std::memory_order_relaxed);
      o->status = absl::OkStatus();
      return o;
    }
  }
  auto o = std::make_shared<Outcome>();
  if (spare_outcomes_.size() < depth_ + 1) spare_outcomes_.push_back(o);
  return o;
}

void DeviceStream::Start(Launch launch) {
  // Only the trace needs to know how long the launch waited.
  const int64_t wait_start = trace_->enabled() ? clock_->NowMicros() : 0;
  InFlight f;
  // A fault injector may hold the launch until something else happened:
  // nothing of this device may wait behind it.
  if (fault_injector_) Drain();
  f.status = AwaitDependencies(launch, &f.own_failure);
  f.start_us = clock_->NowMicros();
  if (trace_->enabled() && f.start_us - wait_start > 0) {
    trace_->Record(TraceEvent{TraceKind::kWait, device_.host, device_.id, launch.info.run,
                              launch.info.node, std::string(launch.info.name), wait_start,
                              f.start_us - wait_start});
  }
  if (f.status.ok() && launch.cancel != nullptr && launch.cancel->load()) {
    f.status = absl::CancelledError(
        absl::StrCat(launch.owner.ToString(), "'s work was cancelled (it left) before it ran"));
    f.own_failure = true;
  }
  if (f.status.ok() && fault_injector_) {
    f.status = fault_injector_(launch.info);
    f.ran = true;
  }
  absl::InlinedVector<const backend::DeviceAllocation*, 8> in;
  absl::InlinedVector<backend::DeviceAllocation*, 8> out;
  for (const BufferRef& b : launch.inputs) {
    if (!f.status.ok()) break;
    absl::StatusOr<backend::DeviceAllocation*> a = b->storage();
    if (a.ok()) in.push_back(*a);
    f.status = a.status();
    f.ran = !f.status.ok() || f.ran;
  }
  for (const BufferRef& b : launch.outputs) {
    if (!f.status.ok()) break;
    absl::StatusOr<backend::DeviceAllocation*> a = b->storage();
    if (a.ok()) out.push_back(*a);
    f.status = a.status();
    f.ran = !f.status.ok() || f.ran;
  }
  if (!f.status.ok()) {
    f.launch = std::move(launch);
    in_flight_.push_back(std::move(f));
    return;
  }
  f.ran = true;
  f.outcome = NewOutcome();
  for (const BufferRef& b : launch.outputs) written_in_flight_.insert(b.get());
  backend::RunContext context;
  context.collectives = launch.collectives.get();
  context.stop = &stop_launch_;
  context.cancel = launch.cancel.get();
  if (launch.time_limit_us > 0) {
    context.deadline = absl::Now() + absl::Microseconds(launch.time_limit_us);
  }
  f.launch = std::move(launch);
  in_flight_.push_back(std::move(f));
  InFlight& started = in_flight_.back();
  int64_t idle = -1;
  running_since_us_.compare_exchange_strong(idle, started.start_us, std::memory_order_relaxed);
  // The allocations, the executable and the collectives stay alive in
  // `started.launch` until the completion ran; the cpu kind runs it before
  // Launch returns, another kind on its own thread.
  backend_->Launch(*started.launch.executable, in, out, context,
                   [outcome = started.outcome, waker = waker_,
                    clock = clock_](absl::Status status) {
                     outcome->status = std::move(status);
                     outcome->end_us = clock->NowMicros();
                     outcome->done.store(true);
                     waker->Wake();
                   });
}

void DeviceStream::Finish(InFlight& f) {
  Launch& launch = f.launch;
  absl::Status status = std::move(f.status);
  int64_t end = f.start_us;
  int64_t collective_us = 0;
  if (f.outcome != nullptr) {
    status = std::move(f.outcome->status);
    end = f.outcome->end_us;
    f.outcome.reset();
    for (const BufferRef& b : launch.outputs) written_in_flight_.erase(b.get());
    // It may have read the output of a launch before it that failed: that
    // error is its root cause, whatever the kernel said.
    for (const BufferRef& b : launch.inputs) {
      const absl::StatusOr<Unit>* r = b->ready_if_known();
      if (r != nullptr && !r->ok()) {
        status = r->status();
        f.own_failure = false;
        f.ran = false;
        break;
      }
    }
    if (launch.collectives != nullptr) {
      collective_us = launch.collectives->micros_in_collectives();
    }
  } else if (f.ran) {
    end = clock_->NowMicros();
  }
  launch.scratch.reset();
  launch.scratch_hold.reset();
  if (!status.ok() && (f.ran || f.own_failure)) {
    status = Annotate(status, absl::StrCat("node ", launch.info.node, " (", launch.info.name,
                                           ") of ", launch.info.run.ToString(), " on ",
                                           device_.id.ToString(), ", ", device_.host.ToString()));
  }
  if (!status.ok() && launch.on_failure) launch.on_failure(status);
  if (trace_->enabled() && f.ran) {
    trace_->Record(TraceEvent{TraceKind::kRun, device_.host, device_.id, launch.info.run,
                              launch.info.node, std::string(launch.info.name), f.start_us,
                              end - f.start_us});
  }
  int64_t busy = 0;
  {
    MutexLock lock(&mu_);
    ++stats_.launches;
    if (!status.ok()) ++stats_.failed;
    if (f.ran) {
      // Launches in flight overlap: the device was busy from the later of
      // this one's start and the last one's end.
      const int64_t from =
          stats_.last_end_us >= 0 ? std::max(f.start_us, stats_.last_end_us) : f.start_us;
      busy = std::max<int64_t>(0, end - from);
      stats_.busy_us += busy;
      stats_.collective_us += std::min(collective_us, busy);
      if (stats_.first_start_us < 0) stats_.first_start_us = f.start_us;
      stats_.last_end_us = std::max(stats_.last_end_us, end);
    }
  }
  CompleteLaunch(launch, status, busy);
}

void DeviceStream::Shutdown() {
  std::deque<Launch> queued;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    // What has not started fails now rather than running first: a stop is
    // bounded by the launch in progress, not by the whole queue (a
    // worker's SIGTERM, an interpreter's exit).
    queued.swap(queue_);
  }
  for (Launch& l : queued) {
    RefuseLaunch(l, absl::UnavailableError(absl::StrCat(
                        "node ", l.info.node, " (", l.info.name, ") of ", l.info.run.ToString(),
                        " was queued on ", device_.id.ToString(), ", ", device_.host.ToString(),
                        " when it shut down; it did not run")));
  }
  stop_launch_.store(true, std::memory_order_relaxed);
  waker_->Signal();
  if (thread_.joinable()) thread_.join();
  if (task_ != nullptr) {
    task_->Join();
    task_.reset();
  }
}

int DeviceStream::CancelOwner(ClientId owner) {
  std::vector<Launch> cancelled;
  {
    MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->owner == owner) {
        cancelled.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Launch& l : cancelled) {
    RefuseLaunch(l, absl::CancelledError(absl::StrCat(
                        "node ", l.info.node, " (", l.info.name, ") of ", l.info.run.ToString(),
                        " was queued on ", device_.id.ToString(), ", ", device_.host.ToString(),
                        " when ", owner.ToString(), "'s work was cancelled; it did not run")));
  }
  return static_cast<int>(cancelled.size());
}

DeviceCounters DeviceStream::stats() const {
  MutexLock lock(&mu_);
  DeviceCounters s = stats_;
  s.device = device_.id;
  s.queued = static_cast<int64_t>(queue_.size());
  if (const int64_t running = running_since_us_.load(std::memory_order_relaxed); running >= 0) {
    const int64_t from = std::max(running, s.last_end_us);
    s.busy_us += std::max<int64_t>(0, clock_->NowMicros() - from);
  }
  return s;
}

void DeviceStream::ResetStats() {
  MutexLock lock(&mu_);
  stats_ = DeviceCounters{};
}

}  // namespace causeway
