#include "causeway/models/text_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "causeway/base/files.h"
#include "causeway/base/status_macros.h"

namespace causeway::models {
namespace {

// Decodes UTF-8 into code points; INVALID_ARGUMENT at the first bad
// sequence (overlong forms, surrogates and values past U+10FFFF included).
absl::StatusOr<std::vector<int32_t>> DecodeUtf8(absl::string_view text) {
  std::vector<int32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    int len = 0;
    int32_t cp = 0;
    if (c < 0x80) {
      len = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      len = 0;
    }
    bool ok = len > 0 && i + static_cast<size_t>(len) <= n;
    for (int k = 1; ok && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static constexpr int32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (ok && (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("not valid UTF-8 at byte ", i, " (use --tokenizer bytes)"));
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

void AppendUtf8(int32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// SplitMix64: mixes the seed words into one generator seed.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::ForText(TokenizerKind kind, absl::string_view text) {
  if (kind == TokenizerKind::kBytes) return Bytes();
  CW_ASSIGN_OR_RETURN(std::vector<int32_t> cps, DecodeUtf8(text));
  std::set<int32_t> distinct(cps.begin(), cps.end());
  return FromCodePoints(std::vector<int32_t>(distinct.begin(), distinct.end()));
}

absl::StatusOr<Tokenizer> Tokenizer::FromCodePoints(std::vector<int32_t> code_points) {
  if (code_points.empty()) return absl::InvalidArgumentError("empty vocabulary");
  for (size_t i = 0; i < code_points.size(); ++i) {
    const int32_t cp = code_points[i];
    if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ||
        (i > 0 && code_points[i - 1] >= cp)) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocabulary entry ", i, " (", cp,
                       ") is not a code point in increasing order"));
    }
  }
  Tokenizer t;
  t.kind_ = TokenizerKind::kChars;
  t.code_points_ = std::move(code_points);
  return t;
}

Tokenizer Tokenizer::Bytes() { return Tokenizer(); }

int64_t Tokenizer::vocab_size() const {
  return kind_ == TokenizerKind::kBytes ? 256 : static_cast<int64_t>(code_points_.size());
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text) const {
  if (kind_ == TokenizerKind::kBytes) {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  CW_ASSIGN_OR_RETURN(std::vector<int32_t> cps, DecodeUtf8(text));
  for (int32_t& cp : cps) {
    auto it = std::lower_bound(code_points_.begin(), code_points_.end(), cp);
    if (it == code_points_.end() || *it != cp) {
      return absl::InvalidArgumentError(
          absl::StrCat("character U+", absl::Hex(cp), " is not in the vocabulary"));
    }
    cp = static_cast<int32_t>(it - code_points_.begin());
  }
  return cps;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (kind_ == TokenizerKind::kBytes) {
      out.push_back(static_cast<char>(id));
    } else {
      AppendUtf8(code_points_[static_cast<size_t>(id)], out);
    }
  }
  return out;
}

absl::StatusOr<TextDataset> TextDataset::Load(const std::string& path, TokenizerKind kind,
                                              int64_t context) {
  absl::StatusOr<std::string> text = ReadInputFile(path, kMaxFileBytes, "data file");
  // Every way a file cannot be read is this function's INVALID_ARGUMENT.
  if (absl::IsNotFound(text.status())) return absl::InvalidArgumentError(text.status().message());
  if (!text.ok()) return text.status();
  return FromText(*text, kind, context, path);
}

absl::StatusOr<TextDataset> TextDataset::FromText(absl::string_view text, TokenizerKind kind,
                                                  int64_t context, const std::string& name) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " is empty"));
  if (context < 1) return absl::InvalidArgumentError("context must be >= 1");
  TextDataset d;
  absl::StatusOr<Tokenizer> tok = Tokenizer::ForText(kind, text);
  if (!tok.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", tok.status().message()));
  d.tokenizer_ = *std::move(tok);
  CW_ASSIGN_OR_RETURN(std::vector<int32_t> ids, d.tokenizer_.Encode(text));
  const size_t n_train = ids.size() * 9 / 10;
  d.train_.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_train));
  d.val_.assign(ids.begin() + static_cast<std::ptrdiff_t>(n_train), ids.end());
  const int64_t need = context + 1;
  if (d.train_tokens() < need || d.val_tokens() < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is too short: ", ids.size(), " tokens give ", d.train_tokens(),
        " for training and ", d.val_tokens(), " for validation; each needs at least ", need,
        " (context + 1)"));
  }
  return d;
}

TokenBatch TextDataset::Sample(Split split, uint64_t seed, uint64_t stream, int64_t index,
                               int64_t batch, int64_t context) const {
  const std::vector<int32_t>& data = split == Split::kTrain ? train_ : val_;
  std::mt19937_64 rng(Mix(Mix(Mix(seed) ^ (split == Split::kTrain ? 1 : 2)) ^ Mix(stream)) ^
                      static_cast<uint64_t>(index));
  // Start positions in [0, size - context - 1], so the target window fits.
  std::uniform_int_distribution<int64_t> start(
      0, static_cast<int64_t>(data.size()) - context - 1);
  std::vector<int32_t> x(static_cast<size_t>(batch * context));
  std::vector<int32_t> y(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = start(rng);
    std::copy_n(data.begin() + s, context, x.begin() + b * context);
    std::copy_n(data.begin() + s + 1, context, y.begin() + b * context);
  }
  return {ir::Literal::I32({batch, context}, x), ir::Literal::I32({batch, context}, y)};
}

}  // namespace causeway::models
