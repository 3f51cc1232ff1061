// Shared set-up of the libFuzzer targets that drive real servers: a worker
// joined to a scripted coordinator (whose messages are the fuzz input), and
// a real coordinator with one real worker.
#ifndef CAUSEWAY_FUZZ_FUZZ_CLUSTER_H_
#define CAUSEWAY_FUZZ_FUZZ_CLUSTER_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "causeway/base/check.h"
#include "causeway/base/mutex.h"
#include "causeway/cluster/coordinator_server.h"
#include "causeway/cluster/worker_server.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/grpc_common.h"

namespace causeway::fuzz {

inline constexpr char kClientToken[] = "fuzz-client-token";
inline constexpr char kWorkerToken[] = "fuzz-worker-token";
inline constexpr int64_t kDeviceMemory = int64_t{64} << 20;

// Starts a real worker (two devices of kDeviceMemory, short collective and
// memory timeouts, so that fuzz inputs cannot park it for long) joined to
// the coordinator at `address`.
inline std::unique_ptr<WorkerServer> StartWorker(const std::string& address) {
  WorkerServerOptions o;
  o.coordinator = address;
  o.token = kWorkerToken;
  o.devices = 2;
  o.memory_bytes = kDeviceMemory;
  o.listen = "127.0.0.1:0";
  o.advertise = "127.0.0.1";
  o.collective_timeout = absl::Seconds(2);
  o.memory_stall_timeout = absl::Seconds(2);
  auto worker = WorkerServer::Start(o);
  CW_CHECK_OK(worker.status());
  return *std::move(worker);
}

// A coordinator that welcomes one worker and then sends it whatever the
// fuzz input says, in order. Sync() waits until the worker has handled
// everything sent so far (a counters call it must answer).
class ScriptedCoordinator final : public cluster::Coordinator::Service {
 public:
  grpc::Status Join(grpc::ServerContext*,
                    grpc::ServerReaderWriter<cluster::ToWorkerBatch, cluster::WorkerBatch>* stream)
      override {
    cluster::WorkerBatch hello;
    if (!stream->Read(&hello)) return grpc::Status::OK;
    cluster::ToWorkerBatch welcome;
    cluster::Welcome& w = *welcome.add_messages()->mutable_welcome();
    w.set_host(0);
    w.add_devices(0);
    w.add_devices(1);
    {
      // The welcome is written and the stream published under one lock:
      // the worker's Start returns once the welcome arrives, and the first
      // Send (which takes the lock) must then find the stream.
      MutexLock lock(&mu_);
      stream->Write(welcome);
      stream_ = stream;
    }
    cluster::WorkerBatch batch;
    while (stream->Read(&batch)) {
      MutexLock lock(&mu_);
      for (const cluster::FromWorker& m : batch.messages()) {
        if (m.has_reply()) answered_.insert(m.reply().id());
      }
    }
    MutexLock lock(&mu_);
    stream_ = nullptr;
    return grpc::Status::OK;
  }

  void Send(const cluster::ToWorkerBatch& batch) {
    MutexLock lock(&mu_);
    CW_CHECK(stream_ != nullptr) << "the worker left";
    stream_->Write(batch);
  }

  void Sync() {
    const uint64_t id = next_sync_++;
    cluster::ToWorkerBatch batch;
    cluster::ToWorker& m = *batch.add_messages();
    m.set_id(id);
    m.mutable_call()->set_get_counters(false);
    Send(batch);
    MutexLock lock(&mu_);
    auto answered = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return answered_.contains(id) || stream_ == nullptr;
    };
    CW_CHECK(mu_.AwaitWithTimeout(answered, absl::Seconds(30)))
        << "the worker did not answer within 30 s";
    CW_CHECK(stream_ != nullptr) << "the worker left";
    answered_.erase(id);
  }

 private:
  // Ids far above any a fuzz input is likely to reuse.
  uint64_t next_sync_ = uint64_t{1} << 62;
  Mutex mu_;
  grpc::ServerReaderWriter<cluster::ToWorkerBatch, cluster::WorkerBatch>* stream_
      ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_set<uint64_t> answered_ ABSL_GUARDED_BY(mu_);
};

// A real worker (two devices of 64 MiB) joined to a ScriptedCoordinator.
struct ScriptedWorker {
  ScriptedCoordinator coordinator;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<WorkerServer> worker;

  static ScriptedWorker& Get() {
    static ScriptedWorker* w = [] {
      auto* s = new ScriptedWorker;
      grpc::ServerBuilder builder;
      int port = 0;
      grpc_transport::ConfigureServer(builder);
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
      builder.RegisterService(&s->coordinator);
      s->server = builder.BuildAndStart();
      CW_CHECK(s->server != nullptr && port != 0);
      s->worker = StartWorker(absl::StrCat("127.0.0.1:", port));
      return s;
    }();
    return *w;
  }
};

// A real coordinator with one real worker (two devices) joined to it.
struct RealCluster {
  std::unique_ptr<CoordinatorServer> coordinator;
  std::unique_ptr<WorkerServer> worker;
  std::unique_ptr<cluster::Coordinator::Stub> stub;

  static RealCluster& Get() {
    static RealCluster* c = [] {
      auto* s = new RealCluster;
      CoordinatorOptions co;
      co.token = kClientToken;
      co.worker_token = kWorkerToken;
      auto coordinator = CoordinatorServer::Start(co);
      CW_CHECK_OK(coordinator.status());
      s->coordinator = *std::move(coordinator);
      s->worker = StartWorker(s->coordinator->address());
      s->stub = cluster::Coordinator::NewStub(grpc_transport::MakeChannel(
          s->coordinator->address(), grpc::InsecureChannelCredentials()));
      return s;
    }();
    return *c;
  }
};

}  // namespace causeway::fuzz

#endif  // CAUSEWAY_FUZZ_FUZZ_CLUSTER_H_
