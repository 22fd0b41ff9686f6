// PEFT's k-bit preparation (--kbit-prep, with --frozen-dtype nf4; --precision is the 4-bit compute dtype): the graph a QLoRA step
// runs after peft.prepare_model_for_kbit_training (src/peft/utils/other.py), which casts every fp16/bf16 parameter
// that bitsandbytes did not quantize (embeddings, norms, the head) to float32. bitsandbytes' Linear4bit.forward
// (bitsandbytes/nn/modules.py) then runs each 4-bit layer as
//     inp_dtype = x.dtype; x = x.to(self.compute_dtype); out = bnb.matmul_4bit(x, self.weight.t(), ...)
//     return out.to(inp_dtype)
// so the residual stream, the norms, attention and every layer's output are float32 (twice the bytes of a bf16
// model's activations, checkpoints included), while each 4-bit GEMM reads a compute-dtype copy of its input (what
// MatMul4Bit keeps for backward) and writes a compute-dtype result that is copied back to float32.
// A graph rewrite, pass 1 after the float32 islands (tensor_layout.h): each 4-bit layer (a Linear whose weight is
// a frozen base weight, not an adapter, not the head: frozen_storage.h's rule) gets the two casts, and every other
// float tensor is pinned to float32; the precision names the compute dtype (bnb_4bit_compute_dtype: float32 by
// default, where the casts are Tensor.to returning self, so nothing is copied).
#pragma once

#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// Rewrites `g` in place. `float32`, `adapter`: per-tensor flags (grown with the graph): the pins, and LoRA's adapter
// parameters (never quantized). Returns the number of 4-bit layers.
int prepare_kbit_training(Graph& g, std::vector<bool>& float32, std::vector<bool>& adapter);

}  // namespace memplan
