#include "causeway/transport/services.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "causeway/base/limits.h"

namespace causeway {

absl::Status CheckSpmdLoopRange(int64_t id_base, int64_t first, int64_t count) {
  if (first >= 0 && count >= 1 && count <= limits::kMaxSpmdLoopSteps && id_base >= 0 &&
      id_base <= std::numeric_limits<int64_t>::max() - first - count) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("an SPMD loop of ", count, " steps from ", first, " (1 to ",
                   limits::kMaxSpmdLoopSteps, " steps, from 0 or later, ids not overflowing)"));
}

}  // namespace causeway
