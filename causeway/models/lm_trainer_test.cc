// Training the GPT model through the runtime: the loss falls, every
// parallel layout gives the one-device loss curve, resume reproduces an
// uninterrupted run, and bad input is refused by name.
#include "causeway/models/lm_trainer.h"

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/backend/builtin_kinds.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/models/tensor_file.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/testing/text.h"
#include "gtest/gtest.h"

namespace causeway::models {
namespace {

using ::causeway::testing::LearnableText;
using ::causeway::testing::StatusIs;
using ::testing::HasSubstr;

LmTrainOptions SmallOptions() {
  LmTrainOptions o;
  o.model.context = 8;
  o.model.layers = 2;
  o.model.heads = 2;
  o.model.embed = 16;
  o.batch = 4;
  o.iters = 20;
  o.learning_rate = 1e-2f;
  o.min_learning_rate = 1e-3f;
  o.warmup_iters = 2;
  o.decay_iters = 20;
  o.eval_every = 10;
  o.eval_batches = 2;
  return o;
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<EvalReport> evals;
  absl::Status status;
};

class LmTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto data = TextDataset::FromText(LearnableText(6000), TokenizerKind::kChars, 16);
    ASSERT_OK(data.status());
    data_ = std::make_unique<TextDataset>(*std::move(data));
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TrainRun Train(const LmTrainOptions& o, int64_t stop_at = -1, const LmCheckpoint* resume = nullptr,
                 const std::string& device_kind = "cpu") {
    LocalClusterOptions co;
    co.device_kind = device_kind;
    co.islands = 1;
    co.hosts_per_island = o.layout.devices() % 2 == 0 ? 2 : 1;
    co.devices_per_host = static_cast<int>(o.layout.devices() / co.hosts_per_island);
    if (o.islands.islands > 1) {  // a host per island
      co.islands = static_cast<int>(o.islands.islands);
      co.hosts_per_island = 1;
      co.devices_per_host = static_cast<int>(o.islands.data);
    }
    if (o.pipeline.stages > 1) {  // every stage on a host of its own
      co.islands = static_cast<int>(o.pipeline.islands);
      co.hosts_per_island = static_cast<int>(o.pipeline.stages / o.pipeline.islands);
      co.devices_per_host = static_cast<int>(o.pipeline.data);
    }
    auto cluster = LocalCluster::Create(co);
    CW_CHECK_OK(cluster.status());
    auto client = Client::Connect(cluster->get());
    CW_CHECK_OK(client.status());
    TrainRun run;
    auto trainer = LmTrainer::Create(client->get(), data_.get(), o, resume);
    if (!trainer.ok()) {
      run.status = trainer.status();
      return run;
    }
    LmTrainer::Hooks hooks;
    hooks.on_step = [&](const StepReport& r) {
      EXPECT_EQ(r.iteration, (resume ? resume->iteration : 0) + static_cast<int64_t>(run.losses.size()));
      run.losses.push_back(r.loss);
    };
    hooks.on_eval = [&](const EvalReport& r) { run.evals.push_back(r); };
    run.status = (*trainer)->Train(hooks, stop_at);
    return run;
  }

  std::unique_ptr<TextDataset> data_;
  std::filesystem::path dir_;
};

// `other` ran and logged `one`'s loss curve: every loss within 1e-3, the
// final validation loss within 0.02.
void ExpectSameCurve(const TrainRun& one, const TrainRun& other, const std::string& what) {
  ASSERT_TRUE(other.status.ok()) << what << ": " << other.status;
  ASSERT_EQ(other.losses.size(), one.losses.size()) << what;
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(other.losses[i], one.losses[i], 1e-3f) << "iteration " << i << ", " << what;
  }
  ASSERT_EQ(other.evals.size(), one.evals.size()) << what;
  EXPECT_NEAR(other.evals.back().val_loss, one.evals.back().val_loss, 0.02f) << what;
}

