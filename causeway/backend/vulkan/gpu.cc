#include "causeway/backend/vulkan/gpu.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "causeway/base/check.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::vulkan {
namespace {

constexpr uint64_t kAlignment = 256;
constexpr uint64_t kBlockBytes = uint64_t{64} << 20;  // a pool block
constexpr absl::string_view kNoDevice =
    "no Vulkan device found (install mesa-vulkan-drivers for lavapipe, a Vulkan device on the "
    "CPU, or a GPU's driver)";

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string VkError(VkResult r) { return absl::StrCat("VkResult ", static_cast<int>(r)); }

// The process's instance and physical devices, found once.
struct Instance {
  VkInstance instance = VK_NULL_HANDLE;
  std::vector<VkPhysicalDevice> physical;
  absl::Status status;
  Mutex mu;
  std::map<int, Gpu*> gpus ABSL_GUARDED_BY(mu);  // never destroyed
};

Instance& TheInstance() {
  static Instance* const inst = [] {
    auto* in = new Instance;
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "causeway";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    info.pApplicationInfo = &app;
    VkResult r = vkCreateInstance(&info, nullptr, &in->instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
      in->status = absl::UnavailableError(std::string(kNoDevice));
      return in;
    }
    if (r != VK_SUCCESS) {
      in->status = absl::UnavailableError(absl::StrCat("the Vulkan loader failed (", VkError(r),
                                                       "): ", kNoDevice));
      return in;
    }
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(in->instance, &n, nullptr);
    in->physical.resize(n);
    if (n > 0) vkEnumeratePhysicalDevices(in->instance, &n, in->physical.data());
    in->physical.resize(n);
    if (n == 0) in->status = absl::UnavailableError(std::string(kNoDevice));
    return in;
  }();
  return *inst;
}

// A physical device's properties and its driver's (name, version), for
// List and Init.
void QueryProperties(VkPhysicalDevice physical, VkPhysicalDeviceProperties2* props,
                     VkPhysicalDeviceDriverProperties* driver) {
  *driver = VkPhysicalDeviceDriverProperties{};
  driver->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
  *props = VkPhysicalDeviceProperties2{};
  props->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props->pNext = driver;
  vkGetPhysicalDeviceProperties2(physical, props);
}

}  // namespace

VulkanAllocation::~VulkanAllocation() {
  if (block_ >= 0) gpu_->Free(block_, offset_, reserved_);
}

absl::StatusOr<std::vector<std::string>> Gpu::List() {
  Instance& in = TheInstance();
  CW_RETURN_IF_ERROR(in.status);
  std::vector<std::string> lines;
  for (VkPhysicalDevice p : in.physical) {
    VkPhysicalDeviceDriverProperties driver;
    VkPhysicalDeviceProperties2 props;
    QueryProperties(p, &props, &driver);
    VkPhysicalDeviceMemoryProperties memory;
    vkGetPhysicalDeviceMemoryProperties(p, &memory);
    uint64_t device_local = 0;
    for (uint32_t h = 0; h < memory.memoryHeapCount; ++h) {
      if (memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
        device_local += memory.memoryHeaps[h].size;
      }
    }
    const uint32_t api = props.properties.apiVersion;
    lines.push_back(absl::StrFormat(
        "%s, driver %s %s, Vulkan %d.%d, %.1f GiB", props.properties.deviceName,
        driver.driverName, driver.driverInfo, VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api),
        static_cast<double>(device_local) / (1u << 30)));
  }
  return lines;
}

absl::StatusOr<Gpu*> Gpu::Get(int index) {
  Instance& in = TheInstance();
  CW_RETURN_IF_ERROR(in.status);
  if (index < 0 || index >= static_cast<int>(in.physical.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no Vulkan GPU ", index, ": this machine has ",
                                                   in.physical.size()));
  }
  MutexLock lock(&in.mu);
  auto it = in.gpus.find(index);
  if (it != in.gpus.end()) return it->second;
  auto gpu = std::unique_ptr<Gpu>(new Gpu(index, in.physical[static_cast<size_t>(index)]));
  CW_RETURN_IF_ERROR(gpu->Init());
  Gpu* g = gpu.release();
  in.gpus[index] = g;
  return g;
}

