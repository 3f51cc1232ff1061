// Forward values of every op added with the complete op set (issue 3),
// against hand-computed results. (The first ops are covered by
// executable_test.cc.)
#include <cmath>
#include <limits>
#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/elements.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::backend::cpu {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::Pointwise;
using namespace ir;  // NOLINT: test brevity

using Body = std::function<Value(FunctionBuilder&, const std::vector<Value>&)>;

Literal Eval(const std::vector<Literal>& inputs, const Body& body) {
  FunctionBuilder b("op");
  std::vector<Value> params;
  for (const Literal& l : inputs) params.push_back(b.Parameter(l.shape()));
  absl::StatusOr<Function> f = b.Build({body(b, params)});
  CW_CHECK_OK(f.status());
  auto exe = Compile(*f);
  CW_CHECK_OK(exe.status());
  std::vector<const void*> in;
  for (const Literal& l : inputs) in.push_back(l.data());
  Literal out(f->output_shape(0));
  void* outs[] = {out.data()};
  CW_CHECK_OK((*exe)->Run(in, outs, {}));
  return out;
}

std::vector<float> F(const Literal& l) {
  return std::vector<float>(l.values<float>().begin(), l.values<float>().end());
}
std::vector<int32_t> I(const Literal& l) {
  return std::vector<int32_t>(l.values<int32_t>().begin(), l.values<int32_t>().end());
}
std::vector<uint8_t> P(const Literal& l) {
  return std::vector<uint8_t>(l.values<uint8_t>().begin(), l.values<uint8_t>().end());
}

const Literal kA = Literal::F32({4}, {-1.5f, 0.0f, 2.0f, 4.0f});
const Literal kB = Literal::F32({4}, {2.0f, -1.0f, 2.0f, 0.5f});

TEST(OpsTest, MinAndPow) {
  EXPECT_THAT(F(Eval({kA, kB}, [](auto& b, auto& p) { return b.Min(p[0], p[1]); })),
              ElementsAre(-1.5f, -1.0f, 2.0f, 0.5f));
  EXPECT_THAT(F(Eval({kB, kA}, [](auto& b, auto& p) { return b.Pow(p[0], p[1]); })),
              Pointwise(FloatNear(1e-5f), std::vector<float>{std::pow(2.0f, -1.5f), 1.0f, 4.0f,
                                                             0.0625f}));
  const Literal ia = Literal::I32({3}, {5, -7, 0}), ib = Literal::I32({3}, {3, 2, -1});
  EXPECT_THAT(I(Eval({ia, ib}, [](auto& b, auto& p) { return b.Min(p[0], p[1]); })),
              ElementsAre(3, -7, -1));
}

TEST(OpsTest, UnaryMath) {
  const Literal x = Literal::F32({4}, {-2.5f, -0.5f, 0.0f, 2.25f});
  auto run = [&](auto op) { return F(Eval({x}, [&](auto& b, auto& p) { return op(b, p[0]); })); };
  EXPECT_THAT(run([](auto& b, Value v) { return b.Abs(v); }), ElementsAre(2.5f, 0.5f, 0, 2.25f));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Sign(v); }), ElementsAre(-1, -1, 0, 1));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Floor(v); }), ElementsAre(-3, -1, 0, 2));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Tanh(v); }),
              Pointwise(FloatNear(1e-6f), std::vector<float>{std::tanh(-2.5f), std::tanh(-0.5f),
                                                             0, std::tanh(2.25f)}));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Logistic(v); }),
              Pointwise(FloatNear(1e-6f),
                        std::vector<float>{1 / (1 + std::exp(2.5f)), 1 / (1 + std::exp(0.5f)),
                                           0.5f, 1 / (1 + std::exp(-2.25f))}));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Sin(v); }),
              Pointwise(FloatNear(1e-6f), std::vector<float>{std::sin(-2.5f), std::sin(-0.5f),
                                                             0, std::sin(2.25f)}));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Cos(v); }),
              Pointwise(FloatNear(1e-6f), std::vector<float>{std::cos(-2.5f), std::cos(-0.5f),
                                                             1, std::cos(2.25f)}));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Erf(v); }),
              Pointwise(FloatNear(1e-6f), std::vector<float>{std::erf(-2.5f), std::erf(-0.5f), 0,
                                                             std::erf(2.25f)}));
  EXPECT_THAT(run([](auto& b, Value v) { return b.Atan(v); }),
              Pointwise(FloatNear(1e-6f), std::vector<float>{std::atan(-2.5f), std::atan(-0.5f),
                                                             0, std::atan(2.25f)}));
  const Literal pos = Literal::F32({3}, {0.25f, 1.0f, 4.0f});
  EXPECT_THAT(F(Eval({pos}, [](auto& b, auto& p) { return b.Sqrt(p[0]); })),
              Pointwise(FloatNear(1e-6f), std::vector<float>{0.5f, 1, 2}));
  EXPECT_THAT(F(Eval({pos}, [](auto& b, auto& p) { return b.Rsqrt(p[0]); })),
              Pointwise(FloatNear(1e-5f), std::vector<float>{2, 1, 0.5f}));
  EXPECT_THAT(F(Eval({pos}, [](auto& b, auto& p) { return b.Log(p[0]); })),
              Pointwise(FloatNear(1e-6f), std::vector<float>{std::log(0.25f), 0, std::log(4.0f)}));
  const Literal ints = Literal::I32({3}, {-4, 0, std::numeric_limits<int32_t>::min()});
  EXPECT_THAT(I(Eval({ints}, [](auto& b, auto& p) { return b.Abs(p[0]); })),
              ElementsAre(4, 0, std::numeric_limits<int32_t>::min()));  // wraps
  EXPECT_THAT(I(Eval({ints}, [](auto& b, auto& p) { return b.Sign(p[0]); })),
              ElementsAre(-1, 0, -1));
}

