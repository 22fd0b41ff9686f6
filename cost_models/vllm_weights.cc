#include "cost_models/vllm_weights.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "cost_models/graph_facts.h"
#include "cost_models/packed_int_weights.h"
#include "cost_models/tensor_parallel.h"
#include "cost_models/vllm_nvfp4.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

// The token embedding: a Gather of a rank-2 weight by a graph input, `vocab` rows (-1: none).
int32_t token_embedding(const Graph& g, int64_t vocab) {
  for (const Node& n : g.nodes) {
    if (n.op_type != "Gather" || n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0) continue;
    const Tensor& table = g.tensors[n.inputs[0]];
    if (table.kind == TensorKind::Weight && table.producer < 0 && table.shape.size() == 2 && table.shape[0] == vocab &&
        g.tensors[n.inputs[1]].kind == TensorKind::Input)
      return n.inputs[0];
  }
  return -1;
}

}  // namespace

int64_t vllm_padded_vocab(int64_t vocab) {
  return (vocab + kVllmVocabPaddingSize - 1) / kVllmVocabPaddingSize * kVllmVocabPaddingSize;
}

VllmVocabPadding vllm_vocab_padding(const Graph& g, const std::string& lm_head, int64_t vocab, int tp,
                                    bool replicate_kv_heads, bool tied_by_shape, DType dtype, const std::string& model) {
  VllmVocabPadding p;
  p.vocab = vocab;
  p.padded_vocab = vllm_padded_vocab(vocab);
  int32_t head_w = -1;
  for (const Node& n : g.nodes)
    if (n.name == lm_head && n.inputs.size() >= 2) head_w = matmul_weight(g, n.inputs[1]);
  if (head_w < 0) return p;
  if (tp > 1 && p.padded_vocab % tp != 0)
    throw InputError("--tp " + std::to_string(tp) + " does not divide the padded vocabulary of " + model + ", " +
                     std::to_string(p.padded_vocab) + " rows (" + std::to_string(vocab) +
                     " padded to a multiple of 64: vLLM's VocabParallelEmbedding splits them evenly)");
  const int32_t embedding = token_embedding(g, vocab);
  const std::vector<int32_t> tied = held_tied_copies(g, tied_by_shape);
  const bool head_is_embedding = embedding >= 0 && (head_w == embedding || tied[head_w] == embedding);
  TensorParallelPlan plan;
  if (tp > 1) plan = plan_tensor_parallel(g, tp, false, replicate_kv_heads);
  const int64_t rows_per_rank = p.padded_vocab / tp;
  uint64_t elements = 0;
  auto pad = [&](int32_t t) {
    const Tensor& w = g.tensors[t];
    // The vocabulary axis: the last one whose size is the vocabulary (a head [hidden, vocab], or its transposed
    // copy and the embedding [vocab, hidden]).
    const int axis = w.shape[1] == vocab ? 1 : 0;
    const int64_t rows = tp > 1 && plan.sharded(t) && plan.axis[t] == axis ? plan.local_dim[t] : vocab;
    if (rows_per_rank > rows)
      elements = checked_add(elements, checked_mul(static_cast<uint64_t>(rows_per_rank - rows),
                                                   static_cast<uint64_t>(w.shape[1 - axis]), "vocabulary padding"),
                             "vocabulary padding");
    ++p.tables;
  };
  if (embedding >= 0) pad(embedding);
  if (!head_is_embedding) pad(head_w);
  p.bytes = checked_mul(elements, static_cast<uint64_t>(dtype_bits(dtype)) / 8, "vocabulary padding");
  return p;
}

uint64_t vllm_fp8_tensor_scale_bytes(bool static_activations) { return sizeof(float) * (static_activations ? 2 : 1); }

