#include "causeway/checkpoint/format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "causeway/base/check.h"
#include "causeway/topology/mesh.h"
#include "nlohmann/json.hpp"

namespace causeway::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr char kManifest[] = "manifest.json";
constexpr char kPartial[] = ".partial";

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int e = errno;
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  // An I/O error reading a file is lost data, not a moment's unavailability.
  if (e == EIO) return absl::DataLossError(message);
  return absl::Status(absl::ErrnoToStatusCode(e), message);
}

absl::Status FsError(absl::string_view what, const std::string& path, const std::error_code& e) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", e.message()));
}

// Files are written and read, and checksummed, in chunks of this size: a
// chunk's CRC is taken while it is in cache, just before it is written or
// just after it is read, instead of in a pass of its own over the whole.
constexpr int64_t kChunk = int64_t{4} << 20;

uint32_t CrcMore(uint32_t crc, const void* data, int64_t bytes) {
  uLong c = crc;
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    const uInt n = static_cast<uInt>(std::min<int64_t>(bytes, 1 << 30));
    c = crc32(c, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(c);
}

uint32_t CrcStart() { return static_cast<uint32_t>(crc32(0L, Z_NULL, 0)); }

// Writes all `n` bytes of `data` at offset `at` of `fd`: 0, or the errno of
// the write that failed.
int PutAll(int fd, const void* data, int64_t n, int64_t at) {
  const auto* p = static_cast<const char*>(data);
  int64_t put = 0;
  while (put < n) {
    const ssize_t w =
        pwrite(fd, p + put, static_cast<size_t>(n - put), static_cast<off_t>(at + put));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    put += w;
  }
  return 0;
}

// Direct I/O moves whole blocks of this size: its offsets, lengths and
// memory are multiples of it.
constexpr int64_t kBlock = 4096;

// Writes `bytes` through `fd` (opened with O_DIRECT, closed here) and
// flushes them, as WriteFile does. Each chunk is copied into an aligned
// staging chunk, checksummed there while in cache, and written past the
// page cache: no copy into it, no writeback to wait for at the fsync. The
// last chunk is padded to a block and the file cut back to `bytes`. Sets
// `refused` (and closes `fd`) where the file system takes no direct write
// of these blocks.
absl::Status WriteDirect(int fd, const std::string& path, const void* data, int64_t bytes,
                         uint32_t* crc, bool* refused) {
  auto fail = [&](absl::string_view what, int e) {
    errno = e;
    absl::Status s = Errno(what, path);
    close(fd);
    return s;
  };
  struct Free {
    void operator()(std::byte* b) const { std::free(b); }
  };
  std::unique_ptr<std::byte, Free> chunk(
      static_cast<std::byte*>(std::aligned_alloc(kBlock, kChunk)));
  if (chunk == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for a staging chunk to write ", path));
  }
  // The file's blocks reserved at once (a hint), so that hosts writing at
  // the same time do not interleave their files' blocks, chunk by chunk,
  // on the disk.
  fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes));
  const auto* p = static_cast<const std::byte*>(data);
  uint32_t sum = CrcStart();
  int64_t done = 0;
  while (done < bytes) {
    const int64_t n = std::min(bytes - done, kChunk);
    std::memcpy(chunk.get(), p + done, static_cast<size_t>(n));
    if (crc != nullptr) sum = CrcMore(sum, chunk.get(), n);
    const int64_t padded = (n + kBlock - 1) / kBlock * kBlock;
    std::memset(chunk.get() + n, 0, static_cast<size_t>(padded - n));
    if (const int e = PutAll(fd, chunk.get(), padded, done); e != 0) {
      if (e != EINVAL) return fail("cannot write", e);
      // Rewritten whole through the page cache by the caller.
      close(fd);
      *refused = true;
      return absl::OkStatus();
    }
    done += n;
  }
  if (bytes % kBlock != 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return fail("cannot size", errno);
  }
  if (fsync(fd) != 0) return fail("cannot flush", errno);
  if (close(fd) != 0) return Errno("cannot close", path);
  if (crc != nullptr) *crc = sum;
  return absl::OkStatus();
}

