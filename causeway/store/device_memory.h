// DeviceMemory: capacity accounting for one device, with back-pressure.
//
// A reservation that does not fit waits, in FIFO order, until enough memory
// is freed; one larger than the whole capacity fails at once with
// RESOURCE_EXHAUSTED. FIFO (no overtaking) keeps a large request from being
// starved by a stream of small ones.
//
// Quotas: a client (the owner of a reservation) may be limited to a number
// of bytes on the device. A reservation that would take its owner past the
// quota waits in a line of the owner's own, until the owner frees memory,
// and only then joins the device's FIFO: an owner over its quota never
// holds other owners' reservations back. One larger than the quota fails
// at once with RESOURCE_EXHAUSTED naming it.
#ifndef CAUSEWAY_STORE_DEVICE_MEMORY_H_
#define CAUSEWAY_STORE_DEVICE_MEMORY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"

namespace causeway::backend {
class Device;
class DeviceAllocation;
}  // namespace causeway::backend

namespace causeway {

class DeviceMemory;

// Bytes granted on a DeviceMemory, freed when the hold is destroyed or
// reset. Move-only. What a launch's temporaries take while it runs when
// they fit at once (no buffer, no future: the common case costs one lock
// to take and one to give back).
class MemoryHold {
 public:
  MemoryHold() = default;
  MemoryHold(DeviceMemory* memory, int64_t bytes, ClientId owner = ClientId())
      : memory_(memory), bytes_(bytes), owner_(owner) {}
  MemoryHold(MemoryHold&& other) noexcept
      : memory_(std::exchange(other.memory_, nullptr)),
        bytes_(other.bytes_),
        owner_(other.owner_) {}
  MemoryHold& operator=(MemoryHold&& other) noexcept {
    if (this != &other) {
      reset();
      memory_ = std::exchange(other.memory_, nullptr);
      bytes_ = other.bytes_;
      owner_ = other.owner_;
    }
    return *this;
  }
  ~MemoryHold() { reset(); }
  void reset();

 private:
  DeviceMemory* memory_ = nullptr;
  int64_t bytes_ = 0;
  ClientId owner_;
};

// Thread-safe. Owned by the host's ObjectStore; outlives every buffer on it.
class DeviceMemory {
 public:
  using Callback = std::function<void(absl::Status)>;

  // `backend` (may be null: the budget alone, with no storage behind it,
  // for tests of the accounting) gives the bytes of the buffers granted
  // here; it must outlive this memory.
  DeviceMemory(DeviceId device, int64_t capacity, backend::Device* backend = nullptr)
      : device_(device), capacity_(capacity), backend_(backend) {}
  ~DeviceMemory();

  // Reserves `bytes`. `done(OK)` runs once the memory is granted: inline if it
  // fits now and nobody is waiting ahead, otherwise on the thread whose
  // Free() made room. `done(RESOURCE_EXHAUSTED)` runs inline if `bytes`
  // exceeds the capacity; `done(CANCELLED)` on Shutdown(). Returns a ticket
  // for Cancel() if the request is waiting, else 0.
  // `owner` (may be invalid: no quota applies) is charged for the bytes.
  uint64_t Reserve(int64_t bytes, Callback done, ClientId owner = ClientId());

  // Withdraws a waiting request (its callback never runs) and grants the
  // requests behind it that now fit. Returns false if it was no longer
  // waiting (granted, failed, or unknown).
  bool Cancel(uint64_t ticket);

  // Grants `bytes` at once if they fit and nobody is waiting ahead; returns
  // whether it did. Lets callers skip building a callback in the common case.
  bool TryReserve(int64_t bytes, ClientId owner = ClientId());

  // Returns `bytes` reserved earlier (by `owner`) and grants waiting
  // reservations that now fit; their callbacks run on this thread.
  void Free(int64_t bytes, ClientId owner = ClientId());

  // Limits `owner` to `bytes` on this device from now on (0: no limit).
  // Reservations already granted stay; waiting ones that now fit go.
  void SetQuota(ClientId owner, int64_t bytes);
  int64_t quota(ClientId owner) const;
  // Bytes granted to `owner` or waiting for the device on its behalf.
  int64_t admitted(ClientId owner) const;

  // Each owner's bytes on the device now (owners with none are left out).
  struct OwnerUsage {
    ClientId owner;
    int64_t in_use = 0;   // granted
    int64_t waiting = 0;  // requested and not yet granted (quota or device full)
    int64_t quota = 0;    // 0: none
  };
  std::vector<OwnerUsage> Usage() const;

  // Fails every waiting reservation with CANCELLED and every later one too.
  void Shutdown();

  DeviceId device() const { return device_; }
  backend::Device* backend() const { return backend_; }
  int64_t capacity() const { return capacity_; }
  int64_t in_use() const;
  int64_t peak() const;
  int num_waiting() const;

  // Fails every waiting reservation with RESOURCE_EXHAUSTED (naming the
  // device, the bytes in use and the wait) if requests have been waiting
  // and no memory has been freed or granted since `now - stall`: nothing
  // in flight will make room, so without this they would wait forever
  // (e.g. a client that puts more than the device holds). Returns how many
  // it failed. Called periodically by the host's housekeeping.
  int FailStalledWaiters(absl::Time now, absl::Duration stall);

  // Blocks until in_use() == 0 or `timeout` passes; returns whether it did.
  bool AwaitEmpty(absl::Duration timeout) const;

 private:
  struct Waiter {
    int64_t bytes;
    Callback done;
    uint64_t ticket;
    ClientId owner;
  };
  // An owner with a quota, or with bytes admitted.
  struct Owner {
    int64_t quota = 0;     // 0: none
    int64_t admitted = 0;  // granted, or waiting in waiting_
    std::deque<Waiter> over_quota;  // waiting for the owner to free memory
    absl::Time last_progress = absl::InfinitePast();
  };

  // REQUIRES: mu_. Moves the callbacks of waiters that now fit to `granted`.
  void GrantLocked(std::vector<Callback>& granted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves `owner`'s over-quota waiters that now fit its quota to waiting_.
  void AdmitLocked(ClientId owner, Owner& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetIfIdleLocked(ClientId owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DeviceId device_;
  const int64_t capacity_;
  backend::Device* const backend_;
  mutable Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Waiter> waiting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ClientId, Owner> owners_ ABSL_GUARDED_BY(mu_);
  // When memory was last freed or granted, or a first request started
  // waiting.
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace causeway

#endif  // CAUSEWAY_STORE_DEVICE_MEMORY_H_
