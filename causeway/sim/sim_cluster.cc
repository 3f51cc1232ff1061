#include "causeway/sim/sim_cluster.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"
#include "causeway/base/trace.h"
#include "causeway/ir/function.h"
#include "causeway/resource/resource_manager.h"
#include "causeway/scheduler/island_scheduler.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/host_executor.h"

namespace causeway::sim {

namespace {
int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

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

class SimCluster::Bookkeeping {
 public:
  explicit Bookkeeping(SimCluster* c) : c_(c) {
    if (c_->bookkeeping_depth_++ == 0 && c_->measuring()) {
      c_->bookkeeping_start_ns_ = c_->CpuNow();
    }
  }
  ~Bookkeeping() {
    if (--c_->bookkeeping_depth_ == 0 && c_->measuring()) {
      c_->bookkeeping_ns_ += c_->CpuNow() - c_->bookkeeping_start_ns_;
    }
  }
  Bookkeeping(const Bookkeeping&) = delete;
  Bookkeeping& operator=(const Bookkeeping&) = delete;

 private:
  SimCluster* const c_;
};

bool SimCluster::measuring() const {
  return options_.cpu == CpuCosts::kMeasured || options_.profile_cpu;
}

int64_t SimCluster::CpuNow() const {
  return options_.cpu_clock ? options_.cpu_clock() : ThreadCpuNanos();
}

// A machine's cores. Work ready at some time runs in the first gap of that
// length on any core from then on, so work booked ahead (a gang's members
// after the last arrival, say) does not hold back work that is ready
// earlier but booked later: the cores serve work in the order it is ready,
// as an operating system runs a thread that wakes while others wait.
// cores == 0: as many as its threads.
class SimMachine {
 public:
  SimMachine(int cores, const EventLoop* loop)
      : busy_(static_cast<size_t>(std::max(cores, 0))), loop_(loop) {}
  // Device threads per core (0 with a core per thread).
  double threads_per_core() const {
    return busy_.empty() ? 0 : static_cast<double>(device_threads_) / busy_.size();
  }
  void AddDeviceThread() { ++device_threads_; }
  int cores() const { return static_cast<int>(busy_.size()); }
  // Work ready at `ready` on a thread free at `thread_free`: when it ends.
  int64_t Run(int64_t ready, int64_t thread_free, int64_t cost) {
    if (busy_.empty()) return std::max(ready, thread_free) + cost;
    // Work is booked when it is known, never before the loop's present, so
    // what ended before then can go.
    const int64_t now = loop_->now();
    const int64_t earliest = std::max({ready, thread_free, now});
    size_t best = 0;
    int64_t best_start = std::numeric_limits<int64_t>::max();
    for (size_t c = 0; c < busy_.size(); ++c) {
      Intervals& core = busy_[c];
      while (!core.empty() && core.begin()->second <= now) core.erase(core.begin());
      const int64_t start = FirstGap(core, earliest, cost);
      if (start < best_start) {
        best_start = start;
        best = c;
      }
    }
    Book(&busy_[best], best_start, best_start + cost);
    return best_start + cost;
  }

 private:
  // Busy intervals of a core, start -> end, disjoint and not touching.
  using Intervals = std::map<int64_t, int64_t>;

  static int64_t FirstGap(const Intervals& core, int64_t from, int64_t cost) {
    int64_t start = from;
    auto it = core.upper_bound(start);
    if (it != core.begin() && std::prev(it)->second > start) start = std::prev(it)->second;
    for (; it != core.end() && it->first < start + cost; ++it) start = std::max(start, it->second);
    return start;
  }

  static void Book(Intervals* core, int64_t start, int64_t end) {
    auto next = core->lower_bound(start);
    if (next != core->end() && next->first == end) {  // joins the interval after
      end = next->second;
      next = core->erase(next);
    }
    if (next != core->begin() && std::prev(next)->second == start) {  // and the one before
      std::prev(next)->second = end;
      return;
    }
    core->emplace_hint(next, start, end);
  }

  std::vector<Intervals> busy_;
  const EventLoop* const loop_;
  int device_threads_ = 0;
};

// One thread of the real system: does one thing at a time, on its
// machine's cores.
class SimThread {
 public:
  explicit SimThread(SimMachine* machine) : machine_(machine) {}
  // Work of `cost` ns ready at `ready`: returns when it ends.
  int64_t Run(int64_t ready, int64_t cost) {
    if (cost <= 0) return std::max(ready, free_);
    free_ = machine_->Run(ready, free_, cost);
    busy_ += cost;
    return free_;
  }
  SimMachine* machine() const { return machine_; }
  int64_t busy() const { return busy_; }
  void ResetBusy() { busy_ = 0; }

