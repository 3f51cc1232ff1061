#include "causeway/worker/cancellations.h"

#include <utility>

namespace causeway {

std::shared_ptr<const std::atomic<bool>> Cancellations::FlagOf(ClientId client) {
  MutexLock lock(&mu_);
  std::shared_ptr<std::atomic<bool>>& flag = flags_[client];
  if (flag == nullptr) flag = std::make_shared<std::atomic<bool>>(false);
  return flag;
}

bool Cancellations::Cancel(ClientId client) {
  std::shared_ptr<std::atomic<bool>> flag;
  {
    MutexLock lock(&mu_);
    auto it = flags_.find(client);
    if (it == flags_.end()) return false;
    flag = std::move(it->second);
    flags_.erase(it);
  }
  flag->store(true);
  return true;
}

int64_t Cancellations::size() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(flags_.size());
}

}  // namespace causeway
