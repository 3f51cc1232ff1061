// Bindings of the IR: FunctionBuilder, its values with Python operators
// (numpy broadcasting, scalars, slicing), the op set and composites, and
// reverse-mode Grad. Every op checks the builder at once and raises the
// error of the op that failed, naming it, as tracing in JAX does.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/ir/autodiff.h"
#include "causeway/ir/composites.h"
#include "causeway/ir/serialization.h"
#include "python/src/py_core.h"

namespace causeway::python {
namespace {

using ir::FunctionBuilder;
using ir::Value;

// Raises the builder's error, if the last op recorded one.
PyValue Checked(const std::shared_ptr<PyBuilder>& owner, Value v) {
  ThrowIfError(owner->builder.status());
  return PyValue{owner, v};
}

std::vector<PyValue> Checked(const std::shared_ptr<PyBuilder>& owner,
                             const std::vector<Value>& vs) {
  ThrowIfError(owner->builder.status());
  std::vector<PyValue> out;
  for (Value v : vs) out.push_back(PyValue{owner, v});
  return out;
}

// The function being traced on this thread, innermost first (set by the
// Python layer around every trace); null outside tracing.
thread_local PyBuilder* g_tracing = nullptr;

// `v` as a value of `owner`'s function: itself, or a value of an enclosing
// function captured as a new parameter of `owner` (while a nested function
// is traced: causeway.grad of a closure).
PyValue Into(const std::shared_ptr<PyBuilder>& owner, const PyValue& v) {
  if (v.owner == owner) return v;
  if (owner->capture) {
    py::object captured = owner->capture(v);
    PyValue c = captured.cast<PyValue>();
    if (c.owner == owner) return c;
  }
  throw StatusError(absl::InvalidArgumentError(
      "values of two different functions were combined (a value traced for one compiled "
      "function used in another)"));
}

// `vs` as values of `owner`'s function (Into each).
std::vector<Value> Values(const std::shared_ptr<PyBuilder>& owner,
                          const std::vector<PyValue>& vs) {
  std::vector<Value> out;
  for (const PyValue& v : vs) out.push_back(Into(owner, v).value);
  return out;
}

// An operand of an op: a value of an enclosing function used while a nested
// one is traced is captured into the nested one, as JAX does with closures.
PyValue Here(const PyValue& v) {
  if (g_tracing == nullptr || v.owner.get() == g_tracing) return v;
  if (g_tracing->capture) {
    py::object captured = g_tracing->capture(v);
    return captured.cast<PyValue>();
  }
  return v;
}

// A further operand of an op whose first operand (already Here) is `like`.
PyValue In(const PyValue& like, const PyValue& v) { return Into(like.owner, Here(v)); }

// A Python scalar as a rank-0 constant of `dtype`.
Value ScalarConstant(FunctionBuilder& b, py::handle x, ir::DType dtype) {
  if (dtype == ir::DType::kPred && py::isinstance<py::bool_>(x)) {
    ir::Literal l(ir::Shape(ir::DType::kPred, {}));
    l.mutable_values<uint8_t>()[0] = x.cast<bool>() ? 1 : 0;
    return b.Constant(std::move(l));
  }
  if (dtype == ir::DType::kF32) return b.ConstantF32(x.cast<float>());
  if (dtype == ir::DType::kI32) {
    if (py::isinstance<py::float_>(x)) {
      const double d = x.cast<double>();
      if (d != std::floor(d)) {
        throw StatusError(absl::InvalidArgumentError(absl::StrCat(
            "the float ", d, " combined with an int32 value: convert with .astype(\"float32\")")));
      }
      return b.ConstantI32(static_cast<int32_t>(d));
    }
    return b.ConstantI32(x.cast<int32_t>());
  }
  throw StatusError(absl::InvalidArgumentError(
      absl::StrCat("a Python scalar cannot be combined with a ", NumpyName(dtype), " value")));
}

// `x` as a value of the builder of `like`: values pass through; scalars and
// numpy arrays become constants (scalars of like's dtype).
PyValue Lift(const PyValue& like, py::handle x) {
  if (py::isinstance<PyValue>(x)) {
    return In(like, x.cast<PyValue>());
  }
  if (py::isinstance<py::bool_>(x) || py::isinstance<py::int_>(x) ||
      py::isinstance<py::float_>(x)) {
    return Checked(like.owner, ScalarConstant(like.b(), x, like.shape().dtype));
  }
  if (py::isinstance<py::array>(x)) {
    return Checked(like.owner, like.b().Constant(LiteralFromNumpy(x.cast<py::array>())));
  }
  throw py::type_error(absl::StrCat("cannot combine a traced value with ",
                                    std::string(py::str(py::type::of(x)))));
}

// Broadcasts `v` to `dims` with numpy's rules (aligned at the right).
Value BroadcastTo(FunctionBuilder& b, Value v, const std::vector<int64_t>& dims) {
  const std::vector<int64_t>& from = b.shape(v).dims;
  if (from == dims) return v;
  if (from.size() > dims.size()) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("cannot broadcast [", absl::StrJoin(from, ","), "] to [",
                     absl::StrJoin(dims, ","), "]")));
  }
  std::vector<int64_t> operand_dims;
  const size_t offset = dims.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) operand_dims.push_back(static_cast<int64_t>(i + offset));
  return b.Broadcast(v, dims, operand_dims);
}

