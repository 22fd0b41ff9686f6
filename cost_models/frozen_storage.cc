#include "cost_models/frozen_storage.h"

#include <algorithm>

#include "cost_models/graph_facts.h"
#include "cost_models/lora_parameters.h"
#include "cost_models/packed_int_weights.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

// bitsandbytes (bitsandbytes/functional.py):
//  - quantize_4bit (NF4, blocksize = 64 by default, quant_storage uint8): the values packed two per byte,
//    (n + 1) // 2 bytes, and one float32 absmax per 64-value block. With compress_statistics (QLoRA's
//    double quantization, Dettmers et al. 2023, "QLoRA", section 3: 8-bit block constants in blocks of
//    256, 0.127 instead of 0.5 bits per parameter): offset = absmax.mean() (one float32), the absmax
//    quantized by quantize_blockwise(absmax, blocksize=256) to one byte per block plus one float32 absmax
//    per 256 blocks. The two 256- and 16-entry code books are shared by every weight and not counted.
//  - Int8Params / int8_vectorwise_quant (LLM.int8, Dettmers et al. 2022): one byte per value and one
//    float32 scale (SCB) per row.
constexpr uint64_t kNf4BlockSize = 64;
constexpr uint64_t kNf4DoubleQuantBlockSize = 256;
constexpr uint64_t kFloat32Bytes = 4;
// GPTQ and AWQ: 4-bit values; the scales float16 (gptqmodel BaseQuantLinear.__init__ and AutoAWQ
// WQLinear_GEMM.__init__ register them so, whatever the model's type).
constexpr uint64_t kGptqBits = 4;
constexpr uint64_t kPackedScaleBytes = 2;

bool is_linear_weight(const Graph& g, const FusedOp& op, int32_t t) { return t >= 0 && linear_weight_of(g, op) == t; }

bool packed(FrozenStorage s) { return s == FrozenStorage::GptqInt4 || s == FrozenStorage::AwqInt4; }

}  // namespace

uint64_t packed_frozen_bytes(FrozenStorage s, uint64_t in, uint64_t out, int64_t group_size, const std::string& weight) {
  const bool gptq = s == FrozenStorage::GptqInt4;
  const uint64_t group = group_size == -1 ? in : static_cast<uint64_t>(group_size);
  auto refuse = [&](const std::string& why) {
    throw InputError(std::string("--frozen-dtype ") + (gptq ? "gptq-int4" : "awq-int4") + ": the linear layer of weight '" +
                     weight + "' (" + std::to_string(in) + " inputs, " + std::to_string(out) + " outputs) " + why);
  };
  if (group == 0) refuse("has a group size of 0");
  if (gptq) {
    // BaseQuantLinear.__init__: qweight [in // 32 * bits, out], qzeros [ceil(in / group), out // 32 * bits].
    if (in % 32 != 0 || out % 32 != 0)
      refuse("cannot be packed: GPTQ's qweight holds in_features // 32 * 4 rows and its qzeros out_features // 32 * 4 "
             "columns of int32 (gptqmodel BaseQuantLinear.__init__), so both must be multiples of 32");
    return gptq_packed(in, out, kGptqBits, ceil_div(in, group), kPackedScaleBytes, /*g_idx=*/true).total();
  }
  // WQLinear_GEMM.__init__: assert in_features % group_size == 0 and out_features % (32 // w_bit) == 0.
  if (in % group != 0)
    refuse("has an input not a multiple of --frozen-group-size " + std::to_string(group_size) +
           " (AutoAWQ's WQLinear_GEMM asserts in_features % group_size == 0)");
  if (out % 8 != 0) refuse("has an output not a multiple of 8 (WQLinear_GEMM packs 8 outputs to an int32)");
  return awq_packed(in, out, in / group, kPackedScaleBytes).total();
}

// torchao/dtypes/nf4tensor.py at pytorch/ao 36027d82d1ad9949597ea16002ff4940374b1b94 (there
// torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py; torchtune v0.6.1 imports it as torchao.dtypes.nf4tensor):
// NF4Tensor.from_tensor asserts numel % block_size == 0; double_quantize_scalers: scalers_1 = get_block_absmax
// (n / 64 values in the weight's dtype), asserts scalers_1.numel() % scaler_block_size == 0, returns the int8
// quantized scalers (n / 64), quantization_factor (n / 64 / 256 values of 256 / (2 * absmax), the weight's dtype)
// and scalers_1_mean (a 0-d tensor, the weight's dtype); convert_to_norm_float_weight packs two 4-bit indices a
// byte (n / 2 uint8, n even); the nf4 look-up table is a 16-entry tensor in the weight's dtype, one per weight.
constexpr uint64_t kTorchaoNf4BlockSize = 64;         // to_nf4(tensor, block_size: int = 64, ...)
constexpr uint64_t kTorchaoNf4ScalerBlockSize = 256;  // to_nf4(..., scaler_block_size: int = 256)
constexpr uint64_t kTorchaoNf4TableEntries = 16;      // NF4Tensor.from_tensor's nf4 = torch.tensor([-1.0, ..., 1.0])

