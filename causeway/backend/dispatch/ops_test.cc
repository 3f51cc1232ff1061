// A dispatch kind against the cpu kind, op by op: every op of the IR, in
// each dtype it takes, on random inputs, run on a device of the kind
// through the Device interface, and compared with the cpu kind's result:
// exactly for integers, predicates, data movement and uniform random
// numbers, within a few ulps-worth relative tolerance for f32 arithmetic
// (GPU transcendentals and summation orders differ). Built once per kind
// that runs dispatch programs (CAUSEWAY_OPS_KIND): vulkan_ops_test (lavapipe
// on a machine without a GPU; again with the staged copy path,
// CAUSEWAY_VULKAN_STAGING, in vulkan_staging_ops_test) and cuda_ops_test,
// which reports every case skipped where the machine has no CUDA GPU.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/backend/device.h"
#include "causeway/backend/dispatch/program.h"
#if CAUSEWAY_OPS_KIND_CUDA
#include "causeway/backend/cuda/device.h"
#else
#include "causeway/backend/vulkan/device.h"
#include "causeway/backend/vulkan/kernels.h"
#endif
#include "causeway/base/check.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/elements.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if CAUSEWAY_OPS_KIND_CUDA
namespace causeway::backend::cuda {
#else
namespace causeway::backend::vulkan {
#endif
namespace {

using namespace ir;  // NOLINT: test brevity
using dispatch::Dispatch;
using dispatch::Kernel;
using ::causeway::testing::StatusIs;

using Body = std::function<Value(FunctionBuilder&, const std::vector<Value>&)>;

struct Case {
  std::string name;
  std::vector<Literal> inputs;
  Body body;
  float tolerance = 1e-5f;  // relative, for f32
};

Literal RandomF32(std::vector<int64_t> dims, std::mt19937& rng, float lo = -3, float hi = 3) {
  Shape s(DType::kF32, dims);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(s.num_elements()));
  for (float& x : v) x = d(rng);
  return Literal::F32(dims, v);
}
Literal RandomI32(std::vector<int64_t> dims, std::mt19937& rng, int lo = -50, int hi = 50) {
  Shape s(DType::kI32, dims);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(s.num_elements()));
  for (int32_t& x : v) x = d(rng);
  return Literal::I32(dims, v);
}
Literal RandomPred(std::vector<int64_t> dims, std::mt19937& rng) {
  Literal l{Shape(DType::kPred, std::move(dims))};
  for (uint8_t& x : l.mutable_values<uint8_t>()) x = static_cast<uint8_t>(rng() & 1);
  return l;
}

class KindOpsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<Device>> d = Kind().CreateDevice(DeviceSpec{DeviceId(0), 0, 0});
#if CAUSEWAY_OPS_KIND_CUDA
    // No CUDA GPU (or driver) here: every case is skipped, and says why.
    if (absl::IsUnavailable(d.status())) {
      skipped_ = new absl::Status(d.status());
      return;
    }
#endif
    ASSERT_TRUE(d.ok()) << d.status()
                        << " (scripts/install-deps.sh installs mesa-vulkan-drivers)";
    device_ = d->release();
  }
  void SetUp() override {
    if (skipped_ != nullptr) GTEST_SKIP() << *skipped_;
  }
  static void TearDownTestSuite() {
    delete device_;
    device_ = nullptr;
  }

  // Runs `c` on both kinds and compares every output.
  void Check(const Case& c) {
    SCOPED_TRACE(c.name);
    FunctionBuilder b(c.name);
    std::vector<Value> params;
    for (const Literal& l : c.inputs) params.push_back(b.Parameter(l.shape()));
    absl::StatusOr<Function> f = b.Build({c.body(b, params)});
    ASSERT_OK(f.status());

    // cpu
    auto cpu_exe = cpu::Compile(*f);
    ASSERT_OK(cpu_exe.status());
    std::vector<const void*> in;
    for (const Literal& l : c.inputs) in.push_back(l.data());
    Literal want(f->output_shape(0));
    void* outs[] = {want.data()};
    ASSERT_OK((*cpu_exe)->Run(in, outs, {}));

    // vulkan
    auto exe = Kind().Compile(*f);
    ASSERT_OK(exe.status());
    std::vector<std::unique_ptr<DeviceAllocation>> args;
    for (const Literal& l : c.inputs) {
      auto a = device_->Allocate(l.shape().byte_size());
      ASSERT_OK(a.status());
      const int64_t n = l.shape().byte_size();
      ASSERT_OK(Await([&](Completion done) {
        device_->CopyIn(l.data(), **a, BoxCopy::Flat(0, n, 0, n, n), std::move(done));
      }));
      args.push_back(std::move(*a));
    }
    auto out = device_->Allocate(want.shape().byte_size());
    ASSERT_OK(out.status());
    std::vector<const DeviceAllocation*> ins;
    for (auto& a : args) ins.push_back(a.get());
    DeviceAllocation* outs_v[] = {out->get()};
    ASSERT_OK(Await([&](Completion done) {
      device_->Launch(**exe, ins, outs_v, RunContext{}, std::move(done));
    }));
    Literal got(f->output_shape(0));
    const int64_t n = got.shape().byte_size();
    ASSERT_OK(Await([&](Completion done) {
      device_->CopyOut(**out, got.data(), BoxCopy::Flat(0, n, 0, n, n), std::move(done));
    }));

    switch (want.shape().dtype) {
      case DType::kF32: {
        auto w = want.values<float>();
        auto g = got.values<float>();
        for (size_t i = 0; i < w.size(); ++i) {
          if (std::isnan(w[i])) {
            EXPECT_TRUE(std::isnan(g[i])) << "element " << i;
            continue;
          }
          if (std::isinf(w[i])) {
            EXPECT_EQ(w[i], g[i]) << "element " << i;
            continue;
          }
          const float tol = c.tolerance * std::max(1.0f, std::fabs(w[i]));
          ASSERT_NEAR(g[i], w[i], tol) << "element " << i << " of " << w.size();
        }
        break;
      }
      case DType::kI32:
        ASSERT_THAT(got.values<int32_t>(), ::testing::ElementsAreArray(want.values<int32_t>()));
        break;
      case DType::kPred:
        ASSERT_THAT(got.values<uint8_t>(), ::testing::ElementsAreArray(want.values<uint8_t>()));
        break;
      default:  // storage dtypes: bit for bit
        ASSERT_TRUE(got == want) << got.ToString(64) << " against " << want.ToString(64);
        break;
    }
  }

  static Device* device_;
  static absl::Status* skipped_;
  std::mt19937 rng_{42};
};

