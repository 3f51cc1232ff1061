// Round trips of every op through protobuf, and mutation fuzzing of the
// deserialiser: thousands of corrupted inputs (byte flips, truncations,
// structured field mutations) must each give a verified function or a clean
// INVALID_ARGUMENT — never a crash (ASan/UBSan/TSan builds run this too).
#include "causeway/ir/serialization.h"

#include <random>
#include <string>
#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/ir.pb.h"
#include "causeway/ir/verifier.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::ir {
namespace {

// A function that uses every op kind.
Function KitchenSink() {
  FunctionBuilder b("kitchen_sink");
  const Shape s(DType::kF32, {4, 6});
  Value x = b.Parameter(s);
  Value y = b.Parameter(s);
  Value idx = b.Parameter(Shape(DType::kI32, {3}));
  Value seed = b.ConstantI32(7);
  Value v = b.Add(b.Sub(x, y), b.Mul(b.Div(x, y), b.Max(x, b.Min(x, y))));
  v = b.Pow(b.Abs(v), b.Exp(b.Neg(y)));
  v = b.Add(b.Log(b.Add(b.Sqrt(b.Abs(v)), b.Full(1, {4, 6}))), b.Tanh(b.Logistic(v)));
  v = b.Add(v, b.Add(b.Rsqrt(b.Add(b.Abs(x), b.Full(1, {4, 6}))), b.Sign(b.Floor(y))));
  v = b.Select(b.Compare(x, y, Comparison::kLt), v, b.Convert(b.Convert(y, DType::kI32),
                                                                     DType::kF32));
  v = b.Add(v, b.Iota(s, 1));
  Value t = b.Reshape(b.Transpose(v, {1, 0}), {4, 6});
  Value sl = b.Slice(t, {1, 0}, {3, 6});
  Value cat = b.Concatenate({sl, sl}, 0);
  Value pad = b.Pad(b.Slice(cat, {0, 0}, {4, 4}), b.ConstantF32(0.5f), {0, 1}, {0, 1});
  Value g = b.Gather(pad, idx, 0);
  Value sc = b.ScatterAdd(pad, idx, g, 0);
  Value red = b.Add(b.ReduceSum(sc, {0}), b.Add(b.ReduceMax(sc, {0}), b.ReduceMin(sc, {0})));
  Value dot = b.DotGeneral(b.Reshape(sc, {2, 2, 6}), b.Reshape(sc, {2, 2, 6}), {0}, {0}, {2}, {2});
  Value mm = b.Matmul(sc, b.Transpose(sc, {1, 0}));
  Value rng = b.Add(b.RngUniform(seed, {4, 6}), b.RngNormal(seed, {4, 6}));
  Value ar = b.AllReduce(b.Delay(red, 1), {"data"}, ReduceKind::kMax);
  Value ag = b.AllGather(sc, {"data"}, 0, 2);
  Value rs = b.ReduceScatter(sc, {"data", "model"}, 1, 2);
  Value a2a = b.AllToAll(sc, {"model"}, 0, 1, 2);
  Value cp = b.CollectivePermute(sc, {"data"}, {{0, 1}, {1, 0}});
  Value eps = b.ConstantF32(1e-5f);
  Value fused = b.Add(b.GeluGrad(b.Gelu(sc), sc), b.SoftmaxGrad(b.Softmax(sc), sc));
  fused = b.Add(fused, b.NormalizeGrad(sc, eps, b.Normalize(sc, eps)));
  // Control flow: a loop doubling x three times, then a conditional.
  FunctionBuilder cb("loop_cond");
  cb.Parameter(s);
  Value cn = cb.Parameter(Shape(DType::kI32, {}));
  const Function cond = *cb.Build({cb.Compare(cn, cb.ConstantI32(3), Comparison::kLt)});
  FunctionBuilder bb("loop_body");
  Value bx = bb.Parameter(s);
  Value bn = bb.Parameter(Shape(DType::kI32, {}));
  const Function body = *bb.Build({bb.Add(bx, bx), bb.Add(bn, bb.ConstantI32(1))});
  std::vector<Value> loop = b.While(cond, body, {x, b.ConstantI32(0)});
  FunctionBuilder tb("then");
  Value tx = tb.Parameter(s);
  FunctionBuilder eb("else");
  Value ex = eb.Parameter(s);
  std::vector<Value> branch =
      b.Conditional(b.Compare(loop[1], b.ConstantI32(3), Comparison::kEq),
                    {*tb.Build({tb.Neg(tx)}), *eb.Build({eb.Exp(ex)})}, {loop[0]});
  // Convolutions (their window attributes round-trip) and a strided slice.
  const Value img = b.Reshape(sc, {1, 2, 3, 4});
  const Value ker = b.Slice(b.Reshape(sc, {2, 2, 2, 3}), {0, 0, 0, 0}, {2, 2, 2, 3}, {1, 1, 2, 2});
  const ConvSpec spec{{1, 2}, {2, 1}, {1, 0}, {1, 1}, 2};
  const Value conv = b.Convolution(img, b.Slice(ker, {0, 0, 0, 0}, {2, 1, 1, 2}), spec);
  const Value dx = b.ConvInputGrad(conv, b.Slice(ker, {0, 0, 0, 0}, {2, 1, 1, 2}), {1, 2, 3, 4}, spec);
  const Value dw = b.ConvKernelGrad(img, conv, {2, 1, 1, 2}, spec);
  const Value sorted = b.ArgSort(b.Add(b.Sin(sc), b.Add(b.Cos(sc), b.Add(b.Atan(sc), b.Erf(sc)))), 1, true);
  const Value pooled = b.Pool(img, ReduceKind::kMax, {2, 2}, ConvSpec{{1, 2}, {1, 1}, {1, 0}, {0, 1}, 1});
  absl::StatusOr<Function> f =
      b.Build({ar, dot, mm, rng, ag, rs, a2a, cp, fused, branch[0], dx, dw, sorted, pooled});
  CW_CHECK_OK(f.status());
  return *f;
}

TEST(SerializationTest, EveryOpRoundTrips) {
  const Function f = KitchenSink();
  std::vector<bool> seen(kNumOpKinds, false);
  for (const Instruction& inst : f.instructions()) seen[static_cast<int>(inst.op)] = true;
  for (int op = 0; op < kNumOpKinds; ++op) {
    EXPECT_TRUE(seen[op]) << "kitchen sink lacks " << OpName(static_cast<OpKind>(op));
  }
  const std::string bytes = Serialize(f);
  ASSERT_OK_AND_ASSIGN(Function back, Deserialize(bytes));
  EXPECT_EQ(back.ToString(), f.ToString());
  EXPECT_EQ(Serialize(back), bytes);
}

TEST(SerializationTest, RoundTripComputesTheSameResults) {
  FunctionBuilder b("small");
  Value x = b.Parameter(Shape(DType::kF32, {2, 3}));
  Value c = b.Constant(Literal::F32({3}, {1, -2, 3}));
  Value y = b.Mul(x, b.Broadcast(c, {2, 3}, {1}));
  ASSERT_OK_AND_ASSIGN(Function f, b.Build({b.ReduceSum(b.Exp(y), {1})}));
  ASSERT_OK_AND_ASSIGN(Function back, Deserialize(Serialize(f)));
  ASSERT_OK_AND_ASSIGN(auto exe, backend::cpu::Compile(back));
  const Literal in = Literal::F32({2, 3}, {0.1f, 0.2f, 0.3f, -0.1f, 0.5f, 0.0f});
  Literal out(Shape(DType::kF32, {2}));
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  ASSERT_OK(exe->Run(ins, outs, {}));
  EXPECT_NEAR(out.values<float>()[0], std::exp(0.1f) + std::exp(-0.4f) + std::exp(0.9f), 1e-5);
}

TEST(SerializationTest, GarbageAndEmptyInputAreInvalidArgument) {
  EXPECT_EQ(Deserialize("").status().code(), absl::StatusCode::kInvalidArgument);  // no outputs
  EXPECT_EQ(Deserialize("\xff\xff\xff\xff").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SerializationTest, AbsurdLiteralSizesAreRejectedBeforeAllocating) {
  proto::FunctionProto p;
  p.set_name("huge");
  proto::InstructionProto* c = p.add_instructions();
  c->set_op(static_cast<int>(OpKind::kConstant));
  c->mutable_literal()->mutable_shape()->add_dims(int64_t{1} << 40);
  c->mutable_shape()->add_dims(int64_t{1} << 40);
  p.add_outputs(0);
  absl::Status s = Deserialize(p.SerializeAsString()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Sane shape, too few bytes.
  c->mutable_literal()->mutable_shape()->set_dims(0, 1000);
  c->mutable_shape()->set_dims(0, 1000);
  c->mutable_literal()->set_data(std::string(12, '\0'));
  s = Deserialize(p.SerializeAsString()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("bytes"));
}

// Either a verified function (which also compiles) or INVALID_ARGUMENT.
void ExpectCleanOutcome(const std::string& bytes, int* accepted) {
  absl::StatusOr<Function> f = Deserialize(bytes);
  if (f.ok()) {
    ++*accepted;
    EXPECT_OK(Verify(*f));
    EXPECT_OK(backend::cpu::Compile(*f).status());
  } else {
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  }
}

TEST(SerializationTest, RandomByteMutationsNeverCrash) {
  const std::string good = Serialize(KitchenSink());
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    const int edits = 1 + trial % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 4) {
        case 0:
          bytes[pos] = static_cast<char>(rng());
          break;
        case 1:
          bytes[pos] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 2:
          bytes.resize(pos);
          break;
        default:
          bytes.insert(pos, 1, static_cast<char>(rng()));
          break;
      }
      if (bytes.empty()) break;
    }
    ExpectCleanOutcome(bytes, &accepted);
  }
  EXPECT_LT(accepted, 3000);  // the mutations did reach the verifier
}

