// The importer on models built here (no files): conversion and results on
// the cpu kind, and every kind of bad input as a clear error naming what
// was wrong. ONNX's own suite is conformance_test.cc.
#include "causeway/frontend/onnx/import.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/backend/executable.h"
#include "causeway/ir/elements.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace causeway::onnx_import {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void AddValue(::onnx::ValueInfoProto* v, const std::string& name, int32_t type,
              const std::vector<std::string>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  for (const std::string& d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) {
      dim->set_dim_value(std::stoll(d));
    } else {
      dim->set_dim_param(d);
    }
  }
}

// y = relu(x W + b): x [batch, 3], W [3, 2], b [2] initializers.
::onnx::ModelProto Mlp(const std::string& batch = "batch") {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("mlp");
  AddValue(g->add_input(), "x", 1, {batch, "3"});
  AddValue(g->add_output(), "y", 1, {batch, "2"});
  auto* w = g->add_initializer();
  w->set_name("W");
  w->set_data_type(1);
  w->add_dims(3);
  w->add_dims(2);
  for (float v : {1.f, -1.f, 2.f, 0.5f, -3.f, 1.f}) w->add_float_data(v);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(1);
  b->add_dims(2);
  for (float v : {0.5f, -10.f}) b->add_float_data(v);
  const auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("MatMul", {"x", "W"}, "xw");
  node("Add", {"xw", "b"}, "z");
  node("Relu", {"z"}, "y");
  return m;
}

HostTensor F32(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
  HostTensor t;
  t.name = name;
  t.onnx_type = 1;
  t.literal = ir::Literal::F32(std::move(dims), v);
  return t;
}

std::vector<float> RunOnCpu(const ImportedModel& m, const std::vector<const ir::Literal*>& in) {
  auto exe = backend::cpu::Compile(m.function);
  CW_CHECK_OK(exe.status());
  ir::Literal out(m.function.output_shape(0));
  std::vector<const void*> args;
  for (const ir::Literal* l : in) args.push_back(l->data());
  std::vector<void*> outs = {out.data()};
  CW_CHECK_OK((*exe)->Run(args, outs, backend::RunContext{}));
  auto v = out.values<float>();
  return std::vector<float>(v.begin(), v.end());
}

TEST(OnnxImportTest, AnMlpWithASymbolicBatchRunsAtTheGivenShape) {
  ImportOptions o;
  o.inputs.push_back(F32("x", {2, 3}, {1, 2, 3, 0, 0, 1}));
  ASSERT_OK_AND_ASSIGN(ImportedModel m, Import(Mlp().SerializeAsString(), o));
  EXPECT_EQ(m.opset, 13);
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].shape, ir::Shape(ir::DType::kF32, {2, 3}));
  EXPECT_TRUE(m.is_parameter[0]);
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].name, "y");
  // Row 1: [1,2,3] W = [1*1+2*2+3*-3, 1*-1+2*.5+3*1] = [-4, 3]; + b = [-3.5, -7].
  // Row 2: [0,0,1] W = [-3, 1]; + b = [-2.5, -9]. relu: all 0.
  EXPECT_THAT(RunOnCpu(m, {&o.inputs[0].literal}), ElementsAre(0, 0, 0, 0));
  o.inputs[0] = F32("x", {1, 3}, {0, 4, 0});
  ASSERT_OK_AND_ASSIGN(m, Import(Mlp().SerializeAsString(), o));
  // [0,4,0] W = [8, 2]; + b = [8.5, -8]; relu = [8.5, 0].
  EXPECT_THAT(RunOnCpu(m, {&o.inputs[0].literal}), ElementsAre(8.5f, 0));
}

TEST(OnnxImportTest, TrainableWeightsAreParametersAfterTheInputs) {
  ImportOptions o;
  o.inputs.push_back(F32("x", {1, 3}, {0, 4, 0}));
  o.trainable = true;
  ASSERT_OK_AND_ASSIGN(ImportedModel m, Import(Mlp().SerializeAsString(), o));
  EXPECT_THAT(m.weights, ElementsAre("W", "b"));
  ASSERT_EQ(m.function.num_parameters(), 3);
  EXPECT_EQ(m.function.parameter_shape(1), ir::Shape(ir::DType::kF32, {3, 2}));
  ASSERT_OK_AND_ASSIGN(std::vector<HostTensor> w, Weights(Mlp().SerializeAsString()));
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].name, "W");
  EXPECT_EQ(w[1].name, "b");
  // The model's own weights give its output; others give theirs.
  EXPECT_THAT(RunOnCpu(m, {&o.inputs[0].literal, &w[0].literal, &w[1].literal}),
              ElementsAre(8.5f, 0));
  const ir::Literal b2 = ir::Literal::F32({2}, {1.0f, 20.0f});
  // [0,4,0] W = [8, 2]; + [1, 20] = [9, 22].
  EXPECT_THAT(RunOnCpu(m, {&o.inputs[0].literal, &w[0].literal, &b2}), ElementsAre(9, 22));
}

