// DeepSpeed ZeRO-1/2 (--deepspeed CONFIG.json): the buffers DeepSpeedZeroOptimizer allocates on the GPU, sized by
// the config's zero_optimization keys (report/deepspeed_config.cc reads the file into DeepSpeedZero; this file never
// reads JSON). Source: DeepSpeed at commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641 (0.19.6 development),
// deepspeed/runtime/zero/stage_1_and_2.py; each rule below names its function. The step's use of them is
// cost_models/training_deepspeed.cc. Rules and their sources: docs/cost-models.md, "DeepSpeed ZeRO".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx_import/graph.h"

namespace memplan {

// Where offload_optimizer puts the fp32 partition, its grad and the optimizer states (OffloadDeviceEnum). Nvme is
// stage 3's (ZeRO-Infinity: cost_models/deepspeed_zero3_nvme.h); report/deepspeed_config.cc turns it into Cpu at stage 2,
// where stage_1_and_2.py takes any device but "none" as cpu_offload.
enum class DeepSpeedOffload { None, Cpu, Nvme };

// The NVMe keys of one offload section (deepspeed/runtime/zero/offload_config.py, defaults as there): read when its
// device is "nvme".
struct DeepSpeedSwap {
  bool nvme_path = false;           // given (not null)
  uint64_t buffer_count = 0;        // offload_param 5, offload_optimizer 4
  uint64_t buffer_size = 100000000; // offload_param only: elements per swap buffer, pp_int(1e8)
  uint64_t max_in_cpu = 1000000000; // offload_param only: elements kept in host memory, pp_int(1e9)
  bool pipeline = false;            // offload_optimizer pipeline_read or pipeline_write (PipelinedOptimizerSwapper)
  bool fast_init = false;           // offload_optimizer only
};

// The top-level "aio" section (deepspeed/runtime/swap_tensor/aio_config.py get_aio_config, constants.py defaults).
struct DeepSpeedAio {
  uint64_t block_size = 1048576;
  uint64_t intra_op_parallelism = 1;
  bool use_gds = false;
};

// The zero_optimization keys that size GPU memory, "auto" already resolved (report/deepspeed_config.cc), with
// DeepSpeedZeroConfig's defaults (deepspeed/runtime/zero/config.py).
struct DeepSpeedZero {
  bool enabled = false;
  int stage = 0;                                 // 1, 2 or 3 (stage 3: cost_models/deepspeed_zero3.h)
  uint64_t reduce_bucket_size = 500000000;       // elements (pp_int(5e8))
  bool reduce_bucket_size_auto = false;          // "auto": hidden_size^2 (resolve_deepspeed_auto)
  uint64_t allgather_bucket_size = 500000000;    // elements; no GPU buffer with all_gather_into_tensor
  bool overlap_comm = false;                     // None -> stage == 3 (overlap_comm_valid): false for 1 and 2
  bool contiguous_gradients = true;
  bool round_robin_gradients = false;
  DeepSpeedOffload offload_optimizer = DeepSpeedOffload::None;
  // Stages 1 and 2: whether step() first checks the partition's grads for overflow (stage_1_and_2.py
  // check_grad_overflow, set by engine.py _configure_zero_optimizer: fp16 always; bf16 its section's
  // check_grad_overflow, true by default since DeepSpeed PR #8035 (v0.19.3); float32 never). Stage 3 checks when the
  // parameters are float16 (stage3.py _overflow_check_and_loss_scale_update), whatever this says.
  bool check_grad_overflow = false;
  // Stage 3 only (DeepSpeedZeroConfig's fields and defaults; read at stages 1 and 2 but unused there).
  uint64_t prefetch_bucket_size = 50000000;       // stage3_prefetch_bucket_size, pp_int(5e7)
  bool prefetch_bucket_size_auto = false;         // "auto": int(0.9 * hidden_size^2)
  uint64_t max_live_parameters = 1000000000;      // stage3_max_live_parameters, pp_int(1e9)
  uint64_t max_reuse_distance = 1000000000;       // stage3_max_reuse_distance, pp_int(1e9)
  uint64_t param_persistence_threshold = 100000;  // stage3_param_persistence_threshold, pp_int(1e5)
  bool param_persistence_threshold_auto = false;  // "auto": 10 * hidden_size
  uint64_t model_persistence_threshold = 9223372036854775807ULL;  // stage3_model_persistence_threshold, sys.maxsize
  uint64_t sub_group_size = 1000000000;           // pp_int(1e9)
  bool reduce_scatter = true;
  // offload_param (DeepSpeedZeroOffloadParamConfig, "valid only with stage 3"): cpu keeps the parameters' partitions
  // (ds_tensor) on the host (cost_models/training_deepspeed3_offload.cc).
  DeepSpeedOffload offload_param = DeepSpeedOffload::None;
  DeepSpeedSwap param_swap{false, 5};          // offload_param's nvme keys
  DeepSpeedSwap optimizer_swap{false, 4};      // offload_optimizer's nvme keys
  DeepSpeedAio aio;
};

// The model's hidden size as the graph shows it: the width every embedding table (a 2-D trainable initializer a Gather
// reads with integer indices) shares, confirmed by a square trainable weight of that width (an attention projection)
// or by the hidden size the file records (memplan's config graphs: Gemma's projections are not square).
// 0 when not found that way (no embedding, tables of different widths, a factorised embedding such as ALBERT's).
int64_t graph_hidden_size(const Graph& g);

// "auto" as HF Trainer's integration fills it (transformers integrations/deepspeed.py,
// HfTrainerDeepSpeedConfig.trainer_config_finalize: reduce_bucket_size = hidden_size * hidden_size; at stage 3
// stage3_prefetch_bucket_size = int(0.9 * hidden_size * hidden_size) and stage3_param_persistence_threshold =
// 10 * hidden_size). Throws InputError naming the key when the graph gives no hidden size.
void resolve_deepspeed_auto(DeepSpeedZero& z, const Graph& g);

// One rank's share of the flat group (rank 0's, the rank memplan reports), in elements.
struct ZeroPartition {
  uint64_t params = 0;           // trainable elements flattened (one parameter group)
  uint64_t aligned = 0;          // the flat buffer: params rounded up to 2 * gpus (flatten_dense_tensors_aligned)
  uint64_t partition = 0;        // aligned / gpus: the fp32 partition, its grad, each Adam state
  uint64_t grads_in_partition = 0;  // whole elements of every parameter overlapping rank 0's partition
  uint64_t largest_param = 0;    // the largest parameter (offload's temp_grad_buffer_for_gpu_offload)
  std::vector<bool> in_partition;  // per parameter, in the given order: in rank 0's params_in_partition
  // per parameter: its elements inside rank 0's partition (grad_position's num_elements), 0 when not in it
  std::vector<uint64_t> elements_in_partition;
  std::vector<size_t> flat_order;  // the parameters' indices in the flat group's order (round_robin_gradients)
};

// `elements`: the trainable parameters' element counts in model.parameters() order.
ZeroPartition zero_partition(const std::vector<uint64_t>& elements, int gpus, bool round_robin);

// The contiguous gradient buckets setup_buckets allocates: overlap_comm ? 2 : 1 (0 without contiguous_gradients).
int ipg_buffer_count(const DeepSpeedZero& z);

// The report's account of the buffers (a note), and what offload_optimizer keeps on the host, in bytes
// (`grad_accum` > 1: the micro-batches' grads accumulated on the host as well).
std::string deepspeed_note(const DeepSpeedZero& z, const ZeroPartition& p, int gpus, uint64_t grad_element_bytes);
uint64_t deepspeed_host_bytes(const DeepSpeedZero& z, const ZeroPartition& p, uint64_t grad_element_bytes,
                              int optimizer_states, int grad_accum);

// What the step's gradient bookkeeping allocates on the GPU for a moment, per parameter of rank 0's partition
// (stage_1_and_2.py at edaa722), each freed before the next parameter's:
//  - the norm: get_grad_norm_direct (DeepSpeedZeroOptimizer.step -> scaled_global_norm, without offload) and
//    set_norm_for_param_grad_in_gpu (copy_grads_in_partition under offload_optimizer cpu) take
//    vector_norm(g.data.double()) of the parameter's slice in the partition: slice x 8 bytes;
//  - under offload_optimizer cpu, at the accumulation boundary, copy_grads_in_partition also runs
//    update_offload_overflow_tracker_for_param_grad on the whole grad (zero_overflow_check_bytes of numel); then
//    async_inplace_copy_grad_to_fp32_buffer_from_gpu casts the slice to float32 before the copy to the host when the
//    grads are not float32 (slice x 4 bytes).
struct ZeroGradTransients {
  uint64_t norm_double = 0;    // bytes
  uint64_t overflow_check = 0;
  uint64_t fp32_cast = 0;
};
ZeroGradTransients zero_grad_transients(uint64_t numel, uint64_t slice, bool float32_grads, bool offload);

// What _has_inf_or_nan(x) holds at once over `elements` grad elements (stage_1_and_2.py): x.float() (a copy unless x
// is float32), isnan and isinf (bool), their logical_or (bool) and its .float() before max(): elements x (4 unless
// float32 + 1 + 1 + 1 + 4) bytes. Under offload it runs on each whole grad (above); without, step() runs it on each
// slice of the partition (has_overflow_partitioned_grads_serial, when check_grad_overflow), one at a time.
uint64_t zero_overflow_check_bytes(uint64_t elements, bool float32_grads);

}  // namespace memplan
