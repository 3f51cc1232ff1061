#include "causeway/transport/grpc/grpc_common.h"

#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace causeway::grpc_transport {
namespace {

constexpr char kTokenKey[] = "x-causeway-token";
constexpr char kVersionKey[] = "x-causeway-protocol";

// A text setting (causeway/base/settings.h), empty when unset.
std::string Env(const char* name) { return SettingValue(name).value_or(""); }

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TlsFiles TlsFromEnvironment(TlsFiles files) {
  if (files.cert.empty()) files.cert = Env("CAUSEWAY_TLS_CERT");
  if (files.key.empty()) files.key = Env("CAUSEWAY_TLS_KEY");
  if (files.ca.empty()) files.ca = Env("CAUSEWAY_TLS_CA");
  return files;
}

absl::StatusOr<std::string> CheckToken(std::string token, absl::string_view source) {
  if (!token.empty() && token.back() == '\n') {
    token.pop_back();
    if (!token.empty() && token.back() == '\r') token.pop_back();
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the token in %s has byte 0x%02x at position %d: a token is printable ASCII "
          "(one trailing newline is allowed)",
          source, c, i));
    }
  }
  return token;
}

absl::StatusOr<std::string> TokenFromEnvironment(const std::string& token) {
  if (!token.empty()) return CheckToken(token, "--token");
  return CheckToken(Env("CAUSEWAY_TOKEN"), "CAUSEWAY_TOKEN");
}

absl::StatusOr<std::string> WorkerTokenFromEnvironment(const std::string& token) {
  if (!token.empty()) return CheckToken(token, "--token");
  const std::string worker = Env("CAUSEWAY_WORKER_TOKEN");
  if (!worker.empty()) return CheckToken(worker, "CAUSEWAY_WORKER_TOKEN");
  return CheckToken(Env("CAUSEWAY_TOKEN"), "CAUSEWAY_TOKEN");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files) {
  if (files.cert.empty() && files.key.empty()) return grpc::InsecureServerCredentials();
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  auto cert = ReadFile(files.cert, "TLS certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadFile(files.key, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files) {
  if (files.ca.empty()) return grpc::InsecureChannelCredentials();
  auto ca = ReadFile(files.ca, "TLS CA certificate");
  if (!ca.ok()) return ca.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = *ca;
  return grpc::SslCredentials(options);
}

void ConfigureAbseilForGrpc() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& creds) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Distinct channels to one address must not share a connection: a data
  // stream must not queue behind a control stream.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, creds, args);
}

void ConfigureServer(grpc::ServerBuilder& builder, const ServerLimits& limits) {
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(limits.handshake_timeout)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(limits.idle_timeout)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_streams_per_connection);
  grpc::ResourceQuota quota("causeway-server");
  quota.SetMaxThreads(limits.max_threads);
  builder.SetResourceQuota(quota);
}

void StartedServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  if (listener != nullptr) listener->Stop();
  if (server != nullptr) server->Shutdown(deadline);
}

absl::StatusOr<StartedServer> StartServer(grpc::ServerBuilder& builder, const std::string& address,
                                          const std::shared_ptr<grpc::ServerCredentials>& creds,
                                          bool plaintext, const ServerLimits& limits) {
  StartedServer started;
  if (plaintext) {
    ListenerLimits connections = limits.connections;
    connections.first_bytes_timeout = limits.handshake_timeout;
    CW_ASSIGN_OR_RETURN(started.listener, Listener::Open(address, connections));
    started.port = started.listener->port();
  } else {
    builder.AddListeningPort(address, creds, &started.port);
  }
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  if (started.listener != nullptr) started.listener->Start(started.server.get());
  return started;
}

int64_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

void AddCallMetadata(grpc::ClientContext& context, const std::string& token) {
  // A token gRPC cannot carry would abort the process in its metadata
  // check: such a call goes without one, and the server refuses it.
  if (CheckToken(token, "").ok()) context.AddMetadata(kTokenKey, token);
  context.AddMetadata(kVersionKey, absl::StrCat(kProtocolVersion));
}

grpc::Status CheckCallMetadata(const grpc::ServerContext& context, const std::string& token) {
  const auto& md = context.client_metadata();
  auto version = md.find(kVersionKey);
  int v = 0;
  if (version == md.end() ||
      !absl::SimpleAtoi(absl::string_view(version->second.data(), version->second.size()), &v) ||
      v != kProtocolVersion) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("protocol version mismatch: this server speaks version ",
                                     kProtocolVersion));
  }
  auto given = md.find(kTokenKey);
  const std::string presented =
      given == md.end() ? std::string() : std::string(given->second.data(), given->second.size());
  // Constant time in the token's contents.
  unsigned char diff = presented.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ token[i % std::max<size_t>(1, token.size())]);
  }
  if (diff != 0 || token.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "connection refused: missing or wrong cluster token");
  }
  return grpc::Status::OK;
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

std::string PeerHost(const std::string& grpc_peer) {
  const std::string peer = ResolvePeer(grpc_peer);
  absl::string_view p = peer;
  if (p.substr(0, 5) == "ipv4:") {
    p.remove_prefix(5);
    return std::string(p.substr(0, p.rfind(':')));
  }
  if (p.substr(0, 5) == "ipv6:") {
    p.remove_prefix(5);
    return std::string(p.substr(0, p.rfind(':')));  // keeps the brackets
  }
  return "127.0.0.1";
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  const absl::string_view port_text =
      colon == absl::string_view::npos ? absl::string_view() : address.substr(colon + 1);
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 || !absl::SimpleAtoi(port_text, &port) ||
      port < 1 || port > 65535 || address.substr(0, colon).find_first_of(" \t/") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address.substr(0, 100), "' is not HOST:PORT with a port in 1..65535"));
  }
  // An IPv6 host is bracketed, whole: "[::1" or "::1:80" would otherwise
  // pass as a host that no resolver answers for.
  const absl::string_view host = address.substr(0, colon);
  const bool bracketed = !host.empty() && host.front() == '[';
  const bool well_formed =
      bracketed ? host.size() > 2 && host.back() == ']' &&
                      host.substr(1, host.size() - 2).find_first_not_of(
                          "0123456789abcdefABCDEF:.%") == absl::string_view::npos
                : host.find_first_of(":[]") == absl::string_view::npos;
  if (!well_formed) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address.substr(0, 100),
                     "' is not HOST:PORT (an IPv6 address goes in brackets: [::1]:PORT)"));
  }
  return std::make_pair(std::string(host), port);
}

}  // namespace causeway::grpc_transport
