#include "causeway/transport/grpc/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"

namespace causeway::grpc_transport {
namespace {

// Which peer each descriptor handed to gRPC came from, for ResolvePeer.
struct PeerEntry {
  uint64_t dev = 0;
  uint64_t ino = 0;
  std::string uri;
};
struct PeerRegistry {
  Mutex mu;
  absl::flat_hash_map<int, PeerEntry> by_fd ABSL_GUARDED_BY(mu);
};
PeerRegistry& Registry() {
  static auto* registry = new PeerRegistry();
  return *registry;
}

// The socket behind `fd`, or false if `fd` is not open.
bool SocketIdentity(int fd, uint64_t* dev, uint64_t* ino) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return true;
}

bool StillOpen(int fd, uint64_t dev, uint64_t ino) {
  uint64_t d = 0;
  uint64_t i = 0;
  return SocketIdentity(fd, &d, &i) && d == dev && i == ino;
}

// The peer's address, as a host ("1.2.3.4", "[::1]") and as gRPC writes a
// peer ("ipv4:1.2.3.4:5678").
std::pair<std::string, std::string> PeerNames(const sockaddr_storage& sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return {text, absl::StrCat("ipv4:", text, ":", ntohs(in->sin_port))};
  }
  if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      in_addr v4;
      std::memcpy(&v4, &in6->sin6_addr.s6_addr[12], sizeof(v4));
      inet_ntop(AF_INET, &v4, text, sizeof(text));
      return {text, absl::StrCat("ipv4:", text, ":", ntohs(in6->sin6_port))};
    }
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    const std::string host = absl::StrCat("[", text, "]");
    return {host, absl::StrCat("ipv6:", host, ":", ntohs(in6->sin6_port))};
  }
  return {"unknown", "unknown"};
}

// Logs the first of a kind of refusal and then every 1000th.
bool ShouldLog(int64_t count) { return count == 1 || count % 1000 == 0; }

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::Open(const std::string& address,
                                                         const ListenerLimits& limits) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", address, ": not HOST:PORT (port 0..65535)"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = absl::StrCat(port);
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints,
                                 &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", address, ": ", gai_strerror(rc)));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    const int zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // "[::]" serves IPv4 too, as gRPC's listener does.
    if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) break;
    error = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  auto listener = std::unique_ptr<Listener>(new Listener(fd, bound_port, limits));
  if (pipe2(listener->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("cannot listen on ", address, ": pipe: ",
                                            std::strerror(errno)));
  }
  listener->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (listener->epoll_fd_ < 0) {
    return absl::InternalError(absl::StrCat("cannot listen on ", address, ": epoll: ",
                                            std::strerror(errno)));
  }
  listener->reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return listener;
}

Listener::Listener(int fd, int port, const ListenerLimits& limits)
    : listen_fd_(fd), port_(port), limits_(limits) {}

