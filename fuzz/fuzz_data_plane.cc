// libFuzzer target: what a peer worker can push into a worker's data plane
// (chunks of reshard pieces and collective contributions, gang aborts),
// over a real Push stream with the workers' token.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  causeway::cluster::DataBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto& w = causeway::fuzz::ScriptedWorker::Get();
  static auto stub = causeway::cluster::Data::NewStub(causeway::grpc_transport::MakeChannel(
      absl::StrCat("127.0.0.1:", w.worker->data_port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  causeway::grpc_transport::AddCallMetadata(context, causeway::fuzz::kWorkerToken);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  causeway::cluster::DataAck ack;
  auto push = stub->Push(&context, &ack);
  push->Write(batch);
  push->WritesDone();
  push->Finish().error_code();
  // The worker is still up and answering its coordinator.
  w.coordinator.Sync();
  return 0;
}
