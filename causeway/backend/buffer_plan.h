// The static plan a kind's executable follows on every run, shared by the
// kinds that lower the IR themselves (cpu runs it step by step; vulkan and
// cuda lower its steps into dispatches). Compile decides once which
// instructions run, in what order, and where each value lives, so that a run
// only resolves addresses and calls kernels.
//
// Values live in one of four places: a caller's input buffer (parameters
// alias their inputs), a caller's output buffer (a computed value that is a
// result is written straight there), a constant's literal (read in place), or
// a slice of one per-run arena. Arena slices are reused once the value's last
// reader has run; a result never shares space with its own operands, except
// a reshape, which runs no step and names its operand's bytes when they are
// read-only or it is their last reader.
#ifndef CAUSEWAY_BACKEND_BUFFER_PLAN_H_
#define CAUSEWAY_BACKEND_BUFFER_PLAN_H_

#include <cstdint>
#include <vector>

#include "causeway/ir/function.h"

namespace causeway::backend {

struct BufferLocation {
  enum class Kind { kInput, kOutput, kArena, kConstant };
  Kind kind = Kind::kArena;
  // kInput / kOutput: the parameter or result number. kArena: byte offset
  // into the arena. kConstant: the instruction index holding the literal.
  int64_t index = 0;
};

// How op j of a fused element-wise step (Step::fused) runs; what it
// computes, its operands and its result buffer are those of unfused[j].
struct FusedOp {
  // Per operand: the index of the earlier op of the step whose value it
  // reads, or -1 for a value from outside the step, read from unfused[j]'s
  // operand (a row repeated when its operand_row is not 0).
  int from[2] = {-1, -1};
  // A value read after the step (or a result) is written to unfused[j]'s
  // result; any other lives only in chunk-sized scratch slot `scratch`.
  bool store = false;
  int scratch = -1;
};

// One instruction to execute.
struct Step {
  int instruction = 0;
  BufferLocation result;
  std::vector<BufferLocation> operands;
  // For a collective, the number of collective instructions (of any kind)
  // before this one in the function; -1 otherwise.
  int collective_index = -1;
  // For f32 add, sub, mul, div, max and min: 0 if operand k is dense (the
  // result's shape); L > 0 if it is a broadcast folded into this step, read
  // as a row of L elements repeated over the result (1: a scalar).
  int64_t operand_row[2] = {0, 0};
  // A fused step when not empty: consecutive f32 element-wise steps of the
  // same element count, run together over chunks of `fused_elements` that
  // stay in cache, each op reading its operands and writing its value for
  // one chunk before the next chunk starts. Values read only inside the
  // step are never written to memory. `instruction` is the last op's.
  // `unfused` holds the original steps, which run instead when the run's
  // buffers overlap in a way the chunked order would misread.
  std::vector<FusedOp> fused;
  int fused_scratch = 0;
  int64_t fused_elements = 0;
  std::vector<Step> unfused;
};

// After all steps: copy `bytes` from `source` into output `output`. Used for
// results that are parameters or constants, or that repeat an earlier result.
struct FinalCopy {
  int output = 0;
  BufferLocation source;
  int64_t bytes = 0;
};

struct ExecutionPlan {
  std::vector<Step> steps;
  std::vector<FinalCopy> final_copies;
  // Bytes of arena one run needs (each slice is 64-byte aligned).
  int64_t arena_bytes = 0;
  // For tests and diagnostics: bytes the arena would need without reuse.
  int64_t unshared_arena_bytes = 0;
};

// Plans `function`. Instructions that no result, delay or collective depends
// on are skipped; delays and collectives always run (they have effects: time
// on the device, and peers waiting for this device). A broadcast of a scalar,
// or of a row onto the trailing dimensions, that only f32 arithmetic reads is
// folded into its readers (Step::operand_row) instead of being written out.
// Consecutive f32 element-wise steps of one element count are fused (see
// Step::fused) unless `fuse_elementwise` is false.
// REQUIRES: Verify(function) is OK.
struct PlanOptions {
  bool fuse_elementwise = true;
};
ExecutionPlan PlanExecution(const ir::Function& function, PlanOptions options = {});

}  // namespace causeway::backend

#endif  // CAUSEWAY_BACKEND_BUFFER_PLAN_H_
