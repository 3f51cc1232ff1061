// Listener: the accepting side of a plaintext gRPC server, ours rather than
// gRPC's. gRPC 1.51's own listener stops accepting for good the first time
// accept4() fails with EMFILE (too many open files): one flood of half-open
// connections takes a server off the network until it restarts. It also has
// no bound on the connections one peer may hold.
//
// This listener owns the listening socket and its accept loop, and hands
// each admitted connection to the server (grpc::AddInsecureChannelFromFd):
// - out of file descriptors, it sheds the pending connection (through a
//   descriptor held in reserve for that) and keeps accepting, so the server
//   serves again as soon as descriptors free;
// - a peer (an IP address) holds at most `max_connections_per_peer`
//   connections at once, and the server at most `max_connections`; beyond,
//   a new connection is closed at once;
// - a connection is handed over only once its first bytes arrive (a gRPC
//   client sends its preface at once); one that sends nothing within
//   `first_bytes_timeout` is closed. gRPC applies no handshake deadline to
//   a connection taken from a descriptor, so without this a silent
//   connection would hold its descriptor until the idle timeout and more.
// A connection counts until its socket closes (checked by the socket's
// inode, so a reused descriptor number is not mistaken for it).
//
// gRPC cannot take a TLS connection from a descriptor: a TLS server keeps
// gRPC's listener and with it the limits above (docs/DISTRIBUTED.md).
#ifndef CAUSEWAY_TRANSPORT_GRPC_LISTENER_H_
#define CAUSEWAY_TRANSPORT_GRPC_LISTENER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "causeway/base/mutex.h"

namespace grpc {
class Server;
}

namespace causeway::grpc_transport {

struct ListenerLimits {
  // As many as the coordinator's streams per peer address: every process
  // on one machine (workers of a local cluster, clients) shares its
  // address, so a peer is a machine rather than a process.
  int max_connections_per_peer = 256;
  int max_connections = 8192;
  // A connection must send its first bytes within this; zero hands every
  // connection over at once.
  absl::Duration first_bytes_timeout = absl::Seconds(10);
};

struct ListenerStats {
  int64_t accepted = 0;         // admitted (handed over once it sends)
  int64_t refused_peer = 0;     // the peer already held its limit
  int64_t refused_total = 0;    // the server already held its limit
  int64_t shed_no_files = 0;    // closed for want of a file descriptor
  int64_t closed_silent = 0;    // admitted, then sent nothing in time
  int64_t open = 0;             // connections open at the last check
};

// Thread-safe.
class Listener {
 public:
  // Binds and listens on `address` ("HOST:PORT"; port 0 picks one; host may
  // be empty, a name, an IPv4 address or a bracketed IPv6 address).
  static absl::StatusOr<std::unique_ptr<Listener>> Open(const std::string& address,
                                                        const ListenerLimits& limits);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }
  // Starts accepting into `server` (built, started, outliving Stop()).
  void Start(grpc::Server* server);
  // Stops accepting and closes the listening socket; connections already
  // handed over stay with the server. Idempotent.
  void Stop();

  ListenerStats stats() const;

 private:
  Listener(int fd, int port, const ListenerLimits& limits);
  void Loop();
  // Takes one accepted connection: counts it and keeps it waiting for its
  // first bytes (or hands it over at once), or closes it.
  void Admit(int fd, const std::string& host, const std::string& uri);
  // Gives an admitted connection to the server.
  void HandOver(int fd, uint64_t dev, uint64_t ino, std::string uri);
  // Hands over the waiting connections that have sent bytes (or closes
  // those that failed), as epoll_fd_ reports them.
  void ServeReady();
  // Closes the waiting connections past their deadline.
  void ExpireWaiting(absl::Time now);
  // Closes every waiting connection (the loop is ending).
  void CloseWaiting();
  // Sheds one pending connection when no descriptor is left for it.
  void ShedOne();
  // REQUIRES: mu_. Forgets the connections whose sockets have closed:
  // those of `host`, or all if `host` is null.
  void PruneLocked(const std::string* host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listen_fd_;
  const int port_;
  const ListenerLimits limits_;
  int wake_[2] = {-1, -1};  // Stop() writes to wake_[1]
  int reserve_fd_ = -1;     // only the accept thread touches it
  // Admitted connections that have not yet sent a byte, by descriptor,
  // watched through epoll_fd_ (poll() takes at most RLIMIT_NOFILE entries,
  // and these are as many as the descriptors); and their deadlines in
  // arrival order, which is deadline order (one timeout for all). An entry
  // there whose descriptor is gone, or reused with a later deadline, is
  // skipped. Accept thread only.
  struct Waiting {
    uint64_t dev;
    uint64_t ino;
    std::string uri;
    absl::Time deadline;
  };
  absl::flat_hash_map<int, Waiting> waiting_;
  std::deque<std::pair<absl::Time, int>> deadlines_;
  int epoll_fd_ = -1;
  grpc::Server* server_ = nullptr;
  std::thread thread_;

  struct Conn {
    int fd;
    uint64_t dev;
    uint64_t ino;
  };
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<Conn>> by_host_ ABSL_GUARDED_BY(mu_);
  int64_t open_ ABSL_GUARDED_BY(mu_) = 0;
  ListenerStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// gRPC names a connection taken from a descriptor "fd:N"; this returns the
// peer ("ipv4:ADDR:PORT" or "ipv6:[ADDR]:PORT") a Listener accepted it
// from, while that socket is open, or `peer` unchanged.
std::string ResolvePeer(absl::string_view peer);

}  // namespace causeway::grpc_transport

#endif  // CAUSEWAY_TRANSPORT_GRPC_LISTENER_H_
