// HostExecutor's multi-controller loop (DriveSpmd): the baseline that
// `causeway bench dispatch --controller multi` measures against.
#include "causeway/worker/host_executor.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"

namespace causeway {

int HostExecutor::ReapLoops() {
  std::vector<Loop> done;
  int running = 0;
  {
    MutexLock lock(&mu_);
    for (auto it = loops_.begin(); it != loops_.end();) {
      if (it->finished->load()) {
        done.push_back(std::move(*it));
        it = loops_.erase(it);
      } else {
        ++it;
        ++running;
      }
    }
  }
  for (Loop& l : done) l.thread.join();
  return running;
}

Future<Unit> HostExecutor::DriveSpmd(const SpmdLoop& loop) {
  if (absl::Status range = CheckSpmdLoopRange(loop.id_base, loop.first, loop.count);
      !range.ok()) {
    return Future<Unit>::Ready(Annotate(range, id().ToString()));
  }
  const int running = ReapLoops();
  if (running >= limits::kMaxSpmdLoopsPerHost) {
    return Future<Unit>::Ready(absl::ResourceExhaustedError(
        absl::StrCat(id().ToString(), " already drives ", running, " SPMD loops (at most ",
                     limits::kMaxSpmdLoopsPerHost, ")")));
  }
  std::shared_ptr<const ProgramPlan> plan;
  Promise<Unit> done;
  {
    MutexLock lock(&mu_);
    auto it = programs_.find(loop.program);
    if (it != programs_.end()) plan = it->second->plan;
    if (plan == nullptr || shut_down_ || plan->parameters.size() != 1 ||
        plan->outputs.size() != 1) {
      return Future<Unit>::Ready(absl::InvalidArgumentError(
          absl::StrCat(id().ToString(), ": cannot drive ", loop.program.ToString(),
                       " as an SPMD loop (unknown, shut down, or not one input and one output)")));
    }
    // This host's shard of the output: waiting on it waits for the host's
    // last step (every device of the mesh holds one).
    const PlanValue& out = plan->values[plan->outputs[0]];
    int shard = -1;
    for (size_t s = 0; s < out.shard_hosts.size() && shard < 0; ++s) {
      if (out.shard_hosts[s] == id()) shard = static_cast<int>(s);
    }
    if (shard < 0) {
      return Future<Unit>::Ready(absl::InvalidArgumentError(
          absl::StrCat(id().ToString(), " holds no shard of ", loop.program.ToString())));
    }
    auto stop = std::make_shared<std::atomic<bool>>(false);
    auto finished = std::make_shared<std::atomic<bool>>(false);
    std::thread thread([this, loop, shard, done, stop, finished]() mutable {
      ArrayId prev = loop.first == 0 ? loop.input : ArrayId(loop.id_base + loop.first - 1);
      auto end = [&](const absl::Status& status) {
        done.Set(status);
        finished->store(true);
      };
      auto stopped = [&](int64_t k) {
        if (!stop_loops_.load(std::memory_order_relaxed) &&
            !stop->load(std::memory_order_relaxed)) {
          return false;
        }
        end(absl::AbortedError(absl::StrCat(
            id().ToString(), ": SPMD loop stopped at step ", k,
            stop_loops_.load() ? " (shut down)" : " (its client's arrays were released)")));
        return true;
      };
      // This host's shard of each step's output not yet known ready. Steps
      // are prepared at most kSpmdLoopRunAheadUs ahead of the devices, as
      // the island scheduler bounds a single controller's (each prepared
      // step holds its launches and buffers until it runs): the window in
      // steps is that over a step's time, measured between the loop's
      // wake-ups (at least 2 steps, at most 1024). Once the window is full
      // the loop waits for half of it to drain and refills it: one wake-up
      // per half a window, not per step. Steps finish in order (each reads
      // the one before), so waiting for the last of the half waits for all.
      std::deque<Future<Unit>> ahead;
      size_t window = 16;
      double step_us = 0;
      int64_t last_us = -1;
      for (int64_t k = loop.first; k < loop.first + loop.count; ++k) {
        if (stopped(k)) return;
        if (ahead.size() >= window) {
          const size_t drain = ahead.size() - window / 2;
          const absl::StatusOr<Unit>* r = nullptr;
          while ((r = ahead[drain - 1].AwaitWithTimeout(absl::Milliseconds(50))) == nullptr) {
            if (stopped(k)) return;
          }
          if (!r->ok()) {
            end(r->status());  // a failed step poisons every later one: stop here
            return;
          }
          ahead.erase(ahead.begin(), ahead.begin() + static_cast<std::ptrdiff_t>(drain));
          const int64_t now_us = options_.clock->NowMicros();
          if (last_us >= 0) {
            const double d = static_cast<double>(now_us - last_us) / static_cast<double>(drain);
            step_us = step_us == 0 ? d : step_us + 0.25 * (d - step_us);
            window = static_cast<size_t>(std::clamp(
                limits::kSpmdLoopRunAheadUs / std::max(step_us, 1.0), 2.0, 1024.0));
          }
          last_us = now_us;
        }
        RunRequest run;
        run.program = loop.program;
        run.run = RunId(loop.id_base + k);
        run.client = loop.client;
        run.arguments = {prev};
        run.outputs = {ArrayId(loop.id_base + k)};
        EnqueueRun(run);
        ahead.push_back(AwaitShard(run.outputs[0], shard));
        if (k > loop.first) ReleaseArrays({prev});
        prev = run.outputs[0];
      }
      AwaitShard(prev, shard).OnReady([done](const absl::StatusOr<Unit>& r) mutable {
        done.Set(r.status().ok() ? absl::StatusOr<Unit>(Unit{}) : r.status());
      });
      finished->store(true);
    });
    loops_.push_back(Loop{std::move(thread), loop.client, std::move(stop), std::move(finished)});
  }
  return done.future();
}

}  // namespace causeway
