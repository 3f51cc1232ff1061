#include "causeway/cluster/gloo_collectives.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"

namespace causeway {
namespace {

std::chrono::steady_clock::time_point SteadyDeadline(absl::Time deadline) {
  return std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(
                                                std::max(deadline - absl::Now(), absl::ZeroDuration()));
}

std::chrono::milliseconds Remaining(absl::Time deadline) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

std::string HostList(absl::Span<const HostId> hosts) {
  return absl::StrJoin(hosts, ",", [](std::string* out, HostId h) { out->append(h.ToString()); });
}

// Gloo's tags tell apart operations in flight at once on one group's
// connections; collectives of different gangs may overlap. The same on
// every process (absl::Hash is seeded per process): FNV-1a of the key.
uint32_t TagOf(const CollectiveKey& key) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : {key.run.value(), int64_t{key.node}, int64_t{key.index},
                    int64_t{key.group_leader}}) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return static_cast<uint32_t>(h ^ (h >> 32));
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn ReduceOf(ir::ReduceKind kind) {
  if (kind == ir::ReduceKind::kSum) return static_cast<ReduceFn>(&gloo::sum<T>);
  return static_cast<ReduceFn>(&gloo::max<T>);
}

constexpr absl::string_view kKeyPrefix = "causeway/";

// The rendezvous waited until the call's deadline.
struct RendezvousTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Gloo writes to its peers' sockets with writev, which raises SIGPIPE when a
// peer has died: that must fail the collective (EPIPE, naming the peer), not
// kill this process. Left alone if the program installed a handler.
void IgnoreSigpipe() {
  static const bool done = [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
    return true;
  }();
  (void)done;
}

}  // namespace

// The rendezvous of one group's connect: Gloo's processes publish their
// addresses (set) and read each other's (wait, get). A value set here goes
// to every other process of the group on the data plane; values from them
// arrive through DeliverRendezvous. Keys are prefixed with the group and its
// generation, so a later connect of the group never reads an earlier one's.
class GlooCollectives::Store final : public gloo::rendezvous::Store {
 public:
  Store(GlooCollectives* owner, std::string prefix, std::vector<HostId> others,
        absl::Time deadline)
      : owner_(owner), prefix_(std::move(prefix)), others_(std::move(others)),
        deadline_(deadline) {}

  // Forgets what this rendezvous received.
  ~Store() override {
    MutexLock lock(&owner_->mu_);
    for (auto it = owner_->entries_.begin(); it != owner_->entries_.end();) {
      auto next = std::next(it);
      if (absl::StartsWith(it->first, prefix_)) {
        owner_->entry_bytes_ -= it->second.size();
        owner_->entries_.erase(it);
      }
      it = next;
    }
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    const std::string value(data.begin(), data.end());
    for (HostId h : others_) owner_->plane_.send(h, prefix_ + key, value);
  }

  std::vector<char> get(const std::string& key) override {
    wait({key});
    MutexLock lock(&owner_->mu_);
    auto it = owner_->entries_.find(prefix_ + key);
    if (it == owner_->entries_.end()) throw std::runtime_error("rendezvous entry vanished");
    return std::vector<char>(it->second.begin(), it->second.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, Remaining(deadline_));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto until = std::min(std::chrono::steady_clock::now() + timeout,
                                SteadyDeadline(deadline_));
    MutexLock lock(&owner_->mu_);
    while (true) {
      bool all = true;
      for (const std::string& k : keys) all = all && owner_->entries_.contains(prefix_ + k);
      if (all) return;
      if (!owner_->changed_.WaitWithDeadline(&owner_->mu_, until) &&
          std::chrono::steady_clock::now() >= until) {
        throw RendezvousTimeout(absl::StrCat("timed out in the rendezvous ", prefix_,
                                             " waiting for ", absl::StrJoin(keys, ", ")));
      }
    }
  }

 private:
  GlooCollectives* const owner_;
  const std::string prefix_;
  const std::vector<HostId> others_;
  const absl::Time deadline_;
};

GlooCollectives::GlooCollectives(Plane plane, int64_t from_bytes)
    : plane_(std::move(plane)), from_bytes_(from_bytes) {}

