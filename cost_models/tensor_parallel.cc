#include "cost_models/tensor_parallel.h"

#include <algorithm>

#include "cost_models/graph_facts.h"
#include "cost_models/tensor_parallel_patterns.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

uint64_t TensorParallelPlan::local_bytes(const Graph& g, int32_t t, uint64_t full_bytes) const {
  if (!sharded(t)) return full_bytes;
  const int64_t dim = g.tensors[t].shape[axis[t]];
  if (dim <= 0) return 0;
  const unsigned __int128 b = static_cast<unsigned __int128>(full_bytes) * static_cast<uint64_t>(local_dim[t]);
  return static_cast<uint64_t>((b + static_cast<uint64_t>(dim) - 1) / static_cast<uint64_t>(dim));
}

namespace {

int tp_rank_of(const Graph& g, int32_t t) { return static_cast<int>(g.tensors[t].shape.size()); }

class Pass {
 public:
  Pass(const Graph& g, int tp, bool sp, bool replicate_kv) : g_(g), replicate_kv_(replicate_kv) {
    p_.tp = tp;
    p_.sequence_parallel = sp;
    p_.axis.assign(g.tensors.size(), -1);
    p_.local_dim.assign(g.tensors.size(), 0);
    p_.gathered_input.assign(g.nodes.size(), -1);
  }

  TensorParallelPlan run() {
    for (size_t n = 0; n < g_.nodes.size(); ++n) visit(static_cast<int32_t>(n));
    if (p_.column_parallel == 0)
      throw InputError("--tp " + std::to_string(p_.tp) + ": model '" + g_.model_path +
                       "' has no MatMul or Gemm on a weight to split across the tensor-parallel GPUs");
    return std::move(p_);
  }

 private:
  std::string where(const Node& n) const { return "at node '" + n.name + "' of model '" + g_.model_path + "'"; }
  std::string tp_text() const { return "--tp " + std::to_string(p_.tp); }

  void set(int32_t t, int axis) {
    if (t < 0 || axis < 0 || axis >= tp_rank_of(g_, t)) return;
    const int64_t dim = g_.tensors[t].shape[axis];
    p_.axis[t] = axis;
    p_.local_dim[t] = (dim + p_.tp - 1) / p_.tp;
  }
  bool weight(int32_t t) const { return t >= 0 && g_.tensors[t].kind == TensorKind::Weight && g_.tensors[t].producer < 0; }

  // The rank-2 weight initializer a MatMul/Gemm operand is, directly or through Transpose(W, perm [1, 0]).
  int32_t weight_operand(int32_t t) const { return matmul_weight(g_, t); }

  // A tensor sharded along the sequence (the axis before the last); N must divide it.
  void shard_sequence(int32_t t, const Node& n) {
    const int r = tp_rank_of(g_, t);
    if (r < 2) return;
    const int64_t s = g_.tensors[t].shape[r - 2];
    if (s % p_.tp != 0)
      throw InputError("--sequence-parallel: " + tp_text() + " does not divide the sequence length " + std::to_string(s) +
                       " of '" + g_.tensors[t].name + "' " + where(n));
    set(t, r - 2);
  }

