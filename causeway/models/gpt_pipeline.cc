#include "causeway/models/gpt_pipeline.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/autodiff.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/composites.h"
#include "causeway/models/gpt_blocks.h"

namespace causeway::models {
namespace {

using ir::DType;
using ir::FunctionBuilder;
using ir::Shape;
using ir::Value;

std::vector<int64_t> AllAxes(const FunctionBuilder& b, Value v) {
  std::vector<int64_t> axes(b.shape(v).dims.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
  return axes;
}

Value SumOfSquares(FunctionBuilder& b, const std::vector<Value>& values) {
  Value sq = b.ConstantF32(0.0f);
  for (Value g : values) sq = b.Add(sq, b.ReduceSum(b.Mul(g, g), AllAxes(b, g)));
  return sq;
}

// Layers [first, last) of stage s of S.
std::pair<int64_t, int64_t> StageLayers(const GptConfig& c, int64_t s, int64_t stages) {
  return {s * c.layers / stages, (s + 1) * c.layers / stages};
}

}  // namespace

absl::Status ValidatePipeline(const GptConfig& c, const GptPipelineOptions& o, int64_t batch) {
  CW_RETURN_IF_ERROR(c.Validate());
  if (o.stages < 2) return absl::InvalidArgumentError("a pipeline needs at least 2 stages");
  if (o.stages > c.layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        o.stages, " pipeline stages for ", c.layers, " layers: each stage needs a layer"));
  }
  if (o.microbatches < 1) return absl::InvalidArgumentError("micro-batches must be >= 1");
  if (o.data < 1) return absl::InvalidArgumentError("data devices per stage must be >= 1");
  if (o.islands < 1 || o.islands > o.stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the stages are spread over 1 to ", o.stages, " islands, not ", o.islands));
  }
  if (batch % (o.microbatches * o.data) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch, " does not split into ", o.microbatches, " micro-batches of ", o.data,
        " data shards each"));
  }
  return absl::OkStatus();
}

std::vector<std::vector<int>> PipelineStageParams(const GptConfig& c, int64_t stages) {
  const int per = internal::ParamsPerBlock(c);
  std::vector<std::vector<int>> out(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s) {
    std::vector<int>& ids = out[s];
    if (s == 0) ids = {0, 1};  // wte, wpe
    const auto [first, last] = StageLayers(c, s, stages);
    for (int64_t layer = first; layer < last; ++layer) {
      for (int k = 0; k < per; ++k) ids.push_back(2 + static_cast<int>(layer) * per + k);
    }
    if (s == stages - 1) {
      const int lnf = 2 + static_cast<int>(c.layers) * per;
      ids.push_back(lnf);
      if (c.bias) ids.push_back(lnf + 1);
      ids.push_back(0);  // the tied head's copy of wte
    }
  }
  return out;
}

std::vector<PipelineOp> PipelineTraceOrder(int64_t S, int64_t M, PipelineSchedule schedule) {
  std::vector<std::vector<PipelineOp>> order(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    if (schedule == PipelineSchedule::kGPipe) {
      for (int64_t mb = 0; mb < M; ++mb) order[s].push_back({s, true, mb});
      for (int64_t mb = 0; mb < M; ++mb) order[s].push_back({s, false, mb});
    } else {
      const int64_t warmup = std::min(S - 1 - s, M);
      int64_t f = 0, b = 0;
      for (; f < warmup; ++f) order[s].push_back({s, true, f});
      while (f < M) {
        order[s].push_back({s, true, f++});
        order[s].push_back({s, false, b++});
      }
      while (b < M) order[s].push_back({s, false, b++});
    }
  }
  std::vector<std::vector<bool>> fwd(S, std::vector<bool>(M, false));
  std::vector<std::vector<bool>> bwd(S, std::vector<bool>(M, false));
  std::vector<size_t> next(static_cast<size_t>(S), 0);
  std::vector<PipelineOp> out;
  const size_t total = static_cast<size_t>(2 * S * M);
  while (out.size() < total) {
    const size_t before = out.size();
    for (int64_t s = 0; s < S; ++s) {
      while (next[s] < order[s].size()) {
        const PipelineOp op = order[s][next[s]];
        const int64_t mb = op.microbatch;
        if (op.forward ? (s > 0 && !fwd[s - 1][mb])
                       : (!fwd[s][mb] || (s < S - 1 && !bwd[s + 1][mb]))) {
          break;
        }
        (op.forward ? fwd : bwd)[s][mb] = true;
        out.push_back(op);
        ++next[s];
      }
    }
    CW_CHECK(out.size() > before) << "pipeline schedule deadlocked";
  }
  return out;
}

