#include "causeway/base/settings.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/check.h"

extern char** environ;

namespace causeway {
namespace {

using K = Setting::Kind;

const std::vector<Setting>& Table() {
  static const std::vector<Setting>* const table = new std::vector<Setting>{
      {"CAUSEWAY_BENCH_DATA", K::kText, {}, "the text scripts/bench_history.sh trains on", true},
      {"CAUSEWAY_BIN", K::kText, {}, "the causeway binary the tests' process clusters run", true},
      {"CAUSEWAY_BLAS_AUTO", K::kChoice, {"0", "1"},
       "0: keep OpenBLAS's own choice of kernels for this CPU (default 1: the newest the CPU "
       "runs, where OpenBLAS picked an older one)"},
      {"CAUSEWAY_BUILD_DIR", K::kText, {}, "the build tree setup.py and the Python tests use", true},
      {"CAUSEWAY_CHECKPOINT_SAMPLE", K::kText, {}, "where format_test leaves a sample checkpoint",
       true},
      {"CAUSEWAY_COORDINATOR", K::kText, {}, "a worker's coordinator, HOST:PORT (--coordinator)"},
      {"CAUSEWAY_CUDA_GPU", K::kIndex, {},
       "the CUDA GPU every device of the cuda kind uses (as --gpu; causeway gpus)"},
      {"CAUSEWAY_FUZZ_SECONDS", K::kNumber, {}, "how long `make asan` runs each fuzz target",
       true},
      {"CAUSEWAY_KEEP_CLUSTER_LOGS", K::kChoice, {"0", "1"},
       "1: a test's process cluster keeps its processes' logs"},
      {"CAUSEWAY_LOG_LEVEL", K::kChoice, {"info", "warning", "error"},
       "the least level of log lines written to stderr (--log-level)"},
      {"CAUSEWAY_ONNX_VERBOSE", K::kChoice, {"0", "1"},
       "1: onnx_conformance_test prints every node test's outcome", true},
      {"CAUSEWAY_ONNX_WRITE_PASSING", K::kText, {},
       "where onnx_conformance_test writes the list of passing node tests", true},
      {"CAUSEWAY_SOAK_SECONDS", K::kNumber, {}, "how long the distributed soak test runs", true},
      {"CAUSEWAY_SOURCE_DIR", K::kText, {}, "the source tree, for the Python tests", true},
      {"CAUSEWAY_TLS_CA", K::kText, {}, "the CA certificate clients and workers trust (--tls-ca)"},
      {"CAUSEWAY_TLS_CERT", K::kText, {}, "a server's TLS certificate (--tls-cert)"},
      {"CAUSEWAY_TLS_KEY", K::kText, {}, "a server's TLS key (--tls-key)"},
      {"CAUSEWAY_TOKEN", K::kText, {},
       "the cluster token clients present (printable ASCII; one trailing newline is trimmed)"},
      {"CAUSEWAY_VULKAN_COLLECTIVES", K::kChoice, {"auto", "gpu", "host"},
       "collectives among vulkan devices of one GPU: on the GPU, through the host, or auto (the "
       "GPU unless it is a CPU: lavapipe)"},
      {"CAUSEWAY_VULKAN_GPU", K::kIndex, {},
       "the Vulkan GPU every device of the vulkan kind uses (as --gpu; causeway gpus)"},
      {"CAUSEWAY_VULKAN_KERNELS", K::kChoice, {"auto", "gpu"},
       "gpu: the vulkan kind runs its GPU kernels (and fused runs) even on a CPU device "
       "(lavapipe), which otherwise gets the CPU variants"},
      {"CAUSEWAY_VULKAN_PROFILE", K::kChoice, {"0", "1"},
       "1: time each vulkan dispatch from the GPU's timestamps and print a profile at exit"},
      {"CAUSEWAY_VULKAN_STAGING", K::kChoice, {"0", "1"},
       "1: copy through host-visible staging memory even where device memory is mapped"},
      {"CAUSEWAY_WORKER_TOKEN", K::kText, {},
       "the workers' (and operators') token; default: CAUSEWAY_TOKEN"},
  };
  return *table;
}

const Setting* Find(absl::string_view name) {
  for (const Setting& s : Table()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

absl::Status Check(const Setting& s, absl::string_view value) {
  switch (s.kind) {
    case K::kChoice:
      for (const std::string& c : s.choices) {
        if (value == c) return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat(s.name, "=", value, " is not one of ",
                                                     absl::StrJoin(s.choices, ", "), " (",
                                                     s.help, ")"));
    case K::kIndex: {
      int i = -1;
      if (absl::SimpleAtoi(value, &i) && i >= 0) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(s.name, "=", value, " is not an index (0, 1, ...) (", s.help, ")"));
    }
    case K::kNumber: {
      double d = -1;
      if (absl::SimpleAtod(value, &d) && d >= 0) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(s.name, "=", value, " is not a number >= 0 (", s.help, ")"));
    }
    case K::kText:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<Setting>& AllSettings() { return Table(); }

absl::StatusOr<std::string> SettingValue(absl::string_view name, absl::string_view fallback) {
  const Setting* s = Find(name);
  CW_CHECK(s != nullptr) << "setting " << name << " is not in causeway/base/settings.cc";
  const char* v = std::getenv(s->name);
  if (v == nullptr || *v == '\0') return std::string(fallback);
  if (absl::Status c = Check(*s, v); !c.ok()) return c;
  return std::string(v);
}

absl::StatusOr<int> SettingIndex(absl::string_view name) {
  absl::StatusOr<std::string> v = SettingValue(name);
  if (!v.ok()) return v.status();
  int i = -1;
  if (v->empty() || !absl::SimpleAtoi(*v, &i)) return -1;
  return i;
}

absl::Status CheckSettings(std::vector<std::string>* unknown) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    if (!absl::StartsWith(entry, "CAUSEWAY_")) continue;
    const size_t eq = entry.find('=');
    const absl::string_view name = entry.substr(0, eq);
    const absl::string_view value =
        eq == absl::string_view::npos ? absl::string_view() : entry.substr(eq + 1);
    const Setting* s = Find(name);
    if (s == nullptr) {
      if (unknown != nullptr) unknown->emplace_back(name);
      continue;
    }
    if (value.empty()) continue;
    if (absl::Status c = Check(*s, value); !c.ok()) return c;
  }
  return absl::OkStatus();
}

}  // namespace causeway
