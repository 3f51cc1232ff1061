#include "causeway/store/buffer.h"

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
    if (backed_ && bytes_ <= kInlineBytes) data_.store(inline_, std::memory_order_relaxed);
    granted_.store(true, std::memory_order_release);
    allocated_.Set(Unit{});
  } else {
    allocated_.Set(status);
  }
}

std::byte* DeviceBuffer::Back() const {
  if (!backed_ || !granted_.load(std::memory_order_acquire)) return nullptr;
  auto* fresh = new std::byte[static_cast<size_t>(bytes_)];
  std::byte* expected = nullptr;
  if (data_.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
    return fresh;
  }
  delete[] fresh;
  return expected;
}

DeviceBuffer::~DeviceBuffer() {
  if (std::byte* p = data_.load(std::memory_order_relaxed); p != nullptr && p != inline_) {
    delete[] p;
  }
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
