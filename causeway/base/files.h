// Reading a whole input file that a user names (a model, an array, a
// corpus), bounded and checked: what a command does with a path it is given.
#ifndef CAUSEWAY_BASE_FILES_H_
#define CAUSEWAY_BASE_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace causeway {

// The bytes of `path`, which must be a regular file (not a directory, a
// device such as /dev/zero, a pipe or a socket) of at most `max_bytes`,
// read with that bound (the file may be growing). NOT_FOUND when it is
// missing; INVALID_ARGUMENT when it is unreadable, of another type or too
// large; each naming `what` and the path. Never throws.
absl::StatusOr<std::string> ReadInputFile(const std::string& path, int64_t max_bytes,
                                          absl::string_view what);

}  // namespace causeway

#endif  // CAUSEWAY_BASE_FILES_H_