GptPipeline::GptPipeline(Client* client, GptConfig config, GptPipelineOptions options,
                         AdamWConfig adamw, GptKernels kernels, int64_t batch)
    : client_(client),
      config_(std::move(config)),
      options_(options),
      adamw_(adamw),
      kernels_(kernels),
      batch_(batch),
      micro_rows_(batch / options.microbatches) {}

absl::StatusOr<std::unique_ptr<GptPipeline>> GptPipeline::Create(
    Client* client, const GptConfig& config, const GptPipelineOptions& options,
    const AdamWConfig& adamw, GptKernels kernels, int64_t batch) {
  CW_RETURN_IF_ERROR(ValidatePipeline(config, options, batch));
  std::unique_ptr<GptPipeline> p(
      new GptPipeline(client, config, options, adamw, kernels, batch));
  CW_RETURN_IF_ERROR(p->Build());
  return p;
}

absl::Status GptPipeline::Build() {
  const int64_t S = options_.stages;
  stage_params_ = PipelineStageParams(config_, S);
  absl::flat_hash_set<DeviceId> used;
  const int64_t per_island = (S + options_.islands - 1) / options_.islands;
  for (int64_t s = 0; s < S; ++s) {
    const IslandId island(options_.islands > 1 ? s / per_island : -1);
    MeshRequest r;
    r.axes = {{kDataAxis, options_.data}, {kModelAxis, 1}};
    r.island = island;
    CW_ASSIGN_OR_RETURN(Mesh mesh, client_->AllocateMesh(r));
    for (DeviceId d : mesh.devices()) {
      if (!used.insert(d).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "not enough devices for ", S, " stages of ", options_.data, " device(s) each",
            options_.islands > 1 ? absl::StrCat(" over ", options_.islands, " islands") : "",
            ": stage ", s, " would share ", d.ToString(), " with an earlier stage"));
      }
    }
    meshes_.push_back(std::move(mesh));
  }
  CW_RETURN_IF_ERROR(CompileStages());
  CW_RETURN_IF_ERROR(TraceStep());
  return TraceEval();
}

