// causeway._causeway.onnx_import: an ONNX model as a causeway.Function
// (causeway/frontend/onnx/import.h), for causeway.onnx.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "causeway/frontend/onnx/import.h"
#include "python/src/py_core.h"

namespace causeway::python {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw StatusError(absl::NotFoundError("cannot read " + path));
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

}  // namespace

void RegisterOnnx(py::module_& m) {
  m.def(
      "onnx_import",
      [](const std::string& path, const std::vector<py::tuple>& inputs,
         const std::vector<std::pair<std::string, py::array>>& constants, int64_t batch_parts,
         bool trainable) {
        onnx_import::ImportOptions options;
        options.batch_parts = batch_parts;
        options.trainable = trainable;
        options.stored_dtypes = false;  // Python's arrays are f32, i32 and bool
        // Shapes (and dtypes) of the inputs that are parameters.
        for (const py::tuple& t : inputs) {
          onnx_import::HostTensor h;
          h.name = t[0].cast<std::string>();
          const auto dims = t[1].cast<std::vector<int64_t>>();
          h.literal = ir::Literal(
              ir::Shape(ir::ComputeDType(DTypeFromName(t[2].cast<std::string>())), dims));
          options.inputs.push_back(std::move(h));
        }
        // Integer inputs fixed when the model is compiled.
        for (const auto& [name, array] : constants) {
          onnx_import::HostTensor h;
          h.name = name;
          h.literal = LiteralFromNumpy(array);
          if (h.literal.shape().dtype != ir::DType::kI32) {
            throw StatusError(absl::InvalidArgumentError(
                "a constant input must hold integers: " + name));
          }
          for (int32_t v : h.literal.values<int32_t>()) h.ints.push_back(v);
          options.inputs.push_back(std::move(h));
          options.constant_inputs.push_back(name);
        }
        onnx_import::ImportedModel model = Unwrap(onnx_import::ImportFile(path, options));
        py::list params, outputs, all;
        for (size_t i = 0; i < model.inputs.size(); ++i) {
          const auto& in = model.inputs[i];
          all.append(py::make_tuple(in.name, DimsTuple(in.shape.dims), NumpyName(in.shape.dtype),
                                    onnx_import::TypeName(in.onnx_type)));
          if (model.is_parameter[i]) params.append(in.name);
        }
        for (const auto& o : model.outputs) {
          outputs.append(py::make_tuple(o.name, onnx_import::TypeName(o.onnx_type)));
        }
        return py::make_tuple(std::move(model.function), params, outputs, all, model.weights);
      },
      py::arg("path"), py::arg("inputs"), py::arg("constants"), py::arg("batch_parts") = 1,
      py::arg("trainable") = false,
      "Imports the ONNX model at `path` with inputs of the given (name, shape, dtype), each one "
      "of `batch_parts` parts of the batch (a device's of a data axis); returns "
      "(Function, parameter names, outputs as (name, ONNX type), every graph input as (name, "
      "shape, dtype, ONNX type), the weights that are parameters after them when `trainable`).");
  m.def(
      "onnx_weights",
      [](const std::string& path) {
        const std::string bytes = ReadFile(path);
        py::list all;
        for (auto& w : Unwrap(onnx_import::Weights(bytes))) {
          all.append(py::make_tuple(w.name, NumpyFromLiteral(std::move(w.literal))));
        }
        return all;
      },
      py::arg("path"),
      "The floating-point initializers (weights) of the model at `path`, in order: (name, "
      "float32 array).");
  m.def(
      "onnx_inputs",
      [](const std::string& path) {
        const std::string bytes = ReadFile(path);
        py::list all;
        for (const auto& in : Unwrap(onnx_import::DeclaredInputs(bytes))) {
          all.append(py::make_tuple(in.name, DimsTuple(in.shape.dims),
                                    NumpyName(ir::ComputeDType(in.shape.dtype)),
                                    onnx_import::TypeName(in.onnx_type)));
        }
        return all;
      },
      py::arg("path"),
      "The graph inputs the model at `path` declares: (name, shape with -1 for a symbolic "
      "dimension, dtype, ONNX type).");
}

}  // namespace causeway::python
