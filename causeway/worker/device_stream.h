// DeviceStream: one thread (or fiber) per device that runs launches strictly
// in the order they were enqueued (the island scheduler's order). A launch waits
// for its inputs to be ready and its output memory to be granted, then runs
// its kernel and marks its outputs ready — or, if an input failed or the
// kernel failed, poisons its outputs with the error.
#ifndef CAUSEWAY_WORKER_DEVICE_STREAM_H_
#define CAUSEWAY_WORKER_DEVICE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "causeway/async/future.h"
#include "causeway/backend/executable.h"
#include "causeway/base/clock.h"
#include "causeway/base/fiber.h"
#include "causeway/base/mutex.h"
#include "causeway/store/buffer.h"
#include "causeway/base/trace.h"
#include "causeway/topology/topology.h"
#include "causeway/transport/services.h"

namespace causeway {

// The launches of one run on one host: the last to finish reports the
// run's device time and launch count through `done`. Shared by the launches
// (one allocation per run and host, not one per launch).
struct RunTally {
  RunTally(int launches, std::function<void(int64_t busy_us, int launches)> done)
      : launches(launches), left(launches), done(std::move(done)) {}
  // Called once per launch, with the time its kernel took.
  void LaunchDone(int64_t busy) {
    busy_us.fetch_add(busy);
    if (left.fetch_sub(1) == 1) done(busy_us.load(), launches);
  }

  const int launches;
  std::atomic<int> left;
  std::atomic<int64_t> busy_us{0};
  const std::function<void(int64_t busy_us, int launches)> done;
  // What the run's launches point into (their plan), held once for all of
  // them: a device finishing a launch then does not touch a reference
  // count the host's thread keeps writing for the launches it prepares.
  std::shared_ptr<const void> keep_alive;
};

struct Launch {
  LaunchInfo info;
  // The client whose run it is, and its cancellation: set when the client
  // left or its work was cancelled (HostExecutor::ReleaseOwner). A launch
  // whose flag is set fails with CANCELLED instead of starting, and one
  // running sees it (RunContext::cancel). May be null.
  ClientId owner;
  std::shared_ptr<const std::atomic<bool>> cancel;
  // How long it may run once started (RunRequest::time_limit_us); 0: no
  // limit.
  int64_t time_limit_us = 0;
  // Keeps alive what the launch points into (its program plan, which owns
  // the executable), unless its tally does.
  std::shared_ptr<const void> keep_alive;
  const backend::Executable* executable = nullptr;
  absl::InlinedVector<BufferRef, 4> inputs;
  absl::InlinedVector<BufferRef, 4> outputs;
  // The device memory its temporaries take while it runs: granted at once
  // (`scratch_hold`) or, when the device is full, a reservation that waits
  // in line with the other allocations (`scratch`); neither if it needs
  // none.
  MemoryHold scratch_hold;
  BufferRef scratch;
  // Null if the function has no collectives.
  std::unique_ptr<backend::CollectiveOps> collectives;
  // Runs on the device thread if the launch fails (input error, injected
  // fault, kernel error), before its outputs are poisoned. May be empty.
  std::function<void(const absl::Status&)> on_failure;
  // Told on the device thread after the launch finished (ran or failed) and
  // its outputs are marked, with the time its kernel took (0 if it did not
  // run). No lock of the stream is held. May be null.
  std::shared_ptr<RunTally> tally;
};

// Ends `launch`: drops its references to its buffers (so that memory a
// release frees is not held by a finished launch), then marks its outputs
// ready (or poisoned with `status`) and tells its tally, with `busy_us`.
// What every LaunchQueue does with a launch that ran or failed.
void CompleteLaunch(Launch& launch, const absl::Status& status, int64_t busy_us);
// A launch that never ran: its failure hook, then CompleteLaunch.
void RefuseLaunch(Launch& launch, const absl::Status& status);

// What a host executor hands a device's launches to, in the island's
// order. DeviceStream is the real one (a thread running kernels); a
// simulator supplies one that runs them on a virtual clock
// (HostExecutorOptions::make_queue). Implementations must run launches in
// enqueue order, mark every output ready or poisoned, and report each
// launch to its tally exactly once.
class LaunchQueue {
 public:
  virtual ~LaunchQueue() = default;
  virtual const DeviceInfo& device() const = 0;
  virtual void Enqueue(Launch launch) = 0;
  virtual void EnqueueBatch(std::vector<Launch> launches) = 0;
  // Runs or fails what is queued; later launches fail with UNAVAILABLE.
  virtual void Shutdown() = 0;
  // Fails every queued launch of `owner` with CANCELLED, naming it; one
  // already running ends at its next check of its cancel flag, which the
  // caller set first. Returns how many were taken from the queue.
  virtual int CancelOwner(ClientId owner) = 0;
  // Its launch and time counters (DeviceCounters without memory); busy_us
  // includes the launch running now, so far.
  virtual DeviceCounters stats() const = 0;
  virtual void ResetStats() = 0;
};

// Thread-safe.
class DeviceStream final : public LaunchQueue {
 public:
  // A launch at the head of the queue waits at most `input_timeout` for
  // its inputs (then fails with DEADLINE_EXCEEDED naming the input): a
  // producer that never runs — a run some host never got, a piece a peer
  // never sends — must not hold every later launch of the device forever.
  //
  // With a `pool`, the stream runs as a fiber of it instead of a thread of
  // its own: its waits (inputs, memory, a `delay`, a collective's peers)
  // park the fiber, and the pool's threads run other devices meanwhile. The
  // pool must outlive the stream.
  //
  // Launches go to `backend` (which outlives the stream) in queue order.
  // Up to backend->max_launches_in_flight() are started and not yet
  // completed: a launch starts as soon as each input is ready or is written
  // by a launch in flight on this device (which the device runs first), so
  // a GPU's queue holds the next launch while the last runs. A launch's
  // outputs are marked ready, and its tally told, on the stream's thread
  // once it completed, in queue order; a launch that read the output of
  // one that failed fails with that error.
  DeviceStream(DeviceInfo device, backend::Device* backend, Clock* clock, TraceRecorder* trace,
               FaultInjector fault_injector,
               absl::Duration input_timeout = absl::InfiniteDuration(),
               FiberPool* pool = nullptr);
  ~DeviceStream() override;

