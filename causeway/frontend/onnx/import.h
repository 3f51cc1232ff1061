// ONNX models as Causeway functions. An ONNX model (opsets 7 to 17; older
// ones through ONNX's version converter) becomes one ir::Function: its graph
// inputs are the function's parameters, its initializers constants, its
// outputs the function's results. Shapes are static: a dimension the model
// leaves symbolic (the batch) is fixed by the shapes of the inputs given at
// import, as cw.compile fixes them. docs/ONNX.md lists the ops.
//
// Dtypes: float, int32 and bool map to f32, i32 and pred. float16,
// bfloat16, int64, int8 and uint8 are stored as such (f16, bf16, i64, i8,
// u8: at the function's parameters and results, and in constants) and
// computed in f32 or i32; int64 (ONNX's type for indices and shapes) is
// thus computed as i32, as JAX does without x64: a constant outside int32
// is refused by name. double, int16, uint16, uint32 and uint64 are stored
// and computed as f32 or i32. An op, attribute or dtype the importer cannot
// convert is an UNIMPLEMENTED error naming the node and its op.
//
// The ONNX library (libonnx-dev) stays inside this component: the interface
// takes serialized protobufs.
#ifndef CAUSEWAY_FRONTEND_ONNX_IMPORT_H_
#define CAUSEWAY_FRONTEND_ONNX_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/ir/function.h"
#include "causeway/ir/literal.h"

namespace causeway::onnx_import {

// A host tensor as ONNX describes it: its values as a Causeway literal and
// the ONNX element type it has (onnx.TensorProto.DataType: 1 float, 6
// int32, 7 int64, 9 bool).
struct HostTensor {
  std::string name;
  int32_t onnx_type = 0;
  ir::Literal literal;
  // The exact values of an integer tensor (int64 before narrowing).
  std::vector<int64_t> ints;
};

// A serialized onnx.TensorProto (a test's input_0.pb). INVALID_ARGUMENT if
// it does not parse; UNIMPLEMENTED for an element type Causeway lacks.
absl::StatusOr<HostTensor> ParseTensor(absl::string_view bytes);
// `t`'s values in the dtype the model stores its type in (what a parameter
// of ImportOptions::stored_dtypes holds): int64 from `ints`, float16 from
// the f32 values. `t.literal` itself when the two are one dtype or `t` has
// no ONNX type.
absl::StatusOr<ir::Literal> StoredLiteral(const HostTensor& t);
// The HostTensor of a literal in a stored dtype (a .npy file's, a result's):
// its ONNX type follows the dtype, its literal is in the compute dtype.
HostTensor FromLiteral(std::string name, const ir::Literal& stored);
// The ONNX element type's name, e.g. "int64".
std::string TypeName(int32_t onnx_type);

struct ImportOptions {
  // Values of graph inputs, by name. Their shapes fix the inputs' symbolic
  // dimensions.
  std::vector<HostTensor> inputs;
  // Integer inputs whose values are fixed when the model is compiled (an
  // op needs them then: Reshape's shape, Slice's starts): they are
  // constants of the function, not parameters. By name, or every integer
  // input given (as ONNX's node tests need).
  std::vector<std::string> constant_inputs;
  bool integer_inputs_constant = false;
  // Every value given is also known when compiled, for the ops that need
  // one then (Resize's scales), while the input stays a parameter: the
  // function is then only right for those values (ONNX's node tests give
  // such operands as inputs).
  bool given_values_known = false;
  // The function is to run on one of this many parts of the batch
  // (dimension 0 of every input that is not constant), as on each device of
  // a data axis: each input given is one part, and a batch the model fixes
  // must be that many parts.
  int64_t batch_parts = 1;
  // Every floating-point initializer (the model's weights) is a parameter
  // of the function, after the inputs (ImportedModel::weights), so that a
  // gradient can be taken against it and the model fine-tuned. An op that
  // needs a weight's values when compiled (Resize's scales) still reads
  // them, as a constant.
  bool trainable = false;
  // Parameters and results hold float16, bfloat16, int64, int8 and uint8
  // values as the model stores them (ModelValue::shape), converted to and
  // from their compute dtypes inside the function. False: they are in their
  // compute dtypes (f32, i32), as Python's arrays are (it narrows int64 to
  // int32, as JAX does without x64).
  bool stored_dtypes = true;
};

struct ModelValue {
  std::string name;
  ir::Shape shape;
  int32_t onnx_type = 0;
};

struct ImportedModel {
  ir::Function function;
  // The graph's inputs (initializers excluded), in order, and which of them
  // are the function's parameters (the others were given and are constant).
  std::vector<ModelValue> inputs;
  std::vector<bool> is_parameter;
  std::vector<ModelValue> outputs;
  int64_t opset = 0;  // of the default domain, after conversion
  // With ImportOptions::trainable: the weights that are parameters, in
  // order, after the inputs that are.
  std::vector<std::string> weights;
};

// INVALID_ARGUMENT for bytes that are not a model, or a model that fails
// ONNX's checker or its shape inference; UNIMPLEMENTED as above.
absl::StatusOr<ImportedModel> Import(absl::string_view model_bytes,
                                     const ImportOptions& options = {});
// Import of a file; NOT_FOUND if it cannot be read.
absl::StatusOr<ImportedModel> ImportFile(const std::string& path,
                                         const ImportOptions& options = {});

// The graph inputs a model declares (initializers excluded), in order, as
// it states them: a symbolic dimension is -1, the dtype the one Causeway
// stores the ONNX type in. INVALID_ARGUMENT for bytes that are not a
// model; UNIMPLEMENTED for an input that is not a tensor of a type it has.
absl::StatusOr<std::vector<ModelValue>> DeclaredInputs(absl::string_view model_bytes);

// The floating-point initializers of a model (its weights), in the order
// ImportOptions::trainable makes them parameters, with their values.
// INVALID_ARGUMENT for bytes that are not a model or a malformed tensor.
absl::StatusOr<std::vector<HostTensor>> Weights(absl::string_view model_bytes);

// The ops the importer converts (default domain), sorted.
std::vector<std::string> SupportedOps();

}  // namespace causeway::onnx_import

#endif  // CAUSEWAY_FRONTEND_ONNX_IMPORT_H_
