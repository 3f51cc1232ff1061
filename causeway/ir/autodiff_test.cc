// Every gradient rule against central finite differences, run through the
// CPU backend. Collective rules need several devices and are tested in
// tests/integration/collectives_test.cc.
#include "causeway/ir/autodiff.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/ir/builder.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/testing/run_function.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::ir {
namespace {

using Body = std::function<Value(FunctionBuilder&, const std::vector<Value>&)>;

using ::causeway::testing::RunFunction;

Literal Random(std::vector<int64_t> dims, float lo, float hi, uint32_t seed,
               bool avoid_zero = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Literal l(Shape(DType::kF32, std::move(dims)));
  for (float& v : l.mutable_values<float>()) {
    v = dist(rng);
    if (avoid_zero && std::abs(v) < 0.3f) v += v < 0 ? -0.3f : 0.3f;
  }
  return l;
}

// Builds loss = sum(body(params) * w) with fixed random weights w, checks
// Grad(loss) against finite differences for each parameter in `wrt`.
void CheckGrad(const std::vector<Literal>& inputs, const Body& body, std::vector<int> wrt) {
  FunctionBuilder b("f");
  std::vector<Value> params;
  for (const Literal& l : inputs) params.push_back(b.Parameter(l.shape()));
  Value out = body(b, params);
  ASSERT_TRUE(b.status().ok()) << b.status();
  const Shape out_shape = b.shape(out);
  std::vector<int64_t> all;
  for (int d = 0; d < out_shape.rank(); ++d) all.push_back(d);
  Value w = b.Constant(Random(out_shape.dims, 0.5f, 1.5f, 99));
  Value loss = b.ReduceSum(b.Mul(out, w), all);
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({loss}));
  ASSERT_OK_AND_ASSIGN(Function g, Grad(f, wrt));
  ASSERT_EQ(g.num_outputs(), 1 + static_cast<int>(wrt.size()));
  const std::vector<Literal> analytic = RunFunction(g, inputs);
  constexpr float kEps = 1e-2f;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Literal& grad = analytic[1 + k];
    ASSERT_EQ(grad.shape(), inputs[wrt[k]].shape());
    for (size_t j = 0; j < grad.values<float>().size(); ++j) {
      std::vector<Literal> plus = inputs, minus = inputs;
      plus[wrt[k]].mutable_values<float>()[j] += kEps;
      minus[wrt[k]].mutable_values<float>()[j] -= kEps;
      const float fd = (RunFunction(f, plus)[0].values<float>()[0] -
                        RunFunction(f, minus)[0].values<float>()[0]) /
                       (2 * kEps);
      const float an = grad.values<float>()[j];
      EXPECT_NEAR(an, fd, 5e-3f + 2e-2f * std::abs(fd))
          << "parameter " << wrt[k] << " element " << j << "\n"
          << g.ToString();
    }
  }
}

const std::vector<int64_t> kDims = {2, 3};
Literal Pos(uint32_t seed) { return Random(kDims, 0.5f, 1.5f, seed); }
Literal Any(uint32_t seed) { return Random(kDims, -1.5f, 1.5f, seed, true); }

TEST(AutodiffTest, FusedTransformerOps) {
  CheckGrad({Any(11)}, [](auto& b, auto& p) { return b.Gelu(p[0]); }, {0});
  CheckGrad({Any(12)}, [](auto& b, auto& p) { return b.Softmax(p[0]); }, {0});
  // Layer normalisation over rows of 3: strongly curved, so the rows are
  // spread out (no element near its row's mean).
  CheckGrad({Literal::F32({2, 3}, {-1.0f, 0.2f, 1.3f, 0.9f, -0.6f, 2.0f})},
            [](auto& b, auto& p) { return b.Normalize(p[0], b.ConstantF32(1e-5f)); }, {0});
}

