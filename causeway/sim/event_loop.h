// The simulator's virtual time: a clock that only moves when the event loop
// moves it, and a deterministic discrete-event loop. Events run one at a
// time on the thread that drives the loop, in order of time and, at equal
// times, of scheduling; nothing else advances the clock.
#ifndef CAUSEWAY_SIM_EVENT_LOOP_H_
#define CAUSEWAY_SIM_EVENT_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "causeway/base/clock.h"

namespace causeway::sim {

// Virtual time, in nanoseconds since the simulation started. Readable from
// any thread (the real code reads it through Clock).
class SimClock final : public Clock {
 public:
  int64_t NowMicros() const override { return now_ns_.load(std::memory_order_relaxed) / 1000; }
  int64_t NowNanos() const override { return now_ns_.load(std::memory_order_relaxed); }
  void Set(int64_t ns) { now_ns_.store(ns, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_ns_{0};
};

// Not thread-safe: one thread schedules and runs events.
class EventLoop {
 public:
  SimClock* clock() { return &clock_; }
  int64_t now() const { return now_; }

  // Runs `fn` at virtual time `at_ns` (not before now).
  void At(int64_t at_ns, std::function<void()> fn);
  void After(int64_t delay_ns, std::function<void()> fn) { At(now_ + delay_ns, std::move(fn)); }

  // Runs events in order until `done()` holds (checked after each event),
  // no events are left, or the next event lies beyond `limit_ns`. Returns
  // whether `done()` held.
  bool RunUntil(const std::function<bool()>& done, int64_t limit_ns);
  // Runs every event at or before `limit_ns`.
  void RunFor(int64_t limit_ns);

  size_t pending() const { return heap_.size(); }
  int64_t events_run() const { return events_run_; }

 private:
  struct Event {
    int64_t at;
    uint64_t seq;
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };
  bool RunOne(int64_t limit_ns);

  SimClock clock_;
  int64_t now_ = 0;
  uint64_t next_seq_ = 0;
  int64_t events_run_ = 0;
  std::vector<Event> heap_;
};

}  // namespace causeway::sim

#endif  // CAUSEWAY_SIM_EVENT_LOOP_H_
