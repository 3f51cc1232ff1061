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
  // Its launch and time counters (DeviceCounters without memory).
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
  // Launches go to `backend` (which outlives the stream) in queue order,
  // one at a time: the next starts once the device completed the last, and
  // a launch's outputs are marked ready on its completion.
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

  DeviceCounters stats() const override;
  void ResetStats() override;

 private:
  void Loop();
  void Execute(Launch& launch);
  // Launches on backend_ and waits for its completion: the kernel's error.
  absl::Status Run(const Launch& launch);
  // Records the launch's trace event; no lock needed.
  void Prepared(const Launch& launch);
  // Fails a launch that arrived after Shutdown().
  void Refuse(Launch& launch);
  // Wakes the loop if it waits for work (after queue_ or stopping_ changed).
  void Signal(bool waiting);

  const DeviceInfo device_;
  backend::Device* const backend_;
  Clock* const clock_;
  TraceRecorder* const trace_;
  const FaultInjector fault_injector_;
  const absl::Duration input_timeout_;
  mutable Mutex mu_;
  std::deque<Launch> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Set by Shutdown, read by the launch in flight (RunContext::stop), which
  // may then end early instead of running on.
  std::atomic<bool> stop_launch_{false};
  DeviceCounters stats_ ABSL_GUARDED_BY(mu_);
  // The loop waits for work on `signal_` (fiber::WaitWhileEqual), after
  // saying so in `waiting_`.
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint32_t> signal_{0};
  // The outcome of the launch in flight (Run). `status` is written by the
  // launch's completion before it sets `done` (release) and read by the
  // loop after it saw `done` set (acquire); the loop is the only launcher,
  // one launch at a time.
  struct LaunchOutcome {
    static constexpr uint32_t kPending = 0, kDone = 1, kWaiting = 2;
    std::atomic<uint32_t> done{kPending};
    absl::Status status;
  };
  const std::shared_ptr<LaunchOutcome> outcome_ = std::make_shared<LaunchOutcome>();
  // One of them runs the loop.
  std::thread thread_;
  std::shared_ptr<FiberPool::Task> task_;
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_DEVICE_STREAM_H_
