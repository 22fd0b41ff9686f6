#include "cost_models/deepspeed_zero.h"

#include <algorithm>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

// stage_1_and_2.py (DeepSpeed edaa722):
//  - DeepSpeedZeroOptimizer.__init__: with round_robin_gradients the group is reordered first (_round_robin_reorder:
//    parameter i goes to list i % world_size, the lists concatenated); the group is flattened into one buffer padded
//    to a multiple of `alignment = nccl_start_alignment_factor (2) * world_size` (flatten_dense_tensors_aligned);
//    `partition_size = len(bit16_groups_flat[i]) / world_size`.
//  - get_partition_info: rank 0's partition is [0, partition_size); a parameter whose first element lies in it is
//    in params_in_partition.
//  - copy_grads_in_partition: grads_in_partition holds `sum(param.numel())` over params_in_partition, whole
//    parameters, not only their slices in the partition.
ZeroPartition zero_partition(const std::vector<uint64_t>& elements, int gpus, bool round_robin) {
  precondition(gpus >= 1, "ZeRO over no GPU");
  std::vector<size_t> order;  // indices into `elements`, in the flat group's order
  for (size_t j = 0; j < (round_robin ? static_cast<size_t>(gpus) : 1); ++j)
    for (size_t i = j; i < elements.size(); i += round_robin ? static_cast<size_t>(gpus) : 1) order.push_back(i);
  ZeroPartition p;
  p.in_partition.assign(elements.size(), false);
  p.elements_in_partition.assign(elements.size(), 0);
  p.flat_order.assign(order.begin(), order.end());
  for (uint64_t e : elements) {
    p.params = checked_add(p.params, e, "ZeRO flat group elements");
    p.largest_param = std::max(p.largest_param, e);
  }
  const uint64_t alignment = 2 * static_cast<uint64_t>(gpus);
  p.aligned = checked_mul((p.params + alignment - 1) / alignment, alignment, "ZeRO flat group elements");
  p.partition = p.aligned / static_cast<uint64_t>(gpus);
  uint64_t at = 0;
  for (size_t i : order) {
    if (at < p.partition) {
      p.grads_in_partition += elements[i];
      p.in_partition[i] = true;
      p.elements_in_partition[i] = std::min(at + elements[i], p.partition) - at;
    }
    at += elements[i];
  }
  return p;
}

int64_t graph_hidden_size(const Graph& g) {
  int64_t width = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type != "Gather" || n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0) continue;
    const Tensor& table = g.tensors[n.inputs[0]];
    const DType index = g.tensors[n.inputs[1]].dtype;
    if (table.kind != TensorKind::Weight || !table.trainable || table.shape.size() != 2) continue;
    if (index != DType::Int64 && index != DType::Int32) continue;
    if (width != 0 && table.shape[1] != width) return 0;
    width = table.shape[1];
  }
  if (width <= 0) return 0;
  if (g.recorded_hidden_size == width) return width;  // the config's hidden_size, recorded (Graph)
  for (int32_t t : g.initializers) {
    const Tensor& w = g.tensors[t];
    if (w.kind == TensorKind::Weight && w.shape.size() == 2 && w.shape[0] == width && w.shape[1] == width) return width;
  }
  return 0;
}

void resolve_deepspeed_auto(DeepSpeedZero& z, const Graph& g) {
  if (!z.reduce_bucket_size_auto && !z.prefetch_bucket_size_auto && !z.param_persistence_threshold_auto) return;
  const std::string key = z.reduce_bucket_size_auto ? "reduce_bucket_size"
                          : z.prefetch_bucket_size_auto ? "stage3_prefetch_bucket_size" : "stage3_param_persistence_threshold";
  const int64_t hidden = graph_hidden_size(g);
  if (hidden <= 0)
    throw InputError("--deepspeed: zero_optimization." + key + " is \"auto\" (HF Trainer fills it from hidden_size) but "
                     "model '" + g.model_path + "' shows no hidden size memplan can trust (embedding tables of one width "
                     "and a square weight of that width): give the key a number");
  const uint64_t h = static_cast<uint64_t>(hidden);
  const uint64_t square = checked_mul(h, h, "hidden_size^2");
  if (z.reduce_bucket_size_auto) z.reduce_bucket_size = square;
  if (z.prefetch_bucket_size_auto) z.prefetch_bucket_size = square / 10 * 9 + square % 10 * 9 / 10;  // int(0.9 * h^2)
  if (z.param_persistence_threshold_auto) z.param_persistence_threshold = checked_mul(h, 10, "10 * hidden_size");
  z.reduce_bucket_size_auto = z.prefetch_bucket_size_auto = z.param_persistence_threshold_auto = false;
}