TEST(OpsTest, CompareAndSelect) {
  const std::vector<std::pair<Comparison, std::vector<uint8_t>>> cases = {
      {Comparison::kEq, {0, 0, 1, 0}}, {Comparison::kNe, {1, 1, 0, 1}},
      {Comparison::kLt, {1, 0, 0, 0}}, {Comparison::kLe, {1, 0, 1, 0}},
      {Comparison::kGt, {0, 1, 0, 1}}, {Comparison::kGe, {0, 1, 1, 1}}};
  for (const auto& [comparison, expected] : cases) {
    const Comparison cmp = comparison;  // clang 15 cannot capture a structured binding
    EXPECT_EQ(P(Eval({kA, kB}, [&](auto& b, auto& p) { return b.Compare(p[0], p[1], cmp); })),
              expected);
  }
  EXPECT_THAT(F(Eval({kA, kB},
                     [](auto& b, auto& p) {
                       return b.Select(b.Compare(p[0], p[1], Comparison::kGt), p[0], p[1]);
                     })),
              ElementsAre(2.0f, 0.0f, 2.0f, 4.0f));
}

TEST(OpsTest, IotaSliceConcatenatePad) {
  EXPECT_THAT(I(Eval({}, [](auto& b, auto&) { return b.Iota(Shape(DType::kI32, {2, 3}), 1); })),
              ElementsAre(0, 1, 2, 0, 1, 2));
  EXPECT_THAT(F(Eval({}, [](auto& b, auto&) { return b.Iota(Shape(DType::kF32, {2, 3}), 0); })),
              ElementsAre(0, 0, 0, 1, 1, 1));
  const Literal m = Literal::F32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  EXPECT_THAT(F(Eval({m}, [](auto& b, auto& p) { return b.Slice(p[0], {1, 1}, {3, 3}); })),
              ElementsAre(5, 6, 9, 10));
  const Literal n = Literal::F32({3, 1}, {-1, -2, -3});
  EXPECT_THAT(F(Eval({m, n}, [](auto& b, auto& p) { return b.Concatenate({p[1], p[0]}, 1); })),
              ElementsAre(-1, 0, 1, 2, 3, -2, 4, 5, 6, 7, -3, 8, 9, 10, 11));
  const Literal v = Literal::F32({2}, {1, 2});
  EXPECT_THAT(F(Eval({v, Literal::ScalarF32(9)},
                     [](auto& b, auto& p) { return b.Pad(p[0], p[1], {2}, {1}); })),
              ElementsAre(9, 9, 1, 2, 9));
}

