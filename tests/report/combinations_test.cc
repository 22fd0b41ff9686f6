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

namespace memplan {
namespace {

// How this test turns each feature on, and the flags that doing so sets: a refusal's message must name one of
// each feature's flags. Written here, apart from the product's `active` predicates, which must agree with it.
struct Enable {
  std::vector<std::string> flags;
  void (*apply)(EstimateArgs&);
};

// --deepspeed's config: ZeRO-2 with overlap_comm and HF Trainer's "auto" bucket, in a file written once.
std::string deepspeed_config_file() {
  static const std::string path = [] {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "memplan_combinations_test";
    std::filesystem::create_directories(dir);
    const std::string file = (dir / "zero2.json").string();
    std::ofstream(file) << R"({"bf16": {"enabled": "auto"}, "gradient_accumulation_steps": "auto",
                               "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": "auto"}})";
    return file;
  }();
  return path;
}

// torchao's NF4Tensor quantizes a weight only in whole blocks of 64 x 256 values (to_nf4 asserts it), which the tiny
// Llama's k_proj (8,192 values) is not: a config.json Llama of the same shape whose linear weights are 16,384 (q, k,
// v, o: 128 x 128) and 32,768 (the MLP: 256 x 128), built in memory (--graph train), written once.
std::string torchao_llama_config_file() {
  static const std::string path = [] {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "memplan_combinations_test";
    std::filesystem::create_directories(dir);
    const std::string file = (dir / "config.json").string();
    std::ofstream(file) << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128,
                               "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256,
                               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
                               "torch_dtype": "float32", "hidden_act": "silu"})";
    return file;
  }();
  return path;
}

