#include "causeway/ir/autodiff.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/builder.h"
#include "causeway/ir/convolution.h"
#include "causeway/ir/verifier.h"

namespace causeway::ir {
namespace {

// One reverse pass over `f`, emitting into `b`.
class Reverse {
 public:
  Reverse(const Function& f, FunctionBuilder& b) : f_(f), b_(b) {}

  // Replays the forward computation; marks values that depend on `wrt`.
  void Forward(absl::Span<const int> wrt) {
    const auto& insts = f_.instructions();
    fwd_.resize(insts.size());
    adj_.assign(insts.size(), Value{});
    active_.assign(insts.size(), false);
    for (int k = 0; k < f_.num_parameters(); ++k) {
      fwd_[f_.parameters()[k]] = b_.Parameter(f_.parameter_shape(k));
    }
    for (int k : wrt) active_[f_.parameters()[k]] = true;
    for (size_t i = 0; i < insts.size(); ++i) {
      const Instruction& inst = insts[i];
      if (inst.op == OpKind::kParameter) continue;
      Instruction copy = inst;
      for (int& o : copy.operands) o = fwd_[o].id;
      fwd_[i] = b_.AddInstruction(std::move(copy));
      if (IsMultiResult(inst.op)) {
        bool depends = false;
        for (int o : inst.operands) depends = depends || active_[o];
        if (!depends) continue;
        if (inst.op == OpKind::kConditional) {
          // Its f32 results (get_result) are active through it.
          active_[i] = true;
        } else if (error_.ok()) {
          error_ = absl::UnimplementedError(absl::StrCat(
              "instruction ", i, " (", OpName(inst.op), ") depends on a parameter being "
              "differentiated; reverse-mode autodiff through a while loop is not supported "
              "(its trip count is data; pass the value around the loop, or unroll it)"));
        }
        continue;
      }
      if (inst.shape.dtype != DType::kF32) {
        // A float kept in a storage dtype would carry the gradient on, but
        // adjoints are f32 only: refuse it rather than drop the gradient.
        if (IsFloating(inst.shape.dtype) && error_.ok()) {
          for (int o : inst.operands) {
            if (!active_[o]) continue;
            error_ = absl::UnimplementedError(absl::StrCat(
                "instruction ", i, " (", OpName(inst.op), ") makes a ",
                DTypeName(inst.shape.dtype), " value from one being differentiated; "
                "gradients flow through f32 values only (keep the value in f32)"));
            break;
          }
        }
        continue;
      }
      for (int o : inst.operands) active_[i] = active_[i] || active_[o];
    }
  }

  void Backward() {
    const auto& insts = f_.instructions();
    adj_[f_.outputs()[0]] = b_.ConstantF32(1.0f);
    for (int i = static_cast<int>(insts.size()) - 1; i >= 0; --i) {
      if (insts[i].op == OpKind::kConditional && active_[i]) {
        ConditionalRule(i, insts[i]);
        if (!b_.status().ok() || !error_.ok()) return;
        continue;
      }
      if (adj_[i].id < 0 || !active_[i]) continue;
      Rule(i, insts[i], adj_[i]);
      if (!b_.status().ok()) return;
    }
  }

  Value Adjoint(int instruction) {
    if (adj_[instruction].id >= 0) return adj_[instruction];
    return Zeros(f_.instructions()[instruction].shape);
  }
  Value forward(int instruction) const { return fwd_[instruction]; }
  // Set by Forward when a gradient would have to flow through an op that
  // has no rule.
  const absl::Status& error() const { return error_; }

