// Internal to the ONNX importer: the state of one graph's conversion, which
// each op's converter (ops_*.cc) reads its inputs from and writes its
// outputs to. A value is a runtime value of the function being built, a
// value known when the model is compiled (initializers, Constant, Shape, and
// what is computed from them only), or both.
#ifndef CAUSEWAY_FRONTEND_ONNX_CONVERTER_H_
#define CAUSEWAY_FRONTEND_ONNX_CONVERTER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/frontend/onnx/import.h"
#include "causeway/ir/builder.h"
#include "onnx/onnx_pb.h"

namespace causeway::onnx_import {

// ONNX element types (onnx.TensorProto.DataType) the importer meets.
inline constexpr int32_t kFloat = 1;
inline constexpr int32_t kInt32 = 6;
inline constexpr int32_t kInt64 = 7;
inline constexpr int32_t kBool = 9;
inline constexpr int32_t kFloat16 = 10;
inline constexpr int32_t kDouble = 11;
inline constexpr int32_t kBFloat16 = 16;

// float, double, float16 and bfloat16: all computed as f32.
inline bool IsFloatType(int32_t t) {
  return t == kFloat || t == kDouble || t == kFloat16 || t == kBFloat16;
}

// The Causeway dtype an ONNX element type is computed in; UNIMPLEMENTED
// naming it for one Causeway lacks.
absl::StatusOr<ir::DType> DTypeOf(int32_t onnx_type);
// The Causeway dtype it is stored in, at the function's parameters and
// results and in constants: float16, bfloat16, int64, int8 and uint8 as
// such, the rest as DTypeOf.
absl::StatusOr<ir::DType> StoredDTypeOf(int32_t onnx_type);
// `v` (of its compute dtype) rounded or wrapped to what `onnx_type` holds
// and back: float16's and bfloat16's precision, int8's and uint8's range
// (int64 holds every int32; other types are returned as they are).
ir::Value RoundTrip(ir::FunctionBuilder& b, ir::Value v, int32_t onnx_type);
// A HostTensor from an onnx.TensorProto (initializers, Constant's value).
absl::StatusOr<HostTensor> FromProto(const ::onnx::TensorProto& proto);
// A known tensor of `onnx_type` (int32/int64 from `ints`, bool from their
// non-zero, float from `floats`) with `dims`.
HostTensor MakeInts(std::vector<int64_t> ints, std::vector<int64_t> dims,
                    int32_t onnx_type = kInt64);

struct Entry {
  std::optional<ir::Value> value;   // in the function being built
  std::optional<HostTensor> known;  // known when compiled
  ir::Shape shape;
  int32_t onnx_type = 0;
  // A weight made a parameter (ImportOptions::trainable): its runtime value
  // is what the function computes with, never a value folded from `known`.
  bool trainable = false;
};

class Converter {
 public:
  Converter(std::string name, int64_t opset) : b(std::move(name)), opset(opset) {}

  ir::FunctionBuilder b;
  const int64_t opset;
  absl::flat_hash_map<std::string, Entry> values;

  // Input `i` of `node` is given (an empty name is an omitted optional one).
  bool Has(const ::onnx::NodeProto& node, int i) const;
  absl::StatusOr<const Entry*> Get(const ::onnx::NodeProto& node, int i) const;
  // Its runtime value (a known one becomes a constant of the function).
  absl::StatusOr<ir::Value> In(const ::onnx::NodeProto& node, int i);
  // In() of an optional input: nullopt when it is omitted.
  absl::StatusOr<std::optional<ir::Value>> InIfGiven(const ::onnx::NodeProto& node, int i);
  // Its values, which must be known when the model is compiled
  // (UNIMPLEMENTED otherwise: computed at run time).
  absl::StatusOr<std::vector<int64_t>> Ints(const ::onnx::NodeProto& node, int i) const;
  absl::StatusOr<std::vector<float>> Floats(const ::onnx::NodeProto& node, int i) const;
  int32_t TypeOf(const ::onnx::NodeProto& node, int i) const;
  // The runtime value of the value named `name` (INVALID_ARGUMENT if none).
  absl::StatusOr<ir::Value> Named(const std::string& name);

