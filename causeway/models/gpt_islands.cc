#include "causeway/models/gpt_islands.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/autodiff.h"
#include "causeway/ir/builder.h"
#include "causeway/models/gpt_blocks.h"

namespace causeway::models {
namespace {

using ir::DType;
using ir::FunctionBuilder;
using ir::Shape;
using ir::Value;

// Elements of a parameter of `spec`.
int64_t NumElements(const ParamSpec& spec) { return Shape(DType::kF32, spec.dims).num_elements(); }

}  // namespace

absl::Status ValidateIslands(const GptConfig& c, const GptIslandsOptions& o, int64_t batch) {
  CW_RETURN_IF_ERROR(c.Validate());
  if (o.islands < 2) {
    return absl::InvalidArgumentError("data parallelism across islands needs at least 2 islands");
  }
  if (o.data < 1) return absl::InvalidArgumentError("data devices per island must be >= 1");
  if (batch % (o.islands * o.data) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " does not split over ",
                                                   o.islands, " islands of ", o.data,
                                                   " data-parallel device(s)"));
  }
  return absl::OkStatus();
}

GptIslandDataParallel::GptIslandDataParallel(Client* client, GptConfig config,
                                             GptIslandsOptions options, AdamWConfig adamw,
                                             GptKernels kernels, int64_t batch)
    : client_(client),
      config_(std::move(config)),
      options_(options),
      adamw_(adamw),
      kernels_(kernels),
      batch_(batch),
      island_rows_(batch / options.islands) {}

absl::StatusOr<std::unique_ptr<GptIslandDataParallel>> GptIslandDataParallel::Create(
    Client* client, const GptConfig& config, const GptIslandsOptions& options,
    const AdamWConfig& adamw, GptKernels kernels, int64_t batch) {
  CW_RETURN_IF_ERROR(ValidateIslands(config, options, batch));
  std::unique_ptr<GptIslandDataParallel> p(
      new GptIslandDataParallel(client, config, options, adamw, kernels, batch));
  CW_RETURN_IF_ERROR(p->Build());
  return p;
}

