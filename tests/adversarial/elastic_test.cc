// Elastic runs (causeway/cluster/elastic.h) on real worker processes, each
// failure the runtime must survive: a worker killed with -9 and replaced by
// one that joins late, a mute worker (SIGSTOP), a worker killed during a
// save, two workers lost at once, and a lost coordinator (a clear error, in
// time, with the last checkpoint whole). Then the chaos run: GPT training
// with a worker killed twice, which ends where an uninterrupted run ends.
#include <signal.h>

#include <filesystem>
#include <mutex>

#include "causeway/base/status_macros.h"
#include "causeway/client/checkpoint.h"
#include "causeway/cluster/elastic.h"
#include "causeway/models/lm_elastic.h"
#include "causeway/testing/text.h"
#include "gmock/gmock.h"
#include "tests/integration/cluster_kinds.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

namespace fs = std::filesystem;
using ir::DType;
using ir::Literal;
using ir::Shape;
using ::testing::HasSubstr;

constexpr absl::Duration kResultTimeout = absl::Seconds(120);

template <typename T>
absl::StatusOr<T> Await(const Future<T>& f, const std::string& what) {
  const absl::StatusOr<T>* v = f.AwaitWithTimeout(kResultTimeout);
  if (v == nullptr) return absl::DeadlineExceededError(absl::StrCat(what, " never came"));
  return *v;
}

// The program the RunElastic tests run: a counter of `length` elements
// split over the devices the cluster has (as many as divide it), one added
// each step, saved every `every` steps. Any attempt resumes from the last
// committed step.
struct CounterRun {
  std::string root;
  int64_t steps = 40;
  int64_t every = 10;
  int64_t length = 12;
  // Each save committed before the next step (so a fault lands after it).
  bool await_saves = true;
  // The test's faults: after each step (its value ready), and after each
  // save begun.
  std::function<void(const ElasticAttempt&, int64_t step)> after_step;
  std::function<void(const ElasticAttempt&, int64_t step, const Future<Unit>& saved)> after_save;
  std::vector<int64_t> attempt_devices;  // mesh size of each attempt
  std::vector<int64_t> restored_at;      // the step each attempt resumed from
};

absl::Status RunCounter(ElasticAttempt& a, CounterRun& run) {
  Client* c = a.client();
  int64_t d = std::min<int64_t>(a.devices(), run.length);
  while (run.length % d != 0) --d;
  run.attempt_devices.push_back(d);
  CW_ASSIGN_OR_RETURN(Mesh mesh, c->AllocateMesh({{"data", d}}));
  const Sharding split(std::vector<std::vector<std::string>>{{"data"}});
  CW_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> ckpt, Checkpointer::Open(c, run.root));
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> committed, ckpt->Steps());
  int64_t step = committed.empty() ? 0 : committed.back();
  Array x;
  if (step == 0) {
    CW_ASSIGN_OR_RETURN(x, c->Put(Literal::F32({run.length}, std::vector<float>(run.length, 0)),
                                  mesh, split));
  } else {
    CW_ASSIGN_OR_RETURN(std::vector<Array> back,
                        ckpt->Restore(step, std::vector<RestoreTarget>{{"x", mesh, split}}));
    x = back[0];
  }
  CW_RETURN_IF_ERROR(Await(x.Ready(), "the counter").status());
  run.restored_at.push_back(step);
  a.Restored(step);
  ir::FunctionBuilder b("add_one");
  ir::Value v = b.Parameter(Shape(DType::kF32, {run.length / d}));
  CW_ASSIGN_OR_RETURN(ir::Function f, b.Build({b.Add(v, b.Full(1.0f, {run.length / d}))}));
  CompileOptions co;
  co.in_shardings = {split};
  co.out_shardings = {split};
  CW_ASSIGN_OR_RETURN(CompiledFunction add_one, c->Compile(f, mesh, co));
  while (step < run.steps) {
    CW_ASSIGN_OR_RETURN(std::vector<Array> out, c->Call(add_one, {x}));
    x = out[0];
    ++step;
    CW_RETURN_IF_ERROR(Await(x.Ready(), absl::StrCat("step ", step)).status());
    a.Progress(step);
    if (run.after_step) run.after_step(a, step);
    if (step % run.every == 0) {
      Future<Unit> saved = ckpt->Save(step, {{"x", x}});
      if (run.after_save) run.after_save(a, step, saved);
      if (run.await_saves) CW_RETURN_IF_ERROR(Await(saved, absl::StrCat("save ", step)).status());
    }
  }
  CW_RETURN_IF_ERROR(ckpt->Wait());
  CW_ASSIGN_OR_RETURN(Literal last, Await(x.Fetch(), "the result"));
  for (float e : last.values<float>()) {
    if (e != static_cast<float>(run.steps)) {
      return absl::InternalError(absl::StrCat("the counter is ", e, ", not ", run.steps));
    }
  }
  return absl::OkStatus();
}

