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


// cond: (x f32[2]) -> pred[]; body: x -> x + x.
struct Loop {
  Function cond;
  Function body;
};
Loop DoublingLoop() {
  FunctionBuilder cb("small");
  Value cx = cb.Parameter(F32({2}));
  Function cond = *cb.Build({cb.Compare(cb.ReduceSum(cx, {0}), cb.ConstantF32(100),
                                        Comparison::kLt)});
  FunctionBuilder bb("twice");
  Value bx = bb.Parameter(F32({2}));
  Function body = *bb.Build({bb.Add(bx, bx)});
  return {cond, body};
}

TEST(VerifierTest, ControlFlowSignaturesAreChecked) {
  const Loop loop = DoublingLoop();
  {
    FunctionBuilder b("wrong_carry");
    Value x = b.Parameter(F32({3}));
    b.While(loop.cond, loop.body, {x});
    EXPECT_THAT(b.status().message(), HasSubstr("cond small takes (f32[2]), the carry is (f32[3])"));
  }
  {
    FunctionBuilder b("body_changes_shape");
    FunctionBuilder bb("grow");
    Value bx = bb.Parameter(F32({2}));
    const Function grow = *bb.Build({bb.Concatenate({bx, bx}, 0)});
    b.While(loop.cond, grow, {b.Parameter(F32({2}))});
    EXPECT_THAT(b.status().message(), HasSubstr("both must be the carry (f32[2])"));
  }
  {
    FunctionBuilder b("branches_differ");
    Value p = b.Compare(b.ConstantF32(1), b.ConstantF32(2), Comparison::kLt);
    FunctionBuilder sb("sum");
    Value sx = sb.Parameter(F32({2}));
    const Function sum = *sb.Build({sb.ReduceSum(sx, {0})});
    b.Conditional(p, {loop.body, sum}, {b.Parameter(F32({2}))});
    EXPECT_THAT(b.status().message(), HasSubstr("returns (f32[]), branch 0 returns (f32[2])"));
  }
  {
    FunctionBuilder b("three_branches_on_pred");
    Value p = b.Compare(b.ConstantF32(1), b.ConstantF32(2), Comparison::kLt);
    b.Conditional(p, {loop.body, loop.body, loop.body}, {b.Parameter(F32({2}))});
    EXPECT_THAT(b.status().message(), HasSubstr("a pred[] selector needs two branches"));
  }
  {
    FunctionBuilder b("index_out_of_range");
    std::vector<Value> r = b.While(loop.cond, loop.body, {b.Parameter(F32({2}))});
    Instruction get;
    get.op = OpKind::kGetResult;
    get.operands = {r[0].id - 1};
    get.result_index = 1;
    b.AddInstruction(get);
    EXPECT_THAT(b.status().message(), HasSubstr("result_index 1 out of range [0, 1)"));
  }
}

TEST(VerifierTest, PackedResultsAreBoundedLikeAnyValue) {
  // Two f32[2^33] results pack into 2^36 bytes, past what one value may
  // hold; the sizes are summed without wrapping.
  const Shape big = F32({int64_t{1} << 33});
  FunctionBuilder ib("pass");
  Value a = ib.Parameter(big);
  const Function pass = *ib.Build({a, a});
  FunctionBuilder b("huge");
  Value x = b.Parameter(big);
  b.Conditional(b.ConstantI32(0), {pass}, {x});
  EXPECT_THAT(b.status().message(), HasSubstr("results of more than"));
  EXPECT_EQ(ResultOffsets({big, big, big}).back(), kMaxElements + 1);
}

TEST(VerifierTest, MultiResultValuesAreReadOnlyThroughGetResult) {
  const Loop loop = DoublingLoop();
  FunctionBuilder b("loop");
  Value x = b.Parameter(F32({2}));
  std::vector<Value> r = b.While(loop.cond, loop.body, {x});
  Function f = *b.Build({r[0]});
  const int multi = f.instructions()[f.outputs()[0]].operands[0];
  ASSERT_EQ(f.instructions()[multi].op, OpKind::kWhile);

  // The packed value as a result of the function.
  Function as_output(f.name(), f.instructions(), f.parameters(), {multi});
  EXPECT_THAT(Verify(as_output).message(), HasSubstr("return its results through get_result"));

  // The packed value read by another op.
  std::vector<Instruction> insts = f.instructions();
  Instruction neg;
  neg.op = OpKind::kNeg;
  neg.shape = insts[multi].shape;
  neg.operands = {multi};
  insts.push_back(neg);
  Function misread(f.name(), insts, f.parameters(), {static_cast<int>(insts.size()) - 1});
  EXPECT_THAT(Verify(misread).message(), HasSubstr("whose results only get_result may read"));

  // get_result of a single-result op.
  insts = f.instructions();
  insts[f.outputs()[0]].operands = {0};
  Function wrong_source(f.name(), insts, f.parameters(), f.outputs());
  EXPECT_THAT(Verify(wrong_source).message(), HasSubstr("which has one result"));

  // A missing sub-function.
  insts = f.instructions();
  insts[multi].subfunctions[1] = nullptr;
  Function missing(f.name(), insts, f.parameters(), f.outputs());
  EXPECT_THAT(Verify(missing).message(), HasSubstr("sub-function 1 is missing"));
}

TEST(VerifierTest, CollectivesInsideControlFlowAndDeepNestingAreRejected) {
  const Loop loop = DoublingLoop();
  FunctionBuilder rb("reduce");
  Value rx = rb.Parameter(F32({2}));
  const Function reduce = *rb.Build({rb.AllReduce(rx, {"data"})});
  FunctionBuilder b("collective_in_loop");
  std::vector<Value> r = b.While(loop.cond, reduce, {b.Parameter(F32({2}))});
  EXPECT_THAT(b.Build({r[0]}).status().message(),
              HasSubstr("collectives inside control flow are not supported"));

  // Each level wraps the previous one in a one-branch conditional.
  Function level = loop.body;
  for (int depth = 1; depth <= kMaxControlFlowDepth + 1; ++depth) {
    FunctionBuilder w(absl::StrCat("level", depth));
    Value wx = w.Parameter(F32({2}));
    std::vector<Value> out = w.Conditional(w.ConstantI32(0), {level}, {wx});
    absl::StatusOr<Function> next = w.Build({out[0]});
    if (depth <= kMaxControlFlowDepth) {
      ASSERT_TRUE(next.ok()) << depth << ": " << next.status();
      level = *next;
    } else {
      EXPECT_THAT(next.status().message(), HasSubstr("control flow nests deeper than 8"));
    }
  }
}

}  // namespace
}  // namespace causeway::ir
