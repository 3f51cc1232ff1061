// The Causeway client API: the one entry point of user programs.
//
// Modelled on XLA's IFRT. Every call that makes an array (Put, Call, Run)
// returns its handles at once; its synchronous status covers only argument
// and validation errors. Whether data is ready — or failed — is a future on
// the array. Metadata (dtype, shape, mesh, sharding) is always known
// locally. Ids of arrays, runs and programs come from the client's own id
// space, so no call waits for a reply before the next can use its outputs.
//
// Reads are the slow path: Fetch() returns a future; a blocking read per step
// costs at least a full trip through the devices that produce the array.
// Dropping the last handle of an array releases it; releases are batched and
// sent off the caller's thread, always after every earlier use of the array.
//
//   auto client = Client::Connect(cluster).value();
//   Mesh mesh = client->AllocateMesh({{"data", 8}}).value();
//   CompiledFunction f = client->Compile(fn, mesh, {in, out}).value();
//   Array x = client->Put(literal, mesh, sharding).value();
//   std::vector<Array> y = client->Call(f, {x}).value();  // returns at once
//   absl::StatusOr<ir::Literal> v = y[0].Fetch().Await();
//
// Thread safety: Client, Program and handles are thread-safe.
#ifndef CAUSEWAY_CLIENT_CLIENT_H_
#define CAUSEWAY_CLIENT_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "causeway/async/future.h"
#include "causeway/base/ids.h"
#include "causeway/ir/function.h"
#include "causeway/ir/literal.h"
#include "causeway/topology/mesh.h"
#include "causeway/transport/services.h"

namespace causeway {

namespace internal {
class ClientCore;
struct ArrayState;
struct CompiledState;
struct ProgramState;
struct TraceState;
}  // namespace internal

// How a run's nodes are dispatched. kSequential prepares a node only after
// its predecessors are done; it exists to measure what parallel dispatch
// buys.
enum class DispatchMode { kParallel, kSequential };

struct ClientOptions {
  DispatchMode dispatch = DispatchMode::kParallel;
  // This client's claim on each island's device time, against the other
  // clients with work queued there (docs/SCHEDULING.md).
  ClientShare share;
  // Where the client's sends to the cluster run. Empty: a thread of the
  // client's own, which sends whatever has queued as one batch. Set: each
  // time something is queued with nothing queued before, a task that sends
  // what has queued by the time it runs is handed to it; the task must run
  // after the call that queued returns, and may run after Disconnect (it
  // then does nothing). For drivers that own every thread of the control
  // plane, such as the simulator's event loop.
  std::function<void(std::function<void()> send)> send_executor;
  // Runs this client has submitted that their island scheduler has not yet
  // forwarded (they wait in its queue, behind the island's run-ahead): at
  // this many, a call waits until a quarter of them went. Bounds the memory
  // of a client that dispatches faster than the devices run. 0: no bound.
  // Not applied with a send_executor (the driver owns every thread).
  int64_t max_unforwarded_runs = int64_t{1} << 14;
  // How long each launch of this client's runs may run on its device
  // (zero or infinite: no limit). A launch still running after it (a loop
  // that does not end) stops at its next check (a loop's next iteration)
  // with DEADLINE_EXCEEDED, which its run's outputs carry; one not yet
  // started is not counted. Not a bound on a single kernel.
  absl::Duration run_time_limit = absl::ZeroDuration();
};

// A handle to a logical, immutable, sharded array. Copyable; the array is
// released when the last handle to it goes (or on Release()).
class Array {
 public:
  Array() = default;

  bool valid() const { return state_ != nullptr; }
  ArrayId id() const;
  ClientId client() const;
  const ir::Shape& shape() const;  // global
  const Mesh& mesh() const;
  const Sharding& sharding() const;

  // The whole array on the host, once every shard is ready; or the error
  // that poisoned it, with its root cause (node, device, host).
  Future<ir::Literal> Fetch() const;
  // Ready when every shard is, or failed with the root cause.
  Future<Unit> Ready() const;

