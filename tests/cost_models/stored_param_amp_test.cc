// Autocast over parameters stored in bf16 (--precision amp-bf16 --param-dtype bf16): transformers 5's Trainer with
// bf16=True over a checkpoint from_pretrained loaded in its stored bf16 (dtype="auto", PR #42805). The Trainer hands
// mixed_precision="bf16" to accelerate (training_args.py TrainingArguments.__post_init__, trainer.py
// Trainer._build_accelerator_args), whose Accelerator.prepare_model wraps the forward in torch.autocast and casts no
// parameter outside FSDP (huggingface/accelerate 16cb6eb). So there is no float32 master copy: the parameters, their
// grads (AccumulateGrad in the parameter's type) and torch's AdamW states (exp_avg, exp_avg_sq: zeros_like(param)) are
// bf16. Every expected number is worked out by hand below from:
//  - autocast on bf16 parameters (aten/src/ATen/autocast_mode.cpp cached_cast, pytorch 008ec6b: `if (is_eligible(arg)
//    && arg.scalar_type() != to_type)` casts, else returns arg; the cache holds lower-precision casts of float32
//    leaves only): a lower_precision_fp op (linear, matmul) reading a bf16 weight makes no copy and caches nothing;
//    an fp32 op (pow, softmax, the loss) copies its bf16 inputs to float32 and writes float32; the other ops promote
//    to their widest input (a bf16 weight times a float32 activation is float32);
//  - PEFT's cast_adapter_dtype (peft/tuners/tuners_utils.py, huggingface/peft 5d602fd): autocast_adapter_dtype=True
//    upcasts bf16/fp16 adapters to float32 over the bf16 base (--lora-dtype float32).
// The tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]: hidden 128, 4 heads of 32, kv 64, ffn 352, 4 layers,
// vocab 1000, untied head), batch 2, seq 16, one GPU, Adam, the ideal runtime. Its parameters: a layer 184,576
// elements (q 16,384, k 8,192, v 8,192, o 16,384, gate/up/down 3 x 45,056, two norms 256), the root 128,000 (embedding)
// + 128 (final norm) + 128,000 (head) = 256,128; in all 4 x 184,576 + 256,128 = 994,432. [2,16,128] is 4,096
// elements: 8,192 B bf16, 16,384 B fp32.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::zoo_graph;

// --precision amp-bf16 --param-dtype PARAMS, one GPU.
TrainingRun amp_over(DType params) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.loss = LossKind::CrossEntropy;
  o.precision = Precision::AmpBf16;
  o.amp_param_dtype = params;
  return o;
}

int count_stored(const Program& p, const std::string& name) {
  int n = 0;
  for (const Buffer& b : p.buffers) n += b.name == name;
  return n;
}

// A full fine-tune. Parameters 994,432 x 2 = 1,988,864 B, their grads the same, Adam's exp_avg and exp_avg_sq
// 2 x 1,988,864 = 3,977,728 B: 8 B a parameter.
//  The forward: q_proj's bf16 weight is read by linear as it is (no `:autocast` copy, none cached) and its grad is
//  the bf16 AccumulateGrad one (no float32 ToCopyBackward grad). The embedding's output is bf16 (Gather of the bf16
//  weight): 8,192 B; the RMSNorm's Pow (fp32 op) reads a float32 copy of it (`:autocast`, 16,384 B) and writes float32
//  (16,384 B); the norm's bf16 weight times the float32 normalised input is float32 (Mul_1, 16,384 B); q_proj, k_proj
//  and v_proj each cast that to bf16 (three `:autocast` copies of 8,192 B: activations are never cached). The
//  attention scores are bf16 and the Softmax (fp32 op) writes float32: [2,4,16,16] = 2,048 elements, 8,192 B. The
//  logits are bf16 ([2,16,1000]: 64,000 B) and the loss reads their float32 copy, 128,000 B.
TEST(StoredParamAmp, FullFineTuneBf16ParametersUnderAutocastByHand) {
  const TrainingResult r = build_training_program(zoo_graph("llama_tiny_train", 2, 16), amp_over(DType::BFloat16));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 1988864u);
  EXPECT_EQ(r.grad_bytes, 1988864u);
  EXPECT_EQ(r.optimizer_state_bytes, 3977728u);
  EXPECT_EQ(buffer_named(p, "layers.0.self_attn.q_proj.weight:autocast"), -1);
  EXPECT_EQ(buffer_named(p, "grad:layers.0.self_attn.q_proj.weight:autocast"), -1);
  EXPECT_EQ(bytes_named(p, "/embed_tokens/Gather_output_0"), 8192u);
  EXPECT_EQ(bytes_named(p, "/embed_tokens/Gather_output_0:autocast"), 16384u);
  EXPECT_EQ(bytes_named(p, "/layers.0/input_layernorm/Pow_output_0"), 16384u);
  EXPECT_EQ(bytes_named(p, "/layers.0/input_layernorm/Mul_1_output_0"), 16384u);
  EXPECT_EQ(count_stored(p, "/layers.0/input_layernorm/Mul_1_output_0:autocast"), 3);
  EXPECT_EQ(bytes_named(p, "/layers.0/input_layernorm/Mul_1_output_0:autocast"), 8192u);
  EXPECT_EQ(bytes_named(p, "/layers.0/self_attn/q_proj/MatMul_output_0"), 8192u);
  EXPECT_EQ(bytes_named(p, "/layers.0/self_attn/Softmax_output_0"), 8192u);
  EXPECT_EQ(bytes_named(p, "logits"), 64000u);
  EXPECT_EQ(bytes_named(p, "logits:autocast"), 128000u);
}