class ElasticTest : public ::testing::Test {
 protected:
  void Start(int workers, int devices_per_worker = 1) {
    base_ = (fs::absolute(::testing::TempDir()) / absl::StrCat("elastic_test_", getpid()))
                .lexically_normal()
                .string();
    fs::remove_all(base_);
    fs::create_directories(base_);
    StartAgain(workers, devices_per_worker);
  }
  // A new cluster (coordinator and workers) on the same checkpoint root.
  void StartAgain(int workers, int devices_per_worker = 1) {
    cluster_.reset();
    ProcessClusterOptions o = ProcessShape(1, workers, devices_per_worker);
    o.heartbeat_timeout = TestHeartbeatTimeout();
    o.checkpoint_root = base_;
    cluster_ = StartProcesses(o);
  }
  void TearDown() override {
    cluster_.reset();
    if (!base_.empty()) fs::remove_all(base_);
  }

  ElasticOptions Options() const {
    ElasticOptions e;
    e.cluster.address = cluster_->url();
    e.cluster.token = cluster_->token();
    e.cluster.timeout = absl::Seconds(30);
    e.replace_timeout = absl::ZeroDuration();
    e.confirm_timeout = 5 * TestHeartbeatTimeout();
    return e;
  }
  std::string Root(const std::string& name) const { return base_ + "/" + name; }

  // Worker `index`'s process; -1 if none.
  int IndexOf(HostId host) const {
    for (int i = 0; i < cluster_->num_workers(); ++i) {
      if (cluster_->worker_host(i) == host) return i;
    }
    return -1;
  }

  absl::Status Run(const ElasticOptions& o, CounterRun& run, std::vector<RecoveryEvent>* events) {
    return RunElastic(
        o, [&](ElasticAttempt& a) { return RunCounter(a, run); },
        [&](const RecoveryEvent& e) { events->push_back(e); });
  }

  std::string base_;
  std::unique_ptr<ProcessCluster> cluster_;
};

// kill -9 of a worker at step 15: the loss is confirmed, a replacement is
// started only then (it joins late, as a new host), and the run resumes
// from step 10 on two devices again.
TEST_F(ElasticTest, AKilledWorkerIsReplacedByOneThatJoinsLate) {
  Start(2);
  CounterRun run;
  run.root = Root("late");
  const HostId victim = cluster_->worker_host(1);
  run.after_step = [&](const ElasticAttempt& a, int64_t step) {
    if (a.number() == 0 && step == 15) cluster_->KillWorker(1);
  };
  ElasticOptions o = Options();
  o.replace_timeout = absl::Seconds(60);
  int replacements = 0;
  o.on_loss = [&](const std::vector<HostId>& lost) {
    ASSERT_THAT(lost, ::testing::ElementsAre(victim));
    ++replacements;
    ASSERT_OK(cluster_->RestartWorker(1));
  };
  std::vector<RecoveryEvent> events;
  ASSERT_OK(Run(o, run, &events));
  EXPECT_EQ(replacements, 1);
  ASSERT_EQ(events.size(), 1u);
  const RecoveryEvent& e = events[0];
  EXPECT_EQ(e.cause.code(), absl::StatusCode::kUnavailable) << e.cause;
  EXPECT_THAT(e.cause.message(), HasSubstr(victim.ToString()));
  EXPECT_TRUE(e.replaced) << e.ToString();
  EXPECT_EQ(e.devices_before, 2);
  EXPECT_EQ(e.devices_after, 2);
  EXPECT_EQ(e.resumed_at, 10) << e.ToString();
  EXPECT_EQ(e.progress_before, 15) << e.ToString();
  EXPECT_EQ(e.steps_repeated(), 5);
  EXPECT_EQ(run.attempt_devices, (std::vector<int64_t>{2, 2}));
  RecordProperty("recovery", e.ToString());
}

