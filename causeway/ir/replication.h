// Replication analysis for SPMD functions. A function runs on every device
// of a mesh over that device's shards, so each value it computes may differ
// from device to device along some mesh axes. An output declared replicated
// over an axis is read from one device of that axis (the others are assumed
// equal), so a value that still differs there would be silently wrong: the
// per-shard sum of a sharded parameter returned as a replicated scalar is one
// device's partial sum. This pass finds such outputs before compilation,
// like the replication check of JAX's shard_map.
//
// The rules, for the set of mesh axes a value *varies* along:
//   parameter                       the axes its sharding splits it over
//   constant, iota                  none
//   all_reduce, all_gather over A   the operand's, less A (every member of
//                                   the group gets the same result)
//   reduce_scatter, all_to_all,
//   collective_permute over A       the operand's, plus A
//   every other op                  the union of its operands'
// The analysis is conservative: `x * 0` of a varying x still varies.
#ifndef CAUSEWAY_IR_REPLICATION_H_
#define CAUSEWAY_IR_REPLICATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "causeway/ir/function.h"

namespace causeway::ir {

// `parameter_varying[i]`: the mesh axes parameter i's shards differ along
// (the axes its sharding splits it over; axes of size 1 may be left out).
// `output_replicated[i]`: the mesh axes result i is declared replicated over
// (the mesh's axes of size > 1 that its sharding does not split it over).
//
// OK when every result is invariant along every axis it is declared
// replicated over. Otherwise INVALID_ARGUMENT naming the result, the axis,
// where the variation comes from (a sharded parameter, or a collective that
// makes values differ) and the op through which it reaches the result.
// REQUIRES: Verify(function) is OK; the spans have one entry per parameter
// and per result.
absl::Status CheckReplication(const Function& function,
                              absl::Span<const std::vector<std::string>> parameter_varying,
                              absl::Span<const std::vector<std::string>> output_replicated);

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_REPLICATION_H_