TEST_F(LmTrainerTest, OneBlockModelLearnsTheText) {
  LmTrainOptions o = SmallOptions();
  o.model.layers = 1;
  o.iters = 200;
  o.decay_iters = 200;
  o.eval_every = 100;
  TrainRun run = Train(o);
  ASSERT_OK(run.status);
  ASSERT_EQ(run.losses.size(), 200u);
  const float uniform = std::log(static_cast<float>(data_->tokenizer().vocab_size()));
  EXPECT_NEAR(run.losses.front(), uniform, 0.3f);  // untrained: about log(vocab)
  ASSERT_EQ(run.evals.size(), 3u);                 // at 0, 100 and 200
  EXPECT_EQ(run.evals.back().iteration, 200);
  EXPECT_LT(run.evals.back().val_loss, uniform - 1.0f);
  EXPECT_LT(run.evals.back().train_loss, run.evals.front().train_loss - 1.0f);
}

TEST_F(LmTrainerTest, EveryParallelLayoutGivesTheOneDeviceLossCurve) {
  const LmTrainOptions base = SmallOptions();
  TrainRun one = Train(base);
  ASSERT_OK(one.status);
  for (GptLayout layout : {GptLayout{2, 1}, GptLayout{4, 1}, GptLayout{1, 2}, GptLayout{2, 2}}) {
    LmTrainOptions o = base;
    o.layout = layout;
    ExpectSameCurve(one, Train(o), absl::StrCat("data ", layout.data, " model ", layout.model));
  }
  // Every data-parallel device updating every parameter, as before the
  // optimiser was sharded (layouts with a model axis never shard it).
  for (GptLayout layout : {GptLayout{2, 1}, GptLayout{4, 1}}) {
    LmTrainOptions o = base;
    o.layout = layout;
    o.shard_optimizer = false;
    ExpectSameCurve(one, Train(o), absl::StrCat("data ", layout.data, " replicated"));
  }
}

// The vulkan kind (lavapipe here) trains as the cpu kind does, on one
// device and with data and model axes (collectives done by the GPU under
// ctest, which sets CAUSEWAY_VULKAN_COLLECTIVES=gpu; by the hub otherwise).
TEST_F(LmTrainerTest, VulkanDevicesGiveTheCpuKindsLossCurve) {
  if (absl::StatusOr<std::vector<std::string>> gpus = backend::ListDevices("vulkan"); !gpus.ok()) {
    GTEST_SKIP() << gpus.status();
  }
  LmTrainOptions base = SmallOptions();
  base.iters = 10;
  base.decay_iters = 10;
  base.eval_every = 5;
  TrainRun one = Train(base);
  ASSERT_OK(one.status);
  for (GptLayout layout : {GptLayout{1, 1}, GptLayout{2, 1}, GptLayout{1, 2}}) {
    LmTrainOptions o = base;
    o.layout = layout;
    ExpectSameCurve(one, Train(o, -1, nullptr, "vulkan"),
                    absl::StrCat("vulkan, data ", layout.data, " model ", layout.model));
  }
}

TEST_F(LmTrainerTest, PipelinesGiveTheOneDeviceLossCurve) {
  LmTrainOptions base = SmallOptions();
  base.model.layers = 4;
  base.iters = 12;
  base.decay_iters = 12;
  base.eval_every = 6;
  TrainRun one = Train(base);
  ASSERT_OK(one.status);
  struct Case {
    int64_t stages, microbatches, data, islands;
    PipelineSchedule schedule;
  };
  for (const Case& c : {Case{2, 2, 1, 1, PipelineSchedule::kGPipe},
                        Case{4, 4, 1, 1, PipelineSchedule::k1F1B},
                        Case{2, 2, 2, 1, PipelineSchedule::kGPipe},
                        Case{4, 2, 1, 2, PipelineSchedule::k1F1B},
                        Case{2, 1, 2, 2, PipelineSchedule::kGPipe}}) {
    LmTrainOptions o = base;
    o.pipeline = {c.stages, c.microbatches, c.schedule, c.data, c.islands};
    ExpectSameCurve(one, Train(o),
                    absl::StrCat(c.stages, " stages, ", c.microbatches, " micro-batches, data ",
                                 c.data, ", islands ", c.islands,
                                 c.schedule == PipelineSchedule::kGPipe ? ", GPipe" : ", 1F1B"));
  }
}

