#include "causeway/models/mlp.h"

#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/autodiff.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/composites.h"

namespace causeway::models {
namespace {

using ir::DType;
using ir::FunctionBuilder;
using ir::Shape;
using ir::Value;

// loss(w1, b1, w2, b2, x, labels): mean cross-entropy of this shard.
absl::StatusOr<ir::Function> LossFunction(const MlpOptions& o, int64_t rows) {
  FunctionBuilder b("mlp_loss");
  Value w1 = b.Parameter(Shape(DType::kF32, {o.features, o.hidden}));
  Value b1 = b.Parameter(Shape(DType::kF32, {o.hidden}));
  Value w2 = b.Parameter(Shape(DType::kF32, {o.hidden, o.classes}));
  Value b2 = b.Parameter(Shape(DType::kF32, {o.classes}));
  Value x = b.Parameter(Shape(DType::kF32, {rows, o.features}));
  Value labels = b.Parameter(Shape(DType::kI32, {rows}));
  Value h = b.Add(b.Matmul(x, w1), b.Broadcast(b1, {rows, o.hidden}, {1}));
  h = b.Max(h, b.Full(0.0f, {rows, o.hidden}));  // ReLU
  Value logits = b.Add(b.Matmul(h, w2), b.Broadcast(b2, {rows, o.classes}, {1}));
  return b.Build({ir::CrossEntropy(b, logits, labels)});
}

std::vector<float> Normal(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace

Batch MakeBatch(const MlpOptions& o, int64_t step) {
  std::mt19937 centre_rng(o.seed * 7919u + 17u);
  const std::vector<float> centres =
      Normal(static_cast<size_t>(o.classes * o.features), 1.0f, centre_rng);
  std::mt19937 rng(static_cast<uint32_t>(o.seed * 1000003u + step * 2654435761u));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(o.classes - 1));
  std::normal_distribution<float> noise(0.0f, 1.5f);
  std::vector<float> x(static_cast<size_t>(o.global_batch * o.features));
  std::vector<int32_t> labels(static_cast<size_t>(o.global_batch));
  for (int64_t i = 0; i < o.global_batch; ++i) {
    labels[i] = pick(rng);
    for (int64_t f = 0; f < o.features; ++f) {
      x[i * o.features + f] = centres[labels[i] * o.features + f] + noise(rng);
    }
  }
  return {ir::Literal::F32({o.global_batch, o.features}, x),
          ir::Literal::I32({o.global_batch}, labels)};
}

absl::StatusOr<ir::Function> MlpStepFunction(const MlpOptions& o, int devices) {
  if (devices <= 0 || o.global_batch % devices != 0) {
    return absl::InvalidArgumentError(absl::StrCat("global batch ", o.global_batch,
                                                   " does not split over ", devices,
                                                   " devices"));
  }
  const int64_t rows = o.global_batch / devices;
  CW_ASSIGN_OR_RETURN(ir::Function loss, LossFunction(o, rows));
  CW_ASSIGN_OR_RETURN(ir::Function grad, ir::Grad(loss, {0, 1, 2, 3}));

  FunctionBuilder b("mlp_train_step");
  std::vector<Value> args;
  for (int i = 0; i < loss.num_parameters(); ++i) args.push_back(b.Parameter(loss.parameter_shape(i)));
  // grad returns (loss, dw1, db1, dw2, db2) for this shard's examples.
  std::vector<Value> out = b.Call(grad, args);
  const std::vector<std::string> data = {"data"};
  const float inv = 1.0f / static_cast<float>(devices);
  std::vector<Value> results;
  for (int k = 0; k < 4; ++k) {
    const std::vector<int64_t> dims = b.shape(args[k]).dims;
    // Mean over devices of per-shard mean gradients = global mean gradient.
    Value g = b.Mul(b.AllReduce(out[1 + k], data), b.Full(inv, dims));
    results.push_back(b.Sub(args[k], b.Mul(b.Full(o.learning_rate, dims), g)));
  }
  results.push_back(b.Mul(b.AllReduce(out[0], data), b.ConstantF32(inv)));
  return b.Build(results);
}

absl::StatusOr<std::unique_ptr<MlpTrainer>> MlpTrainer::Create(Client* client, int devices,
                                                               const MlpOptions& o) {
  CW_ASSIGN_OR_RETURN(ir::Function step, MlpStepFunction(o, devices));
  CW_ASSIGN_OR_RETURN(Mesh mesh, client->AllocateMesh({{"data", devices}}));
  CompileOptions options;
  for (int i = 0; i < 4; ++i) {
    options.in_shardings.push_back(Sharding::Replicated(step.parameter_shape(i).rank()));
    options.out_shardings.push_back(options.in_shardings.back());
  }
  options.in_shardings.push_back(Sharding({{"data"}, {}}));
  options.in_shardings.push_back(Sharding({{"data"}}));
  options.out_shardings.push_back(Sharding::Replicated(0));
  CW_ASSIGN_OR_RETURN(CompiledFunction compiled, client->Compile(step, mesh, options));

  std::mt19937 rng(o.seed);
  std::vector<ir::Literal> init = {
      ir::Literal::F32({o.features, o.hidden},
                       Normal(o.features * o.hidden, 1.0f / std::sqrt(float(o.features)), rng)),
      ir::Literal::F32({o.hidden}, std::vector<float>(o.hidden, 0.0f)),
      ir::Literal::F32({o.hidden, o.classes},
                       Normal(o.hidden * o.classes, 1.0f / std::sqrt(float(o.hidden)), rng)),
      ir::Literal::F32({o.classes}, std::vector<float>(o.classes, 0.0f))};
  std::vector<Array> weights;
  for (const ir::Literal& l : init) {
    CW_ASSIGN_OR_RETURN(Array a,
                        client->Put(l, mesh, Sharding::Replicated(l.shape().rank())));
    weights.push_back(std::move(a));
  }
  return std::unique_ptr<MlpTrainer>(
      new MlpTrainer(client, o, std::move(mesh), std::move(compiled), std::move(weights)));
}

absl::StatusOr<float> MlpTrainer::Step(int64_t step) {
  Batch batch = MakeBatch(options_, step);
  CW_ASSIGN_OR_RETURN(Array x, client_->Put(batch.x, mesh_, Sharding({{"data"}, {}})));
  CW_ASSIGN_OR_RETURN(Array y, client_->Put(batch.labels, mesh_, Sharding({{"data"}})));
  std::vector<Array> args = weights_;
  args.push_back(std::move(x));
  args.push_back(std::move(y));
  CW_ASSIGN_OR_RETURN(std::vector<Array> out, client_->Call(step_, args));
  weights_.assign(out.begin(), out.begin() + 4);
  CW_ASSIGN_OR_RETURN(ir::Literal loss, out[4].Fetch().Await());
  return loss.values<float>()[0];
}

absl::StatusOr<std::vector<ir::Literal>> MlpTrainer::Weights() const {
  std::vector<ir::Literal> out;
  for (const Array& a : weights_) {
    CW_ASSIGN_OR_RETURN(ir::Literal l, a.Fetch().Await());
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace causeway::models
