#include "tools/train_lm_elastic.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/models/lm_elastic.h"
#include "nlohmann/json.hpp"

namespace causeway::tools {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void Print(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int RunTrainLmElastic(const ElasticTrainLmArgs& a, const models::TextDataset& data,
                      const models::LmTrainOptions& o, const models::LmCheckpoint* resume) {
  ElasticOptions e;
  e.cluster.address = a.cluster;
  e.cluster.timeout = absl::Seconds(a.timeout_s);
  e.client.share = a.share;
  e.replace_timeout = absl::Seconds(a.replace_timeout_s);

  const int64_t tokens_per_step = o.batch * o.model.context;
  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  int64_t window_first = 0;
  int64_t steps_run = 0;  // every step run, repeated ones included
  int recoveries = 0;
  int64_t repeated = 0;
  float last_loss = NAN;
  models::EvalReport last_eval{-1, NAN, NAN, 0};

  models::LmElasticHooks hooks;
  hooks.on_attempt = [&](const ElasticAttempt& attempt, const models::LmTrainer& t) {
    window_start = Clock::now();
    window_first = t.iteration();
    const models::GptLayout& l = t.options().layout;
    if (a.json) {
      Print({{"event", "start"}, {"attempt", attempt.number()}, {"devices", attempt.devices()},
             {"data_axis", l.data}, {"model_axis", l.model}, {"first_iteration", t.iteration()},
             {"iters", o.iters}});
    } else {
      std::printf("attempt %d: %lld devices in the cluster, mesh data=%lld model=%lld; "
                  "iterations %lld..%lld\n",
                  attempt.number(), static_cast<long long>(attempt.devices()),
                  static_cast<long long>(l.data), static_cast<long long>(l.model),
                  static_cast<long long>(t.iteration()), static_cast<long long>(o.iters));
      std::fflush(stdout);
    }
  };
  hooks.on_recovery = [&](const RecoveryEvent& r) {
    ++recoveries;
    repeated += r.steps_repeated();
    if (a.json) {
      std::vector<std::string> lost;
      for (HostId h : r.lost_hosts) lost.push_back(h.ToString());
      Print({{"event", "recovery"}, {"number", r.number}, {"lost_hosts", lost},
             {"cause", std::string(r.cause.message())}, {"devices_before", r.devices_before},
             {"devices_after", r.devices_after}, {"replaced", r.replaced},
             {"failed_at_unix_s", absl::ToDoubleSeconds(r.failed_at - absl::UnixEpoch())},
             {"detection_s", absl::ToDoubleSeconds(r.detection)},
             {"wait_s", absl::ToDoubleSeconds(r.wait)},
             {"restore_s", absl::ToDoubleSeconds(r.restore)}, {"resumed_at", r.resumed_at},
             {"steps_repeated", r.steps_repeated()}});
    } else {
      std::printf("%s\n", r.ToString().c_str());
      std::fflush(stdout);
    }
  };
  hooks.train.on_step = [&](const models::StepReport& r) {
    ++steps_run;
    last_loss = r.loss;
    const bool last = r.iteration + 1 == o.iters;
    if (a.log_every <= 0 || (r.iteration % a.log_every != 0 && !last)) return;
    const Clock::time_point now = Clock::now();
    const double window_s = std::max(1e-9, Seconds(now - window_start));
    const double tok_s =
        static_cast<double>((r.iteration + 1 - window_first) * tokens_per_step) / window_s;
    if (a.json) {
      Print({{"event", "step"}, {"iteration", r.iteration}, {"loss", r.loss},
             {"grad_norm", r.grad_norm}, {"lr", r.learning_rate}, {"tokens_per_s", tok_s},
             {"elapsed_s", Seconds(now - start)}});
    } else {
      std::printf("iter %5lld  loss %.4f  lr %.2e  %7.0f tok/s\n",
                  static_cast<long long>(r.iteration), r.loss, r.learning_rate, tok_s);
      std::fflush(stdout);
    }
    window_start = now;
    window_first = r.iteration + 1;
  };
  hooks.train.on_eval = [&](const models::EvalReport& r) {
    last_eval = r;
    if (a.json) {
      Print({{"event", "eval"}, {"iteration", r.iteration}, {"train_loss", r.train_loss},
             {"val_loss", r.val_loss}, {"seconds", r.seconds}});
    } else {
      std::printf("eval  %5lld  train loss %.4f  val loss %.4f\n",
                  static_cast<long long>(r.iteration), r.train_loss, r.val_loss);
      std::fflush(stdout);
    }
  };
  hooks.train.on_checkpoint = [&](int64_t it, const std::string& path) {
    if (a.json) {
      Print({{"event", "checkpoint"}, {"iteration", it}, {"path", path}});
    } else {
      std::printf("checkpoint %lld: %s\n", static_cast<long long>(it), path.c_str());
      std::fflush(stdout);
    }
  };
  if (a.interrupted != nullptr) {
    hooks.train.should_stop = [flag = a.interrupted] {
      return flag->load(std::memory_order_relaxed) != 0;
    };
  }
  const absl::Status st = models::TrainLmElastic(e, &data, o, resume, hooks);
  if (!st.ok()) {
    std::fprintf(stderr, "causeway train lm: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  // Interrupted: the caller says where and how to resume.
  if (a.interrupted != nullptr && a.interrupted->load(std::memory_order_relaxed) != 0) return 0;
  const double wall = Seconds(Clock::now() - start);
  if (a.json) {
    Print({{"event", "summary"}, {"iterations", o.iters}, {"steps_run", steps_run},
           {"recoveries", recoveries}, {"steps_repeated", repeated}, {"wall_s", wall},
           {"final_loss", last_loss}, {"train_loss", last_eval.train_loss},
           {"val_loss", last_eval.val_loss}});
  } else {
    std::printf("done: %lld iterations (%lld steps run, %lld repeated after %d recover%s) in "
                "%.1f s",
                static_cast<long long>(o.iters), static_cast<long long>(steps_run),
                static_cast<long long>(repeated), recoveries, recoveries == 1 ? "y" : "ies", wall);
    if (last_eval.iteration >= 0) {
      std::printf("; val loss %.4f at iteration %lld", last_eval.val_loss,
                  static_cast<long long>(last_eval.iteration));
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace causeway::tools
