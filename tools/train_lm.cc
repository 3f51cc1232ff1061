// `causeway train lm` and `causeway sample`: the GPT model of
// causeway/models on a text file, on the embedded cluster or a distributed
// one. Flag parsing, progress output and wiring only; the model, the data
// and the training loop live in causeway/models.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "causeway/cluster/counters.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/models/lm_trainer.h"
#include "nlohmann/json.hpp"
#include "tools/blas_kernels.h"
#include "tools/commands.h"
#include "tools/lm_cluster.h"
#include "tools/train_lm_elastic.h"

namespace causeway::tools {
namespace {

// The signal that interrupted `train lm` (0: none). Set by the handler, on
// whichever thread the signal reached, and read by the training loop before
// each step: a lock-free atomic, safe in a signal handler.
std::atomic<int> g_interrupted{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnInterrupt(int sig) {
  g_interrupted.store(sig, std::memory_order_relaxed);
  // A second Ctrl-C ends the process at once, checkpoint or not.
  std::signal(sig, SIG_DFL);
}

// This process's command line, each argument quoted for a POSIX shell
// where it needs to be, with --resume added if it is not there.
std::string ResumeCommand() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args = absl::StrSplit(all, '\0', absl::SkipEmpty());
  if (std::find(args.begin(), args.end(), "--resume") == args.end()) args.push_back("--resume");
  std::string out;
  for (const std::string& a : args) {
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=,:@%+", c);
    });
    if (!out.empty()) out += ' ';
    out += plain ? a : "'" + absl::StrReplaceAll(a, {{"'", "'\\''"}}) + "'";
  }
  return out;
}

using Clock = std::chrono::steady_clock;
using models::LmTrainOptions;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Hms(double s) {
  const int64_t t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return absl::StrCat(t / 3600, "h", (t / 60) % 60, "m");
  if (t >= 60) return absl::StrCat(t / 60, "m", t % 60, "s");
  return absl::StrCat(t, "s");
}

// Makes `dir` (and its parents) and writes and removes a file in it.
absl::Status CheckWritableFolder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--checkpoint ", dir, " cannot be made: ", ec.message()));
  }
  const std::string probe =
      (std::filesystem::path(dir) / absl::StrCat(".causeway-write-test-", getpid())).string();
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint ", dir, " cannot be written: ", std::strerror(errno),
        " (checked before training, not at the first save)"));
  }
  close(fd);
  unlink(probe.c_str());
  return absl::OkStatus();
}

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "causeway %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return 1;
}

// A command line whose flags do not go together.
int Usage(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "causeway %s: %s\n", command.c_str(), message.c_str());
  return kExitUsage;
}

// The embedded cluster (`local`) or a connection to a distributed one.
struct Connection {
  std::unique_ptr<LocalCluster> local;
  std::unique_ptr<RemoteCluster> remote;
  ClusterConnection* connection = nullptr;
  std::unique_ptr<Client> client;
};

// `hosts` applies to the embedded cluster: the devices split evenly over
// that many hosts.
absl::StatusOr<Connection> Connect(const std::string& cluster, int64_t devices, int64_t hosts,
                                   double timeout_s, const ClientShare& share = {},
                                   const LocalClusterOptions* local_options = nullptr,
                                   bool trace = false, const std::string& device_kind = "cpu",
                                   int64_t memory_bytes = 0) {
  Connection c;
  ClusterConnection* connection = nullptr;
  if (cluster == "local") {
    absl::StatusOr<LocalClusterOptions> lo =
        local_options != nullptr ? *local_options : LmLocalClusterOptions(devices, hosts);
    if (!lo.ok()) return lo.status();
    lo->trace = trace;
    lo->device_kind = device_kind;
    if (memory_bytes > 0) lo->device_memory_bytes = memory_bytes;
    absl::StatusOr<std::unique_ptr<LocalCluster>> l = LocalCluster::Create(*lo);
    if (!l.ok()) return l.status();
    c.local = *std::move(l);
    connection = c.local.get();
  } else {
    RemoteClusterOptions o;
    o.address = cluster;
    o.timeout = absl::Seconds(timeout_s);
    absl::StatusOr<std::unique_ptr<RemoteCluster>> r = RemoteCluster::Connect(o);
    if (!r.ok()) return r.status();
    c.remote = *std::move(r);
    connection = c.remote.get();
    if (trace) {
      if (absl::Status s = c.remote->StartTrace(); !s.ok()) return s;
    }
  }
  ClientOptions options;
  options.share = share;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(connection, options);
  if (!client.ok()) return client.status();
  c.client = *std::move(client);
  c.connection = connection;
  return c;
}