// Writes `bytes` to `path`, a new file (ALREADY_EXISTS if it is there), and
// flushes it to disk. With `crc`, sets it to the CRC-32 of the bytes, taken
// chunk by chunk as they are written. A file of a chunk or more goes past
// the page cache (WriteDirect); a smaller one, or one on a file system
// without direct I/O, through it, each chunk's writeback started as soon as
// it is written, so that the fsync at the end has little left to wait for.
absl::Status WriteFile(const std::string& path, const void* data, int64_t bytes,
                       uint32_t* crc = nullptr) {
  if (bytes >= kChunk) {
    const int direct =
        open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
    if (direct >= 0) {
      bool refused = false;
      absl::Status s = WriteDirect(direct, path, data, bytes, crc, &refused);
      if (!refused) return s;
    } else if (errno != EINVAL) {
      return Errno("cannot create", path);
    }
    // A file system without direct I/O (or with larger blocks) may have
    // made the file before refusing: it is this call's (O_EXCL), and is made
    // again below.
    unlink(path.c_str());
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", path);
  const auto* p = static_cast<const char*>(data);
  uint32_t sum = CrcStart();
  int64_t done = 0;
  while (done < bytes) {
    const int64_t n = std::min(bytes - done, kChunk);
    if (crc != nullptr) sum = CrcMore(sum, p + done, n);
    if (const int e = PutAll(fd, p + done, n, done); e != 0) {
      errno = e;
      absl::Status s = Errno("cannot write", path);
      close(fd);
      return s;
    }
    // A hint: where it is not supported, the fsync below does it all.
    sync_file_range(fd, done, n, SYNC_FILE_RANGE_WRITE);
    done += n;
  }
  if (fsync(fd) != 0) {
    absl::Status s = Errno("cannot flush", path);
    close(fd);
    return s;
  }
  if (close(fd) != 0) return Errno("cannot close", path);
  if (crc != nullptr) *crc = sum;
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

// `path` opened for reading, once checked to be a regular file of exactly
// `expected` bytes: checked before anything is allocated for it, so a
// manifest cannot make a reader allocate more than the file holds.
absl::StatusOr<int> OpenChecked(const std::string& path, int64_t expected) {
  // Not following a link, and not waiting on a FIFO put in a piece's place.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return Errno("cannot open", path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    absl::Status s = Errno("cannot read", path);
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode) || st.st_size != expected) {
    close(fd);
    return absl::DataLossError(absl::StrCat(
        path, S_ISREG(st.st_mode) ? absl::StrCat(" is ", st.st_size, " bytes, not the ", expected,
                                                 " expected (truncated or replaced)")
                                  : std::string(" is not a regular file")));
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint
  return fd;
}

// Reads the `expected` bytes of `fd` (from OpenChecked, closed here) into
// `dst`; with `crc`, sets it to their CRC-32, taken chunk by chunk as read.
absl::Status ReadOpen(int fd, const std::string& path, int64_t expected, void* dst,
                      uint32_t* crc = nullptr) {
  auto* out = static_cast<char*>(dst);
  uint32_t sum = CrcStart();
  int64_t got = 0;
  while (got < expected) {
    const ssize_t n =
        read(fd, out + got, static_cast<size_t>(std::min<int64_t>(expected - got, kChunk)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = Errno("cannot read", path);
      close(fd);
      return s;
    }
    if (n == 0) break;
    if (crc != nullptr) sum = CrcMore(sum, out + got, n);
    got += n;
  }
  char extra = 0;
  const bool longer = got == expected && read(fd, &extra, 1) > 0;
  close(fd);
  if (got != expected || longer) {
    return absl::DataLossError(absl::StrCat(path, " changed while read: ",
                                            longer ? "longer" : "shorter", " than ", expected,
                                            " bytes"));
  }
  if (crc != nullptr) *crc = sum;
  return absl::OkStatus();
}

// The whole of `path`, which must be a regular file of exactly `expected`
// bytes (OpenChecked).
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t expected) {
  absl::StatusOr<int> fd = OpenChecked(path, expected);
  if (!fd.ok()) return fd.status();
  std::string out(static_cast<size_t>(expected), '\0');
  if (absl::Status s = ReadOpen(*fd, path, expected, out.data()); !s.ok()) return s;
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

// OK when `shape` is one a checkpoint may hold: rank at most kMaxRank, and
// a volume whose byte size cannot overflow.
absl::Status CheckShape(const std::vector<int64_t>& shape, absl::string_view what) {
  const int64_t volume = Volume(shape);
  if (shape.size() <= static_cast<size_t>(kMaxRank) && volume >= 0 &&
      volume <= std::numeric_limits<int64_t>::max() / 8) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": a shape of [", absl::StrJoin(shape, ","), "]"));
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

bool PlainName(absl::string_view name) {
  return !name.empty() && name.size() <= 256 &&
         std::none_of(name.begin(), name.end(), [](char c) {
           return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
         });
}

absl::Status CheckArray(const ArrayEntry& a) {
  if (!PlainName(a.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an array name that is empty, over 256 bytes or holds control characters: \"",
        absl::CHexEscape(a.name.substr(0, 64)), "\""));
  }
  const std::string what = absl::StrCat("array \"", a.name, "\"");
  if (absl::Status s = CheckShape(a.shape, what); !s.ok()) return s;
  const int64_t volume = Volume(a.shape);
  if (a.pieces.empty() || a.pieces.size() > kMaxPiecesPerArray) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", a.pieces.size(), " pieces (1 to ", kMaxPiecesPerArray, ")"));
  }
  int64_t covered = 0;
  for (size_t i = 0; i < a.pieces.size(); ++i) {
    const Piece& p = a.pieces[i];
    if (!SafeFileName(p.file)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": a piece's file \"", absl::CHexEscape(p.file.substr(0, 64)),
          "\" is not a plain file name"));
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

