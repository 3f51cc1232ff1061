// A first program against the C++ API, run as a test. (The README's own
// example is compiled from README.md itself: examples/CMakeLists.txt.)
#include <cstdio>
#include <vector>

#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/ir/builder.h"

using namespace causeway;

int main() {
  auto cluster =
      LocalCluster::Create({.islands = 1, .hosts_per_island = 2, .devices_per_host = 4}).value();
  auto client = Client::Connect(cluster.get()).value();
  Mesh mesh = client->AllocateMesh({{"data", 8}}).value();

  // The function sees one shard: 32 rows split over the 8 devices of axis "data" is 4 rows each.
  ir::FunctionBuilder b("sum");
  ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {4, 16}));  // one shard
  ir::Value s = b.AllReduce(b.ReduceSum(x, {0}), {"data"});
  ir::Function f = b.Build({s}).value();

  // Compiling fixes input and output shardings, so outputs can be named before anything runs.
  CompiledFunction cf = client->Compile(f, mesh, {.in_shardings = {Sharding({{"data"}, {}})},
                                                  .out_shardings = {Sharding::Replicated(1)}})
                            .value();

  std::vector<float> data(32 * 16, 1.0f);
  Array a = client->Put(ir::Literal::F32({32, 16}, data), mesh, Sharding({{"data"}, {}})).value();
  std::vector<Array> out = client->Call(cf, {a}).value();  // returns at once
  absl::StatusOr<ir::Literal> v = out[0].Fetch().Await();  // 16 values, each 32
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().ToString().c_str());
    return 1;
  }
  for (float value : v->values<float>()) {
    if (value != 32.0f) {
      std::fprintf(stderr, "expected 32, got %f\n", value);
      return 1;
    }
  }
  std::printf("sum over 32 rows on 8 devices: %s\n", v->ToString().c_str());
  return 0;
}
