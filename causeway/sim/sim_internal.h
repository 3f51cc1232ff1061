// The simulator's parts below SimCluster, shared by its files:
// sim_cluster.cc (the virtual clock's bookkeeping, messages, the client's
// side), sim_devices.cc (simulated devices and what a launch costs) and
// sim_proxies.cc (the hosts, schedulers and data plane as the simulated
// components see each other, and the cluster's assembly). Private to
// causeway/sim.
#ifndef CAUSEWAY_SIM_SIM_INTERNAL_H_
#define CAUSEWAY_SIM_SIM_INTERNAL_H_

#include "causeway/sim/sim_cluster.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/backend/builtin_kinds.h"
#include "causeway/backend/executable.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"
#include "causeway/base/trace.h"
#include "causeway/ir/function.h"
#include "causeway/control/control_plane.h"
#include "causeway/resource/resource_manager.h"
#include "causeway/scheduler/island_scheduler.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/host_executor.h"

namespace causeway::sim {

class SimCluster::Bookkeeping {
 public:
  explicit Bookkeeping(SimCluster* c) : c_(c) {
    if (c_->bookkeeping_depth_++ == 0 && c_->measuring()) {
      c_->bookkeeping_start_ns_ = c_->CpuNow();
    }
  }
  ~Bookkeeping() {
    if (--c_->bookkeeping_depth_ == 0 && c_->measuring()) {
      c_->bookkeeping_ns_ += c_->CpuNow() - c_->bookkeeping_start_ns_;
    }
  }
  Bookkeeping(const Bookkeeping&) = delete;
  Bookkeeping& operator=(const Bookkeeping&) = delete;

 private:
  SimCluster* const c_;
};

// A machine's cores. Work ready at some time runs in the first gap of that
// length on any core from then on, so work booked ahead (a gang's members
// after the last arrival, say) does not hold back work that is ready
// earlier but booked later: the cores serve work in the order it is ready,
// as an operating system runs a thread that wakes while others wait.
// cores == 0: as many as its threads.
class SimMachine {
 public:
  SimMachine(int cores, const EventLoop* loop)
      : busy_(static_cast<size_t>(std::max(cores, 0))), loop_(loop) {}
  // Device threads per core (0 with a core per thread).
  double threads_per_core() const {
    return busy_.empty() ? 0 : static_cast<double>(device_threads_) / busy_.size();
  }
  void AddDeviceThread() { ++device_threads_; }
  int cores() const { return static_cast<int>(busy_.size()); }
  // Work ready at `ready` on a thread free at `thread_free`: when it ends.
  int64_t Run(int64_t ready, int64_t thread_free, int64_t cost) {
    if (busy_.empty()) return std::max(ready, thread_free) + cost;
    // Work is booked when it is known, never before the loop's present, so
    // what ended before then can go.
    const int64_t now = loop_->now();
    const int64_t earliest = std::max({ready, thread_free, now});
    size_t best = 0;
    int64_t best_start = std::numeric_limits<int64_t>::max();
    for (size_t c = 0; c < busy_.size(); ++c) {
      Intervals& core = busy_[c];
      while (!core.empty() && core.begin()->second <= now) core.erase(core.begin());
      const int64_t start = FirstGap(core, earliest, cost);
      if (start < best_start) {
        best_start = start;
        best = c;
      }
    }
    Book(&busy_[best], best_start, best_start + cost);
    return best_start + cost;
  }

 private:
  // Busy intervals of a core, start -> end, disjoint and not touching.
  using Intervals = std::map<int64_t, int64_t>;

  static int64_t FirstGap(const Intervals& core, int64_t from, int64_t cost) {
    int64_t start = from;
    auto it = core.upper_bound(start);
    if (it != core.begin() && std::prev(it)->second > start) start = std::prev(it)->second;
    for (; it != core.end() && it->first < start + cost; ++it) start = std::max(start, it->second);
    return start;
  }

  static void Book(Intervals* core, int64_t start, int64_t end) {
    auto next = core->lower_bound(start);
    if (next != core->end() && next->first == end) {  // joins the interval after
      end = next->second;
      next = core->erase(next);
    }
    if (next != core->begin() && std::prev(next)->second == start) {  // and the one before
      std::prev(next)->second = end;
      return;
    }
    core->emplace_hint(next, start, end);
  }

