#include "causeway/frontend/onnx/import.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/files.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"
#include "causeway/ir/elements.h"
#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

namespace causeway::onnx_import {
namespace {

const OpTable& Ops() {
  static const OpTable* const table = [] {
    auto* t = new OpTable;
    AddElementwiseOps(*t);
    AddShapeOps(*t);
    AddNnOps(*t);
    AddIndexOps(*t);
    AddConvOps(*t);
    AddResizeOps(*t);
    AddControlFlowOps(*t);
    AddEinsumOps(*t);
    AddRecurrentOps(*t);
    return t;
  }();
  return *table;
}

// The dims of a value_info's tensor type; symbolic ones are -1 (named in
// `symbols`).
std::vector<int64_t> DimsOf(const ::onnx::TypeProto& type, std::vector<std::string>* symbols) {
  std::vector<int64_t> dims;
  for (const auto& d : type.tensor_type().shape().dim()) {
    if (d.has_dim_value()) {
      dims.push_back(d.dim_value());
    } else {
      dims.push_back(-1);
      if (symbols != nullptr) symbols->push_back(d.has_dim_param() ? d.dim_param() : "?");
    }
  }
  return dims;
}

// A graph input as the model declares it (symbolic dims -1, named in
// `symbols`).
absl::StatusOr<ModelValue> InputOf(const ::onnx::ValueInfoProto& in,
                                   std::vector<std::string>* symbols) {
  if (!in.type().has_tensor_type()) {
    return absl::UnimplementedError(absl::StrCat("input '", in.name(), "' is not a tensor"));
  }
  const int32_t type = in.type().tensor_type().elem_type();
  absl::StatusOr<ir::DType> dtype = StoredDTypeOf(type);
  if (!dtype.ok()) return Annotate(dtype.status(), absl::StrCat("input '", in.name(), "'"));
  return ModelValue{in.name(), ir::Shape(*dtype, DimsOf(in.type(), symbols)), type};
}

std::string NodeName(const ::onnx::NodeProto& node, int index) {
  const std::string name = node.name().empty() ? absl::StrCat("#", index) : "'" + node.name() + "'";
  return absl::StrCat("node ", name, " (", node.op_type(), ")");
}

}  // namespace

std::string TypeName(int32_t onnx_type) {
  if (::onnx::TensorProto::DataType_IsValid(onnx_type)) {
    std::string name = ::onnx::TensorProto::DataType_Name(
        static_cast<::onnx::TensorProto::DataType>(onnx_type));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    return name;
  }
  return absl::StrCat("type ", onnx_type);
}

// Element types Causeway has no dtype for yet are computed in one it has:
// double, float16 and bfloat16 as f32; int8, uint8, int16, uint16, uint32,
// int64 and uint64 as i32 (a value outside int32 is refused where it
// reaches the function).
absl::StatusOr<ir::DType> DTypeOf(int32_t onnx_type) {
  switch (onnx_type) {
    case kFloat:
    case kDouble:
    case kFloat16:
    case kBFloat16: return ir::DType::kF32;
    case 2:   // uint8
    case 3:   // int8
    case 4:   // uint16
    case 5:   // int16
    case kInt32:
    case kInt64:
    case 12:  // uint32
    case 13:  // uint64
      return ir::DType::kI32;
    case kBool: return ir::DType::kPred;
    default:
      return absl::UnimplementedError(
          absl::StrCat("element type ", TypeName(onnx_type),
                       " (Causeway computes floating types as float32, integers as int32, "
                       "and has bool)"));
  }
}

absl::StatusOr<ir::DType> StoredDTypeOf(int32_t onnx_type) {
  switch (onnx_type) {
    case kFloat16: return ir::DType::kF16;
    case kBFloat16: return ir::DType::kBF16;
    case kInt64: return ir::DType::kI64;
    case 3: return ir::DType::kI8;
    case 2: return ir::DType::kU8;
    default: return DTypeOf(onnx_type);
  }
}

ir::Value RoundTrip(ir::FunctionBuilder& b, ir::Value v, int32_t onnx_type) {
  absl::StatusOr<ir::DType> stored = StoredDTypeOf(onnx_type);
  // int64 holds every int32 value: nothing to round.
  if (!stored.ok() || !ir::IsStorageOnly(*stored) || *stored == ir::DType::kI64) return v;
  const ir::DType compute = b.shape(v).dtype;
  return b.Convert(b.Convert(v, *stored), compute);
}

HostTensor MakeInts(std::vector<int64_t> ints, std::vector<int64_t> dims, int32_t onnx_type) {
  HostTensor t;
  t.onnx_type = onnx_type;
  const ir::DType dtype = onnx_type == kBool ? ir::DType::kPred
                          : IsFloatType(onnx_type) ? ir::DType::kF32
                                                   : ir::DType::kI32;
  t.literal = ir::Literal(ir::Shape(dtype, std::move(dims)));
  for (size_t i = 0; i < ints.size(); ++i) {
    switch (dtype) {
      case ir::DType::kF32: t.literal.mutable_values<float>()[i] = static_cast<float>(ints[i]); break;
      case ir::DType::kI32:
        t.literal.mutable_values<int32_t>()[i] = static_cast<int32_t>(
            std::clamp<int64_t>(ints[i], std::numeric_limits<int32_t>::min(),
                                std::numeric_limits<int32_t>::max()));
        break;
      case ir::DType::kPred: t.literal.mutable_values<uint8_t>()[i] = ints[i] != 0; break;
      default: break;  // not a compute dtype
    }
  }
  if (!IsFloatType(onnx_type)) t.ints = std::move(ints);
  return t;
}

namespace {

// Bytes per element in raw_data.
int64_t RawWidth(int32_t t) {
  switch (t) {
    case 2: case 3: case kBool: return 1;
    case 4: case 5: case kFloat16: case kBFloat16: return 2;
    case kFloat: case kInt32: case 12: return 4;
    default: return 8;  // int64, uint64, double
  }
}

}  // namespace

absl::StatusOr<HostTensor> FromProto(const ::onnx::TensorProto& p) {
  if (p.data_location() == ::onnx::TensorProto::EXTERNAL) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", p.name(), "' keeps its data in an external file"));
  }
  CW_RETURN_IF_ERROR(DTypeOf(p.data_type()).status());
  const int32_t type = p.data_type();
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "' has a dimension of ", d));
    }
    n *= d;
  }
  const bool raw = p.has_raw_data();
  const std::string& bytes = p.raw_data();
  const int64_t width = RawWidth(type);
  // The values held, checked against the dims before anything is allocated.
  const int64_t held = raw ? static_cast<int64_t>(bytes.size()) / width
                       : type == kFloat ? p.float_data_size()
                       : type == kDouble ? p.double_data_size()
                       : type == kInt64 ? p.int64_data_size()
                       : type == 12 || type == 13 ? p.uint64_data_size()
                                                  : p.int32_data_size();
  if (held != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", p.name(), "' of ", n, " elements holds ", held));
  }
  // Element i, from raw bytes (little-endian) or the typed field.
  const auto raw_bits = [&](int64_t i) {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + i * width, static_cast<size_t>(width));
    return v;
  };
  if (IsFloatType(type)) {
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float f = 0;
      switch (type) {
        case kFloat: {
          if (raw) {
            const auto b = static_cast<uint32_t>(raw_bits(i));
            std::memcpy(&f, &b, 4);
          } else {
            f = p.float_data(static_cast<int>(i));
          }
          break;
        }
        case kDouble: {
          double d = 0;
          if (raw) {
            const uint64_t b = raw_bits(i);
            std::memcpy(&d, &b, 8);
          } else {
            d = p.double_data(static_cast<int>(i));
          }
          f = static_cast<float>(d);
          break;
        }
        default: {
          const auto h = static_cast<uint16_t>(raw ? raw_bits(i) : static_cast<uint64_t>(p.int32_data(static_cast<int>(i))));
          f = type == kFloat16 ? ir::HalfToFloat(h) : ir::BFloat16ToFloat(h);
        }
      }
      values[static_cast<size_t>(i)] = f;
    }
    HostTensor t;
    t.name = p.name();
    t.onnx_type = type;
    t.literal = ir::Literal::F32(dims, values);
    return t;
  }
  std::vector<int64_t> ints(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = 0;
    if (raw) {
      const uint64_t b = raw_bits(i);
      switch (type) {
        case 3: v = static_cast<int8_t>(b); break;
        case 5: v = static_cast<int16_t>(b); break;
        case kInt32: v = static_cast<int32_t>(b); break;
        case 13: v = b > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(b); break;
        default: v = static_cast<int64_t>(b); break;  // unsigned, int64
      }
    } else if (type == kInt64) {
      v = p.int64_data(static_cast<int>(i));
    } else if (type == 12 || type == 13) {
      const uint64_t b = p.uint64_data(static_cast<int>(i));
      v = b > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(b);
    } else {
      v = p.int32_data(static_cast<int>(i));
    }
    ints[static_cast<size_t>(i)] = v;
  }
  HostTensor t = MakeInts(std::move(ints), dims, type);
  t.name = p.name();
  return t;
}

