// The device seam: what the runtime (plans, device streams, the client's
// compiler step, the wire codec) knows of a device's code. A kind of device
// (`DeviceKind`) compiles an ir::Function into an Executable that a device
// thread runs over its own shards; collectives are delegated to the runtime
// through CollectiveOps, so a backend knows nothing of hosts or transports.
//
// Adding a device kind: implement DeviceKind, Executable and Device
// (causeway/backend/device.h: memory, copies, launches) in
// causeway/backend/<kind>/, register the kind (RegisterDeviceKind) before a
// cluster of its devices is made, and give those devices its name
// (DeviceInfo::kind). docs/DEVICES.md says how far the runtime above has
// moved onto Device. Transport, client and scheduler are untouched: the
// client compiles with the kind of its mesh's devices, a plan carries its
// kind's name, and a host compiles a plan it receives with that kind.
//
// An Executable is immutable after compilation and may be launched
// concurrently on many devices (each run gets its own temporaries).
#ifndef CAUSEWAY_BACKEND_EXECUTABLE_H_
#define CAUSEWAY_BACKEND_EXECUTABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "causeway/ir/function.h"

namespace causeway::backend {

class Device;  // causeway/backend/device.h

// A collective's group as one member sees it (CollectiveOps::GroupOf).
struct CollectiveGroup {
  int rank = 0;                  // this device's
  std::vector<Device*> devices;  // rank order; null: a member in another process
  // Every member is in this process.
  bool local() const;
};

// INVALID_ARGUMENT unless the operand and result
// shapes of collective `op` fit a group of `group_size` (all_gather: the
// result is the operand with `dimension` times the group; reduce_scatter:
// the reverse; all_to_all: the operand splits along `dimension` and the
// parts concatenate along `concat_dimension`; collective_permute: every
// pair in the group, the shapes equal; all_reduce: the shapes equal).
absl::Status CheckCollectiveShapes(ir::OpKind op, const ir::Shape& in, const ir::Shape& out,
                                   int64_t dimension, int64_t concat_dimension,
                                   absl::Span<const std::pair<int64_t, int64_t>> pairs,
                                   int64_t group_size);

// How a running function reaches its peers. Implemented by the runtime for
// each launch; `index` numbers collective instructions within the function so
// that all participants of one collective agree on which one they are in.
class CollectiveOps {
 public:
  virtual ~CollectiveOps() = default;

  // All-reduces `data` (shape `shape`) in place among the devices of this
  // device's group over mesh `axes`. Blocks until every member contributed.
  // Errors: a peer failed, or the collective was aborted (deadlock watchdog,
  // cancellation).
  virtual absl::Status AllReduce(int index, absl::Span<const std::string> axes,
                                 ir::ReduceKind kind, const ir::Shape& shape,
                                 void* data) = 0;

  // The other collectives read `in` (shape `in_shape`) and write `out`
  // (shape `out_shape`), which never overlap; semantics as in ir::OpKind.
  // Besides the errors of AllReduce, INVALID_ARGUMENT if the shapes do not
  // fit the group (e.g. an all_gather result that is not group-size times
  // the operand). The defaults return UNIMPLEMENTED.
  virtual absl::Status AllGather(int index, absl::Span<const std::string> axes,
                                 const ir::Shape& in_shape, const ir::Shape& out_shape,
                                 int64_t dimension, const void* in, void* out);
  virtual absl::Status ReduceScatter(int index, absl::Span<const std::string> axes,
                                     ir::ReduceKind kind, const ir::Shape& in_shape,
                                     const ir::Shape& out_shape, int64_t dimension,
                                     const void* in, void* out);
  virtual absl::Status AllToAll(int index, absl::Span<const std::string> axes,
                                const ir::Shape& in_shape, const ir::Shape& out_shape,
                                int64_t split_dimension, int64_t concat_dimension,
                                const void* in, void* out);
  virtual absl::Status CollectivePermute(
      int index, absl::Span<const std::string> axes, const ir::Shape& shape,
      absl::Span<const std::pair<int64_t, int64_t>> source_target_pairs, const void* in,
      void* out);

  // A kind's own collectives. The calls above move bytes through host
  // memory (the host-staged hub); a kind whose devices can reach each
  // other's memory (devices of one GPU) may instead move them itself. It
  // asks for the group first, decides from it and the operands alone (so
  // every member decides the same way), and then either makes the call
  // above or meets the group with MeetOnDevices.
  //
  // The group of this device over `axes`: every member's Device in rank
  // order, null for a member in another process, and this device's rank.
  // UNIMPLEMENTED where the runtime offers no group (the default).
  virtual absl::StatusOr<CollectiveGroup> GroupOf(absl::Span<const std::string> axes) const;

