// The wire codec: conversions between the runtime's types (plans, runs,
// topology, meshes, literals, statuses) and their protobuf form in wire.proto,
// for the gRPC transport. Sits just above the line below which protos stay:
// only causeway/transport/grpc and its users see these messages.
//
// Encoding cannot fail. Decoding reads bytes from the network: every Decode
// validates what it reads (enum ranges, dimensions, index ranges, vector
// lengths, that offsets and extents fit their shards) and returns
// INVALID_ARGUMENT naming the fault instead of crashing or building an object
// that would crash its user. All functions are thread-compatible and
// stateless.
#ifndef CAUSEWAY_TRANSPORT_GRPC_WIRE_CODEC_H_
#define CAUSEWAY_TRANSPORT_GRPC_WIRE_CODEC_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/ir/literal.h"
#include "causeway/ir/shape.h"
#include "causeway/plan/plan.h"
#include "causeway/topology/mesh.h"
#include "causeway/topology/topology.h"
#include "causeway/transport/grpc/wire.pb.h"
#include "causeway/transport/services.h"

namespace causeway::wire {

// Whether DecodePlan parses the plan's functions.
enum class FunctionMode {
  kParse,  // every call node gets its ir::Function (hosts compile them)
  kSkip,   // functions stay null and their bytes are not parsed
           // (schedulers run no code)
};

// Functions travel once per plan: a table of ir::Serialize bytes, one entry
// per distinct function, that nodes refer to by index; each call node names
// its device kind. A call node without a function (from a plan decoded with
// kSkip) is encoded without one, which DecodePlan rejects.
void EncodePlan(const ProgramPlan& plan, Plan* out);
// Validates the plan's structure: indices of values, parameters, outputs,
// node inputs and outputs and functions in range; values defined once and
// before use; every value's sharding valid on its mesh with the matching
// shard shape and one host and local device per shard; the values of a call
// node all on one placement; each call node's device kind a valid name;
// reshard nodes with one input and one output of one global shape, one piece
// list per destination shard, pieces whose source shard exists and whose
// boxes fit both shards. With kParse also deserialises and verifies each
// function once (nodes calling the same one share it) and checks each call
// node's value shard shapes against the function's signature. Nothing is
// compiled here: the host that runs a node compiles it. Errors are
// INVALID_ARGUMENT, prefixed "plan 'name': " and naming the node
// ("node 3 (matmul): ...").
absl::StatusOr<std::shared_ptr<const ProgramPlan>> DecodePlan(const Plan& in, FunctionMode mode);

// INVALID_ARGUMENT for an invalid program or run id; the argument and output
// counts are checked against the plan by whoever runs it.
void EncodeRun(const RunRequest& run, Run* out);
absl::StatusOr<RunRequest> DecodeRun(const Run& in);

// INVALID_ARGUMENT for invalid or repeated ids, or a device on a host of
// another island.
void EncodeTopology(const causeway::Topology& t, Topology* out);
absl::StatusOr<causeway::Topology> DecodeTopology(const Topology& in);

// INVALID_ARGUMENT for an axis with an empty or repeated name or a size
// below 1, a device count other than the product of the axis sizes, or a
// repeated device.
void EncodeMesh(const causeway::Mesh& m, Mesh* out);
absl::StatusOr<causeway::Mesh> DecodeMesh(const Mesh& in);

// Decoded as is: the resource manager validates requests.
void EncodeMeshRequest(const causeway::MeshRequest& r, MeshRequest* out);
absl::StatusOr<causeway::MeshRequest> DecodeMeshRequest(const MeshRequest& in);

// INVALID_ARGUMENT for a dtype out of range, a negative dimension, more than
// ir::kMaxElements elements.
void EncodeShape(const ir::Shape& s, Shape* out);
absl::StatusOr<ir::Shape> DecodeShape(const Shape& in);

// Decoding only checks structure; DecodePlan validates shardings against
// their shapes and meshes.
void EncodeSharding(const causeway::Sharding& s, Sharding* out);
absl::StatusOr<causeway::Sharding> DecodeSharding(const Sharding& in);

// INVALID_ARGUMENT for a bad shape or data whose byte size is not the shape's.
void EncodeLiteral(const ir::Literal& l, Literal* out);
absl::StatusOr<ir::Literal> DecodeLiteral(const Literal& in);

// Code and message; payloads are dropped. Unknown codes decode as UNKNOWN
// (keeping the message); code OK decodes as OK whatever the message.
void EncodeStatus(const absl::Status& s, Status* out);
absl::Status DecodeStatus(const Status& in);

}  // namespace causeway::wire

#endif  // CAUSEWAY_TRANSPORT_GRPC_WIRE_CODEC_H_
