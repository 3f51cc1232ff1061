// The coordinator's Prometheus endpoint: GET /metrics over plain HTTP/1.x.
//
// A general HTTP library serves each connection on a pool thread and times
// out each read, not the request: a handful of peers that send a header a
// byte at a time hold every thread, and scrapes wait behind them. This
// server is one thread over non-blocking sockets (poll), so a slow peer
// holds nothing but its own socket, and
//   - each connection has a whole-request deadline: a request not complete
//     within `request_deadline` (2 s) is closed, whatever it sends;
//   - each peer address holds at most `max_per_peer` connections, and all
//     of them at most `max_connections`; more are closed at accept;
//   - a request is at most 8 KiB of header; one answer per connection
//     (Connection: close), written within `write_deadline`.
#ifndef CAUSEWAY_CLUSTER_METRICS_HTTP_H_
#define CAUSEWAY_CLUSTER_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace causeway {

struct MetricsHttpOptions {
  absl::Duration request_deadline = absl::Seconds(2);
  absl::Duration write_deadline = absl::Seconds(5);
  int max_per_peer = 4;
  int max_connections = 64;
};

class MetricsHttpServer {
 public:
  // Listens on `host`:`port` (0: any free port) and serves `render()` (the
  // metrics text; called on the server's thread) at /metrics. UNAVAILABLE
  // if the address is in use; INVALID_ARGUMENT if it is not one of this
  // machine's or does not resolve; either names the address and the cause.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port, std::function<std::string()> render,
      const MetricsHttpOptions& options = {});
  ~MetricsHttpServer();  // stops serving and joins the thread

  int port() const;

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

 private:
  class Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_METRICS_HTTP_H_
