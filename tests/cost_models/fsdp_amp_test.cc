// accelerate's mixed precision under FSDP (the HF Trainer's bf16=True with FSDP1 or FSDP2): a policy of param_dtype =
// reduce_dtype = bf16 (accelerate utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision, v1.14.0)
// AND torch.autocast around the forward (accelerator.py Accelerator.__init__ native_amp, prepare_model), over a model
// whose trainable parameters are float32 shards (FSDP1: Accelerator.prepare_model upcasts each flat parameter that
// requires grad; FSDP2: utils/fsdp_utils.py fsdp2_prepare_model upcasts each parameter that requires grad; memplan's
// amp-* model is loaded float32, so the frozen ones are float32 too). What report/estimate_config.cc makes of
// --fsdp2-mp bf16:bf16 --precision amp-bf16. Every expected number is worked out by hand below from:
//  - the policy (training_fsdp_mp.cc, training_fsdp2.cc): every parameter gathered in bf16, the shards, grad shards
//    and optimizer states float32, the unsharded grads bf16 and reduced in bf16, the reduce output copied to float32;
//  - autocast on those bf16 parameters (aten/src/ATen/autocast_mode.cpp cached_cast: `if (is_eligible(arg) &&
//    arg.scalar_type() != to_type)` casts, else returns arg; the cache only holds a float32 leaf that requires grad):
//    a lower_precision_fp op (linear, matmul) reading bf16 makes no copy and caches nothing; an fp32 op (pow,
//    softmax, the loss) copies its bf16 inputs to float32 and writes float32; the other ops promote to their widest
//    input (a bf16 weight times a float32 activation is float32).
// The tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]: hidden 128, 4 heads of 32, kv 64, ffn 352, 4 layers,
// vocab 1000, untied head), batch 2, seq 16, 4 GPUs, Adam. [2,16,128] is 4,096 elements: 8,192 B bf16, 16,384 B fp32.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::count_named;
using testing::bytes_named;
using testing::zoo_graph;

// --shard SHARD --gpus 4 --fsdp2-mp bf16:bf16 --precision amp-bf16 (policy = false: --precision amp-bf16 alone).
TrainingRun accelerate(Sharding shard, bool policy = true) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.loss = LossKind::CrossEntropy;
  o.gpus = 4;
  o.shard = shard;
  o.precision = Precision::AmpBf16;
  o.fsdp2_mp = policy;
  o.fsdp2_reduce_dtype = DType::BFloat16;
  return o;
}

