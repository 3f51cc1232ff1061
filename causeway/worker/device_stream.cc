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
      input_timeout_(input_timeout) {
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

void DeviceStream::Signal(bool waiting) {
  if (!waiting) return;
  signal_.fetch_add(1, std::memory_order_release);
  fiber::WakeAll(signal_);
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
  bool waiting = false;
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(launch));
      queued = true;
      waiting = std::exchange(waiting_, false);
    }
  }
  if (queued) {
    Signal(waiting);
    return;
  }
  Refuse(launch);
}

void DeviceStream::EnqueueBatch(std::vector<Launch> launches) {
  for (const Launch& l : launches) Prepared(l);
  bool waiting = false;
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      for (Launch& l : launches) queue_.push_back(std::move(l));
      waiting = std::exchange(waiting_, false);
      launches.clear();
    }
  }
  Signal(waiting);
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

void DeviceStream::Loop() {
  while (true) {
    Launch launch;
    bool popped = false;
    uint32_t seen = 0;
    {
      MutexLock lock(&mu_);
      if (queue_.empty()) {
        if (stopping_) return;  // stopping and drained
        waiting_ = true;
        seen = signal_.load(std::memory_order_relaxed);
      } else {
        launch = std::move(queue_.front());
        queue_.pop_front();
        popped = true;
      }
    }
    if (!popped) {
      // Without the lock: on a fiber, a wait must not hold a mutex.
      fiber::WaitWhileEqual(signal_, seen, fiber::kNever);
      continue;
    }
    Execute(launch);
  }
}