absl::Status GptPipeline::CompileStages() {
  const GptConfig& c = config_;
  const int64_t S = options_.stages;
  const int64_t D = options_.data;
  const int64_t M = options_.microbatches;
  const int64_t lb = micro_rows_ / D;  // sequences per device per micro-batch
  const int64_t t = c.context;
  const GptLayout layout{D, 1};
  const std::vector<ParamSpec> specs = GptParams(c);
  const Shape act(DType::kF32, {lb * t, c.embed});
  const Shape tokens(DType::kI32, {lb, t});
  const Shape scalar(DType::kF32, {});
  const float share = 1.0f / static_cast<float>(D * M);

  auto add_params = [&](FunctionBuilder& b, int64_t s) {
    std::vector<Value> v;
    for (int id : stage_params_[s]) v.push_back(b.Parameter(Shape(DType::kF32, specs[id].dims)));
    return v;
  };
  // Stage s's part of the model on `input` (tokens for the first stage);
  // the last stage's ends in the final LayerNorm.
  auto stage_body = [&](FunctionBuilder& b, int64_t s, const std::vector<Value>& params,
                        Value input) {
    internal::ParamCursor p(params, c.bias);
    Value x = input;
    if (s == 0) {
      Value wte = p.Next();
      Value wpe = p.Next();
      x = internal::Embed(b, c, wte, wpe, input, lb, t);
    }
    const auto [first, last] = StageLayers(c, s, S);
    for (int64_t layer = first; layer < last; ++layer) {
      x = internal::Block(b, c, layout, p, x, lb, t, kernels_);
    }
    if (s == S - 1) x = internal::FinalNorm(b, p, x, kernels_);
    return x;
  };
  // The last stage's loss share: (params..., x, targets) -> f32[].
  auto last_loss = [&]() -> absl::StatusOr<ir::Function> {
    FunctionBuilder b("gpt_stage_last_loss");
    std::vector<Value> params = add_params(b, S - 1);
    Value x = b.Parameter(act);
    Value targets = b.Parameter(tokens);
    Value h = stage_body(b, S - 1, params, x);
    Value ce = ir::CrossEntropy(b, internal::Head(b, h, params.back()),
                                b.Reshape(targets, {lb * t}));
    return b.Build({b.Mul(ce, b.ConstantF32(share))});
  };

  auto shardings = [&](int64_t s) {
    std::vector<Sharding> out;
    for (int id : stage_params_[s]) out.push_back(ParamSharding(specs[id]));
    return out;
  };
  // The backward and evaluation steps add each device's own gradients and
  // loss into accumulators declared replicated, which stay on their devices
  // until the stage's reduce all-reduces them over data: partial sums by
  // design, so those functions are compiled with the replication check off.
  auto compile = [&](const ir::Function& f, int64_t s, std::vector<Sharding> in,
                     std::vector<Sharding> out,
                     ReplicationCheck check = ReplicationCheck::kEnforce)
      -> absl::StatusOr<CompiledFunction> {
    return client_->Compile(f, meshes_[s], {std::move(in), std::move(out), check});
  };
  auto concat = [](std::vector<Sharding> a, const std::vector<Sharding>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };

  for (int64_t s = 0; s < S; ++s) {
    const std::vector<Sharding> ps = shardings(s);
    const size_t np = ps.size();
    const Sharding in_sh = BatchSharding();  // tokens or activations: rows over data
    if (s < S - 1) {
      // Forward: (params..., input) -> activations.
      FunctionBuilder fb(absl::StrCat("gpt_stage", s, "_forward"));
      std::vector<Value> params = add_params(fb, s);
      Value input = fb.Parameter(s == 0 ? tokens : act);
      CW_ASSIGN_OR_RETURN(ir::Function fwd, fb.Build({stage_body(fb, s, params, input)}));
      CW_ASSIGN_OR_RETURN(CompiledFunction f, compile(fwd, s, concat(ps, {in_sh}), {BatchSharding()}));
      forward_.push_back(f);
      // Backward by the gradient of <forward(params, input), g>.
      FunctionBuilder vb(absl::StrCat("gpt_stage", s, "_vjp"));
      std::vector<Value> vparams = add_params(vb, s);
      Value vinput = vb.Parameter(s == 0 ? tokens : act);
      Value g = vb.Parameter(act);
      Value y = stage_body(vb, s, vparams, vinput);
      CW_ASSIGN_OR_RETURN(ir::Function vjp, vb.Build({vb.ReduceSum(vb.Mul(y, g), {0, 1})}));
      std::vector<int> wrt;
      for (size_t i = 0; i < np; ++i) wrt.push_back(static_cast<int>(i));
      if (s > 0) wrt.push_back(static_cast<int>(np));
      CW_ASSIGN_OR_RETURN(ir::Function grad, ir::Grad(vjp, wrt));
      FunctionBuilder bb(absl::StrCat("gpt_stage", s, "_backward"));
      std::vector<Value> args = add_params(bb, s);
      std::vector<Value> acc = add_params(bb, s);
      args.push_back(bb.Parameter(s == 0 ? tokens : act));
      args.push_back(bb.Parameter(act));
      std::vector<Value> out = bb.Call(grad, args);
      std::vector<Value> results;
      for (size_t i = 0; i < np; ++i) results.push_back(bb.Add(acc[i], out[1 + i]));
      if (s > 0) results.push_back(out[1 + np]);
      CW_ASSIGN_OR_RETURN(ir::Function bwd, bb.Build(results));
      std::vector<Sharding> out_sh = ps;
      if (s > 0) out_sh.push_back(BatchSharding());
      CW_ASSIGN_OR_RETURN(CompiledFunction bf,
                          compile(bwd, s, concat(concat(ps, ps), {in_sh, BatchSharding()}), out_sh,
                                  ReplicationCheck::kOff));
      backward_.push_back(bf);
    } else {
      // Loss and backward: (params..., acc..., loss_acc, x, targets) ->
      // (acc + grads..., loss_acc + share, d x).
      CW_ASSIGN_OR_RETURN(ir::Function loss, last_loss());
      std::vector<int> wrt;
      for (size_t i = 0; i <= np; ++i) wrt.push_back(static_cast<int>(i));
      CW_ASSIGN_OR_RETURN(ir::Function grad, ir::Grad(loss, wrt));
      FunctionBuilder bb("gpt_stage_last_backward");
      std::vector<Value> args = add_params(bb, s);
      std::vector<Value> acc = add_params(bb, s);
      Value loss_acc = bb.Parameter(scalar);
      args.push_back(bb.Parameter(act));
      args.push_back(bb.Parameter(tokens));
      std::vector<Value> out = bb.Call(grad, args);
      std::vector<Value> results;
      for (size_t i = 0; i < np; ++i) results.push_back(bb.Add(acc[i], out[1 + i]));
      results.push_back(bb.Add(loss_acc, out[0]));
      results.push_back(out[1 + np]);
      CW_ASSIGN_OR_RETURN(ir::Function bwd, bb.Build(results));
      std::vector<Sharding> in = concat(ps, ps);
      in.push_back(Sharding::Replicated(0));
      in.push_back(BatchSharding());
      in.push_back(BatchSharding());
      std::vector<Sharding> out_sh = ps;
      out_sh.push_back(Sharding::Replicated(0));
      out_sh.push_back(BatchSharding());
      CW_ASSIGN_OR_RETURN(CompiledFunction bf,
                          compile(bwd, s, in, out_sh, ReplicationCheck::kOff));
      backward_.push_back(bf);
      // Evaluation: (params..., loss_acc, x, targets) -> loss_acc + share.
      FunctionBuilder eb("gpt_stage_last_eval");
      std::vector<Value> eargs = add_params(eb, s);
      Value eacc = eb.Parameter(scalar);
      eargs.push_back(eb.Parameter(act));
      eargs.push_back(eb.Parameter(tokens));
      CW_ASSIGN_OR_RETURN(ir::Function e, eb.Build({eb.Add(eacc, eb.Call(loss, eargs)[0])}));
      std::vector<Sharding> ein = ps;
      ein.push_back(Sharding::Replicated(0));
      ein.push_back(BatchSharding());
      ein.push_back(BatchSharding());
      CW_ASSIGN_OR_RETURN(eval_last_,
                          compile(e, s, ein, {Sharding::Replicated(0)}, ReplicationCheck::kOff));
      FunctionBuilder rb("gpt_eval_reduce");
      Value l = rb.Parameter(scalar);
      CW_ASSIGN_OR_RETURN(ir::Function r, rb.Build({D > 1 ? rb.AllReduce(l, {kDataAxis}) : rb.Add(l, rb.ConstantF32(0.0f))}));
      CW_ASSIGN_OR_RETURN(eval_reduce_, compile(r, s, {Sharding::Replicated(0)}, {Sharding::Replicated(0)}));
    }

    // Reduction: (acc... [, loss_acc]) -> (grads... (all-reduced over data),
    // sum of squares without the tied wte [, loss]).
    FunctionBuilder rb(absl::StrCat("gpt_stage", s, "_reduce"));
    std::vector<Value> acc = add_params(rb, s);
    Value loss_acc;
    if (s == S - 1) loss_acc = rb.Parameter(scalar);
    std::vector<Value> grads = acc;
    if (D > 1) {
      std::vector<Value> parts;
      for (Value a : acc) parts.push_back(rb.Reshape(a, {rb.shape(a).num_elements()}));
      if (s == S - 1) parts.push_back(rb.Reshape(loss_acc, {1}));
      Value flat = rb.AllReduce(rb.Concatenate(parts, 0), {kDataAxis});
      int64_t offset = 0;
      for (size_t i = 0; i < acc.size(); ++i) {
        const std::vector<int64_t> dims = rb.shape(acc[i]).dims;
        const int64_t n = rb.shape(acc[i]).num_elements();
        grads[i] = rb.Reshape(rb.Slice(flat, {offset}, {offset + n}), dims);
        offset += n;
      }
      if (s == S - 1) loss_acc = rb.Reshape(rb.Slice(flat, {offset}, {offset + 1}), {});
    }
    std::vector<Value> counted;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (stage_params_[s][i] != 0) counted.push_back(grads[i]);  // wte: after the tie
    }
    std::vector<Value> results;
    if (D > 1) results = grads;
    results.push_back(SumOfSquares(rb, counted));
    if (s == S - 1) results.push_back(D > 1 ? loss_acc : rb.Add(loss_acc, rb.ConstantF32(0.0f)));
    CW_ASSIGN_OR_RETURN(ir::Function red, rb.Build(results));
    std::vector<Sharding> rin = ps;
    if (s == S - 1) rin.push_back(Sharding::Replicated(0));
    std::vector<Sharding> rout;
    if (D > 1) rout = ps;
    rout.push_back(Sharding::Replicated(0));
    if (s == S - 1) rout.push_back(Sharding::Replicated(0));
    CW_ASSIGN_OR_RETURN(CompiledFunction rf, compile(red, s, rin, rout));
    reduce_.push_back(rf);

    // Update: (params..., m..., v..., grads..., hyper, clip) -> (params', m', v').
    FunctionBuilder ub(absl::StrCat("gpt_stage", s, "_update"));
    internal::AdamWValues state;
    state.p = add_params(ub, s);
    state.m = add_params(ub, s);
    state.v = add_params(ub, s);
    std::vector<Value> ugrads = add_params(ub, s);
    Value hyper = ub.Parameter(Shape(DType::kF32, {2}));
    Value clip = ub.Parameter(scalar);
    std::vector<bool> decay;
    for (int id : stage_params_[s]) decay.push_back(specs[id].decay);
    const internal::AdamWValues next =
        internal::AppendAdamW(ub, adamw_, state, ugrads, decay, hyper, clip);
    std::vector<Value> uout = next.p;
    uout.insert(uout.end(), next.m.begin(), next.m.end());
    uout.insert(uout.end(), next.v.begin(), next.v.end());
    CW_ASSIGN_OR_RETURN(ir::Function upd, ub.Build(uout));
    std::vector<Sharding> uin = concat(concat(concat(ps, ps), ps), ps);
    uin.push_back(Sharding::Replicated(1));
    uin.push_back(Sharding::Replicated(0));
    CW_ASSIGN_OR_RETURN(CompiledFunction uf, compile(upd, s, uin, concat(concat(ps, ps), ps)));
    update_.push_back(uf);
  }

  // The tie, on the first stage: (d wte first, d wte last) -> (sum, its sum of squares).
  {
    const Shape wte(DType::kF32, specs[0].dims);
    FunctionBuilder b("gpt_tie_wte");
    Value a = b.Parameter(wte);
    Value z = b.Parameter(wte);
    Value sum = b.Add(a, z);
    CW_ASSIGN_OR_RETURN(ir::Function f, b.Build({sum, SumOfSquares(b, {sum})}));
    CW_ASSIGN_OR_RETURN(tie_, compile(f, 0, {Sharding::Replicated(2), Sharding::Replicated(2)},
                                      {Sharding::Replicated(2), Sharding::Replicated(0)}));
  }
  // The global norm and clip factor, on the first stage: (sum of squares of
  // every stage..., of wte) -> (clip, norm).
  {
    FunctionBuilder b("gpt_global_norm");
    Value sq = b.ConstantF32(0.0f);
    std::vector<Sharding> in;
    for (int64_t s = 0; s <= S; ++s) {
      sq = b.Add(sq, b.Parameter(scalar));
      in.push_back(Sharding::Replicated(0));
    }
    Value norm = b.Sqrt(sq);
    CW_ASSIGN_OR_RETURN(ir::Function f, b.Build({internal::ClipFactor(b, adamw_, norm), norm}));
    CW_ASSIGN_OR_RETURN(norm_, compile(f, 0, in, {Sharding::Replicated(0), Sharding::Replicated(0)}));
  }
  return absl::OkStatus();
}

