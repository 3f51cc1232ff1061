#include "causeway/ir/function.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/ir/shape_inference.h"

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
    case OpKind::kMin:
      return "min";
    case OpKind::kPow:
      return "pow";
    case OpKind::kAbs:
      return "abs";
    case OpKind::kLog:
      return "log";
    case OpKind::kTanh:
      return "tanh";
    case OpKind::kLogistic:
      return "logistic";
    case OpKind::kSqrt:
      return "sqrt";
    case OpKind::kRsqrt:
      return "rsqrt";
    case OpKind::kSign:
      return "sign";
    case OpKind::kFloor:
      return "floor";
    case OpKind::kCompare:
      return "compare";
    case OpKind::kSelect:
      return "select";
    case OpKind::kIota:
      return "iota";
    case OpKind::kSlice:
      return "slice";
    case OpKind::kConcatenate:
      return "concatenate";
    case OpKind::kPad:
      return "pad";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatterAdd:
      return "scatter_add";
    case OpKind::kReduceMax:
      return "reduce_max";
    case OpKind::kReduceMin:
      return "reduce_min";
    case OpKind::kDotGeneral:
      return "dot_general";
    case OpKind::kRngUniform:
      return "rng_uniform";
    case OpKind::kRngNormal:
      return "rng_normal";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kCollectivePermute:
      return "collective_permute";
    case OpKind::kGelu:
      return "gelu";
    case OpKind::kGeluGrad:
      return "gelu_grad";
    case OpKind::kSoftmax:
      return "softmax";
    case OpKind::kSoftmaxGrad:
      return "softmax_grad";
    case OpKind::kNormalize:
      return "normalize";
    case OpKind::kNormalizeGrad:
      return "normalize_grad";
    case OpKind::kWhile:
      return "while";
    case OpKind::kConditional:
      return "conditional";
    case OpKind::kGetResult:
      return "get_result";
    case OpKind::kConvolution:
      return "convolution";
    case OpKind::kConvInputGrad:
      return "conv_input_grad";
    case OpKind::kConvKernelGrad:
      return "conv_kernel_grad";
    case OpKind::kArgSort:
      return "argsort";
    case OpKind::kSin:
      return "sin";
    case OpKind::kCos:
      return "cos";
    case OpKind::kAtan:
      return "atan";
    case OpKind::kErf:
      return "erf";
    case OpKind::kPool:
      return "pool";
  }
  return "unknown_op";
}

bool IsCollective(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
      return true;
    default:
      return false;
  }
}

std::vector<Shape> ResultShapes(const Instruction& inst) {
  std::vector<Shape> shapes;
  const Function* source = nullptr;
  if (inst.op == OpKind::kWhile && inst.subfunctions.size() == 2) {
    source = inst.subfunctions[1].get();
  } else if (inst.op == OpKind::kConditional && !inst.subfunctions.empty()) {
    source = inst.subfunctions[0].get();
  }
  if (source == nullptr) return shapes;
  for (int o : source->outputs()) {
    if (o < 0 || o >= static_cast<int>(source->instructions().size())) return {};
    shapes.push_back(source->instructions()[o].shape);
  }
  return shapes;
}

// The total saturates at kMaxPackedBytes + 1, which shape inference refuses.
std::vector<int64_t> ResultOffsets(const std::vector<Shape>& results) {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const Shape& s : results) {
    offsets.push_back(at);
    // Saturates instead of wrapping (results may come from untrusted input):
    // a total past kMaxPackedBytes is refused by shape inference.
    const int64_t bytes = ValidateShape(s).ok() ? (s.byte_size() + 63) / 64 * 64 : kMaxPackedBytes;
    at = std::min(at + std::min(bytes, kMaxPackedBytes), kMaxPackedBytes + 1);
  }
  offsets.push_back(at);
  return offsets;
}

Shape PackedShape(const std::vector<Shape>& results) {
  return Shape(DType::kPred, {ResultOffsets(results).back()});
}

std::vector<std::string> Function::CollectiveAxes() const {
  std::vector<std::string> axes;
  for (const Instruction& inst : instructions_) {
    if (!IsCollective(inst.op)) continue;
    for (const std::string& axis : inst.axes) {
      if (std::find(axes.begin(), axes.end(), axis) == axes.end()) axes.push_back(axis);
    }
  }
  return axes;
}

