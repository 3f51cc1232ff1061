#include "causeway/store/device_memory.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace causeway {

void MemoryHold::reset() {
  if (memory_ != nullptr) memory_->Free(bytes_);
  memory_ = nullptr;
}

DeviceMemory::~DeviceMemory() { Shutdown(); }

uint64_t DeviceMemory::Reserve(int64_t bytes, Callback done) {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (bytes > capacity_) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "allocation of ", bytes, " bytes on ", device_.ToString(),
          " exceeds its whole memory capacity of ", capacity_, " bytes"));
    } else if (shutdown_) {
      status = absl::CancelledError(absl::StrCat(device_.ToString(), " is shut down"));
    } else if (waiting_.empty() && in_use_ + bytes <= capacity_) {
      in_use_ += bytes;
      peak_ = std::max(peak_, in_use_);
    } else {
      const uint64_t ticket = next_ticket_++;
      if (waiting_.empty()) last_progress_ = absl::Now();
      waiting_.push_back(Waiter{bytes, std::move(done), ticket});
      return ticket;
    }
  }
  done(status);
  return 0;
}

bool DeviceMemory::Cancel(uint64_t ticket) {
  std::vector<Callback> granted;
  Callback dropped;
  {
    MutexLock lock(&mu_);
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [ticket](const Waiter& w) { return w.ticket == ticket; });
    if (it == waiting_.end()) return false;
    dropped = std::move(it->done);
    waiting_.erase(it);
    GrantLocked(granted);
  }
  for (Callback& cb : granted) cb(absl::OkStatus());
  return true;
}

void DeviceMemory::GrantLocked(std::vector<Callback>& granted) {
  if (!waiting_.empty()) last_progress_ = absl::Now();
  while (!waiting_.empty() && in_use_ + waiting_.front().bytes <= capacity_) {
    in_use_ += waiting_.front().bytes;
    peak_ = std::max(peak_, in_use_);
    granted.push_back(std::move(waiting_.front().done));
    waiting_.pop_front();
  }
}

bool DeviceMemory::TryReserve(int64_t bytes) {
  MutexLock lock(&mu_);
  if (shutdown_ || !waiting_.empty() || in_use_ + bytes > capacity_) return false;
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return true;
}

void DeviceMemory::Free(int64_t bytes) {
  std::vector<Callback> granted;
  {
    MutexLock lock(&mu_);
    in_use_ -= bytes;
    GrantLocked(granted);
  }
  for (Callback& cb : granted) cb(absl::OkStatus());
}

void DeviceMemory::Shutdown() {
  std::deque<Waiter> cancelled;
  {
    MutexLock lock(&mu_);
    shutdown_ = true;
    cancelled.swap(waiting_);
  }
  for (Waiter& w : cancelled) {
    w.done(absl::CancelledError(absl::StrCat(device_.ToString(), " is shut down")));
  }
}

int DeviceMemory::FailStalledWaiters(absl::Time now, absl::Duration stall) {
  std::deque<Waiter> failed;
  int64_t in_use = 0, waiting_bytes = 0;
  {
    MutexLock lock(&mu_);
    if (waiting_.empty() || now - last_progress_ < stall) return 0;
    failed.swap(waiting_);
    in_use = in_use_;
    for (const Waiter& w : failed) waiting_bytes += w.bytes;
  }
  const absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      device_.ToString(), " is out of memory: ", in_use, " of ", capacity_,
      " bytes held by live arrays and nothing freed for ", absl::FormatDuration(stall), "; ",
      failed.size(), " allocations of ", waiting_bytes, " bytes in all failed"));
  for (Waiter& w : failed) w.done(status);
  return static_cast<int>(failed.size());
}

int64_t DeviceMemory::in_use() const {
  MutexLock lock(&mu_);
  return in_use_;
}

int64_t DeviceMemory::peak() const {
  MutexLock lock(&mu_);
  return peak_;
}

int DeviceMemory::num_waiting() const {
  MutexLock lock(&mu_);
  return static_cast<int>(waiting_.size());
}

bool DeviceMemory::AwaitEmpty(absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_use_ == 0; },
                              timeout);
}

}  // namespace causeway
