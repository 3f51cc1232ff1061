// Internal state behind the client API handles. Not part of the public API.
#ifndef CAUSEWAY_CLIENT_CLIENT_CORE_H_
#define CAUSEWAY_CLIENT_CLIENT_CORE_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/mutex.h"
#include "causeway/client/client.h"

namespace causeway::checkpoint {
struct ArrayEntry;
struct Piece;
}  // namespace causeway::checkpoint

namespace causeway::internal {

// The hosts of an array's shards: by mesh position, and the distinct ones,
// ascending, with the shards each holds. Immutable, and shared by every
// array of one plan value (or of one Put): at 2048 devices a copy per array
// would be a copy of 2048 hosts per output of every call.
struct ShardHosts {
  explicit ShardHosts(std::vector<HostId> shard_hosts);
  std::vector<HostId> by_shard;
  std::vector<HostId> distinct;
  std::vector<std::vector<int>> shards_on;  // of distinct[i], ascending
};

struct ArrayState {
  std::shared_ptr<ClientCore> core;
  ArrayId id;
  ir::Shape shape;
  Mesh mesh;
  Sharding sharding;
  std::shared_ptr<const ShardHosts> hosts;  // never null
  // Ready once the run producing the array has reached its hosts (at once in
  // parallel dispatch; later in sequential dispatch).
  Future<Unit> submitted;
  std::atomic<bool> released{false};

  ~ArrayState();
};

// For each distinct shard range of the array, the first mesh position
// holding it (a replicated array: one).
std::vector<int> DistinctShards(const ArrayState& a);

struct CompiledState {
  int64_t id = 0;
  ClientId client;
  // Shared with the plans that call it, which carry it to the hosts; each
  // host compiles it for its devices (HostExecutor::RegisterProgram).
  std::shared_ptr<const ir::Function> function;
  std::string device_kind;  // of every device of `mesh`
  Mesh mesh;
  std::vector<ir::Shape> in_shapes;
  std::vector<ir::Shape> out_shapes;
  std::vector<Sharding> in_shardings;
  std::vector<Sharding> out_shardings;
};

struct TracedValue {
  ir::Shape shape;
  Mesh mesh;
  Sharding sharding;
};

struct TracedNode {
  std::shared_ptr<const CompiledState> function;
  std::vector<int> inputs;
  std::vector<int> outputs;
};

struct TraceState {
  std::shared_ptr<ClientCore> core;
  std::string name;
  std::vector<TracedValue> values;
  std::vector<int> parameters;
  std::vector<TracedNode> nodes;
};

// Where a program output comes from: a plan output, or an argument passed
// straight through.
struct OutputSource {
  bool is_parameter = false;
  int index = 0;
};

struct ProgramState {
  std::shared_ptr<ClientCore> core;
  std::shared_ptr<const ProgramPlan> plan;
  std::vector<OutputSource> outputs;
  // The hosts of each value of `plan`, by value id.
  std::vector<std::shared_ptr<const ShardHosts>> value_hosts;
  // Sequential dispatch: one single-node plan per node of `plan`, with the
  // ids (in `plan`) of the values each consumes and produces.
  struct Step {
    std::shared_ptr<const ProgramPlan> plan;
    std::vector<int> inputs;
    std::vector<int> outputs;
  };
  std::vector<Step> steps;
};

// How many of the client's runs are posted and not yet forwarded (or
// refused, or dropped): shared with the callbacks that settle them,
// which may outlive the client. Thread-safe.
struct RunWindow {
  std::atomic<int64_t> unforwarded{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int> waiters{0};
  std::atomic<bool> stopped{false};
  Mutex mu;
  CondVar cv;
  int64_t resume_at = 0;  // set once, before any run
  // One run posted.
  void Add();
  // One run forwarded, refused or dropped; wakes waiting callers once the
  // count is down to resume_at.
  void Done();
  // Wakes every waiting caller for good.
  void Stop();
};

class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  ClientCore(ClusterConnection* cluster, ClientOptions options, ClientId id);
  ~ClientCore();

  // Starts the background threads. Called once after construction.
  void Start();

  ClientId id() const { return id_; }
  ClusterConnection* cluster() const { return cluster_; }
  const ClientOptions& options() const { return options_; }

  absl::Status CheckConnected() const;
  absl::StatusOr<Mesh> AllocateMesh(const MeshRequest& request);
  // Put's checks without the value; the devices of the mesh's shards.
  absl::StatusOr<std::vector<DeviceInfo>> CheckPut(const ir::Shape& shape, const Mesh& mesh,
                                                   const Sharding& sharding);
  absl::StatusOr<Array> Put(const ir::Literal& value, const Mesh& mesh,
                            const Sharding& sharding);
  absl::StatusOr<CompiledFunction> Compile(const ir::Function& function, const Mesh& mesh,
                                           const CompileOptions& options);
  absl::StatusOr<std::vector<Array>> Call(const CompiledFunction& function,
                                          absl::Span<const Array> args);
  ProgramBuilder NewProgram(std::string name);
  absl::StatusOr<Program> Lower(const TraceState& trace, absl::Span<const int> outputs);
  absl::StatusOr<std::vector<Array>> Run(const std::shared_ptr<const ProgramState>& program,
                                         absl::Span<const Array> args);

