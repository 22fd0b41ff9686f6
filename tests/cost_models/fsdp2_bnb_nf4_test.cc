// FSDP2 over bitsandbytes' Params4bit (--shard fsdp2 --frozen-dtype nf4 --nf4-impl bitsandbytes: QLoRA under
// accelerate's fully_shard, bnb_4bit_quant_storage the model's bf16), on the tiny graph of fsdp2_nf4_test.cc. Every
// expected number is worked out by hand below from bitsandbytes' quantize_4bit (functional.py: (n + 1) // (2 x the
// storage's element size) packed elements of quant_storage, one float32 absmax per 64 values) and fully_shard's
// _init_sharded_param (torch.chunk on dim 0, every rank padded to chunk 0), as docs/research/bnb-params4bit-fsdp2.md
// reads them; never read back from the code.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_of;
using testing::two_fc_blocks;

// x[4,256] -> MatMul(layers.0.fc.w [256,128]) -> Relu -> MatMul(layers.1.fc.w [128,256]) -> Relu
//   -> Gemm(head.w [2,256] transposed, head.b [2]) -> y[4,2]; units root {head.w, head.b}, layers.0, layers.1.
Graph bnb_blocks() { return two_fc_blocks(256, 128); }  // fsdp2_nf4_test.cc's graph

// The model in bf16 without a policy, adapters in bf16 (rank 2), Adam, bitsandbytes' NF4.
TrainingRun bnb_qlora(int gpus) { return fsdp2_qlora(gpus, /*torchao=*/false); }

// Each fc.w: n = 32,768 values. Params4bit in bf16 storage: (32,768 + 1) // 4 = 8,192 elements [8192, 1], 16,384 B;
// its QuantState's absmax 32,768 / 64 = 512 float32, 2,048 B (the packed uint8 form plus it: 16,384 + 2,048).
// 2 ranks: chunks of ceil(8,192 / 2) = 4,096 rows, 8,192 B a rank; all-gathered 2 x 8,192 = 16,384 B (the weight
// in bf16 would be 65,536). The adapters as in fsdp2_nf4_test.cc: 768 B a rank for each layer, 1,536 gathered.
// A layer unit: shard 8,192 + 768 = 8,960 B, gathered 16,384 + 1,536 = 17,920 B. Root: 514 B, gathered 1,028.
// The QuantState whole on each rank, 2,048 B per weight, beside the shards: re-stored frozen bytes a rank
// 2 x (8,192 + 2,048) = 20,480. Parameters 2 x 8,960 + 514 = 18,434 B; grads the adapters' shards 2 x 768 = 1,536;
// Adam 3,072. Each MatMul4Bit dequantizes its weight to bf16, 65,536 B: layers.1 in forward and for its input grad,
// layers.0 in forward only (x needs no grad).
TEST(Fsdp2BnbNf4, ShardGatherAndQuantStateByHand) {
  const TrainingResult r = build_training_program(bnb_blocks(), bnb_qlora(2));
  const Program& p = r.program;
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 8960u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.1"), 8960u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:root"), 514u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:layers.0"), 17920u);
  EXPECT_EQ(bytes_of(p, "fsdp2_unsharded:layers.1:backward"), 17920u);
  for (const char* w : {"layers.0.fc.w:quant_state", "layers.1.fc.w:quant_state"}) {
    const int32_t b = buffer_named(p, w);
    ASSERT_GE(b, 0) << w;
    EXPECT_EQ(p.buffers[b].bytes, 2048u) << w;
    EXPECT_TRUE(p.buffers[b].resident) << w;
  }
  EXPECT_EQ(r.frozen_stored_bytes, 20480u);
  EXPECT_EQ(r.param_bytes, 18434u);
  EXPECT_EQ(r.grad_bytes, 1536u);
  EXPECT_EQ(r.optimizer_state_bytes, 3072u);
  EXPECT_EQ(buffer_named(p, "grad:layers.0.fc.w:view"), -1);  // the packed base gets no grad
  int dequantized = 0;
  for (const Buffer& b : p.buffers)
    if (b.name == "layers.1.fc.w:dequantized" || b.name == "layers.0.fc.w:dequantized") {
      EXPECT_EQ(b.bytes, 65536u) << b.name;
      ++dequantized;
    }
  EXPECT_EQ(dequantized, 3);
}