absl::StatusOr<ir::Literal> StoredLiteral(const HostTensor& t) {
  if (t.onnx_type == 0) return t.literal;
  CW_ASSIGN_OR_RETURN(ir::DType stored, StoredDTypeOf(t.onnx_type));
  if (stored == t.literal.shape().dtype) return t.literal;
  if (!ir::IsFloating(stored) &&
      static_cast<int64_t>(t.ints.size()) == t.literal.shape().num_elements()) {
    return ir::ConvertLiteral(ir::Literal::I64(t.literal.shape().dims, t.ints), stored);
  }
  return ir::ConvertLiteral(t.literal, stored);
}

HostTensor FromLiteral(std::string name, const ir::Literal& stored) {
  const ir::DType dtype = stored.shape().dtype;
  int32_t type = kFloat;
  switch (dtype) {
    case ir::DType::kF32: type = kFloat; break;
    case ir::DType::kF16: type = kFloat16; break;
    case ir::DType::kBF16: type = kBFloat16; break;
    case ir::DType::kI32: type = kInt32; break;
    case ir::DType::kI64: type = kInt64; break;
    case ir::DType::kI8: type = 3; break;
    case ir::DType::kU8: type = 2; break;
    case ir::DType::kPred: type = kBool; break;
  }
  HostTensor t;
  if (ir::IsFloating(dtype)) {
    t.onnx_type = type;
    t.literal = dtype == ir::DType::kF32 ? stored : ir::ConvertLiteral(stored, ir::DType::kF32);
  } else {
    const ir::Literal wide = ir::ConvertLiteral(stored, ir::DType::kI64);
    const auto v = wide.values<int64_t>();
    t = MakeInts(std::vector<int64_t>(v.begin(), v.end()), stored.shape().dims, type);
  }
  t.name = std::move(name);
  return t;
}

