#include "causeway/models/lm_engine.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"

namespace causeway::models {

Sharding BatchSharding() { return Sharding({{kDataAxis}, {}}); }

ir::Literal LiteralRows(const ir::Literal& literal, int64_t part, int64_t rows) {
  std::vector<int64_t> dims = literal.shape().dims;
  const size_t row_bytes = literal.byte_size() / static_cast<size_t>(dims[0]);
  dims[0] = rows;
  ir::Literal out(ir::Shape(literal.shape().dtype, dims));
  std::memcpy(out.data(), literal.data() + static_cast<size_t>(part * rows) * row_bytes,
              out.byte_size());
  return out;
}

absl::Status CheckModelState(size_t num_params, const std::vector<ir::Literal>& params,
                             const std::vector<ir::Literal>& m,
                             const std::vector<ir::Literal>& v) {
  if (params.size() != num_params || m.size() != num_params || v.size() != num_params) {
    return absl::InvalidArgumentError(absl::StrCat("the model has ", num_params,
                                                   " parameters; given ", params.size(), ", ",
                                                   m.size(), " and ", v.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Array>> PutParams(Client* client, const Mesh& mesh,
                                             const std::vector<ParamSpec>& specs,
                                             const std::vector<int>& ids,
                                             const std::vector<ir::Literal>& values) {
  std::vector<Array> out;
  for (int id : ids) {
    CW_ASSIGN_OR_RETURN(Array a, client->Put(values[id], mesh, ParamSharding(specs[id])));
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace causeway::models