const std::map<std::string, Enable>& enables() {
  static const std::map<std::string, Enable> all = {
      {"train", {{"--mode"}, [](EstimateArgs& a) { a.mode = "train"; }}},
      {"onnxruntime", {{"--runtime"}, [](EstimateArgs& a) { a.runtime = "onnxruntime"; }}},
      {"ideal", {{"--runtime"}, [](EstimateArgs& a) { a.runtime = "ideal"; }}},
      {"expandable-segments", {{"--expandable-segments"}, [](EstimateArgs& a) { a.expandable_segments = true; }}},
      {"sdpa", {{"--attention"}, [](EstimateArgs& a) { a.attention = "sdpa"; }}},
      {"untied", {{"--tied-embeddings"}, [](EstimateArgs& a) { a.tied_embeddings = "no"; }}},
      {"tp", {{"--tp"}, [](EstimateArgs& a) { a.tp = 2; }}},
      {"sequence-parallel", {{"--sequence-parallel", "--tp"}, [](EstimateArgs& a) {
                               a.tp = 2;
                               a.sequence_parallel = true;
                             }}},
      {"half", {{"--dtype"}, [](EstimateArgs& a) { a.dtype = "fp16"; }}},
      {"schedule-memory", {{"--schedule"}, [](EstimateArgs& a) { a.schedule = "memory"; }}},
      {"half-precision", {{"--precision", "--mode"}, [](EstimateArgs& a) {
                            a.mode = "train";
                            a.precision = "bf16";
                          }}},
      {"amp", {{"--precision", "--mode"}, [](EstimateArgs& a) {
                 a.mode = "train";
                 a.precision = "amp-bf16";
               }}},
      {"outputs-fp32", {{"--outputs-to-fp32", "--precision", "--mode"}, [](EstimateArgs& a) {
                          a.mode = "train";
                          a.precision = "amp-bf16";
                          a.outputs_to_fp32 = true;
                        }}},
      // A precision or loss given by another feature is kept (and refused where the flag does not fit it, naming
      // --precision or --loss).
      {"outputs-default-dtype", {{"--outputs-to-default-dtype", "--precision", "--loss", "--mode"}, [](EstimateArgs& a) {
                                   a.mode = "train";
                                   if (a.precision == EstimateArgs{}.precision) a.precision = "bf16";
                                   if (a.loss == EstimateArgs{}.loss) a.loss = "chunked-ce-tokens:3";
                                   a.outputs_to_default_dtype = true;
                                 }}},
      {"half-params", {{"--param-dtype", "--precision", "--mode"}, [](EstimateArgs& a) {
                         a.mode = "train";
                         a.precision = "amp-bf16";
                         a.param_dtype = "bf16";
                       }}},
      {"checkpoint", {{"--checkpoint", "--mode"}, [](EstimateArgs& a) {
                        a.mode = "train";
                        a.checkpoint = "sqrt";
                      }}},
      {"selective", {{"--checkpoint", "--mode"}, [](EstimateArgs& a) {
                       a.mode = "train";
                       a.checkpoint = "selective";
                     }}},
      {"grad-accum", {{"--grad-accum", "--mode"}, [](EstimateArgs& a) {
                        a.mode = "train";
                        a.grad_accum = 2;
                      }}},
      {"ddp", {{"--shard", "--mode"}, [](EstimateArgs& a) {
                 a.mode = "train";
                 a.gpus = 2;
                 a.shard = "ddp";
               }}},
      {"zero12", {{"--shard", "--mode"}, [](EstimateArgs& a) {
                    a.mode = "train";
                    a.gpus = 2;
                    a.shard = "zero2";
                  }}},
      {"deepspeed", {{"--deepspeed", "--gpus", "--mode"}, [](EstimateArgs& a) {
                       a.mode = "train";
                       a.gpus = 2;
                       a.deepspeed = deepspeed_config_file();
                     }}},
      {"zero3", {{"--shard", "--mode"}, [](EstimateArgs& a) {
                   a.mode = "train";
                   a.gpus = 2;
                   a.shard = "zero3";
                 }}},
      {"fsdp", {{"--shard", "--mode"}, [](EstimateArgs& a) {
                  a.mode = "train";
                  a.gpus = 2;
                  a.shard = "fsdp";
                }}},
      {"fsdp2", {{"--shard", "--mode"}, [](EstimateArgs& a) {
                   a.mode = "train";
                   a.gpus = 2;
                   a.shard = "fsdp2";
                 }}},
      // On a pair with another --shard, that sharding stays: --fsdp2-mp without fsdp2 is then refused.
      {"fsdp2-mp", {{"--fsdp2-mp", "--shard", "--mode"}, [](EstimateArgs& a) {
                      a.mode = "train";
                      a.fsdp2_mp = "bf16:fp32";
                      if (a.shard == EstimateArgs{}.shard) {
                        a.gpus = 2;
                        a.shard = "fsdp2";
                      }
                    }}},
      // The same for --fsdp-cpu-offload: FSDP1 (and any other sharding) refuses it.
      {"fsdp-cpu-offload", {{"--fsdp-cpu-offload", "--shard", "--mode"}, [](EstimateArgs& a) {
                              a.mode = "train";
                              a.fsdp_cpu_offload = true;
                              if (a.shard == EstimateArgs{}.shard) {
                                a.gpus = 2;
                                a.shard = "fsdp2";
                              }
                            }}},
      {"pp", {{"--pp", "--mode"}, [](EstimateArgs& a) {
                a.mode = "train";
                a.pp = 2;
              }}},
      {"lora", {{"--lora-rank", "--mode"}, [](EstimateArgs& a) {
                  a.mode = "train";
                  a.lora_rank = 4;
                  a.lora_targets = "q_proj|v_proj";
                }}},
      {"frozen-nf4", {{"--frozen-dtype", "--mode"}, [](EstimateArgs& a) {
                        a.mode = "train";
                        a.frozen_dtype = "nf4";
                        if (a.lora_rank == 0) a.frozen = "mlp";
                      }}},
      {"torchao-nf4", {{"--nf4-impl", "--frozen-dtype", "--mode"}, [](EstimateArgs& a) {
                         a.mode = "train";
                         a.frozen_dtype = "nf4";
                         a.nf4_impl = "torchao";
                         if (a.lora_rank == 0) a.frozen = "mlp";
                         a.model.path = torchao_llama_config_file();
                         a.model.graph = "train";
                       }}},
      {"frozen-int8", {{"--frozen-dtype", "--mode"}, [](EstimateArgs& a) {
                         a.mode = "train";
                         a.frozen_dtype = "int8";
                         if (a.lora_rank == 0) a.frozen = "mlp";
                       }}},
      // GPTQ runs fp16/bf16 models, AWQ fp16 ones (report/option_checks.cc): a precision given by another feature
      // is kept (and refused where it does not fit, naming --precision). AWQ's groups of 32 divide the tiny Llama's
      // 352-input down_proj (WQLinear_GEMM asserts in_features % group_size == 0; 128 does not).
      {"frozen-gptq", {{"--frozen-dtype", "--precision", "--mode"}, [](EstimateArgs& a) {
                         a.mode = "train";
                         if (a.precision == EstimateArgs{}.precision) a.precision = "bf16";
                         a.frozen_dtype = "gptq-int4";
                         if (a.lora_rank == 0) a.frozen = "mlp";
                       }}},
      {"frozen-awq", {{"--frozen-dtype", "--precision", "--frozen-group-size", "--mode"}, [](EstimateArgs& a) {
                        a.mode = "train";
                        if (a.precision == EstimateArgs{}.precision) a.precision = "fp16";
                        a.frozen_dtype = "awq-int4";
                        a.frozen_group_size = 32;
                        if (a.lora_rank == 0) a.frozen = "mlp";
                      }}},
      {"frozen-half", {{"--frozen-dtype", "--mode"}, [](EstimateArgs& a) {
                         a.mode = "train";
                         a.frozen_dtype = "fp16";
                         if (a.lora_rank == 0) a.frozen = "mlp";
                       }}},
      {"trainable", {{"--trainable", "--frozen", "--mode"}, [](EstimateArgs& a) {
                       a.mode = "train";
                       a.frozen = "layers\\.0\\.";
                     }}},
      {"torch-1.13", {{"--torch", "--mode"}, [](EstimateArgs& a) {
                        a.mode = "train";
                        a.torch = "1.13";
                      }}},
      {"optimizer-in-backward", {{"--optimizer-in-backward", "--mode"}, [](EstimateArgs& a) {
                                   a.mode = "train";
                                   a.optimizer_in_backward = true;
                                 }}},
      {"bitsandbytes", {{"--optimizer", "--mode"}, [](EstimateArgs& a) {
                          a.mode = "train";
                          a.optimizer = "paged-adamw8bit";
                        }}},
      {"chunked-ce", {{"--loss", "--mode"}, [](EstimateArgs& a) {
                        a.mode = "train";
                        a.loss = "chunked-ce:4";
                      }}},
      {"chunked-ce-tokens", {{"--loss", "--mode"}, [](EstimateArgs& a) {
                               a.mode = "train";
                               a.loss = "chunked-ce-tokens:3";
                             }}},
      {"fused-linear-ce", {{"--loss", "--mode"}, [](EstimateArgs& a) {
                             a.mode = "train";
                             a.loss = "fused-linear-ce";
                           }}},
      {"upcast", {{"--upcast", "--mode"}, [](EstimateArgs& a) {
                    a.mode = "train";
                    a.upcast = "rmsnorm,softmax,loss";
                  }}},
      {"upcast-logits", {{"--upcast", "--mode"}, [](EstimateArgs& a) {
                           a.mode = "train";
                           a.upcast = "logits";
                         }}},
      {"kbit-prep", {{"--kbit-prep", "--frozen-dtype", "--lora-rank", "--mode"}, [](EstimateArgs& a) {
                       a.mode = "train";
                       a.frozen_dtype = "nf4";
                       a.kbit_prep = true;
                       if (a.lora_rank == 0) {
                         a.lora_rank = 4;
                         a.lora_targets = "q_proj|v_proj";
                       }
                     }}},
      {"offload-activations", {{"--offload-activations", "--checkpoint", "--mode"}, [](EstimateArgs& a) {
                                 a.mode = "train";
                                 a.offload_activations = true;
                                 if (a.checkpoint == EstimateArgs{}.checkpoint) a.checkpoint = "layers";
                               }}},
      {"lora-base-dtype", {{"--lora-dtype", "--lora-rank", "--mode"}, [](EstimateArgs& a) {
                             a.mode = "train";
                             a.lora_dtype = "base";
                             if (a.lora_rank == 0) {
                               a.lora_rank = 4;
                               a.lora_targets = "q_proj|v_proj";
                             }
                           }}},
  };
  return all;
}

