#include "causeway/backend/cpu/buffer_plan.h"

#include <algorithm>
#include <iterator>
#include <map>

#include "causeway/base/check.h"

namespace causeway::backend::cpu {
namespace {

using ir::Instruction;
using ir::OpKind;

constexpr int64_t kAlignment = 64;

int64_t AlignUp(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// Best-fit allocator over a growing arena of offsets. Not thread-safe; used
// only while planning.
class ArenaAllocator {
 public:
  int64_t Allocate(int64_t bytes) {
    bytes = AlignUp(bytes);
    if (bytes == 0) return 0;
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= bytes && (best == free_.end() || it->second < best->second)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      const int64_t offset = best->first;
      const int64_t left = best->second - bytes;
      free_.erase(best);
      if (left > 0) free_[offset + bytes] = left;
      return offset;
    }
    // Grow the arena, starting inside a free block that ends at the top.
    int64_t offset = top_;
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == top_) {
        offset = last->first;
        free_.erase(last);
      }
    }
    top_ = offset + bytes;
    peak_ = std::max(peak_, top_);
    return offset;
  }

  void Free(int64_t offset, int64_t bytes) {
    bytes = AlignUp(bytes);
    if (bytes == 0) return;
    auto [it, inserted] = free_.emplace(offset, bytes);
    CW_CHECK(inserted) << "double free at offset " << offset;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  int64_t peak() const { return peak_; }

 private:
  std::map<int64_t, int64_t> free_;  // offset -> size
  int64_t top_ = 0;
  int64_t peak_ = 0;
};

bool HasEffect(OpKind op) { return op == OpKind::kDelay || ir::IsCollective(op); }

bool IsArithmetic(OpKind op) {
  switch (op) {
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kMax:
    case OpKind::kMin:
      return true;
    default:
      return false;
  }
}

// The row length if broadcast `inst` repeats its operand as the trailing
// dimensions of its result (a scalar is a row of 1), else 0.
int64_t FoldableRow(const Instruction& inst, const ir::Shape& operand) {
  if (inst.op != OpKind::kBroadcast || inst.shape.dtype != ir::DType::kF32) return 0;
  const int64_t elements = operand.num_elements();
  if (elements == 1) return 1;
  const int r = inst.shape.rank(), k = operand.rank();
  if (elements == 0) return 0;
  for (int i = 0; i < k; ++i) {
    if (inst.dims[i] != r - k + i || operand.dims[i] != inst.shape.dims[r - k + i]) return 0;
  }
  return elements;
}

// For each instruction, the row length of its value if it is a broadcast
// that can be folded into all of its readers, else 0. A reader must be
// arithmetic whose other operand is not itself folded (one dense operand
// gives the loop its shape).
std::vector<int64_t> FoldedBroadcasts(const ir::Function& function) {
  const std::vector<Instruction>& insts = function.instructions();
  const int n = static_cast<int>(insts.size());
  std::vector<int64_t> row(n, 0);
  for (int i = 0; i < n; ++i) {
    if (insts[i].op == OpKind::kBroadcast) {
      row[i] = FoldableRow(insts[i], insts[insts[i].operands[0]].shape);
    }
  }
  for (int o : function.outputs()) row[o] = 0;
  std::vector<bool> ok(n, true);
  for (int i = 0; i < n; ++i) {
    const Instruction& inst = insts[i];
    for (size_t k = 0; k < inst.operands.size(); ++k) {
      const int o = inst.operands[k];
      if (row[o] == 0) continue;
      const bool fits = IsArithmetic(inst.op) && inst.operands.size() == 2 &&
                        inst.shape.dtype == ir::DType::kF32 &&
                        row[inst.operands[1 - k]] == 0;
      if (!fits) ok[o] = false;
    }
  }
  // Both operands of a reader may have been candidates: then neither folds
  // (ok is cleared for both above), which keeps the rule simple.
  for (int i = 0; i < n; ++i) {
    if (!ok[i]) row[i] = 0;
  }
  return row;
}

}  // namespace