absl::Status GptPipeline::TraceStageParams(ProgramBuilder& pb,
                                           std::vector<std::vector<TracedArray>>& group) const {
  const std::vector<ParamSpec> specs = GptParams(config_);
  group.assign(options_.stages, {});
  for (int64_t s = 0; s < options_.stages; ++s) {
    for (int id : stage_params_[s]) {
      CW_ASSIGN_OR_RETURN(TracedArray a, pb.Parameter(Shape(DType::kF32, specs[id].dims),
                                                      meshes_[s], ParamSharding(specs[id])));
      group[s].push_back(std::move(a));
    }
  }
  return absl::OkStatus();
}

absl::Status GptPipeline::TraceBatches(ProgramBuilder& pb, std::vector<TracedArray>& tokens,
                                       std::vector<TracedArray>& targets) const {
  const Shape batch_shape(DType::kI32, {micro_rows_, config_.context});
  for (int64_t mb = 0; mb < options_.microbatches; ++mb) {
    CW_ASSIGN_OR_RETURN(TracedArray x, pb.Parameter(batch_shape, meshes_[0], BatchSharding()));
    tokens.push_back(std::move(x));
  }
  for (int64_t mb = 0; mb < options_.microbatches; ++mb) {
    CW_ASSIGN_OR_RETURN(TracedArray y,
                        pb.Parameter(batch_shape, meshes_[options_.stages - 1], BatchSharding()));
    targets.push_back(std::move(y));
  }
  return absl::OkStatus();
}

