// Control flow: If, Loop and Scan. Their subgraphs become sub-functions of
// the IR's structured control flow (kConditional, kWhile), so a model's
// data-dependent branches and loops run inside one executable, on its
// device. A subgraph reads values of the graphs around it by name: those
// known when compiled are entered into it as known values (they fold as in
// the main graph), the others become extra parameters of its function,
// passed as arguments (If) or carried unchanged (Loop, Scan).
//
// An If whose condition is known when compiled is converted as the branch
// it takes, inline. Loop and Scan outputs that stack one row per iteration
// need the number of iterations when compiled: Scan always has it; a Loop
// has it when its trip count is known and its condition cannot end it
// early.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using Graph = ::onnx::GraphProto;

// The names `g` reads from the graphs around it (nested subgraphs
// included), in order of first use.
void FreeNames(const Graph& g, std::vector<std::string>& out) {
  absl::flat_hash_set<std::string> defined;
  for (const auto& i : g.input()) defined.insert(i.name());
  for (const auto& i : g.initializer()) defined.insert(i.name());
  const auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.contains(name) &&
        std::find(out.begin(), out.end(), name) == out.end()) {
      out.push_back(name);
    }
  };
  for (const auto& node : g.node()) {
    for (const auto& i : node.input()) use(i);
    for (const auto& a : node.attribute()) {
      std::vector<std::string> inner;
      if (a.has_g()) FreeNames(a.g(), inner);
      for (const auto& sub : a.graphs()) FreeNames(sub, inner);
      for (const auto& name : inner) use(name);
    }
    for (const auto& o : node.output()) defined.insert(o);
  }
  for (const auto& o : g.output()) use(o.name());
}

// The outer values `graphs` read that are computed at run time (weights
// made parameters too): they are passed to the sub-functions as extra
// parameters.
absl::StatusOr<std::vector<std::string>> RuntimeCaptures(const Converter& outer,
                                                         const std::vector<const Graph*>& graphs) {
  std::vector<std::string> names, out;
  for (const Graph* g : graphs) FreeNames(*g, names);
  for (const std::string& name : names) {
    auto it = outer.values.find(name);
    if (it == outer.values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a subgraph reads '", name, "', which is not defined before it"));
    }
    if (!it->second.known.has_value() || it->second.trainable) out.push_back(name);
  }
  return out;
}

struct Formal {
  ir::Shape shape;
  int32_t onnx_type = 0;
};

struct Subgraph {
  // Parameters: the graph's inputs, then the captures; results: its outputs.
  ir::Function function;
  std::vector<int32_t> output_types;
};

absl::StatusOr<Subgraph> ConvertSubgraph(const Converter& outer, const Graph& g,
                                         const std::vector<Formal>& formals,
                                         const std::vector<std::string>& captures,
                                         const std::string& what) {
  if (g.input_size() != static_cast<int>(formals.size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " declares ", g.input_size(),
                                                   " inputs; it is given ", formals.size()));
  }
  Converter c(g.name().empty() ? what : g.name(), outer.opset);
  // Known outer values stay known inside (they fold as in the outer graph).
  std::vector<std::string> free;
  FreeNames(g, free);
  for (const std::string& name : free) {
    auto it = outer.values.find(name);
    if (it == outer.values.end() || !it->second.known.has_value() || it->second.trainable) {
      continue;
    }
    Entry e = it->second;
    e.value.reset();
    c.values[name] = std::move(e);
  }
  CW_RETURN_IF_ERROR(AddInitializers(c, g));
  for (int i = 0; i < g.input_size(); ++i) {
    const Formal& f = formals[static_cast<size_t>(i)];
    const auto& declared = g.input(i).type().tensor_type();
    if (declared.elem_type() != 0) {
      absl::StatusOr<ir::DType> d = DTypeOf(declared.elem_type());
      if (!d.ok() || *d != f.shape.dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, "'s input '", g.input(i).name(), "' is declared ", TypeName(declared.elem_type()),
            "; it is given ", f.shape.ToString()));
      }
    }
    Entry& e = c.values[g.input(i).name()];
    e = Entry();
    e.shape = f.shape;
    e.onnx_type = f.onnx_type;
    e.value = c.b.Parameter(f.shape);
  }
  for (const std::string& name : captures) {
    Entry e = outer.values.at(name);
    e.known.reset();
    e.value = c.b.Parameter(e.shape);
    c.values[name] = std::move(e);
  }
  absl::Status s = ConvertNodes(c, g);
  if (!s.ok()) return Annotate(s, what);
  Subgraph out;
  std::vector<ir::Value> results;
  for (const auto& o : g.output()) {
    absl::StatusOr<ir::Value> v = c.Named(o.name());
    if (!v.ok()) return Annotate(v.status(), absl::StrCat(what, "'s output"));
    results.push_back(*v);
    out.output_types.push_back(c.values[o.name()].onnx_type);
  }
  absl::StatusOr<ir::Function> f = c.b.Build(results);
  if (!f.ok()) return Annotate(f.status(), what);
  out.function = std::move(*f);
  return out;
}

