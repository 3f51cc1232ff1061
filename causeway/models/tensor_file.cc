#include "causeway/models/tensor_file.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace causeway::models {
namespace {

static_assert(std::endian::native == std::endian::little,
              "tensor files store little-endian data; add byte swapping for this host");

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

// safetensors' dtype names, one per dtype.
constexpr std::pair<const char*, ir::DType> kTags[] = {
    {"F32", ir::DType::kF32}, {"I32", ir::DType::kI32},   {"BOOL", ir::DType::kPred},
    {"F16", ir::DType::kF16}, {"BF16", ir::DType::kBF16}, {"I64", ir::DType::kI64},
    {"I8", ir::DType::kI8},   {"U8", ir::DType::kU8}};

const char* DTypeTag(ir::DType d) {
  for (const auto& [tag, dtype] : kTags) {
    if (dtype == d) return tag;
  }
  return "?";
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status DataLoss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

}  // namespace

const ir::Literal* TensorFile::Find(const std::string& name) const {
  for (const auto& [n, lit] : tensors) {
    if (n == name) return &lit;
  }
  return nullptr;
}

absl::Status WriteTensorFile(const std::string& path, const TensorFile& file) {
  json header = json::object();
  json meta = json::object();
  for (const auto& [k, v] : file.metadata) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [name, lit] : file.tensors) {
    if (name.empty() || name == "__metadata__" || !names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("bad or repeated tensor name '", name, "'"));
    }
    const uint64_t end = offset + lit.byte_size();
    header[name] = {{"dtype", DTypeTag(lit.shape().dtype)},
                    {"shape", lit.shape().dims},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status st = WriteAll(fd, &n, sizeof(n), tmp);
  if (st.ok()) st = WriteAll(fd, text.data(), text.size(), tmp);
  for (const auto& [name, lit] : file.tensors) {
    if (!st.ok()) break;
    st = WriteAll(fd, lit.data(), lit.byte_size(), tmp);
  }
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoError("cannot flush", tmp);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError("cannot close", tmp);
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoError("cannot rename to", path);
  }
  if (!st.ok()) std::remove(tmp.c_str());
  return st;
}

absl::StatusOr<TensorFile> ReadTensorFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::streamoff size = in.tellg();
  in.seekg(0);
  uint64_t n = 0;
  if (size < 8 || !in.read(reinterpret_cast<char*>(&n), 8)) {
    return DataLoss(path, "shorter than its 8-byte header length");
  }
  const uint64_t file_size = static_cast<uint64_t>(size);
  if (n > kMaxHeaderBytes || n > file_size - 8) {
    return DataLoss(path, absl::StrCat("header length ", n, " does not fit a file of ",
                                       file_size, " bytes"));
  }
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) {
    return DataLoss(path, "cannot read the header");
  }
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return DataLoss(path, "header is not a JSON object");
  }
  const uint64_t data_bytes = file_size - 8 - n;
  TensorFile out;
  struct Entry {
    uint64_t begin, end;
    std::string name;
    ir::Shape shape;
  };
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& value = item.value();
    if (name == "__metadata__") {
      if (!value.is_object()) return DataLoss(path, "__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) return DataLoss(path, absl::StrCat("metadata '", k, "' is not a string"));
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const auto bad = [&](const std::string& what) {
      return DataLoss(path, absl::StrCat("tensor '", name, "': ", what));
    };
    if (!value.is_object() || !value.contains("dtype") || !value["dtype"].is_string() ||
        !value.contains("shape") || !value["shape"].is_array() ||
        !value.contains("data_offsets") || !value["data_offsets"].is_array() ||
        value["data_offsets"].size() != 2) {
      return bad("needs dtype, shape and data_offsets");
    }
    const std::string dtype = value["dtype"].get<std::string>();
    ir::Shape shape;
    const auto* tag = std::find_if(std::begin(kTags), std::end(kTags),
                                   [&](const auto& t) { return dtype == t.first; });
    if (tag == std::end(kTags)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", name, "' has dtype ", dtype,
          ", not one of F32, I32, BOOL, F16, BF16, I64, I8 or U8"));
    }
    shape.dtype = tag->second;
    for (const json& d : value["shape"]) {
      if (!d.is_number_unsigned()) return bad("shape entries must be non-negative integers");
      shape.dims.push_back(static_cast<int64_t>(std::min<uint64_t>(d.get<uint64_t>(), ir::kMaxElements + 1)));
    }
    if (!ir::ValidateShape(shape).ok()) return bad("shape too large");
    const json& offs = value["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
      return bad("data_offsets must be non-negative integers");
    }
    const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_bytes ||
        end - begin != static_cast<uint64_t>(shape.byte_size())) {
      return bad(absl::StrCat("data_offsets [", begin, ", ", end, "] do not hold ",
                              shape.ToString(), " within ", data_bytes, " data bytes"));
    }
    entries.push_back({begin, end, name, std::move(shape)});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) return DataLoss(path, "tensor data overlaps or has gaps");
    expected = e.end;
  }
  if (expected != data_bytes) return DataLoss(path, "trailing bytes after the tensor data");
  for (Entry& e : entries) {
    ir::Literal lit(e.shape);
    if (lit.byte_size() > 0 &&
        !in.read(reinterpret_cast<char*>(lit.data()), static_cast<std::streamsize>(lit.byte_size()))) {
      return DataLoss(path, absl::StrCat("cannot read tensor '", e.name, "'"));
    }
    out.tensors.emplace_back(std::move(e.name), std::move(lit));
  }
  return out;
}

}  // namespace causeway::models
