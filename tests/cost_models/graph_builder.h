// Builds small memplan::Graphs in code for cost-model tests, and measures a program's peak with an
// independent ten-line loop (so tests do not depend on the planner under test elsewhere).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "onnx_import/graph.h"
#include "planner/program.h"

namespace memplan::testing {

class GraphBuilder {
 public:
  int32_t input(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::Float32);
  int32_t weight(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::Float32);
  // A non-float initializer with known contents (a Reshape shape, an axes list).
  int32_t int_constant(const std::string& name, std::vector<int64_t> values);
  int32_t scalar(const std::string& name, float value = 1.0f);  // a float scalar initializer
  // Adds a node with one output per (name, shape); outputs take `dtype`. Returns the first output id.
  int32_t node(const std::string& op, std::vector<int32_t> inputs,
               std::vector<std::pair<std::string, std::vector<int64_t>>> outputs,
               std::map<std::string, Attribute> attributes = {}, DType dtype = DType::Float32);
  int32_t node1(const std::string& op, std::vector<int32_t> inputs, const std::string& out,
                std::vector<int64_t> shape, std::map<std::string, Attribute> attributes = {}) {
    return node(op, std::move(inputs), {{out, std::move(shape)}}, std::move(attributes));
  }
  void output(int32_t tensor);
  const Graph& graph() const { return g_; }
  Graph& mutable_graph() { return g_; }

 private:
  int32_t add_tensor(const std::string& name, std::vector<int64_t> shape, DType dtype, TensorKind kind);
  Graph g_;
};

Attribute int_attr(int64_t v);
Attribute ints_attr(std::vector<int64_t> v);

// The FSDP tests' model: x[4,width] -> MatMul(layers.0.fc.w [width,inner]) -> Relu -> MatMul(layers.1.fc.w
// [inner,width]) -> Relu -> Gemm(head.w [2,width] transposed, head.b [2]) -> y[4,2], float32. Its wrapping units
// (the default rule: prefix "layers" with indices 0 and 1, each block with a submodule fc): root {head.w, head.b},
// layers.0, layers.1.
Graph two_fc_blocks(int64_t width, int64_t inner);
// A decoder's tail for the losses: x[2,4,4] (batch 2, seq 4, hidden 4; needs no grad) -> MatMul(W1[4,4]) -> h[2,4,4]
// -> F.linear's head: MatMul(h, Transpose(Wh[8,4])) -> logits[2,4,8] (vocab 8). fp32 bytes: x 128, W1 64, h 128,
// Wh 128, logits 256; targets: 8 tokens of int64 = 64.
Graph decoder_head();

// Peak over steps of live bytes of non-resident buffers, with the planner's documented liveness rule:
// a buffer lives from its writing step (0 if live_at_start) to its last reader (the end if
// live_at_end); written and never read, at its own step only.
struct Peak {
  uint64_t bytes = 0;
  int32_t step = 0;
};
Peak peak_live_bytes(const Program& p);
// The bytes of the non-resident buffers whose names start with `scope`, and those of them a backward step reads
// (what autograd keeps), in one training step's program.
std::pair<uint64_t, uint64_t> forward_and_kept_bytes(const Program& p, const std::string& scope);
uint64_t resident_bytes(const Program& p);
// Buffer id by name (-1 when absent) and the step index by name (-1 when absent).
int32_t buffer_named(const Program& p, const std::string& name);
// How many buffers are named `name` (one a recomputation or an access makes each).
int count_named(const Program& p, const std::string& name);
int32_t step_named(const Program& p, const std::string& name);
// The bytes of the buffer named `name` (0 when absent); the live non-resident bytes at the first step named `name`,
// by peak_live_bytes' rule (a failed expectation when no step has that name).
uint64_t bytes_named(const Program& p, const std::string& name);
// bytes_named, and a failed expectation when no buffer has that name.
uint64_t bytes_of(const Program& p, const std::string& name);
uint64_t live_at_step(const Program& p, const std::string& name);
// The buffer whose name ends with `suffix` (-1 when absent); whether step `s` reads buffer `b`; the last step
// reading `b` (-1 when none).
int32_t buffer_ending(const Program& p, const std::string& suffix);
bool step_reads(const Step& s, int32_t b);
int32_t last_reader(const Program& p, int32_t b);
uint64_t bytes_of_category(const Program& p, Category c);
// A folder of the system's temp directory for this test process alone ("<name>_<pid>", made if missing): ctest runs
// a file's tests as parallel processes, and two writing one shared path raced (one read the other's half-written
// config).
std::filesystem::path process_temp_dir(const std::string& name);
// A file of tests/models (MEMPLAN_ZOO_DIR): "llama_tiny_train.onnx", "hf_configs/Llama-3.2-1B.json".
std::string zoo_path(const std::string& file);
// A model of tests/models, "llama_tiny_train", imported at that batch and, when given, sequence length ("seq").
Graph zoo_graph(const std::string& name, int64_t batch, std::optional<int64_t> seq = std::nullopt);

}  // namespace memplan::testing
