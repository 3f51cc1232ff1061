// Strong id types. Every id that crosses an interface has its own type, so a
// HostId can never be passed where a DeviceId is expected.
#ifndef CAUSEWAY_BASE_IDS_H_
#define CAUSEWAY_BASE_IDS_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"

namespace causeway {

// A 64-bit id tagged with the kind of thing it names. A small value type:
// copy freely. Default-constructed ids are invalid (value -1).
template <typename Tag>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(int64_t value) : value_(value) {}

  constexpr int64_t value() const { return value_; }
  constexpr bool valid() const { return value_ >= 0; }

  friend constexpr auto operator<=>(StrongId a, StrongId b) = default;
  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }
  std::string ToString() const { return absl::StrCat(Tag::kPrefix, value_); }
  friend std::ostream& operator<<(std::ostream& os, StrongId id) {
    return os << id.ToString();
  }

 private:
  int64_t value_ = -1;
};

#define CW_DEFINE_ID(Name, prefix)                 \
  struct Name##Tag {                               \
    static constexpr const char* kPrefix = prefix; \
  };                                               \
  using Name = StrongId<Name##Tag>

CW_DEFINE_ID(ClientId, "client ");
CW_DEFINE_ID(ArrayId, "array ");
CW_DEFINE_ID(RunId, "run ");
CW_DEFINE_ID(ProgramId, "program ");
CW_DEFINE_ID(HostId, "host ");
CW_DEFINE_ID(DeviceId, "device ");
CW_DEFINE_ID(IslandId, "island ");
CW_DEFINE_ID(MeshId, "mesh ");

#undef CW_DEFINE_ID

// Array, run and program ids are named by clients, each in its own range:
// the client's id plus one in the bits from kClientIdShift up. Who owns an
// id is therefore known without asking (a server checks a client names only
// its own ids).
inline constexpr int kClientIdShift = 40;
inline int64_t ClientIdBase(ClientId client) { return (client.value() + 1) << kClientIdShift; }
inline ClientId OwnerOfId(int64_t id) { return ClientId((id >> kClientIdShift) - 1); }

}  // namespace causeway

#endif  // CAUSEWAY_BASE_IDS_H_