// What both a manifest read and one committed are held to.
absl::Status CheckManifest(const Manifest& m) {
  if (m.step < 0 || m.step > kMaxStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint of step ", m.step, " (0 to ", kMaxStep, ")"));
  }
  if (m.arrays.size() > kMaxArrays) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.arrays.size(), " arrays in one checkpoint (at most ", kMaxArrays, ")"));
  }
  if (m.metadata.size() > kMaxMetadataEntries) {
    return absl::InvalidArgumentError(absl::StrCat(m.metadata.size(),
                                                   " metadata entries (at most ",
                                                   kMaxMetadataEntries, ")"));
  }
  for (const auto& [key, value] : m.metadata) {
    if (key.empty() || key.size() > kMaxMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat("a metadata key of ", key.size(),
                                                     " bytes (1 to ", kMaxMetadataKey, ")"));
    }
  }
  absl::flat_hash_set<absl::string_view> names, files;
  size_t pieces = 0;
  for (const ArrayEntry& a : m.arrays) {
    if (absl::Status s = CheckArray(a); !s.ok()) return s;
    if (!names.insert(a.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("array \"", a.name, "\" appears twice"));
    }
    pieces += a.pieces.size();
    if (pieces > kMaxPieces) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", kMaxPieces, " pieces in one checkpoint"));
    }
    for (const Piece& p : a.pieces) {
      if (!files.insert(p.file).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("two pieces are file ", p.file, " (array \"", a.name, "\")"));
      }
    }
  }
  return absl::OkStatus();
}

// A JSON integer in [lo, hi]; INVALID_ARGUMENT naming `what` for anything
// else (a float, a boolean, a string, out of range).
absl::StatusOr<int64_t> Integer(const nlohmann::json& j, int64_t lo, int64_t hi,
                                absl::string_view what) {
  bool ok = false;
  int64_t v = 0;
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    ok = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    v = static_cast<int64_t>(u);
  } else if (j.is_number_integer()) {
    v = j.get<int64_t>();
    ok = true;
  }
  if (!ok || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace).substr(0, 40),
        ", not an integer from ", lo, " to ", hi));
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> Integers(const nlohmann::json& j, absl::string_view what) {
  if (!j.is_array() || j.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a list of at most ", kMaxRank, " integers"));
  }
  std::vector<int64_t> v;
  for (const nlohmann::json& e : j) {
    absl::StatusOr<int64_t> x =
        Integer(e, 0, std::numeric_limits<int64_t>::max(), what);
    if (!x.ok()) return x.status();
    v.push_back(*x);
  }
  return v;
}

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

