#include "causeway/store/object_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "causeway/backend/device.h"
#include "causeway/base/check.h"

namespace causeway {

ObjectStore::ObjectStore(HostId host, const std::vector<DeviceId>& devices,
                         int64_t capacity_bytes,
                         std::vector<std::unique_ptr<backend::Device>> backends)
    : host_(host), backends_(std::move(backends)) {
  CW_CHECK(backends_.empty() || backends_.size() == devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    memories_.push_back(
        std::make_unique<DeviceMemory>(devices[i], capacity_bytes, backend(static_cast<int>(i))));
  }
}

// Members go in reverse: the shards first, then the memories, then the
// devices.
ObjectStore::~ObjectStore() = default;

BufferRef ObjectStore::Allocate(int local, const ir::Shape& shape, ClientId owner) {
  return DeviceBuffer::Allocate(memories_[local].get(), shape, owner);
}

absl::Status ObjectStore::Put(const ShardKey& key, BufferRef buffer) {
  MutexLock lock(&mu_);
  auto [it, inserted] = shards_.try_emplace(key, std::move(buffer));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat(key.array.ToString(), " shard ", key.shard,
                                                 " already exists on ", host_.ToString()));
  }
  by_array_[key.array].push_back(key.shard);
  return absl::OkStatus();
}

absl::StatusOr<BufferRef> ObjectStore::Get(const ShardKey& key) const {
  MutexLock lock(&mu_);
  auto it = shards_.find(key);
  if (it == shards_.end()) {
    return absl::NotFoundError(absl::StrCat(key.array.ToString(), " shard ", key.shard,
                                            " is not on ", host_.ToString(),
                                            " (never created, or released)"));
  }
  return it->second;
}

void ObjectStore::Release(absl::Span<const ArrayId> arrays) {
  // Buffers are destroyed (and memory freed, granting waiters) outside the
  // lock: a grant runs callbacks that may re-enter the store.
  std::vector<BufferRef> dropped;
  {
    MutexLock lock(&mu_);
    for (ArrayId id : arrays) {
      auto it = by_array_.find(id);
      if (it == by_array_.end()) continue;
      for (int shard : it->second) {
        auto s = shards_.find(ShardKey{id, shard});
        dropped.push_back(std::move(s->second));
        shards_.erase(s);
      }
      by_array_.erase(it);
    }
  }
  dropped.clear();
}

int ObjectStore::ReleaseOwner(ClientId owner) {
  std::vector<ArrayId> ids;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, buffer] : shards_) {
      if (buffer->owner() == owner) ids.push_back(key.array);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  Release(ids);
  return static_cast<int>(ids.size());
}

int ObjectStore::num_shards() const {
  MutexLock lock(&mu_);
  return static_cast<int>(shards_.size());
}

std::vector<absl::flat_hash_map<ClientId, int64_t>> ObjectStore::ShardsByOwner() const {
  std::vector<absl::flat_hash_map<ClientId, int64_t>> out(memories_.size());
  absl::flat_hash_map<DeviceId, size_t> local;
  for (size_t i = 0; i < memories_.size(); ++i) local[memories_[i]->device()] = i;
  MutexLock lock(&mu_);
  for (const auto& [key, buffer] : shards_) {
    auto it = local.find(buffer->device());
    if (it != local.end()) ++out[it->second][buffer->owner()];
  }
  return out;
}

int64_t ObjectStore::memory_in_use() const {
  int64_t total = 0;
  for (const auto& m : memories_) total += m->in_use();
  return total;
}

void ObjectStore::Shutdown() {
  for (auto& m : memories_) m->Shutdown();
}

}  // namespace causeway
