// What every gRPC endpoint of the distributed cluster shares: the protocol
// version and token carried in each stream's metadata, TLS credentials,
// channel settings, status conversion, and BatchWriter — the single writer
// thread of a stream, which sends whatever has queued as one batch.
#ifndef CAUSEWAY_TRANSPORT_GRPC_GRPC_COMMON_H_
#define CAUSEWAY_TRANSPORT_GRPC_GRPC_COMMON_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/grpc/listener.h"
#include "causeway/transport/grpc/tls_files.h"
#include "grpcpp/grpcpp.h"

namespace causeway::grpc_transport {

// Bumped on any incompatible change to cluster.proto or wire.proto.
inline constexpr int kProtocolVersion = 6;

// TLS material, as PEM file paths. Empty cert/key: a plaintext server; empty
// ca: a plaintext channel.
// Fills empty fields from CAUSEWAY_TLS_CERT, CAUSEWAY_TLS_KEY, CAUSEWAY_TLS_CA.
TlsFiles TlsFromEnvironment(TlsFiles files);
// A token as gRPC metadata carries it: printable ASCII (0x20 to 0x7e). One
// trailing newline ("\n", or "\r\n" from a file saved on Windows) is
// trimmed; any other byte outside that range (a stray "\r", a tab, NUL,
// non-ASCII) is INVALID_ARGUMENT naming `source` (the flag, variable or
// file it came from) and the byte's position, never the token itself.
absl::StatusOr<std::string> CheckToken(std::string token, absl::string_view source);

// `token` (from --token) if non-empty, else CAUSEWAY_TOKEN (empty if
// neither), checked by CheckToken.
absl::StatusOr<std::string> TokenFromEnvironment(const std::string& token);

// INVALID_ARGUMENT if only one of cert/key is given or a file is unreadable.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files);

// Turns off abseil's mutex deadlock detection for the process. gRPC's locks
// are absl::Mutex, and Debian's abseil checks every acquisition against a
// lock graph; Causeway itself does not use absl::Mutex. Idempotent; called
// by every gRPC endpoint.
void ConfigureAbseilForGrpc();

// A channel to `address` with unbounded message sizes and keepalive pings,
// so a dead peer is noticed even on an idle connection.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::shared_ptr<grpc::ChannelCredentials>& creds);
// Limits on what a server accepts from connections before and after they
// authenticate (the token is checked on each call, so a connection with no
// call is unauthenticated).
struct ServerLimits {
  // A connection must finish its TLS/HTTP2 handshake within this (on a
  // plaintext server: send its first bytes, the Listener's
  // first_bytes_timeout).
  absl::Duration handshake_timeout = absl::Seconds(10);
  // A connection with no call open for this long is closed.
  absl::Duration idle_timeout = absl::Seconds(30);
  // Calls open at once on one connection.
  int max_streams_per_connection = 16;
  // Calls served at once by the whole server (each holds a thread of the
  // synchronous server); beyond, new calls fail with RESOURCE_EXHAUSTED.
  int max_threads = 2048;
  // Connections open at once, from one peer address and in all (a
  // plaintext server's; see Listener).
  ListenerLimits connections;
};
// Applies the message-size limits and `limits` to a server.
void ConfigureServer(grpc::ServerBuilder& builder, const ServerLimits& limits = {});

// A started server and what accepts its connections.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  // Set for a plaintext server; null for TLS, which gRPC's own listener serves.
  std::unique_ptr<Listener> listener;
  int port = 0;
  // Stops accepting, then shuts the server down with `deadline`.
  void Shutdown(std::chrono::system_clock::time_point deadline);
};
// Builds and starts `builder`'s server (configured, services registered) on
// `address` with `creds`: through a Listener of ours when `plaintext`, else
// through gRPC's listener. UNAVAILABLE naming the address if it cannot.
absl::StatusOr<StartedServer> StartServer(grpc::ServerBuilder& builder, const std::string& address,
                                          const std::shared_ptr<grpc::ServerCredentials>& creds,
                                          bool plaintext, const ServerLimits& limits = {});

// Raises this process's soft limit on open files to its hard limit, so
// that connections run out later (gRPC 1.51's listener stops accepting for
// good once accept() fails with EMFILE). Returns the new soft limit.
int64_t RaiseOpenFileLimit();

// Attaches the token and protocol version to an outgoing call.
void AddCallMetadata(grpc::ClientContext& context, const std::string& token);
// UNAUTHENTICATED for a missing or wrong token; FAILED_PRECONDITION for
// another protocol version. Compares the token in constant time.
grpc::Status CheckCallMetadata(const grpc::ServerContext& context, const std::string& token);

absl::Status FromGrpc(const grpc::Status& status);
grpc::Status ToGrpc(const absl::Status& status);

// "host:port" from a peer string such as "ipv4:127.0.0.1:5000" or
// "ipv6:[::1]:5000"; the host part only.
std::string PeerHost(const std::string& peer);

// A worker's token: `token` if set, else CAUSEWAY_WORKER_TOKEN, else
// CAUSEWAY_TOKEN (one token for both roles; see the coordinator's
// --worker-token), checked by CheckToken.
absl::StatusOr<std::string> WorkerTokenFromEnvironment(const std::string& token);

// "host:port" (host may be empty or a bracketed IPv6 address) into host and
// port; INVALID_ARGUMENT without a port in 1..65535.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view address);

