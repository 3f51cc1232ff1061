// LM checkpoints as tensor files: see lm_trainer.h for the contents.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/checkpoint/format.h"
#include "causeway/models/gpt.h"
#include "causeway/models/lm_checkpoint_format.h"
#include "causeway/models/tensor_file.h"
#include "nlohmann/json.hpp"

namespace causeway::models {
namespace {

using nlohmann::json;

std::string ConfigJson(const GptConfig& c) {
  return json{{"vocab", c.vocab},   {"context", c.context}, {"layers", c.layers},
              {"heads", c.heads},   {"embed", c.embed},     {"bias", c.bias}}
      .dump();
}

std::string TokenizerJson(const Tokenizer& t) {
  json j = {{"kind", t.kind() == TokenizerKind::kBytes ? "bytes" : "chars"}};
  if (t.kind() == TokenizerKind::kChars) j["code_points"] = t.code_points();
  return j.dump();
}

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<int64_t> PositiveField(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1 ||
      j[key].get<int64_t>() > (int64_t{1} << 24)) {
    return Bad(path, absl::StrCat("config.", key, " is missing or out of range"));
  }
  return j[key].get<int64_t>();
}

absl::StatusOr<GptConfig> ParseConfig(const std::string& text, const std::string& path) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad(path, "config is not a JSON object");
  GptConfig c;
  CW_ASSIGN_OR_RETURN(c.vocab, PositiveField(j, "vocab", path));
  CW_ASSIGN_OR_RETURN(c.context, PositiveField(j, "context", path));
  CW_ASSIGN_OR_RETURN(c.layers, PositiveField(j, "layers", path));
  CW_ASSIGN_OR_RETURN(c.heads, PositiveField(j, "heads", path));
  CW_ASSIGN_OR_RETURN(c.embed, PositiveField(j, "embed", path));
  if (!j.contains("bias") || !j["bias"].is_boolean()) return Bad(path, "config.bias is missing");
  c.bias = j["bias"].get<bool>();
  absl::Status st = c.Validate();
  if (!st.ok()) return Bad(path, std::string(st.message()));
  return c;
}

absl::StatusOr<Tokenizer> ParseTokenizer(const std::string& text, const std::string& path) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kind") || !j["kind"].is_string()) {
    return Bad(path, "tokenizer is not a JSON object with a kind");
  }
  const std::string kind = j["kind"].get<std::string>();
  if (kind == "bytes") return Tokenizer::Bytes();
  if (kind != "chars" || !j.contains("code_points") || !j["code_points"].is_array()) {
    return Bad(path, absl::StrCat("unknown tokenizer '", kind, "'"));
  }
  std::vector<int32_t> cps;
  for (const json& v : j["code_points"]) {
    if (!v.is_number_integer()) return Bad(path, "tokenizer code points must be integers");
    const int64_t cp = v.get<int64_t>();
    if (cp < 0 || cp > 0x10FFFF) return Bad(path, "tokenizer code point out of range");
    cps.push_back(static_cast<int32_t>(cp));
  }
  absl::StatusOr<Tokenizer> t = Tokenizer::FromCodePoints(std::move(cps));
  if (!t.ok()) return Bad(path, std::string(t.status().message()));
  return t;
}

// The tensor groups of a checkpoint, by name prefix.
struct Group {
  const char* name;
  const char* prefix;
  std::vector<ir::Literal> LmCheckpoint::*tensors;
};
constexpr Group kGroups[] = {{"params", "param/", &LmCheckpoint::params},
                             {"adam_m", "adam_m/", &LmCheckpoint::adam_m},
                             {"adam_v", "adam_v/", &LmCheckpoint::adam_v}};

std::string Describe(const GptConfig& c) {
  return absl::StrCat(c.layers, " layers, ", c.heads, " heads, embedding ", c.embed,
                      ", context ", c.context, ", vocabulary ", c.vocab,
                      c.bias ? "" : ", no biases");
}

}  // namespace

std::map<std::string, std::string> LmMetadata(const LmCheckpoint& c) {
  std::map<std::string, std::string> out = {{"format", kCheckpointFormat},
                                            {"config", ConfigJson(c.config)},
                                            {"tokenizer", TokenizerJson(c.tokenizer)},
                                            {"iteration", absl::StrCat(c.iteration)}};
  if (c.schedule.has_value()) {
    out["schedule"] = nlohmann::json{{"learning_rate", c.schedule->learning_rate},
                                     {"min_learning_rate", c.schedule->min_learning_rate},
                                     {"warmup_iters", c.schedule->warmup_iters},
                                     {"decay_iters", c.schedule->decay_iters}}
                          .dump();
  }
  return out;
}

