// ONNX's backend test suite (libonnx-testdata), the conformance suite ONNX
// runtimes are measured by: every node test, and the PyTorch modules and
// operators converted to ONNX. Each test's model is imported with its
// inputs' shapes, compiled for the cpu kind and run on every data set; its
// outputs are compared with ONNX's (rtol 1e-3, atol 1e-7, as ONNX's runner
// compares). The test prints passed / failed / unsupported by op and the
// coverage of each suite, and fails if a test listed in
// node_tests_passing.txt does not pass (a regression). A test that newly
// passes is printed, to be added to the list.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/backend/executable.h"
#include "causeway/frontend/onnx/import.h"
#include "causeway/ir/elements.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace causeway::onnx_import {
namespace {

namespace fs = std::filesystem;

// Where Debian's libonnx-testdata puts the suites.
constexpr const char* kDataRoot = "/usr/include/onnx/backend/test/data";

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

enum class Outcome { kPassed, kFailed, kUnsupported };

struct Result {
  Outcome outcome = Outcome::kPassed;
  std::string op;
  std::string why;
  // The model's inputs or outputs have an element type Causeway stores in
  // a stand-in (double as f32; int16, uint16, uint32, uint64 as i32).
  bool stand_in = false;
};

// The op a test is about: the op type of the node making the graph's first
// output.
std::string OpOf(const std::string& model_bytes) {
  ::onnx::ModelProto m;
  if (!m.ParseFromString(model_bytes) || m.graph().output_size() == 0) return "?";
  const std::string& out = m.graph().output(0).name();
  for (const auto& n : m.graph().node()) {
    for (const auto& o : n.output()) {
      if (o == out) return n.op_type();
    }
  }
  return m.graph().node_size() > 0 ? m.graph().node(0).op_type() : "?";
}

std::vector<HostTensor> ReadSet(const fs::path& dir, const char* prefix, std::string* error) {
  std::vector<HostTensor> out;
  for (int i = 0;; ++i) {
    const fs::path p = dir / absl::StrCat(prefix, "_", i, ".pb");
    if (!fs::exists(p)) break;
    absl::StatusOr<HostTensor> t = ParseTensor(ReadFile(p));
    if (!t.ok()) {
      *error = absl::StrCat(p.filename().string(), ": ", t.status().message());
      return {};
    }
    out.push_back(std::move(*t));
  }
  return out;
}

// Compares one output against ONNX's expected tensor; empty if equal.
std::string Compare(const ir::Literal& got, const HostTensor& want) {
  const ir::Shape& ws = want.literal.shape();
  if (got.shape().dims != ws.dims) {
    return absl::StrCat("shape ", got.shape().ToString(), " against ", ws.ToString());
  }
  // A result in a stored dtype is compared in its compute dtype, as ONNX's
  // expected values are held; integers through int64.
  if (ir::ComputeDType(got.shape().dtype) != ws.dtype) {
    return absl::StrCat("dtype ", got.shape().ToString(), " against ", ws.ToString());
  }
  const ir::Literal wide = ir::ConvertLiteral(
      got, ws.dtype == ir::DType::kI32 ? ir::DType::kI64 : ws.dtype);
  const int64_t n = ws.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(i);
    switch (ws.dtype) {
      case ir::DType::kF32: {
        const float a = wide.values<float>()[k], b = want.literal.values<float>()[k];
        if (std::isnan(a) && std::isnan(b)) continue;
        if (std::isinf(b) && a == b) continue;
        if (!(std::fabs(a - b) <= 1e-7 + 1e-3 * std::fabs(b))) {
          return absl::StrCat("element ", i, ": ", a, " against ", b);
        }
        break;
      }
      case ir::DType::kI32: {
        const int64_t a = wide.values<int64_t>()[k];
        const int64_t b = want.ints.empty() ? want.literal.values<int32_t>()[k] : want.ints[k];
        if (a != b) return absl::StrCat("element ", i, ": ", a, " against ", b);
        break;
      }
      case ir::DType::kPred:
        if ((wide.values<uint8_t>()[k] != 0) != (want.literal.values<uint8_t>()[k] != 0)) {
          return absl::StrCat("element ", i, " differs");
        }
        break;
      default:
        return absl::StrCat("expected values of ", ws.ToString());
    }
  }
  return "";
}

