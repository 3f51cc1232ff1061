#include "causeway/store/device_memory.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace causeway {

void MemoryHold::reset() {
  if (memory_ != nullptr) memory_->Free(bytes_, owner_);
  memory_ = nullptr;
}

DeviceMemory::~DeviceMemory() { Shutdown(); }

uint64_t DeviceMemory::Reserve(int64_t bytes, Callback done, ClientId owner) {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    Owner* o = nullptr;
    if (owner.valid()) {
      auto it = owners_.find(owner);
      if (it != owners_.end()) o = &it->second;
    }
    if (bytes > capacity_) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "allocation of ", bytes, " bytes on ", device_.ToString(),
          " exceeds its whole memory capacity of ", capacity_, " bytes"));
    } else if (o != nullptr && o->quota > 0 && bytes > o->quota) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "allocation of ", bytes, " bytes on ", device_.ToString(), " exceeds ",
          owner.ToString(), "'s memory quota of ", o->quota, " bytes there"));
    } else if (shutdown_) {
      status = absl::CancelledError(absl::StrCat(device_.ToString(), " is shut down"));
    } else if (o != nullptr && o->quota > 0 &&
               (!o->over_quota.empty() || o->admitted + bytes > o->quota)) {
      // Over the owner's quota: waits in the owner's own line.
      const uint64_t ticket = next_ticket_++;
      if (o->over_quota.empty()) o->last_progress = absl::Now();
      o->over_quota.push_back(Waiter{bytes, std::move(done), ticket, owner});
      return ticket;
    } else {
      if (owner.valid()) owners_[owner].admitted += bytes;
      if (waiting_.empty() && in_use_ + bytes <= capacity_) {
        in_use_ += bytes;
        peak_ = std::max(peak_, in_use_);
      } else {
        const uint64_t ticket = next_ticket_++;
        if (waiting_.empty()) last_progress_ = absl::Now();
        waiting_.push_back(Waiter{bytes, std::move(done), ticket, owner});
        return ticket;
      }
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
    if (it != waiting_.end()) {
      dropped = std::move(it->done);
      const ClientId owner = it->owner;
      const int64_t bytes = it->bytes;
      waiting_.erase(it);
      if (owner.valid()) {
        auto o = owners_.find(owner);
        if (o != owners_.end()) {
          o->second.admitted -= bytes;
          AdmitLocked(owner, o->second);
        }
        ForgetIfIdleLocked(owner);
      }
    } else {
      bool found = false;
      for (auto& [owner, o] : owners_) {
        auto w = std::find_if(o.over_quota.begin(), o.over_quota.end(),
                              [ticket](const Waiter& x) { return x.ticket == ticket; });
        if (w == o.over_quota.end()) continue;
        dropped = std::move(w->done);
        o.over_quota.erase(w);
        AdmitLocked(owner, o);
        found = true;
        break;
      }
      if (!found) return false;
    }
    GrantLocked(granted);
  }
  for (Callback& cb : granted) cb(absl::OkStatus());
  return true;
}

void DeviceMemory::AdmitLocked(ClientId owner, Owner& o) {
  while (!o.over_quota.empty() &&
         (o.quota == 0 || o.admitted + o.over_quota.front().bytes <= o.quota)) {
    o.admitted += o.over_quota.front().bytes;
    o.last_progress = absl::Now();
    if (waiting_.empty()) last_progress_ = absl::Now();
    waiting_.push_back(std::move(o.over_quota.front()));
    o.over_quota.pop_front();
  }
}

