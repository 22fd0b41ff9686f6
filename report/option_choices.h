// The names an option's value may take, each list written once: the schema (report/options.h) offers them as
// the option's choices (--help, docs/options.md, the CLI's check) and to_estimate_options turns a name into its
// value with the same list, so a choice can never be offered and then refused, or accepted and not offered.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/mxfp4_experts.h"
#include "cost_models/vllm_engine.h"
#include "onnx_import/errors.h"
#include "report/estimate.h"

namespace memplan {

template <typename T>
struct Choices {
  std::vector<std::pair<std::string, T>> items;  // in the order --help lists them

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, value] : items) out.push_back(name);
    return out;
  }
  // Whether `name` is a choice whose value is `value` (false for a name that is not a choice).
  bool is(const std::string& name, const T& value) const {
    for (const auto& [n, v] : items)
      if (n == name) return v == value;
    return false;
  }
  // The first name of `value`: what messages and descriptions say for it.
  const std::string& name_of(const T& value) const {
    for (const auto& [n, v] : items)
      if (v == value) return n;
    throw InternalError("no choice names this value");
  }
  // The value named `name`; InputError "FLAG NAME: expected one of a|b|c" otherwise.
  T parse(const std::string& name, const std::string& flag) const {
    for (const auto& [n, value] : items)
      if (n == name) return value;
    std::string all;
    for (const auto& [n, value] : items) all += (all.empty() ? "" : "|") + n;
    throw InputError(flag + " " + name + ": expected one of " + all);
  }
};

// A choice written NAME:N (--loss chunked-ce:N) takes a count N >= 1 after the colon. The count `value` gives
// it when `value` is NAME:<count>; 0 when `value` is not that choice; InputError when it is, with a count that is
// not an integer >= 1. The schema's check (report/option_checks.cc) and the parse (estimate_config.cc) both use it.
inline int counted_choice(const std::string& value, const std::string& choice, const std::string& flag) {
  if (choice.size() < 2 || choice.compare(choice.size() - 2, 2, ":N") != 0) return 0;
  const std::string prefix = choice.substr(0, choice.size() - 1);  // "chunked-ce:"
  if (value.rfind(prefix, 0) != 0) return 0;
  const std::string count = value.substr(prefix.size());
  int n = 0;
  bool digits = !count.empty() && count.size() <= 9;
  for (char c : count) digits = digits && c >= '0' && c <= '9';
  if (digits) n = std::stoi(count);
  if (!digits || n < 1) throw InputError(flag + " " + value + ": expected " + choice + " with N an integer >= 1");
  return n;
}

inline const Choices<Mode> kModeChoices{{{mode_name(Mode::Inference), Mode::Inference}, {mode_name(Mode::Training), Mode::Training}}};
inline const Choices<Runtime> kRuntimeChoices{{{runtime_name(Runtime::Ideal), Runtime::Ideal},
                                               {runtime_name(Runtime::PyTorch), Runtime::PyTorch},
                                               {runtime_name(Runtime::OnnxRuntime), Runtime::OnnxRuntime}}};
inline const Choices<DType> kDtypeChoices{{{"fp32", DType::Float32}, {"fp16", DType::Float16}, {"bf16", DType::BFloat16}}};
inline const Choices<bool> kScheduleChoices{{{"model", false}, {"memory", true}}};  // true: memory-aware order
// --arch: the compute capability's major, which decides PyTorch's cuBLAS workspace (cost_models/cost_model.h).
inline const Choices<int> kArchChoices{{{"sm70", 7}, {"sm75", 7}, {"sm80", 8}, {"sm86", 8}, {"sm89", 8}, {"sm90", 9},
                                        {"sm100", 10}, {"sm120", 12}}};
