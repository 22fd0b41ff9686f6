// FSDP2 over tensor parallelism (--shard fsdp2 --tp N, torchtitan's 2-D parallelism): fully_shard chunks on dim 0
// the slice each tensor-parallel rank holds, not the whole parameter (torch/distributed/fsdp/_fully_shard/
// _fsdp_param.py at pytorch 010ae4a8: FSDPParam._init_sharding_spec_tp returns param._local_tensor, which
// _init_sharded_param then splits with _chunk_with_empty(param_data, shard_world_size, dim=0)). Every expected number
// is worked out by hand below.
#include <gtest/gtest.h>

#include <string>

#include "tests/cost_models/run_options.h"
#include "cost_models/cost_model.h"
#include "onnx_import/import.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_of;

// The tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]: hidden 128, kv 64, ffn 352, 4 layers, vocab 1000,
// untied head; nn.Linear weights [out, in]), fp32, --tp 2 (Megatron's split: q, k, v, gate, up and the head split on
// axis 0, o and down on axis 1, the embedding's rows; norms whole) and 3 data-parallel GPUs. Each FSDP2 rank keeps
// ceil(local dim 0 / 3) rows of the tensor-parallel slice:
//   q_proj  [128,128] -> [64,128]:  22 x 128 =  2,816     k_proj, v_proj [64,128] -> [32,128]: 11 x 128 = 1,408 each
//   o_proj  [128,128] -> [128,64]:  43 x  64 =  2,752     gate, up [352,128] -> [176,128]: 59 x 128 = 7,552 each
//   down    [128,352] -> [128,176]: 43 x 176 =  7,568     two norms [128]: 43 each
//   a layer: 2,816 + 2 x 1,408 + 2,752 + 2 x 7,552 + 7,568 + 2 x 43 = 31,142 elements = 124,568 B;
//   the root: embed_tokens and lm_head [1000,128] -> [500,128]: 167 x 128 = 21,376 each, norm 43: 42,795 = 171,180 B.
// Per GPU: 4 x 124,568 + 171,180 = 669,452 B of parameters, as many of grads, twice that of Adam's states; a layer
// all-gathered over the 3 ranks is 3 x 124,568 = 373,704 B (its tensor-parallel slice, padded).
// Chunking the whole parameter over the 6 GPUs instead would give q_proj ceil(128/6) = 22 rows of 128 too, but
// o_proj 22 x 128 = 2,816, down 22 x 352 = 7,744 and the norms 22: a layer 31,340 elements; FSDP2 alone over 3 GPUs,
// 62,070.
TEST(Fsdp2TensorParallel, EachRankShardsItsTensorParallelSlice) {
  Bindings b;
  b.batch = 2;
  b.dims["seq"] = 64;
  const Graph g = import_model(std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx", b);
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.gpus = 3;
  o.shard = Sharding::Fsdp2;
  o.tp = 2;
  const TrainingResult r = build_training_program(g, o);
  EXPECT_EQ(bytes_of(r.program, "fsdp2_sharded_params:layers.1"), 124568u);
  EXPECT_EQ(bytes_of(r.program, "fsdp2_sharded_params:root"), 171180u);
  EXPECT_EQ(bytes_of(r.program, "fsdp2_unsharded:layers.1"), 373704u);
  EXPECT_EQ(r.param_bytes, 669452u);
  EXPECT_EQ(r.grad_bytes, 669452u);
  EXPECT_EQ(r.optimizer_state_bytes, 2 * 669452u);
}

}  // namespace
}  // namespace memplan
