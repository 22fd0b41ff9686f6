// --ep N's requirements (check_expert_parallel_options, called by check_requirements in report/option_checks.cc, so
// every entry meets them): what torchtitan v0.2.2's expert parallelism runs with (pytorch/torchtitan at
// 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce; the graph side: onnx_import/hf_moe_ep.cc), each refusal naming both
// flags. The model's own checks (experts, grouped_mm, N dividing them, gpt_oss) are the import's
// (check_expert_parallel, onnx_import/hf_moe_ep.cc), which a dense model meets before any --experts-implementation.
#include "onnx_import/errors.h"
#include "report/option_checks_ep.h"
#include "report/option_choices.h"

namespace memplan {

void check_expert_parallel_options(const EstimateArgs& a) {
  const int ep = a.model.ep;
  if (ep <= 1) return;
  const std::string flag = "--ep " + std::to_string(ep);
  auto refuse = [&](const std::string& other, const std::string& why) {
    throw InputError(flag + " with " + other + ": " + why);
  };
  if (!kModeChoices.is(a.mode, Mode::Training))
    refuse("--mode " + a.mode, "expert parallelism is a training layout (torchtitan's ExpertParallel): give --mode train");
  // parallel_dims.py ParallelDims.build_mesh: the ep dimension is carved out of the data-parallel shards
  // (efsdp = dp_shard / ep), so the GPUs are a multiple of it.
  if (a.gpus < ep || a.gpus % ep != 0)
    refuse("--gpus " + std::to_string(a.gpus), "the expert-parallel GPUs are data-parallel ranks (torchtitan's "
           "ParallelDims: efsdp = dp_shard / ep): --gpus must be a multiple of " + std::to_string(ep));
  // efsdp = dp_shard x cp x tp / (etp x ep) >= 1 needs dp_shard >= ep > 1, so torchtitan's apply_fsdp always runs.
  if (!kShardChoices.is(a.shard, Sharding::Fsdp2))
    refuse("--shard " + a.shard, "torchtitan shards the model with FSDP2 whenever ep > 1 (its data-parallel shard "
           "degree holds the ep ranks): give --shard fsdp2");
  if (a.tp > 1)
    refuse("--tp " + std::to_string(a.tp), "torchtitan's ExpertTensorParallel (etp) and the dense layers' tensor "
           "parallelism under ep are not modelled");
  if (a.pp > 1) refuse("--pp " + std::to_string(a.pp), "pipeline stages with expert parallelism are not modelled");
  if (a.lora_rank > 0) refuse("--lora-rank " + std::to_string(a.lora_rank), "torchtitan has no LoRA");
  if (!kFrozenDtypeChoices.is(a.frozen_dtype, FrozenStorage::Same))
    refuse("--frozen-dtype " + a.frozen_dtype, "torchtitan trains every weight in its own dtype");
  if (!a.deepspeed.empty()) refuse("--deepspeed", "DeepSpeed's MoE expert parallelism is not modelled");
}

}  // namespace memplan