absl::Status GptPipeline::TraceStep() {
  const int64_t S = options_.stages;
  const int64_t M = options_.microbatches;
  const std::vector<ParamSpec> specs = GptParams(config_);
  ProgramBuilder pb = client_->NewProgram("gpt_pipeline_step");
  auto param = [&](const Shape& shape, int64_t s, const Sharding& sh) {
    return pb.Parameter(shape, meshes_[s], sh);
  };
  // Program parameters: per stage params, m, v, accumulator zeros; the zero
  // loss; hyper; each micro-batch's tokens and targets.
  std::vector<std::vector<TracedArray>> p, m, v, acc;
  for (auto* group : {&p, &m, &v, &acc}) CW_RETURN_IF_ERROR(TraceStageParams(pb, *group));
  CW_ASSIGN_OR_RETURN(TracedArray loss_acc,
                      param(Shape(DType::kF32, {}), S - 1, Sharding::Replicated(0)));
  CW_ASSIGN_OR_RETURN(TracedArray hyper,
                      param(Shape(DType::kF32, {2}), 0, Sharding::Replicated(1)));
  std::vector<TracedArray> tokens, targets;
  CW_RETURN_IF_ERROR(TraceBatches(pb, tokens, targets));

  // The calls, in the schedule's order.
  std::vector<std::vector<TracedArray>> inputs(S, std::vector<TracedArray>(M));  // stage inputs
  std::vector<std::vector<TracedArray>> grads_in(S, std::vector<TracedArray>(M));  // d output
  for (int64_t mb = 0; mb < M; ++mb) inputs[0][mb] = tokens[mb];
  for (const PipelineOp& op : PipelineTraceOrder(S, M, options_.schedule)) {
    const int64_t s = op.stage;
    const int64_t mb = op.microbatch;
    if (op.forward) {
      if (s == S - 1) continue;  // the last stage's forward is part of its backward call
      std::vector<TracedArray> args = p[s];
      args.push_back(inputs[s][mb]);
      CW_ASSIGN_OR_RETURN(std::vector<TracedArray> out, pb.Call(forward_[s], args));
      inputs[s + 1][mb] = out[0];
      continue;
    }
    std::vector<TracedArray> args = p[s];
    args.insert(args.end(), acc[s].begin(), acc[s].end());
    if (s == S - 1) args.push_back(loss_acc);
    args.push_back(inputs[s][mb]);
    args.push_back(s == S - 1 ? targets[mb] : grads_in[s][mb]);
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> out, pb.Call(backward_[s], args));
    const size_t np = p[s].size();
    acc[s].assign(out.begin(), out.begin() + static_cast<int64_t>(np));
    if (s == S - 1) loss_acc = out[np];
    if (s > 0) grads_in[s - 1][mb] = out.back();
  }

  // Reduce, tie, norm, update.
  std::vector<std::vector<TracedArray>> grads(S);
  std::vector<TracedArray> sumsq;
  TracedArray loss;
  for (int64_t s = 0; s < S; ++s) {
    std::vector<TracedArray> args = acc[s];
    if (s == S - 1) args.push_back(loss_acc);
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> out, pb.Call(reduce_[s], args));
    const size_t np = acc[s].size();
    if (options_.data > 1) {
      grads[s].assign(out.begin(), out.begin() + static_cast<int64_t>(np));
      sumsq.push_back(out[np]);
    } else {
      grads[s] = acc[s];
      sumsq.push_back(out[0]);
    }
    if (s == S - 1) loss = out.back();
  }
  CW_ASSIGN_OR_RETURN(std::vector<TracedArray> tied,
                      pb.Call(tie_, {grads[0][0], grads[S - 1].back()}));
  grads[0][0] = tied[0];
  grads[S - 1].back() = tied[0];
  sumsq.push_back(tied[1]);
  CW_ASSIGN_OR_RETURN(std::vector<TracedArray> norm, pb.Call(norm_, sumsq));
  std::vector<TracedArray> outputs;
  std::vector<std::vector<TracedArray>> np_(S), nm(S), nv(S);
  for (int64_t s = 0; s < S; ++s) {
    std::vector<TracedArray> args = p[s];
    for (const auto* g : {&m[s], &v[s], &grads[s]}) args.insert(args.end(), g->begin(), g->end());
    args.push_back(hyper);
    args.push_back(norm[0]);
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> out, pb.Call(update_[s], args));
    const int64_t n = static_cast<int64_t>(p[s].size());
    np_[s].assign(out.begin(), out.begin() + n);
    nm[s].assign(out.begin() + n, out.begin() + 2 * n);
    nv[s].assign(out.begin() + 2 * n, out.end());
  }
  for (auto* group : {&np_, &nm, &nv}) {
    for (int64_t s = 0; s < S; ++s) outputs.insert(outputs.end(), (*group)[s].begin(), (*group)[s].end());
  }
  outputs.push_back(loss);
  outputs.push_back(norm[1]);
  CW_ASSIGN_OR_RETURN(step_program_, pb.Build(outputs));
  return absl::OkStatus();
}

