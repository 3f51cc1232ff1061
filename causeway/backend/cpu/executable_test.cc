#include "causeway/backend/cpu/executable.h"

#include <time.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "causeway/backend/buffer_plan.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/verifier.h"
#include "causeway/testing/status_matchers.h"

namespace causeway::backend::cpu {
namespace {

using ::testing::HasSubstr;
using ir::DType;
using ir::Function;
using ir::FunctionBuilder;
using ir::Literal;
using ir::OpKind;
using ir::ReduceKind;
using ir::Shape;
using ir::Value;

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }
Shape I32(std::vector<int64_t> dims) { return Shape(DType::kI32, std::move(dims)); }

Function BuildOrDie(FunctionBuilder& b, std::vector<Value> outputs) {
  absl::StatusOr<Function> f = b.Build(std::move(outputs));
  CW_CHECK_OK(f.status());
  return *std::move(f);
}

std::shared_ptr<const HostExecutable> CompileOrDie(const Function& f) {
  absl::StatusOr<std::shared_ptr<const HostExecutable>> exe = Compile(f);
  CW_CHECK_OK(exe.status());
  return *std::move(exe);
}

absl::StatusOr<std::vector<Literal>> RunExe(const HostExecutable& exe,
                                            const std::vector<Literal>& inputs,
                                            CollectiveOps* collectives = nullptr) {
  std::vector<const void*> in;
  for (const Literal& l : inputs) in.push_back(l.data());
  std::vector<Literal> out;
  for (int i = 0; i < exe.function().num_outputs(); ++i) {
    out.emplace_back(exe.function().output_shape(i));
  }
  std::vector<void*> out_ptrs;
  for (Literal& l : out) out_ptrs.push_back(l.data());
  RunContext context;
  context.collectives = collectives;
  absl::Status s = exe.Run(in, out_ptrs, context);
  if (!s.ok()) return s;
  return out;
}

std::vector<Literal> RunOrDie(const Function& f, const std::vector<Literal>& inputs,
                              CollectiveOps* collectives = nullptr) {
  absl::StatusOr<std::vector<Literal>> out = RunExe(*CompileOrDie(f), inputs, collectives);
  CW_CHECK_OK(out.status());
  return *std::move(out);
}

Literal RandomF32(std::vector<int64_t> dims, uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Literal l(F32(std::move(dims)));
  for (float& v : l.mutable_values<float>()) v = dist(rng);
  return l;
}

Literal RandomI32(std::vector<int64_t> dims, uint32_t seed, int lo = -50, int hi = 50) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  Literal l(I32(std::move(dims)));
  for (int32_t& v : l.mutable_values<int32_t>()) v = dist(rng);
  return l;
}

void ExpectNear(const Literal& actual, const std::vector<float>& expected, float tol) {
  ASSERT_EQ(actual.shape().dtype, DType::kF32);
  absl::Span<const float> a = actual.values<float>();
  ASSERT_EQ(a.size(), expected.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], expected[i], tol * (1 + std::fabs(expected[i]))) << "element " << i;
  }
}

// Multi-index helpers for the naive references.
std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
  return idx;
}
int64_t Ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + idx[d];
  return flat;
}

TEST(CpuExecutableTest, BinaryAndUnaryF32OpsMatchReference) {
  const Literal x = RandomF32({3, 5}, 1);
  const Literal y = RandomF32({3, 5}, 2, 0.5f, 3.0f);
  const std::vector<OpKind> ops = {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv,
                                   OpKind::kMax, OpKind::kNeg, OpKind::kExp};
  for (OpKind op : ops) {
    FunctionBuilder b("f");
    Value p = b.Parameter(x.shape());
    Value q = b.Parameter(y.shape());
    Value r;
    switch (op) {
      case OpKind::kAdd: r = b.Add(p, q); break;
      case OpKind::kSub: r = b.Sub(p, q); break;
      case OpKind::kMul: r = b.Mul(p, q); break;
      case OpKind::kDiv: r = b.Div(p, q); break;
      case OpKind::kMax: r = b.Max(p, q); break;
      case OpKind::kNeg: r = b.Neg(p); break;
      default: r = b.Exp(p); break;
    }
    std::vector<Literal> out = RunOrDie(BuildOrDie(b, {r}), {x, y});
    std::vector<float> expected;
    for (int i = 0; i < 15; ++i) {
      const float a = x.values<float>()[i], c = y.values<float>()[i];
      switch (op) {
        case OpKind::kAdd: expected.push_back(a + c); break;
        case OpKind::kSub: expected.push_back(a - c); break;
        case OpKind::kMul: expected.push_back(a * c); break;
        case OpKind::kDiv: expected.push_back(a / c); break;
        case OpKind::kMax: expected.push_back(std::max(a, c)); break;
        case OpKind::kNeg: expected.push_back(-a); break;
        default: expected.push_back(std::exp(a)); break;
      }
    }
    SCOPED_TRACE(ir::OpName(op));
    ExpectNear(out[0], expected, 1e-6f);
  }
}