 private:
  SimMachine* const machine_;
  int64_t free_ = 0;
  int64_t busy_ = 0;  // CPU charged
};

// A device on the virtual clock. Launches run in order; one whose inputs
// or output memory are not ready waits (an event when they are).
class SimDevice final : public LaunchQueue {
 public:
  SimDevice(DeviceInfo device, SimCluster* cluster, SimThread* thread)
      : device_(std::move(device)), cluster_(cluster), thread_(thread) {}

  const DeviceInfo& device() const override { return device_; }
  void Enqueue(Launch launch) override {
    if (stopping_) {
      RefuseLaunch(launch,
                   absl::UnavailableError(absl::StrCat(device_.id.ToString(), " shut down")));
      return;
    }
    queue_.push_back(std::move(launch));
    Kick();
  }
  void EnqueueBatch(std::vector<Launch> launches) override {
    for (Launch& l : launches) Enqueue(std::move(l));
  }
  void Shutdown() override {
    stopping_ = true;
    while (!queue_.empty()) {
      Launch l = std::move(queue_.front());
      queue_.pop_front();
      RefuseLaunch(l, absl::UnavailableError(absl::StrCat(
                          device_.id.ToString(), " shut down with the launch queued")));
    }
  }
  DeviceCounters stats() const override { return stats_; }
  void ResetStats() override { stats_ = DeviceCounters{}; }

 private:
  void Kick() {
    if (kick_pending_ || running_ || waiting_) return;
    kick_pending_ = true;
    cluster_->loop().After(0, [this] {
      kick_pending_ = false;
      Pump();
    });
  }
  void Wake() {
    waiting_ = false;
    Kick();
  }
  // Whether the launch waits for an input or memory; if so, `blocker` is
  // what it waits for.
  static bool Blocked(const Launch& l, Future<Unit>* blocker) {
    for (const BufferRef& b : l.inputs) {
      if (!b->ready().IsReady()) {
        *blocker = b->ready();
        return true;
      }
    }
    for (const BufferRef& b : l.outputs) {
      if (!b->allocated().IsReady()) {
        *blocker = b->allocated();
        return true;
      }
    }
    if (l.scratch != nullptr && !l.scratch->allocated().IsReady()) {
      *blocker = l.scratch->allocated();
      return true;
    }
    return false;
  }
  void Pump();
  void Take();
  void Start(int64_t cpu_ns, const SimCluster::NodeCost* cost);
  // The compute from `from` up to collective #i of the current launch, the
  // gang's meeting, and on to the next (past the last: the launch ends).
  void Segment(int64_t start, int64_t from, const SimCluster::NodeCost* cost, int i);
  void Finish(int64_t start);
  // Finish, profiled: a launch's CPU is its Take's and its Finish's, and it
  // counts once, here.
  void Finished(int64_t start) {
    cluster_->Profiled(&cluster_->mutable_profile().device, [this, start] { Finish(start); });
  }

  const DeviceInfo device_;
  SimCluster* const cluster_;
  SimThread* const thread_;
  std::deque<Launch> queue_;
  Launch current_;
  absl::Status status_;  // of current_
  bool running_ = false;
  bool kick_pending_ = false;
  bool waiting_ = false;
  bool stopping_ = false;
  DeviceCounters stats_;
};

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

// What the scheduler of an island sees as a host: every call reaches the
// real executor; runs arrive as a message on the host's thread.
class SimCluster::HostProxy final : public HostService {
 public:
  // `from_scheduler`: the proxy the island's scheduler calls (its messages
  // leave from the scheduler's thread); otherwise the client's.
  HostProxy(SimCluster* c, HostId id, bool from_scheduler)
      : c_(c), id_(id), from_scheduler_(from_scheduler) {}
  HostId id() const override { return id_; }
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
    c_->NotePlan(*plan);
    return exec()->RegisterProgram(std::move(plan));
  }
  void UnregisterProgram(ProgramId program) override { exec()->UnregisterProgram(program); }
  void EnqueueRun(const RunRequest& run) override { EnqueueRuns({run}); }
  void EnqueueRuns(const std::vector<RunRequest>& runs) override {
    Bookkeeping bookkeeping(c_);
    c_->NoteRuns(runs);
    const HostCosts& h = c_->costs().host;
    int launches = 0;
    for (const RunRequest& r : runs) launches += c_->LaunchesOn(r, id_);
    const double us = h.host_run_us * static_cast<double>(runs.size()) + h.host_launch_us * launches;
    c_->Message(sender(), c_->host_threads_[id_.value()], Ns(us), [this, runs, launches] {
      if (!c_->options_.profile_cpu) {
        exec()->EnqueueRuns(runs);
        return;
      }
      CpuProfile::Kind k;
      c_->Profiled(&k, [&] { exec()->EnqueueRuns(runs); });
      c_->profile_.host_batches.push_back(
          CpuProfile::HostBatch{static_cast<int>(runs.size()), launches, k.ns});
    });
  }
  absl::Status PutShard(ArrayId array, int shard, int local_device, ClientId owner,
                        ir::Literal value) override {
    return exec()->PutShard(array, shard, local_device, owner, std::move(value));
  }
  // A client's reads and releases travel as messages behind the runs sent
  // to the host before them, as on a worker's control stream.
  Future<ir::Literal> FetchShard(ArrayId array, int shard) override {
    return Later<ir::Literal>([=, this] { return exec()->FetchShard(array, shard); });
  }
  Future<Unit> AwaitShard(ArrayId array, int shard) override {
    return Later<Unit>([=, this] { return exec()->AwaitShard(array, shard); });
  }
  Future<Unit> AwaitShards(ArrayId array, const std::vector<int>& shards) override {
    return Later<Unit>([=, this] { return exec()->AwaitShards(array, shards); });
  }
  void ReleaseArrays(absl::Span<const ArrayId> arrays) override {
    FromClient([this, ids = std::vector<ArrayId>(arrays.begin(), arrays.end())] {
      exec()->ReleaseArrays(ids);
    });
  }
  void ReleaseOwner(ClientId owner) override {
    FromClient([this, owner] { exec()->ReleaseOwner(owner); });
  }
  void SetMemoryQuota(ClientId owner, int64_t bytes) override {
    exec()->SetMemoryQuota(owner, bytes);
  }
  void DeliverPiece(ShardPieceMessage piece) override { exec()->DeliverPiece(std::move(piece)); }
  Future<Unit> DriveSpmd(const SpmdLoop&) override {
    return Future<Unit>::Ready(absl::UnimplementedError(
        "the simulator drives SPMD loops itself (SimCluster::HostEnqueue)"));
  }
  Future<std::vector<DeviceCounters>> GetCounters(bool reset) override {
    return exec()->GetCounters(reset);
  }