Device* KindOpsTest::device_ = nullptr;
absl::Status* KindOpsTest::skipped_ = nullptr;

TEST_F(KindOpsTest, ElementwiseBinaryF32) {
  const Literal a = RandomF32({7, 45}, rng_), b = RandomF32({7, 45}, rng_, 0.5f, 3.0f);
  for (OpKind op : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMax,
                    OpKind::kMin, OpKind::kPow, OpKind::kGeluGrad}) {
    const bool pow = op == OpKind::kPow;
    const Literal x = pow ? RandomF32({7, 45}, rng_, 0.1f, 3.0f) : a;
    Check({OpName(op), {x, b}, [op](FunctionBuilder& f, const std::vector<Value>& p) {
             switch (op) {
               case OpKind::kAdd: return f.Add(p[0], p[1]);
               case OpKind::kSub: return f.Sub(p[0], p[1]);
               case OpKind::kMul: return f.Mul(p[0], p[1]);
               case OpKind::kDiv: return f.Div(p[0], p[1]);
               case OpKind::kMax: return f.Max(p[0], p[1]);
               case OpKind::kMin: return f.Min(p[0], p[1]);
               case OpKind::kPow: return f.Pow(p[0], p[1]);
               default: return f.GeluGrad(p[0], p[1]);
             }
           }, 1e-5f});
  }
}

TEST_F(KindOpsTest, BroadcastOperandsFoldedIntoArithmetic) {
  // The plan folds a broadcast row or scalar into the arithmetic that reads
  // it; the kernel reads it repeated.
  const Literal x = RandomF32({6, 10}, rng_), row = RandomF32({10}, rng_),
                s = RandomF32({}, rng_);
  Check({"row", {x, row}, [](FunctionBuilder& f, const std::vector<Value>& p) {
           return f.Mul(p[0], f.Broadcast(p[1], {6, 10}, {1}));
         }});
  Check({"scalar", {x, s}, [](FunctionBuilder& f, const std::vector<Value>& p) {
           return f.Sub(f.Broadcast(p[1], {6, 10}, {}), p[0]);
         }});
}

TEST_F(KindOpsTest, ElementwiseBinaryI32WithXlaDivision) {
  Literal a = RandomI32({64}, rng_), b = RandomI32({64}, rng_);
  a.mutable_values<int32_t>()[0] = std::numeric_limits<int32_t>::min();
  b.mutable_values<int32_t>()[0] = -1;
  b.mutable_values<int32_t>()[1] = 0;
  a.mutable_values<int32_t>()[2] = std::numeric_limits<int32_t>::max();
  b.mutable_values<int32_t>()[2] = 2;
  Check({"add", {a, b}, [](auto& f, auto& p) { return f.Add(p[0], p[1]); }});
  Check({"sub", {a, b}, [](auto& f, auto& p) { return f.Sub(p[0], p[1]); }});
  Check({"mul", {a, b}, [](auto& f, auto& p) { return f.Mul(f.Mul(p[0], p[1]), p[0]); }});
  Check({"div", {a, b}, [](auto& f, auto& p) { return f.Div(p[0], p[1]); }});
  Check({"max", {a, b}, [](auto& f, auto& p) { return f.Max(p[0], p[1]); }});
  Check({"min", {a, b}, [](auto& f, auto& p) { return f.Min(p[0], p[1]); }});
}

TEST_F(KindOpsTest, ElementwiseUnary) {
  const Literal a = RandomF32({333}, rng_), pos = RandomF32({333}, rng_, 0.01f, 9.0f);
  Check({"neg", {a}, [](auto& f, auto& p) { return f.Neg(p[0]); }});
  Check({"exp", {a}, [](auto& f, auto& p) { return f.Exp(p[0]); }, 1e-5f});
  Check({"abs", {a}, [](auto& f, auto& p) { return f.Abs(p[0]); }});
  Check({"log", {pos}, [](auto& f, auto& p) { return f.Log(p[0]); }, 1e-5f});
  Check({"tanh", {a}, [](auto& f, auto& p) { return f.Tanh(p[0]); }, 1e-5f});
  Check({"logistic", {a}, [](auto& f, auto& p) { return f.Logistic(p[0]); }, 1e-5f});
  Check({"sqrt", {pos}, [](auto& f, auto& p) { return f.Sqrt(p[0]); }, 1e-5f});
  Check({"rsqrt", {pos}, [](auto& f, auto& p) { return f.Rsqrt(p[0]); }, 1e-5f});
  Check({"sign", {a}, [](auto& f, auto& p) { return f.Sign(p[0]); }});
  Check({"floor", {a}, [](auto& f, auto& p) { return f.Floor(p[0]); }});
  Check({"gelu", {a}, [](auto& f, auto& p) { return f.Gelu(p[0]); }, 1e-5f});
  Check({"sin", {a}, [](auto& f, auto& p) { return f.Sin(p[0]); }, 1e-5f});
  Check({"cos", {a}, [](auto& f, auto& p) { return f.Cos(p[0]); }, 1e-5f});
  Check({"atan", {a}, [](auto& f, auto& p) { return f.Atan(p[0]); }, 1e-5f});
  Check({"erf", {a}, [](auto& f, auto& p) { return f.Erf(p[0]); }, 1e-6f});
  Literal i = RandomI32({50}, rng_);
  i.mutable_values<int32_t>()[0] = std::numeric_limits<int32_t>::min();
  Check({"neg_i32", {i}, [](auto& f, auto& p) { return f.Neg(p[0]); }});
  Check({"abs_i32", {i}, [](auto& f, auto& p) { return f.Abs(p[0]); }});
  Check({"sign_i32", {i}, [](auto& f, auto& p) { return f.Sign(p[0]); }});
}

TEST_F(KindOpsTest, ComparisonsAndSelect) {
  const Literal a = RandomF32({5, 9}, rng_), b = RandomF32({5, 9}, rng_);
  const Literal ia = RandomI32({5, 9}, rng_, -3, 3), ib = RandomI32({5, 9}, rng_, -3, 3);
  const Literal pa = RandomPred({5, 9}, rng_), pb = RandomPred({5, 9}, rng_);
  for (Comparison c : {Comparison::kEq, Comparison::kNe, Comparison::kLt, Comparison::kLe,
                       Comparison::kGt, Comparison::kGe}) {
    auto body = [c](FunctionBuilder& f, const std::vector<Value>& p) {
      return f.Compare(p[0], p[1], c);
    };
    Check({"cmp_f32", {a, a}, body});
    Check({"cmp_f32", {a, b}, body});
    Check({"cmp_i32", {ia, ib}, body});
    Check({"cmp_pred", {pa, pb}, body});
  }
  Check({"select_f32", {pa, a, b}, [](auto& f, auto& p) { return f.Select(p[0], p[1], p[2]); }});
  Check({"select_i32", {pa, ia, ib}, [](auto& f, auto& p) { return f.Select(p[0], p[1], p[2]); }});
  Check({"select_pred", {pa, pb, pa},
         [](auto& f, auto& p) { return f.Select(p[0], p[1], p[2]); }});
}

