// Bindings of sharded asynchronous checkpoints (causeway/client/checkpoint.h);
// causeway/checkpoint.py is the Python face of them.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/client/checkpoint.h"
#include "python/src/py_core.h"

namespace causeway::python {
namespace {

struct PyCheckpointer {
  ClientRef owner;  // declared first: destroyed after the checkpointer
  std::unique_ptr<Checkpointer> checkpointer;
};

struct PySave {
  int64_t step = 0;
  Future<Unit> future;
};

}  // namespace

void RegisterCheckpoints(py::module_& m) {
  py::class_<PySave>(m, "SaveFuture", "A checkpoint being saved")
      .def_property_readonly("step", [](const PySave& s) { return s.step; })
      .def("done", [](const PySave& s) { return s.future.IsReady(); },
           "Whether the save is committed or failed")
      .def(
          "wait",
          [](const PySave& s, double timeout_s) {
            ThrowIfError(AwaitFromPython(s.future, timeout_s, "checkpoint save").status());
          },
          py::arg("timeout") = -1.0,
          "Waits until the step is committed; raises why it was not");

  py::class_<PyCheckpointer>(m, "Checkpointer", "Sharded asynchronous checkpoints of a client")
      .def(py::init([](const ClientRef& client, const std::string& root, int keep,
                       int max_in_flight, double timeout_s) {
             CheckpointOptions o;
             o.keep = keep;
             o.max_in_flight = max_in_flight;
             o.timeout = absl::Seconds(timeout_s);
             PyCheckpointer c;
             c.owner = client;
             c.checkpointer = Unwrap(Checkpointer::Open(client->client.get(), root, o));
             return c;
           }),
           py::arg("client"), py::arg("root"), py::arg("keep"), py::arg("max_in_flight"),
           py::arg("timeout"))
      .def_property_readonly("root",
                             [](const PyCheckpointer& c) { return c.checkpointer->root(); })
      .def(
          "save",
          [](PyCheckpointer& c, int64_t step, const std::vector<std::string>& names,
             const std::vector<PyArray*>& arrays) {
            if (names.size() != arrays.size()) {
              throw StatusError(absl::InvalidArgumentError("a name for each array"));
            }
            std::vector<NamedArray> named;
            for (size_t i = 0; i < names.size(); ++i) {
              if (arrays[i] == nullptr) {
                throw StatusError(absl::InvalidArgumentError(
                    absl::StrCat("'", names[i], "' is None, not an array")));
              }
              named.push_back({names[i], arrays[i]->array});
            }
            py::gil_scoped_release release;  // may wait for room
            return PySave{step, c.checkpointer->Save(step, std::move(named))};
          },
          py::arg("step"), py::arg("names"), py::arg("arrays"))
      .def("wait",
           [](PyCheckpointer& c) {
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = c.checkpointer->Wait();
             }
             ThrowIfError(s);
           })
      .def("steps", [](const PyCheckpointer& c) { return Unwrap(c.checkpointer->Steps()); })
      .def(
          "manifest",
          [](const PyCheckpointer& c, int64_t step) {
            const checkpoint::Manifest m = Unwrap(c.checkpointer->ReadManifest(step));
            py::list out;
            for (const checkpoint::ArrayEntry& a : m.arrays) {
              py::dict d;
              d["name"] = a.name;
              d["dtype"] = NumpyName(a.dtype);
              d["shape"] = DimsTuple(a.shape);
              d["sharding"] = a.sharding;
              d["pieces"] = a.pieces.size();
              out.append(d);
            }
            return out;
          },
          py::arg("step"))
      .def(
          "restore",
          [](PyCheckpointer& c, int64_t step, const std::vector<std::string>& names,
             const std::vector<PyMesh>& meshes,
             const std::vector<std::vector<std::vector<std::string>>>& specs) {
            if (names.size() != meshes.size() || names.size() != specs.size()) {
              throw StatusError(absl::InvalidArgumentError("a mesh and spec for each name"));
            }
            std::vector<RestoreTarget> targets;
            for (size_t i = 0; i < names.size(); ++i) {
              if (meshes[i].owner != c.owner) {
                throw StatusError(absl::InvalidArgumentError(
                    absl::StrCat("the mesh for '", names[i], "' belongs to another client")));
              }
              targets.push_back({names[i], meshes[i].mesh, Sharding(specs[i])});
            }
            std::vector<Array> arrays;
            {
              py::gil_scoped_release release;
              arrays = Unwrap(c.checkpointer->Restore(step, targets));
            }
            std::vector<PyArray> out;
            for (Array& a : arrays) out.push_back(PyArray{c.owner, std::move(a)});
            return out;
          },
          py::arg("step"), py::arg("names"), py::arg("meshes"), py::arg("specs"));
}

}  // namespace causeway::python
