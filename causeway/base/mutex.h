// Mutex, scoped lock and one-shot notification.
//
// Causeway uses these instead of absl::Mutex / absl::Notification. The
// abseil in Debian bookworm is a prebuilt shared library without
// ThreadSanitizer instrumentation, and absl::Mutex synchronises through raw
// futex calls inside it, so TSan would see none of the happens-before edges
// and report races on every guarded field. These wrappers sit on std::mutex
// (pthreads, which TSan intercepts) and keep abseil's thread-safety
// annotations and its Await(condition) style.
#ifndef CAUSEWAY_BASE_MUTEX_H_
#define CAUSEWAY_BASE_MUTEX_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace causeway {

// A non-reentrant mutex with conditional waits. Await() re-evaluates its
// condition whenever another thread releases the mutex, like absl::Mutex.
// Thread-safe.
class ABSL_LOCKABLE Mutex {
 public:
  friend class CondVar;
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (!mu_.try_lock()) LockContended();
  }

  // Whether this thread tries a held Mutex for a while before sleeping on
  // it (see LockContended). Off by default: where threads outnumber cores
  // (a thread per emulated device), the holder is often not running, and
  // the spin only delays it. A FiberPool's threads, as many as cores, turn
  // it on.
  static void SpinOnContention(bool on) { spin_on_contention_ = on; }
  static bool SpinsOnContention() { return spin_on_contention_; }
  void Unlock() ABSL_UNLOCK_FUNCTION() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // Notified after unlocking, so woken waiters do not at once block on the
    // mutex. REQUIRES: the Mutex outlives every thread still inside Unlock();
    // objects destroyed right after a wait use UnlockWakingFirst().
    const bool wake = waiters_ > 0;
    mu_.unlock();
    if (wake) cv_.notify_all();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // Like Unlock(), but wakes waiters before releasing the mutex, so this
  // thread does not touch the Mutex once it is released: for objects a
  // waiter may destroy as soon as its wait returns (Notification).
  void UnlockWakingFirst() ABSL_UNLOCK_FUNCTION() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (waiters_ > 0) cv_.notify_all();
    mu_.unlock();
  }

  // REQUIRES: held. Blocks until `cond()` is true; `cond` runs with the
  // mutex held.
  template <typename Cond>
  void Await(Cond cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    ++waiters_;
    // Waiting releases the mutex: like Unlock(), let other waiters re-check
    // what this thread may have changed while holding it.
    if (!cond()) {
      if (waiters_ > 1) cv_.notify_all();
      do {
        cv_.wait(lock);
      } while (!cond());
    }
    --waiters_;
    lock.release();
  }

  // REQUIRES: held. Like Await, but gives up after `timeout`. Returns whether
  // the condition holds.
  template <typename Cond>
  bool AwaitWithTimeout(Cond cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (timeout == absl::InfiniteDuration()) {
      Await(std::move(cond));
      return true;
    }
    // Clamp absurd timeouts so the deadline cannot overflow.
    timeout = std::min(timeout, absl::Hours(24 * 365));
    const auto deadline =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    ++waiters_;
    bool ok = cond();
    if (!ok && waiters_ > 1) cv_.notify_all();
    while (!ok) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        ok = cond();
        break;
      }
      ok = cond();
    }
    --waiters_;
    lock.release();
    return ok;
  }

 private:
  // Tries to take a held mutex for a while before sleeping on it, if this
  // thread spins on contention. The critical sections here are short (a
  // holder lets go within a microsecond or two), while sleeping costs a
  // futex wait and a wake-up: tens of microseconds on a virtual machine, an
  // inter-processor interrupt for the holder that wakes it, and, on a
  // FiberPool thread, every device fiber that thread would have run
  // meanwhile. The same bounded spin as glibc's adaptive mutexes (up to 100
  // tries), then the plain blocking lock.
  void LockContended() {
    for (int i = 0; spin_on_contention_ && i < kSpinTries; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
      if (mu_.try_lock()) return;
    }
    mu_.lock();
  }
  static constexpr int kSpinTries = 100;
  static inline thread_local bool spin_on_contention_ = false;

  // The analysis cannot see std::mutex (libstdc++ does not annotate it), so
  // the members below are checked by hand: waiters_ is guarded by mu_, and
  // the methods that touch it opt out of the analysis.
  std::mutex mu_;
  std::condition_variable cv_;
  int waiters_ = 0;
};

// A condition variable for waits that only specific events should end (e.g.
// one collective completing among many), where Mutex::Await would wake on
// every release of the mutex. Thread-safe.
class CondVar {
 public:
  // REQUIRES: `mu` held. Releases it until SignalAll() or `deadline`, then
  // re-acquires it. May wake spuriously: callers re-check their condition.
  // Returns false if the deadline passed.
  bool WaitWithDeadline(Mutex* mu, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    // Waiting releases the mutex: let its Await()ers re-check, as Unlock does.
    if (mu->waiters_ > 0) mu->cv_.notify_all();
    const bool signalled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// Holds a Mutex for its scope: `MutexLock lock(&mu_);`.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A one-shot event. Notify() once; any number of threads may wait.
// Thread-safe.
class Notification {
 public:
  // Wakes waiters while still holding the mutex: a waiter may destroy the
  // Notification as soon as it returns.
  void Notify() {
    mu_.Lock();
    notified_ = true;
    mu_.UnlockWakingFirst();
  }
  bool HasBeenNotified() const {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() const {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_; });
  }
  // Returns whether the notification arrived within `timeout`.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_; }, timeout);
  }

 private:
  mutable Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace causeway

#endif  // CAUSEWAY_BASE_MUTEX_H_
