#include "causeway/store/buffer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/backend/device.h"
#include "causeway/base/status_macros.h"

namespace causeway {

DeviceBuffer::DeviceBuffer(Token, DeviceMemory* memory, ir::Shape shape, ClientId owner)
    : memory_(memory), shape_(std::move(shape)), owner_(owner), bytes_(shape_.byte_size()) {}

std::shared_ptr<DeviceBuffer> DeviceBuffer::Reservation(DeviceMemory* memory, int64_t bytes,
                                                        ClientId owner) {
  auto buffer = std::make_shared<DeviceBuffer>(Token(), memory,
                                              ir::Shape(ir::DType::kPred, {bytes}), owner);
  buffer->backed_ = false;
  Reserve(buffer);
  return buffer;
}

std::shared_ptr<DeviceBuffer> DeviceBuffer::Allocate(DeviceMemory* memory, ir::Shape shape,
                                                     ClientId owner) {
  auto buffer = std::make_shared<DeviceBuffer>(Token(), memory, std::move(shape), owner);
  Reserve(buffer);
  return buffer;
}

void DeviceBuffer::Reserve(const std::shared_ptr<DeviceBuffer>& buffer) {
  DeviceMemory* memory = buffer->memory_;
  if (memory->TryReserve(buffer->bytes_, buffer->owner_)) {
    buffer->OnGranted(absl::OkStatus());
    return;
  }
  // The reservation may be granted long after this returns, by which time
  // the buffer may be gone: a weak reference lets the grant hand the memory
  // straight back.
  std::weak_ptr<DeviceBuffer> weak = buffer;
  DeviceMemory* mem = memory;
  const int64_t bytes = buffer->bytes_;
  const ClientId owner = buffer->owner_;
  buffer->ticket_ = memory->Reserve(
      bytes,
      [weak, mem, bytes, owner](absl::Status status) {
        if (std::shared_ptr<DeviceBuffer> b = weak.lock()) {
          b->OnGranted(status);
        } else if (status.ok()) {
          mem->Free(bytes, owner);
        }
      },
      owner);
}

std::shared_ptr<DeviceBuffer> DeviceBuffer::Failed(ir::Shape shape, ClientId owner,
                                                   absl::Status error) {
  auto buffer = std::make_shared<DeviceBuffer>(Token(), nullptr, std::move(shape), owner);
  buffer->allocated_.Set(error);
  buffer->ready_.Set(error);
  return buffer;
}

void DeviceBuffer::OnGranted(absl::Status status) {
  if (status.ok()) {
    granted_.store(true, std::memory_order_release);
    allocated_.Set(Unit{});
  } else {
    allocated_.Set(status);
  }
}

absl::StatusOr<backend::DeviceAllocation*> DeviceBuffer::storage() const {
  if (backend::DeviceAllocation* a = allocation_.load(std::memory_order_acquire)) return a;
  if (memory_ == nullptr || !backed_) {
    return absl::FailedPreconditionError("a reservation or failed buffer has no storage");
  }
  if (!granted_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the memory of a buffer on ", device().ToString(), " is not granted yet"));
  }
  backend::Device* backend = memory_->backend();
  if (backend == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        device().ToString(), " keeps a budget only: no device gives its buffers storage"));
  }
  absl::StatusOr<std::unique_ptr<backend::DeviceAllocation>> fresh = backend->Allocate(bytes_);
  if (!fresh.ok()) {
    return Annotate(fresh.status(), absl::StrCat("a buffer of ", bytes_, " bytes on ",
                                                 device().ToString()));
  }
  // The pieces of a transfer may land at once: the first allocation made
  // is the buffer's, the others go back.
  backend::DeviceAllocation* expected = nullptr;
  if (allocation_.compare_exchange_strong(expected, fresh->get(), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
    return fresh->release();
  }
  return expected;
}

std::byte* DeviceBuffer::HostData() const {
  absl::StatusOr<backend::DeviceAllocation*> a = storage();
  if (!a.ok()) return nullptr;
  std::byte* p = memory_->backend()->HostAddress(**a);
  data_.store(p, std::memory_order_release);
  return p;
}

DeviceBuffer::~DeviceBuffer() {
  // The allocation goes back to the device before its budget does.
  delete allocation_.load(std::memory_order_relaxed);
  // granted_ is written before allocated_ is fulfilled and this destructor
  // runs after the last reference is gone, so no lock is needed.
  if (granted_.load(std::memory_order_relaxed)) {
    memory_->Free(bytes_, owner_);
  } else if (ticket_ != 0) {
    // Withdraw a request still waiting; if it is being granted right now,
    // the grant sees this buffer gone and frees the memory itself.
    memory_->Cancel(ticket_);
  }
}

void DeviceBuffer::SetReady(absl::Status status) const {
  if (status.ok()) {
    ready_.Set(Unit{});
  } else {
    ready_.Set(status);
  }
}

}  // namespace causeway
