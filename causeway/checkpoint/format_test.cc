#include "causeway/checkpoint/format.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/testing/checkpoint_sample.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace causeway::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

// This process's scratch folder, removed when the tests end.
fs::path ScratchRoot() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return fs::path(tmp != nullptr ? tmp : "/tmp") /
         ("checkpoint_format_test." + std::to_string(getpid()));
}

class RemoveScratch : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(ScratchRoot()); }
};
const ::testing::Environment* const kRemoveScratch =
    ::testing::AddGlobalTestEnvironment(new RemoveScratch);

// A fresh folder under the scratch folder.
std::string Scratch(const std::string& name) {
  const fs::path root = ScratchRoot() / name;
  fs::remove_all(root);
  fs::create_directories(root);
  return root.string();
}

// The sample checkpoint (causeway/testing/checkpoint_sample.h) committed
// as `step` under a fresh root: "w", [4, 6] f32 0, 1, 2, ... as two row
// halves, and "step".
struct Saved {
  std::string root;
  Manifest manifest;
  std::vector<float> values;
};

Saved SaveRowHalves(const std::string& name, int64_t step, int keep) {
  Saved s;
  s.root = Scratch(name);
  s.values.resize(24);
  std::iota(s.values.begin(), s.values.end(), 0.0f);
  absl::StatusOr<std::string> folder = BeginSave(s.root, step);
  CW_CHECK_OK(folder.status());
  s.manifest = testing::WriteSampleCheckpoint(*folder);
  s.manifest.step = step;
  CW_CHECK_OK(Commit(s.root, s.manifest, keep));
  return s;
}

TEST(CheckpointFormatTest, AnArraySavedInPiecesReadsBackWholeOrAsAnyBox) {
  const Saved s = SaveRowHalves("roundtrip", 7, 3);
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> steps, CommittedSteps(s.root));
  EXPECT_THAT(steps, ::testing::ElementsAre(7));
  ASSERT_OK_AND_ASSIGN(Manifest m, ReadManifest(StepFolder(s.root, 7)));
  EXPECT_EQ(m.step, 7);
  const ArrayEntry* w = m.Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->sharding, "mesh data=2, P(data)");
  std::vector<float> whole(24, -1);
  ASSERT_OK(ReadBox(StepFolder(s.root, 7), *w, {0, 0}, {4, 6}, whole.data()));
  EXPECT_EQ(whole, s.values);
  // Another sharding: columns 2..4 of rows 1..2, across both pieces.
  std::vector<float> box(2 * 3, -1);
  ASSERT_OK(ReadBox(StepFolder(s.root, 7), *w, {1, 2}, {2, 3}, box.data()));
  EXPECT_THAT(box, ::testing::ElementsAre(8, 9, 10, 14, 15, 16));
}

TEST(CheckpointFormatTest, ABoxReadsOnlyThePiecesItOverlaps) {
  const Saved s = SaveRowHalves("only_needed", 1, 1);
  const std::string folder = StepFolder(s.root, 1);
  ASSERT_OK_AND_ASSIGN(Manifest m, ReadManifest(folder));
  // The second half is gone: the first half still reads.
  fs::remove(folder + "/w.1");
  std::vector<float> top(12, -1);
  ASSERT_OK(ReadBox(folder, *m.Find("w"), {0, 0}, {2, 6}, top.data()));
  EXPECT_EQ(top, std::vector<float>(s.values.begin(), s.values.begin() + 12));
  std::vector<float> all(24);
  EXPECT_THAT(ReadBox(folder, *m.Find("w"), {0, 0}, {4, 6}, all.data()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("w.1")));
}

