#include "tools/spmd_loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "causeway/async/future.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"

namespace causeway::tools {
namespace {

// What the hosts' loops share: the first error, which stops every loop.
class Stop {
 public:
  void Fail(const absl::Status& status) {
    MutexLock lock(&mu_);
    if (first_.ok()) first_ = status;
    stopped_.store(true);
  }
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  absl::Status first() const {
    MutexLock lock(&mu_);
    return first_;
  }

 private:
  mutable Mutex mu_;
  absl::Status first_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopped_{false};
};

// Waits for `f`, at most `timeout`, in slices that notice another host's
// failure. OK when another host failed (the caller stops; that host's error
// is the one reported).
absl::Status AwaitStep(const Future<Unit>& f, absl::Duration timeout, const Stop& stop,
                       HostId host, int64_t step) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (const absl::StatusOr<Unit>* r = f.AwaitWithTimeout(absl::Milliseconds(50));
        r != nullptr) {
      return r->status().ok() ? absl::OkStatus()
                              : Annotate(r->status(), absl::StrCat(host.ToString(),
                                                                   ", SPMD step ", step));
    }
    if (stop.stopped()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(host.ToString(), ": SPMD step ", step,
                                                      " not done within ",
                                                      absl::FormatDuration(timeout)));
    }
  }
}

// One host's loop. Steps are prepared at most `run_ahead_us` ahead of the
// devices, as the island scheduler bounds a single controller's (each
// prepared step holds its launches and buffers until it runs): the window
// in steps is that over a step's time, measured between the loop's wake-ups
// (at least 2 steps, at most 1024). Once the window is full the loop waits
// for half of it to drain and refills it: one wake-up per half a window, not
// per step. Steps finish in order (each reads the one before), so waiting
// for the last of the half waits for all.
absl::Status RunOnHost(HostService& host, int shard, ProgramId program, const SpmdLoop& loop,
                       const Stop& stop) {
  using SteadyClock = std::chrono::steady_clock;
  ArrayId prev = loop.first == 0 ? loop.input : ArrayId(loop.id_base + loop.first - 1);
  std::deque<std::pair<int64_t, Future<Unit>>> ahead;
  size_t window = 16;
  double step_us = 0;
  SteadyClock::time_point last{};
  bool timed = false;
  for (int64_t k = loop.first; k < loop.first + loop.count; ++k) {
    if (stop.stopped()) return absl::OkStatus();
    if (ahead.size() >= window) {
      const size_t drain = ahead.size() - window / 2;
      const auto& [step, oldest] = ahead[drain - 1];
      // A failed step poisons every later one: stop here.
      CW_RETURN_IF_ERROR(AwaitStep(oldest, loop.step_timeout, stop, host.id(), step));
      if (stop.stopped()) return absl::OkStatus();
      ahead.erase(ahead.begin(), ahead.begin() + static_cast<std::ptrdiff_t>(drain));
      const SteadyClock::time_point now = SteadyClock::now();
      if (timed) {
        const double d = std::chrono::duration<double, std::micro>(now - last).count() /
                         static_cast<double>(drain);
        step_us = step_us == 0 ? d : step_us + 0.25 * (d - step_us);
        window = static_cast<size_t>(
            std::clamp(loop.run_ahead_us / std::max(step_us, 1.0), 2.0, 1024.0));
      }
      last = now;
      timed = true;
    }
    RunRequest run;
    run.program = program;
    run.run = RunId(loop.id_base + k);
    run.client = loop.client;
    run.arguments = {prev};
    run.outputs = {ArrayId(loop.id_base + k)};
    host.EnqueueRun(run);
    ahead.emplace_back(k, host.AwaitShard(run.outputs[0], shard));
    // The step before's output (the previous call's last, at `first`), but
    // never the caller's input.
    if (prev != loop.input) host.ReleaseArrays({prev});
    prev = run.outputs[0];
  }
  return AwaitStep(host.AwaitShard(prev, shard), loop.step_timeout, stop, host.id(),
                   loop.first + loop.count - 1);
}

absl::Status CheckLoop(const SpmdLoop& loop) {
  const int64_t first = loop.first, count = loop.count;
  const bool ids_fit =
      first >= 0 && count >= 1 && count <= kMaxSpmdLoopSteps && loop.id_base >= 0 &&
      loop.id_base <= std::numeric_limits<int64_t>::max() - first - count &&
      OwnerOfId(loop.id_base + first) == loop.client &&
      OwnerOfId(loop.id_base + first + count - 1) == loop.client;
  if (!ids_fit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an SPMD loop of ", count, " steps from ", first, " at id base ", loop.id_base, " (1 to ",
        kMaxSpmdLoopSteps, " steps from 0 or later, every id in ", loop.client.ToString(),
        "'s range)"));
  }
  if (!std::isfinite(loop.run_ahead_us) || loop.run_ahead_us <= 0 ||
      loop.step_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("an SPMD loop's run-ahead (", loop.run_ahead_us, " us) and step timeout (",
                     absl::FormatDuration(loop.step_timeout), ") must be positive"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunSpmdLoop(const ProgramPlan& plan, const std::vector<HostService*>& hosts,
                         const SpmdLoop& loop) {
  if (plan.parameters.size() != 1 || plan.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot drive ", plan.id.ToString(), " as an SPMD loop: it has ",
        plan.parameters.size(), " parameters and ", plan.outputs.size(),
        " outputs, not one of each"));
  }
  CW_RETURN_IF_ERROR(CheckLoop(loop));
  if (hosts.size() != plan.hosts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("an SPMD loop over ", hosts.size(),
                                                   " hosts (the plan spans ",
                                                   plan.hosts.size(), ")"));
  }
  // Each host waits on its own shard of the output: every device of the
  // mesh holds one, so it waits for the host's last step.
  const PlanValue& out = plan.values[plan.outputs[0]];
  std::vector<int> shards(hosts.size(), -1);
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (hosts[h] == nullptr) {
      return absl::UnavailableError(absl::StrCat(plan.hosts[h].ToString(), " is gone"));
    }
    if (hosts[h]->id() != plan.hosts[h]) {
      return absl::InvalidArgumentError(absl::StrCat("an SPMD loop given ",
                                                     hosts[h]->id().ToString(), " for ",
                                                     plan.hosts[h].ToString(), " of the plan"));
    }
    for (size_t s = 0; s < out.shard_hosts.size() && shards[h] < 0; ++s) {
      if (out.shard_hosts[s] == plan.hosts[h]) shards[h] = static_cast<int>(s);
    }
    if (shards[h] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          plan.hosts[h].ToString(), " holds no shard of ", plan.id.ToString(), "'s output"));
    }
  }
  Stop stop;
  std::vector<std::thread> threads;
  threads.reserve(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) {
    threads.emplace_back([&, h] {
      if (absl::Status s = RunOnHost(*hosts[h], shards[h], plan.id, loop, stop); !s.ok()) {
        stop.Fail(s);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return stop.first();
}

}  // namespace causeway::tools
