// Microbenchmarks of CollectiveHub (causeway/worker/collective_hub.h): the
// time of one collective among N member threads of one process, the
// rendezvous every gang-scheduled computation with a collective pays on each
// device.
//
// The benchmark thread is member 0 and times its loop; members 1..N-1 run on
// helper threads started before the loop and joined after it, each taking
// part in the same sequence of collectives. Every collective has a fresh key
// (RunId from a counter that never repeats in the process). After the timed
// loop, member 0 contributes a stop signal in one last collective, which
// ends the helpers' loops.

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "causeway/base/ids.h"
#include "causeway/ir/function.h"
#include "causeway/ir/shape.h"
#include "causeway/worker/collective_hub.h"

namespace causeway {
namespace {

// One collective as member `rank` with key `key`, contributing `signal`;
// returns the signal the group agreed on (nonzero once member 0 sent 1).
using Collective =
    std::function<absl::StatusOr<float>(int rank, const CollectiveKey& key, float signal)>;

// Next unused RunId; only the benchmark thread reads or advances it.
int64_t next_run = 1;

// Times one `collective` per iteration among `n` members (see file comment).
void RunGroup(benchmark::State& state, int n, const Collective& collective) {
  const int64_t first_run = next_run;
  const auto key = [first_run](int64_t i) { return CollectiveKey{RunId(first_run + i), 0, 0, 0}; };
  std::vector<std::thread> helpers;
  std::vector<std::string> errors(n);
  for (int rank = 1; rank < n; ++rank) {
    helpers.emplace_back([&, rank] {
      for (int64_t i = 0;; ++i) {
        absl::StatusOr<float> signal = collective(rank, key(i), 0.f);
        if (!signal.ok()) {
          errors[rank] = signal.status().ToString();
          return;
        }
        if (*signal != 0.f) return;
      }
    });
  }
  int64_t i = 0;
  for (auto _ : state) {
    absl::StatusOr<float> signal = collective(0, key(i++), 0.f);
    if (!signal.ok()) {
      state.SkipWithError(signal.status().ToString().c_str());
      break;
    }
  }
  // Stops the helpers (fails at once, with the same error, if a member failed).
  absl::StatusOr<float> stop = collective(0, key(i++), 1.f);
  for (std::thread& t : helpers) t.join();
  next_run = first_run + i;
  for (const std::string& e : errors) {
    if (!e.empty()) state.SkipWithError(e.c_str());
  }
  if (!stop.ok()) state.SkipWithError(stop.status().ToString().c_str());
}

std::vector<DeviceId> Members(int n) {
  std::vector<DeviceId> out;
  for (int i = 0; i < n; ++i) out.push_back(DeviceId(i));
  return out;
}

// Sum all-reduce of one f32 per member: the cost of the meeting itself, the
// collective of the dispatch benchmark in docs/BENCHMARKS.md.
void BM_AllReduceScalarF32(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  CollectiveHub hub(absl::Seconds(60));
  const std::vector<DeviceId> members = Members(n);
  const ir::Shape shape(ir::DType::kF32, {});
  RunGroup(state, n, [&](int rank, const CollectiveKey& key, float signal) -> absl::StatusOr<float> {
    float data = signal;
    absl::Status s = hub.AllReduce(key, DeviceId(rank), rank, members, shape,
                                   ir::ReduceKind::kSum, &data, "bench all_reduce");
    if (!s.ok()) return s;
    return data;
  });
}
BENCHMARK(BM_AllReduceScalarF32)->ArgName("members")->Arg(2)->Arg(4)->Arg(8)->UseRealTime();

// All-gather of 1 KiB (256 f32) per member: the meeting plus copying every
// member's operand into every member's result.
void BM_AllGather1KiB(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  constexpr int64_t kElements = 256;
  CollectiveHub hub(absl::Seconds(60));
  const std::vector<DeviceId> members = Members(n);
  const ir::Shape in_shape(ir::DType::kF32, {kElements});
  const ir::Shape out_shape(ir::DType::kF32, {n * kElements});
  std::vector<std::vector<float>> in(n, std::vector<float>(kElements));
  std::vector<std::vector<float>> out(n, std::vector<float>(n * kElements));
  RunGroup(state, n, [&](int rank, const CollectiveKey& key, float signal) -> absl::StatusOr<float> {
    in[rank][0] = signal;
    absl::Status s = hub.AllGather(key, DeviceId(rank), rank, members, in_shape, out_shape, 0,
                                   in[rank].data(), out[rank].data(), "bench all_gather");
    if (!s.ok()) return s;
    return out[rank][0];  // member 0's signal
  });
}
BENCHMARK(BM_AllGather1KiB)->ArgName("members")->Arg(4)->UseRealTime();

}  // namespace
}  // namespace causeway