EstimateArgs base() {
  EstimateArgs a;
  a.model.path = std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx";
  a.model.batch = 2;
  a.model.dims = {"seq=16"};
  a.top = 0;
  return a;
}

bool names_one_of(const std::string& message, const std::vector<std::string>& flags) {
  for (const std::string& f : flags)
    if (message.find(f) != std::string::npos) return true;
  return false;
}

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

// The pairs the matrix refuses, each checked by name and flag, so a refusal cannot vanish unnoticed.
TEST(Combinations, KnownRefusalsSayBothFlags) {
  struct Case {
    std::vector<std::string> features;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"pp", "fsdp"}, "--shard fsdp with --pp: not modelled"},
      {{"pp", "checkpoint"}, "--checkpoint with --pp: not modelled yet"},
      {{"pp", "grad-accum"}, "--grad-accum with --pp: the pipeline's --micro-batches are its gradient accumulation"},
      {{"tp", "lora"}, "--tp with --lora-rank: not modelled"},
      {{"onnxruntime", "checkpoint"}, "--mode train with --runtime onnxruntime"},
      {{"sdpa", "torch-1.13"}, "--attention sdpa with --torch 1.13"},
      {{"selective", "torch-1.13"}, "--checkpoint selective[:op|:N] with --torch 1.13: torchtitan's checkpointing needs PyTorch 2"},
      {{"fsdp", "frozen-int8"}, "--shard fsdp with --frozen-dtype int8: FSDP flattens"},
      // Frozen half weights under FSDP are modelled under a policy in their type (accelerate over a half checkpoint),
      // refused without one (report/option_checks.cc check_requirements).
      {{"fsdp", "frozen-half"}, "--shard fsdp with --frozen-dtype fp16: modelled under a mixed-precision policy in the "
                                "frozen weights' type"},
      {{"fsdp2", "frozen-half"}, "--shard fsdp2 with --frozen-dtype fp16: modelled under a mixed-precision policy in "
                                 "the frozen weights' type"},
      {{"schedule-memory", "checkpoint"}, "--schedule memory applies to --mode inference, not --mode train"},
      {{"bitsandbytes", "zero3"}, "--shard zero3 with --optimizer adamw8bit/paged-adamw/paged-adamw8bit: not modelled"},
      {{"tp", "chunked-ce"}, "--tp with --loss chunked-ce:N: not modelled: torchtune gathers each chunk"},
      {{"tp", "chunked-ce-tokens"}, "--tp with --loss chunked-ce-tokens:N: not modelled: litgpt's chunked loss"},
      {{"tp", "fused-linear-ce"}, "--tp with --loss fused-linear-ce: not modelled"},
      {{"outputs-default-dtype", "chunked-ce"}, "--outputs-to-default-dtype with --loss chunked-ce:4: not modelled"},
      {{"outputs-default-dtype", "fused-linear-ce"}, "--outputs-to-default-dtype with --loss fused-linear-ce: not modelled"},
      {{"pp", "fused-linear-ce"}, "--pp with --loss fused-linear-ce: not modelled"},
      {{"fsdp", "fused-linear-ce"}, "--shard fsdp with --loss fused-linear-ce: not modelled"},
      // Not a matrix pair (report/option_checks.cc): with --fsdp2-mp the pair is accelerate's run, modelled.
      {{"fsdp2", "amp"}, "--shard fsdp2 with --precision amp-bf16 and no --fsdp2-mp: not modelled: FSDP2's mixed "
                         "precision is its MixedPrecisionPolicy"},
      {{"fsdp2-mp", "half-precision"},
       "--precision fp16/bf16 with --fsdp2-mp bf16:fp32/bf16:bf16/fp16:fp32/fp16:fp16: --fsdp2-mp casts a float32"},
      {{"ddp", "fsdp2-mp"}, "--fsdp2-mp is fully_shard's MixedPrecisionPolicy (--shard fsdp2) or FSDP1's "
                            "MixedPrecision (--shard fsdp): it needs one of them"},
      {{"fsdp", "fsdp2-mp", "torch-1.13"}, "--fsdp2-mp with --torch 1.13: FSDP's MixedPrecision is modelled from "
                                           "PyTorch 2's"},
      {{"ddp", "fsdp-cpu-offload"}, "--fsdp-cpu-offload is fully_shard's CPUOffloadPolicy (FSDP2) or FSDP1's "
                                    "CPUOffload(offload_params=True): it needs --shard fsdp2 or fsdp"},
      // Three features: FSDP1's CPU offload is modelled (Combinations.Fsdp1CpuOffloadIsModelled), but not with
      // gradient accumulation (wrong in torch: FullyShardedDataParallel's docstring) nor torch 1.13 (not read).
      {{"fsdp", "fsdp-cpu-offload", "grad-accum"}, "--fsdp-cpu-offload with --shard fsdp and --grad-accum: FSDP1's CPU "
                                                  "offload does not accumulate gradients outside no_sync()"},
      {{"fsdp", "fsdp-cpu-offload", "torch-1.13"}, "--fsdp-cpu-offload with --shard fsdp and --torch 1.13: FSDP1's CPU "
                                                  "offload is modelled from PyTorch 2's"},
      {{"fsdp2", "frozen-nf4"}, "--shard fsdp2 with --frozen-dtype nf4 is torchtune's distributed QLoRA (torchao's "
                                "NF4Tensor under fully_shard, a qlora_* model): give --lora-rank R"},
      {{"fsdp2", "kbit-prep"}, "--shard fsdp2 with --kbit-prep: not modelled: NF4 under fully_shard is torchao's"},
      {{"fsdp2-mp", "frozen-nf4"}, "--fsdp2-mp bf16:fp32/bf16:bf16/fp16:fp32/fp16:fp16 with --frozen-dtype nf4: not "
                                   "modelled: NF4 weights under a mixed-precision policy"},
      {{"fsdp", "frozen-gptq"}, "--shard fsdp with --frozen-dtype gptq-int4: not modelled: GPTQ's packed"},
      {{"zero3", "frozen-awq"}, "--shard zero3 with --frozen-dtype awq-int4: not modelled: AWQ's packed"},
      {{"amp", "frozen-gptq"}, "--frozen-dtype gptq-int4 with --precision amp-bf16: gptqmodel's trainable"},
      {{"half-precision", "frozen-awq"}, "--frozen-dtype awq-int4 with --precision bf16: AutoAWQ's WQLinear_GEMM "
                                        "computes in float16"},
      {{"kbit-prep", "frozen-gptq"}, "--kbit-prep with --frozen-dtype gptq-int4: PEFT's prepare_model_for_kbit_training "
                                     "casts nothing"},
      {{"fsdp2", "torch-1.13"}, "--shard fsdp2 with --torch 1.13: fully_shard (FSDP2) is PyTorch 2's"},
      {{"torch-1.13", "fused-linear-ce"}, "--torch 1.13 with --loss fused-linear-ce: Liger Kernel needs PyTorch >= 2.1"},
      {{"torch-1.13", "offload-activations"},
       "--torch 1.13 with --offload-activations: torchtune's OffloadActivations needs PyTorch 2.6 or later"},
  };
  for (const Case& c : cases) {
    EstimateArgs a = base();
    for (const std::string& f : c.features) enables().at(f).apply(a);
    try {
      validate_estimate_args(a);
      ADD_FAILURE() << c.message << ": not refused";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.message << ": " << e.what();
    }
  }
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
