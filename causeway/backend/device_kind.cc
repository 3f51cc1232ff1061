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
