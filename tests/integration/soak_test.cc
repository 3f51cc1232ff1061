// A bounded soak of the whole embedded runtime: several clients at once run
// programs that span islands (collectives, reshards, an emulated DCN), under
// device-memory back-pressure, with injected faults, in both dispatch modes.
// Every result is checked, every failure must carry its root cause, and when
// all clients have disconnected every byte of device memory is free again.
// Labelled `stress`: `make test` runs it, `make quick` skips it.
#include <thread>

#include "causeway/worker/collective_hub.h"
#include "causeway/worker/host_executor.h"
#include "causeway/backend/cpu/executable.h"
#include "gmock/gmock.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kRows = 64;  // per device on island 0

// Launches of "flaky" fail on every 5th run of a client, on the even device of
// its two-device mesh.
absl::Status Flaky(const LaunchInfo& info) {
  if (info.name == "flaky" && info.device.value() % 2 == 0 && info.run.value() % 5 == 0) {
    return absl::DataLossError("injected soak fault");
  }
  return absl::OkStatus();
}

struct Soak {
  std::unique_ptr<Client> client;
  Program program;
  Array input;
  float want = 0;
};

// stage0: x + 1, all-reduced row sums.
ir::Function Stage0() {
  ir::FunctionBuilder b0("stage0");
  ir::Value x = b0.Parameter(ir::Shape(ir::DType::kF32, {kRows, 16}));
  ir::Value one = b0.Broadcast(b0.ConstantF32(1.0f), {kRows, 16}, {});
  ir::Value s = b0.AllReduce(b0.ReduceSum(b0.Add(x, one), {0}), {"x"});
  return *b0.Build({s});
}

// x (rows sharded over island 0) -> [stage0] -> moved to island 1 ->
// [stage1 ("flaky" or not): sum + 1].
Soak MakeSoak(LocalCluster* cluster, DispatchMode mode, bool flaky) {
  ClientOptions options;
  options.dispatch = mode;
  Soak soak;
  soak.client = Connect(cluster, options);
  Client& c = *soak.client;
  Mesh m0 = *c.AllocateMesh({{"x", 4}}, IslandId(0));
  Mesh m1 = *c.AllocateMesh({{"y", 2}}, IslandId(1));
  CompiledFunction f0 = *c.Compile(Stage0(), m0,
                                   {{Sharding({{"x"}, {}})}, {Sharding::Replicated(1)}});
  CompiledFunction f1 = *c.Compile(DelayAddOne(16, 50, flaky ? "flaky" : "steady"), m1, {});
  ProgramBuilder pb = c.NewProgram("soak");
  TracedArray p =
      *pb.Parameter(ir::Shape(ir::DType::kF32, {4 * kRows, 16}), m0, Sharding({{"x"}, {}}));
  auto a = *pb.Call(f0, {p});
  auto r = *pb.Call(f1, {a[0]});
  soak.program = *pb.Build({r[0]});
  soak.input = *c.Put(ir::Literal(ir::Shape(ir::DType::kF32, {4 * kRows, 16})), m0,
                      Sharding({{"x"}, {}}));
  soak.want = 4 * kRows + 1;  // sum over all rows of (0 + 1), then + 1
  return soak;
}

TEST(SoakTest, ClientsAcrossIslandsUnderBackPressureAndFaultsStayCorrectAndLeakNothing) {
  LocalClusterOptions o;
  o.islands = 2;
  o.hosts_per_island = 2;
  o.devices_per_host = 2;
  // Each client's input holds 4 KiB on every island-0 device and each run's
  // stage0 launch 64 bytes of result plus its temporaries while it runs:
  // with three inputs in place, room remains for three launches per device,
  // so allocations wait (back-pressure).
  const int64_t temporaries = (*backend::cpu::Compile(Stage0()))->temporary_bytes();
  o.device_memory_bytes = 3 * 4096 + 3 * (64 + temporaries);
  o.dcn.latency = absl::Microseconds(100);
  o.dcn.bytes_per_second = 1e9;
  o.fault_injector = Flaky;
  auto cluster = MakeCluster(o);

  struct Config {
    DispatchMode mode;
    bool flaky;
  };
  const std::vector<Config> configs = {{DispatchMode::kParallel, false},
                                       {DispatchMode::kParallel, true},
                                       {DispatchMode::kSequential, false}};
  constexpr int kRuns = 1600;  // a multiple of kWindow
  constexpr int kWindow = 16;
  std::vector<int> ok(configs.size(), 0), failed(configs.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < configs.size(); ++i) {
    threads.emplace_back([&, i] {
      Soak soak = MakeSoak(cluster.get(), configs[i].mode, configs[i].flaky);
      for (int done = 0; done < kRuns; done += kWindow) {
        std::vector<Array> outs;
        for (int k = 0; k < kWindow; ++k) {
          auto out = soak.program.Run({soak.input});
          ASSERT_OK(out.status());
          outs.push_back((*out)[0]);
        }
        for (Array& a : outs) {
          auto v = AwaitOrHang(a.Fetch());
          if (v.ok()) {
            ASSERT_EQ(v->values<float>()[0], soak.want);
            ++ok[i];
          } else {
            ASSERT_TRUE(configs[i].flaky) << v.status();
            ASSERT_THAT(v.status(), StatusIs(absl::StatusCode::kDataLoss,
                                             AllOf(HasSubstr("injected soak fault"),
                                                   HasSubstr("(flaky)"), HasSubstr("on device"))));
            ++failed[i];
          }
          a = Array();
        }
      }
      soak.client->Disconnect();
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(ok[i] + failed[i], kRuns) << "client " << i;
    if (configs[i].flaky) {
      EXPECT_GT(failed[i], 0);
      EXPECT_GT(ok[i], 0);
    } else {
      EXPECT_EQ(failed[i], 0);
    }
  }
  // Launches drop their last buffer references just after their outputs
  // are ready, so memory drains shortly after the last result is seen.
  bool drained = true;
  for (const auto& host : cluster->executors()) {
    for (int d = 0; d < host->num_devices(); ++d) {
      drained = host->store().memory(d)->AwaitEmpty(absl::Seconds(10)) && drained;
    }
  }
  EXPECT_TRUE(drained);
  EXPECT_EQ(cluster->MemoryInUse(), 0);
  int64_t peak = 0;
  for (const DeviceCounters& r : cluster->Counters()) peak = std::max(peak, r.memory_peak);
  EXPECT_EQ(peak, o.device_memory_bytes) << "memory never filled: no back-pressure exercised";
  EXPECT_EQ(cluster->collective_hub().deadlocks_detected(), 0);
}

}  // namespace
}  // namespace causeway::testing
