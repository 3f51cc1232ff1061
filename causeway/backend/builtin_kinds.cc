#include "causeway/backend/builtin_kinds.h"

#include "causeway/backend/cpu/executable.h"
#if CAUSEWAY_HAVE_VULKAN
#include "causeway/backend/vulkan/device.h"
#endif

namespace causeway::backend {

void RegisterBuiltinKinds() {
  (void)cpu::Kind();
#if CAUSEWAY_HAVE_VULKAN
  (void)vulkan::Kind();
#endif
}

absl::StatusOr<std::vector<std::string>> ListGpus() {
#if CAUSEWAY_HAVE_VULKAN
  return vulkan::ListGpus();
#else
  return absl::UnavailableError(
      "this build of Causeway has no GPU kind (it was built without Vulkan: install "
      "libvulkan-dev and glslc, then build again)");
#endif
}

absl::Status SelectGpu(int index) {
#if CAUSEWAY_HAVE_VULKAN
  return vulkan::SelectGpu(index);
#else
  (void)index;
  return ListGpus().status();
#endif
}

}  // namespace causeway::backend
