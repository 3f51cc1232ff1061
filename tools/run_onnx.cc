// `causeway run MODEL.onnx`: an ONNX model imported (causeway/frontend/onnx)
// and run on the embedded cluster, its batch split over a `data` axis of
// --devices devices. Inputs come from .npy files; outputs are printed or
// written as .npy; the time per run and the samples per second are
// reported.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/frontend/onnx/import.h"
#include "causeway/ir/elements.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"
#include "tools/npy.h"

namespace causeway::tools {
namespace {

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;     // name=FILE.npy
  std::vector<std::string> constants;  // integer inputs fixed at compile time
  int devices = 1;
  std::string device_kind = "cpu";
  int64_t memory_bytes = 0;  // per device; 0: the cluster's default
  std::string out;  // folder for the outputs' .npy
  int iters = 1;
  bool json = false;
};

Sharding Split(int rank, bool split) {
  std::vector<std::vector<std::string>> dims(static_cast<size_t>(rank));
  if (split && rank > 0) dims[0] = {"data"};
  return Sharding(dims);
}

std::string Preview(const ir::Literal& l) {
  std::vector<std::string> v;
  const int64_t n = std::min<int64_t>(l.shape().num_elements(), 8);
  for (int64_t i = 0; i < n; ++i) {
    if (l.shape().dtype == ir::DType::kPred) {
      v.push_back(l.values<uint8_t>()[static_cast<size_t>(i)] ? "true" : "false");
    } else if (l.shape().dtype == ir::DType::kI64) {
      v.push_back(absl::StrCat(l.values<int64_t>()[static_cast<size_t>(i)]));
    } else {
      v.push_back(absl::StrCat(ir::ElementAsDouble(l, i)));
    }
  }
  if (l.shape().num_elements() > n) v.push_back("...");
  return absl::StrJoin(v, " ");
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "causeway run: %s\n", std::string(s.message()).c_str());
  return kExitRuntime;
}