absl::StatusOr<HostTensor> ParseTensor(absl::string_view bytes) {
  ::onnx::TensorProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("not a serialized onnx.TensorProto");
  }
  return FromProto(proto);
}

// --- Converter ---------------------------------------------------------

bool Converter::Has(const ::onnx::NodeProto& node, int i) const {
  return i < node.input_size() && !node.input(i).empty();
}

absl::StatusOr<const Entry*> Converter::Get(const ::onnx::NodeProto& node, int i) const {
  if (!Has(node, i)) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
  }
  auto it = values.find(node.input(i));
  if (it == values.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", i, " ('", node.input(i), "') is not defined before the node"));
  }
  return &it->second;
}

absl::StatusOr<ir::Value> Converter::In(const ::onnx::NodeProto& node, int i) {
  CW_ASSIGN_OR_RETURN(const Entry* e, Get(node, i));
  if (e->value.has_value()) return *e->value;
  const HostTensor& k = *e->known;
  for (int64_t v : k.ints) {
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return absl::UnimplementedError(absl::StrCat(
          "input ", i, " ('", node.input(i), "') holds ", v,
          ", outside int32 (Causeway computes int64 as int32)"));
    }
  }
  // A constant of a narrower type (float16 weights, int8 or uint8 tables)
  // is held as such and widened where it is read.
  ir::Value v;
  absl::StatusOr<ir::DType> stored = StoredDTypeOf(k.onnx_type);
  if (stored.ok() && ir::IsStorageOnly(*stored) && *stored != ir::DType::kI64 &&
      ir::ComputeDType(*stored) == k.literal.shape().dtype) {
    v = b.Convert(b.Constant(ir::ConvertLiteral(k.literal, *stored)), k.literal.shape().dtype);
  } else {
    v = b.Constant(k.literal);
  }
  values[node.input(i)].value = v;
  return v;
}