TEST(AutodiffTest, BinaryArithmetic) {
  CheckGrad({Any(1), Any(2)}, [](auto& b, auto& p) { return b.Add(p[0], p[1]); }, {0, 1});
  CheckGrad({Any(1), Any(2)}, [](auto& b, auto& p) { return b.Sub(p[0], p[1]); }, {0, 1});
  CheckGrad({Any(1), Any(2)}, [](auto& b, auto& p) { return b.Mul(p[0], p[1]); }, {0, 1});
  CheckGrad({Any(1), Pos(2)}, [](auto& b, auto& p) { return b.Div(p[0], p[1]); }, {0, 1});
  CheckGrad({Pos(1), Any(2)}, [](auto& b, auto& p) { return b.Pow(p[0], p[1]); }, {0, 1});
}

TEST(AutodiffTest, MaxAndMinRouteTheGradientToTheChosenOperand) {
  CheckGrad({Any(3), Any(4)}, [](auto& b, auto& p) { return b.Max(p[0], p[1]); }, {0, 1});
  CheckGrad({Any(3), Any(4)}, [](auto& b, auto& p) { return b.Min(p[0], p[1]); }, {0, 1});
}

TEST(AutodiffTest, Unary) {
  CheckGrad({Any(5)}, [](auto& b, auto& p) { return b.Neg(p[0]); }, {0});
  CheckGrad({Any(5)}, [](auto& b, auto& p) { return b.Abs(p[0]); }, {0});
  CheckGrad({Any(5)}, [](auto& b, auto& p) { return b.Exp(p[0]); }, {0});
  CheckGrad({Pos(5)}, [](auto& b, auto& p) { return b.Log(p[0]); }, {0});
  CheckGrad({Any(5)}, [](auto& b, auto& p) { return b.Tanh(p[0]); }, {0});
  CheckGrad({Any(5)}, [](auto& b, auto& p) { return b.Logistic(p[0]); }, {0});
  CheckGrad({Pos(5)}, [](auto& b, auto& p) { return b.Sqrt(p[0]); }, {0});
  CheckGrad({Pos(5)}, [](auto& b, auto& p) { return b.Rsqrt(p[0]); }, {0});
  CheckGrad({Any(5)}, [](auto& b, auto& p) { return b.Delay(p[0], 0); }, {0});
  CheckGrad({Any(5)}, [](auto& b, auto& p) { return b.Convert(p[0], DType::kF32); }, {0});
}

TEST(AutodiffTest, PiecewiseConstantOpsHaveZeroGradient) {
  // sign, floor and compare pass nothing: d/dx [x * 0 + sign(x) + floor(x)]
  // is zero, and the select's predicate (a comparison) gets no gradient.
  CheckGrad({Any(6)},
            [](auto& b, auto& p) {
              Value s = b.Add(b.Sign(p[0]), b.Floor(p[0]));
              Value pred = b.Compare(p[0], b.Full(0, kDims), Comparison::kGt);
              return b.Add(s, b.Select(pred, p[0], b.Neg(p[0])));  // + |x|
            },
            {0});
}

TEST(AutodiffTest, SelectRoutesByPredicate) {
  CheckGrad({Any(7), Any(8)},
            [](auto& b, auto& p) {
              Value pred = b.Compare(p[0], p[1], Comparison::kLt);
              return b.Select(pred, b.Mul(p[0], p[0]), b.Exp(p[1]));
            },
            {0, 1});
}

