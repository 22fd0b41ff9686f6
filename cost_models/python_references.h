// Eager PyTorch frees a tensor when Python drops its last reference, not after the graph's last reader of it: a
// frame's locals live until the function returns. An ONNX graph carries no Python names, so the rule is keyed on
// what torch.onnx's export and the config-built graph both show: an attention block op_fusion finds
// (attention_blocks) whose nodes are named under a module scope `<layer>/self_attn/` (torch.onnx names a node by
// the modules it ran in; onnx_import's builders write the same names), which is transformers' decoder layer.
//
// What transformers' Python references there (src/transformers/models/llama/modeling_llama.py at
// 5dd4a63548857797727ae73eeb6a6e886ea02a3e):
//   (1) LlamaDecoderLayer.forward binds the normed input to `hidden_states` and passes it to self.self_attn, which
//       binds it again; the name is rebound only when the attention returns: the scope's inputs from outside it
//       are held until the scope's last node;
//   (2) LlamaAttention.forward's query_states, key_states (after apply_rotary_pos_emb) and value_states are
//       locals until it returns (after o_proj): the block's q, and k and v before repeat_kv, until the scope's
//       last node;
//   (3) eager_attention_forward's key_states and value_states (repeat_kv's copies) are locals until it returns,
//       after `attn_output.transpose(1, 2).contiguous()`: held until the context MatMul's first reader past its
//       transposes (views), the copy;
//   (4) eager_attention_forward returns attn_weights (the probabilities after softmax, .to(dtype) and dropout,
//       rebound at each step so only the last is held) and LlamaDecoderLayer.forward keeps it as
//       self_attn_weights until it returns: held until the decoder layer scope's (`<layer>/`) last node.
//   (5) LlamaModel.forward calls each layer with its `hidden_states` and rebinds the name only when the layer
//       returns: the layer scope's (`<layer>/`) inputs from outside it (its input, and the rotary tables and mask
//       the model's frame holds longer still) until the layer's last node;
//   (6) LlamaDecoderLayer.forward's `hidden_states = self.mlp(hidden_states)`: the normed input referenced until the
//       MLP returns: the `<layer>/mlp/` (Mixtral: `<layer>/block_sparse_moe/`) scope's inputs from outside it until
//       its last node.
// Not held: the embedding's output, which LlamaModel.forward keeps as `inputs_embeds` for the whole forward.
// Eager attention only (AttentionImpl::Eager): with SDPA no probabilities exist and the kernel's own rule applies;
// (1) to (3) are not modelled there.
#pragma once

#include <cstdint>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// A tensor a Python frame still references after its graph readers, and the last node through which it does.
struct PythonHold {
  int32_t tensor = -1;
  int32_t until_node = -1;
};

// The holds (1) to (6) of every attention block under a `<layer>/self_attn/` scope and of its layer, in no
// particular order; none unless `eager_attention`.
std::vector<PythonHold> transformers_attention_holds(const Graph& g, bool eager_attention);

}  // namespace memplan
