// One training step (PyTorch eager) as a memory program: the state every phase reads and writes, declared
// once. Each phase lives in its own file:
//   training_forward.cc    parameters, inputs, forward ops keeping what autograd saves, checkpoint recompute
//   training_loss.cc       the loss and the grad that seeds backward (training_loss_chunked.cc: torchtune's
//                          chunked cross-entropy; training_loss_chunked_tokens.cc: litgpt's;
//                          training_loss_fused.cc: Liger's fused linear cross-entropy)
//   training_backward.cc   backward ops in reverse order, activation and parameter grads
//   training_optimizer.cc  grads and optimizer states that persist, the optimizer step
//   training.cc            the order of the phases (training_notes.cc: the notes on the configuration)
//   training_checkpoints.cc  the checkpointed segments --checkpoint asks for (boundaries, blocks, auto's search)
// What an op does in the forward (views, in-place, extras, autocast, cuBLAS) is decided in
// eager_semantics.h, and written by the one forward emitter (forward_emitter.h), both shared with inference.
// training_optimizer.cc also runs the update in backward (--optimizer-in-backward). The checkpointed segments the
// step takes are training_segments.h's; its DeepSpeed state, training_deepspeed_state.h's. Rules and sources:
// docs/cost-models.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cost_models/activation_offload.h"
#include "cost_models/cost_model.h"
#include "cost_models/deepspeed_zero.h"
#include "cost_models/eager_semantics.h"
#include "cost_models/forward_emitter.h"
#include "cost_models/graph_facts.h"
#include "cost_models/program_writer.h"
#include "cost_models/training_context.h"
#include "cost_models/training_deepspeed_state.h"
#include "cost_models/training_segments.h"

namespace memplan {

class TrainingStep : private DeepSpeedStepState {
 public:
  TrainingStep(const TrainingContext& context, std::vector<int32_t> segment_end_ops, bool from_first_boundary = false);
  TrainingStep(const TrainingContext& context, SegmentPlan plan);

  TrainingResult build();  // training.cc

 private:
  // What the update walks over: each parameter, or under FSDP each unit's flat-parameter shard.
  struct UpdateTarget {
    std::string name;
    int32_t grad = -1;   // its grad's buffer (-1: none reached it)
    uint64_t bytes = 0;  // the size of one optimizer state
    uint64_t elements = 0;  // the elements this GPU updates (bitsandbytes sizes its states by them)
  };

  // ---- sizes and sharding ---- (--tp: the slice rank 0 holds, TensorParallelPlan)
  const TensorLayout& layout() const { return context_.layout; }
  uint64_t bytes_in(int32_t t, DType d) const { return layout().local_bytes(graph_, t, d); }
  uint64_t bytes_of(int32_t t) const { return bytes_in(t, layout().dtype[t]); }
  bool flat_shards() const { return context_.units.count() > 0; }  // FSDP: the layout has units' flat parameters
  // The loss runs on float32 logits: autocast's loss ops, or the framework's own upcast (--upcast loss).
  bool loss_in_float32() const { return is_amp(options_.precision) || options_.upcast.loss; }
  uint64_t shard(uint64_t bytes) const { return layout().shard_of(bytes); }
  Program& program() { return result_.program; }

  // The buffer tensor `t` is in now: its recomputed copy while a segment is recomputed, else the forward's.
  int32_t lookup(int32_t t) const;
  void set_buffer(int32_t t, int32_t b);
  BufferView buffer_view() const;