TEST_F(KindOpsTest, ConversionsBetweenEveryPairOfDtypes) {
  Literal a = RandomF32({40}, rng_, -1e3f, 1e3f);
  a.mutable_values<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  a.mutable_values<float>()[1] = 3e9f;
  a.mutable_values<float>()[2] = -3e9f;
  a.mutable_values<float>()[3] = 0.0f;
  const Literal i = RandomI32({40}, rng_, -2, 2), p = RandomPred({40}, rng_);
  for (const Literal* in : std::vector<const Literal*>{&a, &i, &p}) {
    for (DType to : {DType::kF32, DType::kI32, DType::kPred}) {
      Check({"convert", {*in}, [to](auto& f, auto& v) { return f.Convert(v[0], to); }});
    }
  }
}

TEST_F(KindOpsTest, DataMovement) {
  const Literal a = RandomF32({3, 4, 5}, rng_), b = RandomF32({3, 2, 5}, rng_);
  const Literal p = RandomPred({3, 4, 5}, rng_);
  Check({"iota_f32", {}, [](auto& f, auto&) { return f.Iota(Shape(DType::kF32, {3, 4, 5}), 1); }});
  Check({"iota_i32", {}, [](auto& f, auto&) { return f.Iota(Shape(DType::kI32, {3, 4, 5}), 2); }});
  Check({"reshape", {a}, [](auto& f, auto& v) { return f.Reshape(v[0], {12, 5}); }});
  Check({"transpose", {a}, [](auto& f, auto& v) { return f.Transpose(v[0], {2, 0, 1}); }});
  Check({"transpose_pred", {p}, [](auto& f, auto& v) { return f.Transpose(v[0], {1, 2, 0}); }});
  Check({"broadcast", {b}, [](auto& f, auto& v) {
           return f.Broadcast(v[0], {3, 7, 2, 5}, {0, 2, 3});
         }});
  Check({"slice", {a}, [](auto& f, auto& v) { return f.Slice(v[0], {1, 1, 2}, {3, 4, 5}); }});
  Check({"concatenate", {a, b}, [](auto& f, auto& v) {
           return f.Concatenate({v[0], v[1], v[0]}, 1);
         }});
  Check({"pad", {a}, [](auto& f, auto& v) {
           return f.Pad(v[0], f.Constant(Literal::ScalarF32(-7.5f)), {1, 0, 2}, {0, 3, 1});
         }});
  Check({"broadcast_pred", {RandomPred({4}, rng_)},
         [](auto& f, auto& v) { return f.Broadcast(v[0], {3, 4}, {1}); }});
  Check({"odd_bytes", {RandomPred({3, 3}, rng_)},
         [](auto& f, auto& v) { return f.Reshape(v[0], {9}); }});
}

TEST_F(KindOpsTest, Reductions) {
  const Literal a = RandomF32({4, 6, 10}, rng_), i = RandomI32({4, 6, 10}, rng_);
  for (std::vector<int64_t> axes : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
    Check({"sum", {a}, [axes](auto& f, auto& v) { return f.ReduceSum(v[0], axes); }, 1e-5f});
    Check({"max", {a}, [axes](auto& f, auto& v) { return f.ReduceMax(v[0], axes); }});
    Check({"min", {a}, [axes](auto& f, auto& v) { return f.ReduceMin(v[0], axes); }});
    Check({"sum_i32", {i}, [axes](auto& f, auto& v) { return f.ReduceSum(v[0], axes); }});
    Check({"max_i32", {i}, [axes](auto& f, auto& v) { return f.ReduceMax(v[0], axes); }});
  }
}

TEST_F(KindOpsTest, LongReductionsScattersAndRows) {
  // Ones sum exactly in any order, on both kinds.
  const Literal ones = Literal::F32({1024, 1024}, std::vector<float>(1 << 20, 1.0f));
  Check({"sum_all", {ones}, [](auto& f, auto& v) { return f.ReduceSum(v[0], {0, 1}); }, 0.0f});
  Check({"sum_rows", {ones}, [](auto& f, auto& v) { return f.ReduceSum(v[0], {1}); }, 0.0f});
  const Literal x = RandomF32({3, 70000}, rng_);
  Check({"max_long_rows", {x}, [](auto& f, auto& v) { return f.ReduceMax(v[0], {1}); }, 0.0f});
  Check({"sum_long_rows", {x}, [](auto& f, auto& v) { return f.ReduceSum(v[0], {1}); }, 1e-4f});
  Check({"sum_i32", {RandomI32({5000, 3}, rng_)},
         [](auto& f, auto& v) { return f.ReduceSum(v[0], {0, 1}); }});
  // A scatter-add of more indices than one invocation takes (an embedding
  // gradient of many tokens).
  Check({"scatter_many", {RandomF32({13, 4}, rng_), RandomI32({9000}, rng_, 0, 12),
                          RandomF32({9000, 4}, rng_)},
         [](auto& f, auto& v) { return f.ScatterAdd(v[0], v[1], v[2], 0); }, 1e-4f});
  // Long rows for the row kernels (a workgroup per row).
  const Literal wide = RandomF32({4, 3000}, rng_), g = RandomF32({4, 3000}, rng_);
  const Literal eps = Literal::ScalarF32(1e-5f);
  Check({"softmax_wide", {wide}, [](auto& f, auto& v) { return f.Softmax(v[0]); }, 1e-5f});
  Check({"normalize_grad_wide", {wide, eps, g},
         [](auto& f, auto& v) { return f.NormalizeGrad(v[0], v[1], v[2]); }, 1e-4f});
  // Rows too long for one invocation's loops on lavapipe (kMaxLoopIterations):
  // the workgroup version even where the device takes the CPU variants.
  const Literal wider = RandomF32({2, 20000}, rng_), g2 = RandomF32({2, 20000}, rng_);
  Check({"softmax_wider", {wider}, [](auto& f, auto& v) { return f.Softmax(v[0]); }, 1e-5f});
  Check({"normalize_grad_wider", {wider, eps, g2},
         [](auto& f, auto& v) { return f.NormalizeGrad(v[0], v[1], v[2]); }, 1e-4f});
  // Matrix products with a K past one invocation's loops (the tiled kernel
  // everywhere) and below it (the CPU variant on lavapipe), over several
  // tiles with ragged edges.
  Check({"matmul_long_k", {RandomF32({3, 70000}, rng_), RandomF32({70000, 2}, rng_)},
         [](auto& f, auto& v) { return f.Matmul(v[0], v[1]); }, 1e-3f});
  Check({"matmul_tiles", {RandomF32({130, 3000}, rng_), RandomF32({3000, 70}, rng_)},
         [](auto& f, auto& v) { return f.Matmul(v[0], v[1]); }, 1e-3f});
}