absl::Status GptIslandDataParallel::Build() {
  const GptConfig& c = config_;
  const int64_t I = options_.islands;
  const int64_t D = options_.data;
  const int64_t lb = island_rows_ / D;
  const GptLayout layout{D, 1};
  const std::vector<ParamSpec> specs = GptParams(c);
  const int np = static_cast<int>(specs.size());
  int64_t total = 0;
  for (const ParamSpec& s : specs) total += NumElements(s);
  const Shape flat(DType::kF32, {total + 1});  // every gradient, then the loss
  const Shape scalar(DType::kF32, {});
  std::vector<Sharding> param_sh;
  for (const ParamSpec& s : specs) param_sh.push_back(ParamSharding(s));

  for (int64_t i = 0; i < I; ++i) {
    MeshRequest r;
    r.axes = {{kDataAxis, D}, {kModelAxis, 1}};
    r.island = IslandId(i);
    CW_ASSIGN_OR_RETURN(Mesh mesh, client_->AllocateMesh(r));
    meshes_.push_back(std::move(mesh));
  }

  // Gradients of an island: (params..., tokens, targets) -> f32[total + 1],
  // the gradients and the loss share, all-reduced over the island's data
  // axis and divided by the number of islands.
  CW_ASSIGN_OR_RETURN(ir::Function loss, GptLossFunction(c, layout, lb, kernels_));
  std::vector<int> wrt;
  for (int k = 0; k < np; ++k) wrt.push_back(k);
  CW_ASSIGN_OR_RETURN(ir::Function grad, ir::Grad(loss, wrt));
  FunctionBuilder gb("gpt_island_gradients");
  std::vector<Value> args;
  for (int k = 0; k < loss.num_parameters(); ++k) args.push_back(gb.Parameter(loss.parameter_shape(k)));
  std::vector<Value> out = gb.Call(grad, args);
  std::vector<Value> parts;
  for (int k = 0; k < np; ++k) parts.push_back(gb.Reshape(out[1 + k], {NumElements(specs[k])}));
  parts.push_back(gb.Reshape(out[0], {1}));
  Value g = gb.Mul(gb.Concatenate(parts, 0), gb.Full(1.0f / static_cast<float>(I), {total + 1}));
  if (D > 1) g = gb.AllReduce(g, {kDataAxis});
  CW_ASSIGN_OR_RETURN(ir::Function grads_fn, gb.Build({g}));

  // The exchange's sum: every island adds the I gradient vectors in island
  // order, so all get the same sum.
  FunctionBuilder sb("gpt_island_sum");
  Value sum = sb.Parameter(flat);
  for (int64_t i = 1; i < I; ++i) sum = sb.Add(sum, sb.Parameter(flat));
  CW_ASSIGN_OR_RETURN(ir::Function sum_fn, sb.Build({sum}));

  // Update: (params..., m..., v..., summed gradients, hyper) -> (params'...,
  // m'..., v'..., loss, grad norm).
  FunctionBuilder ub("gpt_island_update");
  internal::AdamWValues state;
  for (auto* group : {&state.p, &state.m, &state.v}) {
    for (const ParamSpec& s : specs) group->push_back(ub.Parameter(Shape(DType::kF32, s.dims)));
  }
  Value summed = ub.Parameter(flat);
  Value hyper = ub.Parameter(Shape(DType::kF32, {2}));
  std::vector<Value> grads;
  std::vector<bool> decay;
  Value sumsq = ub.ConstantF32(0.0f);
  int64_t offset = 0;
  for (const ParamSpec& s : specs) {
    const int64_t n = NumElements(s);
    Value gi = ub.Slice(summed, {offset}, {offset + n});
    sumsq = ub.Add(sumsq, ub.ReduceSum(ub.Mul(gi, gi), {0}));
    grads.push_back(ub.Reshape(gi, s.dims));
    decay.push_back(s.decay);
    offset += n;
  }
  Value norm = ub.Sqrt(sumsq);
  const internal::AdamWValues next = internal::AppendAdamW(
      ub, adamw_, state, grads, decay, hyper, internal::ClipFactor(ub, adamw_, norm));
  std::vector<Value> results = next.p;
  results.insert(results.end(), next.m.begin(), next.m.end());
  results.insert(results.end(), next.v.begin(), next.v.end());
  results.push_back(ub.Reshape(ub.Slice(summed, {total}, {total + 1}), {}));
  results.push_back(norm);
  CW_ASSIGN_OR_RETURN(ir::Function update_fn, ub.Build(results));

  CW_ASSIGN_OR_RETURN(ir::Function eval_fn, GptEvalFunction(c, layout, lb, kernels_));
  FunctionBuilder mb("gpt_island_eval_mean");
  Value mean = mb.Parameter(scalar);
  for (int64_t i = 1; i < I; ++i) mean = mb.Add(mean, mb.Parameter(scalar));
  CW_ASSIGN_OR_RETURN(ir::Function mean_fn,
                      mb.Build({mb.Mul(mean, mb.ConstantF32(1.0f / static_cast<float>(I)))}));

  const Sharding rep0 = Sharding::Replicated(0);
  const Sharding rep1 = Sharding::Replicated(1);
  for (int64_t i = 0; i < I; ++i) {
    std::vector<Sharding> in = param_sh;
    in.push_back(BatchSharding());
    in.push_back(BatchSharding());
    CW_ASSIGN_OR_RETURN(CompiledFunction gf, client_->Compile(grads_fn, meshes_[i], {in, {rep1}}));
    grads_.push_back(gf);
    CW_ASSIGN_OR_RETURN(CompiledFunction sf,
                        client_->Compile(sum_fn, meshes_[i],
                                         {std::vector<Sharding>(static_cast<size_t>(I), rep1), {rep1}}));
    sum_.push_back(sf);
    std::vector<Sharding> uin;
    for (int k = 0; k < 3; ++k) uin.insert(uin.end(), param_sh.begin(), param_sh.end());
    uin.push_back(rep1);
    uin.push_back(rep1);
    std::vector<Sharding> uout;
    for (int k = 0; k < 3; ++k) uout.insert(uout.end(), param_sh.begin(), param_sh.end());
    uout.push_back(rep0);
    uout.push_back(rep0);
    CW_ASSIGN_OR_RETURN(CompiledFunction uf, client_->Compile(update_fn, meshes_[i], {uin, uout}));
    update_.push_back(uf);
    CW_ASSIGN_OR_RETURN(CompiledFunction ef, client_->Compile(eval_fn, meshes_[i], {in, {rep0}}));
    eval_.push_back(ef);
  }
  CW_ASSIGN_OR_RETURN(eval_mean_,
                      client_->Compile(mean_fn, meshes_[0],
                                       {std::vector<Sharding>(static_cast<size_t>(I), rep0), {rep0}}));

  // The step program: params, m, v per island; each island's inputs and
  // targets; hyper (on island 0, moved to the others by the lowering).
  const Shape rows(DType::kI32, {island_rows_, c.context});
  ProgramBuilder pb = client_->NewProgram("gpt_islands_step");
  std::vector<std::vector<TracedArray>> p(I), m(I), v(I);
  for (auto* group : {&p, &m, &v}) {
    for (int64_t i = 0; i < I; ++i) {
      for (int k = 0; k < np; ++k) {
        CW_ASSIGN_OR_RETURN(TracedArray a, pb.Parameter(Shape(DType::kF32, specs[k].dims),
                                                        meshes_[i], param_sh[k]));
        (*group)[i].push_back(std::move(a));
      }
    }
  }
  std::vector<TracedArray> x(I), y(I);
  for (int64_t i = 0; i < I; ++i) {
    CW_ASSIGN_OR_RETURN(x[i], pb.Parameter(rows, meshes_[i], BatchSharding()));
    CW_ASSIGN_OR_RETURN(y[i], pb.Parameter(rows, meshes_[i], BatchSharding()));
  }
  CW_ASSIGN_OR_RETURN(TracedArray h, pb.Parameter(Shape(DType::kF32, {2}), meshes_[0], rep1));
  std::vector<TracedArray> flats;
  for (int64_t i = 0; i < I; ++i) {
    std::vector<TracedArray> a = p[i];
    a.push_back(x[i]);
    a.push_back(y[i]);
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> o, pb.Call(grads_[i], a));
    flats.push_back(o[0]);
  }
  std::vector<TracedArray> outputs, tail;
  std::vector<std::vector<TracedArray>> np_(I), nm(I), nv(I);
  for (int64_t i = 0; i < I; ++i) {
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> s, pb.Call(sum_[i], flats));
    std::vector<TracedArray> a = p[i];
    a.insert(a.end(), m[i].begin(), m[i].end());
    a.insert(a.end(), v[i].begin(), v[i].end());
    a.push_back(s[0]);
    a.push_back(h);
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> o, pb.Call(update_[i], a));
    np_[i].assign(o.begin(), o.begin() + np);
    nm[i].assign(o.begin() + np, o.begin() + 2 * np);
    nv[i].assign(o.begin() + 2 * np, o.begin() + 3 * np);
    if (i == 0) tail = {o[3 * np], o[3 * np + 1]};
  }
  for (auto* group : {&np_, &nm, &nv}) {
    for (int64_t i = 0; i < I; ++i) outputs.insert(outputs.end(), (*group)[i].begin(), (*group)[i].end());
  }
  outputs.insert(outputs.end(), tail.begin(), tail.end());
  CW_ASSIGN_OR_RETURN(step_program_, pb.Build(outputs));

  // Evaluation: each island's mean on its rows, averaged on island 0.
  ProgramBuilder eb = client_->NewProgram("gpt_islands_eval");
  std::vector<std::vector<TracedArray>> ep(I);
  for (int64_t i = 0; i < I; ++i) {
    for (int k = 0; k < np; ++k) {
      CW_ASSIGN_OR_RETURN(TracedArray a, eb.Parameter(Shape(DType::kF32, specs[k].dims),
                                                      meshes_[i], param_sh[k]));
      ep[i].push_back(std::move(a));
    }
  }
  std::vector<TracedArray> means;
  for (int64_t i = 0; i < I; ++i) {
    std::vector<TracedArray> a = ep[i];
    CW_ASSIGN_OR_RETURN(TracedArray ex, eb.Parameter(rows, meshes_[i], BatchSharding()));
    CW_ASSIGN_OR_RETURN(TracedArray ey, eb.Parameter(rows, meshes_[i], BatchSharding()));
    a.push_back(ex);
    a.push_back(ey);
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> o, eb.Call(eval_[i], a));
    means.push_back(o[0]);
  }
  CW_ASSIGN_OR_RETURN(std::vector<TracedArray> mean_out, eb.Call(eval_mean_, means));
  CW_ASSIGN_OR_RETURN(eval_program_, eb.Build(mean_out));
  return absl::OkStatus();
}

