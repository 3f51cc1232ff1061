#include "causeway/cluster/process_cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"
#include "causeway/cluster/remote_cluster.h"

extern char** environ;

namespace causeway {
namespace {

std::string RandomToken() {
  unsigned char bytes[16] = {};
  std::ifstream in("/dev/urandom", std::ios::binary);
  in.read(reinterpret_cast<char*>(bytes), sizeof(bytes));
  std::string out;
  for (unsigned char b : bytes) absl::StrAppend(&out, absl::Hex(b, absl::kZeroPad2));
  return out;
}

// Waits for `pid` to exit for up to `timeout`; true if it was reaped.
bool ReapWithin(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    if (absl::Now() >= deadline) return false;
    // Reaping a process: there is no file descriptor to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return "stopped";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessCluster>> ProcessCluster::Start(
    const ProcessClusterOptions& options) {
  if (options.binary.empty() || access(options.binary.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", options.binary, "' is not an executable causeway binary"));
  }
  if (options.islands < 1 || options.hosts_per_island < 1 || options.devices_per_host < 1) {
    return absl::InvalidArgumentError("a cluster needs at least one island, host and device");
  }
  std::unique_ptr<ProcessCluster> cluster(new ProcessCluster(options));
  cluster->token_ = options.token.empty() ? RandomToken() : options.token;
  cluster->worker_token_ = options.worker_token.empty() ? RandomToken() : options.worker_token;
  char dir[] = "/tmp/causeway-cluster-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError("cannot make a log directory");
  cluster->log_dir_ = dir;

  // A cluster that fails to start keeps its logs, which say why.
  absl::Status launched = [&]() -> absl::Status {
    // The coordinator reports its bound address on a pipe once serving.
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
    Child& c = cluster->coordinator_;
    c.argv = {options.binary, "coordinator", "--listen", absl::StrCat("127.0.0.1:", options.port),
              "--heartbeat-timeout-ms",
              absl::StrCat(absl::ToInt64Milliseconds(options.heartbeat_timeout)), "--ready-fd", "3"};
    if (!options.tls_cert.empty()) {
      c.argv.insert(c.argv.end(), {"--tls-cert", options.tls_cert, "--tls-key", options.tls_key});
    }
    if (options.metrics_port >= 0) {
      c.argv.insert(c.argv.end(), {"--metrics", absl::StrCat("127.0.0.1:", options.metrics_port)});
    }
    if (options.report_fanout > 0) {
      c.argv.insert(c.argv.end(), {"--report-fanout", absl::StrCat(options.report_fanout)});
    }
    c.log_path = cluster->log_dir_ + "/coordinator.log";
    absl::Status spawned = cluster->Spawn(c, ready[1]);
    close(ready[1]);
    if (!spawned.ok()) {
      close(ready[0]);
      return spawned;
    }
    // "ADDRESS[ METRICS_ADDRESS]".
    CW_ASSIGN_OR_RETURN(const std::string ready_line, cluster->ReadReadyLine(ready[0], c));
    const size_t space = ready_line.find(' ');
    const std::string address = ready_line.substr(0, space);
    if (space != std::string::npos) cluster->metrics_address_ = ready_line.substr(space + 1);
    cluster->url_ = absl::StrCat("grpc://", address);

    for (int i = 0; i < options.islands; ++i) {
      for (int h = 0; h < options.hosts_per_island; ++h) {
        Child w;
        w.argv = {options.binary, "worker", "--coordinator", address, "--island",
                  absl::StrCat(i), "--devices", absl::StrCat(options.devices_per_host),
                  "--memory", absl::StrCat(options.memory_bytes), "--device-kind",
                  options.device_kind, "--listen", "127.0.0.1:0",
                  "--memory-stall-timeout-ms",
                  absl::StrCat(absl::ToInt64Milliseconds(options.memory_stall_timeout)),
                  "--input-timeout-ms",
                  absl::StrCat(absl::ToInt64Milliseconds(options.input_timeout))};
        if (!options.collectives.empty()) {
          w.argv.insert(w.argv.end(), {"--collectives", options.collectives});
        }
        if (options.gloo_from_bytes >= 0) {
          w.argv.insert(w.argv.end(),
                        {"--gloo-from-bytes", absl::StrCat(options.gloo_from_bytes)});
        }
        if (!options.checkpoint_root.empty()) {
          w.argv.insert(w.argv.end(), {"--checkpoint-root", options.checkpoint_root});
        }
        if (!options.tls_ca.empty()) {
          w.argv.insert(w.argv.end(), {"--tls-ca", options.tls_ca, "--tls-cert", options.tls_cert,
                                       "--tls-key", options.tls_key});
        }
        w.log_path = absl::StrCat(cluster->log_dir_, "/worker", cluster->workers_.size(), ".log");
        cluster->workers_.push_back(std::move(w));
      }
    }
    for (Child& w : cluster->workers_) CW_RETURN_IF_ERROR(cluster->SpawnWorker(w));
    // Up once every worker has joined.
    RemoteClusterOptions ro;
    ro.address = cluster->url_;
    ro.token = cluster->token_;
    ro.tls.ca = options.tls_ca;
    ro.timeout = options.start_timeout;
    CW_ASSIGN_OR_RETURN(auto probe, RemoteCluster::Connect(ro));
    absl::Status up = probe->WaitForDevices(cluster->num_devices(), options.start_timeout);
    if (!up.ok()) {
      std::string logs;
      for (const Child& w : cluster->workers_) absl::StrAppend(&logs, "\n", cluster->Tail(w));
      return Annotate(up, absl::StrCat("starting the cluster", logs));
    }
    return absl::OkStatus();
  }();
  if (!launched.ok()) {
    const std::string logs = cluster->log_dir_;
    cluster->Stop(/*keep_logs=*/true);
    return absl::Status(launched.code(),
                        absl::StrCat(launched.message(), "\n(the cluster's logs are kept in ",
                                     logs, ")"));
  }
  return cluster;
}

ProcessCluster::~ProcessCluster() { Stop(); }

absl::StatusOr<std::string> ProcessCluster::ReadReadyLine(int fd, const Child& child) {
  std::string line;
  pollfd pfd{fd, POLLIN, 0};
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  while (line.find('\n') == std::string::npos) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0 || poll(&pfd, 1, static_cast<int>(left)) <= 0) break;
    char buf[256];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (line.find('\n') == std::string::npos) {
    // The pipe ends at once when the process exits: it did not start at all.
    const bool timed_out = absl::Now() >= deadline;
    const std::string what = child.argv.size() > 1 ? child.argv[1] : "process";
    return absl::UnavailableError(
        timed_out ? absl::StrCat("the ", what, " did not start within ",
                                 absl::FormatDuration(options_.start_timeout), ": ", Tail(child))
                  : absl::StrCat("the ", what, " exited before it was serving: ", Tail(child)));
  }
  line.resize(line.find('\n'));
  return line;
}

absl::Status ProcessCluster::SpawnWorker(Child& worker) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  std::vector<std::string> argv = worker.argv;
  worker.argv.insert(worker.argv.end(), {"--ready-fd", "3"});
  absl::Status spawned = Spawn(worker, ready[1]);
  worker.argv = std::move(argv);
  close(ready[1]);
  if (!spawned.ok()) {
    close(ready[0]);
    return spawned;
  }
  CW_ASSIGN_OR_RETURN(const std::string line, ReadReadyLine(ready[0], worker));
  int64_t host = -1;
  if (!absl::SimpleAtoi(line, &host)) {
    return absl::InternalError(absl::StrCat("worker reported '", line, "' as its host id"));
  }
  worker.host = HostId(host);
  return absl::OkStatus();
}

std::vector<pid_t> ProcessCluster::pids() const {
  std::vector<pid_t> out;
  if (coordinator_.pid > 0) out.push_back(coordinator_.pid);
  for (const Child& w : workers_) {
    if (w.pid > 0) out.push_back(w.pid);
  }
  return out;
}

int64_t ProcessCluster::num_devices() const {
  return int64_t{options_.islands} * options_.hosts_per_island * options_.devices_per_host;
}

absl::Status ProcessCluster::Spawn(Child& child, int ready_fd) {
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> argv;
  for (std::string& a : child.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "CAUSEWAY_TOKEN=", 15) != 0 &&
        std::strncmp(*e, "CAUSEWAY_WORKER_TOKEN=", 22) != 0) {
      env_storage.emplace_back(*e);
    }
  }
  // The coordinator gets both tokens; a worker only the workers' one.
  const bool coordinator = child.argv.size() > 1 && child.argv[1] == "coordinator";
  if (coordinator) env_storage.push_back("CAUSEWAY_TOKEN=" + token_);
  env_storage.push_back("CAUSEWAY_WORKER_TOKEN=" + worker_token_);
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int log = open(child.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", child.log_path));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    if (ready_fd >= 0) dup2(ready_fd, 3);  // dup2 clears close-on-exec
    if (options_.max_open_files > 0) {
      const rlimit files{static_cast<rlim_t>(options_.max_open_files),
                         static_cast<rlim_t>(options_.max_open_files)};
      if (setrlimit(RLIMIT_NOFILE, &files) != 0) _exit(126);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log);
  child.pid = pid;
  return absl::OkStatus();
}

