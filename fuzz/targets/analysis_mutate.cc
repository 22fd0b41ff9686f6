// Fuzz target: the whole analysis on mutated valid models. A custom mutator parses the input as an ONNX
// ModelProto and changes what real models get wrong (dims, dtypes, attributes, node inputs and outputs,
// op types, domains, opsets; nodes dropped, duplicated or reordered; initializers dropped), in the main
// graph or any If/Loop/Scan body, so most mutants still parse and reach shape inference, the cost models
// and the planner; one mutation in eight is libFuzzer's own byte-level one. Seeds: zoo and libonnx-testdata
// models (fuzz/corpus/analysis_mutate/).
//
// Each input is imported as `memplan inspect` does, then estimated for every runtime in inference and for
// one training configuration, as `memplan estimate` does. Expected: a result, or memplan::InputError.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fuzz/fuzz_checks.h"
#include "onnx_import/graph_builder.h"
#include "report/estimate.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace memplan::fuzz {
namespace {

using Rng = std::mt19937_64;

uint64_t pick(Rng& rng, uint64_t n) { return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); }
bool one_in(Rng& rng, uint64_t n) { return pick(rng, n) == 0; }

// Dimension values that reach every branch of shape and byte arithmetic: zero, one, ordinary, negative,
// and sizes whose byte count overflows 64 bits.
int64_t interesting_int(Rng& rng, int64_t original) {
  static const int64_t kValues[] = {0, 1, 2, 3, 4, 7, 64, -1, -2, 1 << 20, int64_t{1} << 31, int64_t{1} << 40,
                                    int64_t{1} << 50, int64_t{1} << 62, INT64_MAX, INT64_MIN};
  switch (pick(rng, 3)) {
    case 0: return static_cast<int64_t>(static_cast<uint64_t>(original) + pick(rng, 5) - 2);  // wraps, no UB
    default: return kValues[pick(rng, std::size(kValues))];
  }
}

const char* const kOps[] = {
    "Add", "Mul", "MatMul", "Gemm", "Conv", "Relu", "Reshape", "Transpose", "Concat", "Split", "Slice",
    "Gather", "Shape", "Expand", "Squeeze", "Unsqueeze", "Softmax", "LayerNormalization", "BatchNormalization",
    "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Identity", "Cast", "Constant", "ConstantOfShape",
    "Range", "Where", "Equal", "ReduceMean", "ReduceSum", "Tile", "Pad", "Resize", "If", "Loop", "Scan",
    "Attention", "SkipLayerNormalization", "FastGelu", "Dropout", "Einsum", "TopK", "NonZero", "Unknown"};
const char* const kAttributes[] = {"axis", "axes", "perm", "keepdims", "kernel_shape", "strides", "pads",
                                   "dilations", "group", "to", "value", "num_outputs", "split", "transA"};

// Every graph of the model: the main graph and, recursively, the bodies of If/Loop/Scan.
void collect_graphs(onnx::GraphProto* g, std::vector<onnx::GraphProto*>& out) {
  out.push_back(g);
  for (auto& node : *g->mutable_node())
    for (auto& attr : *node.mutable_attribute()) {
      if (attr.has_g()) collect_graphs(attr.mutable_g(), out);
      for (auto& sub : *attr.mutable_graphs()) collect_graphs(&sub, out);
    }
}

// A value name the graph already uses (so rewiring makes cycles, duplicates and dangling edges).
std::string some_name(Rng& rng, const onnx::GraphProto& g) {
  std::vector<const std::string*> names;
  for (const auto& v : g.input()) names.push_back(&v.name());
  for (const auto& t : g.initializer()) names.push_back(&t.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) names.push_back(&o);
  if (names.empty() || one_in(rng, 8)) return one_in(rng, 2) ? "" : "fuzz_new_value";
  return *names[pick(rng, names.size())];
}

onnx::TensorShapeProto* some_shape(Rng& rng, onnx::GraphProto& g) {
  std::vector<onnx::ValueInfoProto*> values;
  for (auto& v : *g.mutable_input()) values.push_back(&v);
  for (auto& v : *g.mutable_output()) values.push_back(&v);
  for (auto& v : *g.mutable_value_info()) values.push_back(&v);
  if (values.empty()) return nullptr;
  onnx::ValueInfoProto* v = values[pick(rng, values.size())];
  if (!v->type().has_tensor_type()) return nullptr;
  return v->mutable_type()->mutable_tensor_type()->mutable_shape();
}

