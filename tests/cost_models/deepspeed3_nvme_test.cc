// DeepSpeed ZeRO-3 with NVMe offload (ZeRO-Infinity), by hand from DeepSpeed edaa722: swap_tensor/
// partitioned_param_swapper.py (AsyncPartitionedParameterSwapper: _configure_aio, swappable_tensor, get_buffer,
// _io_aligned_numel), optimizer_utils.py (OptimizerSwapper.__init__, _swap_out_gradients,
// _adjust_for_misaligned_lengths), utils.py (MIN_AIO_BYTES 1 MiB, AIO_ALIGNED_BYTES 1024, SwapBufferManager);
// zero/stage3.py (_create_param_groups_fp16_flat_cpu_memory, _create_fp32_partitions, initialize_optimizer_states,
// _offload_grad_partition_at_boundary, partition_grads). cost_models/training_deepspeed3_nvme.cc.
#include <gtest/gtest.h>

#include "cost_models/cost_model.h"
#include "cost_models/deepspeed_zero3_nvme.h"
#include "onnx_import/errors.h"
#include "tests/cost_models/deepspeed3_fixture.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/run_options.h"

namespace memplan {
namespace {

using testing::buffer_named;
using testing::bytes_named;
using testing::last_reader;
using testing::peak_live_bytes;
using testing::resident_bytes;

// x[4,768] -> Gemm(l1.weight[1024,768], l1.bias[1024]) -> Relu -> Gemm(l2.weight[2,1024], l2.bias[2]) -> y[4,2],
// float32, over deepspeed3_mlp_run()'s 3 GPUs: partitions (ceil(numel / 3)) l1.weight 262,144 (1,048,576 B: exactly
// MIN_AIO_BYTES, so swappable), l1.bias 342 (1,368 B), l2.weight 683 (2,732 B), l2.bias 1 (4 B; persistent: threshold 2).
Graph big_mlp(bool scoped = false) {
  testing::GraphBuilder b;
  const int32_t x = b.input("x", {4, 768});
  const int32_t h = b.node1("Gemm", {x, b.weight("l1.weight", {1024, 768}), b.weight("l1.bias", {1024})}, "h", {4, 1024},
                            {{"transB", testing::int_attr(1)}});
  const int32_t r = b.node1("Relu", {h}, "r", {4, 1024});
  const int32_t y = b.node1("Gemm", {r, b.weight("l2.weight", {2, 1024}), b.weight("l2.bias", {2})}, "y", {4, 2},
                            {{"transB", testing::int_attr(1)}});
  b.output(y);
  Graph g = b.graph();
  if (scoped) {
    g.nodes[0].name = "/l1/Gemm";
    g.nodes[1].name = "/act/Relu";
    g.nodes[2].name = "/l2/Gemm";
  }
  return g;
}

// l1.weight frozen (a LoRA-like base), offload_param on `device`: nvme with 2 swap buffers of 262,144 elements.
TrainingRun frozen_run(DeepSpeedOffload device) {
  TrainingRun o = testing::deepspeed3_mlp_run();
  o.frozen = "l1\\.weight";
  o.deepspeed.offload_param = device;
  o.deepspeed.param_swap = {true, 2, 262144, 1000000000, false, false};
  return o;
}

std::string refusal(const Graph& g, const TrainingRun& o) {
  try {
    build_training_program(g, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(DeepSpeedZero3Nvme, SwapRules) {
  const DeepSpeedAio aio;  // block_size 1 MiB, intra_op_parallelism 1
  EXPECT_EQ(zero3_min_aio_bytes(aio), 1048576u);
  EXPECT_EQ(zero3_min_aio_bytes({4194304, 1, false}), 4194304u);  // max(MIN_AIO_BYTES, block_size)
  // numel_alignment = 1024 // element: 256 float32, 512 bf16; 1024 x 2 // 4 = 512 with intra_op_parallelism 2.
  EXPECT_EQ(zero3_io_aligned_numel(263170, 4, aio), 263424u);  // 1029 x 256
  EXPECT_EQ(zero3_io_aligned_numel(100000000, 2, aio), 100000256u);  // 195,313 x 512
  EXPECT_EQ(zero3_io_aligned_numel(262400, 4, {1048576, 2, false}), 262656u);  // 513 x 512
  // A float32 gradient piece: under 1 MiB (262,143 x 4) kept whole; 262,144 aligned and swapped whole; 262,145: the
  // aligned 262,144 swapped, the remainder view (1 element) kept, and with it the whole GPU tensor.
  EXPECT_EQ(zero3_grad_swapped_elements(262143, aio), 0u);
  EXPECT_EQ(zero3_grad_swapped_elements(262144, aio), 262144u);
  EXPECT_EQ(zero3_grad_swapped_elements(262145, aio), 262144u);
  // 262,400 with a 512-element alignment: the aligned part 262,144 (512 x 512) is still 1 MiB: swapped.
  EXPECT_EQ(zero3_grad_swapped_elements(262400, {1048576, 2, false}), 262144u);
}

// offload_param nvme with l1.weight frozen. Host (_create_param_groups_fp16_flat_cpu_memory, one pinned flat buffer
// of the trainable partitions, 342 + 683 + 1 = 1,026 elements: 4,104 B; l1.weight is swappable, so no frozen
// partition stays in host memory; the swap buffers 2 x aligned(262,144) = 2 x 262,144 x 4 = 2,097,152 B): 2,101,256.
// NVMe: l1.weight's swap file, aligned(262,144) x 4 = 1,048,576 B. Under offload_param cpu every partition is host
// memory: (262,144 + 1,026) x 4 = 1,052,680, no NVMe. The GPU is offload_param cpu's: each gather copies the
// partitions it sends, l1's (262,144 + 342) x 4 = 1,049,944 B (_all_gather_dtype's `.to(device)` copies), the same
// buffers, the same peak.
TEST(DeepSpeedZero3Nvme, ParamOffloadKeepsTheFrozenWeightOnNvme) {
  const TrainingResult nvme = build_training_program(big_mlp(), frozen_run(DeepSpeedOffload::Nvme));
  const TrainingResult cpu = build_training_program(big_mlp(), frozen_run(DeepSpeedOffload::Cpu));
  EXPECT_EQ(nvme.deepspeed_param_host_bytes, 2101256u);
  EXPECT_EQ(nvme.deepspeed_nvme_bytes, 1048576u);
  EXPECT_EQ(cpu.deepspeed_param_host_bytes, 1052680u);
  EXPECT_EQ(cpu.deepspeed_nvme_bytes, 0u);
  EXPECT_EQ(bytes_named(nvme.program, "deepspeed:ds_tensor_to_gpu:fetch:l1"), 1049944u);
  EXPECT_EQ(bytes_named(nvme.program, "deepspeed:ds_tensor_to_gpu:fetch_backward:l1"), 1049944u);
  ASSERT_EQ(nvme.program.buffers.size(), cpu.program.buffers.size());
  for (size_t b = 0; b < cpu.program.buffers.size(); ++b)
    EXPECT_EQ(nvme.program.buffers[b].bytes, cpu.program.buffers[b].bytes) << cpu.program.buffers[b].name;
  EXPECT_EQ(resident_bytes(nvme.program), resident_bytes(cpu.program));
  EXPECT_EQ(peak_live_bytes(nvme.program).bytes, peak_live_bytes(cpu.program).bytes);
}

// What offload_param nvme cannot take, each one message: a partition over buffer_size (get_buffer asserts), more
// trainable elements than max_in_cpu (sub-groups left on NVMe), prefetch with a partition on NVMe. One swap buffer is
// enough here even when max_reuse_distance 1e9 keeps l1.weight gathered, its buffer held, from the forward on: l1's
// backward fetch finds it whole and swaps nothing in.
TEST(DeepSpeedZero3Nvme, ParamOffloadRefusals) {
  TrainingRun small = frozen_run(DeepSpeedOffload::Nvme);
  small.deepspeed.param_swap.buffer_size = 262143;
  EXPECT_NE(refusal(big_mlp(), small).find("does not fit zero_optimization.offload_param.buffer_size 262143"),
            std::string::npos);
  TrainingRun in_cpu = frozen_run(DeepSpeedOffload::Nvme);
  in_cpu.deepspeed.param_swap.max_in_cpu = 1025;  // 1,026 trainable partition elements
  EXPECT_NE(refusal(big_mlp(), in_cpu).find("max_in_cpu 1025 is below the 1026 trainable"), std::string::npos);
  TrainingRun prefetch = frozen_run(DeepSpeedOffload::Nvme);
  prefetch.deepspeed.prefetch_bucket_size = 1000;
  EXPECT_NE(refusal(big_mlp(true), prefetch).find("1 frozen parameter partition(s) stay on NVMe"), std::string::npos);
  TrainingRun one = frozen_run(DeepSpeedOffload::Nvme);
  one.deepspeed.param_swap.buffer_count = 1;
  one.deepspeed.max_reuse_distance = 1000000000;
  EXPECT_EQ(refusal(big_mlp(), one), "");
}

// Two frozen swappable weights in one module (l1.a [768,1024], l1.b [1024,768]: partitions of 262,144 elements,
// 1 MiB each, on NVMe) and a small trainable head: l1's gather swaps both in at once, two buffers
// (_ensure_availability_of_partitioned_params -> swap_in); with buffer_count 1 DeepSpeed asserts 'Not enough swap in
// buffers', and so does memplan; 2 is enough (l1's outputs need no grad: it is not fetched in backward).
TEST(DeepSpeedZero3Nvme, AGatherNeedsASwapBufferPerPartitionOnNvme) {
  testing::GraphBuilder b;
  const int32_t x = b.input("x", {4, 768});
  const int32_t h = b.node1("MatMul", {x, b.weight("l1.a", {768, 1024})}, "h", {4, 1024});
  const int32_t g = b.node1("MatMul", {h, b.weight("l1.b", {1024, 768})}, "g", {4, 768});
  const int32_t y = b.node1("Gemm", {g, b.weight("l2.weight", {2, 768}), b.weight("l2.bias", {2})}, "y", {4, 2},
                            {{"transB", testing::int_attr(1)}});
  b.output(y);
  TrainingRun o = frozen_run(DeepSpeedOffload::Nvme);
  o.frozen = "l1\\.";
  o.deepspeed.param_swap.buffer_count = 1;
  EXPECT_NE(refusal(b.graph(), o).find("a gather of 2 partition(s) on NVMe while 0 hold swap buffers needs more than "
                                       "zero_optimization.offload_param.buffer_count 1"),
            std::string::npos);
  o.deepspeed.param_swap.buffer_count = 2;
  const TrainingResult r = build_training_program(b.graph(), o);
  // NVMe: both files, 2 x 1,048,576; host: the trainable partitions (l2.weight 512, l2.bias 1: 2,052 B) and the two
  // swap buffers (2 x 1,048,576): 2,099,204.
  EXPECT_EQ(r.deepspeed_nvme_bytes, 2097152u);
  EXPECT_EQ(r.deepspeed_param_host_bytes, 2099204u);
}

// offload_optimizer nvme, everything trainable, one sub-group of 263,170 float32 elements (1,052,680 B >= 1 MiB:
// it swaps). Host: the gradient partitions (float32 grads) 1,052,680 + SwapBufferManager's 4 buffers of
// aligned(263,170) = 263,424 elements, 4 x 263,424 x 4 = 4,214,784: 5,267,464 (initialize_optimizer_states'
// gradient_buffer is dropped before the first step; offload_optimizer cpu: the float32 copy, its grad and Adam's two states,
// 4 x 1,052,680, + the gradient partitions 1,052,680 = 5,263,400). NVMe: the float32 copy and the 2 states aligned,
// 3 x 263,424 x 4 = 3,161,088, + l1.weight's gradient 262,144 x 4 = 1,048,576 (the others are under 1 MiB):
// 4,209,664.
// The GPU: each parameter's float32 gradient (the grads are float32, so `.to(float32)` is partition_grads' GPU copy,
// partition_grads_to_gpu:<name>) is kept in offload_fp32_gradients; l1.weight's (1,048,576 B, aligned and
// swappable) dies with the bucket's swap_out_gradients, l1.bias's (1,368), l2.weight's (2,732) and l2.bias's (4) stay
// in unswapped_gradients to the sub-group's step (swap_in_gradients:0). Under cpu each dies with its own float32 copy
// to the host (offload_fp32_grad, a no-op cast read last).
TEST(DeepSpeedZero3Nvme, OptimizerOffloadKeepsTheFloat32GradientsForTheSwap) {
  TrainingRun o = testing::deepspeed3_mlp_run();
  o.deepspeed.offload_optimizer = DeepSpeedOffload::Nvme;
  o.deepspeed.optimizer_swap = {true, 4, 100000000, 1000000000, false, false};
  const TrainingResult r = build_training_program(big_mlp(), o);
  const Program& p = r.program;
  EXPECT_EQ(r.deepspeed_host_bytes, 5267464u);
  EXPECT_EQ(r.deepspeed_nvme_bytes, 4209664u);
  const struct {
    const char* name;
    uint64_t bytes;
    const char* last;
  } kept[] = {{"deepspeed:partition_grads_to_gpu:l1.weight", 1048576, "deepspeed:swap_out_gradients"},
              {"deepspeed:partition_grads_to_gpu:l1.bias", 1368, "deepspeed:swap_in_gradients:0"},
              {"deepspeed:partition_grads_to_gpu:l2.weight", 2732, "deepspeed:swap_in_gradients:0"},
              {"deepspeed:partition_grads_to_gpu:l2.bias", 4, "deepspeed:swap_in_gradients:0"}};
  for (const auto& k : kept) {
    EXPECT_EQ(bytes_named(p, k.name), k.bytes) << k.name;
    const int32_t reader = last_reader(p, buffer_named(p, k.name));
    ASSERT_GE(reader, 0) << k.name;
    EXPECT_EQ(p.steps[reader].name, k.last) << k.name;
  }
  TrainingRun c = o;
  c.deepspeed.offload_optimizer = DeepSpeedOffload::Cpu;
  const TrainingResult cpu = build_training_program(big_mlp(), c);
  EXPECT_EQ(cpu.deepspeed_host_bytes, 5263400u);
  EXPECT_EQ(cpu.deepspeed_nvme_bytes, 0u);
  const int32_t bias = buffer_named(cpu.program, "deepspeed:partition_grads_to_gpu:l1.bias");
  EXPECT_EQ(cpu.program.steps[last_reader(cpu.program, bias)].name, "deepspeed:offload_fp32_grad:l1.bias");
  // Adam's step takes the float32 copy, two states and the gradient at once: buffer_count 3 is one short.
  o.deepspeed.optimizer_swap.buffer_count = 3;
  EXPECT_NE(refusal(big_mlp(), o).find("offload_optimizer.buffer_count 3 is below the 4 buffers"), std::string::npos);
}

}  // namespace
}  // namespace memplan
