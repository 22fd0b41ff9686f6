// serve's rows of the option schema (report/options.h): the engines' settings.
#include "report/option_choices.h"
#include "report/option_rows.h"

namespace memplan {

// Rows are designated initializers that name only what differs from OptionSpec's defaults; GCC 12's -Wextra
// would warn for every member left to its default member initializer.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<OptionSpec> serve_option_rows() {
  using K = OptionKind;
  return {
      {.flag = "--engine", .kind = K::Choice, .commands = kServe,
       .help = "Who serves the decoder: vllm (vLLM's V1 engine: its KV cache size and maximum concurrency as it "
               "prints them at start-up, from its own budget rule and profile run, with attention, repeat_kv and "
               "the LM head as its kernels run them; deepseek_v2's and deepseek_v3's latent cache and MLA backend) or eager (PyTorch eager running the exported graph: prefill "
               "and decode steps as exported, the sequences and the longest sequence that fit), sglang (SGLang's token "
               "pool: mem_fraction_static of the free memory less the weights, no profile run), trtllm (TensorRT-LLM's "
               "PyTorch backend: free_gpu_memory_fraction of what its profiling run over --max-num-tokens leaves, in "
               "blocks of --tokens-per-block), ortgenai (ONNX Runtime GenAI running the exported graph: past and present "
               "one buffer at --context (search.max_length) per sequence, the largest batch whose buffers and prompt "
               "step fit) or all (a row an engine for one GPU). sglang, trtllm, ortgenai and all need --gpu or --memory; "
               "trtllm refuses deepseek_v2 (its PyTorch backend does not load DeepseekV2ForCausalLM), deepseek_v3 "
               "(its MLA profiling run is not sized), other mixtures of experts (its fused MoE's buffers are not "
               "sized) and quantized checkpoints other than a config.json's 128 x 128 block fp8 on compute capability "
               "9.0 (TensorRT-LLM 1.0 raises NotImplementedError for per-tensor fp8, gptq and awq)",
       .field = FIELD(serve.engine), .choices = kServeEngineChoices.names(), .show_default = true},
      {.flag = "--context,--max-model-len", .kind = K::Int, .commands = kServe,
       .help = "Tokens of one sequence, prompt and generated (vLLM's --max-model-len); vllm's default: the model's "
               "max_position_embeddings (a config.json); eager: required",
       .field = FIELD(serve.context), .min = 1},
      {.flag = "--max-batched-tokens,--max-num-batched-tokens", .kind = K::Int, .commands = kServe,
       .help = "Tokens of one scheduler step (vLLM's --max-num-batched-tokens): vLLM's profile run (default: "
               "vLLM's, 8192 on a GPU of 70 GiB or more that is not an A100, else 2048); eager: the prefill step, "
               "one sequence (default: --context)",
       .field = FIELD(serve.max_batched_tokens), .engines = {"vllm", "eager"}, .min = 1},
      {.flag = "--max-num-seqs", .kind = K::Int, .commands = kServe,
       .help = "Requests in one step (vLLM's --max-num-seqs): the profile run's dummy requests and the "
               "sampler's warm-up rows (default: vLLM's, 1024 on a GPU of 70 GiB or more that is not an A100, else "
               "256; at most --max-batched-tokens)",
       .field = FIELD(serve.max_num_seqs), .engines = {"vllm"}, .min = 1},
      {.flag = "--enable-lora", .kind = K::Flag, .commands = kServe,
       .help = "Serve LoRA adapters (vLLM's --enable-lora): the stacks of --max-loras slots of rank "
               "--max-lora-rank on every adapted linear layer, counted as weights as vLLM counts them",
       .field = FIELD(serve.enable_lora), .engines = {"vllm"}},
      {.flag = "--max-loras", .kind = K::Int, .commands = kServe,
       .help = "With --enable-lora: adapters on the GPU at once (vLLM's --max-loras)", .field = FIELD(serve.max_loras), .engines = {"vllm"},
       .min = 1, .show_default = true},
      {.flag = "--max-lora-rank", .kind = K::Int, .commands = kServe,
       .help = "With --enable-lora: the rank the stacks are sized for (vLLM's --max-lora-rank)",
       .field = FIELD(serve.max_lora_rank), .engines = {"vllm"}, .min = 1, .show_default = true},
      {.flag = "--enable-expert-parallel", .kind = K::Flag, .commands = kServe,
       .help = "A mixture of experts' experts split whole across the --data-parallel-size x --tp GPUs (vLLM's "
               "--enable-expert-parallel): ceil(E / (dp x tp)) experts of full width on the first GPU, the fused MoE "
               "kernel's buffers at the full width; attention, shared experts and the router as under --tp. Refused "
               "for a dense model; EPLB and the pplx / DeepEP all-to-all backends are not modelled",
       .field = FIELD(serve.enable_expert_parallel), .engines = {"vllm"}},
      {.flag = "--data-parallel-size", .kind = K::Int, .commands = kServe,
       .help = "vLLM's data-parallel engines of --tp GPUs each (vLLM's --data-parallel-size), every one with its own "
               "KV cache (the answer is one rank's; the total is dp times). A mixture of experts needs "
               "--enable-expert-parallel: its experts over dp x tp GPUs, the fused MoE kernel on every rank's "
               "tokens (dp x --max-batched-tokens) gathered by the naive dispatch; a dense model's ranks are replicas",
       .field = FIELD(serve.data_parallel_size), .engines = {"vllm"}, .min = 1, .show_default = true},
      {.flag = "--engine-version", .kind = K::Text, .commands = kServe,
       .help = "The vLLM version whose start-up rule applies: 0.11 to 0.19 (the current V1 rule; from 0.17 its "
               "sampler warms up on the Triton top-k/top-p kernel, whose buffer the GPU's multiprocessors size), "
               "0.8 and 0.9.0 "
               "(the V1 worker's absolute rule: the profile's whole peak and every byte outside PyTorch, --reserve, "
               "off the budget; give --max-batched-tokens and --max-num-seqs), 0.9.1 to 0.10.x (the current rule with "
               "NCCL and the custom all-reduce's buffers allocated after the snapshot: both in the non-torch term, "
               "NCCL's in --reserve; give --max-batched-tokens and --max-num-seqs), 0.6.0 to 0.6.4 (the V0 engine, the "
               "same absolute rule: max_num_seqs prompts splitting max(max_model_len, 2048) tokens by default, 256 "
               "sequences, and V0's sampler; dense unquantized models without LoRA or a sliding window), 0.6.5 to "
               "0.6.x and 0.7.x (V0 as 0.6.4, over a baseline taken before the distributed set-up: --reserve is the "
               "non-torch memory since the worker started, and at --tp 2, 4, 6 or 8 the custom all-reduce's IPC "
               "buffers are added, with its 8 MiB rank_data tensor for 0.6.x), 0.20 to 0.24 with --enforce-eager or "
               "--cuda-graph-memory, 0.25 to 0.28 (--model-runner), 0.29 or later with --enforce-eager or "
               "--cuda-graph-memory (Model Runner V2 for every model, measuring its "
               "CUDA graphs); 0.9.1 frees the forward's hidden states before the sampler warms up, as 0.8. The "
               "default, 0.11, is the newest release memplan answers without a figure measured on the GPU for every "
               "model it serves (from 0.14 expert parallelism over fp8 experts, and from 0.16 fp8 experts on an H100 with "
               "FlashInfer, run kernels it does not size; from "
               "0.20 vLLM subtracts its CUDA graphs' measured estimate); the answer names the release it followed",
       .field = FIELD(serve.engine_version), .engines = {"vllm"}, .show_default = true},
      {.flag = "--usage-context", .kind = K::Choice, .commands = kServe,
       .help = "How vLLM is started, which sets its default --max-batched-tokens and --max-num-seqs: serve (`vllm "
               "serve`: 8192 tokens and 1024 requests on a GPU of 70 GiB or more that is not an A100, 16384 from "
               "0.28 at 160 GiB or more, else 2048 and 256), llm (Python's LLM(...) class: 16384 and 1024 from 70 "
               "GiB, not an A100, else 8192 and 256) or engine (AsyncLLM or LLMEngine.from_engine_args: 2048 and "
               "128 on any GPU). From 0.11.1 a default token budget is at most max_num_seqs x max_model_len",
       .field = FIELD(serve.usage_context), .engines = {"vllm"}, .choices = kUsageContextChoices.names(),
       .show_default = true},
      {.flag = "--performance-mode", .kind = K::Choice, .commands = kServe,
       .help = "vLLM's --performance-mode (0.17 and later): balanced, interactivity (other CUDA-graph sizes only: "
               "the KV cache as balanced's) or throughput (the default --max-batched-tokens and --max-num-seqs "
               "doubled, each where not given)",
       .field = FIELD(serve.performance_mode), .engines = {"vllm"}, .choices = kPerformanceModeChoices.names(),
       .show_default = true},
      {.flag = "--enforce-eager", .kind = K::Flag, .commands = kServe,
       .help = "No CUDA graphs (vLLM's --enforce-eager). Before 0.20 the graphs are captured after the cache is "
               "sized, in what --gpu-memory-utilization leaves, so the KV cache is the same; from 0.20 Model Runner V1 "
               "subtracts their estimate, which memplan takes as none (this flag) or as logged (--cuda-graph-memory); V2 "
               "subtracts none to 0.28",
       .field = FIELD(serve.enforce_eager), .engines = {"vllm"}},
      {.flag = "--cuda-graph-memory", .kind = K::Text, .commands = kServe,
       .help = "The CUDA graphs' estimate vLLM subtracts from the KV cache before sizing it (Model Runner V1 from "
               "0.20, V2 from 0.29), as its log prints it: \"Estimated CUDA graph memory: X GiB total\" (e.g. 0.43GiB). "
               "vLLM measures it on the GPU and memplan does not size it: without this flag those releases are "
               "answered only with --enforce-eager",
       .field = FIELD(serve.cuda_graph_memory), .engines = {"vllm"}},
      {.flag = "--flashinfer", .kind = K::Choice, .commands = kServe,
       .help = "Whether FlashInfer is usable where vLLM runs: yes (vLLM's Docker image; pip's flashinfer-python, a "
               "dependency from 0.11.1, with its cubins or nvcc from 0.12), no, or auto (memplan's assumption on each "
               "path: absent for the sampler, present for NVFP4's FP4 GEMM and MLA's module import, and for gpt-oss's "
               "MXFP4 experts on 10.x from 0.12 not assumed: refused unless no). It decides the V1 sampler's "
               "warm-up at 0.9.0 to 0.11.0 (yes: FlashInfer's top_k_top_p_sampling_from_logits, three float32 [rows, "
               "vocab] tensors, not the sort's 26 B an element), ModelOpt NVFP4's dense GEMM (from 10.0 yes: "
               "flashinfer-cutlass with its 32 MiB workspace, no: CUTLASS without; below 10.0 before 0.16 yes: vLLM "
               "picks FlashInfer's GEMM, which needs 10.0, and does not start) and gpt-oss's MXFP4 experts on 10.0 "
               "(yes: FlashInfer's layout, not sized)",
       .field = FIELD(serve.flashinfer), .engines = {"vllm"}, .choices = kFlashInferChoices.names(),
       .show_default = true},
      {.flag = "--model-runner", .kind = K::Choice, .commands = kServe,
       .help = "vLLM's GPU model runner (its VLLM_USE_V2_MODEL_RUNNER): auto (vLLM's default: Model Runner V2 for a "
               "dense Qwen3 from 0.22, Llama or Mistral from 0.23, quantized ones and Qwen2-MoE or DeepSeek-V2 from "
               "0.24, every model without experts from 0.25 and every model from 0.29; V1 otherwise), v1 or v2. V2 "
               "(--engine-version 0.22 or later) "
               "warms its Gumbel sampler up without top-k/top-p and to 0.28 "
               "subtracts no CUDA-graph estimate; V1 from 0.20 and V2 from 0.29 need --enforce-eager or --cuda-graph-memory. The log line "
               "'Using V2 Model Runner' says which ran",
       .field = FIELD(serve.model_runner), .engines = {"vllm"}, .choices = kModelRunnerChoices.names(),
       .show_default = true},
      {.flag = "--mxfp4-backend", .kind = K::Choice, .commands = kServe,
       .help = "vLLM's MoE backend for gpt-oss's MXFP4 experts: auto (vLLM's choice for the GPU and release: Marlin "
               "below compute capability 9.0; from 0.12, which bundles triton_kernels, Triton from 9.0 to 10.x but "
               "FlashInfer's on SM100 unless --flashinfer no; before 0.12 Marlin, 10.0 refused: FlashInfer's layout "
               "where usable), triton, marlin (what VLLM_MXFP4_USE_MARLIN=1 or an install without triton_kernels runs "
               "on any GPU: the experts padded to multiples of 128 wide and 256 deep, bfloat16 biases, and "
               "fused_marlin_moe's buffers) or flashinfer (SM100_FI_MXFP4_BF16 on 10.0, 10.x from 0.13: both sizes "
               "padded to 256, float32 biases, trtllm_fp4_block_scale_moe's buffers). vLLM's log line 'Using Marlin "
               "backend', 'Using Triton backend' or 'Using FlashInfer MXFP4 BF16 backend for SM100' says which ran",
       .field = FIELD(serve.mxfp4_backend), .engines = {"vllm"}, .choices = kMxfp4BackendChoices.names(),
       .show_default = true},
      {.flag = "--quantization", .kind = K::Choice, .commands = kServe,
       .help = "What the decoder's linear layers are stored as, vLLM's --quantization: fp8 (float8 e4m3 and a "
               "scale per layer; a mixture of experts' experts too, as vLLM's Fp8MoEMethod holds them), gptq or awq "
               "(packed int32, group scales and zeros); the embedding and the head stay in the model's type. With "
               "--engine sglang, SGLang's layout: fp8 scales per output row, gptq's g_idx kept, routers unquantized "
               "(awq, gptq only as named here: a config's alone is served through Marlin). Default: a config.json's "
               "quantization_config, else none. A ModelOpt FP8 checkpoint is read from the hf_quant_config.json "
               "beside the config (memplan reads that sibling file when present, never downloads) or from a "
               "quantization_config with quant_method modelopt, and served by vllm, sglang and trtllm as each holds "
               "it; give no --quantization with it",
       .field = FIELD(serve.quantization), .engines = {"vllm", "sglang"}, .choices = kQuantizationChoices.names()},
      {.flag = "--quant-bits", .kind = K::Int, .commands = kServe,
       .help = "With --quantization gptq: the bits of a weight, 2, 3, 4 or 8 (awq: 4). Default: the config's, else 4",
       .field = FIELD(serve.quant_bits), .engines = {"vllm", "sglang"}, .min = 2},
      {.flag = "--quant-group-size", .kind = K::Int, .commands = kServe,
       .help = "With --quantization gptq or awq: inputs per scale and zero (gptq: -1, one group). Default: the "
               "config's, else 128",
       .field = FIELD(serve.quant_group_size), .engines = {"vllm", "sglang"}, .min = -1},
      {.flag = "--gpu-memory-utilization", .kind = K::Real, .commands = kServe,
       .help = "The fraction of the GPU's memory vLLM may use (weights, activation peak, non-torch memory "
               "and the KV cache), as vLLM's --gpu-memory-utilization. Default: the release's (--engine-version), 0.9, "
               "and 0.92 from 0.20 (PR #38284, which also began subtracting the CUDA graphs' estimate)",
       .field = FIELD(serve.gpu_memory_utilization), .engines = {"vllm"}, .min = 0, .max = 1},
      {.flag = "--block-size", .kind = K::Int, .commands = kServe,
       .help = "Tokens per KV cache block (vLLM's --block-size). For deepseek_v2 and deepseek_v3 vLLM's MLA backend "
               "sets it: to 0.16 raised to 64 on compute capability 9.x and to 128 on 10.0 (10.x from 0.13) unless a "
               "multiple, and on 10.x from 0.15 (FlashInfer MLA, qk_nope_head_dim 128) to 64 unless 32 or a multiple "
               "of 64; from 0.17.1 the backend's preferred one unless given (9.x: FlashAttention MLA's 16, FlashMLA's "
               "64 with an fp8 cache; 10.x: FlashInfer MLA's 32); below 9.0 Triton MLA keeps it", .field = FIELD(serve.block_size), .engines = {"vllm", "eager"}, .min = 1,
       .show_default = true},
      {.flag = "--kv-cache-dtype", .kind = K::Choice, .commands = kServe,
       .help = "What the paged KV cache stores, as vLLM's --kv-cache-dtype: auto (the model's type, after --dtype) or "
               "fp8, fp8_e4m3, fp8_e5m2 (one byte per element)",
       .field = FIELD(serve.kv_cache_dtype), .engines = {"vllm", "eager", "sglang", "trtllm"}, .choices = kKvCacheDtypeChoices.names(), .show_default = true},
      {.flag = "--mem-fraction-static", .kind = K::Real, .commands = kServe,
       .help = "The fraction of the free memory the weights and the token pool take (SGLang's "
               "--mem-fraction-static). Default: SGLang's for the GPU, (memory - reserved) / memory with reserved = "
               "512 MiB + 1.5 MiB a chunked-prefill token + 2 MiB a CUDA-graph batch + tp / 8 GiB, at least 10 GiB "
               "above 60 GiB",
       .field = FIELD(serve.mem_fraction_static), .engines = {"sglang"}, .min = 0, .max = 1},
      {.flag = "--max-total-tokens", .kind = K::Int, .commands = kServe,
       .help = "The most tokens the pool holds (SGLang's --max-total-tokens; the profiled value when smaller)",
       .field = FIELD(serve.max_total_tokens), .engines = {"sglang"}, .min = 1},
      {.flag = "--chunked-prefill-size", .kind = K::Int, .commands = kServe,
       .help = "Tokens of one prefill chunk (SGLang's --chunked-prefill-size), which the default "
               "--mem-fraction-static reserves room for. Default: SGLang's for the GPU, 2048 below 35 GiB, 4096 below "
               "60 GiB, 8192 below 160 GiB, else 16384",
       .field = FIELD(serve.chunked_prefill_size), .engines = {"sglang"}, .min = 1},
      {.flag = "--page-size", .kind = K::Int, .commands = kServe,
       .help = "Tokens per page of the pool (SGLang's --page-size); the pool is rounded down to whole pages",
       .field = FIELD(serve.page_size), .engines = {"sglang"}, .min = 1, .show_default = true},
      {.flag = "--swa-full-tokens-ratio", .kind = K::Real, .commands = kServe,
       .help = "For a model SGLang serves with its hybrid sliding-window pool (SWAKVPool: gpt_oss), the windowed "
               "layers' tokens over the full layers' (SGLang's --swa-full-tokens-ratio): the budget is split so that "
               "swa_layer_tokens = ratio x full_layer_tokens",
       .field = FIELD(serve.swa_full_tokens_ratio), .engines = {"sglang"}, .min = 0, .max = 1e300,
       .show_default = true},
      {.flag = "--disable-hybrid-swa-memory", .kind = K::Flag, .commands = kServe,
       .help = "One pool over every layer for a model SGLang would give its hybrid sliding-window pool (SGLang's "
               "--disable-hybrid-swa-memory)",
       .field = FIELD(serve.disable_hybrid_swa_memory), .engines = {"sglang"}},
      {.flag = "--free-gpu-memory-fraction", .kind = K::Real, .commands = kServe,
       .help = "The fraction of the memory left after the profiling run that the KV cache takes "
               "(TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction). Default: not set (None), which the estimate "
               "reads as 0.9 and after which the cache manager takes the estimate as it is; set, it also caps the "
               "pool by that fraction of the memory free after profiling",
       .field = FIELD(serve.free_gpu_memory_fraction), .engines = {"trtllm"}, .min = 0, .max = 1},
      {.flag = "--tokens-per-block", .kind = K::Int, .commands = kServe,
       .help = "Tokens per KV cache block (TensorRT-LLM's KvCacheConfig.tokens_per_block)",
       .field = FIELD(serve.tokens_per_block), .engines = {"trtllm"}, .min = 1, .show_default = true},
      {.flag = "--max-num-tokens", .kind = K::Int, .commands = kServe,
       .help = "Tokens of one batch (TensorRT-LLM's max_num_tokens): its profiling run's, whose peak the "
               "cache's memory leaves out",
       .field = FIELD(serve.max_num_tokens), .engines = {"trtllm"}, .min = 1, .show_default = true},
      {.flag = "--kv-dim", .kind = K::Text, .commands = kServe,
       .help = "The symbolic dimension that counts cached tokens, when several qualify (e.g. past_sequence_length)",
       .field = FIELD(serve.kv_dim)},
      {.flag = "--headroom", .kind = K::Real, .commands = kServe,
       .help = "Keep this percent of the budget free (vllm: --gpu-memory-utilization)",
       .field = FIELD(serve.headroom_percent), .engines = {"eager"}, .min = 0, .max = 99, .show_default = true},
  };
}
#pragma GCC diagnostic pop

}  // namespace memplan
