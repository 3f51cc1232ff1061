#include "causeway/ir/verifier.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/shape_inference.h"

namespace causeway::ir {
namespace {

absl::Status Invalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::Status VerifyAt(const Function& function, int depth);

}  // namespace

absl::StatusOr<Shape> InferShape(const Instruction& inst,
                                 const std::vector<Shape>& operand_shapes) {
  absl::StatusOr<Shape> shape = InferShapeNoContext(inst, operand_shapes);
  if (!shape.ok()) return Annotate(shape.status(), OpName(inst.op));
  return shape;
}

absl::Status Verify(const Function& function) { return VerifyAt(function, 0); }

namespace {

// Checks what a multi-result instruction adds to shape inference: its
// sub-functions, verified one level deeper and free of collectives.
absl::Status VerifySubfunctions(const Instruction& inst, int depth) {
  for (size_t k = 0; k < inst.subfunctions.size(); ++k) {
    const Function* sub = inst.subfunctions[k].get();
    if (sub == nullptr) return Invalid(absl::StrCat("sub-function ", k, " is missing"));
    if (depth + 1 > kMaxControlFlowDepth) {
      return Invalid(absl::StrCat("control flow nests deeper than ", kMaxControlFlowDepth,
                                  " levels"));
    }
    CW_RETURN_IF_ERROR(VerifyAt(*sub, depth + 1));
    for (size_t i = 0; i < sub->instructions().size(); ++i) {
      const OpKind op = sub->instructions()[i].op;
      if (IsCollective(op)) {
        return Invalid(absl::StrCat("sub-function ", sub->name(), ", instruction ", i, " (",
                                    OpName(op),
                                    "): collectives inside control flow are not supported; "
                                    "run them before or after the loop or conditional"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status VerifyAt(const Function& function, int depth) {
  const std::vector<Instruction>& insts = function.instructions();
  const std::vector<int>& params = function.parameters();
  const int n = static_cast<int>(insts.size());
  const std::string fn = absl::StrCat("function ", function.name());

  std::vector<Shape> operand_shapes;
  for (int i = 0; i < n; ++i) {
    const Instruction& inst = insts[i];
    auto error = [&](absl::string_view message) {
      return Invalid(absl::StrCat(fn, ", instruction ", i, " (", OpName(inst.op),
                                  "): ", message));
    };
    if (absl::Status s = ValidateShape(inst.shape); !s.ok()) {
      return error(absl::StrCat("declared shape: ", s.message()));
    }
    operand_shapes.clear();
    for (size_t j = 0; j < inst.operands.size(); ++j) {
      const int o = inst.operands[j];
      if (o < 0 || o >= i) {
        return error(absl::StrCat("operand ", j, " refers to instruction ", o,
                                  ", which is not an earlier instruction"));
      }
      operand_shapes.push_back(insts[o].shape);
      if (IsMultiResult(insts[o].op) && inst.op != OpKind::kGetResult) {
        return error(absl::StrCat("operand ", j, " is instruction ", o, " (",
                                  OpName(insts[o].op),
                                  "), whose results only get_result may read"));
      }
    }
    if (IsMultiResult(inst.op)) {
      if (absl::Status s = VerifySubfunctions(inst, depth); !s.ok()) return error(s.message());
    }
    if (inst.op == OpKind::kGetResult && inst.operands.size() == 1) {
      absl::StatusOr<Shape> result = GetResultShape(insts[inst.operands[0]], inst.result_index);
      if (!result.ok()) return error(result.status().message());
      if (*result != inst.shape) {
        return error(absl::StrCat("declared shape ", inst.shape.ToString(), " but result ",
                                  inst.result_index, " is ", result->ToString()));
      }
    }
    absl::StatusOr<Shape> inferred = InferShapeNoContext(inst, operand_shapes);
    if (!inferred.ok()) return error(inferred.status().message());
    if (*inferred != inst.shape) {
      return error(absl::StrCat("declared shape ", inst.shape.ToString(),
                                " does not match inferred ", inferred->ToString()));
    }
    if (inst.op == OpKind::kParameter) {
      const int p = inst.parameter_index;
      if (p < 0 || p >= static_cast<int>(params.size()) || params[p] != i) {
        return error(absl::StrCat("parameter_index ", p,
                                  " is not this instruction's position in the "
                                  "function's parameter list"));
      }
    }
  }
  for (size_t k = 0; k < params.size(); ++k) {
    const int p = params[k];
    if (p < 0 || p >= n || insts[p].op != OpKind::kParameter ||
        insts[p].parameter_index != static_cast<int>(k)) {
      return Invalid(absl::StrCat(fn, ": parameter ", k, " names instruction ", p,
                                  ", which is not parameter ", k));
    }
  }
  if (function.outputs().empty()) return Invalid(absl::StrCat(fn, ": no outputs"));
  for (size_t k = 0; k < function.outputs().size(); ++k) {
    const int o = function.outputs()[k];
    if (o < 0 || o >= n) {
      return Invalid(absl::StrCat(fn, ": output ", k, " names instruction ", o,
                                  ", out of range [0, ", n, ")"));
    }
    if (IsMultiResult(insts[o].op)) {
      return Invalid(absl::StrCat(fn, ": output ", k, " is instruction ", o, " (",
                                  OpName(insts[o].op),
                                  "); return its results through get_result"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

}  // namespace causeway::ir
