// libFuzzer target: every message a coordinator can send a worker (host
// calls: plans, runs, puts, fetches, releases, counters; peer
// tables), delivered over the worker's real control stream. The worker must
// answer or refuse each and stay up.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  causeway::cluster::ToWorkerBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  // Peer tables name addresses the worker would dial; keep them on this
  // machine's closed ports.
  for (causeway::cluster::ToWorker& m : *batch.mutable_messages()) {
    if (!m.has_peers()) continue;
    for (causeway::cluster::Peer& p : *m.mutable_peers()->mutable_peers()) {
      p.set_data_address("127.0.0.1:1");
    }
  }
  auto& w = causeway::fuzz::ScriptedWorker::Get();
  w.coordinator.Send(batch);
  w.coordinator.Sync();
  return 0;
}
