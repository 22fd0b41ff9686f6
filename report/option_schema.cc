// The option schema (report/options.h): one row per option, every command's; the loss rows are
// report/option_rows_loss.cc's, the fine-tuning rows report/option_rows_finetune.cc's, serve's report/option_rows_serve.cc's.
#include <fmt/format.h>

#include "onnx_import/hf_config.h"
#include "report/option_choices.h"
#include "report/option_rows.h"
#include "report/recipes.h"

namespace memplan {
namespace {

std::vector<std::string> with_auto(std::vector<std::string> names) {
  names.push_back(kAutoPrecision);
  return names;
}

// Rows are designated initializers that name only what differs from OptionSpec's defaults; GCC 12's -Wextra
// would warn for every member left to its default member initializer.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<OptionSpec> make_schema() {
  using K = OptionKind;
  std::vector<OptionSpec> rows = {
      // The model and its bindings.
      {.flag = "MODEL", .keyword = "model", .kind = K::Model, .commands = kAll,
       .help = "ONNX model file, or a Hugging Face config.json with --graph (weights are never read; external data is "
               "never opened)", .field = FIELD(estimate.model.path),
       .required = true},
      {.flag = "--dim", .keyword = "dims", .kind = K::List, .commands = kAnalysing,
       .help = "Bind a symbolic dimension by name, e.g. --dim seq=512 (repeatable; Python: dims={\"seq\": 512})",
       .field = FIELD(estimate.model.dims), .type_name = "NAME=VALUE"},
      {.flag = "--batch", .kind = K::Int, .commands = kAnalysing & ~kServe,
       .help = "Bind the leading dimension of every graph input whose leading dimension is symbolic",
       .field = FIELD(estimate.model.batch), .type_name = "N"},
      {.flag = "--input", .keyword = "inputs", .kind = K::List, .commands = kAnalysing,
       .help = "Fix one graph input's whole shape, as trtexec --shapes does, e.g. --input ids=8x512 (repeatable; "
               "Python: inputs={\"ids\": [8, 512]}); a sequence input's tensors: --input s=seq(2x3,4x3); an optional "
               "input that holds nothing: --input o=none",
       .field = FIELD(estimate.model.inputs), .type_name = "NAME=SHAPE"},
      {.flag = "--value", .keyword = "values", .kind = K::List, .commands = kAnalysing,
       .help = "Bind the contents of a scalar or small 1-D integer/bool/float graph input, so shape computations and "
               "If conditions that read it resolve, e.g. --value use_cache_branch=1, --value sr=16000 (repeatable; "
               "Python: values={\"sr\": 16000})",
       .field = FIELD(estimate.model.values), .type_name = "NAME=V[,V...]"},
      {.flag = "--graph", .kind = K::Choice, .commands = kAll,
       .help = "With a Hugging Face config.json as MODEL (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, "
               "and the mixtures of experts mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss; a decoder with a sliding window for "
               "serve --engine vllm only; serve --engine vllm sizes deepseek_v2's and deepseek_v3's latent cache as vLLM does): the graph memplan builds from it, as torch.onnx.export writes it: train (input_ids -> "
               "logits, a training export), decode (optimum's decoder with past: the KV cache's past inputs and "
               "present outputs, for serve) or prefill (optimum's decoder without past). Default: decode for serve, train for a training step (--mode train, "
               "or a --recipe); an inference estimate, plan, fit or export must say which",
       .field = FIELD(estimate.model.graph), .choices = config_graph_names()},
      {.flag = "--moe-routing", .kind = K::Choice, .commands = kAll,
       .help = "With a mixture-of-experts config.json (mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3): which tokens each expert "
               "receives, a routing its router can choose. balanced (the default): the tokens' k slots dealt to the "
               "E experts in turn, expert e receiving ceil((tokens x k - e) / E); worst: every token picks the same "
               "k experts, each receiving every token (the most one expert can: transformers drops none), the "
               "others none. serve: --engine eager's graphs (vLLM's fused MoE kernel does not depend on it)",
       .field = FIELD(estimate.model.moe_routing), .choices = moe_routing_names()},
      {.flag = "--experts-implementation", .kind = K::Choice, .commands = kAll,
       .help = "With a mixture-of-experts config.json (mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, "
               "gpt_oss): how transformers runs the "
               "experts (its experts_implementation). eager (the default): the per-expert loop, each expert's tokens "
               "gathered, its MLP, index_add_ back (transformers 4's only form); grouped_mm (transformers 5's "
               "default, PreTrainedModel.get_correct_experts_implementation): the tokens x top-k rows sorted by "
               "expert and two torch._grouped_mm calls over all of them, every tensor tokens x top-k rows whatever "
               "the routing (so --moe-routing changes nothing there but under --ep); gpt_oss adds its biases "
               "gathered per row. "
               "grouped_mm: no --tp; serve: --engine eager only (the engines run their own fused kernels)",
       .field = FIELD(estimate.model.experts), .choices = experts_implementation_names()},
      // What runs, and how. The rows' order is also the configuration line's.
      {.flag = "--mode", .kind = K::Choice, .commands = kTraining,
       .help = "inference, or train: one PyTorch training step (forward, backward, optimizer). Default: train where "
               "--recipe is given, else inference",
       .field = FIELD(estimate.mode), .choices = kModeChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) { return a.mode; }},
      {.flag = "--recipe", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "The fine-tuning framework that runs the step: its choices for the options you do not give "
               "(`memplan recipes` lists each recipe's values and sources). Default: plain PyTorch",
       .field = FIELD(estimate.recipe), .choices = recipe_names(),
       .describe = [](const EstimateArgs& a) { return if_set(!a.recipe.empty(), ", recipe " + a.recipe); }},
      {.flag = "--runtime", .kind = K::Choice, .commands = kEstimating | kPlan,
       .help = "Who runs the model: pytorch (eager, CUDA caching allocator: reports max_memory_allocated and "
               "max_memory_reserved), onnxruntime (CUDA EP, BFC arena with memory pattern), or ideal (exact sizes in "
               "one arena, no library workspaces: the floor; inference runs the graph as written, training as eager "
               "PyTorch, whose autograd decides what is saved)",
       .field = FIELD(estimate.runtime), .choices = kRuntimeChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) { return ", " + a.runtime + " runtime"; }},
      {.flag = "--expandable-segments", .kind = K::Flag, .commands = kEstimating,
       .help = "PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: pages mapped on demand, so "
               "free pages inside live ranges can be given back when the device is full (--runtime pytorch)",
       .field = FIELD(estimate.expandable_segments),
       .describe = [](const EstimateArgs& a) { return if_set(a.expandable_segments, " (expandable segments)"); }},
      {.flag = "--cudnn-benchmark", .kind = K::Choice, .commands = kEstimate | kFit | kCheck,
       .help = "torch.backends.cudnn.benchmark (--runtime pytorch, models with convolutions): on (what most training "
               "scripts set) or off (PyTorch's default). The decision counts no cuDNN workspace either way, since "
               "PyTorch never fails a step on one; on: the output also says how much the benchmark's plans may take "
               "and how much more the first iteration has free at a convolution than later ones",
       .field = FIELD(estimate.cudnn_benchmark), .choices = kCudnnBenchmarkChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) {
         return if_set(a.cudnn_benchmark != EstimateArgs{}.cudnn_benchmark, ", cudnn.benchmark " + a.cudnn_benchmark);
       }},
      {.flag = "--precision", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "fp32; fp16/bf16 (model.half(): everything in half); amp-fp16/amp-bf16 (torch.autocast over fp32 "
               "master weights, grads and states, or over the type --param-dtype says); auto: the type the weights are stored in (a config.json's torch_dtype, "
               "an ONNX file's initializers), as transformers 5 loads a checkpoint (from_pretrained's "
               "dtype=\"auto\"), fp32 where none is stated",
       .field = FIELD(estimate.precision), .choices = with_auto(kPrecisionChoices.names()), .show_default = true,
       .describe = [](const EstimateArgs& a) { return ", " + a.precision + (a.precision_auto ? " (auto: as stored)" : ""); }},
      {.flag = "--param-dtype", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "With --precision amp-*: the type the parameters (and so their grads and optimizer states) are stored "
               "in, autocast running over them. fp32: plain PyTorch AMP (float32 master weights); bf16/fp16: the "
               "Hugging Face Trainer's bf16=True (fp16=True) over a checkpoint loaded in its half type, no float32 "
               "copy; auto: the type the weights are stored in, as --precision auto reads it (the hf-trainer and "
               "hf-peft recipes set it)",
       .field = FIELD(estimate.param_dtype), .choices = with_auto(kDtypeChoices.names()), .show_default = true,
       .describe = [](const EstimateArgs& a) {
         return if_set(a.param_dtype != EstimateArgs{}.param_dtype || a.param_dtype_auto,
                       ", parameters " + a.param_dtype + (a.param_dtype_auto ? " (auto: as stored)" : ""));
       }},
      {.flag = "--optimizer", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "sgd, momentum (SGD with momentum), adam or adamw (torch.optim); adamw8bit, paged-adamw or "
               "paged-adamw8bit (bitsandbytes' AdamW8bit, PagedAdamW, PagedAdamW8bit: 8-bit states with a scale per "
               "256 elements; paged states live in CUDA managed memory, reported apart)",
       .field = FIELD(estimate.optimizer),
       .choices = kOptimizerChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) { return ", " + a.optimizer; }},
      {.flag = "--dtype", .kind = K::Choice, .commands = kEstimating | kPlan, .scope = Scope::Inference,
       .help = "Inference: store float weights and activations in this type (fp16 = model.half(); training: "
               "--precision). serve --engine vllm: fp32 stands for vLLM's --dtype auto (the stored type; a float32 "
               "checkpoint in bf16 from sm80, else fp16)",
       .field = FIELD(estimate.dtype), .choices = kDtypeChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) { return ", " + a.dtype; }},
      {.flag = "--schedule", .kind = K::Choice, .commands = kEstimating | kPlan, .scope = Scope::Inference,
       .help = "Execution order: model (the file's order, as exported) or memory (a memory-aware reordering; both "
               "orders' peaks are reported). A training step runs in autograd's order",
       .field = FIELD(estimate.schedule), .choices = kScheduleChoices.names(), .show_default = true},
      {.flag = "--arch", .kind = K::Choice, .commands = kEstimating,
       .help = "Target GPU architecture (decides cuBLAS workspace size). Default: the --gpu's, else sm90",
       .field = FIELD(estimate.arch), .choices = kArchChoices.names()},
      {.flag = "--gpu", .kind = K::Text, .commands = kEstimating,
       .help = "A GPU from the catalog (case aside, or a part of one name: H100 is the H100-80GB, 4090 the RTX-4090): "
               "sets its architecture, and its memory minus the catalog's context reserve is the budget (fit, "
               "check, serve), on which estimate also runs the step",
       .field = FIELD(estimate.gpu)},
      {.flag = "--catalog", .kind = K::Text, .commands = kEstimating,
       .help = "A GPU catalog file replacing the built-in one (schema: report/gpu_catalog.json)",
       .field = FIELD(estimate.catalog)},
      {.flag = "--attention", .kind = K::Choice, .commands = kEstimating,
       .help = "How PyTorch runs attention: eager (the exported MatMul/Softmax graph) or sdpa "
               "(scaled_dot_product_attention: no seq x seq matrix)",
       .field = FIELD(estimate.attention), .choices = kAttentionChoices.names(), .show_default = true},
      {.flag = "--checkpoint", .kind = K::Text, .commands = kTraining, .scope = Scope::Train,
       .help = "Activation checkpointing: none, sqrt (about sqrt(n) segments), layers (each repeated block, e.g. each "
               "decoder layer, one segment: what transformers' gradient_checkpointing_enable, torchtune and litgpt "
               "do), "
               "selective or selective:op (torchtitan's per-op SAC in each block: outputs of mm and SDPA saved except "
               "every second mm, the rest recomputed), selective:N (torchtitan: every N-th block checkpointed), "
               "every:K, at:T1,T2,... (boundary tensor names), auto (fewest recomputed FLOPs that fit --budget)",
       .field = FIELD(estimate.checkpoint), .show_default = true,
       .describe = [](const EstimateArgs& a) {
         return if_set(a.checkpoint != EstimateArgs{}.checkpoint, ", checkpoint " + a.checkpoint);
       }},
      {.flag = "--checkpoint-impl", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "torch.utils.checkpoint's implementation: reentrant (use_reentrant=True: torch 1.13's default and "
               "transformers' gradient_checkpointing_enable default; holds each segment's recomputed output and its "
               "grad to the segment's backward end) or non-reentrant (use_reentrant=False, as "
               "gradient_checkpointing_kwargs={\"use_reentrant\": False}; torch 2's checkpoint_wrapper default, so "
               "torchtune's and litgpt's; keeps only what the recomputed ops save, and from torch 2.1 stops "
               "recomputing at the segment's last saved tensor). Default: reentrant, non-reentrant for "
               "--checkpoint selective (always)",
       .field = FIELD(estimate.checkpoint_impl), .choices = kCheckpointImplChoices.names(),
       .describe = [](const EstimateArgs& a) { return if_set(!a.checkpoint_impl.empty(), ", " + a.checkpoint_impl); }},
      {.flag = "--budget", .kind = K::Text, .commands = kEstimate | kTimeline | kFit,
       .help = "A device memory budget, e.g. 24GiB (GiB = 2^30, GB = 10^9): the step is also run on it, and "
               "--checkpoint auto chooses the boundaries that fit in it",
       .field = FIELD(estimate.budget)},
      {.flag = "--budget", .kind = K::Text, .commands = kCheck,
       .help = "Fail when the step does not run in SIZE of device memory (e.g. 20GiB; GiB = 2^30, GB = 10^9); default "
               "with --gpu: the GPU's memory less the catalog's context reserve",
       .field = FIELD(estimate.budget)},
      {.flag = "--grad-accum", .kind = K::Int, .commands = kTraining, .scope = Scope::Train,
       .help = "Gradient accumulation steps (the batch is one micro-batch)", .field = FIELD(estimate.grad_accum),
       .min = 1, .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(a.grad_accum > 1, ", grad-accum " + std::to_string(a.grad_accum)); }},
  };
  const std::vector<OptionSpec> loss = loss_option_rows();
  rows.insert(rows.end(), loss.begin(), loss.end());
  const std::vector<OptionSpec> parallel_and_torch = {
      {.flag = "--gpus", .kind = K::Int, .commands = kTraining, .scope = Scope::Train,
       .help = "Data-parallel GPUs (the estimate is per GPU)", .field = FIELD(estimate.gpus), .min = 1,
       .show_default = true,
       .describe = [](const EstimateArgs& a) {
         // --deepspeed's config names the stage (--deepspeed's own description follows); --shard is then none
         const std::string shard = a.deepspeed.empty() ? " " + a.shard : "";
         return if_set(a.gpus > 1, ", " + std::to_string(a.gpus) + " GPUs" + shard);
       }},
      {.flag = "--shard", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "With --gpus: none, ddp, zero1, zero2, zero3, fsdp or its other name fsdp1 (FullyShardedDataParallel, "
               "FULL_SHARD, one flat parameter per wrapping unit), fsdp2 (fully_shard: each parameter sharded on dim 0, "
               "one group per wrapping unit)",
       .field = FIELD(estimate.shard), .choices = kShardChoices.names(), .show_default = true},
      {.flag = "--deepspeed", .kind = K::Text, .commands = kTraining, .scope = Scope::Train,
       .help = "With --gpus: a DeepSpeed config JSON; its zero_optimization stage (1 or 2, or --shard zero1/zero2) runs "
               "as DeepSpeedZeroOptimizer does, with its gradient buckets (reduce_bucket_size, overlap_comm, "
               "contiguous_gradients, round_robin_gradients), float32 partition and offload_optimizer; stage 3 as "
               "DeepSpeedZeroOptimizer_Stage3 does: partitions, persistent parameters, per-module gathers kept within "
               "stage3_max_reuse_distance, the prefetch (stage3_prefetch_bucket_size, stage3_max_live_parameters) "
               "over the module calls the graph's node scopes show, sub_group_size, offload_optimizer and offload_param on "
               "cpu or nvme (host and NVMe lines), and with "
               "--checkpoint layers each layer's recomputation gathering again; "
               "\"auto\" as HF Trainer fills it. Keys that change memory and are not modelled are refused",
       .field = FIELD(estimate.deepspeed),
       .describe = [](const EstimateArgs& a) { return if_set(!a.deepspeed.empty(), ", deepspeed " + a.deepspeed); }},
      {.flag = "--tied-embeddings", .kind = K::Choice, .commands = kEstimating,
       .help = "auto: the head is held as the token embedding only when the file proves the tie (the head reads the "
               "embedding's own initializer, as an export without constant folding writes it); a head with its own "
               "initializer is counted. shape: a head weight shaped as the embedding's transpose is the exporter's "
               "folded copy of a tied embedding (GPT-2, Llama-3.2-1B), held once. no: never a copy. A "
               "constant-folded export looks the same tied (GPT-2) or not (Llama-3.1-8B)",
       .field = FIELD(estimate.tied_embeddings), .choices = kTiedEmbeddingChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) {
         const auto& c = kTiedEmbeddingChoices;
         return c.is(a.tied_embeddings, TiedEmbeddings::Shape)
                    ? std::string(", tied by shape")
                    : if_set(c.is(a.tied_embeddings, TiedEmbeddings::No), ", untied embeddings");
       }},
      {.flag = "--tp,--tensor-parallel-size", .kind = K::Int, .commands = kTraining | kServe,
       .help = "Tensor-parallel GPUs (Megatron-style column/row parallel attention and MLP, vocab-parallel embedding "
               "and head; serve --engine vllm: vLLM's --tensor-parallel-size, KV heads replicated when --tp exceeds "
               "them); the estimate is one GPU's",
       .field = FIELD(estimate.tp), .min = 1, .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(a.tp > 1, ", tp " + std::to_string(a.tp)); }},
      {.flag = "--sequence-parallel", .kind = K::Flag, .commands = kTraining,
       .help = "With --tp: Megatron's sequence parallelism (norms, dropouts and residuals split along the sequence)",
       .field = FIELD(estimate.sequence_parallel),
       .describe = [](const EstimateArgs& a) { return if_set(a.tp > 1 && a.sequence_parallel, " sequence-parallel"); }},
      {.flag = "--pp", .kind = K::Int, .commands = kTraining, .scope = Scope::Train,
       .help = "Pipeline-parallel stages, 1F1B: the estimate is the busiest stage's GPU", .field = FIELD(estimate.pp),
       .min = 1, .show_default = true,
       .describe = [](const EstimateArgs& a) {
         return if_set(a.pp > 1, fmt::format(", pp {} x {} micro-batches", a.pp, a.micro_batches > 0 ? a.micro_batches : a.pp));
       }},
      {.flag = "--micro-batches", .kind = K::Int, .commands = kTraining, .scope = Scope::Train,
       .help = "With --pp: micro-batches per step (default: the stages; the batch is one)",
       .field = FIELD(estimate.micro_batches), .min = 1},
      {.flag = "--fsdp-wrap", .kind = K::Text, .commands = kTraining, .scope = Scope::Train,
       .help = "With --shard fsdp/fsdp2 or --pp: a regex searched in parameter names whose first group names the wrapping "
               "unit (default: one unit per repeated block <prefix>.<N>., the rest in the root); with fsdp2, "
               "torchtitan: its apply_fsdp groups (the token embedding, each block, and the final norm with the head, "
               "kept unsharded from forward to backward); accelerate: fsdp2_prepare_model's (the same, a tied "
               "embedding in the kept group; the hf-* recipes set it)",
       .field = FIELD(estimate.fsdp_wrap)},
      {.flag = "--fsdp2-mp,--fsdp-mp", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "On a float32 model (--precision fp32, or amp-* with param_dtype autocast's type), with --shard "
               "fsdp2: fully_shard's MixedPrecisionPolicy; with --shard fsdp: FSDP1's MixedPrecision (a param_dtype "
               "_mp_shard cast for each all-gather). As PARAM:REDUCE, param_dtype (the all-gathered parameters', and "
               "so the forward's and backward's type; under amp-* autocast casts around it) and reduce_dtype (the "
               "reduce-scatter's); the sharded parameters, their grads and the optimizer states stay float32. "
               "bf16:fp32 is torchtitan's, bf16:bf16 with --precision amp-bf16 accelerate's (the HF Trainer's bf16 "
               "under FSDP). none: no policy",
       .field = FIELD(estimate.fsdp2_mp), .choices = kFsdp2MpChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(a.fsdp2_mp != "none", " mp " + a.fsdp2_mp); }},
      {.flag = "--fsdp-cpu-offload", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "With --shard fsdp2: fully_shard's CPUOffloadPolicy (torchtune's fsdp_cpu_offload); with --shard "
               "fsdp: FSDP1's CPUOffload(offload_params=True). The sharded parameters (pinned), their grads and the "
               "optimizer states on the host, reported apart; each group's shards copied to the GPU for its "
               "all-gather, each grad shard copied back after its reduce-scatter (FSDP1 keeps it on the GPU to the "
               "end of backward; no --grad-accum there)",
       .field = FIELD(estimate.fsdp_cpu_offload),
       .describe = [](const EstimateArgs& a) { return if_set(a.fsdp_cpu_offload, ", CPU offload"); }},
      {.flag = "--fsdp-no-sync", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "With --shard fsdp and --grad-accum N: the first N-1 micro-batches run inside FSDP1's no_sync(), as "
               "accelerate's accumulate (HF Trainer) runs them: each trained unit's unsharded flat grad (frozen parts "
               "included) is kept on the GPU across them and reduce-scattered in the last. Without it each "
               "micro-batch reduce-scatters into the kept grad shards",
       .field = FIELD(estimate.fsdp_no_sync),
       .describe = [](const EstimateArgs& a) { return if_set(a.fsdp_no_sync, ", no_sync"); }},
      {.flag = "--optimizer-impl", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "Adam/AdamW implementation: foreach (torch 2.x default), foreach-torch1 (torch 1.13), single-tensor "
               "(torch 1.13's default), fused (no temporaries). Default: --torch's",
       .field = FIELD(estimate.optimizer_impl), .choices = kOptimizerImplChoices.names()},
      {.flag = "--torch", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "PyTorch version whose defaults apply: 2 (any 2.x) or 1.13 (zero_grad keeps the grads between steps, "
               "single-tensor Adam, mean keeps its input for backward, no sdpa)",
       .field = FIELD(estimate.torch), .choices = kTorchChoices.names(), .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(kTorchChoices.is(a.torch, true), ", torch " + a.torch); }},
      {.flag = "--zero-grad", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "What optimizer.zero_grad() does between steps: set-to-none (frees the grads) or zeros (keeps them, "
               "added into in place). Default: --torch's (2: set-to-none, 1.13: zeros)",
       .field = FIELD(estimate.zero_grad), .choices = kZeroGradChoices.names(),
       .describe = [](const EstimateArgs& a) { return if_set(!a.zero_grad.empty(), ", zero_grad " + a.zero_grad); }},
  };
  rows.insert(rows.end(), parallel_and_torch.begin(), parallel_and_torch.end());
  const std::vector<OptionSpec> finetune = finetune_option_rows();
  rows.insert(rows.end(), finetune.begin(), finetune.end());
  const std::vector<OptionSpec> parallel = expert_parallel_option_rows();
  rows.insert(rows.end(), parallel.begin(), parallel.end());
  const std::vector<OptionSpec> optimizer_and_budgets = {
      {.flag = "--amsgrad", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "Adam/AdamW amsgrad: a third state per parameter", .field = FIELD(estimate.amsgrad)},
      {.flag = "--maximize", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "The optimizer's maximize=True: the update negates a copy of the grads", .field = FIELD(estimate.maximize)},
      {.flag = "--weight-decay", .kind = K::Real, .commands = kTraining, .scope = Scope::Train,
       .help = "The optimizer's weight_decay: for Adam and SGD (L2) the update copies the grads; AdamW decays in place",
       .field = FIELD(estimate.weight_decay), .min = 0, .max = 1e300},
      {.flag = "--gradient-as-bucket-view", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "DDP: buckets alias the gradients instead of holding a second copy",
       .field = FIELD(estimate.gradient_as_bucket_view)},
      {.flag = "--top", .kind = K::Int, .commands = kTraining,
       .help = "How many of the largest tensors live at the peak to list", .field = FIELD(estimate.top), .min = 0,
       .show_default = true},
      // Budgets: fit and serve.
      {.flag = "--memory", .kind = K::Text, .commands = kFit | kServe,
       .help = "The budget exactly as given, e.g. 24GiB (= 24 x 2^30), 24GB (= 24 x 10^9); excludes --gpu",
       .field = FIELD(memory)},
      {.flag = "--reserve", .kind = K::Text, .commands = kEstimating,
       .help = "The CUDA context's memory per GPU, outside any allocator (its kernels included); default: the "
               "catalog's. estimate, check: part of the device figure (what nvidia-smi shows); fit, check --gpu, "
               "serve --engine eager, sglang, trtllm: taken off the GPU's memory (with NCCL's buffers for eager); serve "
               "--engine vllm: the non-torch memory vLLM's profile run finds (kernels loaded on first use, NCCL's "
               "lazily connected buffers), taken off its KV cache memory, by default the catalog's under the "
               "absolute rules (--engine-version 0.6.0 to 0.6.4, 0.8 to 0.9.0) and 0 under the others, whose "
               "snapshot is taken after the CUDA context exists",
       .field = FIELD(estimate.reserve)},
      {.flag = "--nccl-channels", .kind = K::Int, .commands = kEstimate | kTimeline | kFit | kCheck,
       .help = "NCCL's ring channels per communicator (NCCL_DEBUG=INFO prints 'N coll channels'): with --gpus or "
               "--tp, each communicator holds 12 MiB per channel outside the allocator (NCCL's LL, LL128 and SIMPLE "
               "buffers), in the device figure and off fit's budget. The default is 8 x H100's count over "
               "NVSwitch, the large end (PCIe machines use 2 to 16)",
       .field = FIELD(estimate.nccl_channels), .min = 1, .show_default = true},
      // fit.
      {.flag = "--search", .kind = K::Text, .commands = kFit,
       .help = "The dimension to maximise: batch (binds --batch) or a symbolic dim name", .field = FIELD(fit.search),
       .show_default = true},
      {.flag = "--headroom", .kind = K::Real, .commands = kFit, .help = "Keep this percent of the budget free",
       .field = FIELD(fit.headroom_percent), .min = 0, .max = 99, .show_default = true},
      {.flag = "--global-batch", .kind = K::Int, .commands = kFit,
       .help = "Also say the gradient accumulation that reaches this global batch", .field = FIELD(fit.global_batch),
       .min = 1},
      {.flag = "--max", .kind = K::Int, .commands = kFit, .help = "Largest value to consider",
       .field = FIELD(fit.max_value), .min = 1, .show_default = true},
  };
  rows.insert(rows.end(), optimizer_and_budgets.begin(), optimizer_and_budgets.end());
  const std::vector<OptionSpec> serve = serve_option_rows();
  rows.insert(rows.end(), serve.begin(), serve.end());
  const std::vector<OptionSpec> output = check_and_output_option_rows();
  rows.insert(rows.end(), output.begin(), output.end());
  return rows;
}
#pragma GCC diagnostic pop

}  // namespace

const std::vector<OptionSpec>& option_schema() {
  static const std::vector<OptionSpec> rows = make_schema();
  return rows;
}

}  // namespace memplan