 private:
  HostExecutor* exec() { return c_->hosts_[id_.value()].get(); }
  SimThread* sender() {
    return from_scheduler_ ? c_->scheduler_threads_[c_->host_island_[id_.value()].value()]
                           : c_->client_sender_;
  }
  // From the scheduler: one message. From the client: through the
  // coordinator (the island's scheduler thread), as a client of a
  // distributed cluster reaches a worker only through the coordinator; so
  // it arrives after every run the scheduler forwarded to the host before.
  void FromClient(std::function<void()> then) {
    Bookkeeping bookkeeping(c_);
    SimThread* host = c_->host_threads_[id_.value()];
    if (from_scheduler_) {
      c_->Message(sender(), host, 0, std::move(then));
      return;
    }
    SimThread* relay = c_->scheduler_threads_[c_->host_island_[id_.value()].value()];
    c_->Message(sender(), relay, 0, [this, relay, host, then = std::move(then)]() mutable {
      c_->Message(relay, host, 0, std::move(then));
    });
  }
  template <typename T>
  Future<T> Later(std::function<Future<T>()> call) {
    Bookkeeping bookkeeping(c_);
    Promise<T> result;
    FromClient([result, call = std::move(call)] {
      call().OnReady([result](const absl::StatusOr<T>& v) mutable { result.Set(v); });
    });
    return result.future();
  }
  SimCluster* const c_;
  const HostId id_;
  const bool from_scheduler_;
};

// What the client sees as an island's scheduler: runs are checked at once
// (as the real one refuses them at once) and arrive as a message on the
// scheduler's thread.
class SimCluster::SchedulerProxy final : public SchedulerService {
 public:
  SchedulerProxy(SimCluster* c, IslandId island) : c_(c), island_(island) {}
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
    c_->NotePlan(*plan);
    return real()->RegisterProgram(std::move(plan));
  }
  void UnregisterProgram(ProgramId program) override { real()->UnregisterProgram(program); }
  absl::Status SubmitRun(RunRequest run) override {
    std::vector<RunRequest> runs;
    runs.push_back(std::move(run));
    return SubmitRuns(std::move(runs), nullptr).front();
  }
  std::vector<absl::Status> SubmitRuns(std::vector<RunRequest> runs,
                                       RunsForwarded forwarded) override {
    std::vector<absl::Status> statuses;
    std::vector<RunRequest> accepted;
    std::vector<size_t> index;
    for (size_t i = 0; i < runs.size(); ++i) {
      statuses.push_back(real()->CheckRun(runs[i]));
      if (statuses.back().ok()) {
        accepted.push_back(std::move(runs[i]));
        index.push_back(i);
      }
    }
    if (accepted.empty()) return statuses;
    Bookkeeping bookkeeping(c_);
    const double us = c_->costs().host.scheduler_run_us * static_cast<double>(accepted.size());
    SimThread* sender = c_->SenderOf(accepted.front().client);
    c_->Message(sender, c_->scheduler_threads_[island_.value()], Ns(us),
                [this, accepted = std::move(accepted), index = std::move(index),
                 forwarded = std::move(forwarded)]() mutable {
                  RunsForwarded told;
                  if (forwarded) {
                    told = [index, forwarded](size_t i, const absl::Status& s) {
                      forwarded(index[i], s);
                    };
                  }
                  std::vector<absl::Status> late;
                  c_->Profiled(&c_->profile_.scheduler, [&] {
                    late = real()->SubmitRuns(std::move(accepted), told);
                  });
                  for (size_t i = 0; i < late.size(); ++i) {
                    if (!late[i].ok() && forwarded) forwarded(index[i], late[i]);
                  }
                });
    return statuses;
  }

