// `causeway demo`: a two-stage program across islands on the embedded
// cluster, checked against a plain host computation.
#ifndef CAUSEWAY_TOOLS_DEMO_H_
#define CAUSEWAY_TOOLS_DEMO_H_

#include <cstdint>
#include <string>

namespace causeway::tools {

struct DemoOptions {
  int islands = 2;
  int hosts_per_island = 2;
  int devices_per_host = 4;
  int64_t memory_bytes = int64_t{1} << 30;
  std::string device_kind = "cpu";  // embedded cluster's devices
  int rows_per_device = 64;
  int features = 128;
  int hidden = 256;
  int outputs = 64;
  int steps = 20;
  int64_t dcn_latency_us = 0;
  double dcn_gbps = 0;
  std::string trace_path;
  bool json = false;
  // "local" (the embedded cluster) or grpc://HOST:PORT (a running
  // distributed cluster; its token from CAUSEWAY_TOKEN).
  std::string cluster = "local";
  // Seconds to wait for a running cluster (connecting, and every call).
  double timeout_s = 30;
  // This client's share of each island (docs/SCHEDULING.md).
  double weight = 1;
  int priority = 0;
};

// Runs the demo and prints its report. Returns the process exit code: 0 if
// the numbers match the host computation, 1 otherwise, 2 on a runtime error.
int RunDemo(const DemoOptions& options);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_DEMO_H_
