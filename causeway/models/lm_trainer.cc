#include "causeway/models/lm_trainer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/checkpoint/format.h"
#include "causeway/models/lm_checkpoint_format.h"

namespace causeway::models {
namespace {

constexpr double kPi = 3.14159265358979323846;

// A sharded optimiser's flat vectors: split over `data`.
Sharding FlatSharding() { return Sharding({{kDataAxis}}); }

// The shardings of a training step's arguments and results, and of the
// evaluation's: `groups` arrays per parameter (the parameters, then each
// moment), `flat_in` / `flat_out` flat vectors split over `data`, the
// batch's inputs and targets, (step, lr) in, the loss and gradient norm out.
void StepShardings(const std::vector<ParamSpec>& specs, int groups, int flat_in, int flat_out,
                   CompileOptions* step, CompileOptions* eval) {
  for (int k = 0; k < groups; ++k) {
    for (const ParamSpec& s : specs) {
      step->in_shardings.push_back(ParamSharding(s));
      step->out_shardings.push_back(ParamSharding(s));
      if (k == 0) eval->in_shardings.push_back(ParamSharding(s));
    }
  }
  for (int k = 0; k < flat_in; ++k) step->in_shardings.push_back(FlatSharding());
  for (int k = 0; k < flat_out; ++k) step->out_shardings.push_back(FlatSharding());
  for (CompileOptions* c : {step, eval}) {
    c->in_shardings.push_back(BatchSharding());
    c->in_shardings.push_back(BatchSharding());
  }
  step->in_shardings.push_back(Sharding::Replicated(1));   // hyper
  step->out_shardings.push_back(Sharding::Replicated(0));  // loss
  step->out_shardings.push_back(Sharding::Replicated(0));  // grad norm
  eval->out_shardings.push_back(Sharding::Replicated(0));
}

}  // namespace

absl::Status LmTrainOptions::Validate() const {
  if (islands.islands > 1) {
    if (pipeline.stages > 1) {
      return absl::InvalidArgumentError(
          "a pipeline spreads its own stages over islands (pipeline.islands); islands.islands "
          "is data parallelism across islands");
    }
    if (layout.data != 1 || layout.model != 1) {
      return absl::InvalidArgumentError(
          "across islands, each island's data axis is islands.data; the whole-model layout "
          "must be 1 x 1");
    }
    CW_RETURN_IF_ERROR(ValidateIslands(model, islands, batch));
  }
  if (pipeline.stages > 1) {
    if (layout.data != 1 || layout.model != 1) {
      return absl::InvalidArgumentError(
          "a pipeline's stages are data-parallel by their own data axis; the whole-model "
          "layout must be 1 x 1");
    }
    CW_RETURN_IF_ERROR(ValidatePipeline(model, pipeline, batch));
  }
  CW_RETURN_IF_ERROR(ValidateLayout(model, layout, batch));
  if (batch < 1) return absl::InvalidArgumentError("batch must be >= 1");
  if (iters < 0) return absl::InvalidArgumentError("iterations must be >= 0");
  if (!(learning_rate > 0) || !std::isfinite(learning_rate) || !(min_learning_rate >= 0) ||
      !std::isfinite(min_learning_rate)) {
    return absl::InvalidArgumentError("learning rates must be finite, lr > 0, min lr >= 0");
  }
  if (warmup_iters < 0 || decay_iters < 0) {
    return absl::InvalidArgumentError("warm-up and decay iterations must be >= 0");
  }
  if (eval_every < 0 || eval_batches < 1) {
    return absl::InvalidArgumentError("eval-every must be >= 0 and eval batches >= 1");
  }
  if (max_in_flight < 1) return absl::InvalidArgumentError("max in flight must be >= 1");
  if (checkpoint_every < 0) return absl::InvalidArgumentError("checkpoint-every must be >= 0");
  if (checkpoint_keep < 1) return absl::InvalidArgumentError("checkpoint-keep must be >= 1");
  if (!(adamw.beta1 >= 0 && adamw.beta1 < 1 && adamw.beta2 >= 0 && adamw.beta2 < 1)) {
    return absl::InvalidArgumentError("AdamW betas must be in [0, 1)");
  }
  return absl::OkStatus();
}

float LearningRate(const LmTrainOptions& o, int64_t it) {
  if (it < o.warmup_iters) {
    return o.learning_rate * static_cast<float>(it + 1) / static_cast<float>(o.warmup_iters + 1);
  }
  if (it > o.decay_iters || o.decay_iters <= o.warmup_iters) return o.min_learning_rate;
  const double ratio = static_cast<double>(it - o.warmup_iters) /
                       static_cast<double>(o.decay_iters - o.warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(kPi * ratio));
  return static_cast<float>(o.min_learning_rate + coeff * (o.learning_rate - o.min_learning_rate));
}

LmTrainer::LmTrainer(Client* client, const TextDataset* data, LmTrainOptions options)
    : client_(client), data_(data), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<LmTrainer>> LmTrainer::Create(Client* client,
                                                             const TextDataset* data,
                                                             LmTrainOptions options,
                                                             const LmCheckpoint* resume) {
  options.model.vocab = data->tokenizer().vocab_size();
  CW_RETURN_IF_ERROR(options.Validate());
  if (data->train_tokens() <= options.model.context || data->val_tokens() <= options.model.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has ", data->train_tokens(), " training and ", data->val_tokens(),
        " validation tokens; each split needs more than the context (",
        options.model.context, ")"));
  }
  if (resume != nullptr) {
    CW_RETURN_IF_ERROR(CheckCheckpointFits(*resume, options.model, data->tokenizer()));
  }
  std::unique_ptr<LmTrainer> t(new LmTrainer(client, data, std::move(options)));
  CW_RETURN_IF_ERROR(t->Init(resume));
  return t;
}

