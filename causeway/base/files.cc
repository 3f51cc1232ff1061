#include "causeway/base/files.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace causeway {

absl::StatusOr<std::string> ReadInputFile(const std::string& path, int64_t max_bytes,
                                          absl::string_view what) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path, ": ",
                                            ec ? ec.message() : "no such file"));
  }
  if (std::filesystem::is_directory(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory; give the ", what, " file"));
  }
  if (!std::filesystem::is_regular_file(st)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a regular file (a device, pipe or socket); give the ", what, " file"));
  }
  const auto too_large = [&] {
    const std::string bound = max_bytes % (int64_t{1} << 20) == 0
                                  ? absl::StrCat(max_bytes >> 20, " MiB")
                                  : absl::StrCat(max_bytes, " bytes");
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is larger than ", bound, ", the most a ", what, " may be"));
  };
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > static_cast<std::uintmax_t>(max_bytes)) return too_large();
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path));
  }
  std::string bytes;
  if (!ec) bytes.reserve(static_cast<size_t>(size));
  char chunk[1 << 16];
  while (true) {
    const size_t n = std::fread(chunk, 1, sizeof(chunk), f.get());
    if (n == 0) break;
    if (static_cast<int64_t>(bytes.size() + n) > max_bytes) return too_large();
    bytes.append(chunk, n);
  }
  if (std::ferror(f.get())) {
    return absl::InvalidArgumentError(absl::StrCat("error reading ", what, " ", path));
  }
  return bytes;
}

}  // namespace causeway
