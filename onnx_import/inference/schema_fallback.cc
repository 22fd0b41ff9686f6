// ONNX 1.12's schema inference for ops without a memplan rule: the node's concrete input types and the
// known contents of its inputs are handed to the op's TypeAndShapeInferenceFunction
// (onnx/defs/shape_inference.h, InferenceContext), after checks that keep those functions, which assume a
// node that passed onnx.checker, from reading out of bounds on a malformed one.
#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/onnx_pb.h>
#include <google/protobuf/arena.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "onnx_import/errors.h"
#include "onnx_import/inference/walker.h"

namespace memplan::shape {
namespace {

// The largest rank a shape input may describe (docs/limits.md). Real models stay below 10; numpy allows 64;
// this bound only keeps a hostile shape input from making ONNX's inference build billions of dimensions.
constexpr int64_t kMaxRank = 1024;

class NoSubgraphInferencer final : public onnx::GraphInferencer {
 public:
  std::vector<const onnx::TypeProto*> doInferencing(const std::vector<const onnx::TypeProto*>&,
                                                    const std::vector<const onnx::TensorProto*>&) override {
    fail_shape_inference("subgraphs are inferred by memplan's own control-flow rules");
  }
};

void fill_type(onnx::TypeProto& t, const Value& v) {
  auto* tt = t.mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(v.dtype));
  auto* s = tt->mutable_shape();
  for (int64_t d : v.shape) s->add_dim()->set_dim_value(d);
}

// A TensorProto on `arena` holding a value's known contents, in the field ONNX's ParseData reads for its
// dtype; nullptr for float16 and friends, which no shape computation reads.
onnx::TensorProto* tensor_of(const Value& v, google::protobuf::Arena* arena) {
  const size_t n = v.elements();
  switch (v.dtype) {
    case DType::Float32: case DType::Float64: case DType::Int64: case DType::UInt32: case DType::UInt64:
    case DType::Int32: case DType::Int16: case DType::Int8: case DType::UInt16: case DType::UInt8: case DType::Bool:
      break;
    default:
      return nullptr;
  }
  auto* t = google::protobuf::Arena::CreateMessage<onnx::TensorProto>(arena);
  t->set_data_type(dtype_to_onnx(v.dtype));
  for (int64_t d : v.shape) t->add_dims(d);
  switch (v.dtype) {
    case DType::Float32:
      for (size_t i = 0; i < n; ++i) t->add_float_data(static_cast<float>(real_at(v, i)));
      break;
    case DType::Float64:
      for (size_t i = 0; i < n; ++i) t->add_double_data(real_at(v, i));
      break;
    case DType::Int64:
      for (size_t i = 0; i < n; ++i) t->add_int64_data(int_at(v, i));
      break;
    case DType::UInt32: case DType::UInt64:
      for (size_t i = 0; i < n; ++i) t->add_uint64_data(static_cast<uint64_t>(int_at(v, i)));
      break;
    default:  // int32/16/8, uint16/8, bool
      for (size_t i = 0; i < n; ++i) t->add_int32_data(static_cast<int32_t>(int_at(v, i)));
      break;
  }
  return t;
}

// The InferenceContext ONNX's inference functions see. Every proto it hands them lives on one arena
// (google/protobuf/arena.h) whose first block is inside the context: a node's types and shape tensors
// cost no allocation of their own and are freed together.
class SchemaContext final : public onnx::InferenceContext {
 public:
  explicit SchemaContext(const NodeContext& ctx) : ctx_(ctx), arena_(arena_options(block_, sizeof block_)) {
    const size_t n = ctx.num_inputs();
    input_types_.assign(n, nullptr);
    data_.assign(n, nullptr);
    symbolic_.assign(n, nullptr);
    for (size_t i = 0; i < n; ++i)
      if (const Value* v = ctx.input(i)) {
        input_types_[i] = google::protobuf::Arena::CreateMessage<onnx::TypeProto>(&arena_);
        fill_type(*input_types_[i], *v);
      }
    output_types_.resize(static_cast<size_t>(ctx.node().output_size()));
    for (auto& t : output_types_) t = google::protobuf::Arena::CreateMessage<onnx::TypeProto>(&arena_);
  }