  // MatMul(x, W) / Gemm(x, W, bias) with W a weight: column- or row-parallel. `w_out` is the axis of W that
  // holds the output features; `w_operand` is the tensor the op reads (W, or the exporter's Transpose of it).
  void linear(const Node& n, int32_t x, int32_t w_operand, int32_t w, int w_out, int32_t bias, int x_contracted) {
    const int32_t out = n.outputs[0];
    if (out < 0) return;
    const int ro = tp_rank_of(g_, out);
    if (p_.sharded(x) && p_.axis[x] == x_contracted) {  // row-parallel: the input is split on the contraction
      ++p_.row_parallel;
      set(w, w_operand == w ? 0 : 1);  // W^T [in, out] or the exported W [out, in]: the input dimension
      if (w_operand != w) set(w_operand, 0);
      if (p_.sequence_parallel) shard_sequence(out, n);  // reduce-scatter; else all-reduce: replicated
      return;
    }
    ++p_.column_parallel;
    const int64_t features = g_.tensors[out].shape[ro - 1];
    const bool vocab = vocab_rows_ > 0 && features == vocab_rows_;  // the head: Megatron pads the vocabulary
    bool heads_follow = false;  // a head reshape reads the output: it says which head count N does not divide
    for (int32_t c : g_.tensors[out].consumers) heads_follow |= g_.nodes[c].op_type == "Reshape" || g_.nodes[c].op_type == "Split";
    if (features % p_.tp != 0 && !vocab && !heads_follow)
      throw InputError(tp_text() + " does not divide the " + std::to_string(features) +
                       " output features of the column-parallel weight '" + g_.tensors[w].name + "' " + where(n));
    set(w, w_out);
    if (w_operand != w) set(w_operand, 1);
    set(out, ro - 1);
    if (bias >= 0 && weight(bias) && tp_rank_of(g_, bias) >= 1 && g_.tensors[bias].shape.back() == features)
      set(bias, tp_rank_of(g_, bias) - 1);
    if (p_.sharded(x)) p_.gathered_input[&n - g_.nodes.data()] = x;  // sequence-parallel input: all-gathered
  }

  // aten::_grouped_mm(x, W, offs) on stacked experts (stacked_expert_weight: W [E, in, out], or the Transpose of
  // [E, out, in]), split as vLLM's FusedMoE splits them (fused_moe/layer.py at c439a13, FusedMoE.__init__:
  // intermediate_size_per_partition = intermediate_size // tp_size; UnquantizedFusedMoEMethod.create_weights:
  // w13_weight [E, 2·I_p, H], w2_weight [E, H, I_p]; Fp8MoEMethod's the same, cost_models/vllm_fp8_block.h): every
  // expert's gate and up by their I output features (column-parallel), its down by its I inputs (row-parallel, the
  // output all-reduced). Counted as the per-expert loop's linear layers: E column-parallel a stacked gate and up
  // chunked in two (2E), E for any other, E row-parallel.
  void stacked_linear(const Node& n, int32_t x, int32_t w_operand, int32_t w) {
    const int32_t out = n.outputs[0];
    if (out < 0 || g_.tensors[out].shape.empty()) return;
    const bool stored = w_operand == w;  // [E, in, out] as read; else the Transpose of [E, out, in]
    const int64_t experts = g_.tensors[w].shape[0];
    if (p_.sharded(x) && p_.axis[x] == tp_rank_of(g_, x) - 1) {
      p_.row_parallel += static_cast<int>(experts);
      set(w, stored ? 1 : 2);
      if (!stored) set(w_operand, 1);
      if (p_.sequence_parallel) shard_sequence(out, n);
      return;
    }
    const bool chunked = chunked_gate_up(g_, out);
    const int64_t features = g_.tensors[out].shape.back(), width = chunked ? features / 2 : features;
    if (width % p_.tp != 0)
      throw InputError(tp_text() + " does not divide the " + std::to_string(width) + " output features of each expert" +
                       (chunked ? "'s gate and up" : "") + " in the stacked column-parallel weight '" +
                       g_.tensors[w].name + "' " + where(n));
    p_.column_parallel += static_cast<int>(experts * (chunked ? 2 : 1));
    set(w, stored ? 2 : 1);
    if (!stored) set(w_operand, 2);
    set(out, tp_rank_of(g_, out) - 1);
    if (p_.sharded(x)) p_.gathered_input[&n - g_.nodes.data()] = x;
    // GptOssExperts' gate_up_proj_bias [E, 2I], added as bias[expert_ids]: split with the columns (vLLM's w13_bias
    // [E, 2·I_p]).
    for (const auto& [bias, rows] : stacked_biases(g_, out)) set(bias, 1), set(rows, tp_rank_of(g_, rows) - 1);
  }