VllmQuantizedLinears vllm_quantized_linears(const Graph& g, const std::string& lm_head, int tp, bool replicate_kv_heads,
                                            const VllmQuantization& q, int64_t step_tokens, DType dtype,
                                            const std::string& model, const std::set<std::string>& left_out) {
  VllmQuantizedLinears r;
  if (q.method.empty()) return r;
  TensorParallelPlan plan;
  if (tp > 1) plan = plan_tensor_parallel(g, tp, false, replicate_kv_heads);
  auto last_local = [&](int32_t t) {  // one rank's size of tensor t's last axis
    const Tensor& x = g.tensors[t];
    const int last = static_cast<int>(x.shape.size()) - 1;
    return tp > 1 && plan.sharded(t) && plan.axis[t] == last ? plan.local_dim[t] : x.shape[last];
  };
  std::map<int32_t, VllmLinearModule> modules;  // by the activation they read, in the graph's order of first reads
  std::vector<int32_t> order;
  std::vector<std::pair<std::string, int32_t>> node_modules;  // each layer and its module's key, in the graph's order
  const uint64_t d = static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  for (const Node& n : g.nodes) {
    if ((n.op_type != "MatMul" && n.op_type != "Gemm") || n.name == lm_head || left_out.count(n.name) ||
        n.inputs.size() < 2 ||
        matmul_weight(g, n.inputs[1]) < 0 || n.outputs.empty() || n.outputs[0] < 0 || g.tensors[n.inputs[0]].shape.empty())
      continue;
    const int64_t in_p = last_local(n.inputs[0]), out_p = last_local(n.outputs[0]);
    ++r.layers;
    r.dense_bytes = checked_add(r.dense_bytes, checked_mul(static_cast<uint64_t>(in_p * out_p), d, "weights bytes"),
                                "weights bytes");
    auto [it, fresh] = modules.try_emplace(n.inputs[0]);
    if (fresh) {
      order.push_back(n.inputs[0]);
      it->second.in_p = in_p;
      it->second.input_size = g.tensors[n.inputs[0]].shape.back();
    }
    it->second.nodes.push_back(n.name);
    node_modules.emplace_back(n.name, n.inputs[0]);
    it->second.out_p += out_p;
    it->second.output_size += g.tensors[n.outputs[0]].shape.back();
    it->second.shards.push_back(out_p);
    if (q.method == "fp8" && q.block.on())
      r.call_bytes.emplace_back(n.name, vllm_fp8_block_input_quant_bytes(step_tokens, in_p, q.block, q.capability));
  }
  r.modules = static_cast<int>(modules.size());
  auto refuse = [&](const VllmLinearModule& m, const std::string& what) {
    throw InputError("--quantization " + q.method + ": " + model + "'s linear layer " + m.nodes.front() + " (" +
                     std::to_string(m.in_p) + " inputs, " + std::to_string(m.out_p) + " outputs on one rank) " + what +
                     " (vLLM's create_weights refuses it: \"The input size is not aligned with the quantized weight "
                     "shape\", or the output size)");
  };
  uint64_t bytes = 0;
  std::map<int32_t, uint64_t> nvfp4_calls;  // by module key: what each of its layers' calls allocates
  for (int32_t key : order) {
    const VllmLinearModule& m = modules.at(key);
    r.module_shapes.push_back(m);
    const uint64_t in_p = static_cast<uint64_t>(m.in_p), out_p = static_cast<uint64_t>(m.out_p);
    uint64_t b = 0;
    if (q.method == "fp8" && q.block.on()) {
      // validate_fp8_block_shape (fp8_utils.py at 007d500); the input's group quantization asserts a multiple of
      // block_n (per_token_group_quant_fp8 with GroupShape(1, weight_block_size[0])).
      const int64_t bn = q.block.n, bk = q.block.k;
      auto off_blocks = [&](const std::string& what) {
        throw InputError("the checkpoint's block-wise fp8 (weight_block_size [" + std::to_string(bn) + ", " +
                         std::to_string(bk) + "]) on " + model + " at --tp " + std::to_string(tp) + ": linear layer " +
                         m.nodes.front() + " (" + std::to_string(m.in_p) + " inputs, " + std::to_string(m.out_p) +
                         " outputs on one rank) " + what);
      };
      if (tp > 1 && m.in_p != m.input_size && m.input_size / m.in_p == tp && m.in_p % bk != 0)
        off_blocks("splits its input into " + std::to_string(m.in_p) + " a rank, not a multiple of block_k (vLLM's "
                   "validate_fp8_block_shape refuses it)");
      const bool tp_split = tp > 1 && m.output_size / m.out_p == tp;
      for (size_t shard = 0; shard < m.shards.size(); ++shard)
        if ((tp_split || shard + 1 < m.shards.size()) && m.shards[shard] % bn != 0)
          off_blocks("has an output shard of " + std::to_string(m.shards[shard]) + " a rank, not a multiple of block_n "
                     "(vLLM's validate_fp8_block_shape refuses it)");
      if (m.in_p % bn != 0)
        off_blocks("has an input not a multiple of block_n, the group per_token_group_quant_fp8 quantizes it by "
                   "(its assertion fails)");
      b = vllm_fp8_block_linear_bytes(m.out_p, m.in_p, q.block);
    } else if (q.method == "fp8") {
      b = checked_add(checked_mul(out_p, in_p, "weights bytes"), vllm_fp8_tensor_scale_bytes(q.static_activations),
                      "weights bytes");
    } else if (q.method == "nvfp4") {
      if (m.in_p % 16 != 0) refuse(m, "has an input not a multiple of 16, NVFP4's block");
      b = vllm_nvfp4_linear_bytes(m.out_p, m.in_p, q.nvfp4_marlin(), q.multiprocessors);
      nvfp4_calls[key] =
          vllm_nvfp4_call_bytes(step_tokens, m.out_p, m.in_p, q.nvfp4_marlin(), q.multiprocessors, dtype);
      if (!q.nvfp4_marlin() && q.flashinfer_gemm) r.workspace_bytes = kFlashInferGemmWorkspaceBytes;
    } else if (q.method == "gptq") {
      const int64_t pack = 32 / std::gcd(32, q.bits);  // Fraction(32, bits).numerator
      if (q.group_size != -1 && m.in_p % q.group_size != 0)
        refuse(m, "has an input not a multiple of group_size " + std::to_string(q.group_size));
      if (m.out_p % pack != 0) refuse(m, "has an output not a multiple of " + std::to_string(pack));
      const bool row_parallel = m.in_p != m.input_size;
      const uint64_t rows = q.group_size == -1 ? 1
                            : row_parallel && !q.desc_act ? in_p / static_cast<uint64_t>(q.group_size)
                                                          : static_cast<uint64_t>(m.input_size / q.group_size);
      b = gptq_packed(in_p, out_p, static_cast<uint64_t>(q.bits), rows, d, q.desc_act).total();
    } else {  // awq
      if (m.in_p % q.group_size != 0) refuse(m, "has an input not a multiple of group_size " + std::to_string(q.group_size));
      if (m.out_p % 8 != 0) refuse(m, "has an output not a multiple of 8");
      const uint64_t groups = in_p / static_cast<uint64_t>(q.group_size);
      b = awq_packed(in_p, out_p, groups, d).total();
      if (step_tokens >= 256) r.dequantized_bytes = std::max(r.dequantized_bytes, in_p * out_p * d);
    }
    bytes = checked_add(bytes, b, "quantized weights bytes");
  }
  for (const auto& [node, key] : node_modules)
    if (auto call = nvfp4_calls.find(key); call != nvfp4_calls.end()) r.call_bytes.emplace_back(node, call->second);
  r.quantized_bytes = r.linear_bytes = bytes;
  return r;
}

}  // namespace memplan