TEST_F(LmTrainerTest, DataParallelismAcrossIslandsGivesTheOneDeviceLossCurve) {
  LmTrainOptions base = SmallOptions();
  base.iters = 12;
  base.decay_iters = 12;
  base.eval_every = 6;
  TrainRun one = Train(base);
  ASSERT_OK(one.status);
  for (const GptIslandsOptions& islands :
       {GptIslandsOptions{2, 1}, GptIslandsOptions{2, 2}, GptIslandsOptions{4, 1}}) {
    LmTrainOptions o = base;
    o.islands = islands;
    ExpectSameCurve(one, Train(o), absl::StrCat(islands.islands, " islands of ", islands.data));
  }
  LmTrainOptions bad = base;
  bad.islands = {2, 3};  // batch 4 does not split into 2 x 3
  EXPECT_THAT(bad.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("islands")));
}

TEST_F(LmTrainerTest, APipelinesCheckpointResumesOnOneDevice) {
  LmTrainOptions o = SmallOptions();
  o.eval_every = 0;
  TrainRun whole = Train(o);
  ASSERT_OK(whole.status);
  // The first half pipelined; its checkpoint (the stages' state gathered
  // back into the model's order, both copies of the tied embedding equal)
  // resumed on one device gives the uninterrupted run's second half.
  LmTrainOptions piped = o;
  piped.pipeline = {2, 2, PipelineSchedule::k1F1B, 1, 1};
  piped.checkpoint_dir = dir_.string();
  ASSERT_OK(Train(piped, /*stop_at=*/10).status);
  ASSERT_OK_AND_ASSIGN(LmCheckpoint c, ReadLmCheckpoint(dir_.string()));
  EXPECT_EQ(c.iteration, 10);
  TrainRun rest = Train(o, -1, &c);
  ASSERT_OK(rest.status);
  ASSERT_EQ(rest.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_NEAR(rest.losses[i], whole.losses[10 + i], 1e-3f) << "iteration " << 10 + i;
  }
}

TEST_F(LmTrainerTest, BadPipelinesAreRefusedByName) {
  LmTrainOptions o = SmallOptions();  // 2 layers, batch 4
  o.pipeline = {4, 1, PipelineSchedule::kGPipe, 1, 1};
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers")));
  o.pipeline = {2, 3, PipelineSchedule::kGPipe, 1, 1};
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("micro-batches")));
  o.pipeline = {2, 2, PipelineSchedule::kGPipe, 1, 1};
  o.layout = {2, 1};
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 x 1")));
  // A cluster too small for the stages.
  auto cluster = LocalCluster::Create({.islands = 1, .hosts_per_island = 1, .devices_per_host = 2});
  ASSERT_OK(cluster.status());
  auto client = Client::Connect(cluster->get());
  ASSERT_OK(client.status());
  GptConfig config = o.model;
  config.vocab = 10;
  config.layers = 4;
  EXPECT_THAT(GptPipeline::Create(client->get(), config, {4, 2, PipelineSchedule::kGPipe, 1, 1},
                                  {}, GptKernels::kFused, 4)
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not enough devices")));
}

