// A second kind of device for tests ("wrapped-arena"): the CPU backend's
// code behind a DeviceKind and Executable of its own, counting the launches
// it ran (so a test can tell its code was used), on devices of the arena
// test kind (causeway/testing/arena_kind.h): memory the host cannot
// address, reached only through the device's copies and launches, which
// complete on the device's own thread. The runtime reaches it only through
// the device seam (causeway/backend/executable.h, device.h).
#ifndef CAUSEWAY_TESTS_INTEGRATION_WRAPPED_KIND_H_
#define CAUSEWAY_TESTS_INTEGRATION_WRAPPED_KIND_H_

#include <atomic>
#include <memory>
#include <utility>

#include "causeway/backend/cpu/executable.h"
#include "causeway/backend/executable.h"
#include "causeway/testing/arena_kind.h"

namespace causeway::testing {

inline std::atomic<int64_t>& WrappedKindRuns() {
  static std::atomic<int64_t> runs{0};
  return runs;
}

class WrappedExecutable final : public backend::cpu::HostExecutable {
 public:
  explicit WrappedExecutable(std::shared_ptr<const backend::cpu::HostExecutable> inner)
      : HostExecutable(inner->function()), inner_(std::move(inner)) {}
  int64_t temporary_bytes() const override { return inner_->temporary_bytes(); }
  absl::Status Run(absl::Span<const void* const> inputs, absl::Span<void* const> outputs,
                   const backend::RunContext& context) const override {
    WrappedKindRuns().fetch_add(1, std::memory_order_relaxed);
    return inner_->Run(inputs, outputs, context);
  }

 private:
  const std::shared_ptr<const backend::cpu::HostExecutable> inner_;
};

class WrappedArenaKind final : public backend::DeviceKind {
 public:
  absl::string_view name() const override { return "wrapped-arena"; }
  absl::StatusOr<std::shared_ptr<const backend::Executable>> Compile(
      const ir::Function& function) const override {
    absl::StatusOr<std::shared_ptr<const backend::cpu::HostExecutable>> inner =
        backend::cpu::Compile(function);
    if (!inner.ok()) return inner.status();
    return std::shared_ptr<const backend::Executable>(
        std::make_shared<WrappedExecutable>(*std::move(inner)));
  }
  absl::StatusOr<std::unique_ptr<backend::Device>> CreateDevice(
      const backend::DeviceSpec& spec) const override {
    return CreateArenaDevice(spec);
  }
};

// Registers the kind (once) and returns its name.
inline absl::string_view RegisterWrappedArenaKind() {
  static const backend::DeviceKind& kind =
      backend::RegisterDeviceKind(std::make_unique<WrappedArenaKind>());
  return kind.name();
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTS_INTEGRATION_WRAPPED_KIND_H_