 private:
  IslandScheduler* real() { return c_->schedulers_[island_.value()].get(); }
  SimCluster* const c_;
  const IslandId island_;
};

// Reshard pieces between hosts: CPU at each end, the link's latency and
// bandwidth (ICI within an island, DCN between islands).
class SimCluster::Transport final : public DataTransport {
 public:
  explicit Transport(SimCluster* c) : c_(c) {}
  void SendPiece(HostId from, HostId to, ShardPieceMessage piece) override {
    Bookkeeping bookkeeping(c_);
    const SimCosts& costs = c_->costs();
    const bool same_island = c_->host_island_[from.value()] == c_->host_island_[to.value()];
    const LinkCosts& link = same_island ? costs.ici : costs.dcn;
    const int64_t cpu = Ns(costs.host.transfer_us);
    SimThread* sender = c_->host_threads_[from.value()];
    const int64_t sent = sender->Run(c_->loop_.now(), cpu);
    const int64_t wire = from == to ? 0
                                    : Ns(link.latency_us + static_cast<double>(piece.payload_bytes()) /
                                                               (link.gbytes_per_s * 1e3));
    ++c_->counters_.messages;
    auto shared = std::make_shared<ShardPieceMessage>(std::move(piece));
    c_->loop_.At(sent + wire, [this, to, cpu, shared] {
      const int64_t end = c_->host_threads_[to.value()]->Run(c_->loop_.now(), cpu);
      c_->loop_.At(end, [this, to, shared] {
        c_->hosts_[to.value()]->DeliverPiece(std::move(*shared));
      });
    });
  }

 private:
  SimCluster* const c_;
};

absl::StatusOr<std::unique_ptr<SimCluster>> SimCluster::Create(const SimClusterOptions& o) {
  if (o.islands < 1 || o.hosts_per_island < 1 || o.devices_per_host < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a simulated cluster needs at least one island, host and device; given ", o.islands,
        " islands x ", o.hosts_per_island, " hosts x ", o.devices_per_host, " devices"));
  }
  const int64_t devices = int64_t{o.islands} * o.hosts_per_island * o.devices_per_host;
  if (devices > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most 65536 simulated devices; asked for ", devices));
  }
  if (o.cores < 0 || o.client_cores < 0 || o.coordinator_cores < 0) {
    return absl::InvalidArgumentError("core counts must be >= 0");
  }
  CW_RETURN_IF_ERROR(CheckReportFanout(o.report_fanout));
  backend::cpu::Kind();  // plans are compiled for the CPU kind
  auto c = std::unique_ptr<SimCluster>(new SimCluster(o));
  c->Build();
  return c;
}

SimCluster::SimCluster(const SimClusterOptions& options) : options_(options) {}