TEST(OpsTest, ArgSortIsStableAlongAnyDimensionWithNaNLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows of 5 with ties and a NaN.
  const Literal x = Literal::F32({2, 5}, {3, 1, nan, 1, 2, -1, 4, 4, 0, 4});
  EXPECT_THAT(I(Eval({x}, [](auto& b, auto& p) { return b.ArgSort(p[0], 1, false); })),
              ElementsAre(1, 3, 4, 0, 2, 0, 3, 1, 2, 4));
  EXPECT_THAT(I(Eval({x}, [](auto& b, auto& p) { return b.ArgSort(p[0], 1, true); })),
              ElementsAre(2, 0, 4, 1, 3, 1, 2, 4, 3, 0));
  // Along dimension 0 of [3, 2] i32: each column sorted.
  const Literal y = Literal::I32({3, 2}, {5, -1, 2, 7, 5, 0});
  EXPECT_THAT(I(Eval({y}, [](auto& b, auto& p) { return b.ArgSort(p[0], 0, false); })),
              ElementsAre(1, 0, 0, 2, 2, 1));
  FunctionBuilder b("bad");
  b.ArgSort(b.Parameter(Shape(DType::kPred, {3})), 0, false);
  EXPECT_THAT(b.status().message(), ::testing::HasSubstr("must be f32 or i32"));
}

