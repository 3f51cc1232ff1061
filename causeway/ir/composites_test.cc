// Composites against straightforward C++ references, run through the CPU
// backend.
#include "causeway/ir/composites.h"

#include <cmath>
#include <random>
#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/ir/autodiff.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/testing/run_function.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::ir {
namespace {

using ::causeway::testing::RunFunction;

std::vector<float> RandomVec(size_t n, uint32_t seed, float scale = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> RefSoftmaxRow(const float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(std::exp(x[i] - mx) / sum);
  return out;
}

TEST(CompositesTest, SoftmaxAndLogSoftmaxMatchTheReferenceAndStayFiniteForLargeLogits) {
  std::vector<float> x = RandomVec(12, 1);
  x[0] = 1000.0f;  // would overflow exp() without the max shift
  FunctionBuilder b("softmax");
  Value p = b.Parameter(Shape(DType::kF32, {3, 4}));
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({Softmax(b, p), LogSoftmax(b, p)}));
  auto out = RunFunction(f, {Literal::F32({3, 4}, x)});
  for (int r = 0; r < 3; ++r) {
    std::vector<float> ref = RefSoftmaxRow(&x[r * 4], 4);
    for (int c = 0; c < 4; ++c) {
      EXPECT_NEAR(out[0].values<float>()[r * 4 + c], ref[c], 1e-6f);
      const float ls = out[1].values<float>()[r * 4 + c];
      EXPECT_TRUE(std::isfinite(ls));
      if (ref[c] > 1e-30f) {
        EXPECT_NEAR(ls, std::log(ref[c]), 1e-4f);
      }
    }
  }
}

TEST(CompositesTest, LayerNormMatchesTheReference) {
  const std::vector<float> x = RandomVec(10, 2), gamma = {1, 2, 0.5, -1, 3},
                           beta = {0, 1, -1, 0.5, 0};
  FunctionBuilder b("ln");
  Value p = b.Parameter(Shape(DType::kF32, {2, 5}));
  Value g = b.Parameter(Shape(DType::kF32, {5}));
  Value be = b.Parameter(Shape(DType::kF32, {5}));
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({LayerNorm(b, p, g, be, 1e-5f)}));
  auto out = RunFunction(f, {Literal::F32({2, 5}, x), Literal::F32({5}, gamma),
                       Literal::F32({5}, beta)});
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 5; ++c) mean += x[r * 5 + c] / 5.0;
    for (int c = 0; c < 5; ++c) var += (x[r * 5 + c] - mean) * (x[r * 5 + c] - mean) / 5.0;
    for (int c = 0; c < 5; ++c) {
      const double ref = (x[r * 5 + c] - mean) / std::sqrt(var + 1e-5) * gamma[c] + beta[c];
      EXPECT_NEAR(out[0].values<float>()[r * 5 + c], ref, 1e-4);
    }
  }
}

// The fused kernels compute what the op-by-op composites compute, forward
// and backward (the gradient ops against the autodiff of the op-by-op form).
TEST(CompositesTest, FusedKernelsMatchTheOpByOpComposites) {
  using Composite = Value (*)(FunctionBuilder&, Value);
  const auto layer_norm = [](FunctionBuilder& b, Value x) {
    const Value ones = b.Full(1.0f, {6}), zeros = b.Full(0.0f, {6});
    return LayerNorm(b, x, ones, zeros, 1e-5f);
  };
  const auto layer_norm_op_by_op = [](FunctionBuilder& b, Value x) {
    const Value ones = b.Full(1.0f, {6}), zeros = b.Full(0.0f, {6});
    return LayerNormOpByOp(b, x, ones, zeros, 1e-5f);
  };
  const std::vector<std::pair<Composite, Composite>> pairs = {
      {Gelu, GeluOpByOp}, {Softmax, SoftmaxOpByOp}, {layer_norm, layer_norm_op_by_op}};
  const std::vector<float> x = RandomVec(24, 7), w = RandomVec(24, 8);
  for (const auto& [fused, op_by_op] : pairs) {
    std::vector<std::vector<Literal>> results;
    for (Composite c : {fused, op_by_op}) {
      FunctionBuilder b("f");
      Value p = b.Parameter(Shape(DType::kF32, {4, 6}));
      Value y = c(b, p);
      Value loss = b.ReduceSum(b.Mul(y, b.Constant(Literal::F32({4, 6}, w))), {0, 1});
      ASSERT_OK_AND_ASSIGN(Function f, b.Build({y, loss}));
      FunctionBuilder lb("loss");
      Value lp = lb.Parameter(Shape(DType::kF32, {4, 6}));
      ASSERT_OK_AND_ASSIGN(Function lf, lb.Build({lb.Call(f, {lp})[1]}));
      ASSERT_OK_AND_ASSIGN(Function g, Grad(lf, {0}));
      std::vector<Literal> out = RunFunction(f, {Literal::F32({4, 6}, x)});
      out.push_back(RunFunction(g, {Literal::F32({4, 6}, x)})[1]);
      results.push_back(std::move(out));
    }
    for (size_t i = 0; i < 24; ++i) {
      EXPECT_NEAR(results[0][0].values<float>()[i], results[1][0].values<float>()[i], 1e-5f);
      EXPECT_NEAR(results[0][2].values<float>()[i], results[1][2].values<float>()[i], 1e-4f);
    }
  }
}

