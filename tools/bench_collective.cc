// `causeway bench collective`: the latency and bus bandwidth of one
// collective (all-reduce, all-gather, reduce-scatter, all-to-all) over a
// mesh of every device, per message size, on the embedded cluster, on
// worker processes it starts (--processes), or on a running cluster
// (--cluster). Beside each size, two floors measured in the same run: a
// plain memcpy of the same bytes and a plain TCP stream over loopback.
//
// Sizes follow nccl-tests: `bytes` is the larger of a device's input and
// output; algorithm bandwidth = bytes / time; bus bandwidth scales it by the
// share of the data each device must send or receive — all-reduce
// 2(n-1)/n, the others (n-1)/n — so that it is comparable with a link's
// bandwidth whatever n is.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/process_cluster.h"
#include "causeway/cluster/worker_server.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/ir/builder.h"
#include "nlohmann/json.hpp"
#include "tools/bench_harness.h"
#include "tools/commands.h"
#include "tools/host_memory.h"

namespace causeway::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct CollectiveOptions {
  std::string op = "all-reduce";
  std::string bytes = "4K,64K,1M,16M";
  int devices = 8;
  int hosts = 1;
  int processes = 0;
  int devices_per_process = 1;
  std::string collectives;  // the workers' --collectives; empty: their default
  int64_t gloo_from_bytes = -1;  // the workers' --gloo-from-bytes; -1: their default
  std::string cluster = "local";
  std::string device_kind = "cpu";  // embedded cluster
  double min_seconds = 0.5;
  double timeout_s = 30;
  bool json = false;
};

absl::StatusOr<std::vector<int64_t>> ParseSizes(const std::string& text) {
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(text, ',')) {
    std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(s));
    int64_t scale = 1;
    if (!t.empty() && (t.back() == 'K' || t.back() == 'M' || t.back() == 'G')) {
      scale = t.back() == 'K' ? (1 << 10) : t.back() == 'M' ? (1 << 20) : (int64_t{1} << 30);
      t.pop_back();
    }
    int64_t v = 0;
    if (!absl::SimpleAtoi(t, &v) || v <= 0 || v > (int64_t{4} << 30) / scale) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad size '", s, "' (a number of bytes with K, M or G; at most 4G)"));
    }
    sizes.push_back(v * scale);
  }
  return sizes;
}

struct OpShape {
  // Floats of a device's input and output.
  int64_t in = 0;
  int64_t out = 0;
  // Bus bandwidth / algorithm bandwidth.
  double bus_factor = 1;
};

// The per-device function of `op` over `n` devices for a size of `bytes`
// (rounded to whole floats divisible by n).
absl::StatusOr<std::pair<ir::Function, OpShape>> Build(const std::string& op, int n,
                                                       int64_t bytes) {
  const int64_t floats = std::max<int64_t>(n, bytes / 4 / n * n);
  ir::FunctionBuilder b(op);
  OpShape s;
  s.bus_factor = static_cast<double>(n - 1) / n;
  std::vector<ir::Value> outs;
  if (op == "all-reduce") {
    s.in = s.out = floats;
    s.bus_factor = 2.0 * (n - 1) / n;
    outs = {b.AllReduce(b.Parameter(ir::Shape(ir::DType::kF32, {floats})), {"x"})};
  } else if (op == "all-gather") {
    s.in = floats / n;
    s.out = floats;
    outs = {b.AllGather(b.Parameter(ir::Shape(ir::DType::kF32, {s.in})), {"x"}, 0, n)};
  } else if (op == "reduce-scatter") {
    s.in = floats;
    s.out = floats / n;
    outs = {b.ReduceScatter(b.Parameter(ir::Shape(ir::DType::kF32, {floats})), {"x"}, 0, n)};
  } else if (op == "all-to-all") {
    s.in = s.out = floats;
    outs = {b.AllToAll(b.Parameter(ir::Shape(ir::DType::kF32, {floats})), {"x"}, 0, 0, n)};
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --op ", op, " (all-reduce, all-gather, reduce-scatter, all-to-all)"));
  }
  CW_ASSIGN_OR_RETURN(ir::Function f, b.Build(outs));
  return std::make_pair(std::move(f), s);
}

