#include "causeway/base/trace.h"

#include <algorithm>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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
    case TraceKind::kSubmit: return "submit";
    case TraceKind::kForward: return "forward";
    case TraceKind::kInFlight: return "in flight";
  }
  return "?";
}

uint64_t TraceFlowId(RunId run, int node, int dst_shard, int piece) {
  // Distinct for the first 2^20 nodes, 2^12 shards and 2^12 pieces of a run.
  const uint64_t low = (static_cast<uint64_t>(node) & 0xFFFFF) << 24 |
                       (static_cast<uint64_t>(dst_shard) & 0xFFF) << 12 |
                       (static_cast<uint64_t>(piece) & 0xFFF);
  // The same in every process (absl::Hash is seeded per process, and the
  // two ends of a piece may be in different ones): splitmix64's finaliser.
  uint64_t x = static_cast<uint64_t>(run.value()) * 0x9E3779B97F4A7C15ULL ^ low;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x | 1;  // never 0: 0 is "no flow"
}

void TraceRecorder::Record(TraceEvent event) {
  if (!enabled()) return;
  MutexLock lock(&mu_);
  if (only_.has_value() && !only_->contains(OwnerOfId(event.run.value()))) return;
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  if (event.name.size() > kMaxTraceName) event.name.resize(kMaxTraceName);
  events_.push_back(std::move(event));
}

void TraceRecorder::SetClients(std::optional<std::vector<ClientId>> clients) {
  MutexLock lock(&mu_);
  if (!clients.has_value()) {
    only_.reset();
    return;
  }
  only_.emplace(clients->begin(), clients->end());
  std::erase_if(events_, [this](const TraceEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !only_->contains(OwnerOfId(e.run.value()));
  });
}

void TraceRecorder::Merge(std::vector<TraceEvent> events) {
  MutexLock lock(&mu_);
  for (TraceEvent& e : events) {
    if (events_.size() >= max_events_) {
      ++dropped_;
      continue;
    }
    if (e.name.size() > kMaxTraceName) e.name.resize(kMaxTraceName);
    events_.push_back(std::move(e));
  }
}

std::vector<TraceEvent> TraceRecorder::Take(const std::vector<ClientId>& clients, size_t max,
                                            bool* more) {
  const absl::flat_hash_set<ClientId> whose(clients.begin(), clients.end());
  std::vector<TraceEvent> taken;
  *more = false;
  MutexLock lock(&mu_);
  size_t kept = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    TraceEvent& e = events_[i];
    if (whose.contains(OwnerOfId(e.run.value()))) {
      if (taken.size() < max) {
        taken.push_back(std::move(e));
        continue;
      }
      *more = true;
    }
    if (kept != i) events_[kept] = std::move(e);
    ++kept;
  }
  events_.resize(kept);
  return taken;
}

int64_t TraceRecorder::dropped() const {
  MutexLock lock(&mu_);
  return dropped_;
}

void TraceRecorder::NameHost(HostId host, std::string name) {
  MutexLock lock(&mu_);
  host_names_.emplace_back(host, std::move(name));
}

