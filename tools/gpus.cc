// `causeway gpus` and the `--gpu N` flag every command takes: the GPUs the
// GPU kind sees on this machine, and which one its devices use.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "causeway/backend/builtin_kinds.h"
#include "causeway/backend/executable.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace causeway::tools {

std::string DeviceKindHelp(const std::string& what) {
  backend::RegisterBuiltinKinds();
  return what + " (this build has: " + absl::StrJoin(backend::DeviceKindNames(), ", ") + ")";
}

void AddGpuFlag(CLI::App& app) {
  app.add_option_function<int>(
         "--gpu",
         [](int index) {
           if (absl::Status s = backend::SelectGpu(index); !s.ok()) {
             throw CLI::ValidationError("--gpu", std::string(s.message()));
           }
         },
         "The GPU (of `causeway gpus`) that every device of the vulkan kind made by this "
         "command uses (default: device i uses GPU i modulo their number)")
      ->check(CLI::NonNegativeNumber)
      ->trigger_on_parse();
}

void AddGpusCommand(CLI::App& app, int* exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "gpus", "List the GPUs the vulkan device kind sees on this machine (index: name, driver, "
              "Vulkan version, memory); exits 1 when there are none, saying why");
  cmd->add_flag("--json", *json, "Print one JSON object instead of text");
  cmd->callback([json, exit_code] {
    absl::StatusOr<std::vector<std::string>> gpus = backend::ListGpus();
    if (*json) {
      nlohmann::json j;
      j["gpus"] = gpus.ok() ? nlohmann::json(*gpus) : nlohmann::json::array();
      if (!gpus.ok()) j["error"] = std::string(gpus.status().message());
      std::printf("%s\n", j.dump().c_str());
    } else if (gpus.ok()) {
      for (size_t i = 0; i < gpus->size(); ++i) std::printf("%zu: %s\n", i, (*gpus)[i].c_str());
    } else {
      std::fprintf(stderr, "error: %s\n", std::string(gpus.status().message()).c_str());
    }
    *exit_code = gpus.ok() ? 0 : kExitRuntime;
  });
}

}  // namespace causeway::tools