absl::Status LmTrainer::Init(const LmCheckpoint* resume) {
  const LmTrainOptions& o = options_;
  const int64_t local = o.batch / o.layout.data;
  specs_ = GptParams(o.model);
  if (o.pipeline.stages > 1 || o.islands.islands > 1) {
    if (o.pipeline.stages > 1) {
      CW_ASSIGN_OR_RETURN(engine_, GptPipeline::Create(client_, o.model, o.pipeline, o.adamw,
                                                       o.kernels, o.batch));
    } else {
      CW_ASSIGN_OR_RETURN(engine_, GptIslandDataParallel::Create(client_, o.model, o.islands,
                                                                 o.adamw, o.kernels, o.batch));
    }
    mesh_ = engine_->meshes()[0];
    std::vector<ir::Literal> params =
        resume != nullptr ? resume->params : InitGptParams(o.model, o.seed);
    std::vector<ir::Literal> m, v;
    const bool has_moments = resume != nullptr && !resume->adam_m.empty();
    for (size_t i = 0; i < specs_.size(); ++i) {
      const ir::Literal zeros(ir::Shape(ir::DType::kF32, specs_[i].dims));
      m.push_back(has_moments ? resume->adam_m[i] : zeros);
      v.push_back(has_moments ? resume->adam_v[i] : zeros);
    }
    iteration_ = resume != nullptr ? resume->iteration : 0;
    CW_RETURN_IF_ERROR(engine_->Init(params, m, v));
    params_ = engine_->params();
    adam_m_ = engine_->adam_m();
    adam_v_ = engine_->adam_v();
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(mesh_, client_->AllocateMesh({{kDataAxis, o.layout.data},
                                                    {kModelAxis, o.layout.model}}));
  sharded_ = o.shard_optimizer && o.layout.data > 1 && o.layout.model == 1;
  CW_ASSIGN_OR_RETURN(
      ir::Function step,
      sharded_ ? GptShardedTrainStepFunction(o.model, o.layout, local, o.adamw, o.kernels)
               : GptTrainStepFunction(o.model, o.layout, local, o.adamw, o.kernels));
  CW_ASSIGN_OR_RETURN(ir::Function eval, GptEvalFunction(o.model, o.layout, local, o.kernels));
  CompileOptions step_options, eval_options;
  // Sharded: the parameters, then (master, m, v, mask) in and (master, m, v)
  // out; else the parameters and both moments per parameter.
  StepShardings(specs_, /*groups=*/sharded_ ? 1 : 3, /*flat_in=*/sharded_ ? 4 : 0,
                /*flat_out=*/sharded_ ? 3 : 0, &step_options, &eval_options);
  CW_ASSIGN_OR_RETURN(step_, client_->Compile(step, mesh_, step_options));
  CW_ASSIGN_OR_RETURN(eval_, client_->Compile(eval, mesh_, eval_options));

  std::vector<ir::Literal> params =
      resume != nullptr ? resume->params : InitGptParams(o.model, o.seed);
  iteration_ = resume != nullptr ? resume->iteration : 0;
  if (sharded_) return PutShardedState(params, resume);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const Sharding sharding = ParamSharding(specs_[i]);
    const ir::Literal zeros(ir::Shape(ir::DType::kF32, specs_[i].dims));
    const bool has_moments = resume != nullptr && !resume->adam_m.empty();
    CW_ASSIGN_OR_RETURN(Array p, client_->Put(params[i], mesh_, sharding));
    CW_ASSIGN_OR_RETURN(Array m, client_->Put(has_moments ? resume->adam_m[i] : zeros, mesh_, sharding));
    CW_ASSIGN_OR_RETURN(Array v, client_->Put(has_moments ? resume->adam_v[i] : zeros, mesh_, sharding));
    params_.push_back(std::move(p));
    adam_m_.push_back(std::move(m));
    adam_v_.push_back(std::move(v));
  }
  return absl::OkStatus();
}

