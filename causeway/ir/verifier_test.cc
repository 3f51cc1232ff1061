#include "causeway/ir/verifier.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "causeway/ir/builder.h"

namespace causeway::ir {
namespace {

using ::testing::HasSubstr;

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }

Instruction Param(int index, Shape shape) {
  Instruction inst;
  inst.op = OpKind::kParameter;
  inst.parameter_index = index;
  inst.shape = std::move(shape);
  return inst;
}

Instruction Op(OpKind op, Shape shape, std::vector<int> operands) {
  Instruction inst;
  inst.op = op;
  inst.shape = std::move(shape);
  inst.operands = std::move(operands);
  return inst;
}

// A valid function exercising every op: returns its pieces so tests can
// break one of them.
struct Parts {
  std::vector<Instruction> insts;
  std::vector<int> params;
  std::vector<int> outputs;
  Function Make() const { return Function("victim", insts, params, outputs); }
};

Parts ValidParts() {
  FunctionBuilder b("victim");
  Value x = b.Parameter(F32({2, 3}));
  Value y = b.Parameter(F32({2, 3}));
  Value c = b.Constant(Literal::F32({3}, {1, 2, 3}));
  Value bc = b.Broadcast(c, {2, 3}, {1});
  Value add = b.Add(x, y);  // instruction 4
  Value sub = b.Sub(add, bc);
  Value mul = b.Mul(sub, x);
  Value div = b.Div(mul, y);
  Value neg = b.Neg(b.Exp(x));
  Value s = b.Max(div, neg);
  Value t = b.Transpose(s, {1, 0});
  Value r = b.Reshape(t, {6});
  Value r32 = b.Reshape(r, {3, 2});
  Value red = b.ReduceSum(r32, {1});
  Value mm = b.Matmul(t, s);
  Value cv = b.Convert(mm, DType::kI32);
  Value d = b.Delay(red, 5);
  Value ar = b.AllReduce(cv, {"data"});
  absl::StatusOr<Function> f = b.Build({d, ar, x});
  CW_CHECK_OK(f.status());
  return {f->instructions(), f->parameters(), f->outputs()};
}

void ExpectInvalid(const Function& f, const std::string& fragment) {
  absl::Status s = Verify(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(fragment)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("function victim")) << s;
}

TEST(VerifierTest, AcceptsAValidFunction) {
  const Parts p = ValidParts();
  EXPECT_TRUE(Verify(p.Make()).ok());
  ASSERT_EQ(p.insts[3].op, OpKind::kBroadcast);
  ASSERT_EQ(p.insts[4].op, OpKind::kAdd);
  ASSERT_EQ(p.insts[5].op, OpKind::kSub);
}

TEST(VerifierTest, RejectsOperandsThatAreNotEarlierInstructions) {
  Parts p = ValidParts();
  p.insts[3].operands[0] = 3;  // itself
  ExpectInvalid(p.Make(), "instruction 3 (broadcast): operand 0 refers to instruction 3");
  p = ValidParts();
  p.insts[5].operands[1] = 100;
  ExpectInvalid(p.Make(), "instruction 5");
  p = ValidParts();
  p.insts[5].operands[0] = -7;
  ExpectInvalid(p.Make(), "-7");
}

TEST(VerifierTest, RejectsWrongOperandCounts) {
  Parts p = ValidParts();
  p.insts[5].operands.push_back(0);
  ExpectInvalid(p.Make(), "expects 2 operands, got 3");
  p = ValidParts();
  p.insts[5].operands.pop_back();
  ExpectInvalid(p.Make(), "expects 2 operands, got 1");
  p = ValidParts();
  p.insts[0].operands.push_back(0);
  ExpectInvalid(p.Make(), "instruction 0 (parameter)");
}

TEST(VerifierTest, RejectsDeclaredShapesThatDisagreeWithInference) {
  Parts p = ValidParts();
  p.insts[5].shape = F32({3, 2});
  ExpectInvalid(p.Make(), "declared shape f32[3,2] does not match inferred f32[2,3]");
  p = ValidParts();
  p.insts[5].shape.dtype = DType::kI32;
  ExpectInvalid(p.Make(), "instruction 5 (sub)");
}

TEST(VerifierTest, RejectsBadParameterNumbering) {
  {
    Parts p = ValidParts();
    p.insts[1].parameter_index = 0;  // two parameter 0s
    ExpectInvalid(p.Make(), "parameter_index");
  }
  {
    Parts p = ValidParts();
    p.params = {0, 0};
    ExpectInvalid(p.Make(), "instruction 1 (parameter)");
  }
  {
    Parts p = ValidParts();
    p.params = {0};  // parameter 1 not listed
    ExpectInvalid(p.Make(), "parameter_index 1");
  }
  {
    Parts p = ValidParts();
    p.params.push_back(2);  // a constant listed as a parameter
    ExpectInvalid(p.Make(), "parameter 2 names instruction 2");
  }
  {
    Parts p = ValidParts();
    p.params.push_back(999);
    ExpectInvalid(p.Make(), "999");
  }
  {
    Parts p = ValidParts();
    p.insts[0].parameter_index = -1;
    ExpectInvalid(p.Make(), "parameter_index -1");
  }
}

TEST(VerifierTest, RejectsMissingOrOutOfRangeOutputs) {
  Parts p = ValidParts();
  p.outputs.clear();
  ExpectInvalid(p.Make(), "no outputs");
  p = ValidParts();
  p.outputs.push_back(static_cast<int>(p.insts.size()));
  ExpectInvalid(p.Make(), "output 3");
  p = ValidParts();
  p.outputs[0] = -1;
  ExpectInvalid(p.Make(), "output 0");
}

TEST(VerifierTest, RejectsNegativeAndHugeDims) {
  Parts p = ValidParts();
  p.insts[0].shape = F32({2, -3});
  ExpectInvalid(p.Make(), "negative");
  p = ValidParts();
  p.insts[0].shape = F32({int64_t{1} << 62, int64_t{1} << 62});
  ExpectInvalid(p.Make(), "elements");
}

TEST(VerifierTest, RejectsConstantsWhoseLiteralDoesNotMatch) {
  Parts p = ValidParts();
  p.insts[2].literal = Literal();  // f32[] with no bytes
  p.insts[2].shape = F32({});
  ExpectInvalid(p.Make(), "literal");
  p = ValidParts();
  p.insts[2].shape = F32({4});
  ExpectInvalid(p.Make(), "instruction 2 (constant): declared shape");
}

TEST(VerifierTest, RejectsUnknownOpsDtypesAndReduceKinds) {
  Parts p = ValidParts();
  p.insts[5].op = static_cast<OpKind>(1000);
  ExpectInvalid(p.Make(), "unknown_op");
  p = ValidParts();
  p.insts[0].shape.dtype = static_cast<DType>(9);
  ExpectInvalid(p.Make(), "dtype");
  p = ValidParts();
  p.insts.back().reduce_kind = static_cast<ReduceKind>(5);
  ExpectInvalid(p.Make(), "reduce kind");
}

TEST(VerifierTest, RejectsBadAttributes) {
  const Parts valid = ValidParts();
  auto find = [&](OpKind op) {
    for (size_t i = 0; i < valid.insts.size(); ++i) {
      if (valid.insts[i].op == op) return static_cast<int>(i);
    }
    return -1;
  };
  std::vector<std::pair<OpKind, std::function<void(Instruction&)>>> cases = {
      {OpKind::kBroadcast, [](Instruction& i) { i.dims = {5}; }},
      {OpKind::kBroadcast, [](Instruction& i) { i.dims = {}; }},
      {OpKind::kTranspose, [](Instruction& i) { i.dims = {1, 1}; }},
      {OpKind::kTranspose, [](Instruction& i) { i.dims = {int64_t{1} << 40, 0}; }},
      {OpKind::kReduceSum, [](Instruction& i) { i.dims = {1, 1}; }},
      {OpKind::kReduceSum, [](Instruction& i) { i.dims = {-5}; }},
      {OpKind::kReshape, [](Instruction& i) { i.shape.dims = {7}; }},
      {OpKind::kDelay, [](Instruction& i) { i.delay_us = -1; }},
      {OpKind::kDelay, [](Instruction& i) { i.delay_us = INT64_MAX; }},
      {OpKind::kAllReduce, [](Instruction& i) { i.axes = {}; }},
      {OpKind::kAllReduce, [](Instruction& i) { i.axes = {"a", "a"}; }},
      {OpKind::kAllReduce, [](Instruction& i) { i.axes = {""}; }},
      {OpKind::kConvert, [](Instruction& i) { i.shape.dims = {1}; }},
  };
  for (auto& [op, mutate] : cases) {
    Parts p = valid;
    const int i = find(op);
    ASSERT_GE(i, 0);
    mutate(p.insts[i]);
    ExpectInvalid(p.Make(), absl::StrCat("instruction ", i, " (", OpName(op), ")"));
  }
}

TEST(VerifierTest, HandBuiltFunctionsAreCheckedFromScratch) {
  const Function ok("victim", {Param(0, F32({2})), Op(OpKind::kNeg, F32({2}), {0})}, {0},
                    {1});
  EXPECT_TRUE(Verify(ok).ok());
  ExpectInvalid(Function("victim", {Op(OpKind::kNeg, F32({2}), {1}), Param(0, F32({2}))},
                         {1}, {0}),
                "instruction 0 (neg): operand 0 refers to instruction 1");
  ExpectInvalid(Function("victim", {Param(0, F32({2})), Op(OpKind::kAdd, F32({2}), {0})},
                         {0}, {1}),
                "instruction 1 (add): expects 2 operands");
  ExpectInvalid(Function("victim", {Param(0, F32({2})), Param(0, F32({2}))}, {0, 1}, {1}),
                "instruction 1 (parameter)");
  ExpectInvalid(Function("victim", {Param(1, F32({2}))}, {0}, {0}), "parameter_index 1");
}

TEST(VerifierTest, EmptyFunctionIsRejected) {
  ExpectInvalid(Function("victim", {}, {}, {}), "no outputs");
  ExpectInvalid(Function("victim", {}, {}, {0}), "output 0");
}

// Deterministically damages a valid function in many ways; Verify must
// return (OK or INVALID_ARGUMENT) without crashing, and any function it
// accepts must still satisfy its basic invariants.
TEST(VerifierTest, SurvivesManyDeterministicMutations) {
  const Parts valid = ValidParts();
  const std::vector<int64_t> interesting = {-1, 0,  1,  2,     3,         6,
                                            7,  -100, 100, INT32_MAX, INT64_MIN,
                                            int64_t{1} << 34};
  uint64_t state = 0x9E3779B97F4A7C15u;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int accepted = 0;
  for (int round = 0; round < 5000; ++round) {
    Parts p = valid;
    const int mutations = 1 + static_cast<int>(next() % 3);
    for (int m = 0; m < mutations; ++m) {
      Instruction& inst = p.insts[next() % p.insts.size()];
      const int64_t v = interesting[next() % interesting.size()];
      switch (next() % 10) {
        case 0:
          if (!inst.operands.empty()) {
            inst.operands[next() % inst.operands.size()] = static_cast<int>(v);
          }
          break;
        case 1:
          inst.operands.push_back(static_cast<int>(next() % p.insts.size()));
          break;
        case 2:
          if (!inst.shape.dims.empty()) {
            inst.shape.dims[next() % inst.shape.dims.size()] = v;
          } else {
            inst.shape.dims.push_back(v);
          }
          break;
        case 3:
          inst.parameter_index = static_cast<int>(v);
          break;
        case 4:
          if (!inst.dims.empty()) {
            inst.dims[next() % inst.dims.size()] = v;
          } else {
            inst.dims.push_back(v);
          }
          break;
        case 5:
          if (!p.params.empty()) p.params[next() % p.params.size()] = static_cast<int>(v);
          break;
        case 6:
          p.outputs[next() % p.outputs.size()] = static_cast<int>(v);
          break;
        case 7:
          inst.op = static_cast<OpKind>(next() % 19);
          break;
        case 8:
          inst.shape.dtype = static_cast<DType>(next() % 4);
          break;
        case 9:
          inst.delay_us = v;
          if (!inst.dims.empty()) inst.dims.pop_back();
          break;
      }
    }
    const Function f = p.Make();
    const absl::Status s = Verify(f);
    if (s.ok()) {
      ++accepted;
      ASSERT_FALSE(f.outputs().empty());
      for (int i = 0; i < static_cast<int>(f.instructions().size()); ++i) {
        ASSERT_TRUE(ValidateShape(f.instructions()[i].shape).ok());
        for (int o : f.instructions()[i].operands) {
          ASSERT_GE(o, 0);
          ASSERT_LT(o, i);
        }
      }
    } else {
      ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      ASSERT_THAT(std::string(s.message()), HasSubstr("function victim")) << s;
    }
  }
  // Some mutations are harmless (e.g. an unused attribute); most are not.
  EXPECT_LT(accepted, 5000);
}

}  // namespace
}  // namespace causeway::ir