absl::Status GptIslandDataParallel::Init(const std::vector<ir::Literal>& params,
                                         const std::vector<ir::Literal>& m,
                                         const std::vector<ir::Literal>& v) {
  const std::vector<ParamSpec> specs = GptParams(config_);
  CW_RETURN_IF_ERROR(CheckModelState(specs.size(), params, m, v));
  std::vector<int> all(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) all[k] = static_cast<int>(k);
  const int64_t I = options_.islands;
  params_.assign(I, {});
  m_.assign(I, {});
  v_.assign(I, {});
  for (int64_t i = 0; i < I; ++i) {
    CW_ASSIGN_OR_RETURN(params_[i], PutParams(client_, meshes_[i], specs, all, params));
    CW_ASSIGN_OR_RETURN(m_[i], PutParams(client_, meshes_[i], specs, all, m));
    CW_ASSIGN_OR_RETURN(v_[i], PutParams(client_, meshes_[i], specs, all, v));
  }
  return absl::OkStatus();
}

absl::Status GptIslandDataParallel::PutShares(const TokenBatch& batch, std::vector<Array>& args) {
  if (batch.inputs.shape().dims != std::vector<int64_t>{batch_, config_.context} ||
      batch.targets.shape() != batch.inputs.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("this model takes i32[", batch_, ",",
                                                   config_.context, "] batches, not ",
                                                   batch.inputs.shape().ToString()));
  }
  for (int64_t i = 0; i < options_.islands; ++i) {
    CW_ASSIGN_OR_RETURN(Array x, client_->Put(LiteralRows(batch.inputs, i, island_rows_),
                                              meshes_[i], BatchSharding()));
    CW_ASSIGN_OR_RETURN(Array y, client_->Put(LiteralRows(batch.targets, i, island_rows_),
                                              meshes_[i], BatchSharding()));
    args.push_back(std::move(x));
    args.push_back(std::move(y));
  }
  return absl::OkStatus();
}

