// Tests for causeway/scheduler/island_scheduler.h against fake hosts that
// record what reaches them: FIFO forwarding, the run-ahead bound,
// proportional shares, releases behind runs, the global order of runs that
// span islands, estimates from measured runs, dropped clients and bounds.
#include "causeway/scheduler/island_scheduler.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/limits.h"
#include "causeway/base/mutex.h"
#include "causeway/testing/recording_host.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr IslandId kIsland(0);

class IslandSchedulerTest : public ::testing::Test {
 protected:
  std::unique_ptr<IslandScheduler> Make(SchedulingPolicy policy, absl::Duration run_ahead,
                                        int min_in_flight = 1, IslandId island = kIsland,
                                        int report_fanout = 0) {
    IslandSchedulerOptions o;
    o.report_fanout = report_fanout;
    o.island = island;
    o.policy = policy;
    o.run_ahead = run_ahead;
    o.min_in_flight = min_in_flight;
    o.default_estimate_us = 1000;
    o.max_queued_per_client = 100;
    o.deliver_on_own_thread = false;
    o.host_lookup = [this](HostId h) -> HostService* {
      return h.value() >= 0 && h.value() < 2 ? hosts_[h.value()].get() : nullptr;
    };
    return std::make_unique<IslandScheduler>(std::move(o));
  }
  // A program on both hosts of `island` (and, if given, `other` too).
  std::shared_ptr<ProgramPlan> Plan(int64_t id, IslandId island = kIsland,
                                    IslandId other = IslandId()) {
    auto plan = std::make_shared<ProgramPlan>();
    plan->id = ProgramId(id);
    plan->parameters = {0};
    plan->outputs = {1};
    plan->islands = {island};
    plan->hosts_by_island = {{HostId(0), HostId(1)}};
    if (other.valid()) {
      plan->islands.push_back(other);
      plan->hosts_by_island.push_back({HostId(0), HostId(1)});
    }
    return plan;
  }
  static RunRequest Run(int64_t run, int64_t client, int64_t program = 1) {
    RunRequest r;
    r.program = ProgramId(program);
    r.run = RunId(run);
    r.client = ClientId(client);
    r.arguments = {ArrayId(1000 + run)};
    r.outputs = {ArrayId(2000 + run)};
    return r;
  }
  // Both hosts report `run` finished, each with `device_us` over 1 launch.
  static void Finish(IslandScheduler& s, int64_t run, int64_t device_us = 1000) {
    s.RunFinished(HostId(0), RunId(run), device_us, 1);
    s.RunFinished(HostId(1), RunId(run), device_us, 1);
  }
  // Clients 1 and 2 each submit `n` runs, alternating: client 1's have even
  // ids, client 2's odd.
  static void SubmitAlternating(IslandScheduler& s, int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_OK(s.SubmitRun(Run(2 * i, 1)));
      ASSERT_OK(s.SubmitRun(Run(2 * i + 1, 2)));
    }
  }
  // Finishes the latest forwarded run `n` times; how many of the runs
  // forwarded meanwhile were client 1's.
  int64_t ClientOneRunsInNext(IslandScheduler& s, int n) {
    const size_t before = Forwarded(0).size();
    for (int k = 0; k < n; ++k) Finish(s, Forwarded(0).back());
    const std::vector<int64_t> all = Forwarded(0);
    return std::count_if(all.begin() + static_cast<int64_t>(before), all.end(),
                         [](int64_t r) { return r % 2 == 0; });
  }
  std::vector<int64_t> Forwarded(int host = 0) const {
    std::vector<int64_t> out;
    for (const RunRequest& r : hosts_[host]->runs()) out.push_back(r.run.value());
    return out;
  }

  std::unique_ptr<testing::RecordingHost> hosts_[2] = {
      std::make_unique<testing::RecordingHost>(HostId(0)),
      std::make_unique<testing::RecordingHost>(HostId(1))};
};

