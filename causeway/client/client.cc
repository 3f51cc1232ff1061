// The public handles: thin forwarding to ClientCore.
#include "causeway/client/client.h"

#include "absl/strings/str_cat.h"

#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client_core.h"
#include "causeway/ir/verifier.h"

namespace causeway {

ArrayId Array::id() const { return state_->id; }
ClientId Array::client() const { return state_->core->id(); }
const ir::Shape& Array::shape() const { return state_->shape; }
const Mesh& Array::mesh() const { return state_->mesh; }
const Sharding& Array::sharding() const { return state_->sharding; }
bool Array::released() const { return state_->released.load(); }

Future<ir::Literal> Array::Fetch() const {
  if (released()) {
    return Future<ir::Literal>::Ready(absl::InvalidArgumentError(
        absl::StrCat("fetch of ", id().ToString(), ", which was released")));
  }
  return state_->core->Fetch(*state_);
}

Future<Unit> Array::Ready() const {
  if (released()) {
    return Future<Unit>::Ready(absl::InvalidArgumentError(
        absl::StrCat("wait on ", id().ToString(), ", which was released")));
  }
  return state_->core->Ready(*state_);
}

void Array::Release() {
  if (state_->released.exchange(true)) return;
  internal::ArrayState& s = *state_;
  // Release after the producing run reached its hosts, never before.
  std::weak_ptr<internal::ClientCore> core = s.core;
  const ArrayId id = s.id;
  s.submitted.OnReady([core, id, hosts = s.hosts](const absl::StatusOr<Unit>&) {
    if (auto c = core.lock()) c->QueueRelease(id, *hosts);
  });
}

const ir::Function& CompiledFunction::function() const { return *state_->function; }
const Mesh& CompiledFunction::mesh() const { return state_->mesh; }
const std::vector<ir::Shape>& CompiledFunction::in_shapes() const { return state_->in_shapes; }
const std::vector<ir::Shape>& CompiledFunction::out_shapes() const { return state_->out_shapes; }
const std::vector<Sharding>& CompiledFunction::in_shardings() const {
  return state_->in_shardings;
}
const std::vector<Sharding>& CompiledFunction::out_shardings() const {
  return state_->out_shardings;
}

ProgramId Program::id() const { return state_->plan->id; }
std::shared_ptr<const ProgramPlan> Program::plan() const { return state_->plan; }

int Program::num_nodes() const { return static_cast<int>(state_->plan->nodes.size()); }

absl::StatusOr<std::vector<Array>> Program::Run(absl::Span<const Array> args) const {
  return state_->core->Run(state_, args);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClusterConnection* cluster,
                                                        ClientOptions options) {
  if (cluster == nullptr) return absl::InvalidArgumentError("Connect: null cluster");
  CW_RETURN_IF_ERROR(CheckClientShare(options.share));
  CW_ASSIGN_OR_RETURN(const ClientId id, cluster->resources()->RegisterClient());
  if (absl::Status s = cluster->SetClientShare(id, options.share); !s.ok()) {
    cluster->resources()->UnregisterClient(id);
    return s;
  }
  auto core = std::make_shared<internal::ClientCore>(cluster, std::move(options), id);
  core->Start();
  return std::unique_ptr<Client>(new Client(std::move(core)));
}

Client::~Client() { Disconnect(); }

ClientId Client::id() const { return core_->id(); }

absl::StatusOr<Mesh> Client::AllocateMesh(std::vector<MeshAxis> axes, IslandId island) {
  MeshRequest request;
  request.axes = std::move(axes);
  request.island = island;
  return core_->AllocateMesh(request);
}

absl::StatusOr<Mesh> Client::AllocateMesh(const MeshRequest& request) {
  return core_->AllocateMesh(request);
}

absl::StatusOr<Array> Client::Put(const ir::Literal& value, const Mesh& mesh,
                                  const Sharding& sharding) {
  return core_->Put(value, mesh, sharding);
}

absl::Status Client::CheckPut(const ir::Shape& shape, const Mesh& mesh,
                              const Sharding& sharding) {
  return core_->CheckPut(shape, mesh, sharding).status();
}

absl::StatusOr<CompiledFunction> Client::Compile(const ir::Function& function, const Mesh& mesh,
                                                 const CompileOptions& options) {
  return core_->Compile(function, mesh, options);
}

absl::StatusOr<CompiledFunction> Client::Compile(
    absl::Span<const ir::Shape> global_parameter_shapes, const Mesh& mesh,
    const CompileOptions& options, const ShardFunctionBuilder& build) {
  if (global_parameter_shapes.size() != options.in_shardings.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(global_parameter_shapes.size(), " global parameter shapes for ",
                     options.in_shardings.size(), " in_shardings"));
  }
  std::vector<ir::Shape> shards;
  for (size_t k = 0; k < global_parameter_shapes.size(); ++k) {
    const ir::Shape& global = global_parameter_shapes[k];
    const Sharding& sharding = options.in_shardings[k];
    if (absl::Status s = sharding.Validate(global, mesh); !s.ok()) {
      return Annotate(s, absl::StrCat("parameter ", k, " (global ", global.ToString(),
                                      ") under sharding ", sharding.ToString()));
    }
    shards.push_back(sharding.ShardShape(global, mesh));
  }
  CW_ASSIGN_OR_RETURN(ir::Function function, build(shards));
  CW_RETURN_IF_ERROR(ir::Verify(function));
  if (function.num_parameters() != static_cast<int>(shards.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("function ", function.name(), " has ", function.num_parameters(),
                     " parameters, but ", shards.size(), " global shapes were given"));
  }
  for (size_t k = 0; k < shards.size(); ++k) {
    if (function.parameter_shape(static_cast<int>(k)) != shards[k]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "function ", function.name(), ": parameter ", k, " is ",
          function.parameter_shape(static_cast<int>(k)).ToString(), ", but its shard of ",
          global_parameter_shapes[k].ToString(), " under ",
          options.in_shardings[k].ToString(), " is ", shards[k].ToString()));
    }
  }
  return Compile(function, mesh, options);
}

absl::StatusOr<std::vector<Array>> Client::Call(const CompiledFunction& function,
                                                absl::Span<const Array> args) {
  return core_->Call(function, args);
}

ProgramBuilder Client::NewProgram(std::string name) { return core_->NewProgram(std::move(name)); }

void Client::Disconnect() { core_->Disconnect(); }

Future<Unit> Client::Flush() { return core_->Flush(); }

absl::Status Client::SetShare(const ClientShare& share) { return core_->SetShare(share); }

int64_t Client::programs_lowered() const { return core_->programs_lowered(); }

int64_t Client::peak_unforwarded_runs() const { return core_->peak_unforwarded_runs(); }

}  // namespace causeway