TEST(OnnxImportTest, BytesThatAreNotAModelAreRefused) {
  EXPECT_THAT(Import("definitely not protobuf \xff\xff\xff"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an ONNX model")));
  EXPECT_THAT(ImportFile("/nonexistent/model.onnx"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/model.onnx")));
}

TEST(OnnxImportTest, AModelThatFailsTheCheckerIsRefused) {
  ::onnx::ModelProto m = Mlp();
  m.mutable_graph()->mutable_node(1)->set_input(0, "undefined_value");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checker")));
}

TEST(OnnxImportTest, ASymbolicDimensionWithoutAnInputShapeIsNamed) {
  EXPECT_THAT(Import(Mlp().SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'x'"), HasSubstr("batch"))));
}

TEST(OnnxImportTest, AnInputOfTheWrongShapeOrDtypeIsNamed) {
  ImportOptions o;
  o.inputs.push_back(F32("x", {2, 4}, std::vector<float>(8, 0)));
  EXPECT_THAT(Import(Mlp().SerializeAsString(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input 'x' is f32[2,4]")));
  HostTensor t;
  t.name = "x";
  t.onnx_type = 6;
  t.literal = ir::Literal::I32({2, 3}, std::vector<int32_t>(6, 0));
  o.inputs = {t};
  EXPECT_THAT(Import(Mlp().SerializeAsString(), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the model wants float")));
}

TEST(OnnxImportTest, AnUnsupportedOpIsNamedWithItsNode) {
  ::onnx::ModelProto m = Mlp("2");
  auto* n = m.mutable_graph()->mutable_node(2);
  n->set_op_type("LpNormalization");  // a real ONNX op the importer does not convert
  n->set_name("the_norm");
  absl::StatusOr<ImportedModel> got = Import(m.SerializeAsString());
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kUnimplemented,
                            AllOf(HasSubstr("'the_norm'"), HasSubstr("op LpNormalization"))));
}

TEST(OnnxImportTest, AnInt64ConstantOutsideInt32IsRefusedWhereTheFunctionUsesIt) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("add_big");
  AddValue(g->add_input(), "x", 7, {"2"});
  AddValue(g->add_output(), "y", 7, {"2"});
  auto* c = g->add_initializer();
  c->set_name("big");
  c->set_data_type(7);
  c->add_dims(2);
  c->add_int64_data(int64_t{1} << 40);
  c->add_int64_data(1);
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("big");
  n->add_output("y");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr("1099511627776"), HasSubstr("outside int32"))));
}

TEST(OnnxImportTest, TheSupportedOpsAreListedSorted) {
  const std::vector<std::string> ops = SupportedOps();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  for (const char* op : {"Conv", "MatMul", "Gemm", "Softmax", "LayerNormalization", "MaxPool"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  }
}

// x float16 [3], ids int64 [2]: y = float16(float(x)^2), b = bfloat16(x),
// twice = ids + ids, q = uint8(ids) (an initializer of uint8 added).
::onnx::ModelProto NarrowTypes() {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("narrow");
  AddValue(g->add_input(), "x", 10, {"3"});
  AddValue(g->add_input(), "ids", 7, {"2"});
  AddValue(g->add_output(), "y", 10, {"3"});
  AddValue(g->add_output(), "b", 16, {"3"});
  AddValue(g->add_output(), "twice", 7, {"2"});
  AddValue(g->add_output(), "q", 2, {"2"});
  auto* k = g->add_initializer();
  k->set_name("k");
  k->set_data_type(2);  // uint8
  k->add_dims(2);
  k->add_int32_data(200);
  k->add_int32_data(7);
  const auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out,
                        int64_t to = 0) {
    auto* n = g->add_node();
    n->set_op_type(op);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    if (to != 0) {
      auto* a = n->add_attribute();
      a->set_name("to");
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(to);
    }
  };
  node("Cast", {"x"}, "xf", 1);
  node("Mul", {"xf", "xf"}, "sq");
  node("Cast", {"sq"}, "y", 10);
  node("Cast", {"xf"}, "b", 16);
  node("Add", {"ids", "ids"}, "twice");
  node("Cast", {"ids"}, "ids8", 2);
  node("Add", {"ids8", "k"}, "q");
  return m;
}

TEST(OnnxImportTest, NarrowTypesAreStoredAsSuchAndComputedWide) {
  ::onnx::TensorProto x;
  x.set_data_type(10);
  x.add_dims(3);
  // 1 + 2^-10, 3, -0.5 as float16 bits.
  for (float v : {1.0f + std::ldexp(1.0f, -10), 3.0f, -0.5f}) {
    x.add_int32_data(ir::FloatToHalf(v));
  }
  ::onnx::TensorProto ids;
  ids.set_data_type(7);
  ids.add_dims(2);
  ids.add_int64_data(100);
  ids.add_int64_data(-3);
  ImportOptions o;
  ASSERT_OK_AND_ASSIGN(HostTensor xt, ParseTensor(x.SerializeAsString()));
  ASSERT_OK_AND_ASSIGN(HostTensor it, ParseTensor(ids.SerializeAsString()));
  xt.name = "x";
  it.name = "ids";
  o.inputs = {xt, it};
  ASSERT_OK_AND_ASSIGN(ImportedModel m, Import(NarrowTypes().SerializeAsString(), o));
  EXPECT_EQ(m.inputs[0].shape, ir::Shape(ir::DType::kF16, {3}));
  EXPECT_EQ(m.inputs[1].shape, ir::Shape(ir::DType::kI64, {2}));
  EXPECT_EQ(m.function.parameter_shape(0), ir::Shape(ir::DType::kF16, {3}));
  ASSERT_EQ(m.outputs.size(), 4u);
  EXPECT_EQ(m.outputs[0].shape, ir::Shape(ir::DType::kF16, {3}));
  EXPECT_EQ(m.outputs[1].shape, ir::Shape(ir::DType::kBF16, {3}));
  EXPECT_EQ(m.outputs[2].shape, ir::Shape(ir::DType::kI64, {2}));
  EXPECT_EQ(m.outputs[3].shape, ir::Shape(ir::DType::kU8, {2}));

  auto exe = backend::cpu::Compile(m.function);
  ASSERT_OK(exe.status());
  ASSERT_OK_AND_ASSIGN(ir::Literal xs, StoredLiteral(xt));
  ASSERT_OK_AND_ASSIGN(ir::Literal is, StoredLiteral(it));
  EXPECT_EQ(xs.shape().dtype, ir::DType::kF16);
  EXPECT_EQ(is.values<int64_t>()[1], -3);
  std::vector<ir::Literal> outs;
  std::vector<void*> out_ptrs;
  for (int i = 0; i < m.function.num_outputs(); ++i) outs.emplace_back(m.function.output_shape(i));
  for (ir::Literal& l : outs) out_ptrs.push_back(l.data());
  std::vector<const void*> args = {xs.data(), is.data()};
  ASSERT_OK((*exe)->Run(args, out_ptrs, backend::RunContext{}));
  // (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20, rounded to float16: 1 + 2^-9.
  EXPECT_EQ(ir::ElementAsDouble(outs[0], 0), 1.0 + std::ldexp(1.0, -9));
  EXPECT_EQ(ir::ElementAsDouble(outs[0], 1), 9.0);
  // bfloat16 keeps 8 bits: 1 + 2^-10 rounds to 1.
  EXPECT_EQ(ir::ElementAsDouble(outs[1], 0), 1.0);
  EXPECT_EQ(ir::ElementAsDouble(outs[1], 2), -0.5);
  EXPECT_THAT(outs[2].values<int64_t>(), ElementsAre(200, -6));
  // uint8: 100 + 200 wraps to 44; -3 is 253, + 7 wraps to 4.
  EXPECT_THAT(outs[3].values<uint8_t>(), ElementsAre(44, 4));

  // Python's arrays: parameters and results in their compute dtypes.
  ImportOptions wide = o;
  wide.stored_dtypes = false;
  ASSERT_OK_AND_ASSIGN(ImportedModel w, Import(NarrowTypes().SerializeAsString(), wide));
  EXPECT_EQ(w.function.parameter_shape(0), ir::Shape(ir::DType::kF32, {3}));
  EXPECT_EQ(w.function.parameter_shape(1), ir::Shape(ir::DType::kI32, {2}));
  EXPECT_EQ(w.function.output_shape(2), ir::Shape(ir::DType::kI32, {2}));
  EXPECT_EQ(w.function.output_shape(3), ir::Shape(ir::DType::kI32, {2}));

  // A literal read from a file comes back to the same stored values.
  const HostTensor back = FromLiteral("ids", is);
  EXPECT_EQ(back.onnx_type, 7);
  EXPECT_THAT(back.ints, ElementsAre(100, -3));
  ASSERT_OK_AND_ASSIGN(ir::Literal again, StoredLiteral(back));
  EXPECT_EQ(again, is);
}

}  // namespace
}  // namespace causeway::onnx_import
