#include "causeway/base/fiber.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sched.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <deque>
#include <map>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "causeway/base/check.h"
#include "causeway/base/mutex.h"

#if defined(__SANITIZE_ADDRESS__)
#define CW_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CW_ASAN_FIBERS 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CW_TSAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CW_TSAN_FIBERS 1
#endif
#endif
#ifdef CW_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef CW_TSAN_FIBERS
#include <sanitizer/tsan_interface.h>
#endif

#if defined(__x86_64__)
// A switch between stacks that saves what the System V ABI says a call
// preserves (rbx, rbp, r12-r15, the SSE and x87 control words) and nothing
// else: swapcontext also saves the signal mask, a system call on every
// switch. Stores the current stack pointer in *from and resumes the stack
// saved in `to`.
extern "C" void causeway_fiber_switch(void** from, void* to);
// Where a new fiber's stack first returns to: calls causeway_fiber_main with
// the fiber, which was left in r12.
extern "C" void causeway_fiber_start();
asm(R"(
  .text
  .globl causeway_fiber_switch
  .hidden causeway_fiber_switch
  .type causeway_fiber_switch, @function
causeway_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size causeway_fiber_switch, .-causeway_fiber_switch

  .globl causeway_fiber_start
  .hidden causeway_fiber_start
  .type causeway_fiber_start, @function
causeway_fiber_start:
  movq %r12, %rdi
  call causeway_fiber_main
  ud2
  .size causeway_fiber_start, .-causeway_fiber_start
)");
#define CW_FIBER_ASM_SWITCH 1
#endif

extern "C" __attribute__((visibility("hidden"))) void causeway_fiber_main(void* fiber);

