// The builder (and so shape inference) rejects every misuse of the ops added
// in issue 3 with INVALID_ARGUMENT naming the op; and infers their shapes.
#include <functional>
#include <string>

#include "causeway/ir/builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::ir {
namespace {

using ::testing::HasSubstr;

const Shape kF({DType::kF32, {4, 6}});

void ExpectRejected(const std::string& op, const std::string& fragment,
                    const std::function<Value(FunctionBuilder&, Value, Value)>& body) {
  FunctionBuilder b("misuse");
  Value x = b.Parameter(kF);
  Value idx = b.Parameter(Shape(DType::kI32, {3}));
  Value out = body(b, x, idx);
  absl::Status s = b.Build({out}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << op << ": " << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("(" + op + ")")) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(fragment)) << s;
}

TEST(ShapeInferenceTest, RejectsMisusedOps) {
  ExpectRejected("pow", "f32", [](auto& b, Value, Value i) { return b.Pow(i, i); });
  ExpectRejected("log", "f32", [](auto& b, Value, Value i) { return b.Log(i); });
  ExpectRejected("min", "differ", [](auto& b, Value x, Value i) { return b.Min(x, i); });
  ExpectRejected("compare", "differ",
                 [](auto& b, Value x, Value i) { return b.Compare(x, i, Comparison::kLt); });
  ExpectRejected("select", "pred", [](auto& b, Value x, Value) { return b.Select(x, x, x); });
  ExpectRejected("iota", "out of range",
                 [](auto& b, Value, Value) { return b.Iota(Shape(DType::kI32, {2}), 1); });
  ExpectRejected("slice", "out of range",
                 [](auto& b, Value x, Value) { return b.Slice(x, {0, 2}, {4, 7}); });
  ExpectRejected("slice", "starts", [](auto& b, Value x, Value) { return b.Slice(x, {0}, {4}); });
  ExpectRejected("concatenate", "differ in dimension", [](auto& b, Value x, Value) {
    return b.Concatenate({x, b.Transpose(x, {1, 0})}, 0);
  });
  ExpectRejected("pad", "negative", [](auto& b, Value x, Value) {
    return b.Pad(x, b.ConstantF32(0), {-1, 0}, {0, 0});
  });
  ExpectRejected("pad", "scalar",
                 [](auto& b, Value x, Value) { return b.Pad(x, x, {0, 0}, {0, 0}); });
  ExpectRejected("gather", "i32", [](auto& b, Value x, Value) { return b.Gather(x, x, 0); });
  ExpectRejected("gather", "out of range",
                 [](auto& b, Value x, Value i) { return b.Gather(x, i, 2); });
  ExpectRejected("scatter_add", "updates must be",
                 [](auto& b, Value x, Value i) { return b.ScatterAdd(x, i, x, 0); });
  ExpectRejected("reduce_max", "reduced twice",
                 [](auto& b, Value x, Value) { return b.ReduceMax(x, {1, 1}); });
  ExpectRejected("dot_general", "contracting dims differ", [](auto& b, Value x, Value) {
    return b.DotGeneral(x, x, {}, {}, {1}, {0});
  });
  ExpectRejected("dot_general", "used twice", [](auto& b, Value x, Value) {
    return b.DotGeneral(x, x, {0}, {0}, {0}, {1});
  });
  ExpectRejected("rng_uniform", "seed",
                 [](auto& b, Value x, Value) { return b.RngUniform(x, {2}); });
  ExpectRejected("reduce_scatter", "multiple", [](auto& b, Value x, Value) {
    return b.ReduceScatter(x, {"d"}, 1, 4);  // 6 rows do not split 4 ways
  });
  ExpectRejected("all_gather", "mesh axis", [](auto& b, Value x, Value) {
    return b.AllGather(x, {}, 0, 2);
  });
  ExpectRejected("all_to_all", "out of range", [](auto& b, Value x, Value) {
    return b.AllToAll(x, {"d"}, 0, 5, 2);
  });
  ExpectRejected("collective_permute", "more than once", [](auto& b, Value x, Value) {
    return b.CollectivePermute(x, {"d"}, {{0, 1}, {2, 1}});
  });
}

TEST(ShapeInferenceTest, InfersShapesOfTheNewOps) {
  FunctionBuilder b("shapes");
  Value x = b.Parameter(kF);
  Value i = b.Parameter(Shape(DType::kI32, {2, 5}));
  EXPECT_EQ(b.shape(b.Compare(x, x, Comparison::kEq)), Shape(DType::kPred, {4, 6}));
  EXPECT_EQ(b.shape(b.Slice(x, {1, 2}, {3, 6})), Shape(DType::kF32, {2, 4}));
  EXPECT_EQ(b.shape(b.Concatenate({x, x, x}, 1)), Shape(DType::kF32, {4, 18}));
  EXPECT_EQ(b.shape(b.Pad(x, b.ConstantF32(0), {1, 0}, {2, 3})), Shape(DType::kF32, {7, 9}));
  EXPECT_EQ(b.shape(b.Gather(x, i, 1)), Shape(DType::kF32, {4, 2, 5}));
  EXPECT_EQ(b.shape(b.ReduceMin(x, {0})), Shape(DType::kF32, {6}));
  Value batched = b.Reshape(x, {2, 2, 6});
  EXPECT_EQ(b.shape(b.DotGeneral(batched, batched, {0}, {0}, {2}, {2})),
            Shape(DType::kF32, {2, 2, 2}));
  EXPECT_EQ(b.shape(b.AllGather(x, {"d"}, 1, 3)), Shape(DType::kF32, {4, 18}));
  EXPECT_EQ(b.shape(b.ReduceScatter(x, {"d"}, 0, 2)), Shape(DType::kF32, {2, 6}));
  EXPECT_EQ(b.shape(b.AllToAll(x, {"d"}, 0, 1, 2)), Shape(DType::kF32, {2, 12}));
  EXPECT_TRUE(b.status().ok()) << b.status();
}

}  // namespace
}  // namespace causeway::ir
