// An estimate's configuration as people write it: the model's dimension bindings and every option as names
// ("train", "amp-bf16", "every:2", "seq=512"), turned into Bindings and EstimateOptions with one message per
// malformed value. The CLI's flags fill these structs; the planned Python binding fills the same ones, so both
// accept the same names, defaults and errors. No CLI11 here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "onnx_import/graph.h"
#include "onnx_import/import.h"
#include "report/estimate.h"

namespace memplan {

// The model and its dimension bindings: MODEL, --dim, --batch, --input.
struct ModelArgs {
  std::string path;
  std::vector<std::string> dims;    // NAME=VALUE
  int64_t batch = -1;               // -1: not given
  std::vector<std::string> inputs;  // NAME=2x512
  std::vector<std::string> values;  // NAME=V or NAME=V1,V2,... (--value)
  std::string graph;                // --graph train|decode|prefill: which graph of a config.json ("": an ONNX file)
  std::string moe_routing;          // --moe-routing balanced|worst: a mixture of experts' routing ("": balanced)
  std::string experts;              // --experts-implementation eager|grouped_mm ("": eager)
  int ep = 1;                       // --ep N: expert-parallel GPUs (onnx_import/hf_moe_grouped.h)
};

// Turns the parsed strings into Bindings; throws InputError with the flag named on malformed values.
Bindings to_bindings(const ModelArgs& args);

// Every estimate option by its flag's name (--grad-accum is grad_accum), with the flags' defaults: the one place
// each default is written. The rows of report/options.h say which flag sets which field.
struct EstimateArgs {
  ModelArgs model;
  std::string mode = "inference";
  std::string runtime = runtime_name(kDefaultRuntime);
  std::string dtype = "fp32";
  std::string schedule = "model";
  std::string arch;                 // --arch smXY; "": the --gpu's compute capability, else sm90
  std::string gpu;                  // --gpu NAME: a catalog GPU; sets the architecture (fit and check: the budget too)
  std::string catalog;              // --catalog FILE replacing the built-in GPU catalog ("": built-in)
  std::string reserve;              // --reserve SIZE: the CUDA context's memory per GPU ("": the catalog's)
  int nccl_channels = kDefaultNcclChannels;  // --nccl-channels (report/device_memory.h)
  std::string attention = "eager";
  std::string tied_embeddings = "auto";  // --tied-embeddings auto | shape | no
  bool expandable_segments = false; // --expandable-segments
  std::string cudnn_benchmark = "on";  // --cudnn-benchmark on|off (EstimateOptions::cudnn_benchmark)
  // Training.
  std::string optimizer = "adamw";
  std::string precision = "fp32";
  bool precision_auto = false;      // precision was --precision auto, settled to the stored type (report/option_checks.h)
  // --param-dtype fp32|bf16|fp16|auto, under --precision amp-*: the parameters' stored type (TrainingOptions::
  // amp_param_dtype); auto is settled to the stored type as --precision auto is (param_dtype_auto then says so).
  std::string param_dtype = "fp32";
  bool param_dtype_auto = false;
  std::string checkpoint = "none";
  std::string budget;               // --budget for --checkpoint auto
  int grad_accum = 1;
  std::string loss = "cross-entropy";
  int gpus = 1;
  std::string shard = "none";
  int tp = 1;                       // --tp N: tensor-parallel GPUs per replica (cost_models/tensor_parallel.h)
  bool sequence_parallel = false;   // --sequence-parallel (with --tp)
  int pp = 1;                       // --pp N: pipeline stages (1F1B)
  int micro_batches = 0;            // --micro-batches M (0: N)
  std::string fsdp_wrap;            // --fsdp-wrap REGEX (--shard fsdp): its first group names a parameter's unit
  std::string optimizer_impl;       // "": the --torch version's default (foreach on 2.x, single-tensor on 1.13)
  bool gradient_as_bucket_view = false;
  std::string torch = "2";          // --torch 2 | 1.13: the PyTorch whose defaults apply
  std::string zero_grad;            // --zero-grad "" (the --torch version's default) | set-to-none | zeros
  std::string checkpoint_impl;      // --checkpoint-impl "" (the mode's default) | reentrant | non-reentrant
  std::string trainable, frozen;    // --trainable / --frozen REGEX
  // --lora-rank R (0: not given), --lora-targets REGEX, --lora-dropout P (TrainingOptions::lora_*)
  int lora_rank = 0;
  std::string lora_targets;
  double lora_dropout = 0;
  std::string lora_dtype = "float32";  // --lora-dtype float32 | base
  bool lora_dtype_given = false;       // --lora-dtype given, by the user or a recipe (report/option_checks.cc)
  std::string frozen_dtype = "same";  // --frozen-dtype same|fp16|bf16|int8|nf4|gptq-int4|awq-int4|auto
  bool frozen_dtype_auto = false;     // frozen_dtype was auto, settled to the stored type (report/option_checks.h)
  bool double_quant = false;          // --double-quant (nf4)
  std::string nf4_impl = "auto";      // --nf4-impl auto|bitsandbytes|torchao (nf4)
  int64_t frozen_group_size = 128;    // --frozen-group-size (gptq-int4, awq-int4)
  bool kbit_prep = false;             // --kbit-prep (nf4, awq-int4)
  bool quantize_experts = false;      // --quantize-experts (nf4, grouped experts)
  bool amsgrad = false, maximize = false;
  bool optimizer_in_backward = false;
  bool offload_activations = false;   // --offload-activations (needs --checkpoint)
  std::string deepspeed;            // --deepspeed CONFIG.json (report/deepspeed_config.h; needs --gpus)
  std::string fsdp2_mp = "none";      // --fsdp2-mp none | PARAM:REDUCE (bf16:fp32 ...; needs --shard fsdp2)
  bool fsdp_cpu_offload = false;      // --fsdp-cpu-offload (needs --shard fsdp2 or fsdp)
  bool fsdp_no_sync = false;          // --fsdp-no-sync (needs --shard fsdp and --grad-accum N > 1)
  bool free_output = false;
  bool outputs_to_fp32 = false;     // --outputs-to-fp32 (accelerate's convert_outputs_to_fp32)
  bool outputs_to_default_dtype = false;  // --outputs-to-default-dtype (Lightning Fabric's convert_output)
  std::string upcast = "none";       // --upcast none | a list of rmsnorm, softmax, loss
  std::string recipe;               // --recipe NAME (report/recipes.h): "" plain PyTorch
  double weight_decay = 0;
  int top = EstimateOptions{}.top_tensors;
};

// Turns the names into options; throws InputError for a name that is not a choice. The values, modes and
// combinations are checked before, once, by validate_options (report/option_checks.h), which the CLI and the
// Python module run first: a library caller runs it too (or validate_estimate_args).
EstimateOptions to_estimate_options(const EstimateArgs& args);

// A model estimated as configured: what estimate, check and timeline print.
struct ConfiguredEstimate {
  std::shared_ptr<const Graph> graph;  // the shaped model (the session's, not a copy): its bound dims and warnings
  Estimate estimate;
  std::string configuration;  // describe_configuration(args, graph)
  EstimateOptions options;    // what the estimate ran with (to_estimate_options(args)), for a later run on them
};
// Reads and shapes args.model, then estimates it with to_estimate_options(args). Throws InputError.
ConfiguredEstimate estimate_model(const EstimateArgs& args);

// A one-line description of the configuration: "inference, pytorch runtime, fp32, batch=8, seq=512", made from
// the option rows' describe parts (report/option_schema.cc), then the graph's bound dimensions and the --value bindings.
std::string describe_configuration(const EstimateArgs& args, const Graph& graph);

}  // namespace memplan