  // ---- forward (training_forward.cc) ----
  void add_parameters();
  void add_inputs();
  // A tensor of the batch the training loop holds (`for input_ids, targets in loader`) from before the step to
  // after optimizer.step(): the graph's inputs and the loss's targets.
  int32_t add_batch_tensor(const std::string& name, uint64_t bytes);
  bool is_segment_end(int32_t op) const;
  void find_last_packs();
  bool recomputes_before(int32_t op) const;
  int32_t add_dequantized(int32_t t, DType autocast_type, Step& st);
  // --frozen-dtype gptq-int4 / awq-int4 (training_packed.cc): what a packed layer's forward and backward allocate.
  bool packed_storage(int32_t t) const;
  void packed_forward(int32_t i, int32_t t, Step& st, std::map<int32_t, int32_t>& effective);
  void packed_backward(int32_t i, int32_t t, Step& st);
  void emit_forward(int32_t i, ForwardMode mode);
  void read_op_inputs(int32_t i, Step& st, std::map<int32_t, int32_t>& effective);
  void prepare_input(int32_t i, int32_t t, Step& st, std::map<int32_t, int32_t>& effective);
  void recompute_segment(int32_t segment, int32_t end_op);
  void early_stop_at(int32_t op);
  int32_t packed_layer_input(int32_t op) const;
  void emit_cached(int32_t i);
  // The tensors a Python frame still references through op `i` (TrainingContext::held_through), read by the last
  // step so far.
  void hold_frame_references(int32_t i);
  std::vector<int32_t> rule_saved(int32_t i, const std::map<int32_t, int32_t>& effective) const;  // selective:op: an op whose output the policy saved, in the recomputation
  void end_segment_backward(int32_t first_op);

  // ---- loss (training_loss.cc) ----
  void emit_loss();
  void emit_stage_send();
  void emit_output_to_fp32(int32_t out);  // --outputs-to-fp32
  bool fabric_converts(int32_t out) const;  // --outputs-to-default-dtype on a half output
  int32_t emit_convert_output(int32_t out);  // its float32 copy, returned
  void seed_output_grad(int32_t out);
  // --loss chunked-ce:N (training_loss_chunked.cc) and fused-linear-ce (training_loss_fused.cc).
  void emit_chunked_loss(int32_t out);
  // --loss chunked-ce-tokens:K, litgpt's chunked_cross_entropy on the head's chunks (training_loss_chunked_tokens.cc),
  // and chunked-ce-rows:N, on a whole head (training_loss_chunked_rows.cc); what both share (training_loss_litgpt.cc):
  // the targets and their ignore mask, each chunk's F.cross_entropy with the sum and the mean, and their backward.
  void emit_token_chunked_loss(int32_t out);
  void emit_row_chunked_loss(int32_t out);
  struct LitgptChunk {
    uint64_t rows = 0;         // rows of the chunk the loss reads (0: none, no loss)
    std::vector<int32_t> reads;  // what its cross_entropy step reads (the logits or a copy, the targets or a copy)
    std::vector<int32_t> made;   // copies the step makes before the loss (a reshape's, a targets slice's)
    int32_t target = -1;       // the targets nll_loss keeps
  };
  DType litgpt_loss_dtype(int32_t out, bool fabric) const;  // the type the loss reads the logits in
  int32_t emit_litgpt_targets(const std::string& tag, int32_t logits_buffer, uint64_t positions, uint64_t loss_tokens,
                              int32_t& count);
  void emit_litgpt_chunk_losses(const std::string& tag, int32_t out, const std::vector<LitgptChunk>& chunks,
                                uint64_t vocab, uint64_t loss_tokens, bool fabric, const std::vector<int32_t>& locals);
  std::vector<int32_t> emit_litgpt_chunk_grads(const std::string& tag, int32_t out, bool fabric);
  // Shared by both chunked losses (training_loss_chunked.cc): the chunks' grads of the output, in chunk order (-1:
  // a chunk no loss reads); the head run per chunk (chunk_positions_) when the output is its; that backward.
  void set_chunk_grads(int32_t out, std::vector<int32_t> grads);
  void mark_chunked_head(int32_t out);
  void emit_chunked_head_backward();
  // The head op `i` is (the last op: a bias-free Linear, or a MatMul by a 2-D initializer): its hidden-state input
  // and weight. False for any other op.
  bool head_operands(int32_t i, int32_t& x, int32_t& w) const;
  int32_t find_fused_head() const;
  void emit_fused_loss();
  void emit_fused_backward();

  // ---- backward (training_backward.cc) ----
  void accumulate(int32_t t, int32_t incoming, bool fresh, Step& st);
  void set_grad(int32_t t, int32_t buffer);
  bool grad_shared_by_others(int32_t t, int32_t buffer) const;
  void add_param_grad(int32_t p, DType cast_to, bool via_view, Step& st);
  void emit_backward(int32_t i);

