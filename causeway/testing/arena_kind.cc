#include "causeway/testing/arena_kind.h"

#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/backend/cpu/device.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/status_macros.h"
#include "causeway/base/mutex.h"

namespace causeway::testing {
namespace {

using backend::BoxCopy;
using backend::Completion;
using backend::DeviceAllocation;

constexpr int64_t kAlignment = 64;

// The device's memory and its free runs (first fit, coalesced on free).
class Arena {
 public:
  explicit Arena(int64_t capacity) : bytes_(static_cast<size_t>(capacity)) {
    if (capacity > 0) free_[0] = capacity;
  }

  // The offset of `bytes` (rounded up to kAlignment), or -1 if no run fits.
  int64_t Take(int64_t bytes) {
    MutexLock lock(&mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const int64_t offset = it->first;
      const int64_t rest = it->second - bytes;
      free_.erase(it);
      if (rest > 0) free_[offset + bytes] = rest;
      return offset;
    }
    return -1;
  }

  void Give(int64_t offset, int64_t bytes) {
    MutexLock lock(&mu_);
    auto [it, added] = free_.emplace(offset, bytes);
    if (auto next = std::next(it); next != free_.end() && offset + bytes == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == offset) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  int64_t free_bytes() const {
    MutexLock lock(&mu_);
    int64_t n = 0;
    for (const auto& [o, b] : free_) n += b;
    return n;
  }

  // Only the device's thread reads and writes the bytes.
  std::byte* at(int64_t offset) { return bytes_.data() + offset; }

 private:
  std::vector<std::byte> bytes_;
  mutable Mutex mu_;
  std::map<int64_t, int64_t> free_ ABSL_GUARDED_BY(mu_);
};

class ArenaAllocation final : public DeviceAllocation {
 public:
  ArenaAllocation(std::shared_ptr<Arena> arena, int64_t offset, int64_t bytes, int64_t reserved)
      : DeviceAllocation(bytes), arena_(std::move(arena)), offset_(offset), reserved_(reserved) {}
  ~ArenaAllocation() override {
    if (reserved_ > 0) arena_->Give(offset_, reserved_);
  }
  const Arena* arena() const { return arena_.get(); }
  int64_t offset() const { return offset_; }

 private:
  const std::shared_ptr<Arena> arena_;
  const int64_t offset_;
  const int64_t reserved_;
};

class ArenaDevice final : public backend::Device {
 public:
  ArenaDevice(const backend::DeviceSpec& spec, ArenaOptions options)
      : description_{std::string(kArenaKindName), "test arena", "",
                     spec.memory_bytes},
        id_(spec.id),
        options_(options),
        arena_(std::make_shared<Arena>(spec.memory_bytes)),
        thread_([this] { Loop(); }) {}

  ~ArenaDevice() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  const backend::DeviceDescription& description() const override { return description_; }
  // Its operations run in the order they were started, on its own thread,
  // as a GPU's queue runs them: the device stream keeps several launches in
  // flight on it, and the suites that run on this kind test that path.
  int max_launches_in_flight() const override { return 4; }

  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(int64_t bytes) override {
    if (bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("allocation of ", bytes, " bytes on ", id_.ToString()));
    }
    const int64_t reserved = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    int64_t offset = 0;
    if (reserved > 0 && (offset = arena_->Take(reserved)) < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the arena of ", id_.ToString(), " has no free run of ", reserved,
                       " bytes (", arena_->free_bytes(), " free)"));
    }
    return std::unique_ptr<DeviceAllocation>(
        std::make_unique<ArenaAllocation>(arena_, offset, bytes, reserved));
  }

  void CopyIn(const void* src, DeviceAllocation& dst, const BoxCopy& box,
              Completion done) override {
    const ArenaAllocation* d = Mine(dst);
    absl::Status s = d == nullptr ? Foreign("destination")
                                  : box.Validate(box.src_array_bytes(), dst.bytes());
    if (!s.ok()) return std::move(done)(s);
    Enqueue([this, src, d, box, done = std::move(done)]() mutable {
      backend::CopyHostBox(src, arena_->at(d->offset()), box);
      std::move(done)(absl::OkStatus());
    });
  }

  void CopyOut(const DeviceAllocation& src, void* dst, const BoxCopy& box,
               Completion done) override {
    const ArenaAllocation* s_alloc = Mine(src);
    absl::Status s = s_alloc == nullptr ? Foreign("source")
                                        : box.Validate(src.bytes(), box.dst_array_bytes());
    if (!s.ok()) return std::move(done)(s);
    Enqueue([this, s_alloc, dst, box, done = std::move(done)]() mutable {
      backend::CopyHostBox(arena_->at(s_alloc->offset()), dst, box);
      std::move(done)(absl::OkStatus());
    });
  }

  void CopyWithin(const DeviceAllocation& src, DeviceAllocation& dst, const BoxCopy& box,
                  Completion done) override {
    const ArenaAllocation* a = Mine(src);
    const ArenaAllocation* b = Mine(dst);
    absl::Status s = a == nullptr   ? Foreign("source")
                     : b == nullptr ? Foreign("destination")
                                    : box.Validate(src.bytes(), dst.bytes());
    if (!s.ok()) return std::move(done)(s);
    Enqueue([this, a, b, box, done = std::move(done)]() mutable {
      backend::CopyHostBox(arena_->at(a->offset()), arena_->at(b->offset()), box);
      std::move(done)(absl::OkStatus());
    });
  }