int RunBenchCollective(const CollectiveOptions& o) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "bench collective: %s\n", s.ToString().c_str());
    return kExitRuntime;
  };
  absl::StatusOr<std::vector<int64_t>> sizes = ParseSizes(o.bytes);
  if (!sizes.ok()) {
    std::fprintf(stderr, "bench collective: %s\n", sizes.status().message().data());
    return kExitUsage;
  }
  if (o.processes > 0 && o.cluster != "local") {
    std::fprintf(stderr, "bench collective: --processes starts a cluster of its own; it cannot "
                         "be given with --cluster\n");
    return kExitUsage;
  }
  // The cluster: embedded, worker processes of our own, or a running one.
  std::unique_ptr<LocalCluster> local;
  std::unique_ptr<ProcessCluster> processes;
  std::unique_ptr<RemoteCluster> remote;
  ClusterConnection* connection = nullptr;
  std::string where;
  const int64_t largest = *std::max_element(sizes->begin(), sizes->end());
  // Input, output and the collective's own copies, with room to spare.
  const int64_t memory = std::max<int64_t>(int64_t{1} << 30, 4 * largest + (64 << 20));
  // Devices on this machine hold their input, output and scratch of the
  // largest size each; the client builds the whole input once, and the
  // memcpy floor copies between two buffers of it. Refused before any of it
  // is allocated (a remote cluster's devices are on its own hosts).
  const bool devices_here = o.cluster == "local" || o.processes > 0;
  const int64_t devices_on_host =
      devices_here ? (o.processes > 0 ? int64_t{o.processes} * o.devices_per_process : o.devices)
                   : 0;
  if (absl::Status room = CheckHostMemory(
          (3 * devices_on_host + 4) * largest,
          absl::StrCat("bench collective at --bytes ", largest, " over ",
                       devices_here ? absl::StrCat(devices_on_host, " devices on this host")
                                    : "a remote cluster"));
      !room.ok()) {
    return fail(room);
  }
  if (o.cluster == "local" && o.processes == 0) {
    LocalClusterOptions lo;
    lo.islands = 1;
    lo.hosts_per_island = o.hosts;
    if (o.devices % o.hosts != 0) {
      std::fprintf(stderr, "bench collective: --devices %d is not a multiple of --hosts %d\n",
                   o.devices, o.hosts);
      return kExitUsage;
    }
    lo.devices_per_host = o.devices / o.hosts;
    lo.device_memory_bytes = memory;
    lo.device_kind = o.device_kind;
    auto c = LocalCluster::Create(lo);
    if (!c.ok()) return fail(c.status());
    local = std::move(*c);
    connection = local.get();
    where = absl::StrCat("embedded, ", o.hosts, " host(s) of ", o.device_kind, " devices");
  } else {
    RemoteClusterOptions ro;
    ro.timeout = absl::Seconds(o.timeout_s);
    if (o.processes > 0) {
      ProcessClusterOptions po;
      char self[4096] = {};
      const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
      if (n <= 0) return fail(absl::InternalError("cannot find this program's path"));
      po.binary = std::string(self, static_cast<size_t>(n));
      po.islands = 1;
      po.hosts_per_island = o.processes;
      po.devices_per_host = o.devices_per_process;
      po.memory_bytes = memory;
      po.collectives = o.collectives;
      po.gloo_from_bytes = o.gloo_from_bytes;
      auto c = ProcessCluster::Start(po);
      if (!c.ok()) return fail(c.status());
      processes = std::move(*c);
      ro.address = processes->url();
      ro.token = processes->token();
      where = absl::StrCat(o.processes, " worker processes, collectives on ",
                           o.collectives.empty() ? (HaveGloo() ? "gloo" : "grpc")
                                                 : o.collectives);
    } else {
      ro.address = o.cluster;
      where = o.cluster;
    }
    auto r = RemoteCluster::Connect(ro);
    if (!r.ok()) return fail(r.status());
    remote = std::move(*r);
    connection = remote.get();
  }
  auto client_or = Client::Connect(connection);
  if (!client_or.ok()) return fail(client_or.status());
  std::unique_ptr<Client> client = std::move(*client_or);
  const Topology topology = connection->resources()->GetTopology();
  if (topology.islands().empty()) return fail(absl::UnavailableError("the cluster has no devices"));
  const std::vector<DeviceId> devices = topology.island(topology.islands()[0])->devices;
  const int n = static_cast<int>(devices.size());
  if (n < 2) return fail(absl::FailedPreconditionError("a collective needs at least 2 devices"));
  auto mesh_or = client->AllocateMesh({{"x", n}});
  if (!mesh_or.ok()) return fail(mesh_or.status());
  const Mesh mesh = *mesh_or;
  std::set<HostId> hosts;
  for (DeviceId d : mesh.devices()) hosts.insert(topology.device(d)->host);

  if (!o.json) {
    std::printf("%s over %d devices on %zu hosts (%s)\n", o.op.c_str(), n, hosts.size(),
                where.c_str());
    std::printf("%10s %12s %12s %12s %12s %12s %8s\n", "bytes", "latency_us", "algbw_GB/s",
                "busbw_GB/s", "memcpy_GB/s", "tcp_GB/s", "bus/tcp");
  }
  for (int64_t bytes : *sizes) {
    auto built = Build(o.op, n, bytes);
    if (!built.ok()) {
      std::fprintf(stderr, "bench collective: %s\n", built.status().message().data());
      return kExitUsage;
    }
    const auto& [function, shape] = *built;
    const Sharding over_x({{"x"}});
    auto f = client->Compile(function, mesh, {{over_x}, {over_x}});
    if (!f.ok()) return fail(f.status());
    std::vector<float> values(static_cast<size_t>(shape.in * n));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 13);
    auto in = client->Put(ir::Literal::F32({shape.in * n}, values), mesh, over_x);
    if (!in.ok()) return fail(in.status());
    values.clear();
    values.shrink_to_fit();
    // One collective at a time: its latency, from the call to every
    // device's result.
    auto once = [&]() -> absl::Status {
      CW_ASSIGN_OR_RETURN(std::vector<Array> out, client->Call(*f, {*in}));
      return out[0].Ready().Await().status();
    };
    for (int w = 0; w < 3; ++w) {
      if (absl::Status s = once(); !s.ok()) return fail(s);
    }
    int reps = 1;
    double seconds = 0;
    while (true) {
      const auto start = SteadyClock::now();
      for (int r = 0; r < reps; ++r) {
        if (absl::Status s = once(); !s.ok()) return fail(s);
      }
      seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
      if (seconds >= o.min_seconds / 3 || reps >= (1 << 16)) break;
      reps *= 2;
    }
    // The median of three timed rounds of `reps`.
    std::vector<double> rounds;
    for (int round = 0; round < 3; ++round) {
      const auto start = SteadyClock::now();
      for (int r = 0; r < reps; ++r) {
        if (absl::Status s = once(); !s.ok()) return fail(s);
      }
      rounds.push_back(std::chrono::duration<double>(SteadyClock::now() - start).count() / reps);
    }
    std::sort(rounds.begin(), rounds.end());
    const double t = rounds[1];
    const double size = 4.0 * static_cast<double>(std::max(shape.in, shape.out));
    const double algbw = size / t;
    const double busbw = algbw * shape.bus_factor;
    const double memcpy_bps = MemcpyFloor(static_cast<int64_t>(size));
    absl::StatusOr<double> tcp_bps = TcpFloor(static_cast<int64_t>(size));
    if (!tcp_bps.ok()) return fail(tcp_bps.status());
    if (o.json) {
      nlohmann::json j = {{"op", o.op},
                          {"devices", n},
                          {"hosts", hosts.size()},
                          {"cluster", where},
                          {"bytes", static_cast<int64_t>(size)},
                          {"repeats", reps},
                          {"latency_us", t * 1e6},
                          {"algbw_gbps", algbw / 1e9},
                          {"busbw_gbps", busbw / 1e9},
                          {"memcpy_gbps", memcpy_bps / 1e9},
                          {"tcp_gbps", *tcp_bps / 1e9},
                          {"busbw_over_tcp", busbw / *tcp_bps}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%10.0f %12.1f %12.3f %12.3f %12.3f %12.3f %8.3f\n", size, t * 1e6,
                  algbw / 1e9, busbw / 1e9, memcpy_bps / 1e9, *tcp_bps / 1e9, busbw / *tcp_bps);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

// Bytes per second of memcpy of `bytes` (best of several rounds).
double MemcpyFloor(int64_t bytes) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes));
  double best = 1e30;
  const int reps = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 1, 4096));
  for (int round = 0; round < 5; ++round) {
    const auto start = SteadyClock::now();
    for (int r = 0; r < reps; ++r) {
      std::memcpy(b.data(), a.data(), a.size());
      a[static_cast<size_t>(r) % a.size()] = b[0];  // the copies must not be elided
    }
    best = std::min(best, std::chrono::duration<double>(SteadyClock::now() - start).count() / reps);
  }
  return static_cast<double>(bytes) / best;
}

