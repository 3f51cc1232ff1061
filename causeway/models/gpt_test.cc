// The GPT model's IR: gradients of the whole model against finite
// differences, layout validation, and the shapes of the step functions.
#include "causeway/models/gpt.h"

#include <cmath>
#include <random>

#include "causeway/ir/autodiff.h"
#include "causeway/testing/run_function.h"
#include "causeway/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace causeway::models {
namespace {

using ::causeway::testing::RunFunction;

GptConfig Tiny() {
  GptConfig c;
  c.vocab = 7;
  c.context = 4;
  c.layers = 2;
  c.heads = 2;
  c.embed = 8;
  return c;
}

// Parameters with larger values than GPT-2's init, so every gradient is
// well away from zero.
std::vector<ir::Literal> NoisyParams(const GptConfig& c, uint32_t seed) {
  std::vector<ir::Literal> params = InitGptParams(c, seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (ir::Literal& p : params) {
    for (float& x : p.mutable_values<float>()) x += noise(rng);
  }
  return params;
}

std::vector<ir::Literal> Tokens(const GptConfig& c, int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.vocab - 1));
  std::vector<int32_t> x(static_cast<size_t>(batch * c.context)), y(x.size());
  for (auto& v : x) v = pick(rng);
  for (auto& v : y) v = pick(rng);
  return {ir::Literal::I32({batch, c.context}, x), ir::Literal::I32({batch, c.context}, y)};
}

TEST(GptTest, GradientsOfTheWholeModelMatchFiniteDifferences) {
  for (bool bias : {true, false}) {
    GptConfig c = Tiny();
    c.bias = bias;
    const int64_t batch = 2;
    ASSERT_OK_AND_ASSIGN(ir::Function loss, GptLossFunction(c, {}, batch));
    const std::vector<ParamSpec> specs = GptParams(c);
    std::vector<int> wrt;
    for (size_t i = 0; i < specs.size(); ++i) wrt.push_back(static_cast<int>(i));
    ASSERT_OK_AND_ASSIGN(ir::Function grad, ir::Grad(loss, wrt));

    std::vector<ir::Literal> inputs = NoisyParams(c, 3);
    for (ir::Literal& t : Tokens(c, batch, 4)) inputs.push_back(std::move(t));
    const std::vector<ir::Literal> out = RunFunction(grad, inputs);
    ASSERT_EQ(out.size(), specs.size() + 1);
    const float base = out[0].values<float>()[0];
    EXPECT_GT(base, 0.5f);

    std::mt19937 rng(5);
    constexpr float kEps = 1e-2f;
    for (size_t p = 0; p < specs.size(); ++p) {
      const int64_t n = inputs[p].shape().num_elements();
      std::uniform_int_distribution<int64_t> pick(0, n - 1);
      for (int k = 0; k < 3; ++k) {
        const int64_t e = pick(rng);
        std::vector<ir::Literal> plus = inputs, minus = inputs;
        plus[p].mutable_values<float>()[e] += kEps;
        minus[p].mutable_values<float>()[e] -= kEps;
        const double fd = (static_cast<double>(RunFunction(loss, plus)[0].values<float>()[0]) -
                           RunFunction(loss, minus)[0].values<float>()[0]) /
                          (2.0 * kEps);
        const double g = out[1 + p].values<float>()[e];
        EXPECT_NEAR(g, fd, 3e-3 + 0.03 * std::abs(fd))
            << specs[p].name << "[" << e << "], bias " << bias;
      }
    }
  }
}

TEST(GptTest, ParametersFollowTheGpt2LayoutAndInitialisation) {
  GptConfig c;  // the CLI defaults
  c.vocab = 65;
  const std::vector<ParamSpec> specs = GptParams(c);
  int64_t total = 0;
  for (const ParamSpec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.dims) n *= d;
    total += n;
  }
  // 4 blocks of 12 e^2 + 13 e, embeddings (65 + 64) e, final LayerNorm 2 e.
  const int64_t e = 128;
  EXPECT_EQ(total, 4 * (12 * e * e + 13 * e) + (65 + 64) * e + 2 * e);
  EXPECT_EQ(specs.front().name, "wte");
  EXPECT_TRUE(specs.front().decay);
  const std::vector<ir::Literal> init = InitGptParams(c, 1);
  for (size_t i = 0; i < specs.size(); ++i) {
    const absl::Span<const float> v = init[i].values<float>();
    double sum = 0, sq = 0;
    for (float x : v) {
      sum += x;
      sq += double{x} * x;
    }
    const double mean = sum / v.size(), var = sq / v.size() - mean * mean;
    switch (specs[i].init) {
      case Init::kNormal:
        EXPECT_NEAR(std::sqrt(var), 0.02, 0.004) << specs[i].name;
        break;
      case Init::kResidualNormal:
        EXPECT_NEAR(std::sqrt(var), 0.02 / std::sqrt(8.0), 0.001) << specs[i].name;
        break;
      case Init::kOnes:
        EXPECT_EQ(mean, 1.0) << specs[i].name;
        break;
      case Init::kZeros:
        EXPECT_EQ(sq, 0.0) << specs[i].name;
        break;
    }
  }
  // Same seed, same weights; another seed, other weights.
  EXPECT_EQ(InitGptParams(c, 1)[0], init[0]);
  EXPECT_FALSE(InitGptParams(c, 2)[0] == init[0]);
}