const Graph* GraphAttr(const Converter& c, const Node& n, const char* name) {
  const ::onnx::AttributeProto* a = c.Attr(n, name);
  return a != nullptr && a->has_g() ? &a->g() : nullptr;
}

// Whether a known tensor's first element is non-zero (a condition).
bool KnownTrue(const Entry& e) {
  if (!e.known->ints.empty()) return e.known->ints[0] != 0;
  if (e.known->literal.shape().dtype == ir::DType::kF32) {
    return e.known->literal.values<float>()[0] != 0;
  }
  return e.known->literal.values<uint8_t>()[0] != 0;
}

// A condition (pred of one element) as pred[].
absl::StatusOr<ir::Value> ScalarCondition(Converter& c, const Node& n, int i) {
  CW_ASSIGN_OR_RETURN(ir::Value v, c.In(n, i));
  const ir::Shape s = c.ShapeOf(v);
  if (s.dtype != ir::DType::kPred || s.num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the condition is ", s.ToString(), "; it must be one bool"));
  }
  return s.dims.empty() ? v : c.b.Reshape(v, {});
}

std::vector<ir::Value> Args(Converter& c, const std::vector<std::string>& names,
                            absl::Status& status) {
  std::vector<ir::Value> out;
  for (const std::string& name : names) {
    absl::StatusOr<ir::Value> v = c.Named(name);
    if (!v.ok()) {
      status = v.status();
      return {};
    }
    out.push_back(*v);
  }
  return out;
}