  std::vector<Intervals> busy_;
  const EventLoop* const loop_;
  int device_threads_ = 0;
};

// One thread of the real system: does one thing at a time, on its
// machine's cores.
class SimThread {
 public:
  explicit SimThread(SimMachine* machine) : machine_(machine) {}
  // Work of `cost` ns ready at `ready`: returns when it ends.
  int64_t Run(int64_t ready, int64_t cost) {
    if (cost <= 0) return std::max(ready, free_);
    free_ = machine_->Run(ready, free_, cost);
    busy_ += cost;
    return free_;
  }
  SimMachine* machine() const { return machine_; }
  int64_t busy() const { return busy_; }
  void ResetBusy() { busy_ = 0; }

 private:
  SimMachine* const machine_;
  int64_t free_ = 0;
  int64_t busy_ = 0;  // CPU charged
};

// A device on the virtual clock. Launches run in order; one whose inputs
// or output memory are not ready waits (an event when they are).
class SimDevice final : public LaunchQueue {
 public:
  SimDevice(DeviceInfo device, SimCluster* cluster, SimThread* thread)
      : device_(std::move(device)), cluster_(cluster), thread_(thread) {}

  const DeviceInfo& device() const override { return device_; }
  void Enqueue(Launch launch) override {
    if (stopping_) {
      RefuseLaunch(launch,
                   absl::UnavailableError(absl::StrCat(device_.id.ToString(), " shut down")));
      return;
    }
    queue_.push_back(std::move(launch));
    Kick();
  }
  void EnqueueBatch(std::vector<Launch> launches) override {
    for (Launch& l : launches) Enqueue(std::move(l));
  }
  void Shutdown() override {
    stopping_ = true;
    while (!queue_.empty()) {
      Launch l = std::move(queue_.front());
      queue_.pop_front();
      RefuseLaunch(l, absl::UnavailableError(absl::StrCat(
                          device_.id.ToString(), " shut down with the launch queued")));
    }
  }
  int CancelOwner(ClientId owner) override {
    int taken = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->owner != owner) {
        ++it;
        continue;
      }
      Launch l = std::move(*it);
      it = queue_.erase(it);
      RefuseLaunch(l, absl::CancelledError(absl::StrCat(device_.id.ToString(), ": ",
                                                        owner.ToString(), " left")));
      ++taken;
    }
    return taken;
  }
  DeviceCounters stats() const override { return stats_; }
  void ResetStats() override { stats_ = DeviceCounters{}; }

 private:
  void Kick() {
    if (kick_pending_ || running_ || waiting_) return;
    kick_pending_ = true;
    cluster_->loop().After(0, [this] {
      kick_pending_ = false;
      Pump();
    });
  }
  void Wake() {
    waiting_ = false;
    Kick();
  }
  // Whether the launch waits for an input or memory; if so, `blocker` is
  // what it waits for.
  static bool Blocked(const Launch& l, Future<Unit>* blocker) {
    for (const BufferRef& b : l.inputs) {
      if (!b->ready().IsReady()) {
        *blocker = b->ready();
        return true;
      }
    }
    for (const BufferRef& b : l.outputs) {
      if (!b->allocated().IsReady()) {
        *blocker = b->allocated();
        return true;
      }
    }
    if (l.scratch != nullptr && !l.scratch->allocated().IsReady()) {
      *blocker = l.scratch->allocated();
      return true;
    }
    return false;
  }
  void Pump();
  void Take();
  void Start(int64_t cpu_ns, const SimCluster::NodeCost* cost);
  // The compute from `from` up to collective #i of the current launch, the
  // gang's meeting, and on to the next (past the last: the launch ends).
  void Segment(int64_t start, int64_t from, const SimCluster::NodeCost* cost, int i);
  void Finish(int64_t start);
  // Finish, profiled: a launch's CPU is its Take's and its Finish's, and it
  // counts once, here.
  void Finished(int64_t start) {
    cluster_->Profiled(&cluster_->mutable_profile().device, [this, start] { Finish(start); });
  }

  const DeviceInfo device_;
  SimCluster* const cluster_;
  SimThread* const thread_;
  std::deque<Launch> queue_;
  Launch current_;
  absl::Status status_;  // of current_
  bool running_ = false;
  bool kick_pending_ = false;
  bool waiting_ = false;
  bool stopping_ = false;
  DeviceCounters stats_;
};

}  // namespace causeway::sim

#endif  // CAUSEWAY_SIM_SIM_INTERNAL_H_
