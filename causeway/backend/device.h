// The device seam's runtime half: a Device owns one accelerator's memory,
// its copies and its launches. The host's store and executor reach device
// memory only through it, so a kind whose memory the host cannot address (a
// GPU) plugs in under the same runtime as the `cpu` kind, whose memory is
// the host's. The compile half is DeviceKind (causeway/backend/executable.h),
// which also makes the devices (DeviceKind::CreateDevice).
//
// Budgets stay above the seam: the object store decides whether an
// allocation may be made (capacity, quotas, back-pressure); the device only
// gives the bytes. Every operation is asynchronous and reports through a
// Completion; the cpu kind completes inline, a GPU kind when its queue has
// run the work. Copies are not ordered with anything: the runtime sequences
// them by their completions (an output is marked ready only once the launch
// or copy that wrote it completed). Launches are ordered among themselves:
// they run, and complete, in the order they were started, each seeing what
// the ones before it wrote, so a device stream keeps several in flight
// (max_launches_in_flight) and starts a launch that reads an output of one
// still running.
#ifndef CAUSEWAY_BACKEND_DEVICE_H_
#define CAUSEWAY_BACKEND_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "causeway/backend/executable.h"
#include "causeway/base/ids.h"

namespace causeway::backend {

// Told once when an operation finished, with its outcome. Runs on a thread
// of the device's choosing (the calling thread when the operation completes
// at once), never under a lock of the device's; it may start further
// operations on the device.
using Completion = absl::AnyInvocable<void(absl::Status) &&>;

// Bytes on one device, opaque above the kind: only the device's copies and
// launches reach them. Owned by whoever allocated it (the store's buffer);
// destroying it returns the bytes to the device, from any thread, once no
// operation on it is in flight (the runtime holds the allocation until its
// completions ran).
class DeviceAllocation {
 public:
  virtual ~DeviceAllocation() = default;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  int64_t bytes() const { return bytes_; }

 protected:
  explicit DeviceAllocation(int64_t bytes) : bytes_(bytes) {}

 private:
  const int64_t bytes_;
};

// A box copied between two row-major arrays: `extent` elements of
// `element_bytes` from `src_offset` of an array of `src_dims` to
// `dst_offset` of one of `dst_dims`. A copy of contiguous bytes is the
// one-dimensional box Flat() makes. What a reshard moves between shards.
struct BoxCopy {
  std::vector<int64_t> src_dims;
  std::vector<int64_t> src_offset;
  std::vector<int64_t> dst_dims;
  std::vector<int64_t> dst_offset;
  std::vector<int64_t> extent;
  int64_t element_bytes = 1;

  // `bytes` from byte `src_offset` of the source to `dst_offset` of the
  // destination, whose sizes are `src_size` and `dst_size` bytes.
  static BoxCopy Flat(int64_t src_offset, int64_t src_size, int64_t dst_offset,
                      int64_t dst_size, int64_t bytes);

  // Bytes of one side's array (product of its dims times element_bytes).
  int64_t src_array_bytes() const;
  int64_t dst_array_bytes() const;
  int64_t bytes() const;  // of the box

  // INVALID_ARGUMENT unless the ranks agree, the box lies inside both
  // arrays, element_bytes > 0, and each array fits its side's `*_capacity`
  // bytes (an allocation's, or the host memory's given by the caller).
  absl::Status Validate(int64_t src_capacity, int64_t dst_capacity) const;
};

// What a kind is told about each device it makes.
struct DeviceSpec {
  DeviceId id;
  int local_index = 0;       // among this host's devices
  int64_t memory_bytes = 0;  // the budget the store will keep for it
};

// What a device says of itself (topology, `cluster status`, traces).
struct DeviceDescription {
  std::string kind;         // DeviceKind::name()
  std::string name;         // e.g. "host CPU", or the GPU's name
  std::string driver;       // empty when there is none
  int64_t memory_bytes = 0; // physical memory behind it (0: the host's)
};

// One device of a host. Made by its kind; owned by the host executor, and
// outlives every allocation it gave and every operation it accepted.
// Thread-safe: any thread may start operations concurrently.
class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceDescription& description() const = 0;

