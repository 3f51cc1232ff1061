// The `causeway` command: flag parsing and wiring only.
#include "CLI/CLI.hpp"
#include "tools/blas_kernels.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  causeway::tools::SelectBlasKernels(argv);
  CLI::App app{"Causeway: a single-controller runtime for ML accelerators"};
  app.require_subcommand(1);
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
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