TEST(OpsTest, StridedSlicesTakeEveryStepThElement) {
  std::vector<float> v(30);
  for (int i = 0; i < 30; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  const Literal x = Literal::F32({5, 6}, v);
  // Rows 1 and 4 (step 3 from 1), columns 0, 2, 4 (step 2, ending cut).
  const Literal out = Eval({x}, [](auto& b, auto& p) { return b.Slice(p[0], {1, 0}, {5, 5}, {3, 2}); });
  ASSERT_EQ(out.shape(), Shape(DType::kF32, {2, 3}));
  EXPECT_THAT(F(out), ElementsAre(6, 8, 10, 24, 26, 28));
  // Steps of 1 are plain slices; a step of 0 is refused.
  FunctionBuilder b("steps");
  const Value p = b.Parameter(x.shape());
  EXPECT_EQ(b.shape(b.Slice(p, {0, 0}, {5, 6}, {1, 1})).dims, (std::vector<int64_t>{5, 6}));
  b.Slice(p, {0, 0}, {5, 6}, {0, 1});
  EXPECT_THAT(b.status().message(), ::testing::HasSubstr("slice stride 0"));
}

TEST(OpsTest, GatherClampsAndScatterAddDropsOutOfRangeIndices) {
  const Literal table = Literal::F32({3, 2}, {0, 1, 10, 11, 20, 21});
  const Literal idx = Literal::I32({4}, {2, 0, 7, -1});
  EXPECT_THAT(F(Eval({table, idx}, [](auto& b, auto& p) { return b.Gather(p[0], p[1], 0); })),
              ElementsAre(20, 21, 0, 1, 20, 21, 0, 1));
  const Literal upd = Literal::F32({4, 2}, {1, 1, 2, 2, 100, 100, 100, 100});
  EXPECT_THAT(F(Eval({table, idx, upd},
                     [](auto& b, auto& p) { return b.ScatterAdd(p[0], p[1], p[2], 0); })),
              ElementsAre(2, 3, 10, 11, 21, 22));
  // Along dimension 1.
  const Literal cols = Literal::I32({2}, {1, 1});
  EXPECT_THAT(F(Eval({table, cols}, [](auto& b, auto& p) { return b.Gather(p[0], p[1], 1); })),
              ElementsAre(1, 1, 11, 11, 21, 21));
}

TEST(OpsTest, ReduceMaxAndMin) {
  const Literal m = Literal::F32({2, 3}, {3, -1, 7, 2, 8, -5});
  EXPECT_THAT(F(Eval({m}, [](auto& b, auto& p) { return b.ReduceMax(p[0], {1}); })),
              ElementsAre(7, 8));
  EXPECT_THAT(F(Eval({m}, [](auto& b, auto& p) { return b.ReduceMin(p[0], {0}); })),
              ElementsAre(2, -1, -5));
  EXPECT_THAT(F(Eval({m}, [](auto& b, auto& p) { return b.ReduceMax(p[0], {0, 1}); })),
              ElementsAre(8));
  const Literal e = Literal::F32({0, 2}, {});
  EXPECT_THAT(F(Eval({e}, [](auto& b, auto& p) { return b.ReduceMax(p[0], {0}); })),
              ElementsAre(-std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()));
}

TEST(OpsTest, DotGeneralMatchesLoopsForEveryLayout) {
  // lhs [b=2, k=3, m=2], rhs [n=2, b=2, k=3]: both need BLAS transposes or
  // permutation.
  std::vector<float> lv(12), rv(12);
  for (int i = 0; i < 12; ++i) {
    lv[i] = static_cast<float>(i % 5) - 2;
    rv[i] = static_cast<float>((3 * i) % 7) - 3;
  }
  const Literal lhs = Literal::F32({2, 3, 2}, lv), rhs = Literal::F32({2, 2, 3}, rv);
  const Literal out = Eval({lhs, rhs}, [](auto& b, auto& p) {
    return b.DotGeneral(p[0], p[1], {0}, {1}, {1}, {2});
  });
  ASSERT_EQ(out.shape(), Shape(DType::kF32, {2, 2, 2}));  // [b, m, n]
  std::vector<float> expected;
  for (int bb = 0; bb < 2; ++bb) {
    for (int m = 0; m < 2; ++m) {
      for (int n = 0; n < 2; ++n) {
        float s = 0;
        for (int k = 0; k < 3; ++k) s += lv[(bb * 3 + k) * 2 + m] * rv[(n * 2 + bb) * 3 + k];
        expected.push_back(s);
      }
    }
  }
  EXPECT_THAT(F(out), Pointwise(FloatNear(1e-5f), expected));
  // i32, plain matmul layout.
  const Literal ia = Literal::I32({2, 2}, {1, 2, 3, 4}), ib = Literal::I32({2, 2}, {5, 6, 7, 8});
  EXPECT_THAT(I(Eval({ia, ib},
                     [](auto& b, auto& p) { return b.DotGeneral(p[0], p[1], {}, {}, {1}, {0}); })),
              ElementsAre(19, 22, 43, 50));
}

// The convolution form y[n,o,p] = sum_{c,k} x[n, g*C/G + c, p*s + k*d - pad]
// w[o,c,k] by loops over rank-3 windows (lower ranks padded with unit dims):
// accumulates into whichever of x, w, y `op` computes from the other two.
void ConvLoops(OpKind op, const Shape& xs, const Shape& ws, const Shape& ys, const ConvSpec& spec,
               std::vector<float>& x, std::vector<float>& w, std::vector<float>& y) {
  const size_t sp = xs.dims.size() - 2, skip = 3 - sp;
  int64_t S[3] = {1, 1, 1}, K[3] = {1, 1, 1}, P[3] = {1, 1, 1}, st[3] = {1, 1, 1},
          dl[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
  for (size_t i = 0; i < sp; ++i) {
    S[skip + i] = xs.dims[i + 2];
    K[skip + i] = ws.dims[i + 2];
    P[skip + i] = ys.dims[i + 2];
    st[skip + i] = spec.strides[i];
    dl[skip + i] = spec.dilations[i];
    pad[skip + i] = spec.pad_low[i];
  }
  const int64_t N = xs.dims[0], C = xs.dims[1], O = ws.dims[0], G = spec.groups;
  const int64_t cg = C / G, og = O / G;
  std::vector<float>& out = op == OpKind::kConvolution ? y : op == OpKind::kConvInputGrad ? x : w;
  std::fill(out.begin(), out.end(), 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t p0 = 0; p0 < P[0]; ++p0)
        for (int64_t p1 = 0; p1 < P[1]; ++p1)
          for (int64_t p2 = 0; p2 < P[2]; ++p2)
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t k0 = 0; k0 < K[0]; ++k0)
                for (int64_t k1 = 0; k1 < K[1]; ++k1)
                  for (int64_t k2 = 0; k2 < K[2]; ++k2) {
                    const int64_t i0 = p0 * st[0] + k0 * dl[0] - pad[0];
                    const int64_t i1 = p1 * st[1] + k1 * dl[1] - pad[1];
                    const int64_t i2 = p2 * st[2] + k2 * dl[2] - pad[2];
                    if (i0 < 0 || i0 >= S[0] || i1 < 0 || i1 >= S[1] || i2 < 0 || i2 >= S[2]) {
                      continue;
                    }
                    const int64_t xi =
                        (((n * C + o / og * cg + c) * S[0] + i0) * S[1] + i1) * S[2] + i2;
                    const int64_t wi = (((o * cg + c) * K[0] + k0) * K[1] + k1) * K[2] + k2;
                    const int64_t yi = (((n * O + o) * P[0] + p0) * P[1] + p1) * P[2] + p2;
                    if (op == OpKind::kConvolution) y[yi] += x[xi] * w[wi];
                    if (op == OpKind::kConvInputGrad) x[xi] += y[yi] * w[wi];
                    if (op == OpKind::kConvKernelGrad) w[wi] += x[xi] * y[yi];
                  }
}

TEST(OpsTest, ConvolutionAndItsGradientsMatchLoopsForEveryWindow) {
  struct Geometry {
    const char* name;
    std::vector<int64_t> x, w;
    ConvSpec spec;
    float tolerance = 1e-4f;  // absolute, on sums of rows x values in [-2, 2)
  };
  const std::vector<Geometry> cases = {
      {"1-D, stride 2, dilation 2, padding", {2, 3, 11}, {4, 3, 3}, {{2}, {2}, {1}, {2}, 1}},
      {"2-D, 2 groups, asymmetric", {2, 4, 7, 6}, {6, 2, 3, 2}, {{2, 1}, {1, 2}, {1, 0}, {0, 2}, 2}},
      {"2-D depthwise", {1, 3, 5, 5}, {3, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 3}},
      {"2-D 1x1 (the input read as it lies)", {2, 5, 4, 3}, {7, 5, 1, 1}, {{1, 1}, {1, 1}, {0, 0}, {0, 0}, 1}},
      {"2-D 1x1 with an output past the input", {1, 2, 3, 3}, {2, 2, 1, 1},
       {{1, 1}, {1, 1}, {0, 0}, {1, 0}, 1}},
      {"3-D", {1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {{1, 2, 1}, {1, 1, 2}, {0, 1, 1}, {1, 1, 1}, 1}},
      {"1-D crop (negative low padding)", {1, 2, 9}, {2, 2, 3}, {{1}, {1}, {-2}, {0}, 1}},
      // 576 taps x 4096 positions: more than one col chunk (kernels_conv.cc).
      {"2-D whose col matrix is done in chunks", {1, 64, 64, 64}, {2, 64, 3, 3},
       {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}, 2e-3f},
  };
  uint32_t seed = 1;
  for (const Geometry& g : cases) {
    SCOPED_TRACE(g.name);
    const auto random = [&](std::vector<int64_t> dims) {
      std::vector<float> v(static_cast<size_t>(Shape(DType::kF32, dims).num_elements()));
      for (float& e : v) e = static_cast<float>((seed = seed * 1103515245u + 12345u) >> 16 & 0xff) / 64 - 2;
      return Literal::F32(std::move(dims), v);
    };
    const Literal x = random(g.x), w = random(g.w);
    const Literal y = Eval({x, w}, [&](auto& b, auto& p) { return b.Convolution(p[0], p[1], g.spec); });
    std::vector<float> xv = F(x), wv = F(w), yv(static_cast<size_t>(y.shape().num_elements()));
    ConvLoops(OpKind::kConvolution, x.shape(), w.shape(), y.shape(), g.spec, xv, wv, yv);
    EXPECT_THAT(F(y), Pointwise(FloatNear(g.tolerance), yv));
    // The gradients, from a fresh y.
    const Literal dy = random(y.shape().dims);
    std::vector<float> dyv = F(dy), dx(xv.size()), dw(wv.size());
    ConvLoops(OpKind::kConvInputGrad, x.shape(), w.shape(), y.shape(), g.spec, dx, wv, dyv);
    ConvLoops(OpKind::kConvKernelGrad, x.shape(), w.shape(), y.shape(), g.spec, xv, dw, dyv);
    EXPECT_THAT(F(Eval({dy, w}, [&](auto& b, auto& p) {
                  return b.ConvInputGrad(p[0], p[1], g.x, g.spec);
                })),
                Pointwise(FloatNear(g.tolerance), dx));
    EXPECT_THAT(F(Eval({x, dy}, [&](auto& b, auto& p) {
                  return b.ConvKernelGrad(p[0], p[1], g.w, g.spec);
                })),
                Pointwise(FloatNear(10 * g.tolerance), dw));
  }
}

TEST(OpsTest, ConvolutionsOfMismatchedChannelsOrWindowsAreRefused) {
  FunctionBuilder b("bad");
  const Value x = b.Parameter(Shape(DType::kF32, {1, 4, 5, 5}));
  const Value w = b.Parameter(Shape(DType::kF32, {6, 3, 3, 3}));  // 4 channels are not 3
  b.Convolution(x, w, ConvSpec{});
  EXPECT_THAT(b.status().message(), ::testing::HasSubstr("the channels do not agree"));
  FunctionBuilder b2("bad_window");
  const Value x2 = b2.Parameter(Shape(DType::kF32, {1, 4, 5, 5}));
  const Value w2 = b2.Parameter(Shape(DType::kF32, {6, 4, 3, 3}));
  b2.Convolution(x2, w2, ConvSpec{{0, 1}, {}, {}, {}, 1});
  EXPECT_THAT(b2.status().message(), ::testing::HasSubstr("strides and dilations must be in"));
  FunctionBuilder b3("too_small");
  const Value x3 = b3.Parameter(Shape(DType::kF32, {1, 4, 2, 2}));
  const Value w3 = b3.Parameter(Shape(DType::kF32, {6, 4, 3, 3}));
  b3.Convolution(x3, w3, ConvSpec{});
  EXPECT_THAT(b3.status().message(), ::testing::HasSubstr("at least 1"));
}

// Max or sum pooling by direct loops (ir::OpKind::kPool), rank 3 to 5.
std::vector<float> PoolLoops(const Shape& x, const Shape& y, ReduceKind kind,
                             const std::vector<int64_t>& window, const ConvSpec& spec,
                             const std::vector<float>& xv) {
  const size_t spatial = window.size();
  std::vector<float> out(static_cast<size_t>(y.num_elements()));
  const int64_t planes = x.dims[0] * x.dims[1];
  const int64_t in = x.num_elements() / planes, outs = y.num_elements() / planes;
  int64_t taps = 1;
  for (int64_t k : window) taps *= k;
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t q = 0; q < outs; ++q) {
      float v = kind == ReduceKind::kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
      for (int64_t t = 0; t < taps; ++t) {
        int64_t at = 0, rest_q = q, rest_t = t;
        bool inside = true;
        for (size_t i = spatial; i-- > 0;) {
          const int64_t p = rest_q % y.dims[i + 2], k = rest_t % window[i];
          rest_q /= y.dims[i + 2];
          rest_t /= window[i];
          const int64_t pos = p * spec.strides[i] + k * spec.dilations[i] - spec.pad_low[i];
          inside = inside && pos >= 0 && pos < x.dims[i + 2];
          int64_t stride = 1;
          for (size_t j = i + 1; j < spatial; ++j) stride *= x.dims[j + 2];
          at += pos * stride;
        }
        if (!inside) continue;
        const float e = xv[static_cast<size_t>(plane * in + at)];
        v = kind == ReduceKind::kMax ? std::max(v, e) : v + e;
      }
      out[static_cast<size_t>(plane * outs + q)] = v;
    }
  }
  return out;
}