TEST_F(KindOpsTest, MatrixProducts) {
  Check({"matmul", {RandomF32({37, 29}, rng_), RandomF32({29, 53}, rng_)},
         [](auto& f, auto& v) { return f.Matmul(v[0], v[1]); }, 1e-5f});
  Check({"matmul_i32", {RandomI32({5, 7}, rng_), RandomI32({7, 3}, rng_)},
         [](auto& f, auto& v) { return f.Matmul(v[0], v[1]); }});
  // Attention's scores: [b, h, t, d] x [b, h, s, d] -> [b, h, t, s].
  Check({"attention_scores", {RandomF32({2, 3, 17, 8}, rng_), RandomF32({2, 3, 19, 8}, rng_)},
         [](auto& f, auto& v) { return f.DotGeneral(v[0], v[1], {0, 1}, {0, 1}, {3}, {3}); },
         1e-5f});
  // Contracting the leading dimension (a weight gradient): transposed lhs.
  Check({"weight_grad", {RandomF32({33, 12}, rng_), RandomF32({33, 20}, rng_)},
         [](auto& f, auto& v) { return f.DotGeneral(v[0], v[1], {}, {}, {0}, {0}); }, 1e-5f});
  // Groups that are not laid out together: the operand is laid out anew.
  Check({"permuted", {RandomF32({4, 5, 6}, rng_), RandomF32({6, 7, 4}, rng_)},
         [](auto& f, auto& v) { return f.DotGeneral(v[0], v[1], {}, {}, {0, 2}, {2, 0}); },
         1e-5f});
  // Enough 128x128 tiles for kMatmulF32Large on a GPU (ChooseVariant), with
  // ragged edges and K not a multiple of its step: operands row-major, then
  // both transposed (each loaded along its other dimension).
  Check({"matmul_large_tiles", {RandomF32({32, 250, 37}, rng_), RandomF32({32, 37, 255}, rng_)},
         [](auto& f, auto& v) { return f.DotGeneral(v[0], v[1], {0}, {0}, {2}, {1}); }, 1e-4f});
  Check({"matmul_large_transposed",
         {RandomF32({32, 37, 250}, rng_), RandomF32({32, 255, 37}, rng_)},
         [](auto& f, auto& v) { return f.DotGeneral(v[0], v[1], {0}, {0}, {1}, {2}); }, 1e-4f});
}

#if !CAUSEWAY_OPS_KIND_CUDA
TEST(VulkanKernelChoice, LargeTilesWhereTheyAreFilledAndEnough) {
  // 4096x4096: 64x64 tiles of 64, 32x32 of 128.
  Variant v = ChooseVariant(Kernel::kMatmulF32, 0, 4096, {64, 64, 1}, /*cpu=*/false);
  EXPECT_EQ(v.kernel, Kernel::kMatmulF32Large);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{32, 32, 1}));
  // Odd counts round up: 250 rows are 4 tiles of 64, 2 of 128.
  v = ChooseVariant(Kernel::kMatmulF32, 0, 37, {4, 3, 64}, false);
  EXPECT_EQ(v.kernel, Kernel::kMatmulF32Large);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{2, 2, 64}));
  // 3x3 small tiles as 2x2 large ones: 16 small tiles' work for 9.
  v = ChooseVariant(Kernel::kMatmulF32, 0, 37, {3, 3, 64}, false);
  EXPECT_EQ(v.kernel, Kernel::kMatmulF32);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{3, 3, 64}));
  // Too few tiles of 128 to occupy a GPU: the 64x64 kernel's four times as
  // many workgroups.
  v = ChooseVariant(Kernel::kMatmulF32, 0, 512, {8, 8, 1}, false);
  EXPECT_EQ(v.kernel, Kernel::kMatmulF32);
  // A CPU takes the large kernel however few its tiles, where they are
  // filled and K keeps its loop within lavapipe's limit...
  v = ChooseVariant(Kernel::kMatmulF32, 0, 512, {2, 2, 1}, /*cpu=*/true);
  EXPECT_EQ(v.kernel, Kernel::kMatmulF32Large);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{1, 1, 1}));
  v = ChooseVariant(Kernel::kMatmulF32, 0, 600000, {2, 2, 1}, true);
  EXPECT_EQ(v.kernel, Kernel::kMatmulF32);
  // ... and its CPU variant elsewhere.
  v = ChooseVariant(Kernel::kMatmulF32, 0, 512, {1, 1, 48}, true);
  EXPECT_EQ(v.kernel, Kernel::kMatmulF32Cpu);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{1, 1, 48}));
  // Other kernels are left alone on a GPU.
  v = ChooseVariant(Kernel::kRowsF32, 256, 100, {1, 1, 1}, false);
  EXPECT_EQ(v.kernel, Kernel::kRowsF32);
  v = ChooseVariant(Kernel::kBinaryF32, 25600, 0, {100, 1, 1}, false);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{100, 1, 1}));
  // On a CPU the one-pass element-wise kernels take several elements per
  // invocation (their grid-stride loops cover the rest), never no grid.
  v = ChooseVariant(Kernel::kBinaryF32, 25600, 0, {100, 1, 1}, true);
  EXPECT_EQ(v.kernel, Kernel::kBinaryF32);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{13, 1, 1}));
  v = ChooseVariant(Kernel::kCopyB8, 3, 0, {1, 1, 1}, true);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{1, 1, 1}));
  v = ChooseVariant(Kernel::kReduceF32, 25600, 0, {100, 1, 1}, true);
  EXPECT_EQ(v.groups, (std::array<uint32_t, 3>{100, 1, 1}));
}
#endif  // !CAUSEWAY_OPS_KIND_CUDA

