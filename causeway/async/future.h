// Future<T> / Promise<T>: single-assignment values that carry either a T or
// an error status, with continuations.
//
// A Promise is fulfilled once, by Set(). Continuations registered with
// OnReady() run exactly once: on the thread that calls Set(), or, if the
// future is already ready when OnReady() is called, inline on the calling
// thread. Continuations never run while an internal lock is held, so they may
// freely register further continuations or fulfil other promises.
#ifndef CAUSEWAY_ASYNC_FUTURE_H_
#define CAUSEWAY_ASYNC_FUTURE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/base/check.h"
#include "causeway/base/fiber.h"
#include "causeway/base/mutex.h"

namespace causeway {

// The value type of a future that only signals completion or failure.
struct Unit {};

namespace internal {

template <typename T>
class FutureState {
 public:
  using Callback = std::function<void(const absl::StatusOr<T>&)>;

  bool ready() const { return set_.load(std::memory_order_acquire); }

  // The value if set, without a lock; nullptr otherwise.
  const absl::StatusOr<T>* TryGet() const {
    return set_.load(std::memory_order_acquire) ? &*value_ : nullptr;
  }

  void Set(absl::StatusOr<T> value) {
    std::vector<Callback> callbacks;
    {
      MutexLock lock(&mu_);
      CW_CHECK(!value_.has_value()) << "promise fulfilled twice";
      value_.emplace(std::move(value));
      set_.store(true, std::memory_order_release);
      callbacks.swap(callbacks_);
    }
    // value_ is never modified again, so reading it without the lock is safe.
    for (auto& cb : callbacks) cb(*value_);
  }

  void OnReady(Callback cb) {
    if (const absl::StatusOr<T>* v = TryGet()) {
      cb(*v);
      return;
    }
    {
      MutexLock lock(&mu_);
      if (!value_.has_value()) {
        callbacks_.push_back(std::move(cb));
        return;
      }
    }
    cb(*value_);
  }

  // On a fiber (causeway/base/fiber.h) the waits park only the fiber.
  const absl::StatusOr<T>& Await() const {
    if (const absl::StatusOr<T>* v = TryGet()) return *v;
    if (fiber::InFiber()) {
      AwaitOnFiber(fiber::kNever);
      return *value_;
    }
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return value_.has_value(); });
    return *value_;
  }

  const absl::StatusOr<T>* AwaitWithTimeout(absl::Duration timeout) const {
    if (const absl::StatusOr<T>* v = TryGet()) return v;
    if (fiber::InFiber()) {
      return AwaitOnFiber(fiber::DeadlineAfter(timeout)) ? &*value_ : nullptr;
    }
    MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(
            [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return value_.has_value(); },
            timeout)) {
      return nullptr;
    }
    return &*value_;
  }

  // Awaits the value and moves it out. REQUIRES: the caller is its last
  // reader (see Future::Take).
  absl::StatusOr<T> Take() {
    Await();
    // Set() wrote value_ before publishing set_ and reads it afterwards only
    // to run callbacks; the caller promises none will read it again.
    return std::move(*value_);
  }

 private:
  // Parks the calling fiber until the value is set (true) or `deadline`
  // (false), through a continuation that wakes it.
  bool AwaitOnFiber(fiber::Deadline deadline) const {
    auto set = std::make_shared<std::atomic<uint32_t>>(0);
    {
      MutexLock lock(&mu_);
      if (value_.has_value()) return true;
      callbacks_.push_back([set](const absl::StatusOr<T>&) {
        set->store(1, std::memory_order_release);
        fiber::WakeAll(*set);
      });
    }
    while (set->load(std::memory_order_acquire) == 0) {
      if (!fiber::WaitWhileEqual(*set, 0, deadline)) {
        return set->load(std::memory_order_acquire) != 0;
      }
    }
    return true;
  }

  mutable Mutex mu_;
  // Written once under mu_; immutable afterwards.
  std::optional<absl::StatusOr<T>> value_;
  // Set (release) once value_ is written: lets ready() and TryGet() read it
  // without the lock.
  std::atomic<bool> set_{false};
  mutable std::vector<Callback> callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

template <typename T>
class Promise;

// A handle to a value that may not exist yet. Copyable; all copies share the
// same state. Thread-safe.
template <typename T>
class Future {
 public:
  using value_type = T;

  // An invalid future; only assignment and valid() may be used.
  Future() = default;