TEST(CpuExecutableTest, IntegerOpsWrapAndDivisionNeverTraps) {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  Literal x = Literal::I32({6}, {7, -7, kMax, kMin, 5, kMin});
  Literal y = Literal::I32({6}, {2, 2, 1, -1, 0, 3});
  FunctionBuilder b("f");
  Value p = b.Parameter(x.shape());
  Value q = b.Parameter(y.shape());
  Function f = BuildOrDie(
      b, {b.Add(p, q), b.Sub(p, q), b.Mul(p, q), b.Div(p, q), b.Max(p, q), b.Neg(p)});
  std::vector<Literal> out = RunOrDie(f, {x, y});
  EXPECT_EQ(out[0], Literal::I32({6}, {9, -5, kMin, kMax, 5, kMin + 3}));
  EXPECT_EQ(out[1], Literal::I32({6}, {5, -9, kMax - 1, kMin + 1, 5, kMax - 2}));
  EXPECT_EQ(out[2], Literal::I32({6}, {14, -14, kMax, kMin, 0, kMin}));
  EXPECT_EQ(out[3], Literal::I32({6}, {3, -3, kMax, kMin, -1, kMin / 3}));
  EXPECT_EQ(out[4], Literal::I32({6}, {7, 2, kMax, -1, 5, 3}));
  EXPECT_EQ(out[5], Literal::I32({6}, {-7, 7, -kMax, kMin, -5, kMin}));
}

TEST(CpuExecutableTest, BroadcastMatchesReference) {
  struct Case {
    std::vector<int64_t> operand, result, operand_dims;
  };
  for (const Case& c : std::vector<Case>{{{}, {2, 3}, {}},
                                         {{3}, {2, 3, 4}, {1}},
                                         {{2, 1}, {2, 5}, {0, 1}},
                                         {{1, 4}, {3, 2, 4}, {1, 2}},
                                         {{2, 4}, {2, 3, 4}, {0, 2}},
                                         {{5}, {5}, {0}}}) {
    const Literal x = RandomF32(c.operand, 3);
    FunctionBuilder b("f");
    Function f = BuildOrDie(b, {b.Broadcast(b.Parameter(x.shape()), c.result, c.operand_dims)});
    std::vector<Literal> out = RunOrDie(f, {x});
    const Shape rs = F32(c.result);
    std::vector<float> expected;
    for (int64_t i = 0; i < rs.num_elements(); ++i) {
      std::vector<int64_t> ridx = Unravel(i, c.result);
      std::vector<int64_t> oidx(c.operand.size());
      for (size_t d = 0; d < c.operand.size(); ++d) {
        oidx[d] = c.operand[d] == 1 ? 0 : ridx[c.operand_dims[d]];
      }
      expected.push_back(x.values<float>()[Ravel(oidx, c.operand)]);
    }
    ExpectNear(out[0], expected, 0);
  }
}

TEST(CpuExecutableTest, TransposeOfRankThreeMatchesReference) {
  const std::vector<int64_t> dims = {3, 4, 5};
  const Literal x = RandomF32(dims, 4);
  for (std::vector<int64_t> perm : std::vector<std::vector<int64_t>>{
           {0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}, {0, 2, 1}, {1, 0, 2}}) {
    FunctionBuilder b("f");
    Function f = BuildOrDie(b, {b.Transpose(b.Parameter(x.shape()), perm)});
    std::vector<Literal> out = RunOrDie(f, {x});
    std::vector<int64_t> rdims = {dims[perm[0]], dims[perm[1]], dims[perm[2]]};
    EXPECT_EQ(out[0].shape(), F32(rdims));
    std::vector<float> expected;
    for (int64_t i = 0; i < 60; ++i) {
      std::vector<int64_t> ridx = Unravel(i, rdims);
      std::vector<int64_t> oidx(3);
      for (int d = 0; d < 3; ++d) oidx[perm[d]] = ridx[d];
      expected.push_back(x.values<float>()[Ravel(oidx, dims)]);
    }
    ExpectNear(out[0], expected, 0);
  }
}

TEST(CpuExecutableTest, TransposeOfRankFourIntegersMatchesReference) {
  const std::vector<int64_t> dims = {2, 3, 1, 4};
  const std::vector<int64_t> perm = {3, 1, 0, 2};
  const Literal x = RandomI32(dims, 5);
  FunctionBuilder b("f");
  Function f = BuildOrDie(b, {b.Transpose(b.Parameter(x.shape()), perm)});
  std::vector<Literal> out = RunOrDie(f, {x});
  std::vector<int64_t> rdims = {4, 3, 2, 1};
  for (int64_t i = 0; i < 24; ++i) {
    std::vector<int64_t> ridx = Unravel(i, rdims);
    std::vector<int64_t> oidx(4);
    for (int d = 0; d < 4; ++d) oidx[perm[d]] = ridx[d];
    EXPECT_EQ(out[0].values<int32_t>()[i], x.values<int32_t>()[Ravel(oidx, dims)]);
  }
}

TEST(CpuExecutableTest, ReduceSumOverSeveralAxesMatchesReference) {
  const std::vector<int64_t> dims = {3, 4, 5, 2};
  const Literal x = RandomF32(dims, 6);
  for (std::vector<int64_t> axes : std::vector<std::vector<int64_t>>{
           {}, {0}, {3}, {0, 2}, {1, 3}, {2, 0, 1}, {0, 1, 2, 3}}) {
    FunctionBuilder b("f");
    Function f = BuildOrDie(b, {b.ReduceSum(b.Parameter(x.shape()), axes)});
    std::vector<Literal> out = RunOrDie(f, {x});
    std::vector<int64_t> rdims;
    std::vector<bool> reduced(4, false);
    for (int64_t a : axes) reduced[a] = true;
    for (int d = 0; d < 4; ++d) {
      if (!reduced[d]) rdims.push_back(dims[d]);
    }
    std::vector<double> sums(F32(rdims).num_elements(), 0.0);
    for (int64_t i = 0; i < 120; ++i) {
      std::vector<int64_t> idx = Unravel(i, dims), ridx;
      for (int d = 0; d < 4; ++d) {
        if (!reduced[d]) ridx.push_back(idx[d]);
      }
      sums[Ravel(ridx, rdims)] += x.values<float>()[i];
    }
    EXPECT_EQ(out[0].shape(), F32(rdims));
    ExpectNear(out[0], std::vector<float>(sums.begin(), sums.end()), 1e-5f);
  }
}