void TraceRecorder::NameDevice(DeviceId device, std::string name) {
  if (name.size() > kMaxTraceName) name.resize(kMaxTraceName);
  MutexLock lock(&mu_);
  device_names_[device.value()] = std::move(name);
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
  absl::flat_hash_map<int64_t, std::string> device_names;
  {
    MutexLock lock(&mu_);
    names = host_names_;
    device_names = device_names_;
  }
  const std::vector<TraceEvent> recorded = Events();
  nlohmann::json events = nlohmann::json::array();
  // Track names: a process per host, a thread per device.
  absl::flat_hash_map<int64_t, std::string> host_name;
  for (const auto& [host, name] : names) host_name[host.value()] = name;
  // Scheduler and client tracks get processes of their own, numbered past
  // every host id and sorted above the hosts.
  constexpr int64_t kSchedulerPid = int64_t{1} << 40;
  constexpr int64_t kClientPidBase = kSchedulerPid + 1;
  absl::flat_hash_map<int64_t, int64_t> client_pid;  // by client id
  absl::flat_hash_set<int64_t> islands;
  auto track = [&](const TraceEvent& e) -> std::pair<int64_t, int64_t> {
    if (IsSchedulerEvent(e.kind)) return {kSchedulerPid, e.island.value()};
    if (IsClientEvent(e.kind)) {
      const int64_t client = OwnerOfId(e.run.value()).value();
      auto [it, added] = client_pid.try_emplace(client, kClientPidBase + client_pid.size());
      if (added) {
        events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "process_name"},
                          {"pid", it->second}, {"args", {{"name", absl::StrCat("client ", client)}}}});
        events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "process_sort_index"},
                          {"pid", it->second}, {"args", {{"sort_index", -2}}}});
        events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "thread_name"},
                          {"pid", it->second}, {"tid", 0}, {"args", {{"name", "runs submitted"}}}});
      }
      return {it->second, 0};
    }
    return {e.host.value(), e.device.value()};
  };
  absl::flat_hash_set<int64_t> hosts, devices;
  for (const TraceEvent& e : recorded) {
    if (IsSchedulerEvent(e.kind)) {
      if (islands.empty()) {
        events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "process_name"},
                          {"pid", kSchedulerPid}, {"args", {{"name", "scheduler"}}}});
        events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "process_sort_index"},
                          {"pid", kSchedulerPid}, {"args", {{"sort_index", -1}}}});
      }
      if (islands.insert(e.island.value()).second) {
        events.push_back({{"ph", "M"}, {"cat", "__metadata"}, {"name", "thread_name"},
                          {"pid", kSchedulerPid}, {"tid", e.island.value()},
                          {"args", {{"name", absl::StrCat("island ", e.island.value())}}}});
      }
      continue;
    }
    if (IsClientEvent(e.kind)) continue;
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
                        {"args", {{"name", [&] {
                          auto it = device_names.find(e.device.value());
                          return it == device_names.end()
                                     ? absl::StrCat("device ", e.device.value())
                                     : absl::StrCat("device ", e.device.value(), " (",
                                                    it->second, ")");
                        }()}}}});
    }
  }
  // Sends by piece, to draw each transfer from its send.
  absl::flat_hash_map<uint64_t, const TraceEvent*> sends;
  for (const TraceEvent& e : recorded) {
    if (e.kind == TraceKind::kSend && e.flow != 0) sends[e.flow] = &e;
  }
  for (const TraceEvent& e : recorded) {
    const auto [pid, tid] = track(e);
    nlohmann::json j;
    j["name"] = e.kind == TraceKind::kRun ? e.name : absl::StrCat(TraceKindName(e.kind), " ", e.name);
    j["cat"] = TraceKindName(e.kind);
    j["pid"] = pid;
    j["tid"] = tid;
    j["ts"] = e.start_us;
    j["args"] = {{"run", e.run.value()}, {"node", e.node}};
    if (e.kind == TraceKind::kInFlight) {
      // Runs in flight overlap: async spans, one per run.
      j["ph"] = "b";
      j["id"] = absl::StrCat(e.run.value());
      nlohmann::json end = j;
      end["ph"] = "e";
      end["ts"] = e.start_us + e.duration_us;
      events.push_back(std::move(j));
      events.push_back(std::move(end));
      continue;
    }
    if (e.kind == TraceKind::kPrepared || e.kind == TraceKind::kSend ||
        e.kind == TraceKind::kSubmit || e.kind == TraceKind::kForward) {
      j["ph"] = "i";
      j["s"] = "t";
      if (e.kind == TraceKind::kForward) j["args"]["held_us"] = e.duration_us;
    } else {
      j["ph"] = "X";
      j["dur"] = e.duration_us;
    }
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
