// A test's whole configuration of one cost-model run, written as one variable: how the model runs
// (ExecutionOptions) and the mode's own options, with the defaults the tests' hand computations assume.
// The product's API takes the two apart (build_inference_program(g, execution, options)); these overloads
// only hand each part on.
#pragma once

#include "cost_models/cost_model.h"
#include "cost_models/training_context.h"

namespace memplan {

// Inference tests run the graph as written on an exact allocator unless they choose a runtime.
struct InferenceRun : ExecutionOptions, InferenceOptions {
  InferenceRun() { runtime = Runtime::Ideal; }
};

// Training tests derive their figures for Adam with the graph's output seeding backward (no loss), on eager
// PyTorch with the cuBLAS workspaces, unless they choose otherwise.
struct TrainingRun : ExecutionOptions, TrainingOptions {
  TrainingRun() {
    optimizer = Optimizer::Adam;
    loss = LossKind::None;
  }
};

// SGD on an exact allocator, the graph's output seeding backward: what a step saves, with the least else.
inline TrainingRun sgd_ideal() {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Sgd;
  o.loss = LossKind::None;
  return o;
}

// QLoRA under fully_shard on `gpus` ranks (fsdp2_nf4_test.cc, fsdp2_bnb_nf4_test.cc): the model in bf16 without a
// policy, rank-2 bf16 adapters on the "fc" layers, Adam on an exact allocator; torchao's NF4Tensor (torchtune) or
// bitsandbytes' Params4bit (accelerate).
inline TrainingRun fsdp2_qlora(int gpus, bool torchao) {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.precision = Precision::Bf16;
  o.gpus = gpus;
  o.shard = Sharding::Fsdp2;
  o.frozen_storage = FrozenStorage::Nf4;
  o.nf4_torchao = torchao;
  o.lora_rank = 2;
  o.lora_targets = "fc";
  o.lora_float32 = false;
  return o;
}

inline CostModelResult build_inference_program(const Graph& g, const InferenceRun& run) {
  return build_inference_program(g, run, run);
}
inline TrainingResult build_training_program(const Graph& g, const TrainingRun& run) {
  return build_training_program(g, run, run);
}
inline TrainingContext make_training_context(const Graph& g, const TrainingRun& run, const LoraGraph* lora = nullptr) {
  return make_training_context(g, run, run, lora);
}

}  // namespace memplan
