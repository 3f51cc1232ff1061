#include "causeway/checkpoint/format.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "causeway/backend/cpu/device.h"
#include "causeway/backend/device.h"
#include "nlohmann/json.hpp"

namespace causeway::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr char kManifest[] = "manifest.json";
constexpr char kPartial[] = ".partial";

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int e = errno;
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  return e == ENOENT ? absl::NotFoundError(message) : absl::UnavailableError(message);
}

absl::Status FsError(absl::string_view what, const std::string& path, const std::error_code& e) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", e.message()));
}

uint32_t Crc(const void* data, int64_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    const uInt n = static_cast<uInt>(std::min<int64_t>(bytes, 1 << 30));
    crc = crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(crc);
}

// Writes `bytes` to `path` (created or truncated) and flushes it to disk.
absl::Status WriteFile(const std::string& path, const void* data, int64_t bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", path);
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = write(fd, p, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno("cannot write", path);
      close(fd);
      return s;
    }
    p += n;
    bytes -= n;
  }
  if (fsync(fd) != 0) {
    absl::Status s = Errno("cannot flush", path);
    close(fd);
    return s;
  }
  if (close(fd) != 0) return Errno("cannot close", path);
  return absl::OkStatus();
}

// Flushes a folder's entries (a rename or a new file in it) to disk.
absl::Status SyncFolder(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  const int r = fsync(fd);
  close(fd);
  return r == 0 ? absl::OkStatus() : Errno("cannot flush", path);
}

// The whole of `path`, which must hold exactly `expected` bytes.
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t expected) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::string out(static_cast<size_t>(expected), '\0');
  int64_t got = 0;
  while (got < expected) {
    const ssize_t n = read(fd, out.data() + got,
                           static_cast<size_t>(std::min<int64_t>(expected - got, 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = Errno("cannot read", path);
      close(fd);
      return s;
    }
    if (n == 0) break;
    got += n;
  }
  char extra = 0;
  const bool longer = got == expected && read(fd, &extra, 1) > 0;
  close(fd);
  if (got != expected || longer) {
    return absl::DataLossError(absl::StrCat(path, " is ", longer ? "longer" : "shorter",
                                            " than the ", expected,
                                            " bytes its manifest gives (truncated or replaced)"));
  }
  return out;
}

bool SafeFileName(absl::string_view f) {
  if (f.empty() || f.size() > 255 || f == "." || f == ".." || f == kManifest) return false;
  return std::all_of(f.begin(), f.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

// Elements of a box, or -1 when a dimension is negative or the product
// overflows.
int64_t Volume(const std::vector<int64_t>& dims) {
  int64_t v = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && v > std::numeric_limits<int64_t>::max() / d)) return -1;
    v *= d;
  }
  return v;
}

// OK when [offset, offset + extent) lies inside `shape`.
absl::Status CheckBox(const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
                      const std::vector<int64_t>& extent, absl::string_view what) {
  bool ok = offset.size() == shape.size() && extent.size() == shape.size();
  for (size_t k = 0; ok && k < shape.size(); ++k) {
    ok = offset[k] >= 0 && extent[k] >= 0 && offset[k] <= shape[k] &&
         extent[k] <= shape[k] - offset[k];
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": the box at [", absl::StrJoin(offset, ","), "] of [", absl::StrJoin(extent, ","),
      "] is not inside [", absl::StrJoin(shape, ","), "]"));
}

