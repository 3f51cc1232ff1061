// The extension module causeway._causeway: errors, dtype and numpy
// conversions, and the registration of every binding.
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/ir/elements.h"
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

// NumPy's name for each dtype NumPy has (it has no bfloat16: such arrays
// are fetched as float32, which holds them exactly, and cannot be put).
constexpr std::pair<const char*, ir::DType> kNumpyNames[] = {
    {"float32", ir::DType::kF32}, {"int32", ir::DType::kI32}, {"bool", ir::DType::kPred},
    {"float16", ir::DType::kF16}, {"int64", ir::DType::kI64}, {"int8", ir::DType::kI8},
    {"uint8", ir::DType::kU8}};

const char* NumpyName(ir::DType dtype) {
  if (dtype == ir::DType::kBF16) return "float32";
  for (const auto& [name, d] : kNumpyNames) {
    if (d == dtype) return name;
  }
  return "?";
}

ir::DType DTypeFromName(const std::string& name) {
  for (const auto& [numpy, d] : kNumpyNames) {
    if (name == numpy || name == ir::DTypeName(d)) return d;
  }
  if (name == "bfloat16" || name == "bf16") return ir::DType::kBF16;
  throw StatusError(absl::InvalidArgumentError(absl::StrCat(
      "unsupported dtype ", name,
      ": causeway arrays are float32, float16, bfloat16, int32, int64, int8, uint8 or bool")));
}

py::dtype NumpyDType(ir::DType dtype) { return py::dtype(NumpyName(dtype)); }

py::tuple DimsTuple(const std::vector<int64_t>& dims) {
  py::tuple t(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) t[i] = py::int_(dims[i]);
  return t;
}

ir::Shape ShapeOfNumpy(const py::array& array) {
  const py::dtype dt = array.dtype();
  std::optional<ir::DType> found;
  for (const auto& [name, d] : kNumpyNames) {
    if (dt.is(py::dtype(name))) found = d;
  }
  if (!found.has_value()) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "unsupported dtype ", std::string(py::str(py::handle(dt))),
        ": causeway arrays are float32, float16, int32, int64, int8, uint8 or bool "
        "(and bfloat16, made by a convert)")));
  }
  const ir::DType dtype = *found;
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
  if (literal.shape().dtype == ir::DType::kBF16) {
    literal = ir::ConvertLiteral(literal, ir::DType::kF32);
  }
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
