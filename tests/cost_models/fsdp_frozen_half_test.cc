// accelerate's FSDP over a half checkpoint (the HF Trainer's bf16=True with a PEFT model): the parameters that require
// grad are upcast to float32 and the frozen ones keep the checkpoint's bf16 (FSDP1: Accelerator.prepare_model upcasts
// each flat parameter whose requires_grad is set; FSDP2: utils/fsdp_utils.py fsdp2_prepare_model each parameter that
// requires grad; huggingface/accelerate v1.14.0), all under a policy of param_dtype bf16. --frozen-dtype bf16 with
// --fsdp2-mp bf16:bf16, as report/estimate_config.cc makes it. Every expected number is worked out by hand below from
// the FSDP rules of cost_models/training_fsdp.cc and training_fsdp2.cc (torch/distributed/fsdp/_flat_param.py
// FlatParamHandle._uses_param_mixed_precision: no _mp_shard where param_dtype is the flat parameter's own type;
// _fully_shard/_fsdp_param.py FSDPParam.init_dtype_attrs: param_dtype equal to orig_dtype clamped to None, so the
// parameter takes no all-gather input copy), never read back from the code.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "tests/cost_models/fsdp2_graphs.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;

// layers.0 frozen, 4 GPUs, Adam, a bf16:bf16 policy; `frozen` the frozen weights' storage.
TrainingRun accelerate_half(Sharding shard, FrozenStorage frozen) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.gpus = 4;
  o.shard = shard;
  o.fsdp2_mp = true;
  o.precision = Precision::Bf16;  // --precision fp32 --fsdp2-mp bf16:bf16: the step computes in param_dtype
  o.fsdp2_reduce_dtype = DType::BFloat16;
  o.frozen = "layers\\.0\\.";
  o.frozen_storage = frozen;
  return o;
}