// FSDP1, every parameter trains (use_orig_params=False: no alignment padding). A layer's flat parameter is 184,576
// elements (q 16,384, k 8,192, v 8,192, o 16,384, gate/up/down 3 x 45,056, two norms 256), a rank's quarter 46,144;
// the root 128,000 + 128 + 128,000 = 256,128, a quarter 64,032. Per GPU 4 x 46,144 + 64,032 = 248,608 elements:
// shards float32 994,432 B, grad shards 994,432 B, Adam's states 1,988,864 B (the policy changes none of them).
//  Gone, against autocast without a policy (the next test): each linear's cast of its weight. q_proj's weight is read
//  gathered in bf16 (the policy's _full_param_padded), so linear casts nothing and there is no `:autocast` copy of it
//  (without a policy 128 x 128 x 2 = 32,768 B, FSDP's views never cached), nor its grad's (no ToCopyBackward).
//  What autocast still does: the embedding's output is bf16 (Gather of the bf16 weight promotes to bf16): 8,192 B; the
//  RMSNorm's Pow is an fp32 op, so it reads a float32 copy of it (`:autocast`, 16,384 B) and writes float32 (16,384
//  B); the norm's weight (bf16) times the float32 normalised input is float32 (Mul_1, 16,384 B); q_proj, k_proj and
//  v_proj each cast that to bf16 (three `:autocast` copies of 8,192 B: activations are never cached) and write bf16
//  (q: 8,192 B). The attention scores are bf16 (matmul; the causal mask is made in the embeddings'
//  type, bf16), so the Softmax (fp32 op) writes float32: [2,4,16,16] = 2,048 elements, 8,192 B. The logits are bf16
//  ([2,16,1000]: 64,000 B) and the loss reads their float32 copy, 128,000 B.
//  Gradients: the unsharded flat grad is bf16 (184,576 x 2 = 369,152 B), reduce_dtype bf16 needs no cast before
//  the reduce-scatter; its bf16 output 46,144 x 2 = 92,288 B is copied to the float32 grad shard (184,576 B).
TEST(FsdpAmp, Fsdp1PolicyUnderAutocastByHand) {
  const TrainingResult r = build_training_program(zoo_graph("llama_tiny_train", 2, 16), accelerate(Sharding::Fsdp));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 994432u);
  EXPECT_EQ(r.grad_bytes, 994432u);
  EXPECT_EQ(r.optimizer_state_bytes, 1988864u);
  EXPECT_EQ(buffer_named(p, "layers.0.self_attn.q_proj.weight:autocast"), -1);
  EXPECT_EQ(buffer_named(p, "grad:layers.0.self_attn.q_proj.weight:autocast"), -1);
  EXPECT_EQ(bytes_named(p, "/embed_tokens/Gather_output_0"), 8192u);
  EXPECT_EQ(bytes_named(p, "/embed_tokens/Gather_output_0:autocast"), 16384u);
  EXPECT_EQ(bytes_named(p, "/layers.0/input_layernorm/Pow_output_0"), 16384u);
  EXPECT_EQ(bytes_named(p, "/layers.0/input_layernorm/Mul_1_output_0"), 16384u);
  EXPECT_EQ(count_named(p, "/layers.0/input_layernorm/Mul_1_output_0:autocast"), 3);
  EXPECT_EQ(bytes_named(p, "/layers.0/input_layernorm/Mul_1_output_0:autocast"), 8192u);
  EXPECT_EQ(bytes_named(p, "/layers.0/self_attn/q_proj/MatMul_output_0"), 8192u);
  EXPECT_EQ(bytes_named(p, "/layers.0/self_attn/Softmax_output_0"), 8192u);
  EXPECT_EQ(bytes_named(p, "logits"), 64000u);
  EXPECT_EQ(bytes_named(p, "logits:autocast"), 128000u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded:layers.0"), 369152u);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded_grad:layers.0"), 369152u);
  EXPECT_EQ(buffer_named(p, "fsdp_unsharded_grad:layers.0:reduce_dtype"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp_reduce_output:layers.0"), 92288u);
  EXPECT_EQ(bytes_named(p, "fsdp_grad_shard:layers.0"), 184576u);
}

// The same step under autocast without a policy (--shard fsdp --precision amp-bf16, float32 flat parameters): each
// linear casts its float32 weight view itself, kept by its backward (q_proj: 128 x 128 x 2 = 32,768 B), and the
// embedding's output is float32 (16,384 B): the Pow reads it with no copy.
TEST(FsdpAmp, Fsdp1AutocastWithoutPolicyCastsEachWeight) {
  const TrainingResult r =
      build_training_program(zoo_graph("llama_tiny_train", 2, 16), accelerate(Sharding::Fsdp, /*policy=*/false));
  const Program& p = r.program;
  EXPECT_EQ(bytes_named(p, "layers.0.self_attn.q_proj.weight:autocast"), 32768u);
  EXPECT_EQ(bytes_named(p, "/embed_tokens/Gather_output_0"), 16384u);
  EXPECT_EQ(buffer_named(p, "/embed_tokens/Gather_output_0:autocast"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded:layers.0"), 738304u);
}

// FSDP2 with LoRA (hf-peft: rank 8 on q_proj and v_proj; --fsdp2-mp leaves the adapters float32 parameters,
// lora_float32 off). fully_shard's groups: each layer and the root. A rank keeps ceil(dim0 / 4) rows of each:
//  adapters of a layer: q lora_A [8,128] 2 x 128 = 256, q lora_B [128,8] 32 x 8 = 256, v lora_A 256, v lora_B [64,8]
//  16 x 8 = 128: 896 elements, float32 (accelerate upcasts what trains) 3,584 B; four layers 14,336 B of adapter
//  shards, their grad shards 14,336 B, Adam's states 28,672 B. The frozen base: float32 as loaded (fsdp2_prepare_model
//  leaves frozen parameters alone), 248,608 elements a rank (the FSDP1 test's): 994,432 B. param_bytes 1,008,768 B.
//  Gathered in bf16: layers.0's all-gather input copy (46,144 + 896) x 2 = 94,080 B, its unsharded parameters 4 x
//  that = 376,320 B.
//  PEFT's lora.Linear casts x to lora_A.weight.dtype (_cast_input_dtype), which under the policy is the gathered bf16:
//  x is the float32 Mul_1 above, so the Cast writes a bf16 copy (8,192 B) that lora_A reads without an autocast cast;
//  no adapter weight is cast or cached. (Autocast over float32 adapters would leave x float32, a Tensor.to returning
//  self, and lora_A's linear would cast it and each adapter weight.) lora_A's output [2,16,8], 256 elements, is
//  bf16: 512 B.
//  Gradients: layers.0's reduce-scatter input holds the adapters' bf16 grads, 4 x 896 x 2 = 7,168 B; the bf16 output
//  896 x 2 = 1,792 B is copied to the float32 grad shard 3,584 B.
TEST(FsdpAmp, Fsdp2LoraPolicyUnderAutocastByHand) {
  TrainingRun o = accelerate(Sharding::Fsdp2);
  o.lora_rank = 8;
  o.lora_targets = "q_proj|v_proj";
  o.lora_float32 = false;
  const TrainingResult r = build_training_program(zoo_graph("llama_tiny_train", 2, 16), o);
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 1008768u);
  EXPECT_EQ(r.grad_bytes, 14336u);
  EXPECT_EQ(r.optimizer_state_bytes, 28672u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:layers.0"), 94080u);
  EXPECT_EQ(bytes_named(p, "fsdp2_unsharded:layers.0"), 376320u);
  EXPECT_EQ(bytes_named(p, "/layers.0.self_attn.q_proj/lora/Cast_output_0"), 8192u);
  EXPECT_EQ(buffer_named(p, "/layers.0.self_attn.q_proj/lora/Cast_output_0:autocast"), -1);
  EXPECT_EQ(buffer_named(p, "layers.0.self_attn.q_proj.lora_A.weight:autocast"), -1);
  EXPECT_EQ(bytes_named(p, "/layers.0.self_attn.q_proj/lora_A/MatMul_output_0"), 512u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_scatter_input:layers.0"), 7168u);
  EXPECT_EQ(bytes_named(p, "fsdp2_reduce_output:layers.0"), 1792u);
  EXPECT_EQ(bytes_named(p, "fsdp2_grad_shard:layers.0"), 3584u);
}

// A bf16 parameter read by an fp32 op: GPT-2's LayerNorm (tests/models/gpt_tiny_train.onnx, hidden 128; layer_norm is
// on autocast's fp32 list), FSDP2, bf16:bf16 under amp-bf16, batch 2, seq 16. cached_cast casts the gathered bf16
// blocks.0.ln_1.weight [128] to float32 for the op, 128 x 4 = 512 B (a cast to float32 is never cached: the cache
// holds lower-precision casts of float32 weights only); its input, the bf16 sum of the two embeddings [2,16,128], is
// copied to float32 too, 16,384 B, and the op writes float32, 16,384 B. In backward the grad of the weight's float32
// copy is float32, 512 B (ToCopyBackward then makes the parameter's bf16 grad), not bf16.
TEST(FsdpAmp, HalfWeightReadByAFloat32OpIsCastUpAndSoIsItsGrad) {
  Bindings b;
  b.batch = 2;
  b.dims["seq"] = 16;
  const Graph g = import_model(std::string(MEMPLAN_ZOO_DIR) + "/gpt_tiny_train.onnx", b);
  const TrainingResult r = build_training_program(g, accelerate(Sharding::Fsdp2));
  const Program& p = r.program;
  EXPECT_EQ(bytes_named(p, "blocks.0.ln_1.weight:autocast"), 512u);
  EXPECT_EQ(bytes_named(p, "/Add_output_0:autocast"), 16384u);
  EXPECT_EQ(bytes_named(p, "/blocks.0/ln_1/LayerNormalization_output_0"), 16384u);
  EXPECT_EQ(bytes_named(p, "grad:blocks.0.ln_1.weight:autocast"), 512u);
}

}  // namespace
}  // namespace memplan