TEST_F(LmTrainerTest, ResumeReproducesTheUninterruptedRun) {
  LmTrainOptions o = SmallOptions();
  o.eval_every = 0;
  TrainRun whole = Train(o);
  ASSERT_OK(whole.status);

  o.checkpoint_dir = dir_.string();
  o.checkpoint_every = 4;
  TrainRun first = Train(o, /*stop_at=*/10);
  ASSERT_OK(first.status);
  ASSERT_EQ(first.losses.size(), 10u);
  ASSERT_OK_AND_ASSIGN(LmCheckpoint c, ReadLmCheckpoint(dir_.string()));
  EXPECT_EQ(c.iteration, 10);
  TrainRun rest = Train(o, -1, &c);
  ASSERT_OK(rest.status);
  ASSERT_EQ(rest.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(first.losses[i], whole.losses[i]) << "iteration " << i;
    EXPECT_EQ(rest.losses[i], whole.losses[10 + i]) << "iteration " << 10 + i;
  }
  // The file is a plain tensor file: parameters and both moments by name.
  ASSERT_OK_AND_ASSIGN(TensorFile f, ReadTensorFile((dir_ / "model.safetensors").string()));
  EXPECT_NE(f.Find("param/wte"), nullptr);
  EXPECT_NE(f.Find("adam_v/h.1.mlp.fc.w"), nullptr);
  EXPECT_EQ(f.metadata.at("iteration"), "20");
}

// A sharded optimiser's checkpoint holds every parameter's moments whole:
// it resumes on one device, and one device's resumes sharded.
TEST_F(LmTrainerTest, AShardedOptimizersCheckpointResumesOnOneDeviceAndBack) {
  LmTrainOptions o = SmallOptions();
  o.eval_every = 0;
  TrainRun whole = Train(o);
  ASSERT_OK(whole.status);
  o.checkpoint_dir = dir_.string();
  for (GptLayout first : {GptLayout{2, 1}, GptLayout{1, 1}}) {
    SCOPED_TRACE(absl::StrCat("first part on ", first.data, " devices"));
    std::filesystem::remove_all(dir_);
    LmTrainOptions a = o;
    a.layout = first;
    ASSERT_OK(Train(a, /*stop_at=*/10).status);
    ASSERT_OK_AND_ASSIGN(LmCheckpoint c, ReadLmCheckpoint(dir_.string()));
    ASSERT_EQ(c.adam_m.size(), c.params.size());
    LmTrainOptions b = o;
    b.layout = first.data == 1 ? GptLayout{2, 1} : GptLayout{1, 1};
    TrainRun rest = Train(b, -1, &c);
    ASSERT_OK(rest.status);
    ASSERT_EQ(rest.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_NEAR(rest.losses[i], whole.losses[10 + i], 1e-3f) << "iteration " << 10 + i;
    }
  }
}