void SimCluster::Build() {
  const SimClusterOptions& o = options_;
  auto machine = [this](int cores) {
    machines_.push_back(std::make_unique<SimMachine>(cores, &loop_));
    return machines_.back().get();
  };
  auto thread = [this](SimMachine* m) {
    threads_.push_back(std::make_unique<SimThread>(m));
    return threads_.back().get();
  };
  SimMachine* shared = o.one_machine ? machine(o.cores) : nullptr;
  // Apart from the embedded case, the client and the coordinator (the
  // schedulers) have machines of their own, with a core per thread.
  SimMachine* client_machine = shared != nullptr ? shared : machine(o.client_cores);
  client_machine_ = client_machine;
  client_thread_ = thread(client_machine);
  client_sender_ = thread(client_machine);
  client_slots_.emplace_back(client_thread_, client_sender_);
  SimMachine* coordinator = shared != nullptr ? shared : machine(o.coordinator_cores);
  trace_ = std::make_unique<TraceRecorder>(false);
  hub_ = std::make_unique<CollectiveHub>(absl::Minutes(5));
  transport_ = std::make_unique<Transport>(this);
  const std::string kind(backend::cpu::Kind().name());
  Topology topology;
  int64_t next_device = 0;
  int64_t next_host = 0;
  for (int i = 0; i < o.islands; ++i) {
    topology.AddIsland(IslandId(i));
    for (int h = 0; h < o.hosts_per_island; ++h) {
      const HostId host(next_host++);
      topology.AddHost(host, IslandId(i));
      for (int d = 0; d < o.devices_per_host; ++d) {
        topology.AddDevice(DeviceId(next_device++), host, o.device_memory_bytes, kind);
      }
    }
  }
  for (IslandId island : topology.islands()) {
    scheduler_threads_.push_back(thread(coordinator));
    const IslandInfo info = *topology.island(island);
    for (HostId host : info.hosts) {
      SimMachine* m = shared != nullptr ? shared : machine(o.cores);
      host_threads_.push_back(thread(m));
      host_island_.push_back(island);
      HostExecutorOptions ho;
      ho.host = *topology.host(host);
      for (DeviceId d : ho.host.devices) ho.devices.push_back(*topology.device(d));
      ho.device_memory_bytes = o.device_memory_bytes;
      ho.clock = loop_.clock();
      ho.trace = trace_.get();
      ho.collectives = hub_.get();
      ho.transport = transport_.get();
      ho.housekeeping_period = absl::ZeroDuration();
      ho.on_run_done = [this, host, island](HostId, RunId run, int64_t device_us, int launches) {
        // A report to the island's scheduler.
        Bookkeeping bookkeeping(this);
        Message(host_threads_[host.value()], scheduler_threads_[island.value()],
                Ns(costs().host.scheduler_report_us),
                [this, host, island, run, device_us, launches] {
                  Profiled(&profile_.scheduler_report, [&] {
                    schedulers_[island.value()]->RunFinished(host, run, device_us, launches);
                  });
                });
        NoteReported(run);
      };
      ho.report_fanout = o.report_fanout;
      ho.report_to_parent = [this, host](HostId parent, const SubtreeReport& report) {
        // A report to the parent host, which gathers it with its own
        // (the same work for it as a report is for the scheduler).
        Bookkeeping bookkeeping(this);
        Message(host_threads_[host.value()], host_threads_[parent.value()],
                Ns(costs().host.scheduler_report_us), [this, parent, report] {
                  Profiled(&profile_.host_report,
                           [&] { hosts_[parent.value()]->ChildReported(report); });
                });
        NoteReported(report.run);
      };
      ho.make_queue = [this, m, thread](const DeviceInfo& d) -> std::unique_ptr<LaunchQueue> {
        m->AddDeviceThread();
        auto device = std::make_unique<SimDevice>(d, this, thread(m));
        devices_.push_back(device.get());
        return device;
      };
      absl::StatusOr<std::unique_ptr<HostExecutor>> executor =
          HostExecutor::Create(std::move(ho));
      CW_CHECK_OK(executor.status());  // the cpu kind, registered above, makes every device
      hosts_.push_back(*std::move(executor));
      host_proxies_.push_back(std::make_unique<HostProxy>(this, host, false));
      scheduler_host_proxies_.push_back(std::make_unique<HostProxy>(this, host, true));
    }
    IslandSchedulerOptions so;
    so.island = island;
    so.policy = o.scheduling;
    so.run_ahead = o.run_ahead;
    so.deliver_on_own_thread = false;
    so.on_run_accounted = o.on_run_accounted;
    so.report_fanout = o.report_fanout;
    so.clock = loop_.clock();
    so.host_lookup = [this](HostId h) -> HostService* {
      if (h.value() < 0 || h.value() >= static_cast<int64_t>(scheduler_host_proxies_.size())) {
        return nullptr;
      }
      return scheduler_host_proxies_[h.value()].get();
    };
    schedulers_.push_back(std::make_unique<IslandScheduler>(std::move(so)));
    scheduler_proxies_.push_back(std::make_unique<SchedulerProxy>(this, island));
  }
  resources_ = std::make_unique<ResourceManager>(std::move(topology));
}

SimCluster::~SimCluster() {
  // What is still in flight finishes first (a launch a device holds keeps
  // buffers of the hosts' stores).
  loop_.RunFor(std::numeric_limits<int64_t>::max());
  hub_->Shutdown();
  for (auto& h : hosts_) h->store().Shutdown();
  for (auto& h : hosts_) h->Shutdown();
  schedulers_.clear();
  hosts_.clear();
}

ResourceService* SimCluster::resources() { return resources_.get(); }

SchedulerService* SimCluster::scheduler(IslandId island) {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(scheduler_proxies_.size())) {
    return nullptr;
  }
  return scheduler_proxies_[island.value()].get();
}

HostService* SimCluster::host(HostId host) {
  if (host.value() < 0 || host.value() >= static_cast<int64_t>(host_proxies_.size())) {
    return nullptr;
  }
  return host_proxies_[host.value()].get();
}

HostExecutor* SimCluster::executor(HostId host) {
  if (host.value() < 0 || host.value() >= static_cast<int64_t>(hosts_.size())) return nullptr;
  return hosts_[host.value()].get();
}

IslandScheduler* SimCluster::island_scheduler(IslandId island) {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(schedulers_.size())) {
    return nullptr;
  }
  return schedulers_[island.value()].get();
}