absl::Status LmTrainer::PutShardedState(const std::vector<ir::Literal>& params,
                                        const LmCheckpoint* resume) {
  const LmTrainOptions& o = options_;
  const bool has_moments = resume != nullptr && !resume->adam_m.empty();
  const Sharding flat_sharding = FlatSharding();
  const ShardedOptimizerLayout layout(o.model, o.layout.data);
  const ir::Shape flat_shape(ir::DType::kF32, {layout.padded});
  ir::Literal master(flat_shape), m(flat_shape), v(flat_shape), mask(flat_shape);
  for (size_t i = 0; i < specs_.size(); ++i) {
    CW_ASSIGN_OR_RETURN(Array p, client_->Put(params[i], mesh_, ParamSharding(specs_[i])));
    params_.push_back(std::move(p));
    const int64_t at = layout.offsets[i];
    const auto copy = [&](const ir::Literal& from, ir::Literal& to) {
      absl::Span<const float> src = from.values<float>();
      std::copy(src.begin(), src.end(), to.mutable_values<float>().begin() + at);
    };
    copy(params[i], master);
    if (has_moments) {
      copy(resume->adam_m[i], m);
      copy(resume->adam_v[i], v);
    }
    const int64_t n = params[i].shape().num_elements();
    std::fill_n(mask.mutable_values<float>().begin() + at, n, specs_[i].decay ? 1.0f : 0.0f);
  }
  CW_ASSIGN_OR_RETURN(master_, client_->Put(master, mesh_, flat_sharding));
  CW_ASSIGN_OR_RETURN(flat_m_, client_->Put(m, mesh_, flat_sharding));
  CW_ASSIGN_OR_RETURN(flat_v_, client_->Put(v, mesh_, flat_sharding));
  CW_ASSIGN_OR_RETURN(decay_mask_, client_->Put(mask, mesh_, flat_sharding));
  return absl::OkStatus();
}

absl::StatusOr<ir::Literal> LmTrainer::Get(const Array& array, const std::string& what) {
  const absl::Time begin = absl::Now();
  struct AddWait {
    absl::Duration* total;
    absl::Time begin;
    ~AddWait() { *total += absl::Now() - begin; }
  } add_wait{&loop_times_.waiting, begin};
  Future<ir::Literal> f = array.Fetch();
  const absl::StatusOr<ir::Literal>* v = f.AwaitWithTimeout(options_.result_timeout);
  if (v == nullptr) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, ": no result after ", absl::FormatDuration(options_.result_timeout)));
  }
  if (!v->ok()) {
    return absl::Status(v->status().code(), absl::StrCat(what, ": ", v->status().message()));
  }
  return **v;
}

