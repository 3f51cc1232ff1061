// The vulkan device kind: Causeway devices on GPUs through Vulkan compute,
// on any conformant driver (Mesa's lavapipe runs it on the CPU, so the kind
// is built and tested on every machine). docs/VULKAN.md describes it.
//
// Each Causeway device is one submission order on a GPU: its own timeline
// semaphore, command pool and completion thread, sharing the GPU's queue,
// memory pool and pipelines with the other devices there. Launches and
// copies are asynchronous: their completions run on the device's
// completion thread once the GPU has finished the work. When device memory
// is mapped into the host (lavapipe, integrated GPUs) copies run on the
// host; otherwise they are staged through host-visible memory and GPU
// transfers (CAUSEWAY_VULKAN_STAGING=1 forces the staged path, for tests).
#ifndef CAUSEWAY_BACKEND_VULKAN_DEVICE_H_
#define CAUSEWAY_BACKEND_VULKAN_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/backend/device.h"
#include "causeway/backend/executable.h"

namespace causeway::backend::vulkan {

inline constexpr absl::string_view kKindName = "vulkan";

// The kind, registered (RegisterDeviceKind) on first use. Registering needs
// no GPU: compiling is done without one, and only CreateDevice fails
// (UNAVAILABLE, saying what is missing) where no Vulkan device exists.
const DeviceKind& Kind();

// The GPU a device of local index `local_index` uses: the one
// SelectGpu chose, else the one CAUSEWAY_VULKAN_GPU names, else
// local_index modulo the number of GPUs.
// `gpu` < 0 restores the default. Call before devices are made.
// INVALID_ARGUMENT naming the GPUs there are when `gpu` is not one of
// them; UNAVAILABLE (as ListGpus) when there are none.
absl::Status SelectGpu(int gpu);

// Collectives done by a GPU among devices of it so far in this process
// (each counted once, by the member that recorded it). Groups spanning
// GPUs or processes, and every group under CAUSEWAY_VULKAN_COLLECTIVES=host,
// go through the host-staged hub and are not counted.
int64_t CollectivesOnGpu();
// Command buffers recorded for launches so far in this process. A launch's
// commands are recorded once per device, executable and segment between
// host steps, and submitted again by later launches (only the addresses in
// its argument table are written each time), while at most 64 idle ones
// per device are kept; launches timed by CAUSEWAY_VULKAN_PROFILE are
// recorded afresh and not counted.
int64_t SegmentRecordings();

// This machine's Vulkan devices, one line each (name, driver, Vulkan
// version, memory), or UNAVAILABLE saying why there are none.
absl::StatusOr<std::vector<std::string>> ListGpus();

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_DEVICE_H_