// The entries of `root` (none when it does not exist).
absl::StatusOr<std::vector<fs::path>> List(const std::string& root) {
  std::vector<fs::path> out;
  std::error_code e;
  fs::directory_iterator it(root, e);
  if (e == std::errc::no_such_file_or_directory) return out;
  for (; !e && it != fs::directory_iterator(); it.increment(e)) out.push_back(it->path());
  if (e) return FsError("cannot list", root, e);
  return out;
}

// Removes a committed folder so that no moment of it looks committed: its
// manifest first, then the rest.
absl::Status RemoveCommitted(const fs::path& folder) {
  std::error_code e;
  fs::remove(folder / kManifest, e);
  if (e) return FsError("cannot remove", (folder / kManifest).string(), e);
  fs::remove_all(folder, e);
  if (e) return FsError("cannot remove", folder.string(), e);
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
  nlohmann::json j = {{"format", "causeway-checkpoint"},
                      {"version", kFormatVersion},
                      {"byte_order", "little"},
                      {"layout", "row-major"},
                      {"step", manifest.step},
                      {"arrays", std::move(arrays)}};
  if (!manifest.metadata.empty()) j["metadata"] = manifest.metadata;
  // Names are checked before a commit; bytes that are not UTF-8 in a
  // manifest made otherwise are replaced rather than thrown over.
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<Manifest> FromJson(absl::string_view json) {
  if (json.size() > kMaxManifestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a checkpoint manifest of ", json.size(),
                                                   " bytes (at most ", kMaxManifestBytes, ")"));
  }
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("a checkpoint manifest that is not a JSON object");
  }
  Manifest m;
  try {
    if (!j.contains("format") || j["format"] != "causeway-checkpoint" ||
        !j.contains("version") || j["version"] != kFormatVersion ||
        j.value("byte_order", "") != "little" ||
        j.value("layout", "") != "row-major") {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a little-endian, row-major causeway-checkpoint manifest of version ",
          kFormatVersion));
    }
    absl::StatusOr<int64_t> step = Integer(j.at("step"), 0, kMaxStep, "the step");
    if (!step.ok()) return step.status();
    m.step = *step;
    if (j.contains("metadata")) {
      const nlohmann::json& meta = j.at("metadata");
      if (!meta.is_object() || meta.size() > kMaxMetadataEntries) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a manifest's metadata is not an object of at most ", kMaxMetadataEntries,
            " entries"));
      }
      for (const auto& [key, value] : meta.items()) {
        if (key.empty() || key.size() > kMaxMetadataKey || !value.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "a manifest's metadata has an entry \"", absl::CHexEscape(key.substr(0, 64)),
              "\" that is not a key of 1 to ", kMaxMetadataKey, " bytes with a string value"));
        }
        m.metadata.emplace(key, value.get<std::string>());
      }
    }
    const nlohmann::json& arrays = j.at("arrays");
    if (!arrays.is_array() || arrays.size() > kMaxArrays) {
      return absl::InvalidArgumentError(
          absl::StrCat("a manifest's arrays are not a list of at most ", kMaxArrays));
    }
    for (const nlohmann::json& ja : arrays) {
      ArrayEntry a;
      a.name = ja.at("name").get<std::string>();
      const std::string what =
          absl::StrCat("array \"", absl::CHexEscape(a.name.substr(0, 64)), "\"");
      absl::StatusOr<ir::DType> dtype = ParseDType(ja.at("dtype").get<std::string>());
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", dtype.status().message()));
      }
      a.dtype = *dtype;
      absl::StatusOr<std::vector<int64_t>> shape =
          Integers(ja.at("shape"), absl::StrCat(what, "'s shape"));
      if (!shape.ok()) return shape.status();
      a.shape = *std::move(shape);
      a.sharding = ja.value("sharding", std::string());
      const nlohmann::json& pieces = ja.at("pieces");
      if (!pieces.is_array() || pieces.size() > kMaxPiecesPerArray) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": its pieces are not a list of at most ", kMaxPiecesPerArray));
      }
      for (const nlohmann::json& jp : pieces) {
        Piece p;
        p.file = jp.at("file").get<std::string>();
        const std::string of =
            absl::StrCat(what, ", piece ", absl::CHexEscape(p.file.substr(0, 64)));
        absl::StatusOr<std::vector<int64_t>> offset = Integers(jp.at("offset"), of + "'s offset");
        if (!offset.ok()) return offset.status();
        absl::StatusOr<std::vector<int64_t>> extent = Integers(jp.at("extent"), of + "'s extent");
        if (!extent.ok()) return extent.status();
        absl::StatusOr<int64_t> bytes =
            Integer(jp.at("bytes"), 0, std::numeric_limits<int64_t>::max(), of + "'s bytes");
        if (!bytes.ok()) return bytes.status();
        absl::StatusOr<int64_t> crc =
            Integer(jp.at("crc32"), 0, std::numeric_limits<uint32_t>::max(), of + "'s crc32");
        if (!crc.ok()) return crc.status();
        p.offset = *std::move(offset);
        p.extent = *std::move(extent);
        p.bytes = *bytes;
        p.crc32 = static_cast<uint32_t>(*crc);
        a.pieces.push_back(std::move(p));
      }
      m.arrays.push_back(std::move(a));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint manifest with a missing or mistyped field: ", e.what()));
  }
  if (absl::Status s = CheckManifest(m); !s.ok()) return s;
  return m;
}

