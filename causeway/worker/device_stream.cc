#include "causeway/worker/device_stream.h"

#include <sys/prctl.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"

namespace causeway {

DeviceStream::DeviceStream(DeviceInfo device, Clock* clock, TraceRecorder* trace,
                           FaultInjector fault_injector)
    : device_(device), clock_(clock), trace_(trace), fault_injector_(std::move(fault_injector)) {
  thread_ = std::thread([this] { Loop(); });
}

DeviceStream::~DeviceStream() { Shutdown(); }

DeviceStream::Pending DeviceStream::Prepare(Launch launch) {
  std::vector<Future<Unit>> deps;
  deps.reserve(launch.inputs.size() + launch.outputs.size());
  for (const BufferRef& b : launch.inputs) deps.push_back(b->ready());
  for (const BufferRef& b : launch.outputs) deps.push_back(b->allocated());
  Future<Unit> all = WhenAll(deps);
  if (trace_->enabled()) {
    trace_->Record(TraceEvent{TraceKind::kPrepared, device_.host, device_.id, launch.info.run,
                              launch.info.node, launch.info.name, clock_->NowMicros(), 0});
  }
  return Pending{std::move(launch), std::move(all)};
}

void DeviceStream::Enqueue(Launch launch) {
  Pending pending = Prepare(std::move(launch));
  MutexLock lock(&mu_);
  queue_.push_back(std::move(pending));
}

void DeviceStream::EnqueueBatch(std::vector<Launch> launches) {
  std::vector<Pending> prepared;
  prepared.reserve(launches.size());
  for (Launch& l : launches) prepared.push_back(Prepare(std::move(l)));
  MutexLock lock(&mu_);
  for (Pending& p : prepared) queue_.push_back(std::move(p));
}

void DeviceStream::Loop() {
  // Linux lets timed sleeps of ordinary threads overshoot by up to 50 us
  // (the default timer slack). A device's `delay` must end on time, so its
  // thread asks for the tightest slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  while (true) {
    Pending pending;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      });
      if (queue_.empty()) return;  // stopping and drained
      pending = std::move(queue_.front());
      queue_.pop_front();
    }
    Execute(pending);
  }
}

void DeviceStream::Execute(Pending& pending) {
  Launch& launch = pending.launch;
  const int64_t wait_start = clock_->NowMicros();
  absl::Status status = pending.deps.Await().status();
  const int64_t start = clock_->NowMicros();
  if (trace_->enabled() && start - wait_start > 0) {
    trace_->Record(TraceEvent{TraceKind::kWait, device_.host, device_.id, launch.info.run,
                              launch.info.node, launch.info.name, wait_start,
                              start - wait_start});
  }
  // An input's error is already the root cause; pass it on unchanged.
  bool ran = false;
  if (status.ok() && fault_injector_) {
    status = fault_injector_(launch.info);
    ran = true;
  }
  if (status.ok()) {
    std::vector<const void*> in;
    std::vector<void*> out;
    in.reserve(launch.inputs.size());
    out.reserve(launch.outputs.size());
    for (const BufferRef& b : launch.inputs) in.push_back(b->data());
    for (const BufferRef& b : launch.outputs) out.push_back(b->data());
    backend::cpu::RunContext context;
    context.collectives = launch.collectives.get();
    status = launch.executable->Run(in, out, context);
    ran = true;
  }
  if (!status.ok() && ran) {
    status = Annotate(status, absl::StrCat("node ", launch.info.node, " (", launch.info.name,
                                           ") of ", launch.info.run.ToString(), " on ",
                                           device_.id.ToString(), ", ", device_.host.ToString()));
  }
  if (!status.ok() && launch.on_failure) launch.on_failure(status);
  const int64_t end = clock_->NowMicros();
  if (trace_->enabled() && ran) {
    trace_->Record(TraceEvent{TraceKind::kRun, device_.host, device_.id, launch.info.run,
                              launch.info.node, launch.info.name, start, end - start});
  }
  {
    MutexLock lock(&mu_);
    ++stats_.launches;
    if (!status.ok()) ++stats_.failed;
    if (ran) {
      stats_.busy_us += end - start;
      if (stats_.first_start_us < 0) stats_.first_start_us = start;
      stats_.last_end_us = end;
    }
  }
  // Drop the launch's references to its buffers before consumers wake, so
  // memory freed by a release is not held by a finished launch.
  std::vector<Promise<Unit>> ready;
  ready.reserve(launch.outputs.size());
  for (const BufferRef& b : launch.outputs) ready.push_back(b->ready_promise());
  launch = Launch{};
  for (const Promise<Unit>& p : ready) {
    if (status.ok()) {
      p.Set(Unit{});
    } else {
      p.Set(status);
    }
  }
}

void DeviceStream::Shutdown() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

DeviceStreamStats DeviceStream::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void DeviceStream::ResetStats() {
  MutexLock lock(&mu_);
  stats_ = DeviceStreamStats{};
}

int DeviceStream::queued() const {
  MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

}  // namespace causeway