absl::StatusOr<std::string> WriteLmCheckpoint(const std::string& dir, const LmCheckpoint& c) {
  const std::vector<ParamSpec> specs = GptParams(c.config);
  // What ReadLmCheckpoint will ask of the file: every parameter of the
  // config, in its shape, and the moments complete or absent.
  for (const Group& g : kGroups) {
    const std::vector<ir::Literal>& group = c.*g.tensors;
    const bool optional = g.tensors != &LmCheckpoint::params;
    if (optional && c.adam_m.empty() && c.adam_v.empty()) continue;
    if (group.size() != specs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          g.name, ": ", group.size(), " arrays for a model of ", specs.size(), " parameters"));
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const ir::Shape want(ir::DType::kF32, specs[i].dims);
      if (group[i].shape() != want) {
        return absl::InvalidArgumentError(absl::StrCat(g.name, ": ", specs[i].name, " is ",
                                                       group[i].shape().ToString(),
                                                       ", the model's is ", want.ToString()));
      }
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create checkpoint directory ", dir, ": ", ec.message()));
  }
  TensorFile f;
  for (auto& [key, value] : LmMetadata(c)) f.metadata[key] = std::move(value);
  for (const Group& g : kGroups) {
    const std::vector<ir::Literal>& group = c.*g.tensors;
    for (size_t i = 0; i < group.size(); ++i) {
      f.tensors.emplace_back(g.prefix + specs[i].name, group[i]);
    }
  }
  const std::string path = (std::filesystem::path(dir) / kCheckpointFile).string();
  CW_RETURN_IF_ERROR(WriteTensorFile(path, f));
  return path;
}

namespace {

// A checkpoint's tensor by name: absent (nullopt), or its value, or why it
// cannot be read.
using TensorLookup = std::function<absl::StatusOr<std::optional<ir::Literal>>(const std::string&)>;

// The checkpoint that `metadata` and `tensor` hold, read from `path`.
absl::StatusOr<LmCheckpoint> ParseLmCheckpoint(const std::string& path,
                                               const std::map<std::string, std::string>& metadata,
                                               const TensorLookup& tensor) {
  auto meta = [&](const char* key) -> const std::string* {
    auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : &it->second;
  };
  if (meta("format") == nullptr || *meta("format") != kCheckpointFormat) {
    return Bad(path, absl::StrCat("not a Causeway LM checkpoint (format is not ",
                                  kCheckpointFormat, ")"));
  }
  if (meta("config") == nullptr || meta("tokenizer") == nullptr || meta("iteration") == nullptr) {
    return Bad(path, "metadata lacks config, tokenizer or iteration");
  }
  LmCheckpoint c;
  CW_ASSIGN_OR_RETURN(c.config, ParseConfig(*meta("config"), path));
  CW_ASSIGN_OR_RETURN(c.tokenizer, ParseTokenizer(*meta("tokenizer"), path));
  if (!absl::SimpleAtoi(*meta("iteration"), &c.iteration) || c.iteration < 0) {
    return Bad(path, "iteration is not a non-negative integer");
  }
  if (const std::string* s = meta("schedule"); s != nullptr) {
    const nlohmann::json j = nlohmann::json::parse(*s, nullptr, /*allow_exceptions=*/false);
    LrSchedule r;
    const auto number = [&](const char* key) {
      return j.is_object() && j.contains(key) && j[key].is_number();
    };
    if (!number("learning_rate") || !number("min_learning_rate") || !number("warmup_iters") ||
        !number("decay_iters")) {
      return Bad(path, "the schedule in its metadata is not well formed");
    }
    r.learning_rate = j["learning_rate"].get<float>();
    r.min_learning_rate = j["min_learning_rate"].get<float>();
    r.warmup_iters = j["warmup_iters"].get<int64_t>();
    r.decay_iters = j["decay_iters"].get<int64_t>();
    if (!std::isfinite(r.learning_rate) || !(r.learning_rate > 0) ||
        !std::isfinite(r.min_learning_rate) || r.min_learning_rate < 0 || r.warmup_iters < 0 ||
        r.decay_iters < 0) {
      return Bad(path, "the schedule in its metadata is out of range");
    }
    c.schedule = r;
  }
  if (c.tokenizer.vocab_size() != c.config.vocab) {
    return Bad(path, absl::StrCat("vocabulary of ", c.tokenizer.vocab_size(),
                                  " tokens but the model's is ", c.config.vocab));
  }
  const std::vector<ParamSpec> specs = GptParams(c.config);
  // A sharded optimiser's moments, saved flat: cut into their parameters.
  std::optional<ShardedOptimizerLayout> flat;
  if (const std::string* d = meta("flat_data"); d != nullptr) {
    int64_t data = 0;
    if (!absl::SimpleAtoi(*d, &data) || data < 1 || data > (int64_t{1} << 20)) {
      return Bad(path, "flat_data is not a positive integer");
    }
    flat.emplace(c.config, data);
  }
  CW_ASSIGN_OR_RETURN(std::optional<ir::Literal> first_m, tensor("adam_m/" + specs[0].name));
  const bool has_moments = first_m.has_value() || flat.has_value();
  for (const Group& g : kGroups) {
    const bool is_params = g.tensors == &LmCheckpoint::params;
    if (!is_params && !has_moments) break;
    const std::string prefix = g.prefix;
    std::vector<ir::Literal>& group = c.*g.tensors;
    std::optional<ir::Literal> whole;
    if (!is_params && flat.has_value()) {
      const std::string name = absl::StrCat(g.name, ".flat");
      CW_ASSIGN_OR_RETURN(whole, tensor(name));
      if (!whole.has_value()) return Bad(path, absl::StrCat("tensor ", name, " is missing"));
      if (whole->shape() != ir::Shape(ir::DType::kF32, {flat->padded})) {
        return Bad(path, absl::StrCat("tensor ", name, " is ", whole->shape().ToString(),
                                      "; its config and flat_data need f32[", flat->padded, "]"));
      }
    }
    for (size_t k = 0; k < specs.size(); ++k) {
      const ParamSpec& s = specs[k];
      const ir::Shape want(ir::DType::kF32, s.dims);
      std::optional<ir::Literal> lit;
      if (whole.has_value()) {
        lit.emplace(want);
        absl::Span<const float> src = whole->values<float>().subspan(
            static_cast<size_t>(flat->offsets[k]), static_cast<size_t>(want.num_elements()));
        std::copy(src.begin(), src.end(), lit->mutable_values<float>().begin());
      } else {
        CW_ASSIGN_OR_RETURN(lit, tensor(prefix + s.name));
      }
      if (!lit.has_value()) return Bad(path, absl::StrCat("tensor ", prefix, s.name, " is missing"));
      if (lit->shape() != want) {
        return Bad(path, absl::StrCat("tensor ", prefix, s.name, " is ",
                                      lit->shape().ToString(), "; its config needs ",
                                      want.ToString()));
      }
      // A diverged run's NaN or Inf would sample garbage and train on as
      // NaN: refused on load, naming the first such value.
      const absl::Span<const float> v = lit->values<float>();
      for (size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) {
          return Bad(path, absl::StrCat("tensor ", prefix, s.name, " holds ", v[i],
                                        " at element ", i, " (the run it saves had diverged)"));
        }
      }
      group.push_back(*std::move(lit));
    }
  }
  return c;
}