TEST(CpuExecutableTest, ReduceSumOfIntegers) {
  Literal x = Literal::I32({2, 3}, {1, 2, 3, 4, 5, 6});
  FunctionBuilder b("f");
  Value p = b.Parameter(x.shape());
  std::vector<Literal> out =
      RunOrDie(BuildOrDie(b, {b.ReduceSum(p, {0}), b.ReduceSum(p, {1})}), {x});
  EXPECT_EQ(out[0], Literal::I32({3}, {5, 7, 9}));
  EXPECT_EQ(out[1], Literal::I32({2}, {6, 15}));
}

TEST(CpuExecutableTest, MatmulMatchesReference) {
  const int64_t m = 64, k = 48, n = 32;
  const Literal a = RandomF32({m, k}, 7);
  const Literal c = RandomF32({k, n}, 8);
  const Literal ai = RandomI32({m, k}, 9);
  const Literal ci = RandomI32({k, n}, 10);
  FunctionBuilder b("f");
  Value pa = b.Parameter(a.shape());
  Value pc = b.Parameter(c.shape());
  Value pai = b.Parameter(ai.shape());
  Value pci = b.Parameter(ci.shape());
  std::vector<Literal> out =
      RunOrDie(BuildOrDie(b, {b.Matmul(pa, pc), b.Matmul(pai, pci)}), {a, c, ai, ci});
  std::vector<float> expected;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      int32_t isum = 0;
      for (int64_t l = 0; l < k; ++l) {
        sum += double{a.values<float>()[i * k + l]} * c.values<float>()[l * n + j];
        isum += ai.values<int32_t>()[i * k + l] * ci.values<int32_t>()[l * n + j];
      }
      expected.push_back(static_cast<float>(sum));
      EXPECT_EQ(out[1].values<int32_t>()[i * n + j], isum);
    }
  }
  ExpectNear(out[0], expected, 1e-4f);
}

TEST(CpuExecutableTest, ConvertAmongAllDtypes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Literal x = Literal::F32({6}, {1.9f, -1.9f, 0.0f, 3e10f, -3e10f, nan});
  FunctionBuilder b("f");
  Value p = b.Parameter(x.shape());
  Value as_i32 = b.Convert(p, DType::kI32);
  Value as_pred = b.Convert(p, DType::kPred);
  Value back = b.Convert(as_i32, DType::kF32);
  Value pred_to_i32 = b.Convert(as_pred, DType::kI32);
  Value pred_to_f32 = b.Convert(as_pred, DType::kF32);
  Value i32_to_pred = b.Convert(as_i32, DType::kPred);
  std::vector<Literal> out = RunOrDie(
      BuildOrDie(b, {as_i32, as_pred, back, pred_to_i32, pred_to_f32, i32_to_pred}), {x});
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(out[0], Literal::I32({6}, {1, -1, 0, kMax, kMin, 0}));
  EXPECT_EQ(out[1].shape(), Shape(DType::kPred, {6}));
  EXPECT_EQ(std::vector<uint8_t>(out[1].values<uint8_t>().begin(),
                                 out[1].values<uint8_t>().end()),
            (std::vector<uint8_t>{1, 1, 0, 1, 1, 1}));
  ExpectNear(out[2], {1, -1, 0, static_cast<float>(kMax), static_cast<float>(kMin), 0}, 0);
  EXPECT_EQ(out[3], Literal::I32({6}, {1, 1, 0, 1, 1, 1}));
  ExpectNear(out[4], {1, 1, 0, 1, 1, 1}, 0);
  EXPECT_EQ(std::vector<uint8_t>(out[5].values<uint8_t>().begin(),
                                 out[5].values<uint8_t>().end()),
            (std::vector<uint8_t>{1, 1, 0, 1, 1, 0}));
}

