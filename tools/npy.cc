#include "tools/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <utility>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "causeway/base/files.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/elements.h"

namespace causeway::tools {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMaxHeader = 1 << 16;

// The little-endian descriptors stored as such, one per dtype (bf16 has none).
constexpr std::pair<const char*, ir::DType> kDescrs[] = {
    {"<f4", ir::DType::kF32}, {"<i4", ir::DType::kI32}, {"|b1", ir::DType::kPred},
    {"<f2", ir::DType::kF16}, {"<i8", ir::DType::kI64}, {"|i1", ir::DType::kI8},
    {"|u1", ir::DType::kU8}};

std::optional<ir::DType> DTypeOfDescr(const std::string& descr) {
  for (const auto& [d, dtype] : kDescrs) {
    if (descr == d) return dtype;
  }
  return std::nullopt;
}

const char* DescrOf(ir::DType dtype) {
  for (const auto& [d, t] : kDescrs) {
    if (t == dtype) return d;
  }
  return "<f4";  // not reached: every dtype but bf16 has a descriptor
}

}  // namespace

absl::StatusOr<ir::Literal> ReadNpy(const std::string& path) {
  // Bounded by what an array may hold (2^31 elements of 8 bytes) and a
  // header.
  CW_ASSIGN_OR_RETURN(std::string bytes,
                      ReadInputFile(path, (int64_t{16} << 30) + (int64_t{1} << 20), ".npy array"));
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a .npy file we read: ", why));
  };
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0) return bad("no NumPy magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    at = 12;
  } else {
    return bad(absl::StrCat("format version ", major));
  }
  if (header_len > kMaxHeader || at + header_len > bytes.size()) return bad("header length");
  const std::string header = bytes.substr(at, header_len);
  at += header_len;
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'"))) return bad("no descr");
  const std::string descr = m[1];
  if (std::regex_search(header, m, std::regex("'fortran_order':\\s*True"))) {
    return bad("Fortran order (save it C-ordered)");
  }
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) return bad("no shape");
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (absl::string_view part : absl::StrSplit(std::string(m[1]), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d) || d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
      return bad(absl::StrCat("dimension '", part, "'"));
    }
    dims.push_back(d);
    n *= d;
  }
  const size_t data = bytes.size() - at;
  const auto need = [&](size_t width) -> absl::Status {
    if (data != static_cast<size_t>(n) * width) {
      return bad(absl::StrCat("holds ", data, " bytes of data for ", n, " elements of ", descr));
    }
    return absl::OkStatus();
  };
  const char* p = bytes.data() + at;
  if (std::optional<ir::DType> dtype = DTypeOfDescr(descr)) {
    if (absl::Status s = need(static_cast<size_t>(ir::ByteSize(*dtype))); !s.ok()) return s;
    ir::Literal l(ir::Shape(*dtype, dims));
    if (n > 0) std::memcpy(l.data(), p, l.byte_size());
    if (*dtype == ir::DType::kPred) {
      for (uint8_t& v : l.mutable_values<uint8_t>()) v = v != 0;
    }
    return l;
  }
  if (descr == "<f8") {
    if (absl::Status s = need(8); !s.ok()) return s;
    ir::Literal l(ir::Shape(ir::DType::kF32, dims));
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, p + i * 8, 8);
      l.mutable_values<float>()[static_cast<size_t>(i)] = static_cast<float>(d);
    }
    return l;
  }
  return bad(absl::StrCat("dtype ", descr,
                          " (float32, float16, float64, int32, int64, int8, uint8 and bool are "
                          "read)"));
}

absl::Status WriteNpy(const std::string& path, const ir::Literal& literal) {
  // NumPy has no bfloat16: it is written as float32, which holds it exactly.
  if (literal.shape().dtype == ir::DType::kBF16) {
    return WriteNpy(path, ir::ConvertLiteral(literal, ir::DType::kF32));
  }
  const ir::Shape& s = literal.shape();
  const char* descr = DescrOf(s.dtype);
  std::string shape = absl::StrJoin(s.dims, ", ");
  if (s.dims.size() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                    shape, "), }");
  // Magic, version, length, header padded with spaces to 64 bytes, newline.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  f.write(kMagic, 6);
  const char version[2] = {1, 0};
  f.write(version, 2);
  const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  f.write(len, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(literal.data()), static_cast<std::streamsize>(literal.byte_size()));
  if (!f) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace causeway::tools