absl::Status GptPipeline::TraceEval() {
  const int64_t S = options_.stages;
  const int64_t M = options_.microbatches;
  const std::vector<ParamSpec> specs = GptParams(config_);
  ProgramBuilder pb = client_->NewProgram("gpt_pipeline_eval");
  std::vector<std::vector<TracedArray>> p;
  CW_RETURN_IF_ERROR(TraceStageParams(pb, p));
  CW_ASSIGN_OR_RETURN(TracedArray loss_acc, pb.Parameter(Shape(DType::kF32, {}), meshes_[S - 1],
                                                         Sharding::Replicated(0)));
  std::vector<TracedArray> tokens, targets;
  CW_RETURN_IF_ERROR(TraceBatches(pb, tokens, targets));
  for (int64_t mb = 0; mb < M; ++mb) {
    TracedArray x = tokens[mb];
    for (int64_t s = 0; s < S - 1; ++s) {
      std::vector<TracedArray> args = p[s];
      args.push_back(x);
      CW_ASSIGN_OR_RETURN(std::vector<TracedArray> out, pb.Call(forward_[s], args));
      x = out[0];
    }
    std::vector<TracedArray> args = p[S - 1];
    args.push_back(loss_acc);
    args.push_back(x);
    args.push_back(targets[mb]);
    CW_ASSIGN_OR_RETURN(std::vector<TracedArray> out, pb.Call(eval_last_, args));
    loss_acc = out[0];
  }
  CW_ASSIGN_OR_RETURN(std::vector<TracedArray> loss, pb.Call(eval_reduce_, {loss_acc}));
  CW_ASSIGN_OR_RETURN(eval_program_, pb.Build(loss));
  return absl::OkStatus();
}