  // Releases the array now. Any later use of a handle to it is an
  // INVALID_ARGUMENT error; pending uses are unaffected.
  void Release();
  bool released() const;

 private:
  friend class internal::ClientCore;
  explicit Array(std::shared_ptr<internal::ArrayState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::ArrayState> state_;
};

// Whether Compile checks that every result declared replicated over a mesh
// axis is the same on every device along it (causeway/ir/replication.h).
// kOff is for a function whose results agree by construction in ways the
// check cannot see; a result that does differ is then read from one device.
enum class ReplicationCheck { kEnforce, kOff };

struct CompileOptions {
  // One per parameter / result. Parameter and result shapes of the function
  // are per-shard; the global shape follows from the sharding.
  std::vector<Sharding> in_shardings;
  std::vector<Sharding> out_shardings;
  ReplicationCheck replication_check = ReplicationCheck::kEnforce;
};

// A function compiled for a mesh. Copyable handle.
class CompiledFunction {
 public:
  CompiledFunction() = default;
  const ir::Function& function() const;
  const Mesh& mesh() const;
  const std::vector<ir::Shape>& in_shapes() const;   // global
  const std::vector<ir::Shape>& out_shapes() const;  // global
  const std::vector<Sharding>& in_shardings() const;
  const std::vector<Sharding>& out_shardings() const;

 private:
  friend class internal::ClientCore;
  friend class ProgramBuilder;
  explicit CompiledFunction(std::shared_ptr<const internal::CompiledState> state)
      : state_(std::move(state)) {}
  std::shared_ptr<const internal::CompiledState> state_;
};

// A value inside a program being traced.
struct TracedArray {
  int value = -1;
  ir::Shape shape;
  Mesh mesh;
  Sharding sharding;
};

class Program;

// Traces several calls into one program: a DAG lowered once (transfers
// between meshes inserted, registered with every host and scheduler it
// touches) and then run many times. Not thread-safe.
class ProgramBuilder {
 public:
  ProgramBuilder(ProgramBuilder&&) noexcept;
  ProgramBuilder& operator=(ProgramBuilder&&) noexcept;
  ~ProgramBuilder();

  // A program argument: an array of `shape` (global) on `mesh` with
  // `sharding`. INVALID_ARGUMENT if the sharding does not fit.
  absl::StatusOr<TracedArray> Parameter(const ir::Shape& shape, const Mesh& mesh,
                                        const Sharding& sharding);
  // A call of `function` on traced arguments; arguments on another mesh or
  // with another sharding are moved/resharded automatically.
  // INVALID_ARGUMENT on count or shape mismatch.
  absl::StatusOr<std::vector<TracedArray>> Call(const CompiledFunction& function,
                                                absl::Span<const TracedArray> args);
  // Lowers and registers the program. Each output must be a traced value.
  absl::StatusOr<Program> Build(absl::Span<const TracedArray> outputs);

 private:
  friend class internal::ClientCore;
  explicit ProgramBuilder(std::unique_ptr<internal::TraceState> state);
  std::unique_ptr<internal::TraceState> state_;
};

// A lowered, registered program. Copyable handle.
class Program {
 public:
  Program() = default;
  ProgramId id() const;
  // Number of nodes after lowering (calls and inserted reshards).
  int num_nodes() const;

  // The lowered plan, as registered with hosts and schedulers. For tools
  // that drive hosts directly (the multi-controller baseline of
  // `causeway bench`); ordinary code never needs it.
  std::shared_ptr<const ProgramPlan> plan() const;

  // Runs the program on `args` and returns its outputs at once.
  // INVALID_ARGUMENT if an argument's count, shape, mesh or sharding does
  // not match, or it was released or belongs to another client.
  absl::StatusOr<std::vector<Array>> Run(absl::Span<const Array> args) const;

 private:
  friend class internal::ClientCore;
  explicit Program(std::shared_ptr<internal::ProgramState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::ProgramState> state_;
};

class Client {
 public:
  // Connects to a cluster (an embedded LocalCluster is a ClusterConnection).
  // `cluster` must outlive the client and every handle it made.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClusterConnection* cluster,
                                                         ClientOptions options = {});
  // Disconnects: see Disconnect().
  ~Client();

