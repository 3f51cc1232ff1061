// A second kind of device for tests: the CPU backend's code behind a
// DeviceKind and Executable of its own ("wrapped-cpu"), which the runtime
// reaches only through the device seam (causeway/backend/executable.h). It
// counts the launches it ran, so a test can tell its code was used.
#ifndef CAUSEWAY_TESTS_INTEGRATION_WRAPPED_KIND_H_
#define CAUSEWAY_TESTS_INTEGRATION_WRAPPED_KIND_H_

#include <atomic>
#include <memory>
#include <utility>

#include "causeway/backend/cpu/device.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/backend/executable.h"

namespace causeway::testing {

inline std::atomic<int64_t>& WrappedKindRuns() {
  static std::atomic<int64_t> runs{0};
  return runs;
}

class WrappedExecutable final : public backend::Executable {
 public:
  explicit WrappedExecutable(std::shared_ptr<const backend::Executable> inner)
      : Executable(inner->function()), inner_(std::move(inner)) {}
  int64_t temporary_bytes() const override { return inner_->temporary_bytes(); }
  absl::Status Run(absl::Span<const void* const> inputs, absl::Span<void* const> outputs,
                   const backend::RunContext& context) const override {
    WrappedKindRuns().fetch_add(1, std::memory_order_relaxed);
    return inner_->Run(inputs, outputs, context);
  }

 private:
  const std::shared_ptr<const backend::Executable> inner_;
};

class WrappedCpuKind final : public backend::DeviceKind {
 public:
  absl::string_view name() const override { return "wrapped-cpu"; }
  absl::StatusOr<std::shared_ptr<const backend::Executable>> Compile(
      const ir::Function& function) const override {
    absl::StatusOr<std::shared_ptr<const backend::Executable>> inner =
        backend::cpu::Compile(function);
    if (!inner.ok()) return inner.status();
    return std::shared_ptr<const backend::Executable>(
        std::make_shared<WrappedExecutable>(*std::move(inner)));
  }
  absl::StatusOr<std::unique_ptr<backend::Device>> CreateDevice(
      const backend::DeviceSpec& spec) const override {
    return backend::cpu::CreateDevice(spec);
  }
};

// Registers the kind (once) and returns its name.
inline absl::string_view RegisterWrappedCpuKind() {
  static const backend::DeviceKind& kind =
      backend::RegisterDeviceKind(std::make_unique<WrappedCpuKind>());
  return kind.name();
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTS_INTEGRATION_WRAPPED_KIND_H_