// The same step as plain PyTorch AMP (--param-dtype fp32, the default): parameters 994,432 x 4 = 3,977,728 B, grads
// the same, Adam's states 7,955,456 B (16 B a parameter, twice the bf16 model's 8), and linear casts q_proj's float32
// weight into the autocast cache, 128 x 128 x 2 = 32,768 B. The embedding's output is float32 (16,384 B).
TEST(StoredParamAmp, Float32MasterWeightsDoubleParametersGradsAndStates) {
  const TrainingResult r = build_training_program(zoo_graph("llama_tiny_train", 2, 16), amp_over(DType::Float32));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 3977728u);
  EXPECT_EQ(r.grad_bytes, 3977728u);
  EXPECT_EQ(r.optimizer_state_bytes, 7955456u);
  EXPECT_EQ(bytes_named(p, "layers.0.self_attn.q_proj.weight:autocast"), 32768u);
  EXPECT_EQ(bytes_named(p, "/embed_tokens/Gather_output_0"), 16384u);
}

// LoRA rank 8 on o_proj over the bf16 base, PEFT's float32 adapters. Adapters a layer: lora_A [8,128] 1,024 + lora_B
// [128,8] 1,024 = 2,048 elements; four layers 8,192, float32: 32,768 B (param_bytes counts what trains), their grads
// 32,768 B, Adam's states 65,536 B. The frozen base stays bf16: o_proj's weight 128 x 128 x 2 = 32,768 B.
//  o_proj's input, the attention output [2,16,128], is bf16 (a matmul's), so PEFT's x.to(lora_A.weight.dtype) writes a
//  float32 copy, 16,384 B; lora_A's linear casts it back to bf16 (`:autocast`, 8,192 B) and its float32 weight into
//  the cache (8 x 128 x 2 = 2,048 B); lora_B's weight likewise 2,048 B; lora_A's output [2,16,8] is bf16, 512 B.
TEST(StoredParamAmp, LoraFloat32AdaptersOverBf16BaseByHand) {
  TrainingRun o = amp_over(DType::BFloat16);
  o.lora_rank = 8;
  o.lora_targets = "o_proj";
  const TrainingResult r = build_training_program(zoo_graph("llama_tiny_train", 2, 16), o);
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 32768u);
  EXPECT_EQ(bytes_named(p, "layers.0.self_attn.o_proj.weight"), 32768u);
  EXPECT_EQ(r.grad_bytes, 32768u);
  EXPECT_EQ(r.optimizer_state_bytes, 65536u);
  EXPECT_EQ(bytes_named(p, "/layers.0.self_attn.o_proj/lora/Cast_output_0"), 16384u);
  EXPECT_EQ(bytes_named(p, "/layers.0.self_attn.o_proj/lora/Cast_output_0:autocast"), 8192u);
  EXPECT_EQ(bytes_named(p, "layers.0.self_attn.o_proj.lora_A.weight:autocast"), 2048u);
  EXPECT_EQ(bytes_named(p, "layers.0.self_attn.o_proj.lora_B.weight:autocast"), 2048u);
  EXPECT_EQ(bytes_named(p, "/layers.0.self_attn.o_proj/lora_A/MatMul_output_0"), 512u);
}

// --lora-dtype base (autocast_adapter_dtype=False): the adapters bf16 like the base, 8,192 x 2 = 16,384 B, their grads
// 16,384 B, Adam's states 32,768 B. x.to(bf16) of the bf16 input is x
// itself (no Cast copy) and linear casts neither x nor the bf16 adapter weights.
TEST(StoredParamAmp, LoraAdaptersInTheBaseTypeCastNothing) {
  TrainingRun o = amp_over(DType::BFloat16);
  o.lora_rank = 8;
  o.lora_targets = "o_proj";
  o.lora_float32 = false;
  const TrainingResult r = build_training_program(zoo_graph("llama_tiny_train", 2, 16), o);
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 16384u);
  EXPECT_EQ(r.grad_bytes, 16384u);
  EXPECT_EQ(r.optimizer_state_bytes, 32768u);
  EXPECT_EQ(buffer_named(p, "/layers.0.self_attn.o_proj/lora/Cast_output_0"), -1);
  EXPECT_EQ(buffer_named(p, "layers.0.self_attn.o_proj.lora_A.weight:autocast"), -1);
  EXPECT_EQ(bytes_named(p, "/layers.0.self_attn.o_proj/lora_A/MatMul_output_0"), 512u);
}

}  // namespace
}  // namespace memplan
