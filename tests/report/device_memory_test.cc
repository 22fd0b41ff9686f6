// The device metric (report/device_memory.h): what nvidia-smi shows is the allocator's reserved peak plus the
// memory outside it, the CUDA context and NCCL's buffers. Expected numbers are derived by hand in the comments from
// NCCL's source (src/include/device.h, src/init.cc, src/transport/p2p.cc, src/include/comm.h) and the built-in
// catalog (report/gpu_catalog.json: context_reserve_mib 1024), never read back from the code under test.
#include <gtest/gtest.h>

#include "report/device_memory.h"
#include "report/estimate_config.h"
#include "report/fit.h"
#include "report/gpu_catalog.h"

namespace memplan {
namespace {

// Per ring channel: the receive allocation holds ncclRecvMem (4096 B) + LL (8 x 512 x 8 x 16 = 524,288) + LL128
// (120 x 640 x 8 x 8 = 4,915,200) + SIMPLE (4,194,304) = 9,637,888 B, rounded up to CUDA_IPC_MIN (2 MiB): 5 x 2 MiB
// = 10,485,760; the send allocation, ncclSendMem's 4096 B rounded up: 2,097,152. These are the two sizes NCCL's own
// ALLOC log prints per channel and peer on 8 x H100 (NVIDIA/nccl#1685). Total 12,582,912 B = 12 MiB.
constexpr uint64_t kPerChannel = 10485760ull + 2097152ull;
constexpr uint64_t kContext = 1024ull << 20;  // the built-in catalog's context_reserve_mib

EstimateArgs llama_train() {
  EstimateArgs a;
  a.model.path = std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx";
  a.model.batch = 2;
  a.model.dims = {"seq=64"};
  a.mode = "train";
  a.top = 0;
  return a;
}

TEST(DeviceMemory, NcclRingChannelIsTwelveMiB) { EXPECT_EQ(nccl_bytes_per_ring_channel(), kPerChannel); }

TEST(DeviceMemory, OneGpuIsReservedPlusTheCatalogsContext) {
  const ConfiguredEstimate c = estimate_model(llama_train());
  const Estimate& e = c.estimate;
  EXPECT_EQ(e.outside.context_bytes, kContext);
  EXPECT_EQ(e.outside.context_source, "catalog");
  EXPECT_EQ(e.outside.nccl.communicators, 0);
  EXPECT_EQ(e.outside.nccl.bytes, 0u);
  EXPECT_EQ(e.device_bytes, e.total_bytes + kContext);
}

TEST(DeviceMemory, DataAndTensorParallelGroupsEachHoldACommunicator) {
  EstimateArgs a = llama_train();
  a.gpus = 4;
  a.shard = "ddp";
  a.reserve = "500MiB";
  Estimate e = estimate_model(a).estimate;
  // One communicator (the data-parallel group) x 32 channels (the default) x 12 MiB = 384 MiB.
  EXPECT_EQ(e.outside.nccl.communicators, 1);
  EXPECT_EQ(e.outside.nccl.bytes, 32 * kPerChannel);
  EXPECT_EQ(e.outside.nccl.bytes, 384ull << 20);
  EXPECT_EQ(e.outside.context_source, "--reserve");
  EXPECT_EQ(e.device_bytes, e.total_bytes + (500ull << 20) + (384ull << 20));

  // With --tp 2 as well: the tensor-parallel group's communicator too; 8 channels: 2 x 8 x 12 MiB = 192 MiB.
  a.tp = 2;
  a.nccl_channels = 8;
  e = estimate_model(a).estimate;
  EXPECT_EQ(e.outside.nccl.communicators, 2);
  EXPECT_EQ(e.outside.nccl.bytes, 192ull << 20);
}

TEST(DeviceMemory, InferenceOnOneGpuHoldsNoNccl) {
  EstimateArgs a;
  a.model.path = std::string(MEMPLAN_ZOO_DIR) + "/resnet18.onnx";
  a.model.batch = 1;
  a.top = 0;
  const Estimate e = estimate_model(a).estimate;
  EXPECT_EQ(e.outside.nccl.bytes, 0u);
  EXPECT_EQ(e.device_bytes, e.total_bytes + kContext);
}

TEST(DeviceMemory, AGpusBudgetLeavesOutTheContextAndNcclOnce) {
  // --gpu A100-80GB: 81034 MiB (the catalog). With 4 data-parallel GPUs, the step runs on 81034 - 1024 - 384 MiB.
  EstimateArgs a = llama_train();
  a.gpu = "A100-80GB";
  a.gpus = 4;
  a.shard = "ddp";
  const Estimate e = estimate_model(a).estimate;
  ASSERT_TRUE(e.at_budget);
  EXPECT_EQ(e.at_budget->budget_bytes, (81034ull - 1024 - 384) << 20);

  // fit names the same budget, and says where it comes from.
  FitArgs f{a, FitSettings{}, ""};
  f.estimate.model.batch = -1;
  const FitOutcome out = fit_model(f);
  ASSERT_TRUE(out.answer);
  EXPECT_EQ(out.answer->budget_bytes, (81034ull - 1024 - 384) << 20);
  EXPECT_NE(out.answer->budget_source.find("384 MiB NCCL buffers"), std::string::npos) << out.answer->budget_source;
}

}  // namespace
}  // namespace memplan
