// How much host memory a command may still use, so that it refuses sizes
// this machine cannot hold before allocating them (and ends with a message,
// not std::bad_alloc or the kernel's OOM killer).
#ifndef CAUSEWAY_TOOLS_HOST_MEMORY_H_
#define CAUSEWAY_TOOLS_HOST_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace causeway::tools {

// Bytes this process may still allocate: the least of the machine's
// available memory (MemAvailable in /proc/meminfo), its cgroup's headroom
// (memory.max - memory.current, cgroup v2) and its address-space limit
// (RLIMIT_AS less its virtual size now). INT64_MAX if none is known.
int64_t HostMemoryHeadroom();

// RESOURCE_EXHAUSTED naming `what` and both sizes if `bytes` exceeds
// HostMemoryHeadroom().
absl::Status CheckHostMemory(int64_t bytes, const std::string& what);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_HOST_MEMORY_H_