absl::StatusOr<std::optional<ir::Value>> Converter::InIfGiven(const ::onnx::NodeProto& node,
                                                               int i) {
  if (!Has(node, i)) return std::optional<ir::Value>();
  CW_ASSIGN_OR_RETURN(ir::Value v, In(node, i));
  return std::optional<ir::Value>(v);
}

absl::StatusOr<std::vector<int64_t>> Converter::Ints(const ::onnx::NodeProto& node, int i) const {
  CW_ASSIGN_OR_RETURN(const Entry* e, Get(node, i));
  if (!e->known.has_value() || IsFloatType(e->onnx_type)) {
    return absl::UnimplementedError(absl::StrCat(
        "input ", i, " ('", node.input(i),
        "') must be integers known when the model is compiled (a constant, an initializer or "
        "a given input), not computed at run time"));
  }
  return e->known->ints;
}

absl::StatusOr<std::vector<float>> Converter::Floats(const ::onnx::NodeProto& node, int i) const {
  CW_ASSIGN_OR_RETURN(const Entry* e, Get(node, i));
  if (!e->known.has_value()) {
    return absl::UnimplementedError(absl::StrCat("input ", i, " ('", node.input(i),
                                                 "') must be known when the model is compiled"));
  }
  if (!IsFloatType(e->onnx_type)) {
    std::vector<float> out;
    for (int64_t v : e->known->ints) out.push_back(static_cast<float>(v));
    return out;
  }
  auto v = e->known->literal.values<float>();
  return std::vector<float>(v.begin(), v.end());
}

int32_t Converter::TypeOf(const ::onnx::NodeProto& node, int i) const {
  absl::StatusOr<const Entry*> e = Get(node, i);
  return e.ok() ? (*e)->onnx_type : 0;
}

void Converter::Set(const ::onnx::NodeProto& node, int i, ir::Value v, int32_t onnx_type) {
  if (i >= node.output_size() || node.output(i).empty()) return;
  // An int8 or uint8 result wraps as ONNX's does, after every op (it is
  // computed in i32).
  if ((onnx_type == ::onnx::TensorProto::UINT8 || onnx_type == ::onnx::TensorProto::INT8) &&
      b.shape(v).dtype == ir::DType::kI32) {
    v = RoundTrip(b, v, onnx_type);
  }
  Entry& e = values[node.output(i)];
  e = Entry();
  e.value = v;
  e.shape = b.shape(v);
  e.onnx_type = onnx_type;
}

void Converter::SetKnown(const ::onnx::NodeProto& node, int i, HostTensor t) {
  if (i >= node.output_size() || node.output(i).empty()) return;
  Entry& e = values[node.output(i)];
  e = Entry();
  e.shape = t.literal.shape();
  e.onnx_type = t.onnx_type;
  e.known = std::move(t);
}