absl::Status If(Converter& c, const Node& n) {
  const Graph* then_g = GraphAttr(c, n, "then_branch");
  const Graph* else_g = GraphAttr(c, n, "else_branch");
  if (then_g == nullptr || else_g == nullptr) {
    return absl::InvalidArgumentError("If needs then_branch and else_branch graphs");
  }
  for (const Graph* g : {then_g, else_g}) {
    if (g->output_size() != n.output_size()) {
      return absl::InvalidArgumentError(absl::StrCat("a branch gives ", g->output_size(),
                                                     " outputs; the If has ", n.output_size()));
    }
  }
  CW_ASSIGN_OR_RETURN(const Entry* cond, c.Get(n, 0));
  if (cond->known.has_value()) {
    // Known when compiled: the branch taken, inline.
    if (cond->known->literal.shape().num_elements() != 1) {
      return absl::InvalidArgumentError("the condition must be one bool");
    }
    const Graph& g = KnownTrue(*cond) ? *then_g : *else_g;
    CW_RETURN_IF_ERROR(AddInitializers(c, g));
    CW_RETURN_IF_ERROR(ConvertNodes(c, g));
    for (int i = 0; i < n.output_size(); ++i) {
      auto it = c.values.find(g.output(i).name());
      if (it == c.values.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the branch's output '", g.output(i).name(), "' is never computed"));
      }
      if (!n.output(i).empty()) {
        const Entry copy = it->second;
        c.values[n.output(i)] = copy;
      }
    }
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(ir::Value selector, ScalarCondition(c, n, 0));
  CW_ASSIGN_OR_RETURN(std::vector<std::string> captures, RuntimeCaptures(c, {then_g, else_g}));
  CW_ASSIGN_OR_RETURN(Subgraph then_f, ConvertSubgraph(c, *then_g, {}, captures, "then_branch"));
  CW_ASSIGN_OR_RETURN(Subgraph else_f, ConvertSubgraph(c, *else_g, {}, captures, "else_branch"));
  for (int i = 0; i < n.output_size(); ++i) {
    const ir::Shape& a = then_f.function.output_shape(i);
    const ir::Shape& b = else_f.function.output_shape(i);
    if (a != b) {
      return absl::UnimplementedError(absl::StrCat(
          "output ", i, " is ", a.ToString(), " in then_branch and ", b.ToString(),
          " in else_branch (Causeway's shapes are static: both branches must agree)"));
    }
  }
  absl::Status s;
  const std::vector<ir::Value> args = Args(c, captures, s);
  CW_RETURN_IF_ERROR(s);
  const std::vector<ir::Value> results =
      c.b.Conditional(selector, {then_f.function, else_f.function}, args);
  for (size_t i = 0; i < results.size(); ++i) {
    c.Set(n, static_cast<int>(i), results[i], then_f.output_types[i]);
  }
  return absl::OkStatus();
}

// A stacking output's buffer: f32 and i32 stay, pred is stacked as i32.
ir::DType StackDType(ir::DType d) { return d == ir::DType::kPred ? ir::DType::kI32 : d; }

// `buffer` with row `row` (an i32[]) along `axis` set to `update` (zeros
// there before: each row is written once).
ir::Value StackRow(ir::FunctionBuilder& b, ir::Value buffer, ir::Value row, ir::Value update,
                   int64_t axis) {
  std::vector<int64_t> dims = b.shape(update).dims;
  dims.insert(dims.begin() + axis, 1);
  if (b.shape(update).dtype == ir::DType::kPred) update = b.Convert(update, ir::DType::kI32);
  return b.ScatterAdd(buffer, b.Reshape(row, {1}), b.Reshape(update, dims), axis);
}

ir::Value ConstI32(ir::FunctionBuilder& b, int64_t v) {
  return b.Constant(ir::Literal::I32({}, {static_cast<int32_t>(v)}));
}

ir::Value ConstPred(ir::FunctionBuilder& b, bool v) {
  ir::Literal l(ir::Shape(ir::DType::kPred, {}));
  l.mutable_values<uint8_t>()[0] = v;
  return b.Constant(std::move(l));
}

std::vector<ir::Value> Params(ir::FunctionBuilder& b, const std::vector<ir::Shape>& shapes) {
  std::vector<ir::Value> out;
  for (const ir::Shape& s : shapes) out.push_back(b.Parameter(s));
  return out;
}

// Whether the body's condition output can be false: it is neither its
// condition input passed through nor a constant true.
bool CanEndEarly(const ir::Function& body) {
  const int out = body.outputs()[0];
  if (out == body.parameters()[1]) return false;
  const ir::Instruction& inst = body.instructions()[static_cast<size_t>(out)];
  if (inst.op != ir::OpKind::kConstant) return true;
  for (uint8_t v : inst.literal.values<uint8_t>()) {
    if (v == 0) return true;
  }
  return false;
}

absl::Status Loop(Converter& c, const Node& n) {
  const Graph* body = GraphAttr(c, n, "body");
  if (body == nullptr) return absl::InvalidArgumentError("Loop needs a body graph");
  if (n.input_size() < 2) {
    return absl::InvalidArgumentError("Loop takes a trip count and a condition (either empty)");
  }
  const int carried = n.input_size() - 2;
  const int stacked = body->output_size() - 1 - carried;
  if (stacked < 0 || n.output_size() > carried + stacked) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body gives ", body->output_size(), " outputs for ", carried, " loop-carried values"));
  }
  const bool has_trips = c.Has(n, 0), has_cond = c.Has(n, 1);
  if (!has_trips && !has_cond) {
    return absl::InvalidArgumentError("a Loop with neither a trip count nor a condition never ends");
  }
  std::optional<int64_t> known_trips;
  std::optional<ir::Value> trips;
  if (has_trips) {
    CW_ASSIGN_OR_RETURN(const Entry* m, c.Get(n, 0));
    if (m->known.has_value() && !m->known->ints.empty()) {
      // Iterations are counted in i32 (docs/ONNX.md): more is refused, not
      // clamped. A negative count runs none.
      const int64_t given = m->known->ints[0];
      if (given > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the trip count ", given, " is past 2^31-1, the most iterations a loop counts"));
      }
      known_trips = std::max<int64_t>(given, 0);
    } else {
      CW_ASSIGN_OR_RETURN(ir::Value v, c.In(n, 0));
      if (c.ShapeOf(v).dtype != ir::DType::kI32 || c.ShapeOf(v).num_elements() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("the trip count is ", c.ShapeOf(v).ToString(), "; it must be one integer"));
      }
      trips = c.b.Reshape(v, {});
    }
  }
  std::optional<bool> known_cond;
  if (has_cond) {
    CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 1));
    if (e->known.has_value()) known_cond = KnownTrue(*e);
  }
  std::vector<Formal> formals = {{ir::Shape(ir::DType::kI32, {}), kInt64},
                                 {ir::Shape(ir::DType::kPred, {}), kBool}};
  for (int i = 0; i < carried; ++i) {
    CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 2 + i));
    formals.push_back({e->shape, e->onnx_type});
  }
  if (known_cond == false || known_trips == 0) {
    // No iteration: the initial values; stacked outputs would be empty.
    if (stacked > 0) {
      return absl::UnimplementedError("a Loop that runs no iteration has empty scan outputs");
    }
    for (int i = 0; i < n.output_size(); ++i) {
      if (n.output(i).empty()) continue;
      CW_ASSIGN_OR_RETURN(const Entry* e, c.Get(n, 2 + i));
      const Entry copy = *e;
      c.values[n.output(i)] = copy;
    }
    return absl::OkStatus();
  }
  CW_ASSIGN_OR_RETURN(std::vector<std::string> captures, RuntimeCaptures(c, {body}));
  CW_ASSIGN_OR_RETURN(Subgraph sub, ConvertSubgraph(c, *body, formals, captures, "Loop's body"));
  const ir::Function& f = sub.function;
  if (f.output_shape(0).dtype != ir::DType::kPred || f.output_shape(0).num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body's condition output is ", f.output_shape(0).ToString()));
  }
  for (int i = 0; i < carried; ++i) {
    if (f.output_shape(1 + i) != formals[2 + static_cast<size_t>(i)].shape) {
      return absl::UnimplementedError(absl::StrCat(
          "loop-carried value ", i, " goes in as ", formals[2 + static_cast<size_t>(i)].shape.ToString(),
          " and comes out as ", f.output_shape(1 + i).ToString(),
          " (Causeway's shapes are static)"));
    }
  }
  const bool ends_early = has_cond && CanEndEarly(f);
  if (stacked > 0 && (!known_trips.has_value() || ends_early)) {
    return absl::UnimplementedError(
        "the Loop's scan outputs stack one row per iteration, and the number of iterations is "
        "known only at run time (it needs a trip count known when compiled and a condition that "
        "cannot end the loop early)");
  }
  // The carry: iteration, condition, the carried values, the captures, the
  // trip count (at run time), the stacking buffers.
  absl::Status s;
  std::vector<ir::Value> init = {ConstI32(c.b, 0)};
  if (has_cond) {
    CW_ASSIGN_OR_RETURN(ir::Value cond0, ScalarCondition(c, n, 1));
    init.push_back(cond0);
  } else {
    init.push_back(ConstPred(c.b, true));
  }
  for (int i = 0; i < carried; ++i) {
    CW_ASSIGN_OR_RETURN(ir::Value v, c.In(n, 2 + i));
    init.push_back(v);
  }
  for (ir::Value v : Args(c, captures, s)) init.push_back(v);
  CW_RETURN_IF_ERROR(s);
  const size_t trips_at = init.size();
  if (trips.has_value()) init.push_back(*trips);
  const size_t stacks_at = init.size();
  for (int k = 0; k < stacked; ++k) {
    const ir::Shape& row = f.output_shape(1 + carried + k);
    std::vector<int64_t> dims = row.dims;
    dims.insert(dims.begin(), *known_trips);
    init.push_back(c.Full(0, StackDType(row.dtype), dims));
  }
  std::vector<ir::Shape> carry;
  for (ir::Value v : init) carry.push_back(c.ShapeOf(v));

  ir::FunctionBuilder cb("loop_condition");
  const std::vector<ir::Value> p = Params(cb, carry);
  ir::Value go = p[1];
  if (has_trips) {
    const ir::Value limit = trips.has_value() ? p[trips_at] : ConstI32(cb, *known_trips);
    const ir::Value below = cb.Compare(p[0], limit, ir::Comparison::kLt);
    go = has_cond ? cb.Select(p[1], below, ConstPred(cb, false)) : below;
  }
  CW_ASSIGN_OR_RETURN(ir::Function cond_fn, cb.Build({go}));
  ir::FunctionBuilder bb("loop_body");
  const std::vector<ir::Value> q = Params(bb, carry);
  // The body's arguments: iteration, condition, carried values, captures.
  const std::vector<ir::Value> r =
      bb.Call(f, std::vector<ir::Value>(q.begin(), q.begin() + 2 + carried + captures.size()));
  std::vector<ir::Value> next = {bb.Add(q[0], ConstI32(bb, 1)),
                                 has_cond ? bb.Reshape(r[0], {}) : q[1]};
  for (int i = 0; i < carried; ++i) next.push_back(r[1 + static_cast<size_t>(i)]);
  for (size_t i = 2 + carried; i < stacks_at; ++i) next.push_back(q[i]);
  for (int k = 0; k < stacked; ++k) {
    next.push_back(StackRow(bb, q[stacks_at + static_cast<size_t>(k)], q[0],
                            r[1 + static_cast<size_t>(carried + k)], 0));
  }
  CW_ASSIGN_OR_RETURN(ir::Function body_fn, bb.Build(next));
  const std::vector<ir::Value> out = c.b.While(cond_fn, body_fn, init);
  if (!c.b.status().ok()) return c.b.status();
  for (int i = 0; i < carried && i < n.output_size(); ++i) {
    c.Set(n, i, out[2 + static_cast<size_t>(i)], formals[2 + static_cast<size_t>(i)].onnx_type);
  }
  for (int k = 0; k < stacked && carried + k < n.output_size(); ++k) {
    ir::Value v = out[stacks_at + static_cast<size_t>(k)];
    const ir::Shape& row = f.output_shape(1 + carried + k);
    if (row.dtype == ir::DType::kPred) v = c.b.Convert(v, ir::DType::kPred);
    c.Set(n, carried + k, v, sub.output_types[1 + static_cast<size_t>(carried + k)]);
  }
  return absl::OkStatus();
}

