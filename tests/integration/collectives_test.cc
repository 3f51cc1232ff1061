// Every collective, over every subset of a 2x2 mesh's axes, among devices of
// one host (axis "y") and of two hosts (axis "x"), end to end through the
// embedded cluster; and the gradient rule of each collective against finite
// differences of the SPMD loss (the sum over devices of each device's loss).
// On each kind of device this build has: `cpu` (the host-staged hub) and
// `vulkan` (all on one GPU: with CAUSEWAY_VULKAN_COLLECTIVES=gpu, as ctest
// runs it, the GPU moves and reduces the bytes itself,
// backend/vulkan/collectives.h; with =host the same cases go through the
// hub).
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/autodiff.h"
#include "tests/integration/test_util.h"
#if CAUSEWAY_HAVE_VULKAN
#include "causeway/backend/vulkan/device.h"
#endif

namespace causeway::testing {
namespace {

using ir::DType;
using ir::FunctionBuilder;
using ir::Literal;
using ir::Shape;
using ir::Value;

constexpr int kDevices = 4;
constexpr int64_t kRows = 4, kCols = 3;  // per-device operand f32[4, 3]

using Body = std::function<Value(FunctionBuilder&, Value)>;
// Expected per-device result at mesh position p from every device's input.
using Reference = std::function<std::vector<float>(const std::vector<std::vector<float>>&,
                                                   const std::vector<int>& group, int rank)>;

class CollectivesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
#if !CAUSEWAY_HAVE_VULKAN
    if (GetParam() == "vulkan") GTEST_SKIP() << "this build has no vulkan kind";
#endif
    LocalClusterOptions options;
    options.device_kind = GetParam();
    options.islands = 1;
    options.hosts_per_island = 2;
    options.devices_per_host = 2;
    options.collective_timeout = absl::Seconds(30);
    cluster_ = MakeCluster(options);
    client_ = Connect(cluster_.get());
    auto mesh = client_->AllocateMesh({{"x", 2}, {"y", 2}});
    CW_CHECK_OK(mesh.status());
    mesh_ = *mesh;
  }

  HostId HostOf(int position) {
    auto d = cluster_->resources()->GetTopology().device(mesh_.devices()[position]);
    CW_CHECK_OK(d.status());
    return d->host;
  }

  // Inputs: device p holds rows of values 100 p + i (distinct everywhere).
  std::vector<std::vector<float>> Inputs() const {
    std::vector<std::vector<float>> in(kDevices);
    for (int p = 0; p < kDevices; ++p) {
      for (int64_t i = 0; i < kRows * kCols; ++i) in[p].push_back(100.0f * p + i);
    }
    return in;
  }

  // Runs f (per device: f32[4,3] -> f32[a, b]) on the mesh; returns each
  // device's result.
  absl::StatusOr<std::vector<std::vector<float>>> RunPerDevice(const ir::Function& f,
                                                               const std::vector<std::vector<float>>& in) {
    const Sharding split(std::vector<std::vector<std::string>>{{"x", "y"}, {}});
    CompileOptions options{{split}, {}};
    for (int i = 0; i < f.num_outputs(); ++i) {
      options.out_shardings.push_back(f.output_shape(i).rank() == 2 ? split
                                                                   : Sharding(std::vector<std::vector<std::string>>{{"x", "y"}}));
    }
    CW_ASSIGN_OR_RETURN(CompiledFunction cf, client_->Compile(f, mesh_, options));
    std::vector<float> global;
    for (const auto& v : in) global.insert(global.end(), v.begin(), v.end());
    CW_ASSIGN_OR_RETURN(Array x, client_->Put(Literal::F32({kDevices * kRows, kCols}, global),
                                              mesh_, split));
    CW_ASSIGN_OR_RETURN(std::vector<Array> out, client_->Call(cf, {x}));
    CW_ASSIGN_OR_RETURN(Literal all, AwaitOrHang(out[0].Fetch()));
    const auto values = all.values<float>();
    const size_t per = values.size() / kDevices;
    std::vector<std::vector<float>> result(kDevices);
    for (int p = 0; p < kDevices; ++p) {
      result[p].assign(values.begin() + p * per, values.begin() + (p + 1) * per);
    }
    return result;
  }