TEST_F(KindOpsTest, ArgSort) {
  // Few distinct values, so lines have ties; f32 with a NaN.
  Literal f = RandomI32({4, 37, 3}, rng_, 0, 5);
  Literal x(Shape(DType::kF32, {4, 37, 3}));
  for (size_t i = 0; i < x.values<float>().size(); ++i) {
    x.mutable_values<float>()[i] = static_cast<float>(f.values<int32_t>()[i]);
  }
  x.mutable_values<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  for (bool descending : {false, true}) {
    Check({"argsort_f32", {x}, [descending](auto& b, auto& v) { return b.ArgSort(v[0], 1, descending); }});
    Check({"argsort_i32", {f}, [descending](auto& b, auto& v) { return b.ArgSort(v[0], 2, descending); }});
  }
}

TEST_F(KindOpsTest, StridedSlices) {
  Check({"strided_slice", {RandomF32({6, 7, 5}, rng_)},
         [](auto& f, auto& v) { return f.Slice(v[0], {1, 0, 2}, {6, 7, 5}, {2, 3, 1}); }});
  Check({"strided_slice_i32", {RandomI32({9, 4}, rng_)},
         [](auto& f, auto& v) { return f.Slice(v[0], {0, 1}, {9, 4}, {4, 2}); }});
}

TEST_F(KindOpsTest, ConvolutionsAndTheirGradients) {
  struct Geometry {
    std::string name;
    std::vector<int64_t> x, w, y;
    ConvSpec spec;
  };
  const std::vector<Geometry> cases = {
      {"1d_strided_dilated", {2, 3, 11}, {4, 3, 3}, {2, 4, 5}, {{2}, {2}, {1}, {2}, 1}},
      {"2d_two_groups", {3, 4, 7, 6}, {6, 2, 3, 2}, {3, 6, 3, 6}, {{2, 1}, {1, 2}, {1, 0}, {0, 2}, 2}},
      {"2d_1x1", {2, 5, 4, 3}, {7, 5, 1, 1}, {2, 7, 4, 3}, {{1, 1}, {1, 1}, {0, 0}, {0, 0}, 1}},
      {"3d", {1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 3, 4, 3, 3},
       {{1, 2, 1}, {1, 1, 2}, {0, 1, 1}, {1, 1, 1}, 1}},
  };
  for (const Geometry& g : cases) {
    const ConvSpec spec = g.spec;
    const std::vector<int64_t> xd = g.x, wd = g.w;
    Check({g.name, {RandomF32(g.x, rng_), RandomF32(g.w, rng_)},
           [spec](auto& f, auto& v) { return f.Convolution(v[0], v[1], spec); }, 1e-4f});
    Check({g.name + "_input_grad", {RandomF32(g.y, rng_), RandomF32(g.w, rng_)},
           [spec, xd](auto& f, auto& v) { return f.ConvInputGrad(v[0], v[1], xd, spec); },
           1e-4f});
    Check({g.name + "_kernel_grad", {RandomF32(g.x, rng_), RandomF32(g.y, rng_)},
           [spec, wd](auto& f, auto& v) { return f.ConvKernelGrad(v[0], v[1], wd, spec); },
           1e-4f});
  }
}

TEST_F(KindOpsTest, Pooling) {
  const ConvSpec resnet{{2, 2}, {1, 1}, {1, 1}, {1, 1}, 1};
  const ConvSpec dilated{{3}, {2}, {1}, {3}, 1};
  for (ReduceKind kind : {ReduceKind::kMax, ReduceKind::kSum}) {
    const std::string name = kind == ReduceKind::kMax ? "max_pool" : "sum_pool";
    Check({name + "_2d", {RandomF32({2, 3, 9, 8}, rng_)},
           [kind, resnet](auto& f, auto& v) { return f.Pool(v[0], kind, {3, 3}, resnet); }, 1e-5f});
    Check({name + "_1d", {RandomF32({1, 2, 10}, rng_)},
           [kind, dilated](auto& f, auto& v) { return f.Pool(v[0], kind, {3}, dilated); }, 1e-5f});
    Check({name + "_3d", {RandomF32({1, 2, 4, 5, 3}, rng_)},
           [kind](auto& f, auto& v) { return f.Pool(v[0], kind, {2, 2, 2}, ConvSpec{}); }, 1e-5f});
  }
}

TEST_F(KindOpsTest, GatherAndScatterAdd) {
  const Literal table = RandomF32({11, 6}, rng_);
  Literal idx = RandomI32({4, 5}, rng_, -2, 13);  // some out of range
  Check({"gather", {table, idx}, [](auto& f, auto& v) { return f.Gather(v[0], v[1], 0); }});
  Check({"gather_dim1", {RandomI32({3, 11}, rng_), RandomI32({7}, rng_, 0, 10)},
         [](auto& f, auto& v) { return f.Gather(v[0], v[1], 1); }});
  Check({"gather_pred", {RandomPred({11, 3}, rng_), idx},
         [](auto& f, auto& v) { return f.Gather(v[0], v[1], 0); }});
  Check({"scatter_add", {table, idx, RandomF32({4, 5, 6}, rng_)},
         [](auto& f, auto& v) { return f.ScatterAdd(v[0], v[1], v[2], 0); }, 1e-5f});
  Check({"scatter_add_i32", {RandomI32({11, 2}, rng_), idx, RandomI32({4, 5, 2}, rng_)},
         [](auto& f, auto& v) { return f.ScatterAdd(v[0], v[1], v[2], 0); }});
}

TEST_F(KindOpsTest, RandomNumbersAreTheCpuKindsBits) {
  const Literal seed = Literal::I32({}, {1234});
  Check({"uniform", {seed}, [](auto& f, auto& v) { return f.RngUniform(v[0], {1000}); }, 0.0f});
  Check({"normal", {seed}, [](auto& f, auto& v) { return f.RngNormal(v[0], {1000}); }, 1e-5f});
}

TEST_F(KindOpsTest, FusedTransformerKernels) {
  const Literal x = RandomF32({9, 70}, rng_), g = RandomF32({9, 70}, rng_);
  const Literal eps = Literal::ScalarF32(1e-5f);
  Check({"softmax", {x}, [](auto& f, auto& v) { return f.Softmax(v[0]); }, 1e-5f});
  Check({"softmax_grad", {x, g}, [](auto& f, auto& v) {
           return f.SoftmaxGrad(f.Softmax(v[0]), v[1]);
         }, 1e-5f});
  Check({"normalize", {x, eps}, [](auto& f, auto& v) { return f.Normalize(v[0], v[1]); },
         1e-5f});
  Check({"normalize_grad", {x, eps, g}, [](auto& f, auto& v) {
           return f.NormalizeGrad(v[0], v[1], v[2]);
         }, 1e-4f});
}