  // ---- optimizer (training_optimizer.cc) ----
  uint64_t fsdp2_ways(int32_t p, uint64_t rows) const;  // training_ep.cc: the GPUs FSDP2 shards p over (--ep)
  void add_persistent_grads();
  void add_ddp_buckets();
  int states_per_param() const;
  uint64_t state_bytes(int32_t p) const;
  std::vector<int32_t> new_states(const std::vector<UpdateTarget>& targets, bool resident);
  std::vector<int32_t> new_bitsandbytes_states(const std::vector<UpdateTarget>& targets, bool resident);
  bool update_copies_grads() const;
  int32_t new_grad_copy(const UpdateTarget& u);
  void add_optimizer_states_if_steady();
  void emit_optimizer();
  void emit_update(const std::vector<UpdateTarget>& targets, const std::string& name, const std::string& init_name);
  void update_params_completed_at(int32_t op);  // --optimizer-in-backward
  const char* optimizer_name() const;

  // ---- FSDP, FULL_SHARD (training_fsdp.cc) ----
  void add_fsdp_shards();
  void add_fsdp_resident_grads();
  int32_t fsdp_gathered(int32_t unit, bool backward, Step& st);
  void fsdp_pre_backward(int32_t op);
  void fsdp_add_param_grad(int32_t p, Step& st);
  void fsdp_post_backward(int32_t op);
  // Shared by FSDP1 and FSDP2.
  void init_fsdp_units();
  void add_fsdp_shard_buffer(int32_t u, const std::string& prefix, uint64_t bytes);
  // bitsandbytes' Params4bit p sharded in a quant_storage of `element` bytes: its packed elements, which FSDP
  // flattens (FSDP1) or chunks on dim 0 (FSDP2); its QuantState, which it never shards, made a resident buffer.
  uint64_t params4bit_packed(int32_t p, uint64_t element);
  bool fsdp_has_backward(int32_t v) const;
  bool outputs_need_grad(int32_t first, int32_t last, const std::function<bool(int32_t)>& in) const;
  int32_t fsdp_next_in_backward(int32_t before_op) const;
  void fsdp_new_grad_shard(int32_t u, Step& rs);
  // FSDP1 (training_fsdp_mp.cc): what an all-gather reads (the shard, its host copy, MixedPrecision's _mp_shard), and
  // the post-backward's reduce-scatter of the unsharded grad `flat` (cast to reduce_dtype, padded, cast back).
  int32_t fsdp_all_gather_input(int32_t u, const std::string& suffix, Step& st);
  void fsdp_reduce_scatter(int32_t u, int32_t flat);
  // FSDP1 accumulating under no_sync(): each trained unit's unsharded grad from the earlier micro-batches.
  bool fsdp_no_sync() const { return options_.fsdp_no_sync && options_.grad_accum > 1 && flat_shards() && !fsdp2(); }
  void add_fsdp_no_sync_grads();
  // --fsdp-cpu-offload (FSDP1 and FSDP2, training_fsdp_offload.cc): the host line, the host-to-device copy step.
  uint64_t fsdp_offload_host_bytes(uint64_t shards, uint64_t grads, uint64_t state) const;
  int32_t fsdp_offload_h2d(const std::string& step, const std::string& copy, uint64_t bytes, Phase phase,
                           const std::string& transient = {}, uint64_t transient_bytes = 0);
  void fsdp_offload_grad(int32_t u, Step& rs);  // FSDP1: the grad shard on the GPU, copied to _cpu_grad
  void fsdp_post_backward_final();              // FSDP1: _finalize_params frees those GPU grad shards

  // ---- FSDP2, fully_shard (training_fsdp2.cc) ----
  bool fsdp2() const { return options_.shard == Sharding::Fsdp2; }
  // --fsdp-cpu-offload: FSDP2's CPUOffloadPolicy or FSDP1's CPUOffload(offload_params=True).
  bool fsdp_cpu_offload() const { return flat_shards() && options_.fsdp_cpu_offload; }
  // Whether unit `u` holds any parameter shard (on the GPU, unit_shard_, or on the host under --fsdp-cpu-offload).
  bool fsdp_unit_sharded(int32_t u) const { return unit_has_shards_[u]; }
  void add_fsdp2_shards();
  int32_t fsdp2_all_gather(int32_t u, bool backward);
  int32_t fsdp2_copy_out(int32_t u, bool backward, Step& st);
  void fsdp2_root_post_forward();
  void fsdp2_pre_backward(int32_t op);
  void fsdp2_post_backward(int32_t op);
  void fsdp2_reduce(int32_t u);