absl::StatusOr<Piece> WritePiece(const std::string& folder, const std::string& file,
                                 const std::vector<int64_t>& shape, ir::DType dtype,
                                 const std::vector<int64_t>& offset,
                                 const std::vector<int64_t>& extent, const void* data) {
  if (!SafeFileName(file)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a checkpoint piece named \"", absl::CHexEscape(file.substr(0, 64)),
        "\" (a plain file name, not ", kManifest, ")"));
  }
  if (absl::Status s = CheckShape(shape, file); !s.ok()) return s;
  if (absl::Status s = CheckBox(shape, offset, extent, file); !s.ok()) return s;
  Piece p;
  p.file = file;
  p.offset = offset;
  p.extent = extent;
  p.bytes = Volume(extent) * ir::ByteSize(dtype);
  if (absl::Status s = WriteFile(absl::StrCat(folder, "/", file), data, p.bytes, &p.crc32);
      !s.ok()) {
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
    // An entry not read through FromJson is held to the same bounds here.
    if (absl::Status s = CheckBox(array.shape, p.offset, p.extent, p.file); !s.ok()) return s;
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
    if (p.bytes != Volume(p.extent) * ir::ByteSize(array.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", p.bytes, " bytes do not hold its box"));
    }
    absl::StatusOr<int> fd = OpenChecked(path, p.bytes);
    if (!fd.ok()) return fd.status();
    auto corrupt = [&] {
      return absl::DataLossError(absl::StrFormat(
          "%s does not match its checksum (CRC-32 %08x in the manifest): the file is corrupt",
          path, p.crc32));
    };
    uint32_t crc = 0;
    // The piece is the box (a restore onto the sharding it was saved
    // with): read straight into `dst`.
    if (p.offset == offset && p.extent == extent) {
      if (absl::Status s = ReadOpen(*fd, path, p.bytes, dst, &crc); !s.ok()) return s;
      if (crc != p.crc32) return corrupt();
      continue;
    }
    std::string bytes(static_cast<size_t>(p.bytes), '\0');
    if (absl::Status s = ReadOpen(*fd, path, p.bytes, bytes.data(), &crc); !s.ok()) return s;
    if (crc != p.crc32) return corrupt();
    std::vector<int64_t> src_offset;
    std::vector<int64_t> dst_offset;
    for (size_t k = 0; k < rank; ++k) {
      src_offset.push_back(lo[k] - p.offset[k]);
      dst_offset.push_back(lo[k] - offset[k]);
    }
    CopyBox(bytes.data(), p.extent, src_offset, dst, extent, dst_offset, size,
            ir::ByteSize(array.dtype));
  }
  return absl::OkStatus();
}

std::string StepFolder(const std::string& root, int64_t step) {
  return absl::StrFormat("%s/step-%08d", root, step);
}

