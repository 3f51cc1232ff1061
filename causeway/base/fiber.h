// Fibers: many cooperative tasks, each on a stack of its own, run by a few
// OS threads (a FiberPool). What emulates more devices than a machine has
// cores: a device's stream is a fiber, and when it waits — for an input, a
// `delay`'s end, its peers in a collective — only the fiber parks and the
// pool's thread runs another device's work, instead of the kernel switching
// between as many threads as devices (docs/BENCHMARKS.md, "Where a gang step
// goes").
//
// The waits below work on fibers and on plain threads alike: on a fiber
// they park the fiber; on a thread they block the thread (a futex). Code on
// a fiber must wait only through them (and Future::Await, which uses them),
// never hold a Mutex across one, and never wait on a CondVar or a Mutex
// condition: those block the pool's thread and every fiber behind it.
#ifndef CAUSEWAY_BASE_FIBER_H_
#define CAUSEWAY_BASE_FIBER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace causeway {

namespace fiber {

using Deadline = std::chrono::steady_clock::time_point;

inline constexpr Deadline kNever = Deadline::max();

// The deadline `timeout` from now: kNever for an infinite timeout (or one of
// a year or more, which would overflow the clock), now for a negative one.
inline Deadline DeadlineAfter(absl::Duration timeout) {
  if (timeout >= absl::Hours(24 * 365)) return kNever;
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration())));
}

// True on a fiber of a FiberPool.
bool InFiber();

// Blocks the caller — only the fiber, on a fiber — while `word` holds
// `seen`, until WakeAll(word) or `deadline`. May return early, spuriously:
// callers re-check. False once the deadline has passed.
bool WaitWhileEqual(std::atomic<uint32_t>& word, uint32_t seen, Deadline deadline);

// Wakes every thread and fiber waiting on `word`. Call it after changing
// the word.
void WakeAll(std::atomic<uint32_t>& word);

// Returns at `deadline` (CLOCK_MONOTONIC, as steady_clock), not before; on a
// fiber, parks it meanwhile.
void SleepUntil(Deadline deadline);

}  // namespace fiber

// A fixed set of threads running fibers. Fibers run in the order they
// became runnable; a fiber runs until it waits or ends (no preemption).
// Thread-safe.
class FiberPool {
 public:
  // A fiber started by Spawn().
  class Task {
   public:
    virtual ~Task() = default;
    // Blocks (the caller: a thread or another fiber) until the fiber's body
    // has returned.
    virtual void Join() = 0;
  };

  // `threads` >= 1. `stack_bytes`: each fiber's stack (reserved, committed
  // as used), with a guard page below it.
  explicit FiberPool(int threads, int64_t stack_bytes = int64_t{1} << 20);
  // Waits for every fiber to end, then stops the threads.
  ~FiberPool();
  FiberPool(const FiberPool&) = delete;
  FiberPool& operator=(const FiberPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  // Runs `body` on a new fiber. Never blocks.
  std::shared_ptr<Task> Spawn(std::function<void()> body);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
};

}  // namespace causeway

#endif  // CAUSEWAY_BASE_FIBER_H_
