#include "causeway/ir/function.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace causeway::ir {

const char* OpName(OpKind op) {
  switch (op) {
    case OpKind::kParameter:
      return "parameter";
    case OpKind::kConstant:
      return "constant";
    case OpKind::kAdd:
      return "add";
    case OpKind::kSub:
      return "sub";
    case OpKind::kMul:
      return "mul";
    case OpKind::kDiv:
      return "div";
    case OpKind::kMax:
      return "max";
    case OpKind::kNeg:
      return "neg";
    case OpKind::kExp:
      return "exp";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReshape:
      return "reshape";
    case OpKind::kTranspose:
      return "transpose";
    case OpKind::kReduceSum:
      return "reduce_sum";
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kConvert:
      return "convert";
    case OpKind::kDelay:
      return "delay";
    case OpKind::kAllReduce:
      return "all_reduce";
  }
  return "unknown_op";
}

std::vector<std::string> Function::CollectiveAxes() const {
  std::vector<std::string> axes;
  for (const Instruction& inst : instructions_) {
    if (inst.op != OpKind::kAllReduce) continue;
    for (const std::string& axis : inst.axes) {
      if (std::find(axes.begin(), axes.end(), axis) == axes.end()) axes.push_back(axis);
    }
  }
  return axes;
}

std::string Function::ToString() const {
  std::string out = absl::StrCat("function ", name_, "(");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", "%", parameters_[i]);
  }
  out += ") {\n";
  for (size_t i = 0; i < instructions_.size(); ++i) {
    const Instruction& inst = instructions_[i];
    absl::StrAppend(&out, "  %", i, " = ", inst.shape.ToString(), " ", OpName(inst.op),
                    "(");
    for (size_t j = 0; j < inst.operands.size(); ++j) {
      absl::StrAppend(&out, j > 0 ? ", " : "", "%", inst.operands[j]);
    }
    out += ")";
    switch (inst.op) {
      case OpKind::kParameter:
        absl::StrAppend(&out, " index=", inst.parameter_index);
        break;
      case OpKind::kConstant:
        absl::StrAppend(&out, " ", inst.literal.ToString());
        break;
      case OpKind::kBroadcast:
      case OpKind::kTranspose:
      case OpKind::kReduceSum:
        absl::StrAppend(&out, " dims={", absl::StrJoin(inst.dims, ","), "}");
        break;
      case OpKind::kDelay:
        absl::StrAppend(&out, " delay_us=", inst.delay_us);
        break;
      case OpKind::kAllReduce:
        absl::StrAppend(&out, " axes={", absl::StrJoin(inst.axes, ","), "} kind=",
                        inst.reduce_kind == ReduceKind::kMax ? "max" : "sum");
        break;
      default:
        break;
    }
    out += "\n";
  }
  absl::StrAppend(&out, "  outputs: ");
  for (size_t i = 0; i < outputs_.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", "%", outputs_[i]);
  }
  out += "\n}\n";
  return out;
}

}  // namespace causeway::ir