// Waits for the launch's inputs (in order; the first error is the root
// cause), all of them within `input_timeout`, and then for its output
// memory (whose waits DeviceMemory bounds).
// An input's error is already the root cause and passes on unchanged; an
// output that could not be allocated, or an input that never came, is this
// launch's own failure.
static absl::Status AwaitDependencies(const Launch& launch, absl::Duration input_timeout,
                                      bool* own_failure) {
  // Most inputs are ready by the time their launch reaches the head of the
  // queue: only the first that is not reads the clock.
  absl::Time deadline = absl::InfinitePast();
  for (size_t i = 0; i < launch.inputs.size(); ++i) {
    const absl::StatusOr<Unit>* r = launch.inputs[i]->ready_if_known();
    if (r == nullptr) {
      if (deadline == absl::InfinitePast()) {
        deadline = input_timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                             : absl::Now() + input_timeout;
      }
      r = launch.inputs[i]->ready().AwaitWithTimeout(deadline - absl::Now());
    }
    if (r == nullptr) {
      *own_failure = true;
      return absl::DeadlineExceededError(absl::StrCat(
          "input ", i, " was not ready after ", absl::FormatDuration(input_timeout),
          " at the head of the device's queue: its producer (a launch of this run, or a piece "
          "another host was to send) never ran or never came"));
    }
    if (!r->ok()) return r->status();
  }
  for (const BufferRef& b : launch.outputs) {
    if (b->granted()) continue;
    const absl::StatusOr<Unit>* known = b->allocated_if_known();
    if (const absl::StatusOr<Unit>& r = known != nullptr ? *known : b->allocated().Await();
        !r.ok()) {
      *own_failure = true;
      return r.status();
    }
  }
  if (launch.scratch != nullptr) {
    if (const absl::StatusOr<Unit>& r = launch.scratch->allocated().Await(); !r.ok()) {
      *own_failure = true;
      return Annotate(r.status(), "temporaries");
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceStream::Run(const Launch& launch) {
  absl::InlinedVector<const backend::DeviceAllocation*, 8> in;
  absl::InlinedVector<backend::DeviceAllocation*, 8> out;
  for (const BufferRef& b : launch.inputs) {
    CW_ASSIGN_OR_RETURN(backend::DeviceAllocation * a, b->storage());
    in.push_back(a);
  }
  for (const BufferRef& b : launch.outputs) {
    CW_ASSIGN_OR_RETURN(backend::DeviceAllocation * a, b->storage());
    out.push_back(a);
  }
  backend::RunContext context;
  context.collectives = launch.collectives.get();
  context.stop = &stop_launch_;
  // The cpu kind completes before Launch returns; another kind completes
  // when its queue ran the work, and the stream (a thread, or a fiber that
  // parks) waits for it: the launch's buffers and collectives stay alive
  // meanwhile in `launch`. One launch is in flight at a time, so its
  // outcome has one place for the stream's life, held by the completion
  // too (it may still be waking the stream when the stream is gone): the
  // common case (inline) costs no allocation.
  // `done`: kPending, then kDone; kWaiting while the loop sleeps on it,
  // so that a completion wakes (a system call) only a loop that sleeps.
  LaunchOutcome& outcome = *outcome_;
  outcome.done.store(LaunchOutcome::kPending, std::memory_order_relaxed);
  backend_->Launch(*launch.executable, in, out, context,
                   [outcome = outcome_](absl::Status status) {
                     outcome->status = std::move(status);
                     if (outcome->done.exchange(LaunchOutcome::kDone, std::memory_order_acq_rel) ==
                         LaunchOutcome::kWaiting) {
                       fiber::WakeAll(outcome->done);
                     }
                   });
  uint32_t seen = LaunchOutcome::kPending;
  if (outcome.done.compare_exchange_strong(seen, LaunchOutcome::kWaiting,
                                           std::memory_order_acq_rel)) {
    while (outcome.done.load(std::memory_order_acquire) != LaunchOutcome::kDone) {
      fiber::WaitWhileEqual(outcome.done, LaunchOutcome::kWaiting, fiber::kNever);
    }
  }
  return std::exchange(outcome.status, absl::OkStatus());
}

void DeviceStream::Execute(Launch& launch) {
  // Only the trace needs to know how long the launch waited.
  const int64_t wait_start = trace_->enabled() ? clock_->NowMicros() : 0;
  bool own_failure = false;
  absl::Status status = AwaitDependencies(launch, input_timeout_, &own_failure);
  const int64_t start = clock_->NowMicros();
  if (trace_->enabled() && start - wait_start > 0) {
    trace_->Record(TraceEvent{TraceKind::kWait, device_.host, device_.id, launch.info.run,
                              launch.info.node, std::string(launch.info.name), wait_start,
                              start - wait_start});
  }
  // An input's error is already the root cause; pass it on unchanged.
  bool ran = false;
  int64_t collective_us = 0;
  if (status.ok() && fault_injector_) {
    status = fault_injector_(launch.info);
    ran = true;
  }
  if (status.ok()) {
    status = Run(launch);
    if (launch.collectives != nullptr) {
      collective_us = launch.collectives->micros_in_collectives();
    }
    launch.scratch.reset();
    launch.scratch_hold.reset();
    ran = true;
  }
  if (!status.ok() && (ran || own_failure)) {
    status = Annotate(status, absl::StrCat("node ", launch.info.node, " (", launch.info.name,
                                           ") of ", launch.info.run.ToString(), " on ",
                                           device_.id.ToString(), ", ", device_.host.ToString()));
  }
  if (!status.ok() && launch.on_failure) launch.on_failure(status);
  const int64_t end = clock_->NowMicros();
  if (trace_->enabled() && ran) {
    trace_->Record(TraceEvent{TraceKind::kRun, device_.host, device_.id, launch.info.run,
                              launch.info.node, std::string(launch.info.name), start, end - start});
  }
  {
    MutexLock lock(&mu_);
    ++stats_.launches;
    if (!status.ok()) ++stats_.failed;
    if (ran) {
      stats_.busy_us += end - start;
      stats_.collective_us += std::min(collective_us, end - start);
      if (stats_.first_start_us < 0) stats_.first_start_us = start;
      stats_.last_end_us = end;
    }
  }
  CompleteLaunch(launch, status, ran ? end - start : 0);
}

void DeviceStream::Shutdown() {
  bool waiting;
  std::deque<Launch> queued;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    waiting = std::exchange(waiting_, false);
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
  Signal(waiting);
  if (thread_.joinable()) thread_.join();
  if (task_ != nullptr) {
    task_->Join();
    task_.reset();
  }
}

DeviceCounters DeviceStream::stats() const {
  MutexLock lock(&mu_);
  DeviceCounters s = stats_;
  s.device = device_.id;
  s.queued = static_cast<int64_t>(queue_.size());
  return s;
}

void DeviceStream::ResetStats() {
  MutexLock lock(&mu_);
  stats_ = DeviceCounters{};
}

}  // namespace causeway