absl::Status SimCluster::SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                                   std::function<void(const absl::Status&)> forwarded) {
  std::vector<IslandScheduler*> schedulers;
  for (IslandId island : islands) {
    IslandScheduler* s = island_scheduler(island);
    if (s == nullptr) return absl::NotFoundError(absl::StrCat("no ", island.ToString()));
    CW_RETURN_IF_ERROR(s->CheckRun(run));
    schedulers.push_back(s);
  }
  if (islands.empty()) return absl::InvalidArgumentError("a run on no island");
  Message(SenderOf(run.client), scheduler_threads_[islands[0].value()],
          Ns(costs().host.scheduler_run_us * static_cast<double>(islands.size())),
          [run, islands, schedulers, forwarded = std::move(forwarded)]() mutable {
            const absl::Status s = SubmitToIslands(run, islands, schedulers, forwarded);
            if (!s.ok() && forwarded) forwarded(s);
          });
  return absl::OkStatus();
}

void SimCluster::ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                               std::vector<ArrayId> arrays) {
  absl::flat_hash_map<int64_t, std::vector<HostId>> by_island;
  std::vector<int64_t> order;
  for (HostId h : hosts) {
    if (h.value() < 0 || h.value() >= static_cast<int64_t>(host_island_.size())) continue;
    const int64_t island = host_island_[h.value()].value();
    if (!by_island.contains(island)) order.push_back(island);
    by_island[island].push_back(h);
  }
  for (int64_t island : order) {
    Message(SenderOf(client), scheduler_threads_[island], 0,
            [this, client, island, mine = by_island[island], arrays] {
              schedulers_[island]->ReleaseArrays(client, mine, arrays);
            });
  }
}

absl::Status SimCluster::SetClientShare(ClientId client, const ClientShare& share) {
  CW_RETURN_IF_ERROR(CheckClientShare(share));
  for (auto& s : schedulers_) s->SetShare(client, share);
  for (auto& h : hosts_) h->SetMemoryQuota(client, share.memory_quota_bytes);
  return absl::OkStatus();
}

void SimCluster::DropClient(ClientId client) {
  for (auto& s : schedulers_) s->DropClient(client);
}

int SimCluster::AddClient() {
  threads_.push_back(std::make_unique<SimThread>(client_machine_));
  SimThread* calls = threads_.back().get();
  threads_.push_back(std::make_unique<SimThread>(client_machine_));
  client_slots_.emplace_back(calls, threads_.back().get());
  return static_cast<int>(client_slots_.size()) - 1;
}

void SimCluster::BindClient(ClientId client, int slot) {
  CW_CHECK(slot >= 0 && slot < static_cast<int>(client_slots_.size())) << "no client slot " << slot;
  client_slot_[client] = slot;
}

SimThread* SimCluster::SenderOf(ClientId client) const {
  auto it = client_slot_.find(client);
  return it == client_slot_.end() ? client_sender_ : client_slots_[it->second].second;
}

void SimCluster::PostClientSend(std::function<void()> send, int slot) {
  CW_CHECK(slot >= 0 && slot < static_cast<int>(client_slots_.size())) << "no client slot " << slot;
  OnThread(client_slots_[slot].second, Ns(costs().host.client_send_us),
           [this, send = std::move(send)] { Profiled(&profile_.client_send, send); });
}

void SimCluster::ClientCall(std::function<void()> then, int slot) {
  CW_CHECK(slot >= 0 && slot < static_cast<int>(client_slots_.size())) << "no client slot " << slot;
  OnThread(client_slots_[slot].first, Ns(costs().host.client_run_us),
           [this, then = std::move(then)] { Profiled(&profile_.client_call, then); });
}

// Long enough for any experiment; a loop still waiting past it in virtual
// time is stuck in an endless chain of events, not slow.
constexpr int64_t kVirtualLimitNs = int64_t{3600} * 1'000'000'000;

absl::Status SimCluster::CallRepeatedly(int64_t n, const std::function<absl::Status()>& call,
                                        int slot) {
  int64_t left = n;
  absl::Status status;
  std::function<void()> next = [&] {
    status = call();
    left = status.ok() ? left - 1 : 0;
    if (left > 0) ClientCall(next, slot);
  };
  if (left > 0) ClientCall(next, slot);
  if (!loop_.RunUntil([&] { return left == 0; }, kVirtualLimitNs)) {
    return absl::InternalError("the simulated client stopped making calls");
  }
  return status;
}

absl::Status SimCluster::Await(const Future<Unit>& done, absl::string_view what) {
  if (!loop_.RunUntil([&] { return done.IsReady(); }, kVirtualLimitNs)) {
    return absl::InternalError(
        absl::StrCat(what, " never finished (", loop_.pending(), " events pending)"));
  }
  return done.Await().status();
}