TEST(CpuExecutableTest, ReshapeConstantsAndAliasedOutputs) {
  Literal x = Literal::F32({2, 3}, {1, 2, 3, 4, 5, 6});
  FunctionBuilder b("f");
  Value p = b.Parameter(x.shape());
  Value c = b.Constant(Literal::I32({2}, {10, 20}));
  Value r = b.Reshape(p, {3, 2});
  // Results: a parameter, a constant, a computed value twice.
  Function f = BuildOrDie(b, {p, c, r, r, b.Neg(r)});
  std::vector<Literal> out = RunOrDie(f, {x});
  EXPECT_EQ(out[0], x);
  EXPECT_EQ(out[1], Literal::I32({2}, {10, 20}));
  EXPECT_EQ(out[2], Literal::F32({3, 2}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out[3], out[2]);
  EXPECT_EQ(out[4], Literal::F32({3, 2}, {-1, -2, -3, -4, -5, -6}));
}

TEST(CpuExecutableTest, ZeroSizedValuesRun) {
  FunctionBuilder b("f");
  Value p = b.Parameter(F32({0, 3}));
  Value t = b.Transpose(b.Exp(p), {1, 0});
  Value m = b.Matmul(t, b.Parameter(F32({0, 2})));  // [3,0] x [0,2] = zeros
  std::vector<Literal> out = RunOrDie(
      BuildOrDie(b, {t, m, b.ReduceSum(p, {0})}), {Literal(F32({0, 3})), Literal(F32({0, 2}))});
  EXPECT_EQ(out[0].shape(), F32({3, 0}));
  EXPECT_EQ(out[1], Literal::F32({3, 2}, {0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(out[2], Literal::F32({3}, {0, 0, 0}));
}

int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

TEST(CpuExecutableTest, DelayWaitsWithoutBurningCpuAndReturnsItsOperand) {
  const Literal x = RandomF32({4, 4}, 11);
  FunctionBuilder b("f");
  Value d = b.Delay(b.Parameter(x.shape()), 150'000);
  auto exe = CompileOrDie(BuildOrDie(b, {d}));
  const auto start = std::chrono::steady_clock::now();
  const int64_t cpu_start = ThreadCpuNanos();
  absl::StatusOr<std::vector<Literal>> out = RunExe(*exe, {x});
  const int64_t cpu_nanos = ThreadCpuNanos() - cpu_start;
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], x);
  EXPECT_GE(elapsed, std::chrono::microseconds(150'000));
  EXPECT_LT(cpu_nanos, 50'000'000) << "the delay should sleep, not spin";
}

// Emulates a 2-member group in which the peer holds the same data: sum
// doubles, max is the identity. Records the collective indices it sees.
class FakeCollectives final : public CollectiveOps {
 public:
  absl::Status AllReduce(int index, absl::Span<const std::string> axes,
                         ir::ReduceKind kind, const Shape& shape, void* data) override {
    {
      MutexLock lock(&mu_);
      indices_.push_back(index);
      axes_.assign(axes.begin(), axes.end());
    }
    if (fail_) return absl::UnavailableError("peer lost");
    if (kind == ReduceKind::kMax) return absl::OkStatus();
    const int64_t n = shape.num_elements();
    if (shape.dtype == DType::kF32) {
      float* p = static_cast<float*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] *= 2;
    } else {
      int32_t* p = static_cast<int32_t*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] *= 2;
    }
    return absl::OkStatus();
  }

  std::vector<int> indices() const {
    MutexLock lock(&mu_);
    return indices_;
  }
  std::vector<std::string> axes() const {
    MutexLock lock(&mu_);
    return axes_;
  }
  bool fail_ = false;

 private:
  mutable Mutex mu_;
  std::vector<int> indices_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> axes_ ABSL_GUARDED_BY(mu_);
};

TEST(CpuExecutableTest, AllReduceDelegatesToCollectivesInInstructionOrder) {
  Literal x = Literal::F32({3}, {1, 2, 3});
  FunctionBuilder b("f");
  Value p = b.Parameter(x.shape());
  Value once = b.AllReduce(p, {"data"});
  Value twice = b.AllReduce(b.Neg(once), {"data", "model"});
  Value same = b.AllReduce(p, {"model"}, ReduceKind::kMax);
  Value i = b.AllReduce(b.Convert(p, DType::kI32), {"data"});
  FakeCollectives collectives;
  std::vector<Literal> out =
      RunOrDie(BuildOrDie(b, {twice, once, same, i, p}), {x}, &collectives);
  EXPECT_EQ(out[0], Literal::F32({3}, {-4, -8, -12}));
  EXPECT_EQ(out[1], Literal::F32({3}, {2, 4, 6}));
  EXPECT_EQ(out[2], x);
  EXPECT_EQ(out[3], Literal::I32({3}, {2, 4, 6}));
  EXPECT_EQ(out[4], x) << "the input must not be reduced in place";
  EXPECT_EQ(collectives.indices(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(collectives.axes(), (std::vector<std::string>{"data"}));
}

TEST(CpuExecutableTest, AllReduceWithoutCollectivesFails) {
  FunctionBuilder b("needs_peers");
  Value r = b.AllReduce(b.Parameter(F32({2})), {"data"});
  absl::StatusOr<std::vector<Literal>> out =
      RunExe(*CompileOrDie(BuildOrDie(b, {r})), {Literal(F32({2}))});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("function needs_peers, instruction 1 (all_reduce)"));
}

TEST(CpuExecutableTest, CollectiveErrorsCarryInstructionContext) {
  FunctionBuilder b("f");
  Value r = b.AllReduce(b.Exp(b.Parameter(F32({2}))), {"data"});
  FakeCollectives collectives;
  collectives.fail_ = true;
  absl::StatusOr<std::vector<Literal>> out =
      RunExe(*CompileOrDie(BuildOrDie(b, {r})), {Literal(F32({2}))}, &collectives);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("instruction 2 (all_reduce): peer lost"));
}

TEST(CpuExecutableTest, CompileRejectsInvalidFunctions) {
  Function bad("bad", {}, {}, {0});
  absl::StatusOr<std::shared_ptr<const HostExecutable>> exe = Compile(bad);
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuExecutableTest, RunRejectsWrongBufferCounts) {
  FunctionBuilder b("f");
  Value p = b.Parameter(F32({2}));
  auto exe = CompileOrDie(BuildOrDie(b, {b.Neg(p)}));
  Literal in(F32({2})), out(F32({2}));
  const void* ins[] = {in.data(), in.data()};
  void* outs[] = {out.data()};
  EXPECT_EQ(exe->Run(absl::MakeConstSpan(ins, 2), outs, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exe->Run(absl::MakeConstSpan(ins, 1), {}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  const void* null_in[] = {nullptr};
  EXPECT_EQ(exe->Run(null_in, outs, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(exe->Run(absl::MakeConstSpan(ins, 1), outs, {}).ok());
}

// x -> 50 ops mixing shapes -> result, with a naive reference.
Function LongChain() {
  FunctionBuilder b("chain");
  Value x = b.Parameter(F32({8, 6}));
  Value y = b.Parameter(F32({8, 6}));
  Value v = x;
  for (int i = 0; i < 10; ++i) {
    Value t = b.Transpose(v, {1, 0});                      // [6,8]
    Value s = b.Reshape(t, {8, 6});                        // scrambles layout
    Value m = b.Mul(s, y);
    Value e = b.Max(m, b.Neg(v));
    v = b.Add(e, x);                                       // 6 ops per round
  }
  Value r = b.ReduceSum(v, {0});
  return BuildOrDie(b, {r, v});
}

std::vector<float> LongChainReference(const Literal& x, const Literal& y) {
  std::vector<float> v(x.values<float>().begin(), x.values<float>().end());
  for (int i = 0; i < 10; ++i) {
    std::vector<float> t(48), e(48);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 6; ++c) t[c * 8 + r] = v[r * 6 + c];
    for (int j = 0; j < 48; ++j) {
      e[j] = std::max(t[j] * y.values<float>()[j], -v[j]) + x.values<float>()[j];
    }
    v = e;
  }
  return v;
}

TEST(CpuExecutableTest, BufferReuseKeepsLongChainsCorrect) {
  const Function f = LongChain();
  ASSERT_GE(f.instructions().size(), 50u);
  const ExecutionPlan plan = PlanExecution(f);
  EXPECT_GT(plan.arena_bytes, 0);
  EXPECT_LE(plan.arena_bytes * 5, plan.unshared_arena_bytes) << "arena space is reused";
  const Literal x = RandomF32({8, 6}, 12);
  const Literal y = RandomF32({8, 6}, 13, -1, 1);
  std::vector<Literal> out = RunOrDie(f, {x, y});
  const std::vector<float> v = LongChainReference(x, y);
  ExpectNear(out[1], v, 1e-5f);
  std::vector<float> sums(6, 0);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 6; ++c) sums[c] += v[r * 6 + c];
  ExpectNear(out[0], sums, 1e-4f);
}

TEST(CpuExecutableTest, PlanSkipsDeadCodeButKeepsEffects) {
  FunctionBuilder b("f");
  Value p = b.Parameter(F32({2}));
  b.Exp(p);                        // dead
  b.Delay(p, 1);                   // effect: kept
  b.AllReduce(p, {"data"});        // effect: kept
  Value r = b.Neg(p);
  const ExecutionPlan plan = PlanExecution(BuildOrDie(b, {r}));
  std::vector<int> steps;
  for (const Step& s : plan.steps) steps.push_back(s.instruction);
  EXPECT_EQ(steps, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(plan.steps[1].collective_index, 0);
}

TEST(CpuExecutableTest, BroadcastsFoldIntoArithmeticAndReshapesAreFree) {
  const Literal x = Literal::F32({2, 3}, {1, 2, 4, -1, 8, 0.5f});
  const Literal row = Literal::F32({3}, {2, -4, 8});
  FunctionBuilder b("f");
  Value p = b.Parameter(x.shape());
  Value r = b.Parameter(row.shape());
  Value rows = b.Broadcast(r, {2, 3}, {1});  // a row repeated: folds
  Value two = b.Full(2.0f, {2, 3});          // a scalar: folds
  Value cols = b.Broadcast(b.Slice(r, {0}, {2}), {2, 3}, {0});  // not trailing: written
  std::vector<Value> results = {
      b.Sub(two, p), b.Div(p, two), b.Div(rows, p), b.Sub(p, rows), b.Max(p, two),
      b.Min(rows, p), b.Mul(p, cols), b.Exp(b.Reshape(b.Full(3.0f, {2, 3}), {6}))};
  const Function f = BuildOrDie(b, results);
  const std::vector<Literal> out = RunOrDie(f, {x, row});
  const auto xv = x.values<float>(), rv = row.values<float>();
  for (int i = 0; i < 6; ++i) {
    const float xi = xv[i], ri = rv[i % 3], ci = rv[i / 3];
    EXPECT_EQ(out[0].values<float>()[i], 2 - xi) << i;
    EXPECT_EQ(out[1].values<float>()[i], xi / 2) << i;
    EXPECT_EQ(out[2].values<float>()[i], ri / xi) << i;
    EXPECT_EQ(out[3].values<float>()[i], xi - ri) << i;
    EXPECT_EQ(out[4].values<float>()[i], std::max(xi, 2.0f)) << i;
    EXPECT_EQ(out[5].values<float>()[i], std::min(ri, xi)) << i;
    EXPECT_EQ(out[6].values<float>()[i], xi * ci) << i;
  }
  EXPECT_FLOAT_EQ(out[7].values<float>()[5], std::exp(3.0f));
  // The row and scalar broadcasts run no step; the column one, and the
  // scalar one read by exp (through a reshape, which runs no step), do.
  const ExecutionPlan plan = PlanExecution(f, {.fuse_elementwise = false});
  int broadcasts = 0, reshapes = 0, folded = 0;
  for (const Step& s : plan.steps) {
    const OpKind op = f.instructions()[s.instruction].op;
    broadcasts += op == OpKind::kBroadcast;
    reshapes += op == OpKind::kReshape;
    folded += (s.operand_row[0] > 0) + (s.operand_row[1] > 0);
  }
  EXPECT_EQ(broadcasts, 2);
  EXPECT_EQ(reshapes, 0);
  EXPECT_EQ(folded, 6);  // three readers each of `rows` and `two`
}

TEST(CpuExecutableTest, PassThroughResultsHaveTheirOperandComputedInPlace) {
  const Literal x = Literal::F32({2, 3}, {1, 2, 4, -1, 8, 0.5f});
  FunctionBuilder b("f");
  Value p = b.Parameter(x.shape());
  Value sum = b.Add(p, b.Full(1.0f, {2, 3}));
  Value shared = b.Mul(p, p);  // read twice: stays in the arena
  std::vector<Value> results = {b.Reshape(b.Delay(sum, 1), {6}), b.Delay(shared, 1),
                                b.Neg(shared)};
  const Function f = BuildOrDie(b, results);
  const std::vector<Literal> out = RunOrDie(f, {x});
  const auto xv = x.values<float>();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(out[0].values<float>()[i], xv[i] + 1) << i;
    EXPECT_EQ(out[1].values<float>()[i], xv[i] * xv[i]) << i;
    EXPECT_EQ(out[2].values<float>()[i], -xv[i] * xv[i]) << i;
  }
  const ExecutionPlan plan = PlanExecution(f, {.fuse_elementwise = false});
  for (const Step& s : plan.steps) {
    const OpKind op = f.instructions()[s.instruction].op;
    if (op == OpKind::kAdd) {
      // The add writes result 0; the delay and reshape after it copy nothing.
      EXPECT_EQ(s.result.kind, BufferLocation::Kind::kOutput);
      EXPECT_EQ(s.result.index, 0);
    }
    if (op == OpKind::kMul) {
      EXPECT_EQ(s.result.kind, BufferLocation::Kind::kArena);
    }
  }
  EXPECT_TRUE(plan.final_copies.empty());
}

// The exact GELU with erf as Abramowitz and Stegun's polynomial: some
// twenty element-wise ops over [3, 1500], reading a repeated row and
// scalars. 4500 elements are four chunks and a partial one, and the row's
// 1500 elements start each chunk at a different place.
Function ErfGeluChain() {
  FunctionBuilder b("gelu");
  Value x = b.Parameter(F32({3, 1500}));
  Value bias = b.Parameter(F32({1500}));
  auto full = [&](float v) { return b.Full(v, {3, 1500}); };
  Value h = b.Add(x, b.Broadcast(bias, {3, 1500}, {1}));
  Value z = b.Div(h, full(1.4142135f));
  Value az = b.Abs(z);
  Value t = b.Div(full(1), b.Add(full(1), b.Mul(full(0.3275911f), az)));
  Value poly = full(1.061405429f);
  for (float a : {-1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f}) {
    poly = b.Add(b.Mul(poly, t), full(a));
  }
  poly = b.Mul(poly, t);
  Value erf = b.Mul(b.Sign(z), b.Sub(full(1), b.Mul(poly, b.Exp(b.Neg(b.Mul(z, z))))));
  Value gelu = b.Mul(b.Mul(h, full(0.5f)), b.Add(erf, full(1)));
  return BuildOrDie(b, {gelu, h});  // h is also read after the chain
}

TEST(CpuExecutableTest, ElementwiseChainsRunAsOneFusedStepWithTheUnfusedResults) {
  const Function f = ErfGeluChain();
  const ExecutionPlan plan = PlanExecution(f);
  ASSERT_EQ(plan.steps.size(), 1u) << "the whole chain is one step";
  const Step& step = plan.steps[0];
  EXPECT_EQ(step.fused_elements, 4500);
  EXPECT_EQ(step.fused.size(), step.unfused.size());
  EXPECT_GT(step.fused.size(), 20u);
  int stored = 0;
  for (const FusedOp& op : step.fused) stored += op.store;
  EXPECT_EQ(stored, 2) << "only the two results are written to memory";
  EXPECT_LE(step.fused_scratch, 4) << "scratch slots are reused";
  EXPECT_EQ(step.unfused[0].operand_row[1], 1500) << "the bias is read as a repeated row";

  const Literal x = RandomF32({3, 1500}, 21, -4, 4);
  const Literal bias = RandomF32({1500}, 22);
  const std::vector<Literal> fused = RunOrDie(f, {x, bias});
  absl::StatusOr<std::shared_ptr<const HostExecutable>> plain = Compile(f, false);
  ASSERT_TRUE(plain.ok());
  absl::StatusOr<std::vector<Literal>> unfused = RunExe(**plain, {x, bias});
  ASSERT_TRUE(unfused.ok());
  for (int r = 0; r < 2; ++r) {
    const auto a = fused[r].values<float>(), e = (*unfused)[r].values<float>();
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], e[i], 1e-6f * std::max(1.0f, std::abs(e[i]))) << r << " at " << i;
    }
  }
  // And against erf itself: GELU(h) = h/2 (1 + erf(h / sqrt 2)).
  const auto xv = x.values<float>(), bv = bias.values<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double h = static_cast<double>(xv[i]) + bv[i % 1500];
    const double want = 0.5 * h * (1 + std::erf(h / std::sqrt(2.0)));
    ASSERT_NEAR(fused[0].values<float>()[i], want, 2e-6 * std::max(1.0, std::abs(want))) << i;
  }
}

TEST(CpuExecutableTest, AFusedStepRunsItsOpsOneByOneWhenAResultOverwritesARowItReads) {
  // y = exp(x * row) + 1, with the caller's output buffer over the row: op
  // by op, the product reads the whole row before the sum overwrites it;
  // chunk by chunk, the second chunk would read a row the first had
  // overwritten, so the step must fall back to the unfused order.
  FunctionBuilder b("f");
  Value x = b.Parameter(F32({4, 1000}));
  Value row = b.Parameter(F32({1000}));
  Value y = b.Add(b.Exp(b.Mul(x, b.Broadcast(row, {4, 1000}, {1}))), b.Full(1.0f, {4, 1000}));
  const Function f = BuildOrDie(b, {y});
  const ExecutionPlan plan = PlanExecution(f);
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.steps[0].fused.size(), 3u);

  const Literal xs = RandomF32({4, 1000}, 31, -1, 1);
  const Literal rs = RandomF32({1000}, 32, -1, 1);
  std::vector<float> shared(4000);
  std::copy(rs.values<float>().begin(), rs.values<float>().end(), shared.begin());
  const std::vector<const void*> in = {xs.data(), shared.data()};
  const std::vector<void*> out = {shared.data()};
  ASSERT_TRUE(CompileOrDie(f)->Run(in, out, RunContext{}).ok());
  for (size_t i = 0; i < 4000; ++i) {
    const float want = std::exp(xs.values<float>()[i] * rs.values<float>()[i % 1000]) + 1;
    ASSERT_NEAR(shared[i], want, 1e-5f * want) << i;
  }
}

#if defined(__SSE__)
TEST(CpuExecutableTest, DenormalsAreFlushedDuringARunAndTheModeRestoredAfter) {
  FunctionBuilder b("f");
  Value x = b.Parameter(F32({2}));
  Value y = b.Parameter(F32({2}));
  const Function f = BuildOrDie(b, {b.Mul(x, y)});
  const unsigned before = _mm_getcsr();
  // 1e-30 * 1e-10 = 1e-40 is a denormal float: flushed to zero in a run.
  std::vector<Literal> out =
      RunOrDie(f, {Literal::F32({2}, {1e-30f, 2.0f}), Literal::F32({2}, {1e-10f, 3.0f})});
  EXPECT_EQ(out[0].values<float>()[0], 0.0f);
  EXPECT_EQ(out[0].values<float>()[1], 6.0f);
  EXPECT_EQ(_mm_getcsr(), before);
  // Outside a run this thread's arithmetic keeps denormals.
  volatile float a = 1e-30f, c = 1e-10f;
  EXPECT_GT(a * c, 0.0f);
}
#endif

TEST(CpuExecutableTest, ConcurrentRunsDoNotShareTemporaries) {
  auto exe = CompileOrDie(LongChain());
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);  // not vector<bool>: threads write neighbouring bits
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      bool all = true;
      for (int iter = 0; iter < 25; ++iter) {
        const Literal x = RandomF32({8, 6}, 100 + t * 1000 + iter);
        const Literal y = RandomF32({8, 6}, 200 + t * 1000 + iter, -1, 1);
        absl::StatusOr<std::vector<Literal>> out = RunExe(*exe, {x, y});
        if (!out.ok()) {
          all = false;
          continue;
        }
        const std::vector<float> v = LongChainReference(x, y);
        absl::Span<const float> got = (*out)[1].values<float>();
        for (size_t j = 0; j < v.size(); ++j) {
          if (std::fabs(got[j] - v[j]) > 1e-5f * (1 + std::fabs(v[j]))) all = false;
        }
      }
      ok[t] = all ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}