TEST(OpsTest, PoolingMatchesLoopsForEveryWindow) {
  struct Geometry {
    const char* name;
    std::vector<int64_t> x, window, y;
    ConvSpec spec;
  };
  const std::vector<Geometry> cases = {
      {"ResNet's 3x3, stride 2, padding 1", {2, 3, 9, 8}, {3, 3}, {2, 3, 5, 4},
       {{2, 2}, {1, 1}, {1, 1}, {1, 1}, 1}},
      {"1-D dilated, padded past the end (ceil mode)", {1, 2, 10}, {3}, {1, 2, 4},
       {{3}, {2}, {1}, {3}, 1}},
      {"2-D asymmetric", {1, 1, 6, 7}, {2, 3}, {1, 1, 6, 3}, {{1, 2}, {1, 1}, {1, 0}, {0, 0}, 1}},
      {"3-D", {1, 2, 4, 5, 3}, {2, 2, 2}, {1, 2, 3, 4, 2}, {{1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, 1}},
  };
  uint32_t seed = 7;
  for (const Geometry& g : cases) {
    SCOPED_TRACE(g.name);
    std::vector<float> xv(static_cast<size_t>(Shape(DType::kF32, g.x).num_elements()));
    for (float& e : xv) e = static_cast<float>((seed = seed * 1103515245u + 12345u) >> 16 & 0xff) / 64 - 2;
    const Literal x = Literal::F32(g.x, xv);
    for (ReduceKind kind : {ReduceKind::kMax, ReduceKind::kSum}) {
      const Literal y = Eval({x}, [&](auto& b, auto& p) { return b.Pool(p[0], kind, g.window, g.spec); });
      ASSERT_EQ(y.shape().dims, g.y);
      EXPECT_THAT(F(y), Pointwise(FloatNear(1e-5f),
                                  PoolLoops(x.shape(), y.shape(), kind, g.window, g.spec, xv)));
    }
  }
}

TEST(OpsTest, MalformedPoolingIsRefused) {
  const auto refused = [](Shape x, std::vector<int64_t> window, ConvSpec spec) {
    FunctionBuilder b("bad");
    b.Pool(b.Parameter(x), ReduceKind::kMax, std::move(window), spec);
    return std::string(b.status().message());
  };
  using ::testing::HasSubstr;
  EXPECT_THAT(refused(Shape(DType::kF32, {1, 2, 5, 5}), {3, 3}, {{1, 1}, {}, {-1, 0}, {}, 1}),
              HasSubstr("pads in [0,"));
  EXPECT_THAT(refused(Shape(DType::kF32, {1, 2, 5, 5}), {3}, {}), HasSubstr("needs that many"));
  EXPECT_THAT(refused(Shape(DType::kF32, {1, 2, 2, 2}), {3, 3}, {}), HasSubstr("larger than the padded input"));
  EXPECT_THAT(refused(Shape(DType::kI32, {1, 2, 5, 5}), {3, 3}, {}), HasSubstr("must be f32"));
  EXPECT_THAT(refused(Shape(DType::kF32, {5, 5}), {3}, {}), HasSubstr("1 to 3 spatial dims"));
}

TEST(OpsTest, RandomNumbersAreDeterministicPerSeedAndWellDistributed) {
  auto run = [](int32_t seed, bool normal) {
    return F(Eval({Literal::I32({}, {seed})}, [&](auto& b, auto& p) {
      return normal ? b.RngNormal(p[0], {10000}) : b.RngUniform(p[0], {10000});
    }));
  };
  const std::vector<float> u = run(1, false);
  EXPECT_EQ(u, run(1, false));
  EXPECT_NE(u, run(2, false));
  double mean = 0;
  for (float x : u) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    mean += x / u.size();
  }
  EXPECT_NEAR(mean, 0.5, 0.02);
  const std::vector<float> n = run(3, true);
  double m = 0, var = 0;
  for (float x : n) m += x / n.size();
  for (float x : n) var += (x - m) * (x - m) / n.size();
  EXPECT_NEAR(m, 0.0, 0.05);
  EXPECT_NEAR(var, 1.0, 0.08);
}