Gpu::Gpu(int index, VkPhysicalDevice physical) : index_(index), physical_(physical) {}

absl::Status Gpu::Init() {
  const absl::StatusOr<std::string> staging = SettingValue("CAUSEWAY_VULKAN_STAGING", "0");
  if (!staging.ok()) return staging.status();
  force_staging_ = *staging == "1";
  const absl::StatusOr<std::string> kernels = SettingValue("CAUSEWAY_VULKAN_KERNELS", "auto");
  if (!kernels.ok()) return kernels.status();
  VkPhysicalDeviceDriverProperties driver;
  VkPhysicalDeviceProperties2 props;
  QueryProperties(physical_, &props, &driver);
  const std::string name = props.properties.deviceName;
  auto missing = [&](absl::string_view what) {
    return absl::UnavailableError(absl::StrCat("Vulkan GPU ", index_, " (", name, ") lacks ",
                                               what, ", which the vulkan kind needs"));
  };
  if (props.properties.apiVersion < VK_API_VERSION_1_2) return missing("Vulkan 1.2");

  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(physical_, &features);
  if (!f12.bufferDeviceAddress) return missing("buffer device addresses");
  if (!f12.timelineSemaphore) return missing("timeline semaphores");
  if (!f12.storageBuffer8BitAccess || !f12.shaderInt8) return missing("8-bit storage");
  if (!features.features.shaderInt64) return missing("64-bit integers in shaders");

  uint32_t families = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, nullptr);
  std::vector<VkQueueFamilyProperties> family(families);
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, family.data());
  bool found = false;
  for (uint32_t i = 0; i < families && !found; ++i) {
    if (family[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = i;
      found = true;
    }
  }
  if (!found) return missing("a compute queue");
  is_cpu_ = props.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  cpu_kernels_ = is_cpu_ && *kernels != "gpu";
  if (family[queue_family_].timestampValidBits > 0) {
    timestamp_ns_per_tick_ = props.properties.limits.timestampPeriod;
  }

  VkPhysicalDeviceMemoryProperties memory;
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory);
  // Device memory: the first device-local type. The host copies straight
  // into it only where it is the host's own memory (a CPU implementation
  // such as lavapipe, or an integrated GPU) and mapped coherently. A
  // discrete GPU's host-visible device memory is its PCIe window:
  // write-combined stores that other threads' later submissions do not
  // order, and uncached reads; copies to and from it are staged instead
  // (a race seen on an H200: a launch read a put's bytes before they had
  // landed).
  const VkPhysicalDeviceType kind = props.properties.deviceType;
  const bool host_memory =
      kind == VK_PHYSICAL_DEVICE_TYPE_CPU || kind == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  // Staging: host-visible coherent memory, preferably the host's own
  // (not device-local) and cached, which reads back fast.
  int device_type = -1, staging_type = -1, staging_score = -1;
  for (uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = memory.memoryTypes[i].propertyFlags;
    const bool host = (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
                      (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && device_type < 0) {
      device_type = static_cast<int>(i);
      mapped_memory_ = host && host_memory;
    }
    if (host) {
      const int score = ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) ? 0 : 2) +
                        ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 1 : 0);
      if (score > staging_score) {
        staging_type = static_cast<int>(i);
        staging_score = score;
      }
    }
  }
  if (device_type < 0) return missing("device-local memory");
  if (staging_type < 0) return missing("host-visible coherent memory");
  device_type_ = static_cast<uint32_t>(device_type);
  staging_type_ = static_cast<uint32_t>(staging_type);
  const uint32_t heap = memory.memoryTypes[device_type_].heapIndex;

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{};
  queue.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  queue.queueFamilyIndex = queue_family_;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan12Features enable12{};
  enable12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  enable12.bufferDeviceAddress = VK_TRUE;
  enable12.timelineSemaphore = VK_TRUE;
  enable12.storageBuffer8BitAccess = VK_TRUE;
  enable12.shaderInt8 = VK_TRUE;
  VkPhysicalDeviceFeatures2 enable{};
  enable.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  enable.pNext = &enable12;
  enable.features.shaderInt64 = VK_TRUE;
  VkDeviceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  info.pNext = &enable;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue;
  if (VkResult r = vkCreateDevice(physical_, &info, nullptr, &device_); r != VK_SUCCESS) {
    return absl::UnavailableError(
        absl::StrCat("Vulkan GPU ", index_, " (", name, "): vkCreateDevice failed, ", VkError(r)));
  }
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  VkPushConstantRange range{};
  range.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  range.size = sizeof(Push);
  VkPipelineLayoutCreateInfo layout{};
  layout.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  layout.pushConstantRangeCount = 1;
  layout.pPushConstantRanges = &range;
  if (VkResult r = vkCreatePipelineLayout(device_, &layout, nullptr, &layout_); r != VK_SUCCESS) {
    return absl::InternalError(absl::StrCat("vkCreatePipelineLayout: ", VkError(r)));
  }

  description_.kind = "vulkan";
  description_.name = name;
  description_.driver = absl::StrCat(driver.driverName, " ", driver.driverInfo);
  description_.memory_bytes = static_cast<int64_t>(memory.memoryHeaps[heap].size);
  return absl::OkStatus();
}

