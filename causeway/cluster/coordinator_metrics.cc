#include "causeway/cluster/coordinator_impl.h"

namespace causeway {

namespace {

// One Prometheus metric family: HELP, TYPE, then its samples.
class Family {
 public:
  Family(std::string name, const char* type, const char* help)
      : name_(std::move(name)) {
    absl::StrAppend(&text_, "# HELP ", name_, " ", help, "\n# TYPE ", name_, " ", type, "\n");
  }
  void Add(const std::vector<std::pair<const char*, std::string>>& labels, double value) {
    absl::StrAppend(&text_, name_);
    if (!labels.empty()) {
      absl::StrAppend(&text_, "{");
      for (size_t i = 0; i < labels.size(); ++i) {
        absl::StrAppend(&text_, i > 0 ? "," : "", labels[i].first, "=\"", labels[i].second, "\"");
      }
      absl::StrAppend(&text_, "}");
    }
    // Counts and byte sizes exactly; fractions with 9 significant digits.
    if (std::floor(value) == value && std::fabs(value) < 9e15) {
      absl::StrAppend(&text_, " ", static_cast<int64_t>(value), "\n");
    } else {
      absl::StrAppend(&text_, " ", absl::StrFormat("%.9g", value), "\n");
    }
    ++samples_;
  }
  void AppendTo(std::string* out) const {
    if (samples_ > 0) absl::StrAppend(out, text_);
  }