// Scan (opset 9 on): the state through the body once per slice of the
// scan inputs along their axes; scan outputs stack the body's per slice.
absl::Status Scan(Converter& c, const Node& n) {
  if (c.opset < 9) {
    return absl::UnimplementedError("Scan before opset 9 (with a batch axis and sequence_lens)");
  }
  const Graph* body = GraphAttr(c, n, "body");
  if (body == nullptr) return absl::InvalidArgumentError("Scan needs a body graph");
  const int64_t num_in = c.AttrInt(n, "num_scan_inputs", -1);
  const int states = n.input_size() - static_cast<int>(num_in);
  const int num_out = body->output_size() - states;
  if (num_in < 1 || states < 0 || num_out < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_scan_inputs is ", num_in, " for ",
                                                   n.input_size(), " inputs"));
  }
  const auto attr_or = [&](const char* name, int64_t count) {
    std::vector<int64_t> v = c.AttrInts(n, name).value_or(std::vector<int64_t>());
    if (v.empty()) v.assign(static_cast<size_t>(count), 0);
    return v;
  };
  const std::vector<int64_t> in_axes = attr_or("scan_input_axes", num_in);
  const std::vector<int64_t> in_dirs = attr_or("scan_input_directions", num_in);
  const std::vector<int64_t> out_axes = attr_or("scan_output_axes", num_out);
  const std::vector<int64_t> out_dirs = attr_or("scan_output_directions", num_out);
  if (static_cast<int64_t>(in_axes.size()) != num_in || static_cast<int64_t>(in_dirs.size()) != num_in ||
      static_cast<int>(out_axes.size()) != num_out || static_cast<int>(out_dirs.size()) != num_out) {
    return absl::InvalidArgumentError("a scan axis or direction attribute has the wrong length");
  }
  std::vector<Formal> formals;
  std::vector<ir::Value> init = {ConstI32(c.b, 0)};
  for (int i = 0; i < states; ++i) {
    CW_ASSIGN_OR_RETURN(ir::Value v, c.In(n, i));
    formals.push_back({c.ShapeOf(v), c.TypeOf(n, i)});
    init.push_back(v);
  }
  int64_t length = -1;
  std::vector<int64_t> axes;
  for (int j = 0; j < num_in; ++j) {
    CW_ASSIGN_OR_RETURN(ir::Value v, c.In(n, states + j));
    ir::Shape s = c.ShapeOf(v);
    CW_ASSIGN_OR_RETURN(int64_t axis, Axis(in_axes[static_cast<size_t>(j)], s.rank()));
    if (s.rank() == 0) return absl::InvalidArgumentError("a scan input is a scalar");
    const int64_t len = s.dims[static_cast<size_t>(axis)];
    if (length >= 0 && len != length) {
      return absl::InvalidArgumentError(
          absl::StrCat("scan inputs have ", length, " and ", len, " slices along their axes"));
    }
    length = len;
    axes.push_back(axis);
    s.dims.erase(s.dims.begin() + axis);
    formals.push_back({s, c.TypeOf(n, states + j)});
    init.push_back(v);
  }
  if (length == 0) {
    return absl::UnimplementedError("a Scan over no slices (its outputs would be empty)");
  }
  CW_ASSIGN_OR_RETURN(std::vector<std::string> captures, RuntimeCaptures(c, {body}));
  CW_ASSIGN_OR_RETURN(Subgraph sub, ConvertSubgraph(c, *body, formals, captures, "Scan's body"));
  const ir::Function& f = sub.function;
  for (int i = 0; i < states; ++i) {
    if (f.output_shape(i) != formals[static_cast<size_t>(i)].shape) {
      return absl::UnimplementedError(absl::StrCat(
          "state ", i, " goes in as ", formals[static_cast<size_t>(i)].shape.ToString(),
          " and comes out as ", f.output_shape(i).ToString(), " (Causeway's shapes are static)"));
    }
  }
  absl::Status s;
  for (ir::Value v : Args(c, captures, s)) init.push_back(v);
  CW_RETURN_IF_ERROR(s);
  const size_t stacks_at = init.size();
  std::vector<int64_t> stack_axes;
  for (int k = 0; k < num_out; ++k) {
    const ir::Shape& row = f.output_shape(states + k);
    CW_ASSIGN_OR_RETURN(int64_t axis, Axis(out_axes[static_cast<size_t>(k)], row.rank() + 1));
    std::vector<int64_t> dims = row.dims;
    dims.insert(dims.begin() + axis, length);
    stack_axes.push_back(axis);
    init.push_back(c.Full(0, StackDType(row.dtype), dims));
  }
  std::vector<ir::Shape> carry;
  for (ir::Value v : init) carry.push_back(c.ShapeOf(v));

  ir::FunctionBuilder cb("scan_condition");
  const std::vector<ir::Value> p = Params(cb, carry);
  CW_ASSIGN_OR_RETURN(ir::Function cond_fn,
                      cb.Build({cb.Compare(p[0], ConstI32(cb, length), ir::Comparison::kLt)}));
  ir::FunctionBuilder bb("scan_body");
  const std::vector<ir::Value> q = Params(bb, carry);
  const ir::Value reversed = bb.Sub(ConstI32(bb, length - 1), q[0]);
  std::vector<ir::Value> args(q.begin() + 1, q.begin() + 1 + states);
  for (int j = 0; j < num_in; ++j) {
    const ir::Value x = q[1 + static_cast<size_t>(states + j)];
    const ir::Value at = in_dirs[static_cast<size_t>(j)] != 0 ? reversed : q[0];
    args.push_back(bb.Reshape(bb.Gather(x, bb.Reshape(at, {1}), axes[static_cast<size_t>(j)]),
                              formals[static_cast<size_t>(states + j)].shape.dims));
  }
  args.insert(args.end(), q.begin() + 1 + states + num_in, q.begin() + static_cast<long>(stacks_at));
  const std::vector<ir::Value> r = bb.Call(f, args);
  std::vector<ir::Value> next = {bb.Add(q[0], ConstI32(bb, 1))};
  for (int i = 0; i < states; ++i) next.push_back(r[static_cast<size_t>(i)]);
  for (size_t i = 1 + states; i < stacks_at; ++i) next.push_back(q[i]);
  for (int k = 0; k < num_out; ++k) {
    const ir::Value at = out_dirs[static_cast<size_t>(k)] != 0 ? reversed : q[0];
    next.push_back(StackRow(bb, q[stacks_at + static_cast<size_t>(k)], at,
                            r[static_cast<size_t>(states + k)], stack_axes[static_cast<size_t>(k)]));
  }
  CW_ASSIGN_OR_RETURN(ir::Function body_fn, bb.Build(next));
  const std::vector<ir::Value> out = c.b.While(cond_fn, body_fn, init);
  if (!c.b.status().ok()) return c.b.status();
  for (int i = 0; i < states; ++i) {
    c.Set(n, i, out[1 + static_cast<size_t>(i)], formals[static_cast<size_t>(i)].onnx_type);
  }
  for (int k = 0; k < num_out; ++k) {
    ir::Value v = out[stacks_at + static_cast<size_t>(k)];
    if (f.output_shape(states + k).dtype == ir::DType::kPred) v = c.b.Convert(v, ir::DType::kPred);
    c.Set(n, states + k, v, sub.output_types[static_cast<size_t>(states + k)]);
  }
  return absl::OkStatus();
}

}  // namespace

void AddControlFlowOps(OpTable& t) {
  t["If"] = If;
  t["Loop"] = Loop;
  t["Scan"] = Scan;
}

}  // namespace causeway::onnx_import