TEST_F(IslandSchedulerTest, FifoForwardsEveryRunAtOnceInOrder) {
  auto s = Make(SchedulingPolicy::kFifo, absl::ZeroDuration());
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  for (int i = 0; i < 5; ++i) ASSERT_OK(s->SubmitRun(Run(i, i % 2)));
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(Forwarded(0), Forwarded(1));
  EXPECT_EQ(hosts_[0]->runs()[3].sequence, 3);
}

TEST_F(IslandSchedulerTest, EachHostGetsItsOwnRunsOfABatchInOneMessage) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Seconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  auto second_only = Plan(2);
  second_only->hosts_by_island = {{HostId(1)}};
  ASSERT_OK(s->RegisterProgram(second_only));
  // Hosts sent the same runs share one list; a host with fewer gets only
  // its own, in the island's order, with their own arguments.
  for (const absl::Status& st :
       s->SubmitRuns({Run(0, 7), Run(1, 7, 2), Run(2, 7), Run(3, 7, 2), Run(4, 7)})) {
    ASSERT_OK(st);
  }
  EXPECT_THAT(hosts_[0]->messages(), ElementsAre(ElementsAre(0, 2, 4)));
  EXPECT_THAT(hosts_[1]->messages(), ElementsAre(ElementsAre(0, 1, 2, 3, 4)));
  for (int h = 0; h < 2; ++h) {
    for (const RunRequest& r : hosts_[h]->runs()) {
      EXPECT_THAT(r.arguments, ElementsAre(ArrayId(1000 + r.run.value())));
      EXPECT_EQ(r.program, ProgramId(r.run.value() % 2 == 0 ? 1 : 2));
    }
  }
  EXPECT_EQ(hosts_[0]->runs()[1].sequence, 2);
}

TEST_F(IslandSchedulerTest, RunsWaitUntilTheIslandHasRoom) {
  // 2.5 ms of run-ahead and 1 ms per run: two runs out, the rest held.
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(2500));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  std::vector<int64_t> told;
  Mutex mu;
  std::vector<RunRequest> runs;
  for (int i = 0; i < 5; ++i) runs.push_back(Run(i, 7));
  const std::vector<absl::Status> statuses =
      s->SubmitRuns(runs, [&](size_t i, const absl::Status& st) {
        MutexLock lock(&mu);
        if (st.ok()) told.push_back(static_cast<int64_t>(i));
      });
  for (const absl::Status& st : statuses) ASSERT_OK(st);
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1));
  EXPECT_EQ(s->in_flight(), 2);
  EXPECT_EQ(s->client_stats(ClientId(7)).queued, 3u);
  // A run is out until every host of it reported.
  s->RunFinished(HostId(0), RunId(0), 1000, 1);
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1));
  s->RunFinished(HostId(1), RunId(0), 1000, 1);
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1, 2));
  Finish(*s, 1);
  Finish(*s, 2);
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(Forwarded(0), Forwarded(1));
  MutexLock lock(&mu);
  EXPECT_THAT(told, ElementsAre(0, 1, 2, 3, 4));
}

TEST_F(IslandSchedulerTest, EstimatesComeFromMeasuredRuns) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Milliseconds(10));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  for (int i = 0; i < 30; ++i) ASSERT_OK(s->SubmitRun(Run(i, 1)));
  // Never measured: 1 ms each, ten fit in 10 ms.
  EXPECT_EQ(s->in_flight(), 10);
  // Measured: 6 ms per launch (12 ms of device time on two devices). Only
  // one such run fits; the others already out drain first.
  Finish(*s, 0, 6000);
  for (int i = 1; i < 10; ++i) Finish(*s, i, 6000);
  EXPECT_EQ(s->in_flight(), 1);
  const ClientScheduleStats st = s->client_stats(ClientId(1));
  EXPECT_EQ(st.finished, 10);
  EXPECT_EQ(st.device_us, 10 * 12000);
}