 private:
  const Shape& OperandShape(const Instruction& inst, int k) const {
    return f_.instructions()[inst.operands[k]].shape;
  }
  bool Active(const Instruction& inst, int k) const { return active_[inst.operands[k]]; }
  Value X(const Instruction& inst, int k) const { return fwd_[inst.operands[k]]; }
  Value Zeros(const Shape& s) { return b_.Full(0.0f, s.dims); }
  Value Scalar(float v, const Shape& s) { return b_.Full(v, s.dims); }
  void Acc(const Instruction& inst, int k, Value g) {
    Value& a = adj_[inst.operands[k]];
    a = a.id < 0 ? g : b_.Add(a, g);
  }
  // Dims of the operand kept by a reduction over `axes`.
  static std::vector<int64_t> Kept(int rank, const std::vector<int64_t>& axes) {
    std::vector<int64_t> kept;
    for (int d = 0; d < rank; ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(d);
    }
    return kept;
  }
  static std::vector<int64_t> AllDims(int rank) { return Kept(rank, {}); }

  void Rule(int i, const Instruction& inst, Value g);
  // The gradient of a conditional: a conditional over the branches'
  // vector-Jacobian products, picked by the same selector.
  void ConditionalRule(int i, const Instruction& inst);
  void DotGeneralRule(const Instruction& inst, Value g);
  // The three convolution ops are one bilinear form of (x, w, y): the
  // gradient against either operand is the op computing it from the other
  // operand and the result's adjoint.
  void ConvolutionRule(const Instruction& inst, Value g);
  // The adjoint of a slice of `in_dims` from `starts` by `steps` (empty:
  // 1): g spread to the slice's elements, zeros elsewhere.
  Value SliceAdjoint(Value g, const std::vector<int64_t>& in_dims,
                     const std::vector<int64_t>& starts, const std::vector<int64_t>& steps);
  // Pooling's: each window position's slice of the padded input, as the
  // pooling op's reading of it, gets g (sum) or, for max, g where it holds
  // the window's maximum, only the first such position of each window.
  void PoolRule(const Instruction& inst, Value result, Value g);