absl::StatusOr<LmStepEngine::StepOutputs> GptIslandDataParallel::Step(const TokenBatch& batch,
                                                                       float step,
                                                                       float learning_rate) {
  const int64_t I = options_.islands;
  std::vector<Array> args;
  for (const auto* group : {&params_, &m_, &v_}) {
    for (int64_t i = 0; i < I; ++i) args.insert(args.end(), (*group)[i].begin(), (*group)[i].end());
  }
  CW_RETURN_IF_ERROR(PutShares(batch, args));
  CW_ASSIGN_OR_RETURN(Array hyper, client_->Put(ir::Literal::F32({2}, {step, learning_rate}),
                                                meshes_[0], Sharding::Replicated(1)));
  args.push_back(std::move(hyper));
  CW_ASSIGN_OR_RETURN(std::vector<Array> out, step_program_.Run(args));
  size_t k = 0;
  for (auto* group : {&params_, &m_, &v_}) {
    for (int64_t i = 0; i < I; ++i) {
      for (Array& a : (*group)[i]) a = std::move(out[k++]);
    }
  }
  return StepOutputs{std::move(out[k]), std::move(out[k + 1])};
}

absl::StatusOr<Array> GptIslandDataParallel::Evaluate(const TokenBatch& batch) {
  // The evaluation program takes every island's parameters, then each
  // island's rows.
  std::vector<Array> args;
  for (int64_t i = 0; i < options_.islands; ++i) {
    args.insert(args.end(), params_[i].begin(), params_[i].end());
  }
  CW_RETURN_IF_ERROR(PutShares(batch, args));
  CW_ASSIGN_OR_RETURN(std::vector<Array> out, eval_program_.Run(args));
  return std::move(out[0]);
}

}  // namespace causeway::models