TEST(AutodiffTest, ShapeOps) {
  CheckGrad({Random({3}, -1, 1, 9)}, [](auto& b, auto& p) { return b.Broadcast(p[0], {2, 3}, {1}); },
            {0});
  CheckGrad({Random({1, 3}, -1, 1, 9)},
            [](auto& b, auto& p) { return b.Broadcast(p[0], {4, 2, 3}, {1, 2}); }, {0});
  CheckGrad({Any(10)}, [](auto& b, auto& p) { return b.Reshape(p[0], {3, 2}); }, {0});
  CheckGrad({Random({2, 3, 4}, -1, 1, 11)},
            [](auto& b, auto& p) { return b.Transpose(p[0], {2, 0, 1}); }, {0});
  CheckGrad({Random({4, 5}, -1, 1, 12)},
            [](auto& b, auto& p) { return b.Slice(p[0], {1, 0}, {3, 4}); }, {0});
  CheckGrad({Any(13), Random({2, 2}, -1, 1, 14)},
            [](auto& b, auto& p) { return b.Concatenate({p[0], p[1], p[0]}, 1); }, {0, 1});
  CheckGrad({Any(15), Random({}, -1, 1, 16)},
            [](auto& b, auto& p) { return b.Pad(p[0], p[1], {1, 0}, {0, 2}); }, {0, 1});
}

TEST(AutodiffTest, Reductions) {
  CheckGrad({Random({2, 3, 4}, -1, 1, 17)},
            [](auto& b, auto& p) { return b.ReduceSum(p[0], {0, 2}); }, {0});
  CheckGrad({Random({2, 3, 4}, -1, 1, 18)},
            [](auto& b, auto& p) { return b.ReduceMax(p[0], {1}); }, {0});
  CheckGrad({Random({2, 3, 4}, -1, 1, 19)},
            [](auto& b, auto& p) { return b.ReduceMin(p[0], {2, 0}); }, {0});
}

TEST(AutodiffTest, MatmulAndDotGeneral) {
  CheckGrad({Random({2, 3}, -1, 1, 20), Random({3, 4}, -1, 1, 21)},
            [](auto& b, auto& p) { return b.Matmul(p[0], p[1]); }, {0, 1});
  // Batch dims in different positions, two contracting dims in swapped
  // order, free dims on both sides.
  CheckGrad({Random({3, 2, 4, 2}, -1, 1, 22), Random({4, 2, 3, 5}, -1, 1, 23)},
            [](auto& b, auto& p) {
              return b.DotGeneral(p[0], p[1], /*lhs_batch=*/{1}, /*rhs_batch=*/{1},
                                  /*lhs_contracting=*/{2, 0}, /*rhs_contracting=*/{0, 2});
            },
            {0, 1});
  // Attention-style q @ k^T with a batch dimension.
  CheckGrad({Random({2, 3, 4}, -1, 1, 24), Random({2, 5, 4}, -1, 1, 25)},
            [](auto& b, auto& p) { return b.DotGeneral(p[0], p[1], {0}, {0}, {2}, {2}); },
            {0, 1});
}

TEST(AutodiffTest, TrigonometricFunctions) {
  CheckGrad({Any(50)}, [](auto& b, auto& p) { return b.Sin(p[0]); }, {0});
  CheckGrad({Any(51)}, [](auto& b, auto& p) { return b.Cos(p[0]); }, {0});
  CheckGrad({Any(52)}, [](auto& b, auto& p) { return b.Atan(p[0]); }, {0});
  CheckGrad({Any(53)}, [](auto& b, auto& p) { return b.Erf(p[0]); }, {0});
}

TEST(AutodiffTest, StridedSlices) {
  // Steps that divide the range and steps that cut its last element.
  CheckGrad({Random({5, 7}, -1, 1, 40)},
            [](auto& b, auto& p) { return b.Slice(p[0], {1, 0}, {5, 7}, {2, 3}); }, {0});
  CheckGrad({Random({2, 9, 4}, -1, 1, 41)},
            [](auto& b, auto& p) { return b.Slice(p[0], {0, 2, 1}, {2, 9, 4}, {1, 4, 1}); }, {0});
}