void mutate_dim(Rng& rng, onnx::GraphProto& g) {
  if (g.initializer_size() > 0 && one_in(rng, 2)) {
    auto& t = *g.mutable_initializer(static_cast<int>(pick(rng, g.initializer_size())));
    if (t.dims_size() == 0 || one_in(rng, 6)) t.add_dims(interesting_int(rng, 1));
    else if (one_in(rng, 6)) t.mutable_dims()->RemoveLast();
    else {
      const int i = static_cast<int>(pick(rng, t.dims_size()));
      t.set_dims(i, interesting_int(rng, t.dims(i)));
    }
    return;
  }
  onnx::TensorShapeProto* shape = some_shape(rng, g);
  if (!shape) return;
  if (shape->dim_size() == 0 || one_in(rng, 6)) {
    shape->add_dim()->set_dim_value(interesting_int(rng, 1));
    return;
  }
  auto* dim = shape->mutable_dim(static_cast<int>(pick(rng, shape->dim_size())));
  switch (pick(rng, 3)) {
    case 0: dim->set_dim_param(one_in(rng, 2) ? "batch" : "fuzz_dim"); break;
    case 1: dim->clear_value(); break;  // unnamed and unknown
    default: dim->set_dim_value(interesting_int(rng, dim->has_dim_value() ? dim->dim_value() : 1));
  }
}

void mutate_dtype(Rng& rng, onnx::GraphProto& g) {
  const int dtype = static_cast<int>(pick(rng, 26)) - 1;  // -1 and past the last known code too
  if (g.initializer_size() > 0 && one_in(rng, 2)) {
    g.mutable_initializer(static_cast<int>(pick(rng, g.initializer_size())))->set_data_type(dtype);
    return;
  }
  std::vector<onnx::ValueInfoProto*> values;
  for (auto& v : *g.mutable_input()) values.push_back(&v);
  for (auto& v : *g.mutable_output()) values.push_back(&v);
  if (values.empty()) return;
  values[pick(rng, values.size())]->mutable_type()->mutable_tensor_type()->set_elem_type(dtype);
}

void mutate_attribute(Rng& rng, onnx::NodeProto& node) {
  if (node.attribute_size() == 0 || one_in(rng, 5)) {
    auto* a = node.add_attribute();
    a->set_name(kAttributes[pick(rng, std::size(kAttributes))]);
    if (one_in(rng, 2)) {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(interesting_int(rng, 0));
    } else {
      a->set_type(onnx::AttributeProto::INTS);
      for (uint64_t k = pick(rng, 5); k > 0; --k) a->add_ints(interesting_int(rng, 0));
    }
    return;
  }
  const int index = static_cast<int>(pick(rng, node.attribute_size()));
  auto* a = node.mutable_attribute(index);
  switch (pick(rng, 6)) {
    case 0: node.mutable_attribute()->DeleteSubrange(index, 1); break;
    case 1: a->set_i(interesting_int(rng, a->i())); break;
    case 2:
      if (a->ints_size() > 0) {
        const int i = static_cast<int>(pick(rng, a->ints_size()));
        a->set_ints(i, interesting_int(rng, a->ints(i)));
      } else {
        a->add_ints(interesting_int(rng, 0));
      }
      break;
    case 3: a->set_type(static_cast<onnx::AttributeProto::AttributeType>(pick(rng, 15))); break;
    case 4: a->set_f(one_in(rng, 2) ? -1.0f : 1e30f); break;
    default:
      if (a->has_t()) {
        auto* t = a->mutable_t();
        if (t->dims_size() > 0) t->set_dims(0, interesting_int(rng, t->dims(0)));
        else t->set_data_type(static_cast<int>(pick(rng, 24)));
      } else {
        a->set_name(kAttributes[pick(rng, std::size(kAttributes))]);
      }
  }
}