  // Meets the group of collective `index` over `axes` as the calls above do
  // (the same rendezvous, deadlock watchdog, timeout and aborts), moving no
  // bytes: each member passes `operand`, the kind's own account of its
  // operands (valid until the call returns); once every member has arrived,
  // the last to arrive runs `perform` over every member's operand in rank
  // order while the others wait, and every member returns its status. Only
  // for a group wholly in this process (CollectiveGroup::local();
  // INVALID_ARGUMENT otherwise). The default returns UNIMPLEMENTED.
  using PerformOnDevices = absl::FunctionRef<absl::Status(absl::Span<const void* const>)>;
  virtual absl::Status MeetOnDevices(int index, absl::Span<const std::string> axes,
                                     ir::OpKind op, const void* operand,
                                     PerformOnDevices perform);

  // Microseconds spent inside the calls above so far (waiting for peers
  // and exchanging data): the part of a launch that is not its own
  // computation. 0 if not measured.
  virtual int64_t micros_in_collectives() const { return 0; }
};

// Per-run context given to Device::Launch.
struct RunContext {
  // May be null if the function has no collectives.
  CollectiveOps* collectives = nullptr;
  // May be null. Set when the device shuts down.
  const std::atomic<bool>* stop = nullptr;
  // May be null. Set when the run is cancelled: its client left (a closed
  // connection, a lost heartbeat, a killed process) or an operator
  // cancelled the client's work (`causeway cluster cancel`).
  const std::atomic<bool>* cancel = nullptr;
  // The run's time on the device ends here (its client's run time limit);
  // InfiniteFuture: no limit.
  absl::Time deadline = absl::InfiniteFuture();

  // OK, or CANCELLED saying why once `stop` or `cancel` is set, or
  // DEADLINE_EXCEEDED once `deadline` passed. A run that could go on
  // indefinitely (a while loop whose condition never fails) checks it
  // between steps and ends rather than holding the device forever; `where`
  // says where it stopped ("while: iteration 12").
  absl::Status Stopped(absl::string_view where) const;
};

// A function compiled for one kind of device, run by its devices
// (Device::Launch) over their own shards.
class Executable {
 public:
  virtual ~Executable() = default;

  const ir::Function& function() const { return function_; }
  // Bytes of temporaries one run uses besides its inputs and outputs.
  virtual int64_t temporary_bytes() const { return 0; }

  // Running it is the device's (Device::Launch): a kind whose memory is
  // the host's also runs it over host pointers (cpu::HostExecutable::Run).

 protected:
  explicit Executable(ir::Function function) : function_(std::move(function)) {}

 private:
  ir::Function function_;
};

struct DeviceSpec;
struct DeviceDescription;

// A kind of device: compiles functions into its executables and makes its
// devices. Thread-safe.
class DeviceKind {
 public:
  virtual ~DeviceKind() = default;
  // The name devices of this kind carry (DeviceInfo::kind), e.g. "cpu".
  virtual absl::string_view name() const = 0;
  // Verifies `function` and compiles it. INVALID_ARGUMENT if it does not
  // verify or uses what this kind cannot run.
  virtual absl::StatusOr<std::shared_ptr<const Executable>> Compile(
      const ir::Function& function) const = 0;
  // Makes the device `spec` describes. INVALID_ARGUMENT for a spec the kind
  // cannot serve; UNAVAILABLE, naming what is missing, when the hardware or
  // its driver is not there.
  virtual absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec) const = 0;
  // What the device `spec` describes would say of itself, before it is made
  // (a worker says it when it joins, before its devices have ids). The
  // default makes the device and asks it; a kind whose devices are costly
  // to make answers from what it knows.
  virtual absl::StatusOr<DeviceDescription> Describe(const DeviceSpec& spec) const;

  // The physical devices of this kind on this machine (GPUs), one line each
  // ("NVIDIA H100 80GB HBM3, driver 580.65, 79.1 GiB"), in the order
  // SelectDevice numbers them; UNAVAILABLE saying why there are none (no
  // driver, no GPU). A kind whose devices are the host's own threads (cpu)
  // returns UNIMPLEMENTED, the default.
  virtual absl::StatusOr<std::vector<std::string>> ListDevices() const;
  // Makes every device of this kind that this process makes from now on run
  // on physical device `index` of ListDevices() (by default device i runs on
  // physical device i modulo their number; `index` < 0 restores that).
  // INVALID_ARGUMENT naming the devices there are when `index` is not one of
  // them; UNAVAILABLE when there are none; UNIMPLEMENTED (the default) for
  // a kind without physical devices to choose from.
  virtual absl::Status SelectDevice(int index) const;
};

// Makes `kind` findable by its name for the rest of the process. Registering
// a second kind of the same name keeps the first (and returns it).
const DeviceKind& RegisterDeviceKind(std::unique_ptr<DeviceKind> kind);
// NOT_FOUND, naming the kinds this process has, if `name` is not registered.
absl::StatusOr<const DeviceKind*> FindDeviceKind(absl::string_view name);
// The names registered so far, sorted.
std::vector<std::string> DeviceKindNames();

}  // namespace causeway::backend

#endif  // CAUSEWAY_BACKEND_EXECUTABLE_H_