int RunModel(const RunOptions& o) {
  std::vector<onnx_import::HostTensor> given;
  for (const std::string& spec : o.inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      std::fprintf(stderr, "causeway run: --input takes NAME=FILE.npy, not '%s'\n", spec.c_str());
      return kExitUsage;
    }
    absl::StatusOr<ir::Literal> l = ReadNpy(spec.substr(eq + 1));
    if (!l.ok()) return Fail(l.status());
    // The model computes int64 as i32: a value past it would wrap unseen.
    if (l->shape().dtype == ir::DType::kI64) {
      for (int64_t v : l->values<int64_t>()) {
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
          return Fail(absl::InvalidArgumentError(absl::StrCat(
              "input '", spec.substr(0, eq), "' holds ", v,
              ", outside int32 (Causeway computes int64 as int32)")));
        }
      }
    }
    given.push_back(onnx_import::FromLiteral(spec.substr(0, eq), *l));
  }
  // With --devices N, each device runs the model on its part of the batch
  // (dimension 0 of every input that is not constant).
  std::vector<onnx_import::HostTensor> shards = given;
  for (onnx_import::HostTensor& t : shards) {
    const bool constant =
        std::find(o.constants.begin(), o.constants.end(), t.name) != o.constants.end();
    if (constant || o.devices == 1) continue;
    std::vector<int64_t> dims = t.literal.shape().dims;
    if (dims.empty() || dims[0] % o.devices != 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "input '", t.name, "' of shape ", t.literal.shape().ToString(),
          " cannot be split over ", o.devices, " devices along its first dimension")));
    }
    // Only its shape is imported: the values travel as the argument.
    dims[0] /= o.devices;
    t.literal = ir::Literal(ir::Shape(t.literal.shape().dtype, dims));
    t.ints.clear();
  }
  // The output folder is made before the work, so that a path that cannot
  // be one fails first.
  if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec || !std::filesystem::is_directory(o.out, ec)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--out ", o.out, " cannot be a folder: ",
          ec ? ec.message() : "something else is there")));
    }
  }
  onnx_import::ImportOptions io;
  io.inputs = shards;
  io.constant_inputs = o.constants;
  io.batch_parts = o.devices;
  absl::StatusOr<onnx_import::ImportedModel> model = onnx_import::ImportFile(o.model, io);
  if (!model.ok()) return Fail(model.status());
  std::map<std::string, const onnx_import::HostTensor*> by_name;
  for (const auto& t : given) by_name[t.name] = &t;
  std::vector<const onnx_import::HostTensor*> args;
  for (size_t i = 0; i < model->inputs.size(); ++i) {
    if (!model->is_parameter[i]) continue;
    auto it = by_name.find(model->inputs[i].name);
    if (it == by_name.end()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "input '", model->inputs[i].name, "' (", model->inputs[i].shape.ToString(),
          ") is missing: give it with --input ", model->inputs[i].name, "=FILE.npy")));
    }
    args.push_back(it->second);
  }
  LocalClusterOptions lo;
  lo.islands = 1;
  lo.hosts_per_island = 1;
  lo.devices_per_host = o.devices;
  lo.device_kind = o.device_kind;
  if (o.memory_bytes > 0) lo.device_memory_bytes = o.memory_bytes;
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Create(lo);
  if (!cluster.ok()) return Fail(cluster.status());
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(cluster->get());
  if (!client.ok()) return Fail(client.status());
  absl::StatusOr<Mesh> mesh = (*client)->AllocateMesh({{"data", o.devices}});
  if (!mesh.ok()) return Fail(mesh.status());
  const bool split = o.devices > 1;
  CompileOptions co;
  for (const auto* a : args) co.in_shardings.push_back(Split(a->literal.shape().rank(), split));
  for (int i = 0; i < model->function.num_outputs(); ++i) {
    co.out_shardings.push_back(Split(model->function.output_shape(i).rank(), split));
  }
  absl::StatusOr<CompiledFunction> f = (*client)->Compile(model->function, *mesh, co);
  if (!f.ok()) return Fail(f.status());
  std::vector<Array> arrays;
  for (size_t i = 0; i < args.size(); ++i) {
    // As the model stores the input (int64 token ids as i64).
    absl::StatusOr<ir::Literal> value = onnx_import::StoredLiteral(*args[i]);
    if (!value.ok()) return Fail(value.status());
    absl::StatusOr<Array> a = (*client)->Put(*value, *mesh, co.in_shardings[i]);
    if (!a.ok()) return Fail(a.status());
    arrays.push_back(std::move(*a));
  }
  // One run to compile and warm up, then --iters timed back to back.
  std::vector<ir::Literal> outputs;
  double seconds = 0;
  for (int round = 0; round < 2; ++round) {
    const int runs = round == 0 ? 1 : o.iters;
    const auto start = std::chrono::steady_clock::now();
    std::vector<Array> last;
    for (int r = 0; r < runs; ++r) {
      absl::StatusOr<std::vector<Array>> out = (*client)->Call(*f, arrays);
      if (!out.ok()) return Fail(out.status());
      last = std::move(*out);
    }
    outputs.clear();
    for (const Array& a : last) {
      // This loop is the fetch's only reader: its value is moved, not copied.
      absl::StatusOr<ir::Literal> v = a.Fetch().Take();
      if (!v.ok()) return Fail(v.status());
      outputs.push_back(*std::move(v));
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / runs;
  }
  const int64_t batch = given.empty() || given[0].literal.shape().rank() == 0
                            ? 1
                            : given[0].literal.shape().dims[0];
  nlohmann::json j;
  j["model"] = o.model;
  j["devices"] = o.devices;
  j["device_kind"] = o.device_kind;
  j["seconds_per_run"] = seconds;
  j["samples_per_second"] = static_cast<double>(batch) / seconds;
  j["iters"] = o.iters;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const onnx_import::ModelValue& mv = model->outputs[i];
    nlohmann::json out = {{"name", mv.name},
                          {"shape", outputs[i].shape().dims},
                          {"onnx_type", onnx_import::TypeName(mv.onnx_type)}};
    if (!o.out.empty()) {
      std::string file = mv.name;
      for (char& ch : file) {
        if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.') ch = '_';
      }
      const std::string path = (std::filesystem::path(o.out) / (file + ".npy")).string();
      if (absl::Status s = WriteNpy(path, outputs[i]); !s.ok()) return Fail(s);
      out["file"] = path;
    }
    if (o.json) {
      j["outputs"].push_back(out);
    } else {
      std::printf("%s %s: %s\n", mv.name.c_str(), outputs[i].shape().ToString().c_str(),
                  Preview(outputs[i]).c_str());
    }
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%.3f ms per run on %d %s device(s), %.1f samples/s (batch %lld)\n", seconds * 1e3,
                o.devices, o.device_kind.c_str(), static_cast<double>(batch) / seconds,
                static_cast<long long>(batch));
  }
  return 0;
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run an ONNX model on the embedded cluster: inputs from .npy files, the batch split "
             "over --devices, outputs printed or written as .npy, time per run reported");
  cmd->add_option("model", o->model, "The .onnx file")->required();
  cmd->add_option("--input", o->inputs, "NAME=FILE.npy, one per input of the model");
  cmd->add_option("--constant", o->constants,
                  "An integer input whose values are fixed when the model is compiled (one an op "
                  "needs then, as Reshape's shape); not split over devices");
  cmd->add_option("--devices", o->devices, "Devices; the batch (dimension 0) is split over them")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--device-kind", o->device_kind, DeviceKindHelp("The kind of the devices"))
      ->capture_default_str();
  cmd->add_option("--memory", o->memory_bytes,
                  "Memory per device, bytes (default: the embedded cluster's, 1 GiB)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--out", o->out, "Write each output to DIR/NAME.npy");
  cmd->add_option("--iters", o->iters, "Timed runs after one warm-up run")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "One JSON object: outputs (name, shape, file) and timing");
  cmd->callback([o, exit_code] { *exit_code = RunModel(*o); });
}

}  // namespace causeway::tools