// A worker stopped with SIGSTOP keeps its connections open and answers
// nothing: the coordinator drops it after missed heartbeats, the runs it
// held fail, and (no replacement) the run goes on alone on the survivor.
TEST_F(ElasticTest, AMuteWorkerIsDroppedAfterMissedHeartbeatsAndTheRunShrinks) {
  Start(2);
  CounterRun run;
  run.root = Root("mute");
  const HostId victim = cluster_->worker_host(1);
  absl::Time stopped;
  run.after_step = [&](const ElasticAttempt& a, int64_t step) {
    if (a.number() == 0 && step == 15) {
      ASSERT_EQ(kill(cluster_->worker_pid(1), SIGSTOP), 0);
      stopped = absl::Now();
    }
  };
  std::vector<RecoveryEvent> events;
  ASSERT_OK(Run(Options(), run, &events));
  cluster_->KillWorker(1);  // SIGKILL ends a stopped process too
  ASSERT_EQ(events.size(), 1u);
  const RecoveryEvent& e = events[0];
  EXPECT_THAT(e.lost_hosts, ::testing::ElementsAre(victim));
  EXPECT_FALSE(e.replaced);
  EXPECT_EQ(e.devices_after, 1);
  EXPECT_EQ(e.resumed_at, 10);
  EXPECT_EQ(run.attempt_devices, (std::vector<int64_t>{2, 1}));
  // Detected by the heartbeat timeout, not by a result's timeout.
  EXPECT_LT(e.detection, 3 * TestHeartbeatTimeout()) << e.ToString();
  RecordProperty("recovery", e.ToString());
}

// A worker killed while the hosts write step 20 (64 MiB of it, each host
// its half): that save fails, step 10 stays whole, and the run resumes
// from it and saves step 20 anew.
TEST_F(ElasticTest, AWorkerKilledDuringASaveLeavesTheLastCheckpointWhole) {
  Start(2);
  CounterRun run;
  run.root = Root("during_save");
  run.length = int64_t{16} << 20;  // floats
  run.steps = 30;
  Future<Unit> cut_short;
  run.after_save = [&](const ElasticAttempt& a, int64_t step, const Future<Unit>& saved) {
    if (a.number() == 0 && step == 20) {
      cluster_->KillWorker(1);
      cut_short = saved;
    }
  };
  std::vector<RecoveryEvent> events;
  ASSERT_OK(Run(Options(), run, &events));
  ASSERT_TRUE(cut_short.valid());
  const absl::StatusOr<Unit> saved = Await(cut_short, "the save cut short");
  EXPECT_FALSE(saved.ok()) << "the save of step 20 committed before the kill";
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].resumed_at, 10) << events[0].ToString();
  // Every step kept is whole: it loads, and no partial folder is left.
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> kept, checkpoint::CommittedSteps(run.root));
  EXPECT_EQ(kept, (std::vector<int64_t>{10, 20, 30}));
  for (const auto& entry : fs::directory_iterator(run.root)) {
    EXPECT_EQ(entry.path().extension(), "") << entry.path();
  }
}

// Two of four workers killed at once: one or two recoveries (the losses
// may reach the runner apart), and the run ends on the two left.
TEST_F(ElasticTest, TwoWorkersLostAtOnce) {
  Start(4);
  CounterRun run;
  run.root = Root("two");
  const HostId a1 = cluster_->worker_host(1), a2 = cluster_->worker_host(2);
  run.after_step = [&](const ElasticAttempt& a, int64_t step) {
    if (a.number() == 0 && step == 15) {
      cluster_->KillWorker(1);
      cluster_->KillWorker(2);
    }
  };
  std::vector<RecoveryEvent> events;
  ASSERT_OK(Run(Options(), run, &events));
  ASSERT_GE(events.size(), 1u);
  ASSERT_LE(events.size(), 2u);
  std::vector<HostId> lost;
  for (const RecoveryEvent& e : events) {
    lost.insert(lost.end(), e.lost_hosts.begin(), e.lost_hosts.end());
    EXPECT_EQ(e.resumed_at, 10) << e.ToString();
  }
  EXPECT_THAT(lost, ::testing::UnorderedElementsAre(a1, a2));
  EXPECT_EQ(events.back().devices_after, 2);
  EXPECT_EQ(run.attempt_devices.back(), 2);
}