namespace causeway {
namespace {

// A suspended stack: where a switch resumes it.
struct Context {
#ifdef CW_FIBER_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

void SwapContext(Context& from, Context& to) {
#ifdef CW_FIBER_ASM_SWITCH
  causeway_fiber_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

using fiber::Deadline;
using fiber::kNever;

// A fiber's life: Runnable (in the ready queue) -> Running -> Parked (waiting
// for an Unpark or its deadline) -> Runnable ...; an Unpark that comes while
// it runs leaves it Notified, and its next park returns at once. Done once
// its body returned.
enum State : int { kRunnable, kRunning, kParked, kNotified, kDone };
// Why a fiber switched back to its pool thread.
enum Request : int { kPark, kFinished };

struct Worker;

}  // namespace

struct Fiber : std::enable_shared_from_this<Fiber> {
  FiberPool::Impl* pool = nullptr;
  std::function<void()> body;
  Context context;
  std::byte* map = nullptr;  // the stack's mapping, guard page first
  size_t map_bytes = 0;
  std::byte* stack = nullptr;
  size_t stack_bytes = 0;
  std::atomic<int> state{kRunnable};
  // Written by the fiber, read by its pool thread after the switch.
  Request request = kPark;
  Deadline park_deadline = kNever;
  // Its place among the pool's timers (a deadline near when it parked) or
  // on its list of far ones; guarded by the pool's mutex.
  bool has_timer = false;
  std::multimap<Deadline, Fiber*>::iterator timer;
  bool far = false;
  Fiber* far_prev = nullptr;
  Fiber* far_next = nullptr;
  // The pool owns a fiber until its body returns.
  std::shared_ptr<Fiber> keep_alive;
  std::atomic<uint32_t> done{0};
  void* tsan_fiber = nullptr;
  void* asan_fake_stack = nullptr;
};

namespace {

// One pool thread: the context it runs fibers from and the one it runs.
struct Worker {
  Context context;
  Fiber* current = nullptr;
  void* tsan_fiber = nullptr;
  void* asan_fake_stack = nullptr;
  const void* stack_bottom = nullptr;
  size_t stack_bytes = 0;
};

thread_local Worker* tls_worker = nullptr;

// A fiber may resume on another thread than the one it parked on, so the
// compiler must not reuse a thread-local's address across a switch: read it
// through a call it cannot see into.
__attribute__((noinline)) Worker* CurrentWorker() {
  asm volatile("" ::: "memory");
  return tls_worker;
}

Fiber* CurrentFiber() {
  Worker* w = CurrentWorker();
  return w == nullptr ? nullptr : w->current;
}

uint32_t* FutexWord(std::atomic<uint32_t>& word) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return reinterpret_cast<uint32_t*>(&word);
}

timespec ToTimespec(Deadline d) {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(d.time_since_epoch()).count();
  return timespec{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

// Blocks the thread while `word` holds `seen`, until woken or `deadline`.
void FutexWait(std::atomic<uint32_t>& word, uint32_t seen, Deadline deadline) {
  if (deadline == kNever) {
    syscall(SYS_futex, FutexWord(word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
    return;
  }
  const timespec at = ToTimespec(deadline);
  syscall(SYS_futex, FutexWord(word), FUTEX_WAIT_BITSET_PRIVATE, seen, &at, nullptr,
          FUTEX_BITSET_MATCH_ANY);
}

void FutexWake(std::atomic<uint32_t>& word, int count) {
  syscall(SYS_futex, FutexWord(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

// From a pool thread into `f`, until it parks or ends.
void SwitchIn(Worker& w, Fiber& f) {
#ifdef CW_ASAN_FIBERS
  __sanitizer_start_switch_fiber(&w.asan_fake_stack, f.stack, f.stack_bytes);
#endif
#ifdef CW_TSAN_FIBERS
  __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
  SwapContext(w.context, f.context);
#ifdef CW_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(w.asan_fake_stack, nullptr, nullptr);
#endif
}

// Called on a fiber as it starts or resumes.
void Arrived([[maybe_unused]] Fiber& f) {
#ifdef CW_ASAN_FIBERS
  Worker* w = CurrentWorker();
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &w->stack_bottom, &w->stack_bytes);
#endif
}

// From the fiber `f` back to the pool thread running it; returns when the
// fiber is resumed (never, once it is finished).
void SwitchOut(Fiber& f) {
  Worker* w = CurrentWorker();
#ifdef CW_ASAN_FIBERS
  __sanitizer_start_switch_fiber(f.request == kFinished ? nullptr : &f.asan_fake_stack,
                                 w->stack_bottom, w->stack_bytes);
#endif
#ifdef CW_TSAN_FIBERS
  __tsan_switch_to_fiber(w->tsan_fiber, 0);
#endif
  SwapContext(f.context, w->context);
  Arrived(f);
}

void Park(Fiber& f, Deadline deadline) {
  f.request = kPark;
  f.park_deadline = deadline;
  SwitchOut(f);
}

void Unpark(Fiber* f);

[[noreturn]] void FiberMain(Fiber* f) {
  Arrived(*f);
  f->body();
  f->body = nullptr;  // its captures die on the fiber that used them
  f->request = kFinished;
  SwitchOut(*f);
  CW_CHECK(false) << "a finished fiber resumed";
  __builtin_unreachable();
}

#ifndef CW_FIBER_ASM_SWITCH
void FiberEntry(unsigned hi, unsigned lo) {
  causeway_fiber_main(reinterpret_cast<void*>((uintptr_t{hi} << 32) | uintptr_t{lo}));
}
#endif

// Fibers waiting on addresses: what WakeAll looks through. A waiter is
// linked while its fiber is inside WaitWhileEqual, so a fiber found here is
// alive.
struct Waiter {
  const void* address = nullptr;
  Fiber* fiber = nullptr;
  Waiter* prev = nullptr;
  Waiter* next = nullptr;
  bool linked = false;
};

struct Bucket {
  Mutex mu;
  Waiter* head ABSL_GUARDED_BY(mu) = nullptr;
  // Threads (not fibers) in a futex wait on an address of this bucket.
  std::atomic<int> threads{0};
};

constexpr size_t kBuckets = 64;

Bucket& BucketOf(const void* address) {
  static Bucket* const buckets = new Bucket[kBuckets];
  return buckets[(reinterpret_cast<uintptr_t>(address) >> 4) % kBuckets];
}

// The most a plain thread's timed sleep wakes early (SleepUntil).
constexpr std::chrono::microseconds kMaxSleepMargin{500};

void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

struct FiberPool::Impl {
  explicit Impl(int64_t stack_bytes) : stack_bytes(stack_bytes) {}

  // Makes `fibers` runnable (their states already say so), waking as many
  // waiting threads as there are fibers for them.
  void PushAll(absl::Span<std::shared_ptr<Fiber>> fibers) {
    int wake;
    {
      MutexLock lock(&mu);
      for (std::shared_ptr<Fiber>& f : fibers) ready.push_back(std::move(f));
      wake = std::min(idle + (spinner ? 1 : 0), static_cast<int>(fibers.size()));
    }
    WakeThreads(wake);
  }
  void Push(std::shared_ptr<Fiber> f) { PushAll(absl::MakeSpan(&f, 1)); }

  // Wakes up to `count` threads waiting (or spinning) on wake_word.
  void WakeThreads(int count) {
    if (count <= 0) return;
    wake_word.fetch_add(1, std::memory_order_release);
    FutexWake(wake_word, count);
  }

  // The next fiber to run; null once the pool stops and no fiber is left.
  std::shared_ptr<Fiber> Next() {
    std::vector<Fiber*> expired;
    bool may_spin = true;  // false after a spin that found no work
    while (true) {
      Deadline next_timer = kNever;
      Deadline spin_until{};
      Deadline wake_at = kNever;  // of a sleep: when it asks to wake
      uint32_t seen = 0;
      bool spin = false;
      bool spinner_blocked = false;
      {
        MutexLock lock(&mu);
        if (!timers.empty() || far_head != nullptr) {
          const Deadline now = std::chrono::steady_clock::now();
          if (far_head != nullptr && now >= far_scan) ScanFarLocked(now);
          while (!timers.empty() && timers.begin()->first <= now) {
            Fiber* f = timers.begin()->second;
            f->has_timer = false;
            timers.erase(timers.begin());
            expired.push_back(f);
          }
        }
        if (expired.empty()) {
          if (!ready.empty()) {
            std::shared_ptr<Fiber> f = std::move(ready.front());
            ready.pop_front();
            if (f->has_timer) {
              timers.erase(f->timer);
              f->has_timer = false;
            }
            if (f->far) UnlinkFarLocked(f.get());
            return f;
          }
          if (stopping && live == 0) return nullptr;
          if (!timers.empty()) next_timer = timers.begin()->first;
          if (far_head != nullptr) next_timer = std::min(next_timer, far_scan);
          seen = wake_word.load(std::memory_order_relaxed);
          spinner_blocked = spinner;
          if (!spinner) {
            const Deadline now = std::chrono::steady_clock::now();
            if (next_timer != kNever && next_timer - now <= margin) {
              spin_until = next_timer;
            } else if (may_spin) {
              spin_until = now + kSpin;
            }
          }
          spin = spin_until != Deadline{};
          if (spin) {
            spinner = true;
          } else {
            ++idle;
            wake_at = next_timer == kNever || spinner_blocked ? next_timer : next_timer - margin;
          }
        }
      }
      if (!expired.empty()) {
        // A timer's fiber has not run since it parked: it is alive.
        for (Fiber* f : expired) Unpark(f);
        expired.clear();
        continue;
      }
      if (spin) {
        // One thread at a time spins rather than sleeps, for a while: to the
        // next deadline if it is close, since waking an idle core takes
        // longer than the time left; else in case work comes soon (a gang's
        // members come back together when their collective completes).
        while (std::chrono::steady_clock::now() < spin_until &&
               wake_word.load(std::memory_order_acquire) == seen) {
          Pause();
        }
        may_spin = wake_word.load(std::memory_order_acquire) != seen;
        MutexLock lock(&mu);
        spinner = false;
        continue;
      }
      FutexWait(wake_word, seen, wake_at);
      may_spin = true;
      const Deadline woke = std::chrono::steady_clock::now();
      MutexLock lock(&mu);
      --idle;
      if (wake_at != kNever && woke >= wake_at &&
          wake_word.load(std::memory_order_relaxed) == seen) {
        LearnLatenessLocked(woke - wake_at);
      }
    }
  }

  // A timed wake-up of a sleeping thread came `late` after the time it
  // asked for: the margin follows such lateness, halfway up at once to a
  // later one and down by a sixteenth of the difference per earlier one,
  // plus a fifth for slack, within [kSpin, kMaxMargin].
  void LearnLatenessLocked(std::chrono::steady_clock::duration late)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto l = std::chrono::duration_cast<std::chrono::nanoseconds>(late);
    lateness += l > lateness ? (l - lateness) / 2 : -((lateness - l) / 16);
    margin = std::clamp<std::chrono::nanoseconds>(lateness + lateness / 5, kSpin, kMaxMargin);
  }

  // After `f` switched out to park: wake it at its deadline, and park it
  // unless an Unpark came meanwhile.
  void Parked(const std::shared_ptr<Fiber>& f) {
    if (f->park_deadline != kNever) {
      bool wake = false;
      const Deadline now = std::chrono::steady_clock::now();
      {
        MutexLock lock(&mu);
        if (f->park_deadline - now > kFar) {
          // A far deadline (a collective's time-out, say), almost always
          // withdrawn long before it comes: a list entry, no timer.
          if (far_head == nullptr) {
            far_scan = now + kFarScan;
            wake = idle > 0;  // a sleeping thread must wake for the scan
          }
          f->far = true;
          f->far_prev = nullptr;
          f->far_next = far_head;
          if (far_head != nullptr) far_head->far_prev = f.get();
          far_head = f.get();
        } else {
          wake = idle > 0 && (timers.empty() || f->park_deadline < timers.begin()->first);
          f->timer = timers.emplace(f->park_deadline, f.get());
          f->has_timer = true;
        }
      }
      WakeThreads(wake ? 1 : 0);
    }
    int expected = kRunning;
    if (!f->state.compare_exchange_strong(expected, kParked, std::memory_order_acq_rel)) {
      f->state.store(kRunnable, std::memory_order_relaxed);
      Push(f);
    }
  }

  void Finished(const std::shared_ptr<Fiber>& f) {
    f->state.store(kDone, std::memory_order_release);
#ifdef CW_TSAN_FIBERS
    __tsan_destroy_fiber(f->tsan_fiber);
#endif
    munmap(f->map, f->map_bytes);
    f->map = nullptr;
    bool last;
    {
      MutexLock lock(&mu);
      last = --live == 0 && stopping;
    }
    if (last) WakeThreads(INT_MAX);
    f->done.store(1, std::memory_order_release);
    fiber::WakeAll(f->done);
    f->keep_alive.reset();
  }

  void RunThread() {
    // A fiber's `delay` ends when this thread's timed wait does: ask for the
    // tightest timer slack (Linux's default lets it overshoot by 50 us).
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    // A fiber that blocks on a held Mutex blocks this thread and every
    // fiber it would run: try for a while first.
    Mutex::SpinOnContention(true);
    Worker w;
#ifdef CW_TSAN_FIBERS
    w.tsan_fiber = __tsan_get_current_fiber();
#endif
    tls_worker = &w;
    while (std::shared_ptr<Fiber> f = Next()) {
      w.current = f.get();
      f->state.store(kRunning, std::memory_order_release);
      SwitchIn(w, *f);
      w.current = nullptr;
      if (f->request == kFinished) {
        Finished(f);
      } else {
        Parked(f);
      }
    }
    tls_worker = nullptr;
  }

  void UnlinkFarLocked(Fiber* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (f->far_prev != nullptr) {
      f->far_prev->far_next = f->far_next;
    } else {
      far_head = f->far_next;
    }
    if (f->far_next != nullptr) f->far_next->far_prev = f->far_prev;
    f->far = false;
    f->far_prev = f->far_next = nullptr;
  }

  // Moves the far deadlines that have come near among the timers.
  void ScanFarLocked(Deadline now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (Fiber* f = far_head; f != nullptr;) {
      Fiber* next = f->far_next;
      if (f->park_deadline - now <= kFar) {
        UnlinkFarLocked(f);
        f->timer = timers.emplace(f->park_deadline, f);
        f->has_timer = true;
      }
      f = next;
    }
    far_scan = far_head != nullptr ? now + kFarScan : kNever;
  }

  const int64_t stack_bytes;
  Mutex mu;
  std::deque<std::shared_ptr<Fiber>> ready ABSL_GUARDED_BY(mu);
  // Parked fibers with a deadline, by deadline: those within kFar of it
  // when they parked (a `delay`'s sleep); the others (time-outs, rarely
  // reached) on an intrusive list, looked at every kFarScan and moved here
  // once within kFar of their deadline, so that they still wake on time.
  std::multimap<Deadline, Fiber*> timers ABSL_GUARDED_BY(mu);
  Fiber* far_head ABSL_GUARDED_BY(mu) = nullptr;
  Deadline far_scan ABSL_GUARDED_BY(mu) = kNever;
  static constexpr std::chrono::seconds kFar{1};
  static constexpr std::chrono::milliseconds kFarScan{100};
  int live ABSL_GUARDED_BY(mu) = 0;  // spawned and not finished
  int idle ABSL_GUARDED_BY(mu) = 0;  // threads waiting on wake_word
  bool stopping ABSL_GUARDED_BY(mu) = false;
  // A thread spins, to a close deadline or for work (one at a time).
  bool spinner ABSL_GUARDED_BY(mu) = false;
  std::atomic<uint32_t> wake_word{0};
  // How long an idle thread spins for work, and the least margin below.
  static constexpr std::chrono::microseconds kSpin{50};
  // How close the next deadline must be for a thread to spin to it rather
  // than sleep, and how early a sleeping thread asks to wake for it. A
  // timed wake-up comes late by as much as the core takes to wake, which
  // grows with how long it slept: on a virtual machine, 100 us and more
  // after a few milliseconds idle, which a 50 us margin left as overshoot
  // of every long `delay`. So the margin is learned from the lateness of
  // the pool's own timed wake-ups (LearnLatenessLocked).
  static constexpr std::chrono::microseconds kMaxMargin{500};
  std::chrono::nanoseconds margin ABSL_GUARDED_BY(mu) = kSpin;
  std::chrono::nanoseconds lateness ABSL_GUARDED_BY(mu){0};
};

namespace {

// Wakes `f`: true if it was parked and the caller must now push it.
bool MakeRunnable(Fiber* f) {
  int s = f->state.load(std::memory_order_acquire);
  while (true) {
    if (s == kParked) {
      if (f->state.compare_exchange_weak(s, kRunnable, std::memory_order_acq_rel)) return true;
    } else if (s == kRunning) {
      if (f->state.compare_exchange_weak(s, kNotified, std::memory_order_acq_rel)) return false;
    } else {
      return false;  // already runnable or notified, or finished
    }
  }
}

void Unpark(Fiber* f) {
  if (MakeRunnable(f)) f->pool->Push(f->shared_from_this());
}

void Link(Bucket& b, Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
  w.prev = nullptr;
  w.next = b.head;
  if (b.head != nullptr) b.head->prev = &w;
  b.head = &w;
  w.linked = true;
}

void Unlink(Bucket& b, Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
  if (w.prev != nullptr) {
    w.prev->next = w.next;
  } else {
    b.head = w.next;
  }
  if (w.next != nullptr) w.next->prev = w.prev;
  w.linked = false;
}

class TaskImpl final : public FiberPool::Task {
 public:
  explicit TaskImpl(std::shared_ptr<Fiber> f) : fiber_(std::move(f)) {}
  void Join() override {
    while (fiber_->done.load(std::memory_order_acquire) == 0) {
      fiber::WaitWhileEqual(fiber_->done, 0, kNever);
    }
  }

 private:
  const std::shared_ptr<Fiber> fiber_;
};

}  // namespace

namespace fiber {

bool InFiber() { return CurrentFiber() != nullptr; }

bool WaitWhileEqual(std::atomic<uint32_t>& word, uint32_t seen, Deadline deadline) {
  Bucket& b = BucketOf(&word);
  Fiber* f = CurrentFiber();
  if (f == nullptr) {
    // Paired with WakeAll's read of `threads`: both are read-modify-writes
    // of it, so either the waker sees this thread counted or this thread's
    // futex sees the changed word.
    b.threads.fetch_add(1, std::memory_order_seq_cst);
    FutexWait(word, seen, deadline);
    b.threads.fetch_sub(1, std::memory_order_relaxed);
  } else {
    Waiter me;
    me.address = &word;
    me.fiber = f;
    {
      MutexLock lock(&b.mu);
      if (word.load(std::memory_order_acquire) != seen) return true;
      Link(b, me);
    }
    Park(*f, deadline);
    MutexLock lock(&b.mu);
    if (me.linked) Unlink(b, me);
  }
  return deadline == kNever || std::chrono::steady_clock::now() < deadline;
}

void WakeAll(std::atomic<uint32_t>& word) {
  Bucket& b = BucketOf(&word);
  if (b.threads.fetch_add(0, std::memory_order_seq_cst) > 0) FutexWake(word, INT_MAX);
  // A collective wakes all its members at once: made runnable here, they
  // join the ready queue together (one lock of the pool, one wake-up).
  absl::InlinedVector<std::shared_ptr<Fiber>, 16> woken;
  {
    MutexLock lock(&b.mu);
    for (Waiter* w = b.head; w != nullptr;) {
      Waiter* next = w->next;
      if (w->address == &word) {
        Unlink(b, *w);
        if (MakeRunnable(w->fiber)) woken.push_back(w->fiber->shared_from_this());
      }
      w = next;
    }
  }
  for (size_t i = 0; i < woken.size();) {
    FiberPool::Impl* pool = woken[i]->pool;
    size_t j = i;
    while (j < woken.size() && woken[j]->pool == pool) ++j;
    pool->PushAll(absl::MakeSpan(woken).subspan(i, j - i));
    i = j;
  }
}

void SleepUntil(Deadline deadline) {
  Fiber* f = CurrentFiber();
  if (f == nullptr) {
    // As a pool does (FiberPool::Impl::margin): wake early by a margin
    // learned from how late this process's timed sleeps come, and yield
    // the rest of the way, so that other runnable threads keep the core.
    static std::atomic<int64_t> lateness_ns{0};
    const int64_t learned = lateness_ns.load(std::memory_order_relaxed);
    const auto margin = std::chrono::nanoseconds(std::clamp<int64_t>(
        learned + learned / 5, 0, std::chrono::nanoseconds(kMaxSleepMargin).count()));
    const Deadline wake_at = deadline - margin;
    if (std::chrono::steady_clock::now() < wake_at) {
      const timespec at = ToTimespec(wake_at);
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
      }
      const int64_t late = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now() - wake_at)
                               .count();
      lateness_ns.store(late > learned ? learned + (late - learned) / 2
                                       : learned - (learned - late) / 16,
                        std::memory_order_relaxed);
    }
    while (std::chrono::steady_clock::now() < deadline) sched_yield();
    return;
  }
  while (std::chrono::steady_clock::now() < deadline) Park(*f, deadline);
}

}  // namespace fiber

FiberPool::FiberPool(int threads, int64_t stack_bytes)
    : impl_(std::make_unique<Impl>(stack_bytes)) {
  CW_CHECK(threads >= 1 && stack_bytes >= 16384);
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { impl_->RunThread(); });
}

FiberPool::~FiberPool() {
  {
    MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  impl_->WakeThreads(INT_MAX);
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<FiberPool::Task> FiberPool::Spawn(std::function<void()> body) {
  auto f = std::make_shared<Fiber>();
  f->pool = impl_.get();
  f->body = std::move(body);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t stack_bytes = (static_cast<size_t>(impl_->stack_bytes) + page - 1) / page * page;
  f->map_bytes = stack_bytes + page;
  void* map = mmap(nullptr, f->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  CW_CHECK(map != MAP_FAILED) << "cannot map a fiber's stack of " << f->map_bytes << " bytes";
  f->map = static_cast<std::byte*>(map);
  CW_CHECK(mprotect(f->map, page, PROT_NONE) == 0);  // the guard page
  f->stack = f->map + page;
  f->stack_bytes = stack_bytes;
#ifdef CW_FIBER_ASM_SWITCH
  // What causeway_fiber_switch pops, from the lowest address: the control
  // words (this thread's), r15, r14, r13, r12 (the fiber), rbx, rbp, then
  // the address it returns to. That return leaves the stack 16-byte
  // aligned, so causeway_fiber_start's call enters causeway_fiber_main as
  // the ABI requires.
  auto* top = reinterpret_cast<uint64_t*>(
      (reinterpret_cast<uintptr_t>(f->stack + f->stack_bytes)) & ~uintptr_t{15});
  uint64_t* sp = top - 10;
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  sp[0] = uint64_t{mxcsr} | (uint64_t{fpucw} << 32);
  sp[1] = sp[2] = sp[3] = 0;                           // r15, r14, r13
  sp[4] = reinterpret_cast<uint64_t>(f.get());         // r12
  sp[5] = sp[6] = 0;                                   // rbx, rbp
  sp[7] = reinterpret_cast<uint64_t>(&causeway_fiber_start);
  sp[8] = sp[9] = 0;
  f->context.sp = sp;
#else
  CW_CHECK(getcontext(&f->context.uc) == 0);
  f->context.uc.uc_stack.ss_sp = f->stack;
  f->context.uc.uc_stack.ss_size = f->stack_bytes;
  f->context.uc.uc_link = nullptr;
  const auto bits = reinterpret_cast<uintptr_t>(f.get());
  makecontext(&f->context.uc, reinterpret_cast<void (*)()>(&FiberEntry), 2,
              static_cast<unsigned>(bits >> 32), static_cast<unsigned>(bits & 0xffffffffu));
#endif
#ifdef CW_TSAN_FIBERS
  f->tsan_fiber = __tsan_create_fiber(0);
#endif
  f->keep_alive = f;
  {
    MutexLock lock(&impl_->mu);
    ++impl_->live;
  }
  impl_->Push(f);
  return std::make_shared<TaskImpl>(f);
}

}  // namespace causeway

// A fiber's first frame: runs its body, then leaves for good.
extern "C" __attribute__((visibility("hidden"))) void causeway_fiber_main(void* fiber) {
  causeway::FiberMain(static_cast<causeway::Fiber*>(fiber));
}
