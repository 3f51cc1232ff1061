#include "causeway/ir/replication.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"

namespace causeway::ir {
namespace {

// The mesh axes the analysis tracks: those a parameter varies along or a
// result must be replicated over. A collective over any other axis cannot
// change the answer, so it is not tracked.
class AxisSet {
 public:
  absl::Status Add(const std::vector<std::string>& names) {
    for (const std::string& n : names) {
      if (Bit(n) != 0) continue;
      if (names_.size() == 64) {
        return absl::InvalidArgumentError("replication check: more than 64 mesh axes");
      }
      names_.push_back(n);
    }
    return absl::OkStatus();
  }
  uint64_t Bit(const std::string& name) const {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) return uint64_t{1} << i;
    }
    return 0;
  }
  uint64_t Mask(const std::vector<std::string>& names) const {
    uint64_t m = 0;
    for (const std::string& n : names) m |= Bit(n);
    return m;
  }
  const std::string& name(int bit) const { return names_[static_cast<size_t>(bit)]; }

 private:
  std::vector<std::string> names_;
};

int LowestBit(uint64_t m) { return __builtin_ctzll(m); }

std::string Describe(const Function& f, int index) {
  return absl::StrCat(OpName(f.instructions()[index].op), " (%", index, ")");
}

// Why result `output` varies along axis bit `bit`: walks back from the result
// through operands that vary along it to where the variation starts.
std::string Explain(const Function& f, const std::vector<uint64_t>& varying, int output,
                    uint64_t bit, const std::string& axis) {
  const auto& insts = f.instructions();
  int cur = output;
  int consumer = -1;  // the op that takes the varying value toward the result
  for (;;) {
    const Instruction& inst = insts[cur];
    if (inst.op == OpKind::kParameter) {
      std::string s = absl::StrCat("parameter ", inst.parameter_index, " is split over '",
                                   axis, "'");
      if (consumer < 0) return absl::StrCat(s, " and is returned as it is");
      return absl::StrCat(s, ", and ", Describe(f, consumer),
                          " carries it toward the result with no all_reduce or all_gather over '",
                          axis, "'");
    }
    int next = -1;
    for (int o : inst.operands) {
      if (varying[o] & bit) {
        next = o;
        break;
      }
    }
    if (next < 0) {
      // Only a collective over the axis starts a variation.
      return absl::StrCat(Describe(f, cur), " over {", absl::StrJoin(inst.axes, ", "),
                          "} gives each device along '", axis, "' a different value");
    }
    consumer = cur;
    cur = next;
  }
}

}  // namespace

absl::Status CheckReplication(const Function& function,
                              absl::Span<const std::vector<std::string>> parameter_varying,
                              absl::Span<const std::vector<std::string>> output_replicated) {
  if (static_cast<int>(parameter_varying.size()) != function.num_parameters() ||
      static_cast<int>(output_replicated.size()) != function.num_outputs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replication check of ", function.name(), ": ", parameter_varying.size(),
        " parameter and ", output_replicated.size(), " result entries for ",
        function.num_parameters(), " parameters and ", function.num_outputs(), " results"));
  }
  AxisSet axes;
  for (const auto& v : parameter_varying) CW_RETURN_IF_ERROR(axes.Add(v));
  for (const auto& r : output_replicated) CW_RETURN_IF_ERROR(axes.Add(r));

  const auto& insts = function.instructions();
  std::vector<uint64_t> varying(insts.size(), 0);
  for (size_t i = 0; i < insts.size(); ++i) {
    const Instruction& inst = insts[i];
    uint64_t v = 0;
    for (int o : inst.operands) v |= varying[o];
    switch (inst.op) {
      case OpKind::kParameter:
        v = axes.Mask(parameter_varying[inst.parameter_index]);
        break;
      case OpKind::kAllReduce:
      case OpKind::kAllGather:
        v &= ~axes.Mask(inst.axes);
        break;
      case OpKind::kReduceScatter:
      case OpKind::kAllToAll:
      case OpKind::kCollectivePermute:
        v |= axes.Mask(inst.axes);
        break;
      default:
        break;
    }
    varying[i] = v;
  }
  for (int r = 0; r < function.num_outputs(); ++r) {
    const int out = function.outputs()[r];
    const uint64_t bad = varying[out] & axes.Mask(output_replicated[r]);
    if (bad == 0) continue;
    const int bit = LowestBit(bad);
    const std::string& axis = axes.name(bit);
    return absl::InvalidArgumentError(absl::StrCat(
        "result ", r, " (", Describe(function, out), ") is declared replicated over mesh axis '",
        axis, "' but differs between the devices along it: ",
        Explain(function, varying, out, uint64_t{1} << bit, axis),
        ". Combine the shards with all_reduce or all_gather over '", axis,
        "', declare the result split over it, or turn the check off "
        "(ReplicationCheck::kOff; Python: check_replication=False)"));
  }
  return absl::OkStatus();
}

}  // namespace causeway::ir
