#include "causeway/ir/serialization.h"

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/ir.pb.h"
#include "causeway/ir/verifier.h"

namespace causeway::ir {
namespace {

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& r) {
  return std::vector<int64_t>(r.begin(), r.end());
}

template <typename Repeated>
void FromVector(const std::vector<int64_t>& v, Repeated* r) {
  for (int64_t x : v) r->Add(x);
}

void ToProto(const Shape& shape, proto::ShapeProto* p) {
  p->set_dtype(static_cast<int32_t>(shape.dtype));
  FromVector(shape.dims, p->mutable_dims());
}

absl::StatusOr<Shape> FromProto(const proto::ShapeProto& p) {
  if (!IsValidDType(p.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("invalid dtype ", p.dtype()));
  }
  Shape shape(static_cast<DType>(p.dtype()), ToVector(p.dims()));
  return shape;
}

absl::StatusOr<Function> FromProto(const proto::FunctionProto& p, int depth);

absl::StatusOr<Instruction> FromProto(const proto::InstructionProto& p, int depth) {
  Instruction inst;
  if (p.op() < 0 || p.op() >= kNumOpKinds) {
    return absl::InvalidArgumentError(absl::StrCat("invalid op ", p.op()));
  }
  inst.op = static_cast<OpKind>(p.op());
  CW_ASSIGN_OR_RETURN(inst.shape, FromProto(p.shape()));
  inst.operands.assign(p.operands().begin(), p.operands().end());
  inst.parameter_index = p.parameter_index();
  if (p.has_literal()) {
    CW_ASSIGN_OR_RETURN(Shape ls, FromProto(p.literal().shape()));
    // Checked before allocating: the shape's size must be sane and match
    // the bytes actually present.
    CW_RETURN_IF_ERROR(ValidateShape(ls));
    if (ls.byte_size() != static_cast<int64_t>(p.literal().data().size())) {
      return absl::InvalidArgumentError(absl::StrCat("literal of ", ls.ToString(), " carries ",
                                                     p.literal().data().size(), " bytes"));
    }
    inst.literal = Literal(ls);
    if (ls.byte_size() > 0) {
      std::memcpy(inst.literal.data(), p.literal().data().data(), p.literal().data().size());
    }
  }
  inst.dims = ToVector(p.dims());
  inst.delay_us = p.delay_us();
  inst.axes.assign(p.axes().begin(), p.axes().end());
  if (p.reduce_kind() < 0 || p.reduce_kind() > static_cast<int>(ReduceKind::kMax)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid reduce kind ", p.reduce_kind()));
  }
  inst.reduce_kind = static_cast<ReduceKind>(p.reduce_kind());
  inst.dimension = p.dimension();
  inst.concat_dimension = p.concat_dimension();
  if (p.comparison() < 0 || p.comparison() > static_cast<int>(Comparison::kGe)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid comparison ", p.comparison()));
  }
  inst.comparison = static_cast<Comparison>(p.comparison());
  inst.starts = ToVector(p.starts());
  inst.limits = ToVector(p.limits());
  inst.pad_low = ToVector(p.pad_low());
  inst.pad_high = ToVector(p.pad_high());
  inst.lhs_batch = ToVector(p.lhs_batch());
  inst.rhs_batch = ToVector(p.rhs_batch());
  inst.lhs_contracting = ToVector(p.lhs_contracting());
  inst.rhs_contracting = ToVector(p.rhs_contracting());
  for (const proto::PairProto& pair : p.source_target_pairs()) {
    inst.source_target_pairs.push_back({pair.source(), pair.target()});
  }
  if (p.subfunctions_size() > 0 && depth >= kMaxControlFlowDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("control flow nests deeper than ", kMaxControlFlowDepth, " levels"));
  }
  for (const proto::FunctionProto& sub : p.subfunctions()) {
    CW_ASSIGN_OR_RETURN(Function f, FromProto(sub, depth + 1));
    inst.subfunctions.push_back(std::make_shared<const Function>(std::move(f)));
  }
  inst.result_index = p.result_index();
  inst.window_strides = ToVector(p.window_strides());
  inst.window_dilations = ToVector(p.window_dilations());
  inst.feature_groups = p.feature_groups();
  return inst;
}