TEST_F(IslandSchedulerTest, DeviceTimeFollowsTheWeights) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  s->SetShare(ClientId(1), ClientShare{1, 0});
  s->SetShare(ClientId(2), ClientShare{3, 0});
  for (int i = 0; i < 80; ++i) {
    ASSERT_OK(s->SubmitRun(Run(2 * i, 1)));
    ASSERT_OK(s->SubmitRun(Run(2 * i + 1, 2)));
  }
  // One run out at a time; finishing it lets the next go.
  for (int k = 0; k < 80; ++k) Finish(*s, Forwarded(0).back());
  int one = 0, two = 0;
  for (int64_t r : Forwarded(0)) (r % 2 == 0 ? one : two) += 1;
  EXPECT_NEAR(two, 3 * one, 3) << one << " vs " << two;
}

TEST_F(IslandSchedulerTest, AnOutlierMeasurementDoesNotHoldItsClientOffTheIsland) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_NO_FATAL_FAILURE(SubmitAlternating(*s, 40));
  // The program settles at 2 ms of device time per run.
  for (int k = 0; k < 10; ++k) Finish(*s, Forwarded(0).back());
  int64_t last = Forwarded(0).back();
  if (last % 2 != 0) {
    Finish(*s, last);
    last = Forwarded(0).back();
  }
  ASSERT_EQ(last % 2, 0);
  // A run of client 1 measured at a thousand times that (its device thread
  // preempted): charged whole, client 2 would have the next thousand runs.
  Finish(*s, last, 1'000'000);
  const int64_t ones = ClientOneRunsInNext(*s, 12);
  EXPECT_GE(ones, 3) << "client 1 was held off after one outlier";
  // What it measured is still reported.
  EXPECT_GE(s->client_stats(ClientId(1)).device_us, 2'000'000);
}

TEST_F(IslandSchedulerTest, AnOutlierInAProgramsFirstRunsIsClippedToo) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_NO_FATAL_FAILURE(SubmitAlternating(*s, 40));
  // One measurement, 2 ms; then client 1's next run is preempted.
  ASSERT_THAT(Forwarded(0), ElementsAre(0));
  Finish(*s, 0);
  ASSERT_THAT(Forwarded(0), ElementsAre(0, 1));
  Finish(*s, 1);
  ASSERT_THAT(Forwarded(0), ElementsAre(0, 1, 2));
  Finish(*s, 2, 1'000'000);
  const int64_t ones = ClientOneRunsInNext(*s, 12);
  EXPECT_GE(ones, 3) << "client 1 was held off after an outlier in the program's third run";
}

TEST_F(IslandSchedulerTest, AGreedyClientDoesNotHoldOthersBehindItsQueue) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Milliseconds(2));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  for (int i = 0; i < 100; ++i) ASSERT_OK(s->SubmitRun(Run(i, 1)));
  ASSERT_OK(s->SubmitRun(Run(500, 2)));
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1));
  Finish(*s, 0);
  // The newcomer goes next, ahead of the 98 runs still queued.
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1, 500));
}

TEST_F(IslandSchedulerTest, AWeightChangeTakesEffect) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(s->SubmitRun(Run(2 * i, 1)));
    ASSERT_OK(s->SubmitRun(Run(2 * i + 1, 2)));
  }
  for (int k = 0; k < 20; ++k) Finish(*s, Forwarded(0).back());
  s->SetShare(ClientId(1), ClientShare{4, 0});
  const size_t before = Forwarded(0).size();
  for (int k = 0; k < 100; ++k) Finish(*s, Forwarded(0).back());
  int one = 0, two = 0;
  const std::vector<int64_t> all = Forwarded(0);
  for (size_t i = before; i < all.size(); ++i) (all[i] % 2 == 0 ? one : two) += 1;
  EXPECT_EQ(one + two, 100);
  EXPECT_NEAR(one, 80, 3) << one << " vs " << two;
}

TEST_F(IslandSchedulerTest, APriorityClassGoesFirst) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  s->SetShare(ClientId(2), ClientShare{1, 1});
  for (int i = 0; i < 5; ++i) ASSERT_OK(s->SubmitRun(Run(i, 1)));
  for (int i = 10; i < 13; ++i) ASSERT_OK(s->SubmitRun(Run(i, 2)));
  for (int k = 0; k < 7; ++k) Finish(*s, Forwarded(0).back());
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 10, 11, 12, 1, 2, 3, 4));
}