// Pieces of a chunk (4 MiB) or more are written past the page cache in
// whole blocks, the last one padded and the file cut back: sizes that are
// and are not a multiple of a block, and more than one chunk, read back
// whole and pass their checksums; a corrupt byte in the last block is
// caught.
TEST(CheckpointFormatTest, LargePiecesOfAnySizeReadBack) {
  const std::string root = Scratch("large");
  ASSERT_OK_AND_ASSIGN(std::string folder, BeginSave(root, 1));
  for (int64_t n : {int64_t{1} << 20, (int64_t{1} << 20) + 250, (int64_t{5} << 20) / 2 + 3}) {
    std::vector<float> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 0.5f);
    const std::string file = absl::StrCat("big.", n);
    ASSERT_OK_AND_ASSIGN(Piece p, WritePiece(folder, file, {n}, ir::DType::kF32, {0}, {n},
                                             v.data()));
    EXPECT_EQ(p.bytes, n * 4);
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(folder + "/" + file)), n * 4);
    ArrayEntry entry{file, ir::DType::kF32, {n}, "", {p}};
    std::vector<float> back(static_cast<size_t>(n), -1);
    ASSERT_OK(ReadBox(folder, entry, {0}, {n}, back.data()));
    EXPECT_EQ(back, v) << n;
    {
      std::fstream f(folder + "/" + file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(n * 4 - 1);
      f.put('\x7f');
    }
    EXPECT_THAT(ReadBox(folder, entry, {0}, {n}, back.data()),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("does not match its checksum")));
  }
}

TEST(CheckpointFormatTest, ACorruptOrTruncatedFileIsAnErrorNamingItNeverNumbers) {
  const Saved s = SaveRowHalves("corrupt", 2, 1);
  const std::string folder = StepFolder(s.root, 2);
  ASSERT_OK_AND_ASSIGN(Manifest m, ReadManifest(folder));
  {
    std::fstream f(folder + "/w.0", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5);
    f.put('\x7f');
  }
  std::vector<float> all(24, -1);
  EXPECT_THAT(ReadBox(folder, *m.Find("w"), {0, 0}, {4, 6}, all.data()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("w.0 does not match its checksum")));
  // The same where the box is the piece's own, read straight into the
  // destination.
  std::vector<float> top(12, -1);
  EXPECT_THAT(ReadBox(folder, *m.Find("w"), {0, 0}, {2, 6}, top.data()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("w.0 does not match its checksum")));
  fs::resize_file(folder + "/w.1", 40);
  EXPECT_THAT(ReadBox(folder, *m.Find("w"), {2, 0}, {2, 6}, all.data() + 12),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("w.1 is 40 bytes, not the 48 expected")));
  // A manifest cut short is not a manifest.
  fs::resize_file(folder + "/manifest.json", 30);
  EXPECT_THAT(ReadManifest(folder),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a JSON object")));
}

TEST(CheckpointFormatTest, ASaveCutShortLeavesThePreviousCheckpointAndIsNotOne) {
  const Saved s = SaveRowHalves("cut_short", 10, 2);
  // A later save that never committed: files written, no manifest.
  ASSERT_OK_AND_ASSIGN(std::string partial, BeginSave(s.root, 20));
  std::vector<float> v(12, 1.0f);
  ASSERT_OK(WritePiece(partial, "w.0", {4, 6}, ir::DType::kF32, {0, 0}, {2, 6}, v.data())
                .status());
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> steps, CommittedSteps(s.root));
  EXPECT_THAT(steps, ::testing::ElementsAre(10));
  ASSERT_OK_AND_ASSIGN(Manifest m, ReadManifest(StepFolder(s.root, 10)));
  std::vector<float> all(24);
  ASSERT_OK(ReadBox(StepFolder(s.root, 10), *m.Find("w"), {0, 0}, {4, 6}, all.data()));
  EXPECT_EQ(all, s.values);
  // Saving step 20 again starts from an empty folder.
  ASSERT_OK_AND_ASSIGN(partial, BeginSave(s.root, 20));
  EXPECT_TRUE(fs::is_empty(partial));
}

TEST(CheckpointFormatTest, ACheckpointIsNeverReplacedNorSavedBehindANewerOne) {
  const Saved s = SaveRowHalves("never_replaced", 30, 3);
  EXPECT_THAT(BeginSave(s.root, 30).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("newest checkpoint")));
  EXPECT_THAT(BeginSave(s.root, 29).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("step 30")));
  Manifest again = s.manifest;
  EXPECT_THAT(Commit(s.root, again, 3), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
  EXPECT_THAT(BeginSave(s.root, kMaxStep + 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("99999999")));
  // A commit whose pieces are not all there commits nothing.
  ASSERT_OK_AND_ASSIGN(std::string partial, BeginSave(s.root, 31));
  again.step = 31;
  EXPECT_THAT(Commit(s.root, again, 3), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w.0")));
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> steps, CommittedSteps(s.root));
  EXPECT_THAT(steps, ::testing::ElementsAre(30));
  // Two pieces may not share a file: the second write is refused.
  std::vector<float> v(12, 0.0f);
  ASSERT_OK(WritePiece(partial, "p", {4, 6}, ir::DType::kF32, {0, 0}, {2, 6}, v.data()).status());
  EXPECT_THAT(WritePiece(partial, "p", {4, 6}, ir::DType::kF32, {2, 0}, {2, 6}, v.data()).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, ::testing::_));
}

