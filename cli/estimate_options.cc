#include "cli/estimate_options.h"

namespace memplan::cli {

void add_estimate_options(CLI::App* cmd, EstimateArgs& a, bool with_checkpoint_budget) {
  add_model_options(cmd, a.model);
  cmd->add_option("--mode", a.mode, "inference, or train: one PyTorch training step (forward, backward, optimizer)")
      ->check(CLI::IsMember({"inference", "train"}))
      ->capture_default_str();
  cmd->add_option("--runtime", a.runtime,
                  "Who runs the model: pytorch (eager, CUDA caching allocator: reports max_memory_allocated and "
                  "max_memory_reserved), onnxruntime (CUDA EP, BFC arena with memory pattern), or ideal (exact "
                  "sizes in one arena: the floor)")
      ->check(CLI::IsMember(runtime_names()))
      ->capture_default_str();
  cmd->add_option("--dtype", a.dtype, "Inference: store float weights and activations in this type (fp16 = model.half())")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--schedule", a.schedule,
                  "Execution order: model (the file's order, as exported) or memory (a memory-aware reordering; "
                  "both orders' peaks are reported)")
      ->check(CLI::IsMember({"model", "memory"}))
      ->capture_default_str();
  cmd->add_flag("--expandable-segments", a.expandable_segments,
               "PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: pages mapped on demand, "
               "so free pages inside live ranges can be given back when the device is full (--runtime pytorch)");
  cmd->add_option("--arch", a.arch, "Target GPU architecture (decides cuBLAS workspace size): sm70, sm75, sm80, "
                                    "sm86, sm89, sm90, sm100, sm120 (default: the --gpu's, else sm90)");
  cmd->add_option("--gpu", a.gpu, "A GPU from the catalog: sets its architecture, and its memory minus the catalog's "
                                  "context reserve is the budget (fit, check), on which estimate also runs the step");
  cmd->add_option("--catalog", a.catalog, "A GPU catalog file replacing the built-in one (schema: report/gpu_catalog.json)");
  cmd->add_option("--attention", a.attention,
                  "How PyTorch runs attention: eager (the exported MatMul/Softmax graph) or sdpa "
                  "(scaled_dot_product_attention: no seq x seq matrix)")
      ->check(CLI::IsMember({"eager", "sdpa"}))
      ->capture_default_str();
  cmd->add_option("--tied-embeddings", a.tied_embeddings,
                  "auto: the head is held as the token embedding only when the file proves the tie (the head reads "
                  "the embedding's own initializer, as an export without constant folding writes it); a head with its "
                  "own initializer is counted. shape: a head weight shaped as the embedding's transpose is the "
                  "exporter's folded copy of a tied embedding (GPT-2, Llama-3.2-1B), held once. no: never a copy. "
                  "A constant-folded export looks the same tied (GPT-2) or not (Llama-3.1-8B)")
      ->check(CLI::IsMember({"auto", "shape", "no"}))
      ->capture_default_str();
  auto* train = "Training (--mode train)";
  cmd->add_option("--optimizer", a.optimizer, "sgd, momentum (SGD with momentum), adam or adamw")
      ->check(CLI::IsMember({"sgd", "momentum", "adam", "adamw"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--precision", a.precision,
                  "fp32; fp16/bf16 (model.half(): everything in half); amp-fp16/amp-bf16 (torch.autocast: fp32 "
                  "master weights, grads and states)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "amp-fp16", "amp-bf16"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--checkpoint", a.checkpoint,
                  "Activation checkpointing: none, sqrt (about sqrt(n) segments), every:K, at:T1,T2,... (boundary "
                  "tensor names), auto (fewest recomputed FLOPs that fit --budget)")
      ->capture_default_str()
      ->group(train);
  if (with_checkpoint_budget)
    cmd->add_option("--budget", a.budget, "Memory budget for --checkpoint auto, e.g. 24GiB")->group(train);
  cmd->add_option("--grad-accum", a.grad_accum, "Gradient accumulation steps (the batch is one micro-batch)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--loss", a.loss, "Loss on the last output: none, cross-entropy (int64 targets) or mse")
      ->check(CLI::IsMember({"none", "cross-entropy", "mse"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--gpus", a.gpus, "Data-parallel GPUs (the estimate is per GPU)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--shard", a.shard, "With --gpus: none, ddp, zero1, zero2, zero3, fsdp (FULL_SHARD by wrapping unit)")
      ->check(CLI::IsMember({"none", "ddp", "zero1", "zero2", "zero3", "fsdp"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--tp", a.tp,
                  "Tensor-parallel GPUs (Megatron-style column/row-parallel attention and MLP, vocab-parallel embedding "
                  "and head); the estimate is one GPU's")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(train);
  cmd->add_flag("--sequence-parallel", a.sequence_parallel,
                "With --tp: Megatron's sequence parallelism (norms, dropouts and residuals split along the sequence)")
      ->group(train);
  cmd->add_option("--pp", a.pp, "Pipeline-parallel stages, 1F1B: the estimate is the busiest stage's GPU")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--micro-batches", a.micro_batches, "With --pp: micro-batches per step (default: the stages; the batch is one)")
      ->check(CLI::PositiveNumber)
      ->group(train);
  cmd->add_option("--fsdp-wrap", a.fsdp_wrap,
                  "With --shard fsdp or --pp: a regex searched in parameter names whose first group names the wrapping unit "
                  "(default: one unit per repeated block <prefix>.<N>., the rest in the root)")
      ->group(train);
  cmd->add_option("--optimizer-impl", a.optimizer_impl,
                  "Adam/AdamW implementation: foreach (torch 2.x default), foreach-torch1 (torch 1.13), single-tensor "
                  "(torch 1.13's default), fused (no temporaries). Default: --torch's")
      ->check(CLI::IsMember({"foreach", "foreach-torch1", "single-tensor", "fused"}))
      ->group(train);
  cmd->add_option("--torch", a.torch,
                  "PyTorch version whose defaults apply: 2 (any 2.x) or 1.13 (zero_grad keeps the grads between steps, "
                  "single-tensor Adam, mean keeps its input for backward, no sdpa)")
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--zero-grad", a.zero_grad,
                  "What optimizer.zero_grad() does between steps: set-to-none (frees the grads) or zeros (keeps "
                  "them, added into in place). Default: --torch's (2: set-to-none, 1.13: zeros)")
      ->group(train);
  cmd->add_option("--trainable", a.trainable,
                  "Only parameters whose initializer name matches this regular expression train, e.g. lora_")
      ->group(train);
  cmd->add_option("--frozen", a.frozen, "Parameters whose name matches this regular expression are frozen (no grad, no state)")
      ->group(train);
  cmd->add_option("--lora-rank", a.lora_rank,
                  "LoRA what-if: rank-R adapters (PEFT lora.Linear, float32) on the layers --lora-targets names; "
                  "the base weights freeze (with --trainable, the base parameters it names train too)")
      ->group(train);
  cmd->add_option("--lora-targets", a.lora_targets,
                  "With --lora-rank: regular expression searched in the weight names of the MatMul/Gemm layers to "
                  "adapt, e.g. 'q_proj|v_proj' (PEFT's default for Llama). Required: no default")
      ->group(train);
  cmd->add_option("--lora-dropout", a.lora_dropout,
                  "With --lora-rank: the adapters' dropout p; > 0 copies each adapted layer's input and keeps a mask")
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--frozen-dtype", a.frozen_dtype,
                  "How frozen weights are stored: same, fp16, bf16, int8 (LLM.int8) or nf4 (QLoRA, bitsandbytes; "
                  "int8/nf4: Linear weights but the head), each dequantized per op as a transient")
      ->check(CLI::IsMember({"same", "fp16", "bf16", "int8", "nf4"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_flag("--double-quant", a.double_quant, "With --frozen-dtype nf4: QLoRA's double quantization of the block scales")
      ->group(train);
  cmd->add_flag("--amsgrad", a.amsgrad, "Adam/AdamW amsgrad: a third state per parameter")->group(train);
  cmd->add_flag("--maximize", a.maximize, "The optimizer's maximize=True: the update negates a copy of the grads")
      ->group(train);
  cmd->add_option("--weight-decay", a.weight_decay,
                  "The optimizer's weight_decay: for Adam and SGD (L2) the update copies the grads; AdamW decays in place")
      ->group(train);
  cmd->add_flag("--gradient-as-bucket-view", a.gradient_as_bucket_view,
                "DDP: buckets alias the gradients instead of holding a second copy")
      ->group(train);
  cmd->add_option("--top", a.top, "How many of the largest tensors live at the peak to list")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

}  // namespace memplan::cli
