// A soak of the distributed cluster: for CAUSEWAY_SOAK_SECONDS (default 600)
// clients connect, put, run an all-reduce across two workers, fetch, check,
// and disconnect, while a hostile peer sends refused probes in between. The
// resident memory of the coordinator and every worker is sampled; after a
// warm-up third, its growth must stay under 1 MiB per minute per process.
// Labelled `soak`: run by `make soak`, not by `make test`.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "causeway/base/status_macros.h"
#include "gmock/gmock.h"
#include "tests/integration/cluster_kinds.h"

namespace causeway::testing {
namespace {

// Resident set of `pid`, bytes (0 if gone).
int64_t Rss(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/statm");
  int64_t pages = 0, resident = 0;
  if (!(f >> pages >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

// Least-squares slope of y over x.
double Slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double d = n * sxx - sx * sx;
  return d == 0 ? 0 : (n * sxy - sx * sy) / d;
}

TEST(DistributedSoakTest, ResidentMemoryStaysFlatUnderClientsAndRefusedProbes) {
  const char* env = std::getenv("CAUSEWAY_SOAK_SECONDS");
  const absl::Duration length = absl::Seconds(env != nullptr ? std::atoi(env) : 600);
  ProcessClusterOptions o = ProcessShape(1, 2, 1);
  o.memory_bytes = int64_t{64} << 20;
  auto cluster = StartProcesses(o);
  const std::vector<pid_t> pids = cluster->pids();
  std::vector<std::vector<double>> rss(pids.size());
  std::vector<double> minutes;
  const absl::Time start = absl::Now();
  absl::Time next_sample = start;
  int64_t rounds = 0;
  while (absl::Now() - start < length) {
    {
      auto connection = ConnectRemote(*cluster);
      auto client = Connect(connection.get());
      ASSERT_OK_AND_ASSIGN(Mesh mesh, client->AllocateMesh({{"x", 2}}));
      ASSERT_OK_AND_ASSIGN(CompiledFunction f,
                           client->Compile(AllReduceSum(1024, {"x"}), mesh,
                                           {{Sharding({{"x"}})}, {Sharding({{"x"}})}}));
      std::vector<float> values(2048);
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7);
      ASSERT_OK_AND_ASSIGN(Array in, client->Put(ir::Literal::F32({2048}, values), mesh,
                                                 Sharding({{"x"}})));
      for (int k = 0; k < 20; ++k) {
        ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client->Call(f, {in}));
        ASSERT_OK_AND_ASSIGN(ir::Literal v, AwaitOrHang(out[0].Fetch()));
        ASSERT_EQ(v.values<float>()[0], values[0] + values[1024]);
      }
      // Refused: an array of no one, a run of an unknown program.
      const HostId h = connection->resources()->GetTopology().device(mesh.devices()[0])->host;
      EXPECT_FALSE(AwaitOrHang(connection->host(h)->FetchShard(ArrayId(12345), 0)).ok());
    }
    ++rounds;
    if (absl::Now() >= next_sample) {
      minutes.push_back(absl::ToDoubleMinutes(absl::Now() - start));
      for (size_t p = 0; p < pids.size(); ++p) rss[p].push_back(static_cast<double>(Rss(pids[p])));
      next_sample += absl::Seconds(5);
    }
  }
  ASSERT_GE(minutes.size(), 6u) << "too short to measure a slope";
  EXPECT_EQ(cluster->ReapExited(), "");
  // The first third warms up (allocator arenas, connection pools).
  const size_t from = minutes.size() / 3;
  const std::vector<double> x(minutes.begin() + static_cast<long>(from), minutes.end());
  for (size_t p = 0; p < pids.size(); ++p) {
    const std::vector<double> y(rss[p].begin() + static_cast<long>(from), rss[p].end());
    const double mib_per_minute = Slope(x, y) / (1 << 20);
    const std::string name = p == 0 ? "coordinator" : absl::StrCat("worker", p - 1);
    std::printf("%s: RSS %.1f -> %.1f MiB, slope %.3f MiB/min after warm-up (%lld rounds)\n",
                name.c_str(), rss[p].front() / (1 << 20), rss[p].back() / (1 << 20),
                mib_per_minute, static_cast<long long>(rounds));
    RecordProperty(absl::StrCat(name, "_rss_slope_mib_per_min"), absl::StrCat(mib_per_minute));
    EXPECT_LT(mib_per_minute, 1.0) << name;
  }
}

}  // namespace
}  // namespace causeway::testing