// A uint16 tensor of float16 (10) or bfloat16 (16) bits as the floats.
HostTensor Bits16ToFloat(const HostTensor& t, int32_t type) {
  ::onnx::TensorProto p;
  p.set_data_type(type);
  for (int64_t d : t.literal.shape().dims) p.add_dims(d);
  for (int64_t v : t.ints) p.add_int32_data(static_cast<int32_t>(v));
  absl::StatusOr<HostTensor> out = ParseTensor(p.SerializeAsString());
  return out.ok() ? *out : t;
}

Result RunTest(const fs::path& dir) {
  Result r;
  const std::string model = ReadFile(dir / "model.onnx");
  r.op = OpOf(model);
  {
    ::onnx::ModelProto m;
    m.ParseFromString(model);
    for (const auto* list : {&m.graph().input(), &m.graph().output()}) {
      for (const auto& v : *list) {
        const int32_t t = v.type().tensor_type().elem_type();
        // Stored as such: float, float16, bfloat16, int32, int64, int8, uint8, bool.
        static const std::set<int32_t> kStored = {1, 10, 16, 6, 7, 3, 2, 9};
        if (!kStored.count(t)) r.stand_in = true;
      }
    }
  }
  bool any = false;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory() ||
        entry.path().filename().string().rfind("test_data_set_", 0) != 0) {
      continue;
    }
    any = true;
    std::string error;
    std::vector<HostTensor> inputs = ReadSet(entry.path(), "input", &error);
    std::vector<HostTensor> expected = ReadSet(entry.path(), "output", &error);
    if (!error.empty()) return {Outcome::kUnsupported, r.op, error};
    ::onnx::ModelProto m;
    m.ParseFromString(model);
    // Test data names its tensors positionally; give them the graph's names.
    std::vector<std::string> names;
    std::vector<int32_t> types;
    std::set<std::string> inits;
    for (const auto& i : m.graph().initializer()) inits.insert(i.name());
    for (const auto& i : m.graph().input()) {
      if (inits.count(i.name())) continue;
      names.push_back(i.name());
      types.push_back(i.type().tensor_type().elem_type());
    }
    for (size_t i = 0; i < inputs.size() && i < names.size(); ++i) {
      inputs[i].name = names[i];
      // 16-bit floats travel as their bits (uint16) in the test data.
      if ((types[i] == 10 || types[i] == 16) && inputs[i].onnx_type == 4) {
        inputs[i] = Bits16ToFloat(inputs[i], types[i]);
        inputs[i].name = names[i];
      }
    }
    ImportOptions options;
    options.inputs = inputs;
    options.integer_inputs_constant = true;
    options.given_values_known = true;
    absl::StatusOr<ImportedModel> imported = Import(model, options);
    if (!imported.ok()) {
      const bool unsupported = imported.status().code() == absl::StatusCode::kUnimplemented;
      return {unsupported ? Outcome::kUnsupported : Outcome::kFailed, r.op,
              std::string(imported.status().message())};
    }
    std::vector<const void*> args;
    std::vector<ir::Literal> stored;
    stored.reserve(imported->inputs.size());
    for (size_t i = 0; i < imported->inputs.size(); ++i) {
      if (!imported->is_parameter[i]) continue;
      if (i >= inputs.size()) return {Outcome::kFailed, r.op, "fewer inputs than the model's"};
      for (int64_t v : inputs[i].ints) {
        if (v < INT32_MIN || v > INT32_MAX) {
          return {Outcome::kUnsupported, r.op, absl::StrCat("input value ", v, " outside int32")};
        }
      }
      absl::StatusOr<ir::Literal> value = StoredLiteral(inputs[i]);
      if (!value.ok() || value->shape().dtype != imported->inputs[i].shape.dtype) {
        return {Outcome::kFailed, r.op,
                absl::StrCat("input ", i, " is ", TypeName(inputs[i].onnx_type), ", the model's ",
                             TypeName(imported->inputs[i].onnx_type))};
      }
      stored.push_back(*std::move(value));
      args.push_back(stored.back().data());
    }
    absl::StatusOr<std::shared_ptr<const backend::cpu::HostExecutable>> exe =
        backend::cpu::Compile(imported->function);
    if (!exe.ok()) return {Outcome::kFailed, r.op, std::string(exe.status().message())};
    const ir::Function& f = imported->function;
    std::vector<ir::Literal> outs;
    std::vector<void*> out_ptrs;
    for (int i = 0; i < f.num_outputs(); ++i) outs.emplace_back(f.output_shape(i));
    for (ir::Literal& l : outs) out_ptrs.push_back(l.data());
    if (absl::Status s = (*exe)->Run(args, out_ptrs, backend::RunContext{}); !s.ok()) {
      return {Outcome::kFailed, r.op, std::string(s.message())};
    }
    if (expected.size() != outs.size()) {
      return {Outcome::kFailed, r.op, absl::StrCat(outs.size(), " outputs, ONNX has ", expected.size())};
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      const int32_t want = imported->outputs[i].onnx_type;
      if ((want == 10 || want == 16) && expected[i].onnx_type == 4) {
        expected[i] = Bits16ToFloat(expected[i], want);
      }
      const std::string diff = Compare(outs[i], expected[i]);
      if (!diff.empty()) return {Outcome::kFailed, r.op, absl::StrCat("output ", i, ": ", diff)};
    }
  }
  if (!any) return {Outcome::kFailed, r.op, "no test data"};
  return r;
}