bool Overlap(const Piece& a, const Piece& b) {
  for (size_t k = 0; k < a.offset.size(); ++k) {
    if (a.offset[k] >= b.offset[k] + b.extent[k] || b.offset[k] >= a.offset[k] + a.extent[k]) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<ir::DType> ParseDType(const std::string& name) {
  for (ir::DType d : {ir::DType::kF32, ir::DType::kI32, ir::DType::kPred}) {
    if (name == ir::DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", name, "\""));
}

absl::Status CheckArray(const ArrayEntry& a) {
  const std::string what = absl::StrCat("array \"", a.name, "\"");
  if (a.name.empty()) return absl::InvalidArgumentError("an array without a name");
  const int64_t volume = Volume(a.shape);
  if (a.shape.size() > static_cast<size_t>(kMaxRank) || volume < 0 ||
      volume > std::numeric_limits<int64_t>::max() / 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a shape of [", absl::StrJoin(a.shape, ","), "]"));
  }
  if (a.pieces.empty() || a.pieces.size() > kMaxPiecesPerArray) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", a.pieces.size(), " pieces (1 to ", kMaxPiecesPerArray, ")"));
  }
  int64_t covered = 0;
  for (size_t i = 0; i < a.pieces.size(); ++i) {
    const Piece& p = a.pieces[i];
    if (!SafeFileName(p.file)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a piece's file \"", p.file, "\" is not a plain file name"));
    }
    if (absl::Status s = CheckBox(a.shape, p.offset, p.extent, absl::StrCat(what, ", ", p.file));
        !s.ok()) {
      return s;
    }
    const int64_t n = Volume(p.extent);
    if (p.bytes != n * ir::ByteSize(a.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ", ", p.file, ": ", p.bytes,
                                                     " bytes for ", n, " elements of ",
                                                     ir::DTypeName(a.dtype)));
    }
    for (size_t j = 0; j < i; ++j) {
      if (Overlap(a.pieces[j], p) && n > 0 && Volume(a.pieces[j].extent) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": pieces ", a.pieces[j].file,
                                                       " and ", p.file, " overlap"));
      }
    }
    covered += n;
  }
  if (covered != volume) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": its pieces hold ", covered, " of its ",
                                                   volume, " elements"));
  }
  return absl::OkStatus();
}

}  // namespace

const ArrayEntry* Manifest::Find(absl::string_view name) const {
  for (const ArrayEntry& a : arrays) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string ToJson(const Manifest& manifest) {
  nlohmann::json arrays = nlohmann::json::array();
  for (const ArrayEntry& a : manifest.arrays) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const Piece& p : a.pieces) {
      pieces.push_back({{"file", p.file},
                        {"offset", p.offset},
                        {"extent", p.extent},
                        {"bytes", p.bytes},
                        {"crc32", p.crc32}});
    }
    arrays.push_back({{"name", a.name},
                      {"dtype", ir::DTypeName(a.dtype)},
                      {"shape", a.shape},
                      {"sharding", a.sharding},
                      {"pieces", std::move(pieces)}});
  }
  const nlohmann::json j = {{"format", "causeway-checkpoint"},
                            {"version", kFormatVersion},
                            {"byte_order", "little"},
                            {"layout", "row-major"},
                            {"step", manifest.step},
                            {"arrays", std::move(arrays)}};
  return j.dump(1);
}

absl::StatusOr<Manifest> FromJson(absl::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("a checkpoint manifest that is not a JSON object");
  }
  Manifest m;
  try {
    if (j.at("format").get<std::string>() != "causeway-checkpoint" ||
        j.at("version").get<int>() != kFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a causeway-checkpoint manifest of version ", kFormatVersion, " (",
          j.value("format", std::string("?")), " version ", j.value("version", -1), ")"));
    }
    m.step = j.at("step").get<int64_t>();
    const nlohmann::json& arrays = j.at("arrays");
    if (!arrays.is_array() || arrays.size() > kMaxArrays) {
      return absl::InvalidArgumentError("a manifest's arrays are not a list of at most 65536");
    }
    for (const nlohmann::json& ja : arrays) {
      ArrayEntry a;
      a.name = ja.at("name").get<std::string>();
      absl::StatusOr<ir::DType> dtype = ParseDType(ja.at("dtype").get<std::string>());
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("array \"", a.name, "\": ", dtype.status().message()));
      }
      a.dtype = *dtype;
      a.shape = ja.at("shape").get<std::vector<int64_t>>();
      a.sharding = ja.value("sharding", std::string());
      const nlohmann::json& pieces = ja.at("pieces");
      if (!pieces.is_array() || pieces.size() > kMaxPiecesPerArray) {
        return absl::InvalidArgumentError(
            absl::StrCat("array \"", a.name, "\": its pieces are not a list of at most ",
                         kMaxPiecesPerArray));
      }
      for (const nlohmann::json& jp : pieces) {
        Piece p;
        p.file = jp.at("file").get<std::string>();
        p.offset = jp.at("offset").get<std::vector<int64_t>>();
        p.extent = jp.at("extent").get<std::vector<int64_t>>();
        p.bytes = jp.at("bytes").get<int64_t>();
        p.crc32 = jp.at("crc32").get<uint32_t>();
        a.pieces.push_back(std::move(p));
      }
      if (m.Find(a.name) != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("array \"", a.name, "\" appears twice"));
      }
      if (absl::Status s = CheckArray(a); !s.ok()) return s;
      m.arrays.push_back(std::move(a));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint manifest with a missing or mistyped field: ", e.what()));
  }
  return m;
}