  void Check(const std::vector<std::string>& axes, const Body& body, const Reference& ref) {
    SCOPED_TRACE(absl::StrCat("axes {", absl::StrJoin(axes, ","), "}"));
    FunctionBuilder b("collective");
    Value x = b.Parameter(Shape(DType::kF32, {kRows, kCols}));
    ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({body(b, x)}));
    const auto in = Inputs();
    ASSERT_OK_AND_ASSIGN(auto out, RunPerDevice(f, in));
    for (int p = 0; p < kDevices; ++p) {
      ASSERT_OK_AND_ASSIGN(std::vector<int> group, mesh_.Group(p, axes));
      const int rank = static_cast<int>(std::find(group.begin(), group.end(), p) - group.begin());
      EXPECT_EQ(out[p], ref(in, group, rank)) << "device at mesh position " << p;
    }
  }

  // Every subset of the mesh axes; "y" stays on one host, "x" crosses hosts.
  static std::vector<std::vector<std::string>> AxisSets() {
    return {{"y"}, {"x"}, {"x", "y"}, {"y", "x"}};
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
  Mesh mesh_;
};

TEST_P(CollectivesTest, MeshSpansTwoHostsAlongXAndOneHostAlongY) {
  EXPECT_EQ(HostOf(0), HostOf(1));
  EXPECT_EQ(HostOf(2), HostOf(3));
  EXPECT_NE(HostOf(0), HostOf(2));
}

TEST_P(CollectivesTest, AllReduceSumAndMax) {
  for (ir::ReduceKind kind : {ir::ReduceKind::kSum, ir::ReduceKind::kMax}) {
    for (const auto& axes : AxisSets()) {
      Check(axes, [&](FunctionBuilder& b, Value x) { return b.AllReduce(x, axes, kind); },
            [&](const auto& in, const std::vector<int>& group, int) {
              std::vector<float> acc = in[group[0]];
              for (size_t r = 1; r < group.size(); ++r) {
                for (size_t i = 0; i < acc.size(); ++i) {
                  acc[i] = kind == ir::ReduceKind::kSum ? acc[i] + in[group[r]][i]
                                                        : std::max(acc[i], in[group[r]][i]);
                }
              }
              return acc;
            });
    }
  }
}

TEST_P(CollectivesTest, AllGatherAlongEitherDimension) {
  for (const auto& axes : AxisSets()) {
    const int64_t g = axes.size() == 2 ? 4 : 2;
    // Along columns: result [4, 3 g], block r = rank r's operand.
    Check(axes, [&](FunctionBuilder& b, Value x) { return b.AllGather(x, axes, 1, g); },
          [&](const auto& in, const std::vector<int>& group, int) {
            std::vector<float> out;
            for (int64_t i = 0; i < kRows; ++i) {
              for (int q : group) {
                out.insert(out.end(), in[q].begin() + i * kCols, in[q].begin() + (i + 1) * kCols);
              }
            }
            return out;
          });
    // Along rows, then reduced to a 2-D per-device result: [4 g, 3].
    Check(axes, [&](FunctionBuilder& b, Value x) { return b.AllGather(x, axes, 0, g); },
          [&](const auto& in, const std::vector<int>& group, int) {
            std::vector<float> out;
            for (int q : group) out.insert(out.end(), in[q].begin(), in[q].end());
            return out;
          });
  }
}

TEST_P(CollectivesTest, ReduceScatterSumAndMax) {
  for (ir::ReduceKind kind : {ir::ReduceKind::kSum, ir::ReduceKind::kMax}) {
    for (const auto& axes : AxisSets()) {
      const int64_t g = axes.size() == 2 ? 4 : 2;
      Check(axes,
            [&](FunctionBuilder& b, Value x) { return b.ReduceScatter(x, axes, 0, g, kind); },
            [&](const auto& in, const std::vector<int>& group, int rank) {
              std::vector<float> acc = in[group[0]];
              for (size_t r = 1; r < group.size(); ++r) {
                for (size_t i = 0; i < acc.size(); ++i) {
                  acc[i] = kind == ir::ReduceKind::kSum ? acc[i] + in[group[r]][i]
                                                        : std::max(acc[i], in[group[r]][i]);
                }
              }
              const int64_t rows = kRows / g;
              return std::vector<float>(acc.begin() + rank * rows * kCols,
                                        acc.begin() + (rank + 1) * rows * kCols);
            });
    }
  }
}

