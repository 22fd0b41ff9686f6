#include "tests/cost_models/graph_builder.h"

#include <algorithm>

#include <unistd.h>

#include <gtest/gtest.h>

#include "onnx_import/import.h"

namespace memplan::testing {

int32_t GraphBuilder::add_tensor(const std::string& name, std::vector<int64_t> shape, DType dtype, TensorKind kind) {
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.kind = kind;
  g_.tensors.push_back(std::move(t));
  return static_cast<int32_t>(g_.tensors.size() - 1);
}

int32_t GraphBuilder::input(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  const int32_t t = add_tensor(name, std::move(shape), dtype, TensorKind::Input);
  g_.inputs.push_back(t);
  return t;
}

int32_t GraphBuilder::weight(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  const int32_t t = add_tensor(name, std::move(shape), dtype, TensorKind::Weight);
  g_.tensors[t].trainable = dtype_is_float(dtype);
  g_.initializers.push_back(t);
  return t;
}

int32_t GraphBuilder::int_constant(const std::string& name, std::vector<int64_t> values) {
  const int32_t t = add_tensor(name, {static_cast<int64_t>(values.size())}, DType::Int64, TensorKind::Constant);
  g_.tensors[t].int_value = std::move(values);
  g_.initializers.push_back(t);
  return t;
}

int32_t GraphBuilder::scalar(const std::string& name, float value) {
  const int32_t t = add_tensor(name, {}, DType::Float32, TensorKind::Constant);
  g_.tensors[t].real_value = std::vector<double>{value};  // as the importer records a small float constant
  g_.initializers.push_back(t);
  return t;
}

int32_t GraphBuilder::node(const std::string& op, std::vector<int32_t> inputs,
                           std::vector<std::pair<std::string, std::vector<int64_t>>> outputs,
                           std::map<std::string, Attribute> attributes, DType dtype) {
  Node n;
  n.name = "/" + op + "_" + std::to_string(g_.nodes.size());
  n.op_type = op;
  n.opset = 17;
  n.inputs = std::move(inputs);
  n.attributes = std::move(attributes);
  const int32_t index = static_cast<int32_t>(g_.nodes.size());
  for (int32_t in : n.inputs)
    if (in >= 0) g_.tensors[in].consumers.push_back(index);
  int32_t first = -1;
  for (auto& [name, shape] : outputs) {
    const int32_t t = add_tensor(name, shape, dtype, TensorKind::Activation);
    g_.tensors[t].producer = index;
    n.outputs.push_back(t);
    if (first < 0) first = t;
  }
  g_.nodes.push_back(std::move(n));
  return first;
}

void GraphBuilder::output(int32_t tensor) {
  g_.outputs.push_back(tensor);
  g_.tensors[tensor].kind = TensorKind::Output;
}

Attribute int_attr(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::Int;
  a.i = v;
  return a;
}

Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.type = Attribute::Type::Ints;
  a.ints = std::move(v);
  return a;
}

std::pair<uint64_t, uint64_t> forward_and_kept_bytes(const Program& p, const std::string& scope) {
  std::vector<bool> kept(p.buffers.size(), false);
  for (const Step& s : p.steps)
    if (s.name.rfind("backward:", 0) == 0)
      for (int32_t b : s.reads) kept[b] = true;
  uint64_t forward = 0, saved = 0;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (buf.resident || buf.name.rfind(scope, 0) != 0) continue;
    forward += buf.bytes;
    if (kept[b]) saved += buf.bytes;
  }
  return {forward, saved};
}

Peak peak_live_bytes(const Program& p) {
  const int32_t n = static_cast<int32_t>(p.steps.size());
  std::vector<int32_t> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t b : p.steps[s].writes) first[b] = last[b] = s;
    for (int32_t b : p.steps[s].reads) last[b] = std::max(last[b], s);
  }
  Peak peak;
  for (int32_t s = 0; s < n; ++s) {
    uint64_t live = 0;
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const Buffer& buf = p.buffers[b];
      if (buf.resident) continue;
      const int32_t lo = buf.live_at_start ? 0 : first[b];
      const int32_t hi = buf.live_at_end ? n - 1 : std::max(last[b], lo);
      if (lo >= 0 && lo <= s && s <= hi) live += buf.bytes;
    }
    if (live > peak.bytes) peak = {live, s};
  }
  return peak;
}