void SimCluster::OnThread(SimThread* thread, int64_t cost_ns, std::function<void()> work) {
  if (options_.cpu == CpuCosts::kCalibrated) {
    loop_.At(thread->Run(loop_.now(), cost_ns), std::move(work));
    return;
  }
  // Measured: the work runs once the thread is free, and the thread is
  // charged the CPU it took (what it sends leaves when it starts).
  const int64_t start = thread->Run(loop_.now(), 0);
  loop_.At(start, [this, thread, work = std::move(work)]() mutable {
    const int64_t free = thread->Run(loop_.now(), 0);
    if (free > loop_.now()) {  // something else took the thread meanwhile
      OnThread(thread, 0, std::move(work));
      return;
    }
    const int64_t cpu0 = CpuNow();
    const int64_t bookkeeping0 = bookkeeping_ns_;
    work();
    const int64_t cpu = CpuNow() - cpu0 - (bookkeeping_ns_ - bookkeeping0);
    thread->Run(loop_.now(), std::max<int64_t>(1, cpu));
  });
}


void SimCluster::Profiled(CpuProfile::Kind* kind, const std::function<void()>& work,
                          bool counts) {
  if (!options_.profile_cpu) {
    work();
    return;
  }
  const int64_t start = CpuNow();
  const int64_t bookkeeping0 = bookkeeping_ns_;
  work();
  kind->ns += CpuNow() - start - (bookkeeping_ns_ - bookkeeping0);
  kind->bookkeeping_ns += bookkeeping_ns_ - bookkeeping0;
  if (counts) ++kind->count;
}

void SimCluster::HostEnqueue(HostId host, RunRequest run, std::vector<ArrayId> release,
                             std::function<void()> then) {
  Bookkeeping bookkeeping(this);
  NoteRuns({run});
  const HostCosts& h = costs().host;
  const int64_t cost = Ns(h.host_run_us + LaunchesOn(run, host) * h.host_launch_us);
  OnThread(host_threads_[host.value()], cost,
           [this, host, run = std::move(run), release = std::move(release),
            then = std::move(then)] {
             hosts_[host.value()]->EnqueueRun(run);
             if (!release.empty()) hosts_[host.value()]->ReleaseArrays(release);
             if (then) then();
           });
}

DecisionStats SimCluster::decision_stats(IslandId island) const {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(schedulers_.size())) return {};
  return schedulers_[island.value()]->decision_stats();
}

ClientScheduleStats SimCluster::scheduler_stats(IslandId island, ClientId client) const {
  if (island.value() < 0 || island.value() >= static_cast<int64_t>(schedulers_.size())) return {};
  return schedulers_[island.value()]->client_stats(client);
}

void SimCluster::ResetCounters() {
  counters_ = SimCounters{};
  events_base_ = loop_.events_run();
  for (auto& t : threads_) t->ResetBusy();
  for (SimDevice* d : devices_) d->ResetStats();
}

SimCounters SimCluster::counters() const {
  SimCounters c = counters_;
  c.events = loop_.events_run() - events_base_;
  for (const auto& [calls, sends] : client_slots_) c.client_busy_ns += calls->busy() + sends->busy();
  for (SimThread* t : scheduler_threads_) c.scheduler_busy_ns = std::max(c.scheduler_busy_ns, t->busy());
  for (SimThread* t : host_threads_) c.host_busy_ns = std::max(c.host_busy_ns, t->busy());
  for (const auto& [key, t] : connections_) {
    if (std::get<0>(key) == scheduler_threads_[0]->machine()) {
      c.coordinator_connections_busy_ns += t->busy();
      c.coordinator_connection_max_busy_ns =
          std::max(c.coordinator_connection_max_busy_ns, t->busy());
    }
  }
  for (const SimDevice* d : devices_) c.launches += d->stats().launches;
  return c;
}

void SimCluster::NotePlan(const ProgramPlan& plan) {
  if (plans_.contains(plan.id)) return;
  PlanCost pc;
  for (const PlanNode& node : plan.nodes) {
    if (node.kind != PlanNodeKind::kCall || node.function == nullptr || node.outputs.empty()) {
      pc.nodes.push_back(NodeCost{});
      continue;
    }
    const PlanValue& out = plan.values[node.outputs[0]];
    const int gang = static_cast<int>(out.mesh.devices().size());
    pc.nodes.push_back(FunctionCost(*node.function, gang, costs()));
    for (const HostId h : out.shard_hosts) ++pc.launches[h];
  }
  plans_.emplace(plan.id, std::move(pc));
}

void SimCluster::NoteRuns(const std::vector<RunRequest>& runs) {
  for (const RunRequest& r : runs) {
    auto it = run_program_.find(r.run);
    if (it != run_program_.end()) {
      ++it->second.hosts_left;
    } else {
      run_program_.emplace(r.run, RunEntry{r.program, 1});
    }
  }
}

