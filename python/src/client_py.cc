// Bindings of the client: clusters (embedded or remote), meshes, arrays,
// compiled functions and traced programs. Calls that may block (puts under
// memory back-pressure, fetches, connecting) release the GIL; waits are
// sliced so that Ctrl-C interrupts them.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/worker/host_executor.h"
#include "causeway/cluster/cluster_file.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "python/src/py_core.h"

namespace causeway::python {
namespace {

Sharding ShardingFromSpec(const std::vector<std::vector<std::string>>& dims) {
  return Sharding(dims);
}

py::list ShardingSpec(const Sharding& s) {
  py::list out;
  for (const auto& d : s.dims()) out.append(py::cast(d));
  return out;
}

ClientRef MakeClient(std::shared_ptr<ClusterOwner> cluster, double weight, int priority,
                     int64_t memory_quota_bytes) {
  ClientOptions options;
  options.share.weight = weight;
  options.share.priority = priority;
  options.share.memory_quota_bytes = memory_quota_bytes;
  auto owner = std::make_shared<ClientOwner>();
  owner->cluster = std::move(cluster);
  {
    py::gil_scoped_release release;
    owner->client = Unwrap(Client::Connect(owner->cluster->connection, options));
  }
  return owner;
}

std::vector<Array> Handles(const std::vector<PyArray*>& args) {
  std::vector<Array> out;
  out.reserve(args.size());
  for (const PyArray* a : args) {
    if (a == nullptr) throw StatusError(absl::InvalidArgumentError("an argument is None"));
    out.push_back(a->array);
  }
  return out;
}

std::vector<PyArray> Wrap(const ClientRef& owner, std::vector<Array> arrays) {
  std::vector<PyArray> out;
  out.reserve(arrays.size());
  for (Array& a : arrays) out.push_back(PyArray{owner, std::move(a)});
  return out;
}

struct PyProgramBuilder {
  ClientRef owner;
  std::unique_ptr<ProgramBuilder> builder;
  ProgramBuilder& get() {
    if (builder == nullptr) {
      throw StatusError(absl::FailedPreconditionError("this program was already built"));
    }
    return *builder;
  }
};

struct PyProgram {
  ClientRef owner;
  Program program;
};

int64_t DeviceMemoryInUse(const ClientRef& c) {
  if (c->cluster->local == nullptr) {
    throw StatusError(absl::UnimplementedError(
        "device memory is reported here only for an embedded cluster (local_cluster)"));
  }
  return c->cluster->local->MemoryInUse();
}

}  // namespace

void RegisterClient(py::module_& m) {
  m.def(
      "recorded_cluster", [] { return Unwrap(RecordedCluster()); },
      "The address of the one cluster `causeway cluster up` runs for this user");
  py::class_<DeviceInfo>(m, "Device", "A device of the cluster")
      .def_property_readonly("id", [](const DeviceInfo& d) { return d.id.value(); })
      .def_property_readonly("host", [](const DeviceInfo& d) { return d.host.value(); })
      .def_property_readonly("island", [](const DeviceInfo& d) { return d.island.value(); })
      .def_property_readonly("local_index", [](const DeviceInfo& d) { return d.local_index; })
      .def_property_readonly("memory_bytes", [](const DeviceInfo& d) { return d.memory_bytes; })
      // The kind of the device (backend::DeviceKind::name()); `platform`
      // is its name as JAX users know it.
      .def_property_readonly("kind", [](const DeviceInfo& d) { return d.kind; })
      .def_property_readonly("platform", [](const DeviceInfo& d) { return d.kind; })
      .def("__repr__", [](const DeviceInfo& d) {
        return absl::StrCat("Device(id=", d.id.value(), ", island=", d.island.value(),
                            ", host=", d.host.value(), ", kind=", d.kind, ")");
      });

  py::class_<ClientOwner, ClientRef>(m, "Client", "A client of a cluster")
      .def_property_readonly("id", [](const ClientRef& c) { return c->client->id().value(); })
      .def_property_readonly("kind",
                             [](const ClientRef& c) {
                               return c->cluster->local != nullptr ? "local" : "remote";
                             })
      .def(
          "devices",
          [](const ClientRef& c) {
            const Topology t = c->cluster->connection->resources()->GetTopology();
            std::vector<DeviceInfo> out;
            for (IslandId island : t.islands()) {
              const IslandInfo info = Unwrap(t.island(island));
              for (DeviceId d : info.devices) out.push_back(Unwrap(t.device(d)));
            }
            return out;
          },
          "Every device, island by island, in host order")
      .def(
          "make_mesh",
          [](const ClientRef& c, const std::vector<std::pair<std::string, int64_t>>& axes,
             int64_t island) {
            MeshRequest r;
            for (const auto& [name, size] : axes) r.axes.push_back(MeshAxis{name, size});
            if (island >= 0) r.island = IslandId(island);
            py::gil_scoped_release release;
            return PyMesh{c, Unwrap(c->client->AllocateMesh(r))};
          },
          py::arg("axes"), py::arg("island") = -1)
      .def(
          "put",
          [](const ClientRef& c, py::array value, const PyMesh& mesh,
             const std::vector<std::vector<std::string>>& spec) {
            if (mesh.owner != c) {
              throw StatusError(absl::InvalidArgumentError("the mesh belongs to another client"));
            }
            // Checked before the copy: a value that cannot fit the mesh's
            // devices is refused without host memory spent on it.
            const Sharding sharding = ShardingFromSpec(spec);
            const ir::Shape shape = ShapeOfNumpy(value);
            absl::Status fits;
            {
              py::gil_scoped_release release;
              fits = c->client->CheckPut(shape, mesh.mesh, sharding);
            }
            ThrowIfError(fits);
            ir::Literal literal = LiteralFromNumpy(value);
            py::gil_scoped_release release;
            return PyArray{c, Unwrap(c->client->Put(literal, mesh.mesh, sharding))};
          },
          py::arg("value"), py::arg("mesh"), py::arg("spec"))
      .def(
          "compile",
          [](const ClientRef& c, const ir::Function& f, const PyMesh& mesh,
             const std::vector<std::vector<std::vector<std::string>>>& in_specs,
             const std::vector<std::vector<std::vector<std::string>>>& out_specs,
             bool check_replication) {
            if (mesh.owner != c) {
              throw StatusError(absl::InvalidArgumentError("the mesh belongs to another client"));
            }
            CompileOptions o;
            o.replication_check =
                check_replication ? ReplicationCheck::kEnforce : ReplicationCheck::kOff;
            for (const auto& s : in_specs) o.in_shardings.push_back(ShardingFromSpec(s));
            for (const auto& s : out_specs) o.out_shardings.push_back(ShardingFromSpec(s));
            py::gil_scoped_release release;
            return PyCompiled{c, Unwrap(c->client->Compile(f, mesh.mesh, o))};
          },
          py::arg("function"), py::arg("mesh"), py::arg("in_specs"), py::arg("out_specs"),
          py::arg("check_replication") = true)
      .def(
          "call",
          [](const ClientRef& c, const PyCompiled& f, const std::vector<PyArray*>& args) {
            std::vector<Array> handles = Handles(args);
            absl::StatusOr<std::vector<Array>> out;
            {
              py::gil_scoped_release release;
              out = c->client->Call(f.function, handles);
            }
            return Wrap(c, Unwrap(std::move(out)));
          },
          py::arg("function"), py::arg("args"), "Dispatches a call; returns its outputs at once")
      .def("new_program",
           [](const ClientRef& c, std::string name) {
             return PyProgramBuilder{
                 c, std::make_unique<ProgramBuilder>(c->client->NewProgram(std::move(name)))};
           })
      .def(
          "flush",
          [](const ClientRef& c, double timeout_s) {
            ThrowIfError(AwaitFromPython(c->client->Flush(), timeout_s, "flush").status());
          },
          py::arg("timeout") = -1.0,
          "Returns once every earlier call has reached the island schedulers")
      .def(
          "set_share",
          [](const ClientRef& c, double weight, int priority, int64_t quota) {
            ThrowIfError(c->client->SetShare(ClientShare{weight, priority, quota}));
          },
          py::arg("weight") = 1.0, py::arg("priority") = 0, py::arg("memory_quota_bytes") = 0)
      .def("device_memory_in_use", &DeviceMemoryInUse,
           "Bytes of device memory in use on every device (embedded clusters)")
      .def(
          "await_device_memory_empty",
          [](const ClientRef& c, double timeout_s) {
            if (c->cluster->local == nullptr) {
              throw StatusError(absl::UnimplementedError(
                  "device memory is observed only on an embedded cluster (local_cluster)"));
            }
            py::gil_scoped_release release;
            for (const auto& host : c->cluster->local->executors()) {
              for (int d = 0; d < host->num_devices(); ++d) {
                if (!host->store().memory(d)->AwaitEmpty(absl::Seconds(timeout_s))) return false;
              }
            }
            return true;
          },
          py::arg("timeout"),
          "True once no device holds any array (arrays are freed off the caller's thread)")
      .def("disconnect",
           [](const ClientRef& c) {
             py::gil_scoped_release release;
             c->client->Disconnect();
           })
      .def("__repr__", [](const ClientRef& c) {
        return absl::StrCat("<causeway.Client ", c->client->id().value(), " of a ",
                            c->cluster->local != nullptr ? "local" : "remote", " cluster>");
      });

  m.def(
      "local_cluster",
      [](int islands, int hosts_per_island, int devices_per_host, int64_t device_memory_bytes,
         double dcn_latency_us, double dcn_gbps, const std::string& fail_launches_of,
         double weight, int priority, const std::string& device_kind) {
        LocalClusterOptions o;
        o.device_kind = device_kind;
        o.islands = islands;
        o.hosts_per_island = hosts_per_island;
        o.devices_per_host = devices_per_host;
        o.device_memory_bytes = device_memory_bytes;
        o.dcn.latency = absl::Microseconds(dcn_latency_us);
        o.dcn.bytes_per_second = dcn_gbps * 1e9 / 8;
        if (!fail_launches_of.empty()) {
          o.fault_injector = [name = fail_launches_of](const LaunchInfo& l) {
            if (l.name != name) return absl::OkStatus();
            return absl::InternalError(absl::StrCat("injected failure of ", name));
          };
        }
        auto cluster = std::make_shared<ClusterOwner>();
        {
          py::gil_scoped_release release;
          cluster->local = Unwrap(LocalCluster::Create(o));
        }
        cluster->connection = cluster->local.get();
        return MakeClient(std::move(cluster), weight, priority, 0);
      },
      py::arg("islands") = 1, py::arg("hosts_per_island") = 2, py::arg("devices_per_host") = 4,
      py::arg("device_memory_bytes") = int64_t{1} << 30, py::arg("dcn_latency_us") = 0.0,
      py::arg("dcn_gbps") = 0.0, py::arg("fail_launches_of") = "", py::arg("weight") = 1.0,
      py::arg("priority") = 0, py::arg("device_kind") = "cpu");
  m.def(
      "connect",
      [](const std::string& address, const std::string& token, double timeout_s,
         const std::string& tls_ca, double weight, int priority) {
        RemoteClusterOptions o;
        o.address = address;
        o.token = token;
        o.timeout = absl::Seconds(timeout_s);
        o.tls.ca = tls_ca;
        auto cluster = std::make_shared<ClusterOwner>();
        {
          py::gil_scoped_release release;
          cluster->remote = Unwrap(RemoteCluster::Connect(o));
        }
        cluster->connection = cluster->remote.get();
        return MakeClient(std::move(cluster), weight, priority, 0);
      },
      py::arg("address"), py::arg("token") = "", py::arg("timeout") = 30.0,
      py::arg("tls_ca") = "", py::arg("weight") = 1.0, py::arg("priority") = 0);

  py::class_<PyMesh>(m, "Mesh", "Devices of one island arranged along named axes")
      .def_property_readonly("axis_names",
                             [](const PyMesh& m) {
                               std::vector<std::string> out;
                               for (const MeshAxis& a : m.mesh.axes()) out.push_back(a.name);
                               return out;
                             })
      .def_property_readonly("shape",
                             [](const PyMesh& m) {
                               py::dict out;
                               for (const MeshAxis& a : m.mesh.axes()) out[py::str(a.name)] = a.size;
                               return out;
                             })
      .def_property_readonly("size", [](const PyMesh& m) { return m.mesh.size(); })
      .def_property_readonly("island", [](const PyMesh& m) { return m.mesh.island().value(); })
      .def_property_readonly("device_ids",
                             [](const PyMesh& m) {
                               std::vector<int64_t> out;
                               for (DeviceId d : m.mesh.devices()) out.push_back(d.value());
                               return out;
                             })
      .def_property_readonly("client", [](const PyMesh& m) { return m.owner; })
      .def(
          "shard_shape",
          [](const PyMesh& m, std::vector<int64_t> dims,
             const std::vector<std::vector<std::string>>& spec) {
            const Sharding s = ShardingFromSpec(spec);
            const ir::Shape shape(ir::DType::kF32, dims);
            ThrowIfError(s.Validate(shape, m.mesh));
            return DimsTuple(s.ShardShape(shape, m.mesh).dims);
          },
          py::arg("shape"), py::arg("spec"),
          "The shape of each shard of a global shape split by spec")
      .def("__eq__", [](const PyMesh& a, const PyMesh& b) { return a.mesh.id() == b.mesh.id(); })
      .def("__hash__", [](const PyMesh& m) { return m.mesh.id().value(); })
      .def("__repr__", [](const PyMesh& m) {
        std::vector<std::string> axes;
        for (const MeshAxis& a : m.mesh.axes()) axes.push_back(absl::StrCat(a.name, "=", a.size));
        return absl::StrCat("Mesh(", absl::StrJoin(axes, ", "), ", island=",
                            m.mesh.island().value(), ")");
      });

  py::class_<PyArray>(m, "Array", "A sharded array on the devices of a mesh")
      .def_property_readonly("shape",
                             [](const PyArray& a) { return DimsTuple(a.array.shape().dims); })
      .def_property_readonly("dtype", [](const PyArray& a) { return NumpyName(a.array.shape().dtype); })
      .def_property_readonly("ndim", [](const PyArray& a) { return a.array.shape().rank(); })
      .def_property_readonly("id", [](const PyArray& a) { return a.array.id().value(); })
      .def_property_readonly("mesh", [](const PyArray& a) { return PyMesh{a.owner, a.array.mesh()}; })
      .def_property_readonly("spec", [](const PyArray& a) { return ShardingSpec(a.array.sharding()); })
      .def_property_readonly("client", [](const PyArray& a) { return a.owner; })
      .def_property_readonly("released", [](const PyArray& a) { return a.array.released(); })
      .def("is_ready", [](const PyArray& a) { return a.array.Ready().IsReady(); })
      .def(
          "wait",
          [](const PyArray& a, double timeout_s) {
            ThrowIfError(AwaitFromPython(a.array.Ready(), timeout_s, "block_until_ready").status());
          },
          py::arg("timeout") = -1.0)
      .def(
          "fetch",
          [](const PyArray& a, double timeout_s) {
            const Future<ir::Literal> fetched = a.array.Fetch();
            AwaitFromPython(fetched, timeout_s, "fetch");
            // This fetch is the value's only reader: moved, not copied.
            return NumpyFromLiteral(Unwrap(fetched.Take()));
          },
          py::arg("timeout") = -1.0, "The whole array as a numpy array")
      .def("delete", [](PyArray& a) { a.array.Release(); }, "Releases the array now");

  py::class_<PyCompiled>(m, "CompiledFunction", "A function compiled for a mesh")
      .def_property_readonly("function", [](const PyCompiled& c) { return c.function.function(); })
      .def_property_readonly("mesh", [](const PyCompiled& c) { return PyMesh{c.owner, c.function.mesh()}; })
      .def_property_readonly("in_shapes",
                             [](const PyCompiled& c) {
                               py::list out;
                               for (const ir::Shape& s : c.function.in_shapes()) {
                                 out.append(py::make_tuple(DimsTuple(s.dims), NumpyName(s.dtype)));
                               }
                               return out;
                             })
      .def_property_readonly("out_shapes",
                             [](const PyCompiled& c) {
                               py::list out;
                               for (const ir::Shape& s : c.function.out_shapes()) {
                                 out.append(py::make_tuple(DimsTuple(s.dims), NumpyName(s.dtype)));
                               }
                               return out;
                             })
      .def_property_readonly("in_specs",
                             [](const PyCompiled& c) {
                               py::list out;
                               for (const Sharding& s : c.function.in_shardings()) out.append(ShardingSpec(s));
                               return out;
                             })
      .def_property_readonly("out_specs", [](const PyCompiled& c) {
        py::list out;
        for (const Sharding& s : c.function.out_shardings()) out.append(ShardingSpec(s));
        return out;
      });

  py::class_<TracedArray>(m, "TracedArray", "A value of a program being traced")
      .def_property_readonly("shape", [](const TracedArray& t) { return DimsTuple(t.shape.dims); })
      .def_property_readonly("dtype", [](const TracedArray& t) { return NumpyName(t.shape.dtype); })
      .def_property_readonly("spec", [](const TracedArray& t) { return ShardingSpec(t.sharding); })
      .def("__repr__", [](const TracedArray& t) {
        return absl::StrCat("<program value ", NumpyName(t.shape.dtype), "[",
                            absl::StrJoin(t.shape.dims, ","), "] ", t.sharding.ToString(), ">");
      });

  py::class_<PyProgramBuilder>(m, "ProgramBuilder", "Traces calls into one program")
      .def(
          "parameter",
          [](PyProgramBuilder& p, std::vector<int64_t> dims, const std::string& dtype,
             const PyMesh& mesh, const std::vector<std::vector<std::string>>& spec) {
            return Unwrap(p.get().Parameter(ir::Shape(DTypeFromName(dtype), dims), mesh.mesh,
                                            ShardingFromSpec(spec)));
          },
          py::arg("shape"), py::arg("dtype"), py::arg("mesh"), py::arg("spec"))
      .def(
          "call",
          [](PyProgramBuilder& p, const PyCompiled& f, const std::vector<TracedArray>& args) {
            return Unwrap(p.get().Call(f.function, args));
          },
          py::arg("function"), py::arg("args"))
      .def(
          "build",
          [](PyProgramBuilder& p, const std::vector<TracedArray>& outputs) {
            ProgramBuilder& b = p.get();
            absl::StatusOr<Program> program;
            {
              py::gil_scoped_release release;
              program = b.Build(outputs);
            }
            p.builder.reset();
            return PyProgram{p.owner, Unwrap(std::move(program))};
          },
          py::arg("outputs"));

  py::class_<PyProgram>(m, "Program", "A lowered program, run many times")
      .def_property_readonly("num_nodes", [](const PyProgram& p) { return p.program.num_nodes(); })
      .def(
          "run",
          [](const PyProgram& p, const std::vector<PyArray*>& args) {
            std::vector<Array> handles = Handles(args);
            absl::StatusOr<std::vector<Array>> out;
            {
              py::gil_scoped_release release;
              out = p.program.Run(handles);
            }
            return Wrap(p.owner, Unwrap(std::move(out)));
          },
          py::arg("args"));

  m.def(
      "bench_cpp_calls",
      [](const PyCompiled& f, const std::vector<PyArray*>& args, int64_t n) {
        // The baseline of the Python dispatch benchmark: the same calls
        // made from C++ in a loop, outputs dropped as in Python.
        std::vector<Array> handles = Handles(args);
        py::gil_scoped_release release;
        const absl::Time begin = absl::Now();
        for (int64_t i = 0; i < n; ++i) {
          ThrowIfError(f.owner->client->Call(f.function, handles).status());
        }
        return absl::ToDoubleSeconds(absl::Now() - begin);
      },
      py::arg("function"), py::arg("args"), py::arg("n"),
      "Seconds for n calls of f(*args) made from C++ (a benchmark baseline)");
}

}  // namespace causeway::python