// A loop over (n: i32[], acc: f32[2]): while n > 0, n -= 1 and acc *= x,
// with x a further carry the body passes through.
Function PowerLoop() {
  const Shape v = F32({2});
  FunctionBuilder cb("n_positive");
  Value cn = cb.Parameter(I32({}));
  cb.Parameter(v);
  cb.Parameter(v);
  const Function cond = BuildOrDie(cb, {cb.Compare(cn, cb.ConstantI32(0), ir::Comparison::kGt)});
  FunctionBuilder bb("step");
  Value bn = bb.Parameter(I32({}));
  Value bacc = bb.Parameter(v);
  Value bx = bb.Parameter(v);
  const Function body =
      BuildOrDie(bb, {bb.Sub(bn, bb.ConstantI32(1)), bb.Mul(bacc, bx), bx});
  FunctionBuilder b("power");
  Value n = b.Parameter(I32({}));
  Value x = b.Parameter(v);
  std::vector<Value> out = b.While(cond, body, {n, b.Full(1.0f, {2}), x});
  return BuildOrDie(b, {out[1], out[0]});
}

TEST(CpuExecutableTest, AWhileLoopRunsAsManyIterationsAsItsDataSays) {
  const auto exe = CompileOrDie(PowerLoop());
  const Literal x = Literal::F32({2}, {2.0f, -3.0f});
  for (int32_t n : {0, 1, 5}) {
    ASSERT_OK_AND_ASSIGN(std::vector<Literal> out, RunExe(*exe, {Literal::I32({}, {n}), x}));
    EXPECT_THAT(out[0].values<float>(),
                ::testing::ElementsAre(std::pow(2.0f, n), std::pow(-3.0f, n)))
        << "n = " << n;
    EXPECT_EQ(out[1].values<int32_t>()[0], 0);
  }
  // The packed result, the carry's second buffer and the sub-functions'
  // temporaries count.
  EXPECT_GE(exe->temporary_bytes(), 2 * 3 * 64);
}