TEST_F(IslandSchedulerTest, AReleaseWaitsBehindQueuedRunsThatReadItAndNoOthers) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  ASSERT_OK(s->SubmitRun(Run(1, 1)));  // held: reads array 1001
  s->ReleaseArrays(ClientId(1), {HostId(0), HostId(1)}, {ArrayId(1001), ArrayId(2000)});
  // Array 2000 (run 0's output) is read by no queued run: it goes at once
  // (a device may be waiting for the memory it frees). So does a release of
  // another client.
  s->ReleaseArrays(ClientId(2), {HostId(0)}, {ArrayId(77)});
  EXPECT_THAT(hosts_[0]->events(), ElementsAre("run 0", "release 2000", "release 77"));
  Finish(*s, 0);
  EXPECT_THAT(hosts_[0]->events(),
              ElementsAre("run 0", "release 2000", "release 77", "run 1", "release 1001"));
  EXPECT_THAT(hosts_[1]->events(), ElementsAre("run 0", "release 2000", "run 1", "release 1001"));
}

TEST_F(IslandSchedulerTest, SpanningRunsKeepOneOrderWhateverTheShares) {
  auto a = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1), 1, IslandId(0));
  ASSERT_OK(a->RegisterProgram(Plan(1, IslandId(0), IslandId(1))));
  // Client 2 outranks client 1, but client 1's spanning run came first:
  // client 2's waits for it (its other island forwards them in that order).
  a->SetShare(ClientId(2), ClientShare{1, 1});
  ASSERT_OK(a->SubmitRun(Run(0, 3)));  // occupies the island
  ASSERT_OK(a->SubmitSpanning(Run(1, 1), nullptr));
  ASSERT_OK(a->SubmitSpanning(Run(2, 2), nullptr));
  ASSERT_OK(a->SubmitRun(Run(3, 2)));  // behind client 2's spanning run
  Finish(*a, 0);
  Finish(*a, 1);
  Finish(*a, 2);
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1, 2, 3));
}

TEST_F(IslandSchedulerTest, ASpanningRunOfAClientThatLeftDoesNotHoldLaterOnesBack) {
  auto a = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1), 1, IslandId(0));
  ASSERT_OK(a->RegisterProgram(Plan(1, IslandId(0), IslandId(1))));
  ASSERT_OK(a->SubmitRun(Run(0, 3)));  // occupies the island
  ASSERT_OK(a->SubmitSpanning(Run(1, 1), nullptr));
  ASSERT_OK(a->SubmitSpanning(Run(2, 2), nullptr));
  a->DropClient(ClientId(1));  // run 1's place in the spanning order is given up
  Finish(*a, 0);
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 2));
}

TEST_F(IslandSchedulerTest, SubmitToIslandsChecksEveryIslandFirst) {
  auto a = Make(SchedulingPolicy::kProportionalShare, absl::Milliseconds(10), 1, IslandId(0));
  auto b = Make(SchedulingPolicy::kProportionalShare, absl::Milliseconds(10), 1, IslandId(1));
  ASSERT_OK(a->RegisterProgram(Plan(1, IslandId(0), IslandId(1))));
  // Island 1 does not know the program: nothing reaches island 0's hosts.
  EXPECT_THAT(SubmitToIslands(Run(0, 1), {IslandId(0), IslandId(1)}, {a.get(), b.get()}),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_TRUE(Forwarded(0).empty());
  ASSERT_OK(b->RegisterProgram(Plan(1, IslandId(0), IslandId(1))));
  absl::Status told = absl::UnknownError("not told");
  ASSERT_OK(SubmitToIslands(Run(1, 1), {IslandId(0), IslandId(1)}, {a.get(), b.get()},
                            [&](const absl::Status& s) { told = s; }));
  EXPECT_OK(told);
  EXPECT_THAT(Forwarded(0), ElementsAre(1, 1));  // once per island
}

TEST_F(IslandSchedulerTest, ARunWhoseProgramWentIsDroppedAndItsClientTold) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  absl::Status told = absl::UnknownError("not told");
  ASSERT_OK(s->SubmitRuns({Run(1, 1)}, [&](size_t, const absl::Status& st) { told = st; })[0]);
  s->UnregisterProgram(ProgramId(1));
  Finish(*s, 0);
  EXPECT_THAT(told, StatusIs(absl::StatusCode::kNotFound, HasSubstr("not registered")));
  EXPECT_THAT(Forwarded(0), ElementsAre(0));
}