  // ---- --offload-activations (training_offload.cc; the pass: activation_offload.h) ----
  void record_packs(int32_t i, ForwardMode mode, const std::vector<int32_t>& saved, int32_t step_before);
  void record_unpack_node(int32_t node, int32_t first_step);
  void apply_offload();

  // ---- DeepSpeed ZeRO-1/2, --deepspeed (training_deepspeed.cc; the rules: deepspeed_zero.h; the state, ZeRO-3's
  // too: training_deepspeed_state.h) ----
  bool deepspeed() const { return options_.deepspeed.enabled; }
  uint64_t ds_elements(int32_t p) const;
  void ds_add_resident();
  void ds_begin_backward();
  void ds_hook(int32_t p, Phase phase);
  void ds_reduce(Step& st);
  void ds_offload_copy(int32_t p, int32_t grad);
  void ds_after_backward(int32_t i);
  void ds_end_backward();
  void ds_optimizer();
  UpdateTarget ds_target(int32_t grad) const;

  // ---- DeepSpeed ZeRO-3, --deepspeed at stage 3 (training_deepspeed3.cc; its grads and step:
  // training_deepspeed3_optimizer.cc; the rules: deepspeed_zero3.h) ----
  bool ds3() const { return options_.deepspeed.enabled && options_.deepspeed.stage == 3; }
  bool ds3_param(int32_t t) const { return ds3() && t >= 0 && static_cast<size_t>(t) < ds3_index_.size() && ds3_index_[t] >= 0; }
  void ds3_find_modules();
  void ds3_add_resident();
  void ds3_fetch(int32_t m, Phase phase);
  void ds3_gather(const std::string& module, const std::vector<int32_t>& missing, Phase phase);
  void ds3_release(const std::vector<int32_t>& params, const std::string& why, Phase phase);
  int32_t ds3_buffer(int32_t t) const;  // the whole parameter an op reads: gathered, or persistent
  void ds3_prepare_input(int32_t i, int32_t t, Step& st, std::map<int32_t, int32_t>& effective);
  void ds3_after_forward(int32_t i);
  void ds3_pre_backward(int32_t i);
  // --checkpoint layers (training_deepspeed3_recompute.cc): the backward's trace with each checkpointed segment's
  // recomputation, and the release after a recomputed module.
  void ds3_backward_trace(const std::vector<int32_t>& order, std::vector<std::vector<int32_t>>& trace);
  void ds3_after_recompute(int32_t i);
  void ds3_post_backward(int32_t i);
  void ds3_reduce(Step& st);
  void ds3_end_backward();
  void ds3_optimizer();
  std::vector<UpdateTarget> ds3_targets() const;
  // offload_optimizer cpu at stage 3 (training_deepspeed3_offload.cc; the rules: deepspeed_zero3.h).
  bool ds3_offload() const { return ds3() && ds_config_.offload_optimizer != DeepSpeedOffload::None; }
  void ds3_offload_copy(int32_t p, int32_t flat, int32_t grad);
  // offload_optimizer / offload_param nvme (training_deepspeed3_nvme.cc; the rules: deepspeed_zero3_nvme.h).
  bool ds3_swap_optimizer() const { return ds3() && ds_config_.offload_optimizer == DeepSpeedOffload::Nvme; }
  void ds3_nvme_resident(const std::vector<uint64_t>& element, const std::vector<uint64_t>& trainable_partitions,
                         uint64_t grad_partition);
  void ds3_nvme_swap_in(const std::vector<int32_t>& missing);
  void ds3_nvme_keep_grad(int32_t p, int32_t buffer);
  void ds3_nvme_swap_out_grads();
  void ds3_nvme_step(size_t sub_group);
  // offload_param cpu at stage 3: the partitions on the host, staged to the GPU per gather (the same file).
  bool ds3_offload_param() const { return ds3() && ds_config_.offload_param != DeepSpeedOffload::None; }
  void ds3_stage_partitions(const std::vector<int32_t>& params, Step& st);
  void ds3_gather_inputs(int32_t i, Step& st, std::map<int32_t, int32_t>& effective);
  // Float32 parameters on the GPU: _create_fp32_partitions reuses the partitions as the float32 sub-groups (not when
  // they are on the host: `fp16_partitioned_groups_flat[i].device == self.device` fails, a GPU copy is made).
  bool ds3_fp32_shared() const {
    return ds3() && !ds3_offload() && !ds3_offload_param() && !context_.params.empty() &&
           layout().dtype[context_.params.front()] == DType::Float32;
  }
  // Prefetch, stage3_prefetch_bucket_size > 0 (training_deepspeed3_prefetch.cc; the rules: deepspeed_zero3_schedule.h).
  bool ds3_prefetch() const { return ds3() && ds_config_.prefetch_bucket_size > 0; }
  void ds3_scope_calls();
  void ds3_run_calls(Ds3Hook hook, int32_t i);
  void ds3_emit_call(size_t c);
  std::string ds3_prefetch_note() const;

