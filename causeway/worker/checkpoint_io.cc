#include "causeway/worker/checkpoint_io.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace causeway {
namespace {

// The checkpoint thread's nice value (Linux: per thread).
constexpr int kNice = 10;

}  // namespace

CheckpointIo::CheckpointIo(std::string where, size_t max_queued)
    : where_(std::move(where)), max_queued_(max_queued) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointIo::~CheckpointIo() { Stop(); }

void CheckpointIo::Post(Task task) {
  absl::Status refused;
  {
    MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError(
          absl::StrCat(where_, " is shutting down: its checkpoint work is cancelled"));
    } else if (queue_.size() >= max_queued_) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat(where_, " already has ", queue_.size(),
                       " checkpoint shards queued (the most it takes)"));
    } else {
      if (queue_.empty()) cv_.SignalAll();
      queue_.push_back(std::move(task));
      return;
    }
  }
  task(refused);
}

void CheckpointIo::Stop() {
  std::deque<Task> cancelled;
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    cancelled.swap(queue_);
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  const absl::Status why = absl::UnavailableError(
      absl::StrCat(where_, " shut down before its checkpoint work was done"));
  for (Task& t : cancelled) t(why);
}

void CheckpointIo::Loop() {
  // Checkpoint work yields to the devices' threads: on a host whose cores
  // the devices keep busy it takes the gaps, rather than a core from
  // training (docs/BENCHMARKS.md, "Checkpoints while training"). Only ever
  // lowered, which needs no privilege; a failure leaves the default.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kNice);
  while (true) {
    Task task;
    {
      MutexLock lock(&mu_);
      // The deadline only re-checks the queue; a post always signals.
      while (!stopping_ && queue_.empty()) {
        cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      }
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(absl::OkStatus());
  }
}

}  // namespace causeway