inline const Choices<AttentionImpl> kAttentionChoices{{{"eager", AttentionImpl::Eager}, {"sdpa", AttentionImpl::Sdpa}}};
// --cudnn-benchmark: torch.backends.cudnn.benchmark.
inline const Choices<bool> kCudnnBenchmarkChoices{{{"on", true}, {"off", false}}};
// shape: a head shaped as the embedding's transpose is its tied copy; auto and no hold only a proven tie.
enum class TiedEmbeddings { Auto, Shape, No };
inline const Choices<TiedEmbeddings> kTiedEmbeddingChoices{
    {{"auto", TiedEmbeddings::Auto}, {"shape", TiedEmbeddings::Shape}, {"no", TiedEmbeddings::No}}};
inline const Choices<Optimizer> kOptimizerChoices{{{"sgd", Optimizer::Sgd}, {"momentum", Optimizer::Momentum},
                                                   {"adam", Optimizer::Adam}, {"adamw", Optimizer::AdamW},
                                                   {"adamw8bit", Optimizer::AdamW8bit},
                                                   {"paged-adamw", Optimizer::PagedAdamW},
                                                   {"paged-adamw8bit", Optimizer::PagedAdamW8bit}}};
inline const Choices<Precision> kPrecisionChoices{{{"fp32", Precision::Fp32}, {"fp16", Precision::Fp16},
                                                   {"bf16", Precision::Bf16}, {"amp-fp16", Precision::AmpFp16},
                                                   {"amp-bf16", Precision::AmpBf16}}};
// --precision auto: the stored type, settled before the estimate reads the option (report/option_checks.h).
inline const std::string kAutoPrecision = "auto";
// --precision as given names torch.autocast: amp-bf16 or amp-fp16 (not "auto", settled later to a plain type).
inline bool amp_precision(const std::string& precision) {
  return kPrecisionChoices.is(precision, Precision::AmpBf16) || kPrecisionChoices.is(precision, Precision::AmpFp16);
}
// --checkpoint as given: any checkpointing (not the default none), and torchtitan's selective[:op|:N] among it
// (report/estimate_config.cc parses the modes). The combination matrix's features and the recipes read these.
inline bool checkpoint_given(const std::string& checkpoint) { return checkpoint != "none"; }
inline bool selective_checkpoint(const std::string& checkpoint) { return checkpoint.rfind("selective", 0) == 0; }
// chunked-ce:N, chunked-ce-tokens:N and chunked-ce-rows:N carry a count (counted_choice).
inline const Choices<LossKind> kLossChoices{{{"none", LossKind::None},
                                             {"cross-entropy", LossKind::CrossEntropy},
                                             {"mse", LossKind::Mse},
                                             {"chunked-ce:N", LossKind::ChunkedCrossEntropy},
                                             {"chunked-ce-tokens:N", LossKind::ChunkedCrossEntropyTokens},
                                             {"chunked-ce-rows:N", LossKind::ChunkedCrossEntropyRows},
                                             {"fused-linear-ce", LossKind::FusedLinearCrossEntropy}}};
// A loss on the whole last output, which a forward can compute inside itself (transformers' ForCausalLM): what
// --outputs-to-fp32's copy follows (cross-entropy or mse; the chunked and fused losses hold no whole logits).
inline bool whole_output_loss(const std::string& loss) {
  return kLossChoices.is(loss, LossKind::CrossEntropy) || kLossChoices.is(loss, LossKind::Mse);
}
// litgpt's chunked_cross_entropy on its head's chunks, chunked-ce-tokens:N (finetune/lora.py), or on a whole head,
// chunked-ce-rows:N (finetune/full.py): the losses --outputs-to-default-dtype's copies (Lightning Fabric's) are
// modelled before, and the ones --recipe litgpt runs.
inline bool token_chunked_loss(const std::string& loss) { return loss.rfind("chunked-ce-tokens:", 0) == 0; }
inline bool row_chunked_loss(const std::string& loss) { return loss.rfind("chunked-ce-rows:", 0) == 0; }
inline bool litgpt_loss(const std::string& loss) { return token_chunked_loss(loss) || row_chunked_loss(loss); }
inline const Choices<Sharding> kShardChoices{{{"none", Sharding::None}, {"ddp", Sharding::Ddp}, {"zero1", Sharding::Zero1},
                                              {"zero2", Sharding::Zero2}, {"zero3", Sharding::Zero3},
                                              {"fsdp", Sharding::Fsdp}, {"fsdp1", Sharding::Fsdp},
                                              {"fsdp2", Sharding::Fsdp2}}};