TEST_P(CollectivesTest, AllToAllSplitsRowsAndConcatenatesColumns) {
  for (const auto& axes : AxisSets()) {
    const int64_t g = axes.size() == 2 ? 4 : 2;
    const int64_t rows = kRows / g;
    Check(axes, [&](FunctionBuilder& b, Value x) { return b.AllToAll(x, axes, 0, 1, g); },
          [&](const auto& in, const std::vector<int>& group, int rank) {
            // Result [rows, 3 g]: block i holds chunk `rank` of rank i.
            std::vector<float> out;
            for (int64_t r = 0; r < rows; ++r) {
              for (int q : group) {
                const auto row = in[q].begin() + (rank * rows + r) * kCols;
                out.insert(out.end(), row, row + kCols);
              }
            }
            return out;
          });
  }
}

TEST_P(CollectivesTest, CollectivePermuteSendsAlongPairsAndZeroesTheRest) {
  for (const auto& axes : AxisSets()) {
    const int64_t g = axes.size() == 2 ? 4 : 2;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (int64_t r = 0; r + 1 < g; ++r) pairs.push_back({r, r + 1});  // rank 0 gets nothing
    Check(axes,
          [&](FunctionBuilder& b, Value x) { return b.CollectivePermute(x, axes, pairs); },
          [&](const auto& in, const std::vector<int>& group, int rank) {
            if (rank == 0) return std::vector<float>(kRows * kCols, 0.0f);
            return in[group[rank - 1]];
          });
  }
}

TEST_P(CollectivesTest, ShapesThatDoNotFitTheGroupFailOnEveryDeviceWithoutHanging) {
  // Built for a group of 4 but run over "x" (2 devices).
  FunctionBuilder b("misfit");
  Value x = b.Parameter(Shape(DType::kF32, {kRows, kCols}));
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({b.AllGather(x, {"x"}, 0, 4)}));
  absl::StatusOr<std::vector<std::vector<float>>> out = RunPerDevice(f, Inputs());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
}

// d/dx of sum over devices of sum(tanh(c(x)) * w) against central
// differences; w differs per position in the result so cotangents are not
// uniform.
void CheckCollectiveGrad(CollectivesTest* t, const Body& body,
                         std::function<absl::StatusOr<std::vector<std::vector<float>>>(
                             const ir::Function&, const std::vector<std::vector<float>>&)>
                             run) {
  FunctionBuilder b("loss");
  Value x = b.Parameter(Shape(DType::kF32, {kRows, kCols}));
  Value y = body(b, x);
  const Shape ys = b.shape(y);
  Value w = b.Add(b.Iota(Shape(DType::kF32, ys.dims), 0), b.Full(0.5f, ys.dims));
  std::vector<int64_t> all;
  for (int d = 0; d < ys.rank(); ++d) all.push_back(d);
  Value loss = b.ReduceSum(b.Mul(b.Tanh(y), w), all);
  ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({loss}));
  ASSERT_OK_AND_ASSIGN(ir::Function g, ir::Grad(f, {0}));
  // Wrappers with 2-D per-device results: the loss as [1, 1].
  FunctionBuilder lb("loss_2d");
  Value lx = lb.Parameter(Shape(DType::kF32, {kRows, kCols}));
  ASSERT_OK_AND_ASSIGN(ir::Function loss_fn,
                       lb.Build({lb.Reshape(lb.Call(f, {lx})[0], {1, 1})}));
  FunctionBuilder gb("grad_2d");
  Value gx = gb.Parameter(Shape(DType::kF32, {kRows, kCols}));
  ASSERT_OK_AND_ASSIGN(ir::Function grad_fn, gb.Build({gb.Call(g, {gx})[1]}));

  std::vector<std::vector<float>> in(kDevices);
  for (int p = 0; p < kDevices; ++p) {
    for (int64_t i = 0; i < kRows * kCols; ++i) in[p].push_back(0.05f * ((7 * i + 3 * p) % 11) - 0.2f);
  }
  ASSERT_OK_AND_ASSIGN(auto analytic, run(grad_fn, in));
  auto total = [&](const std::vector<std::vector<float>>& v) -> double {
    auto losses = run(loss_fn, v);
    CW_CHECK_OK(losses.status());
    double s = 0;
    for (const auto& l : *losses) s += l[0];
    return s;
  };
  constexpr float kEps = 1e-2f;
  for (int p = 0; p < kDevices; ++p) {
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      auto plus = in, minus = in;
      plus[p][i] += kEps;
      minus[p][i] -= kEps;
      const double fd = (total(plus) - total(minus)) / (2 * kEps);
      EXPECT_NEAR(analytic[p][i], fd, 5e-3 + 2e-2 * std::abs(fd))
          << "device " << p << " element " << i;
    }
  }
}

