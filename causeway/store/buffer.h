// DeviceBuffer: the storage of one shard on one device.
//
// A buffer is created before its data exists (static shapes let the host
// executor allocate every output up front). It goes through two one-shot
// events: `allocated` (device memory granted — may wait under
// back-pressure) and `ready` (the producer wrote it, or failed, in which case
// the error is the buffer's value and poisons every consumer).
//
// Buffers are shared (std::shared_ptr): the object store, pending launches
// and in-flight transfers each hold a reference; the memory returns to the
// device when the last reference goes.
//
// The bytes are the device's (backend::Device::Allocate, on the device of
// the buffer's DeviceMemory): the runtime reaches them through the device's
// copies and launches with storage(); data() is their host address, which
// only a kind whose memory is the host's (cpu) has.
#ifndef CAUSEWAY_STORE_BUFFER_H_
#define CAUSEWAY_STORE_BUFFER_H_

#include <atomic>
#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "causeway/async/future.h"
#include "causeway/base/ids.h"
#include "causeway/ir/shape.h"
#include "causeway/store/device_memory.h"

namespace causeway {

// Thread-safe: data() may be read by any thread once `ready` is OK, and
// written only by the producer between `allocated` and `ready`.
class DeviceBuffer : public std::enable_shared_from_this<DeviceBuffer> {
 public:
  // Reserves the shard's bytes on `memory` (which must outlive the buffer).
  // The returned buffer's allocated() future becomes ready when granted.
  static std::shared_ptr<DeviceBuffer> Allocate(DeviceMemory* memory, ir::Shape shape,
                                                ClientId owner);
  // A reservation of `bytes` on `memory` with no storage behind it (shape
  // pred[bytes], no storage()): a launch's temporaries, which the backend
  // keeps itself, counted against the device's budget while it runs.
  static std::shared_ptr<DeviceBuffer> Reservation(DeviceMemory* memory, int64_t bytes,
                                                   ClientId owner);
  // A buffer that is already failed with `error` (allocated and ready both
  // carry it). Uses no memory.
  static std::shared_ptr<DeviceBuffer> Failed(ir::Shape shape, ClientId owner,
                                              absl::Status error);

  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  const ir::Shape& shape() const { return shape_; }
  ClientId owner() const { return owner_; }
  int64_t byte_size() const { return bytes_; }
  // The device holding the buffer; invalid for a Failed() buffer.
  DeviceId device() const { return memory_ ? memory_->device() : DeviceId(); }
  // Its device's copies and launches; null for a Failed() buffer and on a
  // memory with no backend (budget only).
  backend::Device* backend() const { return memory_ ? memory_->backend() : nullptr; }

  // The buffer's device memory. It is allocated from the device on the
  // first call (by its producer, usually on the device's own thread, just
  // before it writes): the grant is only the device's budget, so a run that
  // allocates every output up front holds no memory for values not yet
  // produced, and a value takes memory the device freed a moment ago, still
  // in its caches, instead of pages never touched. FAILED_PRECONDITION
  // before allocated() is OK, for a reservation and on a memory with no
  // backend; the device's error (RESOURCE_EXHAUSTED) if it has no room.
  // Thread-safe: concurrent first calls share one allocation.
  absl::StatusOr<backend::DeviceAllocation*> storage() const;

  // The host address of storage(): non-null only where the device's memory
  // is the host's (backend::Device::HostAddress) and storage() is OK.
  std::byte* data() { return Data(); }
  const std::byte* data() const { return Data(); }

  Future<Unit> allocated() const { return allocated_.future(); }
  Future<Unit> ready() const { return ready_.future(); }
  // The outcome of allocated() / ready() if known, else nullptr; neither
  // blocks nor copies a future (the launch path checks every input and
  // output this way first).
  const absl::StatusOr<Unit>* allocated_if_known() const { return allocated_.TryGet(); }
  // Whether the memory is granted (data() usable): allocated() is OK. Reads
  // only the buffer itself, not allocated()'s shared state.
  bool granted() const { return granted_.load(std::memory_order_acquire); }
  const absl::StatusOr<Unit>* ready_if_known() const { return ready_.TryGet(); }

  // Marks the data written (OK) or failed. Runs ready continuations on this
  // thread. REQUIRES: called once.
  void SetReady(absl::Status status) const;

  // The promise behind ready(), for a producer that wants to drop its
  // reference to the buffer before waking consumers (so that memory freed by
  // a release is not still held while continuations run).
  Promise<Unit> ready_promise() const { return ready_; }

  // Only for the factories above (std::make_shared needs a public
  // constructor: the buffer and its reference count are one allocation).
  struct Token {
   private:
    friend class DeviceBuffer;
    Token() = default;
  };
  DeviceBuffer(Token, DeviceMemory* memory, ir::Shape shape, ClientId owner);

 private:
  void OnGranted(absl::Status status);
  std::byte* Data() const {
    std::byte* p = data_.load(std::memory_order_acquire);
    return p != nullptr ? p : HostData();
  }
  // data() before its host address is known.
  std::byte* HostData() const;
  // Reserves the buffer's bytes on its memory, granting now or later.
  static void Reserve(const std::shared_ptr<DeviceBuffer>& buffer);

  DeviceMemory* const memory_;
  const ir::Shape shape_;
  const ClientId owner_;
  const int64_t bytes_;
  // The device's allocation, owned, set once by storage()'s first call;
  // null until then, and for a reservation or a failed buffer.
  mutable std::atomic<backend::DeviceAllocation*> allocation_{nullptr};
  // Its host address once known (null: not yet, or the kind has none).
  mutable std::atomic<std::byte*> data_{nullptr};
  // Set (release) once the memory is granted and data_ set, before
  // allocated_ is fulfilled.
  std::atomic<bool> granted_{false};
  bool backed_ = true;  // false: a Reservation
  // The waiting reservation, withdrawn if the buffer dies before its grant.
  uint64_t ticket_ = 0;
  Promise<Unit> allocated_;
  Promise<Unit> ready_;
};

using BufferRef = std::shared_ptr<DeviceBuffer>;

}  // namespace causeway

#endif  // CAUSEWAY_STORE_BUFFER_H_
