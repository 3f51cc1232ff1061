#include "tools/spmd_loop.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "causeway/async/future.h"
#include "causeway/base/status_macros.h"

namespace causeway::tools {
namespace {

// Waits for `f`, at most `timeout`.
absl::Status AwaitStep(Future<Unit>& f, absl::Duration timeout, HostId host, int64_t step) {
  const absl::StatusOr<Unit>* r = f.AwaitWithTimeout(timeout);
  if (r == nullptr) {
    return absl::DeadlineExceededError(absl::StrCat(host.ToString(), ": SPMD step ", step,
                                                    " not done within ",
                                                    absl::FormatDuration(timeout)));
  }
  return r->status();
}

// One host's loop. Steps are prepared at most `run_ahead_us` ahead of the
// devices, as the island scheduler bounds a single controller's (each
// prepared step holds its launches and buffers until it runs): the window
// in steps is that over a step's time, measured between the loop's wake-ups
// (at least 2 steps, at most 1024). Once the window is full the loop waits
// for half of it to drain and refills it: one wake-up per half a window, not
// per step. Steps finish in order (each reads the one before), so waiting
// for the last of the half waits for all.
absl::Status RunOnHost(HostService& host, int shard, const ProgramId program,
                       const SpmdLoop& loop) {
  using SteadyClock = std::chrono::steady_clock;
  ArrayId prev = loop.first == 0 ? loop.input : ArrayId(loop.id_base + loop.first - 1);
  std::deque<std::pair<int64_t, Future<Unit>>> ahead;
  size_t window = 16;
  double step_us = 0;
  SteadyClock::time_point last{};
  bool timed = false;
  for (int64_t k = loop.first; k < loop.first + loop.count; ++k) {
    if (ahead.size() >= window) {
      const size_t drain = ahead.size() - window / 2;
      auto& [step, oldest] = ahead[drain - 1];
      // A failed step poisons every later one: stop here.
      CW_RETURN_IF_ERROR(AwaitStep(oldest, loop.step_timeout, host.id(), step));
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
    if (k > loop.first) host.ReleaseArrays({prev});
    prev = run.outputs[0];
  }
  Future<Unit> last_step = host.AwaitShard(prev, shard);
  return AwaitStep(last_step, loop.step_timeout, host.id(), loop.first + loop.count - 1);
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
  if (hosts.size() != plan.hosts.size() || loop.count < 1 || loop.first < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an SPMD loop of ", loop.count, " steps from ", loop.first, " over ", hosts.size(),
        " hosts (the plan spans ", plan.hosts.size(), ")"));
  }
  // Each host waits on its own shard of the output: every device of the
  // mesh holds one, so it waits for the host's last step.
  const PlanValue& out = plan.values[plan.outputs[0]];
  std::vector<int> shards(hosts.size(), -1);
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (hosts[h] == nullptr) {
      return absl::UnavailableError(absl::StrCat(plan.hosts[h].ToString(), " is gone"));
    }
    for (size_t s = 0; s < out.shard_hosts.size() && shards[h] < 0; ++s) {
      if (out.shard_hosts[s] == plan.hosts[h]) shards[h] = static_cast<int>(s);
    }
    if (shards[h] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          plan.hosts[h].ToString(), " holds no shard of ", plan.id.ToString(), "'s output"));
    }
  }
  std::vector<absl::Status> results(hosts.size());
  std::vector<std::thread> threads;
  threads.reserve(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) {
    threads.emplace_back([&, h] { results[h] = RunOnHost(*hosts[h], shards[h], plan.id, loop); });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) CW_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

}  // namespace causeway::tools