  // More GPUs than key/value heads, with replicate_kv_heads: each GPU holds one whole head of `features`
  // (head_dim) outputs, replicated on tp / heads GPUs (vLLM's QKVParallelLinear: num_kv_head_replicas). The
  // projection that made `t` (MatMul/Gemm, through its bias Add) keeps that head's columns of its weight.
  void replicate_kv_head(int32_t t, int64_t features) {
    while (t >= 0 && p_.sharded(t)) {
      p_.local_dim[t] = features;
      const int32_t prod = g_.tensors[t].producer;
      if (prod < 0) return;
      const Node& n = g_.nodes[prod];
      if (n.op_type == "Add") {
        for (int32_t in : n.inputs)
          if (weight(in) && p_.sharded(in)) p_.local_dim[in] = features;
        t = weight(n.inputs[0]) ? n.inputs[1] : n.inputs[0];
        continue;
      }
      if (n.op_type == "MatMul" || n.op_type == "Gemm") {
        for (size_t i = 1; i < n.inputs.size(); ++i) {
          const int32_t operand = n.inputs[i];
          const int32_t w = weight_operand(operand);
          for (int32_t x : {operand, w})
            if (x >= 0 && p_.sharded(x) && g_.tensors[x].shape[p_.axis[x]] > features) p_.local_dim[x] = features;
        }
      }
      return;
    }
  }

  // Reshape-like ops (Reshape, Flatten, Squeeze, Unsqueeze): the sharded axis maps to the output axis that
  // starts at the same element offset; a head split must keep whole heads on each GPU.
  void reshape(const Node& n, int32_t in, int32_t out) {
    const auto& is = g_.tensors[in].shape;
    const auto& os = g_.tensors[out].shape;
    const int a = p_.axis[in];
    int64_t pre = 1;
    for (int i = 0; i < a; ++i) pre *= is[i];
    int64_t prefix = 1;
    for (size_t b = 0; b < os.size(); ++b) {
      // Multi-query attention: k or v, one head's features, reshaped into [..., 1 head, head_dim] (after q made
      // more heads of that size). No rank can hold a fraction of the one head: vLLM replicates it on every GPU
      // (num_kv_head_replicas = tp); Megatron requires num_query_groups divisible by tp.
      if (prefix == pre && os[b] == 1 && b + 1 < os.size() && os[b + 1] == is[a] && os.size() > is.size() &&
          max_heads_ > 1 && is[a] == head_dim_) {
        if (!replicate_kv_)
          throw InputError(tp_text() + " does not divide the 1 key/value head (axis " + std::to_string(b) + " of '" +
                           g_.tensors[out].name + "') " + where(n) + ": each tensor-parallel GPU computes whole heads");
        replicate_kv_head(in, is[a]);
        p_.axis[out] = static_cast<int>(b);
        p_.local_dim[out] = 1;
        return;
      }
      if (prefix == pre && os[b] > 1) {
        if (os[b] == is[a]) {
          p_.axis[out] = static_cast<int>(b);
          p_.local_dim[out] = p_.local_dim[in];
        } else if (os[b] % p_.tp != 0 || is[a] % p_.tp != 0) {
          // Grouped-query attention reshapes k and v into fewer heads than q, after q.
          const bool kv = os.size() > is.size() && max_heads_ > os[b];
          // repeat_kv of a replicated head: each GPU expands its one key/value head to its own query heads.
          if (replicate_kv_ && p_.local_dim[in] * p_.tp != is[a] && os[b] % p_.tp == 0) {
            set(out, static_cast<int>(b));
            return;
          }
          if (kv && replicate_kv_ && p_.tp % os[b] == 0 && is[a] % os[b] == 0) {
            replicate_kv_head(in, is[a] / os[b]);
            p_.axis[out] = static_cast<int>(b);
            p_.local_dim[out] = 1;
            return;
          }
          throw InputError(tp_text() + " does not divide the " + std::to_string(os[b]) +
                           (kv ? " key/value heads" : " attention heads") + " (axis " + std::to_string(b) + " of '" +
                           g_.tensors[out].name + "') " + where(n) + ": each tensor-parallel GPU computes whole heads");
        } else {
          if (os.size() > is.size() && os[b] > max_heads_ && b + 1 < os.size()) {
            max_heads_ = os[b];
            head_dim_ = os[b + 1];
          }
          set(out, static_cast<int>(b));
        }
        return;
      }
      if (prefix > pre) break;
      prefix *= os[b];
    }
    // The sharded axis merges with the ones before it: still 1/N of the elements, on the merged axis.
    for (size_t b = 0, pr = 1; b < os.size(); pr *= static_cast<size_t>(os[b]), ++b)
      if (static_cast<int64_t>(pr) * os[b] > pre) {
        if (os[b] % p_.tp == 0) set(out, static_cast<int>(b));
        return;
      }
  }

