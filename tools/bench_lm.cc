// `causeway bench lm`: training throughput of the GPT model of
// causeway/models for several layouts (and, optionally, the op-by-op build
// of the model), measured in one process with the configurations
// interleaved round by round, and reported as ratios to the first one.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/models/lm_trainer.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"
#include "tools/lm_cluster.h"

namespace causeway::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchLmOptions {
  std::string data;
  std::string layouts = "1x1,2x1";
  std::string kernels = "fused";
  std::string optimizer = "sharded";
  int64_t iters = 60;
  int64_t warmup = 10;
  int rounds = 3;
  int64_t hosts = 1;
  bool json = false;
};

struct Config {
  models::GptLayout layout;
  models::GptKernels kernels;
  bool shard_optimizer = true;
  std::string name;
  std::vector<double> tokens_per_s;
};

// Tokens per second of the steps after `warmup`, on a fresh embedded
// cluster. Evaluation is off; every loss is still fetched and checked.
absl::StatusOr<double> Measure(const models::TextDataset& data, const Config& config,
                               const BenchLmOptions& o) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster =
      LmLocalCluster(config.layout.devices(), o.hosts);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(cluster->get());
  if (!client.ok()) return client.status();
  models::LmTrainOptions t;
  t.layout = config.layout;
  t.kernels = config.kernels;
  t.shard_optimizer = config.shard_optimizer;
  t.iters = o.warmup + o.iters;
  t.decay_iters = t.iters;
  t.eval_every = 0;
  absl::StatusOr<std::unique_ptr<models::LmTrainer>> trainer =
      models::LmTrainer::Create(client->get(), &data, t);
  if (!trainer.ok()) return trainer.status();
  Clock::time_point start;
  models::LmTrainer::Hooks hooks;
  hooks.on_step = [&](const models::StepReport& r) {
    if (r.iteration == o.warmup - 1) start = Clock::now();
  };
  if (o.warmup == 0) start = Clock::now();
  if (absl::Status st = (*trainer)->Train(hooks); !st.ok()) return st;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(o.iters * t.batch * t.model.context) / seconds;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int RunBenchLm(const BenchLmOptions& o) {
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "causeway bench lm: %s\n", std::string(st.message()).c_str());
    return 1;
  };
  absl::StatusOr<models::TextDataset> data =
      models::TextDataset::Load(o.data, models::TokenizerKind::kChars,
                                models::LmTrainOptions().model.context);
  if (!data.ok()) return fail(data.status());
  std::vector<Config> configs;
  std::vector<bool> shard;
  for (absl::string_view s : absl::StrSplit(o.optimizer, ',')) {
    if (s != "sharded" && s != "replicated") {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--optimizer: '", s, "' is neither sharded nor replicated")));
    }
    shard.push_back(s == "sharded");
  }
  for (bool sharded : shard) {
    for (absl::string_view k : absl::StrSplit(o.kernels, ',')) {
      if (k != "fused" && k != "op-by-op") {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("--kernels: '", k, "' is neither fused nor op-by-op")));
      }
      for (absl::string_view l : absl::StrSplit(o.layouts, ',')) {
        std::vector<std::string> dm = absl::StrSplit(l, 'x');
        Config c;
        if (dm.size() != 2 || !absl::SimpleAtoi(dm[0], &c.layout.data) ||
            !absl::SimpleAtoi(dm[1], &c.layout.model) || c.layout.data < 1 ||
            c.layout.model < 1 || c.layout.devices() > 64) {
          return fail(absl::InvalidArgumentError(
              absl::StrCat("--layouts: '", l, "' is not DATAxMODEL (e.g. 2x1)")));
        }
        c.kernels = k == "fused" ? models::GptKernels::kFused : models::GptKernels::kOpByOp;
        // Only a data axis with a model axis of one shards the optimiser; a
        // layout it does not apply to is measured once.
        const bool applies = c.layout.data > 1 && c.layout.model == 1;
        c.shard_optimizer = sharded && applies;
        if (!applies && shard.size() > 1 && sharded != shard.front()) continue;
        c.name = absl::StrCat("data=", c.layout.data, ",model=", c.layout.model, " ", k,
                              applies ? (sharded ? " sharded" : " replicated") : "");
        configs.push_back(std::move(c));
      }
    }
  }
  for (int round = 0; round < o.rounds; ++round) {
    for (Config& c : configs) {
      absl::StatusOr<double> t = Measure(*data, c, o);
      if (!t.ok()) return fail(t.status());
      c.tokens_per_s.push_back(*t);
    }
  }
  if (configs.empty()) return fail(absl::InvalidArgumentError("nothing to measure"));
  const models::LmTrainOptions defaults;  // what Measure trains
  const double tokens_per_step = static_cast<double>(defaults.batch * defaults.model.context);
  const double base = Median(configs[0].tokens_per_s);
  for (const Config& c : configs) {
    const double tps = Median(c.tokens_per_s);
    const double step_ms = 1e3 * tokens_per_step / tps;
    if (o.json) {
      nlohmann::json j = {{"data", c.layout.data},     {"model", c.layout.model},
                          {"kernels", c.kernels == models::GptKernels::kFused ? "fused" : "op-by-op"},
                          {"optimizer", c.shard_optimizer ? "sharded" : "replicated"},
                          {"tokens_per_s", tps},       {"tokens_per_s_runs", c.tokens_per_s},
                          {"step_ms", step_ms},        {"ratio", tps / base},
                          {"rounds", o.rounds},        {"iters", o.iters}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-40s %8.0f tokens/s  %6.1f ms/step  x%.2f\n", c.name.c_str(), tps, step_ms,
                  tps / base);
    }
  }
  return 0;
}

}  // namespace

void AddBenchLmCommand(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<BenchLmOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "lm",
      "GPT training throughput (the `train lm` defaults) per layout, configurations "
      "interleaved round by round; medians and ratios to the first");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--data", o->data, "Text file (character tokens)")->required();
  cmd->add_option("--layouts", o->layouts, "Comma-separated DATAxMODEL meshes");
  cmd->add_option("--kernels", o->kernels, "fused, op-by-op, or both comma-separated");
  cmd->add_option("--optimizer", o->optimizer,
                  "sharded (over the data axis, where there is one), replicated, or both "
                  "comma-separated");
  cmd->add_option("--iters", o->iters, "Timed iterations per run")->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", o->warmup, "Untimed iterations first")->check(CLI::Range(0, 10000));
  cmd->add_option("--rounds", o->rounds, "Runs of each configuration")->check(CLI::Range(1, 100));
  cmd->add_option("--hosts", o->hosts, "Hosts of the embedded cluster the devices split over")
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--json", o->json, "One JSON object per configuration");
  cmd->callback([o, exit_code] { *exit_code = RunBenchLm(*o); });
}

}  // namespace causeway::tools
