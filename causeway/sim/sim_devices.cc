#include "causeway/sim/sim_internal.h"

namespace causeway::sim {

double CollectiveMemberUs(const HostCosts& h, double threads_per_core, bool after_delay) {
  const std::vector<std::pair<double, double>>& points =
      after_delay && !h.collective_member_after_delay_points.empty()
          ? h.collective_member_after_delay_points
          : h.collective_member_points;
  if (points.empty()) {
    return h.collective_member_us +
           std::max(0.0, threads_per_core - 1) * h.collective_member_slope_us;
  }
  if (threads_per_core <= points.front().first) return points.front().second;
  if (threads_per_core >= points.back().first) return points.back().second;
  // The first point beyond; the one before it is at or below.
  const auto above = std::upper_bound(
      points.begin(), points.end(), threads_per_core,
      [](double x, const std::pair<double, double>& p) { return x < p.first; });
  const auto below = above - 1;
  const double t = (threads_per_core - below->first) / (above->first - below->first);
  return below->second + t * (above->second - below->second);
}

void SimDevice::Pump() {
  if (running_ || waiting_ || queue_.empty()) return;
  cluster_->Profiled(&cluster_->mutable_profile().device, [this] { Take(); },
                     /*counts=*/false);
}

void SimDevice::Take() {
  Future<Unit> blocker;
  if (Blocked(queue_.front(), &blocker)) {
    waiting_ = true;
    blocker.OnReady([this](const absl::StatusOr<Unit>&) {
      // Set from inside another event: wake on an event of our own.
      cluster_->loop().After(0, [this] { Wake(); });
    });
    return;
  }
  running_ = true;
  current_ = std::move(queue_.front());
  queue_.pop_front();
  // An input's error is the root cause and passes on unchanged; so does a
  // failed allocation.
  status_ = absl::OkStatus();
  for (const BufferRef& b : current_.inputs) {
    if (const absl::Status& s = b->ready().Await().status(); !s.ok()) {
      status_ = s;
      break;
    }
  }
  for (const BufferRef& b : current_.outputs) {
    if (!status_.ok()) break;
    status_ = b->allocated().Await().status();
  }
  const SimCluster::NodeCost* cost = cluster_->CostOf(current_.info.run, current_.info.node);
  if (!status_.ok() || cost == nullptr) {
    if (status_.ok()) {
      status_ = absl::InternalError(absl::StrCat("the simulator has no cost for node ",
                                                 current_.info.node, " of ",
                                                 current_.info.run.ToString()));
    }
    Finish(-1);
    return;
  }
  Start(SimCluster::Ns(cluster_->costs().host.device_launch_us), cost);
}

void SimDevice::Start(int64_t cpu_ns, const SimCluster::NodeCost* cost) {
  EventLoop& loop = cluster_->loop();
  const int64_t start = loop.now();
  // The thread takes the launch (CPU), then the device computes (no CPU).
  const int64_t computing = thread_->Run(start, cpu_ns);
  cluster_->Count(0, cost->compute_ns);
  if (cost->collectives == 0) {
    loop.At(computing + cost->compute_ns, [this, start] { Finished(start); });
    return;
  }
  Segment(start, computing, cost, 0);
}

void SimDevice::Segment(int64_t start, int64_t from, const SimCluster::NodeCost* cost, int i) {
  EventLoop& loop = cluster_->loop();
  if (i == static_cast<int>(cost->segments.size())) {
    loop.At(from + cost->tail_compute_ns, [this, start] { Finished(start); });
    return;
  }
  // `cost` outlives the launch: a program's costs stay with the cluster
  // (plans are never dropped, and a plan's node costs never move).
  const SimCluster::NodeCost::Segment& segment = cost->segments[i];
  // Each collective is a meeting of the gang, after the compute before it.
  // It costs every member CPU (the hub's bookkeeping, parking and waking):
  // up to collective_after_us of it once the gang has met, the rest when
  // the member arrives, which overlaps the compute of members still
  // computing. A member that parked first resumes a hand-off after the last
  // arrival.
  const HostCosts& h = cluster_->costs().host;
  const double member_us = CollectiveMemberUs(h, thread_->machine()->threads_per_core(),
                                              segment.after_delay);
  const double after_us =
      h.collective_after_us > 0 ? std::min(member_us, h.collective_after_us) : member_us;
  const int64_t arrive_ns = SimCluster::Ns(member_us - after_us);
  const int64_t after_ns = SimCluster::Ns(after_us);
  const int64_t wake_ns = SimCluster::Ns(h.handoff_us);
  // The members of one machine resume a core at a time, in the order they
  // arrived (the last arrival wakes them one by one): the k-th of them is
  // ready once the k / cores before it have had their turn, so each that
  // resumes goes on (its next compute or launch) before the rest have all
  // been served.
  auto resume = [this, start, cost, i, after_ns, wake_ns](int64_t gang_end, int rank, bool last) {
    const int cores = thread_->machine()->cores();
    const int64_t turn = cores > 0 ? rank / cores : 0;
    const int64_t ready = gang_end + (last ? 0 : wake_ns) + turn * after_ns;
    cluster_->loop().At(ready, [this, start, cost, i, after_ns] {
      Segment(start, thread_->Run(cluster_->loop().now(), after_ns), cost, i + 1);
    });
  };
  // The arrival's CPU is charged when the compute ends (an event then, so
  // that the cores are taken in time order).
  loop.At(from + segment.compute_ns, [this, resume = std::move(resume), arrive_ns, i,
                                       run = current_.info.run, node = current_.info.node,
                                       gang = cost->gang,
                                       network = segment.network_ns]() mutable {
    const int64_t arrived = thread_->Run(cluster_->loop().now(), arrive_ns);
    if (gang <= 1) {
      resume(arrived + network, 0, true);
      return;
    }
    cluster_->Rendezvous(run, node, i, gang, network, arrived, thread_->machine(),
                         std::move(resume));
  });
}

void SimDevice::Finish(int64_t start) {
  const int64_t end = cluster_->loop().now();
  const bool ran = start >= 0;
  if (!status_.ok()) {
    status_ = Annotate(status_, absl::StrCat("node ", current_.info.node, " of ",
                                             current_.info.run.ToString(), " on ",
                                             device_.id.ToString(), ", ",
                                             device_.host.ToString()));
    if (current_.on_failure) current_.on_failure(status_);
  }
  ++stats_.launches;
  if (!status_.ok()) ++stats_.failed;
  const int64_t busy_us = ran ? (end - start) / 1000 : 0;
  if (ran) {
    stats_.busy_us += busy_us;
    if (stats_.first_start_us < 0) stats_.first_start_us = start / 1000;
    stats_.last_end_us = end / 1000;
    cluster_->Count(end - start, 0);
  }
  cluster_->NoteDeviceEnd(end);
  const absl::Status status = std::move(status_);
  running_ = false;
  CompleteLaunch(current_, status, busy_us);
  Kick();
}

namespace {

// Bytes an op reads and writes.
int64_t BytesOf(const ir::Function& f, const ir::Instruction& in) {
  int64_t bytes = in.shape.byte_size();
  for (int o : in.operands) bytes += f.instructions()[o].shape.byte_size();
  return bytes;
}

}  // namespace

SimCluster::NodeCost FunctionCost(const ir::Function& f, int gang, const SimCosts& c) {
  SimCluster::NodeCost cost;
  cost.gang = gang;
  double compute_us = 0;
  double network_us = 0;
  double since_collective_us = 0;  // compute since the last collective
  bool delay_since_collective = false;  // ... and whether it slept in a `delay`
  const double ici_bytes_per_us = c.ici.gbytes_per_s * 1e3;
  const double steps = gang > 1 ? std::ceil(std::log2(static_cast<double>(gang))) : 0;
  for (const ir::Instruction& in : f.instructions()) {
    switch (in.op) {
      case ir::OpKind::kParameter:
      case ir::OpKind::kConstant:
      case ir::OpKind::kReshape:
        break;
      case ir::OpKind::kDelay:
        since_collective_us += static_cast<double>(in.delay_us) + c.device.delay_overshoot_us;
        delay_since_collective = true;
        break;
      case ir::OpKind::kMatmul:
      case ir::OpKind::kDotGeneral: {
        // 2 x (result elements) x (contracted size).
        const ir::Shape& lhs = f.instructions()[in.operands[0]].shape;
        int64_t k = 1;
        if (in.op == ir::OpKind::kMatmul) {
          k = lhs.dims.back();
        } else {
          for (int64_t d : in.lhs_contracting) k *= lhs.dims[d];
        }
        since_collective_us += 2.0 * static_cast<double>(in.shape.num_elements()) * k /
                               (c.device.gflops * 1e3);
        break;
      }
      default:
        if (ir::IsCollective(in.op)) {
          // Recursive doubling: log2(gang) latencies, and about twice the
          // operand's bytes over the link (reduce, then spread).
          ++cost.collectives;
          const double bytes =
              static_cast<double>(f.instructions()[in.operands[0]].shape.byte_size());
          const double link_us = gang > 1 ? steps * c.ici.latency_us +
                                                2.0 * (gang - 1) / gang * bytes / ici_bytes_per_us
                                          : 0;
          network_us += link_us;
          cost.segments.push_back({SimCluster::Ns(since_collective_us), SimCluster::Ns(link_us),
                                   delay_since_collective});
          compute_us += since_collective_us;
          since_collective_us = 0;
          delay_since_collective = false;
        } else {
          since_collective_us +=
              static_cast<double>(BytesOf(f, in)) / (c.device.gbytes_per_s * 1e3);
        }
    }
  }
  compute_us += since_collective_us;
  cost.tail_compute_ns = SimCluster::Ns(since_collective_us);
  cost.compute_ns = SimCluster::Ns(compute_us);
  cost.network_ns = SimCluster::Ns(network_us);
  return cost;
}

}  // namespace causeway::sim