TEST(AutodiffTest, ConvolutionAndItsGradientOps) {
  // 2-D, two groups, stride 2, dilation, asymmetric padding.
  const ConvSpec spec{{2, 1}, {1, 2}, {1, 0}, {0, 2}, 2};
  const Literal x = Random({2, 4, 5, 6}, -1, 1, 30), w = Random({6, 2, 2, 3}, -1, 1, 31);
  CheckGrad({x, w}, [&](auto& b, auto& p) { return b.Convolution(p[0], p[1], spec); }, {0, 1});
  // The gradient ops are differentiable too (ONNX's ConvTranspose is
  // conv_input_grad): y [2, 6, 3, 4] is the convolution's output shape.
  const Literal y = Random({2, 6, 3, 4}, -1, 1, 32);
  CheckGrad({y, w},
            [&](auto& b, auto& p) { return b.ConvInputGrad(p[0], p[1], {2, 4, 5, 6}, spec); },
            {0, 1});
  CheckGrad({x, y},
            [&](auto& b, auto& p) { return b.ConvKernelGrad(p[0], p[1], {6, 2, 2, 3}, spec); },
            {0, 1});
  // 1-D with a crop (negative low padding).
  CheckGrad({Random({1, 2, 7}, -1, 1, 33), Random({3, 2, 3}, -1, 1, 34)},
            [](auto& b, auto& p) { return b.Convolution(p[0], p[1], ConvSpec{{1}, {1}, {-1}, {0}, 1}); },
            {0, 1});
}

// Distinct values 0.05 apart, shuffled: no two within a finite
// difference's step, so a maximum never changes hands.
Literal Spread(std::vector<int64_t> dims, uint32_t seed) {
  Literal l(Shape(DType::kF32, std::move(dims)));
  auto v = l.mutable_values<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * static_cast<float>(i) - 1.0f;
  std::mt19937 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return l;
}

TEST(AutodiffTest, Pooling) {
  // ResNet's max pooling (3x3, stride 2, padding 1), and windows with
  // dilation and asymmetric padding, by max and by sum.
  const ConvSpec resnet{{2, 2}, {1, 1}, {1, 1}, {1, 1}, 1};
  const ConvSpec odd{{1, 2}, {2, 1}, {0, 1}, {1, 0}, 1};
  for (ReduceKind kind : {ReduceKind::kMax, ReduceKind::kSum}) {
    CheckGrad({Spread({1, 2, 5, 5}, 60)},
              [&](auto& b, auto& p) { return b.Pool(p[0], kind, {3, 3}, resnet); }, {0});
    CheckGrad({Spread({2, 1, 5, 4}, 61)},
              [&](auto& b, auto& p) { return b.Pool(p[0], kind, {2, 3}, odd); }, {0});
    CheckGrad({Spread({1, 2, 7}, 62)},
              [&](auto& b, auto& p) {
                return b.Pool(p[0], kind, {3}, ConvSpec{{2}, {1}, {0}, {2}, 1});
              },
              {0});
  }
}

TEST(AutodiffTest, MaxPoolingGivesATiedWindowsGradientToItsFirstMaximumOnly) {
  // Zeros after a ReLU: every position of each window ties.
  FunctionBuilder b("f");
  const Value x = b.Parameter(Shape(DType::kF32, {1, 1, 3, 3}));
  const Value y = b.Pool(x, ReduceKind::kMax, {2, 2}, ConvSpec{{1, 1}, {}, {}, {}, 1});
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({b.ReduceSum(y, {0, 1, 2, 3})}));
  ASSERT_OK_AND_ASSIGN(Function g, Grad(f, {0}));
  const std::vector<Literal> out = RunFunction(g, {Literal::F32({1, 1, 3, 3}, std::vector<float>(9, 0))});
  // Windows start at (0,0), (0,1), (1,0), (1,1): each gives its gradient
  // to its top-left element.
  const auto dx = out[1].values<float>();
  EXPECT_EQ(std::vector<float>(dx.begin(), dx.end()),
            (std::vector<float>{1, 1, 0, 1, 1, 0, 0, 0, 0}));
}