std::vector<int64_t> BroadcastDims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          "shapes [", absl::StrJoin(a, ","), "] and [", absl::StrJoin(b, ","),
          "] do not broadcast (dimension ", i, ": ", x, " vs ", y, ")")));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

using Binary = Value (FunctionBuilder::*)(Value, Value);

PyValue BinaryOp(const PyValue& a1, py::handle other, Binary op, bool reversed) {
  const PyValue a0 = Here(a1);
  PyValue o = Lift(a0, other);
  const PyValue& x = reversed ? o : a0;
  const PyValue& y = reversed ? a0 : o;
  FunctionBuilder& b = a0.b();
  const std::vector<int64_t> dims = BroadcastDims(x.shape().dims, y.shape().dims);
  Value bx = BroadcastTo(b, x.value, dims);
  Value by = BroadcastTo(b, y.value, dims);
  return Checked(a0.owner, (b.*op)(bx, by));
}

PyValue CompareOp(const PyValue& a1, py::handle other, ir::Comparison c) {
  const PyValue a0 = Here(a1);
  PyValue o = Lift(a0, other);
  FunctionBuilder& b = a0.b();
  const std::vector<int64_t> dims = BroadcastDims(a0.shape().dims, o.shape().dims);
  return Checked(a0.owner,
                 b.Compare(BroadcastTo(b, a0.value, dims), BroadcastTo(b, o.value, dims), c));
}

std::vector<int64_t> NormalizeAxes(const PyValue& x, py::object axis) {
  const int64_t rank = x.shape().rank();
  std::vector<int64_t> axes;
  if (axis.is_none()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    return axes;
  }
  std::vector<int64_t> given;
  if (py::isinstance<py::int_>(axis)) {
    given.push_back(axis.cast<int64_t>());
  } else {
    given = axis.cast<std::vector<int64_t>>();
  }
  for (int64_t a : given) {
    if (a < -rank || a >= rank) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("axis ", a, " out of range for a value of rank ", rank)));
    }
    axes.push_back(a < 0 ? a + rank : a);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

using Reduce = Value (FunctionBuilder::*)(Value, std::vector<int64_t>);

PyValue ReduceOp(const PyValue& x, py::object axis, bool keepdims, Reduce op) {
  const std::vector<int64_t> axes = NormalizeAxes(x, axis);
  FunctionBuilder& b = x.b();
  Value r = (b.*op)(x.value, axes);
  ThrowIfError(b.status());
  if (keepdims) {
    std::vector<int64_t> dims = x.shape().dims;
    for (int64_t a : axes) dims[a] = 1;
    r = b.Reshape(r, dims);
  }
  return Checked(x.owner, r);
}

PyValue Mean(const PyValue& x, py::object axis, bool keepdims) {
  const std::vector<int64_t> axes = NormalizeAxes(x, axis);
  int64_t n = 1;
  for (int64_t a : axes) n *= x.shape().dims[a];
  PyValue s = ReduceOp(x, axis, keepdims, &FunctionBuilder::ReduceSum);
  return BinaryOp(s, py::float_(1.0 / static_cast<double>(n)), &FunctionBuilder::Mul, false);
}