  ClientId id() const;

  // A mesh of the given axes on one island (the first that fits, or the
  // one given). See ResourceService::AllocateMesh for errors.
  absl::StatusOr<Mesh> AllocateMesh(std::vector<MeshAxis> axes, IslandId island = IslandId());
  absl::StatusOr<Mesh> AllocateMesh(const MeshRequest& request);

  // Splits `value` into shards and stores them on the mesh's devices.
  // Returns at once; the array is ready when every shard is stored.
  // INVALID_ARGUMENT if the sharding does not fit; RESOURCE_EXHAUSTED if a
  // shard is larger than a device's whole memory.
  absl::StatusOr<Array> Put(const ir::Literal& value, const Mesh& mesh, const Sharding& sharding);
  // The checks of Put for a value of `shape`, without the value: a caller
  // that has yet to build the literal (a strided or broadcast numpy array,
  // a file) refuses a put that cannot fit before spending host memory on it.
  absl::Status CheckPut(const ir::Shape& shape, const Mesh& mesh, const Sharding& sharding);

  // Verifies and compiles `function` for `mesh`; output shapes and shardings
  // are fixed here. INVALID_ARGUMENT on a malformed function, a result
  // declared replicated over an axis along which its value differs (unless
  // options.replication_check is kOff), a sharding
  // that does not fit, or a collective over an axis the mesh lacks.
  absl::StatusOr<CompiledFunction> Compile(const ir::Function& function, const Mesh& mesh,
                                           const CompileOptions& options);

  // Builds the function from its parameters' global shapes, as Python's
  // compile does, instead of per-shard shapes worked out by hand: `build`
  // gets each parameter's shard shape under options.in_shardings on `mesh`
  // (what one device sees) and returns the per-shard function, which is then
  // compiled as above. INVALID_ARGUMENT naming the parameter if a global
  // shape does not fit its sharding (rank, an axis the mesh lacks, a
  // dimension that does not divide), or if the built function's parameters
  // differ from those shard shapes.
  using ShardFunctionBuilder =
      std::function<absl::StatusOr<ir::Function>(absl::Span<const ir::Shape> shard_shapes)>;
  absl::StatusOr<CompiledFunction> Compile(absl::Span<const ir::Shape> global_parameter_shapes,
                                           const Mesh& mesh, const CompileOptions& options,
                                           const ShardFunctionBuilder& build);

  // Calls `function` on `args` (a one-node program, lowered once per
  // argument placement and cached). Returns the outputs at once.
  absl::StatusOr<std::vector<Array>> Call(const CompiledFunction& function,
                                          absl::Span<const Array> args);

  ProgramBuilder NewProgram(std::string name);

  // Calls return before their runs reach the cluster (they are sent, in
  // order and batched, by the client's outbox thread). The returned future
  // is ready once every call made before it has been handed to the island
  // schedulers. Never needed for correctness; useful to observe the runtime
  // (tests, benchmarks).
  Future<Unit> Flush();

  // Drops every array of this client on every host (memory is freed as
  // pending work that uses it finishes), unregisters its programs, and
  // makes every later call fail with FAILED_PRECONDITION. Idempotent.
  void Disconnect();

  // Changes this client's share of every island from its next run on.
  // INVALID_ARGUMENT for a weight that is not finite and positive;
  // UNIMPLEMENTED where the cluster does not schedule by shares.
  absl::Status SetShare(const ClientShare& share);

  // Number of programs lowered so far (Call's cache misses included).
  int64_t programs_lowered() const;
  // The most runs this client has had submitted and not yet forwarded by
  // their scheduler at once (ClientOptions::max_unforwarded_runs bounds it).
  int64_t peak_unforwarded_runs() const;

 private:
  friend class Checkpointer;
  explicit Client(std::shared_ptr<internal::ClientCore> core) : core_(std::move(core)) {}
  std::shared_ptr<internal::ClientCore> core_;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLIENT_CLIENT_H_
