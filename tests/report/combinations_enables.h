// The combination tests' ways of turning each feature of the matrix (report/combination_matrix.h) on, shared by
// combinations_test.cc (every pair) and combinations_refusals_test.cc (the known refusals' messages).
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "report/estimate_config.h"
#include "report/option_checks.h"
#include "tests/cost_models/graph_builder.h"
#include "tests/cost_models/tiny_qwen3_moe.h"

namespace memplan::combinations {

// How this test turns each feature on, and the flags that doing so sets: a refusal's message must name one of
// each feature's flags. Written here, apart from the product's `active` predicates, which must agree with it.
struct Enable {
  std::vector<std::string> flags;
  void (*apply)(EstimateArgs&);
};

// --deepspeed's config: ZeRO-2 with overlap_comm and HF Trainer's "auto" bucket, in a file written once.
inline std::string deepspeed_config_file() {
  static const std::string path = [] {
    const std::filesystem::path dir = testing::process_temp_dir("memplan_combinations_test");
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
inline std::string torchao_llama_config_file() {
  static const std::string path = [] {
    const std::filesystem::path dir = testing::process_temp_dir("memplan_combinations_test");
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

// A tiny qwen3_moe config.json (tests/cost_models/tiny_qwen3_moe.h), whose grouped experts --quantize-experts
// quantizes, written once.
inline std::string moe_config_file() {
  static const std::string path = [] {
    const std::filesystem::path dir = testing::process_temp_dir("memplan_combinations_test");
    const std::string file = (dir / "qwen3_moe.json").string();
    std::ofstream(file) << testing::kTinyQwen3MoeConfig;
    return file;
  }();
  return path;
}

// The features that need a LoRA base (frozen weights, PEFT's adapters) turn on the "lora" feature's adapters when no
// other feature has.
inline void lora_unless_on(EstimateArgs& a) {
  if (a.lora_rank != 0) return;
  a.lora_rank = 4;
  a.lora_targets = "q_proj|v_proj";
}

inline const std::map<std::string, Enable>& enables() {
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
      {"reentrant", {{"--checkpoint-impl", "--checkpoint", "--mode"}, [](EstimateArgs& a) {
                       a.mode = "train";
                       if (a.checkpoint == EstimateArgs{}.checkpoint) a.checkpoint = "layers";  // or another's
                       a.checkpoint_impl = "reentrant";
                     }}},
      {"non-reentrant", {{"--checkpoint-impl", "--checkpoint", "--mode"}, [](EstimateArgs& a) {
                           a.mode = "train";
                           if (a.checkpoint == EstimateArgs{}.checkpoint) a.checkpoint = "layers";  // or another's
                           a.checkpoint_impl = "non-reentrant";
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
      {"chunked-ce-rows", {{"--loss", "--mode"}, [](EstimateArgs& a) {
                             a.mode = "train";
                             a.loss = "chunked-ce-rows:3";
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
      {"quantize-experts", {{"--quantize-experts", "--frozen-dtype", "--experts-implementation", "--mode"},
                            [](EstimateArgs& a) {
                              a.mode = "train";
                              a.frozen_dtype = "nf4";
                              a.quantize_experts = true;
                              lora_unless_on(a);
                              a.model.path = moe_config_file();
                              a.model.graph = "train";
                              a.model.experts = "grouped_mm";
                            }}},
      {"kbit-prep", {{"--kbit-prep", "--frozen-dtype", "--lora-rank", "--mode"}, [](EstimateArgs& a) {
                       a.mode = "train";
                       a.frozen_dtype = "nf4";
                       a.kbit_prep = true;
                       lora_unless_on(a);
                     }}},
      {"offload-activations", {{"--offload-activations", "--checkpoint", "--mode"}, [](EstimateArgs& a) {
                                 a.mode = "train";
                                 a.offload_activations = true;
                                 if (a.checkpoint == EstimateArgs{}.checkpoint) a.checkpoint = "layers";
                               }}},
      {"lora-base-dtype", {{"--lora-dtype", "--lora-rank", "--mode"}, [](EstimateArgs& a) {
                             a.mode = "train";
                             a.lora_dtype = "base";
                             lora_unless_on(a);
                           }}},
  };
  return all;
}

inline EstimateArgs base() {
  EstimateArgs a;
  a.model.path = std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx";
  a.model.batch = 2;
  a.model.dims = {"seq=16"};
  a.top = 0;
  return a;
}

inline bool names_one_of(const std::string& message, const std::vector<std::string>& flags) {
  for (const std::string& f : flags)
    if (message.find(f) != std::string::npos) return true;
  return false;
}

}  // namespace memplan::combinations
