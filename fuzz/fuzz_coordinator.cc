// libFuzzer target: every message a client can send the coordinator
// (registrations, meshes, scheduler calls, runs spanning islands, host calls
// it forwards to a real worker), over a real Connect stream with the
// clients' token. Each input is one connection, reclaimed when it ends.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  causeway::cluster::ClientBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto& c = causeway::fuzz::RealCluster::Get();
  grpc::ClientContext context;
  causeway::grpc_transport::AddCallMetadata(context, causeway::fuzz::kClientToken);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = c.stub->Connect(&context);
  stream->Write(batch);
  stream->WritesDone();
  causeway::cluster::ToClient events;
  while (stream->Read(&events)) {
  }
  stream->Finish().error_code();
  return 0;
}
