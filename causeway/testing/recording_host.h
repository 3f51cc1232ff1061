// A host for tests of the island schedulers and the control plane: it
// records what reaches it (runs in order and the messages they came in,
// releases, memory quotas) and answers everything else at once.
#ifndef CAUSEWAY_TESTING_RECORDING_HOST_H_
#define CAUSEWAY_TESTING_RECORDING_HOST_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/services.h"

namespace causeway::testing {

class RecordingHost final : public HostService {
 public:
  explicit RecordingHost(HostId id) : id_(id) {}
  HostId id() const override { return id_; }
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan>) override {
    return absl::OkStatus();
  }
  void UnregisterProgram(ProgramId) override {}
  void EnqueueRun(const RunRequest& run) override {
    MutexLock lock(&mu_);
    events_.push_back(absl::StrCat("run ", run.run.value()));
    runs_.push_back(run);
  }
  void EnqueueRuns(const std::vector<RunRequest>& runs) override {
    std::vector<int64_t> ids;
    for (const RunRequest& r : runs) {
      ids.push_back(r.run.value());
      EnqueueRun(r);
    }
    MutexLock lock(&mu_);
    messages_.push_back(std::move(ids));
  }
  absl::Status PutShard(ArrayId, int, int, ClientId, ir::Literal) override {
    return absl::OkStatus();
  }
  Future<ir::Literal> FetchShard(ArrayId, int) override {
    return Future<ir::Literal>::Ready(absl::UnimplementedError("a recording host holds no data"));
  }
  Future<Unit> AwaitShard(ArrayId, int) override { return Future<Unit>::Ready(Unit{}); }
  void ReleaseArrays(absl::Span<const ArrayId> arrays) override {
    MutexLock lock(&mu_);
    for (ArrayId a : arrays) events_.push_back(absl::StrCat("release ", a.value()));
  }
  void ReleaseOwner(ClientId) override {}
  void SetMemoryQuota(ClientId owner, int64_t bytes) override {
    MutexLock lock(&mu_);
    quotas_[owner.value()] = bytes;
  }
  void DeliverPiece(ShardPieceMessage) override {}
  Future<std::vector<DeviceCounters>> GetCounters(bool) override {
    return Future<std::vector<DeviceCounters>>::Ready(std::vector<DeviceCounters>{});
  }

  // "run N" and "release A", in the order they arrived.
  std::vector<std::string> events() const {
    MutexLock lock(&mu_);
    return events_;
  }
  std::vector<RunRequest> runs() const {
    MutexLock lock(&mu_);
    return runs_;
  }
  std::vector<int64_t> run_ids() const {
    MutexLock lock(&mu_);
    std::vector<int64_t> ids;
    for (const RunRequest& r : runs_) ids.push_back(r.run.value());
    return ids;
  }
  // The runs of each EnqueueRuns message, by id.
  std::vector<std::vector<int64_t>> messages() const {
    MutexLock lock(&mu_);
    return messages_;
  }
  // The last quota set for each client.
  std::map<int64_t, int64_t> quotas() const {
    MutexLock lock(&mu_);
    return quotas_;
  }

 private:
  const HostId id_;
  mutable Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::vector<RunRequest> runs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int64_t>> messages_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int64_t> quotas_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTING_RECORDING_HOST_H_