const ::onnx::AttributeProto* Converter::Attr(const ::onnx::NodeProto& node,
                                              absl::string_view name) const {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t Converter::AttrInt(const ::onnx::NodeProto& node, absl::string_view name,
                           int64_t def) const {
  const auto* a = Attr(node, name);
  return a == nullptr ? def : a->i();
}

float Converter::AttrFloat(const ::onnx::NodeProto& node, absl::string_view name,
                           float def) const {
  const auto* a = Attr(node, name);
  return a == nullptr ? def : a->f();
}

std::string Converter::AttrString(const ::onnx::NodeProto& node, absl::string_view name,
                                  std::string def) const {
  const auto* a = Attr(node, name);
  return a == nullptr ? def : a->s();
}

std::optional<std::vector<int64_t>> Converter::AttrInts(const ::onnx::NodeProto& node,
                                                        absl::string_view name) const {
  const auto* a = Attr(node, name);
  if (a == nullptr) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

ir::Value Converter::Scalar(double v, ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32: return b.Constant(ir::Literal::F32({}, {static_cast<float>(v)}));
    case ir::DType::kI32: return b.Constant(ir::Literal::I32({}, {static_cast<int32_t>(v)}));
    case ir::DType::kPred: {
      ir::Literal l(ir::Shape(ir::DType::kPred, {}));
      l.mutable_values<uint8_t>()[0] = v != 0;
      return b.Constant(std::move(l));
    }
    default:
      break;
  }
  return ir::Value{};
}

ir::Value Converter::Splat(ir::Value v, const std::vector<int64_t>& dims) {
  if (dims.empty()) return v;
  return b.Broadcast(v, dims, {});
}

ir::Value Converter::Full(double v, ir::DType dtype, const std::vector<int64_t>& dims) {
  return Splat(Scalar(v, dtype), dims);
}

absl::StatusOr<std::vector<int64_t>> Converter::BroadcastDims(
    const std::vector<std::vector<int64_t>>& all) {
  size_t rank = 0;
  for (const auto& d : all) rank = std::max(rank, d.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& d : all) {
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t& o = out[rank - d.size() + i];
      if (d[i] == o || d[i] == 1) continue;
      if (o != 1) {
        std::vector<std::string> text;
        for (const auto& x : all) text.push_back(absl::StrCat("[", absl::StrJoin(x, ","), "]"));
        return absl::InvalidArgumentError(
            absl::StrCat("shapes ", absl::StrJoin(text, ", "), " do not broadcast"));
      }
      o = d[i];
    }
  }
  return out;
}

absl::StatusOr<ir::Value> Converter::BroadcastTo(ir::Value v, const std::vector<int64_t>& dims) {
  const std::vector<int64_t>& have = b.shape(v).dims;
  if (have == dims) return v;
  if (have.size() > dims.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot broadcast rank ", have.size(),
                                                   " to rank ", dims.size()));
  }
  std::vector<int64_t> map(have.size());
  for (size_t i = 0; i < have.size(); ++i) map[i] = static_cast<int64_t>(dims.size() - have.size() + i);
  return b.Broadcast(v, dims, map);
}

ir::Value Converter::BroadcastBack(ir::Value reduced, const std::vector<int64_t>& dims,
                                   const std::vector<int64_t>& axes) {
  std::vector<int64_t> map;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) map.push_back(i);
  }
  return b.Broadcast(reduced, dims, map);
}

ir::Value Converter::LogSoftmax(ir::Value x, const std::vector<int64_t>& axes) {
  const std::vector<int64_t> dims = b.shape(x).dims;
  const ir::Value s = b.Sub(x, BroadcastBack(b.ReduceMax(x, axes), dims, axes));
  const ir::Value sum = BroadcastBack(b.ReduceSum(b.Exp(s), axes), dims, axes);
  return b.Sub(s, b.Log(sum));
}

ir::Value Converter::WrapNegative(ir::Value idx, int64_t dim) {
  const std::vector<int64_t> d = b.shape(idx).dims;
  const ir::Value neg = b.Compare(idx, Full(0, ir::DType::kI32, d), ir::Comparison::kLt);
  return b.Select(neg, b.Add(idx, Full(static_cast<double>(dim), ir::DType::kI32, d)), idx);
}

absl::StatusOr<std::vector<ir::Value>> Converter::Broadcasted(const ::onnx::NodeProto& node,
                                                              int first) {
  std::vector<ir::Value> in;
  std::vector<std::vector<int64_t>> dims;
  for (int i = first; i < node.input_size(); ++i) {
    if (!Has(node, i)) continue;
    CW_ASSIGN_OR_RETURN(ir::Value v, In(node, i));
    in.push_back(v);
    dims.push_back(b.shape(v).dims);
  }
  CW_ASSIGN_OR_RETURN(std::vector<int64_t> to, BroadcastDims(dims));
  for (ir::Value& v : in) {
    CW_ASSIGN_OR_RETURN(v, BroadcastTo(v, to));
  }
  return in;
}

absl::StatusOr<int64_t> Axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", axis, " outside rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

absl::StatusOr<ir::Value> Converter::Named(const std::string& name) {
  auto it = values.find(name);
  if (it == values.end()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is never computed"));
  }
  if (it->second.value.has_value()) return *it->second.value;
  ::onnx::NodeProto use;
  use.add_input(name);
  return In(use, 0);
}