GlooCollectives::~GlooCollectives() {
  MutexLock lock(&mu_);
  groups_.clear();
  device_.reset();
}

int64_t GlooCollectives::connects() const {
  MutexLock lock(&mu_);
  return connects_;
}

void GlooCollectives::DeliverRendezvous(HostId from, std::string key, std::string value) {
  MutexLock lock(&mu_);
  if (!absl::StartsWith(key, kKeyPrefix) || key.size() > 4096 ||
      value.size() > kMaxEntryBytes || lost_.contains(from)) {
    CW_LOG(kWarning) << "gloo rendezvous: an entry of " << value.size() << " bytes from "
                     << from.ToString() << " refused";
    return;
  }
  if (entries_.size() >= kMaxEntries || entry_bytes_ + value.size() > 64 * kMaxEntryBytes) {
    CW_LOG(kWarning) << "gloo rendezvous: " << entries_.size()
                     << " entries held already; an entry from " << from.ToString()
                     << " dropped";
    return;
  }
  auto [it, inserted] = entries_.try_emplace(std::move(key));
  if (!inserted) entry_bytes_ -= it->second.size();
  entry_bytes_ += value.size();
  it->second = std::move(value);
  changed_.SignalAll();
}

size_t GlooCollectives::entries_held() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

void GlooCollectives::HostLost(HostId host, const absl::Status& status) {
  std::vector<std::shared_ptr<gloo::Context>> dropped;  // released outside the lock
  MutexLock lock(&mu_);
  lost_.try_emplace(host, status);
  changed_.SignalAll();
  for (auto it = groups_.begin(); it != groups_.end();) {
    auto next = std::next(it);
    if (std::find(it->first.begin(), it->first.end(), host) != it->first.end() &&
        !it->second.connecting) {
      dropped.push_back(std::move(it->second.context));
      groups_.erase(it);
    }
    it = next;
  }
}

std::string GlooCollectives::LostLocked(absl::Span<const HostId> hosts) const {
  for (HostId h : hosts) {
    if (auto it = lost_.find(h); it != lost_.end()) {
      return absl::StrCat("host ", h.ToString(), " was lost: ", it->second.message());
    }
  }
  return "";
}

int64_t GlooCollectives::Generation(absl::Span<const HostId> hosts) {
  MutexLock lock(&mu_);
  auto it = groups_.find(std::vector<HostId>(hosts.begin(), hosts.end()));
  return it == groups_.end() ? 0 : it->second.generation;
}

