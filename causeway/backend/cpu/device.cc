#include "causeway/backend/cpu/device.h"

#include <map>
#include <memory>
#include <new>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/mutex.h"
#include "causeway/topology/mesh.h"

namespace causeway::backend::cpu {
namespace {

constexpr size_t kAlignment = 64;  // for the kernels' vector loads

// A cpu device's memory: host memory, aligned for the kernels' vector
// loads, at data().
class CpuAllocation : public DeviceAllocation {
 public:
  std::byte* data() const { return data_; }

 protected:
  CpuAllocation(int64_t bytes, std::byte* data) : DeviceAllocation(bytes), data_(data) {}

 private:
  std::byte* const data_;
};

// A small buffer: the handle and its bytes are one block of the host's heap
// (the bytes right after the handle's first 64), so its storage costs one
// allocation, as it did when the buffer held its bytes itself.
class InlineAllocation final : public CpuAllocation {
 public:
  static constexpr size_t kHeader = 64;

  // Null if the host has no room.
  static InlineAllocation* Make(int64_t bytes) {
    void* block = ::operator new(kHeader + static_cast<size_t>(bytes),
                                 std::align_val_t{kAlignment}, std::nothrow);
    return block == nullptr ? nullptr : new (block) InlineAllocation(bytes, block);
  }
  // What `delete` on the handle calls once its destructor ran: the block
  // goes back whole.
  static void operator delete(void* block) {
    ::operator delete(block, std::align_val_t{kAlignment});
  }
  static void operator delete(void*, void*) noexcept {}

 private:
  InlineAllocation(int64_t bytes, void* block)
      : CpuAllocation(bytes, static_cast<std::byte*>(block) + kHeader) {}
};
static_assert(sizeof(InlineAllocation) <= InlineAllocation::kHeader);

// Freed large blocks of one device, kept for the next allocation of the
// same size. A step's large results are allocated afresh on every run, and
// a fresh block of many megabytes costs a page fault per 4 KiB page when
// first written (a 205 MB result: 50,000 faults, 0.1-0.2 s, every run);
// a block reused costs none. Bounded in bytes and blocks; what does not fit
// goes back to the heap. Outlives its device while allocations hold it.
class BlockCache {
 public:
  static constexpr size_t kMaxBytes = size_t{256} << 20;
  static constexpr size_t kMaxBlocks = 8;

  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() {
    for (const auto& [size, block] : blocks_) Free(block);
  }

  // A kept block of exactly `size` bytes, or a new one; null if the host
  // has no room.
  std::byte* Take(size_t size) {
    {
      MutexLock lock(&mu_);
      if (auto it = blocks_.find(size); it != blocks_.end()) {
        std::byte* block = it->second;
        blocks_.erase(it);
        bytes_ -= size;
        return block;
      }
    }
    return static_cast<std::byte*>(
        ::operator new(size, std::align_val_t{kAlignment}, std::nothrow));
  }

  // Keeps `block` of `size` bytes if the bounds allow, else frees it.
  void Give(std::byte* block, size_t size) {
    {
      MutexLock lock(&mu_);
      if (bytes_ + size <= kMaxBytes && blocks_.size() < kMaxBlocks) {
        blocks_.emplace(size, block);
        bytes_ += size;
        return;
      }
    }
    Free(block);
  }

  size_t cached_bytes() const {
    MutexLock lock(&mu_);
    return bytes_;
  }

 private:
  static void Free(std::byte* block) { ::operator delete(block, std::align_val_t{kAlignment}); }

  mutable Mutex mu_;
  std::multimap<size_t, std::byte*> blocks_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// A large buffer: its bytes come from, and go back to, its device's cache.
class CachedAllocation final : public CpuAllocation {
 public:
  // Blocks from this size up are cached; smaller ones are inline.
  static constexpr int64_t kFrom = int64_t{1} << 20;

  // Null if the host has no room.
  static std::unique_ptr<CachedAllocation> Make(std::shared_ptr<BlockCache> cache,
                                                int64_t bytes) {
    std::byte* data = cache->Take(static_cast<size_t>(bytes));
    if (data == nullptr) return nullptr;
    return std::unique_ptr<CachedAllocation>(
        new (std::nothrow) CachedAllocation(std::move(cache), bytes, data));
  }
  ~CachedAllocation() override { cache_->Give(data(), static_cast<size_t>(bytes())); }

 private:
  CachedAllocation(std::shared_ptr<BlockCache> cache, int64_t bytes, std::byte* data)
      : CpuAllocation(bytes, data), cache_(std::move(cache)) {}

  const std::shared_ptr<BlockCache> cache_;
};

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
    std::unique_ptr<DeviceAllocation> a;
    if (bytes >= CachedAllocation::kFrom) {
      a = CachedAllocation::Make(cache_, bytes);
    } else {
      a.reset(InlineAllocation::Make(bytes));
    }
    if (a == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the host could not give ", bytes, " bytes to ", id_.ToString()));
    }
    return a;
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
    absl::StatusOr<const HostExecutable*> host = AsHost(executable);
    if (!host.ok()) return std::move(done)(host.status());
    std::move(done)((*host)->Run(in, out, context));
  }

 private:
  const DeviceDescription description_;
  const DeviceId id_;
  const std::shared_ptr<BlockCache> cache_ = std::make_shared<BlockCache>();
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec) {
  return std::unique_ptr<Device>(std::make_unique<CpuDevice>(spec));
}

}  // namespace causeway::backend::cpu
