// Tensor files: round trip, atomic replacement, and malformed files
// refused without crashing.
#include "causeway/models/tensor_file.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "causeway/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace causeway::models {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

std::string Path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

TensorFile Sample() {
  TensorFile f;
  f.metadata = {{"format", "test"}, {"step", "7"}};
  f.tensors.emplace_back("w", ir::Literal::F32({2, 3}, {1, 2, 3, 4, 5, 6}));
  f.tensors.emplace_back("ids", ir::Literal::I32({3}, {-1, 0, 1}));
  f.tensors.emplace_back("s", ir::Literal::ScalarF32(0.5f));
  return f;
}

TEST(TensorFileTest, RoundTripsTensorsAndMetadata) {
  const std::string path = Path("round_trip.safetensors");
  ASSERT_OK(WriteTensorFile(path, Sample()));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  ASSERT_OK_AND_ASSIGN(TensorFile f, ReadTensorFile(path));
  EXPECT_EQ(f.metadata, Sample().metadata);
  ASSERT_EQ(f.tensors.size(), 3u);
  for (const auto& [name, lit] : Sample().tensors) {
    ASSERT_NE(f.Find(name), nullptr) << name;
    EXPECT_EQ(*f.Find(name), lit) << name;
  }
  // The layout is safetensors': an 8-byte little-endian length, then JSON.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ(n % 8, 0u);
  EXPECT_NE(header.find("\"w\":{\"data_offsets\":[0,24],\"dtype\":\"F32\",\"shape\":[2,3]}"),
            std::string::npos)
      << header;
  std::filesystem::remove(path);
}

TEST(TensorFileTest, TruncatedAndMalformedFilesAreDataLoss) {
  const std::string good = Path("good.safetensors");
  ASSERT_OK(WriteTensorFile(good, Sample()));
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [](const std::string& path, const std::string& b) {
    std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  const std::string bad = Path("bad.safetensors");
  // Every truncation is refused.
  for (size_t cut : {size_t{0}, size_t{4}, size_t{20}, bytes.size() - 1}) {
    write(bad, bytes.substr(0, cut));
    EXPECT_EQ(ReadTensorFile(bad).status().code(), absl::StatusCode::kDataLoss) << cut;
  }
  // A header length past the end of the file.
  std::string huge = bytes;
  const uint64_t n = uint64_t{1} << 40;
  std::memcpy(huge.data(), &n, 8);
  write(bad, huge);
  EXPECT_THAT(ReadTensorFile(bad).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("header length")));
  // Offsets that do not match the shape.
  std::string lie = bytes;
  const size_t at = lie.find("[0,24]");
  ASSERT_NE(at, std::string::npos);
  lie.replace(at, 6, "[0,20]");
  write(bad, lie);
  EXPECT_THAT(ReadTensorFile(bad).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("tensor 'w'")));
  EXPECT_EQ(ReadTensorFile(Path("absent.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace causeway::models