// An error of any code is a loss's when a host of the attempt has left:
// an attempt that began while a second host was leaving planned its mesh
// on devices that went (INVALID_ARGUMENT: a mesh larger than the island).
// Without a loss, the same error ends the run as it is.
TEST_F(ElasticTest, AnyErrorWhileAHostOfTheAttemptIsGoneIsALoss) {
  Start(2);
  CounterRun run;
  run.root = Root("any_error");
  std::vector<RecoveryEvent> events;
  const absl::Status planned_on_a_lost_device =
      absl::InvalidArgumentError("a mesh of 2 devices is larger than every island");
  ASSERT_OK(RunElastic(
      Options(),
      [&](ElasticAttempt& a) -> absl::Status {
        if (a.number() > 0) return RunCounter(a, run);
        cluster_->KillWorker(1);
        CW_RETURN_IF_ERROR(a.cluster()->WaitForTopology(
            [&](const Topology& t) { return t.num_devices() < a.devices(); }, kResultTimeout));
        return planned_on_a_lost_device;
      },
      [&](const RecoveryEvent& e) { events.push_back(e); }));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].cause, planned_on_a_lost_device);
  EXPECT_EQ(events[0].devices_after, 1);
  EXPECT_EQ(run.attempt_devices, (std::vector<int64_t>{1}));

  events.clear();
  int attempts = 0;
  const absl::Status st = RunElastic(
      Options(),
      [&](ElasticAttempt&) {
        ++attempts;
        return planned_on_a_lost_device;
      },
      [&](const RecoveryEvent& e) { events.push_back(e); });
  EXPECT_EQ(st, planned_on_a_lost_device);
  EXPECT_EQ(attempts, 1);
  EXPECT_TRUE(events.empty());
}

// The coordinator killed: the run ends with UNAVAILABLE naming it, within
// the heartbeat timeout, and a restart (a new cluster, a new run) resumes
// from step 10.
TEST_F(ElasticTest, ALostCoordinatorEndsTheRunClearlyAndInTime) {
  Start(2);
  CounterRun run;
  run.root = Root("coordinator");
  absl::Time killed;
  run.after_step = [&](const ElasticAttempt& a, int64_t step) {
    if (a.number() == 0 && step == 15) {
      ASSERT_EQ(kill(cluster_->pids()[0], SIGKILL), 0);
      killed = absl::Now();
    }
  };
  std::vector<RecoveryEvent> events;
  const absl::Status st = Run(Options(), run, &events);
  const absl::Duration took = absl::Now() - killed;
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("coordinator"));
  EXPECT_THAT(st.message(), HasSubstr("last checkpoint"));
  EXPECT_LT(took, TestHeartbeatTimeout()) << st;
  EXPECT_TRUE(events.empty());
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> kept, checkpoint::CommittedSteps(run.root));
  EXPECT_EQ(kept, (std::vector<int64_t>{10}));

  // The workers went with their coordinator. A new cluster and a new run on
  // the same folder resume from step 10 and finish.
  StartAgain(2);
  run.after_step = nullptr;
  run.attempt_devices.clear();
  run.restored_at.clear();
  ASSERT_OK(Run(Options(), run, &events));
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(run.attempt_devices, (std::vector<int64_t>{2}));
  EXPECT_EQ(run.restored_at, (std::vector<int64_t>{10}));
  ASSERT_OK_AND_ASSIGN(kept, checkpoint::CommittedSteps(run.root));
  EXPECT_EQ(kept.back(), run.steps);
}

