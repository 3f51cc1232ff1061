#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "causeway/base/check.h"
#include "causeway/base/clock.h"
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

void LogLine(LogLevel level, const char* file, int line, absl::string_view message) {
  static std::mutex* mu = new std::mutex;
  const char* tag = level == LogLevel::kInfo      ? "I"
                    : level == LogLevel::kWarning ? "W"
                                                  : "E";
  std::lock_guard<std::mutex> lock(*mu);
  std::fprintf(stderr, "%s %s:%d] %.*s\n", tag, file, line,
               static_cast<int>(message.size()), message.data());
}

}  // namespace internal
}  // namespace causeway
