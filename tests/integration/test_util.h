// Helpers shared by the integration tests: small functions and cluster
// shapes used again and again.
#ifndef CAUSEWAY_TESTS_INTEGRATION_TEST_UTIL_H_
#define CAUSEWAY_TESTS_INTEGRATION_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/ir/builder.h"
#include "causeway/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace causeway::testing {

// Longest any test waits on a future before declaring a hang.
inline constexpr absl::Duration kHangTimeout = absl::Seconds(60);

inline std::unique_ptr<LocalCluster> MakeCluster(LocalClusterOptions options) {
  auto cluster = LocalCluster::Create(options);
  CW_CHECK_OK(cluster.status());
  return std::move(*cluster);
}

inline std::unique_ptr<Client> Connect(ClusterConnection* cluster, ClientOptions options = {}) {
  auto client = Client::Connect(cluster, std::move(options));
  CW_CHECK_OK(client.status());
  return std::move(*client);
}

// f(x: f32[n]) = delay(x + 1, micros).
inline ir::Function DelayAddOne(int64_t n, int64_t micros, const std::string& name = "delay_add") {
  ir::FunctionBuilder b(name);
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {n}));
  ir::Value one = b.Broadcast(b.ConstantF32(1.0f), {n}, {});
  ir::Value y = b.Delay(b.Add(x, one), micros);
  return *b.Build({y});
}

// f(x: f32[n]) = all_reduce_sum(x) over `axes`.
inline ir::Function AllReduceSum(int64_t n, std::vector<std::string> axes,
                                 const std::string& name = "all_reduce") {
  ir::FunctionBuilder b(name);
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {n}));
  ir::Value y = b.AllReduce(x, std::move(axes));
  return *b.Build({y});
}

// Waits for `future` at most kHangTimeout; fails the test on a hang.
template <typename T>
absl::StatusOr<T> AwaitOrHang(const Future<T>& future) {
  const absl::StatusOr<T>* v = future.AwaitWithTimeout(kHangTimeout);
  if (v == nullptr) {
    ADD_FAILURE() << "future not ready after " << absl::FormatDuration(kHangTimeout);
    return absl::DeadlineExceededError("hang");
  }
  return *v;
}

inline std::vector<float> Iota(int64_t n, float start = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTS_INTEGRATION_TEST_UTIL_H_
