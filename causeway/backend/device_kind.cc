#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/backend/executable.h"
#include "causeway/base/mutex.h"

namespace causeway::backend {

absl::Status CollectiveOps::AllGather(int, absl::Span<const std::string>, const ir::Shape&,
                                      const ir::Shape&, int64_t, const void*, void*) {
  return absl::UnimplementedError("all_gather is not supported by this runtime");
}
absl::Status CollectiveOps::ReduceScatter(int, absl::Span<const std::string>, ir::ReduceKind,
                                          const ir::Shape&, const ir::Shape&, int64_t,
                                          const void*, void*) {
  return absl::UnimplementedError("reduce_scatter is not supported by this runtime");
}
absl::Status CollectiveOps::AllToAll(int, absl::Span<const std::string>, const ir::Shape&,
                                     const ir::Shape&, int64_t, int64_t, const void*, void*) {
  return absl::UnimplementedError("all_to_all is not supported by this runtime");
}
absl::Status CollectiveOps::CollectivePermute(int, absl::Span<const std::string>,
                                              const ir::Shape&,
                                              absl::Span<const std::pair<int64_t, int64_t>>,
                                              const void*, void*) {
  return absl::UnimplementedError("collective_permute is not supported by this runtime");
}

absl::StatusOr<CollectiveGroup> CollectiveOps::GroupOf(absl::Span<const std::string>) const {
  return absl::UnimplementedError("this runtime gives no collective groups");
}
absl::Status CollectiveOps::MeetOnDevices(int, absl::Span<const std::string>, ir::OpKind,
                                          const void*, PerformOnDevices) {
  return absl::UnimplementedError("this runtime cannot meet a group on its devices");
}

absl::StatusOr<std::vector<std::string>> DeviceKind::ListDevices() const {
  return absl::UnimplementedError(
      absl::StrCat("the ", name(), " kind has no physical devices to list"));
}
absl::Status DeviceKind::SelectDevice(int) const {
  return absl::UnimplementedError(
      absl::StrCat("the ", name(), " kind has no physical devices to choose from"));
}

absl::Status RunContext::Stopped(absl::string_view where) const {
  if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
    return absl::CancelledError(
        absl::StrCat(where, ": cancelled (its client left, or its work was cancelled)"));
  }
  if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
    return absl::CancelledError(absl::StrCat(where, ": the device is shutting down"));
  }
  if (deadline != absl::InfiniteFuture() && absl::Now() > deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat(where, ": the run's time on the device passed its client's run time limit"));
  }
  return absl::OkStatus();
}

bool CollectiveGroup::local() const {
  return std::find(devices.begin(), devices.end(), nullptr) == devices.end();
}

absl::Status CheckCollectiveShapes(ir::OpKind op, const ir::Shape& in, const ir::Shape& out,
                                   int64_t dimension, int64_t concat_dimension,
                                   absl::Span<const std::pair<int64_t, int64_t>> pairs,
                                   int64_t group_size) {
  const int64_t g = group_size;
  // `big` is `small` with dimension `dimension` times the group.
  const auto scaled = [&](const ir::Shape& small, const ir::Shape& big) {
    ir::Shape expected = small;
    const bool inside = dimension >= 0 && dimension < small.rank();
    if (inside) expected.dims[static_cast<size_t>(dimension)] *= g;
    if (inside && expected == big) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "shapes ", small.ToString(), " and ", big.ToString(),
        " do not differ by the group size ", g, " along dimension ", dimension));
  };
  switch (op) {
    case ir::OpKind::kAllGather: return scaled(in, out);
    case ir::OpKind::kReduceScatter: return scaled(out, in);
    case ir::OpKind::kAllToAll: {
      const int rank = in.rank();
      if (dimension < 0 || dimension >= rank || concat_dimension < 0 ||
          concat_dimension >= rank || g < 1 || in.dims[static_cast<size_t>(dimension)] % g != 0) {
        return absl::InvalidArgumentError(absl::StrCat("cannot split ", in.ToString(),
                                                       " along ", dimension, " into ", g,
                                                       " parts"));
      }
      ir::Shape expected = in;
      expected.dims[static_cast<size_t>(dimension)] /= g;
      expected.dims[static_cast<size_t>(concat_dimension)] *= g;
      if (expected != out) {
        return absl::InvalidArgumentError(absl::StrCat("result ", out.ToString(),
                                                       " should be ", expected.ToString(),
                                                       " for a group of ", g));
      }
      return absl::OkStatus();
    }
    case ir::OpKind::kCollectivePermute:
      for (const auto& [s, t] : pairs) {
        if (s < 0 || t < 0 || s >= g || t >= g) {
          return absl::InvalidArgumentError(
              absl::StrCat("pair ", s, "->", t, " outside a group of ", g));
        }
      }
      [[fallthrough]];
    case ir::OpKind::kAllReduce:
      if (in != out) {
        return absl::InvalidArgumentError(absl::StrCat("operand ", in.ToString(),
                                                       " and result ", out.ToString(),
                                                       " differ"));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpName(op), " is not a collective"));
  }
}

namespace {
struct Registry {
  Mutex mu;
  std::map<std::string, std::unique_ptr<DeviceKind>, std::less<>> kinds ABSL_GUARDED_BY(mu);
};
Registry& TheRegistry() {
  static Registry* const registry = new Registry;  // never destroyed
  return *registry;
}
}  // namespace

const DeviceKind& RegisterDeviceKind(std::unique_ptr<DeviceKind> kind) {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  auto [it, added] = r.kinds.try_emplace(std::string(kind->name()), nullptr);
  if (added) it->second = std::move(kind);
  return *it->second;
}

absl::StatusOr<const DeviceKind*> FindDeviceKind(absl::string_view name) {
  Registry& r = TheRegistry();
  std::vector<std::string> known;
  {
    MutexLock lock(&r.mu);
    auto it = r.kinds.find(name);
    if (it != r.kinds.end()) return it->second.get();
    for (const auto& [n, k] : r.kinds) known.push_back(n);
  }
  return absl::NotFoundError(absl::StrCat(
      "no backend for device kind \"", name, "\" in this process (it has: ",
      known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
}

std::vector<std::string> DeviceKindNames() {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [n, k] : r.kinds) names.push_back(n);
  return names;
}

}  // namespace causeway::backend
