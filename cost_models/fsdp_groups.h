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

// Per parameter (in `parameters`' order): its unit's name, "" for the root. `blocks`: the default rule's names.
std::vector<std::string> torchtitan_unit_names(const Graph& g, const std::vector<FusedOp>& ops,
                                               const std::vector<int32_t>& parameters, std::vector<std::string> blocks);

// Whether unit `u` is not resharded after forward, its unsharded parameters kept for its backward: the root (FSDP1's
// root; FSDP2's FSDPState._lazy_init, post_forward_mesh_info None), and under --fsdp-wrap torchtitan its
// [norm, output] group.
inline bool kept_after_forward(const WrapUnits& w, const std::string& fsdp_wrap, int32_t u) {
  return u == 0 || (fsdp_wrap == kTorchtitanWrap && static_cast<size_t>(u) < w.names.size() &&
                    w.names[u] == kTorchtitanKeptUnit);
}

}  // namespace memplan