TEST_F(IslandSchedulerTest, ADroppedClientsRunsNeverReachAHost) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  std::vector<absl::Status> told;
  ASSERT_OK(s->SubmitRuns({Run(1, 2), Run(2, 2)},
                          [&](size_t, const absl::Status& st) { told.push_back(st); })[0]);
  s->DropClient(ClientId(2));
  ASSERT_EQ(told.size(), 2u);
  EXPECT_THAT(told[0], StatusIs(absl::StatusCode::kCancelled, HasSubstr("left before")));
  Finish(*s, 0);
  EXPECT_THAT(Forwarded(0), ElementsAre(0));
  EXPECT_EQ(s->client_stats(ClientId(2)).queued, 0u);
}

TEST_F(IslandSchedulerTest, ARunIsCheckedWhenSubmittedAndTheQueueIsBounded) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  EXPECT_THAT(s->SubmitRun(Run(0, 1, /*program=*/9)), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  RunRequest bad = Run(1, 1);
  bad.arguments.clear();
  EXPECT_THAT(s->SubmitRun(bad), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  for (int i = 0; i < 101; ++i) ASSERT_OK(s->SubmitRun(Run(10 + i, 1)));  // 1 out, 100 held
  EXPECT_THAT(s->SubmitRun(Run(200, 1)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("at most 100")));
  // Another client is not affected.
  EXPECT_OK(s->SubmitRun(Run(201, 2)));
}

TEST_F(IslandSchedulerTest, ALostHostsRunsCountAsFinishedThere) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  ASSERT_OK(s->SubmitRun(Run(1, 1)));
  s->RunFinished(HostId(0), RunId(0), 1000, 1);
  // Host 1 will never report run 0: losing it lets the island move on.
  s->HostLost(HostId(1));
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1));
  EXPECT_EQ(s->client_stats(ClientId(1)).finished, 1);
}

TEST_F(IslandSchedulerTest, ShuttingDownTellsEveryHeldRunsClient) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  std::vector<absl::Status> told;
  ASSERT_OK(s->SubmitRuns({Run(0, 1), Run(1, 1), Run(2, 2)},
                          [&](size_t, const absl::Status& st) { told.push_back(st); })[0]);
  ASSERT_EQ(told.size(), 1u);  // run 0 went; 1 and 2 are held
  s.reset();
  ASSERT_EQ(told.size(), 3u);
  EXPECT_THAT(told[1], StatusIs(absl::StatusCode::kCancelled, HasSubstr("shut down")));
  EXPECT_THAT(told[2], StatusIs(absl::StatusCode::kCancelled, HasSubstr("shut down")));
}

TEST_F(IslandSchedulerTest, ReportsOfUnknownRunsAreIgnored) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  s->RunFinished(HostId(0), RunId(42), 5, 1);
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  Finish(*s, 0);
  Finish(*s, 0);  // twice: the second is unknown
  EXPECT_EQ(s->in_flight(), 0);
  EXPECT_EQ(s->client_stats(ClientId(1)).finished, 1);
}

}  // namespace
}  // namespace causeway