// a @ b: 2-D matmul; batched when both have the same leading dimensions;
// [..., k] @ [k, n] folds the leading dimensions into one.
PyValue MatmulOp(const PyValue& a1, const PyValue& b1) {
  const PyValue a = Here(a1);
  const PyValue b0 = In(a, b1);
  FunctionBuilder& b = a.b();
  const std::vector<int64_t>& ad = a.shape().dims;
  const std::vector<int64_t>& bd = b0.shape().dims;
  if (ad.size() == 2 && bd.size() == 2) return Checked(a.owner, b.Matmul(a.value, b0.value));
  if (ad.size() > 2 && bd.size() == 2) {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < ad.size(); ++i) rows *= ad[i];
    Value flat = b.Reshape(a.value, {rows, ad.back()});
    Value m = b.Matmul(flat, b0.value);
    ThrowIfError(b.status());
    std::vector<int64_t> out(ad.begin(), ad.end() - 1);
    out.push_back(bd.back());
    return Checked(a.owner, b.Reshape(m, out));
  }
  if (ad.size() == bd.size() && ad.size() > 2) {
    std::vector<int64_t> batch;
    for (size_t i = 0; i + 2 < ad.size(); ++i) batch.push_back(static_cast<int64_t>(i));
    const int64_t r = static_cast<int64_t>(ad.size());
    return Checked(a.owner, b.DotGeneral(a.value, b0.value, batch, batch, {r - 1}, {r - 2}));
  }
  throw StatusError(absl::InvalidArgumentError(
      absl::StrCat("matmul of shapes [", absl::StrJoin(ad, ","), "] and [",
                   absl::StrJoin(bd, ","), "]: need 2-D @ 2-D, N-D @ 2-D or batched N-D @ N-D")));
}

// x[...]: integers and slices of step 1 per dimension; integers drop their
// dimension.
PyValue GetItem(const PyValue& x, py::object index) {
  const std::vector<int64_t>& dims = x.shape().dims;
  py::tuple items = py::isinstance<py::tuple>(index) ? index.cast<py::tuple>()
                                                      : py::make_tuple(index);
  std::vector<int64_t> starts, limits, kept;
  size_t d = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle it = items[i];
    if (it.is(py::ellipsis())) {
      const size_t rest = items.size() - i - 1;
      while (d + rest < dims.size()) {
        starts.push_back(0);
        limits.push_back(dims[d]);
        kept.push_back(dims[d]);
        ++d;
      }
      continue;
    }
    if (d >= dims.size()) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("too many indices for a value of rank ", dims.size())));
    }
    if (py::isinstance<py::slice>(it)) {
      Py_ssize_t start, stop, step, length;
      if (PySlice_GetIndicesEx(it.ptr(), dims[d], &start, &stop, &step, &length) != 0) {
        throw py::error_already_set();
      }
      if (step != 1) {
        throw StatusError(absl::InvalidArgumentError("slices of a traced value must have step 1"));
      }
      starts.push_back(start);
      limits.push_back(start + length);
      kept.push_back(length);
    } else if (py::isinstance<py::int_>(it)) {
      int64_t k = it.cast<int64_t>();
      if (k < -dims[d] || k >= dims[d]) {
        throw StatusError(absl::InvalidArgumentError(
            absl::StrCat("index ", k, " out of range for dimension ", d, " of size ", dims[d])));
      }
      if (k < 0) k += dims[d];
      starts.push_back(k);
      limits.push_back(k + 1);
    } else {
      throw py::type_error("a traced value is indexed by integers, slices and ...");
    }
    ++d;
  }
  for (; d < dims.size(); ++d) {
    starts.push_back(0);
    limits.push_back(dims[d]);
    kept.push_back(dims[d]);
  }
  FunctionBuilder& b = x.b();
  Value s = b.Slice(x.value, starts, limits);
  ThrowIfError(b.status());
  return Checked(x.owner, b.Reshape(s, kept));
}

std::vector<int64_t> DimsArg(py::object dims) {
  if (py::isinstance<py::int_>(dims)) return {dims.cast<int64_t>()};
  return dims.cast<std::vector<int64_t>>();
}

PyValue Reshape(const PyValue& x, py::object dims_obj) {
  std::vector<int64_t> dims = DimsArg(dims_obj);
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (infer >= 0) throw StatusError(absl::InvalidArgumentError("reshape: more than one -1"));
      infer = static_cast<int64_t>(i);
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0 && known > 0) dims[infer] = x.shape().num_elements() / known;
  return Checked(x.owner, x.b().Reshape(x.value, dims));
}

PyValue Transpose(const PyValue& x, py::object perm) {
  std::vector<int64_t> p;
  if (perm.is_none()) {
    for (int64_t i = x.shape().rank() - 1; i >= 0; --i) p.push_back(i);
  } else {
    p = perm.cast<std::vector<int64_t>>();
  }
  return Checked(x.owner, x.b().Transpose(x.value, p));
}