std::string ProcessCluster::Tail(const Child& child) const {
  std::ifstream in(child.log_path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > 2000) s = s.substr(s.size() - 2000);
  return absl::StrCat(child.argv.size() > 1 ? child.argv[1] : "child", " log (", child.log_path,
                      "):\n", s);
}

void ProcessCluster::KillWorker(int index) {
  Child& w = workers_[index];
  if (w.pid <= 0) return;
  kill(w.pid, SIGKILL);
  ReapWithin(w.pid, absl::Seconds(10));
  w.pid = -1;
}

absl::Status ProcessCluster::RestartWorker(int index) {
  Child& w = workers_[index];
  if (w.pid > 0) return absl::FailedPreconditionError("worker is running");
  return SpawnWorker(w);
}

std::string ProcessCluster::ReapExited() {
  std::vector<std::string> out;
  auto check = [&](Child& c, const std::string& name) {
    if (c.pid <= 0) return;
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      out.push_back(absl::StrCat(name, " (pid ", c.pid, ") ", DescribeExit(status)));
      c.pid = -1;
    }
  };
  check(coordinator_, "coordinator");
  for (size_t i = 0; i < workers_.size(); ++i) check(workers_[i], absl::StrCat("worker ", i));
  return absl::StrJoin(out, "; ");
}

void ProcessCluster::Stop(bool keep_logs) {
  std::vector<Child*> children;
  for (Child& w : workers_) children.push_back(&w);
  children.push_back(&coordinator_);
  for (Child* c : children) {
    if (c->pid > 0) kill(c->pid, SIGTERM);
  }
  for (Child* c : children) {
    if (c->pid <= 0) continue;
    if (!ReapWithin(c->pid, absl::Seconds(5))) {
      kill(c->pid, SIGKILL);
      ReapWithin(c->pid, absl::Seconds(5));
    }
    c->pid = -1;
  }
  if (!log_dir_.empty()) {
    absl::StatusOr<std::string> keep = SettingValue("CAUSEWAY_KEEP_CLUSTER_LOGS", "0");
    if (keep_logs || !keep.ok() || *keep == "1") {
      std::fprintf(stderr, "cluster logs kept in %s\n", log_dir_.c_str());
    } else {
      std::error_code ec;
      std::filesystem::remove_all(log_dir_, ec);
    }
    log_dir_.clear();
  }
}

}  // namespace causeway