void DeviceMemory::ForgetIfIdleLocked(ClientId owner) {
  auto it = owners_.find(owner);
  if (it != owners_.end() && it->second.quota == 0 && it->second.admitted <= 0 &&
      it->second.over_quota.empty()) {
    owners_.erase(it);
  }
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

bool DeviceMemory::TryReserve(int64_t bytes, ClientId owner) {
  MutexLock lock(&mu_);
  if (shutdown_ || !waiting_.empty() || in_use_ + bytes > capacity_) return false;
  if (owner.valid()) {
    auto it = owners_.find(owner);
    if (it != owners_.end() && it->second.quota > 0 &&
        (!it->second.over_quota.empty() || it->second.admitted + bytes > it->second.quota)) {
      return false;
    }
    owners_[owner].admitted += bytes;
  }
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return true;
}

void DeviceMemory::Free(int64_t bytes, ClientId owner) {
  std::vector<Callback> granted;
  {
    MutexLock lock(&mu_);
    in_use_ -= bytes;
    if (owner.valid()) {
      auto it = owners_.find(owner);
      if (it != owners_.end()) {
        it->second.admitted -= bytes;
        it->second.last_progress = absl::Now();
        AdmitLocked(owner, it->second);
      }
      ForgetIfIdleLocked(owner);
    }
    GrantLocked(granted);
  }
  for (Callback& cb : granted) cb(absl::OkStatus());
}

void DeviceMemory::SetQuota(ClientId owner, int64_t bytes) {
  if (!owner.valid()) return;
  std::vector<Callback> granted;
  {
    MutexLock lock(&mu_);
    Owner& o = owners_[owner];
    o.quota = std::max<int64_t>(0, bytes);
    AdmitLocked(owner, o);
    ForgetIfIdleLocked(owner);
    GrantLocked(granted);
  }
  for (Callback& cb : granted) cb(absl::OkStatus());
}

int64_t DeviceMemory::quota(ClientId owner) const {
  MutexLock lock(&mu_);
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.quota;
}

std::vector<DeviceMemory::OwnerUsage> DeviceMemory::Usage() const {
  MutexLock lock(&mu_);
  absl::flat_hash_map<ClientId, int64_t> waiting;
  for (const Waiter& w : waiting_) {
    if (w.owner.valid()) waiting[w.owner] += w.bytes;
  }
  std::vector<OwnerUsage> out;
  out.reserve(owners_.size());
  for (const auto& [owner, o] : owners_) {
    OwnerUsage u;
    u.owner = owner;
    auto w = waiting.find(owner);
    // admitted counts the owner's waiters in waiting_, not its over-quota line.
    u.waiting = w == waiting.end() ? 0 : w->second;
    u.in_use = o.admitted - u.waiting;
    for (const Waiter& q : o.over_quota) u.waiting += q.bytes;
    u.quota = o.quota;
    if (u.in_use != 0 || u.waiting != 0) out.push_back(u);
  }
  std::sort(out.begin(), out.end(),
            [](const OwnerUsage& a, const OwnerUsage& b) { return a.owner < b.owner; });
  return out;
}

int64_t DeviceMemory::admitted(ClientId owner) const {
  MutexLock lock(&mu_);
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.admitted;
}

void DeviceMemory::Shutdown() {
  std::deque<Waiter> cancelled;
  {
    MutexLock lock(&mu_);
    shutdown_ = true;
    cancelled.swap(waiting_);
    for (auto& [owner, o] : owners_) {
      for (Waiter& w : o.over_quota) cancelled.push_back(std::move(w));
      o.over_quota.clear();
    }
  }
  for (Waiter& w : cancelled) {
    w.done(absl::CancelledError(absl::StrCat(device_.ToString(), " is shut down")));
  }
}

int DeviceMemory::FailStalledWaiters(absl::Time now, absl::Duration stall) {
  std::deque<Waiter> failed;
  std::vector<std::pair<std::deque<Waiter>, absl::Status>> over_quota;
  int64_t in_use = 0, waiting_bytes = 0;
  {
    MutexLock lock(&mu_);
    // Owners waiting on their own quota, with nothing of theirs freed.
    for (auto& [owner, o] : owners_) {
      if (o.over_quota.empty() || now - o.last_progress < stall) continue;
      over_quota.emplace_back(
          std::move(o.over_quota),
          absl::ResourceExhaustedError(absl::StrCat(
              owner.ToString(), " is over its memory quota on ", device_.ToString(), ": ",
              o.admitted, " of its ", o.quota, " bytes held and nothing of it freed for ",
              absl::FormatDuration(stall))));
      o.over_quota.clear();
    }
    if (!waiting_.empty() && now - last_progress_ >= stall) {
      failed.swap(waiting_);
      in_use = in_use_;
      for (const Waiter& w : failed) {
        waiting_bytes += w.bytes;
        if (!w.owner.valid()) continue;
        auto o = owners_.find(w.owner);
        if (o != owners_.end()) o->second.admitted -= w.bytes;
      }
    }
  }
  int count = 0;
  for (auto& [waiters, status] : over_quota) {
    for (Waiter& w : waiters) w.done(status);
    count += static_cast<int>(waiters.size());
  }
  if (failed.empty()) return count;
  const absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      device_.ToString(), " is out of memory: ", in_use, " of ", capacity_,
      " bytes held by live arrays and nothing freed for ", absl::FormatDuration(stall), "; ",
      failed.size(), " allocations of ", waiting_bytes, " bytes in all failed"));
  for (Waiter& w : failed) w.done(status);
  return count + static_cast<int>(failed.size());
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
  size_t n = waiting_.size();
  for (const auto& [owner, o] : owners_) n += o.over_quota.size();
  return static_cast<int>(n);
}

bool DeviceMemory::AwaitEmpty(absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_use_ == 0; },
                              timeout);
}

}  // namespace causeway