std::string Function::ToString() const {
  std::string out = absl::StrCat("function ", name_, "(");
  std::string subs;  // sub-functions, listed after this one
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
      case OpKind::kReduceMax:
      case OpKind::kReduceMin:
        absl::StrAppend(&out, " dims={", absl::StrJoin(inst.dims, ","), "}");
        break;
      case OpKind::kIota:
      case OpKind::kConcatenate:
      case OpKind::kGather:
      case OpKind::kScatterAdd:
        absl::StrAppend(&out, " dimension=", inst.dimension);
        break;
      case OpKind::kCompare:
        absl::StrAppend(&out, " comparison=", static_cast<int>(inst.comparison));
        break;
      case OpKind::kArgSort:
        absl::StrAppend(&out, " dimension=", inst.dimension,
                        inst.comparison == Comparison::kGt ? " descending" : " ascending");
        break;
      case OpKind::kSlice:
        absl::StrAppend(&out, " starts={", absl::StrJoin(inst.starts, ","), "} limits={",
                        absl::StrJoin(inst.limits, ","), "}");
        if (!inst.window_strides.empty()) {
          absl::StrAppend(&out, " strides={", absl::StrJoin(inst.window_strides, ","), "}");
        }
        break;
      case OpKind::kPad:
        absl::StrAppend(&out, " low={", absl::StrJoin(inst.pad_low, ","), "} high={",
                        absl::StrJoin(inst.pad_high, ","), "}");
        break;
      case OpKind::kDotGeneral:
        absl::StrAppend(&out, " batch={", absl::StrJoin(inst.lhs_batch, ","), "}x{",
                        absl::StrJoin(inst.rhs_batch, ","), "} contracting={",
                        absl::StrJoin(inst.lhs_contracting, ","), "}x{",
                        absl::StrJoin(inst.rhs_contracting, ","), "}");
        break;
      case OpKind::kAllGather:
      case OpKind::kReduceScatter:
      case OpKind::kAllToAll:
      case OpKind::kCollectivePermute:
        absl::StrAppend(&out, " axes={", absl::StrJoin(inst.axes, ","), "} dimension=",
                        inst.dimension);
        if (inst.op == OpKind::kAllToAll) {
          absl::StrAppend(&out, " concat_dimension=", inst.concat_dimension);
        }
        for (const auto& [src, dst] : inst.source_target_pairs) {
          absl::StrAppend(&out, " ", src, "->", dst);
        }
        break;
      case OpKind::kDelay:
        absl::StrAppend(&out, " delay_us=", inst.delay_us);
        break;
      case OpKind::kAllReduce:
        absl::StrAppend(&out, " axes={", absl::StrJoin(inst.axes, ","), "} kind=",
                        inst.reduce_kind == ReduceKind::kMax ? "max" : "sum");
        break;
      case OpKind::kGetResult:
        absl::StrAppend(&out, " result_index=", inst.result_index);
        break;
      case OpKind::kConvolution:
      case OpKind::kConvInputGrad:
      case OpKind::kConvKernelGrad:
        absl::StrAppend(&out, " strides={", absl::StrJoin(inst.window_strides, ","),
                        "} dilations={", absl::StrJoin(inst.window_dilations, ","),
                        "} pad_low={", absl::StrJoin(inst.pad_low, ","),
                        "} groups=", inst.feature_groups);
        break;
      case OpKind::kPool:
        absl::StrAppend(&out, inst.reduce_kind == ReduceKind::kMax ? " max" : " sum",
                        " window={", absl::StrJoin(inst.dims, ","), "} strides={",
                        absl::StrJoin(inst.window_strides, ","), "} dilations={",
                        absl::StrJoin(inst.window_dilations, ","), "} pad_low={",
                        absl::StrJoin(inst.pad_low, ","), "} pad_high={",
                        absl::StrJoin(inst.pad_high, ","), "}");
        break;
      case OpKind::kWhile:
      case OpKind::kConditional:
        for (size_t k = 0; k < inst.subfunctions.size(); ++k) {
          if (inst.subfunctions[k] == nullptr) continue;
          absl::StrAppend(&out, k == 0 ? " " : ", ", inst.subfunctions[k]->name());
          absl::StrAppend(&subs, inst.subfunctions[k]->ToString());
        }
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
  return out + subs;
}

}  // namespace causeway::ir