// What a BatchWriter may hold unwritten, and what happens beyond.
struct WriterLimit {
  // Bytes queued and not yet taken by the writer thread. A message larger
  // than this alone is taken once the queue is empty.
  size_t max_bytes = size_t{1} << 30;
  // How long a post that would pass `max_bytes` waits for the writer thread
  // to make room (the peer to read). Zero: it does not wait. Past it the
  // writer gives up on the stream: it is broken (overflowed() is true),
  // everything queued is dropped, and its owner ends the stream.
  absl::Duration wait = absl::ZeroDuration();
};

// What a BatchWriter has handed to its stream, and holds.
struct WriterStats {
  int64_t bytes = 0;     // messages' bytes taken for writing
  int64_t messages = 0;
  int64_t batches = 0;   // writes
  int64_t queued_bytes = 0;
};

// The writing half of one stream. Post() queues a message and returns at
// once (or, over the writer's limit, waits for room as the limit says); one
// thread writes everything queued since its last write as one batch (at
// most kMaxBatchBytes, unless one message is larger). Thread-safe.
template <typename Batch, typename Message>
class BatchWriter {
 public:
  static constexpr size_t kMaxBatchBytes = size_t{4} << 20;

  // `write` runs on the writer thread and returns false once the stream is
  // broken; the writer then drops everything queued and later posts.
  explicit BatchWriter(std::function<bool(const Batch&)> write, WriterLimit limit = {})
      : write_(std::move(write)), limit_(limit), thread_([this] { Loop(); }) {}
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;
  ~BatchWriter() { Close(); }

  // False if the writer is closed, the stream broken or the writer's limit
  // passed (the message is dropped).
  bool Post(Message message) {
    const size_t bytes = message.ByteSizeLong();
    MutexLock lock(&mu_);
    if (!RoomLocked(bytes)) return false;
    queued_bytes_ += bytes;
    queue_.push_back(Entry{std::move(message), bytes});
    return true;
  }

  // Queues every message at once, in order. False (all dropped) as Post.
  bool PostAll(std::vector<Message> messages) {
    size_t bytes = 0;
    std::vector<size_t> sizes;
    sizes.reserve(messages.size());
    for (const Message& m : messages) bytes += sizes.emplace_back(m.ByteSizeLong());
    MutexLock lock(&mu_);
    if (!RoomLocked(bytes)) return false;
    queued_bytes_ += bytes;
    for (size_t i = 0; i < messages.size(); ++i) {
      queue_.push_back(Entry{std::move(messages[i]), sizes[i]});
    }
    return true;
  }

  // Queues `message` ahead of everything queued: for small messages that
  // carry no order with the others (heartbeats), so that they wait for at
  // most the batch being written. Not held to the limit.
  bool PostUrgent(Message message) {
    const size_t bytes = message.ByteSizeLong();
    MutexLock lock(&mu_);
    if (closed_ || broken_) return false;
    queued_bytes_ += bytes;
    queue_.push_front(Entry{std::move(message), bytes});
    return true;
  }

  // Waits up to `timeout` until at most `bytes` are queued; false only if
  // that timed out (a closed or broken writer has nothing to wait for: its
  // posts fail). For a caller that pushes back on its own source before
  // posting, holding no lock.
  bool AwaitBelow(size_t bytes, absl::Duration timeout) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || broken_ || queued_bytes_ <= bytes;
    }, timeout);
  }

  // Writes what is queued, then stops the thread. Idempotent.
  void Close() {
    {
      MutexLock lock(&mu_);
      closed_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  bool broken() const {
    MutexLock lock(&mu_);
    return broken_;
  }
  // True once a post passed the writer's limit (the writer is then broken).
  bool overflowed() const {
    MutexLock lock(&mu_);
    return overflowed_;
  }
  WriterStats stats() const {
    MutexLock lock(&mu_);
    WriterStats s = stats_;
    s.queued_bytes = static_cast<int64_t>(queued_bytes_);
    return s;
  }

 private:
  struct Entry {
    Message message;
    size_t bytes;
  };

  // REQUIRES: mu_. Whether `bytes` more may be queued, waiting for room as
  // the limit says; past it, breaks the writer.
  bool RoomLocked(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_ || broken_) return false;
    auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || broken_ || queued_bytes_ == 0 ||
             queued_bytes_ + bytes <= limit_.max_bytes;
    };
    if (!fits() && limit_.wait > absl::ZeroDuration()) mu_.AwaitWithTimeout(fits, limit_.wait);
    if (closed_ || broken_) return false;
    if (fits()) return true;
    broken_ = true;
    overflowed_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    return false;
  }

  void Loop() {
    while (true) {
      Batch batch;
      {
        MutexLock lock(&mu_);
        mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return closed_ || broken_ || !queue_.empty();
        });
        if (broken_ || queue_.empty()) return;  // closed and drained
        size_t bytes = 0;
        while (!queue_.empty() && (batch.messages_size() == 0 || bytes < kMaxBatchBytes)) {
          bytes += queue_.front().bytes;
          *batch.add_messages() = std::move(queue_.front().message);
          queue_.pop_front();
        }
        queued_bytes_ -= bytes;
        stats_.bytes += static_cast<int64_t>(bytes);
        stats_.messages += batch.messages_size();
        ++stats_.batches;
      }
      if (!write_(batch)) {
        MutexLock lock(&mu_);
        broken_ = true;
        queue_.clear();
        queued_bytes_ = 0;
        return;
      }
    }
  }

  const std::function<bool(const Batch&)> write_;
  const WriterLimit limit_;
  mutable Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  WriterStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace causeway::grpc_transport

#endif  // CAUSEWAY_TRANSPORT_GRPC_GRPC_COMMON_H_