ExecutionPlan PlanExecution(const ir::Function& function) {
  const std::vector<Instruction>& insts = function.instructions();
  const int n = static_cast<int>(insts.size());
  const std::vector<int>& outputs = function.outputs();

  // Readers of a folded broadcast read its operand instead.
  const std::vector<int64_t> folded = FoldedBroadcasts(function);
  std::vector<std::vector<int>> reads(n);
  for (int i = 0; i < n; ++i) {
    for (int o : insts[i].operands) reads[i].push_back(folded[o] > 0 ? insts[o].operands[0] : o);
  }

  // Liveness: results and effectful instructions, and everything they read.
  std::vector<bool> live(n, false);
  for (int o : outputs) live[o] = true;
  for (int i = n - 1; i >= 0; --i) {
    if (HasEffect(insts[i].op)) live[i] = true;
    if (!live[i]) continue;
    for (int o : reads[i]) live[o] = true;
  }
  std::vector<int> last_use(n, -1);
  for (int i = 0; i < n; ++i) {
    if (!live[i]) continue;
    for (int o : reads[i]) last_use[o] = i;
  }

  // Where each value lives.
  std::vector<BufferLocation> location(n);
  std::vector<bool> placed(n, false);
  for (int i = 0; i < n; ++i) {
    if (insts[i].op == OpKind::kParameter) {
      location[i] = {BufferLocation::Kind::kInput, insts[i].parameter_index};
      placed[i] = true;
    } else if (insts[i].op == OpKind::kConstant) {
      location[i] = {BufferLocation::Kind::kConstant, i};
      placed[i] = true;
    }
  }
  for (int j = 0; j < static_cast<int>(outputs.size()); ++j) {
    const int o = outputs[j];
    if (!placed[o]) {
      location[o] = {BufferLocation::Kind::kOutput, j};
      placed[o] = true;
    }
  }

  // A result that passes its operand's bytes through (a delay, a reshape)
  // has that operand computed straight into the result buffer when nothing
  // else reads it: the pass-through then copies nothing.
  std::vector<int> readers(n, 0);
  for (int i = 0; i < n; ++i) {
    if (!live[i]) continue;
    for (size_t k = 0; k < reads[i].size(); ++k) {
      const int o = reads[i][k];
      if (std::find(reads[i].begin(), reads[i].begin() + k, o) == reads[i].begin() + k) {
        ++readers[o];
      }
    }
  }
  for (int j = 0; j < static_cast<int>(outputs.size()); ++j) {
    int o = outputs[j];
    if (location[o].kind != BufferLocation::Kind::kOutput || location[o].index != j) continue;
    while (insts[o].op == OpKind::kDelay || insts[o].op == OpKind::kReshape) {
      const int p = reads[o][0];
      if (placed[p] || readers[p] != 1 ||
          insts[p].shape.byte_size() != insts[o].shape.byte_size()) {
        break;
      }
      location[p] = location[o];
      placed[p] = true;
      o = p;
    }
  }

  ExecutionPlan plan;
  ArenaAllocator arena;
  int collectives = 0;
  for (int i = 0; i < n; ++i) {
    const Instruction& inst = insts[i];
    const bool is_collective = ir::IsCollective(inst.op);
    const int collective_index = is_collective ? collectives++ : -1;
    if (!live[i] || inst.op == OpKind::kParameter || inst.op == OpKind::kConstant) {
      continue;
    }
    const int64_t bytes = inst.shape.byte_size();
    // A reshape is free when it can name its operand's bytes: an input,
    // constant or result buffer (never written again), or an arena slice
    // whose last reader it is (the slice passes to the reshape's value).
    if (inst.op == OpKind::kReshape && !placed[i]) {
      const int o = reads[i][0];
      if (location[o].kind != BufferLocation::Kind::kArena || last_use[o] == i) {
        location[i] = location[o];
        placed[i] = true;
        if (last_use[i] == -1 && location[i].kind == BufferLocation::Kind::kArena) {
          arena.Free(location[i].index, bytes);
        }
        continue;
      }
    }
    if (!placed[i]) {
      // Allocated while the operands are still held, so never overlapping.
      location[i] = {BufferLocation::Kind::kArena, arena.Allocate(bytes)};
      plan.unshared_arena_bytes += AlignUp(bytes);
      placed[i] = true;
    }
    Step step;
    step.instruction = i;
    step.result = location[i];
    step.collective_index = collective_index;
    for (size_t k = 0; k < reads[i].size(); ++k) {
      step.operands.push_back(location[reads[i][k]]);
      if (k < 2) step.operand_row[k] = folded[inst.operands[k]];
    }
    plan.steps.push_back(std::move(step));

    // Release operands read for the last time here (each once), and a value
    // nobody reads.
    const std::vector<int>& ops = reads[i];
    for (size_t k = 0; k < ops.size(); ++k) {
      const int o = ops[k];
      if (std::find(ops.begin(), ops.begin() + k, o) != ops.begin() + k) continue;
      if (last_use[o] == i && location[o].kind == BufferLocation::Kind::kArena) {
        arena.Free(location[o].index, insts[o].shape.byte_size());
      }
    }
    if (last_use[i] == -1 && location[i].kind == BufferLocation::Kind::kArena) {
      arena.Free(location[i].index, bytes);
    }
  }
  plan.arena_bytes = arena.peak();

  for (int j = 0; j < static_cast<int>(outputs.size()); ++j) {
    const int o = outputs[j];
    const BufferLocation& loc = location[o];
    if (loc.kind == BufferLocation::Kind::kOutput && loc.index == j) continue;
    CW_CHECK(loc.kind != BufferLocation::Kind::kArena) << "result in the arena";
    plan.final_copies.push_back({j, loc, insts[o].shape.byte_size()});
  }
  return plan;
}

}  // namespace causeway::backend::cpu
