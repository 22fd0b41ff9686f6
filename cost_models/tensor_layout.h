// One per-tensor layout: what one GPU holds of each tensor and in what form. The training context is built by
// passes in a fixed order, each reading what the earlier ones left and adding its fields; the step that emits the
// program reads the layout, never the option that decided it (inference runs passes 2 and 3 only, inference.cc):
//   1. LoRA rewrite (lora_adapters.h)     the graph itself: adapters added, base weights frozen (before the layout)
//      float32 islands (fp32_islands.h)  the graph itself: the casts a framework runs in a half model (--upcast)
//   2. autocast (assign_storage_dtypes)   dtype: each tensor's storage type under the precision, autocast's
//                                          casts and PEFT's float32 adapters included
//   3. tensor parallel (tensor_parallel.h) tp: the slice of each tensor rank 0 holds (local bytes)
//   4. pipeline partition (stage_graph.h) the graph itself: one stage's ops and tensors as a graph of their own,
//                                          renumbered, every field above and below carried to its ids
//   5. frozen storage (frozen_storage.h) storage and stored_bytes: frozen weights re-stored as fp16/bf16/int8/nf4;
//                                          parametrized: which of them are read through a parametrization
//   6. ZeRO/FSDP (assign_parameter_shards) shard and shard_group: parameters held as a ZeRO-3 shard, or as part
//                                          of their FSDP unit's flat parameter (frozen ones too, as FSDP flattens
//                                          every parameter of a wrapped unit)
// A pass never changes what an earlier one decided. Pass 4 reads none of 5 and 6 (--pp with FSDP is refused), so
// it runs last in code, per stage, on the finished context: the trainable set, the frozen storage and the shards
// are the whole model's, and the stage context carries them. Rules and sources: docs/cost-models.md.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_models/cost_model.h"
#include "cost_models/graph_facts.h"
#include "cost_models/tensor_parallel.h"
#include "onnx_import/graph.h"

namespace memplan {

// How a parameter is held across the data-parallel GPUs.
enum class ParameterShard {
  Whole,      // every GPU holds all of it (no sharding, DDP, ZeRO-1/2: those shard grads and states only)
  ZeroShard,  // ZeRO-3: 1/N held, all-gathered whole for each op that reads it, in forward and in backward
  FlatShard,  // FSDP: part of its unit's flat parameter (shard_group), of which 1/N is held, gathered per unit
};

struct TensorLayout {
  std::vector<DType> dtype;               // 2. storage type under the precision
  TensorParallelPlan tp;                  // 3. rank 0's slice
  std::vector<FrozenStorage> storage;     // 5. Same: stored in its compute type
  std::vector<uint64_t> stored_bytes;     // 5. the re-stored bytes (0: Same)
  std::vector<bool> parametrized;         // 5. of those, stacked experts bitsandbytes parametrized (--quantize-experts)
  std::vector<ParameterShard> shard;      // 6.
  std::vector<int32_t> shard_group;       // 6. FlatShard: its FSDP unit (-1: none)
  std::vector<bool> grad_sharded;         // 6. ZeRO-2/3: a trainable parameter's grad is kept as a 1/N shard
  std::vector<bool> states_sharded;       // 6. ZeRO-1/2/3: its optimizer states are 1/N
  int shard_ways = 1;                     // 6. N: the data-parallel GPUs a shard is 1/N of

  // The bytes rank 0 holds of tensor `t` stored as `d`.
  uint64_t local_bytes(const Graph& g, int32_t t, DType d) const { return tp.local_bytes(g, t, bytes_as(g.tensors[t], d)); }
  uint64_t local_bytes(const Graph& g, int32_t t) const { return local_bytes(g, t, dtype[t]); }
  // --sequence-parallel: the whole of `t`, all-gathered for a column-parallel GEMM that reads it as `read_as`
  // (autocast's cast; Undefined: its storage type). The one size of that gather, in inference and training.
  uint64_t gathered_bytes(const Graph& g, int32_t t, DType read_as) const {
    return bytes_as(g.tensors[t], read_as != DType::Undefined ? read_as : dtype[t]);
  }
  bool restored(int32_t t) const { return storage[t] != FrozenStorage::Same; }
  // 1/N of `bytes`, rounded up (the busiest rank's share).
  uint64_t shard_of(uint64_t bytes) const {
    const uint64_t n = static_cast<uint64_t>(shard_ways);
    return bytes / n + (bytes % n != 0);
  }
};

}  // namespace memplan
