#include "causeway/backend/buffer_plan.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>

#include "causeway/base/check.h"

namespace causeway::backend {
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

bool IsFusableUnary(OpKind op) {
  switch (op) {
    case OpKind::kNeg:
    case OpKind::kExp:
    case OpKind::kAbs:
    case OpKind::kLog:
    case OpKind::kTanh:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kAtan:
    case OpKind::kErf:
    case OpKind::kLogistic:
    case OpKind::kSqrt:
    case OpKind::kRsqrt:
    case OpKind::kSign:
    case OpKind::kFloor:
      return true;
    default:
      return false;
  }
}

// The element count of `inst` if it is an f32 element-wise op a fused step
// can run, else -1.
int64_t FusableElements(const Instruction& inst, const std::vector<Instruction>& insts) {
  if (inst.shape.dtype != ir::DType::kF32) return -1;
  const bool unary = IsFusableUnary(inst.op);
  if (!unary && !IsArithmetic(inst.op) && inst.op != OpKind::kPow) return -1;
  if (inst.operands.size() != (unary ? 1u : 2u)) return -1;
  for (int o : inst.operands) {
    if (insts[o].shape.dtype != ir::DType::kF32) return -1;
  }
  return inst.shape.num_elements();
}

// Context of the fusion pass: what every instruction reads, who reads it.
struct FusionContext {
  const std::vector<Instruction>& insts;
  const std::vector<std::vector<int>>& reads;
  std::vector<std::vector<int>> readers;  // live readers of each value
  std::vector<bool> is_output;
};

// `group` (at least two steps of `count` elements each) as one fused step,
// or nullopt when a member reads another's value as a repeated row.
std::optional<Step> Fuse(const FusionContext& fc, std::vector<Step>& group, int64_t count) {
  std::map<int, int> index;  // instruction -> op
  for (size_t t = 0; t < group.size(); ++t) index[group[t].instruction] = static_cast<int>(t);
  // A "row" as long as the value is a broadcast that adds only unit dims:
  // read densely, fused or not.
  for (Step& s : group) {
    for (int64_t& row : s.operand_row) {
      if (row == count) row = 0;
    }
  }
  std::vector<FusedOp> ops(group.size());
  std::vector<int> last_read(group.size(), -1);
  for (size_t t = 0; t < group.size(); ++t) {
    const int i = group[t].instruction;
    FusedOp& op = ops[t];
    for (size_t k = 0; k < fc.reads[i].size(); ++k) {
      auto it = index.find(fc.reads[i][k]);
      if (it == index.end()) continue;
      if (group[t].operand_row[k] != 0) return std::nullopt;
      op.from[k] = it->second;
      last_read[it->second] = static_cast<int>(t);
    }
    op.store = fc.is_output[i] ||
               std::any_of(fc.readers[i].begin(), fc.readers[i].end(),
                           [&](int r) { return index.find(r) == index.end(); });
  }
  // Scratch slots for the values that stay inside, reused once read for the
  // last time (after the reader's own slot is taken, so an op never writes
  // over its operand).
  std::vector<int> free_slots;
  int slots = 0;
  for (size_t t = 0; t < ops.size(); ++t) {
    FusedOp& op = ops[t];
    const int num_operands = static_cast<int>(group[t].operands.size());
    if (!op.store) {
      if (free_slots.empty()) {
        op.scratch = slots++;
      } else {
        op.scratch = free_slots.back();
        free_slots.pop_back();
      }
    }
    for (int k = 0; k < num_operands; ++k) {
      const int from = op.from[k];
      if (from < 0 || ops[from].store || last_read[from] != static_cast<int>(t)) continue;
      if (k == 1 && op.from[0] == from) continue;  // released once
      free_slots.push_back(ops[from].scratch);
    }
  }
  Step fused;
  fused.instruction = group.back().instruction;
  fused.result = group.back().result;
  fused.fused = std::move(ops);
  fused.fused_scratch = slots;
  fused.fused_elements = count;
  fused.unfused = std::move(group);
  return fused;
}

// Replaces runs of consecutive fusable steps of one element count by fused
// steps (Step::fused).
void FuseElementwise(const FusionContext& fc, std::vector<Step>& steps) {
  std::vector<Step> out;
  size_t s = 0;
  while (s < steps.size()) {
    const int64_t count = FusableElements(fc.insts[steps[s].instruction], fc.insts);
    size_t e = s + 1;
    while (count > 0 && e < steps.size() &&
           FusableElements(fc.insts[steps[e].instruction], fc.insts) == count) {
      ++e;
    }
    if (e - s >= 2) {
      std::vector<Step> group(std::make_move_iterator(steps.begin() + s),
                              std::make_move_iterator(steps.begin() + e));
      std::optional<Step> fused = Fuse(fc, group, count);
      if (fused.has_value()) {
        out.push_back(std::move(*fused));
      } else {
        for (Step& g : group) out.push_back(std::move(g));
      }
    } else {
      out.push_back(std::move(steps[s]));
    }
    s = e;
  }
  steps = std::move(out);
}

}  // namespace

ExecutionPlan PlanExecution(const ir::Function& function, PlanOptions options) {
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

  if (options.fuse_elementwise) {
    FusionContext fc{insts, reads, std::vector<std::vector<int>>(n), std::vector<bool>(n, false)};
    for (int i = 0; i < n; ++i) {
      if (!live[i]) continue;
      for (int o : reads[i]) fc.readers[o].push_back(i);
    }
    for (int o : outputs) fc.is_output[o] = true;
    FuseElementwise(fc, plan.steps);
  }

  for (int j = 0; j < static_cast<int>(outputs.size()); ++j) {
    const int o = outputs[j];
    const BufferLocation& loc = location[o];
    if (loc.kind == BufferLocation::Kind::kOutput && loc.index == j) continue;
    CW_CHECK(loc.kind != BufferLocation::Kind::kArena) << "result in the arena";
    plan.final_copies.push_back({j, loc, insts[o].shape.byte_size()});
  }
  return plan;
}

}  // namespace causeway::backend
