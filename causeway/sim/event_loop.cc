#include "causeway/sim/event_loop.h"

#include <algorithm>

#include "causeway/base/check.h"

namespace causeway::sim {

void EventLoop::At(int64_t at_ns, std::function<void()> fn) {
  CW_CHECK(at_ns >= now_) << "an event scheduled in the past";
  heap_.push_back(Event{at_ns, next_seq_++, std::move(fn)});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
}

bool EventLoop::RunOne(int64_t limit_ns) {
  if (heap_.empty() || heap_.front().at > limit_ns) return false;
  std::pop_heap(heap_.begin(), heap_.end(), Later{});
  Event e = std::move(heap_.back());
  heap_.pop_back();
  now_ = e.at;
  clock_.Set(now_);
  ++events_run_;
  e.fn();
  return true;
}

bool EventLoop::RunUntil(const std::function<bool()>& done, int64_t limit_ns) {
  while (!done()) {
    if (!RunOne(limit_ns)) return done();
  }
  return true;
}

void EventLoop::RunFor(int64_t limit_ns) {
  while (RunOne(limit_ns)) {
  }
}

}  // namespace causeway::sim
