// What the DeepSpeed ZeRO-3 tests share (deepspeed3_test.cc, deepspeed3_prefetch_test.cc, deepspeed3_offload_test.cc,
// deepspeed3_checkpoint_test.cc): the MLP they compute by hand, its ZeRO-3 configuration, and the coordinator's steps
// of a program.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/program.h"
#include "onnx_import/graph.h"
#include "tests/cost_models/run_options.h"

namespace memplan::testing {

// x[4,8] -> Gemm(l1.weight[16,8], l1.bias[16]) -> h -> Relu -> r -> Gemm(l2.weight[2,16], l2.bias[2]) -> y[4,2],
// float32: two modules, l1 (128 + 16 elements) and l2 (32 + 2). `scoped`: its nodes named as torch.onnx.export
// names them (/l1/Gemm, /act/Relu, /l2/Gemm: the module calls the prefetch reads); otherwise Gemm_0, Relu_1, Gemm_2.
Graph deepspeed3_mlp(bool scoped = false);

// The MLP's ZeRO-3: 3 GPUs, reduce bucket 40 elements, persistence threshold 2 (l2.bias alone persists), Adam,
// cross-entropy, max_reuse_distance 0 and no prefetch (stage3_prefetch_bucket_size 0); the tests change the rest.
TrainingRun deepspeed3_mlp_run();

// The coordinator's steps in program order: gathers, waits, prefetches and releases.
std::vector<std::string> coordinator_steps(const Program& p);

}  // namespace memplan::testing