absl::Status LmTrainer::Train(const Hooks& hooks, int64_t stop_at) {
  const LmTrainOptions& o = options_;
  const int64_t end = stop_at >= 0 ? std::min(stop_at, o.iters) : o.iters;
  const int64_t start = iteration_;
  struct Pending {
    int64_t iteration;
    float learning_rate;
    Array loss;
    Array grad_norm;
  };
  std::deque<Pending> pending;
  // Fetches the oldest step's loss: the devices have finished it, while
  // later steps are already queued behind it.
  auto drain_one = [&]() -> absl::Status {
    Pending p = std::move(pending.front());
    pending.pop_front();
    const std::string what = absl::StrCat("iteration ", p.iteration);
    CW_ASSIGN_OR_RETURN(ir::Literal loss, Get(p.loss, what));
    CW_ASSIGN_OR_RETURN(ir::Literal norm, Get(p.grad_norm, what));
    const float l = loss.values<float>()[0];
    if (!std::isfinite(l)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss is ", l, " at iteration ", p.iteration, "; stopping (learning rate ",
          p.learning_rate, " too high?)"));
    }
    if (hooks.on_step) hooks.on_step({p.iteration, l, norm.values<float>()[0], p.learning_rate});
    return absl::OkStatus();
  };
  auto drain_all = [&]() -> absl::Status {
    while (!pending.empty()) CW_RETURN_IF_ERROR(drain_one());
    return absl::OkStatus();
  };
  auto evaluate = [&]() -> absl::Status {
    CW_ASSIGN_OR_RETURN(EvalReport r, Evaluate());
    if (hooks.on_eval) hooks.on_eval(r);
    return absl::OkStatus();
  };
  const bool sharded_checkpoints = o.checkpoint_format == LmCheckpointFormat::kSharded;
  auto checkpoint = [&]() -> absl::Status {
    if (o.checkpoint_dir.empty()) return absl::OkStatus();
    // Sharded: the hosts write the state as it will be once the steps
    // dispatched so far ran, while later steps go on.
    if (sharded_checkpoints) return BeginShardedSave();
    CW_ASSIGN_OR_RETURN(std::string path, SaveCheckpoint(o.checkpoint_dir));
    if (hooks.on_checkpoint) hooks.on_checkpoint(iteration_, path);
    return absl::OkStatus();
  };

  for (int64_t it = start; it < end; ++it) {
    if (hooks.should_stop && hooks.should_stop()) break;
    CW_RETURN_IF_ERROR(ReapSaves(hooks, /*wait=*/false));
    const bool eval_due = o.eval_every > 0 && it % o.eval_every == 0;
    const bool checkpoint_due = o.checkpoint_every > 0 && it > start && it % o.checkpoint_every == 0;
    // A file checkpoint reads the state, so the steps queued finish first;
    // a sharded one does not wait for them.
    if (eval_due || (checkpoint_due && !sharded_checkpoints)) CW_RETURN_IF_ERROR(drain_all());
    if (eval_due) CW_RETURN_IF_ERROR(evaluate());
    if (checkpoint_due) CW_RETURN_IF_ERROR(checkpoint());
    const absl::Time dispatch_begin = absl::Now();
    TokenBatch batch = data_->Sample(Split::kTrain, o.seed, 0, it, o.batch, o.model.context);
    const float lr = LearningRate(o, it);
    if (engine_ != nullptr) {
      CW_ASSIGN_OR_RETURN(LmStepEngine::StepOutputs out,
                          engine_->Step(batch, static_cast<float>(it + 1), lr));
      params_ = engine_->params();
      adam_m_ = engine_->adam_m();
      adam_v_ = engine_->adam_v();
      pending.push_back({it, lr, std::move(out.loss), std::move(out.grad_norm)});
      iteration_ = it + 1;
      ++loop_times_.steps;
      loop_times_.dispatch += absl::Now() - dispatch_begin;
      while (static_cast<int64_t>(pending.size()) > o.max_in_flight) {
        CW_RETURN_IF_ERROR(drain_one());
      }
      continue;
    }
    const ir::Literal hyper = ir::Literal::F32({2}, {static_cast<float>(it + 1), lr});
    CW_ASSIGN_OR_RETURN(Array x, client_->Put(batch.inputs, mesh_, BatchSharding()));
    CW_ASSIGN_OR_RETURN(Array y, client_->Put(batch.targets, mesh_, BatchSharding()));
    CW_ASSIGN_OR_RETURN(Array h, client_->Put(hyper, mesh_, Sharding::Replicated(1)));
    std::vector<Array> args;
    args.reserve(3 * specs_.size() + 3);
    for (const auto* group : {&params_, &adam_m_, &adam_v_}) {
      args.insert(args.end(), group->begin(), group->end());
    }
    if (sharded_) args.insert(args.end(), {master_, flat_m_, flat_v_, decay_mask_});
    args.push_back(std::move(x));
    args.push_back(std::move(y));
    args.push_back(std::move(h));
    CW_ASSIGN_OR_RETURN(std::vector<Array> out, client_->Call(step_, args));
    const size_t np = specs_.size();
    params_.assign(out.begin(), out.begin() + np);
    size_t next = np;
    if (sharded_) {
      master_ = out[next++];
      flat_m_ = out[next++];
      flat_v_ = out[next++];
    } else {
      adam_m_.assign(out.begin() + np, out.begin() + 2 * np);
      adam_v_.assign(out.begin() + 2 * np, out.begin() + 3 * np);
      next = 3 * np;
    }
    pending.push_back({it, lr, out[next], out[next + 1]});
    iteration_ = it + 1;
    ++loop_times_.steps;
    loop_times_.dispatch += absl::Now() - dispatch_begin;
    while (static_cast<int64_t>(pending.size()) > o.max_in_flight) {
      CW_RETURN_IF_ERROR(drain_one());
    }
  }
  CW_RETURN_IF_ERROR(drain_all());
  if (iteration_ == o.iters && o.eval_every > 0) CW_RETURN_IF_ERROR(evaluate());
  if (iteration_ > start || o.iters == start) CW_RETURN_IF_ERROR(checkpoint());
  return ReapSaves(hooks, /*wait=*/true);
}

