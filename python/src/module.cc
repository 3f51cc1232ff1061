// The extension module causeway._causeway: errors, dtype and numpy
// conversions, and the registration of every binding.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "python/src/py_core.h"

namespace causeway::python {

StatusError::StatusError(absl::Status status) : status_(std::move(status)) {
  what_ = std::string(status_.message());
}

ClusterOwner::~ClusterOwner() = default;

ClientOwner::~ClientOwner() {
  // Disconnect before the cluster goes (the member order ensures it).
  client.reset();
}

const char* NumpyName(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
      return "float32";
    case ir::DType::kI32:
      return "int32";
    case ir::DType::kPred:
      return "bool";
  }
  return "?";
}

ir::DType DTypeFromName(const std::string& name) {
  if (name == "float32" || name == "f32") return ir::DType::kF32;
  if (name == "int32" || name == "i32") return ir::DType::kI32;
  if (name == "bool" || name == "pred") return ir::DType::kPred;
  throw StatusError(absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype ", name, ": causeway arrays are float32, int32 or bool")));
}

py::dtype NumpyDType(ir::DType dtype) { return py::dtype(NumpyName(dtype)); }

py::tuple DimsTuple(const std::vector<int64_t>& dims) {
  py::tuple t(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) t[i] = py::int_(dims[i]);
  return t;
}

ir::Shape ShapeOfNumpy(const py::array& array) {
  const py::dtype dt = array.dtype();
  ir::DType dtype;
  if (dt.is(py::dtype::of<float>())) {
    dtype = ir::DType::kF32;
  } else if (dt.is(py::dtype::of<int32_t>())) {
    dtype = ir::DType::kI32;
  } else if (dt.is(py::dtype::of<bool>())) {
    dtype = ir::DType::kPred;
  } else {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "unsupported dtype ", std::string(py::str(py::handle(dt))),
        ": causeway arrays are float32, int32 or bool")));
  }
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  // A broadcast array's shape may name more bytes than any machine has
  // (its strides are 0): refuse a size past 2^62 bytes before any product
  // of the dimensions can overflow.
  int64_t bytes = static_cast<int64_t>(ir::ByteSize(dtype));
  for (int64_t d : dims) {
    if (d == 0) {
      bytes = 0;
      break;
    }
  }
  for (int64_t d : dims) {
    if (bytes == 0) break;
    if (d < 0 || d > (int64_t{1} << 62) / bytes) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          "an array of shape ", ir::Shape(dtype, dims).ToString(), " is too large to hold")));
    }
    bytes *= d;
  }
  return ir::Shape(dtype, std::move(dims));
}

ir::Literal LiteralFromNumpy(const py::array& array) {
  ir::Literal literal(ShapeOfNumpy(array));  // std::bad_alloc becomes MemoryError
  if (literal.byte_size() == 0) return literal;
  if ((array.flags() & py::array::c_style) != 0) {
    std::memcpy(literal.data(), array.data(), literal.byte_size());
    return literal;
  }
  // Strided or broadcast: numpy copies it straight into the literal, with
  // no contiguous copy of the whole in between.
  py::array into(array.dtype(), literal.shape().dims, {}, literal.data(), py::none());
  py::module_::import("numpy").attr("copyto")(into, array);
  return literal;
}

py::array NumpyFromLiteral(ir::Literal literal) {
  auto* owned = new ir::Literal(std::move(literal));
  py::capsule free_literal(owned, [](void* p) { delete static_cast<ir::Literal*>(p); });
  const ir::Shape& shape = owned->shape();
  return py::array(NumpyDType(shape.dtype), shape.dims, {},
                   const_cast<std::byte*>(owned->data()), free_literal);
}

void RegisterErrors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const std::string code = absl::StatusCodeToString(e.status().code());
      py::object cls = py::module_::import("causeway._errors").attr("error_class")(code);
      py::object error = cls(std::string(e.status().message()), code);
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });
}

}  // namespace causeway::python

PYBIND11_MODULE(_causeway, m) {
  namespace cp = causeway::python;
  m.doc() = "Causeway's C++ client, ir builder and models (the causeway package wraps them)";
  cp::RegisterErrors(m);
  cp::RegisterIr(m);
  cp::RegisterClient(m);
  cp::RegisterModels(m);
  cp::RegisterCheckpoints(m);
#if CAUSEWAY_HAVE_ONNX
  cp::RegisterOnnx(m);
#endif
}