TorchaoNf4 torchao_nf4_layout(uint64_t n, uint64_t element_bytes, const std::string& weight) {
  const uint64_t block = kTorchaoNf4BlockSize * kTorchaoNf4ScalerBlockSize;
  if (n == 0 || n % block != 0)
    throw InputError("--frozen-dtype nf4 as torchao's NF4Tensor (--nf4-impl torchao, torchtune's qlora_* models): weight '" +
                     weight + "' has " +
                     std::to_string(n) + " values, not a multiple of 64 x 256 = 16384 (to_nf4 asserts it: "
                     "NF4Tensor.double_quantize_scalers needs whole blocks of 64 values and of 256 scalers)");
  TorchaoNf4 q;
  q.data = n / 2;
  q.scalers = n / kTorchaoNf4BlockSize;
  q.scaler_blocks = q.scalers / kTorchaoNf4ScalerBlockSize;
  q.factors = checked_mul(q.scaler_blocks, element_bytes, "nf4 quantization factors");
  q.replicated = checked_mul(1 + kTorchaoNf4TableEntries, element_bytes, "nf4 scaler mean and table");
  return q;
}

// NF4Tensor.get_original_weight (same file and commit): first_elements = (quantized_data >> 4).to(torch.long) and
// second_elements = (quantized_data & 0b1111).to(torch.long) (n / 2 int64 each; the uint8 shifts are freed by
// then); dequantize(...) = nf4[value] for each (n / 2 values each); scalers = dequantize_scalers(...) (n / 64 values
// after `+ self.scaler_mean`; the division's result freed); scaled_first and scaled_second = dequantized_x *
// repeated.flatten() (n / 2 each; the flatten's copy of the expanded view is freed after each product); then
// torch.stack([...], dim=-1) (n values: the result). Every local is held until the return, so at the stack all
// of them are live: 8 n + (n / 2 + n / 2 + n / 64 + n / 2 + n / 2) elements of the weight's dtype, besides the result.
uint64_t torchao_nf4_dequantize_scratch(uint64_t n, uint64_t e) {
  const uint64_t indices = checked_mul(n, 8, "nf4 dequantize indices");  // two int64 tensors of n / 2
  const uint64_t halves = checked_mul(checked_add(n / 2 * 4, n / kTorchaoNf4BlockSize, "nf4 dequantize"), e,
                                      "nf4 dequantize halves");
  return checked_add(indices, halves, "nf4 dequantize scratch");
}

uint64_t frozen_storage_bytes(FrozenStorage s, bool double_quant, uint64_t n, uint64_t rows) {
  switch (s) {
    case FrozenStorage::Fp16:
    case FrozenStorage::Bf16: return checked_mul(n, 2, "frozen weight bytes");
    case FrozenStorage::Int8: return checked_add(n, checked_mul(rows, kFloat32Bytes, "int8 scales"), "int8 weight bytes");
    case FrozenStorage::Nf4: {
      const uint64_t blocks = ceil_div(n, kNf4BlockSize);
      const uint64_t packed = n / 2 + n % 2;
      const uint64_t scales = double_quant
                                  ? checked_add(blocks, kFloat32Bytes * (ceil_div(blocks, kNf4DoubleQuantBlockSize) + 1),
                                                "nf4 scales")
                                  : checked_mul(blocks, kFloat32Bytes, "nf4 scales");
      return checked_add(packed, scales, "nf4 weight bytes");
    }
    case FrozenStorage::GptqInt4:  // packed_frozen_bytes: their layout needs the layer's inputs and outputs
    case FrozenStorage::AwqInt4:
    case FrozenStorage::Same: break;
  }
  return 0;
}

uint64_t int8_matmul_forward_bytes(uint64_t rows, uint64_t in, uint64_t out, DType a) {
  const uint64_t values = checked_mul(rows, in, "int8 input elements");
  const uint64_t half_copy = a == DType::Float16 ? 0 : checked_mul(values, 2, "int8 input copy");
  const uint64_t row_stats = checked_mul(rows, kFloat32Bytes, "int8 row scales");
  const uint64_t outlier_scan = kInt8OutlierThreshold > 0 ? checked_mul(values, 2 + 1, "int8 outlier scan") : 0;
  const uint64_t quantize = checked_add(checked_add(half_copy, row_stats, "int8 quantize"),
                                        checked_add(values, outlier_scan, "int8 quantize"), "int8 quantize");
  const uint64_t products = checked_mul(rows, out, "int8 output elements");
  const uint64_t dequant = checked_add(checked_mul(products, 4, "int8 int32 product"),
                                       a == DType::Float16 ? 0 : checked_mul(products, 2, "int8 float16 result"),
                                       "int8 matmul");
  const uint64_t matmul = checked_add(checked_add(values, row_stats, "int8 matmul"), dequant, "int8 matmul");
  return std::max(quantize, matmul);
}