absl::StatusOr<std::shared_ptr<gloo::Context>> GlooCollectives::ContextFor(
    const std::vector<HostId>& hosts, int64_t generation, absl::Time deadline) {
  const HostId self = plane_.self();
  const auto rank_it = std::find(hosts.begin(), hosts.end(), self);
  if (rank_it == hosts.end()) {
    return absl::InternalError(absl::StrCat("host ", self.ToString(), " is not in the group ",
                                            HostList(hosts)));
  }
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::Context> replaced;  // released outside the lock
  {
    MutexLock lock(&mu_);
    while (true) {
      if (std::string lost = LostLocked(hosts); !lost.empty()) {
        return absl::UnavailableError(lost);
      }
      Group& group = groups_[hosts];
      if (!group.connecting) {
        if (group.context != nullptr && group.generation == generation) return group.context;
        if (group.generation > generation) {
          // A later agreement (a concurrent collective of the group, after
          // a failure) has moved on: this one's cannot be met.
          return absl::UnavailableError(absl::StrCat(
              "the group's connections are at generation ", group.generation,
              "; this collective was agreed at ", generation));
        }
        break;
      }
      // Another call of this group is connecting it.
      if (!changed_.WaitWithDeadline(&mu_, SteadyDeadline(deadline)) && absl::Now() >= deadline) {
        return absl::DeadlineExceededError("waiting for the group's connections");
      }
    }
    Group& group = groups_[hosts];
    replaced = std::move(group.context);
    group.connecting = true;
    group.generation = generation;
    if (device_ == nullptr) {
      gloo::transport::tcp::attr attr;
      attr.hostname = plane_.hostname();
      try {
        device_ = gloo::transport::tcp::CreateDevice(attr);
      } catch (const std::exception& e) {
        group.connecting = false;
        changed_.SignalAll();
        return absl::UnavailableError(
            absl::StrCat("cannot listen for Gloo on ", attr.hostname, ": ", e.what()));
      }
    }
    device = device_;
  }
  replaced.reset();
  const int rank = static_cast<int>(rank_it - hosts.begin());
  std::vector<HostId> others;
  for (HostId h : hosts) {
    if (h != self) others.push_back(h);
  }
  IgnoreSigpipe();
  auto context =
      std::make_shared<gloo::rendezvous::Context>(rank, static_cast<int>(hosts.size()));
  absl::Status status;
  {
    Store store(this, absl::StrCat(kKeyPrefix, HostList(hosts), "/", generation, "/"),
                std::move(others), deadline);
    try {
      context->setTimeout(Remaining(deadline));
      context->connectFullMesh(store, device);
    } catch (const RendezvousTimeout& e) {
      status = absl::DeadlineExceededError(absl::StrCat("connecting: ", e.what()));
    } catch (const std::exception& e) {
      const std::string message = absl::StrCat("connecting: ", e.what());
      status = absl::Now() >= deadline || absl::StrContains(e.what(), "Timed out")
                   ? absl::DeadlineExceededError(message)
                   : absl::UnavailableError(message);
    }
  }
  MutexLock lock(&mu_);
  changed_.SignalAll();
  Group& group = groups_[hosts];
  group.connecting = false;
  if (!status.ok()) {
    // Whatever the peers did with this generation, the next call agrees on
    // a higher one.
    group.generation = generation + 1;
    return status;
  }
  ++connects_;
  group.context = context;
  CW_LOG(kInfo) << "gloo: connected to hosts " << HostList(hosts) << " (generation "
                << generation << ", rank " << rank << " of " << hosts.size() << ")";
  return std::shared_ptr<gloo::Context>(context);
}

void GlooCollectives::Drop(const std::vector<HostId>& hosts,
                           const std::shared_ptr<gloo::Context>& context) {
  std::shared_ptr<gloo::Context> dropped;
  MutexLock lock(&mu_);
  auto it = groups_.find(hosts);
  if (it == groups_.end() || it->second.context != context) return;
  dropped = std::move(it->second.context);
  ++it->second.generation;
}

absl::Status GlooCollectives::Run(
    absl::Span<const HostId> hosts, int64_t generation, absl::Time deadline,
    absl::string_view what,
    const std::function<void(const std::shared_ptr<gloo::Context>&, std::chrono::milliseconds)>&
        op) {
  const std::vector<HostId> group(hosts.begin(), hosts.end());
  absl::StatusOr<std::shared_ptr<gloo::Context>> context =
      ContextFor(group, generation, deadline);
  if (!context.ok()) {
    return Annotate(context.status(),
                    absl::StrCat("Gloo ", what, " between hosts ", HostList(hosts)));
  }
  try {
    op(*context, Remaining(deadline));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    Drop(group, *context);
    const std::string message =
        absl::StrCat("Gloo ", what, " between hosts ", HostList(hosts), ": ", e.what());
    if (absl::StrContains(e.what(), "Timed out") || absl::Now() >= deadline) {
      return absl::DeadlineExceededError(message);
    }
    // A peer's connection failed: most likely it died. Its notice names
    // the cause; wait for it a little (never past the deadline).
    const absl::Time until = std::min(deadline, absl::Now() + kLostNoticeWait);
    MutexLock lock(&mu_);
    while (true) {
      if (std::string lost = LostLocked(hosts); !lost.empty()) {
        return absl::UnavailableError(absl::StrCat(lost, "; ", message));
      }
      if (!changed_.WaitWithDeadline(&mu_, SteadyDeadline(until)) && absl::Now() >= until) {
        return absl::UnavailableError(message);
      }
    }
  }
}