absl::Status GptPipeline::Init(const std::vector<ir::Literal>& params,
                               const std::vector<ir::Literal>& m,
                               const std::vector<ir::Literal>& v) {
  const int64_t S = options_.stages;
  const std::vector<ParamSpec> specs = GptParams(config_);
  CW_RETURN_IF_ERROR(CheckModelState(specs.size(), params, m, v));
  std::vector<ir::Literal> zeros;
  for (const ParamSpec& spec : specs) zeros.emplace_back(Shape(DType::kF32, spec.dims));
  params_.assign(S, {});
  m_.assign(S, {});
  v_.assign(S, {});
  zeros_.assign(S, {});
  for (int64_t s = 0; s < S; ++s) {
    CW_ASSIGN_OR_RETURN(params_[s], PutParams(client_, meshes_[s], specs, stage_params_[s], params));
    CW_ASSIGN_OR_RETURN(m_[s], PutParams(client_, meshes_[s], specs, stage_params_[s], m));
    CW_ASSIGN_OR_RETURN(v_[s], PutParams(client_, meshes_[s], specs, stage_params_[s], v));
    CW_ASSIGN_OR_RETURN(zeros_[s], PutParams(client_, meshes_[s], specs, stage_params_[s], zeros));
  }
  CW_ASSIGN_OR_RETURN(zero_loss_, client_->Put(ir::Literal::ScalarF32(0.0f), meshes_[S - 1],
                                               Sharding::Replicated(0)));
  return absl::OkStatus();
}

