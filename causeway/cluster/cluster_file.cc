#include "causeway/cluster/cluster_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace causeway {
namespace {

// The address without its scheme, and with a name of this machine's
// loopback (localhost, ::1) as 127.0.0.1, where `cluster up` serves: one
// cluster, one record, whichever name the user gives it.
std::string Bare(const std::string& address) {
  const absl::string_view bare = absl::StripPrefix(address, "grpc://");
  const size_t colon = bare.rfind(':');
  if (colon == absl::string_view::npos) return std::string(bare);
  const absl::string_view host = bare.substr(0, colon);
  if (host == "localhost" || host == "[::1]" || host == "ip6-localhost" ||
      host == "[::ffff:127.0.0.1]") {
    return absl::StrCat("127.0.0.1", bare.substr(colon));
  }
  return std::string(bare);
}

// OK if `path` is this user's and closed to group and others.
absl::Status CheckPrivate(const std::string& path, const char* what) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("no ", what, " ", path));
  }
  if (st.st_uid != ::getuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the ", what, " ", path, " belongs to another user; its token is not used"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the ", what, " ", path, " is open to other users (mode 0",
        absl::StrFormat("%o", st.st_mode & 0777),
        "); its token is not used: make it 0600 (directory 0700) or remove it"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ClusterFileDirectory() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/causeway");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/causeway");
  }
  return "";
}

std::string ClusterFilePath(const std::string& address) {
  const std::string dir = ClusterFileDirectory();
  if (dir.empty()) return "";
  return absl::StrCat(dir, "/", absl::StrReplaceAll(Bare(address), {{":", "_"}, {"/", "_"}}),
                      ".json");
}

absl::StatusOr<std::string> WriteClusterFile(const std::string& address,
                                             const std::string& token) {
  const std::string dir = ClusterFileDirectory();
  if (dir.empty()) {
    return absl::FailedPreconditionError("neither XDG_RUNTIME_DIR nor HOME is set");
  }
  // The parent of ~/.cache/causeway may not exist yet.
  if (const size_t slash = dir.rfind('/'); slash != std::string::npos && slash > 0) {
    ::mkdir(dir.substr(0, slash).c_str(), 0700);
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  if (absl::Status s = CheckPrivate(dir, "directory"); !s.ok()) return s;
  const std::string path = ClusterFilePath(address);
  const std::string tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  const std::string body =
      nlohmann::json{{"address", Bare(address)}, {"token", token}, {"pid", ::getpid()}}.dump() +
      "\n";
  const bool ok = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return path;
}

absl::StatusOr<std::string> ReadClusterToken(const std::string& address) {
  const std::string path = ClusterFilePath(address);
  if (path.empty()) return absl::NotFoundError("no directory for cluster records");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("no record of ", Bare(address), " at ", path));
  }
  if (absl::Status s = CheckPrivate(ClusterFileDirectory(), "directory"); !s.ok()) return s;
  if (absl::Status s = CheckPrivate(path, "cluster record"); !s.ok()) return s;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("token") || !j["token"].is_string() ||
      !j.contains("address") || !j["address"].is_string() ||
      j["address"].get<std::string>() != Bare(address)) {
    return absl::DataLossError(absl::StrCat("the cluster record ", path, " is malformed"));
  }
  return grpc_transport::CheckToken(j["token"].get<std::string>(),
                                   absl::StrCat("the cluster record ", path));
}

void RemoveClusterFile(const std::string& address) {
  const std::string path = ClusterFilePath(address);
  if (!path.empty()) ::unlink(path.c_str());
}

absl::StatusOr<std::string> RecordedCluster() {
  const std::string dir = ClusterFileDirectory();
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError("no cluster recorded by `causeway cluster up` for this user");
  }
  if (absl::Status s = CheckPrivate(dir, "directory"); !s.ok()) return s;
  std::vector<std::string> running;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (!absl::EndsWith(path, ".json") || !CheckPrivate(path, "cluster record").ok()) continue;
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
    if (!j.is_object() || !j.contains("address") || !j["address"].is_string()) continue;
    // Stale: the `cluster up` that wrote it is gone without removing it.
    if (j.contains("pid") && j["pid"].is_number_integer()) {
      const pid_t pid = j["pid"].get<pid_t>();
      if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) continue;
    }
    running.push_back(absl::StrCat("grpc://", j["address"].get<std::string>()));
  }
  std::sort(running.begin(), running.end());
  if (running.empty()) {
    return absl::NotFoundError("no cluster recorded by `causeway cluster up` for this user");
  }
  if (running.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        running.size(), " clusters recorded by `causeway cluster up` (",
        absl::StrJoin(running, ", "), "): say which"));
  }
  return running[0];
}

}  // namespace causeway
