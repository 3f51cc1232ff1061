// The `causeway` command: flag parsing and wiring only.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "tools/demo.h"

int main(int argc, char** argv) {
  CLI::App app{"Causeway: a single-controller runtime for ML accelerators"};
  app.require_subcommand(1);

  causeway::tools::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo",
      "Run a two-stage program spanning islands on the embedded cluster, check it against a "
      "host computation, and report placement, timings and device utilisation");
  demo_cmd->add_option("--islands", demo.islands, "Islands")->check(CLI::Range(1, 64));
  demo_cmd->add_option("--hosts-per-island", demo.hosts_per_island, "Hosts per island")
      ->check(CLI::Range(1, 64));
  demo_cmd->add_option("--devices-per-host", demo.devices_per_host, "Devices per host")
      ->check(CLI::Range(1, 64));
  demo_cmd->add_option("--memory", demo.memory_bytes, "Memory per device, bytes")
      ->check(CLI::PositiveNumber);
  demo_cmd->add_option("--rows-per-device", demo.rows_per_device, "Batch rows per device")
      ->check(CLI::Range(1, 1 << 16));
  demo_cmd->add_option("--features", demo.features, "Input features")->check(CLI::Range(1, 1 << 14));
  demo_cmd->add_option("--hidden", demo.hidden, "Hidden units")->check(CLI::Range(1, 1 << 14));
  demo_cmd->add_option("--outputs", demo.outputs, "Output units")->check(CLI::Range(1, 1 << 14));
  demo_cmd->add_option("--steps", demo.steps, "Runs of the program")->check(CLI::Range(1, 100000));
  demo_cmd->add_option("--dcn-latency-us", demo.dcn_latency_us,
                       "Emulated latency between islands, microseconds")
      ->check(CLI::NonNegativeNumber);
  demo_cmd->add_option("--dcn-gbps", demo.dcn_gbps,
                       "Emulated bandwidth between islands, Gbit/s (0: unlimited)")
      ->check(CLI::NonNegativeNumber);
  demo_cmd->add_option("--trace", demo.trace_path, "Write a Chrome trace (Perfetto) to FILE");
  demo_cmd->add_flag("--json", demo.json, "Print one JSON object instead of text");

  CLI11_PARSE(app, argc, argv);
  if (demo_cmd->parsed()) return causeway::tools::RunDemo(demo);
  return 0;
}