TEST(CheckpointFormatTest, AManifestCannotMakeAReaderAllocateWhatTheFileDoesNotHold) {
  // 4 TiB claimed for a piece whose file holds 8 bytes: refused by its size,
  // before anything is allocated.
  const std::string folder = Scratch("huge");
  const float two[2] = {1, 2};
  ASSERT_OK_AND_ASSIGN(Piece p, WritePiece(folder, "h", {2}, ir::DType::kF32, {0}, {2}, two));
  ArrayEntry huge{"h", ir::DType::kF32, {int64_t{1} << 40}, "", {p}};
  huge.pieces[0].extent = {int64_t{1} << 40};
  huge.pieces[0].bytes = int64_t{4} << 40;
  Manifest m;
  m.arrays.push_back(huge);
  ASSERT_OK_AND_ASSIGN(Manifest back, FromJson(ToJson(m)));
  float one = 0;
  EXPECT_THAT(ReadBox(folder, back.arrays[0], {0}, {1}, &one),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is 8 bytes, not the 4398046511104")));
}

TEST(CheckpointFormatTest, OnlyTheNewestKeepCheckpointsAreKept) {
  const std::string root = Scratch("keep");
  for (int64_t step : {5, 10, 15, 20}) {
    ASSERT_OK_AND_ASSIGN(std::string folder, BeginSave(root, step));
    const int32_t x = static_cast<int32_t>(step);
    ASSERT_OK_AND_ASSIGN(Piece p, WritePiece(folder, "x", {}, ir::DType::kI32, {}, {}, &x));
    Manifest m;
    m.step = step;
    m.arrays.push_back(ArrayEntry{"x", ir::DType::kI32, {}, "replicated", {p}});
    ASSERT_OK(Commit(root, m, 2));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> steps, CommittedSteps(root));
  EXPECT_THAT(steps, ::testing::ElementsAre(15, 20));
  ASSERT_OK_AND_ASSIGN(Manifest m, ReadManifest(StepFolder(root, 20)));
  int32_t x = 0;
  ASSERT_OK(ReadBox(StepFolder(root, 20), *m.Find("x"), {}, {}, &x));
  EXPECT_EQ(x, 20);
}

// With CAUSEWAY_CHECKPOINT_SAMPLE=DIR: a sample checkpoint left in DIR for
// scripts/read_checkpoint.py to read (checkpoint_reader_test): "w", f32
// [4, 6] holding 0 .. 23 in two row halves, and "step", i32 [] holding 7.
TEST(CheckpointFormatTest, WritesASampleForTheReaderScript) {
  const char* dir = std::getenv("CAUSEWAY_CHECKPOINT_SAMPLE");
  if (dir == nullptr) GTEST_SKIP() << "CAUSEWAY_CHECKPOINT_SAMPLE is not set";
  ASSERT_OK_AND_ASSIGN(std::string folder, BeginSave(dir, 7));
  ASSERT_OK(Commit(dir, testing::WriteSampleCheckpoint(folder), 1));
}

TEST(CheckpointFormatTest, MalformedManifestsAreRefusedNamingWhatIsWrong) {
  Manifest good;
  good.step = 3;
  good.arrays.push_back(ArrayEntry{"a", ir::DType::kF32, {4}, "", {}});
  good.arrays[0].pieces.push_back(Piece{"a.0", {0}, {2}, 8, 1});
  good.arrays[0].pieces.push_back(Piece{"a.1", {2}, {2}, 8, 2});
  good.metadata = {{"iteration", "25"}, {"config", "{\"layers\": 4}"}};
  ASSERT_OK_AND_ASSIGN(Manifest back, FromJson(ToJson(good)));
  EXPECT_EQ(back.arrays[0].pieces[1].crc32, 2u);
  EXPECT_EQ(back.metadata, good.metadata);

  auto refused = [&](const std::function<void(Manifest&)>& spoil, const std::string& what) {
    Manifest m = good;
    spoil(m);
    EXPECT_THAT(FromJson(ToJson(m)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)))
        << what;
  };
  refused([](Manifest& m) { m.arrays[0].pieces[1].offset = {1}; }, "overlap");
  refused([](Manifest& m) { m.arrays[0].pieces.pop_back(); }, "hold 2 of its 4 elements");
  refused([](Manifest& m) { m.arrays[0].pieces[0].file = "../etc/passwd"; }, "plain file name");
  refused([](Manifest& m) { m.arrays[0].pieces[0].file = "manifest.json"; }, "plain file name");
  refused([](Manifest& m) { m.arrays[0].pieces[0].bytes = 7; }, "7 bytes for 2 elements");
  refused([](Manifest& m) { m.arrays[0].pieces[1].extent = {5}; }, "not inside");
  refused([](Manifest& m) { m.arrays.push_back(m.arrays[0]); }, "appears twice");
  refused([](Manifest& m) { m.arrays[0].name = ""; }, "array name that is empty");
  refused([](Manifest& m) { m.arrays[0].name = "a\nb"; }, "control characters");
  refused([](Manifest& m) { m.arrays[0].pieces[1].file = "a.0"; }, "two pieces are file a.0");
  refused([](Manifest& m) { m.step = kMaxStep + 1; }, "the step is 100000000");
  // Numbers that are not integers in range, however JSON spells them.
  auto spelled = [&](const std::function<void(nlohmann::json&)>& spoil, const std::string& what) {
    nlohmann::json j = nlohmann::json::parse(ToJson(good));
    spoil(j);
    EXPECT_THAT(FromJson(j.dump()), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)))
        << j.dump();
  };
  spelled([](nlohmann::json& j) { j["step"] = 3.5; }, "the step is 3.5");
  spelled([](nlohmann::json& j) { j["step"] = 1e300; }, "the step is");
  spelled([](nlohmann::json& j) { j["arrays"][0]["pieces"][0]["bytes"] = true; }, "bytes is true");
  spelled([](nlohmann::json& j) { j["arrays"][0]["pieces"][0]["crc32"] = 4294967296; },
          "crc32 is 4294967296");
  spelled([](nlohmann::json& j) { j["arrays"][0]["pieces"][0]["crc32"] = -1; }, "crc32 is -1");
  spelled([](nlohmann::json& j) { j["arrays"][0]["shape"] = {1e19}; }, "shape is");
  spelled([](nlohmann::json& j) { j["arrays"][0]["shape"] = std::vector<int>(17, 1); },
          "at most 16 integers");
  spelled([](nlohmann::json& j) { j["byte_order"] = "big"; }, "little-endian");
  spelled([](nlohmann::json& j) { j["metadata"]["iteration"] = 25; }, "string value");
  spelled([](nlohmann::json& j) { j["metadata"] = {1, 2}; }, "metadata is not an object");
  refused([](Manifest& m) { m.metadata[std::string(300, 'k')] = "v"; }, "1 to 256 bytes");
  EXPECT_THAT(FromJson("{\"format\": \"causeway-checkpoint\", \"version\": 9}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 1")));
  EXPECT_THAT(FromJson("[1, 2"), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("not a JSON object")));
  EXPECT_THAT(FromJson("{\"format\": \"causeway-checkpoint\", \"version\": 1, "
                       "\"byte_order\": \"little\", \"layout\": \"row-major\", \"step\": 1}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing or mistyped")));
  // A write is held to the same rules.
  const std::string folder = Scratch("bad_write");
  float v[2] = {0, 0};
  EXPECT_THAT(WritePiece(folder, "a/b", {4}, ir::DType::kF32, {0}, {2}, v).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plain file name")));
  EXPECT_THAT(WritePiece(folder, "a", {4}, ir::DType::kF32, {3}, {2}, v).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not inside")));
}

}  // namespace
}  // namespace causeway::checkpoint
