// FSDP2's MixedPrecisionPolicy (--fsdp2-mp PARAM:REDUCE over a float32 model): the shards, grad shards and optimizer
// states float32, the all-gather input copy, all-gather output and unsharded parameters in param_dtype, the grads
// autograd computes in param_dtype, the reduce-scatter input in reduce_dtype. Every expected number is worked out by
// hand in the comments from the rules in cost_models/training_fsdp2.cc (torch/distributed/fsdp/_fully_shard/
// _fsdp_param.py FSDPParam.init_dtype_attrs, _fsdp_collectives.py _get_param_all_gather_inputs, foreach_reduce).
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "planner/liveness.h"
#include "tests/cost_models/fsdp2_graphs.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::fsdp2_odd_rows;
using testing::step_named;
using testing::two_fc_blocks;
using testing::bytes_of;


// What report/estimate_config.cc makes of --fsdp2-mp PARAM:REDUCE: the precision is param_dtype.
TrainingRun mixed(int gpus, Precision param, DType reduce) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.gpus = gpus;
  o.shard = Sharding::Fsdp2;
  o.fsdp2_mp = true;
  o.precision = param;
  o.fsdp2_reduce_dtype = reduce;
  return o;
}

uint64_t live_at(const Program& p, const LiveBytes& live, const std::string& step, Category c) {
  const int32_t s = step_named(p, step);
  EXPECT_GE(s, 0) << step;
  return s < 0 ? 0 : live.per_step_by_category[s][static_cast<int>(c)];
}

// 4 GPUs, bf16:fp32 (torchtitan's). Each rank keeps ceil(dim0 / 4) rows of each parameter:
//  layers.0: fc.w 2 rows x 6 = 12 elements, fc.b 2: 14 elements; layers.1: fc.w 2 x 5 = 10; root: head.w 1 x 5,
//  head.b 1: 6. 30 elements per GPU.
//  Shards float32 (orig_dtype): 56 + 40 + 24 = 120 B; grad shards float32 (reduce output fp32 = orig_dtype: views
//  of it) 120 B; Adam's two float32 states 240 B. The same as without a policy: the policy changes none of them.
//  All-gather input copy (flat_foreach_copy_input, bf16): layers.0 14 x 2 = 28 B, root 6 x 2 = 12 B.
//  All-gather output and unsharded parameters (bf16, 4 x the padded shard): layers.0 14 x 4 x 2 = 112 B (fp32 224),
//  layers.1 10 x 4 x 2 = 80 B, root 6 x 4 x 2 = 48 B.
//  The grad autograd computes for layers.0.fc.w, bf16 as the unsharded parameter: 5 x 6 x 2 = 60 B.
//  Reduce-scatter input (reduce_dtype fp32, 4 x padded): layers.0 14 x 4 x 4 = 224 B, root 6 x 4 x 4 = 96 B; no
//  reduce output copy.
TEST(Fsdp2Mp, ShardsGradsStatesFloat32GatheredBf16ReducedFp32) {
  const TrainingResult r = build_training_program(fsdp2_odd_rows(), mixed(4, Precision::Bf16, DType::Float32));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 120u);
  EXPECT_EQ(r.grad_bytes, 120u);
  EXPECT_EQ(r.optimizer_state_bytes, 240u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 56u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:root"), 24u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_input:layers.0"), 28u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_input:root"), 12u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:layers.0"), 112u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.0"), 112u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.1:backward"), 80u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:root"), 48u);
  EXPECT_EQ(bytes_of(p, "grad:layers.0.fc.w:view"), 60u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:layers.0"), 224u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:root"), 96u);
  EXPECT_EQ(bytes_of(p, "fsdp2_grad_shard:layers.0"), 56u);
  EXPECT_EQ(buffer_named(p, "fsdp2_reduce_output:layers.0"), -1);
  // The activations are bf16: the first Linear's output h0/a0 [4,6] is 48 B (fp32: 96 B).
  EXPECT_EQ(bytes_of(p, "a0"), 48u);
  // Gathered weights alive at layers.0's all-gather: the root's output 48 (freed by this step) and its unsharded
  // parameters 48, layers.0's output 112 and its bf16 input copy 28: 236 B (fp32 without a policy: 416 B,
  // fsdp2_test.cc). At /Add_1: the root's 48, layers.0's output and unsharded 112 + 112 = 272 B (fp32 544).
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  EXPECT_EQ(live_at(p, live, "fsdp2_all_gather:layers.0", Category::Weight), 236u);
  EXPECT_EQ(live_at(p, live, "/Add_1", Category::Weight), 272u);
}