absl::Status GlooCollectives::AllReduce(const CollectiveKey& key, absl::Span<const HostId> hosts,
                                        int64_t generation, ir::DType dtype,
                                        ir::ReduceKind kind, void* data, int64_t elements,
                                        absl::Time deadline) {
  if (elements == 0) return absl::OkStatus();
  if (ir::IsStorageOnly(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("an all-reduce of ", ir::DTypeName(dtype), " (f32, i32 or pred only)"));
  }
  const int64_t bytes = elements * ir::ByteSize(dtype);
  const size_t n = hosts.size();
  // Halving-doubling moves fewer messages for small operands; it needs a
  // power-of-two group.
  const bool ring = bytes >= kRingFromBytes || (n & (n - 1)) != 0;
  return Run(hosts, generation, deadline, "all-reduce",
             [&](const std::shared_ptr<gloo::Context>& context, std::chrono::milliseconds left) {
               gloo::AllreduceOptions opts(context);
               const size_t count = static_cast<size_t>(elements);
               switch (dtype) {
                 case ir::DType::kF32:
                   opts.setOutput(static_cast<float*>(data), count);
                   opts.setReduceFunction(ReduceOf<float>(kind));
                   break;
                 case ir::DType::kI32:
                   opts.setOutput(static_cast<int32_t*>(data), count);
                   opts.setReduceFunction(ReduceOf<int32_t>(kind));
                   break;
                 case ir::DType::kPred:
                   opts.setOutput(static_cast<uint8_t*>(data), count);
                   opts.setReduceFunction(ReduceOf<uint8_t>(kind));
                   break;
                 default:
                   // Shape inference admits f32 and i32 collectives only.
                   CW_CHECK(false) << "a reduction of " << ir::DTypeName(dtype);
               }
               opts.setAlgorithm(ring ? gloo::AllreduceOptions::Algorithm::RING
                                      : gloo::AllreduceOptions::Algorithm::BCUBE);
               opts.setTag(TagOf(key));
               opts.setTimeout(left);
               gloo::allreduce(opts);
             });
}

absl::Status GlooCollectives::AllGather(const CollectiveKey& key, absl::Span<const HostId> hosts,
                                        int64_t generation, const void* in,
                                        absl::Span<const int64_t> bytes, void* out,
                                        absl::Time deadline) {
  const HostId self = plane_.self();
  const size_t rank =
      static_cast<size_t>(std::find(hosts.begin(), hosts.end(), self) - hosts.begin());
  CW_CHECK(rank < hosts.size() && bytes.size() == hosts.size());
  std::vector<size_t> counts(bytes.begin(), bytes.end());
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  if (total == 0) return absl::OkStatus();
  return Run(hosts, generation, deadline, "all-gather",
             [&](const std::shared_ptr<gloo::Context>& context, std::chrono::milliseconds left) {
               gloo::AllgathervOptions opts(context);
               // Gloo takes a non-const input pointer; it only reads it.
               opts.setInput(static_cast<char*>(const_cast<void*>(in)), counts[rank]);
               opts.setOutput(static_cast<char*>(out), counts);
               opts.setTag(TagOf(key));
               opts.setTimeout(left);
               gloo::allgatherv(opts);
             });
}

absl::Status GlooCollectives::AllToAll(const CollectiveKey& key, absl::Span<const HostId> hosts,
                                       int64_t generation, const void* in,
                                       absl::Span<const int64_t> send_bytes, void* out,
                                       absl::Span<const int64_t> recv_bytes,
                                       absl::Time deadline) {
  CW_CHECK(send_bytes.size() == hosts.size() && recv_bytes.size() == hosts.size());
  int64_t total = 0;
  for (int64_t b : send_bytes) total += b;
  for (int64_t b : recv_bytes) total += b;
  if (total == 0) return absl::OkStatus();
  return Run(hosts, generation, deadline, "all-to-all",
             [&](const std::shared_ptr<gloo::Context>& context, std::chrono::milliseconds left) {
               gloo::AlltoallvOptions opts(context);
               // Gloo takes a non-const input pointer; it only reads it.
               opts.setInput(static_cast<char*>(const_cast<void*>(in)),
                             std::vector<int64_t>(send_bytes.begin(), send_bytes.end()));
               opts.setOutput(static_cast<char*>(out),
                              std::vector<int64_t>(recv_bytes.begin(), recv_bytes.end()));
               opts.setTag(TagOf(key));
               opts.setTimeout(left);
               gloo::alltoallv(opts);
             });
}

}  // namespace causeway