// Bytes per second of one TCP stream over loopback between two threads of
// this process, sending `bytes` per message (at least 64 MiB in all).
absl::StatusOr<double> TcpFloor(int64_t bytes) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    if (listener >= 0) close(listener);
    return absl::InternalError(absl::StrCat("TCP floor: ", std::strerror(errno)));
  }
  const int64_t total = std::max<int64_t>(bytes, int64_t{64} << 20) / bytes * bytes;
  std::thread receiver([listener, total] {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    std::vector<char> buffer(1 << 20);
    int64_t got = 0;
    ssize_t n;
    while (got < total && (n = recv(fd, buffer.data(), buffer.size(), 0)) > 0) got += n;
    const char ack = 1;
    [[maybe_unused]] ssize_t w = send(fd, &ack, 1, MSG_NOSIGNAL);
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  double seconds = 0;
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  if (ok) {
    std::vector<char> message(static_cast<size_t>(bytes), 7);
    const auto start = SteadyClock::now();
    for (int64_t sent = 0; ok && sent < total; sent += bytes) {
      for (int64_t off = 0; ok && off < bytes;) {
        const ssize_t n = send(fd, message.data() + off, static_cast<size_t>(bytes - off),
                               MSG_NOSIGNAL);
        ok = n > 0;
        off += std::max<ssize_t>(n, 0);
      }
    }
    char ack;
    ok = ok && recv(fd, &ack, 1, 0) == 1;
    seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  }
  close(fd);
  receiver.join();
  close(listener);
  if (!ok) return absl::InternalError("TCP floor: the loopback stream failed");
  return static_cast<double>(total) / seconds;
}

void AddBenchCollectiveCommand(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<CollectiveOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "collective",
      "Latency and bus bandwidth of one collective over every device, per size, against "
      "memcpy and a loopback TCP stream");
  cmd->add_option("--op", o->op, "all-reduce, all-gather, reduce-scatter or all-to-all")
      ->check(CLI::IsMember({"all-reduce", "all-gather", "reduce-scatter", "all-to-all"}))
      ->capture_default_str();
  cmd->add_option("--bytes", o->bytes,
                  "Sizes, comma-separated, with K, M or G: the larger of a device's input and "
                  "output")
      ->capture_default_str();
  cmd->add_option("--devices", o->devices, "Embedded cluster: devices in the mesh")
      ->check(CLI::Range(2, 256))
      ->capture_default_str();
  cmd->add_option("--hosts", o->hosts, "Embedded cluster: hosts the devices are spread over")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--device-kind", o->device_kind,
                  DeviceKindHelp("Embedded cluster: the kind of its devices"))
      ->capture_default_str();
  cmd->add_option("--processes", o->processes,
                  "Start this many worker processes (one island) and run across them; 0: the "
                  "embedded cluster")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--devices-per-process", o->devices_per_process,
                  "With --processes: devices of each worker")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--collectives", o->collectives,
                  "With --processes: the workers' --collectives (gloo or grpc; default: gloo "
                  "when built with it)")
      ->check(CLI::IsMember({"gloo", "grpc"}));
  cmd->add_option("--gloo-from-bytes", o->gloo_from_bytes,
                  "With --processes: the workers' --gloo-from-bytes (default: theirs)");
  cmd->add_option("--cluster", o->cluster,
                  "local, or grpc://HOST:PORT of a running cluster (its first island's devices; "
                  "token from $CAUSEWAY_TOKEN)")
      ->check(ClusterAddress(true))
      ->capture_default_str();
  cmd->add_option("--min-seconds", o->min_seconds, "Time spent per size, roughly")
      ->check(CLI::Range(0.01, 600.0) & Finite())
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s, "Seconds to wait for a cluster")
      ->check(CLI::Range(0.1, 3600.0) & Finite())
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "One JSON object per size");
  cmd->callback([o, exit_code, cmd] {
    if ((o->cluster != "local" || o->processes > 0) && cmd->count("--device-kind") > 0) {
      std::fprintf(stderr, "bench collective: --device-kind applies to the embedded cluster "
                           "only (worker processes choose theirs: causeway worker "
                           "--device-kind)\n");
      *exit_code = kExitUsage;
      return;
    }
    if (o->cluster != "local" &&
        (cmd->count("--devices") > 0 || cmd->count("--hosts") > 0)) {
      std::fprintf(stderr, "bench collective: --devices and --hosts describe the embedded "
                           "cluster; with --cluster the mesh is the first island\n");
      *exit_code = kExitUsage;
      return;
    }
    *exit_code = RunBenchCollective(*o);
  });
}

}  // namespace causeway::tools
