// ObjectStore: one per host. Holds the shard buffers of named arrays, keyed
// by (array id, shard index), and the memory of each of the host's devices.
//
// The store holds one reference per named shard; releasing an array drops
// those references, and the memory returns to the device once pending
// launches and transfers holding the buffer are done too. Every buffer
// carries its owner (client), so all of a client's arrays can be dropped at
// once when it disconnects.
#ifndef CAUSEWAY_STORE_OBJECT_STORE_H_
#define CAUSEWAY_STORE_OBJECT_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "causeway/backend/device.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/store/buffer.h"
#include "causeway/store/device_memory.h"

namespace causeway {

struct ShardKey {
  ArrayId array;
  int shard = 0;
  friend bool operator==(const ShardKey&, const ShardKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ShardKey& k) {
    return H::combine(std::move(h), k.array, k.shard);
  }
};

// Thread-safe.
class ObjectStore {
 public:
  // One DeviceMemory per entry of `devices`, each with `capacity_bytes`,
  // whose buffers take their bytes from the device of the same index in
  // `backends` (owned here). With no backends, the store keeps budgets
  // only: its buffers have no storage (tests of the accounting).
  ObjectStore(HostId host, const std::vector<DeviceId>& devices, int64_t capacity_bytes,
              std::vector<std::unique_ptr<backend::Device>> backends = {});
  ~ObjectStore();

  HostId host() const { return host_; }

  // The memory of the device at local index `local`. REQUIRES: in range.
  DeviceMemory* memory(int local) { return memories_[local].get(); }
  // Its device; null when the store keeps budgets only.
  backend::Device* backend(int local) const {
    return backends_.empty() ? nullptr : backends_[local].get();
  }
  int num_devices() const { return static_cast<int>(memories_.size()); }

  // Allocates a buffer for `shape` on local device `local`; see
  // DeviceBuffer::Allocate.
  BufferRef Allocate(int local, const ir::Shape& shape, ClientId owner);

  // Names `buffer` as shard `key`. ALREADY_EXISTS if taken.
  absl::Status Put(const ShardKey& key, BufferRef buffer);
  // NOT_FOUND naming the array, shard and host if absent.
  absl::StatusOr<BufferRef> Get(const ShardKey& key) const;

  // Drops the store's references to every shard of `arrays` held here.
  // Unknown ids are ignored (an array may have no shard on this host).
  void Release(absl::Span<const ArrayId> arrays);
  // Drops every shard owned by `owner`. Returns how many arrays had shards here.
  int ReleaseOwner(ClientId owner);

  int num_shards() const;
  // For each local device, how many shards each owner holds on it.
  std::vector<absl::flat_hash_map<ClientId, int64_t>> ShardsByOwner() const;
  // Sum of in_use() over this host's devices.
  int64_t memory_in_use() const;
  void Shutdown();

 private:
  const HostId host_;
  // Declared first, destroyed last: every buffer's allocation goes back to
  // its device before the device goes.
  std::vector<std::unique_ptr<backend::Device>> backends_;
  std::vector<std::unique_ptr<DeviceMemory>> memories_;
  mutable Mutex mu_;
  absl::flat_hash_map<ShardKey, BufferRef> shards_ ABSL_GUARDED_BY(mu_);
  // Shards of each array held here, for release by array id.
  absl::flat_hash_map<ArrayId, std::vector<int>> by_array_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_STORE_OBJECT_STORE_H_