TEST(CompositesTest, GeluMatchesKnownValues) {
  FunctionBuilder b("gelu");
  Value p = b.Parameter(Shape(DType::kF32, {4}));
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({Gelu(b, p)}));
  auto out = RunFunction(f, {Literal::F32({4}, {-1, 0, 1, 3})});
  EXPECT_NEAR(out[0].values<float>()[0], -0.158808f, 1e-5f);
  EXPECT_NEAR(out[0].values<float>()[1], 0.0f, 1e-7f);
  EXPECT_NEAR(out[0].values<float>()[2], 0.841192f, 1e-5f);
  EXPECT_NEAR(out[0].values<float>()[3], 2.996363f, 1e-5f);
}

TEST(CompositesTest, CrossEntropyAndItsGradientMatchTheReference) {
  const std::vector<float> logits = RandomVec(12, 3);
  const std::vector<int32_t> labels = {2, 0, 3};
  FunctionBuilder b("xent");
  Value l = b.Parameter(Shape(DType::kF32, {3, 4}));
  Value y = b.Parameter(Shape(DType::kI32, {3}));
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({CrossEntropy(b, l, y)}));
  ASSERT_OK_AND_ASSIGN(Function g, Grad(f, {0}));
  auto out = RunFunction(g, {Literal::F32({3, 4}, logits), Literal::I32({3}, labels)});
  double ref = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<float> p = RefSoftmaxRow(&logits[r * 4], 4);
    ref -= std::log(p[labels[r]]) / 3.0;
    for (int c = 0; c < 4; ++c) {
      // d/dlogits = (softmax - onehot) / n.
      const float expected = (p[c] - (c == labels[r] ? 1.0f : 0.0f)) / 3.0f;
      EXPECT_NEAR(out[1].values<float>()[r * 4 + c], expected, 1e-6f);
    }
  }
  EXPECT_NEAR(out[0].values<float>()[0], ref, 1e-5);
}

TEST(CompositesTest, CausalAttentionMatchesTheReferenceAndIgnoresTheFuture) {
  constexpr int B = 2, T = 3, D = 4;
  const std::vector<float> q = RandomVec(B * T * D, 4), k = RandomVec(B * T * D, 5),
                           v = RandomVec(B * T * D, 6);
  FunctionBuilder b("attn");
  const Shape s(DType::kF32, {B, T, D});
  Value pq = b.Parameter(s), pk = b.Parameter(s), pv = b.Parameter(s);
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({CausalAttention(b, pq, pk, pv)}));
  auto out = RunFunction(f, {Literal::F32({B, T, D}, q), Literal::F32({B, T, D}, k),
                       Literal::F32({B, T, D}, v)});
  for (int n = 0; n < B; ++n) {
    for (int i = 0; i < T; ++i) {
      std::vector<float> scores(i + 1);
      for (int j = 0; j <= i; ++j) {
        float dot = 0;
        for (int d = 0; d < D; ++d) dot += q[(n * T + i) * D + d] * k[(n * T + j) * D + d];
        scores[j] = dot / std::sqrt(static_cast<float>(D));
      }
      std::vector<float> p = RefSoftmaxRow(scores.data(), i + 1);
      for (int d = 0; d < D; ++d) {
        float ref = 0;
        for (int j = 0; j <= i; ++j) ref += p[j] * v[(n * T + j) * D + d];
        EXPECT_NEAR(out[0].values<float>()[(n * T + i) * D + d], ref, 1e-5f);
      }
    }
  }
}

TEST(CompositesTest, AdamWMatchesTheReferenceOverTwoSteps) {
  AdamWOptions o;
  o.learning_rate = 0.1f;
  FunctionBuilder b("adamw");
  const Shape s(DType::kF32, {3});
  Value p = b.Parameter(s), g = b.Parameter(s), m = b.Parameter(s), v = b.Parameter(s);
  Value step = b.Parameter(Shape(DType::kF32, {}));
  AdamWResult r = AdamWUpdate(b, p, g, m, v, step, o);
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({r.param, r.m, r.v}));
  std::vector<float> param = {1, -2, 0.5}, mm(3, 0), vv(3, 0);
  Literal lp = Literal::F32({3}, param), lm = Literal::F32({3}, mm), lv = Literal::F32({3}, vv);
  for (int t = 1; t <= 2; ++t) {
    const std::vector<float> grad = {0.3f * t, -0.1f, 2.0f};
    auto out = RunFunction(f, {lp, Literal::F32({3}, grad), lm, lv, Literal::ScalarF32(t)});
    for (int i = 0; i < 3; ++i) {
      mm[i] = o.beta1 * mm[i] + (1 - o.beta1) * grad[i];
      vv[i] = o.beta2 * vv[i] + (1 - o.beta2) * grad[i] * grad[i];
      const double mh = mm[i] / (1 - std::pow(o.beta1, t));
      const double vh = vv[i] / (1 - std::pow(o.beta2, t));
      param[i] -= o.learning_rate * (mh / (std::sqrt(vh) + o.epsilon) +
                                     o.weight_decay * param[i]);
      EXPECT_NEAR(out[0].values<float>()[i], param[i], 1e-5f) << "step " << t;
    }
    lp = out[0];
    lm = out[1];
    lv = out[2];
  }
}

}  // namespace
}  // namespace causeway::ir