TEST_F(KindOpsTest, ResultsThatAreParametersOrConstants) {
  const Literal a = RandomF32({10}, rng_);
  Check({"identity", {a}, [](auto&, auto& v) { return v[0]; }});
  Check({"constant", {}, [](auto& f, auto&) { return f.Constant(Literal::F32({3}, {1, 2, 3})); }});
}

Function Built(FunctionBuilder& b, const std::vector<Value>& outputs) {
  absl::StatusOr<Function> f = b.Build(outputs);
  CW_CHECK_OK(f.status());
  return *std::move(f);
}

// A loop over (n: i32[], acc: f32[2], x: f32[2]): while n > 0, n -= 1 and
// acc *= x.
Function PowerLoop() {
  const Shape v(DType::kF32, {2});
  FunctionBuilder cb("n_positive");
  Value cn = cb.Parameter(Shape(DType::kI32, {}));
  cb.Parameter(v);
  cb.Parameter(v);
  const Function cond = Built(cb, {cb.Compare(cn, cb.ConstantI32(0), Comparison::kGt)});
  FunctionBuilder bb("step");
  Value bn = bb.Parameter(Shape(DType::kI32, {}));
  Value bacc = bb.Parameter(v);
  Value bx = bb.Parameter(v);
  const Function body = Built(bb, {bb.Sub(bn, bb.ConstantI32(1)), bb.Mul(bacc, bx), bx});
  FunctionBuilder b("power");
  Value n = b.Parameter(Shape(DType::kI32, {}));
  Value x = b.Parameter(v);
  std::vector<Value> out = b.While(cond, body, {n, b.Full(1.0f, {2}), x});
  return Built(b, {out[1]});
}

TEST_F(KindOpsTest, WhileLoopsRunAsManyIterationsAsTheirDataSays) {
  const Function power = PowerLoop();
  const Literal x = Literal::F32({2}, {2.0f, -3.0f});
  for (int32_t n : {0, 1, 2, 7}) {
    Check({"power " + std::to_string(n), {Literal::I32({}, {n}), x},
           [&](FunctionBuilder& f, const std::vector<Value>& v) { return f.Call(power, v)[0]; }});
  }
  // The counter itself, an i32 result read out of the packed carry.
  FunctionBuilder cb("below");
  Value ci = cb.Parameter(Shape(DType::kI32, {}));
  const Function cond = Built(cb, {cb.Compare(ci, cb.ConstantI32(5), Comparison::kLt)});
  FunctionBuilder bb("inc");
  Value bi = bb.Parameter(Shape(DType::kI32, {}));
  const Function body = Built(bb, {bb.Add(bi, bb.ConstantI32(1))});
  Check({"count", {Literal::I32({}, {-3})}, [&](FunctionBuilder& f, const std::vector<Value>& v) {
           return f.While(cond, body, {v[0]})[0];
         }});
}

TEST_F(KindOpsTest, ConditionalsRunTheBranchTheirSelectorPicks) {
  const Shape v(DType::kF32, {3});
  auto branch = [&](const char* name, float scale) {
    FunctionBuilder fb(name);
    Value a = fb.Parameter(v);
    return Built(fb, {fb.Mul(a, fb.Full(scale, {3}))});
  };
  const std::vector<Function> branches = {branch("zero", 0), branch("one", 1), branch("ten", 10)};
  const Literal a = RandomF32({3}, rng_);
  for (int32_t i : {-7, 0, 1, 2, 99}) {
    Check({"switch " + std::to_string(i), {Literal::I32({}, {i}), a},
           [&](FunctionBuilder& f, const std::vector<Value>& p) {
             return f.Conditional(p[0], branches, {p[1]})[0];
           }});
  }
  // A pred selector: any non-zero byte is true (branch 0); branch 1 would
  // divide by zero.
  FunctionBuilder tb("keep");
  Value td = tb.Parameter(Shape(DType::kF32, {}));
  FunctionBuilder eb("invert");
  Value ed = eb.Parameter(Shape(DType::kF32, {}));
  const std::vector<Function> guarded = {Built(tb, {td}),
                                         Built(eb, {eb.Div(eb.ConstantF32(1), ed)})};
  for (uint8_t byte : {0, 1, 2}) {
    Literal p{Shape(DType::kPred, {})};
    p.mutable_values<uint8_t>()[0] = byte;
    Check({"guarded " + std::to_string(byte), {p, Literal::ScalarF32(0)},
           [&](FunctionBuilder& f, const std::vector<Value>& q) {
             return f.Conditional(q[0], guarded, {q[1]})[0];
           }});
  }
}

TEST_F(KindOpsTest, LoopsNestInsideConditionalsAndLoops) {
  // Three iterations summing x^(i+1) for even i, through a conditional
  // whose branch runs the power loop.
  const Function power = PowerLoop();
  const Shape v(DType::kF32, {2});
  const Shape i32(DType::kI32, {});
  FunctionBuilder then_b("then");
  Value tn = then_b.Parameter(i32);
  Value tx = then_b.Parameter(v);
  const Function then_f = Built(then_b, {then_b.Call(power, {tn, tx})[0]});
  FunctionBuilder else_b("else");
  else_b.Parameter(i32);
  else_b.Parameter(v);
  const Function else_f = Built(else_b, {else_b.Full(0.0f, {2})});
  FunctionBuilder cb("three");
  Value ci = cb.Parameter(i32);
  cb.Parameter(v);
  cb.Parameter(v);
  const Function cond = Built(cb, {cb.Compare(ci, cb.ConstantI32(3), Comparison::kLt)});
  FunctionBuilder bb("accumulate");
  Value bi = bb.Parameter(i32);
  Value bsum = bb.Parameter(v);
  Value bx = bb.Parameter(v);
  Value half = bb.Convert(bb.Floor(bb.Div(bb.Convert(bi, DType::kF32), bb.ConstantF32(2))),
                          DType::kI32);
  Value even = bb.Compare(bb.Sub(bi, bb.Mul(half, bb.ConstantI32(2))), bb.ConstantI32(0),
                          Comparison::kEq);
  std::vector<Value> term =
      bb.Conditional(even, {then_f, else_f}, {bb.Add(bi, bb.ConstantI32(1)), bx});
  const Function body =
      Built(bb, {bb.Add(bi, bb.ConstantI32(1)), bb.Add(bsum, term[0]), bx});
  Check({"nested", {Literal::F32({2}, {2, 3})}, [&](FunctionBuilder& f, const std::vector<Value>& p) {
           return f.While(cond, body, {f.ConstantI32(0), f.Full(0.0f, {2}), p[0]})[1];
         }});
}