using Unary = Value (FunctionBuilder::*)(Value);

void DefUnary(py::module_& ops, const char* name, Unary op, const char* doc) {
  ops.def(
      name, [op](const PyValue& x) { return Checked(x.owner, (x.b().*op)(x.value)); },
      py::arg("x"), doc);
}

std::vector<std::string> Axes(py::object axes) {
  if (py::isinstance<py::str>(axes)) return {axes.cast<std::string>()};
  return axes.cast<std::vector<std::string>>();
}

std::string ShapeRepr(const ir::Shape& s) {
  return absl::StrCat(NumpyName(s.dtype), "[", absl::StrJoin(s.dims, ","), "]");
}

}  // namespace

void RegisterIr(py::module_& m) {
  py::class_<ir::Function>(m, "Function", "A built IR function (per-shard code)")
      .def_property_readonly("name", &ir::Function::name)
      .def_property_readonly("num_parameters", &ir::Function::num_parameters)
      .def_property_readonly("num_outputs", &ir::Function::num_outputs)
      .def_property_readonly("parameter_shapes",
                             [](const ir::Function& f) {
                               py::list out;
                               for (int i = 0; i < f.num_parameters(); ++i) {
                                 out.append(py::make_tuple(DimsTuple(f.parameter_shape(i).dims),
                                                           NumpyName(f.parameter_shape(i).dtype)));
                               }
                               return out;
                             })
      .def_property_readonly("output_shapes",
                             [](const ir::Function& f) {
                               py::list out;
                               for (int i = 0; i < f.num_outputs(); ++i) {
                                 out.append(py::make_tuple(DimsTuple(f.output_shape(i).dims),
                                                           NumpyName(f.output_shape(i).dtype)));
                               }
                               return out;
                             })
      .def("serialize", [](const ir::Function& f) { return py::bytes(ir::Serialize(f)); })
      .def_static(
          "deserialize",
          [](py::bytes data) { return Unwrap(ir::Deserialize(std::string(data))); },
          "A verified function from serialize()'s bytes")
      .def("__str__", &ir::Function::ToString)
      .def("__repr__", [](const ir::Function& f) {
        return absl::StrCat("<causeway.Function ", f.name(), ": ", f.num_parameters(),
                            " parameters, ", f.num_outputs(), " outputs>");
      });

  py::class_<PyBuilder, std::shared_ptr<PyBuilder>>(m, "FunctionBuilder",
                                                    "Builds a Function op by op")
      .def(py::init<std::string>(), py::arg("name"))
      .def_property(
          "capture", [](const PyBuilder& b) { return b.capture; },
          [](PyBuilder& b, py::object f) { b.capture = f.is_none() ? py::object() : f; },
          "While set: called with a value of another function used in this one; returns "
          "the value of this function that stands for it")
      .def(
          "parameter",
          [](const std::shared_ptr<PyBuilder>& self, std::vector<int64_t> dims,
             const std::string& dtype) {
            return Checked(self, self->builder.Parameter(ir::Shape(DTypeFromName(dtype), dims)));
          },
          py::arg("shape"), py::arg("dtype") = "float32",
          "A parameter of this shard shape (parameters are numbered in call order)")
      .def(
          "constant",
          [](const std::shared_ptr<PyBuilder>& self, py::array value) {
            return Checked(self, self->builder.Constant(LiteralFromNumpy(value)));
          },
          py::arg("value"))
      .def(
          "full",
          [](const std::shared_ptr<PyBuilder>& self, std::vector<int64_t> dims, py::object value,
             const std::string& dtype) {
            FunctionBuilder& b = self->builder;
            Value s = ScalarConstant(b, value, DTypeFromName(dtype));
            ThrowIfError(b.status());
            return Checked(self, b.Broadcast(s, dims, {}));
          },
          py::arg("shape"), py::arg("value"), py::arg("dtype") = "float32")
      .def(
          "iota",
          [](const std::shared_ptr<PyBuilder>& self, std::vector<int64_t> dims, int64_t dimension,
             const std::string& dtype) {
            return Checked(self, self->builder.Iota(ir::Shape(DTypeFromName(dtype), dims),
                                                    dimension));
          },
          py::arg("shape"), py::arg("dimension") = 0, py::arg("dtype") = "int32")
      .def(
          "call",
          [](const std::shared_ptr<PyBuilder>& self, const ir::Function& f,
             const std::vector<PyValue>& args) {
            return Checked(self, self->builder.Call(f, Values(self, args)));
          },
          py::arg("function"), py::arg("args"), "Inlines `function` on `args`; its results")
      .def(
          "while_loop",
          [](const std::shared_ptr<PyBuilder>& self, const ir::Function& cond,
             const ir::Function& body, const std::vector<PyValue>& init) {
            return Checked(self, self->builder.While(cond, body, Values(self, init)));
          },
          py::arg("cond"), py::arg("body"), py::arg("init"),
          "A while loop over the carry `init`: the final carry")
      .def(
          "conditional",
          [](const std::shared_ptr<PyBuilder>& self, const PyValue& selector,
             const std::vector<ir::Function>& branches, const std::vector<PyValue>& args) {
            const Value sel = Into(self, selector).value;
            return Checked(self, self->builder.Conditional(sel, branches, Values(self, args)));
          },
          py::arg("selector"), py::arg("branches"), py::arg("args"),
          "Runs branches[selector] (pred: true is branch 0) on `args`: its results")
      .def(
          "build",
          [](const std::shared_ptr<PyBuilder>& self, const std::vector<PyValue>& outputs) {
            return Unwrap(self->builder.Build(Values(self, outputs)));
          },
          py::arg("outputs"), "Verifies and returns the function with these results");

  py::class_<PyValue>(m, "Value", "A value of a function being built (traced)")
      .def_property_readonly("shape", [](const PyValue& v) { return DimsTuple(v.shape().dims); })
      .def_property_readonly("dtype", [](const PyValue& v) { return NumpyName(v.shape().dtype); })
      .def_property_readonly("ndim", [](const PyValue& v) { return v.shape().rank(); })
      .def_property_readonly("builder", [](const PyValue& v) { return v.owner; })
      .def_property_readonly(
          "key",
          [](const PyValue& v) {
            return py::make_tuple(reinterpret_cast<uintptr_t>(v.owner.get()), v.value.id);
          },
          "Identifies the value while its function is alive")
      .def("__repr__",
           [](const PyValue& v) { return absl::StrCat("<traced ", ShapeRepr(v.shape()), ">"); })
      .def("__bool__",
           [](const PyValue&) -> bool {
             throw py::type_error(
                 "a traced value has no truth value while tracing: use causeway.where");
           })
      .def("__add__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Add, false); })
      .def("__radd__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Add, true); })
      .def("__sub__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Sub, false); })
      .def("__rsub__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Sub, true); })
      .def("__mul__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Mul, false); })
      .def("__rmul__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Mul, true); })
      .def("__truediv__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Div, false); })
      .def("__rtruediv__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Div, true); })
      .def("__pow__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Pow, false); })
      .def("__rpow__", [](const PyValue& a, py::object o) { return BinaryOp(a, o, &FunctionBuilder::Pow, true); })
      .def("__matmul__", [](const PyValue& a, const PyValue& b) { return MatmulOp(a, b); })
      .def("__neg__", [](const PyValue& a) { return Checked(a.owner, a.b().Neg(a.value)); })
      .def("__abs__", [](const PyValue& a) { return Checked(a.owner, a.b().Abs(a.value)); })
      // == and != are traced comparisons, as in numpy and JAX (a Python
      // identity test would decide a cw.cond while tracing); a Value is then
      // unhashable, as JAX's tracers are: key dicts by Value.key.
      .def("__eq__", [](const PyValue& a, py::object o) { return CompareOp(a, o, ir::Comparison::kEq); })
      .def("__ne__", [](const PyValue& a, py::object o) { return CompareOp(a, o, ir::Comparison::kNe); })
      .def("__lt__", [](const PyValue& a, py::object o) { return CompareOp(a, o, ir::Comparison::kLt); })
      .def("__le__", [](const PyValue& a, py::object o) { return CompareOp(a, o, ir::Comparison::kLe); })
      .def("__gt__", [](const PyValue& a, py::object o) { return CompareOp(a, o, ir::Comparison::kGt); })
      .def("__ge__", [](const PyValue& a, py::object o) { return CompareOp(a, o, ir::Comparison::kGe); })
      .def("__getitem__", &GetItem)
      .def_property_readonly("T", [](const PyValue& x) { return Transpose(x, py::none()); })
      .def("reshape", [](const PyValue& x, py::args dims) {
        if (dims.size() == 1 && !py::isinstance<py::int_>(dims[0])) return Reshape(x, dims[0]);
        return Reshape(x, dims);
      })
      .def("transpose", [](const PyValue& x, py::args perm) {
        if (perm.size() == 0) return Transpose(x, py::none());
        if (perm.size() == 1 && !py::isinstance<py::int_>(perm[0])) return Transpose(x, perm[0]);
        return Transpose(x, perm);
      })
      .def("astype", [](const PyValue& x, const std::string& dtype) {
        return Checked(x.owner, x.b().Convert(x.value, DTypeFromName(dtype)));
      })
      .def("sum", [](const PyValue& x, py::object axis, bool keepdims) {
        return ReduceOp(x, axis, keepdims, &FunctionBuilder::ReduceSum);
      }, py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("max", [](const PyValue& x, py::object axis, bool keepdims) {
        return ReduceOp(x, axis, keepdims, &FunctionBuilder::ReduceMax);
      }, py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("min", [](const PyValue& x, py::object axis, bool keepdims) {
        return ReduceOp(x, axis, keepdims, &FunctionBuilder::ReduceMin);
      }, py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("mean", &Mean, py::arg("axis") = py::none(), py::arg("keepdims") = false);

  py::module_ ops = m.def_submodule("ops", "The op set and composites on traced values");
  DefUnary(ops, "exp", &FunctionBuilder::Exp, "e ** x");
  DefUnary(ops, "log", &FunctionBuilder::Log, "natural logarithm");
  DefUnary(ops, "tanh", &FunctionBuilder::Tanh, "hyperbolic tangent");
  DefUnary(ops, "sigmoid", &FunctionBuilder::Logistic, "1 / (1 + exp(-x))");
  DefUnary(ops, "sqrt", &FunctionBuilder::Sqrt, "square root");
  DefUnary(ops, "rsqrt", &FunctionBuilder::Rsqrt, "1 / sqrt(x)");
  DefUnary(ops, "abs", &FunctionBuilder::Abs, "absolute value");
  DefUnary(ops, "sign", &FunctionBuilder::Sign, "-1, 0 or 1");
  DefUnary(ops, "floor", &FunctionBuilder::Floor, "floor");
  ops.def("maximum", [](const PyValue& a, py::object b) { return BinaryOp(a, b, &FunctionBuilder::Max, false); });
  ops.def("minimum", [](const PyValue& a, py::object b) { return BinaryOp(a, b, &FunctionBuilder::Min, false); });
  ops.def("equal", [](const PyValue& a, py::object b) { return CompareOp(a, b, ir::Comparison::kEq); });
  ops.def("not_equal", [](const PyValue& a, py::object b) { return CompareOp(a, b, ir::Comparison::kNe); });
  ops.def(
      "where",
      [](const PyValue& pred1, py::object on_true, py::object on_false) {
        const PyValue pred = Here(pred1);
        // Scalars take the dtype of the other branch when it is a value.
        const bool t_value = py::isinstance<PyValue>(on_true);
        const bool f_value = py::isinstance<PyValue>(on_false);
        PyValue t = t_value   ? In(pred, on_true.cast<PyValue>())
                    : f_value ? Lift(In(pred, on_false.cast<PyValue>()), on_true)
                              : Checked(pred.owner,
                                        ScalarConstant(pred.b(), on_true,
                                                       py::isinstance<py::float_>(on_true)
                                                           ? ir::DType::kF32
                                                           : ir::DType::kI32));
        PyValue f = Lift(t, on_false);
        FunctionBuilder& b = pred.b();
        std::vector<int64_t> dims = BroadcastDims(pred.shape().dims, t.shape().dims);
        dims = BroadcastDims(dims, f.shape().dims);
        return Checked(pred.owner, b.Select(BroadcastTo(b, pred.value, dims),
                                            BroadcastTo(b, t.value, dims),
                                            BroadcastTo(b, f.value, dims)));
      },
      py::arg("pred"), py::arg("on_true"), py::arg("on_false"));
  ops.def("matmul", &MatmulOp);
  ops.def(
      "dot_general",
      [](PyValue a, PyValue b, std::vector<int64_t> lb, std::vector<int64_t> rb,
         std::vector<int64_t> lc, std::vector<int64_t> rc) {
        a = Here(a);
        b = In(a, b);
        return Checked(a.owner, a.b().DotGeneral(a.value, b.value, lb, rb, lc, rc));
      },
      py::arg("lhs"), py::arg("rhs"), py::arg("lhs_batch"), py::arg("rhs_batch"),
      py::arg("lhs_contracting"), py::arg("rhs_contracting"));
  ops.def("reshape", &Reshape, py::arg("x"), py::arg("shape"));
  ops.def("transpose", &Transpose, py::arg("x"), py::arg("axes") = py::none());
  ops.def(
      "broadcast_to",
      [](const PyValue& x, std::vector<int64_t> dims) {
        Value v = BroadcastTo(x.b(), x.value, dims);
        return Checked(x.owner, v);
      },
      py::arg("x"), py::arg("shape"));
  ops.def("sum", [](const PyValue& x, py::object axis, bool keepdims) {
    return ReduceOp(x, axis, keepdims, &FunctionBuilder::ReduceSum);
  }, py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false);
  ops.def("max", [](const PyValue& x, py::object axis, bool keepdims) {
    return ReduceOp(x, axis, keepdims, &FunctionBuilder::ReduceMax);
  }, py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false);
  ops.def("min", [](const PyValue& x, py::object axis, bool keepdims) {
    return ReduceOp(x, axis, keepdims, &FunctionBuilder::ReduceMin);
  }, py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false);
  ops.def("mean", &Mean, py::arg("x"), py::arg("axis") = py::none(),
          py::arg("keepdims") = false);
  ops.def(
      "concatenate",
      [](const std::vector<PyValue>& xs, int64_t axis) {
        if (xs.empty()) throw StatusError(absl::InvalidArgumentError("concatenate of nothing"));
        std::vector<Value> vs;
        const PyValue first = Here(xs[0]);
        for (const PyValue& x : xs) vs.push_back(In(first, x).value);
        if (axis < 0) axis += xs[0].shape().rank();
        return Checked(first.owner, first.b().Concatenate(vs, axis));
      },
      py::arg("values"), py::arg("axis") = 0);
  ops.def(
      "take",
      [](PyValue x, PyValue indices, int64_t axis) {
        x = Here(x);
        indices = In(x, indices);
        return Checked(x.owner, x.b().Gather(x.value, indices.value, axis));
      },
      py::arg("x"), py::arg("indices"), py::arg("axis") = 0,
      "Rows of x along `axis` at int32 `indices` (clamped)");
  ops.def(
      "scatter_add",
      [](PyValue x, PyValue indices, PyValue updates, int64_t axis) {
        x = Here(x);
        indices = In(x, indices);
        updates = In(x, updates);
        return Checked(x.owner, x.b().ScatterAdd(x.value, indices.value, updates.value, axis));
      },
      py::arg("x"), py::arg("indices"), py::arg("updates"), py::arg("axis") = 0);
  ops.def(
      "astype",
      [](const PyValue& x, const std::string& dtype) {
        return Checked(x.owner, x.b().Convert(x.value, DTypeFromName(dtype)));
      },
      py::arg("x"), py::arg("dtype"));
  ops.def(
      "delay",
      [](const PyValue& x, int64_t micros) {
        return Checked(x.owner, x.b().Delay(x.value, micros));
      },
      py::arg("x"), py::arg("micros"),
      "x, after the device has been busy for `micros` (a computation of known length)");
  ops.def(
      "rng_uniform",
      [](const PyValue& seed, std::vector<int64_t> dims) {
        return Checked(seed.owner, seed.b().RngUniform(seed.value, dims));
      },
      py::arg("seed"), py::arg("shape"));
  ops.def(
      "rng_normal",
      [](const PyValue& seed, std::vector<int64_t> dims) {
        return Checked(seed.owner, seed.b().RngNormal(seed.value, dims));
      },
      py::arg("seed"), py::arg("shape"));
  // Collectives over mesh axes.
  ops.def(
      "all_reduce",
      [](const PyValue& x, py::object axes, const std::string& op) {
        ir::ReduceKind kind = ir::ReduceKind::kSum;
        if (op == "max") {
          kind = ir::ReduceKind::kMax;
        } else if (op != "sum") {
          throw StatusError(absl::InvalidArgumentError("all_reduce op is \"sum\" or \"max\""));
        }
        return Checked(x.owner, x.b().AllReduce(x.value, Axes(axes), kind));
      },
      py::arg("x"), py::arg("axes"), py::arg("op") = "sum",
      "Sum (or max) of x over the devices along the mesh axes");
  ops.def(
      "all_gather",
      [](const PyValue& x, py::object axes, int64_t axis, int64_t group_size) {
        return Checked(x.owner, x.b().AllGather(x.value, Axes(axes), axis, group_size));
      },
      py::arg("x"), py::arg("axes"), py::arg("axis"), py::arg("group_size"));
  ops.def(
      "reduce_scatter",
      [](const PyValue& x, py::object axes, int64_t axis, int64_t group_size) {
        return Checked(x.owner, x.b().ReduceScatter(x.value, Axes(axes), axis, group_size));
      },
      py::arg("x"), py::arg("axes"), py::arg("axis"), py::arg("group_size"));
  ops.def(
      "all_to_all",
      [](const PyValue& x, py::object axes, int64_t split_axis, int64_t concat_axis,
         int64_t group_size) {
        return Checked(x.owner, x.b().AllToAll(x.value, Axes(axes), split_axis, concat_axis,
                                               group_size));
      },
      py::arg("x"), py::arg("axes"), py::arg("split_axis"), py::arg("concat_axis"),
      py::arg("group_size"));
  ops.def(
      "ppermute",
      [](const PyValue& x, py::object axes, std::vector<std::pair<int64_t, int64_t>> perm) {
        return Checked(x.owner, x.b().CollectivePermute(x.value, Axes(axes), perm));
      },
      py::arg("x"), py::arg("axes"), py::arg("perm"));
  // Composites (fused kernels where the IR has them).
  ops.def("softmax", [](const PyValue& x) { return Checked(x.owner, ir::Softmax(x.b(), x.value)); },
          py::arg("x"), "softmax over the last dimension");
  ops.def("log_softmax",
          [](const PyValue& x) { return Checked(x.owner, ir::LogSoftmax(x.b(), x.value)); },
          py::arg("x"));
  ops.def("gelu", [](const PyValue& x) { return Checked(x.owner, ir::Gelu(x.b(), x.value)); },
          py::arg("x"), "GELU, tanh approximation");
  ops.def(
      "layer_norm",
      [](PyValue x, PyValue gamma, PyValue beta, float eps) {
        x = Here(x);
        gamma = In(x, gamma);
        beta = In(x, beta);
        return Checked(x.owner, ir::LayerNorm(x.b(), x.value, gamma.value, beta.value, eps));
      },
      py::arg("x"), py::arg("gamma"), py::arg("beta"), py::arg("epsilon") = 1e-5f,
      "layer norm over the last dimension, scaled by gamma and shifted by beta");
  ops.def(
      "causal_attention",
      [](PyValue q, PyValue k, PyValue v) {
        q = Here(q);
        k = In(q, k);
        v = In(q, v);
        return Checked(q.owner, ir::CausalAttention(q.b(), q.value, k.value, v.value));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), "softmax(q k^T / sqrt(d), causal) v: f32[b, t, d]");
  ops.def(
      "cross_entropy",
      [](PyValue logits, PyValue labels) {
        logits = Here(logits);
        labels = In(logits, labels);
        return Checked(logits.owner, ir::CrossEntropy(logits.b(), logits.value, labels.value));
      },
      py::arg("logits"), py::arg("labels"), "mean cross-entropy of f32[n, c] logits, i32[n] labels");
  ops.def(
      "adamw_update",
      [](PyValue param, PyValue grad, PyValue mom, PyValue vel, PyValue step, float lr,
         float beta1, float beta2, float eps, float wd) {
        param = Here(param);
        for (PyValue* x : {&grad, &mom, &vel, &step}) *x = In(param, *x);
        ir::AdamWOptions o{lr, beta1, beta2, eps, wd};
        ir::AdamWResult r = ir::AdamWUpdate(param.b(), param.value, grad.value, mom.value,
                                            vel.value, step.value, o);
        ThrowIfError(param.b().status());
        return py::make_tuple(PyValue{param.owner, r.param}, PyValue{param.owner, r.m},
                              PyValue{param.owner, r.v});
      },
      py::arg("param"), py::arg("grad"), py::arg("m"), py::arg("v"), py::arg("step"),
      py::arg("learning_rate") = 1e-3f, py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f,
      py::arg("epsilon") = 1e-8f, py::arg("weight_decay") = 0.01f,
      "One AdamW step; `step` is the 1-based f32[] step number. Returns (param, m, v)");

  m.def(
      "set_tracing",
      [](const std::shared_ptr<PyBuilder>& b) { g_tracing = b.get(); },
      py::arg("builder").none(true),
      "Makes `builder` the function traced on this thread (None: none)");
  m.def(
      "grad_function",
      [](const ir::Function& f, std::vector<int> wrt) { return Unwrap(ir::Grad(f, wrt)); },
      py::arg("function"), py::arg("wrt"),
      "f's results followed by d(result 0)/d(parameter k) for each k in wrt");
}

}  // namespace causeway::python
