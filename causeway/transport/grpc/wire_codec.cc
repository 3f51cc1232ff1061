#include "causeway/transport/grpc/wire_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/serialization.h"

namespace causeway::wire {
namespace {

using google::protobuf::RepeatedField;

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

// "node 3 input 7 out of range (5 values)".
absl::Status InRange(int64_t i, size_t n, absl::string_view what, absl::string_view unit) {
  if (i >= 0 && i < static_cast<int64_t>(n)) return absl::OkStatus();
  return Invalid(what, " ", i, " out of range (", n, " ", unit, ")");
}

template <typename Id>
void AddIds(const std::vector<Id>& ids, RepeatedField<int64_t>* out) {
  for (Id id : ids) out->Add(id.value());
}

template <typename Id>
std::vector<Id> Ids(const RepeatedField<int64_t>& in) {
  std::vector<Id> out;
  out.reserve(in.size());
  for (int64_t v : in) out.emplace_back(v);
  return out;
}

// All ids valid (>= 0).
absl::Status ValidIds(const RepeatedField<int64_t>& in, absl::string_view what) {
  for (int64_t v : in) {
    if (v < 0) return Invalid("invalid ", what, " id ", v);
  }
  return absl::OkStatus();
}

void EncodeAxes(const std::vector<causeway::MeshAxis>& axes,
                google::protobuf::RepeatedPtrField<MeshAxis>* out) {
  for (const causeway::MeshAxis& a : axes) {
    MeshAxis* p = out->Add();
    p->set_name(a.name);
    p->set_size(a.size);
  }
}

std::vector<causeway::MeshAxis> DecodeAxes(const google::protobuf::RepeatedPtrField<MeshAxis>& in) {
  std::vector<causeway::MeshAxis> out;
  for (const MeshAxis& a : in) out.push_back(causeway::MeshAxis{a.name(), a.size()});
  return out;
}

void EncodeValue(const causeway::PlanValue& v, PlanValue* out) {
  EncodeShape(v.shape, out->mutable_shape());
  EncodeMesh(v.mesh, out->mutable_mesh());
  EncodeSharding(v.sharding, out->mutable_sharding());
  EncodeShape(v.shard_shape, out->mutable_shard_shape());
  AddIds(v.shard_hosts, out->mutable_shard_hosts());
  out->mutable_shard_local_device()->Add(v.shard_local_device.begin(), v.shard_local_device.end());
}

absl::StatusOr<causeway::PlanValue> DecodeValue(const PlanValue& in) {
  causeway::PlanValue v;
  CW_ASSIGN_OR_RETURN(v.shape, DecodeShape(in.shape()));
  CW_ASSIGN_OR_RETURN(v.mesh, DecodeMesh(in.mesh()));
  CW_ASSIGN_OR_RETURN(v.sharding, DecodeSharding(in.sharding()));
  CW_RETURN_IF_ERROR(v.sharding.Validate(v.shape, v.mesh));
  CW_ASSIGN_OR_RETURN(v.shard_shape, DecodeShape(in.shard_shape()));
  const ir::Shape expected = v.sharding.ShardShape(v.shape, v.mesh);
  if (v.shard_shape != expected) {
    return Invalid("shard shape ", v.shard_shape.ToString(), ", but ", v.shape.ToString(),
                   " sharded ", v.sharding.ToString(), " gives ", expected.ToString());
  }
  if (in.shard_hosts_size() != v.mesh.size() || in.shard_local_device_size() != v.mesh.size()) {
    return Invalid(in.shard_hosts_size(), " shard hosts and ", in.shard_local_device_size(),
                   " local devices for a mesh of ", v.mesh.size(), " devices");
  }
  CW_RETURN_IF_ERROR(ValidIds(in.shard_hosts(), "shard host"));
  v.shard_hosts = Ids<HostId>(in.shard_hosts());
  for (int32_t d : in.shard_local_device()) {
    if (d < 0) return Invalid("negative local device ", d);
    v.shard_local_device.push_back(d);
  }
  return v;
}

// Every shard of `a` is on the same device as the same shard of `b`.
bool SamePlacement(const causeway::PlanValue& a, const causeway::PlanValue& b) {
  return a.mesh.devices() == b.mesh.devices() && a.shard_hosts == b.shard_hosts &&
         a.shard_local_device == b.shard_local_device;
}

// The box at `offset` of `extent` lies within `shard`.
absl::Status CheckBox(const RepeatedField<int64_t>& offset, const RepeatedField<int64_t>& extent,
                      const ir::Shape& shard, absl::string_view which) {
  if (offset.size() != shard.rank() || extent.size() != shard.rank()) {
    return Invalid(which, " offset of rank ", offset.size(), " and extent of rank ", extent.size(),
                   " for shards of rank ", shard.rank());
  }
  for (int i = 0; i < shard.rank(); ++i) {
    const int64_t o = offset[i], e = extent[i], d = shard.dims[i];
    if (o < 0 || e < 0 || e > d || o > d - e) {
      return Invalid("box at ", which, " offset [", absl::StrJoin(offset, ","), "] of extent [",
                     absl::StrJoin(extent, ","), "] exceeds the ", which, " shard ",
                     shard.ToString());
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeReshard(const PlanNode& in, const std::vector<causeway::PlanValue>& values,
                           absl::string_view where, causeway::PlanNode& node) {
  if (node.inputs.size() != 1 || node.outputs.size() != 1) {
    return Invalid(where, "a reshard needs one input and one output, has ", node.inputs.size(),
                   " and ", node.outputs.size());
  }
  const causeway::PlanValue& src = values[node.inputs[0]];
  const causeway::PlanValue& dst = values[node.outputs[0]];
  if (src.shape != dst.shape) {
    return Invalid(where, "reshards ", src.shape.ToString(), " into ", dst.shape.ToString());
  }
  if (in.pieces_size() != dst.mesh.size()) {
    return Invalid(where, in.pieces_size(), " piece lists for ", dst.mesh.size(),
                   " destination shards");
  }
  node.pieces.resize(in.pieces_size());
  for (int d = 0; d < in.pieces_size(); ++d) {
    for (int i = 0; i < in.pieces(d).pieces_size(); ++i) {
      const ReshardPiece& p = in.pieces(d).pieces(i);
      const std::string at = absl::StrCat(where, "shard ", d, " piece ", i);
      CW_RETURN_IF_ERROR(InRange(p.src_shard(), src.mesh.size(), absl::StrCat(at, " source shard"),
                                 "source shards"));
      CW_RETURN_IF_ERROR(
          Annotate(CheckBox(p.src_offset(), p.extent(), src.shard_shape, "source"), at));
      CW_RETURN_IF_ERROR(
          Annotate(CheckBox(p.dst_offset(), p.extent(), dst.shard_shape, "destination"), at));
      node.pieces[d].push_back(
          causeway::ReshardPiece{p.src_shard(),
                                 {p.src_offset().begin(), p.src_offset().end()},
                                 {p.dst_offset().begin(), p.dst_offset().end()},
                                 {p.extent().begin(), p.extent().end()}});
    }
  }
  return absl::OkStatus();
}

// Checks a call node's placement and, once its function is compiled, its
// signature against its values.
absl::Status CheckCall(const causeway::PlanNode& node,
                       const std::vector<causeway::PlanValue>& values, absl::string_view where) {
  if (node.inputs.empty() && node.outputs.empty()) {
    return Invalid(where, "a call with no inputs or outputs");
  }
  const causeway::PlanValue& first = values[node.inputs.empty() ? node.outputs[0] : node.inputs[0]];
  for (const std::vector<int>* list : {&node.inputs, &node.outputs}) {
    for (int v : *list) {
      if (!SamePlacement(values[v], first)) {
        return Invalid(where, "value ", v, " is not on the node's devices");
      }
    }
  }
  if (node.function == nullptr) return absl::OkStatus();
  const ir::Function& f = *node.function;
  if (f.num_parameters() != static_cast<int>(node.inputs.size()) ||
      f.num_outputs() != static_cast<int>(node.outputs.size())) {
    return Invalid(where, "function ", f.name(), " takes ", f.num_parameters(), " and returns ",
                   f.num_outputs(), " values; the node has ", node.inputs.size(), " inputs and ",
                   node.outputs.size(), " outputs");
  }
  for (int i = 0; i < f.num_parameters() + f.num_outputs(); ++i) {
    const bool in = i < f.num_parameters();
    const int k = in ? i : i - f.num_parameters();
    const ir::Shape& want = in ? f.parameter_shape(k) : f.output_shape(k);
    const int v = in ? node.inputs[k] : node.outputs[k];
    const ir::Shape& have = values[v].shard_shape;
    if (want != have) {
      return Invalid(where, in ? "input " : "output ", k, " (value ", v, ") has shards of ",
                     have.ToString(), "; function ", f.name(), " expects ", want.ToString());
    }
  }
  return absl::OkStatus();
}

absl::Status DecodePlanInto(const Plan& in, FunctionMode mode, ProgramPlan& plan) {
  plan.id = ProgramId(in.id());
  plan.client = ClientId(in.client());
  plan.name = in.name();
  for (int v = 0; v < in.values_size(); ++v) {
    absl::StatusOr<causeway::PlanValue> value = DecodeValue(in.values(v));
    if (!value.ok()) return Annotate(value.status(), absl::StrCat("value ", v));
    plan.values.push_back(*std::move(value));
  }
  const size_t n_values = plan.values.size();
  std::vector<bool> defined(n_values, false);
  auto indices = [&](const RepeatedField<int32_t>& ids,
                     absl::string_view what) -> absl::StatusOr<std::vector<int>> {
    for (int32_t v : ids) CW_RETURN_IF_ERROR(InRange(v, n_values, what, "values"));
    return std::vector<int>(ids.begin(), ids.end());
  };
  CW_ASSIGN_OR_RETURN(plan.parameters, indices(in.parameters(), "parameter"));
  for (int v : plan.parameters) {
    if (defined[v]) return Invalid("parameter ", v, " listed twice");
    defined[v] = true;
  }
  std::vector<std::shared_ptr<const ir::Function>> parsed(in.functions_size());
  for (int n = 0; n < in.nodes_size(); ++n) {
    const PlanNode& p = in.nodes(n);
    causeway::PlanNode node;
    node.name = p.name();
    node.has_collectives = p.has_collectives();
    const std::string where = absl::StrCat("node ", n, " (", p.name(), "): ");
    if (p.kind() != static_cast<int>(PlanNodeKind::kCall) &&
        p.kind() != static_cast<int>(PlanNodeKind::kReshard)) {
      return Invalid(where, "invalid kind ", p.kind());
    }
    node.kind = static_cast<PlanNodeKind>(p.kind());
    CW_ASSIGN_OR_RETURN(node.inputs, indices(p.inputs(), absl::StrCat("node ", n, " input")));
    CW_ASSIGN_OR_RETURN(node.outputs, indices(p.outputs(), absl::StrCat("node ", n, " output")));
    for (int v : node.inputs) {
      if (!defined[v]) {
        return Invalid(where, "input ", v, " is used before it is defined");
      }
    }
    for (int v : node.outputs) {
      if (defined[v]) return Invalid(where, "output ", v, " defined twice");
      defined[v] = true;
    }
    if (node.kind == PlanNodeKind::kReshard) {
      CW_RETURN_IF_ERROR(DecodeReshard(p, plan.values, where, node));
    } else {
      const int f = p.function();
      CW_RETURN_IF_ERROR(
          InRange(f, parsed.size(), absl::StrCat("node ", n, " function"), "functions"));
      node.device_kind = p.device_kind().empty() ? std::string(kDefaultDeviceKind)
                                                 : p.device_kind();
      CW_RETURN_IF_ERROR(Annotate(CheckDeviceKindName(node.device_kind), where));
      std::shared_ptr<const ir::Function>& function = parsed[f];
      if (mode == FunctionMode::kParse && function == nullptr) {
        const std::string context = absl::StrCat(where, "function ", f);
        absl::StatusOr<ir::Function> made = ir::Deserialize(in.functions(f));
        if (!made.ok()) return Annotate(made.status(), context);
        function = std::make_shared<const ir::Function>(*std::move(made));
      }
      node.function = function;
      CW_RETURN_IF_ERROR(CheckCall(node, plan.values, where));
    }
    plan.nodes.push_back(std::move(node));
  }
  CW_ASSIGN_OR_RETURN(plan.outputs, indices(in.outputs(), "output"));
  for (int v : plan.outputs) {
    if (!defined[v]) return Invalid("output ", v, " is never defined");
  }
  if (in.hosts_by_island_size() != in.islands_size()) {
    return Invalid(in.hosts_by_island_size(), " host lists for ", in.islands_size(), " islands");
  }
  // Hosts and islands: distinct, and every host named anywhere in the plan
  // is one of its hosts, so that a scheduler or executor never looks up a
  // host the plan did not declare.
  CW_RETURN_IF_ERROR(ValidIds(in.hosts(), "host"));
  CW_RETURN_IF_ERROR(ValidIds(in.islands(), "island"));
  const absl::flat_hash_set<int64_t> hosts(in.hosts().begin(), in.hosts().end());
  if (hosts.size() != static_cast<size_t>(in.hosts_size())) return Invalid("a host listed twice");
  if (absl::flat_hash_set<int64_t>(in.islands().begin(), in.islands().end()).size() !=
      static_cast<size_t>(in.islands_size())) {
    return Invalid("an island listed twice");
  }
  absl::flat_hash_set<int64_t> placed;
  for (int i = 0; i < in.hosts_by_island_size(); ++i) {
    for (int64_t h : in.hosts_by_island(i).hosts()) {
      if (!hosts.contains(h)) {
        return Invalid("island ", in.islands(i), " lists host ", h, ", which the plan does not");
      }
      if (!placed.insert(h).second) return Invalid("host ", h, " listed in two islands or twice");
    }
  }
  for (const causeway::PlanNode& node : plan.nodes) {
    for (const std::vector<int>* list : {&node.inputs, &node.outputs}) {
      for (int v : *list) {
        for (HostId h : plan.values[v].shard_hosts) {
          if (!placed.contains(h.value())) {
            return Invalid("node ", node.name, ": value ", v, " has a shard on host ", h.value(),
                           ", which no island of the plan lists");
          }
        }
      }
    }
  }
  plan.islands = Ids<IslandId>(in.islands());
  plan.hosts = Ids<HostId>(in.hosts());
  for (const HostList& hosts : in.hosts_by_island()) {
    plan.hosts_by_island.push_back(Ids<HostId>(hosts.hosts()));
  }
  return absl::OkStatus();
}

}  // namespace

void EncodeShape(const ir::Shape& s, Shape* out) {
  out->set_dtype(static_cast<int32_t>(s.dtype));
  out->mutable_dims()->Add(s.dims.begin(), s.dims.end());
}

absl::StatusOr<ir::Shape> DecodeShape(const Shape& in) {
  if (!ir::IsValidDType(in.dtype())) {
    return Invalid("invalid dtype ", in.dtype());
  }
  ir::Shape shape(static_cast<ir::DType>(in.dtype()), {in.dims().begin(), in.dims().end()});
  CW_RETURN_IF_ERROR(ir::ValidateShape(shape));
  return shape;
}

void EncodeSharding(const causeway::Sharding& s, Sharding* out) {
  for (const std::vector<std::string>& dim : s.dims()) {
    ShardingDim* d = out->add_dims();
    for (const std::string& axis : dim) d->add_axes(axis);
  }
}

absl::StatusOr<causeway::Sharding> DecodeSharding(const Sharding& in) {
  std::vector<std::vector<std::string>> dims;
  for (const ShardingDim& d : in.dims()) {
    for (const std::string& axis : d.axes()) {
      if (axis.empty()) return Invalid("sharding names an empty mesh axis");
    }
    dims.emplace_back(d.axes().begin(), d.axes().end());
  }
  return causeway::Sharding(std::move(dims));
}

void EncodeLiteral(const ir::Literal& l, Literal* out) {
  EncodeShape(l.shape(), out->mutable_shape());
  out->set_data(reinterpret_cast<const char*>(l.data()), l.byte_size());
}

absl::StatusOr<ir::Literal> DecodeLiteral(const Literal& in) {
  CW_ASSIGN_OR_RETURN(ir::Shape shape, DecodeShape(in.shape()));
  if (shape.byte_size() != static_cast<int64_t>(in.data().size())) {
    return Invalid("literal of ", shape.ToString(), " carries ", in.data().size(),
                   " bytes; expected ", shape.byte_size());
  }
  ir::Literal literal(std::move(shape));
  if (literal.byte_size() > 0) std::memcpy(literal.data(), in.data().data(), literal.byte_size());
  return literal;
}

void EncodeStatus(const absl::Status& s, Status* out) {
  out->set_code(static_cast<int32_t>(s.code()));
  out->set_message(std::string(s.message()));
}

absl::Status DecodeStatus(const Status& in) {
  if (in.code() == 0) return absl::OkStatus();
  const bool known =
      in.code() > 0 && in.code() <= static_cast<int>(absl::StatusCode::kUnauthenticated);
  return absl::Status(known ? static_cast<absl::StatusCode>(in.code()) : absl::StatusCode::kUnknown,
                      in.message());
}

void EncodeMesh(const causeway::Mesh& m, Mesh* out) {
  out->set_id(m.id().value());
  out->set_island(m.island().value());
  EncodeAxes(m.axes(), out->mutable_axes());
  AddIds(m.devices(), out->mutable_devices());
}

absl::StatusOr<causeway::Mesh> DecodeMesh(const Mesh& in) {
  std::vector<causeway::MeshAxis> axes = DecodeAxes(in.axes());
  const int64_t n = in.devices_size();
  absl::flat_hash_set<std::string> names;
  int64_t size = 1;
  for (const causeway::MeshAxis& a : axes) {
    if (a.name.empty()) return Invalid("mesh axis with an empty name");
    if (!names.insert(a.name).second) return Invalid("mesh axis '", a.name, "' named twice");
    if (a.size < 1) return Invalid("mesh axis '", a.name, "' has size ", a.size);
    if (a.size > n || size > n / a.size) {
      return Invalid("mesh axes need more than the ", n, " devices listed");
    }
    size *= a.size;
  }
  if (size != n) return Invalid("mesh axes of ", size, " devices list ", n, " devices");
  CW_RETURN_IF_ERROR(ValidIds(in.devices(), "device"));
  absl::flat_hash_set<int64_t> seen;
  for (int64_t d : in.devices()) {
    if (!seen.insert(d).second) return Invalid("device ", d, " listed twice in a mesh");
  }
  return causeway::Mesh(MeshId(in.id()), IslandId(in.island()), std::move(axes),
                        Ids<DeviceId>(in.devices()));
}

void EncodeMeshRequest(const causeway::MeshRequest& r, MeshRequest* out) {
  EncodeAxes(r.axes, out->mutable_axes());
  out->set_island(r.island.value());
  AddIds(r.devices, out->mutable_devices());
}

absl::StatusOr<causeway::MeshRequest> DecodeMeshRequest(const MeshRequest& in) {
  return causeway::MeshRequest{DecodeAxes(in.axes()), IslandId(in.island()),
                               Ids<DeviceId>(in.devices())};
}

void EncodeTopology(const causeway::Topology& t, Topology* out) {
  for (IslandId id : t.islands()) {
    const IslandInfo island = t.island(id).value();
    Topology::Island* i = out->add_islands();
    i->set_id(id.value());
    AddIds(island.hosts, i->mutable_hosts());
    for (DeviceId d : island.devices) {
      const DeviceInfo info = t.device(d).value();
      Topology::Device* p = i->add_devices();
      p->set_id(d.value());
      p->set_host(info.host.value());
      p->set_memory_bytes(info.memory_bytes);
      if (info.kind != kDefaultDeviceKind) p->set_kind(info.kind);
      if (!info.description.empty()) p->set_description(info.description);
    }
  }
  for (const auto& [device, reason] : t.gone()) {
    Topology::Gone* g = out->add_gone();
    g->set_device(device.value());
    g->set_reason(reason);
  }
}

absl::StatusOr<causeway::Topology> DecodeTopology(const Topology& in) {
  causeway::Topology t;
  absl::flat_hash_set<int64_t> islands, hosts, devices;
  for (const Topology::Island& i : in.islands()) {
    if (i.id() < 0 || !islands.insert(i.id()).second) {
      return Invalid("topology: island ", i.id(), " is invalid or listed twice");
    }
    t.AddIsland(IslandId(i.id()));
    for (int64_t h : i.hosts()) {
      if (h < 0 || !hosts.insert(h).second) {
        return Invalid("topology: host ", h, " is invalid or listed twice");
      }
      t.AddHost(HostId(h), IslandId(i.id()));
    }
    for (const Topology::Device& d : i.devices()) {
      if (d.id() < 0 || !devices.insert(d.id()).second) {
        return Invalid("topology: device ", d.id(), " is invalid or listed twice");
      }
      if (std::find(i.hosts().begin(), i.hosts().end(), d.host()) == i.hosts().end()) {
        return Invalid("topology: device ", d.id(), " is on host ", d.host(), ", which island ",
                       i.id(), " does not list");
      }
      if (d.memory_bytes() < 0) {
        return Invalid("topology: device ", d.id(), " has ", d.memory_bytes(), " bytes");
      }
      const absl::string_view kind = d.kind().empty() ? kDefaultDeviceKind : d.kind();
      if (absl::Status s = CheckDeviceKindName(kind); !s.ok()) {
        return Invalid("topology: device ", d.id(), ": ", s.message());
      }
      if (d.description().size() > kMaxDeviceDescription) {
        return Invalid("topology: device ", d.id(), "'s description has ",
                       d.description().size(), " bytes (at most ", kMaxDeviceDescription, ")");
      }
      t.AddDevice(DeviceId(d.id()), HostId(d.host()), d.memory_bytes(), kind, d.description());
    }
  }
  if (static_cast<size_t>(in.gone_size()) > causeway::Topology::kGoneRemembered) {
    return Invalid("topology: ", in.gone_size(), " departed devices (at most ",
                   causeway::Topology::kGoneRemembered, ")");
  }
  for (const Topology::Gone& g : in.gone()) {
    if (g.device() < 0 || devices.contains(g.device())) {
      return Invalid("topology: departed device ", g.device(), " is invalid or present");
    }
    t.MarkGone(DeviceId(g.device()), g.reason().substr(0, 1000));
  }
  return t;
}

void EncodeRun(const RunRequest& run, Run* out) {
  out->set_program(run.program.value());
  out->set_run(run.run.value());
  out->set_client(run.client.value());
  AddIds(run.arguments, out->mutable_arguments());
  AddIds(run.outputs, out->mutable_outputs());
  out->set_sequence(run.sequence);
  out->set_time_limit_us(run.time_limit_us);
}

absl::StatusOr<RunRequest> DecodeRun(const Run& in) {
  if (in.program() < 0 || in.run() < 0) {
    return Invalid("run ", in.run(), " of program ", in.program(), ": invalid id");
  }
  if (in.time_limit_us() < 0) {
    return Invalid("run ", in.run(), ": a time limit of ", in.time_limit_us(), " us");
  }
  return RunRequest{ProgramId(in.program()),    RunId(in.run()),
                    ClientId(in.client()),      Ids<ArrayId>(in.arguments()),
                    Ids<ArrayId>(in.outputs()), in.sequence(),
                    in.time_limit_us()};
}

void EncodePlan(const ProgramPlan& plan, Plan* out) {
  out->set_id(plan.id.value());
  out->set_client(plan.client.value());
  out->set_name(plan.name);
  for (const causeway::PlanValue& v : plan.values) EncodeValue(v, out->add_values());
  out->mutable_parameters()->Add(plan.parameters.begin(), plan.parameters.end());
  out->mutable_outputs()->Add(plan.outputs.begin(), plan.outputs.end());
  // Distinct functions, then distinct function bytes, share a table entry.
  absl::flat_hash_map<const ir::Function*, int> by_function;
  absl::flat_hash_map<std::string, int> by_bytes;
  for (const causeway::PlanNode& node : plan.nodes) {
    PlanNode* p = out->add_nodes();
    p->set_kind(static_cast<int32_t>(node.kind));
    p->set_name(node.name);
    p->mutable_inputs()->Add(node.inputs.begin(), node.inputs.end());
    p->mutable_outputs()->Add(node.outputs.begin(), node.outputs.end());
    p->set_has_collectives(node.has_collectives);
    for (const std::vector<causeway::ReshardPiece>& list : node.pieces) {
      ReshardPieces* l = p->add_pieces();
      for (const causeway::ReshardPiece& piece : list) {
        ReshardPiece* q = l->add_pieces();
        q->set_src_shard(piece.src_shard);
        q->mutable_src_offset()->Add(piece.src_offset.begin(), piece.src_offset.end());
        q->mutable_dst_offset()->Add(piece.dst_offset.begin(), piece.dst_offset.end());
        q->mutable_extent()->Add(piece.extent.begin(), piece.extent.end());
      }
    }
    if (node.kind != PlanNodeKind::kCall) continue;
    if (node.device_kind != kDefaultDeviceKind) p->set_device_kind(node.device_kind);
    if (node.function == nullptr) {
      p->set_function(-1);  // decoding rejects it
      continue;
    }
    auto [it, added] = by_function.try_emplace(node.function.get(), 0);
    if (added) {
      std::string bytes = ir::Serialize(*node.function);
      auto [b, new_bytes] = by_bytes.try_emplace(bytes, out->functions_size());
      if (new_bytes) out->add_functions(std::move(bytes));
      it->second = b->second;
    }
    p->set_function(it->second);
  }
  AddIds(plan.islands, out->mutable_islands());
  AddIds(plan.hosts, out->mutable_hosts());
  for (const std::vector<HostId>& hosts : plan.hosts_by_island) {
    AddIds(hosts, out->add_hosts_by_island()->mutable_hosts());
  }
}

absl::StatusOr<std::shared_ptr<const ProgramPlan>> DecodePlan(const Plan& in, FunctionMode mode) {
  auto plan = std::make_shared<ProgramPlan>();
  CW_RETURN_IF_ERROR(
      Annotate(DecodePlanInto(in, mode, *plan), absl::StrCat("plan '", in.name(), "'")));
  return plan;
}

}  // namespace causeway::wire