struct TrainLmFlags {
  std::string data;
  std::string tokenizer = "chars";
  LmTrainOptions train;
  int64_t devices = 1;
  int64_t hosts = 1;
  std::string device_kind = "cpu";
  int64_t memory_bytes = 0;
  std::string parallel = "data";
  std::string mesh;
  int64_t decay_iters = -1;  // -1: --iters
  // Whether --lr, --min-lr and --warmup were given: on --resume, each not
  // given continues as the checkpoint recorded it.
  bool lr_given = false;
  bool min_lr_given = false;
  bool warmup_given = false;
  int64_t log_every = 10;
  bool no_bias = false;
  bool resume = false;
  int64_t stop_at = -1;
  bool json = false;
  bool op_by_op = false;
  // --shard-optimizer / --replicate-optimizer; neither: sharded on the
  // embedded cluster, replicated on a distributed one.
  bool shard_optimizer = false;
  bool replicate_optimizer = false;
  std::string cluster = "local";
  // auto: sharded on the embedded cluster, a file on a distributed one.
  std::string checkpoint_format = "auto";
  double timeout_s = 30;
  ClientShare share;
  // --parallel pipeline
  std::string schedule = "gpipe";
  int64_t islands = 1;
  std::string trace_path;
  double dcn_latency_us = 0;
  double dcn_gbps = 0;
  bool elastic = false;
  double replace_timeout_s = 60;
};

// "data=2,model=2" into a layout.
absl::StatusOr<models::GptLayout> ParseMesh(const std::string& text) {
  models::GptLayout layout;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(part, '=');
    int64_t n = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--mesh: '", part, "' is not AXIS=N (N >= 1)"));
    }
    if (kv[0] == models::kDataAxis) {
      layout.data = n;
    } else if (kv[0] == models::kModelAxis) {
      layout.model = n;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--mesh: unknown axis '", kv[0], "' (axes are data and model)"));
    }
  }
  return layout;
}