TEST(OpsTest, CollectivesWithoutACollectiveContextFailCleanly) {
  FunctionBuilder b("needs_peers");
  Value x = b.Parameter(Shape(DType::kF32, {4}));
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({b.AllGather(x, {"d"}, 0, 2)}));
  ASSERT_OK_AND_ASSIGN(auto exe, Compile(f));
  std::vector<float> in(4), out(8);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  EXPECT_EQ(exe->Run(ins, outs, {}).code(), absl::StatusCode::kFailedPrecondition);
}

// Storage dtypes (f16, bf16, i64, i8, u8): every op that only moves or picks
// elements moves them bit for bit, at 1, 2 and 8 bytes an element, and
// convert reaches each from f32 and i32 and back.
template <typename T>
std::vector<T> V(const Literal& l) {
  return std::vector<T>(l.values<T>().begin(), l.values<T>().end());
}

TEST(OpsTest, StorageDtypesMoveBitForBitThroughTheDataOps) {
  const int64_t big = int64_t{1} << 40;
  const Literal x = Literal::I64({2, 3}, {1, -2, big, 4, 5, -big});
  EXPECT_THAT(V<int64_t>(Eval({x}, [](auto& b, auto& p) { return b.Transpose(p[0], {1, 0}); })),
              ElementsAre(1, 4, -2, 5, big, -big));
  // A stepped slice (its innermost stride is a gather of 8-byte elements).
  EXPECT_THAT(V<int64_t>(Eval({x}, [](auto& b, auto& p) {
                return b.Slice(p[0], {0, 0}, {2, 3}, {1, 2});
              })),
              ElementsAre(1, big, 4, -big));
  EXPECT_THAT(V<int64_t>(Eval({x}, [](auto& b, auto& p) {
                return b.Concatenate({p[0], p[0]}, 1);
              })),
              ElementsAre(1, -2, big, 1, -2, big, 4, 5, -big, 4, 5, -big));
  EXPECT_THAT(V<int64_t>(Eval({x}, [](auto& b, auto& p) {
                return b.Pad(p[0], b.Constant(Literal::I64({}, {-big})), {0, 1}, {0, 0});
              })),
              ElementsAre(-big, 1, -2, big, -big, 4, 5, -big));
  EXPECT_THAT(V<int64_t>(Eval({x}, [](auto& b, auto& p) {
                return b.Gather(p[0], b.Constant(Literal::I32({2}, {2, 0})), 1);
              })),
              ElementsAre(big, 1, -big, 4));
  EXPECT_THAT(V<int64_t>(Eval({x}, [](auto& b, auto& p) {
                const Value row = b.Slice(p[0], {1, 0}, {2, 3});
                return b.Broadcast(b.Reshape(row, {3}), {2, 3}, {1});
              })),
              ElementsAre(4, 5, -big, 4, 5, -big));

  // Two-byte elements: halves picked by a select and reversed by a stepped slice.
  Literal h(Shape(DType::kF16, {5}));
  const std::vector<float> hv = {0.5f, -1.0f, 65504.0f, 0.000061035156f, -0.0f};
  for (size_t i = 0; i < hv.size(); ++i) h.mutable_values<uint16_t>()[i] = FloatToHalf(hv[i]);
  Literal mask(Shape(DType::kPred, {5}));
  for (size_t i = 0; i < 5; ++i) mask.mutable_values<uint8_t>()[i] = i % 2;
  const Literal picked = Eval({mask, h}, [](auto& b, auto& p) {
    return b.Select(p[0], p[1], b.Broadcast(b.Constant(Literal(Shape(DType::kF16, {}))), {5}, {}));
  });
  EXPECT_THAT(V<uint16_t>(picked), ElementsAre(0, FloatToHalf(-1.0f), 0,
                                               FloatToHalf(0.000061035156f), 0));
  EXPECT_THAT(V<uint16_t>(Eval({h}, [](auto& b, auto& p) {
                return b.Slice(p[0], {0}, {5}, {2});
              })),
              ElementsAre(FloatToHalf(0.5f), FloatToHalf(65504.0f), FloatToHalf(-0.0f)));

  // One-byte elements: u8 through a transpose.
  Literal u(Shape(DType::kU8, {2, 2}));
  for (size_t i = 0; i < 4; ++i) u.mutable_values<uint8_t>()[i] = static_cast<uint8_t>(250 + i);
  EXPECT_THAT(V<uint8_t>(Eval({u}, [](auto& b, auto& p) { return b.Transpose(p[0], {1, 0}); })),
              ElementsAre(250, 252, 251, 253));
}

