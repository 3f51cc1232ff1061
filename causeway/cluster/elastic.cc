#include "causeway/cluster/elastic.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"
#include "causeway/base/trace.h"

namespace causeway {

absl::Status ElasticOptions::Validate() const {
  if (replace_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("the replace timeout must not be negative (",
                                                   absl::FormatDuration(replace_timeout), ")"));
  }
  if (confirm_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("the confirm timeout must be positive (",
                                                   absl::FormatDuration(confirm_timeout), ")"));
  }
  if (min_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("an elastic run needs at least one device (min_devices ", min_devices, ")"));
  }
  if (max_recoveries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_recoveries must not be negative (", max_recoveries, ")"));
  }
  return absl::OkStatus();
}

namespace {

double Secs(absl::Duration d) { return absl::ToDoubleSeconds(d); }

std::vector<HostId> HostsOf(const Topology& t) {
  std::vector<HostId> hosts;
  for (IslandId island : t.islands()) {
    absl::StatusOr<IslandInfo> info = t.island(island);
    if (info.ok()) hosts.insert(hosts.end(), info->hosts.begin(), info->hosts.end());
  }
  return hosts;
}

// Hosts of `before` that `now` no longer has.
std::vector<HostId> Lost(const Topology& before, const Topology& now) {
  std::vector<HostId> lost;
  for (HostId h : HostsOf(before)) {
    if (!now.host(h).ok()) lost.push_back(h);
  }
  return lost;
}

// Errors a lost host (or coordinator) gives a program's calls: the lost
// host's own UNAVAILABLE, a run or save cancelled or aborted with it, or a
// wait on a result that a mute host never gave.
bool MayBeALoss(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string RecoveryEvent::ToString() const {
  std::vector<std::string> hosts;
  hosts.reserve(lost_hosts.size());
  for (HostId h : lost_hosts) hosts.push_back(h.ToString());
  return absl::StrCat(
      "recovery ", number, ": lost ",
      hosts.empty() ? "no host named" : absl::StrJoin(hosts, ", "), " (", cause.message(),
      "); ", devices_before, " -> ", devices_after, " devices, ",
      replaced ? "replaced" : "shrunk", "; detection ",
      absl::StrFormat("%.2f", Secs(detection)), " s, wait ", absl::StrFormat("%.2f", Secs(wait)),
      " s, restore ", absl::StrFormat("%.2f", Secs(restore)), " s; resumed at ", resumed_at, ", ",
      steps_repeated(), " steps repeated");
}

// The runner's state, shared with the attempts it makes (one at a time,
// all on the caller's thread).
class ElasticRunState {
 public:
  ElasticRunState(const ElasticOptions& options, std::function<void(const RecoveryEvent&)> told)
      : options_(options), told_(std::move(told)) {}

  absl::Status Run(const ElasticBody& body);

  void Restored(int64_t step) {
    progress_ = step;
    if (!pending_.has_value()) return;
    RecoveryEvent e = *std::move(pending_);
    pending_.reset();
    e.restore = absl::Now() - attempt_start_;
    e.resumed_at = step;
    if (told_) told_(e);
  }
  void Progress(int64_t steps) {
    progress_ = steps;
    last_progress_ = absl::Now();
  }

 private:
  // The connection, made again if the coordinator's stream ended.
  absl::Status EnsureConnected();
  // Decides what `error` of the attempt that had `before` was: OK with
  // pending_ set for a lost host (replacements awaited), else the error
  // that ends the run. `unfinished`: the recovery that attempt was making
  // (it failed before its state was back), which this one continues.
  absl::Status Recover(const absl::Status& error, const Topology& before,
                       std::optional<RecoveryEvent> unfinished);

  const ElasticOptions& options_;
  const std::function<void(const RecoveryEvent&)> told_;
  std::unique_ptr<RemoteCluster> cluster_;
  int recoveries_ = 0;
  int losses_ = 0;  // recoveries, and the losses that interrupted one
  int64_t progress_ = 0;
  absl::Time attempt_start_;
  absl::Time last_progress_;
  std::optional<RecoveryEvent> pending_;
};

void ElasticAttempt::Restored(int64_t step) { run_->Restored(step); }
void ElasticAttempt::Progress(int64_t steps) { run_->Progress(steps); }

absl::Status ElasticRunState::EnsureConnected() {
  if (cluster_ != nullptr && cluster_->status().ok()) return absl::OkStatus();
  const bool again = cluster_ != nullptr;
  const absl::Status was = again ? cluster_->status() : absl::OkStatus();
  cluster_.reset();
  absl::StatusOr<std::unique_ptr<RemoteCluster>> c = RemoteCluster::Connect(options_.cluster);
  if (!c.ok()) {
    if (!again) return c.status();
    return absl::UnavailableError(absl::StrCat(
        "lost the coordinator at ", options_.cluster.address, " (", was.message(),
        ") and could not connect again (", c.status().message(),
        "): run again once it is back to resume from the last checkpoint"));
  }
  cluster_ = *std::move(c);
  return absl::OkStatus();
}

absl::Status ElasticRunState::Recover(const absl::Status& error, const Topology& before,
                                      std::optional<RecoveryEvent> unfinished) {
  const absl::Time failed = absl::Now();
  // Any error is a loss's when a host of the attempt is gone: an attempt
  // that began as one host left, and a second was leaving, planned its mesh
  // on devices that went (INVALID_ARGUMENT, a mesh larger than the island).
  const bool shrank = cluster_->status().ok() &&
                      !Lost(before, cluster_->resources()->GetTopology()).empty();
  if (!MayBeALoss(error) && !shrank) return error;
  if (!cluster_->status().ok()) {
    return absl::UnavailableError(absl::StrCat(
        "lost the coordinator at ", options_.cluster.address, " (", cluster_->status().message(),
        "); its sessions went with it: run again once it is back to resume from the last "
        "checkpoint (the run failed with: ",
        error.message(), ")"));
  }
  // The coordinator drops a lost host before failing the runs it held, so
  // the topology pushed with that usually shows the loss already; a mute
  // host is dropped after missed heartbeats.
  absl::Status confirmed = cluster_->WaitForTopology(
      [&](const Topology& now) { return !Lost(before, now).empty(); }, options_.confirm_timeout);
  if (!confirmed.ok()) {
    if (!cluster_->status().ok()) return Recover(error, before, std::move(unfinished));
    return error;  // no host left: the error is the program's own
  }
  if (losses_ >= options_.max_recoveries) {
    return absl::Status(error.code(),
                        absl::StrCat("gave up after ", losses_, " losses: ", error.message()));
  }
  ++losses_;
  const std::vector<HostId> lost = Lost(before, cluster_->resources()->GetTopology());
  RecoveryEvent e;
  if (unfinished.has_value()) {
    // Lost again before the state was back: the same recovery goes on, and
    // the failed restore counts as wait.
    e = *std::move(unfinished);
  } else {
    e.number = ++recoveries_;
    e.cause = error;
    e.failed_at = failed;
    e.devices_before = before.num_devices();
    e.detection = failed - std::max(last_progress_, attempt_start_);
    e.progress_before = progress_;
  }
  e.lost_hosts.insert(e.lost_hosts.end(), lost.begin(), lost.end());
  if (options_.on_loss) options_.on_loss(lost);
  // Replacements: as many devices as the attempt before the loss had (a
  // host that rejoins after a restart is a new host).
  if (options_.replace_timeout > absl::ZeroDuration()) {
    absl::Status back = cluster_->WaitForDevices(e.devices_before, options_.replace_timeout);
    if (!back.ok() && back.code() != absl::StatusCode::kDeadlineExceeded) {
      return Recover(error, before, std::nullopt);  // the connection ended
    }
  }
  e.devices_after = cluster_->resources()->GetTopology().num_devices();
  e.replaced = e.devices_after >= e.devices_before;
  e.wait = absl::Now() - e.failed_at;
  CW_LOG(kWarning) << "elastic run: lost " << lost.size() << " host(s) (" << error.message()
                   << "); going on with " << e.devices_after << " of " << e.devices_before
                   << " devices";
  pending_ = std::move(e);
  return absl::OkStatus();
}

absl::Status ElasticRunState::Run(const ElasticBody& body) {
  CW_RETURN_IF_ERROR(options_.Validate());
  for (int number = 0;; ++number) {
    CW_RETURN_IF_ERROR(EnsureConnected());
    Topology topology = cluster_->resources()->GetTopology();
    if (topology.num_devices() < options_.min_devices) {
      if (absl::Status s = cluster_->WaitForDevices(options_.min_devices, options_.replace_timeout);
          !s.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the cluster at ", options_.cluster.address, " has ",
            cluster_->resources()->GetTopology().num_devices(), " devices; the run needs ",
            options_.min_devices, " (", s.message(), ")"));
      }
      topology = cluster_->resources()->GetTopology();
    }
    attempt_start_ = absl::Now();
    last_progress_ = attempt_start_;
    if (pending_.has_value()) pending_->devices_after = topology.num_devices();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(cluster_.get(),
                                                                     options_.client);
    absl::Status done;
    if (!client.ok()) {
      done = client.status();
    } else {
      ElasticAttempt attempt(this, number, client->get(), cluster_.get(), topology);
      done = body(attempt);
      // Its arrays go, on the hosts that are left.
      (*client)->Disconnect();
    }
    if (done.ok()) return done;
    std::optional<RecoveryEvent> unfinished = std::move(pending_);
    pending_.reset();
    CW_RETURN_IF_ERROR(Recover(done, topology, std::move(unfinished)));
  }
}

absl::Status RunElastic(const ElasticOptions& options, const ElasticBody& body,
                        const std::function<void(const RecoveryEvent&)>& on_recovery) {
  ElasticRunState state(options, on_recovery);
  return state.Run(body);
}

}  // namespace causeway