// bf16:bf16: reduce_dtype == param_dtype is clamped to None (init_dtype_attrs), the grads reduced in their bf16:
//  reduce-scatter input layers.0 14 x 4 x 2 = 112 B; the bf16 reduce output 14 x 2 = 28 B, copied to the float32
//  grad shard (56 B) and freed: a transient of the reduce-scatter. Shards, grads and states as above.
TEST(Fsdp2Mp, ReduceInBf16CopiesTheOutputToFloat32) {
  const TrainingResult r = build_training_program(fsdp2_odd_rows(), mixed(4, Precision::Bf16, DType::BFloat16));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 120u);
  EXPECT_EQ(r.grad_bytes, 120u);
  EXPECT_EQ(r.optimizer_state_bytes, 240u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:layers.0"), 112u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_output:layers.0"), 28u);
  EXPECT_EQ(bytes_of(p, "fsdp2_grad_shard:layers.0"), 56u);
  const int32_t output = buffer_named(p, "fsdp2_reduce_output:layers.0");
  ASSERT_GE(output, 0);
  EXPECT_EQ(compute_liveness(p)[output].last, step_named(p, "fsdp2_reduce_output_cast:layers.0"));
}

// The tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]: hidden 128, ffn 352, kv 64, 4 layers, vocab 1000,
// untied head), batch 2, seq 64, 4 GPUs, bf16:fp32. Every dim 0 divides by 4 (fsdp2_test.cc TinyLlamaAgainstFsdp1):
//  per layer 184,576 elements, a rank's quarter 46,144; the root (embed_tokens 128,000, norm 128, lm_head 128,000)
//  256,128, a quarter 64,032. Per GPU 4 x 46,144 + 64,032 = 248,608 elements.
//  Shards fp32: 248,608 x 4 = 994,432 B; grad shards fp32 994,432 B; Adam's states 2 x 994,432 = 1,988,864 B.
//  Gathered bf16: a layer 184,576 x 2 = 369,152 B, the root 256,128 x 2 = 512,256 B. At layers.1's copy-out: the
//  root's unsharded parameters, layers.1's all-gather output and its unsharded parameters: 512,256 + 2 x 369,152
//  = 1,250,560 B (fp32 without a policy: 2,501,120 B).
//  layers.0's reduce-scatter input, fp32: 184,576 x 4 = 738,304 B; its bf16 all-gather input copy 46,144 x 2 = 92,288 B.
//  The unsharded grad of layers.0's q_proj [128,128] in bf16: 32,768 B.
TEST(Fsdp2Mp, TinyLlamaByHand) {
  Bindings b;
  b.batch = 2;
  b.dims["seq"] = 64;
  const Graph g = import_model(std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx", b);
  const TrainingResult r = build_training_program(g, mixed(4, Precision::Bf16, DType::Float32));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 994432u);
  EXPECT_EQ(r.grad_bytes, 994432u);
  EXPECT_EQ(r.optimizer_state_bytes, 1988864u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:layers.0"), 738304u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_input:layers.0"), 92288u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:root"), 512256u);
  const LiveBytes live = compute_live_bytes(p, compute_liveness(p));
  EXPECT_EQ(live_at(p, live, "fsdp_pre_forward:layers.1", Category::Weight), 1250560u);
}

// LoRA (rank 2 on fc) over two 8x8 blocks (two_fc_blocks(8, 8)), 3 GPUs, bf16:fp32. The base is float32, so PEFT's
// upcast of half adapters does not apply (report/estimate_config.cc sets lora_float32 off under a policy): the
// adapters are float32 parameters like the others, cast to bf16 at the all-gather.
//  Shards (float32, ceil(dim0 / 3) rows): layers.N fc.w [8,8] 3 x 8 = 24, lora_A [2,8] 1 x 8 = 8, lora_B [8,2]
//  3 x 2 = 6: 38 elements = 152 B; root head.w [2,8] 8 and head.b [2] 1: 36 B. Parameters 2 x 152 + 36 = 340 B.
//  Grads for the adapters only, float32 shards: 2 x (8 + 6) x 4 = 112 B; Adam's states 224 B.
//  All-gather input copy (bf16) 38 x 2 = 76 B; all-gather output and unsharded parameters 3 x 38 x 2 = 228 B
//  (fp32 without a policy: 456 B, Fsdp2.FrozenParametersGetNoGrad).
//  Reduce-scatter input: the adapters' padded grads in reduce_dtype fp32, 3 x 14 x 4 = 168 B.
//  No float32 copy of an adapter's input (PEFT's lora/Cast): the adapter path runs in bf16.
TEST(Fsdp2Mp, LoraAdaptersAreCastWithTheOtherParameters) {
  TrainingRun o = mixed(3, Precision::Bf16, DType::Float32);
  o.lora_rank = 2;
  o.lora_targets = "fc";
  o.lora_float32 = false;
  const TrainingResult r = build_training_program(two_fc_blocks(8, 8), o);
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 340u);
  EXPECT_EQ(r.grad_bytes, 112u);
  EXPECT_EQ(r.optimizer_state_bytes, 224u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 152u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_input:layers.0"), 76u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.0"), 228u);
  EXPECT_EQ(bytes_of(p, "fsdp2_reduce_scatter_input:layers.0"), 168u);
  EXPECT_EQ(bytes_of(p, "fsdp2_grad_shard:layers.0"), 56u);
  for (const Buffer& b : p.buffers) EXPECT_EQ(b.name.find("lora/Cast"), std::string::npos) << b.name;
}

}  // namespace
}  // namespace memplan