  std::vector<UpdateTarget> update_targets() const;
  UpdateTarget param_target(int32_t p) const;

  void fill_result();

  // ---- the state ----
  const TrainingContext& context_;
  const Graph& graph_;
  const TrainingOptions& options_;
  std::vector<int32_t> segment_end_ops_;             // op indices ending checkpointed segments, ascending
  std::vector<int32_t> segment_of_op_;               // op -> checkpointed segment (-1: none)
  bool reentrant_ = true;                            // SegmentPlan::reentrant
  bool early_stop_ = false;                          // SegmentPlan::early_stop
  // Per op of a checkpointed segment, from its first (no-save) pass: whether autograd packs a tensor for its backward
  // (`saves_`), and whether one of them is an output or extra the op computes (`saves_result_`), which a pack of its
  // inputs alone precedes (the generated autograd code saves inputs before calling the kernel).
  std::vector<bool> saves_, saves_result_;
  std::vector<int32_t> last_pack_;                   // per segment: find_last_packs
  std::vector<bool> sac_saved_;                      // op -> selective:op saves its outputs (selective_checkpoint.h)
  std::vector<std::vector<int32_t>> sac_cache_;      // op -> the buffers of its outputs the policy cached in forward
  std::vector<std::vector<int32_t>> sac_extras_;     // op -> the extra buffers it cached with them (logsumexp)
  TrainingResult result_;
  ProgramWriter writer_;
  ForwardEmitter forward_;  // forward ops, recomputation included (forward_emitter.h); the two cuBLAS workspaces
  // Forward.
  std::vector<int32_t> forward_buffer_;              // tensor -> its buffer in the forward
  std::vector<int32_t> recompute_buffer_;            // tensor -> its buffer in the segment being recomputed
  bool recomputing_ = false;
  std::vector<int32_t> autocast_weight_copy_;        // parameter -> its autocast copy (forward)
  std::vector<int32_t> recompute_autocast_weight_copy_;  // parameter -> its autocast copy (recomputation)
  std::vector<int32_t> forward_autocast_copies_;     // every autocast weight copy the forward made
  std::vector<std::set<int32_t>> autocast_inputs_of_op_;  // op -> inputs autocast copied
  std::vector<std::vector<int32_t>> saved_by_op_;    // op -> buffers its backward reads
  std::vector<int32_t> held_by_checkpoint_;          // buffers CheckpointFunction.backward holds
  // Loss.
  int32_t log_softmax_buffer_ = -1, total_weight_buffer_ = -1, loss_buffer_ = -1;
  int32_t loss_target_buffer_ = -1, mse_input_buffer_ = -1;
  // chunked-ce: per chunk, its saved log_softmax, target and total_weight; the count the sum is divided by.
  std::vector<int32_t> chunk_log_softmax_, chunk_targets_, chunk_total_weight_;
  int32_t total_elements_buffer_ = -1;
  // chunked-ce: the head op run once per chunk in backward (-1: as the graph's one op), and the chunks' grads of
  // its output, in chunk order.
  int32_t chunked_head_ = -1;
  std::vector<int32_t> chunk_grads_;
  std::vector<uint64_t> chunk_positions_;  // the head's chunks: positions of the sequence axis in each
  // fused-linear-ce: the head op the fused loss replaces (-1: none), and the grads its forward keeps.
  int32_t fused_head_ = -1, fused_grad_input_ = -1, fused_grad_weight_ = -1;
  // --offload-activations: what the pack hook saw, in order, and each unpacking backward node's steps (an op's
  // index, or ops.size() + a checkpointed segment for its checkpoint function).
  std::vector<PackedTensor> packs_;
  std::map<int32_t, NodeSteps> unpack_nodes_;
  int32_t segment_first_step_ = -1;                  // the recomputation being emitted began at this step
  // Backward.
  std::vector<int32_t> grad_buffer_;                 // tensor -> its grad's buffer
  std::map<int32_t, std::vector<int32_t>> grad_buffer_holders_;  // grad buffer -> tensors it is the grad of
  // tensor -> further buffers that with grad_buffer_ make its grad (chunked-ce: the chunks' grads of the logits),
  // read by the same backward
  std::map<int32_t, std::vector<int32_t>> grad_parts_;
  std::vector<bool> grad_consumed_;                  // the backward that reads this tensor's grad has run
  std::vector<int32_t> param_grad_buffer_;           // parameter -> .grad buffer
  std::vector<bool> param_grad_via_view_;            // parameter -> its buffered grad reached it through a view
  // FSDP, per unit: the flat parameter's unpadded and padded bytes, the bytes of one optimizer state,
  // whether any of its parameters trains, its resident shard, the all-gathered flat parameter of the
  // forward and of the backward, the reduce-scattered grad shard; per parameter, the grad of its view
  // waiting for the unit's post-backward.
  std::vector<uint64_t> unit_bytes_, unit_padded_bytes_, unit_state_bytes_;
  std::vector<bool> unit_trains_, unit_has_shards_;
  std::vector<int32_t> unit_shard_, unit_gathered_forward_, unit_gathered_backward_, unit_grad_shard_;
  std::vector<int32_t> unit_first_param_op_;
  std::vector<int32_t> fsdp_pending_grad_;
  std::vector<uint64_t> unit_grad_shard_bytes_;     // the reduce-scattered grad shard (FSDP2: trainable parameters' only)
  // FSDP1, per unit: the gathered flat parameter's element bytes (param_dtype under MixedPrecision) and the
  // MixedPrecision _mp_shard's bytes (0: no MixedPrecision).
  std::vector<uint64_t> unit_element_, unit_mp_shard_bytes_;
  std::vector<int32_t> unit_no_sync_grad_;  // FSDP1 under no_sync(): the unsharded grad kept since the last sync (-1: none)
  std::vector<int32_t> fsdp_offload_grad_shards_;   // FSDP1 offload: GPU grad shards held to the end of backward
  // FSDP2: per unit, its all-gather output waiting for the copy-out (-1: none); the forward's last all-gather output,
  // held until the next unit's all-gather; the last reduce-scatter input, held until the next post-backward.
  std::vector<int32_t> fsdp2_all_gather_output_;
  int32_t fsdp2_forward_all_gather_ = -1, fsdp2_reduce_scatter_input_ = -1;
  // FSDP2, per unit: the GPU copy of its shards made for the all-gather's copy-in (--fsdp2-mp: cast to param_dtype;
  // --fsdp-cpu-offload: copied from the host), the stored-dtype copies' transient above it while an offloaded group
  // is cast (--fsdp-cpu-offload with --fsdp2-mp), and the reduce-scatter output when it is not the grad shard
  // (another type than the sharded grads, or copied to the host) (0: none).
  std::vector<uint64_t> fsdp2_gather_input_bytes_, fsdp2_h2d_stored_bytes_, fsdp2_reduce_output_bytes_;
  // Optimizer.
  bool bnb_maps_made_ = false;                       // bitsandbytes' quantization maps exist
  std::vector<std::vector<int32_t>> params_completed_at_;  // --optimizer-in-backward: op -> parameters whose grad
                                                     // is complete after its backward (the earliest op reading them)
};

}  // namespace memplan
