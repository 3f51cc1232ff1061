// Tokenizers, splits and seeded batches of causeway/models/text_data.h.
#include "causeway/models/text_data.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "causeway/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace causeway::models {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

TEST(TokenizerTest, CharactersOfTheTextInCodePointOrderRoundTrip) {
  const std::string text = "héllo wörld\n";
  ASSERT_OK_AND_ASSIGN(Tokenizer t, Tokenizer::ForText(TokenizerKind::kChars, text));
  EXPECT_EQ(t.vocab_size(), 10);  // \n ' ' d h l o r w é ö
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t.Encode(text));
  EXPECT_EQ(ids.size(), 12u);  // characters, not bytes
  EXPECT_EQ(ids[0], 3);        // 'h' after \n, ' ' and d
  EXPECT_EQ(t.Decode(ids), text);
  EXPECT_THAT(t.Encode("xyz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not in the vocabulary")));
  EXPECT_THAT(Tokenizer::ForText(TokenizerKind::kChars, "a\xff").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid UTF-8")));
}

TEST(TokenizerTest, BytesCoverAnyFile) {
  const Tokenizer t = Tokenizer::Bytes();
  EXPECT_EQ(t.vocab_size(), 256);
  const std::string raw("a\xff\x00z", 4);
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, t.Encode(raw));
  EXPECT_EQ(ids, (std::vector<int32_t>{97, 255, 0, 122}));
  EXPECT_EQ(t.Decode(ids), raw);
}

TEST(TextDatasetTest, SplitsNinetyTenAndDrawsReproducibleWindows) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "abcdefghij";
  ASSERT_OK_AND_ASSIGN(TextDataset d, TextDataset::FromText(text, TokenizerKind::kChars, 8));
  EXPECT_EQ(d.train_tokens(), 900);
  EXPECT_EQ(d.val_tokens(), 100);
  const TokenBatch a = d.Sample(Split::kTrain, 1, 0, 7, 3, 8);
  const TokenBatch b = d.Sample(Split::kTrain, 1, 0, 7, 3, 8);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_FALSE(d.Sample(Split::kTrain, 1, 0, 8, 3, 8).inputs == a.inputs);
  EXPECT_FALSE(d.Sample(Split::kTrain, 2, 0, 7, 3, 8).inputs == a.inputs);
  // Targets are the inputs shifted by one token.
  const auto x = a.inputs.values<int32_t>(), y = a.targets.values<int32_t>();
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i + 1 < 8; ++i) EXPECT_EQ(y[r * 8 + i], x[r * 8 + i + 1]);
    EXPECT_EQ((x[r * 8] + 1) % 10, x[r * 8 + 1]);
  }
}

TEST(TextDatasetTest, MissingEmptyAndShortFilesAreNamed) {
  const std::string dir = ::testing::TempDir();
  EXPECT_THAT(TextDataset::Load(dir + "/no-such-file.txt", TokenizerKind::kChars, 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no-such-file.txt")));
  const std::string empty = dir + "/empty.txt";
  std::ofstream(empty).close();
  EXPECT_THAT(TextDataset::Load(empty, TokenizerKind::kChars, 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty.txt is empty")));
  std::remove(empty.c_str());
  // 50 tokens: 45 train, 5 validation; a window of 8 needs 9.
  EXPECT_THAT(TextDataset::FromText(std::string(50, 'a'), TokenizerKind::kBytes, 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too short")));
}

}  // namespace
}  // namespace causeway::models