  void Launch(const backend::Executable& executable,
              absl::Span<const DeviceAllocation* const> inputs,
              absl::Span<DeviceAllocation* const> outputs, const backend::RunContext& context,
              Completion done) override {
    if (absl::Status s = backend::CheckLaunchOperands(executable, inputs, outputs, id_);
        !s.ok()) {
      return std::move(done)(std::move(s));
    }
    std::vector<const ArenaAllocation*> in, out;
    for (const DeviceAllocation* a : inputs) {
      in.push_back(Mine(*a));
      if (in.back() == nullptr) return std::move(done)(Foreign("input"));
    }
    for (DeviceAllocation* a : outputs) {
      out.push_back(Mine(*a));
      if (out.back() == nullptr) return std::move(done)(Foreign("output"));
    }
    Enqueue([this, &executable, in = std::move(in), out = std::move(out), context,
             done = std::move(done)]() mutable {
      // The kernels run over host copies of the arena's bytes: nothing of
      // the arena is handed out.
      const ir::Function& fn = executable.function();
      std::vector<std::vector<std::byte>> staged_in, staged_out;
      std::vector<const void*> in_ptrs;
      std::vector<void*> out_ptrs;
      for (size_t i = 0; i < in.size(); ++i) {
        const int64_t n = fn.parameter_shape(static_cast<int>(i)).byte_size();
        staged_in.emplace_back(arena_->at(in[i]->offset()), arena_->at(in[i]->offset()) + n);
      }
      for (size_t i = 0; i < out.size(); ++i) {
        staged_out.emplace_back(
            static_cast<size_t>(fn.output_shape(static_cast<int>(i)).byte_size()));
      }
      for (auto& v : staged_in) in_ptrs.push_back(v.data());
      for (auto& v : staged_out) out_ptrs.push_back(v.data());
      absl::StatusOr<const backend::cpu::HostExecutable*> host =
          backend::cpu::AsHost(executable);
      absl::Status s = host.ok() ? (*host)->Run(in_ptrs, out_ptrs, context) : host.status();
      if (s.ok()) {
        for (size_t i = 0; i < out.size(); ++i) {
          std::copy(staged_out[i].begin(), staged_out[i].end(), arena_->at(out[i]->offset()));
        }
      }
      std::move(done)(std::move(s));
    });
  }

 private:
  // The allocation as this device's, or null if another device made it.
  const ArenaAllocation* Mine(const DeviceAllocation& a) const {
    const auto* arena = dynamic_cast<const ArenaAllocation*>(&a);
    return arena != nullptr && arena->arena() == arena_.get() ? arena : nullptr;
  }
  absl::Status Foreign(const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " allocation is not one of ", id_.ToString(), "'s"));
  }

  // Wakes the device's thread before releasing the mutex: the operation
  // may complete, and its waiter destroy this device, while an Unlock()
  // that notifies after releasing would still be touching the mutex (a
  // copy to a peer enqueues on the peer from this device's thread).
  void Enqueue(absl::AnyInvocable<void() &&> op) {
    mu_.Lock();
    queue_.push_back(std::move(op));
    mu_.UnlockWakingFirst();
  }

  // The device's thread: runs operations in order, each after the delay.
  void Loop() {
    for (;;) {
      absl::AnyInvocable<void() &&> op;
      {
        MutexLock lock(&mu_);
        mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !queue_.empty();
        });
        if (queue_.empty()) return;  // stopping, and everything accepted ran
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      // Emulated device time: this thread stands for the device's engine.
      if (options_.delay > absl::ZeroDuration()) absl::SleepFor(options_.delay);
      std::move(op)();
    }
  }

  const backend::DeviceDescription description_;
  const DeviceId id_;
  const ArenaOptions options_;
  const std::shared_ptr<Arena> arena_;
  Mutex mu_;
  // Operations accepted and not yet run. Bounded by what the runtime keeps
  // in flight on a device (its launches and the copies of their buffers).
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class ArenaKind final : public backend::DeviceKind {
 public:
  explicit ArenaKind(ArenaOptions options) : options_(options) {}
  absl::string_view name() const override { return kArenaKindName; }
  absl::StatusOr<std::shared_ptr<const backend::Executable>> Compile(
      const ir::Function& function) const override {
    CW_ASSIGN_OR_RETURN(std::shared_ptr<const backend::cpu::HostExecutable> exe,
                        backend::cpu::Compile(function));
    return std::shared_ptr<const backend::Executable>(std::move(exe));
  }
  absl::StatusOr<std::unique_ptr<backend::Device>> CreateDevice(
      const backend::DeviceSpec& spec) const override {
    return CreateArenaDevice(spec, options_);
  }

 private:
  const ArenaOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<backend::Device>> CreateArenaDevice(const backend::DeviceSpec& spec,
                                                                   ArenaOptions options) {
  if (spec.memory_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("an arena device needs memory; ",
                                                   spec.id.ToString(), " was given ",
                                                   spec.memory_bytes, " bytes"));
  }
  return std::unique_ptr<backend::Device>(std::make_unique<ArenaDevice>(spec, options));
}

absl::string_view RegisterArenaKind(ArenaOptions options) {
  static const backend::DeviceKind& kind =
      backend::RegisterDeviceKind(std::make_unique<ArenaKind>(options));
  return kind.name();
}

}  // namespace causeway::testing