  const onnx::AttributeProto* getAttribute(const std::string& name) const override { return ctx_.attr(name); }
  size_t getNumInputs() const override { return ctx_.num_inputs(); }
  const onnx::TypeProto* getInputType(size_t i) const override {
    return i < input_types_.size() && ctx_.input(i) ? input_types_[i] : nullptr;
  }
  const onnx::TensorProto* getInputData(size_t i) const override {
    const Value* v = ctx_.input(i);
    if (!v || !v->known()) return nullptr;
    if (!data_[i]) data_[i] = tensor_of(*v, &arena_);
    return data_[i];
  }
  size_t getNumOutputs() const override { return output_types_.size(); }
  onnx::TypeProto* getOutputType(size_t i) override { return output_types_.at(i); }
  onnx::GraphInferencer* getGraphAttributeInferencer(const std::string&) override { return &no_subgraphs_; }
  const onnx::SparseTensorProto* getInputSparseData(size_t) const override { return nullptr; }
  const onnx::TensorShapeProto* getSymbolicInput(size_t i) const override {
    const Value* v = ctx_.input(i);
    if (!v || !v->ints || v->shape.size() > 1) return nullptr;
    if (!symbolic_[i]) {
      symbolic_[i] = google::protobuf::Arena::CreateMessage<onnx::TensorShapeProto>(&arena_);
      for (int64_t x : *v->ints) symbolic_[i]->add_dim()->set_dim_value(x);
    }
    return symbolic_[i];
  }

  const onnx::TypeProto& output_type(size_t i) const { return *output_types_[i]; }

 private:
  static google::protobuf::ArenaOptions arena_options(char* block, size_t size) {
    google::protobuf::ArenaOptions o;
    o.initial_block = block;
    o.initial_block_size = size;
    return o;
  }