TEST(OpsTest, ConvertReachesEveryStorageDtypeAndComesBack) {
  const Literal x = Literal::F32({6}, {-1.5f, 0.1f, 300.25f, -300.0f, 1e10f, 70000.0f});
  for (DType d : {DType::kF16, DType::kBF16, DType::kI64, DType::kI8, DType::kU8}) {
    SCOPED_TRACE(DTypeName(d));
    const Literal stored = Eval({x}, [&](auto& b, auto& p) { return b.Convert(p[0], d); });
    EXPECT_EQ(stored, ConvertLiteral(x, d));  // the kernel is ir::ConvertElements
    const Literal back = Eval({stored}, [](auto& b, auto& p) {
      return b.Convert(p[0], DType::kF32);
    });
    EXPECT_EQ(back, ConvertLiteral(stored, DType::kF32));
  }
  // Computing needs the compute dtype: f16 + f16 is refused by name.
  FunctionBuilder b("add_f16");
  const Value h = b.Parameter(Shape(DType::kF16, {2}));
  b.Add(h, h);
  EXPECT_THAT(b.Build({h}).status(),
              causeway::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                          ::testing::HasSubstr("f16 is a storage dtype: convert "
                                                               "it to f32")));
}

}  // namespace
}  // namespace causeway::backend::cpu
