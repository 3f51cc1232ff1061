// What the Python bindings share: errors as exceptions, the objects that
// keep a cluster alive while Python holds anything made from it, and the
// conversions between numpy arrays and literals.
//
// Lifetimes: the C++ API requires a cluster to outlive its clients and a
// client every handle it made. Python frees objects in no fixed order, so
// every Python object made from a client holds a `ClientRef`, and the client
// holds its cluster: whichever goes last takes the others with it.
#ifndef CAUSEWAY_PYTHON_SRC_PY_CORE_H_
#define CAUSEWAY_PYTHON_SRC_PY_CORE_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/async/future.h"
#include "causeway/client/client.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/literal.h"

namespace causeway {
class LocalCluster;
class RemoteCluster;
}  // namespace causeway

namespace causeway::python {

namespace py = pybind11;

// A failed status on its way to Python: the module's translator raises the
// causeway error class of its code (causeway/_errors.py).
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status);
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}
template <typename T>
T Unwrap(absl::StatusOr<T> v) {
  if (!v.ok()) throw StatusError(v.status());
  return *std::move(v);
}

// A cluster: embedded or remote. Destroyed after every client of it.
struct ClusterOwner {
  std::unique_ptr<LocalCluster> local;
  std::unique_ptr<RemoteCluster> remote;
  ClusterConnection* connection = nullptr;
  ~ClusterOwner();
};

struct ClientOwner {
  std::shared_ptr<ClusterOwner> cluster;  // declared first: destroyed last
  std::unique_ptr<Client> client;
  ~ClientOwner();
};
using ClientRef = std::shared_ptr<ClientOwner>;

struct PyMesh {
  ClientRef owner;
  Mesh mesh;
};

struct PyArray {
  ClientRef owner;
  Array array;
};

struct PyCompiled {
  ClientRef owner;
  CompiledFunction function;
};

// A function being built, shared by the values it made.
struct PyBuilder {
  explicit PyBuilder(std::string name) : builder(std::move(name)) {}
  ir::FunctionBuilder builder;
  // Set while a nested function is traced (causeway.grad of a closure):
  // called with a value of an enclosing function, returns the value of this
  // one that stands for it. Cleared after tracing (it refers to this
  // builder: a cycle otherwise).
  py::object capture;
};

struct PyValue {
  std::shared_ptr<PyBuilder> owner;
  ir::Value value;
  ir::FunctionBuilder& b() const { return owner->builder; }
  const ir::Shape& shape() const { return owner->builder.shape(value); }
};

// "float32", "int32", "bool": numpy's names of the dtypes.
const char* NumpyName(ir::DType dtype);
ir::DType DTypeFromName(const std::string& name);
py::dtype NumpyDType(ir::DType dtype);
py::tuple DimsTuple(const std::vector<int64_t>& dims);

// A C-contiguous float32, int32 or bool array to a literal (copied);
// INVALID_ARGUMENT for another dtype.
// The shape a numpy array becomes, without copying it: INVALID_ARGUMENT
// for a dtype Causeway has no type for, or a size past 2^62 bytes.
ir::Shape ShapeOfNumpy(const py::array& array);
ir::Literal LiteralFromNumpy(const py::array& array);
// The literal, moved into a numpy array that owns it.
py::array NumpyFromLiteral(ir::Literal literal);

// Waits for `future` with the GIL released, in slices, so that Ctrl-C in
// the main thread raises KeyboardInterrupt promptly. `timeout_s` < 0: no
// bound. DEADLINE_EXCEEDED if it passes.
template <typename T>
const absl::StatusOr<T>& AwaitFromPython(const Future<T>& future, double timeout_s,
                                         const char* what) {
  const absl::Time deadline =
      timeout_s < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(timeout_s);
  while (true) {
    const absl::StatusOr<T>* v = nullptr;
    {
      py::gil_scoped_release release;
      v = future.AwaitWithTimeout(
          std::min(absl::Milliseconds(50), std::max(absl::ZeroDuration(), deadline - absl::Now())));
    }
    if (v != nullptr) return *v;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (absl::Now() >= deadline) {
      throw StatusError(absl::DeadlineExceededError(
          std::string(what) + ": not ready after " + absl::FormatDuration(absl::Seconds(timeout_s))));
    }
  }
}

void RegisterErrors(py::module_& m);
void RegisterIr(py::module_& m);
void RegisterClient(py::module_& m);
void RegisterModels(py::module_& m);
void RegisterCheckpoints(py::module_& m);
void RegisterOnnx(py::module_& m);  // onnx_py.cc, in builds with the ONNX importer

}  // namespace causeway::python

#endif  // CAUSEWAY_PYTHON_SRC_PY_CORE_H_