  // Ops that keep the shard on the output axis aligned with it (numpy broadcasting, right-aligned). Split,
  // Slice and Concat along the sharded axis keep it when N divides their output there (a fused qkv output
  // split into q, k and v: Megatron orders the fused weight so that each GPU's slice holds its own heads).
  void carry(const Node& n) {
    const bool along = n.op_type == "Split" || n.op_type == "Slice" || n.op_type == "Concat";
    for (int32_t out : n.outputs) {
      if (out < 0 || !dtype_is_float(g_.tensors[out].dtype)) continue;
      const int ro = tp_rank_of(g_, out);
      int chosen = -1;
      for (size_t i = 0; i < n.inputs.size() && chosen < 0; ++i) {
        const int32_t in = n.inputs[i];
        if (!p_.sharded(in)) continue;
        const int ao = p_.axis[in] + ro - tp_rank_of(g_, in);
        if (ao < 0 || ao >= ro) continue;
        const int64_t od = g_.tensors[out].shape[ao], id = g_.tensors[in].shape[p_.axis[in]];
        if (od == id) {
          chosen = ao;
          p_.axis[out] = ao;
          p_.local_dim[out] = p_.local_dim[in];
        } else if (along) {
          if (od % p_.tp != 0)
            throw InputError(tp_text() + " does not divide the " + std::to_string(od) + " elements of axis " +
                             std::to_string(ao) + " of '" + g_.tensors[out].name + "', split across the tensor-parallel "
                             "GPUs, " + where(n));
          chosen = ao;
          set(out, ao);
        }
      }
      if (chosen < 0) continue;
      for (int32_t in : n.inputs) {  // a column-parallel bias (or any weight spanning the sharded axis) is split
        if (!weight(in) || p_.sharded(in)) continue;
        const int aw = chosen - (ro - tp_rank_of(g_, in));
        if (aw >= 0 && g_.tensors[in].shape[aw] == g_.tensors[out].shape[chosen] && g_.tensors[in].shape[aw] > 1) set(in, aw);
      }
    }
  }

