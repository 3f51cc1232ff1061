#include "causeway/cluster/coordinator_impl.h"

namespace causeway {

void CoordinatorServer::Impl::MonitorLoop() {
  const absl::Duration period =
      std::max(absl::Milliseconds(50), options_.heartbeat_timeout / 4);
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const absl::Time now = absl::Now();
    for (const auto& h : LiveHosts()) {
      const absl::Duration silent = now - h->last_seen();
      if (silent > options_.heartbeat_timeout) {
        h->Cancel(absl::StrCat("no heartbeat for ", absl::FormatDuration(silent)));
      } else if (h->overflowed()) {
        h->Cancel(absl::StrCat("it fell more than ", RemoteHost::kMaxBacklogBytes >> 20,
                               " MiB behind reading its stream"));
      }
    }
    // A client with more replies unread than its bound: its writer gave up,
    // and its connection ends here (not on the thread that posted, which
    // may hold locks that serve every client).
    MutexLock lock(&mu_);
    for (auto& [p, s] : sessions_) {
      if (s->writer.overflowed() && !s->cancelled) {
        s->cancelled = true;
        CW_LOG(kWarning) << "ending a client connection: more than "
                         << (options_.max_unread_client_bytes >> 20)
                         << " MiB of its replies unread";
        s->context->TryCancel();
      }
    }
  }
}

void CoordinatorServer::Impl::BroadcastPeers() {
  cluster::ToWorker m;
  std::vector<std::shared_ptr<RemoteHost>> live;
  {
    MutexLock lock(&mu_);
    cluster::PeerTable& table = *m.mutable_peers();
    for (auto& [id, h] : hosts_) {
      cluster::Peer& p = *table.add_peers();
      p.set_host(id.value());
      p.set_island(h->island().value());
      p.set_data_address(h->address());
      for (DeviceId d : h->devices()) p.add_devices(d.value());
      const absl::Status lost = h->lost_status();
      p.set_lost(!lost.ok());
      p.set_lost_reason(std::string(lost.message()));
      if (lost.ok()) live.push_back(h);
    }
  }
  for (auto& h : live) h->Send(m);
}

void CoordinatorServer::Impl::BroadcastTopology() {
  cluster::ClientEvent event;
  wire::EncodeTopology(control_.resources().GetTopology(), event.mutable_topology());
  MutexLock lock(&mu_);
  for (auto& [p, s] : sessions_) s->writer.Post(event);
}

void CoordinatorServer::Impl::HostLost(const std::shared_ptr<RemoteHost>& host,
                                       const std::string& reason) {
  const absl::Status status =
      absl::UnavailableError(absl::StrCat(host->Name(), " lost: ", reason));
  host->Lose(status);
  control_.RemoveHost(host->id(), host->island(), std::string(status.message()));
  {
    MutexLock lock(&mu_);
    lost_order_.push_back(host->id());
    while (lost_order_.size() > kMaxLostHosts) {
      hosts_.erase(lost_order_.front());
      lost_order_.pop_front();
    }
  }
  CW_LOG(kWarning) << status.message();
  BroadcastPeers();
  BroadcastTopology();
}

}  // namespace causeway