absl::StatusOr<int> Gpu::NewBlock(uint64_t bytes, bool staging, bool dedicated) {
  Block b;
  b.size = bytes;
  b.staging = staging;
  b.dedicated = dedicated;
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = bytes;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = vkCreateBuffer(device_, &info, nullptr, &b.buffer); r != VK_SUCCESS) {
    return absl::ResourceExhaustedError(absl::StrCat("vkCreateBuffer of ", bytes, " bytes: ",
                                                     VkError(r)));
  }
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  const uint32_t type = staging ? staging_type_ : device_type_;
  VkMemoryAllocateFlagsInfo flags{};
  flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  alloc.pNext = &flags;
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = type;
  if ((req.memoryTypeBits & (1u << type)) == 0) {
    vkDestroyBuffer(device_, b.buffer, nullptr);
    return absl::InternalError("a storage buffer cannot live in the chosen memory type");
  }
  if (VkResult r = vkAllocateMemory(device_, &alloc, nullptr, &b.memory); r != VK_SUCCESS) {
    vkDestroyBuffer(device_, b.buffer, nullptr);
    return absl::ResourceExhaustedError(absl::StrCat("the GPU has no room for ", bytes,
                                                     " more bytes (", VkError(r), ")"));
  }
  vkBindBufferMemory(device_, b.buffer, b.memory, 0);
  VkBufferDeviceAddressInfo addr{};
  addr.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
  addr.buffer = b.buffer;
  b.address = vkGetBufferDeviceAddress(device_, &addr);
  if (staging || mapped_memory_) {
    void* p = nullptr;
    if (vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &p) == VK_SUCCESS) {
      b.host = static_cast<std::byte*>(p);
    }
  }
  b.free[0] = bytes;
  // Reuse a slot of a block given back.
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i].buffer == VK_NULL_HANDLE) {
      blocks_[i] = std::move(b);
      return static_cast<int>(i);
    }
  }
  blocks_.push_back(std::move(b));
  return static_cast<int>(blocks_.size() - 1);
}

std::unique_ptr<VulkanAllocation> Gpu::View(const VulkanAllocation& base, uint64_t offset,
                                            int64_t bytes) {
  CW_CHECK(&base.gpu() == this && bytes >= 0 &&
           offset + static_cast<uint64_t>(bytes) <= static_cast<uint64_t>(base.bytes()))
      << "a view of " << bytes << " bytes at " << offset << " of " << base.bytes();
  return std::unique_ptr<VulkanAllocation>(new VulkanAllocation(
      this, /*block=*/-1, bytes, /*reserved=*/0, base.buffer(), base.offset() + offset,
      base.address() + offset, base.host() == nullptr ? nullptr : base.host() + offset));
}