 private:
  std::string name_;
  std::string text_;
  int samples_ = 0;
};

}  // namespace

std::string CoordinatorServer::Impl::Metrics() {
  const Topology topology = control_.resources().GetTopology();
  const std::vector<std::shared_ptr<RemoteHost>> hosts = LiveHosts();
  const std::vector<std::pair<IslandId, IslandScheduler*>> schedulers = control_.schedulers();
  int64_t sessions = 0;
  grpc_transport::WriterStats to_clients;
  {
    MutexLock lock(&mu_);
    sessions = static_cast<int64_t>(sessions_.size());
    to_clients = ended_sessions_sent_;
    for (const auto& [p, s] : sessions_) {
      const grpc_transport::WriterStats w = s->writer.stats();
      to_clients.bytes += w.bytes;
      to_clients.messages += w.messages;
      to_clients.queued_bytes += w.queued_bytes;
    }
  }
  Family islands("causeway_islands", "gauge", "Islands with at least one host.");
  islands.Add({}, static_cast<double>(topology.islands().size()));
  Family host_count("causeway_hosts", "gauge", "Hosts (worker processes) in the cluster.");
  host_count.Add({}, static_cast<double>(hosts.size()));
  Family devices("causeway_devices", "gauge", "Devices in the cluster.");
  devices.Add({}, topology.num_devices());
  Family connections("causeway_client_connections", "gauge", "Client connections open.");
  connections.Add({}, static_cast<double>(sessions));
  // The listener's account of TCP connections (plaintext servers; a TLS
  // server's connections are gRPC's own and not counted here).
  Family tcp_open("causeway_tcp_connections", "gauge", "TCP connections open.");
  Family tcp_accepted("causeway_tcp_connections_accepted_total", "counter",
                      "TCP connections admitted (handed to the server once they send).");
  Family tcp_silent("causeway_tcp_connections_closed_silent_total", "counter",
                    "Admitted TCP connections closed for sending nothing within the handshake "
                    "timeout.");
  Family tcp_refused("causeway_tcp_connections_refused_total", "counter",
                     "TCP connections closed on arrival, by reason.");
  Family bytes_total("causeway_transport_bytes_total", "counter",
                     "Message bytes the coordinator sent to and read from clients and each worker.");
  Family messages_total("causeway_transport_messages_total", "counter",
                        "Messages the coordinator sent to and read from clients and each worker.");
  Family unread("causeway_client_unread_bytes", "gauge",
                "Replies queued for clients and not yet written to them.");
  bytes_total.Add({{"peer", "clients"}, {"direction", "sent"}},
                  static_cast<double>(to_clients.bytes));
  bytes_total.Add({{"peer", "clients"}, {"direction", "received"}},
                  static_cast<double>(client_bytes_in_.load()));
  messages_total.Add({{"peer", "clients"}, {"direction", "sent"}},
                     static_cast<double>(to_clients.messages));
  messages_total.Add({{"peer", "clients"}, {"direction", "received"}},
                     static_cast<double>(client_messages_in_.load()));
  unread.Add({}, static_cast<double>(to_clients.queued_bytes));
  if (server_.listener != nullptr) {
    const grpc_transport::ListenerStats l = server_.listener->stats();
    tcp_open.Add({}, static_cast<double>(l.open));
    tcp_accepted.Add({}, static_cast<double>(l.accepted));
    tcp_refused.Add({{"reason", "peer_limit"}}, static_cast<double>(l.refused_peer));
    tcp_refused.Add({{"reason", "server_limit"}}, static_cast<double>(l.refused_total));
    tcp_refused.Add({{"reason", "no_file_descriptors"}}, static_cast<double>(l.shed_no_files));
    tcp_silent.Add({}, static_cast<double>(l.closed_silent));
  }

  // Every host's device counters, asked at once, each answer awaited until
  // one shared deadline: a host that does not answer is reported down.
  std::vector<Future<std::vector<DeviceCounters>>> asked;
  for (const auto& h : hosts) asked.push_back(h->GetCounters(/*reset=*/false));
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  Family up("causeway_host_up", "gauge", "1 if the host answered this scrape in time.");
  Family send_queue("causeway_host_send_queue_bytes", "gauge",
                    "Messages queued for the host and not yet written to its stream.");
  // Launch and busy counters restart from zero when a client measuring its
  // own run resets them (`causeway demo`, `train lm`): gauges, not counters.
  Family launches("causeway_device_launches", "gauge",
                  "Launches the device finished since its counters were last reset.");
  Family failed("causeway_device_failed_launches", "gauge",
                "Launches that failed since the device's counters were last reset.");
  Family busy("causeway_device_busy_seconds", "gauge",
              "Time the device spent in launches since its counters were last reset, collective "
              "waits included: an upper bound on compute time, not a measure of useful work.");
  Family collective("causeway_device_collective_seconds", "gauge",
                    "Of the busy time, the time inside collectives: waiting for peers and "
                    "exchanging data.");
  Family compute("causeway_device_compute_seconds", "gauge",
                 "Busy time outside collectives: the device's own computation since its "
                 "counters were last reset.");
  Family queued_launches("causeway_device_queued_launches", "gauge",
                         "Launches waiting in the device's queue.");
  Family in_use("causeway_device_memory_in_use_bytes", "gauge", "Device memory in use.");
  Family peak("causeway_device_memory_peak_bytes", "gauge", "Most device memory ever in use.");
  Family capacity("causeway_device_memory_capacity_bytes", "gauge", "Device memory in all.");
  Family client_memory("causeway_client_memory_bytes", "gauge",
                       "Device memory granted to the client's arrays and running launches.");
  Family client_waiting("causeway_client_memory_waiting_bytes", "gauge",
                        "Device memory the client asked for and has not been granted yet "
                        "(over its quota, or the device full).");
  Family client_arrays("causeway_client_arrays", "gauge",
                       "The client's arrays with a shard on the device.");
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string island = absl::StrCat(hosts[i]->island().value());
    const std::string host = absl::StrCat(hosts[i]->id().value());
    const absl::StatusOr<std::vector<DeviceCounters>>* c =
        asked[i].AwaitWithTimeout(std::max(absl::ZeroDuration(), deadline - absl::Now()));
    const bool answered = c != nullptr && c->ok();
    up.Add({{"island", island}, {"host", host}}, answered ? 1 : 0);
    const grpc_transport::WriterStats sent = hosts[i]->sent();
    const auto [received_bytes, received_messages] = hosts[i]->received();
    send_queue.Add({{"island", island}, {"host", host}}, static_cast<double>(sent.queued_bytes));
    const std::string peer = absl::StrCat("host ", host);
    bytes_total.Add({{"peer", peer}, {"direction", "sent"}}, static_cast<double>(sent.bytes));
    bytes_total.Add({{"peer", peer}, {"direction", "received"}},
                    static_cast<double>(received_bytes));
    messages_total.Add({{"peer", peer}, {"direction", "sent"}},
                       static_cast<double>(sent.messages));
    messages_total.Add({{"peer", peer}, {"direction", "received"}},
                       static_cast<double>(received_messages));
    if (!answered) continue;
    for (const DeviceCounters& d : **c) {
      const std::vector<std::pair<const char*, std::string>> labels = {
          {"island", island}, {"host", host}, {"device", absl::StrCat(d.device.value())}};
      launches.Add(labels, static_cast<double>(d.launches));
      failed.Add(labels, static_cast<double>(d.failed));
      busy.Add(labels, static_cast<double>(d.busy_us) / 1e6);
      collective.Add(labels, static_cast<double>(d.busy_us - d.compute_us()) / 1e6);
      compute.Add(labels, static_cast<double>(d.compute_us()) / 1e6);
      queued_launches.Add(labels, static_cast<double>(d.queued));
      in_use.Add(labels, static_cast<double>(d.memory_in_use));
      peak.Add(labels, static_cast<double>(d.memory_peak));
      if (absl::StatusOr<DeviceInfo> info = topology.device(d.device); info.ok()) {
        capacity.Add(labels, static_cast<double>(info->memory_bytes));
      }
      for (const ClientUsage& u : d.clients) {
        std::vector<std::pair<const char*, std::string>> by_client = labels;
        by_client.emplace_back("client", absl::StrCat(u.client.value()));
        client_memory.Add(by_client, static_cast<double>(u.memory_bytes));
        client_waiting.Add(by_client, static_cast<double>(u.waiting_bytes));
        client_arrays.Add(by_client, static_cast<double>(u.arrays));
      }
    }
  }

