// Pipeline parallelism (--pp N, --micro-batches M), the 1F1B schedule (PipeDream-Flush): Narayanan et al.
// 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", sec. 2.2.1. The
// blocks (wrap_units.h) split into N contiguous stages as evenly as possible (Megatron's default splits
// num_layers evenly), the ops before the first block (embedding) going with stage 0 and those after the
// last (final norm, head, loss) with the last stage. Each stage is one GPU's training-step program over
// its own ops and parameters, receiving its input activations and, in backward, its output grads. In 1F1B
// stage i runs min(N - i, M) forward passes before its first backward (the warm-up) and keeps their saved
// activations until their backward: the program holds the activations of min(N - i, M) - 1 earlier
// micro-batches as resident blocks beside its own micro-batch. The busiest stage, the one whose program needs
// the most of its GPU on the runtime's allocator (training_measure's required bytes, as fit and check judge; among
// equals the one that reserves most, then the largest lower bound), is the result.
#pragma once

#include "cost_models/cost_model.h"
#include "cost_models/stage_graph.h"
#include "cost_models/training_context.h"

namespace memplan {

// One stage's GPU: its training-step program and its facts.
struct PipelineStage {
  TrainingResult result;
  PipelineStageFacts facts;
  uint64_t reserved_bytes = 0;  // its allocator's peak reserve plus fixed bytes (planner/measure.h)
  StageGraph graph;             // the stage as a graph of its own, with its ids' map to the whole graph's
};

// Every stage, in order. Throws InputError when --pp exceeds the blocks, or combines with what is not
// modelled with it.
std::vector<PipelineStage> build_pipeline_stages(const TrainingContext& context);

// The busiest stage's program, with every stage's facts; adds the note that says which stage it is.
TrainingResult build_pipeline_program(const TrainingContext& context, std::vector<std::string>& notes);

}  // namespace memplan
