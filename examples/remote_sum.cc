// The quick start's sum on a distributed cluster (`causeway cluster up`):
//
//   remote_sum grpc://HOST:PORT TOKEN
//
// Connects, allocates a mesh of every device of the first island, sums a
// sharded array with an all-reduce and checks the result. Exits 0 when it
// is right, 1 with the error otherwise. Links causeway::distributed.
#include <cstdio>
#include <string>
#include <vector>

#include "causeway/client/client.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/ir/builder.h"

using namespace causeway;

namespace {

absl::Status Run(const std::string& address, const std::string& token) {
  RemoteClusterOptions options;
  options.address = address;
  options.token = token;
  options.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<RemoteCluster>> cluster = RemoteCluster::Connect(options);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(cluster->get());
  if (!client.ok()) return client.status();
  const Topology topology = (*cluster)->resources()->GetTopology();
  if (topology.islands().empty()) return absl::UnavailableError("the cluster has no island");
  const int64_t n = static_cast<int64_t>(topology.island(topology.islands()[0])->devices.size());
  absl::StatusOr<Mesh> mesh = (*client)->AllocateMesh({{"data", n}});
  if (!mesh.ok()) return mesh.status();

  ir::FunctionBuilder b("sum");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {4, 16}));
  absl::StatusOr<ir::Function> f = b.Build({b.AllReduce(b.ReduceSum(x, {0}), {"data"})});
  if (!f.ok()) return f.status();
  absl::StatusOr<CompiledFunction> cf = (*client)->Compile(
      *f, *mesh, {.in_shardings = {Sharding({{"data"}, {}})},
                  .out_shardings = {Sharding::Replicated(1)}});
  if (!cf.ok()) return cf.status();
  std::vector<float> data(static_cast<size_t>(4 * n * 16), 1.0f);
  absl::StatusOr<Array> a =
      (*client)->Put(ir::Literal::F32({4 * n, 16}, data), *mesh, Sharding({{"data"}, {}}));
  if (!a.ok()) return a.status();
  absl::StatusOr<std::vector<Array>> out = (*client)->Call(*cf, {*a});
  if (!out.ok()) return out.status();
  const Future<ir::Literal> fetched = (*out)[0].Fetch();  // owns what v points to
  const absl::StatusOr<ir::Literal>* v = fetched.AwaitWithTimeout(absl::Seconds(20));
  if (v == nullptr) return absl::DeadlineExceededError("no result after 20 s");
  if (!v->ok()) return v->status();
  for (float value : (*v)->values<float>()) {
    if (value != static_cast<float>(4 * n)) {
      return absl::InternalError("wrong sum: " + (*v)->ToString());
    }
  }
  std::printf("%lld devices: %s\n", static_cast<long long>(n), (*v)->ToString().c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: remote_sum grpc://HOST:PORT TOKEN\n");
    return 2;
  }
  const absl::Status s = Run(argv[1], argv[2]);
  if (!s.ok()) {
    std::fprintf(stderr, "remote_sum: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