// The step folder of sharded checkpoints that `dir` names: itself, or its
// newest committed step. Null when `dir` holds none.
absl::StatusOr<std::optional<std::string>> ShardedFolder(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(std::filesystem::path(dir) / "manifest.json", ec)) {
    return std::optional<std::string>(dir);
  }
  if (!std::filesystem::is_directory(dir, ec)) return std::optional<std::string>();
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> steps, checkpoint::CommittedSteps(dir));
  if (steps.empty()) return std::optional<std::string>();
  return std::optional<std::string>(checkpoint::StepFolder(dir, steps.back()));
}

}  // namespace

absl::StatusOr<LmCheckpoint> ReadLmCheckpoint(const std::string& dir) {
  CW_ASSIGN_OR_RETURN(std::optional<std::string> folder, ShardedFolder(dir));
  if (folder.has_value()) {
    CW_ASSIGN_OR_RETURN(checkpoint::Manifest m, checkpoint::ReadManifest(*folder));
    auto tensor = [&](const std::string& name) -> absl::StatusOr<std::optional<ir::Literal>> {
      const checkpoint::ArrayEntry* entry = m.Find(name);
      if (entry == nullptr) return std::optional<ir::Literal>();
      ir::Literal value(ir::Shape(entry->dtype, entry->shape));
      CW_RETURN_IF_ERROR(checkpoint::ReadBox(*folder, *entry,
                                             std::vector<int64_t>(entry->shape.size(), 0),
                                             entry->shape, value.data()));
      return std::optional<ir::Literal>(std::move(value));
    };
    return ParseLmCheckpoint(*folder, m.metadata, tensor);
  }
  // The checkpoint's folder, or its file named directly.
  std::error_code ec;
  const std::string path = std::filesystem::is_regular_file(dir, ec)
                               ? dir
                               : (std::filesystem::path(dir) / kCheckpointFile).string();
  CW_ASSIGN_OR_RETURN(TensorFile f, ReadTensorFile(path));
  auto tensor = [&](const std::string& name) -> absl::StatusOr<std::optional<ir::Literal>> {
    const ir::Literal* lit = f.Find(name);
    if (lit == nullptr) return std::optional<ir::Literal>();
    return std::optional<ir::Literal>(*lit);
  };
  return ParseLmCheckpoint(path, f.metadata, tensor);
}

absl::Status CheckCheckpointFits(const LmCheckpoint& c, const GptConfig& config,
                                 const Tokenizer& tokenizer) {
  if (!(c.tokenizer == tokenizer)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint has another vocabulary (", c.tokenizer.vocab_size(), " tokens, ",
        c.tokenizer.kind() == TokenizerKind::kBytes ? "bytes" : "characters",
        ") than this data (", tokenizer.vocab_size(), " tokens, ",
        tokenizer.kind() == TokenizerKind::kBytes ? "bytes" : "characters", ")"));
  }
  if (!(c.config == config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint is of another model (", Describe(c.config),
                     ") than requested (", Describe(config), ")"));
  }
  return absl::OkStatus();
}

}  // namespace causeway::models