  // A future that is already ready with `value`.
  static Future Ready(absl::StatusOr<T> value) {
    auto state = std::make_shared<internal::FutureState<T>>();
    state->Set(std::move(value));
    return Future(std::move(state));
  }

  bool valid() const { return state_ != nullptr; }
  bool IsReady() const { return state_->ready(); }
  // The result if ready (valid as long as any copy of this future exists),
  // else nullptr; never blocks or locks.
  const absl::StatusOr<T>* TryGet() const { return state_->TryGet(); }

  // Blocks until ready and returns the result. The reference stays valid as
  // long as any copy of this future exists.
  const absl::StatusOr<T>& Await() const { return state_->Await(); }

  // Blocks until ready and moves the result out, where Await() would copy
  // it. REQUIRES: nothing reads this future's result afterwards, through any
  // copy of it: the caller is its only consumer, and every callback that
  // reads it has run (such as one registered through OnReady or WhenAll, or
  // the one calling Take). For handing on a large value (a fetched array)
  // without a copy.
  absl::StatusOr<T> Take() const { return state_->Take(); }

  // Blocks for at most `timeout`; nullptr if still not ready.
  const absl::StatusOr<T>* AwaitWithTimeout(absl::Duration timeout) const {
    return state_->AwaitWithTimeout(timeout);
  }

  // Runs `cb(result)` once ready: inline now if already ready, otherwise on
  // the thread that fulfils the promise. `cb` must not block for long.
  void OnReady(std::function<void(const absl::StatusOr<T>&)> cb) const {
    state_->OnReady(std::move(cb));
  }

  // Returns a future of `f(result)`, where `f` returns absl::StatusOr<U>.
  // `f` runs on the thread described for OnReady.
  template <typename F,
            typename R = std::invoke_result_t<F, const absl::StatusOr<T>&>,
            typename U = typename R::value_type>
  Future<U> Then(F f) const {
    auto state = std::make_shared<internal::FutureState<U>>();
    OnReady([state, f = std::move(f)](const absl::StatusOr<T>& v) mutable {
      state->Set(f(v));
    });
    return Future<U>(std::move(state));
  }

 private:
  template <typename>
  friend class Promise;
  template <typename>
  friend class Future;
  explicit Future(std::shared_ptr<internal::FutureState<T>> state)
      : state_(std::move(state)) {}

  std::shared_ptr<internal::FutureState<T>> state_;
};

// The writing side of a Future. Copyable; fulfil exactly once.
template <typename T>
class Promise {
 public:
  Promise() : state_(std::make_shared<internal::FutureState<T>>()) {}

  Future<T> future() const { return Future<T>(state_); }

  // Fulfils the promise and runs pending continuations on this thread.
  // REQUIRES: not yet fulfilled.
  void Set(absl::StatusOr<T> value) const { state_->Set(std::move(value)); }
  bool IsSet() const { return state_->ready(); }
  // The value if set (valid as long as the promise or a future of it
  // exists), else nullptr, without copying a future.
  const absl::StatusOr<T>* TryGet() const { return state_->TryGet(); }

 private:
  std::shared_ptr<internal::FutureState<T>> state_;
};

// Returns a future that is ready when all of `futures` are: OK if all
// succeeded, otherwise the first error in argument order. Continuations run
// on the thread that fulfils the last input.
template <typename T>
Future<Unit> WhenAll(const std::vector<Future<T>>& futures) {
  if (futures.empty()) return Future<Unit>::Ready(Unit{});
  struct Join {
    Mutex mu;
    size_t pending ABSL_GUARDED_BY(mu);
    std::vector<absl::Status> statuses ABSL_GUARDED_BY(mu);
    Promise<Unit> promise;
  };
  auto join = std::make_shared<Join>();
  {
    MutexLock lock(&join->mu);
    join->pending = futures.size();
    join->statuses.resize(futures.size());
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    futures[i].OnReady([join, i](const absl::StatusOr<T>& v) {
      absl::Status first;
      {
        MutexLock lock(&join->mu);
        join->statuses[i] = v.status();
        if (--join->pending != 0) return;
        for (const absl::Status& s : join->statuses) {
          if (!s.ok()) {
            first = s;
            break;
          }
        }
      }
      if (first.ok()) {
        join->promise.Set(Unit{});
      } else {
        join->promise.Set(first);
      }
    });
  }
  return join->promise.future();
}

}  // namespace causeway

#endif  // CAUSEWAY_ASYNC_FUTURE_H_