  void Set(const ::onnx::NodeProto& node, int i, ir::Value v, int32_t onnx_type);
  void SetKnown(const ::onnx::NodeProto& node, int i, HostTensor t);

  const ::onnx::AttributeProto* Attr(const ::onnx::NodeProto& node, absl::string_view name) const;
  int64_t AttrInt(const ::onnx::NodeProto& node, absl::string_view name, int64_t def) const;
  float AttrFloat(const ::onnx::NodeProto& node, absl::string_view name, float def) const;
  std::string AttrString(const ::onnx::NodeProto& node, absl::string_view name,
                         std::string def) const;
  std::optional<std::vector<int64_t>> AttrInts(const ::onnx::NodeProto& node,
                                               absl::string_view name) const;

  // A copy: the builder's own shapes move as instructions are added.
  ir::Shape ShapeOf(ir::Value v) const { return b.shape(v); }
  // A scalar constant of `dtype` (f32 or i32; pred from v != 0).
  ir::Value Scalar(double v, ir::DType dtype);
  // `v` (a scalar value) broadcast to `dims`.
  ir::Value Splat(ir::Value v, const std::vector<int64_t>& dims);
  ir::Value Full(double v, ir::DType dtype, const std::vector<int64_t>& dims);
  // Numpy broadcasting: `v` to `dims` (its dims aligned to the right).
  absl::StatusOr<ir::Value> BroadcastTo(ir::Value v, const std::vector<int64_t>& dims);
  // The common shape of numpy broadcasting; INVALID_ARGUMENT if none.
  static absl::StatusOr<std::vector<int64_t>> BroadcastDims(
      const std::vector<std::vector<int64_t>>& dims);
  // `reduced` (`x` of `dims` reduced over `axes`) broadcast back to `dims`.
  ir::Value BroadcastBack(ir::Value reduced, const std::vector<int64_t>& dims,
                          const std::vector<int64_t>& axes);
  // log(softmax(x)) over `axes` (sorted), stable: x - max - log(sum(exp)).
  ir::Value LogSoftmax(ir::Value x, const std::vector<int64_t>& axes);
  // Integer indices (i32) with the negative ones counted from `dim`.
  ir::Value WrapNegative(ir::Value idx, int64_t dim);
  // Inputs `first`.. of `node` broadcast to their common shape.
  absl::StatusOr<std::vector<ir::Value>> Broadcasted(const ::onnx::NodeProto& node,
                                                     int first = 0);
};

// Enters `graph`'s initializers into `c` as known values.
absl::Status AddInitializers(Converter& c, const ::onnx::GraphProto& graph);
// Converts `graph`'s nodes in order into `c`, whose values already hold
// what they read (the graph's inputs, initializers, outer values); an error
// names the node.
absl::Status ConvertNodes(Converter& c, const ::onnx::GraphProto& graph);

// data[..., idx[...], ...] along `axis` element by element (ONNX's
// GatherElements): idx (i32, in range) has data's rank.
ir::Value GatherAlong(Converter& c, ir::Value data, ir::Value idx, int64_t axis);

// An axis attribute or value in [-rank, rank) as a dimension in [0, rank).
absl::StatusOr<int64_t> Axis(int64_t axis, int64_t rank);

using OpFn = absl::Status (*)(Converter& c, const ::onnx::NodeProto& node);
using OpTable = absl::flat_hash_map<std::string, OpFn>;
void AddElementwiseOps(OpTable& table);
void AddShapeOps(OpTable& table);
void AddNnOps(OpTable& table);
void AddIndexOps(OpTable& table);
void AddConvOps(OpTable& table);
void AddResizeOps(OpTable& table);
void AddControlFlowOps(OpTable& table);
void AddEinsumOps(OpTable& table);
void AddRecurrentOps(OpTable& table);

}  // namespace causeway::onnx_import

#endif  // CAUSEWAY_FRONTEND_ONNX_CONVERTER_H_