uint64_t resident_bytes(const Program& p) {
  uint64_t sum = 0;
  for (const Buffer& b : p.buffers)
    if (b.resident) sum += b.bytes;
  return sum;
}

int count_named(const Program& p, const std::string& name) {
  int n = 0;
  for (const Buffer& b : p.buffers) n += b.name == name;
  return n;
}

int32_t buffer_named(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

int32_t step_named(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

uint64_t bytes_named(const Program& p, const std::string& name) {
  const int32_t b = buffer_named(p, name);
  return b < 0 ? 0 : p.buffers[b].bytes;
}

uint64_t bytes_of(const Program& p, const std::string& name) {
  EXPECT_GE(buffer_named(p, name), 0) << name;
  return bytes_named(p, name);
}

uint64_t live_at_step(const Program& p, const std::string& name) {
  const int32_t n = static_cast<int32_t>(p.steps.size());
  const int32_t at = step_named(p, name);
  EXPECT_GE(at, 0) << name;
  std::vector<int32_t> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t b : p.steps[s].writes) first[b] = last[b] = s;
    for (int32_t b : p.steps[s].reads) last[b] = std::max(last[b], s);
  }
  uint64_t live = 0;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    const int32_t lo = buf.live_at_start ? 0 : first[b];
    const int32_t hi = buf.live_at_end ? n - 1 : std::max(last[b], lo);
    if (!buf.resident && lo >= 0 && lo <= at && at <= hi) live += buf.bytes;
  }
  return live;
}

int32_t buffer_ending(const Program& p, const std::string& suffix) {
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const std::string& n = p.buffers[i].name;
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      return static_cast<int32_t>(i);
  }
  return -1;
}

bool step_reads(const Step& s, int32_t b) { return std::find(s.reads.begin(), s.reads.end(), b) != s.reads.end(); }

int32_t last_reader(const Program& p, int32_t b) {
  int32_t last = -1;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (step_reads(p.steps[i], b)) last = static_cast<int32_t>(i);
  return last;
}

uint64_t bytes_of_category(const Program& p, Category c) {
  uint64_t sum = 0;
  for (const Buffer& b : p.buffers)
    if (b.category == c) sum += b.bytes;
  return sum;
}

Graph two_fc_blocks(int64_t width, int64_t inner) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, width});
  const int32_t h0 = b.node1("MatMul", {x, b.weight("layers.0.fc.w", {width, inner})}, "h0", {4, inner});
  const int32_t r0 = b.node1("Relu", {h0}, "r0", {4, inner});
  const int32_t h1 = b.node1("MatMul", {r0, b.weight("layers.1.fc.w", {inner, width})}, "h1", {4, width});
  const int32_t r1 = b.node1("Relu", {h1}, "r1", {4, width});
  const int32_t y = b.node1("Gemm", {r1, b.weight("head.w", {2, width}), b.weight("head.b", {2})}, "y", {4, 2},
                            {{"transB", int_attr(1)}});
  b.output(y);
  return b.graph();
}

Graph decoder_head() {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 4, 4});
  const int32_t h = b.node1("MatMul", {x, b.weight("W1", {4, 4})}, "h", {2, 4, 4});
  const int32_t wt = b.node1("Transpose", {b.weight("Wh", {8, 4})}, "WhT", {4, 8}, {{"perm", ints_attr({1, 0})}});
  b.output(b.node1("MatMul", {h, wt}, "logits", {2, 4, 8}));
  return b.graph();
}

std::filesystem::path process_temp_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

std::string zoo_path(const std::string& file) { return std::string(MEMPLAN_ZOO_DIR) + "/" + file; }

Graph zoo_graph(const std::string& name, int64_t batch, std::optional<int64_t> seq) {
  Bindings b;
  b.batch = batch;
  if (seq) b.dims["seq"] = *seq;
  return import_model(zoo_path(name + ".onnx"), b);
}

}  // namespace memplan::testing