  // Memory: `bytes` (>= 0) of device memory; INVALID_ARGUMENT if negative,
  // RESOURCE_EXHAUSTED, naming the device, when it has no room although the
  // store's budget allowed it (memory taken outside the runtime,
  // fragmentation).
  virtual absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(int64_t bytes) = 0;

  // For kinds whose memory is the host's (cpu): the host address of an
  // allocation's bytes, letting the runtime skip a staging copy. Null for
  // every other kind; nothing may rely on it being non-null.
  virtual std::byte* HostAddress(const DeviceAllocation& allocation) const;

  // Copies; `box` is checked (BoxCopy::Validate against the allocation's
  // size; host memory is taken to hold the box's array) and a bad one
  // completes at once with INVALID_ARGUMENT. Host memory, allocations and
  // `box` need live only until the call returns for `box`, and until `done`
  // runs for the rest.
  //   host -> device
  virtual void CopyIn(const void* src, DeviceAllocation& dst, const BoxCopy& box,
                      Completion done) = 0;
  //   device -> host
  virtual void CopyOut(const DeviceAllocation& src, void* dst, const BoxCopy& box,
                       Completion done) = 0;
  //   device -> device, both allocations of this device
  virtual void CopyWithin(const DeviceAllocation& src, DeviceAllocation& dst, const BoxCopy& box,
                          Completion done) = 0;
  //   this device -> `peer`, another device of the same host. The default
  //   stages through host memory (CopyOut, then peer.CopyIn); a kind with
  //   peer access (two devices of one GPU) overrides it.
  virtual void CopyToPeer(const DeviceAllocation& src, Device& peer, DeviceAllocation& dst,
                          const BoxCopy& box, Completion done);

  // Makes `executable` (compiled by this device's kind) ready to launch
  // here: what a kind does once per executable and device (uploading its
  // constants, building its pipelines or graphs) is done now, when a program
  // is registered, and not inside its first launch. Idempotent and
  // thread-safe; Launch still loads an executable that was never loaded.
  // The error (out of memory, a driver's refusal) names the device. The
  // default loads nothing.
  virtual absl::Status Load(const Executable& executable);

  // Runs `executable` (compiled by this device's kind) over `inputs` (one
  // per parameter, never written) into `outputs` (one per result, of the
  // results' sizes). `done` gets the kernel's error, if any. The allocations,
  // `executable` and `context`'s collectives stay alive until `done` runs.
  // Collectives go through `context.collectives` (the host-staged hub, or a
  // kind's own). Launches run and complete in the order they were started
  // (see the top of this file); an input may be the output of a launch
  // started before and not yet completed, never of one started after.
  virtual void Launch(const Executable& executable,
                      absl::Span<const DeviceAllocation* const> inputs,
                      absl::Span<DeviceAllocation* const> outputs, const RunContext& context,
                      Completion done) = 0;

  // How many launches the device stream keeps started and not completed
  // (>= 1): a kind that completes on another thread (a GPU's queue) takes
  // more, so its queue never runs dry while the host prepares the next. The
  // default, 1, starts a launch only once the last completed.
  virtual int max_launches_in_flight() const { return 1; }
};

// Copies `box` from host memory at `src` to host memory at `dst`: the cpu
// kind's copies, and the staging of any kind that copies through the host.
// REQUIRES: box.Validate passed for the two buffers' sizes.
void CopyHostBox(const void* src, void* dst, const BoxCopy& box);

// For kinds' Launch: INVALID_ARGUMENT, naming `device`, unless there is one
// allocation per parameter and per result of `executable`, each at least its
// shape's size.
absl::Status CheckLaunchOperands(const Executable& executable,
                                 absl::Span<const DeviceAllocation* const> inputs,
                                 absl::Span<DeviceAllocation* const> outputs, DeviceId device);

// One line for people and the topology (DeviceInfo::description): the name,
// then the driver and memory where known, e.g. "NVIDIA H200, driver
// 550.54.15, 139.8 GiB" or "host CPU".
std::string FormatDescription(const DeviceDescription& description);

// Runs `op` with a Completion and waits for it: the synchronous form of any
// of the operations above, for tests and tools.
absl::Status Await(absl::AnyInvocable<void(Completion) &&> op);

}  // namespace causeway::backend

#endif  // CAUSEWAY_BACKEND_DEVICE_H_
