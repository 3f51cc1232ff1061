// A function lowered into a Program of dispatches of the dispatch kernels
// (kernels.h): the compiled form of the kinds whose devices run those
// kernels (vulkan, cuda), which differ only in how they run them.
// Lowering follows the cpu kind's static plan (causeway/backend/
// buffer_plan.h: which instructions run, in what order, where each value
// lives) and lowers each step to one or more dispatches. Parameter blocks
// and constants are gathered into one `resident` image, which a kind
// uploads once per GPU (Program::Resident) and keeps with the program. Collectives, delays, loops and conditionals
// are host steps: the dispatches before one are a segment submitted and
// waited for, then the host step runs: a collective or delay on staged host
// memory (the host-staged collective hub), a loop or conditional as
// launches of its compiled sub-functions on this device, the host reading
// only the loop's condition or the branch's selector.
#ifndef CAUSEWAY_BACKEND_DISPATCH_PROGRAM_H_
#define CAUSEWAY_BACKEND_DISPATCH_PROGRAM_H_

#include <array>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/backend/executable.h"
#include "absl/functional/function_ref.h"
#include "causeway/backend/dispatch/kernels.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/function.h"

namespace causeway::backend::dispatch {

// Where a dispatch finds a buffer at run time.
struct Ref {
  enum class Kind : uint8_t { kNone, kInput, kOutput, kTemp, kResident };
  Kind kind = Kind::kNone;
  int index = 0;        // kInput / kOutput: the parameter or result
  uint64_t offset = 0;  // bytes into it (kTemp, kResident: into the image)
};

// A Ref's slot in a launch's argument table: the
// launch's inputs, then its outputs, the temporaries, the resident image.
inline uint32_t TableSlot(const Ref& r, size_t inputs, size_t outputs) {
  const auto ins = static_cast<uint32_t>(inputs);
  const auto outs = static_cast<uint32_t>(outputs);
  switch (r.kind) {
    case Ref::Kind::kNone: return kNoSlot;
    case Ref::Kind::kInput: return static_cast<uint32_t>(r.index);
    case Ref::Kind::kOutput: return ins + static_cast<uint32_t>(r.index);
    case Ref::Kind::kTemp: return ins + outs;
    case Ref::Kind::kResident: return ins + outs + 1;
  }
  return kNoSlot;
}

struct Dispatch {
  Kernel kernel = Kernel::kUnaryF32;
  Ref a, b, c, d, out;
  Ref params;  // kResident, or kNone
  uint32_t n = 0, op = 0, x = 0, y = 0;
  std::array<uint32_t, 3> groups = {1, 1, 1};
};

// Runs on the host between segments.
struct HostStep {
  int instruction = 0;        // the collective, delay, loop or conditional
  int collective_index = -1;  // as the cpu plan's
  int control = -1;           // a loop or conditional: its VulkanExecutable::control()
  Ref in, out;
  int64_t in_bytes = 0, out_bytes = 0;
};

class Program;

// A loop or conditional: its sub-functions, compiled, run from the host
// (one launch each per iteration or branch), over views of the caller's
// buffers. Its results are packed into one value (ir::ResultOffsets). What
// it needs besides lies in the caller's temporaries, so that the
// executable's temporary_bytes() counts it.
struct ControlFlow {
  bool is_while = false;
  std::vector<std::shared_ptr<const Program>> subs;  // {cond, body} or branches
  std::vector<Ref> operands;              // while: the carry; conditional: selector, args
  std::vector<int64_t> operand_bytes;
  std::vector<ir::Shape> shapes;          // the results
  std::vector<int64_t> offsets;           // one per result, then the total
  Ref out;                                // the packed results
  Ref spare;                              // while: the carry's second set
  Ref go;                                 // while: the condition (one byte)
  Ref sub_temp;                           // the sub-functions' temporaries,
  int64_t sub_temp_bytes = 0;             // the most any of them takes
};

struct Segment {
  std::vector<Dispatch> dispatches;
  bool has_host_step = false;
  HostStep host;  // after the dispatches
};

// How Lower compiles a function.
struct LowerOptions {
  // The kind it is for: named in errors, and what Program::kind() says.
  std::string kind;
  // Runs of element-wise ops are one kFusedF32 dispatch each; false: one
  // dispatch per op (what a CPU device runs faster, the kind decides).
  bool fuse_elementwise = true;
};

class Program final : public Executable {
 public:
  // Verifies and lowers `function`. INVALID_ARGUMENT naming the op for what
  // the kernels cannot run (a dtype without a kernel, an array of 2^31 or
  // more elements).
  static absl::StatusOr<std::shared_ptr<const Program>> Compile(const ir::Function& function,
                                                                const LowerOptions& options);
  ~Program() override;

  int64_t temporary_bytes() const override { return temp_bytes_; }
  // Unique in the process, never reused: what a device's recorded command
  // buffers or graphs are kept under.
  uint64_t id() const { return id_; }
  // The kind it was lowered for (LowerOptions::kind).
  const std::string& kind() const { return kind_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<ControlFlow>& control() const { return control_; }
  // The parameter blocks and constants, as Refs of kind kResident address
  // them.
  const std::vector<std::byte>& resident_image() const { return resident_; }

  // The resident image's copy at `where` (a GPU, for its devices), made on
  // first use by `upload` from the image and kept as long as the program;
  // returns what `upload` returned. Thread-safe.
  absl::StatusOr<void*> Resident(
      const void* where,
      absl::FunctionRef<absl::StatusOr<std::shared_ptr<void>>(const std::vector<std::byte>&)>
          upload) const;

 private:
  Program(ir::Function function, std::string kind);
  // Compile without verifying again (a sub-function, verified with the
  // function holding it).
  static absl::StatusOr<std::shared_ptr<const Program>> CompileVerified(
      const ir::Function& function, const LowerOptions& options);

  const uint64_t id_;
  const std::string kind_;
  std::vector<Segment> segments_;
  std::vector<ControlFlow> control_;
  std::vector<std::byte> resident_;
  int64_t temp_bytes_ = 0;

  mutable Mutex mu_;
  mutable std::map<const void*, std::shared_ptr<void>> uploaded_ ABSL_GUARDED_BY(mu_);

  friend class Lowering;
};

// Runs host step `h` of `program`, a collective, through `c` (the launch's
// CollectiveOps: the host-staged hub): `read` fills a host buffer with the
// operand's h.in_bytes, `write` takes the h.out_bytes of the result. What a
// kind does for a collective it does not move on its devices.
absl::Status RunCollectiveOnHost(const Program& program, const HostStep& h, CollectiveOps& c,
                                 absl::FunctionRef<absl::Status(void*)> read,
                                 absl::FunctionRef<absl::Status(const void*)> write);

}  // namespace causeway::backend::dispatch

#endif  // CAUSEWAY_BACKEND_DISPATCH_PROGRAM_H_