absl::StatusOr<Piece> WritePiece(const std::string& folder, const std::string& file,
                                 const std::vector<int64_t>& shape, ir::DType dtype,
                                 const std::vector<int64_t>& offset,
                                 const std::vector<int64_t>& extent, const void* data) {
  if (!SafeFileName(file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint piece named \"", file, "\" (a plain file name, not ",
                     kManifest, ")"));
  }
  if (absl::Status s = CheckBox(shape, offset, extent, file); !s.ok()) return s;
  Piece p;
  p.file = file;
  p.offset = offset;
  p.extent = extent;
  p.bytes = Volume(extent) * ir::ByteSize(dtype);
  p.crc32 = Crc(data, p.bytes);
  if (absl::Status s = WriteFile(absl::StrCat(folder, "/", file), data, p.bytes); !s.ok()) {
    return s;
  }
  return p;
}

absl::Status ReadBox(const std::string& folder, const ArrayEntry& array,
                     const std::vector<int64_t>& offset, const std::vector<int64_t>& extent,
                     void* dst) {
  if (absl::Status s = CheckBox(array.shape, offset, extent, array.name); !s.ok()) return s;
  const size_t rank = array.shape.size();
  for (const Piece& p : array.pieces) {
    // The overlap of the piece and the box, in global coordinates.
    std::vector<int64_t> lo(rank), size(rank);
    bool empty = false;
    for (size_t k = 0; k < rank; ++k) {
      lo[k] = std::max(offset[k], p.offset[k]);
      const int64_t hi = std::min(offset[k] + extent[k], p.offset[k] + p.extent[k]);
      size[k] = hi - lo[k];
      empty = empty || size[k] <= 0;
    }
    if (empty) continue;
    const std::string path = absl::StrCat(folder, "/", p.file);
    absl::StatusOr<std::string> bytes = ReadFile(path, p.bytes);
    if (!bytes.ok()) return bytes.status();
    if (Crc(bytes->data(), p.bytes) != p.crc32) {
      return absl::DataLossError(absl::StrFormat(
          "%s does not match its checksum (CRC-32 %08x in the manifest): the file is corrupt",
          path, p.crc32));
    }
    backend::BoxCopy box;
    box.element_bytes = ir::ByteSize(array.dtype);
    box.src_dims = p.extent;
    box.dst_dims = extent;
    box.extent = size;
    for (size_t k = 0; k < rank; ++k) {
      box.src_offset.push_back(lo[k] - p.offset[k]);
      box.dst_offset.push_back(lo[k] - offset[k]);
    }
    backend::cpu::CopyHostBox(bytes->data(), dst, box);
  }
  return absl::OkStatus();
}

std::string StepFolder(const std::string& root, int64_t step) {
  return absl::StrFormat("%s/step-%08d", root, step);
}

