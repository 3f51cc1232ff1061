// `causeway bench matmul`: a matmul through a compiled function on one device
// of the embedded cluster vs raw single-threaded OpenBLAS sgemm in the same
// process (and Eigen's GEMM, the alternative kernel, for the record).
#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/ir/builder.h"
#include "nlohmann/json.hpp"
#include "tools/blas_kernels.h"
#include "tools/commands.h"

extern "C" {
#include <cblas.h>
}

namespace causeway::tools {
namespace {

struct MatmulOptions {
  std::string sizes = "512,1024";
  double min_seconds = 1.0;
  bool json = false;
  std::string device_kind = "cpu";
};

using Clock = std::chrono::steady_clock;

// Times several bodies fairly on a shared, noisy machine: each is
// calibrated to take about min_seconds / 5 per batch, then batches of all
// bodies are interleaved for 5 rounds and each body's best seconds per
// iteration is kept.
std::vector<double> TimeInterleaved(double min_seconds,
                                    const std::vector<std::function<void(int)>>& bodies) {
  std::vector<int> iterations(bodies.size(), 1);
  for (size_t k = 0; k < bodies.size(); ++k) {
    while (iterations[k] < (1 << 20)) {
      const auto start = Clock::now();
      bodies[k](iterations[k]);
      if (std::chrono::duration<double>(Clock::now() - start).count() >= min_seconds / 5) break;
      iterations[k] *= 2;
    }
  }
  std::vector<double> best(bodies.size(), 1e30);
  for (int round = 0; round < 5; ++round) {
    for (size_t k = 0; k < bodies.size(); ++k) {
      const auto start = Clock::now();
      bodies[k](iterations[k]);
      best[k] = std::min(best[k], std::chrono::duration<double>(Clock::now() - start).count() /
                                      iterations[k]);
    }
  }
  return best;
}

int RunBenchMatmul(const MatmulOptions& o) {
  // N (square) or MxKxN: [m,k] x [k,n].
  struct Dims {
    int64_t m, k, n;
  };
  std::vector<Dims> sizes;
  for (absl::string_view s : absl::StrSplit(o.sizes, ',')) {
    std::vector<int64_t> d;
    bool ok = true;
    for (absl::string_view part : absl::StrSplit(s, 'x')) {
      int64_t v;
      ok = ok && absl::SimpleAtoi(part, &v) && v > 0 && v <= 8192;
      d.push_back(ok ? v : 0);
    }
    if (!ok || (d.size() != 1 && d.size() != 3)) {
      std::fprintf(stderr, "bad size '%s' (N or MxKxN, each in [1, 8192])\n",
                   std::string(s).c_str());
      return kExitUsage;
    }
    sizes.push_back(d.size() == 1 ? Dims{d[0], d[0], d[0]} : Dims{d[0], d[1], d[2]});
  }
  openblas_set_num_threads(1);
  LocalClusterOptions cluster_options;
  cluster_options.islands = 1;
  cluster_options.hosts_per_island = 1;
  cluster_options.devices_per_host = 1;
  cluster_options.device_memory_bytes = int64_t{4} << 30;
  cluster_options.device_kind = o.device_kind;
  auto cluster = LocalCluster::Create(cluster_options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(cluster.status().message()).c_str());
    return 1;
  }
  auto client = Client::Connect(cluster->get());
  if (!client.ok()) return 1;
  auto mesh = (*client)->AllocateMesh({{"d", 1}});
  if (!mesh.ok()) return 1;
  bool ok = true;
  const BlasKernels blas = DescribeBlasKernels();
  if (!o.json) std::printf("%s\n", BlasKernelsLine(blas).c_str());
  for (const Dims& size : sizes) {
    const int64_t m = size.m, k = size.k, n = size.n;
    ir::FunctionBuilder b("matmul");
    ir::Value x = b.Parameter(ir::Shape(ir::DType::kF32, {m, k}));
    ir::Value y = b.Parameter(ir::Shape(ir::DType::kF32, {k, n}));
    auto fn = b.Build({b.Matmul(x, y)});
    auto compiled = (*client)->Compile(*fn, *mesh, {});
    std::vector<float> av(m * k), bv(k * n), cv(m * n);
    for (int64_t i = 0; i < m * k; ++i) av[i] = static_cast<float>((i * 7) % 13) / 13.0f;
    for (int64_t i = 0; i < k * n; ++i) bv[i] = static_cast<float>((i * 5) % 11) / 11.0f;
    auto a = (*client)->Put(ir::Literal::F32({m, k}, av), *mesh, Sharding::Replicated(2));
    auto bb = (*client)->Put(ir::Literal::F32({k, n}, bv), *mesh, Sharding::Replicated(2));
    if (!compiled.ok() || !a.ok() || !bb.ok()) {
      std::fprintf(stderr, "setup failed\n");
      return 1;
    }
    bool call_ok = true;
    // Calls are queued back to back and the last one awaited: device
    // throughput, with dispatch overlapped as in a real program.
    auto fn_body = [&](int iterations) {
      std::vector<causeway::Array> last;
      for (int i = 0; i < iterations; ++i) {
        auto out = (*client)->Call(*compiled, {*a, *bb});
        if (!out.ok()) {
          call_ok = false;
          return;
        }
        last = std::move(*out);
      }
      call_ok = call_ok && last[0].Ready().Await().ok();
    };
    auto blas_body = [&](int iterations) {
      for (int i = 0; i < iterations; ++i) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, av.data(), k,
                    bv.data(), n, 0.0f, cv.data(), n);
      }
    };
    // The same compiled function run directly on this thread (no runtime).
    auto exe = backend::cpu::Compile(*fn);
    if (!exe.ok()) return 1;
    auto exe_body = [&](int iterations) {
      const void* ins[] = {av.data(), bv.data()};
      void* outs[] = {cv.data()};
      for (int i = 0; i < iterations; ++i) (void)(*exe)->Run(ins, outs, {});
    };
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const RowMajor> ea(av.data(), m, k), eb(bv.data(), k, n);
    Eigen::Map<RowMajor> ec(cv.data(), m, n);
    auto eigen_body = [&](int iterations) {
      for (int i = 0; i < iterations; ++i) ec.noalias() = ea * eb;
    };
    const std::vector<double> t =
        TimeInterleaved(o.min_seconds, {fn_body, blas_body, exe_body, eigen_body});
    const double t_fn = t[0], t_blas = t[1], t_exe = t[2], t_eigen = t[3];
    const double flops = 2.0 * m * k * n;
    const double g_exe = flops / t_exe / 1e9;
    const double g_fn = flops / t_fn / 1e9, g_blas = flops / t_blas / 1e9,
                 g_eigen = flops / t_eigen / 1e9;
    const double ratio = g_fn / g_blas;
    ok = ok && call_ok;
    if (o.json) {
      nlohmann::json j = {{"benchmark", "matmul"},   {"m", m}, {"k", k}, {"n", n},
                          {"device_kind", o.device_kind},
                          {"gflops_function", g_fn}, {"gflops_blas", g_blas},
                          {"gflops_eigen", g_eigen}, {"gflops_executable", g_exe},
                          {"ratio", ratio},
                          {"blas_core", blas.core}, {"blas_narrowed", blas.narrowed},
                          {"ok", call_ok}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("matmul %lldx%lldx%lld: function (%s) %.1f GFLOP/s, OpenBLAS %.1f GFLOP/s, "
                  "Eigen %.1f GFLOP/s, ratio %.3f%s\n",
                  static_cast<long long>(m), static_cast<long long>(k),
                  static_cast<long long>(n), o.device_kind.c_str(), g_fn, g_blas, g_eigen,
                  ratio, call_ok ? "" : " (CALL FAILED)");
    }
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace

void AddBenchMatmulCommand(CLI::App* bench, int* exit_code) {
  auto options = std::make_shared<MatmulOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "matmul",
      "Matmul through a compiled function on one device vs raw single-threaded OpenBLAS sgemm");
  cmd->add_option("--sizes", options->sizes,
                  "Comma-separated sizes: N (square) or MxKxN ([M,K] x [K,N])");
  cmd->add_option("--min-seconds", options->min_seconds, "Time per measurement")
      ->check(CLI::PositiveNumber)->check(Finite());
  cmd->add_flag("--json", options->json, "One JSON object per size");
  cmd->add_option("--device-kind", options->device_kind,
                  DeviceKindHelp("Kind of the device the function runs on; the baselines stay "
                                 "single-threaded OpenBLAS and Eigen on this host"));
  cmd->callback([options, exit_code] { *exit_code = RunBenchMatmul(*options); });
}

}  // namespace causeway::tools
