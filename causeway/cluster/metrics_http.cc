#include "causeway/cluster/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"

namespace causeway {
namespace {

constexpr size_t kMaxRequestBytes = 8 << 10;
// Out of descriptors, accept() fails at once and poll() reports the
// listener ready again: it is left out of the poll this long instead.
constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);

struct Connection {
  int fd = -1;
  std::string peer;
  std::string request;
  std::string response;  // set once the request is complete
  size_t written = 0;
  absl::Time deadline;
};

std::string Response(int code, const char* reason, const std::string& type,
                     const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

std::string PeerOf(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(addr).sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr, text,
              sizeof(text));
  }
  return text;
}

}  // namespace

class MetricsHttpServer::Impl {
 public:
  Impl(std::function<std::string()> render, const MetricsHttpOptions& options)
      : render_(std::move(render)), options_(options) {}
  ~Impl() {
    if (thread_.joinable()) {
      const char stop = 1;
      (void)!write(wake_[1], &stop, 1);
      thread_.join();
    }
    for (Connection& c : connections_) close(c.fd);
    if (listener_ >= 0) close(listener_);
    for (int fd : wake_) {
      if (fd >= 0) close(fd);
    }
  }

  absl::Status Listen(const std::string& host, int port);
  void Serve() { thread_ = std::thread([this] { Loop(); }); }
  int port() const { return port_; }

 private:
  void Loop();
  void Accept(absl::Time now);
  // Reads what `c` sent; false once it is to be closed.
  bool Read(Connection& c);
  // Writes what is left of `c`'s response; false once it is to be closed.
  bool Write(Connection& c);
  std::string Answer(const std::string& request);
  void Close(size_t index);

  // Only the server's thread touches what follows after Serve().
  const std::function<std::string()> render_;
  const MetricsHttpOptions options_;
  int listener_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<Connection> connections_;
  absl::flat_hash_map<std::string, int> per_peer_;
  absl::Time accept_paused_until_ = absl::InfinitePast();
  std::thread thread_;
};

absl::Status MetricsHttpServer::Impl::Listen(const std::string& host, int port) {
  const std::string where = absl::StrCat("the metrics endpoint cannot listen on ", host, ":", port,
                                         ": ");
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat(where, "pipe: ", std::strerror(errno)));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  std::string bare = host;
  if (absl::StartsWith(bare, "[") && absl::EndsWith(bare, "]")) bare = bare.substr(1, bare.size() - 2);
  const int rc = getaddrinfo(bare.empty() ? nullptr : bare.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) return absl::InvalidArgumentError(absl::StrCat(where, gai_strerror(rc)));
  int error = 0;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      error = errno;
      close(fd);
      continue;
    }
    listener_ = fd;
    break;
  }
  freeaddrinfo(found);
  if (listener_ < 0) {
    const std::string cause = error == 0 ? "no address to listen on" : std::strerror(error);
    // In use (or a privileged port): another time it may work. Any other
    // cause is the address itself (not one of this machine's).
    if (error == EADDRINUSE || error == EACCES) {
      return absl::UnavailableError(absl::StrCat(where, cause));
    }
    return absl::InvalidArgumentError(absl::StrCat(where, cause));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listener_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6
                    ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                    : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  return absl::OkStatus();
}

void MetricsHttpServer::Impl::Loop() {
  std::vector<pollfd> fds;
  while (true) {
    const absl::Time now = absl::Now();
    const bool accepting = now >= accept_paused_until_;
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({accepting ? listener_ : -1, POLLIN, 0});
    absl::Time wake = accepting ? absl::InfiniteFuture() : accept_paused_until_;
    for (const Connection& c : connections_) {
      fds.push_back({c.fd, static_cast<short>(c.response.empty() ? POLLIN : POLLOUT), 0});
      wake = std::min(wake, c.deadline);
    }
    const int timeout_ms =
        wake == absl::InfiniteFuture()
            ? -1
            : static_cast<int>(std::clamp<int64_t>(
                  absl::ToInt64Milliseconds(wake - now) + 1, 0, 60'000));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      CW_LOG(kError) << "metrics endpoint: poll failed: " << std::strerror(errno);
      return;
    }
    if (fds[0].revents != 0) return;  // stopping
    // Connections in reverse, so that closing one leaves the rest in place.
    for (size_t i = connections_.size(); i-- > 0;) {
      const short revents = fds[i + 2].revents;
      if (revents == 0) continue;
      Connection& c = connections_[i];
      const bool keep = (revents & (POLLERR | POLLNVAL)) == 0 &&
                        (c.response.empty() ? Read(c) : Write(c));
      if (!keep) Close(i);
    }
    if (fds[1].revents != 0) Accept(absl::Now());
    // Then connections past their deadline end, whatever they were doing
    // (after the reads: a request that arrived while a scrape was being
    // rendered is answered, not dropped).
    const absl::Time after = absl::Now();
    for (size_t i = connections_.size(); i-- > 0;) {
      if (after >= connections_[i].deadline) Close(i);
    }
  }
}

void MetricsHttpServer::Impl::Accept(absl::Time now) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listener_, reinterpret_cast<sockaddr*>(&addr), &len,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until_ = now + kAcceptBackoff;
      }
      return;
    }
    std::string peer = PeerOf(addr);
    int& held = per_peer_[peer];
    if (held >= options_.max_per_peer ||
        static_cast<int>(connections_.size()) >= options_.max_connections) {
      if (held == 0) per_peer_.erase(peer);
      close(fd);
      continue;
    }
    ++held;
    connections_.push_back(Connection{fd, std::move(peer), {}, {}, 0,
                                      now + options_.request_deadline});
  }
}

bool MetricsHttpServer::Impl::Read(Connection& c) {
  char buffer[4096];
  const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  c.request.append(buffer, static_cast<size_t>(n));
  const bool complete = absl::StrContains(c.request, "\r\n\r\n") ||
                        absl::StrContains(c.request, "\n\n");
  if (!complete && c.request.size() <= kMaxRequestBytes) return true;
  c.response = complete ? Answer(c.request)
                        : Response(431, "Request Header Fields Too Large", "text/plain",
                                   "request header over 8 KiB\n");
  c.deadline = absl::Now() + options_.write_deadline;
  return Write(c);
}

bool MetricsHttpServer::Impl::Write(Connection& c) {
  while (c.written < c.response.size()) {
    const ssize_t n = send(c.fd, c.response.data() + c.written, c.response.size() - c.written,
                           MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.written += static_cast<size_t>(n);
  }
  return false;  // answered: the connection closes
}

std::string MetricsHttpServer::Impl::Answer(const std::string& request) {
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  const std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Response(400, "Bad Request", "text/plain", "not an HTTP/1.x request line\n");
  }
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    return Response(404, "Not Found", "text/plain", "the metrics are at /metrics\n");
  }
  if (parts[0] != "GET") {
    return Response(405, "Method Not Allowed", "text/plain", "GET /metrics only\n");
  }
  return Response(200, "OK", "text/plain; version=0.0.4", render_());
}

void MetricsHttpServer::Impl::Close(size_t index) {
  Connection& c = connections_[index];
  close(c.fd);
  auto it = per_peer_.find(c.peer);
  if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
  connections_[index] = std::move(connections_.back());
  connections_.pop_back();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render,
    const MetricsHttpOptions& options) {
  auto impl = std::make_unique<Impl>(std::move(render), options);
  CW_RETURN_IF_ERROR(impl->Listen(host, port));
  impl->Serve();
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsHttpServer::~MetricsHttpServer() = default;
int MetricsHttpServer::port() const { return impl_->port(); }

}  // namespace causeway
