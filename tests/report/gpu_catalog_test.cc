#include "report/gpu_catalog.h"

#include <gtest/gtest.h>

#include <string>

#include "onnx_import/errors.h"
#include "report/estimate.h"

namespace memplan {
namespace {

std::string message_of(const std::string& json) {
  try {
    parse_gpu_catalog(json, "cat.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(GpuCatalog, EveryBuiltinGpuHasItsArchitectureAndSources) {
  const GpuCatalog c = builtin_gpu_catalog();
  ASSERT_GE(c.gpus.size(), 15u);
  for (const GpuSpec& g : c.gpus) {
    EXPECT_GT(g.cc_major, 0) << g.name;
    EXPECT_FALSE(g.memory_source.empty()) << g.name;
    EXPECT_FALSE(g.compute_capability_source.empty()) << g.name;
    EXPECT_TRUE(g.memory_kind == "cuda" || g.memory_kind == "nvidia-smi" || g.memory_kind == "rocm-smi") << g.name;
  }
  // Compute capabilities from NVIDIA's table (https://developer.nvidia.com/cuda-gpus).
  auto cc = [&](const char* name) { const GpuSpec& g = c.find(name); return g.cc_major * 10 + g.cc_minor; };
  EXPECT_EQ(cc("T4"), 75);
  EXPECT_EQ(cc("V100-32GB"), 70);
  EXPECT_EQ(cc("A10G"), 86);
  EXPECT_EQ(cc("L4"), 89);
  EXPECT_EQ(cc("A100-80GB"), 80);
  EXPECT_EQ(cc("H100-80GB"), 90);
  EXPECT_EQ(cc("B200"), 100);
  EXPECT_EQ(cc("RTX-5090"), 120);
}

TEST(GpuCatalog, PublishedCudaTotalsAreTakenByteForByte) {
  const GpuCatalog c = builtin_gpu_catalog();
  // deviceQuery's "(85045477376 bytes)" for an H100 80GB HBM3 (thamada/nvidia-smi), not nvidia-smi's 81559 MiB.
  EXPECT_EQ(c.find("H100-80GB").memory_bytes, 85045477376ull);
  EXPECT_EQ(c.find("H100-80GB").memory_kind, "cuda");
  EXPECT_EQ(c.find("A100-40GB").memory_bytes, 42298834944ull);  // bottlerocket-os/bottlerocket#3873
  EXPECT_EQ(c.find("RTX-5090").memory_bytes, 33677180928ull);   // aikitoria/open-gpu-kernel-modules#1
  // A 24 GB card is less than 24 GiB to CUDA: nvidia-smi's 23034 MiB for the L4 is an upper bound.
  EXPECT_LT(c.find("L4").memory_bytes, 24ull << 30);
}

TEST(GpuCatalog, ApplyingAGpuSetsTheArchitecture) {
  EstimateOptions o;
  ASSERT_EQ(o.execution.cuda_arch_major, 9);
  apply_gpu_architecture(builtin_gpu_catalog().find("T4"), o);
  EXPECT_EQ(o.execution.cuda_arch_major, 7);
}

TEST(GpuCatalog, MalformedCatalogsAreInputErrorsNamingTheGpu) {
  const std::string head = R"({"schema": "memplan.gpus/2", "context_reserve_mib": 1024, "gpus": [)";
  EXPECT_NE(message_of(R"({"schema": "memplan.gpus/1", "context_reserve_mib": 1, "gpus": []})").find("compute_capability"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"({"name": "X1", "memory_mib": 1024}]})").find("GPU X1 has no compute_capability"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"({"name": "X2", "memory_mib": 1024, "compute_capability": "8"}]})")
                .find("GPU X2 has compute_capability \"8\": expected MAJOR.MINOR"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"({"name": "X3", "memory_mib": 1024, "compute_capability": "a.b"}]})").find("X3"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"({"name": "X4", "memory_mib": 1024, "memory_bytes": 2000000, "compute_capability": "8.0"}]})")
                .find("X4: give exactly one of memory_mib and memory_bytes"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"({"name": "X5", "memory_mib": 1024, "compute_capability": 8.6}]})").find("not a GPU catalog"),
            std::string::npos);
  const GpuCatalog ok = parse_gpu_catalog(head + R"({"name": "X6", "memory_bytes": 2000000, "compute_capability": "12.1"}]})",
                                          "cat.json");
  EXPECT_EQ(ok.gpus[0].memory_bytes, 2000000u);
  EXPECT_EQ(ok.gpus[0].cc_major, 12);
  EXPECT_EQ(ok.gpus[0].cc_minor, 1);
}

}  // namespace
}  // namespace memplan
