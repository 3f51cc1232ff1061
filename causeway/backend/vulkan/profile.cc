#include "causeway/backend/vulkan/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "causeway/backend/vulkan/gpu.h"
#include "causeway/base/mutex.h"
#include "causeway/base/settings.h"

namespace causeway::backend::vulkan {

bool DispatchTimer::Enabled() {
  // An unknown value is refused where the process starts (CheckSettings);
  // here it leaves profiling off.
  static const bool on = [] {
    absl::StatusOr<std::string> v = SettingValue("CAUSEWAY_VULKAN_PROFILE", "0");
    return v.ok() && *v == "1";
  }();
  return on;
}

namespace {

struct Totals {
  Mutex mu;
  std::map<uint32_t, std::pair<int64_t, double>> by_key ABSL_GUARDED_BY(mu);  // count, ns
};

Totals& TheTotals() {
  static Totals* const totals = [] {
    auto* t = new Totals;
    std::atexit([] {
      Totals& all = TheTotals();
      MutexLock lock(&all.mu);
      struct Row {
        double ns;
        uint32_t key;
        int64_t count;
      };
      std::vector<Row> rows;
      double total = 0;
      for (const auto& [key, v] : all.by_key) {
        rows.push_back({v.second, key, v.first});
        total += v.second;
      }
      std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.ns > y.ns; });
      std::fprintf(stderr, "vulkan profile: GPU time by kernel (total %.1f ms)\n", total / 1e6);
      std::fprintf(stderr, "  %-16s %4s %10s %12s %7s\n", "kernel", "op", "dispatches", "ms",
                   "share");
      for (const Row& r : rows) {
        std::fprintf(stderr, "  %-16s %4u %10lld %12.2f %6.1f%%\n",
                     KernelName(static_cast<Kernel>(r.key >> 8)), r.key & 0xff,
                     static_cast<long long>(r.count), r.ns / 1e6,
                     total > 0 ? 100 * r.ns / total : 0.0);
      }
    });
    return t;
  }();
  return *totals;
}

}  // namespace

DispatchTimer* DispatchTimer::Create(const Gpu& gpu, size_t dispatches) {
  if (!Enabled() || dispatches == 0 || gpu.timestamp_ns_per_tick() <= 0) return nullptr;
  VkQueryPoolCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = static_cast<uint32_t>(2 * dispatches);
  VkQueryPool pool = VK_NULL_HANDLE;
  if (vkCreateQueryPool(gpu.device(), &info, nullptr, &pool) != VK_SUCCESS) return nullptr;
  (void)TheTotals();  // registers the report before any other exit handler runs after it
  return new DispatchTimer(gpu, pool, dispatches);
}

DispatchTimer::DispatchTimer(const Gpu& gpu, VkQueryPool pool, size_t dispatches)
    : gpu_(gpu), pool_(pool), keys_(dispatches, 0) {}

DispatchTimer::~DispatchTimer() { vkDestroyQueryPool(gpu_.device(), pool_, nullptr); }

void DispatchTimer::Reset(VkCommandBuffer cb) {
  vkCmdResetQueryPool(cb, pool_, 0, static_cast<uint32_t>(2 * keys_.size()));
}

void DispatchTimer::Before(VkCommandBuffer cb, size_t i) {
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, pool_, static_cast<uint32_t>(2 * i));
}

void DispatchTimer::After(VkCommandBuffer cb, size_t i, Kernel kernel, uint32_t op) {
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_,
                      static_cast<uint32_t>(2 * i + 1));
  keys_[i] = static_cast<uint32_t>(kernel) << 8 | (op & 0xff);
}

void DispatchTimer::Collect() {
  std::vector<uint64_t> ticks(2 * keys_.size());
  if (vkGetQueryPoolResults(gpu_.device(), pool_, 0, static_cast<uint32_t>(ticks.size()),
                            ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                            VK_QUERY_RESULT_64_BIT) != VK_SUCCESS) {
    return;
  }
  Totals& all = TheTotals();
  MutexLock lock(&all.mu);
  for (size_t i = 0; i < keys_.size(); ++i) {
    auto& [count, ns] = all.by_key[keys_[i]];
    ++count;
    ns += static_cast<double>(ticks[2 * i + 1] - ticks[2 * i]) * gpu_.timestamp_ns_per_tick();
  }
}

}  // namespace causeway::backend::vulkan
