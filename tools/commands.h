// Subcommands of the `causeway` tool. Each Add*Command registers its flags
// on `app` and runs when its subcommand is parsed; `main` only wires them.
#ifndef CAUSEWAY_TOOLS_COMMANDS_H_
#define CAUSEWAY_TOOLS_COMMANDS_H_

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

#include "CLI/CLI.hpp"

namespace causeway::tools {

// Exit codes of every subcommand (README): the command ran and failed, or
// its command line is wrong (also what a flag-parsing error exits with).
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

// Refuses NaN and infinities, which CLI11's number checks let through
// (every comparison with NaN is false). Chained after each numeric check.
inline CLI::Validator Finite() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end != text.c_str() && *end == '\0' && !std::isfinite(v)) {
          return "not a finite number: " + text;
        }
        return std::string();
      },
      "", "FINITE");
}

// Refuses zero and below, for a number whose range is open at 0 (CLI11's
// PositiveNumber names the largest double in its message).
inline CLI::Validator AboveZero() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end != text.c_str() && *end == '\0' && !(v > 0)) return "must be above 0: " + text;
        return std::string();
      },
      "", "ABOVE 0");
}

// Checks a --cluster value when the command line is parsed, so that a
// malformed one is a usage error (exit 2) before anything starts:
// grpc://HOST:PORT or HOST:PORT (an IPv6 host in brackets), or `local` (the
// embedded cluster) where `local_allowed` (tools/cluster_commands.cc).
CLI::Validator ClusterAddress(bool local_allowed);

// The cluster `command` uses when its --cluster is not given: the one that
// `cluster up` recorded for this user and still runs, when there is exactly
// one (said on stderr, so that output stays clean); else `fallback`
// ("local", or "" where a command needs a running cluster; then a note on
// stderr says why there is none). tools/cluster_commands.cc.
std::string DefaultCluster(const std::string& command, const std::string& fallback);

// Each sets `*exit_code` when its subcommand runs.
void AddDemoCommand(CLI::App& app, int* exit_code);
// `causeway train mlp` (tools/train.cc) and `causeway train lm`.
void AddTrainCommand(CLI::App& app, int* exit_code);
// `causeway train lm` under `train`, and `causeway sample` (tools/train_lm.cc).
void AddTrainLmCommand(CLI::App* train, int* exit_code);
void AddSampleCommand(CLI::App& app, int* exit_code);

// `causeway coordinator`, `causeway worker`, `causeway cluster up`
// (tools/cluster_commands.cc).
void AddCoordinatorCommand(CLI::App& app, int* exit_code);
void AddWorkerCommand(CLI::App& app, int* exit_code);
void AddClusterCommand(CLI::App& app, int* exit_code);

// `causeway bench ...`: returns the group that benchmark subcommands are
// added to.
CLI::App* AddBenchGroup(CLI::App& app);
// `causeway bench matmul` (tools/bench_matmul.cc).
void AddBenchMatmulCommand(CLI::App* bench, int* exit_code);
// `causeway sim dispatch` and `sim calibrate` (sim_commands.cc).
void AddSimCommands(CLI::App& app, int* exit_code);

// `causeway bench dispatch` and `causeway bench utilization`.
void AddBenchDispatchCommands(CLI::App* bench, int* exit_code);
// `causeway bench pipeline`.
void AddBenchPipelineCommand(CLI::App* bench, int* exit_code);
// `causeway bench collective` (tools/bench_collective.cc).
void AddBenchCollectiveCommand(CLI::App* bench, int* exit_code);
// `causeway bench lm` (tools/bench_lm.cc).
void AddBenchLmCommand(CLI::App* bench, int* exit_code);
// `causeway bench tenancy` (tools/bench_tenancy.cc).
void AddBenchTenancyCommand(CLI::App* bench, int* exit_code);

// The help of a --device-kind flag: `what`, then the kinds this build has
// ("(this build has: cpu, vulkan)"), from the registry (tools/gpus.cc).
std::string DeviceKindHelp(const std::string& what);

// `causeway run MODEL.onnx` (tools/run_onnx.cc), in builds with the ONNX
// importer.
void AddRunCommand(CLI::App& app, int* exit_code);
// `causeway gpus` and the root flag `--gpu N` (tools/gpus.cc).
void AddGpusCommand(CLI::App& app, int* exit_code);
void AddGpuFlag(CLI::App& app);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_COMMANDS_H_
