// The `causeway` command: flag parsing and wiring only.
//
// Exit codes, the same for every subcommand: 0 success, 1 runtime error (the
// command ran and failed), 2 usage error (the command line is wrong: an
// unknown flag, a value out of range, flags that do not go together).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/base/settings.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "tools/blas_kernels.h"
#include "tools/commands.h"

#ifndef CAUSEWAY_VERSION
#define CAUSEWAY_VERSION "unknown"
#endif

namespace {

// A command's output that did not reach stdout (a full disk, /dev/full, a
// closed pipe) is a failed command: exit 1 with the reason, never 0.
int CheckStdout(int exit_code) {
  errno = 0;
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || std::cout.fail();
  if (!failed) return exit_code;
  const int error = errno;
  std::fprintf(stderr, "causeway: could not write the output to stdout: %s\n",
               error != 0 ? std::strerror(error) : "write error");
  return exit_code != 0 ? exit_code : causeway::tools::kExitRuntime;
}

}  // namespace

int main(int argc, char** argv) {
  // Every CAUSEWAY_* variable, checked once: a value a setting does not
  // take is a usage error naming the variable and its values.
  std::vector<std::string> unknown;
  if (absl::Status s = causeway::CheckSettings(&unknown); !s.ok()) {
    std::fprintf(stderr, "causeway: %s\n", std::string(s.message()).c_str());
    return causeway::tools::kExitUsage;
  }
  for (const std::string& name : unknown) {
    std::fprintf(stderr,
                 "causeway: warning: %s is not a Causeway setting (docs/SETTINGS.md lists them)\n",
                 name.c_str());
  }
  causeway::tools::SelectBlasKernels(argv);
  CLI::App app{"Causeway: a single-controller runtime for ML accelerators"};
  // Every subcommand's --help shows its defaults.
  app.option_defaults()->always_capture_default();
  app.set_version_flag(
      "--version",
      absl::StrCat("causeway ", CAUSEWAY_VERSION, " (wire protocol ",
                   causeway::grpc_transport::kProtocolVersion, ")\n",
                   causeway::tools::BlasKernelsLine(causeway::tools::DescribeBlasKernels())));
  app.require_subcommand(0, 1);
  // Before or after the subcommand: `causeway --log-level warning worker ...`.
  app.fallthrough();
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& name) {
           causeway::internal::LogLevel level;
           if (causeway::internal::ParseLogLevel(name, &level)) {
             causeway::internal::SetMinLogLevel(level);
           }
         },
         "Least level of the log lines written to stderr: info, warning or error (default: "
         "CAUSEWAY_LOG_LEVEL, else info)")
      ->check(CLI::IsMember({"info", "warning", "error"}))
      ->trigger_on_parse();
  causeway::tools::AddGpuFlag(app);
  int exit_code = 0;
  causeway::tools::AddDemoCommand(app, &exit_code);
  causeway::tools::AddTrainCommand(app, &exit_code);
  causeway::tools::AddSampleCommand(app, &exit_code);
  causeway::tools::AddCoordinatorCommand(app, &exit_code);
  causeway::tools::AddWorkerCommand(app, &exit_code);
  causeway::tools::AddClusterCommand(app, &exit_code);
  CLI::App* bench = causeway::tools::AddBenchGroup(app);
  causeway::tools::AddBenchDispatchCommands(bench, &exit_code);
  causeway::tools::AddBenchPipelineCommand(bench, &exit_code);
  causeway::tools::AddBenchMatmulCommand(bench, &exit_code);
  causeway::tools::AddBenchLmCommand(bench, &exit_code);
  causeway::tools::AddBenchTenancyCommand(bench, &exit_code);
  causeway::tools::AddBenchCollectiveCommand(bench, &exit_code);
  causeway::tools::AddSimCommands(app, &exit_code);
  causeway::tools::AddGpusCommand(app, &exit_code);
#if CAUSEWAY_HAVE_ONNX
  causeway::tools::AddRunCommand(app, &exit_code);
#endif
  // Commands run inside parse. One that runs out of host memory on this
  // thread ends here with a message, not in std::terminate; each checks its
  // sizes against host memory before allocating where it can.
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return CheckStdout(app.exit(e));
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return causeway::tools::kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "causeway: out of host memory (an allocation failed); give smaller sizes, or "
                 "run where there is more memory\n");
    return CheckStdout(causeway::tools::kExitRuntime);
  }
  if (app.get_subcommands().empty()) {
    // `causeway` alone: what it can do.
    std::printf("%s", app.help().c_str());
    return CheckStdout(0);
  }
  return CheckStdout(exit_code);
}
