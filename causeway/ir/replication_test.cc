#include "causeway/ir/replication.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "causeway/ir/builder.h"

namespace causeway::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Axes = std::vector<std::vector<std::string>>;

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }

Function Build(FunctionBuilder& b, std::vector<Value> outs) {
  auto f = b.Build(std::move(outs));
  EXPECT_TRUE(f.ok()) << f.status();
  return *f;
}

TEST(ReplicationTest, PerShardSumOfASplitParameterIsRefusedNamingTheResultAxisAndOp) {
  FunctionBuilder b("sum");
  Value x = b.Parameter(F32({2}));
  const Function f = Build(b, {b.ReduceSum(x, {0})});
  const absl::Status s = CheckReplication(f, Axes{{"data"}}, Axes{{"data"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("result 0"), HasSubstr("axis 'data'"),
                    HasSubstr("parameter 0 is split over 'data'"), HasSubstr("reduce_sum (%1)")));
}

TEST(ReplicationTest, AllReduceOrAllGatherOverTheAxisMakesTheResultReplicated) {
  {
    FunctionBuilder b("sum");
    Value x = b.Parameter(F32({2}));
    const Function f = Build(b, {b.Mul(b.AllReduce(b.ReduceSum(x, {0}), {"data"}),
                                       b.ConstantF32(2))});
    EXPECT_TRUE(CheckReplication(f, Axes{{"data"}}, Axes{{"data"}}).ok());
  }
  {
    FunctionBuilder b("gather");
    Value x = b.Parameter(F32({2}));
    const Function f = Build(b, {b.AllGather(b.Neg(x), {"data"}, 0, 2)});
    EXPECT_TRUE(CheckReplication(f, Axes{{"data"}}, Axes{{"data"}}).ok());
  }
}

TEST(ReplicationTest, AReductionOverAnotherAxisDoesNotReplicateThisOne) {
  FunctionBuilder b("sum");
  Value x = b.Parameter(F32({2, 2}));
  const Function f = Build(b, {b.AllReduce(b.ReduceSum(x, {0, 1}), {"model"})});
  EXPECT_TRUE(CheckReplication(f, Axes{{"data", "model"}}, Axes{{"model"}}).ok());
  const absl::Status s = CheckReplication(f, Axes{{"data", "model"}}, Axes{{"data", "model"}});
  EXPECT_THAT(s.message(), HasSubstr("axis 'data'"));
}

TEST(ReplicationTest, ResultsSplitOverTheAxisOfTheirParameterPass) {
  FunctionBuilder b("double");
  Value x = b.Parameter(F32({2}));
  const Function f = Build(b, {b.Add(x, x)});
  // Sharded like its input: nothing is declared replicated over 'data'.
  EXPECT_TRUE(CheckReplication(f, Axes{{"data"}}, Axes{{}}).ok());
}

TEST(ReplicationTest, ReplicatedParametersConstantsAndSeededRandomNumbersAreReplicated) {
  FunctionBuilder b("f");
  Value w = b.Parameter(F32({3}));
  Value seed = b.Parameter(Shape(DType::kI32, {}));
  Value r = b.RngNormal(seed, {3});
  const Function f = Build(b, {b.Add(b.Mul(w, r), b.Iota(F32({3}), 0))});
  EXPECT_TRUE(CheckReplication(f, Axes{{}, {}}, Axes{{"data"}}).ok());
  // A seed that differs per device gives numbers that differ.
  EXPECT_FALSE(CheckReplication(f, Axes{{}, {"data"}}, Axes{{"data"}}).ok());
}

TEST(ReplicationTest, CollectivesThatHandOutDifferentValuesBreakReplication) {
  for (int which = 0; which < 3; ++which) {
    FunctionBuilder b("f");
    Value x = b.Parameter(F32({4}));
    Value y = which == 0   ? b.ReduceScatter(x, {"data"}, 0, 2)
              : which == 1 ? b.AllToAll(x, {"data"}, 0, 0, 2)
                           : b.CollectivePermute(x, {"data"}, {{0, 1}, {1, 0}});
    const Function f = Build(b, {b.Neg(y)});
    const absl::Status s = CheckReplication(f, Axes{{}}, Axes{{"data"}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << which;
    EXPECT_THAT(s.message(), HasSubstr("gives each device along 'data' a different value"));
  }
}

TEST(ReplicationTest, AReturnedSplitParameterIsNamed) {
  FunctionBuilder b("id");
  Value x = b.Parameter(F32({2}));
  Value y = b.Parameter(F32({2}));
  const Function f = Build(b, {y, x});
  const absl::Status s = CheckReplication(f, Axes{{"data"}, {}}, Axes{{"data"}, {"data"}});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("result 1"), HasSubstr("parameter 0 is split"),
                                 HasSubstr("returned as it is")));
}

TEST(ReplicationTest, WrongEntryCountsAreAnError) {
  FunctionBuilder b("id");
  Value x = b.Parameter(F32({2}));
  const Function f = Build(b, {x});
  EXPECT_EQ(CheckReplication(f, Axes{}, Axes{{}}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace causeway::ir