// FSDP1 on x[4,8] -> layers.0.fc.w [8,6] -> Relu -> layers.1.fc.w [6,8] -> Relu -> head (w [2,8], b [2]); units
// layers.0 (frozen), layers.1 and the root. Frozen parameters exist, so use_orig_params=True: each parameter starts
// at a multiple of 16 B, 8 bf16 elements. layers.0: 48 elements, 12 a rank; layers.1 the same; the root head.w 16,
// head.b at 16 to 18, padded to 20, 5 a rank.
//  Frozen bf16: layers.0's flat parameter is bf16 (nothing in it requires grad, so accelerate leaves it), its shard
//  12 x 2 = 24 B, and param_dtype bf16 is its own type: no _mp_shard; gathered 48 x 2 = 96 B as before.
//  layers.1 and the root train: float32 shards 12 x 4 = 48 B and 5 x 4 = 20 B, each with its bf16 _mp_shard
//  (12 x 2 = 24 B, 5 x 2 = 10 B). Parameters 24 + 48 + 20 = 92 B; grads (the trained units') 48 + 20 = 68 B; Adam's
//  two states over the busiest rank's trained elements (layers.1 12, the root 5: rank 3 holds 1 + 2) 2 x (48 + 20)
//  = 136 B.
//  Float32 frozen (the same run without --frozen-dtype, memplan's answer before accelerate's rule): layers.0's shard
//  48 B and its _mp_shard 24 B; parameters 116 B.
TEST(FsdpFrozenHalf, Fsdp1FrozenUnitKeepsItsBf16FlatParameter) {
  const TrainingResult r = build_training_program(testing::two_fc_blocks(8, 6), accelerate_half(Sharding::Fsdp, FrozenStorage::Bf16));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 92u);
  EXPECT_EQ(r.grad_bytes, 68u);
  EXPECT_EQ(r.optimizer_state_bytes, 136u);
  EXPECT_EQ(bytes_named(p, "fsdp_flat_param_shard:layers.0"), 24u);
  EXPECT_EQ(buffer_named(p, "fsdp_mp_shard:layers.0"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp_unsharded:layers.0"), 96u);
  EXPECT_EQ(bytes_named(p, "fsdp_flat_param_shard:layers.1"), 48u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:layers.1"), 24u);
  EXPECT_EQ(bytes_named(p, "fsdp_flat_param_shard:root"), 20u);
  EXPECT_EQ(bytes_named(p, "fsdp_mp_shard:root"), 10u);

  const TrainingResult f = build_training_program(testing::two_fc_blocks(8, 6), accelerate_half(Sharding::Fsdp, FrozenStorage::Same));
  EXPECT_EQ(f.param_bytes, 116u);
  EXPECT_EQ(bytes_named(f.program, "fsdp_flat_param_shard:layers.0"), 48u);
  EXPECT_EQ(bytes_named(f.program, "fsdp_mp_shard:layers.0"), 24u);
}

// A unit that trains and holds a frozen parameter (head.b frozen beside head.w in the root): accelerate upcasts the
// root's whole flat parameter, its requires_grad being the OR of its parameters', so it stays float32: 5 x 4 = 20 B,
// with its 10 B _mp_shard; layers.0, frozen whole, keeps its 24 B of bf16.
TEST(FsdpFrozenHalf, Fsdp1UnitThatTrainsIsUpcastWhole) {
  TrainingRun o = accelerate_half(Sharding::Fsdp, FrozenStorage::Bf16);
  o.frozen = "layers\\.0\\.|head\\.b";
  const TrainingResult r = build_training_program(testing::two_fc_blocks(8, 6), o);
  EXPECT_EQ(bytes_named(r.program, "fsdp_flat_param_shard:root"), 20u);
  EXPECT_EQ(bytes_named(r.program, "fsdp_mp_shard:root"), 10u);
  EXPECT_EQ(bytes_named(r.program, "fsdp_flat_param_shard:layers.0"), 24u);
}

// FSDP2 on fsdp2_odd_rows (x[4,5] -> layers.0 fc.w [5,6] + fc.b [6] -> Relu -> layers.1.fc.w [6,5] -> Relu -> head
// w [2,5], b [2]), 4 GPUs, each rank ceil(dim0 / 4) rows of each parameter: layers.0 fc.w 2 x 6 = 12, fc.b 2: 14
// elements; layers.1 2 x 5 = 10; the root 1 x 5 + 1 = 6.
//  layers.0 frozen bf16: shards 14 x 2 = 28 B (float32: 56 B); param_dtype is their own type, so no all-gather input
//  copy (bf16:bf16 over float32 frozen shards: 14 x 2 = 28 B); gathered 14 x 4 x 2 = 112 B as before.
//  layers.1 and the root train, float32: 10 x 4 = 40 B and 6 x 4 = 24 B, each with its bf16 input copy (20 B, 12 B).
//  Parameters 28 + 40 + 24 = 92 B; grad shards 40 + 24 = 64 B; Adam 2 x 64 = 128 B.
TEST(FsdpFrozenHalf, Fsdp2FrozenParametersStayBf16) {
  const TrainingResult r = build_training_program(testing::fsdp2_odd_rows(), accelerate_half(Sharding::Fsdp2, FrozenStorage::Bf16));
  const Program& p = r.program;
  EXPECT_EQ(r.param_bytes, 92u);
  EXPECT_EQ(r.grad_bytes, 64u);
  EXPECT_EQ(r.optimizer_state_bytes, 128u);
  EXPECT_EQ(bytes_named(p, "fsdp2_sharded_params:layers.0"), 28u);
  EXPECT_EQ(buffer_named(p, "fsdp2_all_gather_input:layers.0"), -1);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_output:layers.0"), 112u);
  EXPECT_EQ(bytes_named(p, "fsdp2_sharded_params:layers.1"), 40u);
  EXPECT_EQ(bytes_named(p, "fsdp2_all_gather_input:layers.1"), 20u);
  EXPECT_EQ(bytes_named(p, "fsdp2_sharded_params:root"), 24u);

  const TrainingResult f = build_training_program(testing::fsdp2_odd_rows(), accelerate_half(Sharding::Fsdp2, FrozenStorage::Same));
  EXPECT_EQ(f.param_bytes, 120u);
  EXPECT_EQ(bytes_named(f.program, "fsdp2_sharded_params:layers.0"), 56u);
  EXPECT_EQ(bytes_named(f.program, "fsdp2_all_gather_input:layers.0"), 28u);
}

}  // namespace
}  // namespace memplan