  const Function& f_;
  FunctionBuilder& b_;
  std::vector<Value> fwd_;
  std::vector<Value> adj_;
  std::vector<bool> active_;
  absl::Status error_;
  // Adjoints of the results of multi-result instructions, by instruction,
  // gathered from the get_results that read them.
  std::map<int, std::vector<Value>> result_adj_;
};

void Reverse::Rule(int i, const Instruction& inst, Value g) {
  const Shape& s = inst.shape;
  const Value y = fwd_[i];
  switch (inst.op) {
    case OpKind::kAdd:
      if (Active(inst, 0)) Acc(inst, 0, g);
      if (Active(inst, 1)) Acc(inst, 1, g);
      return;
    case OpKind::kSub:
      if (Active(inst, 0)) Acc(inst, 0, g);
      if (Active(inst, 1)) Acc(inst, 1, b_.Neg(g));
      return;
    case OpKind::kMul:
      if (Active(inst, 0)) Acc(inst, 0, b_.Mul(g, X(inst, 1)));
      if (Active(inst, 1)) Acc(inst, 1, b_.Mul(g, X(inst, 0)));
      return;
    case OpKind::kDiv:
      if (Active(inst, 0)) Acc(inst, 0, b_.Div(g, X(inst, 1)));
      if (Active(inst, 1)) Acc(inst, 1, b_.Neg(b_.Div(b_.Mul(g, y), X(inst, 1))));
      return;
    case OpKind::kMax:
    case OpKind::kMin: {
      const Value first = b_.Compare(X(inst, 0), X(inst, 1),
                                     inst.op == OpKind::kMax ? Comparison::kGe : Comparison::kLe);
      if (Active(inst, 0)) Acc(inst, 0, b_.Select(first, g, Zeros(s)));
      if (Active(inst, 1)) Acc(inst, 1, b_.Select(first, Zeros(s), g));
      return;
    }
    case OpKind::kPow:
      if (Active(inst, 0)) {
        const Value em1 = b_.Sub(X(inst, 1), Scalar(1, s));
        Acc(inst, 0, b_.Mul(g, b_.Mul(X(inst, 1), b_.Pow(X(inst, 0), em1))));
      }
      if (Active(inst, 1)) Acc(inst, 1, b_.Mul(g, b_.Mul(b_.Log(X(inst, 0)), y)));
      return;
    case OpKind::kNeg:
      return Acc(inst, 0, b_.Neg(g));
    case OpKind::kAbs:
      return Acc(inst, 0, b_.Mul(g, b_.Sign(X(inst, 0))));
    case OpKind::kExp:
      return Acc(inst, 0, b_.Mul(g, y));
    case OpKind::kLog:
      return Acc(inst, 0, b_.Div(g, X(inst, 0)));
    case OpKind::kTanh:
      return Acc(inst, 0, b_.Mul(g, b_.Sub(Scalar(1, s), b_.Mul(y, y))));
    case OpKind::kSin:
      return Acc(inst, 0, b_.Mul(g, b_.Cos(X(inst, 0))));
    case OpKind::kCos:
      return Acc(inst, 0, b_.Neg(b_.Mul(g, b_.Sin(X(inst, 0)))));
    case OpKind::kAtan:  // 1 / (1 + x^2)
      return Acc(inst, 0, b_.Div(g, b_.Add(Scalar(1, s), b_.Mul(X(inst, 0), X(inst, 0)))));
    case OpKind::kErf:  // 2 / sqrt(pi) exp(-x^2)
      return Acc(inst, 0,
                 b_.Mul(g, b_.Mul(Scalar(1.1283791670955126f, s),
                                  b_.Exp(b_.Neg(b_.Mul(X(inst, 0), X(inst, 0)))))));
    case OpKind::kGelu:
      return Acc(inst, 0, b_.GeluGrad(X(inst, 0), g));
    case OpKind::kSoftmax:
      return Acc(inst, 0, b_.SoftmaxGrad(y, g));
    case OpKind::kNormalize:
      if (Active(inst, 0)) Acc(inst, 0, b_.NormalizeGrad(X(inst, 0), X(inst, 1), g));
      return;
    case OpKind::kLogistic:
      return Acc(inst, 0, b_.Mul(g, b_.Mul(y, b_.Sub(Scalar(1, s), y))));
    case OpKind::kSqrt:
      return Acc(inst, 0, b_.Div(b_.Mul(g, Scalar(0.5f, s)), y));
    case OpKind::kRsqrt:  // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y / x
      return Acc(inst, 0, b_.Mul(g, b_.Div(b_.Mul(y, Scalar(-0.5f, s)), X(inst, 0))));
    case OpKind::kSelect:
      if (Active(inst, 1)) Acc(inst, 1, b_.Select(X(inst, 0), g, Zeros(s)));
      if (Active(inst, 2)) Acc(inst, 2, b_.Select(X(inst, 0), Zeros(s), g));
      return;
    case OpKind::kConvert:
    case OpKind::kDelay:
      if (Active(inst, 0)) Acc(inst, 0, g);
      return;
    case OpKind::kBroadcast: {
      const Shape& in = OperandShape(inst, 0);
      std::vector<int64_t> sum;
      for (int d = 0; d < s.rank(); ++d) {
        auto it = std::find(inst.dims.begin(), inst.dims.end(), d);
        if (it == inst.dims.end() || (in.dims[it - inst.dims.begin()] == 1 && s.dims[d] != 1)) {
          sum.push_back(d);
        }
      }
      return Acc(inst, 0, b_.Reshape(b_.ReduceSum(g, sum), in.dims));
    }
    case OpKind::kReshape:
      return Acc(inst, 0, b_.Reshape(g, OperandShape(inst, 0).dims));
    case OpKind::kTranspose: {
      std::vector<int64_t> inverse(inst.dims.size());
      for (size_t d = 0; d < inst.dims.size(); ++d) inverse[inst.dims[d]] = d;
      return Acc(inst, 0, b_.Transpose(g, inverse));
    }
    case OpKind::kReduceSum: {
      const Shape& in = OperandShape(inst, 0);
      return Acc(inst, 0, b_.Broadcast(g, in.dims, Kept(in.rank(), inst.dims)));
    }
    case OpKind::kReduceMax:
    case OpKind::kReduceMin: {
      const Shape& in = OperandShape(inst, 0);
      const std::vector<int64_t> kept = Kept(in.rank(), inst.dims);
      const Value hit = b_.Compare(X(inst, 0), b_.Broadcast(y, in.dims, kept), Comparison::kEq);
      return Acc(inst, 0,
                 b_.Select(hit, b_.Broadcast(g, in.dims, kept), Zeros(in)));
    }
    case OpKind::kMatmul:
      // g b^T and a^T g as dot_generals, which the backend runs with BLAS
      // transposing in place (no transposed copy of a or b).
      if (Active(inst, 0)) Acc(inst, 0, b_.DotGeneral(g, X(inst, 1), {}, {}, {1}, {1}));
      if (Active(inst, 1)) Acc(inst, 1, b_.DotGeneral(X(inst, 0), g, {}, {}, {0}, {0}));
      return;
    case OpKind::kDotGeneral:
      return DotGeneralRule(inst, g);
    case OpKind::kConvolution:
    case OpKind::kConvInputGrad:
    case OpKind::kConvKernelGrad:
      return ConvolutionRule(inst, g);
    case OpKind::kSlice:
      return Acc(inst, 0,
                 SliceAdjoint(g, OperandShape(inst, 0).dims, inst.starts, inst.window_strides));
    case OpKind::kPool:
      return PoolRule(inst, y, g);
    case OpKind::kConcatenate: {
      std::vector<int64_t> starts(s.rank(), 0);
      for (size_t k = 0; k < inst.operands.size(); ++k) {
        const Shape& part = OperandShape(inst, static_cast<int>(k));
        std::vector<int64_t> limits = s.dims;
        limits[inst.dimension] = starts[inst.dimension] + part.dims[inst.dimension];
        if (Active(inst, static_cast<int>(k))) {
          Acc(inst, static_cast<int>(k), b_.Slice(g, starts, limits));
        }
        starts[inst.dimension] = limits[inst.dimension];
      }
      return;
    }
    case OpKind::kPad: {
      const Shape& in = OperandShape(inst, 0);
      std::vector<int64_t> limits(in.rank());
      for (int d = 0; d < in.rank(); ++d) limits[d] = inst.pad_low[d] + in.dims[d];
      const Value inner = b_.Slice(g, inst.pad_low, limits);
      if (Active(inst, 0)) Acc(inst, 0, inner);
      if (Active(inst, 1)) {
        Acc(inst, 1, b_.Sub(b_.ReduceSum(g, AllDims(s.rank())),
                            b_.ReduceSum(inner, AllDims(in.rank()))));
      }
      return;
    }
    case OpKind::kGather:
      return Acc(inst, 0, b_.ScatterAdd(Zeros(OperandShape(inst, 0)), X(inst, 1), g,
                                        inst.dimension));
    case OpKind::kScatterAdd:
      if (Active(inst, 0)) Acc(inst, 0, g);
      if (Active(inst, 2)) Acc(inst, 2, b_.Gather(g, X(inst, 1), inst.dimension));
      return;
    case OpKind::kAllReduce: {
      const Value total = b_.AllReduce(g, inst.axes, ReduceKind::kSum);
      if (inst.reduce_kind == ReduceKind::kSum) return Acc(inst, 0, total);
      const Value hit = b_.Compare(X(inst, 0), y, Comparison::kEq);
      return Acc(inst, 0, b_.Select(hit, total, Zeros(s)));
    }
    case OpKind::kAllGather: {
      const int64_t part = OperandShape(inst, 0).dims[inst.dimension];
      const int64_t group = part == 0 ? 1 : s.dims[inst.dimension] / part;
      return Acc(inst, 0, b_.ReduceScatter(g, inst.axes, inst.dimension, group));
    }
    case OpKind::kReduceScatter: {
      const Shape& in = OperandShape(inst, 0);
      const int64_t part = s.dims[inst.dimension];
      const int64_t group = part == 0 ? 1 : in.dims[inst.dimension] / part;
      const Value all = b_.AllGather(g, inst.axes, inst.dimension, group);
      if (inst.reduce_kind == ReduceKind::kSum) return Acc(inst, 0, all);
      const Value hit = b_.Compare(X(inst, 0), b_.AllGather(y, inst.axes, inst.dimension, group),
                                   Comparison::kEq);
      return Acc(inst, 0, b_.Select(hit, all, Zeros(in)));
    }
    case OpKind::kAllToAll: {
      const Shape& in = OperandShape(inst, 0);
      const int64_t c = inst.concat_dimension;
      const int64_t group = inst.dimension == c || in.dims[c] == 0 ? 1 : s.dims[c] / in.dims[c];
      return Acc(inst, 0, b_.AllToAll(g, inst.axes, c, inst.dimension, group));
    }
    case OpKind::kCollectivePermute: {
      std::vector<std::pair<int64_t, int64_t>> reversed;
      for (const auto& [src, dst] : inst.source_target_pairs) reversed.push_back({dst, src});
      return Acc(inst, 0, b_.CollectivePermute(g, inst.axes, std::move(reversed)));
    }
    case OpKind::kParameter:
    case OpKind::kConstant:
    case OpKind::kSign:
    case OpKind::kFloor:
    case OpKind::kCompare:
    case OpKind::kIota:
    case OpKind::kArgSort:
    case OpKind::kRngUniform:
    case OpKind::kRngNormal:
    case OpKind::kGeluGrad:
    case OpKind::kSoftmaxGrad:
    case OpKind::kNormalizeGrad:
    case OpKind::kWhile:
    case OpKind::kConditional:
      return;  // no gradient flows through (control flow: see Forward, ConditionalRule)
    case OpKind::kGetResult: {
      std::vector<Value>& r = result_adj_[inst.operands[0]];
      const size_t n = ResultShapes(f_.instructions()[inst.operands[0]]).size();
      if (r.size() < n) r.resize(n);
      Value& a = r[static_cast<size_t>(inst.result_index)];
      a = a.id < 0 ? g : b_.Add(a, g);
      return;
    }
  }
}

void Reverse::ConditionalRule(int i, const Instruction& inst) {
  auto found = result_adj_.find(i);
  if (found == result_adj_.end()) return;  // no result reaches the loss
  const std::vector<Value>& g = found->second;
  const std::vector<Shape> results = ResultShapes(inst);
  const size_t nargs = inst.operands.size() - 1;
  std::vector<int> wrt;  // argument positions that need a gradient
  for (size_t k = 0; k < nargs; ++k) {
    if (Active(inst, static_cast<int>(k) + 1)) wrt.push_back(static_cast<int>(k));
  }
  std::vector<size_t> flowing;  // results with an adjoint
  for (size_t j = 0; j < g.size() && j < results.size(); ++j) {
    if (g[j].id >= 0) flowing.push_back(j);
  }
  if (wrt.empty() || flowing.empty()) return;
  // For each branch b: vjp_b(args, g) = d/d args of sum_j <b(args)_j, g_j>.
  std::vector<Function> vjps;
  for (size_t k = 0; k < inst.subfunctions.size(); ++k) {
    const Function& branch = *inst.subfunctions[k];
    FunctionBuilder hb(absl::StrCat(branch.name(), "_vjp_loss"));
    std::vector<Value> args;
    for (size_t a = 0; a < nargs; ++a) args.push_back(hb.Parameter(branch.parameter_shape(a)));
    std::vector<Value> gs;
    for (size_t j : flowing) gs.push_back(hb.Parameter(results[j]));
    std::vector<Value> out = hb.Call(branch, args);
    Value loss = hb.ConstantF32(0);
    for (size_t t = 0; t < flowing.size(); ++t) {
      Value prod = hb.Mul(out[flowing[t]], gs[t]);
      loss = hb.Add(loss, hb.ReduceSum(prod, AllDims(results[flowing[t]].rank())));
    }
    absl::StatusOr<Function> h = hb.Build({loss});
    absl::StatusOr<Function> gh = h.ok() ? Grad(*h, wrt) : h.status();
    if (!gh.ok()) {
      error_ = Annotate(gh.status(), absl::StrCat("gradient of instruction ", i,
                                                  " (conditional), branch ", k));
      return;
    }
    // Grad returns (loss, grads...): the branch returns the grads (the loss
    // is left unread, so it is not computed).
    vjps.emplace_back(absl::StrCat(branch.name(), "_vjp"), gh->instructions(), gh->parameters(),
                      std::vector<int>(gh->outputs().begin() + 1, gh->outputs().end()));
  }
  std::vector<Value> cargs;
  for (size_t a = 0; a < nargs; ++a) cargs.push_back(X(inst, static_cast<int>(a) + 1));
  for (size_t j : flowing) cargs.push_back(g[j]);
  std::vector<Value> grads = b_.Conditional(X(inst, 0), vjps, cargs);
  for (size_t t = 0; t < wrt.size() && t < grads.size(); ++t) Acc(inst, wrt[t] + 1, grads[t]);
}

Value Reverse::SliceAdjoint(Value g, const std::vector<int64_t>& in_dims,
                            const std::vector<int64_t>& starts,
                            const std::vector<int64_t>& steps) {
  const std::vector<int64_t> s = b_.shape(g).dims;
  const int rank = static_cast<int>(in_dims.size());
  // A strided slice's adjoint first spreads g: step - 1 zeros after each
  // element along each strided dim (the last element's cut).
  Value spread = g;
  std::vector<int64_t> high(in_dims.size());
  for (int d = 0; d < rank; ++d) {
    const int64_t step = steps.empty() ? 1 : steps[d];
    const int64_t n = s[d];
    int64_t span = n;
    if (step > 1 && n > 0) {
      std::vector<int64_t> dims = b_.shape(spread).dims, split = dims;
      split.insert(split.begin() + d + 1, 1);
      std::vector<int64_t> lo(split.size(), 0), hi(split.size(), 0);
      hi[static_cast<size_t>(d) + 1] = step - 1;
      spread = b_.Pad(b_.Reshape(spread, split), b_.ConstantF32(0), lo, hi);
      dims[d] = n * step;
      spread = b_.Reshape(spread, dims);
      span = (n - 1) * step + 1;
      std::vector<int64_t> begin(dims.size(), 0), limits = dims;
      limits[d] = span;
      spread = b_.Slice(spread, begin, limits);
    }
    high[d] = in_dims[d] - starts[d] - span;
  }
  return b_.Pad(spread, b_.ConstantF32(0), starts, high);
}

void Reverse::PoolRule(const Instruction& inst, Value result, Value g) {
  if (!Active(inst, 0)) return;
  const Shape& x = OperandShape(inst, 0);
  const Shape& y = inst.shape;
  const size_t spatial = inst.dims.size();
  const bool max = inst.reduce_kind == ReduceKind::kMax;
  // The input padded with the reduction's identity, as the op reads it.
  std::vector<int64_t> lo(x.dims.size(), 0), hi(x.dims.size(), 0);
  for (size_t i = 0; i < spatial; ++i) {
    lo[i + 2] = inst.pad_low[i];
    hi[i + 2] = inst.pad_high[i];
  }
  const Value padded = b_.Pad(
      X(inst, 0), b_.ConstantF32(max ? -std::numeric_limits<float>::infinity() : 0.0f), lo, hi);
  const std::vector<int64_t> padded_dims = b_.shape(padded).dims;
  std::vector<int64_t> steps(x.dims.size(), 1);
  for (size_t i = 0; i < spatial; ++i) steps[i + 2] = inst.window_strides[i];
  // Of each window, the share of g not yet given to an earlier position
  // holding its maximum (max only).
  Value left = max ? Scalar(1.0f, y) : Value{};
  Value sum{};
  std::vector<int64_t> at(spatial, 0);
  while (true) {
    std::vector<int64_t> starts(x.dims.size(), 0), limits = padded_dims;
    for (size_t i = 0; i < spatial; ++i) {
      starts[i + 2] = at[i] * inst.window_dilations[i];
      limits[i + 2] = starts[i + 2] + (y.dims[i + 2] - 1) * inst.window_strides[i] + 1;
    }
    Value part = g;
    if (max) {
      const Value patch = b_.Slice(padded, starts, limits, steps);
      const Value share = b_.Select(b_.Compare(patch, result, Comparison::kEq), left, Zeros(y));
      left = b_.Sub(left, share);
      part = b_.Mul(g, share);
    }
    const Value adj = SliceAdjoint(part, padded_dims, starts, steps);
    sum = sum.id < 0 ? adj : b_.Add(sum, adj);
    size_t i = spatial;
    while (i > 0 && ++at[i - 1] == inst.dims[i - 1]) at[--i] = 0;
    if (i == 0) break;
  }
  std::vector<int64_t> limits = padded_dims;
  for (size_t i = 0; i < spatial; ++i) limits[i + 2] = lo[i + 2] + x.dims[i + 2];
  Acc(inst, 0, b_.Slice(sum, lo, limits));
}

void Reverse::ConvolutionRule(const Instruction& inst, Value g) {
  ConvSpec spec{inst.window_strides, inst.window_dilations, inst.pad_low, {},
                inst.feature_groups};
  // x, w and y of the form; `g` is the adjoint of the one inst computes.
  const bool conv = inst.op == OpKind::kConvolution;
  const bool input = inst.op == OpKind::kConvInputGrad;
  // (Plain references: the lambda below captures them, which clang refuses
  // for structured bindings.)
  const ConvolutionShapes roles = ConvolutionRoles(inst, OperandShape(inst, 0), OperandShape(inst, 1));
  const Shape& x = roles.x;
  const Shape& w = roles.w;
  const Shape& y = roles.y;
  // y from x and w: the high padding that gives y's spatial dims.
  const auto to_y = [&](Value xv, Value wv) {
    ConvSpec s = spec;
    for (size_t i = 0; i + 2 < x.dims.size(); ++i) {
      const int64_t span = (w.dims[i + 2] - 1) * spec.dilations[i] + 1;
      s.pad_high.push_back((y.dims[i + 2] - 1) * spec.strides[i] + span - x.dims[i + 2] -
                           spec.pad_low[i]);
    }
    return b_.Convolution(xv, wv, s);
  };
  if (conv) {  // (x, w) -> y
    if (Active(inst, 0)) Acc(inst, 0, b_.ConvInputGrad(g, X(inst, 1), x.dims, spec));
    if (Active(inst, 1)) Acc(inst, 1, b_.ConvKernelGrad(X(inst, 0), g, w.dims, spec));
  } else if (input) {  // (y, w) -> x
    if (Active(inst, 0)) Acc(inst, 0, to_y(g, X(inst, 1)));
    if (Active(inst, 1)) Acc(inst, 1, b_.ConvKernelGrad(g, X(inst, 0), w.dims, spec));
  } else {  // (x, y) -> w
    if (Active(inst, 0)) Acc(inst, 0, b_.ConvInputGrad(X(inst, 1), g, x.dims, spec));
    if (Active(inst, 1)) Acc(inst, 1, to_y(X(inst, 0), g));
  }
}

// Result dims of dot_general are [batch, lhs free, rhs free]. The lhs
// gradient contracts g with rhs over rhs's free dims, giving [batch, lhs
// free, rhs contracting (in rhs dim order)], then transposes to lhs order;
// symmetrically for rhs.
void Reverse::DotGeneralRule(const Instruction& inst, Value g) {
  const Shape& lhs = OperandShape(inst, 0);
  const Shape& rhs = OperandShape(inst, 1);
  auto free_dims = [](const Shape& s, const std::vector<int64_t>& batch,
                      const std::vector<int64_t>& contracting) {
    std::vector<int64_t> free;
    for (int d = 0; d < s.rank(); ++d) {
      if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
          std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
        free.push_back(d);
      }
    }
    return free;
  };
  const std::vector<int64_t> lf = free_dims(lhs, inst.lhs_batch, inst.lhs_contracting);
  const std::vector<int64_t> rf = free_dims(rhs, inst.rhs_batch, inst.rhs_contracting);
  const int64_t nb = static_cast<int64_t>(inst.lhs_batch.size());
  std::vector<int64_t> g_batch(nb);
  for (int64_t k = 0; k < nb; ++k) g_batch[k] = k;