namespace causeway {
namespace {

// Counts the copies made of it.
struct CopyCounter {
  explicit CopyCounter(int* copies) : copies(copies) {}
  CopyCounter(const CopyCounter& o) : copies(o.copies) { ++*copies; }
  CopyCounter& operator=(const CopyCounter&) = delete;
  int* copies;
};

// A batch's callback is what a caller captures its batch in (the
// coordinator: every run id of the batch): copying it per run made a batch
// of n runs take n^2 memory (a client running 30,000 calls ahead took a
// coordinator past 10 GB).
TEST_F(IslandSchedulerTest, ABatchsCallbackIsNotCopiedPerRun) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Milliseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  int copies = 0;
  int told = 0;
  std::vector<RunRequest> runs;
  for (int i = 0; i < 90; ++i) runs.push_back(Run(i, 0));
  const CopyCounter counter(&copies);
  copies = 0;
  const std::vector<absl::Status> statuses = s->SubmitRuns(
      std::move(runs),
      [counter, &told](size_t, const absl::Status& st) { told += st.ok() ? 1 : 0; });
  for (const absl::Status& st : statuses) ASSERT_OK(st);
  EXPECT_LE(copies, 3);
  // Every run is still told once when it goes.
  for (int i = 0; i < 90; ++i) Finish(*s, i, 10);
  EXPECT_EQ(told, 90);
}

TEST_F(IslandSchedulerTest, AHostsRepeatedReportOfARunInFlightCountsOnce) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  s->RunFinished(HostId(0), RunId(0), 1000, 1);
  s->RunFinished(HostId(0), RunId(0), 1000, 1);  // again: ignored
  s->RunFinished(HostId(7), RunId(0), 1000, 1);  // not one of its hosts: ignored
  EXPECT_EQ(s->in_flight(), 1);
  EXPECT_EQ(s->client_stats(ClientId(1)).finished, 0);
  s->HostLost(HostId(0));  // reported already: changes nothing
  EXPECT_EQ(s->in_flight(), 1);
  s->RunFinished(HostId(1), RunId(0), 1000, 1);
  EXPECT_EQ(s->in_flight(), 0);
  EXPECT_EQ(s->client_stats(ClientId(1)).finished, 1);
  EXPECT_EQ(s->client_stats(ClientId(1)).device_us, 2000);  // each host's report once
}

// A chain of 4 calls on 2 devices (one per host): a run's wall time is its
// device time over its 2 devices, not over its 8 launches, so a measured
// 4 ms run fills 2.5 ms of run-ahead on its own.
TEST_F(IslandSchedulerTest, AChainedRunsWallTimeIsItsDeviceTimeOverItsDevices) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(2500));
  std::shared_ptr<ProgramPlan> plan = Plan(1);
  PlanValue value;
  value.shard_hosts = {HostId(0), HostId(1)};
  value.shard_local_device = {0, 0};
  plan->values.assign(5, value);
  for (int k = 1; k <= 4; ++k) {
    PlanNode call;
    call.inputs = {k - 1};
    call.outputs = {k};
    plan->nodes.push_back(call);
  }
  ASSERT_OK(s->RegisterProgram(plan));
  for (int i = 0; i < 4; ++i) ASSERT_OK(s->SubmitRun(Run(i, 7)));
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1));  // the default estimate: 1 ms a run
  s->RunFinished(HostId(0), RunId(0), 4000, 4);
  s->RunFinished(HostId(1), RunId(0), 4000, 4);
  // Run 1 (1 ms, estimated before) is out; run 2 would add 4 ms.
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1));
  Finish(*s, 1);
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1, 2));  // alone: at least one run is out
}