  void visit(int32_t index) {
    const Node& n = g_.nodes[index];
    const std::string& op = n.op_type;
    auto input = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; };
    if (op == "Gather" && weight(input(0)) && tp_rank_of(g_, input(0)) == 2 && input(1) >= 0 &&
        g_.tensors[input(1)].kind == TensorKind::Input) {  // the token embedding: vocab-parallel
      ++p_.vocab_parallel;
      vocab_rows_ = g_.tensors[input(0)].shape[0];
      set(input(0), 0);
      if (p_.sequence_parallel && !n.outputs.empty() && n.outputs[0] >= 0) shard_sequence(n.outputs[0], n);
      return;
    }
    if (op == "MatMul" && n.inputs.size() == 2 && !n.outputs.empty()) {
      const int32_t w = weight_operand(input(1));
      if (w >= 0 && (is_replicated_gate(g_, n) || (!p_.sharded(n.inputs[0]) && is_replicated_latent(g_, n))))
        return;  // weight and output whole on every GPU
      if (w >= 0) return linear(n, input(0), input(1), w, w == input(1) ? 1 : 0, -1, tp_rank_of(g_, input(0)) - 1);
      // Two activations (attention): the contracted axes must not be the sharded ones.
      const int32_t a = input(0), b = input(1);
      if ((p_.sharded(a) && p_.axis[a] == tp_rank_of(g_, a) - 1) ||
          (p_.sharded(b) && p_.axis[b] == tp_rank_of(g_, b) - 2))
        return;
      return carry(n);
    }
    if (const int32_t experts = grouped_mm_experts(g_, n); experts >= 0 && !n.outputs.empty())
      return stacked_linear(n, input(0), input(1), experts);
    if (op == "Gemm" && n.inputs.size() >= 2) {
      const auto at = n.attributes.find("transA");
      const int32_t w = weight_operand(input(1));
      if (w >= 0 && is_replicated_gate(g_, n)) return;  // a router: weight, bias and output whole on every GPU
      if (w >= 0) {
        const bool trans_a = at != n.attributes.end() && at->second.i != 0;
        const auto bt = n.attributes.find("transB");
        const bool trans_b = bt != n.attributes.end() && bt->second.i != 0;
        // Gemm's B is [K, N], or [N, K] with transB (the exported nn.Linear weight).
        return linear(n, input(0), input(1), w, w == input(1) ? (trans_b ? 0 : 1) : (trans_b ? 1 : 0), input(2),
                      trans_a ? 0 : 1);
      }
      return;
    }
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      if (p_.sharded(input(0)) && !n.outputs.empty() && n.outputs[0] >= 0) reshape(n, input(0), n.outputs[0]);
      return;
    }
    if (op == "Transpose") {
      const int32_t in = input(0);
      const auto it = n.attributes.find("perm");
      if (!p_.sharded(in) || n.outputs.empty() || n.outputs[0] < 0) return;
      const int r = tp_rank_of(g_, in);
      for (int j = 0; j < r; ++j) {
        const int src = it != n.attributes.end() ? static_cast<int>(it->second.ints[j]) : r - 1 - j;
        if (src == p_.axis[in]) {
          p_.axis[n.outputs[0]] = j;
          p_.local_dim[n.outputs[0]] = p_.local_dim[in];
        }
      }
      return;
    }
    if (op == "Shape" || op == "Size" || op == "ConstantOfShape" || op == "Range" || op == "NonZero") return;
    if (op.rfind("Reduce", 0) == 0 || op == "LayerNormalization") {
      // A reduction over the sharded axis would be a partial sum (an all-reduce, then replicated).
      const int32_t in = input(0);
      if (!p_.sharded(in)) return;
      const int r = tp_rank_of(g_, in);
      if (op == "LayerNormalization") {
        const auto it = n.attributes.find("axis");
        int axis = it != n.attributes.end() ? static_cast<int>(it->second.i) : -1;
        if (axis < 0) axis += r;
        if (p_.axis[in] >= axis) return;
      } else if (!n.outputs.empty() && n.outputs[0] >= 0 &&
                 (tp_rank_of(g_, n.outputs[0]) != r ||
                  g_.tensors[n.outputs[0]].shape[p_.axis[in]] != g_.tensors[in].shape[p_.axis[in]])) {
        return;
      }
    }
    carry(n);
  }

  const Graph& g_;
  const bool replicate_kv_;
  TensorParallelPlan p_;
  int64_t vocab_rows_ = 0;  // rows of the vocab-parallel embedding (0: none yet)
  int64_t max_heads_ = 0;   // the most heads a head reshape has split so far
  int64_t head_dim_ = 0;    // the features of one of those heads
};

}  // namespace

std::string tensor_parallel_note(const TensorParallelPlan& p) {
  return "--tp " + std::to_string(p.tp) + (p.sequence_parallel ? " with sequence parallelism" : "") + ": " +
         std::to_string(p.column_parallel) + " column-parallel, " + std::to_string(p.row_parallel) + " row-parallel and " +
         std::to_string(p.vocab_parallel) + " vocab-parallel layers (Megatron-LM's split); the figures are one GPU's, "
         "rank 0's: every rank holds the same slices, except that rank 0 holds ceil(V/N) rows of a vocabulary N does not "
         "divide. NCCL's communication buffers are not counted.";
}

TensorParallelPlan plan_tensor_parallel(const Graph& g, int tp, bool sequence_parallel, bool replicate_kv_heads) {
  if (tp < 1) throw InputError("--tp must be at least 1");
  if (tp == 1) {
    if (sequence_parallel) throw InputError("--sequence-parallel needs --tp N with N >= 2");
    TensorParallelPlan p;
    p.axis.assign(g.tensors.size(), -1);
    p.local_dim.assign(g.tensors.size(), 0);
    p.gathered_input.assign(g.nodes.size(), -1);
    return p;
  }
  return Pass(g, tp, sequence_parallel, replicate_kv_heads).run();
}

}  // namespace memplan