void mutate_edges(Rng& rng, onnx::GraphProto& g, onnx::NodeProto& node) {
  switch (pick(rng, 5)) {
    case 0:
      if (node.input_size() > 0) node.set_input(static_cast<int>(pick(rng, node.input_size())), some_name(rng, g));
      break;
    case 1:
      if (node.output_size() > 0) node.set_output(static_cast<int>(pick(rng, node.output_size())), some_name(rng, g));
      break;
    case 2: node.add_input(some_name(rng, g)); break;
    case 3: if (node.input_size() > 0) node.mutable_input()->RemoveLast(); break;
    default:
      if (g.output_size() > 0)
        g.mutable_output(static_cast<int>(pick(rng, g.output_size())))->set_name(some_name(rng, g));
  }
}

void mutate_nodes(Rng& rng, onnx::GraphProto& g) {
  if (g.node_size() == 0) return;
  const int i = static_cast<int>(pick(rng, g.node_size()));
  switch (pick(rng, 4)) {
    case 0: g.mutable_node()->DeleteSubrange(i, 1); break;
    case 1: *g.add_node() = g.node(i); break;  // a second producer of the same outputs
    case 2: g.mutable_node()->SwapElements(i, static_cast<int>(pick(rng, g.node_size()))); break;
    default:
      if (g.initializer_size() > 0)
        g.mutable_initializer()->DeleteSubrange(static_cast<int>(pick(rng, g.initializer_size())), 1);
  }
}

void mutate_once(Rng& rng, onnx::ModelProto& model) {
  std::vector<onnx::GraphProto*> graphs;
  collect_graphs(model.mutable_graph(), graphs);
  onnx::GraphProto& g = *graphs[pick(rng, graphs.size())];
  onnx::NodeProto* node = g.node_size() > 0 ? g.mutable_node(static_cast<int>(pick(rng, g.node_size()))) : nullptr;
  switch (pick(rng, 9)) {
    case 0: case 1: mutate_dim(rng, g); break;
    case 2: mutate_dtype(rng, g); break;
    case 3: case 4: if (node) mutate_attribute(rng, *node); break;
    case 5: if (node) mutate_edges(rng, g, *node); break;
    case 6:
      if (node) {
        if (one_in(rng, 4)) node->set_domain(one_in(rng, 2) ? "com.microsoft" : "fuzz.custom");
        else node->set_op_type(kOps[pick(rng, std::size(kOps))]);
      }
      break;
    case 7: mutate_nodes(rng, g); break;
    default:
      if (model.opset_import_size() > 0)
        model.mutable_opset_import(0)->set_version(static_cast<int64_t>(pick(rng, 26)));
  }
}

void analyse(const uint8_t* data, size_t size) {
  const std::string name = "mutant.onnx";
  const ReadModel model = read_model_bytes(name, data, size);
  const ModelOverview overview = describe_model(name, model);
  const InferenceResult inferred = infer_shapes(model.proto, bind_every_dim(overview));
  const Graph graph = build_graph(model.proto, overview, inferred);
  check_graph(graph);
  for (Runtime runtime : {Runtime::Ideal, Runtime::PyTorch, Runtime::OnnxRuntime}) {
    EstimateOptions options;
    options.execution.runtime = runtime;
    options.memory_schedule = runtime == Runtime::Ideal;
    const Estimate e = estimate_graph(graph, options);
    require(e.reserved_bytes >= e.allocated_bytes, std::string(runtime_name(runtime)) + ": reserved below allocated");
    require(e.arena_bytes >= e.lower_bound_bytes, std::string(runtime_name(runtime)) + ": arena below lower bound");
  }
  EstimateOptions training;
  training.mode = Mode::Training;
  training.execution.runtime = Runtime::PyTorch;
  training.training.loss = LossKind::CrossEntropy;
  estimate_graph(graph, training);
}

}  // namespace
}  // namespace memplan::fuzz

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  memplan::fuzz::Rng rng(seed);
  onnx::ModelProto model;
  if (memplan::fuzz::one_in(rng, 8) || !model.ParseFromArray(data, static_cast<int>(size)) || !model.has_graph())
    return LLVMFuzzerMutate(data, size, max_size);
  for (uint64_t k = 1 + memplan::fuzz::pick(rng, 3); k > 0; --k) memplan::fuzz::mutate_once(rng, model);
  const std::string bytes = model.SerializeAsString();
  if (bytes.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  memplan::fuzz::expect_success_or_input_error([&] { memplan::fuzz::analyse(data, size); });
  return 0;
}