absl::Status AddInitializers(Converter& c, const ::onnx::GraphProto& graph) {
  for (const auto& init : graph.initializer()) {
    absl::StatusOr<HostTensor> t = FromProto(init);
    if (!t.ok()) return Annotate(t.status(), absl::StrCat("initializer '", init.name(), "'"));
    Entry& e = c.values[init.name()];
    e = Entry();
    e.shape = t->literal.shape();
    e.onnx_type = t->onnx_type;
    e.known = std::move(*t);
  }
  return absl::OkStatus();
}

absl::Status ConvertNodes(Converter& c, const ::onnx::GraphProto& graph) {
  for (int n = 0; n < graph.node_size(); ++n) {
    const ::onnx::NodeProto& node = graph.node(n);
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      return absl::UnimplementedError(
          absl::StrCat(NodeName(node, n), ": domain '", node.domain(), "' is not supported"));
    }
    auto op = Ops().find(node.op_type());
    if (op == Ops().end()) {
      return absl::UnimplementedError(
          absl::StrCat(NodeName(node, n), ": op ", node.op_type(), " is not supported"));
    }
    absl::Status s = op->second(c, node);
    if (s.ok()) s = c.b.status();
    if (!s.ok()) return Annotate(s, NodeName(node, n));
  }
  return absl::OkStatus();
}

// --- Import ------------------------------------------------------------

std::vector<std::string> SupportedOps() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : Ops()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

