// Microbenchmark of grpc_transport::BatchWriter
// (causeway/transport/grpc/grpc_common.h): Post() throughput from 1 and 4
// producer threads with a write function that only counts (no network). Every
// message of the distributed cluster's streams goes through Post(), on the
// caller's thread, and the writer's batching decides how many writes a
// stream makes.

#include <atomic>
#include <cstdint>
#include <memory>

#include "benchmark/benchmark.h"
#include "causeway/transport/grpc/cluster.pb.h"
#include "causeway/transport/grpc/grpc_common.h"

namespace causeway {
namespace {

using Writer = grpc_transport::BatchWriter<cluster::ClientBatch, cluster::ClientMessage>;

// One writer per benchmark run, shared by its producer threads: made by
// Setup before the threads start, closed by thread 0 after they have all
// left the timed loop (the loop's end is a barrier), freed by Teardown.
std::unique_ptr<Writer> writer;
std::atomic<int64_t> written_messages{0};
std::atomic<int64_t> written_batches{0};

void MakeWriter(const benchmark::State&) {
  written_messages = 0;
  written_batches = 0;
  writer = std::make_unique<Writer>([](const cluster::ClientBatch& batch) {
    written_messages += batch.messages_size();
    ++written_batches;
    return true;
  });
}

void FreeWriter(const benchmark::State&) { writer.reset(); }

// Each producer posts a small message (a release-sized client call) per
// iteration. Reports Post() calls per second over all producers, and the
// average number of messages per write once the writer has drained.
void BM_Post(benchmark::State& state) {
  cluster::ClientMessage message;
  message.set_client(3);
  message.set_unregister_client(3);
  int64_t id = 0;
  for (auto _ : state) {
    message.set_id(++id);
    if (!writer->Post(message)) {
      state.SkipWithError("Post refused");
      break;
    }
  }
  state.counters["msgs/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  if (state.thread_index() == 0) {
    writer->Close();
    const int64_t batches = written_batches;
    state.counters["avg_batch"] =
        batches == 0 ? 0.0 : static_cast<double>(written_messages) / static_cast<double>(batches);
  }
}
BENCHMARK(BM_Post)->Setup(MakeWriter)->Teardown(FreeWriter)->Threads(1)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace causeway