TEST(SerializationTest, StructuredFieldMutationsAreRejectedCleanly) {
  const Function f = KitchenSink();
  proto::FunctionProto good;
  ASSERT_TRUE(good.ParseFromString(Serialize(f)));
  std::mt19937 rng(99);
  const std::vector<int64_t> hostile = {-1,
                                        0,
                                        1,
                                        2,
                                        7,
                                        1000,
                                        int64_t{1} << 31,
                                        int64_t{1} << 40,
                                        std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int64_t>::min()};
  auto pick = [&] { return hostile[rng() % hostile.size()]; };
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    proto::FunctionProto p = good;
    proto::InstructionProto* inst = p.mutable_instructions(rng() % p.instructions_size());
    switch (rng() % 12) {
      case 0:
        inst->set_op(static_cast<int32_t>(pick()));
        break;
      case 1:
        if (inst->operands_size() > 0) {
          inst->set_operands(rng() % inst->operands_size(), static_cast<int32_t>(pick()));
        } else {
          inst->add_operands(static_cast<int32_t>(pick()));
        }
        break;
      case 2:
        inst->add_operands(static_cast<int32_t>(rng() % p.instructions_size()));
        break;
      case 3:
        inst->mutable_shape()->add_dims(pick());
        break;
      case 4:
        if (inst->shape().dims_size() > 0) inst->mutable_shape()->set_dims(0, pick());
        break;
      case 5:
        inst->mutable_shape()->set_dtype(static_cast<int32_t>(pick()));
        break;
      case 6:
        inst->add_dims(pick());
        break;
      case 7:
        inst->set_dimension(pick());
        inst->set_concat_dimension(pick());
        break;
      case 8:
        inst->add_starts(pick());
        inst->add_limits(pick());
        inst->add_pad_low(pick());
        inst->add_pad_high(pick());
        break;
      case 9:
        inst->add_lhs_contracting(pick());
        inst->add_rhs_batch(pick());
        break;
      case 10: {
        proto::PairProto* pair = inst->add_source_target_pairs();
        pair->set_source(pick());
        pair->set_target(pick());
        inst->set_reduce_kind(static_cast<int32_t>(pick()));
        inst->set_comparison(static_cast<int32_t>(pick()));
        break;
      }
      default:
        p.set_outputs(0, static_cast<int32_t>(pick()));
        p.add_parameters(static_cast<int32_t>(pick()));
        break;
    }
    ExpectCleanOutcome(p.SerializeAsString(), &accepted);
  }
  EXPECT_LT(accepted, 1500);
}

}  // namespace
}  // namespace causeway::ir