int RunTrainLm(TrainLmFlags f) {
  const std::string cmd = "train lm";
  LmTrainOptions& o = f.train;
  o.model.bias = !f.no_bias;
  o.kernels = f.op_by_op ? models::GptKernels::kOpByOp : models::GptKernels::kFused;
  // Across worker processes each collective is a round of messages between
  // them, and the sharded step has three (reduce-scatter, the loss and norm,
  // all-gather) where the replicated one has one: on this kind of machine
  // that costs more than half of AdamW saves (docs/LM.md).
  o.shard_optimizer = f.shard_optimizer || (!f.replicate_optimizer && f.cluster == "local");
  o.decay_iters = f.decay_iters >= 0 ? f.decay_iters : o.iters;
  o.checkpoint_format = f.checkpoint_format == "sharded" ||
                                (f.checkpoint_format == "auto" && f.cluster == "local")
                            ? models::LmCheckpointFormat::kSharded
                            : models::LmCheckpointFormat::kFile;
  // The embedded cluster of a pipeline or of data parallelism across islands.
  std::unique_ptr<LocalClusterOptions> multi_mesh_cluster;
  if (f.parallel == "pipeline") {
    if (o.pipeline.stages < 2) return Usage(cmd, "--parallel pipeline needs --stages >= 2");
    // --mesh data=D is each stage's; the stages are hosts of their own.
    if (!f.mesh.empty()) {
      absl::StatusOr<models::GptLayout> layout = ParseMesh(f.mesh);
      if (!layout.ok()) return Fail(cmd, layout.status());
      if (layout->model != 1) {
        return Usage(cmd, "--parallel pipeline: --mesh takes the data axis of each stage "
                          "(model=1)");
      }
      o.pipeline.data = layout->data;
    }
    o.pipeline.schedule =
        f.schedule == "1f1b" ? models::PipelineSchedule::k1F1B : models::PipelineSchedule::kGPipe;
    o.pipeline.islands = f.islands;
    if (f.cluster == "local") {
      DcnOptions dcn;
      dcn.latency = absl::Microseconds(f.dcn_latency_us);
      dcn.bytes_per_second = f.dcn_gbps * 1e9 / 8;
      absl::StatusOr<LocalClusterOptions> lo =
          LmPipelineClusterOptions(o.pipeline.stages, o.pipeline.data, f.islands, dcn);
      if (!lo.ok()) return Usage(cmd, std::string(lo.status().message()));
      multi_mesh_cluster = std::make_unique<LocalClusterOptions>(*lo);
    }
  } else if (o.pipeline.stages > 1 || f.schedule != "gpipe") {
    return Usage(cmd, "--stages, --microbatches and --schedule go with --parallel pipeline");
  } else if (f.islands > 1) {
    // Data parallelism across islands: --devices split evenly over them.
    if (f.parallel != "data" || !f.mesh.empty()) {
      return Usage(cmd, "--islands goes with --parallel data (or pipeline), without --mesh");
    }
    if (f.devices % f.islands != 0) {
      return Usage(cmd, absl::StrCat("--devices ", f.devices, " do not split evenly over ",
                                     f.islands, " islands"));
    }
    o.islands = {f.islands, f.devices / f.islands};
    if (f.cluster == "local") {
      LocalClusterOptions lo;
      lo.islands = static_cast<int>(f.islands);
      lo.hosts_per_island = 1;
      lo.devices_per_host = static_cast<int>(f.devices / f.islands);
      lo.dcn.latency = absl::Microseconds(f.dcn_latency_us);
      lo.dcn.bytes_per_second = f.dcn_gbps * 1e9 / 8;
      multi_mesh_cluster = std::make_unique<LocalClusterOptions>(lo);
    }
  }
  if (f.parallel == "pipeline" || f.islands > 1) {
    o.layout = {1, 1};
  } else if (!f.mesh.empty()) {
    absl::StatusOr<models::GptLayout> layout = ParseMesh(f.mesh);
    if (!layout.ok()) return Fail(cmd, layout.status());
    o.layout = *layout;
  } else if (f.parallel == "data") {
    o.layout = {f.devices, 1};
  } else {
    o.layout = {1, f.devices};
  }
  // Checkpoints go into a folder; a file here would fail only at the first
  // save, after training.
  std::error_code ec;
  if (!o.checkpoint_dir.empty() && std::filesystem::exists(o.checkpoint_dir, ec) &&
      !std::filesystem::is_directory(o.checkpoint_dir, ec)) {
    return Usage(cmd, absl::StrCat("--checkpoint ", o.checkpoint_dir,
                                   " is not a folder: train lm writes its checkpoints into one "
                                   "(sample also takes the file)"));
  }
  // A folder this process writes (the embedded cluster's, and a file
  // checkpoint's, which the client writes) must be writable before the
  // first step, not at the first save after it.
  if (!o.checkpoint_dir.empty() &&
      (f.cluster == "local" || o.checkpoint_format == models::LmCheckpointFormat::kFile)) {
    if (absl::Status w = CheckWritableFolder(o.checkpoint_dir); !w.ok()) return Fail(cmd, w);
  }
  if (f.elastic) {
    if (f.cluster == "local") {
      return Usage(cmd, "--elastic recovers from lost workers of a distributed cluster: give "
                        "--cluster grpc://HOST:PORT");
    }
    if (o.checkpoint_dir.empty() || o.checkpoint_every <= 0) {
      return Usage(cmd, "--elastic resumes from its checkpoints: give --checkpoint DIR and "
                        "--checkpoint-every N");
    }
    if (f.parallel == "pipeline" || f.islands > 1 || !f.trace_path.empty() || f.stop_at >= 0) {
      return Usage(cmd, "--elastic trains on one mesh: not with --parallel pipeline, --islands, "
                        "--trace or --stop-at");
    }
  }
  // Flags that do not go together are a usage error, found before reading
  // the data (no check depends on the vocabulary, which is the data's).
  o.model.vocab = 1;
  if (absl::Status st = o.Validate(); !st.ok()) return Usage(cmd, std::string(st.message()));
  const auto kind = f.tokenizer == "bytes" ? models::TokenizerKind::kBytes
                                           : models::TokenizerKind::kChars;
  absl::StatusOr<models::TextDataset> data = models::TextDataset::Load(f.data, kind, o.model.context);
  if (!data.ok()) return Fail(cmd, data.status());
  o.model.vocab = data->tokenizer().vocab_size();
  if (absl::Status st = o.Validate(); !st.ok()) return Fail(cmd, st);

  std::unique_ptr<models::LmCheckpoint> resume;
  if (f.resume) {
    absl::StatusOr<models::LmCheckpoint> c = models::ReadLmCheckpoint(o.checkpoint_dir);
    if (!c.ok()) return Fail(cmd, c.status());
    resume = std::make_unique<models::LmCheckpoint>(*std::move(c));
    // The learning-rate schedule goes on as the checkpoint recorded it, but
    // for what this command line gives anew.
    if (const std::optional<models::LrSchedule>& s = resume->schedule; s.has_value()) {
      if (!f.lr_given) o.learning_rate = s->learning_rate;
      if (!f.min_lr_given) o.min_learning_rate = s->min_learning_rate;
      if (!f.warmup_given) o.warmup_iters = s->warmup_iters;
      if (f.decay_iters < 0) o.decay_iters = s->decay_iters;
      if (absl::Status st = o.Validate(); !st.ok()) return Fail(cmd, st);
    }
    if (resume->iteration >= o.iters) {
      return Usage(cmd, absl::StrCat("the checkpoint in ", o.checkpoint_dir, " is at iteration ",
                                     resume->iteration, ", and --iters ", o.iters,
                                     " leaves nothing to train: give a larger --iters"));
    }
  }
  if (f.cluster != "local" && f.device_kind != "cpu") {
    return Usage(cmd, "--device-kind goes with the embedded cluster (a remote cluster's workers "
                      "choose theirs: causeway worker --device-kind)");
  }
  if (f.cluster != "local" && f.memory_bytes > 0) {
    return Usage(cmd, "--memory goes with the embedded cluster (a remote cluster's workers "
                      "give theirs: causeway worker --memory)");
  }
  if (f.elastic) {
    ElasticTrainLmArgs a;
    a.cluster = f.cluster;
    a.timeout_s = f.timeout_s;
    a.replace_timeout_s = f.replace_timeout_s;
    a.log_every = f.log_every;
    a.json = f.json;
    a.share = f.share;
    a.interrupted = &g_interrupted;
    g_interrupted.store(0, std::memory_order_relaxed);
    std::signal(SIGINT, OnInterrupt);
    std::signal(SIGTERM, OnInterrupt);
    const int rc = RunTrainLmElastic(a, *data, o, resume.get());
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    const int sig = g_interrupted.load(std::memory_order_relaxed);
    if (rc == 0 && sig != 0) {
      std::printf("interrupted (%s); resume with: %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                  ResumeCommand().c_str());
      return 128 + sig;
    }
    return rc;
  }
  absl::StatusOr<Connection> conn = Connect(f.cluster, o.layout.devices(), f.hosts, f.timeout_s,
                                            f.share, multi_mesh_cluster.get(),
                                            !f.trace_path.empty(), f.device_kind,
                                            f.memory_bytes);
  if (!conn.ok()) return Fail(cmd, conn.status());
  absl::StatusOr<std::unique_ptr<models::LmTrainer>> trainer =
      models::LmTrainer::Create(conn->client.get(), &*data, o, resume.get());
  if (!trainer.ok()) return Fail(cmd, trainer.status());

  int64_t params = 0;
  for (const models::ParamSpec& s : models::GptParams(o.model)) {
    int64_t n = 1;
    for (int64_t d : s.dims) n *= d;
    params += n;
  }
  const double flops_per_step = models::GptTrainFlopsPerStep(o.model, o.batch);
  const int64_t tokens_per_step = o.batch * o.model.context;
  const int64_t first = (*trainer)->iteration();
  const bool pipelined = o.pipeline.stages > 1;
  const bool across_islands = o.islands.islands > 1;
  const int64_t devices = pipelined        ? o.pipeline.stages * o.pipeline.data
                          : across_islands ? o.islands.islands * o.islands.data
                                           : o.layout.devices();
  const std::string placement =
      pipelined ? absl::StrCat("pipeline of ", o.pipeline.stages, " stages (", f.schedule, ", ",
                               o.pipeline.microbatches, " micro-batches, data=", o.pipeline.data,
                               " per stage, ", o.pipeline.islands, " island",
                               o.pipeline.islands > 1 ? "s" : "", ")")
      : across_islands
          ? absl::StrCat("data-parallel over ", o.islands.islands, " islands of data=",
                         o.islands.data, " (gradients exchanged between the islands)")
          : absl::StrCat("mesh data=", o.layout.data, " model=", o.layout.model);
  const BlasKernels blas = DescribeBlasKernels();
  if (f.json) {
    nlohmann::json j = {{"event", "start"}, {"params", params}, {"vocab", o.model.vocab},
                        {"blas_core", blas.core}, {"blas_narrowed", blas.narrowed},
                        {"train_tokens", data->train_tokens()}, {"val_tokens", data->val_tokens()},
                        {"data_axis", pipelined        ? o.pipeline.data
                                      : across_islands ? o.islands.data
                                                       : o.layout.data},
                        {"model_axis", o.layout.model}, {"devices", devices},
                        {"first_iteration", first}, {"iters", o.iters}};
    if (!pipelined && !across_islands && o.layout.data > 1 && o.layout.model == 1) {
      j["optimizer"] = o.shard_optimizer ? "sharded" : "replicated";
    }
    if (pipelined) {
      j["stages"] = o.pipeline.stages;
      j["microbatches"] = o.pipeline.microbatches;
      j["schedule"] = f.schedule;
      j["islands"] = o.pipeline.islands;
    }
    if (across_islands) j["islands"] = o.islands.islands;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %lld layers, %lld heads, embedding %lld, context %lld, vocabulary %lld: "
                "%.2fM parameters\n",
                static_cast<long long>(o.model.layers), static_cast<long long>(o.model.heads),
                static_cast<long long>(o.model.embed), static_cast<long long>(o.model.context),
                static_cast<long long>(o.model.vocab), static_cast<double>(params) / 1e6);
    std::printf("data: %lld training and %lld validation tokens; %s; iterations %lld..%lld\n",
                static_cast<long long>(data->train_tokens()),
                static_cast<long long>(data->val_tokens()), placement.c_str(),
                static_cast<long long>(first), static_cast<long long>(o.iters));
    std::printf("%s\n", BlasKernelsLine(blas).c_str());
  }
  std::fflush(stdout);

  // Device counters from zero, so the busy time below is this run's.
  const bool counters = ClusterCounters(*conn->connection, /*reset=*/true).ok();
  const Clock::time_point start = Clock::now();
  Clock::duration eval_time{};
  Clock::time_point window_start = start;
  Clock::duration window_eval{};
  int64_t window_first = first;
  int64_t done = 0;
  // When the first step ended: it includes compiling and the first run's
  // set-up, so the time left is estimated from the steps after it.
  Clock::time_point first_step_end;
  float last_loss = NAN;
  models::EvalReport last_eval{-1, NAN, NAN, 0};
  models::LmTrainer::Hooks hooks;
  hooks.on_step = [&](const models::StepReport& r) {
    if (++done == 1) first_step_end = Clock::now();
    last_loss = r.loss;
    const bool last = r.iteration + 1 == o.iters;
    if (f.log_every <= 0 || (r.iteration % f.log_every != 0 && !last)) return;
    const Clock::time_point now = Clock::now();
    const double window_s = std::max(1e-9, Seconds(now - window_start - window_eval));
    const double tok_s =
        static_cast<double>((r.iteration + 1 - window_first) * tokens_per_step) / window_s;
    const double elapsed = Seconds(now - start);
    const bool has_eta = done > 1;
    const double eta = has_eta ? Seconds(now - first_step_end) / static_cast<double>(done - 1) *
                                     static_cast<double>(o.iters - r.iteration - 1)
                               : 0.0;
    if (f.json) {
      nlohmann::json j = {{"event", "step"},       {"iteration", r.iteration},
                          {"loss", r.loss},         {"grad_norm", r.grad_norm},
                          {"lr", r.learning_rate},  {"tokens_per_s", tok_s},
                          {"elapsed_s", elapsed},   {"eta_s", nullptr}};
      if (has_eta) j["eta_s"] = eta;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("iter %5lld  loss %.4f  lr %.2e  %7.0f tok/s  elapsed %s  eta %s\n",
                  static_cast<long long>(r.iteration), r.loss, r.learning_rate, tok_s,
                  Hms(elapsed).c_str(), has_eta ? Hms(eta).c_str() : "-");
    }
    std::fflush(stdout);
    window_start = now;
    window_eval = {};
    window_first = r.iteration + 1;
  };
  hooks.on_eval = [&](const models::EvalReport& r) {
    // Evaluation time is kept out of the training throughput.
    const auto seconds = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(r.seconds));
    eval_time += seconds;
    window_eval += seconds;
    last_eval = r;
    if (f.json) {
      nlohmann::json j = {{"event", "eval"}, {"iteration", r.iteration},
                          {"train_loss", r.train_loss}, {"val_loss", r.val_loss},
                          {"seconds", r.seconds}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("eval  %5lld  train loss %.4f  val loss %.4f\n",
                  static_cast<long long>(r.iteration), r.train_loss, r.val_loss);
    }
    std::fflush(stdout);
  };
  std::string last_checkpoint;
  hooks.on_checkpoint = [&](int64_t it, const std::string& path) {
    last_checkpoint = path;
    if (f.json) {
      nlohmann::json j = {{"event", "checkpoint"}, {"iteration", it}, {"path", path}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("checkpoint %lld: %s\n", static_cast<long long>(it), path.c_str());
    }
    std::fflush(stdout);
  };
  // Ctrl-C or SIGTERM: the steps queued finish, a checkpoint is written
  // (with --checkpoint), and the command that resumes it is printed.
  g_interrupted.store(0, std::memory_order_relaxed);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  hooks.should_stop = [] { return g_interrupted.load(std::memory_order_relaxed) != 0; };
  absl::Status st = (*trainer)->Train(hooks, f.stop_at);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (!st.ok()) return Fail(cmd, st);
  if (const int sig = g_interrupted.load(std::memory_order_relaxed); sig != 0) {
    const int64_t at = (*trainer)->iteration();
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    const std::string resume = last_checkpoint.empty() ? "" : ResumeCommand();
    if (f.json) {
      nlohmann::json j = {{"event", "interrupted"}, {"signal", name}, {"iteration", at}};
      j["checkpoint"] = last_checkpoint.empty() ? nlohmann::json() : nlohmann::json(last_checkpoint);
      j["resume"] = resume.empty() ? nlohmann::json() : nlohmann::json(resume);
      std::printf("%s\n", j.dump().c_str());
    } else if (!last_checkpoint.empty()) {
      std::printf("interrupted (%s) at iteration %lld; checkpoint %s\nresume with: %s\n",
                  name.c_str(), static_cast<long long>(at), last_checkpoint.c_str(),
                  resume.c_str());
    } else {
      std::printf("interrupted (%s) at iteration %lld; nothing saved (%s)\n", name.c_str(),
                  static_cast<long long>(at),
                  o.checkpoint_dir.empty() ? "no --checkpoint" : "no step ran");
    }
    std::fflush(stdout);
    return 128 + sig;
  }
  if (!f.trace_path.empty()) {
    // Every step's launches, waits and transfers (with each piece's time in
    // flight between hosts and islands), tracks named by island, host and
    // device; on a distributed cluster, collected from every worker and
    // the coordinator, with the schedulers' and this client's tracks.
    if (conn->remote != nullptr) {
      if (absl::Status s = conn->remote->CollectTrace(); !s.ok()) return Fail(cmd, s);
    }
    TraceRecorder& trace = conn->remote != nullptr ? conn->remote->trace() : conn->local->trace();
    if (absl::Status s = trace.WriteChromeJson(f.trace_path); !s.ok()) return Fail(cmd, s);
    if (!f.json) std::printf("trace written to %s (open in Perfetto)\n", f.trace_path.c_str());
  }
  const double wall = Seconds(Clock::now() - start);
  const double train_s = std::max(1e-9, wall - Seconds(eval_time));
  // Busy time counts a device from launch to finish of each step, so it
  // includes time parked in a collective: an upper bound on kernel time.
  double busy_s = 0;
  double collective_s = 0;
  int64_t busy_devices = 0;
  if (absl::StatusOr<std::vector<DeviceCounters>> c = ClusterCounters(*conn->connection, false);
      counters && c.ok()) {
    for (const DeviceCounters& d : *c) {
      if (d.launches == 0) continue;
      busy_s += static_cast<double>(d.busy_us) / 1e6;
      collective_s += static_cast<double>(d.busy_us - d.compute_us()) / 1e6;
      ++busy_devices;
    }
  }
  const double busy_fraction =
      busy_devices > 0 ? busy_s / (static_cast<double>(busy_devices) * wall) : 0.0;
  // The devices' own work: busy time outside collectives.
  const double compute_fraction =
      busy_devices > 0 ? (busy_s - collective_s) / (static_cast<double>(busy_devices) * wall)
                       : 0.0;
  const models::LmTrainer::LoopTimes& loop = (*trainer)->loop_times();
  const double dispatch_ms =
      loop.steps > 0 ? absl::ToDoubleMilliseconds(loop.dispatch) / static_cast<double>(loop.steps)
                     : 0.0;
  const double tok_s = static_cast<double>(done * tokens_per_step) / train_s;
  const double flops = flops_per_step * static_cast<double>(done) / train_s;
  if (f.json) {
    nlohmann::json j = {{"event", "summary"},       {"iterations", done},
                        {"wall_s", wall},           {"train_s", train_s},
                        {"tokens_per_s", tok_s},
                        {"model_flops_per_s", flops}, {"final_loss", last_loss},
                        {"train_loss", last_eval.train_loss},
                        {"val_loss", last_eval.val_loss},
                        {"devices", devices},
                        {"device_compute_fraction", compute_fraction},
                        {"device_busy_fraction", busy_fraction},
                        {"dispatch_ms_per_step", dispatch_ms},
                        {"step_ms", train_s * 1e3 / static_cast<double>(std::max<int64_t>(done, 1))}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("done: %lld iterations in %.1f s (%.1f s training, the rest evaluation); "
                "training %.0f tokens/s, %.2f GFLOP/s of model work",
                static_cast<long long>(done), wall, train_s, tok_s, flops / 1e9);
    if (last_eval.iteration >= 0) {
      std::printf("; val loss %.4f at iteration %lld", last_eval.val_loss,
                  static_cast<long long>(last_eval.iteration));
    }
    std::printf("\n");
    std::printf("per step: %.1f ms; control plane (batch, put, call) %.2f ms; devices computing "
                "%.1f %% of the wall time, busy %.1f %% (busy includes collective waits)\n",
                train_s * 1e3 / static_cast<double>(std::max<int64_t>(done, 1)), dispatch_ms,
                100.0 * compute_fraction, 100.0 * busy_fraction);
  }
  return 0;
}

struct SampleFlags {
  std::string checkpoint;
  models::SampleOptions sample;
  std::string cluster = "local";
  double timeout_s = 30;
};

int RunSample(const SampleFlags& f) {
  const std::string cmd = "sample";
  absl::StatusOr<models::LmCheckpoint> c = models::ReadLmCheckpoint(f.checkpoint);
  if (!c.ok()) return Fail(cmd, c.status());
  absl::StatusOr<Connection> conn = Connect(f.cluster, 1, 1, f.timeout_s);
  if (!conn.ok()) return Fail(cmd, conn.status());
  absl::StatusOr<std::string> text =
      models::SampleText(conn->client.get(), *c, f.sample, [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
  if (!text.ok()) {
    std::printf("\n");
    return Fail(cmd, text.status());
  }
  std::printf("\n");
  return 0;
}

}  // namespace

void AddTrainLmCommand(CLI::App* train, int* exit_code) {
  auto f = std::make_shared<TrainLmFlags>();
  LmTrainOptions& o = f->train;
  CLI::App* lm = train->add_subcommand(
      "lm",
      "GPT-style language model on a text file (character or byte tokens), data- and/or "
      "tensor-parallel, with AdamW, evaluation, checkpoints and resume");
  lm->option_defaults()->always_capture_default();
  lm->add_option("--data", f->data, "Text file to train on (first 90 % train, rest validation)")
      ->required();
  lm->add_option("--tokenizer", f->tokenizer, "chars (the file's characters) or bytes (256)")
      ->check(CLI::IsMember({"chars", "bytes"}));
  lm->add_option("--layers", o.model.layers, "Transformer blocks")->check(CLI::Range(1, 256));
  lm->add_option("--heads", o.model.heads, "Attention heads")->check(CLI::Range(1, 1024));
  lm->add_option("--embed", o.model.embed, "Embedding width")->check(CLI::Range(1, 1 << 14));
  lm->add_option("--context", o.model.context, "Tokens per window")->check(CLI::Range(1, 1 << 14));
  lm->add_flag("--no-bias", f->no_bias, "No biases in linear layers and LayerNorms");
  lm->add_option("--batch", o.batch, "Windows per step (global; divisible by the data axis)")
      ->check(CLI::Range(1, 1 << 20));
  lm->add_option("--iters", o.iters, "Training iterations")->check(CLI::Range(0, 100000000));
  lm->add_option("--lr", o.learning_rate, "Peak learning rate")->check(CLI::PositiveNumber)->check(Finite());
  lm->add_option("--min-lr", o.min_learning_rate, "Learning rate at the end of the decay")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  lm->add_option("--warmup", o.warmup_iters, "Linear warm-up iterations")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  lm->add_option("--lr-decay-iters", f->decay_iters,
                 "Iteration where the cosine decay ends (-1: --iters)");
  lm->add_option("--beta1", o.adamw.beta1, "AdamW beta1")->check(CLI::Range(0.0, 0.9999999))->check(Finite());
  lm->add_option("--beta2", o.adamw.beta2, "AdamW beta2")->check(CLI::Range(0.0, 0.9999999))->check(Finite());
  lm->add_option("--weight-decay", o.adamw.weight_decay,
                 "AdamW weight decay (on the weight matrices and embeddings)")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  lm->add_option("--grad-clip", o.adamw.grad_clip, "Global gradient-norm clip (0: off)")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  lm->add_option("--eval-every", o.eval_every, "Evaluate every N iterations (0: never)")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  lm->add_option("--eval-batches", o.eval_batches, "Batches per split per evaluation")
      ->check(CLI::Range(1, 100000));
  lm->add_option("--log-every", f->log_every, "Progress line every N iterations (0: none)")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  lm->add_option("--seed", o.seed, "Seed of the initial weights and the batch order");
  lm->add_option("--devices", f->devices, "Devices, used as --parallel says")
      ->check(CLI::Range(1, 1024));
  lm->add_option("--hosts", f->hosts,
                 "Embedded cluster: hosts the devices are split over (collectives then cross "
                 "hosts)")
      ->check(CLI::Range(1, 1024));
  lm->add_option("--device-kind", f->device_kind,
                 DeviceKindHelp("Embedded cluster: kind of its devices"));
  lm->add_option("--memory", f->memory_bytes,
                 "Embedded cluster: memory per device, bytes (0: the default budget of 1 GiB; "
                 "a GPU's devices may be given up to its own memory, which `causeway gpus` "
                 "shows)")
      ->check(CLI::NonNegativeNumber);
  lm->add_option("--parallel", f->parallel,
                 "data: batch split over the devices; tensor: heads and MLP split over them; "
                 "pipeline: layers split into --stages stages, each on a host of its own")
      ->check(CLI::IsMember({"data", "tensor", "pipeline"}));
  lm->add_option("--stages", o.pipeline.stages, "Pipeline stages (--parallel pipeline)")
      ->check(CLI::Range(1, 256));
  lm->add_option("--microbatches", o.pipeline.microbatches,
                 "Micro-batches per step (--parallel pipeline; the batch splits into them)")
      ->check(CLI::Range(1, 4096));
  lm->add_option("--schedule", f->schedule, "Pipeline schedule: gpipe or 1f1b")
      ->check(CLI::IsMember({"gpipe", "1f1b"}));
  lm->add_option("--islands", f->islands,
                 "Islands: a pipeline's stages spread over them, or (--parallel data) the "
                 "devices split over them, gradients exchanged between them (embedded "
                 "cluster: emulated data-center network)")
      ->check(CLI::Range(1, 64));
  lm->add_option("--trace", f->trace_path,
                 "Write a Chrome trace (Perfetto) of the run to FILE (with --cluster: collected "
                 "from every worker and the coordinator; keep --iters small: every launch is "
                 "recorded)");
  lm->add_option("--dcn-latency-us", f->dcn_latency_us,
                 "Embedded cluster, --islands > 1: one-way latency between islands")
      ->check(CLI::Range(0.0, 1e7));
  lm->add_option("--dcn-gbps", f->dcn_gbps,
                 "Embedded cluster, --islands > 1: bandwidth between islands (0: unlimited)")
      ->check(CLI::Range(0.0, 1e6));
  lm->add_option("--mesh", f->mesh, "Both at once, e.g. data=2,model=2 (overrides --devices)")
      ->check(CLI::Validator(
          [](const std::string& text) {
            absl::StatusOr<models::GptLayout> layout = ParseMesh(text);
            if (layout.ok()) return std::string();
            // CLI11 names the option itself.
            std::string why(layout.status().message());
            return why.rfind("--mesh: ", 0) == 0 ? why.substr(8) : why;
          },
          "AXIS=N,..."));
  lm->add_option("--max-in-flight", o.max_in_flight,
                 "Steps dispatched ahead of the oldest loss not yet read")
      ->check(CLI::Range(1, 1024));
  CLI::Option* checkpoint =
      lm->add_option("--checkpoint", o.checkpoint_dir, "Checkpoint directory");
  lm->add_option("--checkpoint-every", o.checkpoint_every,
                 "Also checkpoint every N iterations (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  lm->add_option("--checkpoint-format", f->checkpoint_format,
                 "sharded: each host writes its own shards while training goes on, in step "
                 "folders (docs/CHECKPOINT.md; a distributed cluster's workers need "
                 "--checkpoint-root and the client's view of the folder); file: one "
                 "model.safetensors gathered to this process, training waiting; auto: sharded "
                 "on the embedded cluster, file on a distributed one. --resume reads either")
      ->check(CLI::IsMember({"auto", "sharded", "file"}))
      ->capture_default_str();
  lm->add_option("--checkpoint-keep", o.checkpoint_keep,
                 "Sharded checkpoints: the newest N steps kept")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  lm->add_flag("--resume", f->resume, "Continue from the checkpoint in --checkpoint")
      ->needs(checkpoint);
  lm->add_option("--stop-at", f->stop_at,
                 "Stop after this iteration as if interrupted (checkpoint written)");
  lm->add_flag("--json", f->json, "One JSON object per line");
  lm->add_flag("--op-by-op", f->op_by_op,
               "Build GELU, softmax and layer norm from elementwise ops instead of the fused "
               "kernels (same model; to measure what fusion buys)");
  CLI::Option* shard = lm->add_flag(
      "--shard-optimizer", f->shard_optimizer,
      "Data parallelism (model axis 1): each device updates its share of the parameters "
      "with its share of the AdamW moments (ZeRO stage 1; the default on the embedded cluster)");
  lm->add_flag("--replicate-optimizer", f->replicate_optimizer,
               "Every data-parallel device updates every parameter (the default with --cluster "
               "grpc://...; the same updates either way)")
      ->excludes(shard);
  lm->add_option("--cluster", f->cluster,
                 "local (embedded) or grpc://HOST:PORT (token from $CAUSEWAY_TOKEN)")
      ->check(ClusterAddress(true));
  lm->add_flag("--elastic", f->elastic,
               "Distributed cluster: recover from lost workers by itself, resuming from the "
               "last checkpoint on a replacement or on the survivors (the data axis shrinks, "
               "the global batch stays; needs --checkpoint and --checkpoint-every; "
               "docs/ELASTIC.md)");
  lm->add_option("--replace-timeout", f->replace_timeout_s,
                 "--elastic: seconds to wait for replacement workers after a loss before "
                 "going on with the survivors")
      ->check(CLI::Range(0.0, 86400.0))
      ->check(Finite());
  lm->add_option("--timeout", f->timeout_s, "Seconds to wait for a distributed cluster")
      ->check(CLI::PositiveNumber)->check(Finite());
  lm->add_option("--weight", f->share.weight,
                 "This client's share of the island's device time against other clients "
                 "(docs/SCHEDULING.md)")
      ->check(CLI::Range(0.0, 1e6))
      ->check(AboveZero())
      ->check(Finite());
  lm->add_option("--priority", f->share.priority, "Priority class, 0 to 7 (higher goes first)")
      ->check(CLI::Range(0, 7));
  lm->callback([f, lm, exit_code] {
    // Given the embedded cluster's shape, the default is the embedded one.
    bool embedded_shape = false;
    for (const char* flag : {"--hosts", "--islands", "--device-kind", "--memory",
                             "--dcn-latency-us", "--dcn-gbps"}) {
      embedded_shape |= lm->count(flag) > 0;
    }
    if (lm->count("--cluster") == 0 && !embedded_shape) {
      f->cluster = DefaultCluster("train lm", "local");
    }
    f->lr_given = lm->count("--lr") > 0;
    f->min_lr_given = lm->count("--min-lr") > 0;
    f->warmup_given = lm->count("--warmup") > 0;
    *exit_code = RunTrainLm(*f);
  });
}

void AddSampleCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<SampleFlags>();
  CLI::App* cmd = app.add_subcommand("sample", "Generate text from a `train lm` checkpoint");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--checkpoint", f->checkpoint,
                  "Checkpoint directory, or its model.safetensors file")
      ->required();
  cmd->add_option("--tokens", f->sample.tokens, "Tokens to generate")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--temperature", f->sample.temperature, "Softmax temperature")
      ->check(CLI::PositiveNumber)->check(Finite());
  cmd->add_option("--top-k", f->sample.top_k, "Sample among the k likeliest tokens (0: all)")
      ->check(CLI::NonNegativeNumber)->check(Finite());
  cmd->add_option("--seed", f->sample.seed, "Sampling seed");
  cmd->add_option("--prompt", f->sample.prompt, "Text to continue (default: a newline)");
  cmd->add_option("--cluster", f->cluster,
                  "local (embedded) or grpc://HOST:PORT (token from $CAUSEWAY_TOKEN)")
      ->check(ClusterAddress(true));
  cmd->add_option("--timeout", f->timeout_s, "Seconds to wait for a distributed cluster")
      ->check(CLI::PositiveNumber)->check(Finite());
  cmd->callback([f, cmd, exit_code] {
    if (cmd->count("--cluster") == 0) f->cluster = DefaultCluster("sample", "local");
    *exit_code = RunSample(*f);
  });
}

}  // namespace causeway::tools
