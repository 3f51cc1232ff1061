// Text data for language-model training: a tokenizer (characters of the
// corpus, or raw bytes), the corpus as token ids split into training and
// validation parts, and seeded random windows drawn from either part.
//
// Batches are a pure function of (seed, split, iteration, batch size,
// context), so the data-order state of a training run is its iteration
// number: a resumed run draws exactly the windows the uninterrupted one
// would have.
#ifndef CAUSEWAY_MODELS_TEXT_DATA_H_
#define CAUSEWAY_MODELS_TEXT_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/ir/literal.h"

namespace causeway::models {

enum class TokenizerKind { kChars, kBytes };

// Maps text to token ids and back. A value type.
//   kChars: the vocabulary is the sorted set of Unicode code points of the
//           corpus (UTF-8); ids are positions in that set.
//   kBytes: 256 tokens, one per byte value; any file is valid.
class Tokenizer {
 public:
  // The tokenizer of `kind` for `text`. INVALID_ARGUMENT for kChars if the
  // text is not valid UTF-8.
  static absl::StatusOr<Tokenizer> ForText(TokenizerKind kind, absl::string_view text);
  // kChars over the given code points (sorted, distinct), e.g. read back
  // from a checkpoint. INVALID_ARGUMENT if they are not.
  static absl::StatusOr<Tokenizer> FromCodePoints(std::vector<int32_t> code_points);
  static Tokenizer Bytes();

  TokenizerKind kind() const { return kind_; }
  int64_t vocab_size() const;
  // kChars: the vocabulary; kBytes: empty.
  const std::vector<int32_t>& code_points() const { return code_points_; }

  // INVALID_ARGUMENT if the text has a character outside the vocabulary or
  // (kChars) is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  // REQUIRES: every id is in [0, vocab_size()).
  std::string Decode(const std::vector<int32_t>& ids) const;

  friend bool operator==(const Tokenizer&, const Tokenizer&) = default;

 private:
  TokenizerKind kind_ = TokenizerKind::kBytes;
  std::vector<int32_t> code_points_;
};

// Input windows and their next-token targets, each i32[batch, context].
struct TokenBatch {
  ir::Literal inputs;
  ir::Literal targets;
};

enum class Split { kTrain, kVal };

// A tokenised corpus: the first 90 % of its tokens for training, the rest
// for validation. Immutable; thread-safe.
class TextDataset {
 public:
  // The largest corpus Load reads: its tokens take 4 bytes each in memory,
  // so 1 GiB of text is 5 GiB resident.
  static constexpr int64_t kMaxFileBytes = int64_t{1} << 30;

  // Reads and tokenises `path`. INVALID_ARGUMENT naming the file if it is
  // missing, unreadable, not a regular file (a directory, a device such as
  // /dev/zero, a pipe), larger than kMaxFileBytes or empty, or if either
  // split is too short to hold one window of `context` + 1 tokens.
  static absl::StatusOr<TextDataset> Load(const std::string& path, TokenizerKind kind,
                                          int64_t context);
  // The same from text in memory (`name` appears in errors).
  static absl::StatusOr<TextDataset> FromText(absl::string_view text, TokenizerKind kind,
                                              int64_t context,
                                              const std::string& name = "text");

  const Tokenizer& tokenizer() const { return tokenizer_; }
  int64_t train_tokens() const { return static_cast<int64_t>(train_.size()); }
  int64_t val_tokens() const { return static_cast<int64_t>(val_.size()); }

  // `batch` random windows of `context` tokens from `split`, drawn from a
  // generator seeded by (seed, split, stream, index): the same arguments
  // always give the same batch. REQUIRES: context <= the one given to Load.
  TokenBatch Sample(Split split, uint64_t seed, uint64_t stream, int64_t index,
                    int64_t batch, int64_t context) const;

 private:
  Tokenizer tokenizer_;
  std::vector<int32_t> train_;
  std::vector<int32_t> val_;
};

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_TEXT_DATA_H_
