// Every pair of features (report/option_checks.h) on the tiny Llama's training graph: each pair is either
// refused by the combination matrix with one message naming both features' flags, or modelled, and then the
// estimate runs. A pair that a cost model refuses, or that crashes, fails here: the matrix must list it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx_import/errors.h"
#include "report/estimate_config.h"
#include "report/option_checks.h"
#include "tests/report/combinations_enables.h"

namespace memplan {
namespace {

using combinations::base;
using combinations::enables;
using combinations::names_one_of;

TEST(Combinations, EveryFeatureHasAnEnableThatTurnsItOn) {
  for (const Feature& f : features()) {
    ASSERT_TRUE(enables().count(f.name)) << f.name << ": add it to this test's enables()";
    EstimateArgs a = base();
    enables().at(f.name).apply(a);
    EXPECT_TRUE(f.active(a)) << f.name;
  }
  EXPECT_EQ(enables().size(), features().size());
}

TEST(Combinations, EveryPairIsModelledOrRefusedNamingBoth) {
  std::set<std::string> refusals_hit;
  int modelled = 0, refused = 0;
  const std::vector<Feature>& all = features();
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = i + 1; j < all.size(); ++j) {
      const Feature& f = all[i];
      const Feature& g = all[j];
      if (f.option == g.option) continue;  // two values of one option: not a combination
      // With LoRA on, the frozen-dtype features store the LoRA base; their enables read lora_rank, so the features
      // that turn LoRA on go first.
      EstimateArgs a = base();
      const bool g_first = g.name == "lora" || g.name == "kbit-prep" || g.name == "lora-base-dtype";
      enables().at(g_first ? g.name : f.name).apply(a);
      enables().at(g_first ? f.name : g.name).apply(a);
      const std::string pair = f.name + " x " + g.name;
      std::string refusal_message;
      try {
        validate_estimate_args(a);
      } catch (const InputError& e) {
        refusal_message = e.what();
      }
      if (!refusal_message.empty()) {
        ++refused;
        EXPECT_TRUE(names_one_of(refusal_message, enables().at(f.name).flags)) << pair << ": " << refusal_message;
        EXPECT_TRUE(names_one_of(refusal_message, enables().at(g.name).flags)) << pair << ": " << refusal_message;
        for (const Refusal& r : refused_pairs())
          if (refusal_message.find(r.reason) != std::string::npos) refusals_hit.insert(r.a + " x " + r.b);
        continue;
      }
      ++modelled;
      try {
        const ConfiguredEstimate c = estimate_model(a);
        EXPECT_GT(c.estimate.total_bytes, 0u) << pair;
      } catch (const std::exception& e) {
        ADD_FAILURE() << pair << " is modelled by the matrix but the estimate failed: " << e.what();
      }
    }
  }
  // Each refusal of the matrix is reached by some pair: none is dead.
  for (const Refusal& r : refused_pairs()) EXPECT_TRUE(refusals_hit.count(r.a + " x " + r.b)) << r.a << " x " << r.b;
  EXPECT_GT(modelled, 100);
  EXPECT_GT(refused, 10);
}

// --shard fsdp with --fsdp-cpu-offload (FSDP1's CPUOffload(offload_params=True)): modelled, the host line filled and
// nothing of the parameters, grads or states on the GPU; with --lora-rank too (use_orig_params=True).
TEST(Combinations, Fsdp1CpuOffloadIsModelled) {
  for (const bool lora : {false, true}) {
    EstimateArgs a = base();
    enables().at("fsdp").apply(a);
    enables().at("fsdp-cpu-offload").apply(a);
    if (lora) enables().at("lora").apply(a);
    EXPECT_EQ(a.shard, "fsdp");
    EXPECT_NO_THROW(validate_estimate_args(a)) << lora;
    const ConfiguredEstimate c = estimate_model(a);
    EXPECT_GT(c.estimate.fsdp_offload_host_bytes, 0u) << lora;
    EXPECT_EQ(c.estimate.param_bytes + c.estimate.grad_bytes + c.estimate.optimizer_state_bytes, 0u) << lora;
  }
}

// --frozen-dtype fp16 with --precision fp16 (bf16 with bf16) keeps every frozen weight as it is stored
// (cost_models/frozen_storage.cc): nothing is re-stored, so FSDP flattens one dtype and the pair is modelled.
TEST(Combinations, FrozenHalfInThePrecisionsOwnTypeIsModelledWithFsdp) {
  for (const char* type : {"fp16", "bf16"}) {
    EstimateArgs a = base();
    enables().at("fsdp").apply(a);
    a.precision = type;
    a.frozen_dtype = type;
    a.frozen = "mlp";
    EXPECT_NO_THROW(validate_estimate_args(a)) << type;
    const ConfiguredEstimate c = estimate_model(a);
    EXPECT_GT(c.estimate.total_bytes, 0u) << type;
    a.precision = std::string(type) == "fp16" ? "bf16" : "fp16";
    EXPECT_THROW(validate_estimate_args(a), InputError) << type;
  }
}

}  // namespace
}  // namespace memplan
