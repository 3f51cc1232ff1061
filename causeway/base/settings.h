// Settings: every CAUSEWAY_* environment variable Causeway reads, in one
// table (settings.cc), each with the values it takes and what it does;
// docs/SETTINGS.md lists them. Code reads a variable only through this
// file, so a value outside its set is an error naming the variable and its
// values instead of being silently ignored, and `causeway` checks the whole
// environment once at start (CheckSettings).
#ifndef CAUSEWAY_BASE_SETTINGS_H_
#define CAUSEWAY_BASE_SETTINGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace causeway {

struct Setting {
  enum class Kind {
    kChoice,  // one of `choices`
    kIndex,   // an integer >= 0
    kNumber,  // a number >= 0
    kText,    // any bytes (a token is checked where it is used)
  };
  const char* name;  // "CAUSEWAY_VULKAN_KERNELS"
  Kind kind;
  std::vector<std::string> choices;  // kChoice
  const char* help;
  // Read by the test suites and scripts, not by the runtime.
  bool for_tests = false;
};

// The table, in name order.
const std::vector<Setting>& AllSettings();

// The value of variable `name` (which must be in the table: a programmer
// error otherwise), or `fallback` when it is unset or empty. A choice
// outside its set, or an index or number that does not parse, is
// INVALID_ARGUMENT naming the variable and the values it takes.
absl::StatusOr<std::string> SettingValue(absl::string_view name,
                                         absl::string_view fallback = "");
// A kIndex setting as an integer; -1 when unset.
absl::StatusOr<int> SettingIndex(absl::string_view name);

// Checks every CAUSEWAY_* variable of the environment against the table:
// INVALID_ARGUMENT naming the first whose value is not one it takes. Names
// the table lacks (a misspelling, a variable of another version) go to
// `unknown` (if not null) for a warning.
absl::Status CheckSettings(std::vector<std::string>* unknown = nullptr);

}  // namespace causeway

#endif  // CAUSEWAY_BASE_SETTINGS_H_