// setup_buckets: buf_0 = torch.empty(reduce_bucket_size, dtype=self.dtype) when contiguous_gradients, and buf_1
// too "to avoid data access conflict when overlap_comm is enabled".
int ipg_buffer_count(const DeepSpeedZero& z) {
  if (!z.contiguous_gradients) return 0;
  return z.overlap_comm ? 2 : 1;
}

std::string deepspeed_note(const DeepSpeedZero& z, const ZeroPartition& p, int gpus, uint64_t grad_element_bytes) {
  const std::string part = std::to_string(p.partition);
  std::string text = "DeepSpeed ZeRO-" + std::to_string(z.stage) + " (--deepspeed, stage_1_and_2.py): " +
                     std::to_string(p.params) + " trainable elements flattened into one group padded to " +
                     std::to_string(p.aligned) + " (a multiple of 2 x " + std::to_string(gpus) + "); rank 0 updates a partition of " +
                     part + " elements, ";
  if (z.offload_optimizer == DeepSpeedOffload::Cpu)
    text += "its float32 copy, grad and optimizer states on the host (offload_optimizer cpu; a " +
            std::to_string(p.largest_param) + "-element grad staging buffer stays on the GPU); ";
  else
    text += "its float32 copy resident, a flattened copy of its grads and their float32 copy made for the step, the "
            "optimizer states on the float32 partition; grads_in_partition holds " +
            std::to_string(p.grads_in_partition) + " elements (the whole parameters overlapping the partition); ";
  const int buffers = ipg_buffer_count(z);
  text += buffers == 0 ? std::string("no contiguous gradient bucket (contiguous_gradients false)")
                       : std::to_string(buffers) + " gradient bucket(s) of reduce_bucket_size " +
                             std::to_string(z.reduce_bucket_size) + " elements x " + std::to_string(grad_element_bytes) +
                             " bytes through backward";
  text += z.stage == 2 ? std::string(", each grad moved into the bucket as its hook fires") + (z.overlap_comm ? " (overlap_comm)." : ".")
                       : std::string(z.overlap_comm ? ", each grad moved into the bucket as its hook fires (overlap_comm)."
                                                    : ", the grads kept whole until backward's end, then reduced through the bucket.");
  text += " allgather_bucket_size (" + std::to_string(z.allgather_bucket_size) +
          ") sizes no buffer: the updated partitions are gathered into the flat group in place (all_gather_into_tensor).";
  return text;
}

// offload_optimizer cpu (DeepSpeedZeroOptimizer.__init__ with cpu_offload, initialize_optimizer_states): the float32
// partition (weights_partition on self.device = 'cpu'), its grad (single_grad_partition, kept under cpu_offload), the
// bit16 staging copy (param_buffer_of_bit16_for_cpu_offload_groups), temp_grad_buffer_for_cpu_offload (the largest
// parameter), and the CPU optimizer's states over the float32 partition.
// With gradient accumulation, async_accumulate_grad_in_cpu_via_gpu keeps each partition parameter's grads in
// accumulated_grads_in_cpu (buffer_to_accumulate_to_in_cpu: torch.zeros(param.numel(), dtype=param.dtype) on the host),
// the whole parameters overlapping the partition.
uint64_t deepspeed_host_bytes(const DeepSpeedZero& z, const ZeroPartition& p, uint64_t grad_element_bytes,
                              int optimizer_states, int grad_accum) {
  if (z.offload_optimizer != DeepSpeedOffload::Cpu) return 0;
  const uint64_t fp32 = checked_mul(p.partition, 4, "DeepSpeed host bytes");
  uint64_t total = checked_mul(fp32, 2 + static_cast<uint64_t>(optimizer_states), "DeepSpeed host bytes");
  total = checked_add(total, checked_mul(p.partition, grad_element_bytes, "DeepSpeed host bytes"), "DeepSpeed host bytes");
  total = checked_add(total, checked_mul(p.largest_param, grad_element_bytes, "DeepSpeed host bytes"), "DeepSpeed host bytes");
  if (grad_accum > 1)
    total = checked_add(total, checked_mul(p.grads_in_partition, grad_element_bytes, "DeepSpeed host bytes"),
                        "DeepSpeed host bytes");
  return total;
}

ZeroGradTransients zero_grad_transients(uint64_t numel, uint64_t slice, bool float32_grads, bool offload) {
  ZeroGradTransients t;
  t.norm_double = checked_mul(slice, 8, "DeepSpeed bytes");
  if (!offload) return t;
  t.overflow_check = zero_overflow_check_bytes(numel, float32_grads);
  t.fp32_cast = float32_grads ? 0 : checked_mul(slice, 4, "DeepSpeed bytes");
  return t;
}

uint64_t zero_overflow_check_bytes(uint64_t elements, bool float32_grads) {
  return checked_mul(elements, float32_grads ? 7 : 11, "DeepSpeed bytes");
}

}  // namespace memplan