TEST_P(CollectivesTest, GradientsOfEveryCollectiveMatchFiniteDifferences) {
  auto run = [this](const ir::Function& f, const std::vector<std::vector<float>>& in) {
    return RunPerDevice(f, in);
  };
  const std::vector<std::string> xy = {"x", "y"}, x = {"x"};
  std::vector<std::pair<std::string, Body>> cases = {
      {"all_reduce sum", [&](auto& b, Value v) { return b.AllReduce(v, xy); }},
      {"all_reduce max",
       [&](auto& b, Value v) { return b.AllReduce(v, x, ir::ReduceKind::kMax); }},
      {"all_gather", [&](auto& b, Value v) { return b.AllGather(v, xy, 1, 4); }},
      {"reduce_scatter sum", [&](auto& b, Value v) { return b.ReduceScatter(v, x, 0, 2); }},
      {"reduce_scatter max",
       [&](auto& b, Value v) { return b.ReduceScatter(v, xy, 0, 4, ir::ReduceKind::kMax); }},
      {"all_to_all", [&](auto& b, Value v) { return b.AllToAll(v, xy, 0, 1, 4); }},
      {"collective_permute",
       [&](auto& b, Value v) { return b.CollectivePermute(v, xy, {{0, 2}, {2, 1}, {1, 0}}); }},
  };
  for (const auto& [name, body] : cases) {
    SCOPED_TRACE(name);
    CheckCollectiveGrad(this, body, run);
  }
}

// Collectives done by a GPU so far (0 without the vulkan kind).
int64_t CollectivesOnGpu() {
#if CAUSEWAY_HAVE_VULKAN
  return backend::vulkan::CollectivesOnGpu();
#else
  return 0;
#endif
}

