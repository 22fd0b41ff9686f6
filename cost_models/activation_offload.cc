// torchtune's OffloadActivations with streams, as its pack and unpack hooks run it
// (torchtune/training/_activation_offloading.py at pytorch/torchtune bd2a0fc7):
//  - pack_tensor: a saved tensor on the accelerator, of at least min_offload_size bytes, that is no nn.Parameter or
//    nn.Buffer, is copied into a pinned host tensor (torch.empty_like(..., pin_memory=True)) on the copy stream; the
//    GPU tensor is kept in fwd_stash until a later offloaded tensor's pack finds its id at least max_fwd_stash_size
//    ids back, and whatever is left there is dropped by the first backward node's post-hook (unpack's `hook`);
//  - unpack_tensor_with_streams: a tensor still in fwd_stash is returned as it is; any other is copied back to the
//    GPU (maybe_gpu_tensor.to(device)) and kept in bwd_tensor_stash; when a later backward node first unpacks an
//    offloaded tensor, the earlier nodes' copies (prev_node_ids) are dropped in that node's post-hook, and the
//    last ones by the callback queued for the end of backward (wait_and_del_remaining_references).
// Parameters and buffers are the program's resident buffers. The output head is never packed: the recipes'
// get_act_offloading_ctx_manager wraps model.output in a NoOpManager (the caller leaves it out).
#include "cost_models/activation_offload.h"

#include <algorithm>

#include "cost_models/program_writer.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

void replace_read(Step& s, int32_t from, int32_t to) {
  for (int32_t& b : s.reads)
    if (b == from) b = to;
}

}  // namespace

OffloadFacts offload_activations(Program& p, const std::vector<PackedTensor>& packs,
                                 const std::map<int32_t, NodeSteps>& nodes) {
  OffloadFacts facts;
  const int32_t steps = static_cast<int32_t>(p.steps.size());
  auto valid = [&](int32_t s) { return s >= 0 && s < steps; };
  std::vector<bool> offloaded(packs.size(), false);
  for (size_t k = 0; k < packs.size(); ++k) {
    if (packs[k].buffer < 0 || packs[k].buffer >= static_cast<int32_t>(p.buffers.size()) || !valid(packs[k].pack_step))
      throw InternalError("a packed tensor names no buffer or step of the program");
    const Buffer& b = p.buffers[packs[k].buffer];
    offloaded[k] = !b.resident && b.bytes >= kMinOffloadBytes;
    if (offloaded[k]) {
      ++facts.offloaded;
      facts.host_bytes = checked_add(facts.host_bytes, b.bytes, "offloaded host bytes");
    } else {
      ++facts.kept;
    }
  }
  // The backward nodes that unpack an offloaded tensor, in the order backward runs them.
  std::vector<NodeSteps> unpacking;
  for (size_t k = 0; k < packs.size(); ++k) {
    auto it = nodes.find(packs[k].node);
    if (!offloaded[k] || it == nodes.end() || !valid(it->second.first) || !valid(it->second.last)) continue;
    const NodeSteps& n = it->second;
    if (std::none_of(unpacking.begin(), unpacking.end(), [&](const NodeSteps& u) { return u.first == n.first; }))
      unpacking.push_back(n);
  }
  std::sort(unpacking.begin(), unpacking.end(), [](const NodeSteps& a, const NodeSteps& b) { return a.first < b.first; });
  int32_t end_of_backward = -1;
  for (int32_t s = 0; s < steps; ++s)
    if (p.steps[s].phase == Phase::Backward) end_of_backward = s;
  const int32_t first_hook = unpacking.empty() ? end_of_backward : unpacking.front().last;
  for (size_t k = 0; k < packs.size(); ++k) {
    if (!offloaded[k]) continue;
    const int32_t gpu = packs[k].buffer;
    // The forward stash: kept until the pack of an offloaded tensor kMaxForwardStash ids later, or the first hook.
    int32_t release = first_hook;
    bool released_in_forward = false;
    for (size_t j = k + kMaxForwardStash; j < packs.size(); ++j)
      if (offloaded[j]) {
        release = packs[j].pack_step;
        released_in_forward = true;
        break;
      }
    if (valid(release)) add_unique(p.steps[release].reads, gpu);
    auto it = nodes.find(packs[k].node);
    if (it == nodes.end() || !valid(it->second.first) || !valid(it->second.last)) continue;  // never unpacked
    const NodeSteps node = it->second;
    if (!released_in_forward && node.first <= first_hook) continue;  // still in fwd_stash: used as it is
    // Brought back: a fresh GPU copy the node reads in place of the original.
    const Buffer original = p.buffers[gpu];
    ProgramWriter writer(p);
    const int32_t back = writer.new_buffer("offload_restore:" + original.name, original.bytes, Category::Activation);
    p.steps[node.first].writes.push_back(back);
    for (int32_t s = node.first; s <= node.last; ++s) replace_read(p.steps[s], gpu, back);
    add_unique(p.steps[node.first].reads, back);
    // Dropped in the post-hook of the next node that unpacks an offloaded tensor, else at the end of backward.
    int32_t drop = end_of_backward;
    for (const NodeSteps& n : unpacking)
      if (n.first > node.last) {
        drop = n.last;
        break;
      }
    if (valid(drop)) add_unique(p.steps[std::max(drop, node.last)].reads, back);
  }
  return facts;
}

}  // namespace memplan