TEST(ReportTreeTest, TheDistinctHostsInOrderFormACompleteTree) {
  const std::vector<HostId> hosts = {HostId(5), HostId(3), HostId(5), HostId(9), HostId(1),
                                     HostId(7), HostId(2)};
  // Distinct, in order: 5 3 9 1 7 2; fanout 2: 5 -> {3, 9}, 3 -> {1, 7}, 9 -> {2}.
  ReportTreeNode root = ReportTreeOf(hosts, HostId(5), 2);
  EXPECT_TRUE(root.member);
  EXPECT_FALSE(root.parent.valid());
  EXPECT_THAT(root.children, ElementsAre(HostId(3), HostId(9)));
  ReportTreeNode three = ReportTreeOf(hosts, HostId(3), 2);
  EXPECT_EQ(three.parent, HostId(5));
  EXPECT_THAT(three.children, ElementsAre(HostId(1), HostId(7)));
  ReportTreeNode nine = ReportTreeOf(hosts, HostId(9), 2);
  EXPECT_EQ(nine.parent, HostId(5));
  EXPECT_THAT(nine.children, ElementsAre(HostId(2)));
  ReportTreeNode two = ReportTreeOf(hosts, HostId(2), 2);
  EXPECT_EQ(two.parent, HostId(9));
  EXPECT_TRUE(two.children.empty());
  EXPECT_FALSE(ReportTreeOf(hosts, HostId(4), 2).member);
  EXPECT_FALSE(ReportTreeOf(hosts, HostId(5), 0).member);  // no tree
  // Fanout 8 over 6 hosts: one level under the root.
  EXPECT_EQ(ReportTreeOf(hosts, HostId(2), 8).parent, HostId(5));
}

// The one check of a configured or received fanout (local, simulated and
// distributed clusters, and a worker's welcome).
TEST(ReportTreeTest, AFanoutOutsideZeroToTheBoundIsRefused) {
  EXPECT_OK(CheckReportFanout(0));
  EXPECT_OK(CheckReportFanout(limits::kMaxReportFanout));
  for (int64_t bad : {int64_t{-1}, int64_t{limits::kMaxReportFanout} + 1, int64_t{1} << 40}) {
    const absl::Status status = CheckReportFanout(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), ::testing::HasSubstr(absl::StrCat("given ", bad)));
  }
}

// With a report tree, only the program's first host (the root) reports a
// run, for every host: the others' reports never reach the scheduler, and
// would be ignored if they did.
TEST_F(IslandSchedulerTest, WithAReportTreeTheRootsReportAccountsTheRun) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1), 1, kIsland,
                /*report_fanout=*/2);
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  ASSERT_OK(s->SubmitRun(Run(1, 1)));
  EXPECT_THAT(Forwarded(0), ElementsAre(0));
  EXPECT_THAT(Forwarded(1), ElementsAre(0));  // every host still gets the run
  s->RunFinished(HostId(1), RunId(0), 1000, 1);
  EXPECT_EQ(s->in_flight(), 1);
  s->RunFinished(HostId(0), RunId(0), 3000, 2);  // the root, for both hosts
  EXPECT_EQ(s->in_flight(), 1);                  // run 1 went out
  EXPECT_THAT(Forwarded(1), ElementsAre(0, 1));
  EXPECT_EQ(s->client_stats(ClientId(1)).finished, 1);
  EXPECT_EQ(s->client_stats(ClientId(1)).device_us, 3000);
  // Losing a host below the root is its parent's to count; losing the root
  // finishes what the root owed.
  s->HostLost(HostId(1));
  EXPECT_EQ(s->in_flight(), 1);
  s->HostLost(HostId(0));
  EXPECT_EQ(s->in_flight(), 0);
}

// A client that leaves frees the room its runs in flight held: their
// reports may never come (a report tree stops gathering them once the
// client's programs are unregistered), and another client's run goes.
TEST_F(IslandSchedulerTest, ALeavingClientsRunsInFlightFreeTheIsland) {
  auto s = Make(SchedulingPolicy::kProportionalShare, absl::Microseconds(1));
  ASSERT_OK(s->RegisterProgram(Plan(1)));
  ASSERT_OK(s->SubmitRun(Run(0, 1)));
  ASSERT_OK(s->SubmitRun(Run(1, 2)));
  EXPECT_THAT(Forwarded(0), ElementsAre(0));
  s->DropClient(ClientId(1));
  EXPECT_THAT(Forwarded(0), ElementsAre(0, 1));
  Finish(*s, 0);  // late: ignored
  Finish(*s, 1);
  EXPECT_EQ(s->in_flight(), 0);
  EXPECT_EQ(s->client_stats(ClientId(2)).finished, 1);
}

}  // namespace
}  // namespace causeway
