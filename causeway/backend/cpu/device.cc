#include "causeway/backend/cpu/device.h"

#include <new>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/topology/mesh.h"

namespace causeway::backend::cpu {
namespace {

// Host memory, aligned for the kernels' vector loads. The handle and its
// bytes are one block of the host's heap (the bytes right after the
// handle's first 64): a buffer's storage costs one allocation, as it did
// when the buffer held its bytes itself.
class CpuAllocation final : public DeviceAllocation {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHeader = 64;

  // Null if the host has no room.
  static CpuAllocation* Make(int64_t bytes) {
    void* block = ::operator new(kHeader + static_cast<size_t>(bytes),
                                 std::align_val_t{kAlignment}, std::nothrow);
    return block == nullptr ? nullptr : new (block) CpuAllocation(bytes);
  }
  // What `delete` on the handle calls once its destructor ran: the block
  // goes back whole.
  static void operator delete(void* block) {
    ::operator delete(block, std::align_val_t{kAlignment});
  }
  static void operator delete(void*, void*) noexcept {}

  std::byte* data() const {
    return reinterpret_cast<std::byte*>(const_cast<CpuAllocation*>(this)) + kHeader;
  }

 private:
  explicit CpuAllocation(int64_t bytes) : DeviceAllocation(bytes) {}
};
static_assert(sizeof(CpuAllocation) <= CpuAllocation::kHeader);

std::byte* Bytes(const DeviceAllocation& a) {
  return static_cast<const CpuAllocation&>(a).data();
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const DeviceSpec& spec)
      : description_{std::string(kKindName), "host CPU", "", 0}, id_(spec.id) {}

  const DeviceDescription& description() const override { return description_; }

  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(int64_t bytes) override {
    if (bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("allocation of ", bytes, " bytes on ", id_.ToString()));
    }
    CpuAllocation* a = CpuAllocation::Make(bytes);
    if (a == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the host could not give ", bytes, " bytes to ", id_.ToString()));
    }
    return std::unique_ptr<DeviceAllocation>(a);
  }

  std::byte* HostAddress(const DeviceAllocation& allocation) const override {
    return Bytes(allocation);
  }

  void CopyIn(const void* src, DeviceAllocation& dst, const BoxCopy& box,
              Completion done) override {
    absl::Status s = box.Validate(box.src_array_bytes(), dst.bytes());
    if (s.ok()) CopyHostBox(src, Bytes(dst), box);
    std::move(done)(std::move(s));
  }

  void CopyOut(const DeviceAllocation& src, void* dst, const BoxCopy& box,
               Completion done) override {
    absl::Status s = box.Validate(src.bytes(), box.dst_array_bytes());
    if (s.ok()) CopyHostBox(Bytes(src), dst, box);
    std::move(done)(std::move(s));
  }

  void CopyWithin(const DeviceAllocation& src, DeviceAllocation& dst, const BoxCopy& box,
                  Completion done) override {
    absl::Status s = box.Validate(src.bytes(), dst.bytes());
    if (s.ok()) CopyHostBox(Bytes(src), Bytes(dst), box);
    std::move(done)(std::move(s));
  }

  void CopyToPeer(const DeviceAllocation& src, Device& peer, DeviceAllocation& dst,
                  const BoxCopy& box, Completion done) override {
    // Another device's memory is the host's too when it is of this kind.
    if (std::byte* to = peer.HostAddress(dst); to != nullptr) {
      absl::Status s = box.Validate(src.bytes(), dst.bytes());
      if (s.ok()) CopyHostBox(Bytes(src), to, box);
      std::move(done)(std::move(s));
      return;
    }
    Device::CopyToPeer(src, peer, dst, box, std::move(done));
  }

  void Launch(const Executable& executable, absl::Span<const DeviceAllocation* const> inputs,
              absl::Span<DeviceAllocation* const> outputs, const RunContext& context,
              Completion done) override {
    if (absl::Status s = CheckLaunchOperands(executable, inputs, outputs, id_); !s.ok()) {
      std::move(done)(std::move(s));
      return;
    }
    absl::InlinedVector<const void*, 8> in;
    absl::InlinedVector<void*, 8> out;
    for (const DeviceAllocation* a : inputs) in.push_back(Bytes(*a));
    for (DeviceAllocation* a : outputs) out.push_back(Bytes(*a));
    std::move(done)(executable.Run(in, out, context));
  }

 private:
  const DeviceDescription description_;
  const DeviceId id_;
};

}  // namespace

void CopyHostBox(const void* src, void* dst, const BoxCopy& box) {
  CopyBox(src, box.src_dims, box.src_offset, dst, box.dst_dims, box.dst_offset, box.extent,
          box.element_bytes);
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec) {
  return std::unique_ptr<Device>(std::make_unique<CpuDevice>(spec));
}

}  // namespace causeway::backend::cpu