absl::StatusOr<Function> FromProto(const proto::FunctionProto& p, int depth) {
  std::vector<Instruction> instructions;
  instructions.reserve(static_cast<size_t>(p.instructions_size()));
  for (int i = 0; i < p.instructions_size(); ++i) {
    absl::StatusOr<Instruction> inst = FromProto(p.instructions(i), depth);
    if (!inst.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("function ", p.name(), ", instruction ", i,
                                                     ": ", inst.status().message()));
    }
    instructions.push_back(*std::move(inst));
  }
  return Function(p.name(), std::move(instructions),
                  std::vector<int>(p.parameters().begin(), p.parameters().end()),
                  std::vector<int>(p.outputs().begin(), p.outputs().end()));
}

void ToProto(const Function& function, proto::FunctionProto& p) {
  p.set_name(function.name());
  for (const Instruction& inst : function.instructions()) {
    proto::InstructionProto* ip = p.add_instructions();
    ip->set_op(static_cast<int32_t>(inst.op));
    ToProto(inst.shape, ip->mutable_shape());
    for (int o : inst.operands) ip->add_operands(o);
    ip->set_parameter_index(inst.parameter_index);
    if (inst.op == OpKind::kConstant) {
      ToProto(inst.literal.shape(), ip->mutable_literal()->mutable_shape());
      ip->mutable_literal()->set_data(reinterpret_cast<const char*>(inst.literal.data()),
                                      inst.literal.byte_size());
    }
    FromVector(inst.dims, ip->mutable_dims());
    ip->set_delay_us(inst.delay_us);
    for (const std::string& a : inst.axes) ip->add_axes(a);
    ip->set_reduce_kind(static_cast<int32_t>(inst.reduce_kind));
    ip->set_dimension(inst.dimension);
    ip->set_concat_dimension(inst.concat_dimension);
    ip->set_comparison(static_cast<int32_t>(inst.comparison));
    FromVector(inst.starts, ip->mutable_starts());
    FromVector(inst.limits, ip->mutable_limits());
    FromVector(inst.pad_low, ip->mutable_pad_low());
    FromVector(inst.pad_high, ip->mutable_pad_high());
    FromVector(inst.lhs_batch, ip->mutable_lhs_batch());
    FromVector(inst.rhs_batch, ip->mutable_rhs_batch());
    FromVector(inst.lhs_contracting, ip->mutable_lhs_contracting());
    FromVector(inst.rhs_contracting, ip->mutable_rhs_contracting());
    for (const auto& [s, t] : inst.source_target_pairs) {
      proto::PairProto* pair = ip->add_source_target_pairs();
      pair->set_source(s);
      pair->set_target(t);
    }
    for (const auto& sub : inst.subfunctions) {
      if (sub != nullptr) ToProto(*sub, *ip->add_subfunctions());
    }
    ip->set_result_index(inst.result_index);
    FromVector(inst.window_strides, ip->mutable_window_strides());
    FromVector(inst.window_dilations, ip->mutable_window_dilations());
    ip->set_feature_groups(inst.feature_groups);
  }
  for (int i : function.parameters()) p.add_parameters(i);
  for (int i : function.outputs()) p.add_outputs(i);
}

}  // namespace

std::string Serialize(const Function& function) {
  proto::FunctionProto p;
  ToProto(function, p);
  std::string out;
  p.SerializeToString(&out);
  return out;
}

absl::StatusOr<Function> Deserialize(absl::string_view bytes) {
  proto::FunctionProto p;
  if (!p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("not a serialised function (protobuf parse failed)");
  }
  CW_ASSIGN_OR_RETURN(Function function, FromProto(p, 0));
  CW_RETURN_IF_ERROR(Verify(function));
  return function;
}

}  // namespace causeway::ir
