#include "causeway/worker/trace.h"

#include <algorithm>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace causeway {

const char* TraceKindName(TraceKind kind) {
  switch (kind) {
    case TraceKind::kPrepared: return "prepared";
    case TraceKind::kWait: return "wait";
    case TraceKind::kRun: return "run";
    case TraceKind::kTransfer: return "transfer";
    case TraceKind::kSend: return "send";
  }
  return "?";
}

uint64_t TraceFlowId(RunId run, int node, int dst_shard, int piece) {
  // Distinct for the first 2^20 nodes, 2^12 shards and 2^12 pieces of a run.
  const uint64_t low = (static_cast<uint64_t>(node) & 0xFFFFF) << 24 |
                       (static_cast<uint64_t>(dst_shard) & 0xFFF) << 12 |
                       (static_cast<uint64_t>(piece) & 0xFFF);
  return absl::HashOf(run.value(), low) | 1;  // never 0: 0 is "no flow"
}

void TraceRecorder::Record(TraceEvent event) {
  if (!enabled_) return;
  MutexLock lock(&mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

int64_t TraceRecorder::dropped() const {
  MutexLock lock(&mu_);
  return dropped_;
}

void TraceRecorder::NameHost(HostId host, std::string name) {
  MutexLock lock(&mu_);
  host_names_.emplace_back(host, std::move(name));
}

std::vector<TraceEvent> TraceRecorder::Events() const {
  MutexLock lock(&mu_);
  return events_;
}

void TraceRecorder::Clear() {
  MutexLock lock(&mu_);
  events_.clear();
  dropped_ = 0;
}

std::string TraceRecorder::ToChromeJson() const {
  std::vector<std::pair<HostId, std::string>> names;
  {
    MutexLock lock(&mu_);
    names = host_names_;
  }
  const std::vector<TraceEvent> recorded = Events();
  nlohmann::json events = nlohmann::json::array();
  // Track names: a process per host, a thread per device.
  absl::flat_hash_map<int64_t, std::string> host_name;
  for (const auto& [host, name] : names) host_name[host.value()] = name;
  absl::flat_hash_set<int64_t> hosts, devices;
  for (const TraceEvent& e : recorded) {
    if (hosts.insert(e.host.value()).second) {
      auto it = host_name.find(e.host.value());
      const std::string name =
          it != host_name.end() ? it->second : absl::StrCat("host ", e.host.value());
      events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "process_name"}, {"pid", e.host.value()},
                        {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "process_sort_index"}, {"pid", e.host.value()},
                        {"args", {{"sort_index", e.host.value()}}}});
    }
    if (devices.insert(e.device.value()).second) {
      events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "thread_name"}, {"pid", e.host.value()},
                        {"tid", e.device.value()},
                        {"args", {{"name", absl::StrCat("device ", e.device.value())}}}});
    }
  }
  // Sends by piece, to draw each transfer from its send.
  absl::flat_hash_map<uint64_t, const TraceEvent*> sends;
  for (const TraceEvent& e : recorded) {
    if (e.kind == TraceKind::kSend && e.flow != 0) sends[e.flow] = &e;
  }
  for (const TraceEvent& e : recorded) {
    nlohmann::json j;
    j["name"] = e.kind == TraceKind::kRun ? e.name : absl::StrCat(TraceKindName(e.kind), " ", e.name);
    j["cat"] = TraceKindName(e.kind);
    j["pid"] = e.host.value();
    j["tid"] = e.device.value();
    j["ts"] = e.start_us;
    if (e.kind == TraceKind::kPrepared || e.kind == TraceKind::kSend) {
      j["ph"] = "i";
      j["s"] = "t";
    } else {
      j["ph"] = "X";
      j["dur"] = e.duration_us;
    }
    j["args"] = {{"run", e.run.value()}, {"node", e.node}};
    events.push_back(std::move(j));
    if (e.kind != TraceKind::kTransfer || e.flow == 0) continue;
    auto send = sends.find(e.flow);
    if (send == sends.end()) continue;  // a piece of this host's own shards
    const TraceEvent& s = *send->second;
    // On the network (and queued at the receiver) from its send to its copy.
    events.push_back({{"name", "in flight"},
                      {"cat", "transfer"},
                      {"ph", "X"},
                      {"pid", e.host.value()},
                      {"tid", e.device.value()},
                      {"ts", s.start_us},
                      {"dur", std::max<int64_t>(0, e.start_us - s.start_us)},
                      {"args",
                       {{"run", e.run.value()},
                        {"node", e.node},
                        {"from_host", s.host.value()},
                        {"from_device", s.device.value()}}}});
    const std::string id = absl::StrCat(e.flow);
    events.push_back({{"name", "transfer"}, {"cat", "transfer"}, {"ph", "s"}, {"id", id},
                      {"pid", s.host.value()}, {"tid", s.device.value()}, {"ts", s.start_us}});
    events.push_back({{"name", "transfer"}, {"cat", "transfer"}, {"ph", "f"}, {"bp", "e"},
                      {"id", id}, {"pid", e.host.value()}, {"tid", e.device.value()},
                      {"ts", e.start_us}});
  }
  nlohmann::json root;
  root["traceEvents"] = std::move(events);
  root["displayTimeUnit"] = "ms";
  return root.dump();
}

absl::Status TraceRecorder::WriteChromeJson(const std::string& path) const {
  std::ofstream out(path);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot open trace file ", path));
  out << ToChromeJson();
  if (!out) return absl::InternalError(absl::StrCat("failed writing trace file ", path));
  return absl::OkStatus();
}

}  // namespace causeway