// Under accelerate's FSDP2 policy (--precision fp32 --fsdp2-mp bf16:fp32: the graph's float32 model, param_dtype
// bf16; its adapters float32 like it, lora_float32 false as report/estimate_config.cc sets it): the Params4bit's quant_storage is param_dtype (bf16), which init_dtype_attrs
// clamps to None: no copy-in, gathered as stored, the same 8,192 B a rank and 16,384 gathered as without a policy.
// The adapters keep float32 shards, 384 elements a rank a layer: 1,536 B, gathered in bf16 (2 x 384 x 2 = 1,536)
// through a bf16 copy-in of 768 B. A layer unit: shard 8,192 + 1,536 = 9,728 B, gathered 16,384 + 1,536 = 17,920.
// The frozen head (not an fc) stays float32: 257 elements a rank, 1,028 B, gathered in bf16, 2 x 257 x 2 = 1,028.
// Parameters 2 x 9,728 + 1,028 = 20,484 B; grads the adapters' float32 shards 2 x 1,536 = 3,072; Adam 6,144;
// re-stored frozen 2 x (8,192 + 2,048) = 20,480 as without a policy.
TEST(Fsdp2BnbNf4, PolicyLeavesThePackedWeightsUncast) {
  TrainingRun o = bnb_qlora(2);
  o.fsdp2_mp = true;
  o.fsdp2_reduce_dtype = DType::Float32;
  const TrainingResult r = build_training_program(bnb_blocks(), o);
  const Program& p = r.program;
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 9728u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:root"), 1028u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:layers.0"), 17920u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:root"), 1028u);
  EXPECT_EQ(r.frozen_stored_bytes, 20480u);
  EXPECT_EQ(r.param_bytes, 20484u);
  EXPECT_EQ(r.grad_bytes, 3072u);
  EXPECT_EQ(r.optimizer_state_bytes, 6144u);
}

// 3 ranks pad each parameter to chunk 0: the packed weight ceil(8,192 / 3) = 2,731 rows, 5,462 B a rank, gathered
// 3 x 5,462 = 16,386 B. Adapters: layers.0 lora_A [2,256] 1 row x 256 x 2 = 512, lora_B [128,2] 43 rows x 2 x 2 =
// 172: 684 B, gathered 2,052; layers.1 lora_A [2,128] 256, lora_B [256,2] 86 rows x 4 = 344: 600 B, gathered 1,800.
// Units: layers.0 5,462 + 684 = 6,146 B, gathered 18,438; layers.1 5,462 + 600 = 6,062 B, gathered 18,186. The
// QuantState does not shrink: 2 x (5,462 + 2,048) = 15,020 B re-stored a rank.
TEST(Fsdp2BnbNf4, ThreeRanksPadEachParameterByHand) {
  const TrainingResult r = build_training_program(bnb_blocks(), bnb_qlora(3));
  const Program& p = r.program;
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.0"), 6146u);
  EXPECT_EQ(bytes_of(p, "fsdp2_sharded_params:layers.1"), 6062u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:layers.0"), 18438u);
  EXPECT_EQ(bytes_of(p, "fsdp2_all_gather_output:layers.1"), 18186u);
  EXPECT_EQ(r.frozen_stored_bytes, 15020u);
}

// Double quantization (compress_statistics): the absmax as 512 bytes, one float32 per 256 blocks (2) and the
// offset: 512 + 4 x (2 + 1) = 524 B of QuantState a weight; the packed shards unchanged.
TEST(Fsdp2BnbNf4, DoubleQuantShrinksOnlyTheQuantState) {
  TrainingRun o = bnb_qlora(2);
  o.double_quant = true;
  const TrainingResult r = build_training_program(bnb_blocks(), o);
  EXPECT_EQ(bytes_of(r.program, "layers.0.fc.w:quant_state"), 524u);
  EXPECT_EQ(bytes_of(r.program, "fsdp2_sharded_params:layers.0"), 8960u);
  EXPECT_EQ(r.frozen_stored_bytes, 2 * (8192u + 524u));
}

// CPUOffloadPolicy moves the parameters' data to the host: no shard stays on the GPU, but the QuantState, which is
// not a parameter, does (bitsandbytes' Params4bit.cuda put it there at load).
TEST(Fsdp2BnbNf4, QuantStateStaysOnTheGpuUnderCpuOffload) {
  TrainingRun o = bnb_qlora(2);
  o.fsdp_cpu_offload = true;
  const TrainingResult r = build_training_program(bnb_blocks(), o);
  EXPECT_EQ(buffer_named(r.program, "fsdp2_sharded_params:layers.0"), -1);
  const int32_t b = buffer_named(r.program, "layers.0.fc.w:quant_state");
  ASSERT_GE(b, 0);
  EXPECT_TRUE(r.program.buffers[b].resident);
  EXPECT_EQ(r.program.buffers[b].bytes, 2048u);
}

// Under --tp the packed weight would be a tensor-parallel DTensor of 4-bit pairs: refused naming the weight (the
// options refuse --tp with LoRA before this; a library caller reaches it).
TEST(Fsdp2BnbNf4, TensorParallelIsRefused) {
  TrainingRun o = bnb_qlora(4);
  o.tp = 2;
  o.lora_rank = 0;
  o.lora_targets.clear();
  o.trainable = "head";
  try {
    build_training_program(bnb_blocks(), o);
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'layers.0.fc.w' would be a tensor-parallel DTensor"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memplan
