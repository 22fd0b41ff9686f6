// --offload-activations: torchtune's activation offloading (torchtune/training/_activation_offloading.py at
// pytorch/torchtune bd2a0fc7, OffloadActivations with use_streams=True, the default get_act_offloading_ctx_manager
// installs; the recipes enter it around the model's forward only, recipes/lora_finetune_single_device.py and
// full_finetune_single_device.py). A pass over a training step's program: the step records every tensor the pack
// hook sees, in order, and the backward node that unpacks it; the pass moves the offloaded ones to the host and
// writes where their GPU copies live.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "planner/program.h"

namespace memplan {

// OffloadActivations.__init__ min_offload_size: a tensor of fewer bytes (element_size() * nelement()) stays.
inline constexpr uint64_t kMinOffloadBytes = 1024;
// OffloadActivations.__init__ max_fwd_stash_size: a GPU tensor being copied out is kept alive until a later
// offloaded tensor's pack whose id is at least this many ids later (ids count every packed tensor).
inline constexpr int32_t kMaxForwardStash = 5;

// One tensor autograd saved while the hooks were active, in pack order.
struct PackedTensor {
  int32_t buffer = -1;     // the saved tensor's GPU buffer
  int32_t pack_step = -1;  // the forward step at which the pack hook ran
  int32_t node = -1;       // the backward node that unpacks it (its key in the NodeSteps map)
};

// A backward node's steps: `first` unpacks its saved tensors, `last` ends it (its post-hook runs after it).
struct NodeSteps {
  int32_t first = -1;
  int32_t last = -1;
};

struct OffloadFacts {
  uint64_t host_bytes = 0;  // pinned host bytes of every offloaded tensor: all alive at the forward's end
  int offloaded = 0;        // pack events offloaded
  int kept = 0;             // pack events left on the GPU (under kMinOffloadBytes, or parameters and buffers)
};

// Rewrites `p`: an offloaded tensor's GPU buffer lives until its release (the forward stash), and each backward
// node that unpacks it reads a copy brought back, freed when the next node unpacking an offloaded tensor ends.
OffloadFacts offload_activations(Program& p, const std::vector<PackedTensor>& packs,
                                 const std::map<int32_t, NodeSteps>& nodes);

}  // namespace memplan