absl::StatusOr<std::vector<int64_t>> CommittedSteps(const std::string& root) {
  absl::StatusOr<std::vector<fs::path>> entries = List(root);
  if (!entries.ok()) return entries.status();
  std::vector<int64_t> steps;
  for (const fs::path& entry : *entries) {
    const int64_t step = StepOf(entry.filename().string(), "");
    std::error_code ignored;
    if (step >= 0 && fs::exists(entry / kManifest, ignored)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::string> BeginSave(const std::string& root, int64_t step) {
  if (step < 0 || step > kMaxStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint of step ", step, " (0 to ", kMaxStep, ")"));
  }
  absl::StatusOr<std::vector<int64_t>> steps = CommittedSteps(root);
  if (!steps.ok()) return steps.status();
  if (!steps->empty() && steps->back() >= step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, " is not after the newest checkpoint under ", root, " (step ",
        steps->back(), "): save elsewhere, or remove the newer ones"));
  }
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

absl::Status Commit(const std::string& root, const Manifest& manifest, int keep) {
  if (keep < 1) return absl::InvalidArgumentError(absl::StrCat("keep ", keep, " checkpoints"));
  if (absl::Status s = CheckManifest(manifest); !s.ok()) return s;
  absl::StatusOr<std::vector<int64_t>> before = CommittedSteps(root);
  if (!before.ok()) return before.status();
  if (!before->empty() && before->back() >= manifest.step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", manifest.step, " is not after the newest checkpoint under ", root, " (step ",
        before->back(), ")"));
  }
  const std::string folder = StepFolder(root, manifest.step);
  const std::string partial = folder + kPartial;
  // Every piece is there, whole: a folder with a manifest is a checkpoint.
  for (const ArrayEntry& a : manifest.arrays) {
    for (const Piece& p : a.pieces) {
      const std::string path = absl::StrCat(partial, "/", p.file);
      struct stat st {};
      if (lstat(path.c_str(), &st) != 0) return Errno("cannot commit without", path);
      if (!S_ISREG(st.st_mode) || st.st_size != p.bytes) {
        return absl::DataLossError(absl::StrCat("cannot commit: ", path, " is not the ", p.bytes,
                                                " bytes the manifest gives"));
      }
    }
  }
  const std::string json = ToJson(manifest);
  if (absl::Status s = WriteFile(absl::StrCat(partial, "/", kManifest), json.data(),
                                 static_cast<int64_t>(json.size()));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = SyncFolder(partial); !s.ok()) return s;
  std::error_code e;
  fs::rename(partial, folder, e);
  if (e) return FsError("cannot commit", folder, e);
  if (absl::Status s = SyncFolder(root); !s.ok()) return s;
  // Committed. What follows only tidies: a failure is logged, not returned,
  // since the step is a checkpoint whatever happens to the older ones.
  // Keep the newest `keep`; what a save cut short left of an older step goes
  // too.
  std::vector<int64_t> steps = *std::move(before);
  steps.push_back(manifest.step);
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
    if (absl::Status s = RemoveCommitted(StepFolder(root, steps[i])); !s.ok()) {
      CW_LOG(kWarning) << "checkpoint " << folder << " committed; " << s;
    }
  }
  absl::StatusOr<std::vector<fs::path>> entries = List(root);
  for (const fs::path& entry : entries.ok() ? *entries : std::vector<fs::path>{}) {
    const int64_t step = StepOf(entry.filename().string(), kPartial);
    if (step >= 0 && step < manifest.step) {
      std::error_code ignored;
      fs::remove_all(entry, ignored);
    }
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
  if (size > kMaxManifestBytes) {
    return absl::DataLossError(absl::StrCat(path, " is ", size, " bytes (a manifest has at most ",
                                            kMaxManifestBytes, ")"));
  }
  absl::StatusOr<std::string> text = ReadFile(path, static_cast<int64_t>(size));
  if (!text.ok()) return text.status();
  absl::StatusOr<Manifest> m = FromJson(*text);
  if (!m.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", m.status().message()));
  }
  const int64_t named = StepOf(fs::path(folder).filename().string(), "");
  if (named >= 0 && named != m->step) {
    return absl::DataLossError(
        absl::StrCat(path, " is of step ", m->step, ", not the folder's ", named));
  }
  return m;
}

}  // namespace causeway::checkpoint