Listener::~Listener() {
  Stop();
  close(listen_fd_);
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
  if (reserve_fd_ >= 0) close(reserve_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void Listener::Start(grpc::Server* server) {
  CW_CHECK(server != nullptr && server_ == nullptr);
  server_ = server;
  thread_ = std::thread([this] { Loop(); });
}

void Listener::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  const char byte = 0;
  [[maybe_unused]] ssize_t n = write(wake_[1], &byte, 1);
  if (thread_.joinable()) thread_.join();
}

ListenerStats Listener::stats() const {
  MutexLock lock(&mu_);
  ListenerStats s = stats_;
  // Closed connections are forgotten lazily (when a limit is near); count
  // only those whose sockets are still open.
  s.open = 0;
  for (const auto& [host, conns] : by_host_) {
    for (const Conn& c : conns) s.open += StillOpen(c.fd, c.dev, c.ino) ? 1 : 0;
  }
  return s;
}

void Listener::Loop() {
  // After an accept error that shedding cannot clear, wait a little before
  // trying again rather than spin; never give up.
  int backoff_ms = -1;
  // Out of descriptors, each shed connection makes room for none: while it
  // lasts, the loop waits 1, 2, 4 ... 100 ms between sheds rather than
  // spin a core on a peer that reconnects at once. An accept resets it.
  int shed_backoff_ms = 0;
  for (;;) {
    // Backing off, only the wake pipe and the waiting connections: the
    // pending connection would end the wait at once.
    pollfd fds[3] = {{backoff_ms > 0 ? -1 : listen_fd_, POLLIN, 0},
                     {wake_[0], POLLIN, 0},
                     {epoll_fd_, POLLIN, 0}};
    int timeout_ms = backoff_ms;
    if (!deadlines_.empty()) {
      const int until_next = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(deadlines_.front().first - absl::Now()) + 1, 0,
          int64_t{1} << 30));
      timeout_ms = timeout_ms < 0 ? until_next : std::min(timeout_ms, until_next);
    }
    const int ready = poll(fds, 3, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      CW_LOG(kError) << "listener on port " << port_ << ": poll: " << std::strerror(errno);
      CloseWaiting();
      return;
    }
    if (fds[1].revents != 0) {
      CloseWaiting();
      return;
    }
    if (fds[2].revents != 0) ServeReady();
    ExpireWaiting(absl::Now());
    if (ready > 0 && fds[0].revents == 0 && backoff_ms > 0) continue;  // still backing off
    backoff_ms = -1;
    for (;;) {
      sockaddr_storage sa{};
      socklen_t len = sizeof(sa);
      const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        shed_backoff_ms = 0;
        auto [host, uri] = PeerNames(sa);
        Admit(fd, host, uri);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EMFILE || errno == ENFILE) {
        ShedOne();
        shed_backoff_ms = std::clamp(2 * shed_backoff_ms, 1, 100);
        backoff_ms = reserve_fd_ < 0 ? 100 : shed_backoff_ms;
        break;
      }
      CW_LOG(kWarning) << "listener on port " << port_ << ": accept: " << std::strerror(errno);
      backoff_ms = 100;
      break;
    }
  }
}

void Listener::ShedOne() {
  int64_t shed = 0;
  {
    MutexLock lock(&mu_);
    shed = ++stats_.shed_no_files;
  }
  if (ShouldLog(shed)) {
    CW_LOG(kWarning) << "listener on port " << port_
                     << ": out of file descriptors; closing new connections until some free ("
                     << shed << " so far)";
  }
  if (reserve_fd_ >= 0) {
    close(reserve_fd_);
    reserve_fd_ = -1;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
  }
  reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void Listener::PruneLocked(const std::string* host) {
  auto prune = [this](std::vector<Conn>& conns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t before = conns.size();
    std::erase_if(conns, [](const Conn& c) { return !StillOpen(c.fd, c.dev, c.ino); });
    open_ -= static_cast<int64_t>(before - conns.size());
  };
  if (host != nullptr) {
    auto it = by_host_.find(*host);
    if (it == by_host_.end()) return;
    prune(it->second);
    if (it->second.empty()) by_host_.erase(it);
    return;
  }
  for (auto it = by_host_.begin(); it != by_host_.end();) {
    prune(it->second);
    if (it->second.empty()) {
      by_host_.erase(it++);
    } else {
      ++it;
    }
  }
}

void Listener::Admit(int fd, const std::string& host, const std::string& uri) {
  Conn conn{fd, 0, 0};
  if (!SocketIdentity(fd, &conn.dev, &conn.ino)) {
    close(fd);
    return;
  }
  {
    MutexLock lock(&mu_);
    auto it = by_host_.find(host);
    if (it != by_host_.end() &&
        it->second.size() >= static_cast<size_t>(limits_.max_connections_per_peer)) {
      PruneLocked(&host);
      it = by_host_.find(host);
    }
    if (open_ >= limits_.max_connections) PruneLocked(nullptr);
    const char* refused = nullptr;
    int64_t count = 0;
    if (it != by_host_.end() &&
        it->second.size() >= static_cast<size_t>(limits_.max_connections_per_peer)) {
      refused = "its peer holds the most connections one peer may";
      count = ++stats_.refused_peer;
    } else if (open_ >= limits_.max_connections) {
      refused = "the server holds the most connections it may";
      count = ++stats_.refused_total;
    }
    if (refused != nullptr) {
      close(fd);
      if (ShouldLog(count)) {
        CW_LOG(kWarning) << "listener on port " << port_ << ": closed a connection from " << host
                         << ": " << refused << " (" << count << " so far)";
      }
      return;
    }
    by_host_[host].push_back(conn);
    ++open_;
    ++stats_.accepted;
  }
  if (limits_.first_bytes_timeout <= absl::ZeroDuration()) {
    HandOver(fd, conn.dev, conn.ino, uri);
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    HandOver(fd, conn.dev, conn.ino, uri);  // cannot watch it: gRPC's idle timeout applies
    return;
  }
  const absl::Time deadline = absl::Now() + limits_.first_bytes_timeout;
  waiting_[fd] = Waiting{conn.dev, conn.ino, uri, deadline};
  deadlines_.emplace_back(deadline, fd);
}

void Listener::HandOver(int fd, uint64_t dev, uint64_t ino, std::string uri) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  {
    PeerRegistry& r = Registry();
    MutexLock lock(&r.mu);
    r.by_fd[fd] = PeerEntry{dev, ino, std::move(uri)};
  }
  grpc::AddInsecureChannelFromFd(server_, fd);
}