// The chaos run: GPT training, 300 steps, a sharded checkpoint every 25,
// with a worker killed twice: at step 60 (a replacement joins) and at step
// 190 of the next attempt, or the first step after either that is at most
// 15 steps past a committed checkpoint (none joins: the data axis shrinks from 2 to 1,
// the global batch stays). The run completes, each failure repeats at most
// 25 steps, and its final validation loss is within 0.02 of an
// uninterrupted run's.
TEST_F(ElasticTest, ChaosTrainingSurvivesAWorkerKilledTwice) {
  Start(2);
  ASSERT_OK_AND_ASSIGN(models::TextDataset data,
                       models::TextDataset::FromText(LearnableText(6000),
                                                     models::TokenizerKind::kChars, 8));
  models::LmTrainOptions t;
  t.model.context = 8;
  t.model.layers = 1;
  t.model.heads = 2;
  t.model.embed = 16;
  t.layout = models::GptLayout{2, 1};
  t.batch = 4;
  t.iters = 300;
  t.learning_rate = 1e-2f;
  t.min_learning_rate = 1e-3f;
  t.warmup_iters = 10;
  t.decay_iters = 300;
  t.eval_every = 300;
  t.eval_batches = 8;
  t.result_timeout = kResultTimeout;

  // The uninterrupted run, on the embedded cluster (same layout).
  float reference = NAN;
  {
    LocalClusterOptions lo;
    lo.islands = 1;
    lo.hosts_per_island = 2;
    lo.devices_per_host = 1;
    auto local = MakeCluster(lo);
    ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(local.get()));
    ASSERT_OK_AND_ASSIGN(auto trainer, models::LmTrainer::Create(client.get(), &data, t));
    models::LmTrainer::Hooks h;
    h.on_eval = [&](const models::EvalReport& r) { reference = r.val_loss; };
    ASSERT_OK(trainer->Train(h));
  }
  ASSERT_TRUE(std::isfinite(reference));

  t.checkpoint_dir = Root("lm");
  t.checkpoint_every = 25;
  t.checkpoint_format = models::LmCheckpointFormat::kSharded;
  ElasticOptions o = Options();
  o.replace_timeout = absl::Seconds(2);
  int losses = 0;
  o.on_loss = [&](const std::vector<HostId>& lost) {
    ASSERT_EQ(lost.size(), 1u);
    // The first loss is replaced; the second is not.
    if (++losses == 1) ASSERT_OK(cluster_->RestartWorker(IndexOf(lost[0])));
  };
  std::vector<RecoveryEvent> events;
  std::vector<int64_t> data_axis;
  float final_val = NAN;
  models::LmElasticHooks hooks;
  hooks.on_recovery = [&](const RecoveryEvent& e) { events.push_back(e); };
  hooks.train.on_eval = [&](const models::EvalReport& r) { final_val = r.val_loss; };
  int attempt = 0;
  int kills = 0;          // kill k lands in attempt k
  int64_t committed = 0;  // the newest checkpoint committed
  hooks.on_attempt = [&](const ElasticAttempt& a, const models::LmTrainer& trainer) {
    attempt = a.number();
    committed = trainer.iteration();
    data_axis.push_back(trainer.options().layout.data);
  };
  hooks.train.on_checkpoint = [&](int64_t iteration, const std::string&) {
    committed = iteration;
  };
  // Each kill lands once the checkpoint before it has committed, within 15
  // steps of it: a save still in flight when its host is lost fails
  // (AWorkerKilledDuringASaveLeavesTheLastCheckpointWhole), and the run
  // then repeats the steps since the checkpoint before that one (on a
  // loaded machine a save of step 50 was seen still writing at step 60,
  // and the kill there repeated 36 steps).
  hooks.train.on_step = [&](const models::StepReport& r) {
    const int64_t at = attempt == 0 ? 60 : 190;
    const int64_t since = r.iteration % t.checkpoint_every;
    if (kills == attempt && kills < 2 && r.iteration >= at && since <= 15 &&
        committed == r.iteration - since) {
      // One of the two workers the mesh uses.
      cluster_->KillWorker(kills++);
    }
  };
  ASSERT_OK(models::TrainLmElastic(o, &data, t, nullptr, hooks));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].replaced) << events[0].ToString();
  EXPECT_FALSE(events[1].replaced) << events[1].ToString();
  EXPECT_EQ(data_axis, (std::vector<int64_t>{2, 2, 1}));
  for (const RecoveryEvent& e : events) {
    EXPECT_LE(e.steps_repeated(), 25) << e.ToString();
    RecordProperty(absl::StrCat("recovery_", e.number), e.ToString());
  }
  EXPECT_NEAR(final_val, reference, 0.02f);
  RecordProperty("val_loss", absl::StrCat(final_val, " (uninterrupted ", reference, ")"));
}

}  // namespace
}  // namespace causeway::testing