TEST(AutodiffTest, GatherAndScatterAdd) {
  const Literal idx = Literal::I32({4}, {2, 0, 2, 1});
  CheckGrad({Random({3, 5}, -1, 1, 26), idx},
            [](auto& b, auto& p) { return b.Gather(p[0], p[1], 0); }, {0});
  CheckGrad({Random({2, 3}, -1, 1, 27), idx, Random({2, 4}, -1, 1, 28)},
            [](auto& b, auto& p) {
              Value s = b.ScatterAdd(p[0], p[1], p[2], 1);
              return b.Mul(s, s);
            },
            {0, 2});
}

TEST(AutodiffTest, GradientsAccumulateOverEveryUse) {
  // f(x, y) = x * x * y + exp(x): x is used three times.
  CheckGrad({Any(29), Any(30)},
            [](auto& b, auto& p) {
              return b.Add(b.Mul(b.Mul(p[0], p[0]), p[1]), b.Exp(p[0]));
            },
            {0, 1});
}

TEST(AutodiffTest, ParametersThatDoNotReachTheLossGetZeros) {
  FunctionBuilder b("f");
  Value x = b.Parameter(Shape(DType::kF32, {3}));
  Value unused = b.Parameter(Shape(DType::kF32, {2}));
  (void)unused;
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({b.ReduceSum(x, {0})}));
  ASSERT_OK_AND_ASSIGN(Function g, Grad(f, {1, 0}));
  const auto out = RunFunction(g, {Literal::F32({3}, {1, 2, 3}), Literal::F32({2}, {4, 5})});
  EXPECT_THAT(out[1].values<float>(), ::testing::ElementsAre(0, 0));
  EXPECT_THAT(out[2].values<float>(), ::testing::ElementsAre(1, 1, 1));
}

