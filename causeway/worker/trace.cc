#include "causeway/worker/trace.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace causeway {

const char* TraceKindName(TraceKind kind) {
  switch (kind) {
    case TraceKind::kPrepared: return "prepared";
    case TraceKind::kWait: return "wait";
    case TraceKind::kRun: return "run";
    case TraceKind::kTransfer: return "transfer";
  }
  return "?";
}

void TraceRecorder::Record(TraceEvent event) {
  if (!enabled_) return;
  MutexLock lock(&mu_);
  events_.push_back(std::move(event));
}

std::vector<TraceEvent> TraceRecorder::Events() const {
  MutexLock lock(&mu_);
  return events_;
}

void TraceRecorder::Clear() {
  MutexLock lock(&mu_);
  events_.clear();
}

std::string TraceRecorder::ToChromeJson() const {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : Events()) {
    nlohmann::json j;
    j["name"] = e.kind == TraceKind::kRun ? e.name : absl::StrCat(TraceKindName(e.kind), " ", e.name);
    j["cat"] = TraceKindName(e.kind);
    j["pid"] = e.host.value();
    j["tid"] = e.device.value();
    j["ts"] = e.start_us;
    if (e.kind == TraceKind::kPrepared) {
      j["ph"] = "i";
      j["s"] = "t";
    } else {
      j["ph"] = "X";
      j["dur"] = e.duration_us;
    }
    j["args"] = {{"run", e.run.value()}, {"node", e.node}};
    events.push_back(std::move(j));
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