TEST_F(KindOpsTest, ALoopThatNeverEndsStopsWhenTheDeviceShutsDown) {
  FunctionBuilder cb("forever");
  Value cx = cb.Parameter(Shape(DType::kF32, {}));
  const Function cond = Built(cb, {cb.Compare(cx, cx, Comparison::kEq)});
  FunctionBuilder bb("count");
  Value bx = bb.Parameter(Shape(DType::kF32, {}));
  const Function body = Built(bb, {bb.Add(bx, bb.ConstantF32(1))});
  FunctionBuilder b("spin");
  Value p = b.Parameter(Shape(DType::kF32, {}));
  const Function spin = Built(b, {b.While(cond, body, {p})[0]});
  auto exe = Kind().Compile(spin);
  ASSERT_OK(exe.status());
  auto in = device_->Allocate(4);
  auto out = device_->Allocate(4);
  ASSERT_OK(in.status());
  ASSERT_OK(out.status());
  const float zero = 0;
  ASSERT_OK(Await([&](Completion done) {
    device_->CopyIn(&zero, **in, BoxCopy::Flat(0, 4, 0, 4, 4), std::move(done));
  }));
  // What DeviceStream::Shutdown sets, here from another thread while the
  // launch runs (or before its first iteration: either must end it).
  std::atomic<bool> stop{false};
  RunContext context;
  context.stop = &stop;
  const DeviceAllocation* ins[] = {in->get()};
  DeviceAllocation* outs[] = {out->get()};
  absl::Status s;
  std::thread launcher([&] {
    s = Await(
        [&](Completion done) { device_->Launch(**exe, ins, outs, context, std::move(done)); });
  });
  stop.store(true);
  launcher.join();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kCancelled,
                          ::testing::HasSubstr("the device is shutting down")));
}

TEST_F(KindOpsTest, ALoopsCarryConditionAndSubFunctionsCountAsTemporaries) {
  // The store reserves temporary_bytes() for a launch: the packed carry (3
  // results at 64-byte offsets) twice, and the condition's byte.
  auto exe = Kind().Compile(PowerLoop());
  ASSERT_OK(exe.status());
  EXPECT_GT((*exe)->temporary_bytes(), 2 * 3 * 64);
}

TEST_F(KindOpsTest, ControlFlowOverEmptyArrays) {
  const Shape e(DType::kF32, {0});
  FunctionBuilder cb("never");
  Value ce = cb.Parameter(e);
  const Function cond =
      Built(cb, {cb.Compare(cb.ReduceSum(ce, {0}), cb.ConstantF32(1), Comparison::kGt)});
  FunctionBuilder bb("negate");
  Value be = bb.Parameter(e);
  const Function body = Built(bb, {bb.Neg(be)});
  const Literal empty = Literal::F32({0}, {});
  Check({"empty loop", {empty}, [&](FunctionBuilder& f, const std::vector<Value>& v) {
           return f.While(cond, body, {v[0]})[0];
         }});
  Check({"empty branch", {Literal::I32({}, {1}), empty},
         [&](FunctionBuilder& f, const std::vector<Value>& v) {
           return f.Conditional(v[0], {body, body}, {v[1]})[0];
         }});
}

TEST_F(KindOpsTest, CompilingNeedsNoDeviceAndNamesWhatItCannotRun) {
  FunctionBuilder b("too_big");
  Value p = b.Parameter(Shape(DType::kF32, {1 << 16, 1 << 16}));
  auto f = b.Build({b.Neg(p)});
  ASSERT_OK(f.status());
  EXPECT_THAT(Kind().Compile(*f).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("2^31")));
}

TEST_F(KindOpsTest, TheDeviceDescribesItsGpu) {
  const DeviceDescription& d = device_->description();
  EXPECT_EQ(d.kind, kKindName);
  EXPECT_FALSE(d.name.empty());
  EXPECT_FALSE(d.driver.empty());
  EXPECT_GT(d.memory_bytes, 0);
}

// Storage dtypes are held, and converted to and from every dtype, bit for
// bit as the cpu kind converts them (odd lengths: a last element sharing a
// word with nothing); any other op on them is named as the cpu kind's.
TEST_F(KindOpsTest, StorageDtypesConvertFromAndToEveryDtype) {
  Literal a = RandomF32({41}, rng_, -400.0f, 400.0f);
  a.mutable_values<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  a.mutable_values<float>()[1] = 3e9f;
  a.mutable_values<float>()[2] = -3e9f;
  a.mutable_values<float>()[3] = 70000.0f;  // past f16's range
  a.mutable_values<float>()[4] = 1.0f + std::ldexp(1.0f, -11);  // a tie for f16
  a.mutable_values<float>()[5] = 1.0f + 3 * std::ldexp(1.0f, -8);  // a tie for bf16
  const Literal i = RandomI32({41}, rng_, -300, 300);
  const std::vector<DType> storage = {DType::kF16, DType::kBF16, DType::kI64, DType::kI8,
                                      DType::kU8};
  for (DType s : storage) {
    SCOPED_TRACE(DTypeName(s));
    for (const Literal* in : std::vector<const Literal*>{&a, &i}) {
      Check({"to_storage", {*in}, [s](auto& f, auto& v) { return f.Convert(v[0], s); }});
      const Literal stored = ConvertLiteral(*in, s);
      for (DType to : {DType::kF32, DType::kI32, DType::kPred, DType::kF16, DType::kBF16,
                       DType::kI64, DType::kI8, DType::kU8}) {
        Check({"from_storage", {stored}, [to](auto& f, auto& v) { return f.Convert(v[0], to); }});
      }
    }
  }
  // An i64 beyond int32 both ways.
  const Literal wide = Literal::I64({3}, {(int64_t{1} << 40) + 7, -(int64_t{1} << 35), -1});
  Check({"i64_to_i32", {wide}, [](auto& f, auto& v) { return f.Convert(v[0], DType::kI32); }});
  Check({"i64_to_f32", {wide}, [](auto& f, auto& v) { return f.Convert(v[0], DType::kF32); }});

  FunctionBuilder b("move_f16");
  Value p = b.Parameter(Shape(DType::kF16, {4, 2}));
  auto f = b.Build({b.Transpose(p, {1, 0})});
  ASSERT_OK(f.status());
  EXPECT_THAT(Kind().Compile(*f).status(),
              StatusIs(absl::StatusCode::kUnimplemented,
                       ::testing::HasSubstr("cannot run transpose of f16[2,4]")));
}