TEST(AutodiffTest, RejectsNonScalarLossAndBadWrt) {
  FunctionBuilder b("f");
  Value x = b.Parameter(Shape(DType::kF32, {3}));
  Value i = b.Parameter(Shape(DType::kI32, {}));
  (void)i;
  ASSERT_OK_AND_ASSIGN(Function vec, b.Build({x}));
  EXPECT_EQ(Grad(vec, {0}).status().code(), absl::StatusCode::kInvalidArgument);
  FunctionBuilder b2("g");
  Value x2 = b2.Parameter(Shape(DType::kF32, {3}));
  b2.Parameter(Shape(DType::kI32, {}));
  ASSERT_OK_AND_ASSIGN(Function scalar, b2.Build({b2.ReduceSum(x2, {0})}));
  EXPECT_EQ(Grad(scalar, {1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Grad(scalar, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Grad(scalar, {0, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Grad(scalar, {0}).ok());
}


TEST(AutodiffTest, GradientsFlowThroughTheBranchAConditionalTakes) {
  // loss(x, w, n) = sum(branch_n(x, w)) with branch 0: x * x * w, branch 1: w - x,
  // branch 2: 3 (no dependence on x or w).
  const Shape v(DType::kF32, {3});
  auto branch = [&](const char* name, int which) {
    FunctionBuilder fb(name);
    Value x = fb.Parameter(v);
    Value w = fb.Parameter(v);
    Value r = which == 0 ? fb.Mul(fb.Mul(x, x), w) : which == 1 ? fb.Sub(w, x) : fb.Full(3, {3});
    return *fb.Build({r, fb.ReduceSum(x, {0})});
  };
  FunctionBuilder b("loss");
  Value x = b.Parameter(v);
  Value w = b.Parameter(v);
  Value n = b.Parameter(Shape(DType::kI32, {}));
  std::vector<Value> r =
      b.Conditional(n, {branch("square", 0), branch("diff", 1), branch("const", 2)}, {x, w});
  // Result 1 does not reach the loss; result 0 does, twice.
  const Function f = *b.Build({b.ReduceSum(b.Add(r[0], r[0]), {0})});
  ASSERT_OK_AND_ASSIGN(Function g, Grad(f, {0, 1}));
  const ir::Literal xs = ir::Literal::F32({3}, {1, 2, 3});
  const ir::Literal ws = ir::Literal::F32({3}, {4, 5, 6});
  auto run = [&](int32_t sel) {
    std::vector<ir::Literal> out = RunFunction(g, {xs, ws, ir::Literal::I32({}, {sel})});
    return std::make_pair(std::vector<float>(out[1].values<float>().begin(),
                                             out[1].values<float>().end()),
                          std::vector<float>(out[2].values<float>().begin(),
                                             out[2].values<float>().end()));
  };
  // d/dx 2*sum(x*x*w) = 4 x w; d/dw = 2 x^2.
  EXPECT_EQ(run(0), std::make_pair(std::vector<float>{16, 40, 72}, std::vector<float>{2, 8, 18}));
  EXPECT_EQ(run(1), std::make_pair(std::vector<float>{-2, -2, -2}, std::vector<float>{2, 2, 2}));
  EXPECT_EQ(run(2), std::make_pair(std::vector<float>{0, 0, 0}, std::vector<float>{0, 0, 0}));
}

TEST(AutodiffTest, AWhileLoopOnTheGradientPathIsAnErrorNotZeros) {
  FunctionBuilder cb("small");
  Value cx = cb.Parameter(Shape(DType::kF32, {}));
  const Function cond = *cb.Build({cb.Compare(cx, cb.ConstantF32(100), Comparison::kLt)});
  FunctionBuilder bb("twice");
  Value bx = bb.Parameter(Shape(DType::kF32, {}));
  const Function body = *bb.Build({bb.Add(bx, bx)});
  FunctionBuilder b("loss");
  Value x = b.Parameter(Shape(DType::kF32, {}));
  Value y = b.Parameter(Shape(DType::kF32, {}));
  std::vector<Value> r = b.While(cond, body, {x});
  std::vector<Value> beside = b.While(cond, body, {b.ConstantF32(3)});
  const Function f = *b.Build({b.Add(r[0], b.Mul(y, beside[0]))});
  absl::StatusOr<Function> g = Grad(f, {0});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), ::testing::HasSubstr("through a while loop"));
  // A loop beside the gradient path is fine: d/dy = 192 (3 doubled to 192).
  ASSERT_OK_AND_ASSIGN(Function gy, Grad(f, {1}));
  std::vector<ir::Literal> out =
      RunFunction(gy, {ir::Literal::ScalarF32(1), ir::Literal::ScalarF32(1)});
  EXPECT_EQ(out[1].values<float>()[0], 192.0f);
}

TEST(AutodiffTest, AValueKeptInF16OnTheGradientPathIsAnErrorNotZeros) {
  FunctionBuilder b("loss");
  Value x = b.Parameter(Shape(DType::kF32, {3}));
  Value y = b.Parameter(Shape(DType::kF32, {3}));
  Value rounded = b.Convert(b.Convert(x, DType::kF16), DType::kF32);
  const Function f = *b.Build({b.ReduceSum(b.Mul(rounded, y), {0})});
  absl::StatusOr<Function> g = Grad(f, {0});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), ::testing::HasSubstr("makes a f16 value"));
  // Against y, the f16 round trip of x is a constant: d/dy = x in f16.
  ASSERT_OK_AND_ASSIGN(Function gy, Grad(f, {1}));
  std::vector<ir::Literal> out =
      RunFunction(gy, {ir::Literal::F32({3}, {1.0f + 1e-4f, 2.0f, -3.0f}),
                       ir::Literal::F32({3}, {1.0f, 1.0f, 1.0f})});
  EXPECT_THAT(out[1].values<float>(), ::testing::ElementsAre(1.0f, 2.0f, -3.0f));
}

}  // namespace
}  // namespace causeway::ir