void Listener::ServeReady() {
  constexpr int kBatch = 64;
  epoll_event events[kBatch];
  int n;
  do {
    n = epoll_wait(epoll_fd_, events, kBatch, 0);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      auto it = waiting_.find(fd);
      if (it == waiting_.end()) continue;
      Waiting w = std::move(it->second);
      waiting_.erase(it);
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      if ((events[i].events & EPOLLIN) != 0) {
        // Bytes (or the peer's close, which gRPC then reads as such).
        HandOver(fd, w.dev, w.ino, std::move(w.uri));
      } else {
        close(fd);  // hung up or failed before a byte
      }
    }
  } while (n == kBatch);
}

void Listener::ExpireWaiting(absl::Time now) {
  int64_t silent = 0;
  while (!deadlines_.empty() && deadlines_.front().first <= now) {
    const auto [deadline, fd] = deadlines_.front();
    deadlines_.pop_front();
    auto it = waiting_.find(fd);
    if (it == waiting_.end() || it->second.deadline != deadline) continue;  // served already
    waiting_.erase(it);
    close(fd);  // leaves epoll_fd_ with it
    ++silent;
  }
  if (silent == 0) return;
  int64_t count = 0;
  {
    MutexLock lock(&mu_);
    stats_.closed_silent += silent;
    count = stats_.closed_silent;
  }
  if (count == silent || count / 1000 != (count - silent) / 1000) {
    CW_LOG(kWarning) << "listener on port " << port_ << ": closed " << silent
                     << " connection(s) that sent nothing within "
                     << absl::FormatDuration(limits_.first_bytes_timeout) << " (" << count
                     << " so far)";
  }
}

void Listener::CloseWaiting() {
  for (const auto& [fd, w] : waiting_) close(fd);
  waiting_.clear();
  deadlines_.clear();
}

std::string ResolvePeer(absl::string_view peer) {
  int fd = -1;
  if (peer.substr(0, 3) != "fd:" || !absl::SimpleAtoi(peer.substr(3), &fd)) {
    return std::string(peer);
  }
  PeerRegistry& r = Registry();
  MutexLock lock(&r.mu);
  auto it = r.by_fd.find(fd);
  if (it == r.by_fd.end()) return std::string(peer);
  if (!StillOpen(fd, it->second.dev, it->second.ino)) {
    r.by_fd.erase(it);
    return std::string(peer);
  }
  return it->second.uri;
}

}  // namespace causeway::grpc_transport