absl::Status LmTrainer::BeginShardedSave() {
  const LmTrainOptions& o = options_;
  if (checkpointer_ == nullptr) {
    CheckpointOptions co;
    co.keep = o.checkpoint_keep;
    co.timeout = o.result_timeout;
    CW_ASSIGN_OR_RETURN(checkpointer_, Checkpointer::Open(client_, o.checkpoint_dir, co));
  }
  std::vector<NamedArray> arrays;
  for (size_t i = 0; i < specs_.size(); ++i) {
    arrays.push_back({"param/" + specs_[i].name, params_[i]});
  }
  if (sharded_) {
    arrays.push_back({"adam_m.flat", flat_m_});
    arrays.push_back({"adam_v.flat", flat_v_});
  } else {
    for (size_t i = 0; i < specs_.size(); ++i) {
      arrays.push_back({"adam_m/" + specs_[i].name, adam_m_[i]});
      arrays.push_back({"adam_v/" + specs_[i].name, adam_v_[i]});
    }
  }
  LmCheckpoint c;
  c.config = o.model;
  c.tokenizer = data_->tokenizer();
  c.iteration = iteration_;
  c.schedule = LrSchedule{o.learning_rate, o.min_learning_rate, o.warmup_iters, o.decay_iters};
  std::map<std::string, std::string> metadata = LmMetadata(c);
  if (sharded_) metadata["flat_data"] = absl::StrCat(o.layout.data);
  saves_.push_back({iteration_, checkpoint::StepFolder(o.checkpoint_dir, iteration_),
                    checkpointer_->Save(iteration_, std::move(arrays), std::move(metadata))});
  return absl::OkStatus();
}

