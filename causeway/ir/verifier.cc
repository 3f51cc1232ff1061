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

}  // namespace

absl::StatusOr<Shape> InferShape(const Instruction& inst,
                                 const std::vector<Shape>& operand_shapes) {
  absl::StatusOr<Shape> shape = InferShapeNoContext(inst, operand_shapes);
  if (!shape.ok()) return Annotate(shape.status(), OpName(inst.op));
  return shape;
}

absl::Status Verify(const Function& function) {
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
  }
  return absl::OkStatus();
}

}  // namespace causeway::ir
