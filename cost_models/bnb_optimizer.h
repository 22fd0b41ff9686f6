// bitsandbytes' AdamW8bit, PagedAdamW and PagedAdamW8bit (bitsandbytes/optim/adamw.py), the optimizers Hugging
// Face's Trainer names adamw_bnb_8bit, paged_adamw_32bit and paged_adamw_8bit. What each parameter's state holds
// follows bitsandbytes/optim/optimizer.py (Optimizer2State.init_state, Optimizer8bit.get_state_buffer) at
// 95f9af3, the rule of every release from 0.44.0 (#1365 made the 8-bit block 256 elements; 2048 before). For a
// parameter of n elements:
//   - 8-bit (AdamW8bit, PagedAdamW8bit) when n >= min_8bit_size (4096, the classes' default): state1 and state2
//     uint8 [n], absmax1 and absmax2 float32 [ceil(n / 256)]; once per device, the two quantization maps
//     (fill_qmap: create_dynamic_map signed and unsigned, 2^8 float32 values each);
//   - 32-bit (PagedAdamW, or an 8-bit optimizer's parameter under min_8bit_size): state1 and state2 float32 [n],
//     whatever the parameter's own type;
//   - paged (PagedAdamW, PagedAdamW8bit): state1 and state2 of a parameter of at least 1e5 elements are CUDA
//     managed memory (functional.py get_paged: cget_managed_ptr), outside PyTorch's caching allocator, on the GPU
//     while it has room and paged out to the host under pressure; smaller ones and the absmax vectors are
//     ordinary tensors.
// step() initialises a parameter's state at its first update; each update is one kernel over the grad and the
// states in place (optimizer_update_8bit_blockwise, optimizer_update_32bit): no temporaries. amsgrad is refused by
// the 8-bit classes and unused by the others; there is no maximize.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"

namespace memplan {

inline constexpr uint64_t kBnbMin8bitSize = 4096;       // AdamW8bit.__init__ min_8bit_size default
inline constexpr uint64_t kBnbBlockSize = 256;          // Optimizer2State.init_state blocksize
inline constexpr uint64_t kBnbPagedMinElements = 100000;  // get_state_buffer: p.numel() < 1e5 is not paged
inline constexpr uint64_t kBnbQmapBytes = 256 * 4;      // create_dynamic_map: 2^8 float32 values

struct BnbState {
  std::string name;  // state1, state2, absmax1, absmax2
  uint64_t bytes = 0;
  bool paged = false;  // CUDA managed memory, outside the allocator
};

bool is_bitsandbytes(Optimizer o);
bool is_eight_bit(Optimizer o);
// Whether a parameter of `elements` gets 8-bit states (and so the optimizer its quantization maps).
bool eight_bit_states(Optimizer o, uint64_t elements);
// One parameter's state, in init_state's order.
std::vector<BnbState> bitsandbytes_states(Optimizer o, uint64_t elements);

}  // namespace memplan