void SimCluster::NoteReported(RunId run) {
  auto it = run_program_.find(run);
  if (it != run_program_.end() && --it->second.hosts_left <= 0) run_program_.erase(it);
}

int SimCluster::LaunchesOn(const RunRequest& run, HostId host) const {
  auto it = plans_.find(run.program);
  if (it == plans_.end()) return 0;
  auto h = it->second.launches.find(host);
  return h == it->second.launches.end() ? 0 : h->second;
}

const SimCluster::NodeCost* SimCluster::CostOf(RunId run, int node) const {
  auto it = run_program_.find(run);
  if (it == run_program_.end()) return nullptr;
  auto p = plans_.find(it->second.program);
  if (p == plans_.end() || node < 0 || node >= static_cast<int>(p->second.nodes.size())) {
    return nullptr;
  }
  return &p->second.nodes[node];
}

void SimCluster::Count(int64_t busy_ns, int64_t compute_ns) {
  counters_.device_busy_ns += busy_ns;
  counters_.device_compute_ns += compute_ns;
}

void SimCluster::Message(SimThread* from, SimThread* to, int64_t cost_ns,
                         std::function<void()> then) {
  Bookkeeping bookkeeping(this);
  const HostCosts& h = costs().host;
  const int64_t handoff = Ns(h.handoff_us);
  ++counters_.requests;
  if (from->machine() == to->machine()) {
    // In-process: the receiver is woken (a hand-off's latency).
    ++counters_.messages;
    const int64_t sent = from->Run(loop_.now(), 0);
    loop_.At(sent + handoff, [this, to, cost_ns, then = std::move(then)]() mutable {
      OnThread(to, cost_ns, std::move(then));
    });
    return;
  }
  // Between machines, as the real servers do it: the sender queues the
  // message for the connection's writer thread (a hand-off), which sends
  // whatever has queued by the time it gets to it as one batch (CPU once);
  // after the network's latency the connection's reader on the other
  // machine receives the batch (CPU once) and hands each message on.
  SimThread* writer = Connection(from->machine(), to, /*reader=*/false);
  Outbox& box = outboxes_[writer];
  box.items.emplace_back(cost_ns, std::move(then));
  if (box.open) return;  // joins the batch the writer sends next
  box.open = true;
  const int64_t queued = from->Run(loop_.now(), 0) + handoff;
  loop_.At(queued, [this, writer, to] { SendBatch(writer, to); });
}

void SimCluster::SendBatch(SimThread* writer, SimThread* to) {
  const int64_t free = writer->Run(loop_.now(), 0);
  if (free > loop_.now()) {  // still sending the last batch; this one grows
    loop_.At(free, [this, writer, to] { SendBatch(writer, to); });
    return;
  }
  Outbox& box = outboxes_[writer];
  std::vector<std::pair<int64_t, std::function<void()>>> items;
  items.swap(box.items);
  box.open = false;
  ++counters_.messages;
  const HostCosts& h = costs().host;
  const int64_t message = Ns(h.message_us);
  const int64_t on_wire = writer->Run(loop_.now(), message) + Ns(costs().dcn.latency_us);
  SimThread* reader = Connection(to->machine(), writer, /*reader=*/true);
  auto batch = std::make_shared<std::vector<std::pair<int64_t, std::function<void()>>>>(
      std::move(items));
  loop_.At(on_wire, [this, reader, to, message, batch] {
    const int64_t received = reader->Run(loop_.now(), message) + Ns(costs().host.handoff_us);
    loop_.At(received, [this, to, batch] {
      for (auto& [cost, then] : *batch) OnThread(to, cost, std::move(then));
    });
  });
}

SimThread* SimCluster::Connection(SimMachine* machine, SimThread* peer, bool reader) {
  SimThread*& t = connections_[{machine, peer, reader}];
  if (t == nullptr) {
    threads_.push_back(std::make_unique<SimThread>(machine));
    t = threads_.back().get();
  }
  return t;
}

void SimCluster::Rendezvous(RunId run, int node, int collective, int gang, int64_t network_ns,
                            int64_t arrival, const SimMachine* machine,
                            std::function<void(int64_t, int, bool)> done) {
  loop_.At(arrival, [this, run, node, collective, gang, network_ns, machine,
                     done = std::move(done)]() mutable {
    const std::tuple<RunId, int, int> key(run, node, collective);
    Gang& g = gangs_[key];
    g.waiting.emplace_back(machine, std::move(done));
    if (++g.arrived < gang) return;
    std::vector<std::pair<const SimMachine*, std::function<void(int64_t, int, bool)>>> members =
        std::move(g.waiting);
    gangs_.erase(key);
    const int64_t end = loop_.now() + network_ns;
    absl::flat_hash_map<const SimMachine*, int> ranks;
    for (size_t i = 0; i < members.size(); ++i) {
      members[i].second(end, ranks[members[i].first]++, i + 1 == members.size());
    }
  });
}

}  // namespace causeway::sim