absl::StatusOr<std::string> BeginSave(const std::string& root, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("a checkpoint of step ", step));
  std::error_code e;
  fs::create_directories(root, e);
  if (e) return FsError("cannot create", root, e);
  const std::string partial = StepFolder(root, step) + kPartial;
  fs::remove_all(partial, e);
  if (e) return FsError("cannot remove", partial, e);
  fs::create_directory(partial, e);
  if (e) return FsError("cannot create", partial, e);
  return partial;
}

namespace {

// The step a folder named "step-NNNNNNNN" + `suffix` holds, or -1.
int64_t StepOf(const std::string& name, absl::string_view suffix) {
  constexpr size_t kDigits = 8;
  if (name.size() != 5 + kDigits + suffix.size() || name.rfind("step-", 0) != 0 ||
      name.compare(5 + kDigits, std::string::npos, suffix.data(), suffix.size()) != 0) {
    return -1;
  }
  int64_t step = 0;
  for (size_t k = 5; k < 5 + kDigits; ++k) {
    if (name[k] < '0' || name[k] > '9') return -1;
    step = step * 10 + (name[k] - '0');
  }
  return step;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> CommittedSteps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code e;
  fs::directory_iterator it(root, e);
  if (e == std::errc::no_such_file_or_directory) return steps;
  if (e) return FsError("cannot list", root, e);
  for (const fs::directory_entry& entry : it) {
    const int64_t step = StepOf(entry.path().filename().string(), "");
    std::error_code ignored;
    if (step >= 0 && fs::exists(entry.path() / kManifest, ignored)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status Commit(const std::string& root, const Manifest& manifest, int keep) {
  if (keep < 1) return absl::InvalidArgumentError(absl::StrCat("keep ", keep, " checkpoints"));
  for (const ArrayEntry& a : manifest.arrays) {
    if (absl::Status s = CheckArray(a); !s.ok()) return s;
  }
  const std::string folder = StepFolder(root, manifest.step);
  const std::string partial = folder + kPartial;
  const std::string json = ToJson(manifest);
  if (absl::Status s =
          WriteFile(absl::StrCat(partial, "/", kManifest), json.data(),
                    static_cast<int64_t>(json.size()));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = SyncFolder(partial); !s.ok()) return s;
  std::error_code e;
  fs::remove_all(folder, e);  // the same step saved again
  if (e) return FsError("cannot replace", folder, e);
  fs::rename(partial, folder, e);
  if (e) return FsError("cannot commit", folder, e);
  if (absl::Status s = SyncFolder(root); !s.ok()) return s;
  // Keep the newest `keep`; what a save cut short left of an older step goes
  // too.
  absl::StatusOr<std::vector<int64_t>> steps = CommittedSteps(root);
  if (!steps.ok()) return steps.status();
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps->size(); ++i) {
    fs::remove_all(StepFolder(root, (*steps)[i]), e);
    if (e) return FsError("cannot remove", StepFolder(root, (*steps)[i]), e);
  }
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, e)) {
    const int64_t step = StepOf(entry.path().filename().string(), kPartial);
    if (step >= 0 && step < manifest.step) stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  return absl::OkStatus();
}

absl::StatusOr<Manifest> ReadManifest(const std::string& folder) {
  const std::string path = absl::StrCat(folder, "/", kManifest);
  std::error_code e;
  const uintmax_t size = fs::file_size(path, e);
  if (e) {
    return e == std::errc::no_such_file_or_directory
               ? absl::NotFoundError(absl::StrCat("no checkpoint manifest ", path))
               : FsError("cannot read", path, e);
  }
  if (size > (uintmax_t{1} << 30)) {
    return absl::DataLossError(absl::StrCat(path, " is ", size, " bytes: not a manifest"));
  }
  absl::StatusOr<std::string> text = ReadFile(path, static_cast<int64_t>(size));
  if (!text.ok()) return text.status();
  absl::StatusOr<Manifest> m = FromJson(*text);
  if (!m.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", m.status().message()));
  }
  return m;
}

}  // namespace causeway::checkpoint