absl::Status GptPipeline::PutMicrobatches(const TokenBatch& batch, std::vector<Array>& args) {
  if (batch.inputs.shape().dims != std::vector<int64_t>{batch_, config_.context} ||
      batch.targets.shape() != batch.inputs.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("the pipeline takes i32[", batch_, ",",
                                                   config_.context, "] batches, not ",
                                                   batch.inputs.shape().ToString()));
  }
  const int64_t S = options_.stages;
  const int64_t M = options_.microbatches;
  for (int64_t mb = 0; mb < M; ++mb) {
    CW_ASSIGN_OR_RETURN(Array x, client_->Put(LiteralRows(batch.inputs, mb, micro_rows_), meshes_[0],
                                              BatchSharding()));
    args.push_back(std::move(x));
  }
  for (int64_t mb = 0; mb < M; ++mb) {
    CW_ASSIGN_OR_RETURN(Array y, client_->Put(LiteralRows(batch.targets, mb, micro_rows_),
                                              meshes_[S - 1], BatchSharding()));
    args.push_back(std::move(y));
  }
  return absl::OkStatus();
}

absl::StatusOr<LmStepEngine::StepOutputs> GptPipeline::Step(const TokenBatch& batch, float step,
                                                            float learning_rate) {
  const int64_t S = options_.stages;
  std::vector<Array> args;
  for (const auto* group : {&params_, &m_, &v_, &zeros_}) {
    for (int64_t s = 0; s < S; ++s) args.insert(args.end(), (*group)[s].begin(), (*group)[s].end());
  }
  args.push_back(zero_loss_);
  CW_ASSIGN_OR_RETURN(Array hyper, client_->Put(ir::Literal::F32({2}, {step, learning_rate}),
                                                meshes_[0], Sharding::Replicated(1)));
  args.push_back(std::move(hyper));
  CW_RETURN_IF_ERROR(PutMicrobatches(batch, args));
  CW_ASSIGN_OR_RETURN(std::vector<Array> out, step_program_.Run(args));
  size_t k = 0;
  for (auto* group : {&params_, &m_, &v_}) {
    for (int64_t s = 0; s < S; ++s) {
      for (Array& a : (*group)[s]) a = std::move(out[k++]);
    }
  }
  return StepOutputs{std::move(out[k]), std::move(out[k + 1])};
}

absl::StatusOr<Array> GptPipeline::Evaluate(const TokenBatch& batch) {
  const int64_t S = options_.stages;
  std::vector<Array> args;
  for (int64_t s = 0; s < S; ++s) args.insert(args.end(), params_[s].begin(), params_[s].end());
  args.push_back(zero_loss_);
  CW_RETURN_IF_ERROR(PutMicrobatches(batch, args));
  CW_ASSIGN_OR_RETURN(std::vector<Array> out, eval_program_.Run(args));
  return std::move(out[0]);
}

std::vector<Array> GptPipeline::Gather(const std::vector<std::vector<Array>>& by_stage) const {
  std::vector<Array> out(GptParams(config_).size());
  for (size_t s = 0; s < by_stage.size(); ++s) {
    for (size_t i = 0; i < by_stage[s].size(); ++i) {
      const int id = stage_params_[s][i];
      if (!out[id].valid()) out[id] = by_stage[s][i];  // wte: the first stage's
    }
  }
  return out;
}

}  // namespace causeway::models