absl::Status LmTrainer::ReapSaves(const Hooks& hooks, bool wait) {
  while (!saves_.empty()) {
    const SaveInFlight& s = saves_.front();
    const absl::StatusOr<Unit>* committed =
        wait ? s.committed.AwaitWithTimeout(options_.result_timeout) : s.committed.TryGet();
    if (committed == nullptr) {
      if (!wait) return absl::OkStatus();
      return absl::DeadlineExceededError(
          absl::StrCat("the checkpoint of iteration ", s.iteration, " was not written within ",
                       absl::FormatDuration(options_.result_timeout)));
    }
    if (!committed->ok()) {
      return absl::Status(committed->status().code(),
                          absl::StrCat("the checkpoint of iteration ", s.iteration, ": ",
                                       committed->status().message()));
    }
    if (hooks.on_checkpoint) hooks.on_checkpoint(s.iteration, s.path);
    saves_.pop_front();
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalReport> LmTrainer::Evaluate() {
  const LmTrainOptions& o = options_;
  const absl::Time begin = absl::Now();
  EvalReport report;
  report.iteration = iteration_;
  for (Split split : {Split::kTrain, Split::kVal}) {
    // All batches are dispatched before the first loss is read.
    std::vector<Array> losses;
    for (int64_t k = 0; k < o.eval_batches; ++k) {
      TokenBatch batch = data_->Sample(split, o.seed, static_cast<uint64_t>(1 + iteration_), k,
                                       o.batch, o.model.context);
      if (engine_ != nullptr) {
        CW_ASSIGN_OR_RETURN(Array loss, engine_->Evaluate(batch));
        losses.push_back(std::move(loss));
        continue;
      }
      CW_ASSIGN_OR_RETURN(Array x, client_->Put(batch.inputs, mesh_, BatchSharding()));
      CW_ASSIGN_OR_RETURN(Array y, client_->Put(batch.targets, mesh_, BatchSharding()));
      std::vector<Array> args = params_;
      args.push_back(std::move(x));
      args.push_back(std::move(y));
      CW_ASSIGN_OR_RETURN(std::vector<Array> out, client_->Call(eval_, args));
      losses.push_back(std::move(out[0]));
    }
    double sum = 0;
    for (const Array& a : losses) {
      CW_ASSIGN_OR_RETURN(ir::Literal l, Get(a, absl::StrCat("evaluation at iteration ", iteration_)));
      sum += l.values<float>()[0];
    }
    const float mean = static_cast<float>(sum / static_cast<double>(o.eval_batches));
    (split == Split::kTrain ? report.train_loss : report.val_loss) = mean;
  }
  report.seconds = absl::ToDoubleSeconds(absl::Now() - begin);
  return report;
}

absl::StatusOr<std::vector<ir::Literal>> LmTrainer::Params() {
  std::vector<ir::Literal> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    CW_ASSIGN_OR_RETURN(ir::Literal l, Get(params_[i], specs_[i].name));
    out.push_back(std::move(l));
  }
  return out;
}

absl::StatusOr<std::string> LmTrainer::SaveCheckpoint(const std::string& dir) {
  LmCheckpoint c;
  c.config = options_.model;
  c.tokenizer = data_->tokenizer();
  c.iteration = iteration_;
  c.schedule = LrSchedule{options_.learning_rate, options_.min_learning_rate,
                          options_.warmup_iters, options_.decay_iters};
  // A sharded optimiser's moments are fetched whole and cut into their
  // parameters: the same file as an unsharded run's.
  ir::Literal flat_m, flat_v;
  std::optional<ShardedOptimizerLayout> layout;
  if (sharded_) {
    layout.emplace(options_.model, options_.layout.data);
    CW_ASSIGN_OR_RETURN(flat_m, Get(flat_m_, "the first moments"));
    CW_ASSIGN_OR_RETURN(flat_v, Get(flat_v_, "the second moments"));
  }
  auto cut = [&](const ir::Literal& flat, size_t i) {
    ir::Literal part(ir::Shape(ir::DType::kF32, specs_[i].dims));
    absl::Span<const float> src = flat.values<float>().subspan(
        static_cast<size_t>(layout->offsets[i]), static_cast<size_t>(part.shape().num_elements()));
    std::copy(src.begin(), src.end(), part.mutable_values<float>().begin());
    return part;
  };
  for (size_t i = 0; i < specs_.size(); ++i) {
    CW_ASSIGN_OR_RETURN(ir::Literal p, Get(params_[i], specs_[i].name));
    c.params.push_back(std::move(p));
    if (sharded_) {
      c.adam_m.push_back(cut(flat_m, i));
      c.adam_v.push_back(cut(flat_v, i));
      continue;
    }
    CW_ASSIGN_OR_RETURN(ir::Literal m, Get(adam_m_[i], specs_[i].name));
    CW_ASSIGN_OR_RETURN(ir::Literal v, Get(adam_v_[i], specs_[i].name));
    c.adam_m.push_back(std::move(m));
    c.adam_v.push_back(std::move(v));
  }
  return WriteLmCheckpoint(dir, c);
}

}  // namespace causeway::models
