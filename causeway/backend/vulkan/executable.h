// Internal to the vulkan kind: a function compiled into a Program of
// shader dispatches. Compilation follows the cpu kind's static plan
// (causeway/backend/cpu/buffer_plan.h: which instructions run, in what
// order, where each value lives) and lowers each step to one or more
// dispatches of the embedded kernels (kernels.h). Parameter blocks and
// constants are gathered into one `resident` image, uploaded once per GPU
// and kept with the executable. Collectives, delays, loops and conditionals
// are host steps: the dispatches before one are a segment submitted and
// waited for, then the host step runs: a collective or delay on staged host
// memory (the host-staged collective hub), a loop or conditional as
// launches of its compiled sub-functions on this device, the host reading
// only the loop's condition or the branch's selector.
#ifndef CAUSEWAY_BACKEND_VULKAN_EXECUTABLE_H_
#define CAUSEWAY_BACKEND_VULKAN_EXECUTABLE_H_

#include <array>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/backend/executable.h"
#include "causeway/backend/vulkan/kernels.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/function.h"

namespace causeway::backend::vulkan {

class Gpu;
class VulkanAllocation;

// Where a dispatch finds a buffer at run time.
struct Ref {
  enum class Kind : uint8_t { kNone, kInput, kOutput, kTemp, kResident };
  Kind kind = Kind::kNone;
  int index = 0;        // kInput / kOutput: the parameter or result
  uint64_t offset = 0;  // bytes into it (kTemp, kResident: into the image)
};

// A Ref's slot in a launch's argument table (kernels.h, Push): the
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

class VulkanExecutable;

// A loop or conditional: its sub-functions, compiled, run from the host
// (one launch each per iteration or branch), over views of the caller's
// buffers. Its results are packed into one value (ir::ResultOffsets). What
// it needs besides lies in the caller's temporaries, so that the
// executable's temporary_bytes() counts it.
struct ControlFlow {
  bool is_while = false;
  std::vector<std::shared_ptr<const VulkanExecutable>> subs;  // {cond, body} or branches
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

class VulkanExecutable final : public Executable {
 public:
  // Verifies and lowers `function`. INVALID_ARGUMENT naming the op for what
  // this kind cannot run (a dtype without a kernel, an array of 2^31 or more
  // elements). `fuse`: runs of element-wise ops are one kFusedF32 dispatch
  // each; false: one dispatch per op (what a CPU device runs faster, the
  // kind's Compile decides).
  static absl::StatusOr<std::shared_ptr<const VulkanExecutable>> Compile(
      const ir::Function& function, bool fuse = true);
  ~VulkanExecutable() override;

  int64_t temporary_bytes() const override { return temp_bytes_; }
  // Unique in the process, never reused: what a device's recorded command
  // buffers are kept under.
  uint64_t id() const { return id_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<ControlFlow>& control() const { return control_; }

  // The executable's resident image on `gpu`, uploaded on first use by
  // `upload` (which copies the image's bytes into the allocation and
  // returns once they are there).
  absl::StatusOr<const VulkanAllocation*> Resident(
      Gpu& gpu, const std::function<absl::Status(const std::vector<std::byte>&,
                                                 VulkanAllocation&)>& upload) const;

  // Not supported: the vulkan kind runs through its Device (Launch).
  absl::Status Run(absl::Span<const void* const> inputs, absl::Span<void* const> outputs,
                   const RunContext& context) const override;

 private:
  explicit VulkanExecutable(ir::Function function);
  // Compile without verifying again (a sub-function, verified with the
  // function holding it).
  static absl::StatusOr<std::shared_ptr<const VulkanExecutable>> CompileVerified(
      const ir::Function& function, bool fuse);

  const uint64_t id_;
  std::vector<Segment> segments_;
  std::vector<ControlFlow> control_;
  std::vector<std::byte> resident_;
  int64_t temp_bytes_ = 0;

  mutable Mutex mu_;
  mutable std::map<const Gpu*, std::unique_ptr<VulkanAllocation>> uploaded_ ABSL_GUARDED_BY(mu_);

  friend class Lowering;
};

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_EXECUTABLE_H_