  const NodeContext& ctx_;
  alignas(16) char block_[8192];
  mutable google::protobuf::Arena arena_;
  std::vector<onnx::TypeProto*> input_types_;  // nullptr where the input is omitted
  mutable std::vector<onnx::TensorProto*> data_;
  mutable std::vector<onnx::TensorShapeProto*> symbolic_;
  std::vector<onnx::TypeProto*> output_types_;
  NoSubgraphInferencer no_subgraphs_;
};

// A fully known output type, or nullopt when ONNX left its element type, rank or any dim unknown.
std::optional<Value> concrete(const onnx::TypeProto& t, const NodeContext& ctx, size_t index) {
  if (t.value_case() != onnx::TypeProto::kTensorType && t.value_case() != onnx::TypeProto::VALUE_NOT_SET)
    ctx.fail("output '" + ctx.node().output(static_cast<int>(index)) + "' is " + std::string(value_kind(t)) +
             "; memplan analyses tensor values only");
  if (!t.has_tensor_type() || t.tensor_type().elem_type() == 0 || !t.tensor_type().has_shape()) return std::nullopt;
  Value v;
  const auto dtype = dtype_from_onnx(t.tensor_type().elem_type());
  if (!dtype) ctx.fail("output has unknown data type " + std::to_string(t.tensor_type().elem_type()));
  v.dtype = *dtype;
  for (const auto& d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return std::nullopt;
    v.shape.push_back(d.dim_value());
  }
  return v;
}

// ONNX's inference functions assume a node that passed the checker; a node with too few inputs or a
// required input left empty would make them dereference null. Such nodes are refused here instead.
void check_arity(const NodeContext& ctx, const onnx::OpSchema& schema) {
  const auto& node = ctx.node();
  if (node.input_size() < schema.min_input() || node.input_size() > schema.max_input())
    ctx.fail("has " + std::to_string(node.input_size()) + " inputs; opset " + std::to_string(schema.SinceVersion()) +
             " of the op takes " + std::to_string(schema.min_input()) + " to " + std::to_string(schema.max_input()));
  if (node.output_size() < schema.min_output() || node.output_size() > schema.max_output())
    ctx.fail("has " + std::to_string(node.output_size()) + " outputs; opset " + std::to_string(schema.SinceVersion()) +
             " of the op gives " + std::to_string(schema.min_output()) + " to " + std::to_string(schema.max_output()));
  const auto& formals = schema.inputs();
  for (int i = 0; i < node.input_size() && !formals.empty(); ++i) {
    const auto& f = formals[std::min<size_t>(static_cast<size_t>(i), formals.size() - 1)];
    if (f.GetOption() != onnx::OpSchema::Optional && node.input(i).empty())
      ctx.fail("required input " + std::to_string(i) + " ('" + f.GetName() + "') is empty");
  }
}

// ONNX 1.12's inference functions also index input dims without checking ranks: Gemm copies B.dim(1)
// and the Conv family reads the weight's dims per spatial axis of X. Inputs of the wrong rank made them
// read out of bounds (fuzz/findings/, bench/fuzz.md); such nodes are refused here instead.
void check_ranks(const NodeContext& ctx) {
  const std::string& op = ctx.node().op_type();
  // ONNX 1.12's convPoolShapeInference divides by strides (and Conv by group) unchecked: a zero or negative
  // value raised SIGFPE (fuzz/regressions/import_bytes/onnx-convpool-inference-fpe-zero-stride.onnx).
  for (const onnx::AttributeProto& a : ctx.node().attribute()) {
    if (a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape") {
      for (int64_t v : a.ints())
        if (v <= 0) ctx.fail("attribute " + a.name() + " has a value of " + std::to_string(v) + "; it must be positive");
    } else if (a.name() == "group" && a.i() <= 0) {
      ctx.fail("attribute group is " + std::to_string(a.i()) + "; it must be positive");
    }
  }
  auto rank = [&](size_t i) { return ctx.input(i) ? static_cast<int64_t>(ctx.input(i)->shape.size()) : -1; };
  // Inputs whose rank the spec fixes and whose dimensions ONNX 1.12's inference function reads unchecked
  // (SEGV on a lower rank): Gemm-6 copies B.dim(1) (fuzz/regressions/import_bytes/onnx-gemm6-...),
  // STFT-17 signal.dim(1) (fuzz/regressions/import_bytes/onnx-stft17-inference-segv-rank1-signal.onnx),
  // RNN/GRU/LSTM X.dim(1) (found by tests/reliability/schema_rank_sweep_test.cc).
  struct FixedRank {
    const char* op;
    size_t input;
    int64_t rank;
    const char* name;
  };
  static constexpr FixedRank kFixedRanks[] = {
      {"Gemm", 0, 2, "A"}, {"Gemm", 1, 2, "B"},          //
      {"RNN", 0, 3, "X"},  {"RNN", 1, 3, "W"},  {"RNN", 2, 3, "R"},  //
      {"GRU", 0, 3, "X"},  {"GRU", 1, 3, "W"},  {"GRU", 2, 3, "R"},  //
      {"LSTM", 0, 3, "X"}, {"LSTM", 1, 3, "W"}, {"LSTM", 2, 3, "R"},  //
      {"STFT", 0, 3, "signal"},
  };
  for (const FixedRank& f : kFixedRanks)
    if (op == f.op && rank(f.input) >= 0 && rank(f.input) != f.rank)
      ctx.fail("input " + std::to_string(f.input) + " (" + f.name + ") has rank " + std::to_string(rank(f.input)) +
               "; " + op + " takes a " + std::to_string(f.rank) + "-D " + f.name);
  // MaxUnpool's indices I have X's shape (the spec); ONNX 1.12's maxUnpoolShapeInference dereferenced a null
  // pointer on a scalar I (fuzz/regressions/import_bytes/onnx-maxunpool11-inference-segv-rank0-indices.onnx).
  if (op == "MaxUnpool" && rank(0) >= 0 && rank(1) >= 0 && rank(1) != rank(0))
    ctx.fail("input 1 (I) has rank " + std::to_string(rank(1)) + " but input 0 (X) has rank " +
             std::to_string(rank(0)) + "; MaxUnpool's indices have X's shape");
  // A 1-D shape input whose values are unknown gives ONNX's inference the output rank from its length alone:
  // a [2^31] shape input made ConstantOfShape-9 and Expand build a 2^31-dimension shape, 20 GB
  // (fuzz/regressions/analysis_mutate/onnx-constantofshape-inference-oom-2e31-element-shape.onnx).
  static constexpr std::pair<const char*, size_t> kShapeInputs[] = {
      {"ConstantOfShape", 0}, {"Expand", 1}, {"Reshape", 1}};
  for (const auto& [shape_op, i] : kShapeInputs)
    if (op == shape_op && rank(i) == 1 && ctx.input(i)->shape[0] > kMaxRank)
      ctx.fail("input " + std::to_string(i) + " is a shape of " + std::to_string(ctx.input(i)->shape[0]) +
               " dimensions; memplan handles tensors of rank up to " + std::to_string(kMaxRank));
  // GatherND-12/13 index the data shape by batch_dims unchecked: a negative value was a SEGV
  // (schema_rank_sweep_test). The spec requires 0 <= batch_dims < min(rank(data), rank(indices)).
  if (op == "GatherND" && rank(0) >= 0 && rank(1) >= 0)
    for (const onnx::AttributeProto& a : ctx.node().attribute())
      if (a.name() == "batch_dims" && (a.i() < 0 || a.i() >= std::min(rank(0), rank(1))))
        ctx.fail("attribute batch_dims is " + std::to_string(a.i()) + "; it must be at least 0 and below " +
                 std::to_string(std::min(rank(0), rank(1))) + ", the smaller of the data and indices ranks");
  size_t x = 0, w = 1;
  if (op == "QLinearConv") w = 3;
  else if (op != "Conv" && op != "ConvTranspose" && op != "ConvInteger") return;
  if (rank(x) >= 0 && rank(w) >= 0 && rank(x) != rank(w))
    ctx.fail("input has rank " + std::to_string(rank(x)) + " but the weight has rank " + std::to_string(rank(w)) +
             "; " + op + " needs them equal");
}

template <typename T>
void append_raw(std::string& key, const T& x) {
  key.append(reinterpret_cast<const char*>(&x), sizeof x);
}

template <typename T>
void append_list(std::string& key, const std::vector<T>& xs) {
  append_raw(key, xs.size());
  key.append(reinterpret_cast<const char*>(xs.data()), xs.size() * sizeof(T));
}

// Everything an inference function and the checks before it read: the schema (op, domain and version), each
// input's name being empty or not, dtype, shape and known contents, the output count and which outputs are read,
// and the attributes as serialized. Equal keys are equal inputs to ONNX; a miss only costs one more inference.
void memo_key(std::string& key, const NodeContext& ctx, const onnx::OpSchema& schema) {
  key.clear();
  append_raw(key, &schema);
  append_raw(key, ctx.num_inputs());
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Value* v = ctx.input(i);
    append_raw(key, static_cast<char>(ctx.node().input(static_cast<int>(i)).empty() ? 0 : v ? 2 : 1));
    if (!v) continue;
    append_raw(key, v->dtype);
    append_list(key, v->shape);
    append_raw(key, static_cast<char>(v->ints ? 1 : v->reals ? 2 : 0));
    if (v->ints) append_list(key, *v->ints);
    if (v->reals) append_list(key, *v->reals);
  }
  append_raw(key, ctx.num_outputs());
  for (size_t i = 0; i < ctx.num_outputs(); ++i) append_raw(key, ctx.output_used(i));
  for (const onnx::AttributeProto& a : ctx.node().attribute()) {
    const size_t at = key.size();
    append_raw(key, size_t{0});  // the attribute's length, written below: no two lists of attributes collide
    a.AppendToString(&key);
    const size_t length = key.size() - at - sizeof(size_t);
    std::memcpy(key.data() + at, &length, sizeof length);
  }
}

}  // namespace