// The window attributes of every convolution and pooling node of `graph`
// and its subgraphs (strides, dilations, kernel_shape: at least 1; pads: at
// least 0), which
// ONNX's shape inference uses as divisors and sizes before any check of its
// own. INVALID_ARGUMENT naming the node.
static absl::Status CheckWindowAttributes(const ::onnx::GraphProto& graph) {
  for (int k = 0; k < graph.node_size(); ++k) {
    const ::onnx::NodeProto& node = graph.node(k);
    // The ops with windows; elsewhere these names mean other things (an
    // old Pad's negative pads crop).
    static const absl::flat_hash_set<std::string>* const windowed =
        new absl::flat_hash_set<std::string>{
            "Conv",    "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
            "AveragePool", "LpPool",    "MaxUnpool",   "DeformConv",  "Col2Im"};
    const bool window = node.domain().empty() && windowed->contains(node.op_type());
    for (const ::onnx::AttributeProto& a : node.attribute()) {
      const bool positive = window && (a.name() == "strides" || a.name() == "dilations" ||
                                       a.name() == "kernel_shape");
      const bool non_negative = window && a.name() == "pads";
      if (positive || non_negative) {
        for (int64_t v : a.ints()) {
          if (v < (positive ? 1 : 0)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "node #", k, " (", node.op_type(), node.name().empty() ? "" : " ",
                node.name(), "): attribute ", a.name(), " holds ", v, "; it must be at least ",
                positive ? 1 : 0));
          }
        }
      }
      if (a.has_g()) CW_RETURN_IF_ERROR(CheckWindowAttributes(a.g()));
      for (const ::onnx::GraphProto& g : a.graphs()) CW_RETURN_IF_ERROR(CheckWindowAttributes(g));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ImportedModel> Import(absl::string_view model_bytes, const ImportOptions& options) {
  ::onnx::ModelProto model;
  if (!model.ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size()))) {
    return absl::InvalidArgumentError("not an ONNX model: the bytes do not parse as onnx.ModelProto");
  }
  int64_t opset = 0;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the model fails ONNX's checker: ", e.what()));
  }
  std::map<std::string, const HostTensor*> given;
  for (const HostTensor& t : options.inputs) given[t.name] = &t;
  absl::flat_hash_map<std::string, bool> is_initializer;
  for (const auto& init : model.graph().initializer()) is_initializer[init.name()] = true;
  // Fix the inputs' shapes from the values given, so that shape inference
  // sees static shapes.
  for (auto& in : *model.mutable_graph()->mutable_input()) {
    if (is_initializer.contains(in.name())) continue;
    auto it = given.find(in.name());
    if (it == given.end() || !in.type().has_tensor_type()) continue;
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    const std::vector<int64_t>& have = it->second->literal.shape().dims;
    bool fits = shape->dim_size() == static_cast<int>(have.size()) || !in.type().tensor_type().has_shape();
    const bool constant =
        options.integer_inputs_constant ||
        std::find(options.constant_inputs.begin(), options.constant_inputs.end(), in.name()) !=
            options.constant_inputs.end();
    for (int d = 0; fits && d < shape->dim_size(); ++d) {
      const int64_t parts = d == 0 && !constant ? options.batch_parts : 1;
      fits = !shape->dim(d).has_dim_value() ||
             shape->dim(d).dim_value() == have[static_cast<size_t>(d)] * parts;
    }
    absl::StatusOr<ir::DType> want = DTypeOf(in.type().tensor_type().elem_type());
    if (!fits || (want.ok() && *want != it->second->literal.shape().dtype)) {
      std::vector<std::string> dims;
      for (const auto& d : shape->dim()) {
        dims.push_back(d.has_dim_value() ? absl::StrCat(d.dim_value()) : d.dim_param());
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", in.name(), "' is ", it->second->literal.shape().ToString(), "; the model wants ",
          TypeName(in.type().tensor_type().elem_type()), "[", absl::StrJoin(dims, ","), "]"));
    }
    shape->clear_dim();
    for (int64_t d : it->second->literal.shape().dims) shape->add_dim()->set_dim_value(d);
  }
  if (options.batch_parts > 1) {
    // The shapes the model states for outputs and intermediates are of the
    // whole batch: inference recomputes them for one part.
    model.mutable_graph()->clear_value_info();
    for (auto& out : *model.mutable_graph()->mutable_output()) {
      if (out.type().has_tensor_type()) out.mutable_type()->mutable_tensor_type()->clear_shape();
    }
  }
  // ONNX's shape inference divides by some attributes without checking
  // them (a stride of 0 is a SIGFPE inside it): those are checked first.
  CW_RETURN_IF_ERROR(CheckWindowAttributes(model.graph()));
  try {
    ::onnx::shape_inference::InferShapes(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("ONNX shape inference fails: ", e.what()));
  }
  if (opset == 0) {
    return absl::UnimplementedError("the model imports no opset of the default ONNX domain");
  }
  if (opset < 7) {
    try {
      // (The converter needs the shapes inferred above.)
      model = ::onnx::version_conversion::ConvertVersion(model, 7);
      ::onnx::shape_inference::InferShapes(model);
      opset = 7;
    } catch (const std::exception& e) {
      return absl::UnimplementedError(
          absl::StrCat("opset ", opset, " (before 7) could not be converted: ", e.what()));
    }
  }
  if (opset > 17) {
    return absl::UnimplementedError(absl::StrCat("opset ", opset, " (this importer reads 7 to 17)"));
  }
  const ::onnx::GraphProto& graph = model.graph();
  ImportedModel out;
  out.opset = opset;
  Converter c(graph.name().empty() ? std::string("onnx_model") : graph.name(), opset);
  CW_RETURN_IF_ERROR(AddInitializers(c, graph));
  for (const auto& in : graph.input()) {
    if (is_initializer.contains(in.name())) continue;
    std::vector<std::string> symbols;
    CW_ASSIGN_OR_RETURN(ModelValue mv, InputOf(in, &symbols));
    if (!options.stored_dtypes) mv.shape.dtype = ir::ComputeDType(mv.shape.dtype);
    const int32_t type = mv.onnx_type;
    if (!symbols.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", in.name(), "' has symbolic dimensions (", absl::StrJoin(symbols, ", "),
          "): give its shape (an input of that shape) to fix them"));
    }
    Entry& e = c.values[in.name()];
    e.shape = ir::Shape(ir::ComputeDType(mv.shape.dtype), mv.shape.dims);
    e.onnx_type = type;
    auto it = given.find(in.name());
    // Integer inputs named constant are known: an op may need them at
    // compile time.
    const bool constant =
        options.integer_inputs_constant ||
        std::find(options.constant_inputs.begin(), options.constant_inputs.end(), in.name()) !=
            options.constant_inputs.end();
    if (it != given.end() && !IsFloatType(type) && constant) {
      if (it->second->literal.shape() != e.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", in.name(), "' given as ", it->second->literal.shape().ToString(),
            ", the model says ", e.shape.ToString()));
      }
      e.known = *it->second;
    }
    out.inputs.push_back(std::move(mv));
  }
  // Parameters: every input that is not constant, in order.
  std::vector<ir::Value> params(out.inputs.size());
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    Entry& e = c.values[out.inputs[i].name];
    if (!e.known.has_value()) {
      // The parameter holds the input as the model stores it; the nodes
      // read it in its compute dtype.
      params[i] = c.b.Parameter(out.inputs[i].shape);
      e.value = out.inputs[i].shape.dtype == e.shape.dtype ? params[i]
                                                            : c.b.Convert(params[i], e.shape.dtype);
      out.is_parameter.push_back(true);
      auto it = given.find(out.inputs[i].name);
      if (options.given_values_known && it != given.end()) e.known = *it->second;
    } else {
      out.is_parameter.push_back(false);
    }
  }
  if (options.trainable) {
    for (const auto& init : graph.initializer()) {
      Entry& e = c.values[init.name()];
      if (!IsFloatType(e.onnx_type) || e.trainable) continue;
      e.value = c.b.Parameter(e.shape);
      e.trainable = true;
      out.weights.push_back(init.name());
    }
  }
  CW_RETURN_IF_ERROR(ConvertNodes(c, graph));
  std::vector<ir::Value> results;
  for (const auto& o : graph.output()) {
    CW_ASSIGN_OR_RETURN(ir::Value v, c.Named(o.name()));
    // Each result in the dtype the model stores its type in.
    const int32_t type = c.values[o.name()].onnx_type;
    absl::StatusOr<ir::DType> stored = StoredDTypeOf(type);
    if (options.stored_dtypes && stored.ok() && *stored != c.b.shape(v).dtype &&
        ir::ComputeDType(*stored) == c.b.shape(v).dtype) {
      v = c.b.Convert(v, *stored);
    }
    results.push_back(v);
    out.outputs.push_back(ModelValue{o.name(), c.b.shape(v), type});
  }
  absl::StatusOr<ir::Function> f = c.b.Build(results);
  if (!f.ok()) return Annotate(f.status(), "the converted function does not verify");
  out.function = std::move(*f);
  return out;
}

