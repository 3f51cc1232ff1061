// The cpu kind's Device (causeway/backend/device.h): device memory is host
// memory, copies are memcpy and CopyBox on the calling thread, and a launch
// runs the executable's kernels on the calling thread (the device stream's)
// before it completes. Every operation completes inline.
#ifndef CAUSEWAY_BACKEND_CPU_DEVICE_H_
#define CAUSEWAY_BACKEND_CPU_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "causeway/backend/device.h"

namespace causeway::backend::cpu {

// A device of the cpu kind. Thread-safe (it keeps no state of its own
// besides its description).
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec);

}  // namespace causeway::backend::cpu

#endif  // CAUSEWAY_BACKEND_CPU_DEVICE_H_
