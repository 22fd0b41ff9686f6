// --fsdp-wrap torchtitan: torchtitan's FSDP2 groups (wrap_units.h's units, named its way), and which units stay
// unsharded from their forward to their backward.
// torchtitan's apply_fsdp (torchtitan/models/llama3/infra/parallelize.py at v0.2.2,
// 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce) calls fully_shard(model.tok_embeddings), fully_shard on each transformer
// block, fully_shard([model.norm, model.output], reshard_after_forward=reshard_after_forward_policy == "always")
// (False under its "default" policy: "FSDP would prefetch them immediately after the forward pass"), then
// fully_shard(model), the root, which holds what is left (nothing, for its Llama). On an exported graph: the blocks
// are wrap_units.h's default units; "tok_embeddings" is the table of a Gather indexed by a graph input; "norm_output"
// every other parameter first read after the last block's last read (the final norm's and the head's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/op_fusion.h"
#include "cost_models/wrap_units.h"
#include "onnx_import/graph.h"

namespace memplan {

inline constexpr char kTorchtitanWrap[] = "torchtitan";
inline constexpr char kTorchtitanKeptUnit[] = "norm_output";
// --fsdp-wrap accelerate: accelerate's FSDP2 units (utils/fsdp_utils.py fsdp2_prepare_model, huggingface/accelerate
// v1.14.0): fully_shard on each module the auto-wrap policy names (the decoder layer class: the blocks), on the input
// embedding when it is not tied to the output one, on [final norm, output embedding] together with
// reshard_after_forward=False ("Tail gets `False`"), the input embedding standing for the output one when they are
// tied (its hook then fires at the forward's start), then on the model, the root. torchtitan's groups, under the same
// names, but for a tied table, which joins the kept group.
inline constexpr char kAccelerateWrap[] = "accelerate";

// Per parameter (in `parameters`' order): its unit's name, "" for the root. `blocks`: the default rule's names.
// `tied_in_tail`: the token embedding, when the head reads it too (read after the last block), joins the kept group.
std::vector<std::string> torchtitan_unit_names(const Graph& g, const std::vector<FusedOp>& ops,
                                               const std::vector<int32_t>& parameters, std::vector<std::string> blocks,
                                               bool tied_in_tail = false);

// Whether unit `u` is not resharded after forward, its unsharded parameters kept for its backward: the root (FSDP1's
// root; FSDP2's FSDPState._lazy_init, post_forward_mesh_info None), and under --fsdp-wrap torchtitan or accelerate
// their [norm, output] group.
inline bool kept_after_forward(const WrapUnits& w, const std::string& fsdp_wrap, int32_t u) {
  return u == 0 || ((fsdp_wrap == kTorchtitanWrap || fsdp_wrap == kAccelerateWrap) &&
                    static_cast<size_t>(u) < w.names.size() && w.names[u] == kTorchtitanKeptUnit);
}

}  // namespace memplan