  // One side: `self` has (batch, contracting, free); `other` is the other
  // operand with its own lists. g's dims for self's free dims start at
  // `self_free_at`, for other's free dims at `other_free_at`.
  auto side = [&](int self_k, const Shape& self, const std::vector<int64_t>& self_batch,
                  const std::vector<int64_t>& self_contracting,
                  const std::vector<int64_t>& self_free, int64_t other_free_at,
                  const std::vector<int64_t>& other_batch,
                  const std::vector<int64_t>& other_contracting,
                  const std::vector<int64_t>& other_free) {
    std::vector<int64_t> g_contract;
    for (size_t k = 0; k < other_free.size(); ++k) g_contract.push_back(other_free_at + k);
    // dot result: [batch, self free, other contracting dims in other order].
    const Value d = b_.DotGeneral(g, X(inst, 1 - self_k), g_batch, other_batch, g_contract,
                                  other_free);
    std::vector<int64_t> other_sorted = other_contracting;
    std::sort(other_sorted.begin(), other_sorted.end());
    std::vector<int64_t> perm(self.rank());
    for (int64_t k = 0; k < nb; ++k) perm[self_batch[k]] = k;
    for (size_t k = 0; k < self_free.size(); ++k) perm[self_free[k]] = nb + k;
    for (size_t c = 0; c < self_contracting.size(); ++c) {
      const int64_t pos = std::find(other_sorted.begin(), other_sorted.end(),
                                    other_contracting[c]) - other_sorted.begin();
      perm[self_contracting[c]] = nb + static_cast<int64_t>(self_free.size()) + pos;
    }
    Acc(inst, self_k, b_.Transpose(d, perm));
  };
  const int64_t lhs_free_at = nb;
  const int64_t rhs_free_at = nb + static_cast<int64_t>(lf.size());
  if (Active(inst, 0)) {
    side(0, lhs, inst.lhs_batch, inst.lhs_contracting, lf, rhs_free_at, inst.rhs_batch,
         inst.rhs_contracting, rf);
  }
  if (Active(inst, 1)) {
    side(1, rhs, inst.rhs_batch, inst.rhs_contracting, rf, lhs_free_at, inst.lhs_batch,
         inst.lhs_contracting, lf);
  }
}

}  // namespace

