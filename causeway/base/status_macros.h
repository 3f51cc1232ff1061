// Status helpers for code that returns absl::Status / absl::StatusOr<T>.
//
// The abseil shipped with Debian bookworm has no RETURN_IF_ERROR or
// ASSIGN_OR_RETURN, so Causeway defines its own, prefixed CW_.
#ifndef CAUSEWAY_BASE_STATUS_MACROS_H_
#define CAUSEWAY_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define CW_STATUS_CONCAT_INNER_(a, b) a##b
#define CW_STATUS_CONCAT_(a, b) CW_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function if it is not OK.
#define CW_RETURN_IF_ERROR(expr)                          \
  do {                                                    \
    ::absl::Status cw_status_ = (expr);                   \
    if (!cw_status_.ok()) return cw_status_;              \
  } while (false)

// CW_ASSIGN_OR_RETURN(auto x, MakeX()); evaluates a StatusOr, returns its
// status on error, otherwise moves the value into `lhs`.
#define CW_ASSIGN_OR_RETURN(lhs, expr)                                      \
  CW_ASSIGN_OR_RETURN_IMPL_(CW_STATUS_CONCAT_(cw_statusor_, __LINE__), lhs, \
                            expr)
#define CW_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                              \
  if (!var.ok()) return std::move(var).status();  \
  lhs = std::move(var).value()

namespace causeway {

// Returns `status` with `context` prepended to its message ("context: msg"),
// keeping its code. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace causeway

#endif  // CAUSEWAY_BASE_STATUS_MACROS_H_