absl::StatusOr<std::unique_ptr<VulkanAllocation>> Gpu::Allocate(int64_t bytes, bool staging,
                                                                 const std::string& who) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("allocation of ", bytes, " bytes on ", who));
  }
  const uint64_t size = AlignUp(std::max<uint64_t>(static_cast<uint64_t>(bytes), 1), kAlignment);
  MutexLock lock(&mu_);
  int block = -1;
  uint64_t offset = 0;
  for (size_t i = 0; i < blocks_.size() && block < 0; ++i) {
    Block& b = blocks_[i];
    if (b.buffer == VK_NULL_HANDLE || b.staging != staging || b.dedicated) continue;
    for (auto& [off, len] : b.free) {
      if (len >= size) {
        block = static_cast<int>(i);
        offset = off;
        break;
      }
    }
  }
  if (block < 0) {
    const bool dedicated = size > kBlockBytes / 2;
    absl::StatusOr<int> made = NewBlock(dedicated ? size : kBlockBytes, staging, dedicated);
    if (!made.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(who, ": ", made.status().message()));
    }
    block = *made;
    offset = 0;
  }
  Block& b = blocks_[static_cast<size_t>(block)];
  auto it = b.free.find(offset);
  const uint64_t len = it->second;
  b.free.erase(it);
  if (len > size) b.free[offset + size] = len - size;
  b.used += size;
  std::byte* host = b.host == nullptr ? nullptr : b.host + offset;
  return std::unique_ptr<VulkanAllocation>(new VulkanAllocation(
      this, block, bytes, size, b.buffer, offset, b.address + offset, host));
}

void Gpu::Free(int block, uint64_t offset, uint64_t size) {
  MutexLock lock(&mu_);
  Block& b = blocks_[static_cast<size_t>(block)];
  // In the tests of the staged path, freed staging bytes are overwritten,
  // so that reading them after the free (a use after free the pool would
  // otherwise hide until another copy took the bytes) fails every time.
  if (force_staging_ && b.staging && b.host != nullptr) std::memset(b.host + offset, 0xA5, size);
  b.used -= size;
  if (b.dedicated || b.used == 0) {
    // An empty block goes back to the driver unless it is the last pooled
    // block of its memory (kept for the next allocations).
    bool keep = !b.dedicated;
    if (keep) {
      for (size_t i = 0; i < blocks_.size(); ++i) {
        const Block& o = blocks_[i];
        if (static_cast<int>(i) != block && o.buffer != VK_NULL_HANDLE && !o.dedicated &&
            o.staging == b.staging) {
          keep = false;
        }
      }
    }
    if (!keep) {
      if (b.host != nullptr) vkUnmapMemory(device_, b.memory);
      vkDestroyBuffer(device_, b.buffer, nullptr);
      vkFreeMemory(device_, b.memory, nullptr);
      b = Block{};
      return;
    }
    b.free.clear();
    b.free[0] = b.size;
    return;
  }
  auto [it, added] = b.free.emplace(offset, size);
  // Coalesce with the neighbours.
  if (auto next = std::next(it); next != b.free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    b.free.erase(next);
  }
  if (it != b.free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      b.free.erase(it);
    }
  }
}

absl::StatusOr<VkPipeline> Gpu::Pipeline(Kernel kernel) {
  MutexLock lock(&mu_);
  VkPipeline& p = pipelines_[static_cast<size_t>(kernel)];
  if (p != VK_NULL_HANDLE) return p;
  absl::Span<const uint32_t> code = KernelCode(kernel);
  VkShaderModuleCreateInfo module_info{};
  module_info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  module_info.codeSize = code.size() * sizeof(uint32_t);
  module_info.pCode = code.data();
  VkShaderModule module;
  if (VkResult r = vkCreateShaderModule(device_, &module_info, nullptr, &module);
      r != VK_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("shader ", KernelName(kernel), " was refused: ", VkError(r)));
  }
  VkComputePipelineCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.layout = layout_;
  VkResult r = vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &p);
  vkDestroyShaderModule(device_, module, nullptr);
  if (r != VK_SUCCESS) {
    p = VK_NULL_HANDLE;
    return absl::InternalError(
        absl::StrCat("pipeline of shader ", KernelName(kernel), ": ", VkError(r)));
  }
  return p;
}

VkResult Gpu::Submit(const VkSubmitInfo& submit) {
  MutexLock lock(&queue_mu_);
  return vkQueueSubmit(queue_, 1, &submit, VK_NULL_HANDLE);
}

}  // namespace causeway::backend::vulkan
