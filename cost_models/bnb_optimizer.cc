#include "cost_models/bnb_optimizer.h"

#include "onnx_import/checked.h"

namespace memplan {

bool is_bitsandbytes(Optimizer o) {
  return o == Optimizer::AdamW8bit || o == Optimizer::PagedAdamW || o == Optimizer::PagedAdamW8bit;
}

bool is_eight_bit(Optimizer o) { return o == Optimizer::AdamW8bit || o == Optimizer::PagedAdamW8bit; }

bool eight_bit_states(Optimizer o, uint64_t elements) { return is_eight_bit(o) && elements >= kBnbMin8bitSize; }

std::vector<BnbState> bitsandbytes_states(Optimizer o, uint64_t elements) {
  const bool paged = (o == Optimizer::PagedAdamW || o == Optimizer::PagedAdamW8bit) && elements >= kBnbPagedMinElements;
  if (!eight_bit_states(o, elements)) {
    const uint64_t bytes = checked_mul(elements, 4, "optimizer state bytes");
    return {{"state1", bytes, paged}, {"state2", bytes, paged}};
  }
  const uint64_t blocks = elements / kBnbBlockSize + (elements % kBnbBlockSize != 0);
  return {{"state1", elements, paged}, {"state2", elements, paged}, {"absmax1", blocks * 4, false},
          {"absmax2", blocks * 4, false}};
}

}  // namespace memplan
