#include "causeway/ir/builder.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "causeway/ir/verifier.h"

namespace causeway::ir {
namespace {

using ::testing::HasSubstr;

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }
Shape I32(std::vector<int64_t> dims) { return Shape(DType::kI32, std::move(dims)); }
Shape Pred(std::vector<int64_t> dims) { return Shape(DType::kPred, std::move(dims)); }

// Expects the builder to have failed with INVALID_ARGUMENT mentioning each of
// `fragments`, and Build() to return the same error.
void ExpectBuildError(FunctionBuilder& b, std::vector<std::string> fragments) {
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
  for (const std::string& f : fragments) {
    EXPECT_THAT(std::string(b.status().message()), HasSubstr(f));
  }
  absl::StatusOr<Function> f = b.Build({});
  EXPECT_EQ(f.status(), b.status());
}

TEST(ShapeTest, CountsElementsAndPrints) {
  EXPECT_EQ(F32({2, 3}).num_elements(), 6);
  EXPECT_EQ(F32({}).num_elements(), 1);
  EXPECT_EQ(F32({4, 0}).num_elements(), 0);
  EXPECT_EQ(F32({2, 3}).byte_size(), 24);
  EXPECT_EQ(Pred({5}).byte_size(), 5);
  EXPECT_EQ(F32({2, 3}).ToString(), "f32[2,3]");
  EXPECT_EQ(I32({}).ToString(), "i32[]");
  EXPECT_EQ(RowMajorStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(RowMajorStrides({}).empty());
}

TEST(ShapeTest, ValidateRejectsNegativeAndHugeShapes) {
  EXPECT_TRUE(ValidateShape(F32({2, 3})).ok());
  EXPECT_TRUE(ValidateShape(F32({kMaxElements})).ok());
  EXPECT_EQ(ValidateShape(F32({-1})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateShape(F32({kMaxElements + 1})).code(),
            absl::StatusCode::kInvalidArgument);
  // Overflows int64 if multiplied naively.
  EXPECT_EQ(ValidateShape(F32({int64_t{1} << 40, int64_t{1} << 40, 1 << 20})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateShape(Shape(static_cast<DType>(42), {1})).code(),
            absl::StatusCode::kInvalidArgument);
  // A zero dimension makes a huge product empty.
  EXPECT_TRUE(ValidateShape(F32({int64_t{1} << 40, 0, int64_t{1} << 40})).ok());
}

TEST(LiteralTest, ToStringShowsValues) {
  EXPECT_EQ(Literal::F32({2}, {1.5f, 2}).ToString(), "f32[2] {1.5, 2}");
  EXPECT_EQ(Literal::I32({3}, {1, 2, 3}).ToString(2), "i32[3] {1, 2, ... (3 total)}");
}

TEST(FunctionBuilderTest, InfersElementwiseShapes) {
  FunctionBuilder b("f");
  Value x = b.Parameter(F32({2, 3}));
  Value y = b.Parameter(F32({2, 3}));
  for (Value v : {b.Add(x, y), b.Sub(x, y), b.Mul(x, y), b.Div(x, y), b.Max(x, y),
                  b.Neg(x), b.Exp(x)}) {
    EXPECT_EQ(b.shape(v), F32({2, 3}));
  }
  Value i = b.Parameter(I32({4}));
  EXPECT_EQ(b.shape(b.Add(i, i)), I32({4}));
  EXPECT_EQ(b.shape(b.Neg(i)), I32({4}));
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<Function> f = b.Build({b.Add(x, y)});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->num_parameters(), 3);
  EXPECT_EQ(f->parameter_shape(2), I32({4}));
  EXPECT_EQ(f->output_shape(0), F32({2, 3}));
}

TEST(FunctionBuilderTest, InfersShapesOfStructuralOps) {
  FunctionBuilder b("f");
  Value x = b.Parameter(F32({2, 3, 4}));
  EXPECT_EQ(b.shape(b.Transpose(x, {2, 0, 1})), F32({4, 2, 3}));
  EXPECT_EQ(b.shape(b.Reshape(x, {6, 4})), F32({6, 4}));
  EXPECT_EQ(b.shape(b.Reshape(x, {24})), F32({24}));
  EXPECT_EQ(b.shape(b.ReduceSum(x, {0, 2})), F32({3}));
  EXPECT_EQ(b.shape(b.ReduceSum(x, {})), F32({2, 3, 4}));
  EXPECT_EQ(b.shape(b.ReduceSum(x, {2, 1, 0})), F32({}));
  EXPECT_EQ(b.shape(b.Convert(x, DType::kI32)), I32({2, 3, 4}));
  EXPECT_EQ(b.shape(b.Convert(x, DType::kPred)), Pred({2, 3, 4}));
  EXPECT_EQ(b.shape(b.Delay(x, 1000)), F32({2, 3, 4}));
  EXPECT_EQ(b.shape(b.AllReduce(x, {"data", "model"}, ReduceKind::kMax)), F32({2, 3, 4}));
  Value s = b.ConstantF32(2.0f);
  EXPECT_EQ(b.shape(s), F32({}));
  EXPECT_EQ(b.shape(b.Broadcast(s, {5, 6}, {})), F32({5, 6}));
  Value row = b.Parameter(F32({1, 6}));
  EXPECT_EQ(b.shape(b.Broadcast(row, {5, 7, 6}, {0, 2})), F32({5, 7, 6}));
  Value v = b.Parameter(F32({6}));
  EXPECT_EQ(b.shape(b.Broadcast(v, {6, 3}, {0})), F32({6, 3}));
  Value m = b.Parameter(F32({6, 5}));
  EXPECT_EQ(b.shape(b.Matmul(b.Reshape(x, {4, 6}), m)), F32({4, 5}));
  Value mi = b.Parameter(I32({2, 2}));
  EXPECT_EQ(b.shape(b.Matmul(mi, mi)), I32({2, 2}));
  EXPECT_EQ(b.shape(b.Constant(Literal::I32({3}, {1, 2, 3}))), I32({3}));
  EXPECT_TRUE(b.status().ok()) << b.status();
}

TEST(FunctionBuilderTest, BuildListsParametersInCallOrderAndVerifies) {
  FunctionBuilder b("two_params");
  Value x = b.Parameter(F32({2}));
  Value y = b.Parameter(I32({3}));
  absl::StatusOr<Function> f = b.Build({y, x, y});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->name(), "two_params");
  EXPECT_EQ(f->parameters(), (std::vector<int>{0, 1}));
  EXPECT_EQ(f->outputs(), (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(f->instructions()[1].parameter_index, 1);
  EXPECT_TRUE(Verify(*f).ok());
  EXPECT_THAT(f->ToString(), HasSubstr("parameter"));
}

TEST(FunctionBuilderTest, CollectiveAxesAreListedOnce) {
  FunctionBuilder b("f");
  Value x = b.Parameter(F32({2}));
  Value y = b.AllReduce(b.AllReduce(x, {"data"}), {"model", "data"});
  absl::StatusOr<Function> f = b.Build({y});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->CollectiveAxes(), (std::vector<std::string>{"data", "model"}));
}

TEST(FunctionBuilderTest, RejectsBinaryOpsOnDifferentShapesOrDtypes) {
  {
    FunctionBuilder b("f");
    b.Add(b.Parameter(F32({2, 3})), b.Parameter(F32({3, 2})));
    ExpectBuildError(b, {"function f, instruction 2 (add)", "f32[2,3]", "f32[3,2]"});
  }
  {
    FunctionBuilder b("f");
    b.Max(b.Parameter(F32({2})), b.Parameter(I32({2})));
    ExpectBuildError(b, {"(max)"});
  }
  {
    // No implicit broadcasting, even from a scalar.
    FunctionBuilder b("f");
    b.Mul(b.Parameter(F32({2})), b.ConstantF32(1.0f));
    ExpectBuildError(b, {"(mul)"});
  }
  {
    FunctionBuilder b("f");
    Value p = b.Parameter(Pred({2}));
    b.Add(p, p);
    ExpectBuildError(b, {"(add)", "f32 or i32"});
  }
}

TEST(FunctionBuilderTest, RejectsExpOnIntegers) {
  FunctionBuilder b("f");
  b.Exp(b.Parameter(I32({2})));
  ExpectBuildError(b, {"(exp)", "f32"});
}

TEST(FunctionBuilderTest, RejectsBadBroadcasts) {
  auto expect_error = [](std::vector<int64_t> operand, std::vector<int64_t> result,
                         std::vector<int64_t> operand_dims) {
    FunctionBuilder b("f");
    b.Broadcast(b.Parameter(F32(operand)), result, operand_dims);
    ExpectBuildError(b, {"(broadcast)"});
  };
  expect_error({3}, {3, 4}, {});          // wrong number of operand dims
  expect_error({3, 4}, {3, 4}, {1, 0});   // not increasing
  expect_error({3, 4}, {3, 4, 5}, {0, 0});  // duplicate
  expect_error({3}, {3, 4}, {2});         // out of range
  expect_error({3}, {3, 4}, {-1});        // negative
  expect_error({3}, {4, 3}, {0});         // size mismatch
  expect_error({3}, {-3}, {0});           // negative result dim
}

TEST(FunctionBuilderTest, RejectsBadReshapeTransposeAndReduce) {
  {
    FunctionBuilder b("f");
    b.Reshape(b.Parameter(F32({2, 3})), {4, 2});
    ExpectBuildError(b, {"(reshape)", "element counts"});
  }
  {
    FunctionBuilder b("f");
    b.Reshape(b.Parameter(F32({0})), {-1, 0});
    ExpectBuildError(b, {"(reshape)", "negative"});
  }
  for (std::vector<int64_t> perm : std::vector<std::vector<int64_t>>{
           {0, 0, 1}, {0, 1}, {0, 1, 3}, {-1, 0, 1}, {0, 1, 2, 3}}) {
    FunctionBuilder b("f");
    b.Transpose(b.Parameter(F32({2, 3, 4})), perm);
    ExpectBuildError(b, {"(transpose)", "permutation"});
  }
  for (std::vector<int64_t> axes :
       std::vector<std::vector<int64_t>>{{0, 0}, {2}, {-1}, {1, 0, 1}}) {
    FunctionBuilder b("f");
    b.ReduceSum(b.Parameter(F32({2, 3})), axes);
    ExpectBuildError(b, {"(reduce_sum)", "axis"});
  }
}

TEST(FunctionBuilderTest, RejectsBadMatmuls) {
  {
    FunctionBuilder b("f");
    b.Matmul(b.Parameter(F32({2, 3})), b.Parameter(F32({4, 5})));
    ExpectBuildError(b, {"(matmul)", "contracting"});
  }
  {
    FunctionBuilder b("f");
    b.Matmul(b.Parameter(F32({2, 3, 1})), b.Parameter(F32({3, 5})));
    ExpectBuildError(b, {"(matmul)", "rank 2"});
  }
  {
    FunctionBuilder b("f");
    b.Matmul(b.Parameter(F32({2, 3})), b.Parameter(I32({3, 5})));
    ExpectBuildError(b, {"(matmul)", "dtypes"});
  }
  {
    FunctionBuilder b("f");
    b.Matmul(b.Parameter(Pred({2, 3})), b.Parameter(Pred({3, 5})));
    ExpectBuildError(b, {"(matmul)"});
  }
  {
    FunctionBuilder b("f");
    b.Matmul(b.Parameter(F32({int64_t{1} << 20, 1})), b.Parameter(F32({1, int64_t{1} << 20})));
    ExpectBuildError(b, {"(matmul)", "elements"});
  }
}

TEST(FunctionBuilderTest, RejectsBadDelaysAndAllReduces) {
  {
    FunctionBuilder b("f");
    b.Delay(b.Parameter(F32({1})), -1);
    ExpectBuildError(b, {"(delay)", "delay_us"});
  }
  {
    FunctionBuilder b("f");
    b.Delay(b.Parameter(F32({1})), 60'000'001);
    ExpectBuildError(b, {"(delay)"});
  }
  {
    FunctionBuilder b("f");
    EXPECT_EQ(b.shape(b.Delay(b.Parameter(F32({1})), 60'000'000)), F32({1}));
    EXPECT_TRUE(b.status().ok());
  }
  {
    FunctionBuilder b("f");
    b.AllReduce(b.Parameter(F32({1})), {});
    ExpectBuildError(b, {"(all_reduce)", "axis"});
  }
  {
    FunctionBuilder b("f");
    b.AllReduce(b.Parameter(F32({1})), {"x", "x"});
    ExpectBuildError(b, {"(all_reduce)", "twice"});
  }
  {
    FunctionBuilder b("f");
    b.AllReduce(b.Parameter(Pred({1})), {"x"});
    ExpectBuildError(b, {"(all_reduce)"});
  }
}

TEST(FunctionBuilderTest, RejectsInvalidParameterShapes) {
  FunctionBuilder b("f");
  b.Parameter(F32({2, -2}));
  ExpectBuildError(b, {"(parameter)", "negative"});
}

TEST(FunctionBuilderTest, InvalidValuesRecordAnErrorInsteadOfCrashing) {
  FunctionBuilder b("f");
  Value x = b.Parameter(F32({2}));
  Value bogus{17};
  Value r = b.Add(x, bogus);
  EXPECT_EQ(r.id, -1);
  ExpectBuildError(b, {"invalid Value", "17"});
  EXPECT_EQ(b.shape(bogus), Shape());
}

TEST(FunctionBuilderTest, DefaultValueIsInvalid) {
  FunctionBuilder b("f");
  b.Neg(Value{});
  ExpectBuildError(b, {"invalid Value", "-1"});
}

TEST(FunctionBuilderTest, FirstErrorWinsAndLaterCallsReturnInvalidValues) {
  FunctionBuilder b("f");
  Value x = b.Parameter(F32({2}));
  b.Exp(b.Convert(x, DType::kI32));  // first error: instruction 2
  Value later = b.Neg(x);
  EXPECT_EQ(later.id, -1);
  EXPECT_EQ(b.Parameter(F32({1})).id, -1);
  ExpectBuildError(b, {"instruction 2 (exp)"});
}

TEST(FunctionBuilderTest, BuildRejectsInvalidOutputsAndNoOutputs) {
  {
    FunctionBuilder b("f");
    Value x = b.Parameter(F32({2}));
    absl::StatusOr<Function> f = b.Build({x, Value{5}});
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("output 1"));
  }
  {
    FunctionBuilder b("f");
    b.Parameter(F32({2}));
    absl::StatusOr<Function> f = b.Build({});
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("no outputs"));
  }
}

TEST(InferShapeTest, NamesTheOpInErrors) {
  Instruction inst;
  inst.op = OpKind::kTranspose;
  inst.dims = {0, 0};
  absl::StatusOr<Shape> s = InferShape(inst, {F32({2, 2})});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("transpose"));
  EXPECT_EQ(InferShape(inst, {}).status().code(), absl::StatusCode::kInvalidArgument);
  inst.dims = {1, 0};
  EXPECT_EQ(*InferShape(inst, {F32({2, 3})}), F32({3, 2}));
}

}  // namespace
}  // namespace causeway::ir
