#include "causeway/backend/compile_cache.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/mutex.h"

namespace causeway::backend {
namespace {

struct Entry {
  // A live function at the key's address is the same object: an address is
  // reused only after the object it held is gone, and then this expires.
  std::weak_ptr<const ir::Function> function;
  std::weak_ptr<const Executable> executable;
};

struct Cache {
  Mutex mu;
  absl::flat_hash_map<std::pair<const DeviceKind*, const ir::Function*>, Entry> entries
      ABSL_GUARDED_BY(mu);
  // Expired entries are swept when the map has doubled since the last sweep.
  size_t sweep_at ABSL_GUARDED_BY(mu) = 64;
};

Cache& TheCache() {
  static Cache* const cache = new Cache;  // never destroyed
  return *cache;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Executable>> CompileShared(
    const DeviceKind& kind, const std::shared_ptr<const ir::Function>& function) {
  Cache& c = TheCache();
  const auto key = std::make_pair(&kind, function.get());
  {
    MutexLock lock(&c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end() && !it->second.function.expired()) {
      if (std::shared_ptr<const Executable> exe = it->second.executable.lock()) return exe;
    }
  }
  // Compiled outside the lock: another thread compiling the same function
  // at once costs a second compile, never a wrong result.
  absl::StatusOr<std::shared_ptr<const Executable>> made = kind.Compile(*function);
  if (!made.ok()) return made.status();
  MutexLock lock(&c.mu);
  Entry& entry = c.entries[key];
  if (!entry.function.expired()) {
    if (std::shared_ptr<const Executable> exe = entry.executable.lock()) return exe;
  }
  entry.function = function;
  entry.executable = *made;
  if (c.entries.size() >= c.sweep_at) {
    absl::erase_if(c.entries, [](const auto& e) {
      return e.second.function.expired() || e.second.executable.expired();
    });
    c.sweep_at = std::max<size_t>(64, 2 * c.entries.size());
  }
  return made;
}

}  // namespace causeway::backend