TEST(CpuExecutableTest, ALoopThatNeverEndsStopsWhenTheDeviceShutsDown) {
  FunctionBuilder cb("forever");
  Value cx = cb.Parameter(F32({}));
  const Function cond =
      BuildOrDie(cb, {cb.Compare(cx, cx, ir::Comparison::kEq)});  // true for any non-NaN
  FunctionBuilder bb("count");
  Value bx = bb.Parameter(F32({}));
  const Function body = BuildOrDie(bb, {bb.Add(bx, bb.ConstantF32(1))});
  FunctionBuilder b("spin");
  std::vector<Value> out = b.While(cond, body, {b.Parameter(F32({}))});
  const auto exe = CompileOrDie(BuildOrDie(b, {out[0]}));
  // What DeviceStream::Shutdown sets for the launch in flight.
  const std::atomic<bool> stop{true};
  RunContext context;
  context.stop = &stop;
  const Literal x = Literal::ScalarF32(0);
  Literal y(F32({}));
  const void* in[] = {x.data()};
  void* outs[] = {y.data()};
  const absl::Status s = exe->Run(in, outs, context);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("the device is shutting down"));
}

TEST(CpuExecutableTest, AConditionalRunsOnlyTheBranchItsSelectorPicks) {
  const Shape v = F32({3});
  auto branch = [&](const char* name, float scale) {
    FunctionBuilder fb(name);
    Value a = fb.Parameter(v);
    Value k = fb.Parameter(I32({}));
    return BuildOrDie(fb, {fb.Mul(a, fb.Full(scale, {3})), k});
  };
  FunctionBuilder b("switch");
  Value index = b.Parameter(I32({}));
  Value a = b.Parameter(v);
  std::vector<Value> out = b.Conditional(
      index, {branch("zero", 0.0f), branch("one", 1.0f), branch("ten", 10.0f)},
      {a, b.ConstantI32(4)});
  const auto exe = CompileOrDie(BuildOrDie(b, {out[0], out[1]}));
  const Literal x = Literal::F32({3}, {1, 2, 3});
  const std::vector<std::pair<int32_t, float>> cases = {{-7, 0}, {0, 0}, {1, 1}, {2, 10}, {99, 10}};
  for (const auto& [i, scale] : cases) {
    ASSERT_OK_AND_ASSIGN(std::vector<Literal> res, RunExe(*exe, {Literal::I32({}, {i}), x}));
    EXPECT_THAT(res[0].values<float>(), ::testing::ElementsAre(scale, 2 * scale, 3 * scale))
        << "index " << i;
    EXPECT_EQ(res[1].values<int32_t>()[0], 4);
  }

  // A pred selector: true runs branch 0. Here branch 1 would divide by zero
  // into an infinity, which must not appear.
  FunctionBuilder pb("guarded");
  Value p = pb.Parameter(Shape(DType::kPred, {}));
  Value d = pb.Parameter(F32({}));
  FunctionBuilder tb("keep");
  Value td = tb.Parameter(F32({}));
  FunctionBuilder eb("invert");
  Value ed = eb.Parameter(F32({}));
  std::vector<Value> r = pb.Conditional(
      p, {BuildOrDie(tb, {td}), BuildOrDie(eb, {eb.Div(eb.ConstantF32(1), ed)})}, {d});
  const auto guarded = CompileOrDie(BuildOrDie(pb, {r[0]}));
  Literal yes(Shape(DType::kPred, {}));
  yes.mutable_values<uint8_t>()[0] = 2;  // any non-zero byte is true (bytes from outside)
  ASSERT_OK_AND_ASSIGN(std::vector<Literal> res, RunExe(*guarded, {yes, Literal::ScalarF32(0)}));
  EXPECT_EQ(res[0].values<float>()[0], 0.0f);
}