std::vector<bool> parametrized_experts(const Graph& g, const TrainingOptions& o, const std::vector<bool>& frozen) {
  std::vector<bool> out(g.tensors.size(), false);
  if (!o.quantize_experts) return out;
  precondition(o.frozen_storage == FrozenStorage::Nf4 && !o.nf4_torchao, "--quantize-experts without bitsandbytes' NF4");
  bool any = false;
  for (const Node& n : g.nodes) {
    const int32_t w = grouped_mm_experts(g, n);
    if (w < 0) {
      const int32_t adapted = grouped_mm_stacked_parameter(g, n);
      if (adapted >= 0)
        throw InputError("--quantize-experts with --lora-targets naming the stacked experts' parameter '" +
                         g.tensors[adapted].name + "': PEFT's ParamWrapper over bitsandbytes' parametrization (its "
                         "delta added to each dequantized read) is not modelled; target the Linear layers only");
      continue;
    }
    if (!frozen[w])
      throw InputError("--quantize-experts: the stacked experts' parameter '" + g.tensors[w].name + "' trains "
                       "(--trainable), and a 4-bit parametrized parameter cannot (replace_parameter_4bit makes it "
                       "requires_grad=False)");
    out[w] = true;
    any = true;
  }
  if (!any)
    throw InputError("--quantize-experts: model '" + g.model_path + "' has no stacked experts' parameters (a mixture "
                     "of experts' config.json run with --experts-implementation grouped_mm holds them)");
  return out;
}

std::vector<uint64_t> frozen_stored_bytes(const Graph& g, const std::vector<FusedOp>& ops, const TrainingOptions& o,
                                          const std::vector<bool>& frozen, const std::vector<DType>& compute,
                                          const std::vector<bool>& parametrized) {
  std::vector<uint64_t> bytes(g.tensors.size(), 0);
  if (o.frozen_storage == FrozenStorage::Same) return bytes;
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (parametrized[t]) bytes[t] = frozen_storage_bytes(FrozenStorage::Nf4, o.double_quant, g.tensors[t].elements(), 1);
  const bool quantized = o.frozen_storage == FrozenStorage::Int8 || o.frozen_storage == FrozenStorage::Nf4 ||
                         packed(o.frozen_storage);
  std::vector<bool> candidate(g.tensors.size(), !quantized);
  std::vector<uint64_t> outputs(g.tensors.size(), 0);  // a linear weight's output features (its op's last axis)
  if (quantized) {
    std::vector<bool> head(g.tensors.size(), false);
    for (const FusedOp& op : ops)
      for (int32_t t : op.inputs)
        if (is_linear_weight(g, op, t)) {
          candidate[t] = true;
          for (int32_t y : op.outputs) head[t] = head[t] || is_graph_output(g, y);
          if (!op.outputs.empty() && !g.tensors[op.outputs[0]].shape.empty())
            outputs[t] = static_cast<uint64_t>(std::max<int64_t>(0, g.tensors[op.outputs[0]].shape.back()));
        }
    for (size_t t = 0; t < g.tensors.size(); ++t) candidate[t] = candidate[t] && !head[t];
  }
  const DType half = frozen_half_dtype(o);  // Float32 for the quantized storages, which do not read it
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& x = g.tensors[t];
    if (parametrized[t] || !frozen[t] || !candidate[t] || (quantized && x.shape.size() != 2)) continue;
    if (!quantized && compute[t] == half) continue;  // already stored so
    if (packed(o.frozen_storage)) {
      const uint64_t out = outputs[t];
      if (out == 0 || x.elements() % out != 0) continue;  // not a layer whose output axis the graph names
      bytes[t] = packed_frozen_bytes(o.frozen_storage, x.elements() / out, out, o.quant_group_size, x.name);
      continue;
    }
    if (torchao_nf4(o)) {
      bytes[t] = torchao_nf4_layout(x.elements(), static_cast<uint64_t>(std::max(1, dtype_bits(compute[t]) / 8)), x.name).total();
      continue;
    }
    const uint64_t rows = x.shape.empty() ? 1 : static_cast<uint64_t>(x.shape[0]);
    bytes[t] = frozen_storage_bytes(o.frozen_storage, o.double_quant, x.elements(), rows);
  }
  return bytes;
}

}  // namespace memplan