  Family forwarded("causeway_client_runs_forwarded_total", "counter",
                   "Runs of the client the island's scheduler forwarded to its hosts.");
  Family finished("causeway_client_runs_finished_total", "counter",
                  "Runs of the client every host of the island reported done.");
  Family device_s("causeway_client_device_seconds_total", "counter",
                  "Device time of the client's finished runs, as the hosts measured it.");
  Family charged_s("causeway_client_charged_device_seconds_total", "counter",
                   "Device time the scheduler charged the client's share (outliers clipped).");
  Family queued("causeway_client_queued", "gauge", "Runs and releases the scheduler holds.");
  Family weight("causeway_client_weight", "gauge", "The client's weight on the island.");
  for (const auto& [island, s] : schedulers) {
    for (const auto& [client, st] : s->all_client_stats()) {
      const std::vector<std::pair<const char*, std::string>> labels = {
          {"island", absl::StrCat(island.value())}, {"client", absl::StrCat(client.value())}};
      forwarded.Add(labels, static_cast<double>(st.forwarded));
      finished.Add(labels, static_cast<double>(st.finished));
      device_s.Add(labels, static_cast<double>(st.device_us) / 1e6);
      charged_s.Add(labels, static_cast<double>(st.charged_us) / 1e6);
      queued.Add(labels, static_cast<double>(st.queued));
      weight.Add(labels, st.share.weight);
    }
  }
  std::string out;
  for (const Family* f : {&islands, &host_count, &devices, &connections, &tcp_open, &tcp_accepted,
                          &tcp_refused, &tcp_silent, &bytes_total, &messages_total, &unread, &up,
                          &send_queue, &launches, &failed,
                          &busy, &collective, &compute, &queued_launches, &in_use, &peak, &capacity, &client_memory,
                          &client_waiting, &client_arrays, &forwarded, &finished, &device_s,
                          &charged_s, &queued, &weight}) {
    f->AppendTo(&out);
  }
  return out;
}

absl::Status CoordinatorServer::Impl::StartMetrics() {
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  const std::string& l = options_.metrics_listen;
  const size_t colon = l.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(l.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the metrics address ", l, " is not HOST:PORT (port 0..65535)"));
  }
  const std::string host = l.substr(0, colon);
  CW_ASSIGN_OR_RETURN(metrics_,
                      MetricsHttpServer::Start(host, port, [this] { return Metrics(); }));
  metrics_address_ = absl::StrCat(host, ":", metrics_->port());
  return absl::OkStatus();
}

}  // namespace causeway