#if !CAUSEWAY_OPS_KIND_CUDA
// A launch's commands are recorded once and submitted again: later launches
// of the executable, over other buffers each time, record nothing and read
// and write the buffers they were given.
TEST_F(KindOpsTest, LaunchesReuseTheirRecordedCommandsOverNewBuffers) {
  FunctionBuilder b("axpy");
  Value x = b.Parameter(Shape(DType::kF32, {300}));
  Value y = b.Parameter(Shape(DType::kF32, {300}));
  auto f = b.Build({b.Add(b.Mul(x, x), y)});
  ASSERT_OK(f.status());
  auto exe = Kind().Compile(*f);
  ASSERT_OK(exe.status());
  const int64_t bytes = 300 * 4;
  // Every buffer stays allocated to the end, so each launch has new addresses.
  std::vector<std::unique_ptr<DeviceAllocation>> kept;
  auto run = [&](float xv, float yv) -> std::vector<float> {
    std::vector<std::unique_ptr<DeviceAllocation>> in;
    for (float v : {xv, yv}) {
      auto a = device_->Allocate(bytes);
      CW_CHECK_OK(a.status());
      const std::vector<float> host(300, v);
      CW_CHECK_OK(Await([&](Completion done) {
        device_->CopyIn(host.data(), **a, BoxCopy::Flat(0, bytes, 0, bytes, bytes),
                        std::move(done));
      }));
      in.push_back(std::move(*a));
    }
    auto out = device_->Allocate(bytes);
    CW_CHECK_OK(out.status());
    const DeviceAllocation* ins[] = {in[0].get(), in[1].get()};
    DeviceAllocation* outs[] = {out->get()};
    CW_CHECK_OK(Await([&](Completion done) {
      device_->Launch(**exe, ins, outs, {}, std::move(done));
    }));
    std::vector<float> got(300);
    CW_CHECK_OK(Await([&](Completion done) {
      device_->CopyOut(**out, got.data(), BoxCopy::Flat(0, bytes, 0, bytes, bytes),
                       std::move(done));
    }));
    for (auto& a : in) kept.push_back(std::move(a));
    kept.push_back(std::move(*out));
    return got;
  };
  EXPECT_THAT(run(2, 1), ::testing::Each(5.0f));
  const int64_t recorded = SegmentRecordings();
  for (int i = 0; i < 20; ++i) {
    ASSERT_THAT(run(static_cast<float>(i), 0.5f), ::testing::Each(i * i + 0.5f)) << i;
  }
  EXPECT_EQ(SegmentRecordings(), recorded);
}
#endif  // !CAUSEWAY_OPS_KIND_CUDA

// The kernels of the first segment of `f` compiled for the kind.
std::vector<Kernel> KernelsOf(const Function& f) {
  auto exe = dispatch::Program::Compile(f, {std::string(kKindName)});
  CW_CHECK_OK(exe.status());
  std::vector<Kernel> out;
  for (const Dispatch& d : (*exe)->segments()[0].dispatches) out.push_back(d.kernel);
  return out;
}

// Runs of f32 element-wise ops are one kFusedF32 dispatch each (the cpu
// planner's fused steps), equal to the cpu kind's results: with repeated
// rows, values stored because they are results, and the fallbacks to one
// dispatch per op past the kernel's bounds (inputs, ops).
TEST_F(KindOpsTest, ElementwiseRunsAreOneFusedDispatch) {
  const Literal x = RandomF32({6, 250}, rng_), bias = RandomF32({250}, rng_);
  const Body gelu = [](FunctionBuilder& f, const std::vector<Value>& v) {
    const Value xb = f.Add(v[0], f.Broadcast(v[1], {6, 250}, {1}));
    const Value e = f.Erf(f.Mul(xb, f.Broadcast(f.ConstantF32(0.70710678f), {6, 250}, {})));
    const Value one = f.Broadcast(f.ConstantF32(1.0f), {6, 250}, {});
    return f.Mul(f.Mul(xb, f.Broadcast(f.ConstantF32(0.5f), {6, 250}, {})), f.Add(e, one));
  };
  Check({"gelu", {x, bias}, gelu});
  {
    FunctionBuilder b("gelu");
    const Value p0 = b.Parameter(x.shape()), p1 = b.Parameter(bias.shape());
    auto f = b.Build({gelu(b, {p0, p1})});
    ASSERT_OK(f.status());
    EXPECT_THAT(KernelsOf(*f), ::testing::ElementsAre(Kernel::kFusedF32));
  }
  // An intermediate that is also a result is stored; the rest are not.
  {
    FunctionBuilder b("two_results");
    const Value p = b.Parameter(x.shape());
    const Value t = b.Tanh(p);
    auto f = b.Build({b.Exp(b.Mul(t, t)), t});
    ASSERT_OK(f.status());
    EXPECT_THAT(KernelsOf(*f), ::testing::ElementsAre(Kernel::kFusedF32));
    Check({"first_result", {x}, [](auto& f, auto& v) { return f.Exp(f.Mul(f.Tanh(v[0]), f.Tanh(v[0]))); }});
  }
  // Nine inputs are past the kernel's eight: one dispatch per op.
  std::vector<Literal> nine;
  for (int i = 0; i < 9; ++i) nine.push_back(RandomF32({300}, rng_));
  const Body sum = [](FunctionBuilder& f, const std::vector<Value>& v) {
    Value s = v[0];
    for (size_t i = 1; i < v.size(); ++i) s = f.Add(s, v[i]);
    return f.Tanh(s);
  };
  Check({"nine_inputs", nine, sum});
  {
    FunctionBuilder b("nine_inputs");
    std::vector<Value> ps;
    for (const Literal& l : nine) ps.push_back(b.Parameter(l.shape()));
    auto f = b.Build({sum(b, ps)});
    ASSERT_OK(f.status());
    const std::vector<Kernel> k = KernelsOf(*f);
    EXPECT_EQ(std::count(k.begin(), k.end(), Kernel::kFusedF32), 0);
    EXPECT_EQ(k.size(), 9u);
  }
  // Forty ops are past its 32 registers.
  const Body long_chain = [](FunctionBuilder& f, const std::vector<Value>& v) {
    Value s = v[0];
    for (int i = 0; i < 20; ++i) s = f.Tanh(f.Add(s, v[0]));
    return s;
  };
  Check({"forty_ops", {x}, long_chain});
  {
    FunctionBuilder b("forty_ops");
    const Value p = b.Parameter(x.shape());
    auto f = b.Build({long_chain(b, {p})});
    ASSERT_OK(f.status());
    EXPECT_EQ(KernelsOf(*f).size(), 40u);
  }
}

}  // namespace
#if CAUSEWAY_OPS_KIND_CUDA
}  // namespace causeway::backend::cuda
#else
}  // namespace causeway::backend::vulkan
#endif
