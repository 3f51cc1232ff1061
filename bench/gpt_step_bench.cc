// The compiled GPT training step (causeway train lm's defaults) run directly
// on the calling thread through Executable::Run: no runtime, no other
// device. What one device's step costs at a batch (12: one device; 6: each
// of two data-parallel devices), the baseline the runtime figures of
// docs/BENCHMARKS.md ("Language model") are compared with.
#include <vector>

#include "benchmark/benchmark.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/check.h"
#include "causeway/ir/autodiff.h"
#include "causeway/models/gpt.h"

namespace causeway {
namespace {

// Runs `f` on the calling thread once per iteration: the GPT-2 initial
// weights first, then zero-filled inputs (moments, token ids 0) unless
// `inputs` already holds them; `tokens_per_s` counts `batch` windows.
void TimeOnThisThread(benchmark::State& state, const absl::StatusOr<ir::Function>& f,
                      int64_t batch, std::vector<ir::Literal> inputs = {}) {
  CW_CHECK_OK(f.status());
  absl::StatusOr<std::shared_ptr<const backend::cpu::HostExecutable>> exe =
      backend::cpu::Compile(*f);
  CW_CHECK_OK(exe.status());
  const models::GptConfig config;
  if (inputs.empty()) inputs = models::InitGptParams(config, 1);
  for (int i = static_cast<int>(inputs.size()); i < f->num_parameters(); ++i) {
    inputs.emplace_back(f->parameter_shape(i));
  }
  std::vector<ir::Literal> outputs;
  for (int i = 0; i < f->num_outputs(); ++i) outputs.emplace_back(f->output_shape(i));
  std::vector<const void*> in;
  for (const ir::Literal& l : inputs) in.push_back(l.data());
  std::vector<void*> out;
  for (ir::Literal& l : outputs) out.push_back(l.data());
  for (auto _ : state) {
    CW_CHECK_OK((*exe)->Run(in, out, {}));
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(batch * config.context), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GptTrainStep(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const models::GptConfig config;
  absl::StatusOr<ir::Function> f =
      models::GptTrainStepFunction(config, {}, batch, models::AdamWConfig{});
  CW_CHECK_OK(f.status());
  // GPT-2 initial weights, zero moments, token ids 0, step 1 at lr 1e-3.
  std::vector<ir::Literal> inputs = models::InitGptParams(config, 1);
  for (int i = static_cast<int>(inputs.size()); i < f->num_parameters(); ++i) {
    inputs.emplace_back(f->parameter_shape(i));
  }
  inputs.back().mutable_values<float>()[0] = 1.0f;
  inputs.back().mutable_values<float>()[1] = 1e-3f;
  TimeOnThisThread(state, f, batch, std::move(inputs));
}
BENCHMARK(BM_GptTrainStep)->Arg(12)->Arg(6)->Unit(benchmark::kMillisecond)->UseRealTime();

// The loss and its gradients only (no clipping, no AdamW): the step's time
// less this one is what the optimiser costs.
void BM_GptGradients(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const models::GptConfig config;
  absl::StatusOr<ir::Function> loss = models::GptLossFunction(config, {}, batch);
  CW_CHECK_OK(loss.status());
  std::vector<int> wrt(models::GptParams(config).size());
  for (size_t i = 0; i < wrt.size(); ++i) wrt[i] = static_cast<int>(i);
  TimeOnThisThread(state, ir::Grad(*loss, wrt), batch);
}
BENCHMARK(BM_GptGradients)->Arg(12)->Arg(6)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace causeway