  Future<ir::Literal> Fetch(const ArrayState& array);
  Future<Unit> Ready(const ArrayState& array);
  // Checkpoints (client_checkpoint.cc). Has each host write the distinct
  // shards of `array` it holds, once the run making them reached it, as
  // files `prefix`.s<shard> of `folder`; their records, by shard.
  Future<std::vector<checkpoint::Piece>> SavePieces(const ArrayState& array,
                                                    const std::string& folder,
                                                    const std::string& prefix);
  // A new array of `entry`'s dtype and global shape on `mesh` with
  // `sharding`, each shard made by its host from the pieces of the
  // committed checkpoint in `folder` it overlaps. Put's refusals.
  absl::StatusOr<Array> RestoreArray(const std::string& folder,
                                     const checkpoint::ArrayEntry& entry, const Mesh& mesh,
                                     const Sharding& sharding);
  // Queues the release of `array` (batched, sent by the release thread).
  void QueueRelease(ArrayId array, const ShardHosts& hosts);

  void Disconnect();
  absl::Status SetShare(const ClientShare& share);
  Future<Unit> Flush();
  int64_t programs_lowered() const { return programs_lowered_.load(); }
  int64_t peak_unforwarded_runs() const { return run_window_->peak.load(); }

  // Validates that `array` can be used as an argument by this client.
  absl::Status CheckArgument(const Array& array, absl::string_view what) const;
  static const ArrayState& StateOf(const Array& a) { return *a.state_; }

 private:
  Array MakeArray(ArrayId id, const ir::Shape& shape, const Mesh& mesh,
                  const Sharding& sharding, std::shared_ptr<const ShardHosts> hosts,
                  Future<Unit> submitted);
  Array MakeArray(ArrayId id, const PlanValue& value, std::shared_ptr<const ShardHosts> hosts,
                  Future<Unit> submitted);
  // Submits `run`; `forwarded` is told once it reached its hosts (or why
  // it was dropped on the way), but only if the submission was accepted.
  absl::Status Submit(const RunRequest& run, const ProgramPlan& plan,
                      std::function<void(const absl::Status&)> forwarded);
  absl::Status Register(const std::shared_ptr<const ProgramPlan>& plan);
  struct SequentialRun;
  // Sequential dispatch: submits the program node by node, each only once
  // its inputs are ready, from the control thread.
  // `outputs[k]` and `submitted[k]` belong to plan output k.
  void RunSequential(std::shared_ptr<const ProgramState> program, std::vector<Array> args,
                     std::vector<Array> outputs, std::vector<Promise<Unit>> submitted);
  void StepSequential(std::shared_ptr<SequentialRun> run);
  void SubmitStep(std::shared_ptr<SequentialRun> run);
  void PostControl(std::function<void()> task);
  // Waits while run_window_ is full (never with a send_executor).
  void WaitForRunRoom();
  // The outbox: everything the client sends the cluster after validation —
  // runs and releases — in the order the user made the calls. Its thread
  // sends whatever has queued up as one batch (one message per scheduler,
  // and so one per host), so user code never waits on an enqueue and fast
  // callers get batching for free.
  struct OutboxItem {
    // A run; or, if plan is null, the release of `release` (if valid) or a
    // barrier whose one promise is set once the items before it are sent.
    RunRequest run;
    std::shared_ptr<const ProgramPlan> plan;
    std::vector<Promise<Unit>> submitted;
    ArrayId release;
    std::vector<HostId> hosts;
  };
  void Post(OutboxItem item);
  void OutboxLoop();
  // ClientOptions::send_executor's task: sends what has queued.
  void SendQueued();
  // Settles the promises of items never sent (the client disconnected).
  void CancelQueued(std::vector<OutboxItem>& batch);
  void SendBatch(std::vector<OutboxItem>& batch);
  void ControlLoop();

  ClusterConnection* const cluster_;
  const ClientOptions options_;
  const ClientId id_;

  // Ids this client names itself. Each client's ids live in their own range
  // (its client id in the high bits), so ids of different clients never
  // collide on a host or in a collective.
  // options_.run_time_limit as RunRequest::time_limit_us (0: none).
  int64_t RunTimeLimitUs() const {
    const absl::Duration d = options_.run_time_limit;
    if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) return 0;
    return std::max<int64_t>(1, absl::ToInt64Microseconds(d));
  }
  int64_t NextId(std::atomic<int64_t>& counter) const {
    return ClientIdBase(id_) | counter.fetch_add(1);
  }

  std::atomic<int64_t> next_array_{0};
  std::atomic<int64_t> next_run_{0};
  std::atomic<int64_t> next_program_{0};
  std::atomic<int64_t> next_compiled_{0};
  std::atomic<int64_t> programs_lowered_{0};

  mutable Mutex mu_;
  bool connected_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<OutboxItem> outbox_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> control_ ABSL_GUARDED_BY(mu_);
  // Wake the outbox and control threads when their queue gains its first
  // item, or on stopping. Not Mutex::Await: mu_ is taken several times per
  // call (the call cache, ids, the outbox), and an Await()ing thread is
  // woken by every release of it — two idle threads woken per lock, most
  // of a small call's cost on two cores.
  CondVar outbox_cv_;
  CondVar control_cv_;
  const std::shared_ptr<RunWindow> run_window_ = std::make_shared<RunWindow>();
  std::vector<std::shared_ptr<const ProgramPlan>> registered_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Program> call_cache_ ABSL_GUARDED_BY(mu_);
  std::thread outbox_thread_;
  std::thread control_thread_;
};

}  // namespace causeway::internal

#endif  // CAUSEWAY_CLIENT_CLIENT_CORE_H_