absl::StatusOr<Function> Grad(const Function& function, absl::Span<const int> wrt) {
  CW_RETURN_IF_ERROR(Verify(function));
  const std::string where = absl::StrCat("Grad of function ", function.name());
  if (function.output_shape(0) != Shape(DType::kF32, {})) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": result 0 must be f32[], got ", function.output_shape(0).ToString()));
  }
  for (size_t k = 0; k < wrt.size(); ++k) {
    if (wrt[k] < 0 || wrt[k] >= function.num_parameters() ||
        std::find(wrt.begin(), wrt.begin() + k, wrt[k]) != wrt.begin() + k) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": wrt index ", wrt[k], " out of range or repeated"));
    }
    if (function.parameter_shape(wrt[k]).dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": parameter ", wrt[k], " is ", function.parameter_shape(wrt[k]).ToString(),
          ", not f32"));
    }
  }
  FunctionBuilder b(absl::StrCat(function.name(), "_grad"));
  Reverse reverse(function, b);
  reverse.Forward(wrt);
  if (!reverse.error().ok()) return Annotate(reverse.error(), where);
  reverse.Backward();
  if (!reverse.error().ok()) return Annotate(reverse.error(), where);
  std::vector<Value> outputs;
  for (int o : function.outputs()) outputs.push_back(reverse.forward(o));
  for (int k : wrt) outputs.push_back(reverse.Adjoint(function.parameters()[k]));
  absl::StatusOr<Function> grad = b.Build(std::move(outputs));
  if (!grad.ok()) return Annotate(grad.status(), where);
  return grad;
}

}  // namespace causeway::ir