// i32 operands through every collective (the IR has collectives of f32 and
// i32 only), and a group of three devices across
// two hosts, against references computed here.
TEST_P(CollectivesTest, IntegersAndAGroupOfThree) {
  ASSERT_OK_AND_ASSIGN(Mesh three, client_->AllocateMesh({{"z", 3}}));
  struct Case {
    std::string name;
    const Mesh* mesh;
    std::vector<std::string> axes;
    DType dtype;  // of the collective's operand
    std::function<Value(FunctionBuilder&, Value)> body;
    // Device p's result from every device's input, in mesh order.
    std::function<std::vector<int32_t>(const std::vector<std::vector<int32_t>>&, int p)> ref;
  };
  constexpr int64_t kR = 6, kC = 4;  // per-device operand [6, 4]
  const auto at = [](const std::vector<int32_t>& v, int64_t r, int64_t c, int64_t cols) {
    return v[static_cast<size_t>(r * cols + c)];
  };
  const auto reduce = [](const std::vector<std::vector<int32_t>>& in, bool sum) {
    std::vector<int32_t> acc(in[0].size());
    for (size_t i = 0; i < acc.size(); ++i) {
      int32_t a = in[0][i];
      for (size_t q = 1; q < in.size(); ++q) {
        const int32_t v = in[q][i];
        a = sum ? static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(v))
                : std::max(a, v);
      }
      acc[i] = a;
    }
    return acc;
  };
  const std::vector<std::string> xy = {"x", "y"}, z = {"z"};
  const std::vector<Case> cases = {
      {"i32 all_reduce sum (wrapping)", &mesh_, xy, DType::kI32,
       [&](auto& b, Value v) { return b.AllReduce(v, xy); },
       [&](const auto& in, int) { return reduce(in, true); }},
      {"i32 all_reduce max", &mesh_, xy, DType::kI32,
       [&](auto& b, Value v) { return b.AllReduce(v, xy, ir::ReduceKind::kMax); },
       [&](const auto& in, int) { return reduce(in, false); }},
      {"i32 reduce_scatter along columns", &mesh_, xy, DType::kI32,
       [&](auto& b, Value v) { return b.ReduceScatter(v, xy, 1, 4); },
       [&](const auto& in, int p) {
         const auto acc = reduce(in, true);
         std::vector<int32_t> out;
         for (int64_t r = 0; r < kR; ++r) out.push_back(at(acc, r, p, kC));
         return out;
       }},
      {"i32 all_gather along columns", &mesh_, xy, DType::kI32,
       [&](auto& b, Value v) { return b.AllGather(v, xy, 1, 4); },
       [&](const auto& in, int) {
         std::vector<int32_t> out;
         for (int64_t r = 0; r < kR; ++r) {
           for (const auto& v : in) {
             for (int64_t c = 0; c < kC; ++c) out.push_back(at(v, r, c, kC));
           }
         }
         return out;
       }},
      {"i32 collective_permute, two members sent nothing", &mesh_, xy, DType::kI32,
       [&](auto& b, Value v) { return b.CollectivePermute(v, xy, {{3, 0}, {0, 2}}); },
       [&](const auto& in, int p) {
         std::vector<int32_t> out(in[0].size(), 0);
         const int from = p == 0 ? 3 : p == 2 ? 0 : -1;
         if (from >= 0) {
           out = in[static_cast<size_t>(from)];
         }
         return out;
       }},
      {"f32 all_reduce of three", &three, z, DType::kF32,
       [&](auto& b, Value v) { return b.AllReduce(v, z); },
       [&](const auto& in, int) {
         // Added in rank order in f32, then converted back (saturating).
         std::vector<int32_t> out;
         for (size_t i = 0; i < in[0].size(); ++i) {
           float acc = static_cast<float>(in[0][i]);
           for (size_t q = 1; q < in.size(); ++q) acc += static_cast<float>(in[q][i]);
           out.push_back(acc >= 2147483648.0f ? INT32_MAX : static_cast<int32_t>(acc));
         }
         return out;
       }},
      {"i32 all_to_all of three", &three, z, DType::kI32,
       [&](auto& b, Value v) { return b.AllToAll(v, z, 0, 1, 3); },
       [&](const auto& in, int p) {
         // Rows [2p, 2p + 2) of every member, side by side.
         std::vector<int32_t> out;
         for (int64_t r = 2 * p; r < 2 * p + 2; ++r) {
           for (const auto& v : in) {
             for (int64_t c = 0; c < kC; ++c) out.push_back(at(v, r, c, kC));
           }
         }
         return out;
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int n = static_cast<int>(c.mesh->devices().size());
    std::vector<std::vector<int32_t>> in(static_cast<size_t>(n));
    std::vector<int32_t> global;
    for (int p = 0; p < n; ++p) {
      for (int64_t i = 0; i < kR * kC; ++i) {
        // Signed, some zero, sums past INT32_MAX.
        const int32_t v = (i % 5 == 0) ? 0
                          : (i % 7 == 0) ? 2000000000 - p
                                         : static_cast<int32_t>((p * 37 + i * 11) % 23) - 11;
        in[static_cast<size_t>(p)].push_back(v);
        global.push_back(v);
      }
    }
    FunctionBuilder b(c.name);
    Value x = b.Parameter(Shape(DType::kI32, {kR, kC}));
    Value operand = c.dtype == DType::kI32 ? x : b.Convert(x, c.dtype);
    Value result = c.body(b, operand);
    if (c.dtype != DType::kI32) result = b.Convert(result, DType::kI32);
    ASSERT_OK_AND_ASSIGN(ir::Function f, b.Build({result}));
    const Sharding split = c.mesh == &three
                               ? Sharding(std::vector<std::vector<std::string>>{{"z"}, {}})
                               : Sharding(std::vector<std::vector<std::string>>{{"x", "y"}, {}});
    ASSERT_OK_AND_ASSIGN(CompiledFunction cf, client_->Compile(f, *c.mesh, {{split}, {split}}));
    ASSERT_OK_AND_ASSIGN(Array a, client_->Put(Literal::I32({n * kR, kC}, global), *c.mesh,
                                               split));
    ASSERT_OK_AND_ASSIGN(std::vector<Array> out, client_->Call(cf, {a}));
    ASSERT_OK_AND_ASSIGN(Literal all, AwaitOrHang(out[0].Fetch()));
    const auto values = all.values<int32_t>();
    const size_t per = values.size() / static_cast<size_t>(n);
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(std::vector<int32_t>(values.begin() + p * per, values.begin() + (p + 1) * per),
                c.ref(in, p))
          << "device at mesh position " << p;
    }
  }
}

