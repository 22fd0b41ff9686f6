// --frozen-dtype (QLoRA and its relatives): frozen weights stored in another type than the compute type,
// and dequantized into the compute type for each op that reads them, as a transient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/op_fusion.h"
#include "onnx_import/graph.h"

namespace memplan {

// The bytes a frozen weight of `elements` values (`rows` = its first dimension, nn.Linear's out_features)
// takes stored as `s` (FrozenStorage::Same: not called).
uint64_t frozen_storage_bytes(FrozenStorage s, bool double_quant, uint64_t elements, uint64_t rows);

// torchao's NF4Tensor (torchao/dtypes/nf4tensor.py, to_nf4 with torchtune's defaults block_size 64 and
// scaler_block_size 256), the NF4 of --frozen-dtype nf4 under --shard fsdp2 (torchao_nf4: torchtune's distributed
// QLoRA, and its single-GPU recipes; elsewhere nf4 is bitsandbytes'). A weight of n values holds quantized_data (uint8, n / 2),
// quantized_scalers (int8, one per 64-value block), quantization_factor (one per 256 scalers) and scaler_mean
// (one value), both in the weight's dtype, and the 16-entry nf4 table in that dtype. `sharded` is what fully_shard
// splits on dim 0 and all-gathers (NF4Tensor.fsdp_pre_all_gather's three tensors); `replicated` the scaler_mean
// and the table, which every rank keeps whole (the metadata of fsdp_pre_all_gather, not gathered).
struct TorchaoNf4 {
  uint64_t data = 0, scalers = 0, factors = 0, replicated = 0, scaler_blocks = 0;
  uint64_t sharded() const { return data + scalers + factors; }
  uint64_t total() const { return sharded() + replicated; }
};
// Throws InputError naming `weight` where to_nf4 asserts: n not a multiple of 64 x 256 (get_block_absmax and
// NF4Tensor.double_quantize_scalers).
TorchaoNf4 torchao_nf4_layout(uint64_t elements, uint64_t element_bytes, const std::string& weight);
// NF4Tensor.get_original_weight's intermediates for a weight of n values in a dtype of `element_bytes` (freed when it
// returns, beside its result of n x element_bytes): the two int64 index tensors (n / 2 each), the looked-up halves
// and the scaled halves (n / 2 each, the weight's dtype) and the dequantized scalers (n / 64), all live at its
// torch.stack.
uint64_t torchao_nf4_dequantize_scratch(uint64_t elements, uint64_t element_bytes);
// Whether --frozen-dtype nf4 is torchao's NF4Tensor (--nf4-impl torchao: torchtune's qlora_* models, on one GPU
// or fully_sharded through torchao's fsdp_pre_all_gather extension); bitsandbytes' Params4bit otherwise.
inline bool torchao_nf4(const TrainingOptions& o) { return o.frozen_storage == FrozenStorage::Nf4 && o.nf4_torchao; }

// --frozen-dtype fp16/bf16 under FSDP with a mixed-precision policy in that type (--fsdp2-mp): the frozen parameters'
// own type, that of the half checkpoint accelerate leaves them in (it upcasts only what requires grad: FSDP1's
// Accelerator.prepare_model upcasts each flat parameter that requires grad, FSDP2's fsdp2_prepare_model each such
// parameter, huggingface/accelerate v1.14.0). Float32 otherwise (no half frozen storage).
inline DType frozen_half_dtype(const TrainingOptions& o) {
  return o.frozen_storage == FrozenStorage::Fp16   ? DType::Float16
         : o.frozen_storage == FrozenStorage::Bf16 ? DType::BFloat16
                                                   : DType::Float32;
}

// GPTQ or AWQ 4-bit (--frozen-dtype gptq-int4 / awq-int4): the bytes of a linear layer of `in` inputs and `out`
// outputs as the training loaders register it (cost_models/packed_int_weights.h; GPTQ with its g_idx, which
// gptqmodel's BaseQuantLinear and auto_gptq's QuantLinear register whether or not the checkpoint has act-order;
// scales float16), `group_size` inputs to a scale (-1: one group). Throws InputError naming `weight` where the
// loader cannot hold the layer (GPTQ: in or out not a multiple of 32; AWQ: in not a multiple of the group, out of 8).
uint64_t packed_frozen_bytes(FrozenStorage s, uint64_t in, uint64_t out, int64_t group_size, const std::string& weight);

// Per tensor: the bytes the frozen parameter is stored in (0: its compute type, unchanged). `frozen`
// marks the frozen module parameters; `compute` is each tensor's compute (storage) type under the
// precision. fp16/bf16 apply to every frozen float parameter whose compute type differs; int8/nf4 to
// the frozen weights of Linear/MatMul/Gemm layers only, except the layer that writes a graph output (the
// head), as transformers' bitsandbytes integration replaces nn.Linear modules only and keeps the output
// head in the original precision (integrations/bitsandbytes.py, get_keys_to_not_convert). gptq-int4 and
// awq-int4 likewise: optimum's GPTQQuantizer.convert_model replaces the linear layers inside the decoder blocks
// (get_layers(model, prefix=block_name)) and AutoAWQ quantizes the decoder layers' linears, never the head.
// bitsandbytes' LLM.int8 forward on a frozen int8 weight, MatMul8bitLt.forward (bitsandbytes/autograd/
// _functions.py, the CUDA ops of bitsandbytes/backends/cuda/ops.py), for an input A of `rows` x `in`
// (storage type `a`) and `out` output features: what it allocates beyond its output, and frees by the
// end of the op (the bytes of the larger of its two phases, as one transient):
//  1. int8_vectorwise_quant(A.to(float16), threshold): the float16 copy of A (2 bytes per value, none
//     when A is float16), row_stats SCA (float32 per row), CA (int8, 1 byte per value), and with
//     threshold > 0 `outliers = A.abs() >= threshold`: A.abs() (float16) and the bool mask;
//  2. int8_scaled_mm: int8_linear_matmul's int32 product (4 bytes per output value) and int8_mm_dequant's
//     float16 result (2 bytes, the output itself when A is float16; else `.to(A.dtype)` copies it), with
//     CA and SCA still held.
// threshold: transformers' BitsAndBytesConfig llm_int8_threshold = 6.0 (the default a from_pretrained
// load_in_8bit model gets). The outlier columns (any |a| >= 6 in A's column) depend on the data: this is
// the lower end, none. Each outlier column adds, with k columns: subA = A[:, cols] (rows x k in A's type,
// kept for backward when A needs a grad), CB[:, cols] (int8), its float32 dequantization and its copy
// in A's type (out x k each), and addmm's new output.
uint64_t int8_matmul_forward_bytes(uint64_t rows, uint64_t in, uint64_t out, DType a);
inline constexpr double kInt8OutlierThreshold = 6.0;  // transformers BitsAndBytesConfig.llm_int8_threshold

// --quantize-experts: the stacked experts' parameters bitsandbytes re-stores as a parametrization, as axolotl's
// quantize_moe_experts applies it (axolotl-ai-cloud/axolotl 067b021, src/axolotl/monkeypatch/moe_quant.py
// patch_moe_quantization_on_load: each CUDA parameter of 3 or more dimensions whose name holds "expert", as it loads).
// bitsandbytes 0.48+ (bitsandbytes/nn/parametrize.py at 95f9af3):
//  - replace_parameter_4bit(module, name, compress_statistics, quant_type) runs F.quantize_4bit on the whole
//    parameter, flattened (blocks of 64 over all its experts: NF4's bytes as for a Linear4bit weight of as many
//    values, frozen_storage_bytes), keeps the packed bytes as the parameter and registers Bnb4bitParametrization;
//  - every read of the parameter runs Bnb4bitParametrization.forward (under no_grad): dequantize_4bit of the whole
//    tensor into quant_state.dtype, the type it was quantized from (the model's); _register_parametrization_hooks
//    turns torch's parametrization cache on for the owning module's forward, so each experts forward dequantizes each
//    parameter once;
//  - no autograd.Function stands between: the dequantized tensor is an ordinary input of transformers'
//    _grouped_mm, whose backward (derivatives.yaml: _grouped_mm_mat1_backward(grad, mat2, ...)) keeps it while the
//    rows need a grad. Unlike Linear4bit's MatMul4Bit (training_forward.cc add_dequantized), nothing is dequantized
//    again in backward, and the copy lives from the forward to the op's backward (a recomputation's, under
//    checkpointing).
// Per tensor: true for each stacked parameter a grouped experts' _grouped_mm reads (graph_facts grouped_mm_experts),
// all false without the option. Throws InputError naming the model when there is none, or the parameter when PEFT's
// target_parameters adapts it (its ParamWrapper over the parametrization, not modelled) or it trains.
std::vector<bool> parametrized_experts(const Graph& g, const TrainingOptions& o, const std::vector<bool>& frozen);

// `parametrized`: parametrized_experts' flags, re-stored as NF4 whatever their shape.
std::vector<uint64_t> frozen_stored_bytes(const Graph& g, const std::vector<FusedOp>& ops, const TrainingOptions& o,
                                          const std::vector<bool>& frozen, const std::vector<DType>& compute,
                                          const std::vector<bool>& parametrized);

}  // namespace memplan