void schema_fallback(NodeContext& ctx, const onnx::OpSchema& schema, SchemaMemo& memo) {
  // memplan's own rules handle every op that takes sequences or optionals (rules/sequences.cc); the others
  // take tensors, and ONNX's inference would be handed a tensor type for one.
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (const Value* v = ctx.input(i); v && !v->is_tensor())
      ctx.fail("input " + std::to_string(i) + " ('" + ctx.node().input(static_cast<int>(i)) + "') is " + kind_text(*v) +
               "; " + ctx.op() + " takes a tensor there");
  memo_key(memo.key, ctx, schema);
  auto known = memo.answers.find(memo.key);
  if (known == memo.answers.end()) {
    check_arity(ctx, schema);
    check_ranks(ctx);
    SchemaContext sc(ctx);
    try {
      schema.GetTypeAndShapeInferenceFunction()(sc);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (auto pos = msg.find("\n"); pos != std::string::npos) msg.resize(pos);
      ctx.fail("shape inference failed: " + msg);
    }
    std::vector<std::optional<Value>> answer(ctx.num_outputs());
    for (size_t i = 0; i < ctx.num_outputs(); ++i)
      if (ctx.output_used(i)) answer[i] = concrete(sc.output_type(i), ctx, i);
    known = memo.answers.emplace(memo.key, std::move(answer)).first;
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (known->second[i]) ctx.set_output(i, Value(*known->second[i]));
  // ONNX 1.12's Reshape inference takes a target without a 0 or -1 as is, even when its element count differs
  // from the input's (a branch that never runs at these inputs, Silero VAD's 8 kHz frames fed 16 kHz audio).
  if (ctx.op() == "Reshape" && ctx.input(0) && ctx.outputs_set()[0]) {
    const uint64_t in = checked_elements(ctx.input(0)->shape, "input 0");
    const uint64_t out = checked_elements(ctx.outputs()[0].shape, "the output");
    if (in != out)
      ctx.fail("cannot reshape " + std::to_string(in) + " elements into a shape of " + std::to_string(out) +
               " elements");
  }
}

}  // namespace memplan::shape