inline const Choices<OptimizerImpl> kOptimizerImplChoices{
    {{"foreach", OptimizerImpl::Foreach}, {"foreach-torch1", OptimizerImpl::ForeachTorch1},
     {"single-tensor", OptimizerImpl::SingleTensor}, {"fused", OptimizerImpl::Fused}}};
// --fsdp2-mp PARAM:REDUCE: MixedPrecisionPolicy's param_dtype (the precision the gathered parameters compute in)
// and reduce_dtype; none: no policy (Fp32 / Float32 are not read then).
inline const Choices<std::pair<Precision, DType>> kFsdp2MpChoices{
    {{"none", {Precision::Fp32, DType::Float32}},
     {"bf16:fp32", {Precision::Bf16, DType::Float32}},
     {"bf16:bf16", {Precision::Bf16, DType::BFloat16}},
     {"fp16:fp32", {Precision::Fp16, DType::Float32}},
     {"fp16:fp16", {Precision::Fp16, DType::Float16}}}};
// --lora-dtype: true, the adapters in float32 (PEFT's autocast_adapter_dtype); false, in the base's type.
inline const Choices<bool> kLoraDtypeChoices{{{"float32", true}, {"base", false}}};
inline const Choices<bool> kTorchChoices{{{"2", false}, {"2.x", false}, {"1.13", true}}};  // true: torch 1.13
// --checkpoint-impl: true, torch.utils.checkpoint's reentrant implementation (use_reentrant=True); false, the
// non-reentrant one (CheckpointOptions::reentrant).
inline const Choices<bool> kCheckpointImplChoices{{{"reentrant", true}, {"non-reentrant", false}}};
inline const Choices<bool> kZeroGradChoices{{{"set-to-none", false}, {"zeros", true}}};  // true: grads kept
inline const Choices<FrozenStorage> kFrozenDtypeChoices{{{"same", FrozenStorage::Same}, {"fp16", FrozenStorage::Fp16},
                                                         {"bf16", FrozenStorage::Bf16}, {"int8", FrozenStorage::Int8},
                                                         {"nf4", FrozenStorage::Nf4}, {"gptq-int4", FrozenStorage::GptqInt4},
                                                         {"awq-int4", FrozenStorage::AwqInt4}}};
// --frozen-dtype fp16/bf16 re-stores the frozen weights, except in the type --precision already stores every floating
// parameter in (cost_models/frozen_storage.cc: a weight already in the type is kept as it is).
inline bool frozen_half(const std::string& frozen_dtype, const std::string& precision) {
  if (kFrozenDtypeChoices.is(frozen_dtype, FrozenStorage::Fp16)) return !kPrecisionChoices.is(precision, Precision::Fp16);
  if (kFrozenDtypeChoices.is(frozen_dtype, FrozenStorage::Bf16)) return !kPrecisionChoices.is(precision, Precision::Bf16);
  return false;
}
// --nf4-impl: whose NF4 --frozen-dtype nf4 is; auto: torchao's under --shard fsdp2 (torchtune's distributed QLoRA)
// unless --quantize-experts (bitsandbytes' replace_parameter_4bit, axolotl's), else bitsandbytes'.
enum class Nf4Impl { Auto, BitsAndBytes, Torchao };
inline const Choices<Nf4Impl> kNf4ImplChoices{
    {{"auto", Nf4Impl::Auto}, {"bitsandbytes", Nf4Impl::BitsAndBytes}, {"torchao", Nf4Impl::Torchao}}};