  const DeviceInfo& device() const override { return device_; }

  // Queues `launch` after every launch enqueued before it. Never blocks on
  // data. The launch's readiness is wired here, on the calling thread.
  void Enqueue(Launch launch) override;
  // Queues `launches` in order, waking the device thread once: what a host
  // does with all of one run's launches for a device.
  void EnqueueBatch(std::vector<Launch> launches) override;

  // Runs what is queued, then stops the thread; launches enqueued later fail
  // with UNAVAILABLE. Every queued launch must be able to finish or fail (its
  // inputs' producers are running or failed).
  void Shutdown() override;
  int CancelOwner(ClientId owner) override;

  DeviceCounters stats() const override;
  void ResetStats() override;

 private:
  // What wakes the loop: new work, Shutdown, or a launch's completion (from
  // the device's thread). Shared with the completions, which may still be
  // waking it as the stream goes away.
  struct Waker {
    // The loop waits on `signal` (fiber::WaitWhileEqual) after setting
    // `waiting` and looking once more for something to do; whoever gives it
    // something to do (under mu_, or a completion's `done`) then calls
    // Wake(), which signals only a loop that says it waits.
    std::atomic<uint32_t> signal{0};
    std::atomic<bool> waiting{false};
    void Wake() {
      if (waiting.exchange(false)) Signal();
    }
    void Signal() {
      signal.fetch_add(1, std::memory_order_release);
      fiber::WakeAll(signal);
    }
  };
  // The outcome of a launch in flight: `status` and `end_us` are written by
  // its completion before `done` is set (release), read by the loop after
  // it saw `done` (acquire). Reused once the completion let go of it.
  struct Outcome {
    std::atomic<bool> done{false};
    absl::Status status;
    int64_t end_us = 0;
  };
  // A launch started on the device (or failed before it could be), in queue
  // order. Touched by the loop only.
  struct InFlight {
    Launch launch;
    std::shared_ptr<Outcome> outcome;  // null: never started, `status` says why
    absl::Status status;
    bool own_failure = false;  // `status` is this launch's failure, not an input's
    bool ran = false;          // its kernel (or the fault injector) ran
    int64_t start_us = 0;
  };

  void Loop();
  // Waits for the launch's dependencies and starts it (or fails it): it is
  // in in_flight_ when this returns.
  void Start(Launch launch);
  // Waits for what `launch` needs that is not written by a launch in flight
  // here: its inputs (within input_timeout_), its output memory and its
  // temporaries. Drains in_flight_ before any wait, since what it waits for
  // may depend on them. An input's error is passed on unchanged; an output
  // that could not be allocated, or an input that never came, is the
  // launch's own failure.
  absl::Status AwaitDependencies(const Launch& launch, bool* own_failure);
  // Ends the launches at the front of in_flight_ that completed, in order.
  void Reap();
  // Ends every launch in flight, waiting for their completions.
  void Drain();
  // Marks its outputs, counts it, traces it and tells its tally.
  void Finish(InFlight& f);
  // Waits until Wake(), unless `progress` (called after `waiting` is set)
  // says there is something to do.
  template <typename Progress>
  void WaitUnless(const Progress& progress);
  std::shared_ptr<Outcome> NewOutcome();
  // Records the launch's trace event; no lock needed.
  void Prepared(const Launch& launch);
  // Fails a launch that arrived after Shutdown().
  void Refuse(Launch& launch);

  const DeviceInfo device_;
  backend::Device* const backend_;
  Clock* const clock_;
  TraceRecorder* const trace_;
  const FaultInjector fault_injector_;
  const absl::Duration input_timeout_;
  // Launches started and not yet ended (backend_->max_launches_in_flight()).
  const size_t depth_;
  mutable Mutex mu_;
  std::deque<Launch> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Set by Shutdown, read by the launches in flight (RunContext::stop),
  // which may then end early instead of running on.
  std::atomic<bool> stop_launch_{false};
  DeviceCounters stats_ ABSL_GUARDED_BY(mu_);
  // Clock micros since when a launch has been running without a break; -1
  // while none runs. stats() counts that time as busy, so a launch that
  // runs for long (a loop) shows as the device's work before it ends.
  std::atomic<int64_t> running_since_us_{-1};
  const std::shared_ptr<Waker> waker_ = std::make_shared<Waker>();
  // The loop's own (no lock): the launches in flight, in queue order; the
  // buffers they write; outcomes to reuse.
  std::deque<InFlight> in_flight_;
  absl::flat_hash_set<const DeviceBuffer*> written_in_flight_;
  std::vector<std::shared_ptr<Outcome>> spare_outcomes_;
  // One of them runs the loop.
  std::thread thread_;
  std::shared_ptr<FiberPool::Task> task_;
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_DEVICE_STREAM_H_