absl::StatusOr<std::vector<ModelValue>> DeclaredInputs(absl::string_view model_bytes) {
  ::onnx::ModelProto model;
  if (!model.ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size()))) {
    return absl::InvalidArgumentError("not an ONNX model: the bytes do not parse as onnx.ModelProto");
  }
  absl::flat_hash_map<std::string, bool> is_initializer;
  for (const auto& init : model.graph().initializer()) is_initializer[init.name()] = true;
  std::vector<ModelValue> out;
  for (const auto& in : model.graph().input()) {
    if (is_initializer.contains(in.name())) continue;
    CW_ASSIGN_OR_RETURN(ModelValue mv, InputOf(in, nullptr));
    out.push_back(std::move(mv));
  }
  return out;
}

absl::StatusOr<std::vector<HostTensor>> Weights(absl::string_view model_bytes) {
  ::onnx::ModelProto model;
  if (!model.ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size()))) {
    return absl::InvalidArgumentError("not an ONNX model: the bytes do not parse as onnx.ModelProto");
  }
  std::vector<HostTensor> out;
  absl::flat_hash_map<std::string, bool> seen;
  for (const auto& init : model.graph().initializer()) {
    if (!IsFloatType(init.data_type()) || seen[init.name()]) continue;
    seen[init.name()] = true;
    absl::StatusOr<HostTensor> t = FromProto(init);
    if (!t.ok()) return Annotate(t.status(), absl::StrCat("initializer '", init.name(), "'"));
    out.push_back(*std::move(t));
  }
  return out;
}

absl::StatusOr<ImportedModel> ImportFile(const std::string& path, const ImportOptions& options) {
  // Models over 2 GiB keep their weights in external data files, which
  // protobuf's limit on one message requires anyway.
  CW_ASSIGN_OR_RETURN(std::string bytes,
                      ReadInputFile(path, int64_t{2} << 30, "ONNX model"));
  absl::StatusOr<ImportedModel> m = Import(bytes, options);
  if (!m.ok()) return Annotate(m.status(), path);
  return m;
}

}  // namespace causeway::onnx_import