// Whether --frozen-dtype, --nf4-impl, --shard and --quantize-experts make the frozen weights torchao's NF4Tensor.
inline bool is_torchao_nf4(const std::string& frozen_dtype, const std::string& nf4_impl, const std::string& shard,
                           bool quantize_experts) {
  return kFrozenDtypeChoices.is(frozen_dtype, FrozenStorage::Nf4) &&
         (kNf4ImplChoices.is(nf4_impl, Nf4Impl::Torchao) ||
          (kNf4ImplChoices.is(nf4_impl, Nf4Impl::Auto) && kShardChoices.is(shard, Sharding::Fsdp2) && !quantize_experts));
}
// --model-runner: vLLM's default for the model and version (none), or the runner VLLM_USE_V2_MODEL_RUNNER forces.
inline const Choices<std::optional<VllmModelRunner>> kModelRunnerChoices{
    {{"auto", std::nullopt}, {"v1", VllmModelRunner::V1}, {"v2", VllmModelRunner::V2}}};
// --mxfp4-backend: vLLM's choice for the GPU (none), or the MXFP4 MoE backend the install forces
// (cost_models/mxfp4_experts.h vllm_mxfp4_backend).
inline const Choices<std::optional<VllmMxfp4Backend>> kMxfp4BackendChoices{
    {{"auto", std::nullopt},
     {"triton", VllmMxfp4Backend::Triton},
     {"marlin", VllmMxfp4Backend::Marlin},
     {"flashinfer", VllmMxfp4Backend::FlashInfer}}};
// --usage-context: how vLLM is started, which picks its default step (cost_models/vllm_engine.h VllmUsageContext).
inline const Choices<VllmUsageContext> kUsageContextChoices{
    {{"serve", VllmUsageContext::Serve}, {"llm", VllmUsageContext::LlmClass}, {"engine", VllmUsageContext::Engine}}};
// --performance-mode: vLLM's (cost_models/vllm_engine.h VllmPerformanceMode).
inline const Choices<VllmPerformanceMode> kPerformanceModeChoices{{{"balanced", VllmPerformanceMode::Balanced},
                                                                   {"interactivity", VllmPerformanceMode::Interactivity},
                                                                   {"throughput", VllmPerformanceMode::Throughput}}};
// --flashinfer: whether FlashInfer is usable where vLLM runs (none: auto, memplan's assumption for each path;
// report/serve_vllm.h VllmResolved::flashinfer).
inline const Choices<std::optional<bool>> kFlashInferChoices{{{"auto", std::nullopt}, {"yes", true}, {"no", false}}};
// serve's --kv-cache-dtype: true, one byte per element (vLLM stores every fp8 choice as torch.uint8,
// vllm/utils STR_DTYPE_TO_TORCH_DTYPE; report/serve.h).
inline const Choices<bool> kKvCacheDtypeChoices{{{"auto", false}, {"fp8", true}, {"fp8_e4m3", true}, {"fp8_e5m2", true}}};
// serve --engine: who serves the decoder (report/serve_vllm.h: vLLM's V1 rules; report/serve.h: PyTorch eager).
enum class ServeEngine { Vllm, Eager, Sglang, Trtllm, Ortgenai, All };
inline const Choices<ServeEngine> kServeEngineChoices{{{"vllm", ServeEngine::Vllm},
                                                       {"eager", ServeEngine::Eager},
                                                       {"sglang", ServeEngine::Sglang},
                                                       {"trtllm", ServeEngine::Trtllm},
                                                       {"ortgenai", ServeEngine::Ortgenai},
                                                       {"all", ServeEngine::All}}};
// vLLM's --quantization methods memplan sizes (cost_models/vllm_weights.h); the value is unused.
inline const Choices<int> kQuantizationChoices{{{"fp8", 0}, {"gptq", 1}, {"awq", 2}}};
// check --metric: the figure the regression limit compares (report/estimate.h Metric).
inline const Choices<Metric> kMetricChoices{{{"total", Metric::Total}, {"allocated", Metric::Allocated},
                                             {"reserved", Metric::Reserved}, {"device", Metric::Device}}};
inline const Choices<int> kFormatChoices{{{"table", 0}, {"json", 1}, {"markdown", 2}}};

}  // namespace memplan
