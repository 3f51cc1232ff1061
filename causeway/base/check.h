// CHECK and logging for programmer errors and diagnostics.
//
// Debian's abseil has no absl/log, so these are Causeway's own. CW_CHECK is
// only for invariants whose violation is a bug in Causeway; anything a user
// can cause returns an absl::Status instead.
#ifndef CAUSEWAY_BASE_CHECK_H_
#define CAUSEWAY_BASE_CHECK_H_

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace causeway::internal {

// Prints "file:line: CHECK failed: cond message" to stderr and aborts.
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond,
                              const std::string& message);

// Collects a streamed message for a failing check, then aborts in its
// destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond)
      : file_(file), line_(line), cond_(cond) {}
  [[noreturn]] ~CheckFailure() { CheckFailed(file_, line_, cond_, stream_.str()); }
  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  const char* cond_;
  std::ostringstream stream_;
};

enum class LogLevel { kInfo, kWarning, kError };

// Writes one line to stderr, if `level` is at least the minimum:
//   W 2026-12-01T13:45:01.123456Z 12345 causeway/worker/host_executor.cc:42] message
// (level, UTC time, thread id, source file relative to the repository).
// Thread-safe.
void LogLine(LogLevel level, const char* file, int line, absl::string_view message);

// The least level logged: CAUSEWAY_LOG_LEVEL (info, warning or error) when
// the process starts, info if unset; changed by SetMinLogLevel (the
// `causeway --log-level` flag).
void SetMinLogLevel(LogLevel level);
// "info", "warning", "error" -> the level; false if `name` is none of them.
bool ParseLogLevel(absl::string_view name, LogLevel* level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line)
      : level_(level), file_(file), line_(line) {}
  ~LogMessage() { LogLine(level_, file_, line_, stream_.str()); }
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace causeway::internal

#define CW_CHECK(cond)                                                    \
  if (cond) {                                                             \
  } else                                                                  \
    ::causeway::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define CW_CHECK_OK(expr)                                                     \
  for (::absl::Status cw_check_status_ = (expr); !cw_check_status_.ok();)     \
  ::causeway::internal::CheckFailure(__FILE__, __LINE__, #expr).stream()      \
      << cw_check_status_.ToString() << " "

#define CW_LOG(level)                                                   \
  ::causeway::internal::LogMessage(::causeway::internal::LogLevel::level, \
                                   __FILE__, __LINE__)                  \
      .stream()

#endif  // CAUSEWAY_BASE_CHECK_H_
