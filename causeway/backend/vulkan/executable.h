// Internal to the vulkan kind: its executables are dispatch programs
// (causeway/backend/dispatch/program.h), lowered for the kind's name, whose
// dispatches its devices record as compute shaders.
#ifndef CAUSEWAY_BACKEND_VULKAN_EXECUTABLE_H_
#define CAUSEWAY_BACKEND_VULKAN_EXECUTABLE_H_

#include "causeway/backend/dispatch/program.h"
#include "causeway/backend/vulkan/kernels.h"

namespace causeway::backend::vulkan {

using dispatch::ControlFlow;
using dispatch::Dispatch;
using dispatch::HostStep;
using dispatch::Ref;
using dispatch::Segment;
using dispatch::TableSlot;
using VulkanExecutable = dispatch::Program;

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_EXECUTABLE_H_
