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
           if (absl::Status s = backend::SelectAccelerator(index); !s.ok()) {
             throw CLI::ValidationError("--gpu", std::string(s.message()));
           }
         },
         "The GPU (an index of `causeway gpus`) that every device of a GPU kind made by this "
         "command uses, in each kind that has it (default: device i uses its kind's GPU i "
         "modulo their number)")
      ->check(CLI::NonNegativeNumber)
      ->trigger_on_parse();
}

void AddGpusCommand(CLI::App& app, int* exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "gpus", "List the GPUs each GPU device kind of this build sees on this machine (kind, "
              "index: name, driver, memory); exits 1 when there are none, saying why");
  cmd->add_flag("--json", *json, "Print one JSON object instead of text");
  cmd->callback([json, exit_code] {
    const backend::Accelerators found = backend::ListAccelerators();
    if (*json) {
      nlohmann::json j;
      j["gpus"] = nlohmann::json::array();
      for (const backend::Accelerators::Entry& e : found.devices) {
        j["gpus"].push_back({{"kind", e.kind}, {"index", e.index}, {"description", e.description}});
      }
      j["missing"] = found.missing;
      std::printf("%s\n", j.dump().c_str());
    } else {
      for (const backend::Accelerators::Entry& e : found.devices) {
        std::printf("%s %d: %s\n", e.kind.c_str(), e.index, e.description.c_str());
      }
      for (const std::string& m : found.missing) {
        std::fprintf(stderr, "%s%s\n", found.devices.empty() ? "error: " : "note: ", m.c_str());
      }
      if (found.devices.empty() && found.missing.empty()) {
        std::fprintf(stderr, "error: this build has no GPU device kind\n");
      }
    }
    *exit_code = found.devices.empty() ? kExitRuntime : 0;
  });
}

}  // namespace causeway::tools
