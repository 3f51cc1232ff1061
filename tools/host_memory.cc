#include "tools/host_memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace causeway::tools {
namespace {

// The value of `key` ("MemAvailable:") in a /proc file of "key value kB"
// lines, in bytes; -1 if absent.
int64_t ProcKilobytes(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    int64_t kb = -1;
    if (fields >> kb && kb >= 0) return kb * 1024;
  }
  return -1;
}

// A cgroup v2 file holding one number (or "max"); -1 if absent or "max".
int64_t CgroupBytes(const char* name) {
  std::ifstream in(absl::StrCat("/sys/fs/cgroup/", name));
  std::string text;
  int64_t v = -1;
  if (!(in >> text) || !absl::SimpleAtoi(text, &v)) return -1;
  return v;
}

}  // namespace

int64_t HostMemoryHeadroom() {
  int64_t headroom = std::numeric_limits<int64_t>::max();
  if (const int64_t available = ProcKilobytes("/proc/meminfo", "MemAvailable:"); available >= 0) {
    headroom = std::min(headroom, available);
  }
  const int64_t max = CgroupBytes("memory.max");
  const int64_t current = CgroupBytes("memory.current");
  if (max >= 0 && current >= 0) headroom = std::min(headroom, std::max<int64_t>(0, max - current));
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const int64_t used = std::max<int64_t>(0, ProcKilobytes("/proc/self/status", "VmSize:"));
    headroom = std::min(headroom, std::max<int64_t>(0, static_cast<int64_t>(as.rlim_cur) - used));
  }
  return headroom;
}

absl::Status CheckHostMemory(int64_t bytes, const std::string& what) {
  const int64_t headroom = HostMemoryHeadroom();
  if (bytes <= headroom) return absl::OkStatus();
  constexpr double kGiB = 1 << 30;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s needs about %.1f GiB of host memory; this process may use %.1f GiB more (the "
      "machine's available memory, its cgroup's limit and ulimit -v, whichever is least)",
      what, static_cast<double>(bytes) / kGiB, static_cast<double>(headroom) / kGiB));
}

}  // namespace causeway::tools