// On vulkan devices of one GPU, with CAUSEWAY_VULKAN_COLLECTIVES=gpu (as
// ctest runs this test), every group's collective is done by the GPU (one
// per group, counted by the member that records it); with =host, by the hub.
TEST_P(CollectivesTest, OnOneGpuTheGpuDoesEveryGroupsCollective) {
  if (GetParam() != "vulkan") GTEST_SKIP() << "the cpu kind's collectives are the hub's";
  const char* mode = std::getenv("CAUSEWAY_VULKAN_COLLECTIVES");
  if (mode == nullptr || (std::string(mode) != "gpu" && std::string(mode) != "host")) {
    GTEST_SKIP() << "CAUSEWAY_VULKAN_COLLECTIVES is auto: the GPU's type decides";
  }
  const bool on_host = std::string(mode) == "host";
  const int64_t before = CollectivesOnGpu();
  // Over "y": two groups, one per host; then over both axes: one group.
  Check({"y"}, [](FunctionBuilder& b, Value x) { return b.AllReduce(x, {"y"}); },
        [](const auto& in, const std::vector<int>& group, int) {
          std::vector<float> acc = in[group[0]];
          for (size_t i = 0; i < acc.size(); ++i) acc[i] += in[group[1]][i];
          return acc;
        });
  Check({"x", "y"}, [](FunctionBuilder& b, Value x) { return b.AllGather(x, {"x", "y"}, 0, 4); },
        [](const auto& in, const std::vector<int>& group, int) {
          std::vector<float> out;
          for (int q : group) out.insert(out.end(), in[q].begin(), in[q].end());
          return out;
        });
  EXPECT_EQ(CollectivesOnGpu() - before, on_host ? 0 : 3);
}

INSTANTIATE_TEST_SUITE_P(Kinds, CollectivesTest, ::testing::Values("cpu", "vulkan"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The threads this process runs now.
int ProcessThreads() {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    n += task.exists() ? 1 : 0;
  }
  return n;
}

// With device_threads, the devices are fibers of one pool, not threads of
// their own: 8 devices on a pool of one thread cost the process one thread,
// where a thread each costs 8 (every other thread of the cluster is the
// same in both).
TEST(DeviceThreadsTest, DevicesOfAPoolAreFibersNotThreads) {
  LocalClusterOptions options;
  options.islands = 2;
  options.hosts_per_island = 2;
  options.devices_per_host = 2;
  const int before = ProcessThreads();
  int own_threads = 0;
  {
    auto cluster = MakeCluster(options);
    own_threads = ProcessThreads() - before;
  }
  options.device_threads = 1;
  int pooled = 0;
  {
    auto cluster = MakeCluster(options);
    pooled = ProcessThreads() - before;
  }
  EXPECT_EQ(own_threads - pooled, 8 - 1);
}

}  // namespace
}  // namespace causeway::testing