TEST(CpuExecutableTest, LoopsNestInsideConditionalsAndLoops) {
  // if (flag) { power loop } else { 0 }, itself inside a loop run 3 times
  // that sums the results.
  const Function power = PowerLoop();
  const Shape v = F32({2});
  FunctionBuilder then_b("then");
  Value tn = then_b.Parameter(I32({}));
  Value tx = then_b.Parameter(v);
  std::vector<Value> pw = then_b.Call(power, {tn, tx});
  const Function then_f = BuildOrDie(then_b, {pw[0]});
  FunctionBuilder else_b("else");
  else_b.Parameter(I32({}));
  else_b.Parameter(v);
  const Function else_f = BuildOrDie(else_b, {else_b.Full(0.0f, {2})});

  FunctionBuilder cb("three");
  Value ci = cb.Parameter(I32({}));
  cb.Parameter(v);
  cb.Parameter(v);
  const Function cond = BuildOrDie(cb, {cb.Compare(ci, cb.ConstantI32(3), ir::Comparison::kLt)});
  FunctionBuilder bb("accumulate");
  Value bi = bb.Parameter(I32({}));
  Value bsum = bb.Parameter(v);
  Value bx = bb.Parameter(v);
  // Iteration i takes x^(i+1) when i is even, 0 when odd.
  Value even = bb.Compare(bb.Sub(bi, bb.Mul(bb.Convert(bb.Floor(bb.Div(
                                                 bb.Convert(bi, DType::kF32), bb.ConstantF32(2))),
                                             DType::kI32),
                                         bb.ConstantI32(2))),
                          bb.ConstantI32(0), ir::Comparison::kEq);
  std::vector<Value> term =
      bb.Conditional(even, {then_f, else_f}, {bb.Add(bi, bb.ConstantI32(1)), bx});
  const Function body = BuildOrDie(bb, {bb.Add(bi, bb.ConstantI32(1)), bb.Add(bsum, term[0]), bx});

  FunctionBuilder b("outer");
  Value x = b.Parameter(v);
  std::vector<Value> out = b.While(cond, body, {b.ConstantI32(0), b.Full(0.0f, {2}), x});
  std::vector<Literal> res = RunOrDie(BuildOrDie(b, {out[1]}), {Literal::F32({2}, {2, 3})});
  // x^1 + x^3.
  EXPECT_THAT(res[0].values<float>(), ::testing::ElementsAre(2.0f + 8.0f, 3.0f + 27.0f));
}

}  // namespace
}  // namespace causeway::backend::cpu
