#include "causeway/transport/config.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/limits.h"

namespace causeway {

absl::Status CheckReportFanout(int64_t fanout) {
  if (fanout >= 0 && fanout <= limits::kMaxReportFanout) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the report tree's fanout must be 0 to ",
                                                 limits::kMaxReportFanout, "; given ", fanout));
}

ReportTreeNode ReportTreeOf(absl::Span<const HostId> hosts, HostId host, int fanout) {
  ReportTreeNode node;
  if (fanout < 1) return node;
  absl::flat_hash_set<HostId> seen;
  std::vector<HostId> distinct;
  distinct.reserve(hosts.size());
  for (HostId h : hosts) {
    if (seen.insert(h).second) distinct.push_back(h);
  }
  const auto at = std::find(distinct.begin(), distinct.end(), host);
  if (at == distinct.end()) return node;
  node.member = true;
  const size_t p = static_cast<size_t>(at - distinct.begin());
  const size_t k = static_cast<size_t>(fanout);
  if (p > 0) node.parent = distinct[(p - 1) / k];
  for (size_t c = p * k + 1; c <= p * k + k && c < distinct.size(); ++c) {
    node.children.push_back(distinct[c]);
  }
  return node;
}

absl::Status CheckClientShare(const ClientShare& share) {
  if (!(share.weight > 0 && share.weight <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a client's weight must be in (0, 1e6], given ", share.weight));
  }
  if (share.memory_quota_bytes < 0 || share.memory_quota_bytes > limits::kMaxDeviceMemoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a client's memory quota must be in [0, ",
                                                   limits::kMaxDeviceMemoryBytes,
                                                   "] bytes, given ", share.memory_quota_bytes));
  }
  if (share.priority < 0 || share.priority > 7) {
    return absl::InvalidArgumentError(
        absl::StrCat("a client's priority class must be in [0, 7], given ", share.priority));
  }
  return absl::OkStatus();
}

}  // namespace causeway