std::set<std::string> ReadPassing() {
  std::set<std::string> out;
  std::ifstream f(CAUSEWAY_ONNX_PASSING);
  for (std::string line; std::getline(f, line);) {
    if (!line.empty() && line[0] != '#') out.insert(line);
  }
  return out;
}

TEST(OnnxConformanceTest, NodeTestsAndConvertedPyTorchModelsPassAsBefore) {
  if (!fs::exists(kDataRoot)) {
    GTEST_FAIL() << kDataRoot << " is missing: scripts/install-deps.sh installs libonnx-testdata";
  }
  const std::set<std::string> passing_before = ReadPassing();
  std::set<std::string> passing_now;
  std::vector<std::string> regressions, new_passes;
  for (const char* suite : {"node", "pytorch-converted", "pytorch-operator"}) {
    std::map<std::string, std::array<int, 3>> by_op;
    std::map<std::string, std::string> failures, wrong;  // all, and the failed ones
    int counts[3] = {0, 0, 0};
    int stand_in_passed = 0;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(fs::path(kDataRoot) / suite)) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      const std::string name = absl::StrCat(suite, "/", dir.filename().string());
      const Result r = RunTest(dir);
      const int k = static_cast<int>(r.outcome);
      ++counts[k];
      ++by_op[r.op][static_cast<size_t>(k)];
      if (r.outcome == Outcome::kPassed) {
        stand_in_passed += r.stand_in ? 1 : 0;
        passing_now.insert(name);
        if (!passing_before.count(name)) new_passes.push_back(name);
      } else {
        failures[name] = r.why;
        if (r.outcome == Outcome::kFailed) wrong[name] = r.why;
        if (passing_before.count(name)) regressions.push_back(absl::StrCat(name, ": ", r.why));
      }
    }
    const int total = counts[0] + counts[1] + counts[2];
    std::printf("\n%s: %d tests, %d passed (%.1f %%), %d failed, %d unsupported\n", suite, total,
                counts[0], total ? 100.0 * counts[0] / total : 0.0, counts[1], counts[2]);
    std::printf("  of the passed, %d have a dtype stored in a stand-in type (without them: "
                "%d, %.1f %%)\n",
                stand_in_passed, counts[0] - stand_in_passed,
                total ? 100.0 * (counts[0] - stand_in_passed) / total : 0.0);
    std::printf("  %-32s %7s %7s %11s\n", "op", "passed", "failed", "unsupported");
    for (const auto& [op, c] : by_op) {
      std::printf("  %-32s %7d %7d %11d\n", op.c_str(), c[0], c[1], c[2]);
    }
    if (std::getenv("CAUSEWAY_ONNX_VERBOSE") != nullptr) {
      for (const auto& [name, why] : failures) std::printf("  %s: %s\n", name.c_str(), why.c_str());
    } else {
      for (const auto& [name, why] : wrong) std::printf("  failed: %s: %s\n", name.c_str(), why.c_str());
    }
  }
  if (const char* out = std::getenv("CAUSEWAY_ONNX_WRITE_PASSING")) {
    std::ofstream f(out);
    f << "# Tests of libonnx-testdata that pass (onnx_conformance_test); a test\n"
         "# listed here that fails is a regression.\n";
    for (const std::string& name : passing_now) f << name << "\n";
  }
  for (const std::string& name : new_passes) std::printf("newly passing: %s\n", name.c_str());
  EXPECT_TRUE(regressions.empty()) << "tests that passed before fail now:\n"
                                   << absl::StrJoin(regressions, "\n");
}

}  // namespace
}  // namespace causeway::onnx_import
