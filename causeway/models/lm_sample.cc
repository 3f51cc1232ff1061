// Text generation from a trained LM: one compiled logits function on a
// one-device mesh, called once per new token on the last `context` tokens.
#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/models/lm_trainer.h"

namespace causeway::models {

absl::StatusOr<std::string> SampleText(Client* client, const LmCheckpoint& checkpoint,
                                       const SampleOptions& o,
                                       const std::function<void(const std::string&)>& on_text) {
  if (!(o.temperature > 0) || !std::isfinite(o.temperature)) {
    return absl::InvalidArgumentError("temperature must be a positive number");
  }
  if (o.tokens < 0 || o.top_k < 0) {
    return absl::InvalidArgumentError("tokens and top-k must be >= 0");
  }
  const GptConfig& c = checkpoint.config;
  const Tokenizer& tok = checkpoint.tokenizer;
  std::vector<int32_t> ids;
  if (o.prompt.empty()) {
    absl::StatusOr<std::vector<int32_t>> nl = tok.Encode("\n");
    ids.push_back(nl.ok() ? (*nl)[0] : 0);
  } else {
    absl::StatusOr<std::vector<int32_t>> p = tok.Encode(o.prompt);
    if (!p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: ", p.status().message()));
    }
    ids = *std::move(p);
  }
  if (on_text) on_text(tok.Decode(ids));

  const GptLayout layout;
  CW_ASSIGN_OR_RETURN(ir::Function logits_fn, GptLogitsFunction(c, layout, 1));
  CW_ASSIGN_OR_RETURN(Mesh mesh, client->AllocateMesh({{kDataAxis, 1}, {kModelAxis, 1}}));
  const std::vector<ParamSpec> specs = GptParams(c);
  CompileOptions options;
  for (const ParamSpec& s : specs) options.in_shardings.push_back(ParamSharding(s));
  options.in_shardings.push_back(Sharding::Replicated(2));
  options.out_shardings.push_back(Sharding::Replicated(3));
  CW_ASSIGN_OR_RETURN(CompiledFunction logits, client->Compile(logits_fn, mesh, options));
  std::vector<Array> args;
  for (size_t i = 0; i < specs.size(); ++i) {
    CW_ASSIGN_OR_RETURN(Array p, client->Put(checkpoint.params[i], mesh, ParamSharding(specs[i])));
    args.push_back(std::move(p));
  }
  args.emplace_back();

  std::mt19937_64 rng(o.seed);
  std::vector<double> probs(static_cast<size_t>(c.vocab));
  for (int64_t n = 0; n < o.tokens; ++n) {
    // The window: the last `context` tokens, padded at the end (the model is
    // causal, so padding after `pos` does not change the logits at `pos`).
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(ids.size()), c.context);
    std::vector<int32_t> window(static_cast<size_t>(c.context), 0);
    std::copy(ids.end() - len, ids.end(), window.begin());
    CW_ASSIGN_OR_RETURN(args.back(),
                        client->Put(ir::Literal::I32({1, c.context}, window), mesh,
                                    Sharding::Replicated(2)));
    CW_ASSIGN_OR_RETURN(std::vector<Array> out, client->Call(logits, args));
    Future<ir::Literal> f = out[0].Fetch();
    const absl::StatusOr<ir::Literal>* v = f.AwaitWithTimeout(o.result_timeout);
    if (v == nullptr) {
      return absl::DeadlineExceededError(absl::StrCat("token ", n, ": no logits after ",
                                                      absl::FormatDuration(o.result_timeout)));
    }
    if (!v->ok()) return v->status();
    absl::Span<const float> row =
        (*v)->values<float>().subspan(static_cast<size_t>((len - 1) * c.vocab),
                                      static_cast<size_t>(c.vocab));
    double max = -INFINITY;
    for (float x : row) max = std::max<double>(max, x);
    double threshold = -INFINITY;
    if (o.top_k > 0 && o.top_k < c.vocab) {
      std::vector<float> sorted(row.begin(), row.end());
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                       std::greater<float>());
      threshold = sorted[static_cast<size_t>(o.top_k - 1)];
    }
    for (size_t i = 0; i < probs.size(); ++i) {
      probs[i] = row[i] < threshold ? 0.0 : std::exp((row[i] - max) / o.temperature);
    }
    std::discrete_distribution<int32_t> pick(probs.begin(), probs.end());
    const int32_t next = pick(rng);
    ids.push_back(next);
    if (on_text) on_text(tok.Decode({next}));
  }
  return tok.Decode(ids);
}

}  // namespace causeway::models
