// Data-parallel training end to end: the MLP of causeway/models trained on 4
// devices (two hosts) gives the same losses as on 1 device with the same
// global batch, and learns the generated task.
#include <vector>

#include "causeway/models/mlp.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

// Documented in docs/IR.md ("Data-parallel training"): `causeway train mlp`
// ends below this loss; the test trains fewer steps than the tool's default
// and must already be below it.
constexpr float kLossBar = 0.4f;
constexpr int kSteps = 40;

std::vector<float> Train(int devices, const models::MlpOptions& options) {
  LocalClusterOptions cluster_options;
  cluster_options.islands = 1;
  cluster_options.hosts_per_island = devices >= 2 ? 2 : 1;
  cluster_options.devices_per_host = devices >= 2 ? devices / 2 : 1;
  auto cluster = MakeCluster(cluster_options);
  auto client = Connect(cluster.get());
  auto trainer = models::MlpTrainer::Create(client.get(), devices, options);
  CW_CHECK_OK(trainer.status());
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<float> loss = (*trainer)->Step(step);
    CW_CHECK_OK(loss.status());
    losses.push_back(*loss);
  }
  return losses;
}

TEST(TrainingTest, FourDeviceLossesMatchOneDeviceAndFallBelowTheBar) {
  models::MlpOptions options;
  const std::vector<float> one = Train(1, options);
  const std::vector<float> four = Train(4, options);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(four[i], one[i], 1e-4f * (1.0f + one[i])) << "step " << i;
  }
  EXPECT_GT(one.front(), 1.0f);  // untrained: about log(4) = 1.39 or more
  EXPECT_LT(one.back(), kLossBar);
  EXPECT_LT(four.back(), kLossBar);
}

TEST(TrainingTest, StepFunctionAllReducesGradientsInsideTheFunction) {
  models::MlpOptions options;
  ASSERT_OK_AND_ASSIGN(ir::Function step, models::MlpStepFunction(options, 4));
  int all_reduces = 0;
  for (const ir::Instruction& inst : step.instructions()) {
    if (inst.op == ir::OpKind::kAllReduce) ++all_reduces;
  }
  EXPECT_EQ(all_reduces, 5);  // four gradients and the loss
  EXPECT_EQ(step.CollectiveAxes(), std::vector<std::string>{"data"});
  EXPECT_EQ(models::MlpStepFunction(options, 3).status().code(),
            absl::StatusCode::kInvalidArgument);  // 256 rows do not split 3 ways
}

}  // namespace
}  // namespace causeway::testing
