#include "tools/commands.h"

namespace causeway::tools {

CLI::App* AddBenchGroup(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Benchmarks; each prints one JSON object per configuration with --json");
  bench->require_subcommand(1);
  return bench;
}

}  // namespace causeway::tools
