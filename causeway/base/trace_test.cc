#include "causeway/base/trace.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace causeway {
namespace {

TraceEvent RunOf(ClientId client, int64_t n, TraceKind kind = TraceKind::kRun) {
  TraceEvent e{kind, HostId(0), DeviceId(0), RunId(ClientIdBase(client) + n), 0, "f", n, 1};
  return e;
}

TEST(TraceRecorderTest, TakeHandsOverOnlyTheNamedClientsEventsOldestFirst) {
  TraceRecorder trace(true);
  for (int i = 0; i < 5; ++i) {
    trace.Record(RunOf(ClientId(1), i));
    trace.Record(RunOf(ClientId(2), i));
  }
  bool more = false;
  std::vector<TraceEvent> first = trace.Take({ClientId(1)}, 3, &more);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_TRUE(more);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(OwnerOfId(first[i].run.value()), ClientId(1));
    EXPECT_EQ(first[i].start_us, i);
  }
  std::vector<TraceEvent> rest = trace.Take({ClientId(1)}, 100, &more);
  EXPECT_EQ(rest.size(), 2u);
  EXPECT_FALSE(more);
  // The other client's are untouched.
  EXPECT_EQ(trace.Events().size(), 5u);
  for (const TraceEvent& e : trace.Events()) EXPECT_EQ(OwnerOfId(e.run.value()), ClientId(2));
}

TEST(TraceRecorderTest, RecordsOnlyWhileEnabledAndMergesWithinItsBound) {
  TraceRecorder trace(false, 4);
  trace.Record(RunOf(ClientId(1), 0));
  EXPECT_TRUE(trace.Events().empty());
  trace.SetEnabled(true);
  trace.Record(RunOf(ClientId(1), 1));
  trace.Merge({RunOf(ClientId(1), 2), RunOf(ClientId(1), 3), RunOf(ClientId(1), 4),
               RunOf(ClientId(1), 5)});
  EXPECT_EQ(trace.Events().size(), 4u);
  EXPECT_EQ(trace.dropped(), 1);
}

TEST(TraceRecorderTest, RecordsOnlyTheNamedClientsOnceToldAndDropsTheRest) {
  TraceRecorder trace(true);
  trace.Record(RunOf(ClientId(1), 0));
  trace.Record(RunOf(ClientId(2), 0));
  trace.SetClients(std::vector<ClientId>{ClientId(2)});
  ASSERT_EQ(trace.Events().size(), 1u);
  EXPECT_EQ(OwnerOfId(trace.Events()[0].run.value()), ClientId(2));
  trace.Record(RunOf(ClientId(1), 1));
  trace.Record(RunOf(ClientId(2), 1));
  EXPECT_EQ(trace.Events().size(), 2u);
  EXPECT_EQ(trace.dropped(), 0);  // left out, not dropped for want of room
  trace.SetClients(std::nullopt);
  trace.Record(RunOf(ClientId(1), 2));
  EXPECT_EQ(trace.Events().size(), 3u);
}

TEST(TraceRecorderTest, FlowIdsDoNotDependOnTheProcess) {
  // Both ends of a piece compute its id, possibly in different processes:
  // a fixed value, not a per-process seeded hash.
  EXPECT_EQ(TraceFlowId(RunId(12345), 3, 1, 0), TraceFlowId(RunId(12345), 3, 1, 0));
  EXPECT_EQ(TraceFlowId(RunId(1), 0, 0, 0), 0xe220a8397b1dcdafULL);
  EXPECT_NE(TraceFlowId(RunId(1), 0, 0, 0), TraceFlowId(RunId(1), 0, 0, 1));
}

TEST(TraceRecorderTest, SchedulerAndClientEventsGetTracksOfTheirOwn) {
  TraceRecorder trace(true);
  trace.NameHost(HostId(0), "island 0 / host 0");
  trace.Record(RunOf(ClientId(7), 1));
  TraceEvent forward = RunOf(ClientId(7), 1, TraceKind::kForward);
  forward.island = IslandId(3);
  trace.Record(forward);
  TraceEvent in_flight = RunOf(ClientId(7), 1, TraceKind::kInFlight);
  in_flight.island = IslandId(3);
  in_flight.duration_us = 50;
  trace.Record(in_flight);
  trace.Record(RunOf(ClientId(7), 1, TraceKind::kSubmit));
  const nlohmann::json root = nlohmann::json::parse(trace.ToChromeJson());
  std::map<std::string, int64_t> process;
  std::map<std::string, int> phases;
  for (const auto& e : root["traceEvents"]) {
    if (e["name"] == "process_name") process[e["args"]["name"]] = e["pid"];
    if (e["ph"] == "b" || e["ph"] == "e") ++phases[e["ph"]];
  }
  ASSERT_EQ(process.size(), 3u);
  EXPECT_TRUE(process.contains("island 0 / host 0"));
  EXPECT_TRUE(process.contains("scheduler"));
  EXPECT_TRUE(process.contains("client 7"));
  EXPECT_NE(process["scheduler"], process["client 7"]);
  EXPECT_NE(process["scheduler"], process["island 0 / host 0"]);
  EXPECT_EQ(phases["b"], 1);
  EXPECT_EQ(phases["e"], 1);
}

}  // namespace
}  // namespace causeway
