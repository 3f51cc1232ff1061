// Helpers shared by the collective hub's tests.
#ifndef CAUSEWAY_WORKER_COLLECTIVE_HUB_TEST_UTIL_H_
#define CAUSEWAY_WORKER_COLLECTIVE_HUB_TEST_UTIL_H_

#include <functional>
#include <thread>
#include <vector>

#include "causeway/base/ids.h"

namespace causeway::testing {

// Devices 0 .. n-1, the members of an n-member group in rank order.
inline std::vector<DeviceId> Devices(int n) {
  std::vector<DeviceId> out;
  for (int i = 0; i < n; ++i) out.push_back(DeviceId(i));
  return out;
}

// Runs `body(i)` on `n` threads and joins them.
inline void RunOnThreads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads.emplace_back(body, i);
  for (std::thread& t : threads) t.join();
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_WORKER_COLLECTIVE_HUB_TEST_UTIL_H_
