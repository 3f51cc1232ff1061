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

ir::Literal LiteralFromNumpy(const py::array& array) {
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
  const py::array c = py::array::ensure(array, py::array::c_style);
  std::vector<int64_t> dims(c.shape(), c.shape() + c.ndim());
  ir::Literal literal(ir::Shape(dtype, std::move(dims)));
  if (literal.byte_size() != static_cast<size_t>(c.nbytes())) {
    throw StatusError(absl::InternalError("numpy array size does not match its shape"));
  }
  if (literal.byte_size() > 0) std::memcpy(literal.data(), c.data(), literal.byte_size());
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
}