TEST_F(LmTrainerTest, ACheckpointOfAnotherModelOrVocabularyIsRefused) {
  LmTrainOptions o = SmallOptions();
  o.iters = 1;
  o.eval_every = 0;
  o.checkpoint_dir = dir_.string();
  ASSERT_OK(Train(o).status);
  ASSERT_OK_AND_ASSIGN(LmCheckpoint c, ReadLmCheckpoint(dir_.string()));

  LmTrainOptions wider = o;
  wider.model.embed = 32;
  EXPECT_THAT(Train(wider, -1, &c).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another model")));

  auto other = TextDataset::FromText(LearnableText(6000) + "XYZ", TokenizerKind::kChars, 16);
  ASSERT_OK(other.status());
  data_ = std::make_unique<TextDataset>(*std::move(other));
  EXPECT_THAT(Train(o, -1, &c).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another vocabulary")));
}

TEST_F(LmTrainerTest, ByteTokensTrainAndAMalformedCheckpointIsDataLoss) {
  auto bytes = TextDataset::FromText(LearnableText(6000), TokenizerKind::kBytes, 16);
  ASSERT_OK(bytes.status());
  data_ = std::make_unique<TextDataset>(*std::move(bytes));
  LmTrainOptions o = SmallOptions();
  o.iters = 3;
  o.eval_every = 0;
  o.checkpoint_dir = dir_.string();
  TrainRun run = Train(o);
  ASSERT_OK(run.status);
  EXPECT_NEAR(run.losses.front(), std::log(256.0f), 0.3f);  // 256 tokens
  ASSERT_OK_AND_ASSIGN(LmCheckpoint c, ReadLmCheckpoint(dir_.string()));
  EXPECT_EQ(c.tokenizer.kind(), TokenizerKind::kBytes);
  EXPECT_EQ(c.config.vocab, 256);

  // A tensor file that is not an LM checkpoint, and one whose tensor does
  // not fit its config, are refused by name.
  const std::string path = (dir_ / "model.safetensors").string();
  ASSERT_OK_AND_ASSIGN(TensorFile f, ReadTensorFile(path));
  TensorFile other = f;
  other.metadata["format"] = "something-else";
  ASSERT_OK(WriteTensorFile(path, other));
  EXPECT_THAT(ReadLmCheckpoint(dir_.string()).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a Causeway LM checkpoint")));
  TensorFile wrong = f;
  for (auto& [name, lit] : wrong.tensors) {
    if (name == "param/wpe") lit = ir::Literal(ir::Shape(ir::DType::kF32, {3, 3}));
  }
  ASSERT_OK(WriteTensorFile(path, wrong));
  EXPECT_THAT(ReadLmCheckpoint(dir_.string()).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("param/wpe is f32[3,3]")));
}

TEST_F(LmTrainerTest, ANonFiniteLossStopsTrainingNamingTheIteration) {
  LmTrainOptions o = SmallOptions();
  o.learning_rate = 1e30f;
  o.warmup_iters = 0;
  o.adamw.grad_clip = 0;
  o.eval_every = 0;
  TrainRun run = Train(o);
  EXPECT_THAT(run.status, StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("at iteration " + std::to_string(run.losses.size()))));
  EXPECT_LT(run.losses.size(), 5u);
}

TEST_F(LmTrainerTest, BatchesThatDoNotSplitAreRefused) {
  LmTrainOptions o = SmallOptions();
  o.layout = {3, 1};
  EXPECT_THAT(Train(o).status, StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("batch 4 is not divisible by the data axis")));
  o.layout = {1, 4};
  EXPECT_THAT(Train(o).status, StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("2 heads are not divisible by the model axis")));
}

TEST_F(LmTrainerTest, SamplingIsSeededAndStaysInTheVocabulary) {
  LmTrainOptions o = SmallOptions();
  o.iters = 5;
  o.eval_every = 0;
  o.checkpoint_dir = dir_.string();
  ASSERT_OK(Train(o).status);
  ASSERT_OK_AND_ASSIGN(LmCheckpoint c, ReadLmCheckpoint(dir_.string()));
  auto cluster = LocalCluster::Create({.islands = 1, .hosts_per_island = 1, .devices_per_host = 1});
  ASSERT_OK(cluster.status());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(cluster->get()));
  SampleOptions s;
  s.tokens = 40;
  s.prompt = "the cat";
  ASSERT_OK_AND_ASSIGN(std::string a, SampleText(client.get(), c, s));
  ASSERT_OK_AND_ASSIGN(std::string b, SampleText(client.get(), c, s));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.rfind("the cat", 0), 0u);
  EXPECT_EQ(a.size(), 7u + 40u);
  EXPECT_OK(data_->tokenizer().Encode(a).status());
  // Top-1 is greedy: the seed no longer matters.
  s.top_k = 1;
  ASSERT_OK_AND_ASSIGN(std::string greedy, SampleText(client.get(), c, s));
  s.seed = 99;
  ASSERT_OK_AND_ASSIGN(std::string greedy2, SampleText(client.get(), c, s));
  EXPECT_EQ(greedy, greedy2);
  s.prompt = "the cat!";  // '!' is not in the text
  EXPECT_THAT(SampleText(client.get(), c, s).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not in the vocabulary")));
}

}  // namespace
}  // namespace causeway::models