TEST(GptTest, LayoutsThatDoNotSplitAreRefusedByName) {
  GptConfig c = Tiny();  // 2 heads, embed 8
  EXPECT_OK(ValidateLayout(c, {2, 2}, 4));
  EXPECT_THAT(ValidateLayout(c, {3, 1}, 4),
              ::causeway::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                            ::testing::HasSubstr("not divisible by the data axis")));
  EXPECT_THAT(ValidateLayout(c, {1, 4}, 4),
              ::causeway::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                            ::testing::HasSubstr("heads are not divisible")));
  c.embed = 9;
  EXPECT_THAT(c.Validate(), ::causeway::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                          ::testing::HasSubstr("heads")));
}

TEST(GptTest, TrainStepReducesGradientsOncePerGroup) {
  const GptConfig c = Tiny();
  auto count = [](const ir::Function& f) {
    int n = 0;
    for (const ir::Instruction& i : f.instructions()) n += i.op == ir::OpKind::kAllReduce;
    return n;
  };
  ASSERT_OK_AND_ASSIGN(ir::Function one, GptTrainStepFunction(c, {1, 1}, 2, {}));
  EXPECT_EQ(count(one), 0);
  ASSERT_OK_AND_ASSIGN(ir::Function data, GptTrainStepFunction(c, {2, 1}, 2, {}));
  EXPECT_EQ(count(data), 1);  // one flat vector: every gradient and the loss
  ASSERT_OK_AND_ASSIGN(ir::Function both, GptTrainStepFunction(c, {2, 2}, 2, {}));
  // Forward: 2 per block; their transposes; 2 gradient groups; the norm of
  // the split group.
  EXPECT_EQ(count(both), 2 * 2 * 2 + 2 + 1);
  const int np = static_cast<int>(GptParams(c).size());
  EXPECT_EQ(both.num_parameters(), 3 * np + 3);
  EXPECT_EQ(both.num_outputs(), 3 * np + 2);
}

TEST(GptTest, AShardedOptimizerStepReduceScattersAndGathersOnce) {
  const GptConfig c = Tiny();
  auto count = [](const ir::Function& f, ir::OpKind op) {
    int n = 0;
    for (const ir::Instruction& i : f.instructions()) n += i.op == op;
    return n;
  };
  const ShardedOptimizerLayout flat(c, 3);
  const std::vector<ParamSpec> specs = GptParams(c);
  EXPECT_EQ(flat.offsets.size(), specs.size());
  EXPECT_EQ(flat.shard, (flat.total + 2) / 3);
  EXPECT_EQ(flat.padded, 3 * flat.shard);
  EXPECT_EQ(flat.offsets.back() + ir::Shape(ir::DType::kF32, specs.back().dims).num_elements(),
            flat.total);
  ASSERT_OK_AND_ASSIGN(ir::Function f, GptShardedTrainStepFunction(c, {3, 1}, 2, {}));
  EXPECT_EQ(count(f, ir::OpKind::kReduceScatter), 1);
  EXPECT_EQ(count(f, ir::OpKind::kAllGather), 1);
  EXPECT_EQ(count(f, ir::OpKind::kAllReduce), 1);  // the loss and the squared norm
  const int np = static_cast<int>(specs.size());
  EXPECT_EQ(f.num_parameters(), np + 4 + 3);
  EXPECT_EQ(f.num_outputs(), np + 3 + 2);
  EXPECT_EQ(f.parameter_shape(np).dims, std::vector<int64_t>{flat.shard});
  EXPECT_THAT(GptShardedTrainStepFunction(c, {2, 2}, 2, {}).status(),
              ::causeway::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                            ::testing::HasSubstr("model axis of 1")));
}

}  // namespace
}  // namespace causeway::models
