#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"

namespace causeway {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

namespace {

class RealClock final : public Clock {
 public:
  int64_t NowMicros() const override { return NowNanos() / 1000; }
  int64_t NowNanos() const override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();
  return clock;
}

namespace internal {

void CheckFailed(const char* file, int line, const char* cond,
                 const std::string& message) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s %s\n", file, line, cond,
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace {

LogLevel LevelFromEnvironment() {
  LogLevel level = LogLevel::kInfo;
  // A value outside info, warning and error is refused where a process
  // starts (CheckSettings); a library user gets it said once, and info.
  absl::StatusOr<std::string> env = SettingValue("CAUSEWAY_LOG_LEVEL");
  if (!env.ok()) {
    std::fprintf(stderr, "%s; using info\n", std::string(env.status().message()).c_str());
  } else if (!env->empty()) {
    ParseLogLevel(*env, &level);
  }
  return level;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level(static_cast<int>(LevelFromEnvironment()));
  return level;
}

// `file` relative to the repository: builds map the source directory away
// (-fmacro-prefix-map); any absolute path left is cut at its last
// top-level folder.
absl::string_view RelativeFile(const char* file) {
  absl::string_view f(file);
  if (f.empty() || f[0] != '/') return f;
  for (absl::string_view top : {"/causeway/", "/tools/", "/tests/", "/python/", "/bench/",
                                "/examples/", "/fuzz/"}) {
    const size_t at = f.rfind(top);
    if (at != absl::string_view::npos) return f.substr(at + 1);
  }
  return f;
}

}  // namespace

bool ParseLogLevel(absl::string_view name, LogLevel* level) {
  if (name == "info") {
    *level = LogLevel::kInfo;
  } else if (name == "warning") {
    *level = LogLevel::kWarning;
  } else if (name == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

void SetMinLogLevel(LogLevel level) { MinLevel().store(static_cast<int>(level)); }

void LogLine(LogLevel level, const char* file, int line, absl::string_view message) {
  if (static_cast<int>(level) < MinLevel().load(std::memory_order_relaxed)) return;
  static std::mutex* mu = new std::mutex;
  const char* tag = level == LogLevel::kInfo      ? "I"
                    : level == LogLevel::kWarning ? "W"
                                                  : "E";
  const std::string when =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone());
  const long tid = static_cast<long>(::syscall(SYS_gettid));
  const absl::string_view where = RelativeFile(file);
  std::lock_guard<std::mutex> lock(*mu);
  std::fprintf(stderr, "%s %s %ld %.*s:%d] %.*s\n", tag, when.c_str(), tid,
               static_cast<int>(where.size()), where.data(), line,
               static_cast<int>(message.size()), message.data());
}

}  // namespace internal
}  // namespace causeway
